//! A chain's Merkle tree on disk: `<chain file>.tree` beside the live file, the stored hashes
//! of [`super::merkle`] as 32-byte records, appended as lines are and never rewritten. Leaf
//! `i` is the chain's line `seq = i + 1`, across rotated files; retention may delete old
//! chain files, never this one, so proofs and checkpoints keep covering their lines.
//!
//! The file follows the lines, not the other way round: a line is synced before its hashes
//! are appended, and the file is synced only before a checkpoint is signed. So at start-up it
//! may lag (a crash between the two) or hold a torn record: [`TreeFile::follow`] cuts what no
//! whole leaf holds and appends the leaves of the lines it lacks, read back from the chain's
//! files; a last leaf that is not the last line's hash means the file is not this chain's, and
//! it is built again from the lines.
//!
//! Reads are `pread`s of single records: a proof at a million lines reads about 40 of them.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::merkle::{self, Hash, HashReader};
use crate::untrusted::door::{self, Line, Lines};

/// The bytes of one stored hash.
const RECORD: u64 = 32;

/// The tree file of a chain.
#[derive(Debug)]
pub struct TreeFile {
    file: File,
    path: PathBuf,
    /// Leaves stored.
    size: u64,
}

impl HashReader for TreeFile {
    fn read_hash(&self, index: u64) -> std::io::Result<Hash> {
        let mut hash = [0u8; 32];
        self.file.read_exact_at(&mut hash, index * RECORD)?;
        Ok(hash)
    }
}

/// The tree file of the chain whose live file is `live`: `<live>.tree`.
pub fn path_of(live: &Path) -> PathBuf {
    super::beside(live, ".tree")
}

