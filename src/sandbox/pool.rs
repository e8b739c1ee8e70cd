//! The warm pool: single-use containers started *before* the request, so that their start-up
//! (create, verify, start, and the runner importing pandas and friends) is off an attempt's
//! critical path. Each is launched exactly like a cold one ([`Launcher::launch`], the same
//! policy, verified, fail closed), then its runner imports the libraries, says `READY` and
//! blocks on stdin. An attempt takes one, sends its request, and the container is removed after
//! it as any other: **a container serves at most one attempt, ever**. Nothing here hands a used
//! container back.
//!
//! A keeper task holds the pool at its target. It replaces a container that waited longer than
//! `max_idle` (so a long-idle server holds no stale interpreters) and backs off when launches
//! fail. It refills after a take at once when other attempts are running or waiting (under load
//! the pool must keep up), and otherwise when the attempt that took the container has ended, so
//! that a lone attempt does not share the CPU with the refill.
//!
//! When no container is ready, [`WarmPool::take`] waits for one that is already being started,
//! but only until the pool's recent launches say it should be ready (never longer than starting
//! a container anew takes), and only one waiter per launch; otherwise it returns `None` at once
//! and the attempt starts a cold container. Under load this keeps every attempt to one
//! container's work instead of a cold one plus a refill. On shutdown [`WarmPool::drain`] stops
//! the keeper and removes what is ready; launches under way see the stop and remove theirs.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use super::SandboxError;
use super::launch::Launcher;
use super::policy::{self, Kind};
use super::started::{OutputStream, Started};

/// What the runner writes on stdout once its imports are done (`READY` in runner.py).
const READY: &[u8] = b"--file-agent-ready--\n";
/// How long a warm runner may take to import its libraries before it is given up.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// stderr kept from a runner that failed to become ready, for the log.
const STDERR_KEPT: usize = 4096;
/// The first pause after a failed launch; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_START: Duration = Duration::from_secs(1);
/// The longest pause between launches while they keep failing.
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// What a launch is assumed to take before one has been measured.
const FIRST_LAUNCH_GUESS: Duration = Duration::from_millis(1500);

/// A snapshot of the pool, for `/health` and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Containers the pool keeps ready.
    pub target: usize,
    /// Containers ready now.
    pub ready: usize,
    /// Containers being started.
    pub starting: usize,
    /// Attempts that took a warm container (at once, or after waiting for one).
    pub takes: u64,
    /// Attempts that found none ready in time (or had too large an upload) and started a
    /// cold one.
    pub misses: u64,
    /// Ready containers removed unused because they waited too long or had died.
    pub replaced: u64,
    /// Launches that failed.
    pub failures: u64,
}

/// A container that is ready, and since when.
struct Ready {
    started: Started,
    since: Instant,
}

/// What the pool holds, under one lock.
#[derive(Default)]
struct State {
    /// Oldest first: an attempt takes the one that has waited longest.
    ready: VecDeque<Ready>,
    /// Launches under way: their number and when each began, oldest first.
    launching: VecDeque<(u64, Instant)>,
    /// Attempts waiting for a launch under way, first come first served; at most one per
    /// launch.
    waiters: VecDeque<oneshot::Sender<Option<Started>>>,
}

/// The pool; cheap to share (`Arc` inside the sandbox).
pub(crate) struct WarmPool {
    shared: Arc<Shared>,
}

struct Shared {
    launcher: Launcher,
    target: usize,
    max_idle: Duration,
    /// The largest upload a warm container's `/work` holds.
    capacity: u64,
    state: Mutex<State>,
    /// Attempts between getting a container and their end (warm or cold).
    attempts: AtomicUsize,
    /// Numbers the launches.
    next_launch: AtomicU64,
    /// Moving average of how long a launch takes to be ready, in milliseconds.
    launch_ms: AtomicU64,
    /// Wakes the keeper: after a take, an attempt's end, a finished launch, or a failure.
    wake: Notify,
    /// Fired by [`WarmPool::drain`]: the keeper ends and launches under way give up.
    stop: CancellationToken,
    /// No launch before this, after failures.
    not_before: Mutex<Option<Instant>>,
    /// Failed launches in a row, for the back-off.
    failed_in_row: AtomicU64,
    takes: AtomicU64,
    misses: AtomicU64,
    replaced: AtomicU64,
    failures: AtomicU64,
}

