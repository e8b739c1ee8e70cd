//! The one door into files of the data folder that whoever holds the folder can replace: the
//! audit folder's (`crate::audit`), the sessions' folders' (`tools::session`, and the state
//! file `sandbox::request` streams into an attempt), and the files a reviewer names to the
//! audit commands (a receipt, a key, a checkpoints copy). Their bytes are untrusted like an
//! upload's: whoever holds the folder may have put a FIFO, a device, a symbolic link, a folder
//! or a sparse file of any size where a chain, a lock, a tree, a checkpoints file, a session's
//! record or its state was expected. So every such file is opened here, and only here:
//!
//! - never through a symbolic link (`O_NOFOLLOW` on the file itself: a link is refused, even
//!   one that points back into the folder);
//! - never blocking (`O_NONBLOCK` while opening, so a FIFO with no writer or a device answers
//!   at once), then refused unless `fstat` of the descriptor opened says it is a regular
//!   file, and only then made blocking again for ordinary reads;
//! - never truncating: nothing here opens with `O_TRUNC`; a file is created with `O_CREAT`
//!   alone (appended to, or only locked) or with `O_EXCL` (a new side file).
//!
//! Every read is bounded. Lines are read by [`Lines`] within [`MAX_LINE_BYTES`]: a line longer
//! than that, or an unfinished one, is a named finding ([`Line::TooLong`], [`Line::Unfinished`]),
//! never an allocation the size of the file. The writer refuses to write a line longer than the
//! bound, so no line a server wrote is ever over it. A whole file is read by [`read_within`] or
//! hashed by [`sha256_within`] within a bound its caller names: a longer file is refused, never
//! read to its end.
//!
//! It lives in `untrusted`, below `audit`, `sandbox` and `tools` alike, so that each of them
//! opens the folder's files through this one door (`audit` imports `sandbox`, so the door could
//! not stay in `audit` for `sandbox` to use). It decides nothing about what the bytes mean:
//! `audit::verify` judges lines, `audit::checkpoints` parses records, `audit::tree` reads
//! hashes, `tools::session` compares a state's hash with the trail's.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use sha2::{Digest, Sha256};

/// The longest line of the audit folder read: 16 MiB, four times the largest MCP request
/// (`server::MAX_MCP_BODY_BYTES`, which bounds the code a line can carry). A longer line was
/// not written by a server: the writer refuses one.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Flags of every open: no link followed, no blocking, no controlling terminal.
fn door_flags() -> i32 {
    (OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits()
}

/// What the door's refusals call a file of the audit folder: the role of the functions that
/// take none, which only `audit` calls.
const AUDIT_FILE: &str = "a file of the audit folder";

/// Opens `path` to read it: a regular file, not a link, never blocking.
pub fn open_read(path: &Path) -> std::io::Result<File> {
    open_read_as(path, AUDIT_FILE)
}

/// Opens `path` to read it as [`open_read`] does, for a file that is not the audit folder's
/// (a session's file, a receipt or a key a reviewer names): its refusals call it `role`
/// ("the receipt file").
pub fn open_read_as(path: &Path, role: &str) -> std::io::Result<File> {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(door_flags())
        .open(path);
    checked(opened, path, role)
}

/// Opens `path` to read and append to it, creating it when it is missing (never truncating
/// it): a chain's live file, its tree, its checkpoints.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    let opened = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(door_flags())
        .open(path);
    checked(opened, path, AUDIT_FILE)
}

/// Opens `path` to lock it (a lock file: only locked, never written), creating it when
/// `create` and it is missing, never truncating it. Read and write: a FIFO opened so answers at
/// once, for `fstat` to name it (write-only, it would fail with ENXIO, which names nothing).
pub fn open_lock(path: &Path, create: bool) -> std::io::Result<File> {
    open_lock_as(path, create, AUDIT_FILE)
}

/// [`open_lock`] for a lock file outside the audit folder (a session's): its refusals call it
/// `role`.
pub fn open_lock_as(path: &Path, create: bool, role: &str) -> std::io::Result<File> {
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .custom_flags(door_flags())
        .open(path);
    checked(opened, path, role)
}

/// Creates `path`, which must not exist yet (`O_EXCL`: no link is followed either).
pub fn create_new(path: &Path) -> std::io::Result<File> {
    create_new_as(path, AUDIT_FILE)
}

/// [`create_new`] for a file outside the audit folder (a session's record or state): its
/// refusals call it `role`.
pub fn create_new_as(path: &Path, role: &str) -> std::io::Result<File> {
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(door_flags())
        .open(path);
    checked(opened, path, role)
}

/// The bytes of `path`, opened by [`open_read_as`], at most `max` of them: a longer file is
/// refused as soon as one byte past the bound is read (never read to its end), in words that
/// name the bound and the file as `role`.
pub fn read_within(path: &Path, role: &str, max: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_read_as(path, role)?
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(path, role, max));
    }
    Ok(bytes)
}

