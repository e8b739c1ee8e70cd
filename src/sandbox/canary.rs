//! The network canary: proof, not assumption, that the sandbox has no network. Under
//! Kubernetes nothing in a pod's spec cuts it off: a NetworkPolicy does, and only where the CNI
//! enforces it, and a cluster-wide policy (Cilium, Calico, AdminNetworkPolicy) can let traffic
//! through whatever the namespace's policies say, or a policy can be deleted later. So at
//! start-up and every `SANDBOX_CANARY_INTERVAL` the server runs a canary: an attempt like any
//! other (a cold pod from the same spec, verified the same way) whose fixed script
//! (`canary_probe.py`) tries, all at once and each for at most [`PROBE_WAIT`], a TCP connection
//! to the API server's addresses and to public ones (`SANDBOX_CANARY_ADDRESSES`), a datagram to
//! each of them (a DNS query for [`DNS_NAME`]), and a lookup of [`DNS_NAME`] through the pod's
//! own resolver. Only an answer counts as reached ([`Probe::reached`]): a connection made, any
//! datagram back, an address for the name. A refusal is not one (a policy that rejects rather
//! than drops answers from the node itself), and silence is what isolation looks like.
//!
//! A lookup that resolves counts: whichever resolver answered (the cluster's DNS, usually)
//! forwards the pod's queries out of the cluster, and a query carries data; the deny-all
//! NetworkPolicy forbids the cluster's DNS too. A resolver that answers "no such name" is not
//! counted: the pod cannot tell it from a lookup that reached nothing (no resolver, or one that
//! resolves only names inside the cluster). A public resolver asked directly is the UDP probe's.
//!
//! It fails closed: code runs only while the last canary reached nothing
//! ([`Verdict::Isolated`]). Until the first canary has finished ([`Verdict::Pending`]), and
//! after one that could not conclude ([`Verdict::Failed`]: its pod did not start, its attempt
//! timed out or failed, its answer did not parse), every attempt is refused with
//! [`super::SandboxError::NetworkUnproven`], also after earlier canaries reached nothing: a
//! network that keeps the canary from concluding may be the one that changed. Such a canary is
//! tried again soon, [`FIRST_RETRY`] doubling up to the interval ([`next_wait`]). One that
//! reached something ([`Verdict::Reached`]) refuses every attempt with
//! [`super::SandboxError::NetworkReached`] until a canary reaches nothing; one that could not
//! conclude after it leaves that standing. `/health` answers 503 while code may not run, with
//! the canary's state, and `/metrics` shows the verdict. `SANDBOX_CANARY_INTERVAL=0` turns the
//! canary off: code then runs on the NetworkPolicy's word alone, and the server warns so at
//! start.
//!
//! The script's connections are made by a fresh interpreter it starts: the runner's audit hook
//! (which makes a script's network call fail at once, `sandbox-image/runner.py`) would refuse
//! them before any packet, and the canary must test the network, not the hook.
//!
//! It does not prove more than it tries: a port or protocol it does not try may be open where
//! these are closed.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::outcome::Status;
use super::{Outcome, SandboxError};

/// How long each probe waits for an answer; a dropped packet shows as this wait. The probes run
/// at once, so the canary's script ends about this long after it starts.
pub const PROBE_WAIT: Duration = Duration::from_secs(3);
/// The public name the canary looks up through the pod's resolver and asks for in its
/// datagrams: reserved by IANA, and it resolves. Absolute (the final dot), so that the
/// resolver tries no search domain of the cluster first.
pub const DNS_NAME: &str = "example.com.";
/// What the canary's script may need at most: [`PROBE_WAIT`], a second for the probes' threads,
/// and the interpreters' start on a loaded node. A `SCRIPT_TIMEOUT` below it is warned about.
pub const SCRIPT_NEEDS: Duration = Duration::from_secs(PROBE_WAIT.as_secs() + 5);
/// The wait before a canary that could not conclude is tried again; it doubles with each one
/// in a row, up to `SANDBOX_CANARY_INTERVAL`.
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// The probes, run by a fresh interpreter in the canary's pod.
const PROBE: &str = include_str!("canary_probe.py");
/// The marker before the canary's answer on its stdout.
const MARKER: &str = "file-agent-canary:";
/// How long the canary's script waits for its probing interpreter beyond [`PROBE_WAIT`]: the
/// interpreter's start, and the probes' threads.
const PROBE_SLACK: Duration = Duration::from_secs(10);

