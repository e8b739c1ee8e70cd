//! Metrics for `/metrics`: tool calls by tool and outcome, attempt durations and resources,
//! the sandbox's phase durations, the queue and the containers, model latency and retries.
//! Kept in process-wide counters and histograms (one server per process), written by the code
//! that knows the numbers; the values other modules hold (the queue, the slots, the pool, the
//! audit trail, the traces) are read when `/metrics` is scraped and handed in as [`Gauges`].
//! No label carries a user, a file name or anything secret.
//!
//! The Prometheus project's own Rust client, `prometheus-client`, keeps the metrics and writes
//! them, in the Prometheus text format 0.0.4 (`encoding::prometheus_text`), the format and
//! content type `/metrics` has always served, so every sample a scraper reads is the one it
//! read before. OpenTelemetry metrics with a Prometheus exporter were the other candidate:
//! that exporter adds `target_info`, scope labels and unit suffixes of its own (new names for
//! every series), and gauges read at scrape time would become callbacks registered at
//! start-up instead of the plain [`Gauges`] the server hands in; traces stay on OpenTelemetry.
//!
//! Two habits of the crate show in the names and texts below. Its encoder appends `_total` to
//! a counter's name, so counters are registered without it
//! (`file_agent_tool_calls` is scraped as `file_agent_tool_calls_total`), and its registry
//! ends every help text with a full stop, so the texts here have none.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::sandbox::{PoolStats, Resources};

/// The `Content-Type` of what [`Metrics::render`] writes: the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Bucket bounds, in seconds, of every histogram of durations.
const BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// A histogram of seconds, with the [`BUCKETS`] bounds.
fn seconds_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// A histogram of the attempts' peak memory: 16 MiB, doubling eleven times up to 16 GiB.
fn memory_histogram() -> Histogram {
    Histogram::new(exponential_buckets(16_777_216.0, 2.0, 11))
}

/// Histograms by the label set `L`, each made by one constructor.
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// The labels of a tool call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    outcome: String,
}

/// The labels of an attempt.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    tool: String,
    status: String,
}

/// The label of a sandbox phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

/// The label of a model request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    outcome: String,
}

/// The labels of an identity refused.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    source: &'static str,
    reason: &'static str,
}

/// The label of a network canary's verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    verdict: &'static str,
}

/// The labels of `file_agent_sandbox_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SandboxLabels {
    backend: &'static str,
    runtime: String,
}

/// The process's metrics: the handles the code writes to, and the registry that holds them
/// for the encoder (each handle and its registered clone share one value).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    tool_calls: Family<CallLabels, Counter>,
    attempts: Histograms<AttemptLabels>,
    attempt_cpu: Histograms<AttemptLabels>,
    attempt_memory: Histograms<AttemptLabels>,
    phases: Histograms<PhaseLabels>,
    llm: Histograms<RequestLabels>,
    llm_retries: Counter,
    identities_refused: Family<RefusalLabels, Counter>,
    audit_checkpoints: Counter,
    audit_alarms: Counter,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Self {
            registry: Registry::default(),
            tool_calls: Family::default(),
            attempts: Family::new_with_constructor(seconds_histogram),
            attempt_cpu: Family::new_with_constructor(seconds_histogram),
            attempt_memory: Family::new_with_constructor(memory_histogram),
            phases: Family::new_with_constructor(seconds_histogram),
            llm: Family::new_with_constructor(seconds_histogram),
            llm_retries: Counter::default(),
            identities_refused: Family::default(),
            audit_checkpoints: Counter::default(),
            audit_alarms: Counter::default(),
        };
        metrics.register_counters();
        metrics.register_histograms();
        metrics
    }
}

impl Metrics {
    /// A tool call ended with `outcome` (`ok`, `busy`, `llm_error`, ...).
    pub fn tool_call(&self, tool: &str, outcome: &str) {
        let labels = CallLabels {
            tool: tool.to_string(),
            outcome: outcome.to_string(),
        };
        self.tool_calls.get_or_create(&labels).inc();
    }

    /// An attempt of `tool` ended with `status` after `took` (slot wait included).
    pub fn attempt(&self, tool: &str, status: &str, took: Duration) {
        self.attempts
            .get_or_create(&attempt_labels(tool, status))
            .observe(took.as_secs_f64());
    }

