//! The files of a chain on disk: the name of its live file, of its lock, of its rotated
//! files and of the files that live beside it; taking its lock; cutting back a file; finding
//! the chain's head (its last line) at start-up. It holds no state and writes no line: the
//! writer (`writer.rs`) does that, with these names.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::{AuditError, GENESIS, Record, chain, recovery, sha256_hex};
use crate::untrusted::door;

/// The file name of a chain's live file: `<name>.jsonl`.
pub const CHAIN_SUFFIX: &str = ".jsonl";

/// `path` with `suffix` added to its file name (`audit.jsonl` → `audit.jsonl<suffix>`): the
/// files that live beside a chain file, its lock, its rotated files, a recovery's side files,
/// its tree and its checkpoints.
pub(crate) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// The lock file of the chain file `path`: `<path>.lock`.
pub(super) fn lock_path(path: &Path) -> PathBuf {
    beside(path, ".lock")
}

/// The file name of `path`, as a line of the trail names a file of the audit folder.
pub(super) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Takes `<path>.lock`, or says which other writer holds it.
pub(super) fn lock_chain(path: &Path) -> Result<File, AuditError> {
    let lock_path = lock_path(path);
    let error = |source| AuditError {
        path: path.display().to_string(),
        action: "locked",
        source,
    };
    let lock = door::open_lock(&lock_path, true).map_err(error)?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(error(std::io::Error::other(
            "another file-agent server writes this chain; give each server that shares the folder its own SANDBOX_INSTANCE (under Kubernetes, POD_NAME)",
        ))),
        Err(std::fs::TryLockError::Error(source)) => Err(error(source)),
    }
}

/// `audit.jsonl` → `audit.jsonl.000000001234`, numbered by its last line's `seq`, so that
/// the rotated files sort in chain order.
pub(super) fn rotated_name(path: &Path, last_seq: u64) -> PathBuf {
    beside(path, &format!(".{last_seq:012}"))
}

/// Cuts `file` back to `size` and syncs it.
pub(super) fn cut_back(file: &File, size: u64) -> std::io::Result<()> {
    file.set_len(size)?;
    file.sync_data()
}

/// The hex SHA-256 and `seq` of the chain's last line: the live file's last whole line; when
/// it holds none (a crash right after a rotation, or a first line cut as unfinished), the
/// newest rotated file's; the genesis for a new chain.
pub(super) fn chain_head(
    file: &File,
    path: &Path,
) -> std::io::Result<(String, u64, Option<Vec<u8>>)> {
    let mut line = recovery::last_line(file)?;
    if line.is_none()
        && let Some(rotated) = chain::newest_rotated(path)?
    {
        line = recovery::last_line(&door::open_read(&rotated)?)?;
    }
    Ok(match line {
        None => (GENESIS.to_string(), 0, None),
        Some(line) => {
            let seq = serde_json::from_slice::<Record>(&line).map_or(0, |r| r.seq);
            (sha256_hex(&line), seq, Some(line))
        }
    })
}

/// The name of the chain whose live file is `path`: its file name without `.jsonl`.
pub fn chain_name(path: &Path) -> String {
    let name = file_name(path);
    name.strip_suffix(CHAIN_SUFFIX).unwrap_or(&name).to_string()
}
