//! Tar streams in and out of the sandbox.
//!
//! [`pack`] builds the one archive uploaded before start: `script.py` and `in/<name>` for each
//! input, owned by root and read-only, so the script can read its inputs but not grow them;
//! for an attempt of a session with a state, `session/state` too (opaque bytes: the runner
//! restores it), whose header [`pack`] writes and whose body the sender streams from its file.
//!
//! [`unpack`] is the trust boundary for everything that comes back. The archive is produced
//! inside the container, so a hostile script can forge any byte of it. Only regular files and
//! folders with plain relative paths are written; links, devices, absolute paths and `..` are
//! skipped and reported, never followed or created. The byte and entry caps are enforced while
//! reading, before anything past them is written, and existing files are never overwritten.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

use super::{OutputFile, SandboxError, Skipped};

/// Longest input name accepted, in bytes (the usual file-system limit).
const MAX_NAME_BYTES: usize = 255;

/// One input file for the script, placed at `/work/in/<name>`.
#[derive(Debug, Clone)]
pub struct Input {
    /// The file name, kept byte for byte; it must be a single path component.
    pub name: Vec<u8>,
    /// Where its content comes from.
    pub source: InputSource,
}

/// The content of an [`Input`].
#[derive(Debug, Clone)]
pub enum InputSource {
    /// Bytes already in memory.
    Bytes(Vec<u8>),
    /// A file on the host, streamed into the archive.
    Path(PathBuf),
}

impl Input {
    /// An input of bytes already in memory, placed at `/work/in/<name>`.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Self {
        Self {
            name: name.into().into_bytes(),
            source: InputSource::Bytes(bytes),
        }
    }

    /// An input read from a host file, named after the file.
    pub fn from_path(path: impl Into<PathBuf>) -> Result<Self, SandboxError> {
        let path = path.into();
        let name = path
            .file_name()
            .map(|n| n.as_bytes().to_vec())
            .ok_or_else(|| SandboxError::BadInput {
                name: path.display().to_string(),
                reason: "it has no file name".to_string(),
            })?;
        Ok(Self {
            name,
            source: InputSource::Path(path),
        })
    }

    fn display_name(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// Checks that an input name is one plain path component.
fn check_name(input: &Input) -> Result<(), SandboxError> {
    let reason = if input.name.is_empty() {
        Some("the name is empty")
    } else if input.name.len() > MAX_NAME_BYTES {
        Some("the name is longer than 255 bytes")
    } else if input.name.contains(&b'/') {
        Some("the name contains '/'; give a plain file name")
    } else if input.name.contains(&0) {
        Some("the name contains a NUL byte")
    } else if input.name == b"." || input.name == b".." {
        Some("the name is '.' or '..'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(SandboxError::BadInput {
            name: input.display_name(),
            reason: reason.to_string(),
        }),
        None => Ok(()),
    }
}

/// Bytes of the two zero blocks that end a tar archive.
const END_BYTES: usize = 1024;
/// A tar block.
const BLOCK_BYTES: u64 = 512;

/// Builds the upload archive's part held in memory: `script.py` and `in/<name>` for each
/// input, then the archive's end. With `state_bytes` (a session's state of that size), the
/// folder `session` and the header of `session/state` instead of the end: the caller streams
/// the state's bytes after it, then [`state_tail`], so the state is never held in memory.
pub fn pack(
    script: &[u8],
    inputs: &[Input],
    state_bytes: Option<u64>,
) -> Result<Vec<u8>, SandboxError> {
    check_names(inputs)?;
    let mut builder = tar::Builder::new(Vec::new());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    builder
        .append_data(
            &mut entry_header(EntryType::Regular, 0o444, script.len() as u64, now),
            "script.py",
            script,
        )
        .map_err(io_error("packing the script".to_string()))?;
    builder
        .append_data(
            &mut entry_header(EntryType::Directory, 0o755, 0, now),
            "in",
            io::empty(),
        )
        .map_err(io_error("packing the input folder".to_string()))?;
    for input in inputs {
        append_input(&mut builder, input, now)?;
    }
    if state_bytes.is_some() {
        builder
            .append_data(
                &mut entry_header(EntryType::Directory, 0o755, 0, now),
                "session",
                io::empty(),
            )
            .map_err(io_error("packing the session's folder".to_string()))?;
    }
    let mut head = builder
        .into_inner()
        .map_err(io_error("finishing the upload archive".to_string()))?;
    if let Some(bytes) = state_bytes {
        // `into_inner` ended the archive with two zero blocks: the state's entry goes in
        // their place, and the end after its body (`state_tail`).
        head.truncate(head.len().saturating_sub(END_BYTES));
        let mut header = entry_header(EntryType::Regular, 0o444, bytes, now);
        header
            .set_path("session/state")
            .map_err(io_error("packing the session's state".to_string()))?;
        header.set_cksum();
        head.extend_from_slice(header.as_bytes());
    }
    Ok(head)
}

