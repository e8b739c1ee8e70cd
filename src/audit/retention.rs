//! Retention of the audit trail: files whose last line is older than the cut-off are deleted
//! whole, oldest first, and never edited. What survives still verifies: a chain whose first
//! files are gone "continues an earlier file" (its first `prev` is the hash of the last line
//! dropped), and the server that dropped them says so in a line of its own chain
//! ([`Pruned`]), with each dropped file's last `seq` and last line's hash, so a reviewer can
//! tell retention from a file removed by hand.
//!
//! Which files may go:
//! - a rotated file (`<name>.jsonl.<seq>`) of any chain in the folder, from the oldest on,
//!   while its last line is older than the cut-off: rotated files are never written again, so
//!   any server sharing the folder may drop them, and two doing it at once is harmless (a
//!   file already gone is skipped);
//! - the live file of a chain no server writes any more (its lock is free: a replica that is
//!   gone, such as a Kubernetes pod replaced by another), once its last line is older than the
//!   cut-off and all its rotated files are gone too: the whole chain has aged out, and its
//!   tree and checkpoints files go with it;
//! - never a chain's tree file otherwise: it keeps the hashes of the lines deleted, so that
//!   proofs and checkpoints still cover them;
//! - never the live file of a chain a server holds, and never the caller's own.
//!
//! A file's age is the time written in its last line, not its mtime, which a backup or a copy
//! changes. A file whose last whole line cannot be read as a record is kept.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::chain::{self, Chain};
use super::recovery::last_line;
use super::{CHAIN_SUFFIX, Record, file_name, lock_path, sha256_hex};

pub use super::pruned::{DroppedFile, MAX_LISTED_IDS, Pruned, RETENTION_STATUS};

/// Deletes, under `folder`, the audit files older than `cutoff` (the rules in the module doc),
/// never `own` (the live file of the caller's chain). One chain at a time; an error on one file
/// is logged and that chain left as it is.
pub fn prune(folder: &Path, own: Option<&Path>, cutoff: SystemTime) -> Vec<DroppedFile> {
    let chains = match chain::chains(folder) {
        Ok(chains) => chains,
        Err(error) => {
            tracing::error!(folder = %folder.display(), %error, "retention: cannot list the audit folder");
            return Vec::new();
        }
    };
    let mut dropped = Vec::new();
    for chain in chains {
        prune_chain(&chain, own, cutoff, &mut dropped);
    }
    dropped
}

/// [`prune`] for the one chain whose live file is `live` (`FILE_AGENT_AUDIT_FILE`): only its
/// rotated files may go.
pub fn prune_single(live: &Path, cutoff: SystemTime) -> Vec<DroppedFile> {
    let folder = live.parent().filter(|p| !p.as_os_str().is_empty());
    let folder = folder.unwrap_or_else(|| Path::new("."));
    let mut dropped = Vec::new();
    match chain::chains(folder) {
        Ok(chains) => {
            for chain in chains {
                if chain.files.last().map(PathBuf::as_path) == Some(live)
                    || chain.files.last().and_then(|f| f.file_name()) == live.file_name()
                {
                    prune_chain(&chain, Some(live), cutoff, &mut dropped);
                }
            }
        }
        Err(error) => {
            tracing::error!(folder = %folder.display(), %error, "retention: cannot list the audit folder")
        }
    }
    dropped
}

fn prune_chain(chain: &Chain, own: Option<&Path>, cutoff: SystemTime, out: &mut Vec<DroppedFile>) {
    let live = chain
        .files
        .last()
        .filter(|f| f.to_string_lossy().ends_with(CHAIN_SUFFIX));
    let rotated = chain.files.iter().filter(|f| Some(*f) != live);
    for file in rotated {
        match aged(file, cutoff) {
            Some(dropped) => {
                if delete(file, dropped, out).is_err() {
                    return;
                }
            }
            // The rest are newer: the chain keeps them, and its live file.
            None => return,
        }
    }
    let Some(live) = live else { return };
    if !own.is_some_and(|own| same_file(own, live)) {
        prune_idle_live(live, cutoff, out);
    }
}

/// The live file of a chain nobody writes: take its lock so that no server starts writing
/// it while it goes, then delete it whole if it has aged out.
fn prune_idle_live(live: &Path, cutoff: SystemTime, out: &mut Vec<DroppedFile>) {
    let lock_path = lock_path(live);
    let Ok(lock) = std::fs::OpenOptions::new().write(true).open(&lock_path) else {
        return; // no lock file: a trail from before locks (`audit.jsonl`) is left alone
    };
    if lock.try_lock().is_err() {
        return; // a server writes it
    }
    if let Some(dropped) = aged(live, cutoff)
        && let Ok(true) = delete(live, dropped, out)
    {
        // The whole chain has aged out: its tree and its checkpoints go with it (the
        // checkpoints' copies are in the shipped logs).
        let _ = std::fs::remove_file(super::tree::path_of(live));
        let _ = std::fs::remove_file(super::checkpoints::path_of(live));
        let _ = std::fs::remove_file(&lock_path);
    }
}

/// Deletes `file` and adds it to `out`: `Ok(true)` when deleted here, `Ok(false)` when it was
/// gone already (another server pruning the same folder took it first), `Err` (logged) when
/// it could not be deleted.
fn delete(file: &Path, mut dropped: DroppedFile, out: &mut Vec<DroppedFile>) -> Result<bool, ()> {
    match std::fs::remove_file(file) {
        Ok(()) => {
            dropped.file = file_name(file);
            out.push(dropped);
            Ok(true)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => {
            tracing::error!(file = %file.display(), %error, "retention: cannot delete an audit file");
            Err(())
        }
    }
}

/// The file's last line as a [`DroppedFile`] (without its name) when it is older than
/// `cutoff`; `None` when it is younger, empty or unreadable.
fn aged(file: &Path, cutoff: SystemTime) -> Option<DroppedFile> {
    let line = last_line(&std::fs::File::open(file).ok()?).ok()??;
    let record: Record = serde_json::from_slice(&line).ok()?;
    let time = crate::time::parse_rfc3339(&record.time)?;
    (time < cutoff).then(|| DroppedFile {
        file: String::new(),
        last_seq: record.seq,
        last_hash: sha256_hex(&line),
        last_time: record.time,
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
