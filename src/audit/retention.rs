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
//! changes. A file whose last whole line cannot be read as a record is kept. With a signing
//! key ([`SignedBy`]), that time counts only once a signed checkpoint covers the line: each
//! chain is first checked against its signed checkpoints as `audit verify --key` checks it
//! (its missing first lines accounted for by signed retention lines), and a chain that does
//! not match them, or a file whose last line no signed checkpoint covers, is kept, with a
//! warning that says retention cannot tell its age. What was deleted records the signed
//! checkpoint it was checked against ([`SignedRoot`]), for the reviewer to compare with the
//! copies shipped elsewhere. Without a key nothing is signed, and the lines' times are as
//! trustworthy as the folder.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::chain::{self, Chain};
use super::note::VerifierKey;
use super::proof::SignedCheck;
use super::recovery::last_line;
use super::{CHAIN_SUFFIX, Record, file_name, lock_path, sha256_hex};
use crate::untrusted::door;

pub use super::pruned::{DroppedFile, MAX_LISTED_IDS, Pruned, RETENTION_STATUS, SignedRoot};

/// How retention checks a chain before it deletes any of it, when checkpoints are signed: the
/// log's key and the first part of every chain's origin (`<prefix>/<chain>`).
#[derive(Debug, Clone)]
pub struct SignedBy {
    /// The log's verifier key.
    pub key: VerifierKey,
    /// The origins' first part.
    pub prefix: String,
}

impl SignedBy {
    /// The key and prefix of a server signing as `origin` (`<prefix>/<its chain>`).
    pub fn of(key: VerifierKey, origin: &str) -> Self {
        let prefix = origin.rsplit_once('/').map_or(origin, |(prefix, _)| prefix);
        Self {
            key,
            prefix: prefix.to_string(),
        }
    }

    /// Each of `chains` checked against its signed checkpoints, in order.
    fn check(&self, chains: &[Chain]) -> Vec<SignedCheck> {
        let origin_of = |chain: &Chain| {
            let live = chain.files.last().cloned().unwrap_or_default();
            Some(format!("{}/{}", self.prefix, super::chain_name(&live)))
        };
        super::proof::check_signed_chains(chains, origin_of, &self.key, &[], &[]).0
    }
}

/// Deletes, under `folder`, the audit files older than `cutoff` (the rules in the module doc),
/// never `own` (the live file of the caller's chain). One chain at a time; an error on one file
/// is logged and that chain left as it is.
pub fn prune(
    folder: &Path,
    own: Option<&Path>,
    cutoff: SystemTime,
    signed: Option<&SignedBy>,
) -> Vec<DroppedFile> {
    let chains = match chain::chains(folder) {
        Ok(chains) => chains,
        Err(error) => {
            tracing::error!(folder = %folder.display(), %error, "retention: cannot list the audit folder");
            return Vec::new();
        }
    };
    let checks = signed.map(|by| by.check(&chains));
    let mut dropped = Vec::new();
    for (index, chain) in chains.iter().enumerate() {
        let check = checks.as_ref().and_then(|checks| checks.get(index));
        prune_chain(chain, own, cutoff, Judge::of(signed, check), &mut dropped);
    }
    dropped
}

/// [`prune`] for the one chain whose live file is `live` (`FILE_AGENT_AUDIT_FILE`): only its
/// rotated files may go.
pub fn prune_single(
    live: &Path,
    cutoff: SystemTime,
    signed: Option<&SignedBy>,
) -> Vec<DroppedFile> {
    let folder = live.parent().filter(|p| !p.as_os_str().is_empty());
    let folder = folder.unwrap_or_else(|| Path::new("."));
    let mut dropped = Vec::new();
    match chain::chains(folder) {
        Ok(chains) => {
            let checks = signed.map(|by| by.check(&chains));
            for (index, chain) in chains.iter().enumerate() {
                if chain.files.last().map(PathBuf::as_path) == Some(live)
                    || chain.files.last().and_then(|f| f.file_name()) == live.file_name()
                {
                    let check = checks.as_ref().and_then(|checks| checks.get(index));
                    let judge = Judge::of(signed, check);
                    prune_chain(chain, Some(live), cutoff, judge, &mut dropped);
                }
            }
        }
        Err(error) => {
            tracing::error!(folder = %folder.display(), %error, "retention: cannot list the audit folder")
        }
    }
    dropped
}

