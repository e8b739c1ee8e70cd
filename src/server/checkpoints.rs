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
    let mut schedule = Schedule::new(Instant::now(), batcher.window(), every);
    loop {
        let timeout = tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep_until(schedule.periodic) => WITNESS_TIMEOUT,
            () = batcher.wanted() => {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep_until(schedule.for_calls()) => WITNESS_WAIT,
                }
            }
        };
        let began = Instant::now();
        let signed = batcher.round(timeout).await;
        schedule.ran(began, signed);
    }
    batcher.round(WITNESS_WAIT).await;
    batcher.close();
}

/// When the batched rounds may begin: one for waiting calls a batching window after the last
/// round that signed a checkpoint (a round that found no new line signed nothing and starts no
/// window: a call on a quiet server is signed at once), a periodic one `every` after the last
/// round of either kind.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    window: Duration,
    every: Duration,
    /// When the last round that signed began.
    signed: Instant,
    /// When the next periodic round begins.
    periodic: Instant,
}

impl Schedule {
    /// The schedule of a task started at `now`: no round has signed yet.
    fn new(now: Instant, window: Duration, every: Duration) -> Self {
        Self {
            window,
            every,
            signed: now - window,
            periodic: now + every,
        }
    }

    /// The earliest a round for waiting calls may begin.
    fn for_calls(&self) -> Instant {
        self.signed + self.window
    }

    /// A round began at `began`, and signed a checkpoint or not.
    fn ran(&mut self, began: Instant, signed: bool) {
        if signed {
            self.signed = began;
        }
        self.periodic = began + self.every;
    }
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

    /// On a quiet server a call is signed at once, however recent an empty periodic round: a
    /// round that signed nothing starts no batching window. Told by the schedule itself, not
    /// by timing a call (a 250 ms bound on a real call was missed at load 16 on two cores).
    #[test]
    fn an_empty_round_starts_no_window_and_a_signing_one_does() {
        let (window, every) = (Duration::from_secs(1), Duration::from_secs(1));
        let start = Instant::now();
        let mut schedule = Schedule::new(start, window, every);
        assert!(
            schedule.for_calls() <= start,
            "the first call's round begins at once"
        );
        assert_eq!(schedule.periodic, start + every);
        // The periodic round at 1 s found no line: a call half a window later begins at once.
        let empty = start + every;
        schedule.ran(empty, false);
        assert!(schedule.for_calls() <= start, "{schedule:?}");
        assert_eq!(schedule.periodic, empty + every);
        // A round that signed at 1.5 s: the next call's round waits until 2.5 s.
        let signing = start + Duration::from_millis(1500);
        schedule.ran(signing, true);
        assert_eq!(schedule.for_calls(), signing + window);
        assert_eq!(schedule.periodic, signing + every);
    }

    /// The task wired to that schedule: a call after an empty periodic round is answered with
    /// its checkpoint.
    #[tokio::test]
    async fn after_an_empty_periodic_round_a_call_is_signed() {
        let dir = tempfile::tempdir().unwrap();
        let every = Duration::from_secs(1);
        let batcher = signing_trail_every(dir.path(), every);
        let (shutdown, task) = start_every(&batcher, every);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let entries = batcher.signed(vec![line(&batcher)]).await;
        assert!(entries[0].checkpoint.is_some(), "{entries:?}");
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