/// Held by an attempt from getting its container to its end; the pool refills a lone attempt's
/// container when this drops.
pub(crate) struct AttemptGuard {
    shared: Arc<Shared>,
}

impl Drop for AttemptGuard {
    fn drop(&mut self) {
        self.shared.attempts.fetch_sub(1, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }
}

impl WarmPool {
    /// Starts the keeper, which fills the pool to `target` containers in the background.
    pub(crate) fn start(launcher: Launcher, target: usize, max_idle: Duration) -> Self {
        let shared = Arc::new(Shared {
            capacity: policy::warm_upload_capacity(&launcher.config),
            launcher,
            target,
            max_idle,
            state: Mutex::new(State::default()),
            attempts: AtomicUsize::new(0),
            next_launch: AtomicU64::new(0),
            launch_ms: AtomicU64::new(FIRST_LAUNCH_GUESS.as_millis() as u64),
            wake: Notify::new(),
            stop: CancellationToken::new(),
            not_before: Mutex::new(None),
            failed_in_row: AtomicU64::new(0),
            takes: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            replaced: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        });
        let tracker = shared.launcher.tracker.clone();
        tracker.spawn(keep(shared.clone()));
        Self { shared }
    }

    /// Counts an attempt as under way until the guard drops (every attempt, warm or cold: the
    /// keeper refills at once only when attempts overlap).
    pub(crate) fn attempt(&self) -> AttemptGuard {
        self.shared.attempts.fetch_add(1, Ordering::SeqCst);
        AttemptGuard {
            shared: self.shared.clone(),
        }
    }

