//! A started sandbox: the guard that owns it, its stdio streams and how long it took, as every
//! launch (a Docker container's, a Kubernetes pod's) ends. Below both backends, so neither
//! depends on the other's launch.

use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use bollard::container::LogOutput;
use futures_util::Stream;
use tokio::io::AsyncWrite;

use super::SandboxError;
use super::guard::ContainerGuard;
use super::policy::Kind;

/// The container's stdout and stderr, as Docker's attach stream.
pub(crate) type OutputStream =
    Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
/// The container's stdin. Dropping it does not close it; the runner sees end of file only when
/// the whole attach connection goes (the attempt is over, or the server is gone).
pub(crate) type InputStream = Pin<Box<dyn AsyncWrite + Send>>;

/// A started container, attached, whose runner waits for its request on stdin.
pub(crate) struct Started {
    /// Owns the container: removes it on every path.
    pub(crate) guard: ContainerGuard,
    /// The image id Docker resolved the image to.
    pub(crate) image_id: String,
    /// stdout and stderr.
    pub(crate) output: OutputStream,
    /// stdin.
    pub(crate) input: InputStream,
    /// Cold or warm.
    pub(crate) kind: Kind,
    /// When the container was created (for the audit trail).
    pub(crate) created_at: SystemTime,
    /// How long create and verify took.
    pub(crate) create: Duration,
    /// How long attach and start took.
    pub(crate) start: Duration,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("container", &self.guard.id())
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// What a launch that got as far as its attach gives: the image id, the stdio, and how long
/// starting took.
pub(crate) type Attached = (String, OutputStream, InputStream, Duration);

impl Started {
    /// The end of every launch (a container's or a pod's): the started sandbox, or, when a
    /// step after create failed, its removal and the error. `began` is when the launch began
    /// (wall clock, for the audit trail, and monotonic, for the timings).
    pub(crate) async fn settle(
        guard: ContainerGuard,
        result: Result<Attached, SandboxError>,
        kind: Kind,
        began: (SystemTime, Instant),
    ) -> Result<Self, SandboxError> {
        match result {
            Ok((image_id, output, input, start)) => Ok(Self {
                guard,
                image_id,
                output,
                input,
                kind,
                created_at: began.0,
                create: began.1.elapsed().saturating_sub(start),
                start,
            }),
            Err(error) => {
                if let Err(removal) = guard.remove().await {
                    tracing::warn!(%removal, "could not remove a sandbox that failed to start");
                }
                Err(error)
            }
        }
    }
}
