//! The end of a chain file after a crash. A server writes each line with its newline in one
//! append and syncs it before the call's answer goes out, so the newline is the mark of a line
//! that was written whole: whatever follows the last newline is an unfinished line, cut short
//! by a crash (SIGKILL, power loss) or by a write that failed part-way, and never acknowledged.
//!
//! At start-up the server reads its chain's last whole line back to the newline before it,
//! whatever its length ([`last_line`]), and cuts an unfinished tail off ([`cut_unfinished`]):
//! the bytes go to a side file beside the chain (`<chain file>.torn-<seq>`, never read as part
//! of a chain), and the next line, of status [`RECOVERED_STATUS`], says what was cut
//! ([`Recovered`]), chained like any other. `verify` reports such lines, and an unfinished tail
//! not cut yet, as a crash's traces, never as tampering.
//!
//! It does not judge the lines before the tail: a whole line that does not parse or does not
//! chain is `verify`'s to call broken, as before.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::untrusted::door;

/// `status` of the line that records a cut unfinished line.
pub const RECOVERED_STATUS: &str = "recovered";

/// What start-up cut from the end of a chain file: the `recovered` field of its line.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Recovered {
    /// The chain file it was cut from (its name in the audit folder).
    pub file: String,
    /// Where the cut was: the end of the file's last whole line, its size since.
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes: u64,
    /// The hex SHA-256 of the bytes cut.
    pub sha256: String,
    /// The side file beside the chain that keeps those bytes; absent when it could not be
    /// written (the line's `error` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

impl std::fmt::Display for Recovered {
    /// "an unfinished line of N bytes (sha256 …) cut at byte O of F, kept in K", every value
    /// [`printable`](super::printable): a trail can be edited by anyone who can write it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "an unfinished line of {} bytes (sha256 {}…) cut at byte {} of {}, ",
            self.bytes,
            super::printable(self.sha256.get(..12).unwrap_or(&self.sha256)),
            self.offset,
            super::printable(&self.file),
        )?;
        match &self.kept {
            Some(kept) => write!(f, "kept in {}", super::printable(kept)),
            None => write!(f, "its bytes not kept"),
        }
    }
}

/// Blocks in which a file is read backwards, looking for a newline.
const BLOCK: u64 = 64 * 1024;

/// The offset of the last `\n` before `end` in `file`, reading backwards no further than a
/// line's bound ([`MAX_LINE_BYTES`](door::MAX_LINE_BYTES)) plus its newline: `None`
/// when the file starts first; an error, naming the finding, when no newline lies within the
/// bound (no line a server wrote is that long).
fn newline_before(file: &File, end: u64) -> std::io::Result<Option<u64>> {
    let mut block = vec![0; BLOCK as usize];
    let floor = end.saturating_sub(door::MAX_LINE_BYTES as u64 + 1);
    let mut end = end;
    while end > floor {
        let start = end.saturating_sub(BLOCK).max(floor);
        let part = &mut block[..(end - start) as usize];
        file.read_exact_at(part, start)?;
        if let Some(at) = part.iter().rposition(|&b| b == b'\n') {
            return Ok(Some(start + at as u64));
        }
        end = start;
    }
    if end > 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "no line break within the {} bytes before byte {}: a line longer than any a server writes (the file was written by hand, or is damaged)",
                door::MAX_LINE_BYTES,
                end + door::MAX_LINE_BYTES as u64 + 1
            ),
        ));
    }
    Ok(None)
}

/// Where the whole lines of `file` end: just past its last newline (0 when it has none).
/// Anything after that is an unfinished line.
fn whole_lines_end(file: &File) -> std::io::Result<u64> {
    let size = file.metadata()?.len();
    Ok(newline_before(file, size)?.map_or(0, |at| at + 1))
}

