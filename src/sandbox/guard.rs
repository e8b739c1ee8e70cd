//! Ownership of one container: [`ContainerGuard`] removes it on every path. Removal through
//! [`ContainerGuard::remove`] waits for it; `Drop` spawns the removal on the sandbox's task
//! tracker so that shutdown can wait for it, which serves a panic, a dropped future (a client
//! that cancelled), and [`ContainerGuard::remove_in_background`] after an attempt's result.
//! Under the Kubernetes backend the same guard owns a pod, by name.
//!
//! A removal that fails (the engine or the API server unreachable) is not left to the next
//! start-up's reaper: it goes to [`PendingRemovals`], which tries it again with backoff until
//! the engine answers, and once more, within a bound, at shutdown. Nothing of an instance is
//! orphaned by an outage that ends before the server does.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::SandboxError;

/// What removes a container (or deletes a pod) by its id; one already gone is fine. The
/// engine is one ([`super::engine::Engine`]); a Kubernetes `Cluster` is one for the pods it
/// creates. A trait object, so that the guard does not depend on the backends that create it.
pub(crate) trait Remover: std::fmt::Debug + Send + Sync {
    /// Removes `id`.
    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), SandboxError>>;
}

/// Owns a created container until it is removed.
#[derive(Debug)]
pub struct ContainerGuard {
    remover: Arc<dyn Remover>,
    id: String,
    /// The sandbox's count of live containers; decremented once the container is gone.
    live: Arc<AtomicUsize>,
    /// Where a removal started from `Drop` runs, so that shutdown can wait for it.
    tracker: TaskTracker,
    /// Where a removal that failed goes, to be tried again.
    pending: Arc<PendingRemovals>,
    /// False once removed; `Drop` then does nothing.
    armed: bool,
}

impl ContainerGuard {
    /// Takes ownership of a container that was just created, counting it as live.
    pub(crate) fn new(
        remover: Arc<dyn Remover>,
        id: String,
        live: Arc<AtomicUsize>,
        tracker: TaskTracker,
        pending: Arc<PendingRemovals>,
    ) -> Self {
        live.fetch_add(1, Ordering::SeqCst);
        Self {
            remover,
            id,
            live,
            tracker,
            pending,
            armed: true,
        }
    }

    /// The container's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Force-removes the container (and any anonymous volume), killing it if it still runs.
    /// A failure is returned, and the removal queued to be tried again.
    pub async fn remove(mut self) -> Result<(), SandboxError> {
        let result = self.remover.remove(&self.id).await;
        self.armed = false;
        self.live.fetch_sub(1, Ordering::SeqCst);
        if let Err(error) = &result {
            self.pending
                .queue(self.remover.clone(), self.id.clone(), error);
        }
        result
    }

    /// Removes the container in the background, on the sandbox's task tracker (so shutdown
    /// waits for it); a failure is queued to be tried again. What `Drop` does, on purpose.
    pub(crate) fn remove_in_background(self) {
        drop(self);
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let remover = self.remover.clone();
        let id = std::mem::take(&mut self.id);
        let live = self.live.clone();
        let pending = self.pending.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                self.tracker.spawn_on(
                    async move {
                        if let Err(error) = remover.remove(&id).await {
                            pending.queue(remover, id, &error);
                        }
                        live.fetch_sub(1, Ordering::SeqCst);
                    },
                    &handle,
                );
            }
            Err(_) => {
                tracing::error!(container = %id, "no runtime to remove a dropped sandbox container; `file-agent reap` will");
                live.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// The first pause before a failed removal is tried again; it doubles after each round that
/// leaves some, up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest pause between two rounds of retries.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How long one retry of one removal may take: an engine that accepts and never answers must
/// not hold the others (or shutdown) up.
const RETRY_TIMEOUT: Duration = Duration::from_secs(10);

/// Removals that failed, each with what removes it, tried again until they succeed: by
/// [`Self::retry`] with backoff while the server runs, and by [`Self::drain`] at shutdown.
/// Their number is `file_agent_removals_pending` in `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct PendingRemovals {
    ids: Mutex<BTreeMap<String, Arc<dyn Remover>>>,
    /// Wakes [`Self::retry`] when the first removal is queued.
    queued: tokio::sync::Notify,
}

impl PendingRemovals {
    fn ids(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<dyn Remover>>> {
        self.ids
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues the removal of `id`, which failed with `error`.
    pub(crate) fn queue(&self, remover: Arc<dyn Remover>, id: String, error: &SandboxError) {
        tracing::warn!(container = %id, %error, "could not remove a sandbox container; trying again until the engine answers");
        self.ids().insert(id, remover);
        self.queued.notify_one();
    }

    /// Removals still to do.
    pub(crate) fn len(&self) -> usize {
        self.ids().len()
    }

    /// Tries each queued removal once; returns how many are left.
    async fn try_all(&self) -> usize {
        let queued: Vec<(String, Arc<dyn Remover>)> = self
            .ids()
            .iter()
            .map(|(id, remover)| (id.clone(), remover.clone()))
            .collect();
        for (id, remover) in queued {
            match tokio::time::timeout(RETRY_TIMEOUT, remover.remove(&id)).await {
                Ok(Ok(())) => {
                    self.ids().remove(&id);
                    tracing::info!(container = %id, "removed a sandbox container whose removal had failed");
                }
                Ok(Err(error)) => {
                    tracing::warn!(container = %id, %error, "still cannot remove a sandbox container; trying again later");
                }
                Err(_) => {
                    tracing::warn!(container = %id, timeout_s = RETRY_TIMEOUT.as_secs(), "removing a sandbox container did not answer in time; trying again later");
                }
            }
        }
        self.len()
    }

    /// Tries the queued removals again, [`RETRY_FIRST`] after one is queued, then at doubling
    /// pauses up to [`RETRY_MAX`] while some are left, until `stop`.
    pub(crate) async fn retry(self: Arc<Self>, stop: CancellationToken) {
        let mut pause = RETRY_FIRST;
        loop {
            if self.len() == 0 {
                pause = RETRY_FIRST;
                tokio::select! {
                    () = self.queued.notified() => {}
                    () = stop.cancelled() => return,
                }
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = stop.cancelled() => return,
            }
            if self.try_all().await > 0 {
                pause = (pause * 2).min(RETRY_MAX);
            }
        }
    }

    /// At shutdown: tries the queued removals until none is left or `within` has passed, and
    /// names those left behind.
    pub(crate) async fn drain(&self, within: Duration) {
        if self.len() == 0 {
            return;
        }
        let deadline = tokio::time::Instant::now() + within;
        let mut pause = Duration::from_millis(250);
        while tokio::time::timeout_at(deadline, self.try_all())
            .await
            .is_ok_and(|left| left > 0)
            && tokio::time::Instant::now() + pause < deadline
        {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
        let left: Vec<String> = self.ids().keys().cloned().collect();
        if !left.is_empty() {
            tracing::error!(containers = ?left, "sandbox containers left behind at shutdown: the engine did not answer; the next start-up (or `file-agent reap`) removes them");
        }
    }
}
