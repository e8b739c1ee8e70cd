//! The network canary: proof, not assumption, that the sandbox has no network. Under
//! Kubernetes nothing in a pod's spec cuts it off: a NetworkPolicy does, and only where the CNI
//! enforces it, and a cluster-wide policy (Cilium, Calico, AdminNetworkPolicy) can let traffic
//! through whatever the namespace's policies say, or a policy can be deleted later. So at
//! start-up and every `SANDBOX_CANARY_INTERVAL` the server runs a canary: an attempt like any
//! other (a cold pod from the same spec, verified the same way) whose fixed script tries TCP
//! connections to the API server's address and to public ones (`SANDBOX_CANARY_ADDRESSES`). If
//! one connects, the server stops running code ([`Verdict::Reached`]: every attempt is refused
//! with [`super::SandboxError::NetworkReached`]), `/health` answers 503 and says what was reached,
//! and `/metrics` shows it; the next canary that reaches nothing lets calls run again.
//!
//! The script's connections are made by a fresh interpreter it starts: the runner's audit hook
//! (which makes a script's network call fail at once, `sandbox-image/runner.py`) would refuse
//! them before any packet, and the canary must test the network, not the hook.
//!
//! It does not prove more than it tries: a port or protocol it does not try (UDP, DNS) may be
//! open where these are closed. A canary that cannot run (the pod does not start) says so
//! ([`Verdict::Failed`]) and stops nothing: the attempts would fail the same way.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use super::Outcome;
use super::outcome::Status;

/// How long the canary waits for each connection; a dropped packet shows as this wait.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The marker before the canary's answer on its stdout.
const MARKER: &str = "file-agent-canary:";

/// What the last canary found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No canary has finished yet.
    Pending,
    /// It reached none of its targets.
    Isolated,
    /// It reached these: the sandbox has network, and no code runs.
    Reached(Vec<String>),
    /// It could not run, or its answer did not parse; nothing is known.
    Failed(String),
}

impl Verdict {
    /// `pending`, `isolated`, `reached` or `failed`.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Pending => "pending",
            Verdict::Isolated => "isolated",
            Verdict::Reached(_) => "reached",
            Verdict::Failed(_) => "failed",
        }
    }
}

/// The canary's state, as `/health`, `/metrics` and `doctor` show it.
#[derive(Debug, Clone)]
pub struct CanaryReport {
    /// What the last canary found.
    pub verdict: Verdict,
    /// When it finished; `None` before the first.
    pub checked_at: Option<SystemTime>,
    /// The addresses it tries.
    pub targets: Vec<String>,
}

/// The report shared between the canary's task and its readers.
#[derive(Debug, Clone)]
pub(crate) struct CanaryState(Arc<RwLock<CanaryReport>>);

impl CanaryState {
    pub(crate) fn new(targets: Vec<String>) -> Self {
        Self(Arc::new(RwLock::new(CanaryReport {
            verdict: Verdict::Pending,
            checked_at: None,
            targets,
        })))
    }