/// What follows a session's state of `bytes` streamed after [`pack`]'s part: the padding of its
/// last block, then the archive's end.
pub fn state_tail(bytes: u64) -> Vec<u8> {
    let padding = (BLOCK_BYTES - bytes % BLOCK_BYTES) % BLOCK_BYTES;
    vec![0; padding as usize + END_BYTES]
}

/// Checks every input name, and that no two inputs share one.
fn check_names(inputs: &[Input]) -> Result<(), SandboxError> {
    let mut seen = std::collections::HashSet::new();
    for input in inputs {
        check_name(input)?;
        if !seen.insert(input.name.as_slice()) {
            return Err(SandboxError::BadInput {
                name: input.display_name(),
                reason: "two inputs have this name; rename one".to_string(),
            });
        }
    }
    Ok(())
}

/// Maps an I/O error while packing to [`SandboxError::Io`], saying what was being done.
fn io_error(action: String) -> impl FnOnce(io::Error) -> SandboxError {
    move |source| SandboxError::Io { action, source }
}

/// A header owned by root (uid and gid 0) with the given kind, mode, size and time.
fn entry_header(kind: EntryType, mode: u32, size: u64, mtime: u64) -> Header {
    let mut header = Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(mtime);
    header
}

/// Appends one input as the read-only `in/<name>`, from memory or streamed from a host file
/// (which must be a regular file, read only as far as its length when opened).
fn append_input(
    builder: &mut tar::Builder<Vec<u8>>,
    input: &Input,
    now: u64,
) -> Result<(), SandboxError> {
    let path = Path::new("in").join(OsStr::from_bytes(&input.name));
    let action = || format!("packing input {:?}", input.display_name());
    match &input.source {
        InputSource::Bytes(bytes) => builder.append_data(
            &mut entry_header(EntryType::Regular, 0o444, bytes.len() as u64, now),
            &path,
            bytes.as_slice(),
        ),
        InputSource::Path(host_path) => {
            let file = File::open(host_path).map_err(|source| SandboxError::BadInput {
                name: host_path.display().to_string(),
                reason: format!("it cannot be read: {source}"),
            })?;
            let metadata = file.metadata().map_err(io_error(action()))?;
            if !metadata.is_file() {
                return Err(SandboxError::BadInput {
                    name: host_path.display().to_string(),
                    reason: "it is not a regular file".to_string(),
                });
            }
            builder.append_data(
                &mut entry_header(EntryType::Regular, 0o444, metadata.len(), now),
                &path,
                file.take(metadata.len()),
            )
        }
    }
    .map_err(io_error(action()))
}

/// Caps for [`unpack`].
#[derive(Debug, Clone, Copy)]
pub struct UnpackLimits {
    /// Bytes of all files together.
    pub max_bytes: u64,
    /// Entries (files, folders and skipped entries) together.
    pub max_entries: usize,
}

/// What [`unpack`] did.
#[derive(Debug, Default)]
pub struct Unpacked {
    /// Files written.
    pub files: Vec<OutputFile>,
    /// Entries not written, and why.
    pub skipped: Vec<Skipped>,
    /// Set when a cap stopped the unpacking: what was exceeded.
    pub limit: Option<String>,
    /// Set when the archive itself was broken (what was written before stays).
    pub malformed: Option<String>,
}