/// The last whole, non-blank line of `file` (without its newline), read back to the newline
/// before it, within [`MAX_LINE_BYTES`](door::MAX_LINE_BYTES); an unfinished tail is
/// not a line. Blank lines are skipped for as many bytes as one line's bound, no more.
pub fn last_line(file: &File) -> std::io::Result<Option<Vec<u8>>> {
    let mut end = whole_lines_end(file)?;
    let floor = end.saturating_sub(door::MAX_LINE_BYTES as u64);
    // `end` is just past a newline; the line is what lies between the one before and it.
    while end > 0 {
        if end < floor {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "only blank lines end the file: not a chain a server wrote",
            ));
        }
        let newline = end - 1;
        let start = newline_before(file, newline)?.map_or(0, |at| at + 1);
        let mut line = vec![0; (newline - start) as usize];
        file.read_exact_at(&mut line, start)?;
        line.truncate(door::without_line_break(&line).len());
        if !line.iter().all(u8::is_ascii_whitespace) {
            return Ok(Some(line));
        }
        end = start;
    }
    Ok(None)
}

/// Notes in `recovered` the side file that keeps the cut bytes; when they could not be kept,
/// logs it and returns the problem for the `recovered` line.
fn note_kept(
    recovered: &mut Recovered,
    kept: std::io::Result<PathBuf>,
    path: &Path,
) -> Option<String> {
    match kept {
        Ok(side) => {
            recovered.kept = Some(super::file_name(&side));
            None
        }
        Err(error) => {
            tracing::warn!(file = %path.display(), %error, "audit trail: the unfinished line's bytes could not be kept beside it; its size and hash are recorded");
            Some(format!("the cut bytes could not be kept: {error}"))
        }
    }
}

/// Cuts the unfinished line at the end of `file` (the chain file at `path`), if there is one:
/// its bytes are copied to a new side file `<path>.torn-<seq>` (`seq` being the one the cut
/// line would have had) and synced, then the file is cut back to its last newline and synced,
/// and so is the folder. `None` when the file ends in a newline. When the side file cannot be
/// written the cut still happens (the chain must go on clean) and the returned `error` says
/// why the bytes were not kept.
pub fn cut_unfinished(
    file: &File,
    path: &Path,
    seq: u64,
) -> std::io::Result<Option<(Recovered, Option<String>)>> {
    let size = file.metadata()?.len();
    let offset = whole_lines_end(file)?;
    if offset == size {
        return Ok(None);
    }
    let mut recovered = Recovered {
        file: super::file_name(path),
        offset,
        bytes: size - offset,
        ..Recovered::default()
    };
    let (sha256, kept) = keep(file, offset, size, path, seq)?;
    recovered.sha256 = sha256;
    let error = note_kept(&mut recovered, kept, path);
    file.set_len(offset)?;
    file.sync_all()?;
    sync_folder(path)?;
    tracing::warn!(
        file = %path.display(),
        offset,
        bytes = recovered.bytes,
        "audit trail: cut an unfinished last line (a crash or a failed write); the next line records it"
    );
    Ok(Some((recovered, error)))
}

/// Hashes `file[from..to]` and copies it into a new side file; the hash, and the side file or
/// why it could not be written (then no side file is left: a partial copy is worse than none,
/// the recorded hash being the whole evidence then).
fn keep(
    file: &File,
    from: u64,
    to: u64,
    path: &Path,
    seq: u64,
) -> std::io::Result<(String, std::io::Result<PathBuf>)> {
    let mut side = new_side_file(path, seq);
    let mut hasher = Sha256::new();
    let mut block = vec![0; BLOCK as usize];
    let mut at = from;
    let mut copied = Ok(());
    while at < to {
        let part = &mut block[..(to - at).min(BLOCK) as usize];
        if let Err(error) = file.read_exact_at(part, at) {
            if let Ok((side_path, _)) = &side {
                let _ = std::fs::remove_file(side_path);
            }
            return Err(error);
        }
        hasher.update(&*part);
        if let (Ok((_, out)), Ok(())) = (&mut side, &copied) {
            copied = out.write_all(part);
        }
        at += part.len() as u64;
    }
    let kept = side.and_then(
        |(side_path, out)| match copied.and_then(|()| out.sync_all()) {
            Ok(()) => Ok(side_path),
            Err(error) => {
                let _ = std::fs::remove_file(&side_path);
                Err(error)
            }
        },
    );
    Ok((hex::encode(hasher.finalize()), kept))
}

