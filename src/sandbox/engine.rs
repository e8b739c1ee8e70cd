//! What creates, watches and removes the sandboxes: a Docker engine (one container per
//! attempt) or a Kubernetes API server (one pod per attempt, [`super::kubernetes`]).
//!
//! An enum, not a trait: there are two backends, both known here, and everything above the
//! container level (the runner's protocol on the streams, the warm pool, the guards, the
//! judgement of how an attempt ended) is the same code for both. Each place that touches the
//! engine matches on it once; the Docker arm is the code that was there before.

use bollard::Docker;

use super::SandboxError;
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
            Self::Docker(docker) => super::guard::remove_container(docker, id).await,
            Self::Kubernetes(cluster) => cluster.remove(id).await,
        }
    }
}