/// Unpacks an untrusted tar stream into `dest` (created if missing), within `limits`.
/// Errors are local I/O failures on the host; problems of the archive are in [`Unpacked`].
pub fn unpack(reader: impl Read, dest: &Path, limits: UnpackLimits) -> io::Result<Unpacked> {
    fs::create_dir_all(dest)?;
    let mut unpacker = Unpacker {
        dest,
        limits,
        result: Unpacked::default(),
        entries_seen: 0,
        bytes_written: 0,
    };
    let mut archive = tar::Archive::new(reader);
    let entries = match archive.entries() {
        Ok(entries) => entries,
        Err(error) => {
            unpacker.result.malformed = Some(error.to_string());
            return Ok(unpacker.result);
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(error) => {
                unpacker.result.malformed =
                    Some(format!("the output archive is malformed: {error}"));
                break;
            }
        };
        if unpacker.unpack_entry(entry)? == Next::Stop {
            break;
        }
    }
    Ok(unpacker.result)
}

/// Whether [`unpack`] reads on after an entry.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Read the next entry.
    Entry,
    /// A cap was reached or the archive broke: what is written stays, nothing more is read.
    Stop,
}

/// The state of one [`unpack`]: where it writes, its caps, and what it has counted so far.
struct Unpacker<'a> {
    /// The folder everything is written under.
    dest: &'a Path,
    /// The caps, checked before anything past them is written.
    limits: UnpackLimits,
    /// What was written, skipped, or went wrong.
    result: Unpacked,
    /// Entries counted against `limits.max_entries` (pax headers are not counted).
    entries_seen: usize,
    /// Bytes of files written, counted against `limits.max_bytes`.
    bytes_written: u64,
}

