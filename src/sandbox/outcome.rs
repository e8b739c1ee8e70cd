//! What one attempt gives back: the typed [`Outcome`] of a script that ran, and the
//! [`SandboxError`] of an attempt that could not run at all. The serialised names of
//! [`Status`] are the `status` values of `file-agent run`'s JSON.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use thiserror::Error;

/// How a script that ran ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It exited 0 and its outputs are within the limits.
    Ok,
    /// It exited with a non-zero code (an exception, `sys.exit(n)`, a signal).
    Failed,
    /// It ran past the timeout and was killed.
    Timeout,
    /// The kernel killed it for exceeding the memory limit.
    OutOfMemory,
    /// It wrote more output (bytes or files) than allowed; what came before the limit is kept.
    OutputLimit,
}

/// Captured stdout or stderr, cut at the limit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Captured {
    /// The bytes kept, at most the stdio limit.
    pub bytes: Vec<u8>,
    /// Bytes the process wrote beyond what was kept.
    pub dropped: u64,
}

impl Captured {
    /// Whether some of the stream was dropped.
    pub fn truncated(&self) -> bool {
        self.dropped > 0
    }

    /// The kept bytes as text (invalid UTF-8 replaced), with a marker when truncated.
    pub fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.bytes).into_owned();
        if self.truncated() {
            text.push_str(&format!(
                "\n[file-agent: {} more bytes were dropped]",
                self.dropped
            ));
        }
        text
    }
}

/// One file the script wrote under `/work/out`, now on the host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputFile {
    /// The path relative to `/work/out` (and to the destination folder).
    pub path: String,
    /// Where it was written on the host.
    #[serde(skip)]
    pub host_path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// The hex SHA-256 of its content.
    pub sha256: String,
}

/// An output entry that was not written, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    /// The path as the archive named it.
    pub path: String,
    /// Why it was skipped, in words.
    pub reason: String,
}

/// Time spent in each phase of an attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Timings {
    /// Create the container and check its settings (zero for a warm container: that happened
    /// before the attempt).
    pub create: Duration,
    /// Attach to it and start it (zero for a warm container).
    pub start: Duration,
    /// Send the script and inputs on stdin.
    pub copy_in: Duration,
    /// From sending the request until the script has finished.
    pub run: Duration,
    /// Read the rest of stdout and stderr after the script finished.
    pub logs: Duration,
    /// Receive and unpack the outputs.
    pub copy_out: Duration,
    /// The whole attempt, up to its result (the container is removed after, in the background).
    pub total: Duration,
}

/// The result of a script that ran in the sandbox (whatever its exit status).
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How it ended.
    pub status: Status,
    /// The process's exit code; `None` when it was killed by file-agent before it exited.
    pub exit_code: Option<i64>,
    /// What it wrote to stdout.
    pub stdout: Captured,
    /// What it wrote to stderr.
    pub stderr: Captured,
    /// The files it wrote under `/work/out`, unpacked on the host.
    pub outputs: Vec<OutputFile>,
    /// Output entries that were not unpacked (links, devices, unsafe paths).
    pub skipped: Vec<Skipped>,
    /// Phase timings.
    pub timings: Timings,
    /// One sentence a person can act on.
    pub message: String,
    /// The container it ran in (removed by now), for the audit trail.
    pub container_id: String,
    /// The image's id (`sha256:...`) the container was created from.
    pub image_id: String,
    /// Whether the container came from the warm pool (started before the attempt).
    pub warm: bool,
    /// When the container was created.
    pub container_created: SystemTime,
}