    /// A warm container for an upload of `upload_bytes`: a ready one, or one already being
    /// started when it is expected before a new one could be; else `None` and the attempt
    /// starts a cold container.
    pub(crate) async fn take(
        &self,
        upload_bytes: u64,
        cancel: &CancellationToken,
    ) -> Option<Started> {
        let shared = &self.shared;
        if upload_bytes > shared.capacity || shared.stop.is_cancelled() {
            shared.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let waiting = match shared.claim() {
            Claim::Ready(started) => {
                shared.takes.fetch_add(1, Ordering::Relaxed);
                shared.wake.notify_one();
                return Some(started);
            }
            Claim::Wait(receiver, until) => Some((receiver, until)),
            Claim::Nothing => None,
        };
        shared.wake.notify_one();
        let taken = match waiting {
            None => None,
            // When the time is up the receiver is dropped, and the launch goes to the next
            // waiter or to the ready queue.
            Some((receiver, until)) => tokio::select! {
                delivered = receiver => delivered.ok().flatten(),
                () = tokio::time::sleep_until(until.into()) => None,
                () = cancel.cancelled() => None,
            },
        };
        let counter = if taken.is_some() {
            &shared.takes
        } else {
            &shared.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        taken
    }

    /// The numbers, now.
    pub(crate) fn stats(&self) -> PoolStats {
        let shared = &self.shared;
        let (ready, starting) = {
            let state = shared.lock_state();
            (state.ready.len(), state.launching.len())
        };
        PoolStats {
            target: shared.target,
            ready,
            starting,
            takes: shared.takes.load(Ordering::Relaxed),
            misses: shared.misses.load(Ordering::Relaxed),
            replaced: shared.replaced.load(Ordering::Relaxed),
            failures: shared.failures.load(Ordering::Relaxed),
        }
    }

    /// Stops refilling and removes every ready container; launches under way remove theirs.
    pub(crate) async fn drain(&self) {
        self.shared.stop.cancel();
        let ready: Vec<Ready> = {
            let mut state = self.shared.lock_state();
            state.waiters.clear();
            state.ready.drain(..).collect()
        };
        for entry in ready {
            if let Err(error) = entry.started.guard.remove().await {
                tracing::warn!(%error, "could not remove a warm container at shutdown");
            }
        }
    }
}

/// What a take found under the lock.
enum Claim {
    /// A ready container, taken.
    Ready(Started),
    /// The launch it may wait for, and until when: the receiver gets it when it is ready.
    Wait(oneshot::Receiver<Option<Started>>, std::time::Instant),
    /// Nothing ready, and every launch already has a waiter.
    Nothing,
}

impl Shared {
    /// Under the lock: a ready container if there is one, else a claim on the oldest launch
    /// nobody waits for yet, expected at its start plus the usual launch time and a quarter.
    fn claim(&self) -> Claim {
        let mut state = self.lock_state();
        state.waiters.retain(|waiter| !waiter.is_closed());
        if let Some(started) = self.pop_ready(&mut state) {
            return Claim::Ready(started);
        }
        let unclaimed = state
            .launching
            .get(state.waiters.len())
            .map(|(_, began)| *began);
        let Some(began) = unclaimed else {
            return Claim::Nothing;
        };
        let (sender, receiver) = oneshot::channel();
        state.waiters.push_back(sender);
        let expected = Duration::from_millis(self.launch_ms.load(Ordering::Relaxed));
        Claim::Wait(receiver, began + expected + expected / 4)
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // The lock is held for pushes and pops only; a panic cannot leave the state half-made.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The oldest ready container that is still fresh and alive; stale or dead ones on the way
    /// are removed.
    fn pop_ready(&self, state: &mut State) -> Option<Started> {
        while let Some(mut candidate) = state.ready.pop_front() {
            if candidate.since.elapsed() < self.max_idle && alive(&mut candidate.started) {
                return Some(candidate.started);
            }
            self.replaced.fetch_add(1, Ordering::Relaxed);
            candidate.started.guard.remove_in_background();
        }
        None
    }

    /// Removes the ready containers that have waited `max_idle`; returns when the oldest of
    /// the rest will have.
    fn replace_stale(&self) -> Option<Instant> {
        let mut state = self.lock_state();
        while state
            .ready
            .front()
            .is_some_and(|oldest| oldest.since.elapsed() >= self.max_idle)
        {
            if let Some(stale) = state.ready.pop_front() {
                self.replaced.fetch_add(1, Ordering::Relaxed);
                stale.started.guard.remove_in_background();
            }
        }
        state
            .ready
            .front()
            .map(|oldest| oldest.since + self.max_idle)
    }

    /// Launches to start now: up to the target, at once while attempts overlap or wait, and
    /// after a lone attempt has ended otherwise. Each is recorded as under way.
    fn launches_due(&self) -> Vec<u64> {
        let mut state = self.lock_state();
        state.waiters.retain(|waiter| !waiter.is_closed());
        let lone_attempt = self.attempts.load(Ordering::SeqCst) == 1 && state.waiters.is_empty();
        if lone_attempt {
            return Vec::new();
        }
        let have = state.ready.len() + state.launching.len();
        (have..self.target)
            .map(|_| {
                let number = self.next_launch.fetch_add(1, Ordering::Relaxed);
                state.launching.push_back((number, Instant::now()));
                number
            })
            .collect()
    }

    /// Launches one warm container and waits until its runner is ready.
    async fn launch_one(&self) -> Result<Started, SandboxError> {
        let kind = Kind::Warm {
            max_idle: self.max_idle,
        };
        let mut started = self.launcher.launch(kind, &self.stop).await?;
        let waited = tokio::select! {
            waited = tokio::time::timeout(READY_TIMEOUT, await_ready(&mut started.output)) => waited,
            () = self.stop.cancelled() => Ok(Err("the pool stopped".to_string())),
        };
        let problem = match waited {
            Ok(Ok(())) => return Ok(started),
            Ok(Err(problem)) => problem,
            Err(_) => format!(
                "its runner was not ready after {} s",
                READY_TIMEOUT.as_secs()
            ),
        };
        if let Err(error) = started.guard.remove().await {
            tracing::warn!(%error, "could not remove a warm container that never became ready");
        }
        Err(SandboxError::Io {
            action: "starting a warm container".into(),
            source: std::io::Error::other(problem),
        })
    }

    /// A launch has ended: its container goes to the first waiter still waiting, else to the
    /// ready queue; a failed launch sends its first waiter on to a cold container at once.
    fn finish_launch(&self, number: u64, launched: Option<Started>, took: Duration) {
        let mut state = self.lock_state();
        state.launching.retain(|(n, _)| *n != number);
        let Some(mut started) = launched else {
            if let Some(waiter) = state.waiters.pop_front() {
                let _ = waiter.send(None);
            }
            return;
        };
        let previous = self.launch_ms.load(Ordering::Relaxed);
        let sample = took.as_millis() as u64;
        self.launch_ms
            .store((previous * 3 + sample) / 4, Ordering::Relaxed);
        while let Some(waiter) = state.waiters.pop_front() {
            match waiter.send(Some(started)) {
                Ok(()) => return,
                // That attempt stopped waiting; the next one may still be.
                Err(back) => match back {
                    Some(back) => started = back,
                    None => return,
                },
            }
        }
        state.ready.push_back(Ready {
            started,
            since: Instant::now(),
        });
    }
}

/// Keeps the pool at its target until the pool stops.
async fn keep(shared: Arc<Shared>) {
    loop {
        if shared.stop.is_cancelled() {
            return;
        }
        let next_stale = shared.replace_stale();
        let not_before = *shared
            .not_before
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let blocked = not_before.filter(|at| *at > Instant::now());
        if blocked.is_none() {
            for number in shared.launches_due() {
                shared.launcher.tracker.spawn(fill(shared.clone(), number));
            }
        }
        let wake_at = [next_stale, blocked].into_iter().flatten().min();
        let sleep = async {
            match wake_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shared.stop.cancelled() => return,
            () = shared.wake.notified() => {}
            () = sleep => {}
        }
    }
}

/// One launch for the pool: the container goes to a waiter or the ready queue, or the failure
/// is logged and the next launch is held back.
async fn fill(shared: Arc<Shared>, number: u64) {
    let began = Instant::now();
    let launched = shared.launch_one().await;
    match launched {
        Ok(started) if shared.stop.is_cancelled() => {
            shared.finish_launch(number, None, Duration::ZERO);
            let _ = started.guard.remove().await;
        }
        Ok(started) => {
            shared.failed_in_row.store(0, Ordering::Relaxed);
            shared.finish_launch(number, Some(started), began.elapsed());
        }
        Err(_) if shared.stop.is_cancelled() => shared.finish_launch(number, None, Duration::ZERO),
        Err(error) => {
            shared.finish_launch(number, None, Duration::ZERO);
            shared.failures.fetch_add(1, Ordering::Relaxed);
            let in_row = shared.failed_in_row.fetch_add(1, Ordering::Relaxed);
            let pause = BACKOFF_START
                .saturating_mul(1 << in_row.min(6))
                .min(BACKOFF_MAX);
            tracing::warn!(error = %crate::error_chain(&error), pause_s = pause.as_secs(), "could not start a warm sandbox container; attempts start cold meanwhile");
            *shared
                .not_before
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Instant::now() + pause);
        }
    }
    shared.wake.notify_one();
}

/// Whether a ready container is still as it was: its output stream has neither ended (the
/// container died) nor carried anything since `READY` (nothing may come before the request).
fn alive(started: &mut Started) -> bool {
    started.output.next().now_or_never().is_none()
}

/// Reads the output until the runner's `READY` line. stderr before it (an import warning) is
/// logged; anything else on stdout, or the end of the stream, is a failure.
async fn await_ready(output: &mut OutputStream) -> Result<(), String> {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    while let Some(item) = output.next().await {
        match item {
            Ok(LogOutput::StdOut { message }) => {
                stdout.extend_from_slice(&message);
                if stdout == READY {
                    if !stderr.is_empty() {
                        tracing::warn!(stderr = %String::from_utf8_lossy(&stderr), "a warm runner wrote to stderr while importing");
                    }
                    return Ok(());
                }
                if !READY.starts_with(&stdout) {
                    return Err(format!(
                        "its runner wrote {:?} instead of the ready line",
                        String::from_utf8_lossy(&stdout)
                    ));
                }
            }
            Ok(LogOutput::StdErr { message }) => {
                let room = STDERR_KEPT.saturating_sub(stderr.len());
                stderr.extend_from_slice(&message[..message.len().min(room)]);
            }
            Ok(_) => {}
            Err(error) => return Err(format!("its output stream broke: {error}")),
        }
    }
    Err(format!(
        "it exited before it was ready: {}",
        String::from_utf8_lossy(&stderr)
    ))
}