/// The hex SHA-256 of `path`, opened by [`open_read_as`], and its size, read a block at a time
/// (never held whole in memory), at most `max` bytes: a longer file is refused as
/// [`read_within`] refuses one.
pub fn sha256_within(path: &Path, role: &str, max: u64) -> std::io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let file = open_read_as(path, role)?;
    let bytes = std::io::copy(&mut file.take(max.saturating_add(1)), &mut hasher)?;
    if bytes > max {
        return Err(too_large(path, role, max));
    }
    Ok((hex::encode(hasher.finalize()), bytes))
}

/// The refusal of a file longer than the bound its reader keeps.
fn too_large(path: &Path, role: &str, max: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "{} is larger than {max} bytes: {role} is read only within that bound; it was not read further",
            path.display()
        ),
    )
}

/// A line's bytes as the chain reads them: the bytes before its `\n`, less a `\r` just before
/// it (a file whose line ends were converted to CRLF reads as the server wrote it). The one
/// rule for [`Lines`], `audit verify`, the start-up check, the tree's catch-up, the chain's
/// head and a receipt's `--line` file.
pub fn without_line_break(bytes: &[u8]) -> &[u8] {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    bytes.strip_suffix(b"\r").unwrap_or(bytes)
}

/// The descriptor opened, once `fstat` says it is a regular file, made blocking again; else
/// why not, in words that name the file as `role` and say what to do.
fn checked(opened: std::io::Result<File>, path: &Path, role: &str) -> std::io::Result<File> {
    let file = opened.map_err(|error| match error.raw_os_error() {
        Some(nix::libc::ELOOP) => std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} is a symbolic link: {role} is never read or written through a link; use the file itself (`readlink -f` names it), or remove the link",
                path.display()
            ),
        ),
        _ => error,
    })?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a folder"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_block_device() || kind.is_char_device() {
            "a device"
        } else {
            "not a file"
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} is {what}, not a regular file: {role} is opened only when it is a regular file; put a regular file there, or remove it",
                path.display()
            ),
        ));
    }
    let flags = fcntl(&file, FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
    let blocking = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
    fcntl(&file, FcntlArg::F_SETFL(blocking)).map_err(std::io::Error::from)?;
    Ok(file)
}

/// One read of [`Lines::next_line`].
#[derive(Debug, PartialEq)]
pub enum Line<'a> {
    /// A whole line, without its line break (`\n` or `\r\n`).
    Whole(&'a [u8]),
    /// The file's last bytes, with no newline after them (at most the bound): an unfinished
    /// line, no line of the file.
    Unfinished(&'a [u8]),
    /// More than [`MAX_LINE_BYTES`] with no newline: no line a server wrote. The next read
    /// skips the rest of it (without keeping it) and goes on after its newline.
    TooLong,
}

/// The lines of a file of the audit folder, each within [`MAX_LINE_BYTES`] (or the bound
/// given): memory holds one line, never the file.
#[derive(Debug)]
pub struct Lines<R> {
    reader: BufReader<R>,
    bytes: Vec<u8>,
    max: usize,
    /// The line number of the last line read (1-based).
    number: u64,
    /// The last read was [`Line::TooLong`]: skip to its end first.
    skipping: bool,
    /// Bytes of the whole lines read so far, their line breaks included: where the next line
    /// starts, for a reader that comes back later to the lines appended since.
    consumed: u64,
}

impl Lines<File> {
    /// The lines of `path`, opened by [`open_read`].
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Ok(Self::new(open_read(path)?, MAX_LINE_BYTES))
    }
}

impl<R: Read> Lines<R> {
    /// The lines of `reader`, each at most `max` bytes.
    pub fn new(reader: R, max: usize) -> Self {
        Self {
            reader: BufReader::new(reader),
            bytes: Vec::new(),
            max,
            number: 0,
            skipping: false,
            consumed: 0,
        }
    }

