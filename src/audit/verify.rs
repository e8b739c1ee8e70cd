//! Reading a chain back and checking it: every line whole, parsed, and pointing at the line
//! before ([`verify`]), the crash traces it holds ([`CrashTrace`]), the first broken line
//! ([`Broken`]), and the tree roots at given sizes for the signed checkpoints
//! ([`verify_with_roots`]), and a chain read as it grows, from where the last read stopped
//! ([`Follower`]). The one verifier for `audit verify`, the reports, the start-up check and
//! the sessions' last states. It does not write or repair anything, and does not check signatures
//! ([`super::proof`] does).

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::{GENESIS, Record, hash_line, merkle, recovery, tree};
use crate::untrusted::door::{self, Line, Lines, MAX_LINE_BYTES};

/// What [`verify`] found.
#[derive(Debug, PartialEq)]
pub struct Verified {
    /// Lines checked.
    pub lines: u64,
    /// `prev` of the first line when it is not the genesis: the files continue a chain whose
    /// earlier part was not given.
    pub continues_from: Option<String>,
    /// The hash of the last line (the value the next line will carry).
    pub head: String,
    /// The Merkle roots asked of [`verify_with_roots`], by size.
    pub roots: std::collections::BTreeMap<u64, merkle::Hash>,
    /// The `seq` of the first line read (1 unless retention deleted the first files).
    pub first_seq: u64,
    /// The tree of every line read (the lines before the first stood in for by the tree file),
    /// when [`verify_with_roots`] computed it: its size, right edge and root.
    pub frontier: Option<merkle::Frontier>,
    /// What crashes left, in order: lines that record an unfinished line cut at start-up,
    /// and unfinished lines not cut yet. Not tampering: none of them was ever acknowledged.
    pub crash_traces: Vec<CrashTrace>,
}

/// A crash's trace in a chain that verifies.
#[derive(Debug, Clone, PartialEq)]
pub enum CrashTrace {
    /// A `recovered` line: start-up cut an unfinished line and said so.
    Recovered {
        /// The file holding the `recovered` line.
        file: String,
        /// Its 1-based line number.
        line: u64,
        /// What was cut.
        cut: recovery::Recovered,
    },
    /// A file that ends in an unfinished line (no newline): a crash or a failed write while
    /// it was written, and no server has started on the chain since to cut it. It is not
    /// part of the chain.
    Unfinished {
        /// The file.
        file: String,
        /// The unfinished line's 1-based number.
        line: u64,
        /// Its length.
        bytes: u64,
    },
}

impl std::fmt::Display for CrashTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CrashTrace::Recovered { file, line, cut } => write!(
                f,
                "{file}, line {line}: recovered after a crash or a failed write: {cut}; it was never acknowledged"
            ),
            CrashTrace::Unfinished { file, line, bytes } => write!(
                f,
                "{file}, line {line}: unfinished ({bytes} bytes, no newline): a write cut short by a crash or a full disk, never acknowledged and not part of the chain; the server cuts it and records that when it next starts"
            ),
        }
    }
}

/// Where the chain breaks.
#[derive(Debug, Error, PartialEq)]
#[error("{file}, line {line}: {problem}")]
pub struct Broken {
    /// The file.
    pub file: String,
    /// The 1-based line number in that file.
    pub line: u64,
    /// What is wrong.
    pub problem: String,
}

/// Checks the chain across `files`, in order: every line parses, its `prev` is the hash of the
/// line before, and `seq` counts up by one. A file's unfinished last line (no newline) is no
/// line of the chain: it is reported among the [`CrashTrace`]s, as are `recovered` lines.
pub fn verify(files: &[PathBuf]) -> Result<Verified, Broken> {
    verify_each(files, |_, _| {})
}

/// [`verify`], handing every line that parses to `visit` on the way, those after a break too
/// (the verdict names the first break), so that one read both checks and uses the chain. With
/// each line comes its position in the chain when the verifier accepted it (whole, chained to
/// the line before, at that place: with [`verify_with_roots`], its leaf in the tree the roots
/// are of), `None` for a line after the first break. Only an accepted line is evidence, and
/// with a key only one a signed root covers at that position (`proof`).
pub fn verify_each(
    files: &[PathBuf],
    mut visit: impl FnMut(Record, Option<u64>),
) -> Result<Verified, Broken> {
    let mut verifier = Verifier::default();
    for path in files {
        verifier.read_file(path, &mut visit);
    }
    verifier.verdict()
}

