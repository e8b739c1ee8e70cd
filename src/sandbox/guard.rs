//! Ownership of one container: [`ContainerGuard`] removes it on every path. Removal through
//! [`ContainerGuard::remove`] waits for it; `Drop` spawns the removal on the sandbox's task
//! tracker so that shutdown can wait for it, which serves a panic, a dropped future (a client
//! that cancelled), and [`ContainerGuard::remove_in_background`] after an attempt's result.
//! Under the Kubernetes backend the same guard owns a pod, by name.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::BoxFuture;
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
    ) -> Self {
        live.fetch_add(1, Ordering::SeqCst);
        Self {
            remover,
            id,
            live,
            tracker,
            armed: true,
        }
    }

    /// The container's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Force-removes the container (and any anonymous volume), killing it if it still runs.
    pub async fn remove(mut self) -> Result<(), SandboxError> {
        let result = self.remover.remove(&self.id).await;
        self.armed = false;
        self.live.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Removes the container in the background, on the sandbox's task tracker (so shutdown
    /// waits for it); a failure is logged and left to the reaper. What `Drop` does, on purpose.
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
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                self.tracker.spawn_on(
                    async move {
                        if let Err(error) = remover.remove(&id).await {
                            tracing::error!(container = %id, %error, "could not remove a sandbox container; `file-agent reap` will");
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
