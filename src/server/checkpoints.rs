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
    // When the last checkpoint was signed: the next round for waiting calls begins a window
    // later at the earliest. (A round that found no new line signed nothing, and does not
    // count.)
    let mut signed = Instant::now() - window;
    let mut periodic = Instant::now() + every;
    loop {
        let timeout = tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep_until(periodic) => WITNESS_TIMEOUT,
            () = batcher.wanted() => {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep_until(signed + window) => WITNESS_WAIT,
                }
            }
        };
        let began = Instant::now();
        if batcher.round(timeout).await {
            signed = began;
        }
        periodic = began + every;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::checkpoints::Signing;
    use crate::audit::note::{ED25519_ALGORITHM, SignerKey};
    use crate::audit::receipt::{self, Entry};
    use crate::audit::{Receipt, Record};

    /// A signing trail in `dir`, and its batcher (a window of one second).
    fn signing_trail(dir: &std::path::Path) -> Arc<Batcher> {
        signing_trail_every(dir, Duration::from_secs(60))
    }

    /// [`signing_trail`] with checkpoint interval `every`.
    fn signing_trail_every(dir: &std::path::Path, every: Duration) -> Arc<Batcher> {
        let key = SignerKey::from_seed("batches.test/audit", &[3; 32], ED25519_ALGORITHM).unwrap();
        let config = Config::from_lookup(|_| None).unwrap().audit;
        let log = AuditLog::open(&dir.join("chain.jsonl"), config).unwrap();
        let signing = Signing::new(
            key,
            "batches.test/audit/chain".into(),
            Vec::new(),
            dir.join("chain.jsonl.checkpoints"),
        );
        let log = Arc::new(log.with_signing(signing).unwrap());
        Arc::new(Batcher::new(log, every))
    }

    /// The checkpoint task of `batcher`, a periodic round each minute, and what stops it.
    fn start(batcher: &Arc<Batcher>) -> (CancellationToken, JoinHandle<()>) {
        start_every(batcher, Duration::from_secs(60))
    }

    /// [`start`] with a periodic round every `every`.
    fn start_every(batcher: &Arc<Batcher>, every: Duration) -> (CancellationToken, JoinHandle<()>) {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(batched(batcher.clone(), every, shutdown.clone()));
        (shutdown, task)
    }

    fn line(batcher: &Batcher) -> Receipt {
        batcher
            .log()
            .append(Record {
                time: crate::time::rfc3339_now(),
                status: "ok".into(),
                ..Record::default()
            })
            .unwrap()
    }

    #[tokio::test]
    async fn calls_ending_within_a_window_share_one_checkpoint_and_each_receipt_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let batcher = signing_trail(dir.path());
        let (shutdown, task) = start(&batcher);
        let started = Instant::now();
        let mut calls = Vec::new();
        for _ in 0..8 {
            let receipt = line(&batcher);
            let batcher = batcher.clone();
            calls.push(tokio::spawn(
                async move { batcher.signed(vec![receipt]).await },
            ));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut sizes = std::collections::BTreeSet::new();
        let key = batcher.log().signing().unwrap().verifier();
        for call in calls {
            let entries: Vec<Entry> = call.await.unwrap();
            let entry = &entries[0];
            assert_eq!(entry.unsigned, None, "{entry:?}");
            receipt::verify(entry, &key, None, None, &[]).unwrap();
            sizes.insert(entry.tree_size.unwrap());
        }
        // The first call's round runs at once, the others wait for the window's end and share
        // the next: two signatures for eight calls, within about a window.
        assert_eq!(sizes.len(), 2, "{sizes:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let kept =
            crate::audit::checkpoints::read(&dir.path().join("chain.jsonl.checkpoints")).unwrap();
        assert_eq!(kept.len(), 2);
        shutdown.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn on_a_quiet_server_a_call_is_signed_at_once_however_recent_an_empty_periodic_round() {
        let dir = tempfile::tempdir().unwrap();
        let every = Duration::from_secs(1);
        let batcher = signing_trail_every(dir.path(), every);
        let (shutdown, task) = start_every(&batcher, every);
        // A periodic round found no line at 1 s; the call ends half a window later.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let asked = Instant::now();
        let entries = batcher.signed(vec![line(&batcher)]).await;
        let waited = asked.elapsed();
        assert!(entries[0].checkpoint.is_some(), "{entries:?}");
        assert!(waited < Duration::from_millis(250), "waited {waited:?}");
        shutdown.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn without_a_signer_an_answer_waits_its_bound_then_says_it_is_unsigned() {
        let dir = tempfile::tempdir().unwrap();
        let batcher = signing_trail(dir.path());
        let receipt = line(&batcher);
        let bound = Duration::from_millis(300);
        let started = Instant::now();
        let entries = batcher.signed_within(vec![receipt.clone()], bound).await;
        let waited = started.elapsed();
        assert!(waited >= bound && waited < bound * 3, "{waited:?}");
        let reason = entries[0].unsigned.as_deref().unwrap();
        assert!(
            reason.contains("no checkpoint covered line 1 within 0.3 s"),
            "{reason}"
        );
        assert_eq!(entries[0].line.as_deref(), Some(&*receipt.line));
        assert_eq!(entries[0].checkpoint, None);
    }

    #[tokio::test]
    async fn at_shutdown_the_waiting_calls_get_their_checkpoint_and_later_ones_are_told_none_comes()
    {
        let dir = tempfile::tempdir().unwrap();
        let batcher = signing_trail(dir.path());
        let (shutdown, task) = start(&batcher);
        shutdown.cancel();
        task.await.unwrap();
        let entries = batcher.signed(vec![line(&batcher)]).await;
        let reason = entries[0].unsigned.as_deref().unwrap();
        assert!(reason.contains("the server was stopping"), "{reason}");
    }
}
