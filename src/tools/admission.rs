//! Admission control: at most `FILE_AGENT_MAX_CONCURRENT` containers run at once, at most
//! `FILE_AGENT_QUEUE_MAX` attempts wait for a slot, and none waits longer than
//! `FILE_AGENT_QUEUE_TIMEOUT`. Past that a call gets a "busy, try again in N s" error at once
//! instead of piling up: under a flood the server's memory and the engine's load stay bounded.
//!
//! N is an estimate from a moving average of recent attempt durations and the queue ahead.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::ToolError;
use crate::config::AdmissionConfig;

/// Assumed duration of an attempt before any has finished.
const INITIAL_MEAN_MS: u64 = 2_000;

/// The slots and the queue in front of them, shared by all calls.
#[derive(Debug)]
pub struct Admission {
    permits: Semaphore,
    waiting: AtomicUsize,
    config: AdmissionConfig,
    /// Exponential moving average of attempt durations, in milliseconds.
    mean_ms: AtomicU64,
}

/// A held slot; dropping it frees the slot and records how long it was held.
pub struct Slot<'a> {
    _permit: SemaphorePermit<'a>,
    admission: &'a Admission,
    started: Instant,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let took = self.started.elapsed().as_millis() as u64;
        let mean = self.admission.mean_ms.load(Ordering::Relaxed);
        // A quarter of the new sample: smooth, but quick to follow a change of load.
        let next = (mean * 3 + took) / 4;
        self.admission.mean_ms.store(next.max(1), Ordering::Relaxed);
    }
}

/// Decrements the waiting count however the wait ends.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    /// Slots and a queue as configured.
    pub fn new(config: AdmissionConfig) -> Arc<Self> {
        Arc::new(Self {
            permits: Semaphore::new(config.max_concurrent.max(1)),
            waiting: AtomicUsize::new(0),
            config,
            mean_ms: AtomicU64::new(INITIAL_MEAN_MS),
        })
    }

    /// A slot now, or after waiting in the queue; `Busy` when the queue is full or the wait
    /// too long.
    pub async fn enter(&self, cancel: &CancellationToken) -> Result<Slot<'_>, ToolError> {
        let permit = match self.permits.try_acquire() {
            Ok(permit) => permit,
            Err(_) => {
                let ahead = self.waiting.fetch_add(1, Ordering::SeqCst);
                let _waiting = Waiting(&self.waiting);
                if ahead >= self.config.queue_max {
                    return Err(self.busy(ahead));
                }
                tokio::select! {
                    () = cancel.cancelled() => return Err(ToolError::Cancelled),
                    () = tokio::time::sleep(self.config.queue_timeout) => return Err(self.busy(ahead)),
                    permit = self.permits.acquire() => permit.map_err(|_| ToolError::Cancelled)?,
                }
            }
        };
        Ok(Slot {
            _permit: permit,
            admission: self,
            started: Instant::now(),
        })
    }

    /// Attempts waiting for a slot.
    pub fn queue_depth(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Slots in use.
    pub fn running(&self) -> usize {
        self.config.max_concurrent.max(1) - self.permits.available_permits()
    }

    /// The settings.
    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    fn busy(&self, waiting: usize) -> ToolError {
        let slots = self.config.max_concurrent.max(1);
        let mean = Duration::from_millis(self.mean_ms.load(Ordering::Relaxed));
        let rounds = (waiting / slots + 1) as u32;
        let retry_after = (mean * rounds).as_secs().clamp(1, 300);
        ToolError::Busy {
            slots,
            waiting,
            retry_after,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(max_concurrent: usize, queue_max: usize, wait_ms: u64) -> Arc<Admission> {
        Admission::new(AdmissionConfig {
            max_concurrent,
            queue_max,
            queue_timeout: Duration::from_millis(wait_ms),
            call_timeout: Duration::from_secs(60),
        })
    }

    #[tokio::test]
    async fn a_full_queue_is_busy_at_once_and_a_slot_frees_for_the_next() {
        let admission = admission(1, 1, 5_000);
        let cancel = CancellationToken::new();
        let first = admission.enter(&cancel).await.unwrap();
        assert_eq!(admission.running(), 1);
        let queued = {
            let admission = admission.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move { admission.enter(&cancel).await.map(|_| ()) })
        };
        while admission.queue_depth() == 0 {
            tokio::task::yield_now().await;
        }
        let refused = admission.enter(&cancel).await.map(|_| ()).unwrap_err();
        assert!(
            matches!(
                refused,
                ToolError::Busy {
                    slots: 1,
                    waiting: 1,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("try again in"), "{refused}");
        drop(first);
        queued.await.unwrap().unwrap();
        assert_eq!(admission.queue_depth(), 0);
        assert_eq!(admission.running(), 0);
    }

    #[tokio::test]
    async fn a_wait_past_the_timeout_is_busy_and_cancellation_leaves_the_queue() {
        let admission = admission(1, 5, 50);
        let cancel = CancellationToken::new();
        let _held = admission.enter(&cancel).await.unwrap();
        let waited = admission.enter(&cancel).await.map(|_| ()).unwrap_err();
        assert!(matches!(waited, ToolError::Busy { .. }), "{waited:?}");
        let gone = CancellationToken::new();
        gone.cancel();
        let cancelled = admission.enter(&gone).await.map(|_| ()).unwrap_err();
        assert!(matches!(cancelled, ToolError::Cancelled));
        assert_eq!(admission.queue_depth(), 0);
    }
}
