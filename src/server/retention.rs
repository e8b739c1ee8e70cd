//! Retention (`FILE_AGENT_FILES_RETENTION_DAYS`, `FILE_AGENT_AUDIT_RETENTION_DAYS`, both off
//! unless set): at start-up and then every [`RETENTION_INTERVAL`], the local store's files and
//! the audit folder's files older than their setting are deleted, and one line of this
//! server's audit chain says what went ([`Pruned`]). What may go, and how a file's age is
//! told, is in `storage::local` (a stored file's modification time) and `audit::retention`
//! (the time of an audit file's last line; rotated files and chains nobody writes, never a
//! live file a server holds, never edited).

use std::time::SystemTime;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::audit::Record;
use crate::audit::retention::{self, MAX_LISTED_IDS, Pruned, RETENTION_STATUS, SignedBy};
use crate::config::{AuditPlace, Config, RETENTION_INTERVAL, RetentionConfig};
use crate::sandbox::Runner;
use crate::tools::Tools;

/// Starts the pruning task when a retention is set: once now, then every
/// [`RETENTION_INTERVAL`], until `shutdown`.
pub fn spawn(
    tools: &Tools,
    config: &Config,
    shutdown: CancellationToken,
) -> Option<JoinHandle<()>> {
    let retention = config.retention;
    if !retention.enabled() {
        return None;
    }
    if retention.files.is_some() && tools.storage().local().is_none() {
        tracing::warn!(
            "FILE_AGENT_FILES_RETENTION_DAYS is set but files are stored in Open WebUI, which keeps them by its own rules: only the audit retention applies"
        );
    }
    let (tools, place) = (tools.clone(), config.audit.place.clone());
    Some(tokio::spawn(async move {
        loop {
            let (tools, place) = (tools.clone(), place.clone());
            let pass = tokio::task::spawn_blocking(move || prune_once(&tools, retention, &place));
            if let Err(error) = pass.await {
                tracing::error!(%error, "retention: the pruning pass failed");
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(RETENTION_INTERVAL) => {}
            }
        }
    }))
}

/// One pass: deletes what has aged out and, when anything went, appends the line that says
/// so. Returns what went.
pub fn prune_once<R: Runner>(
    tools: &Tools<R>,
    retention: RetentionConfig,
    place: &AuditPlace,
) -> Option<Pruned> {
    let now = SystemTime::now();
    let cutoff = |age| now.checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
    let own = tools.audit_log().map(|log| log.path().to_path_buf());
    // With a key, a chain goes only once checked against its signed checkpoints.
    let signed = tools
        .audit_log()
        .and_then(|log| log.signing())
        .map(|signing| SignedBy::of(signing.verifier(), signing.origin()));
    let mut pruned = Pruned::default();
    if let Some(age) = retention.audit {
        let (before, signed) = (cutoff(age), signed.as_ref());
        pruned.audit_before = Some(crate::time::format_rfc3339(before));
        pruned.audit_files = match place {
            AuditPlace::Folder(folder) => retention::prune(folder, own.as_deref(), before, signed),
            AuditPlace::File(path) => retention::prune_single(path, before, signed),
            AuditPlace::Off => Vec::new(),
        };
    }
    if let (Some(age), Some(store)) = (retention.files, tools.storage().local()) {
        let ids = store.prune(cutoff(age));
        pruned.stored_files = ids.len() as u64;
        pruned.stored_ids = ids.into_iter().take(MAX_LISTED_IDS).collect();
        pruned.files_before = Some(crate::time::format_rfc3339(cutoff(age)));
    }
    if pruned.audit_files.is_empty() && pruned.stored_files == 0 {
        return None;
    }
    tracing::info!(
        audit_files = pruned.audit_files.len(),
        stored_files = pruned.stored_files,
        "retention: deleted what had aged out"
    );
    if let Some(log) = tools.audit_log() {
        record(log, &pruned);
    }
    Some(pruned)
}

/// The `retention` line: what a pruning deleted, in the audit trail.
fn record(log: &crate::audit::AuditLog, pruned: &Pruned) {
    let record = Record {
        time: crate::time::rfc3339_now(),
        author: "file-agent".into(),
        status: RETENTION_STATUS.into(),
        pruned: Some(pruned.clone()),
        ..Record::default()
    };
    if let Err(error) = log.append(record) {
        tracing::error!(%error, "could not write the audit trail");
    }
}