    /// What an attempt of `tool` that ended with `status` used (its CPU seconds, user and
    /// system together, and its peak memory), as far as its runner measured it.
    pub fn attempt_resources(&self, tool: &str, status: &str, used: &Resources) {
        let labels = attempt_labels(tool, status);
        if let Some(seconds) = used.cpu_s() {
            self.attempt_cpu.get_or_create(&labels).observe(seconds);
        }
        if let Some(bytes) = used.peak_memory_bytes {
            self.attempt_memory
                .get_or_create(&labels)
                .observe(bytes as f64);
        }
    }

    /// A sandbox phase (`create`, `copy_in`, `run`, `logs`, `copy_out`, `remove`) took `took`.
    pub fn phase(&self, phase: &'static str, took: Duration) {
        self.phases
            .get_or_create(&PhaseLabels { phase })
            .observe(took.as_secs_f64());
    }

    /// A model request ended with `outcome` (`ok` or an error kind) after `took`.
    pub fn llm_request(&self, outcome: &str, took: Duration) {
        let labels = RequestLabels {
            outcome: outcome.to_string(),
        };
        self.llm.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// An identity from `source` (`oauth`, `openwebui-jwt`, ...) was not accepted, for
    /// `reason` (`expired`, `bad_signature`, `conflict`, ...).
    pub fn identity_refused(&self, source: &'static str, reason: &'static str) {
        self.identities_refused
            .get_or_create(&RefusalLabels { source, reason })
            .inc();
    }

    /// A signed checkpoint of the audit trail was kept.
    pub fn audit_checkpoint(&self) {
        self.audit_checkpoints.inc();
    }

    /// The audit trail is in doubt: a witness refused a checkpoint as inconsistent, or the
    /// trail no longer matches one signed before.
    pub fn audit_alarm(&self) {
        self.audit_alarms.inc();
    }

    /// A model request is being tried again (after a timeout).
    pub fn llm_retry(&self) {
        self.llm_retries.inc();
    }

    /// Everything, with the gauges read now, in the text format of [`CONTENT_TYPE`]. A family
    /// with no sample yet (a labelled one nothing has counted) is left out.
    pub fn render(&self, gauges: &Gauges) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_text::encode(&mut out, &self.registry)?;
        prometheus_text::encode(&mut out, &scrape_registry(gauges))?;
        Ok(out)
    }

    /// Registers the counters kept here: tool calls, identities refused, model retries and
    /// the audit trail's checkpoints and alarms.
    fn register_counters(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "file_agent_tool_calls",
            "Tool calls by tool and outcome",
            self.tool_calls.clone(),
        );
        registry.register(
            "file_agent_identity_refused",
            "Identities not accepted (a token refused, a plain header contradicting a proven user), by source and reason",
            self.identities_refused.clone(),
        );
        for (name, help, counter) in [
            (
                "file_agent_llm_retries",
                "Model requests tried again after a timeout",
                &self.llm_retries,
            ),
            (
                "file_agent_audit_checkpoints",
                "Signed checkpoints of the audit trail logged (FILE_AGENT_AUDIT_SIGNING_KEY_FILE)",
                &self.audit_checkpoints,
            ),
            (
                "file_agent_audit_alarms",
                "Audit trail alarms: a witness refused a checkpoint as inconsistent with what it saw, the trail no longer matched a checkpoint signed before, or a signed checkpoint could not be kept beside the chain",
                &self.audit_alarms,
            ),
        ] {
            registry.register(name, help, counter.clone());
        }
    }

    /// Registers the histograms: attempts (duration, CPU, peak memory), sandbox phases,
    /// model requests.
    fn register_histograms(&mut self) {
        let registry = &mut self.registry;
        for (name, help, histograms) in [
            (
                "file_agent_attempt_duration_seconds",
                "Sandbox attempts, from asking for a slot to removal, by tool and status",
                &self.attempts,
            ),
            (
                "file_agent_attempt_cpu_seconds",
                "CPU time (user and system) of the script's processes in an attempt, by tool and status",
                &self.attempt_cpu,
            ),
            (
                "file_agent_attempt_peak_memory_bytes",
                "The largest resident set of any one of the script's processes in an attempt, by tool and status",
                &self.attempt_memory,
            ),
        ] {
            registry.register(name, help, histograms.clone());
        }
        registry.register(
            "file_agent_sandbox_phase_seconds",
            "Time in each phase of an attempt",
            self.phases.clone(),
        );
        registry.register(
            "file_agent_llm_request_seconds",
            "Model requests (retries included) by outcome",
            self.llm.clone(),
        );
    }
}

