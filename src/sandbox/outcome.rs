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

/// What one attempt used, as the runner (PID 1) measured it for that attempt alone (a warm
/// container's imports before the attempt are not counted); see runner.py's module doc for
/// how. Every figure is `None` when the runner could not measure it or sent something that is
/// not a figure: the script can misstate its own usage, never make the attempt fail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Resources {
    /// User CPU seconds of the script's process and of the processes it waited for.
    pub cpu_user_s: Option<f64>,
    /// System CPU seconds of the same.
    pub cpu_system_s: Option<f64>,
    /// The largest resident set of any one of those processes (not their sum), in bytes.
    pub peak_memory_bytes: Option<u64>,
    /// The size of the regular files in `/work/out` when the script ended.
    pub output_bytes: Option<u64>,
    /// Processes and threads started in the container for the attempt, the script's own
    /// included, as the pids limit counts them.
    pub processes: Option<u64>,
}

/// The largest figure taken: a CPU time over a year or a size over an exabyte is no figure.
const FIGURE_MAX: f64 = 1e18;

impl Resources {
    /// The figures of the runner's `resources` object; whatever is not a non-negative number
    /// in range (or not an object at all) is left out, never an error.
    pub(crate) fn lenient<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Self, D::Error> {
        let value = <serde_json::Value as serde::Deserialize>::deserialize(deserializer)?;
        Ok(Self::from_value(&value))
    }

    fn from_value(value: &serde_json::Value) -> Self {
        let number = |name: &str| {
            value
                .get(name)
                .and_then(serde_json::Value::as_f64)
                .filter(|figure| figure.is_finite() && (0.0..FIGURE_MAX).contains(figure))
        };
        let count = |name: &str| value.get(name).and_then(serde_json::Value::as_u64);
        Self {
            cpu_user_s: number("cpu_user_s").filter(|seconds| *seconds < 3.2e7),
            cpu_system_s: number("cpu_system_s").filter(|seconds| *seconds < 3.2e7),
            peak_memory_bytes: count("peak_memory_bytes").filter(|b| (*b as f64) < FIGURE_MAX),
            output_bytes: count("output_bytes").filter(|b| (*b as f64) < FIGURE_MAX),
            processes: count("processes").filter(|n| *n < 1 << 32),
        }
    }

    /// User and system CPU seconds together, when both are known.
    pub fn cpu_s(&self) -> Option<f64> {
        Some(self.cpu_user_s? + self.cpu_system_s?)
    }

    /// The short line of a tool's answer: "used 1.2 s of CPU and 212 MiB"; `None` when
    /// nothing was measured.
    pub fn summary(&self) -> Option<String> {
        let cpu = self.cpu_s().map(|seconds| format!("{seconds:.1} s of CPU"));
        let memory = self
            .peak_memory_bytes
            .map(|bytes| format!("{} MiB", bytes.div_ceil(1 << 20)));
        match (cpu, memory) {
            (Some(cpu), Some(memory)) => Some(format!("used {cpu} and {memory}")),
            (Some(one), None) | (None, Some(one)) => Some(format!("used {one}")),
            (None, None) => None,
        }
    }
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
    /// What the attempt used, as its runner reported it (all `None` without a report).
    pub resources: Resources,
}

impl Outcome {
    /// Takes what a session's attempt left of its state out of the outputs: the state
    /// ([`super::SESSION_STATE_OUTPUT`]) or the runner's marker that it is unchanged
    /// ([`super::SESSION_STATE_UNCHANGED`]); neither is a file for the caller. A state wins over
    /// a marker beside it (the runner never writes both; a script might). Call it only for an
    /// attempt of a session: in any other, files of those names are outputs like the others.
    pub fn take_session_state(&mut self) -> Option<StateLeft> {
        let mut take = |name: &str| {
            let at = self.outputs.iter().position(|file| file.path == name)?;
            Some(self.outputs.remove(at))
        };
        let written = take(super::SESSION_STATE_OUTPUT);
        let unchanged = take(super::SESSION_STATE_UNCHANGED);
        written
            .map(StateLeft::Written)
            .or(unchanged.map(StateLeft::Unchanged))
    }
}

/// What a session's attempt left of its state ([`Outcome::take_session_state`]).
#[derive(Debug, Clone, PartialEq)]
pub enum StateLeft {
    /// A state: the file the runner wrote, opaque bytes.
    Written(OutputFile),
    /// The runner's marker that the state it would leave is the one that came in: a small file
    /// naming that state's SHA-256, which the caller tells by the file's own hash and size (it
    /// is never opened again).
    Unchanged(OutputFile),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(json: &str) -> Resources {
        Resources::from_value(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn the_runners_figures_are_read() {
        let used = parsed(
            r#"{"cpu_user_s": 1.25, "cpu_system_s": 0.05, "peak_memory_bytes": 222298112,
                "output_bytes": 12350, "processes": 3}"#,
        );
        assert_eq!(used.cpu_s(), Some(1.3));
        assert_eq!(used.peak_memory_bytes, Some(222_298_112));
        assert_eq!(used.output_bytes, Some(12_350));
        assert_eq!(used.processes, Some(3));
        assert_eq!(
            used.summary().as_deref(),
            Some("used 1.3 s of CPU and 212 MiB")
        );
    }

    #[test]
    fn a_malformed_figure_is_left_out_and_the_rest_kept() {
        let used = parsed(
            r#"{"cpu_user_s": -1, "cpu_system_s": "lots", "peak_memory_bytes": 1.5,
                "output_bytes": 1e300, "processes": 5000000000}"#,
        );
        assert_eq!(used, Resources::default());
        assert_eq!(used.summary(), None);
        for json in ["null", "[1, 2]", "\"x\"", "{}"] {
            assert_eq!(parsed(json), Resources::default(), "{json}");
        }
        let only_memory = parsed(r#"{"cpu_user_s": null, "peak_memory_bytes": 1048576}"#);
        assert_eq!(only_memory.summary().as_deref(), Some("used 1 MiB"));
    }
}