/// Whose word a file's age is taken on.
#[derive(Clone, Copy)]
enum Judge<'a> {
    /// No key: the last line's time, as written.
    Unsigned,
    /// A key: the chain checked against its signed checkpoints; only a covered line's time.
    Signed(&'a SignedCheck),
    /// A key, but the chain could not be checked: nothing goes.
    Unchecked,
}

impl<'a> Judge<'a> {
    fn of(signed: Option<&SignedBy>, check: Option<&'a SignedCheck>) -> Self {
        match (signed, check) {
            (None, _) => Judge::Unsigned,
            (Some(_), Some(check)) => Judge::Signed(check),
            (Some(_), None) => Judge::Unchecked,
        }
    }

    /// The signed root a file whose last line is line `seq` may be judged by: `Ok(None)`
    /// without a key; `Err` (why its age cannot be told) when the chain does not match its
    /// signed checkpoints or none covers that line.
    fn root_for(&self, seq: u64) -> Result<Option<SignedRoot>, String> {
        let check = match self {
            Judge::Unsigned => return Ok(None),
            Judge::Unchecked => return Err("its chain could not be checked".into()),
            Judge::Signed(check) => check,
        };
        if let Err(broken) = &check.chain {
            return Err(format!("its chain is broken: {broken}"));
        }
        if !check.problems.is_empty() {
            return Err(format!(
                "its chain does not match its signed checkpoints: {}",
                check.problems.join("; ")
            ));
        }
        match check.checkpoints.get(&check.covered) {
            Some(point) if seq >= 1 && seq <= check.covered => {
                use base64::Engine;
                Ok(Some(SignedRoot {
                    origin: check.origin.clone(),
                    size: check.covered,
                    root: base64::engine::general_purpose::STANDARD.encode(point.root),
                }))
            }
            _ => Err(format!(
                "its last line, #{seq}, is covered by no signed checkpoint (they cover {} lines), so its time is no one's word",
                check.covered
            )),
        }
    }
}

fn prune_chain(
    chain: &Chain,
    own: Option<&Path>,
    cutoff: SystemTime,
    judge: Judge,
    out: &mut Vec<DroppedFile>,
) {
    let live = chain
        .files
        .last()
        .filter(|f| f.to_string_lossy().ends_with(CHAIN_SUFFIX));
    let rotated = chain.files.iter().filter(|f| Some(*f) != live);
    for file in rotated {
        match aged(file, cutoff, judge) {
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
        prune_idle_live(live, cutoff, judge, out);
    }
}

/// The live file of a chain nobody writes: take its lock so that no server starts writing
/// it while it goes, then delete it whole if it has aged out.
fn prune_idle_live(live: &Path, cutoff: SystemTime, judge: Judge, out: &mut Vec<DroppedFile>) {
    let lock_path = lock_path(live);
    let Ok(lock) = door::open_lock(&lock_path, false) else {
        return; // no lock file: a trail from before locks (`audit.jsonl`) is left alone
    };
    if lock.try_lock().is_err() {
        return; // a server writes it
    }
    if let Some(dropped) = aged(live, cutoff, judge)
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
/// `cutoff` by the word of `judge`; `None` when it is younger, empty or unreadable, or when
/// its age cannot be told from what was signed (then a warning says why it is kept).
fn aged(file: &Path, cutoff: SystemTime, judge: Judge) -> Option<DroppedFile> {
    let line = last_line(&door::open_read(file).ok()?).ok()??;
    let record: Record = serde_json::from_slice(&line).ok()?;
    let time = crate::time::parse_rfc3339(&record.time)?;
    if time >= cutoff {
        return None;
    }
    let signed = match judge.root_for(record.seq) {
        Ok(signed) => signed,
        Err(why) => {
            tracing::warn!(file = %file.display(), "retention: cannot tell the age of an audit file from what was signed, so it is kept: {why}");
            return None;
        }
    };
    Some(DroppedFile {
        file: String::new(),
        last_seq: record.seq,
        last_hash: sha256_hex(&line),
        last_time: record.time,
        signed,
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
