//! `file-agent bench`: what an attempt costs, beside what it is compared with, measured in one
//! run on one machine so that every figure sees the same load. All on one script (pandas and
//! xlsxwriter writing 1,000 rows, as a typical `generate_file` attempt does):
//!
//! - latency, in rounds (`--runs`): each round runs each kind once, alone (the pool is refilled
//!   before every measurement): a cold attempt (phase by phase), a warm attempt, `docker run
//!   --rm`, a plain `python3` subprocess (the architecture file-agent replaces) and the limit
//!   (the body in an interpreter that has already imported the libraries). Then `--pairs`
//!   rounds of a warm attempt and the limit only;
//! - warm / limit as the median of the rounds' own ratios (each round's two figures are taken
//!   seconds apart, so they see the same load), with its spread; a spread too wide to tell a
//!   change from the machine's noise is said so;
//! - the warm pool's cost: a warm container's memory when it is ready and once idle priming is
//!   done, and the refill time (from an attempt's end until the pool is full again);
//! - throughput: `--throughput` attempts, `--concurrency` at a time, cold and warm, and as
//!   plain subprocesses: attempts per second and host CPU seconds per attempt. The warm run
//!   starts with a full pool and ends when the pool is full again, so every container it used
//!   was made inside the window;
//! - `run_python` over MCP through a real server in this process, without and with the pool;
//! - what OpenTelemetry traces cost: the warm `run_python` call with traces on (exported to
//!   a receiver in this process) and off, in alternating rounds (`traces`);
//! - the signed audit trail: a line's append beside its leaf in the tree, signing a
//!   checkpoint, and proofs in a tree of a million lines (`trail`);
//! - signed receipts: what `FILE_AGENT_AUDIT_RECEIPTS=signed` adds to a `run_python` call
//!   alone and in bursts, and the calls per signature (`receipts`);
//! - sessions: what a session adds to a `run_python` call, with no names kept and with a
//!   DataFrame of 100 MiB kept, beside the same call rebuilding it from its workbook
//!   (`sessions`).

mod idle;
mod mcp;
mod owned;
mod probe;
mod receipts;
mod report;
mod sessions;
mod traces;
mod trail;

pub(super) use traces::prepare as prepare_traces;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio_util::sync::CancellationToken;

use crate::config::SandboxConfig;
use crate::sandbox::{Job, Runner, Sandbox, Status, Timings};
use idle::IdleCost;
use owned::Owned;
use probe::Probe;

/// The script measured: pandas and xlsxwriter writing 1,000 rows, as a typical attempt does.
const SCRIPT: &str = include_str!("pandas_xlsxwriter.py");
/// How long a warm container may wait during the bench (longer than any bench runs).
const BENCH_MAX_IDLE: Duration = Duration::from_secs(3600);

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(super) struct BenchArgs {
    /// Rounds of every kind of latency sample.
    pub runs: usize,
    /// Further rounds of a warm attempt and the limit only.
    pub pairs: usize,
    /// Attempts in each throughput run (0: none).
    pub throughput: usize,
    /// Attempts at once in the throughput runs (and warm containers kept).
    pub concurrency: usize,
    /// Whether to measure `run_python` over MCP.
    pub mcp: bool,
    /// Whether to measure the signed audit trail.
    pub trail: bool,
    /// Whether to measure what traces cost (the receiver was prepared before logging).
    pub traces: bool,
    /// Whether to measure what signed receipts add to a call.
    pub receipts: bool,
    /// Whether to measure what a session adds to a call.
    pub sessions: bool,
}