    /// Bytes of the whole lines read so far, line breaks included (not an unfinished line's).
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The 1-based number of the line last read.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The next line; `None` at the end of the file.
    pub fn next_line(&mut self) -> Option<std::io::Result<Line<'_>>> {
        if std::mem::take(&mut self.skipping) {
            match self.skip_line() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(error) => return Some(Err(error)),
            }
        }
        self.bytes.clear();
        let limit = self.max as u64 + 1;
        let read = match (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.bytes)
        {
            Ok(0) => return None,
            Ok(read) => read,
            Err(error) => return Some(Err(error)),
        };
        self.number += 1;
        if self.bytes.last() == Some(&b'\n') {
            self.consumed += self.bytes.len() as u64;
            let length = without_line_break(&self.bytes).len();
            return Some(Ok(Line::Whole(&self.bytes[..length])));
        }
        if read as u64 >= limit {
            self.skipping = true;
            return Some(Ok(Line::TooLong));
        }
        // Fewer bytes than the bound and no newline: the end of the file.
        Some(Ok(Line::Unfinished(&self.bytes)))
    }

    /// Skips the rest of an over-long line, through its newline, keeping nothing: `false` when
    /// the file ended first.
    fn skip_line(&mut self) -> std::io::Result<bool> {
        loop {
            let buffer = self.reader.fill_buf()?;
            if buffer.is_empty() {
                return Ok(false);
            }
            if let Some(at) = buffer.iter().position(|&b| b == b'\n') {
                self.reader.consume(at + 1);
                return Ok(true);
            }
            let length = buffer.len();
            self.reader.consume(length);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8], max: usize) -> Vec<String> {
        let mut lines = Lines::new(bytes, max);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line() {
            out.push(match line.unwrap() {
                Line::Whole(line) => String::from_utf8_lossy(line).into_owned(),
                Line::Unfinished(n) => format!("unfinished {}", n.len()),
                Line::TooLong => "too long".into(),
            });
        }
        out
    }

    #[test]
    fn lines_are_read_within_the_bound_and_the_rest_is_named() {
        assert_eq!(all(b"a\r\nbb\n", 4), ["a", "bb"]);
        assert_eq!(all(b"a\nxyz", 4), ["a", "unfinished 3"]);
        assert_eq!(all(b"a\n0123456789\nb\n", 4), ["a", "too long", "b"]);
        assert_eq!(all(b"0123456789", 4), ["too long"]);
        assert_eq!(all(b"1234\n", 4), ["1234"]);
        assert_eq!(all(b"", 4), Vec::<String>::new());
        let mut lines = Lines::new(&b"a\r\nbb\nccc"[..], 8);
        while lines.next_line().is_some() {}
        assert_eq!(lines.consumed(), 6, "the unfinished line is not counted");
    }

    #[test]
    fn the_door_refuses_links_fifos_and_folders_and_truncates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"keep me").unwrap();
        let link = dir.path().join("c.jsonl.lock");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        for opened in [open_lock(&link, true), open_read(&link), open_append(&link)] {
            let error = opened.unwrap_err().to_string();
            assert!(error.contains("symbolic link"), "{error}");
        }
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep me");
        let dangling = dir.path().join("d.jsonl.tree");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(open_append(&dangling).is_err());
        assert!(!dir.path().join("nowhere").exists());

        let fifo = dir.path().join("c.jsonl.checkpoints");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let started = std::time::Instant::now();
        for opened in [open_read(&fifo), open_append(&fifo), open_lock(&fifo, true)] {
            let error = opened.unwrap_err().to_string();
            assert!(error.contains("a FIFO"), "{error}");
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let error = open_read(dir.path()).unwrap_err().to_string();
        assert!(error.contains("a folder"), "{error}");

        let file = dir.path().join("f");
        std::fs::write(&file, b"kept").unwrap();
        drop(open_lock(&file, true).unwrap());
        drop(open_append(&file).unwrap());
        assert_eq!(std::fs::read(&file).unwrap(), b"kept");
        assert!(create_new(&file).is_err());
    }

    #[test]
    fn whole_files_are_read_and_hashed_within_their_bound_through_the_door() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("record.json");
        std::fs::write(&file, b"0123456789").unwrap();
        let role = "a file of a session's folder";
        assert_eq!(read_within(&file, role, 10).unwrap(), b"0123456789");
        let (sha256, bytes) = sha256_within(&file, role, 10).unwrap();
        assert_eq!(sha256, hex::encode(Sha256::digest(b"0123456789")));
        assert_eq!(bytes, 10);
        assert_eq!(sha256_within(&file, role, u64::MAX).unwrap().1, 10);

        for refused in [
            read_within(&file, role, 9).map(|_| ()),
            sha256_within(&file, role, 9).map(|_| ()),
        ] {
            let error = refused.unwrap_err();
            assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
            let error = error.to_string();
            assert!(error.contains("larger than 9 bytes"), "{error}");
            assert!(error.contains(role), "{error}");
        }

        let fifo = dir.path().join("a.state");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // On a thread, so that a door that blocked on the FIFO fails the test, not hangs it.
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send([
                read_within(&fifo, role, 10).map(|_| ()),
                sha256_within(&fifo, role, 10).map(|_| ()),
            ]);
        });
        let refusals = receiver
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("a FIFO with no writer is refused at once");
        for refused in refusals {
            let error = refused.unwrap_err().to_string();
            assert!(error.contains("is a FIFO"), "{error}");
            assert!(error.contains(role), "{error}");
        }
        let missing = read_within(&dir.path().join("gone"), role, 10).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    }
}