/// The most leaves whose stored hashes fit in `records` records.
fn leaves_in(records: u64) -> u64 {
    // stored_hash_count grows with the leaves: the largest n with count(n) <= records.
    let (mut low, mut high) = (0u64, records);
    while low < high {
        let middle = low + (high - low).div_ceil(2);
        if merkle::stored_hash_count(middle) <= records {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    low
}

impl TreeFile {
    /// Opens (creating) the tree file at `path`, cutting a torn record off its end.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = door::open_append(path)?;
        let records = file.metadata()?.len() / RECORD;
        let size = leaves_in(records);
        let whole = merkle::stored_hash_count(size) * RECORD;
        if file.metadata()?.len() != whole {
            file.set_len(whole)?;
        }
        Ok(Self {
            file,
            path: path.to_path_buf(),
            size,
        })
    }

    /// Opens the tree file at `path` to read it only (a reviewer's tools, while a server may
    /// be appending to it): its size is the leaves it holds whole.
    pub fn open_existing(path: &Path) -> std::io::Result<Self> {
        let file = door::open_read(path)?;
        let size = leaves_in(file.metadata()?.len() / RECORD);
        Ok(Self {
            file,
            path: path.to_path_buf(),
            size,
        })
    }

    /// Leaves stored.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Adds the next leaf; on a failed write, cuts back what of it was written.
    pub fn append(&mut self, leaf: Hash) -> std::io::Result<()> {
        let hashes = merkle::hashes_to_store(self.size, leaf, &*self)?;
        let bytes: Vec<u8> = hashes.concat();
        let before = merkle::stored_hash_count(self.size) * RECORD;
        if let Err(error) = self.file.write_all(&bytes) {
            let _ = self.file.set_len(before);
            return Err(error);
        }
        self.size += 1;
        Ok(())
    }

    /// Makes what is stored outlive a crash of the machine.
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// Keeps only the first `leaves` leaves.
    fn truncate(&mut self, leaves: u64) -> std::io::Result<()> {
        self.file
            .set_len(merkle::stored_hash_count(leaves) * RECORD)?;
        self.size = leaves;
        Ok(())
    }

    /// The hash of leaf `index`.
    pub fn leaf(&self, index: u64) -> std::io::Result<Hash> {
        self.read_hash(merkle::stored_hash_index(0, index))
    }

    /// The root of the first `size` leaves.
    pub fn root(&self, size: u64) -> std::io::Result<Hash> {
        self.within(size)?;
        merkle::root(size, self)
    }

    /// The inclusion proof of leaf `index` in the tree of `size` leaves.
    pub fn inclusion_proof(&self, index: u64, size: u64) -> std::io::Result<Vec<Hash>> {
        self.within(size)?;
        merkle::inclusion_proof(index, size, self)
    }

    /// The consistency proof from `old` to `new` leaves.
    pub fn consistency_proof(&self, old: u64, new: u64) -> std::io::Result<Vec<Hash>> {
        self.within(new)?;
        merkle::consistency_proof(old, new, self)
    }

    fn within(&self, size: u64) -> std::io::Result<()> {
        if size > self.size {
            return Err(std::io::Error::other(format!(
                "the tree holds {} leaves, not {size}",
                self.size
            )));
        }
        Ok(())
    }

    /// Brings the tree to the chain's lines: `lines` is how many the chain holds and `last`
    /// the last one's bytes (without its newline); `files` are the chain's files in order.
    /// Cuts leaves past the lines, appends those it lacks, and builds it again when its last
    /// leaf is not the last line's. Returns how many leaves it appended.
    pub fn follow(
        &mut self,
        lines: u64,
        last: Option<&[u8]>,
        files: &[PathBuf],
    ) -> std::io::Result<u64> {
        if self.size > lines {
            self.truncate(lines)?;
        }
        if let Some(last) = last
            && self.size == lines
            && lines > 0
            && self.leaf(lines - 1)? != merkle::leaf_hash(last)
        {
            tracing::error!(tree = %self.path.display(), "audit trail: the tree file does not end with the chain's last line; building it again from the lines");
            self.truncate(0)?;
        }
        let from = self.size;
        if from < lines {
            for_lines_from(files, from + 1, |seq, line| {
                if seq != self.size + 1 {
                    return Err(std::io::Error::other(format!("line {} is missing", self.size + 1)));
                }
                self.append(merkle::leaf_hash(line))
            })
            .map_err(|error| {
                std::io::Error::other(format!(
                    "the chain's lines {}..{lines} cannot be read back into its tree ({error}): were they deleted by retention before the tree existed?",
                    self.size + 1
                ))
            })?;
        }
        if self.size != lines {
            return Err(std::io::Error::other(format!(
                "the chain's lines {}..{lines} cannot be read back into its tree: were they deleted by retention before the tree existed?",
                self.size + 1
            )));
        }
        self.sync()?;
        Ok(lines - from)
    }
}

/// Hands `visit` the `seq` and bytes of each line of the chain `files` (in order) from line
/// `first` (its `seq`) on, without their newlines. A file whose first line comes after `first`
/// starts the reading only if no earlier file holds `first`.
fn for_lines_from(
    files: &[PathBuf],
    first: u64,
    mut visit: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
) -> std::io::Result<()> {
    // The last file whose first line is at or before `first`.
    let mut start = 0;
    for (index, file) in files.iter().enumerate() {
        match first_seq(file)? {
            Some(seq) if seq <= first => start = index,
            _ => {}
        }
    }
    for file in &files[start..] {
        let mut lines = Lines::open(file)?;
        while let Some(line) = lines.next_line() {
            let Line::Whole(line) = line? else {
                break;
            };
            match seq_of(line) {
                Some(seq) if seq >= first => visit(seq, line)?,
                _ => {}
            }
        }
    }
    Ok(())
}

/// The `seq` of the first line of `file`.
fn first_seq(file: &Path) -> std::io::Result<Option<u64>> {
    let mut lines = Lines::open(file)?;
    Ok(match lines.next_line().transpose()? {
        Some(Line::Whole(line)) => seq_of(line),
        _ => None,
    })
}

/// The `seq` of a line, when it parses as a record.
fn seq_of(line: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    serde_json::from_slice::<Seq>(line).ok().map(|s| s.seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64) -> String {
        format!("{{\"seq\":{seq},\"x\":\"line {seq}\"}}")
    }

    fn write_chain(dir: &Path, rotate_after: &[u64], last: u64) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let mut start = 1;
        for &end in rotate_after.iter().chain(std::iter::once(&last)) {
            let path = if end == last {
                dir.join("c.jsonl")
            } else {
                dir.join(format!("c.jsonl.{end:012}"))
            };
            let text: String = (start..=end).map(|seq| line(seq) + "\n").collect();
            std::fs::write(&path, text).unwrap();
            files.push(path);
            start = end + 1;
        }
        files
    }

    #[test]
    fn the_tree_follows_the_lines_across_rotation_crashes_and_a_foreign_file() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_chain(dir.path(), &[3, 7], 10);
        let path = path_of(&files[2]);
        let mut tree = TreeFile::open(&path).unwrap();
        assert_eq!(
            tree.follow(10, Some(line(10).as_bytes()), &files).unwrap(),
            10
        );
        let mut frontier = merkle::Frontier::default();
        for seq in 1..=10 {
            frontier.push(merkle::leaf_hash(line(seq).as_bytes()));
        }
        assert_eq!(tree.root(10).unwrap(), frontier.root());

        // A torn record at the end (a crash mid-append) is cut; the lost leaf comes back.
        drop(tree);
        let full = std::fs::metadata(&path).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(full - 40).unwrap();
        let mut tree = TreeFile::open(&path).unwrap();
        assert_eq!(tree.size(), 9);
        assert_eq!(
            tree.follow(10, Some(line(10).as_bytes()), &files).unwrap(),
            1
        );
        assert_eq!(tree.root(10).unwrap(), frontier.root());

        // More leaves than lines (the lines were cut): the extra ones go.
        assert_eq!(tree.follow(8, Some(line(8).as_bytes()), &files).unwrap(), 0);
        assert_eq!(tree.size(), 8);
        tree.follow(10, Some(line(10).as_bytes()), &files).unwrap();

        // A tree whose last leaf is another line's is built again.
        let changed = files.clone();
        let text: String = (8..=10)
            .map(|s| line(s).replace("line", "LINE") + "\n")
            .collect();
        std::fs::write(&changed[2], text).unwrap();
        let last = line(10).replace("line", "LINE");
        assert_eq!(
            tree.follow(10, Some(last.as_bytes()), &changed).unwrap(),
            10
        );
        assert_ne!(tree.root(10).unwrap(), frontier.root());
        assert_eq!(tree.leaf(9).unwrap(), merkle::leaf_hash(last.as_bytes()));
    }

    #[test]
    fn lines_deleted_before_the_tree_existed_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_chain(dir.path(), &[3], 6);
        let mut tree = TreeFile::open(&path_of(&files[1])).unwrap();
        let error = tree
            .follow(6, Some(line(6).as_bytes()), &files[1..])
            .unwrap_err();
        assert!(
            error.to_string().contains("lines 1..6")
                && error.to_string().contains("line 1 is missing"),
            "{error}"
        );
    }

    #[test]
    fn leaves_are_counted_back_from_the_records() {
        for leaves in 0..200 {
            let records = merkle::stored_hash_count(leaves);
            assert_eq!(leaves_in(records), leaves);
            if leaves > 0 {
                assert_eq!(leaves_in(records - 1), leaves - 1);
            }
        }
    }
}
