//! What creates, watches and removes the sandboxes: a Docker engine (one container per
//! attempt) or a Kubernetes API server (one pod per attempt, [`super::kubernetes`]).
//!
//! An enum, not a trait: there are two backends, both known here, and everything above the
//! container level (the runner's protocol on the streams, the warm pool, the guards, the
//! judgement of how an attempt ended) is the same code for both. Each place that touches the
//! engine matches on it once; the Docker arm is the code that was there before.

use bollard::Docker;
use bollard::query_parameters::RemoveContainerOptionsBuilder;
use futures_util::future::BoxFuture;

use super::SandboxError;
use super::guard::Remover;
use super::kubernetes::Cluster;

/// The engine the sandbox runs its containers (or pods) on.
#[derive(Debug, Clone)]
pub(crate) enum Engine {
    /// A Docker engine.
    Docker(Docker),
    /// A Kubernetes cluster's API server.
    Kubernetes(Box<Cluster>),
}

impl Engine {
    /// Force-removes a container (or deletes a pod); one already gone is fine.
    pub(crate) async fn remove(&self, id: &str) -> Result<(), SandboxError> {
        match self {
            Self::Docker(docker) => remove_container(docker, id).await,
            Self::Kubernetes(cluster) => cluster.remove(id).await,
        }
    }
}

impl Remover for Engine {
    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), SandboxError>> {
        Box::pin(Engine::remove(self, id))
    }
}

/// Force-removes a container and its anonymous volumes; one that is already gone is fine.
pub(crate) async fn remove_container(docker: &Docker, id: &str) -> Result<(), SandboxError> {
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        // 404: already gone; 409: a removal is already in progress.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404 | 409,
            ..
        }) => Ok(()),
        Err(error) => Err(SandboxError::docker("removing a container", error)),
    }
}