/// [`verify_each`], also computing the Merkle root of the chain's first `n` lines for each
/// `n` in `sizes` (up to its first break), found in [`Verified::roots`]. When the files start
/// after line 1 (retention deleted the first ones), the chain's tree file `tree` stands in for
/// the lines that are gone; without it no root is computed.
pub fn verify_with_roots(
    files: &[PathBuf],
    sizes: std::collections::BTreeSet<u64>,
    tree: Option<&tree::TreeFile>,
    mut visit: impl FnMut(Record, Option<u64>),
) -> Result<Verified, Broken> {
    let mut verifier = Verifier {
        roots: Some(Roots {
            sizes,
            frontier: None,
            found: Default::default(),
            unavailable: false,
        }),
        ..Verifier::default()
    };
    for path in files {
        verifier.read_file_with(path, &mut visit, tree);
    }
    verifier.verdict()
}

/// The roots [`verify_with_roots`] computes as it reads.
#[derive(Debug, Default)]
struct Roots {
    /// The sizes asked for.
    sizes: std::collections::BTreeSet<u64>,
    /// The tree of the lines so far.
    frontier: Option<merkle::Frontier>,
    /// The roots found.
    found: std::collections::BTreeMap<u64, merkle::Hash>,
    /// The lines before the first one read are gone and no tree stands in for them.
    unavailable: bool,
}

/// What [`verify_each`] knows so far, line after line.
#[derive(Debug, Default)]
struct Verifier {
    /// The hash and `seq` of the last line checked.
    previous: Option<(String, u64)>,
    continues_from: Option<String>,
    lines: u64,
    crash_traces: Vec<CrashTrace>,
    /// Once set, lines are still read and visited but no longer checked.
    first_break: Option<Broken>,
    /// The roots to compute, when asked.
    roots: Option<Roots>,
    /// The `seq` of the first line checked.
    first_seq: u64,
}

impl Verifier {
    /// Reads the lines of one file of the chain, up to its end or a line that cannot be read.
    fn read_file(&mut self, path: &Path, visit: &mut impl FnMut(Record, Option<u64>)) {
        self.read_file_with(path, visit, None);
    }

    /// [`Self::read_file`], with the chain's tree standing in for lines before the first one.
    fn read_file_with(
        &mut self,
        path: &Path,
        visit: &mut impl FnMut(Record, Option<u64>),
        tree: Option<&tree::TreeFile>,
    ) {
        let file_name = path.display().to_string();
        let mut lines = match Lines::open(path) {
            Ok(lines) => lines,
            Err(e) => return self.break_at(&file_name, 0, format!("cannot be read: {e}")),
        };
        self.read_lines(&mut lines, &file_name, 0, visit, tree);
    }

    /// Reads `lines`, of the file `file_name` whose first `before` lines were read earlier, up
    /// to its end or a line that cannot be read.
    fn read_lines<R: std::io::Read>(
        &mut self,
        lines: &mut Lines<R>,
        file_name: &str,
        before: u64,
        visit: &mut impl FnMut(Record, Option<u64>),
        tree: Option<&tree::TreeFile>,
    ) {
        let file_name = file_name.to_string();
        let mut number = before;
        while let Some(read) = lines.next_line() {
            number += 1;
            let bytes = match read {
                Ok(Line::Whole(bytes)) => bytes,
                Ok(Line::Unfinished(tail)) => {
                    self.crash_traces.push(CrashTrace::Unfinished {
                        file: file_name.clone(),
                        line: number,
                        bytes: tail.len() as u64,
                    });
                    break;
                }
                Ok(Line::TooLong) => {
                    self.break_at(
                        &file_name,
                        number,
                        format!(
                            "is longer than {} bytes without a line break: no line a server writes (the file was written by hand, or is damaged); not read further",
                            MAX_LINE_BYTES
                        ),
                    );
                    break;
                }
                Err(e) => {
                    self.break_at(&file_name, number, format!("cannot be read: {e}"));
                    break;
                }
            };
            let line = match std::str::from_utf8(bytes) {
                Ok(line) => line,
                Err(e) => {
                    self.break_at(&file_name, number, format!("cannot be read: {e}"));
                    break;
                }
            };
            match serde_json::from_str::<Record>(line) {
                Ok(record) => {
                    let mut position = None;
                    if self.first_break.is_none() {
                        self.check(&record, line, &file_name, number);
                        if self.first_break.is_none() {
                            position = Some(self.grow(&record, line, tree));
                        }
                    }
                    visit(record, position);
                }
                Err(e) => {
                    self.break_at(&file_name, number, format!("is not an audit record ({e})"));
                }
            }
        }
    }