impl Unpacker<'_> {
    /// Takes one entry: counts it, refuses an unsafe path or a link on the way, then creates the
    /// folder or writes the file; every other kind is skipped and reported.
    fn unpack_entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> io::Result<Next> {
        let kind = entry.header().entry_type();
        if matches!(kind, EntryType::XGlobalHeader | EntryType::XHeader) {
            return Ok(Next::Entry);
        }
        let raw_path = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw_path).into_owned();
        self.entries_seen += 1;
        if self.entries_seen > self.limits.max_entries {
            self.result.limit = Some(format!(
                "more than {} output files and folders",
                self.limits.max_entries
            ));
            return Ok(Next::Stop);
        }
        let Some(relative) = self.safe_place(&raw_path, &shown) else {
            return Ok(Next::Entry);
        };
        let target = self.dest.join(&relative);
        match kind {
            EntryType::Directory => {
                fs::create_dir_all(&target)?;
                Ok(Next::Entry)
            }
            EntryType::Regular | EntryType::Continuous => {
                self.write_file(&mut entry, relative, target, shown)
            }
            other => {
                self.skip(
                    shown,
                    format!("{} entries are not copied out", kind_name(other)),
                );
                Ok(Next::Entry)
            }
        }
    }

    /// The entry's path relative to `dest`, or `None` when it is the archive's root folder or
    /// unsafe (absolute, with `..`, or through a link on the host), which is reported.
    fn safe_place(&mut self, raw_path: &[u8], shown: &str) -> Option<PathBuf> {
        let relative = match safe_relative_path(raw_path) {
            Ok(Some(path)) => path,
            Ok(None) => return None, // the archive's root folder itself
            Err(reason) => {
                self.skip(shown.to_string(), reason.to_string());
                return None;
            }
        };
        if let Some(reason) = link_on_the_way(self.dest, &relative) {
            self.skip(shown.to_string(), reason);
            return None;
        }
        Some(relative)
    }

    /// Writes a regular file's body to a new file at `target`, within the byte cap; a file that
    /// already exists is skipped, and a file cut short by a broken archive is removed.
    fn write_file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        relative: PathBuf,
        target: PathBuf,
        shown: String,
    ) -> io::Result<Next> {
        let size = entry.header().size()?;
        if self.bytes_written.saturating_add(size) > self.limits.max_bytes {
            self.result.limit = Some(format!(
                "output files larger than {} bytes together",
                self.limits.max_bytes
            ));
            return Ok(Next::Stop);
        }
        let Some(mut file) = self.open_new(&target, &shown)? else {
            return Ok(Next::Entry);
        };
        let (written, sha256) = self.copy_body(entry.take(size), &mut file)?;
        self.bytes_written += written;
        if written < size && self.result.malformed.is_none() {
            self.result.malformed = Some(format!(
                "the output archive ends inside {shown:?} ({written} of {size} bytes)"
            ));
        }
        if self.result.malformed.is_some() {
            drop(file);
            fs::remove_file(&target)?;
            return Ok(Next::Stop);
        }
        self.result.files.push(OutputFile {
            path: relative.to_string_lossy().into_owned(),
            host_path: target,
            bytes: written,
            sha256: hex::encode(sha256),
        });
        Ok(Next::Entry)
    }

    /// Creates the file at `target` and its folders; `None` when a file of that name already
    /// exists, which is reported and never overwritten.
    fn open_new(&mut self, target: &Path, shown: &str) -> io::Result<Option<File>> {
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        match OpenOptions::new().write(true).create_new(true).open(target) {
            Ok(file) => Ok(Some(file)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                let reason = "a file of that name already exists; it was not overwritten";
                self.skip(shown.to_string(), reason.to_string());
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// Copies `body` into `file` and hashes it on the way: the bytes copied and their SHA-256.
    /// A read error is the archive's fault and is recorded as malformed; a write error is the
    /// host's and is returned.
    fn copy_body(&mut self, mut body: impl Read, file: &mut File) -> io::Result<(u64, Vec<u8>)> {
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        loop {
            let n = match body.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(error) => {
                    self.result.malformed =
                        Some(format!("the output archive is malformed: {error}"));
                    break;
                }
            };
            hasher.update(&buffer[..n]);
            file.write_all(&buffer[..n])?;
            written += n as u64;
        }
        Ok((written, hasher.finalize().to_vec()))
    }

    /// Records an entry that was not written, and why.
    fn skip(&mut self, path: String, reason: String) {
        self.result.skipped.push(Skipped { path, reason });
    }
}

/// The path as plain relative components, `None` for the root itself, or why it is unsafe.
fn safe_relative_path(raw: &[u8]) -> Result<Option<PathBuf>, &'static str> {
    let path = Path::new(OsStr::from_bytes(raw));
    let mut clean = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err("the path contains '..'"),
            Component::RootDir | Component::Prefix(_) => return Err("the path is absolute"),
        }
    }
    Ok((!clean.as_os_str().is_empty()).then_some(clean))
}

