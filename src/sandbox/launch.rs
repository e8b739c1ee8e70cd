//! The one path by which a sandbox container comes to life: create it from
//! [`policy::container_spec`], hand it to a [`ContainerGuard`] at once, read back what Docker
//! applied and refuse it unless [`policy::verify`] agrees (fail closed), attach to its stdio and
//! start it. Cold containers (for an attempt that waits) and warm ones (for the pool) both come
//! from [`Launcher::launch`]; what happens after start is the attempt's or the pool's business.
//! Under the Kubernetes backend the launch is the pod's ([`super::kubernetes::Cluster::launch`]):
//! create, guard, verify, wait for it to run, attach.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant, SystemTime};

use bollard::Docker;
use bollard::container::AttachContainerResults;
use bollard::query_parameters::AttachContainerOptionsBuilder;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::engine::Engine;
use super::guard::PendingRemovals;
use super::policy::{self, Kind};
use super::started::Started;
use super::{ContainerGuard, SandboxError};
use crate::config::SandboxConfig;

/// Everything that creates containers shares this: the engine, the settings, the label of this
/// instance, the count of live containers and the tracker of removals still running.
#[derive(Debug, Clone)]
pub(crate) struct Launcher {
    /// Docker, or the Kubernetes API server.
    pub(crate) engine: Engine,
    pub(crate) config: SandboxConfig,
    /// Labels this instance's containers, so tests, shutdown and the reaper can tell them apart.
    pub(crate) instance: String,
    /// Containers created and not yet removed.
    pub(crate) live: Arc<AtomicUsize>,
    /// Removals started by dropped guards, and the pool's background work;
    /// [`super::Sandbox::shutdown`] waits for them.
    pub(crate) tracker: TaskTracker,
    /// Removals that failed, tried again until the engine answers.
    pub(crate) pending: Arc<PendingRemovals>,
}

impl Launcher {
    /// Creates, verifies, attaches and starts one container of `kind`. A failure at any step
    /// removes what was created; `cancel` stops the launch (and removes the container).
    pub(crate) async fn launch(
        &self,
        kind: Kind,
        cancel: &CancellationToken,
    ) -> Result<Started, SandboxError> {
        let docker = match &self.engine {
            Engine::Docker(docker) => docker,
            Engine::Kubernetes(cluster) => {
                let bookkeeping = (
                    self.live.clone(),
                    self.tracker.clone(),
                    self.pending.clone(),
                );
                return cluster
                    .launch(&self.config, &self.instance, kind, bookkeeping, cancel)
                    .await;
            }
        };
        let created_at = SystemTime::now();
        let phase = Instant::now();
        let spec = policy::container_spec(&self.config, &self.instance, kind);
        // Not raced against `cancel`: a create abandoned in flight may still make a container
        // that nothing owns. Once the id is known the guard owns it, and a cancel removes it.
        let created = docker
            .create_container(None, spec.clone())
            .await
            .map_err(|e| self.create_error(e))?;
        let guard = ContainerGuard::new(
            Arc::new(self.engine.clone()),
            created.id,
            self.live.clone(),
            self.tracker.clone(),
            self.pending.clone(),
        );
        let result = if cancel.is_cancelled() {
            Err(SandboxError::Cancelled)
        } else {
            tokio::select! {
                result = self.verify_and_start(docker, guard.id(), &spec) => result,
                () = cancel.cancelled() => Err(SandboxError::Cancelled),
            }
        };
        let result = result.map(
            |(image_id, AttachContainerResults { output, input }, start)| {
                (image_id, output, input, start)
            },
        );
        Started::settle(guard, result, kind, (created_at, phase)).await
    }

    /// Inspect and verify, attach, start: the image id, the stdio, and how long attach and
    /// start took.
    async fn verify_and_start(
        &self,
        docker: &Docker,
        id: &str,
        spec: &bollard::models::ContainerCreateBody,
    ) -> Result<(String, AttachContainerResults, Duration), SandboxError> {
        let applied = docker
            .inspect_container(id, None)
            .await
            .map_err(|e| SandboxError::docker("inspecting the new container", e))?;
        policy::verify(spec, &applied)?;
        let image_id = applied.image.unwrap_or_default();
        let phase = Instant::now();
        // Attach before start, so that no byte of output is missed.
        let attached = docker
            .attach_container(
                id,
                Some(
                    AttachContainerOptionsBuilder::default()
                        .stdin(true)
                        .stdout(true)
                        .stderr(true)
                        .stream(true)
                        .logs(false)
                        .build(),
                ),
            )
            .await
            .map_err(|e| SandboxError::docker("attaching to the container", e))?;
        docker
            .start_container(id, None)
            .await
            .map_err(|e| SandboxError::docker("starting the container", e))?;
        Ok((image_id, attached, phase.elapsed()))
    }

    fn create_error(&self, error: bollard::errors::Error) -> SandboxError {
        match &error {
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            } => SandboxError::ImageMissing {
                image: self.config.image.clone(),
            },
            bollard::errors::Error::DockerResponseServerError { message, .. }
                if message.contains("runtime") =>
            {
                SandboxError::RuntimeMissing {
                    runtime: self.config.runtime.clone().unwrap_or_default(),
                }
            }
            _ => SandboxError::docker("creating the container", error),
        }
    }
}