    pub(crate) fn report(&self) -> CanaryReport {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn targets(&self) -> Vec<String> {
        self.report().targets
    }

    /// Records a canary's verdict (a change is logged: a reach as an error). A canary that
    /// could not run after one that reached the network changes nothing: only one that reaches
    /// nothing lets code run again.
    pub(crate) fn record(&self, verdict: Verdict) {
        let mut report = self.0.write().unwrap_or_else(|e| e.into_inner());
        if let (Verdict::Failed(error), Verdict::Reached(_)) = (&verdict, &report.verdict) {
            tracing::warn!(%error, "the network canary could not run; the last one reached the network, so no code runs still");
            return;
        }
        if report.verdict != verdict {
            match &verdict {
                Verdict::Reached(reached) => tracing::error!(
                    reached = ?reached,
                    "the network canary, a sandbox pod, reached the network: no code runs until a canary reaches nothing; check the NetworkPolicy and that the cluster's CNI enforces it"
                ),
                Verdict::Failed(error) => {
                    tracing::warn!(%error, "the network canary could not run")
                }
                Verdict::Isolated => {
                    tracing::info!(targets = ?report.targets, "the network canary reached nothing")
                }
                Verdict::Pending => {}
            }
        }
        report.verdict = verdict;
        report.checked_at = Some(SystemTime::now());
    }

    /// The addresses reached, when the last canary reached any.
    pub(crate) fn reached(&self) -> Option<Vec<String>> {
        match &self.0.read().unwrap_or_else(|e| e.into_inner()).verdict {
            Verdict::Reached(reached) => Some(reached.clone()),
            _ => None,
        }
    }
}

/// The canary's script: it starts a fresh interpreter (no audit hook) that tries a TCP
/// connection to each of `targets` (`host:port`, `[v6]:port`) and prints those it reached as
/// JSON after [`MARKER`].
pub fn script(targets: &[String]) -> String {
    // A Python string literal (JSON's escapes are Python's) holding the JSON list.
    let targets =
        serde_json::Value::String(serde_json::to_string(targets).unwrap_or_else(|_| "[]".into()))
            .to_string();
    let timeout = CONNECT_TIMEOUT.as_secs();
    format!(
        r#"import json, subprocess, sys
PROBE = r'''
import json, socket, sys
reached = []
for target in json.loads(sys.argv[1]):
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout={timeout}):
            reached.append(target)
    except (OSError, ValueError):
        pass
print(json.dumps(reached))
'''
targets = {targets}
done = subprocess.run([sys.executable, "-I", "-c", PROBE, targets], capture_output=True, text=True, timeout=len(json.loads(targets)) * {timeout} + 20)
sys.stderr.write(done.stderr)
print("{MARKER}" + done.stdout.strip())
sys.exit(done.returncode)
"#
    )
}

/// What a canary's attempt says: the addresses its script reached, or why nothing is known.
pub fn judge(outcome: &Outcome) -> Verdict {
    let stdout = String::from_utf8_lossy(&outcome.stdout.bytes);
    let answer = stdout
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix(MARKER));
    match (outcome.status, answer) {
        (Status::Ok, Some(answer)) => match serde_json::from_str::<Vec<String>>(answer.trim()) {
            Ok(reached) if reached.is_empty() => Verdict::Isolated,
            Ok(reached) => Verdict::Reached(reached),
            Err(error) => Verdict::Failed(format!("the canary's answer did not parse: {error}")),
        },
        (status, _) => Verdict::Failed(format!(
            "the canary attempt ended {status:?}: {}",
            crate::text::excerpt(&String::from_utf8_lossy(&outcome.stderr.bytes), 300)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: Status, stdout: &str) -> Outcome {
        Outcome {
            status,
            exit_code: Some(0),
            stdout: super::super::Captured {
                bytes: stdout.as_bytes().to_vec(),
                dropped: 0,
            },
            stderr: Default::default(),
            outputs: Vec::new(),
            skipped: Vec::new(),
            timings: Default::default(),
            message: String::new(),
            container_id: String::new(),
            image_id: String::new(),
            warm: false,
            container_created: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn the_verdict_comes_from_the_marked_line_of_a_finished_canary() {
        assert_eq!(
            judge(&outcome(Status::Ok, "file-agent-canary:[]\n")),
            Verdict::Isolated
        );
        assert_eq!(
            judge(&outcome(
                Status::Ok,
                "noise\nfile-agent-canary:[\"10.96.0.1:443\"]\n"
            )),
            Verdict::Reached(vec!["10.96.0.1:443".into()])
        );
        assert!(matches!(
            judge(&outcome(Status::Ok, "nothing\n")),
            Verdict::Failed(_)
        ));
        assert!(matches!(
            judge(&outcome(Status::Timeout, "file-agent-canary:[]\n")),
            Verdict::Failed(_)
        ));
    }

    #[test]
    fn only_a_canary_that_reaches_nothing_lifts_a_reach() {
        let state = CanaryState::new(vec!["a:1".into()]);
        assert_eq!(state.reached(), None);
        state.record(Verdict::Reached(vec!["a:1".into()]));
        state.record(Verdict::Failed("the pod did not start".into()));
        assert_eq!(state.reached(), Some(vec!["a:1".to_string()]));
        state.record(Verdict::Isolated);
        assert_eq!(state.reached(), None);
        state.record(Verdict::Failed("the pod did not start".into()));
        assert_eq!(state.report().verdict.name(), "failed");
    }

    #[test]
    fn the_script_names_every_target() {
        let script = script(&["10.96.0.1:443".into(), "[2606:4700::1111]:443".into()]);
        assert!(script.contains(r#"\"10.96.0.1:443\""#), "{script}");
        assert!(script.contains("2606:4700::1111"), "{script}");
        assert!(script.contains("sys.executable, \"-I\""), "{script}");
    }
}
