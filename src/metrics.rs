//! Metrics in the Prometheus text format, for `/metrics`: tool calls by tool and outcome,
//! attempt durations, the sandbox's phase durations, the queue and the containers, model
//! latency and retries. Kept in process-wide counters (one server per process), written by
//! the code that knows the numbers and read when `/metrics` is scraped. No label carries a
//! user, a file name or anything secret.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use crate::sandbox::{PoolStats, Resources};

/// Bucket bounds, in seconds, shared by every histogram.
const BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Bucket bounds, in bytes, of the attempts' peak memory: 16 MiB to 16 GiB.
const MEMORY_BUCKETS: [f64; 11] = [
    16_777_216.0,
    33_554_432.0,
    67_108_864.0,
    134_217_728.0,
    268_435_456.0,
    536_870_912.0,
    1_073_741_824.0,
    2_147_483_648.0,
    4_294_967_296.0,
    8_589_934_592.0,
    17_179_869_184.0,
];

/// A histogram, by default with the [`BUCKETS`] bounds.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    /// Observations at or below each bound (not cumulative; summed when written).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::with_bounds(&BUCKETS)
    }
}

impl Histogram {
    fn with_bounds(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, value: f64) {
        if let Some(index) = self.bounds.iter().position(|bound| value <= *bound) {
            self.counts[index] += 1;
        }
        self.sum += value;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count;
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// The process's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    tool_calls: Mutex<BTreeMap<(String, String), u64>>,
    attempts: Mutex<BTreeMap<(String, String), Histogram>>,
    attempt_cpu: Mutex<BTreeMap<(String, String), Histogram>>,
    attempt_memory: Mutex<BTreeMap<(String, String), Histogram>>,
    phases: Mutex<BTreeMap<&'static str, Histogram>>,
    llm: Mutex<BTreeMap<String, Histogram>>,
    llm_retries: AtomicU64,
    identities_refused: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    audit_checkpoints: AtomicU64,
    audit_alarms: AtomicU64,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Metrics {
    /// A tool call ended with `outcome` (`ok`, `busy`, `llm_error`, ...).
    pub fn tool_call(&self, tool: &str, outcome: &str) {
        *lock(&self.tool_calls)
            .entry((tool.to_string(), outcome.to_string()))
            .or_default() += 1;
    }

    /// An attempt of `tool` ended with `status` after `took` (slot wait included).
    pub fn attempt(&self, tool: &str, status: &str, took: Duration) {
        lock(&self.attempts)
            .entry((tool.to_string(), status.to_string()))
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// What an attempt of `tool` that ended with `status` used (its CPU seconds, user and
    /// system together, and its peak memory), as far as its runner measured it.
    pub fn attempt_resources(&self, tool: &str, status: &str, used: &Resources) {
        let key = (tool.to_string(), status.to_string());
        if let Some(seconds) = used.cpu_s() {
            lock(&self.attempt_cpu)
                .entry(key.clone())
                .or_default()
                .observe(seconds);
        }
        if let Some(bytes) = used.peak_memory_bytes {
            lock(&self.attempt_memory)
                .entry(key)
                .or_insert_with(|| Histogram::with_bounds(&MEMORY_BUCKETS))
                .observe(bytes as f64);
        }
    }

    /// A sandbox phase (`create`, `copy_in`, `run`, `logs`, `copy_out`, `remove`) took `took`.
    pub fn phase(&self, phase: &'static str, took: Duration) {
        lock(&self.phases)
            .entry(phase)
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// A model request ended with `outcome` (`ok` or an error kind) after `took`.
    pub fn llm_request(&self, outcome: &str, took: Duration) {
        lock(&self.llm)
            .entry(outcome.to_string())
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// An identity from `source` (`oauth`, `openwebui-jwt`, ...) was not accepted, for
    /// `reason` (`expired`, `bad_signature`, `conflict`, ...).
    pub fn identity_refused(&self, source: &'static str, reason: &'static str) {
        *lock(&self.identities_refused)
            .entry((source, reason))
            .or_default() += 1;
    }

    /// A signed checkpoint of the audit trail was kept.
    pub fn audit_checkpoint(&self) {
        self.audit_checkpoints.fetch_add(1, Ordering::Relaxed);
    }

    /// The audit trail is in doubt: a witness refused a checkpoint as inconsistent, or the
    /// trail no longer matches one signed before.
    pub fn audit_alarm(&self) {
        self.audit_alarms.fetch_add(1, Ordering::Relaxed);
    }

    /// A model request is being tried again (after a timeout).
    pub fn llm_retry(&self) {
        self.llm_retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Everything, with the gauges read now.
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::new();
        out.push_str("# HELP file_agent_sandbox_info What runs the attempts: the backend and the OCI runtime.
");
        out.push_str(
            "# TYPE file_agent_sandbox_info gauge
",
        );
        let _ = writeln!(
            out,
            "file_agent_sandbox_info{{backend=\"{}\",runtime=\"{}\"}} 1",
            gauges.backend,
            gauges.runtime.escape_debug()
        );
        self.write_counters(&mut out);
        self.write_histograms(&mut out);
        for (name, kind, help, value) in self.plain_rows(gauges) {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        if let Some(verdict) = gauges.canary {
            write_canary(&mut out, verdict);
        }
        out
    }

    /// The counters with labels: tool calls, identities refused.
    fn write_counters(&self, out: &mut String) {
        out.push_str("# HELP file_agent_tool_calls_total Tool calls by tool and outcome.\n");
        out.push_str("# TYPE file_agent_tool_calls_total counter\n");
        for ((tool, outcome), count) in lock(&self.tool_calls).iter() {
            let _ = writeln!(
                out,
                "file_agent_tool_calls_total{{tool=\"{tool}\",outcome=\"{outcome}\"}} {count}"
            );
        }
        out.push_str("# HELP file_agent_identity_refused_total Identities not accepted (a token refused, a plain header contradicting a proven user), by source and reason.\n");
        out.push_str("# TYPE file_agent_identity_refused_total counter\n");
        for ((source, reason), count) in lock(&self.identities_refused).iter() {
            let _ = writeln!(
                out,
                "file_agent_identity_refused_total{{source=\"{source}\",reason=\"{reason}\"}} {count}"
            );
        }
    }

    /// The histograms: attempts, sandbox phases, model requests.
    fn write_histograms(&self, out: &mut String) {
        out.push_str("# HELP file_agent_attempt_duration_seconds Sandbox attempts, from asking for a slot to removal, by tool and status.\n");
        out.push_str("# TYPE file_agent_attempt_duration_seconds histogram\n");
        for ((tool, status), histogram) in lock(&self.attempts).iter() {
            histogram.write(
                out,
                "file_agent_attempt_duration_seconds",
                &format!("tool=\"{tool}\",status=\"{status}\""),
            );
        }
        for (name, help, histograms) in [
            (
                "file_agent_attempt_cpu_seconds",
                "CPU time (user and system) of the script's processes in an attempt, by tool and status.",
                &self.attempt_cpu,
            ),
            (
                "file_agent_attempt_peak_memory_bytes",
                "The largest resident set of any one of the script's processes in an attempt, by tool and status.",
                &self.attempt_memory,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            for ((tool, status), histogram) in lock(histograms).iter() {
                histogram.write(out, name, &format!("tool=\"{tool}\",status=\"{status}\""));
            }
        }
        out.push_str("# HELP file_agent_sandbox_phase_seconds Time in each phase of an attempt.\n");
        out.push_str("# TYPE file_agent_sandbox_phase_seconds histogram\n");
        for (phase, histogram) in lock(&self.phases).iter() {
            histogram.write(
                out,
                "file_agent_sandbox_phase_seconds",
                &format!("phase=\"{phase}\""),
            );
        }
        out.push_str(
            "# HELP file_agent_llm_request_seconds Model requests (retries included) by outcome.\n",
        );
        out.push_str("# TYPE file_agent_llm_request_seconds histogram\n");
        for (outcome, histogram) in lock(&self.llm).iter() {
            histogram.write(
                out,
                "file_agent_llm_request_seconds",
                &format!("outcome=\"{outcome}\""),
            );
        }
    }

    /// The metrics without labels: retries, the queue, the slots, the containers, the warm
    /// pool and the audit trail.
    fn plain_rows(&self, gauges: &Gauges) -> Vec<PlainRow> {
        [
            (
                "file_agent_llm_retries_total",
                "counter",
                "Model requests tried again after a timeout.",
                self.llm_retries.load(Ordering::Relaxed) as usize,
            ),
            (
                "file_agent_audit_checkpoints_total",
                "counter",
                "Signed checkpoints of the audit trail kept (FILE_AGENT_AUDIT_SIGNING_KEY_FILE).",
                self.audit_checkpoints.load(Ordering::Relaxed) as usize,
            ),
            (
                "file_agent_audit_alarms_total",
                "counter",
                "Audit trail alarms: a witness refused a checkpoint as inconsistent with what it saw, or the trail no longer matched a checkpoint signed before.",
                self.audit_alarms.load(Ordering::Relaxed) as usize,
            ),
            (
                "file_agent_queue_depth",
                "gauge",
                "Attempts waiting for a sandbox slot.",
                gauges.queue_depth,
            ),
            (
                "file_agent_sandbox_slots_in_use",
                "gauge",
                "Sandbox slots held by attempts.",
                gauges.slots_in_use,
            ),
            (
                "file_agent_sandbox_slots",
                "gauge",
                "Sandbox slots (FILE_AGENT_MAX_CONCURRENT).",
                gauges.slots,
            ),
            (
                "file_agent_containers_live",
                "gauge",
                "Sandbox containers created and not yet removed.",
                gauges.live_containers,
            ),
            (
                "file_agent_removals_pending",
                "gauge",
                "Sandbox containers (or pods) whose removal failed (the engine unreachable) and is tried again with backoff.",
                gauges.pending_removals,
            ),
        ]
        .into_iter()
        .chain(pool_rows(gauges.pool.as_ref()))
        .chain(audit_rows(gauges.audit.as_ref()))
        .chain(trace_rows(gauges.trace_spans_dropped))
        .collect()
    }
}

/// A metric without labels: name, type, help, value.
type PlainRow = (&'static str, &'static str, &'static str, usize);

/// The network canary's last verdict, one row per verdict.
fn write_canary(out: &mut String, verdict: &str) {
    out.push_str("# HELP file_agent_network_canary The network canary's last verdict (1 for the current one): code runs only while it is isolated; reached means a sandbox pod reached the network, pending and failed that nothing has proven yet it does not.\n# TYPE file_agent_network_canary gauge\n");
    for state in ["pending", "isolated", "reached", "failed"] {
        let _ = writeln!(
            out,
            "file_agent_network_canary{{verdict=\"{state}\"}} {}",
            u8::from(state == verdict)
        );
    }
}

/// The warm pool's rows (none when the pool is off): its size now, and what happened to it.
fn pool_rows(pool: Option<&PoolStats>) -> Vec<PlainRow> {
    let Some(pool) = pool else {
        return Vec::new();
    };
    vec![
        (
            "file_agent_warm_pool_ready",
            "gauge",
            "Warm sandbox containers ready for an attempt.",
            pool.ready,
        ),
        (
            "file_agent_warm_pool_target",
            "gauge",
            "Warm sandbox containers the pool keeps ready (SANDBOX_WARM).",
            pool.target,
        ),
        (
            "file_agent_warm_pool_takes_total",
            "counter",
            "Attempts that ran in a warm container.",
            pool.takes as usize,
        ),
        (
            "file_agent_warm_pool_misses_total",
            "counter",
            "Attempts that found no warm container ready and started a cold one.",
            pool.misses as usize,
        ),
        (
            "file_agent_warm_pool_replaced_total",
            "counter",
            "Warm containers removed unused (waited SANDBOX_WARM_MAX_IDLE, or died).",
            pool.replaced as usize,
        ),
        (
            "file_agent_warm_pool_failures_total",
            "counter",
            "Warm containers that could not be started.",
            pool.failures as usize,
        ),
    ]
}

/// The traces' row (none when traces are off).
fn trace_rows(dropped: Option<u64>) -> Vec<PlainRow> {
    let Some(dropped) = dropped else {
        return Vec::new();
    };
    vec![(
        "file_agent_trace_spans_dropped_total",
        "counter",
        "Spans that did not reach the OpenTelemetry collector (an export that failed).",
        dropped as usize,
    )]
}

/// The audit trail's rows (none when the trail is off).
fn audit_rows(audit: Option<&AuditGauges>) -> Vec<PlainRow> {
    let Some(audit) = audit else {
        return Vec::new();
    };
    vec![
        (
            "file_agent_audit_writable",
            "gauge",
            "1 when the audit trail can take lines, 0 while it cannot (calls that would run code are then refused, unless FILE_AGENT_AUDIT_ON_FAILURE=continue).",
            usize::from(audit.writable),
        ),
        (
            "file_agent_audit_refused_calls_total",
            "counter",
            "Tool calls refused, or answered as failed with their output withheld, because the audit trail could not be written.",
            audit.refused_calls as usize,
        ),
        (
            "file_agent_audit_lines_lost_total",
            "counter",
            "Audit lines that could not be written.",
            audit.lines_lost as usize,
        ),
    ]
}

/// The audit trail, read at scrape time.
#[derive(Debug, Default, Clone, Copy)]
pub struct AuditGauges {
    /// Whether the last write or reservation succeeded.
    pub writable: bool,
    /// Calls refused since start-up.
    pub refused_calls: u64,
    /// Lines lost since start-up.
    pub lines_lost: u64,
}

/// Values read at scrape time.
#[derive(Debug, Default)]
pub struct Gauges {
    /// Attempts waiting.
    pub queue_depth: usize,
    /// Slots held.
    pub slots_in_use: usize,
    /// Slots in all.
    pub slots: usize,
    /// Containers not yet removed.
    pub live_containers: usize,
    /// The warm pool, when it is on.
    pub pool: Option<PoolStats>,
    /// The audit trail, when it is on.
    pub audit: Option<AuditGauges>,
    /// Containers (or pods) whose removal failed and is being tried again.
    pub pending_removals: usize,
    /// The network canary's verdict (`pending`, `isolated`, `reached`, `failed`), when one
    /// runs (under Kubernetes).
    pub canary: Option<&'static str>,
    /// What runs the attempts (`docker`).
    pub backend: &'static str,
    /// The OCI runtime asked for (`SANDBOX_RUNTIME`), or `default` for the engine's own.
    pub runtime: String,
    /// Spans lost by a failed export, when traces are on.
    pub trace_spans_dropped: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every metric family `/metrics` has had, one a line, tab-separated: name, type, label
    /// names, help, and a histogram's bucket bounds (as numbers, `-` for none). Written from
    /// the hand-made text format's render of every metric with a sample, before the move to
    /// `prometheus-client`: a family dropped, renamed, retyped or relabelled fails the test.
    const REFERENCE: &str = include_str!("../tests/fixtures/metrics/families.tsv");

    /// A scrape with every family present: each metric observed once, each optional part of
    /// the server on.
    fn everything() -> String {
        let metrics = Metrics::default();
        metrics.tool_call("run_python", "ok");
        metrics.attempt("run_python", "ok", Duration::from_millis(300));
        let used = Resources {
            cpu_user_s: Some(0.5),
            cpu_system_s: Some(0.25),
            peak_memory_bytes: Some(64 << 20),
            ..Resources::default()
        };
        metrics.attempt_resources("run_python", "ok", &used);
        metrics.phase("run", Duration::from_millis(40));
        metrics.llm_request("ok", Duration::from_secs(2));
        metrics.llm_retry();
        metrics.identity_refused("oauth", "expired");
        metrics.audit_checkpoint();
        metrics.audit_alarm();
        metrics.render(&Gauges {
            pool: Some(PoolStats::default()),
            audit: Some(AuditGauges::default()),
            canary: Some("isolated"),
            backend: "docker",
            runtime: "runsc".into(),
            trace_spans_dropped: Some(0),
            ..Gauges::default()
        })
    }

    /// The families of a scrape, each as a line of [`REFERENCE`]: the `# TYPE` and `# HELP`
    /// lines, the label names of the family's samples and a histogram's bucket bounds.
    fn families(text: &str) -> BTreeSet<String> {
        let mut helps = BTreeMap::new();
        let mut types = BTreeMap::new();
        let mut labels: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        let mut bounds: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for line in text.lines() {
            if let Some(help) = line.strip_prefix("# HELP ") {
                let (name, help) = help.split_once(' ').unwrap();
                helps.insert(name, help);
            } else if let Some(kind) = line.strip_prefix("# TYPE ") {
                let (name, kind) = kind.split_once(' ').unwrap();
                types.insert(name, kind);
            } else if !line.starts_with('#') {
                let (sample, mut pairs) = sample_labels(line);
                let family = family_of(&types, sample).unwrap_or_else(|| panic!("{line}"));
                if let Some(at) = pairs.iter().position(|(name, _)| *name == "le") {
                    let bound = pairs.remove(at).1.parse::<f64>().unwrap().to_string();
                    let seen = bounds.entry(family).or_default();
                    if !seen.contains(&bound) {
                        seen.push(bound);
                    }
                }
                let names: Vec<&str> = pairs.iter().map(|(name, _)| *name).collect();
                labels.entry(family).or_default().insert(names.join(","));
            }
        }
        types
            .iter()
            .flat_map(|(name, kind)| {
                let help = helps[name];
                let bounds = bounds
                    .get(name)
                    .map_or("-".into(), |bounds| bounds.join(","));
                let labels = labels
                    .get(name)
                    .unwrap_or_else(|| panic!("no sample of {name}"));
                labels
                    .iter()
                    .map(move |names| format!("{name}\t{kind}\t{names}\t{help}\t{bounds}"))
            })
            .collect()
    }

    /// The family of `# TYPE` lines that the sample `name` belongs to.
    fn family_of<'a>(types: &BTreeMap<&'a str, &str>, name: &str) -> Option<&'a str> {
        types
            .keys()
            .copied()
            .filter(|family| {
                ["", "_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| name == format!("{family}{suffix}"))
            })
            .max_by_key(|family| family.len())
    }

    /// A sample's name and its labels, as written.
    fn sample_labels(line: &str) -> (&str, Vec<(&str, &str)>) {
        let Some((name, rest)) = line.split_once('{') else {
            return (line.split_once(' ').unwrap().0, Vec::new());
        };
        let (labels, _) = rest.rsplit_once('}').unwrap();
        let pairs = labels
            .split(",")
            .filter_map(|pair| pair.split_once("=\""))
            .map(|(name, value)| (name, value.trim_end_matches('"')))
            .collect();
        (name, pairs)
    }

    #[test]
    fn every_family_keeps_its_name_type_labels_help_and_buckets() {
        let rendered = families(&everything());
        for family in REFERENCE.lines() {
            assert!(
                rendered.contains(family),
                "missing: {family}\n{rendered:#?}"
            );
        }
        assert_eq!(rendered.len(), REFERENCE.lines().count(), "{rendered:#?}");
    }

    #[test]
    fn an_attempts_cpu_and_peak_memory_are_histograms_by_tool_and_status() {
        let metrics = Metrics::default();
        let used = Resources {
            cpu_user_s: Some(0.75),
            cpu_system_s: Some(0.5),
            peak_memory_bytes: Some(212 << 20),
            ..Resources::default()
        };
        metrics.attempt_resources("run_python", "ok", &used);
        metrics.attempt_resources("run_python", "ok", &Resources::default());
        let text = metrics.render(&Gauges::default());
        for expected in [
            "# TYPE file_agent_attempt_cpu_seconds histogram",
            "file_agent_attempt_cpu_seconds_bucket{tool=\"run_python\",status=\"ok\",le=\"1\"} 0",
            "file_agent_attempt_cpu_seconds_bucket{tool=\"run_python\",status=\"ok\",le=\"2.5\"} 1",
            "file_agent_attempt_cpu_seconds_sum{tool=\"run_python\",status=\"ok\"} 1.25",
            "# TYPE file_agent_attempt_peak_memory_bytes histogram",
            "file_agent_attempt_peak_memory_bytes_bucket{tool=\"run_python\",status=\"ok\",le=\"134217728\"} 0",
            "file_agent_attempt_peak_memory_bytes_bucket{tool=\"run_python\",status=\"ok\",le=\"268435456\"} 1",
            "file_agent_attempt_peak_memory_bytes_count{tool=\"run_python\",status=\"ok\"} 1",
        ] {
            assert!(text.contains(expected), "{expected}\n{text}");
        }
    }

    #[test]
    fn histograms_are_cumulative_and_the_text_format_is_well_formed() {
        let metrics = Metrics::default();
        metrics.tool_call("run_python", "ok");
        metrics.tool_call("run_python", "ok");
        metrics.attempt("run_python", "ok", Duration::from_millis(300));
        metrics.attempt("run_python", "ok", Duration::from_secs(3));
        let text = metrics.render(&Gauges {
            queue_depth: 1,
            backend: "docker",
            runtime: "runsc".into(),
            ..Gauges::default()
        });
        assert!(text.contains("file_agent_sandbox_info{backend=\"docker\",runtime=\"runsc\"} 1"));
        assert!(text.contains("file_agent_tool_calls_total{tool=\"run_python\",outcome=\"ok\"} 2"));
        assert!(text.contains(
            "file_agent_attempt_duration_seconds_bucket{tool=\"run_python\",status=\"ok\",le=\"0.5\"} 1"
        ));
        assert!(text.contains(
            "file_agent_attempt_duration_seconds_bucket{tool=\"run_python\",status=\"ok\",le=\"5\"} 2"
        ));
        assert!(text.contains(
            "file_agent_attempt_duration_seconds_count{tool=\"run_python\",status=\"ok\"} 2"
        ));
        assert!(text.contains("file_agent_queue_depth 1"));
        assert!(!text.contains("warm_pool"), "no pool, no pool rows");
        let with_pool = metrics.render(&Gauges {
            pool: Some(PoolStats {
                target: 2,
                ready: 1,
                takes: 7,
                misses: 3,
                ..PoolStats::default()
            }),
            ..Gauges::default()
        });
        assert!(with_pool.contains("file_agent_warm_pool_ready 1"));
        assert!(with_pool.contains("file_agent_warm_pool_takes_total 7"));
        assert!(with_pool.contains("file_agent_warm_pool_misses_total 3"));
        assert!(
            !text.contains("network_canary"),
            "no canary, no canary rows"
        );
        let reached = metrics.render(&Gauges {
            canary: Some("reached"),
            ..Gauges::default()
        });
        assert!(reached.contains("file_agent_network_canary{verdict=\"reached\"} 1"));
        assert!(reached.contains("file_agent_network_canary{verdict=\"isolated\"} 0"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