/// The labels of an attempt of `tool` that ended with `status`.
fn attempt_labels(tool: &str, status: &str) -> AttemptLabels {
    AttemptLabels {
        tool: tool.to_string(),
        status: status.to_string(),
    }
}

/// A metric without labels read at scrape time: name (a counter's without `_total`), help,
/// value.
type Row<V> = (&'static str, &'static str, V);

/// The metrics read at scrape time, in a registry of their own made for this scrape.
fn scrape_registry(gauges: &Gauges) -> Registry {
    let mut registry = Registry::default();
    registry.register(
        "file_agent_sandbox",
        "What runs the attempts: the backend and the OCI runtime",
        Info::new(SandboxLabels {
            backend: gauges.backend,
            runtime: gauges.runtime.clone(),
        }),
    );
    let gauge_rows = plain_gauges(gauges)
        .into_iter()
        .chain(gauges.pool.iter().flat_map(pool_gauges))
        .chain(gauges.audit.as_ref().map(audit_gauge));
    for (name, help, value) in gauge_rows {
        registry.register(name, help, ConstGauge::new(value));
    }
    let counter_rows = gauges
        .pool
        .iter()
        .flat_map(pool_counters)
        .chain(gauges.audit.iter().flat_map(audit_counters))
        .chain(gauges.trace_spans_dropped.map(trace_counter));
    for (name, help, value) in counter_rows {
        registry.register(name, help, ConstCounter::new(value));
    }
    if let Some(verdict) = gauges.canary {
        registry.register(
            "file_agent_network_canary",
            "The network canary's last verdict (1 for the current one): code runs only while it is isolated; reached means a sandbox pod reached the network, pending and failed that nothing has proven yet it does not",
            canary_family(verdict),
        );
    }
    registry
}

/// The network canary's last verdict, one gauge per verdict, 1 for `verdict`.
fn canary_family(verdict: &str) -> Family<VerdictLabels, Gauge> {
    let family: Family<VerdictLabels, Gauge> = Family::default();
    for state in ["pending", "isolated", "reached", "failed"] {
        family
            .get_or_create(&VerdictLabels { verdict: state })
            .set(i64::from(state == verdict));
    }
    family
}

/// The queue, the slots, the containers and the removals pending.
fn plain_gauges(gauges: &Gauges) -> [Row<usize>; 5] {
    [
        (
            "file_agent_queue_depth",
            "Attempts waiting for a sandbox slot",
            gauges.queue_depth,
        ),
        (
            "file_agent_sandbox_slots_in_use",
            "Sandbox slots held by attempts",
            gauges.slots_in_use,
        ),
        (
            "file_agent_sandbox_slots",
            "Sandbox slots (FILE_AGENT_MAX_CONCURRENT)",
            gauges.slots,
        ),
        (
            "file_agent_containers_live",
            "Sandbox containers created and not yet removed",
            gauges.live_containers,
        ),
        (
            "file_agent_removals_pending",
            "Sandbox containers (or pods) whose removal failed (the engine unreachable) and is tried again with backoff",
            gauges.pending_removals,
        ),
    ]
}

/// The warm pool's size now (when the pool is on).
fn pool_gauges(pool: &PoolStats) -> [Row<usize>; 2] {
    [
        (
            "file_agent_warm_pool_ready",
            "Warm sandbox containers ready for an attempt",
            pool.ready,
        ),
        (
            "file_agent_warm_pool_target",
            "Warm sandbox containers the pool keeps ready (SANDBOX_WARM)",
            pool.target,
        ),
    ]
}