/// What the last canary found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No canary has finished yet: no code runs.
    Pending,
    /// It reached none of its targets: code runs.
    Isolated,
    /// It reached these: the sandbox has network, and no code runs.
    Reached(Vec<String>),
    /// It could not conclude (its pod did not start, its attempt timed out or failed, its
    /// answer did not parse): nothing is proven, and no code runs.
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

    /// Whether it lets code run: only a canary that reached nothing does.
    pub fn lets_code_run(&self) -> bool {
        *self == Verdict::Isolated
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
    /// When the next canary starts; `None` while one runs, and for `doctor`'s single one.
    pub next_at: Option<SystemTime>,
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
            next_at: None,
        })))
    }

    pub(crate) fn report(&self) -> CanaryReport {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn targets(&self) -> Vec<String> {
        self.report().targets
    }

    /// Records a canary's verdict (a change is logged: a reach as an error). A canary that
    /// could not conclude after one that reached the network changes nothing: only one that
    /// reaches nothing lets code run again.
    pub(crate) fn record(&self, verdict: Verdict) {
        let mut report = self.0.write().unwrap_or_else(|e| e.into_inner());
        if let (Verdict::Failed(error), Verdict::Reached(_)) = (&verdict, &report.verdict) {
            tracing::warn!(%error, "the network canary could not conclude; the last one reached the network, so no code runs still");
            return;
        }
        if report.verdict != verdict {
            match &verdict {
                Verdict::Reached(reached) => tracing::error!(
                    reached = ?reached,
                    "the network canary, a sandbox pod, reached the network: no code runs until a canary reaches nothing; check the NetworkPolicy and that the cluster's CNI enforces it"
                ),
                Verdict::Failed(error) => tracing::warn!(
                    %error,
                    "the network canary could not conclude: no code runs until one reaches nothing; it is tried again soon"
                ),
                Verdict::Isolated => {
                    tracing::info!(targets = ?report.targets, "the network canary reached nothing")
                }
                Verdict::Pending => {}
            }
        }
        report.verdict = verdict;
        report.checked_at = Some(SystemTime::now());
    }

    /// Says when the next canary starts: in `wait`, or `None` when one starts now.
    pub(crate) fn schedule(&self, wait: Option<Duration>) {
        let mut report = self.0.write().unwrap_or_else(|e| e.into_inner());
        report.next_at = wait.map(|wait| SystemTime::now() + wait);
    }

    /// Why no attempt may run now, if so: the last canary reached the network, or nothing
    /// proves yet that it does not (no canary has finished, or the last could not conclude).
    pub(crate) fn refusal(&self) -> Option<SandboxError> {
        let report = self.report();
        let why = match report.verdict {
            Verdict::Isolated => return None,
            Verdict::Reached(reached) => {
                return Some(SandboxError::NetworkReached {
                    reached: reached.join(", "),
                });
            }
            Verdict::Pending => "no network canary has finished yet".to_string(),
            Verdict::Failed(error) => {
                format!("the last network canary could not conclude: {error}")
            }
        };
        Some(SandboxError::NetworkUnproven {
            why,
            next: next_canary(report.next_at, SystemTime::now()),
        })
    }
}

/// When the next canary runs, in words, as of `now`.
fn next_canary(next_at: Option<SystemTime>, now: SystemTime) -> String {
    match next_at.map(|at| at.duration_since(now)) {
        Some(Ok(wait)) if wait.as_secs() > 0 => {
            format!("the next canary starts in {} s", wait.as_secs())
        }
        _ => "a canary is running now".to_string(),
    }
}

/// The wait before the next canary, after `failures` canaries in a row that could not
/// conclude (0: the last one concluded): `interval` after a conclusion, else [`FIRST_RETRY`]
/// doubling with each failure; never more than `interval`.
pub fn next_wait(failures: u32, interval: Duration) -> Duration {
    if failures == 0 {
        return interval;
    }
    FIRST_RETRY
        .saturating_mul(1 << (failures - 1).min(16))
        .min(interval)
}