    /// Adds a checked line to the roots being computed, when asked; its position in the
    /// chain: its leaf's when a tree is computed, else its place after the first line.
    fn grow(&mut self, record: &Record, line: &str, tree: Option<&tree::TreeFile>) -> u64 {
        if self.first_seq == 0 {
            self.first_seq = record.seq;
        }
        let counted = self.first_seq.saturating_sub(1) + self.lines;
        let Some(roots) = self.roots.as_mut() else {
            return counted;
        };
        if roots.frontier.is_none() && !roots.unavailable {
            let before = record.seq.saturating_sub(1);
            roots.frontier = match (before, tree) {
                (0, _) => Some(merkle::Frontier::default()),
                (before, Some(tree)) if tree.size() >= before => {
                    merkle::Frontier::of_stored(before, tree).ok()
                }
                _ => None,
            };
            roots.unavailable = roots.frontier.is_none();
        }
        match roots.frontier.as_mut() {
            Some(frontier) => {
                frontier.push(merkle::leaf_hash(line.as_bytes()));
                if roots.sizes.contains(&frontier.size()) {
                    roots.found.insert(frontier.size(), frontier.root());
                }
                frontier.size()
            }
            None => counted,
        }
    }

    /// Keeps the break at line `line` of `file` when it is the first.
    fn break_at(&mut self, file: &str, line: u64, problem: String) {
        self.first_break.get_or_insert(Broken {
            file: file.to_string(),
            line,
            problem,
        });
    }

    /// Checks line `number` of `file` (`record`, parsed from `line`) against the one before.
    fn check(&mut self, record: &Record, line: &str, file: &str, number: u64) {
        let problem = match &self.previous {
            None if record.prev != GENESIS => {
                self.continues_from = Some(record.prev.clone());
                None
            }
            None => None,
            Some((hash, _)) if &record.prev != hash => Some(
                "its prev is not the hash of the line before: that line, or this one, was changed, removed or inserted".to_string(),
            ),
            Some((_, seq)) if record.seq != seq + 1 => Some(format!(
                "its seq is {} where {} was due",
                record.seq,
                seq + 1
            )),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            return self.break_at(file, number, problem);
        }
        self.previous = Some((hash_line(line), record.seq));
        self.lines += 1;
        if let Some(cut) = &record.recovered {
            self.crash_traces.push(CrashTrace::Recovered {
                file: file.to_string(),
                line: number,
                cut: cut.clone(),
            });
        }
    }

    /// The verdict once every file is read: the first break, or the chain's head.
    fn verdict(self) -> Result<Verified, Broken> {
        match self.first_break {
            Some(broken) => Err(broken),
            None => Ok(Verified {
                lines: self.lines,
                continues_from: self.continues_from,
                head: self
                    .previous
                    .map_or_else(|| GENESIS.to_string(), |(hash, _)| hash),
                crash_traces: self.crash_traces,
                frontier: self.roots.as_ref().and_then(|roots| roots.frontier.clone()),
                roots: self.roots.map(|roots| roots.found).unwrap_or_default(),
                first_seq: self.first_seq,
            }),
        }
    }
}

/// One chain read as it grows, by a reader that comes back later for the lines appended since
/// (the sessions' last states, [`super::sessions`]): the one verifier's judgement kept between
/// reads, and where the reading stopped. A file is known by its device and inode, not its
/// name, so that a rotation (the live file renamed, a new one begun) neither reads a line twice
/// nor skips one. Past the chain's first break nothing more is read: its later lines are not
/// believed, and neither is the line just before it (a line's change shows only in the next
/// line's link, so a break says "that line, or this one"). A line is handed on once the next
/// links to it, or when it is the last line read.
#[derive(Debug, Default)]
pub struct Follower {
    verifier: Verifier,
    /// The last line accepted, held until the next one links to it or the read ends.
    pending: Option<Record>,
    /// Files read to their end that were not the chain's last: rotated, they never grow.
    done: std::collections::HashSet<(u64, u64)>,
    /// The chain's last file as read so far.
    at: Option<Place>,
}