/// Refuses to write through a link that already exists under `dest` (it could point anywhere).
fn link_on_the_way(dest: &Path, relative: &Path) -> Option<String> {
    let mut current = dest.to_path_buf();
    for component in relative.components() {
        current.push(component);
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Some(format!(
                    "{} on the host is a link; nothing is written through links",
                    current.display()
                ));
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

fn kind_name(kind: EntryType) -> &'static str {
    match kind {
        EntryType::Symlink => "symbolic link",
        EntryType::Link => "hard link",
        EntryType::Char => "character device",
        EntryType::Block => "block device",
        EntryType::Fifo => "FIFO",
        EntryType::GNUSparse => "sparse file",
        _ => "special",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: UnpackLimits = UnpackLimits {
        max_bytes: 1024,
        max_entries: 10,
    };

    /// A raw tar header with any path bytes, bypassing the tar crate's own path checks, the way a
    /// hostile script would write one.
    fn raw_entry(path: &[u8], kind: EntryType, body: &[u8], link: Option<&[u8]>) -> Vec<u8> {
        let mut header = Header::new_old();
        {
            let old = header.as_old_mut();
            old.name[..path.len()].copy_from_slice(path);
            if let Some(link) = link {
                old.linkname[..link.len()].copy_from_slice(link);
            }
        }
        header.set_entry_type(kind);
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        let mut bytes = header.as_bytes().to_vec();
        bytes.extend_from_slice(body);
        bytes.resize(bytes.len().div_ceil(512) * 512, 0);
        bytes
    }

    fn archive(entries: &[Vec<u8>]) -> Vec<u8> {
        let mut bytes: Vec<u8> = entries.concat();
        bytes.extend_from_slice(&[0u8; 1024]);
        bytes
    }

    #[test]
    fn pack_places_script_and_inputs_byte_for_byte() {
        let inputs = vec![
            Input {
                name: "Q3 résumé (final).xlsx".as_bytes().to_vec(),
                source: InputSource::Bytes(vec![0, 159, 146, 150, 255]),
            },
            Input {
                name: vec![b'a', 0xff, b'b'],
                source: InputSource::Bytes(b"x".to_vec()),
            },
        ];
        let packed = pack(b"print(1)", &inputs, None).unwrap();
        let mut archive = tar::Archive::new(packed.as_slice());
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut body = Vec::new();
            entry.read_to_end(&mut body).unwrap();
            let header = entry.header();
            assert_eq!(header.uid().unwrap(), 0);
            seen.push((
                entry.path_bytes().into_owned(),
                header.mode().unwrap(),
                body,
            ));
        }
        assert_eq!(
            seen[0],
            (b"script.py".to_vec(), 0o444, b"print(1)".to_vec())
        );
        assert_eq!(seen[1].0, b"in".to_vec());
        assert_eq!(
            seen[2],
            (
                "in/Q3 résumé (final).xlsx".as_bytes().to_vec(),
                0o444,
                vec![0, 159, 146, 150, 255]
            )
        );
        assert_eq!(seen[3].0, vec![b'i', b'n', b'/', b'a', 0xff, b'b']);
    }

    #[test]
    fn pack_refuses_names_that_are_not_one_component() {
        for name in [
            &b""[..],
            b".",
            b"..",
            b"../etc/passwd",
            b"a/b",
            b"nul\0byte",
        ] {
            let input = Input {
                name: name.to_vec(),
                source: InputSource::Bytes(Vec::new()),
            };
            assert!(
                matches!(
                    pack(b"", &[input], None),
                    Err(SandboxError::BadInput { .. })
                ),
                "{name:?}"
            );
        }
        let twice = Input {
            name: b"a.csv".to_vec(),
            source: InputSource::Bytes(Vec::new()),
        };
        assert!(matches!(
            pack(b"", &[twice.clone(), twice], None),
            Err(SandboxError::BadInput { .. })
        ));
    }

    #[test]
    fn unpack_writes_files_and_folders_with_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = archive(&[
            raw_entry(b"./", EntryType::Directory, b"", None),
            raw_entry(b"sub/", EntryType::Directory, b"", None),
            raw_entry(b"sub/a.txt", EntryType::Regular, b"hello", None),
            raw_entry(b"b.bin", EntryType::Regular, &[0, 1, 2], None),
        ]);
        let result = unpack(bytes.as_slice(), dir.path(), LIMITS).unwrap();
        assert_eq!(result.limit, None);
        assert_eq!(result.malformed, None);
        assert!(result.skipped.is_empty(), "{:?}", result.skipped);
        assert_eq!(result.files.len(), 2);
        assert_eq!(result.files[0].path, "sub/a.txt");
        assert_eq!(
            result.files[0].sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(fs::read(dir.path().join("sub/a.txt")).unwrap(), b"hello");
        assert_eq!(fs::read(dir.path().join("b.bin")).unwrap(), [0, 1, 2]);
    }

    #[test]
    fn unpack_skips_and_reports_everything_unsafe() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out");
        let escape = format!("{}/evil", outside.path().display());
        let bytes = archive(&[
            raw_entry(b"../escape.txt", EntryType::Regular, b"x", None),
            raw_entry(b"a/../../escape2.txt", EntryType::Regular, b"x", None),
            raw_entry(escape.as_bytes(), EntryType::Regular, b"x", None),
            raw_entry(b"passwd", EntryType::Symlink, b"", Some(b"/etc/passwd")),
            raw_entry(b"hard", EntryType::Link, b"", Some(b"/etc/shadow")),
            raw_entry(b"dev", EntryType::Char, b"", None),
            raw_entry(b"blk", EntryType::Block, b"", None),
            raw_entry(b"fifo", EntryType::Fifo, b"", None),
            raw_entry(b"ok.txt", EntryType::Regular, b"fine", None),
        ]);
        let result = unpack(bytes.as_slice(), &dest, LIMITS).unwrap();
        let skipped: Vec<_> = result.skipped.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(
            skipped,
            [
                "../escape.txt",
                "a/../../escape2.txt",
                escape.as_str(),
                "passwd",
                "hard",
                "dev",
                "blk",
                "fifo"
            ]
        );
        assert!(result.skipped[3].reason.contains("symbolic link"));
        assert_eq!(result.files.len(), 1);
        assert!(!dir.path().join("escape.txt").exists());
        assert!(!outside.path().join("evil").exists());
        let written: Vec<_> = fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(written, ["ok.txt"]);
    }

    #[test]
    fn unpack_never_writes_through_an_existing_link_or_over_a_file() {
        let outside = tempfile::tempdir().unwrap();
        let dest = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dest.path().join("linked")).unwrap();
        fs::write(dest.path().join("kept.txt"), b"original").unwrap();
        let bytes = archive(&[
            raw_entry(b"linked/x.txt", EntryType::Regular, b"x", None),
            raw_entry(b"kept.txt", EntryType::Regular, b"replaced", None),
        ]);
        let result = unpack(bytes.as_slice(), dest.path(), LIMITS).unwrap();
        assert_eq!(result.skipped.len(), 2, "{:?}", result.skipped);
        assert!(result.files.is_empty());
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
        assert_eq!(fs::read(dest.path().join("kept.txt")).unwrap(), b"original");
    }

    #[test]
    fn unpack_stops_at_the_byte_cap_before_writing_past_it() {
        let dest = tempfile::tempdir().unwrap();
        let bytes = archive(&[
            raw_entry(b"first", EntryType::Regular, &[1; 600], None),
            raw_entry(b"second", EntryType::Regular, &[2; 600], None),
        ]);
        let result = unpack(bytes.as_slice(), dest.path(), LIMITS).unwrap();
        assert!(result.limit.unwrap().contains("1024 bytes"));
        assert_eq!(result.files.len(), 1);
        assert!(!dest.path().join("second").exists());
    }

    #[test]
    fn unpack_stops_at_the_entry_cap() {
        let dest = tempfile::tempdir().unwrap();
        let entries: Vec<_> = (0..50)
            .map(|i| raw_entry(format!("f{i}").as_bytes(), EntryType::Regular, b"", None))
            .collect();
        let result = unpack(archive(&entries).as_slice(), dest.path(), LIMITS).unwrap();
        assert!(result.limit.unwrap().contains("more than 10"));
        assert_eq!(result.files.len(), 10);
        assert_eq!(fs::read_dir(dest.path()).unwrap().count(), 10);
    }

    #[test]
    fn unpack_reports_a_truncated_archive_and_keeps_no_partial_file() {
        let dest = tempfile::tempdir().unwrap();
        let mut bytes = raw_entry(b"whole", EntryType::Regular, b"abc", None);
        let mut cut = raw_entry(b"partial", EntryType::Regular, &[7; 900], None);
        cut.truncate(512 + 100);
        bytes.extend(cut);
        let result = unpack(bytes.as_slice(), dest.path(), LIMITS).unwrap();
        assert!(result.malformed.is_some());
        assert_eq!(result.files.len(), 1);
        assert!(!dest.path().join("partial").exists());
    }

    #[test]
    fn unpack_of_garbage_is_malformed_not_an_error() {
        let dest = tempfile::tempdir().unwrap();
        let result = unpack(&[0x41u8; 700][..], dest.path(), LIMITS).unwrap();
        assert!(result.malformed.is_some());
        assert!(result.files.is_empty());
    }
}