/// Everything one run measured, for the report.
#[derive(Debug, Default)]
struct Measured {
    samples: Samples,
    idle: Option<IdleCost>,
    rates: Vec<(&'static str, Rate)>,
    mcp: (Vec<Duration>, Vec<Duration>),
    traces: Option<traces::TracesCost>,
    receipts: Option<receipts::ReceiptsCost>,
    sessions: Option<sessions::SessionsCost>,
}

/// What `bench` exits with when SIGTERM or Ctrl-C stopped it (128 + SIGINT, as a shell says
/// of a command it interrupted).
const STOPPED: u8 = 130;

pub(super) async fn bench(config: SandboxConfig, args: BenchArgs) -> anyhow::Result<ExitCode> {
    let instance = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let config = SandboxConfig {
        instance: Some(instance.clone()),
        ..config
    };
    let owned = Owned::default();
    let stop = super::shutdown_token();
    // However the measurements end (done, failed, or dropped half-way by the signal), what
    // they started is stopped and removed before the bench exits.
    let ended = tokio::select! {
        measured = measure(&config, args, &owned) => Some(measured),
        () = stop.cancelled() => None,
    };
    if ended.is_none() {
        eprintln!("file-agent bench: stopped; removing the containers it started");
    }
    let removed = owned.release(&config).await;
    match (ended, removed) {
        (None, Ok(removed)) => {
            eprintln!("file-agent bench: removed {removed} containers of {instance}*");
            Ok(ExitCode::from(STOPPED))
        }
        (None, Err(error)) => Err(error.context(format!(
            "the bench was stopped and could not remove its containers: `file-agent reap --all` removes every container of file-agent's ({instance}* are the bench's)"
        ))),
        (Some(measured), removed) => {
            let measured = measured?;
            removed?;
            print(&measured, args)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Every measurement `args` asks for, on sandboxes and servers registered in `owned`.
async fn measure(
    config: &SandboxConfig,
    args: BenchArgs,
    owned: &Owned,
) -> anyhow::Result<Measured> {
    let image = config.image.clone();
    let instance = config.instance.clone().unwrap_or_default();
    let cold = owned.sandbox(Sandbox::connect(config.clone()).await?);
    if !cold.image_present(&image).await? {
        bail!("the sandbox image {image} is missing; build it with `file-agent image build`");
    }
    let warm = owned.sandbox(
        Sandbox::connect(config.clone())
            .await?
            .with_warm_pool(1, BENCH_MAX_IDLE),
    );
    let runtime = config.runtime.as_deref();
    eprintln!(
        "file-agent bench: {} rounds of each and {} of warm and limit, image {image}, runtime {}, {} CPUs; its containers are labelled {}={instance}*",
        args.runs,
        args.pairs,
        runtime.unwrap_or("default"),
        cpus(),
        crate::sandbox::policy::INSTANCE_LABEL,
    );
    let mut measured = Measured {
        // Before the probe starts: the only containers of this instance are the pool's.
        idle: Some(idle::measure(&warm, &instance).await?),
        ..Measured::default()
    };
    let mut probe = Probe::start(&image, runtime, &instance, args.concurrency, SCRIPT).await?;
    let cancel = CancellationToken::new();
    let kit = Kit {
        cold: &cold,
        warm: &warm,
        image: &image,
        runtime,
        instance: &instance,
        cancel: &cancel,
    };
    latency(&kit, &mut probe, args, &mut measured.samples).await?;
    warm.shutdown().await;

    if args.throughput > 0 {
        measured.rates = rates(&cold, config, owned, &mut probe, args, &cancel).await?;
    }
    probe.stop().await;
    cold.shutdown().await;
    if args.mcp {
        measured.mcp = mcp_calls(owned, &instance, args.runs).await?;
    }
    if args.traces {
        let rounds = args.runs + args.pairs;
        measured.traces = Some(traces::measure(owned, &instance, rounds).await?);
    }
    if args.receipts {
        let rounds = args.runs + args.pairs;
        measured.receipts = Some(receipts::measure(owned, &instance, rounds).await?);
    }
    if args.sessions {
        measured.sessions = Some(sessions::measure(owned, &instance, args.runs).await?);
    }
    Ok(measured)
}

/// The report of what `args` asked for, with the signed trail's figures (measured here: they
/// need no container).
fn print(measured: &Measured, args: BenchArgs) -> anyhow::Result<()> {
    report::print(measured, args);
    if let Some(cost) = &measured.receipts {
        receipts::print(cost);
    }
    if let Some(cost) = &measured.sessions {
        sessions::print(cost);
    }
    if args.trail {
        trail::print(&trail::measure()?);
    }
    Ok(())
}

/// What the latency rounds run on.
struct Kit<'a> {
    cold: &'a Sandbox,
    warm: &'a Sandbox,
    image: &'a str,
    runtime: Option<&'a str>,
    /// The bench's instance, which labels the `docker run --rm` baselines too.
    instance: &'a str,
    cancel: &'a CancellationToken,
}

/// `args.runs` rounds of every kind, then `args.pairs` rounds of a warm attempt and the limit,
/// after one of each that is not counted (the first start pays for page-cache misses).
async fn latency(
    kit: &Kit<'_>,
    probe: &mut Probe,
    args: BenchArgs,
    samples: &mut Samples,
) -> anyhow::Result<()> {
    settle(kit.warm).await;
    attempt(kit.cold, kit.cancel).await?;
    settle(kit.warm).await;
    attempt(kit.warm, kit.cancel).await?;
    probe::docker_run(kit.image, kit.runtime, kit.instance, SCRIPT).await?;
    for _ in 0..args.runs {
        settle(kit.warm).await;
        samples.cold.push(attempt(kit.cold, kit.cancel).await?);
        warm_round(kit, probe, samples).await?;
        samples
            .docker_run
            .push(probe::docker_run(kit.image, kit.runtime, kit.instance, SCRIPT).await?);
        samples.subprocess.push(probe.subprocess().await?);
    }
    for _ in 0..args.pairs {
        warm_round(kit, probe, samples).await?;
    }
    settle(kit.warm).await;
    Ok(())
}

/// A warm attempt from a full pool, the time until the pool is full again, and the limit right
/// after: one round's ratio.
async fn warm_round(kit: &Kit<'_>, probe: &mut Probe, samples: &mut Samples) -> anyhow::Result<()> {
    settle(kit.warm).await;
    let warm = attempt(kit.warm, kit.cancel).await?;
    samples.refill.push(idle::refill(kit.warm).await);
    let limit = probe.limit().await?;
    samples.rounds.push(ratio(warm.total, limit));
    samples.warm.push(warm);
    samples.limit.push(limit);
    Ok(())
}

/// The throughput runs: cold attempts, warm attempts from a pool of `args.concurrency`, and
/// plain subprocesses in the probe.
async fn rates(
    cold: &Sandbox,
    config: &SandboxConfig,
    owned: &Owned,
    probe: &mut Probe,
    args: BenchArgs,
    cancel: &CancellationToken,
) -> anyhow::Result<Vec<(&'static str, Rate)>> {
    eprintln!(
        "file-agent bench: throughput, {} attempts each",
        args.throughput
    );
    let mut rates = vec![("cold attempts", throughput(cold, args, cancel).await?)];
    let pooled = owned.sandbox(
        Sandbox::connect(config.clone())
            .await?
            .with_warm_pool(args.concurrency, BENCH_MAX_IDLE),
    );
    rates.push(("warm attempts", throughput(&pooled, args, cancel).await?));
    pooled.shutdown().await;
    let before = CpuClock::now();
    let wall = probe.throughput(args.throughput, args.concurrency).await?;
    rates.push((
        "plain subprocesses",
        Rate::of(args.throughput, wall, before),
    ));
    Ok(rates)
}

/// `run_python` over MCP, `runs` times each without and with the pool.
async fn mcp_calls(
    owned: &Owned,
    instance: &str,
    runs: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    eprintln!("file-agent bench: run_python over MCP");
    let cold_server = mcp::McpServer::start(owned, &format!("{instance}-mcp-cold"), 0).await?;
    let warm_server = mcp::McpServer::start(owned, &format!("{instance}-mcp-warm"), 1).await?;
    warm_server.settle().await;
    cold_server.run_python(SCRIPT).await?;
    warm_server.settle().await;
    warm_server.run_python(SCRIPT).await?;
    let mut calls = (Vec::new(), Vec::new());
    for _ in 0..runs {
        warm_server.settle().await;
        calls.0.push(cold_server.run_python(SCRIPT).await?);
        warm_server.settle().await;
        calls.1.push(warm_server.run_python(SCRIPT).await?);
    }
    cold_server.stop().await;
    warm_server.stop().await;
    Ok(calls)
}

/// Latency samples, one list per kind.
#[derive(Debug, Default)]
struct Samples {
    cold: Vec<Timings>,
    warm: Vec<Timings>,
    docker_run: Vec<Duration>,
    subprocess: Vec<Duration>,
    limit: Vec<Duration>,
    /// Each round's warm attempt over its limit.
    rounds: Vec<f64>,
    /// From a warm attempt's end until the pool was full again.
    refill: Vec<Duration>,
}

/// One throughput run.
#[derive(Debug, Clone, Copy)]
struct Rate {
    per_second: f64,
    cpu_per_attempt: Duration,
}

impl Rate {
    fn of(count: usize, wall: Duration, cpu_before: CpuClock) -> Self {
        Self {
            per_second: count as f64 / wall.as_secs_f64(),
            cpu_per_attempt: CpuClock::now().since(cpu_before) / count as u32,
        }
    }
}

/// Waits until the sandbox's pool (if any) is full, nothing is starting and every finished
/// container has been removed.
async fn settle(sandbox: &Sandbox) {
    while filling(sandbox)
        || sandbox.pool_stats().map_or(0, |pool| pool.ready) != sandbox.live_containers()
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the sandbox's pool is below its target or still starting a container.
fn filling(sandbox: &Sandbox) -> bool {
    sandbox
        .pool_stats()
        .is_some_and(|pool| pool.ready < pool.target || pool.starting > 0)
}

async fn attempt(sandbox: &Sandbox, cancel: &CancellationToken) -> anyhow::Result<Timings> {
    let out = tempfile::tempdir()?;
    let job = Job {
        script: SCRIPT.to_string(),
        ..Job::default()
    };
    let outcome = sandbox.run(job, out.path(), cancel).await?;
    if outcome.status != Status::Ok || outcome.outputs.len() != 1 {
        bail!(
            "the benchmark attempt did not succeed: {} {}",
            outcome.message,
            outcome.stderr.text()
        );
    }
    Ok(outcome.timings)
}

/// `args.throughput` attempts, `args.concurrency` at a time, from a settled pool (if any) to a
/// settled pool again.
async fn throughput(
    sandbox: &Sandbox,
    args: BenchArgs,
    cancel: &CancellationToken,
) -> anyhow::Result<Rate> {
    settle(sandbox).await;
    let left = Arc::new(std::sync::atomic::AtomicUsize::new(args.throughput));
    let before = CpuClock::now();
    let started = Instant::now();
    // A JoinSet: should the bench end early, dropping it aborts the workers with it.
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency {
        let (sandbox, left, cancel) = (sandbox.clone(), left.clone(), cancel.clone());
        workers.spawn(async move {
            while left
                .fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |n| n.checked_sub(1),
                )
                .is_ok()
            {
                attempt(&sandbox, &cancel).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(worker) = workers.join_next().await {
        worker??;
    }
    settle(sandbox).await;
    Ok(Rate::of(args.throughput, started.elapsed(), before))
}

/// The host's busy CPU time so far (all processes: the engine, the containers, this one).
#[derive(Debug, Clone, Copy)]
struct CpuClock(Duration);

impl CpuClock {
    fn now() -> Self {
        let ticks = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|stat| {
                let fields: Vec<u64> = stat
                    .lines()
                    .next()?
                    .split_whitespace()
                    .skip(1)
                    .filter_map(|f| f.parse().ok())
                    .collect();
                // user nice system idle iowait irq softirq steal: busy is all but idle, iowait.
                let all: u64 = fields.iter().take(8).sum();
                Some(all - fields.get(3)? - fields.get(4)?)
            })
            .unwrap_or(0);
        // USER_HZ is 100 on Linux.
        Self(Duration::from_millis(ticks * 10))
    }

    fn since(self, earlier: Self) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

pub(super) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}
