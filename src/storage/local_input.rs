//! An input a stdio client names by path on this machine: opened once, below the root it lies
//! under, following no symbolic link there, and read only through that descriptor.
//!
//! A root is often a shared folder that other programs write in. Checking a path and then
//! opening it again by name let one of them swap a folder below the root for a link between
//! the two and have a file outside the roots read (`~/.ssh/id_*`); a FIFO put there blocked a
//! thread of the blocking pool for good. So the check is the open: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` from the root's descriptor (Linux 5.6), else, where
//! it is missing or a seccomp filter refuses it, a walk that opens one component at a time
//! with `O_NOFOLLOW`. The file is opened `O_NONBLOCK`, so a FIFO or a device never blocks, and
//! refused unless `fstat` says it is a regular file. The root itself is resolved once, links
//! and all: it is the client's declaration.
//!
//! Which folders are roots is not decided here (`mcp::files` asks the client).

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::sys::stat::{Mode, SFlag, fstatat};

use super::{Download, StorageError};

/// Set once `openat2` turned out missing (ENOSYS) or filtered (EPERM): the walk is used from
/// then on.
static OPENAT2_UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// How the file itself is opened: read-only, never blocking (a FIFO with no writer, a
/// device), never becoming the controlling terminal, closed in any child.
const FILE_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_NOCTTY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// How a folder on the way is opened in the walk: a handle only, and only if it is a folder
/// and not a link.
const FOLDER_FLAGS: OFlag = OFlag::O_PATH
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Why a path may not be read. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum LocalInputError {
    /// Under none of the roots, or `..` climbs out of its root.
    #[error(
        "{path} is outside the folders file-agent may read ({roots}); move the file into one, or open its folder in your client"
    )]
    Outside {
        /// The path as named.
        path: String,
        /// The roots, as declared.
        roots: String,
    },
    /// A link below the root, on the way or the file itself.
    #[error(
        "{path}: {link} is a symbolic link below the root {root}, and file-agent follows none there; name the file itself, by its real path under the root"
    )]
    SymbolicLink {
        /// The path as named.
        path: String,
        /// The link, as far as it could be told (the whole path when it could not).
        link: String,
        /// The root it lies under.
        root: String,
    },
    /// A folder, FIFO, socket or device.
    #[error("{path} is not a regular file ({kind}); name a regular file under the root")]
    NotRegular {
        /// The path as named.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// Missing, not permitted, or a component that is no folder.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The path as named.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A file a stdio client named by path, open (the descriptor it was checked through is the
/// one it is read from).
#[derive(Debug, Clone)]
pub struct LocalInput {
    /// The open file; shared, as a [`super::Caller`] is cloned.
    file: Arc<File>,
    /// The path as the client named it, for messages.
    shown: String,
    /// Its last component: the name under `/work/in`.
    name: String,
}

impl LocalInput {
    /// Opens `path` if it lies under one of `roots` (as declared, or with the root's links
    /// resolved), below that root without following any link, and is a regular file.
    pub fn open(path: &Path, roots: &[PathBuf]) -> Result<Self, LocalInputError> {
        let shown = path.display().to_string();
        let (root, relative) = beneath(path, roots).ok_or_else(|| LocalInputError::Outside {
            path: shown.clone(),
            roots: roots
                .iter()
                .map(|root| root.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        let cannot = |source: Errno| LocalInputError::Open {
            path: shown.clone(),
            source: source.into(),
        };
        let root_fd = nix::fcntl::open(&root, FOLDER_FLAGS, Mode::empty()).map_err(cannot)?;
        let fd = open_below(&root_fd, &relative).map_err(|errno| {
            let link = matches!(errno, Errno::ELOOP | Errno::ENOTDIR)
                .then(|| link_on(&root_fd, &relative))
                .flatten();
            match (link, errno) {
                (Some(link), _) => refused_link(&shown, &root.join(link), &root),
                // A link that was gone again when looked for: name the whole path.
                (None, Errno::ELOOP) => refused_link(&shown, path, &root),
                (None, errno) => cannot(errno),
            }
        })?;
        let file = File::from(fd);
        let kind = file.metadata().map_err(|source| LocalInputError::Open {
            path: shown.clone(),
            source,
        })?;
        if let Some(kind) = not_regular(kind.file_type()) {
            return Err(LocalInputError::NotRegular { path: shown, kind });
        }
        let name = relative
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "input".into());
        Ok(Self {
            file: Arc::new(file),
            shown,
            name,
        })
    }

    /// Reads the whole file from its descriptor, refusing one over `max_bytes`.
    pub async fn read(&self, max_bytes: u64) -> Result<Download, StorageError> {
        let file = Arc::clone(&self.file);
        let shown = self.shown.clone();
        let bytes = tokio::task::spawn_blocking(move || read_bounded(&file, max_bytes))
            .await
            .map_err(|error| std::io::Error::other(error.to_string()))
            .and_then(|read| read)
            .map_err(|source| StorageError::Io {
                action: format!("cannot read {shown}"),
                source,
            })?;
        let Some(bytes) = bytes else {
            return Err(StorageError::TooLarge {
                what: self.shown.clone(),
                limit_mib: max_bytes / (1024 * 1024),
            });
        };
        Ok(Download {
            content_type: Some(super::content_type_for(&self.name).to_string()),
            name: self.name.clone(),
            bytes,
        })
    }
}

fn refused_link(path: &str, link: &Path, root: &Path) -> LocalInputError {
    LocalInputError::SymbolicLink {
        path: path.to_string(),
        link: link.display().to_string(),
        root: root.display().to_string(),
    }
}

/// The resolved root `path` lies under and its path below it, `..` taken lexically (none may
/// climb out), when `path` starts with a root as declared or as resolved.
fn beneath(path: &Path, roots: &[PathBuf]) -> Option<(PathBuf, PathBuf)> {
    roots.iter().find_map(|root| {
        let resolved = root.canonicalize().ok()?;
        let rest = path
            .strip_prefix(root)
            .or_else(|_| path.strip_prefix(&resolved))
            .ok()?;
        let mut relative = PathBuf::new();
        for component in rest.components() {
            match component {
                Component::Normal(name) => relative.push(name),
                Component::CurDir => {}
                Component::ParentDir if relative.pop() => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
            }
        }
        Some((resolved, relative))
    })
}

/// Opens `relative` below the folder `root`, following no link: `openat2`, else the walk.
fn open_below(root: &OwnedFd, relative: &Path) -> Result<OwnedFd, Errno> {
    let target = if relative.as_os_str().is_empty() {
        Path::new(".")
    } else {
        relative
    };
    if !OPENAT2_UNAVAILABLE.load(Ordering::Relaxed) {
        let how = OpenHow::new().flags(FILE_FLAGS).resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
        match openat2(root, target, how) {
            Err(Errno::ENOSYS | Errno::EPERM) => {
                OPENAT2_UNAVAILABLE.store(true, Ordering::Relaxed);
            }
            opened => return opened,
        }
    }
    open_by_walk(root, relative)
}

/// The fallback without `openat2`: each folder on the way opened from the one before with
/// `O_NOFOLLOW | O_DIRECTORY`, then the file with `O_NOFOLLOW`. `relative` has no `..` (see
/// [`beneath`]), so nothing climbs above the root.
fn open_by_walk(root: &OwnedFd, relative: &Path) -> Result<OwnedFd, Errno> {
    let mut names: Vec<&std::ffi::OsStr> = relative.iter().collect();
    let last = names.pop().unwrap_or(std::ffi::OsStr::new("."));
    let mut folder: Option<OwnedFd> = None;
    for name in names {
        let from = folder.as_ref().unwrap_or(root);
        folder = Some(openat(from, name, FOLDER_FLAGS, Mode::empty())?);
    }
    openat(
        folder.as_ref().unwrap_or(root),
        last,
        FILE_FLAGS,
        Mode::empty(),
    )
}

/// The first link on `relative` below `root`, to name in the refusal (looked at after the open
/// failed: for the message only, never to decide what is read).
fn link_on(root: &OwnedFd, relative: &Path) -> Option<PathBuf> {
    let mut prefix = PathBuf::new();
    for name in relative {
        prefix.push(name);
        let stat = fstatat(root, &prefix, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
        if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK {
            return Some(prefix);
        }
    }
    None
}

/// What a file that is not a regular file is, in words.
fn not_regular(kind: std::fs::FileType) -> Option<&'static str> {
    if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a folder")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_block_device() || kind.is_char_device() {
        Some("a device")
    } else {
        Some("of an unknown kind")
    }
}

/// The whole of `file` from offset 0 (so every read of a shared descriptor sees all of it),
/// or `None` when it is, or grows, past `max_bytes`.
fn read_bounded(file: &File, max_bytes: u64) -> std::io::Result<Option<Vec<u8>>> {
    if file.metadata()?.len() > max_bytes {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    loop {
        let read = match file.read_at(&mut chunk, bytes.len() as u64) {
            Ok(0) => return Ok(Some(bytes)),
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        bytes.extend_from_slice(&chunk[..read]);
        if bytes.len() as u64 > max_bytes {
            return Ok(None);
        }
    }
}

/// Makes every later open in this process take the walk, as where `openat2` is missing.
#[cfg(test)]
pub(crate) fn without_openat2() {
    OPENAT2_UNAVAILABLE.store(true, Ordering::Relaxed);
}