/// The canary's script: it starts a fresh interpreter (no audit hook) that runs
/// `canary_probe.py` on `targets` (`host:port`, `[v6]:port`) and the public `name`, and prints
/// the probes' endings as JSON after [`MARKER`].
pub fn script(targets: &[String], name: &str) -> String {
    let asked = serde_json::json!({
        "targets": targets,
        "name": name,
        "wait": PROBE_WAIT.as_secs(),
    });
    // Python string literals (JSON's escapes are Python's).
    let literal = |text: &str| serde_json::Value::String(text.to_string()).to_string();
    format!(
        r#"import subprocess, sys
PROBE = {probe}
ASKED = {asked}
done = subprocess.run([sys.executable, "-I", "-c", PROBE, ASKED], capture_output=True, text=True, timeout={timeout})
sys.stderr.write(done.stderr)
print("{MARKER}" + done.stdout.strip())
sys.exit(done.returncode)
"#,
        probe = literal(PROBE),
        asked = literal(&asked.to_string()),
        timeout = (PROBE_WAIT + PROBE_SLACK).as_secs(),
    )
}

/// One probe of the canary's script, as it reports it.
#[derive(Debug, Clone, Deserialize)]
struct Probe {
    /// What it tried.
    probe: Protocol,
    /// The `host:port` tried, or the name looked up.
    target: String,
    /// How it ended: `connected`, `answered`, `resolved`, `refused`, `timeout`, `no such name`
    /// or `failed`.
    result: String,
}

/// What a probe tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Protocol {
    /// A TCP connection.
    Tcp,
    /// A datagram (a DNS query) and any datagram back.
    Udp,
    /// A lookup through the pod's resolver.
    Dns,
}

impl Probe {
    /// What it reached, named for the report; `None` when it reached nothing. Only an answer
    /// counts (the module doc says why): a connection made, any datagram back, an address for
    /// the name.
    fn reached(&self) -> Option<String> {
        match (self.probe, self.result.as_str()) {
            (Protocol::Tcp, "connected") => Some(self.target.clone()),
            (Protocol::Udp, "answered") => Some(format!("{} (udp)", self.target)),
            (Protocol::Dns, "resolved") => Some(format!("{} (dns lookup)", self.target)),
            _ => None,
        }
    }
}

