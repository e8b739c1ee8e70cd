//! What a bench started, so that it leaves nothing however it ends: finished, failed, or
//! stopped by SIGTERM or Ctrl-C (the bench then drops its measurements half-way, and with them
//! whatever was waiting on a container).
//!
//! Every sandbox the bench connects and every server it starts in this process is registered
//! here. [`Owned::release`] stops them as the server stops at shutdown (the pools stop
//! refilling and drain, the servers stop their calls and drain), waits for that, and then
//! removes, by their labels, every container still carrying one of the bench's instances: the
//! probe's, a `docker run --rm` caught mid-run, a container whose removal was cut short.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::SandboxConfig;
use crate::sandbox::{ReapFilter, ReapScope, Sandbox};

/// How long the release waits for the servers and pools to stop on their own before it
/// removes what is left by label.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// The sandboxes, servers and instances of one bench (clones share them).
#[derive(Clone, Default)]
pub(super) struct Owned {
    inner: Arc<Mutex<Inner>>,
    /// The task of each server started in this process.
    servers: TaskTracker,
}

#[derive(Default)]
struct Inner {
    /// Every sandbox the bench connected (a clone: the pool is shared).
    sandboxes: Vec<Sandbox>,
    /// Each server's shutdown token.
    stops: Vec<CancellationToken>,
    /// Every instance label value the bench's containers carry.
    instances: Vec<String>,
}

impl Owned {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers `sandbox` (stopped at release) and returns it.
    pub(super) fn sandbox(&self, sandbox: Sandbox) -> Sandbox {
        let mut inner = self.lock();
        inner.instances.push(sandbox.instance().to_string());
        inner.sandboxes.push(sandbox.clone());
        sandbox
    }

    /// Runs a server of `instance` until `stop` fires (at the latest at release).
    pub(super) fn server(
        &self,
        instance: &str,
        stop: CancellationToken,
        serve: impl Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let mut inner = self.lock();
        inner.instances.push(instance.to_string());
        inner.stops.push(stop);
        self.servers.spawn(serve)
    }

    /// Stops everything registered, waits (at most [`STOP_WAIT`]) for it to drain, then
    /// removes every container of the bench's instances; returns how many that last step
    /// removed.
    pub(super) async fn release(&self, config: &SandboxConfig) -> anyhow::Result<usize> {
        let (sandboxes, stops, mut instances) = {
            let mut inner = self.lock();
            (
                std::mem::take(&mut inner.sandboxes),
                std::mem::take(&mut inner.stops),
                inner.instances.clone(),
            )
        };
        for stop in stops {
            stop.cancel();
        }
        self.servers.close();
        let stopped = async {
            for sandbox in &sandboxes {
                sandbox.shutdown().await;
            }
            self.servers.wait().await;
        };
        if tokio::time::timeout(STOP_WAIT, stopped).await.is_err() {
            eprintln!(
                "file-agent bench: its servers and pools did not stop within {} s; removing their containers",
                STOP_WAIT.as_secs()
            );
        }
        instances.sort();
        instances.dedup();
        let sandbox = Sandbox::connect(config.clone()).await?;
        let mut removed = 0;
        for instance in instances {
            let filter = ReapFilter {
                scope: ReapScope::All,
                instance: Some(instance),
            };
            removed += sandbox.reap(&filter).await?.containers;
        }
        Ok(removed)
    }
}