/// Where a [`Follower`] stopped in a file.
#[derive(Debug, Clone, Copy)]
struct Place {
    /// The file's device and inode.
    file: (u64, u64),
    /// The bytes of its whole lines read.
    offset: u64,
    /// Those lines.
    lines: u64,
}

/// What one pass of [`Follower::follow`] over a listing found.
enum Pass {
    /// Every file listed was read.
    Read,
    /// A file listed was gone, or the file being read was no longer among those listed (a
    /// rotation or a deletion after the listing): list again.
    Moved,
}

/// How many times [`Follower::follow`] lists a chain's files while they move under it.
const MAX_PASSES: usize = 3;

impl Follower {
    /// Reads the lines of the chain not read yet, `list` naming its files in chain order (the
    /// rotated ones oldest first, then the live one), and hands each line the verifier accepts
    /// (whole, parsed, chained to the line before) to `visit`. An unfinished last line is left
    /// for the next call. Fails only when the files cannot be listed.
    pub fn follow(
        &mut self,
        list: impl Fn() -> std::io::Result<Vec<PathBuf>>,
        mut visit: impl FnMut(Record),
    ) -> std::io::Result<()> {
        for pass in 1..=MAX_PASSES {
            if self.verifier.first_break.is_some() {
                break;
            }
            let files = list()?;
            if let Pass::Read = self.read_pass(&files, &mut visit, pass == MAX_PASSES) {
                break;
            }
        }
        // What crashes left is for a reviewer (`audit verify`), not kept here line after line.
        self.verifier.crash_traces.clear();
        if let (Some(last), None) = (self.pending.take(), &self.verifier.first_break) {
            visit(last);
        }
        Ok(())
    }

    /// Where the chain breaks, once it does: no line after it was handed on.
    pub fn broken(&self) -> Option<&Broken> {
        self.verifier.first_break.as_ref()
    }

    /// Lines accepted so far.
    pub fn lines(&self) -> u64 {
        self.verifier.lines
    }

    /// Reads `files` from where the last pass stopped; on the `last` pass, a file being read
    /// that is gone no longer holds the reading back (the next line then breaks the chain if
    /// lines went with it).
    fn read_pass(&mut self, files: &[PathBuf], visit: &mut impl FnMut(Record), last: bool) -> Pass {
        let mut seen_at = false;
        for (index, path) in files.iter().enumerate() {
            let name = path.display().to_string();
            let file = match door::open_read(path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !last => return Pass::Moved,
                Err(e) => {
                    self.verifier
                        .break_at(&name, 0, format!("cannot be read: {e}"));
                    return Pass::Read;
                }
            };
            let key = match file.metadata() {
                Ok(meta) => {
                    use std::os::unix::fs::MetadataExt;
                    (meta.dev(), meta.ino())
                }
                Err(e) => {
                    self.verifier
                        .break_at(&name, 0, format!("cannot be read: {e}"));
                    return Pass::Read;
                }
            };
            if self.done.contains(&key) {
                continue;
            }
            let start = match self.at {
                Some(place) if place.file == key => {
                    seen_at = true;
                    place
                }
                Some(_) if !seen_at && !last => return Pass::Moved,
                _ => Place {
                    file: key,
                    offset: 0,
                    lines: 0,
                },
            };
            let place = self.read_from(file, &name, start, visit);
            self.at = Some(place);
            if index + 1 < files.len() {
                self.done.insert(key);
                self.at = None;
            }
            if self.verifier.first_break.is_some() {
                break;
            }
        }
        Pass::Read
    }

    /// Reads `file` (named `name`) from `start`; where it stopped.
    fn read_from(
        &mut self,
        mut file: std::fs::File,
        name: &str,
        start: Place,
        visit: &mut impl FnMut(Record),
    ) -> Place {
        use std::io::Seek;
        if let Err(e) = file.seek(std::io::SeekFrom::Start(start.offset)) {
            self.verifier
                .break_at(name, start.lines, format!("cannot be read: {e}"));
            return start;
        }
        let mut lines = Lines::new(file, MAX_LINE_BYTES);
        let mut accepted = 0;
        let pending = &mut self.pending;
        let mut accept = |record: Record, position: Option<u64>| {
            if position.is_some() {
                accepted += 1;
                if let Some(before) = pending.replace(record) {
                    visit(before);
                }
            }
        };
        self.verifier
            .read_lines(&mut lines, name, start.lines, &mut accept, None);
        Place {
            file: start.file,
            offset: start.offset + lines.consumed(),
            lines: start.lines + accepted,
        }
    }
}