fn new_side_file(path: &Path, seq: u64) -> std::io::Result<(PathBuf, File)> {
    // A crash during an earlier recovery at the same place can have left a side file of
    // this name: never overwrite evidence, take the next free name.
    for attempt in 0..100 {
        let side = side_file_name(path, seq, attempt);
        match door::create_new(&side) {
            Ok(file) => return Ok((side, file)),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
    Err(std::io::Error::other("100 side files of this name exist"))
}

/// `<path>.torn-<seq, 12 digits>`, then `-1`, `-2`... after it. No chain reads such a file.
fn side_file_name(path: &Path, seq: u64, attempt: u32) -> PathBuf {
    match attempt {
        0 => super::beside(path, &format!(".torn-{seq:012}")),
        _ => super::beside(path, &format!(".torn-{seq:012}-{attempt}")),
    }
}

/// Syncs the folder holding `path`, so that a file created, renamed or cut in it stays so
/// after a crash of the machine, not only of the process. A file system that cannot sync a
/// folder at all (some answer EINVAL) is taken at its word, as PostgreSQL does.
pub fn sync_folder(path: &Path) -> std::io::Result<()> {
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    match File::open(folder.unwrap_or_else(|| Path::new(".")))?.sync_all() {
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported
            ) =>
        {
            Ok(())
        }
        synced => synced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, PathBuf, File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        std::fs::write(&path, bytes).unwrap();
        let file = File::options().read(true).append(true).open(&path).unwrap();
        (dir, path, file)
    }

    #[test]
    fn the_last_line_is_read_whole_however_long() {
        let long = "x".repeat(3 * BLOCK as usize + 17);
        let (_dir, _, file) = file_with(format!("first\n{long}\n").as_bytes());
        assert_eq!(last_line(&file).unwrap().unwrap(), long.as_bytes());
        let (_dir, _, file) = file_with(format!("{long}\n\n  \n").as_bytes());
        assert_eq!(last_line(&file).unwrap().unwrap(), long.as_bytes());
        let (_dir, _, file) = file_with(format!("first\r\n{long}").as_bytes());
        assert_eq!(last_line(&file).unwrap().unwrap(), b"first");
        let (_dir, _, file) = file_with(long.as_bytes());
        assert_eq!(last_line(&file).unwrap(), None);
        let (_dir, _, file) = file_with(b"");
        assert_eq!(last_line(&file).unwrap(), None);
    }

    #[test]
    fn no_more_than_a_line_s_bound_is_read_back() {
        let (_dir, _, file) = file_with(b"{}\n");
        file.set_len(3 + door::MAX_LINE_BYTES as u64 + 10).unwrap();
        let error = last_line(&file).unwrap_err().to_string();
        assert!(error.contains("no line break within"), "{error}");
        let error = cut_unfinished(&file, Path::new("c.jsonl"), 2)
            .unwrap_err()
            .to_string();
        assert!(error.contains("no line break within"), "{error}");
    }

    #[test]
    fn an_unfinished_tail_is_cut_and_kept_beside_the_file() {
        let tail = "y".repeat(2 * BLOCK as usize + 5);
        let (dir, path, file) = file_with(format!("one\ntwo\n{tail}").as_bytes());
        let (recovered, error) = cut_unfinished(&file, &path, 3).unwrap().unwrap();
        assert_eq!(error, None);
        assert_eq!(std::fs::read(&path).unwrap(), b"one\ntwo\n");
        assert_eq!(recovered.offset, 8);
        assert_eq!(recovered.bytes, tail.len() as u64);
        assert_eq!(
            recovered.sha256,
            hex::encode(Sha256::digest(tail.as_bytes()))
        );
        assert_eq!(recovered.kept.as_deref(), Some("c.jsonl.torn-000000000003"));
        let side = dir.path().join("c.jsonl.torn-000000000003");
        assert_eq!(std::fs::read(&side).unwrap(), tail.as_bytes());
        // Nothing more to cut; a second tail at the same place keeps the first side file.
        assert_eq!(cut_unfinished(&file, &path, 3).unwrap(), None);
        (&file).write_all(b"{\"half").unwrap();
        let (again, _) = cut_unfinished(&file, &path, 3).unwrap().unwrap();
        assert_eq!(again.kept.as_deref(), Some("c.jsonl.torn-000000000003-1"));
        assert_eq!(std::fs::read(&side).unwrap(), tail.as_bytes());
        assert_eq!(std::fs::read(&path).unwrap(), b"one\ntwo\n");
    }
}