/// What a canary's attempt says: what its probes reached, or why nothing is known.
pub fn judge(outcome: &Outcome) -> Verdict {
    let stdout = String::from_utf8_lossy(&outcome.stdout.bytes);
    let answer = stdout
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix(MARKER));
    match (outcome.status, answer) {
        (Status::Ok, Some(answer)) => match serde_json::from_str::<Vec<Probe>>(answer.trim()) {
            Ok(probes) if probes.is_empty() => {
                Verdict::Failed("the canary's answer named no probe".into())
            }
            Ok(probes) => {
                let reached: Vec<String> = probes.iter().filter_map(Probe::reached).collect();
                if reached.is_empty() {
                    Verdict::Isolated
                } else {
                    Verdict::Reached(reached)
                }
            }
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
            resources: Default::default(),
        }
    }

    /// A finished canary whose probes ended as `probes` says: (kind, target, result).
    fn answered(probes: &[(&str, &str, &str)]) -> Verdict {
        let probes: Vec<serde_json::Value> = probes
            .iter()
            .map(|(probe, target, result)| {
                serde_json::json!({"probe": probe, "target": target, "result": result})
            })
            .collect();
        judge(&outcome(
            Status::Ok,
            &format!("noise\n{MARKER}{}\n", serde_json::Value::from(probes)),
        ))
    }

    #[test]
    fn the_verdict_comes_from_the_marked_line_of_a_finished_canary() {
        assert_eq!(
            answered(&[
                ("tcp", "10.96.0.1:443", "timeout"),
                ("dns", DNS_NAME, "failed")
            ]),
            Verdict::Isolated
        );
        assert_eq!(
            answered(&[("tcp", "10.96.0.1:443", "connected")]),
            Verdict::Reached(vec!["10.96.0.1:443".into()])
        );
        for broken in [
            "nothing\n",
            "file-agent-canary:[]\n",
            "file-agent-canary:[\"a:1\"]\n",
        ] {
            assert!(
                matches!(judge(&outcome(Status::Ok, broken)), Verdict::Failed(_)),
                "{broken}"
            );
        }
        let timed_out = outcome(Status::Timeout, "file-agent-canary:[]\n");
        assert!(matches!(judge(&timed_out), Verdict::Failed(_)));
    }

    #[test]
    fn a_datagram_back_or_a_resolved_name_is_reached_and_a_refusal_or_silence_is_not() {
        assert_eq!(
            answered(&[
                ("udp", "8.8.8.8:53", "answered"),
                ("dns", DNS_NAME, "resolved"),
                ("udp", "1.1.1.1:443", "timeout"),
            ]),
            Verdict::Reached(vec![
                "8.8.8.8:53 (udp)".into(),
                "example.com. (dns lookup)".into()
            ])
        );
        assert_eq!(
            answered(&[
                ("udp", "8.8.8.8:53", "refused"),
                ("udp", "1.1.1.1:443", "timeout"),
                ("udp", "[2606:4700::1111]:53", "failed"),
                ("tcp", "8.8.8.8:53", "refused"),
                ("dns", DNS_NAME, "no such name"),
            ]),
            Verdict::Isolated
        );
        for result in ["timeout", "failed", "refused"] {
            assert_eq!(answered(&[("dns", DNS_NAME, result)]), Verdict::Isolated);
        }
        // An answer that means another probe's success does not count for this one.
        assert_eq!(
            answered(&[("udp", "a:1", "connected"), ("dns", "b", "answered")]),
            Verdict::Isolated
        );
    }

    #[test]
    fn only_a_canary_that_reaches_nothing_lets_code_run() {
        let state = CanaryState::new(vec!["a:1".into()]);
        let refused = |state: &CanaryState| state.refusal().map(|error| error.to_string());
        let pending = refused(&state).unwrap();
        assert!(
            pending.contains("no network canary has finished yet")
                && pending.contains("a canary is running now"),
            "{pending}"
        );
        state.record(Verdict::Isolated);
        assert!(refused(&state).is_none());
        state.record(Verdict::Failed("the pod did not start".into()));
        state.schedule(Some(Duration::from_secs(10)));
        let failed = refused(&state).unwrap();
        assert!(
            failed.contains("could not conclude: the pod did not start")
                && failed.contains("the next canary starts in "),
            "{failed}"
        );
        state.record(Verdict::Reached(vec!["a:1".into()]));
        state.record(Verdict::Failed("the pod did not start".into()));
        assert!(matches!(
            state.refusal(),
            Some(SandboxError::NetworkReached { reached }) if reached == "a:1"
        ));
        state.record(Verdict::Isolated);
        assert!(state.refusal().is_none());
        assert!(state.report().verdict.lets_code_run());
    }

    #[test]
    fn a_canary_that_could_not_conclude_is_tried_again_soon_then_less_often() {
        let interval = Duration::from_secs(300);
        let waits: Vec<u64> = (0..9)
            .map(|failures| next_wait(failures, interval).as_secs())
            .collect();
        assert_eq!(waits, [300, 5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(next_wait(1, Duration::from_secs(2)), Duration::from_secs(2));
        assert_eq!(next_wait(u32::MAX, interval), interval);
    }

    #[test]
    fn the_next_canary_is_said_in_seconds_or_as_running() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let later = Some(now + Duration::from_secs(20));
        assert_eq!(next_canary(later, now), "the next canary starts in 20 s");
        assert_eq!(next_canary(None, now), "a canary is running now");
        let past = Some(now - Duration::from_secs(1));
        assert_eq!(next_canary(past, now), "a canary is running now");
    }

    #[test]
    fn the_script_names_every_target_and_probes_in_a_fresh_interpreter() {
        let script = script(
            &["10.96.0.1:443".into(), "[2606:4700::1111]:443".into()],
            DNS_NAME,
        );
        assert!(script.contains(r#"\"10.96.0.1:443\""#), "{script}");
        assert!(script.contains("2606:4700::1111"), "{script}");
        assert!(script.contains(r#"\"name\":\"example.com.\""#), "{script}");
        assert!(script.contains("sys.executable, \"-I\""), "{script}");
        assert!(script.contains("SOCK_DGRAM") && script.contains("getaddrinfo"));
    }
}
