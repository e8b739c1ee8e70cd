//! The audit trail's checkpoints over time (`FILE_AGENT_AUDIT_SIGNING_KEY_FILE`): a round
//! every `FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL` when lines came since the last one, and a
//! last round at shutdown, once the calls have ended, so the last lines are signed too. A
//! round signs, has the witnesses cosign and keeps the checkpoint
//! (`audit::witness::checkpoint_round`); it runs in this task, never in a call.
//!
//! With signed receipts (`FILE_AGENT_AUDIT_RECEIPTS=signed`) answers wait for the checkpoint
//! that covers their lines (`audit::receipt::Batcher`): a call that waits starts a round at
//! once when none ran within the batching window, else at the window's end, so that the
//! calls ending within one window share one signature, and a round is never signed per call.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::audit::AuditLog;
use crate::audit::receipt::{Batcher, WITNESS_WAIT};
use crate::audit::witness::{WITNESS_TIMEOUT, checkpoint_round};
use crate::config::Config;
use crate::tools::Tools;

/// How long the witnesses may take in the last round, at shutdown.
const LAST_ROUND_WITNESS_TIMEOUT: Duration = Duration::from_secs(3);

/// Starts the rounds when checkpoints are signed, until `shutdown`.
pub fn spawn(
    tools: &Tools,
    config: &Config,
    shutdown: CancellationToken,
) -> Option<JoinHandle<()>> {
    let audit = tools.audit_log()?.clone();
    audit.signing()?;
    let every = config.audit.checkpoint_interval;
    Some(match tools.signed_receipts().cloned() {
        None => tokio::spawn(periodic(audit, every, shutdown)),
        Some(batcher) => tokio::spawn(batched(batcher, every, shutdown)),
    })
}

/// A round every `every`, until `shutdown`.
async fn periodic(audit: Arc<AuditLog>, every: Duration, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(every) => {}
        }
        checkpoint_round(&audit, WITNESS_TIMEOUT).await;
    }
}

/// A round every `every`, and one for waiting calls at most every batching window, until
/// `shutdown`; then one more for the calls waiting, and the rest are told none comes.
async fn batched(batcher: Arc<Batcher>, every: Duration, shutdown: CancellationToken) {
    let window = batcher.window();
    // When the last round began: the next for waiting calls begins a window later at the
    // earliest.
    let mut last = Instant::now() - window;
    loop {
        let timeout = tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep_until(last + every) => WITNESS_TIMEOUT,
            () = batcher.wanted() => {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep_until(last + window) => WITNESS_WAIT,
                }
            }
        };
        last = Instant::now();
        batcher.round(timeout).await;
    }
    batcher.round(WITNESS_WAIT).await;
    batcher.close();
}

/// The round at shutdown: the lines written since the last round are signed.
pub async fn last_round(tools: &Tools) {
    if let Some(audit) = tools.audit_log() {
        checkpoint_round(audit, LAST_ROUND_WITNESS_TIMEOUT).await;
    }
}