/// Why an attempt could not run, or could not be cleaned up. Every message says what to do.
#[derive(Debug, Error)]
pub enum SandboxError {
    /// The Docker engine did not answer.
    #[error(
        "the Docker engine is not reachable ({source}); start it (`sudo systemctl start docker` or `sudo dockerd &`) or set DOCKER_HOST"
    )]
    DockerUnreachable {
        /// The client error.
        source: bollard::errors::Error,
    },
    /// The sandbox image is not on the engine.
    #[error("the sandbox image {image} is missing; build it with `file-agent image build`")]
    ImageMissing {
        /// The image reference that was asked for.
        image: String,
    },
    /// The OCI runtime is not registered with the engine.
    #[error(
        "the OCI runtime {runtime:?} is not registered with the Docker engine; install it (gVisor: runsc install) or unset SANDBOX_RUNTIME"
    )]
    RuntimeMissing {
        /// The runtime asked for.
        runtime: String,
    },
    /// Docker applied a setting other than the one asked for: the attempt was refused.
    #[error(
        "refused to start the container: Docker applied {field} = {applied}, but the policy asks for {wanted}; check the engine's configuration (daemon.json, cgroup support)"
    )]
    PolicyMismatch {
        /// The setting.
        field: &'static str,
        /// What the policy asks for.
        wanted: String,
        /// What Docker reports.
        applied: String,
    },
    /// The Kubernetes API server stored a pod other than the one asked for: refused.
    #[error(
        "refused to run in pod {pod}: the cluster stored {field} = {applied}, but the policy asks for {wanted}; an admission webhook or policy changed it: exempt file-agent's sandbox namespace from it"
    )]
    PodMismatch {
        /// The pod's name.
        pod: String,
        /// The field, as a path (`spec.containers[0].securityContext.readOnlyRootFilesystem`).
        field: String,
        /// What the policy asks for.
        wanted: String,
        /// What the API server stored.
        applied: String,
    },
    /// The Kubernetes API failed or refused; the message says what to do.
    #[error("Kubernetes: {action} failed: {message}")]
    Kubernetes {
        /// What file-agent was doing.
        action: &'static str,
        /// What the API said, and what to do about it.
        message: String,
    },
    /// The API server stayed unreachable (refused connections, reset streams, 5xx answers)
    /// for longer than `SANDBOX_API_OUTAGE_MAX` while a pod was waited for.
    #[error(
        "Kubernetes: the API server stayed unreachable for {} s while {action} (SANDBOX_API_OUTAGE_MAX); the last error: {last}",
        after.as_secs()
    )]
    ApiUnreachable {
        /// What file-agent was waiting for.
        action: &'static str,
        /// How long it had been unreachable when the wait gave up.
        after: std::time::Duration,
        /// The last error seen.
        last: String,
    },
    /// No NetworkPolicy cuts the sandbox pods off the network.
    #[error(
        "no NetworkPolicy in namespace {namespace} denies all ingress and egress to the sandbox pods ({detail}); apply deploy/kubernetes/networkpolicy.yaml (kubectl apply -n {namespace} -f ...) and check that the cluster's CNI enforces NetworkPolicy"
    )]
    NetworkPolicyMissing {
        /// The sandbox namespace.
        namespace: String,
        /// What was found instead.
        detail: String,
    },
    /// The network canary, a sandbox pod like an attempt's, reached an address: the sandbox
    /// is not cut off from the network, so no code runs.
    #[error(
        "file-agent runs no code now: its network canary, a sandbox pod made like this attempt's, reached {reached}, so the sandbox pods are not cut off from the network. An operator must fix the cluster's isolation (the NetworkPolicy of deploy/kubernetes/networkpolicy.yaml, a CNI that enforces it, no cluster-wide policy that allows the traffic; `file-agent doctor` shows the canary); calls run again once a canary reaches nothing"
    )]
    NetworkReached {
        /// The addresses reached, comma-separated.
        reached: String,
    },
    /// No network canary has proven yet that the sandbox pods are cut off from the network
    /// (none has finished, or the last could not conclude), so no code runs.
    #[error(
        "file-agent runs no code now: nothing has proven yet that the sandbox pods are cut off from the network, because {why}. Code runs once a network canary, a sandbox pod made like this attempt's, reaches none of its targets; {next}, so try again shortly. If this lasts, an operator must find why the canary does not conclude (`file-agent doctor` runs one; /health shows the last)"
    )]
    NetworkUnproven {
        /// Why: no canary has finished yet, or what the last one said.
        why: String,
        /// When the next canary runs, in words.
        next: String,
    },
    /// An input cannot be placed in `/work/in`.
    #[error("input {name:?} cannot be used: {reason}")]
    BadInput {
        /// The input's name.
        name: String,
        /// Why, in words.
        reason: String,
    },
    /// The caller cancelled the attempt (client gone, shutdown); the container was removed.
    #[error("the attempt was cancelled and its container removed")]
    Cancelled,
    /// Another Docker API failure.
    #[error("Docker failed while {action}: {source}")]
    Docker {
        /// What file-agent was doing.
        action: &'static str,
        /// The client error.
        source: bollard::errors::Error,
    },
    /// A local I/O failure (writing outputs, reading inputs).
    #[error("{action}: {source}")]
    Io {
        /// What file-agent was doing.
        action: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl SandboxError {
    /// Wraps a Docker error, telling an unreachable engine and a missing image apart.
    pub(crate) fn docker(action: &'static str, source: bollard::errors::Error) -> Self {
        use bollard::errors::Error as E;
        match &source {
            E::IOError { .. } | E::HyperResponseError { .. } | E::RequestTimeoutError => {
                Self::DockerUnreachable { source }
            }
            _ => Self::Docker { action, source },
        }
    }
}