/// What happened to the warm pool (when it is on).
fn pool_counters(pool: &PoolStats) -> [Row<u64>; 4] {
    [
        (
            "file_agent_warm_pool_takes",
            "Attempts that ran in a warm container",
            pool.takes,
        ),
        (
            "file_agent_warm_pool_misses",
            "Attempts that found no warm container ready and started a cold one",
            pool.misses,
        ),
        (
            "file_agent_warm_pool_replaced",
            "Warm containers removed unused (waited SANDBOX_WARM_MAX_IDLE, or died)",
            pool.replaced,
        ),
        (
            "file_agent_warm_pool_failures",
            "Warm containers that could not be started",
            pool.failures,
        ),
    ]
}

/// Whether the audit trail (when it is on) can take lines.
fn audit_gauge(audit: &AuditGauges) -> Row<usize> {
    (
        "file_agent_audit_writable",
        "1 when the audit trail can take lines, 0 while it cannot (calls that would run code are then refused, unless FILE_AGENT_AUDIT_ON_FAILURE=continue)",
        usize::from(audit.writable),
    )
}

/// What the audit trail (when it is on) could not do.
fn audit_counters(audit: &AuditGauges) -> [Row<u64>; 2] {
    [
        (
            "file_agent_audit_refused_calls",
            "Tool calls refused, or answered as failed with their output withheld, because the audit trail could not be written",
            audit.refused_calls,
        ),
        (
            "file_agent_audit_lines_lost",
            "Audit lines that could not be written",
            audit.lines_lost,
        ),
    ]
}

/// The spans a failed export lost (when traces are on).
fn trace_counter(dropped: u64) -> Row<u64> {
    (
        "file_agent_trace_spans_dropped",
        "Spans that did not reach the OpenTelemetry collector (an export that failed)",
        dropped,
    )
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
    use std::collections::{BTreeMap, BTreeSet};

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
        metrics
            .render(&Gauges {
                pool: Some(PoolStats::default()),
                audit: Some(AuditGauges::default()),
                canary: Some("isolated"),
                backend: "docker",
                runtime: "runsc".into(),
                trace_spans_dropped: Some(0),
                ..Gauges::default()
            })
            .unwrap()
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
        let text = metrics.render(&Gauges::default()).unwrap();
        for expected in [
            "# TYPE file_agent_attempt_cpu_seconds histogram",
            "file_agent_attempt_cpu_seconds_bucket{tool=\"run_python\",status=\"ok\",le=\"1\"} 0",
            "file_agent_attempt_cpu_seconds_bucket{tool=\"run_python\",status=\"ok\",le=\"2.5\"} 1",
            "file_agent_attempt_cpu_seconds_sum{tool=\"run_python\",status=\"ok\"} 1.25",
            "# TYPE file_agent_attempt_peak_memory_bytes histogram",
            "file_agent_attempt_peak_memory_bytes_bucket{tool=\"run_python\",status=\"ok\",le=\"1.34217728e+08\"} 0",
            "file_agent_attempt_peak_memory_bytes_bucket{tool=\"run_python\",status=\"ok\",le=\"2.68435456e+08\"} 1",
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
        let text = metrics
            .render(&Gauges {
                queue_depth: 1,
                backend: "docker",
                runtime: "runsc".into(),
                ..Gauges::default()
            })
            .unwrap();
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
        let with_pool = metrics
            .render(&Gauges {
                pool: Some(PoolStats {
                    target: 2,
                    ready: 1,
                    takes: 7,
                    misses: 3,
                    ..PoolStats::default()
                }),
                ..Gauges::default()
            })
            .unwrap();
        assert!(with_pool.contains("file_agent_warm_pool_ready 1"));
        assert!(with_pool.contains("file_agent_warm_pool_takes_total 7"));
        assert!(with_pool.contains("file_agent_warm_pool_misses_total 3"));
        assert!(
            !text.contains("network_canary"),
            "no canary, no canary rows"
        );
        let reached = metrics
            .render(&Gauges {
                canary: Some("reached"),
                ..Gauges::default()
            })
            .unwrap();
        assert!(reached.contains("file_agent_network_canary{verdict=\"reached\"} 1"));
        assert!(reached.contains("file_agent_network_canary{verdict=\"isolated\"} 0"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
