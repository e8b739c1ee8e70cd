//! `file-agent bench`: what an attempt costs, beside what it is compared with, measured in one
//! run on one machine so that every figure sees the same load. All on one script (pandas and
//! xlsxwriter writing 1,000 rows, as a typical `generate_file` attempt does):
//!
//! - latency, medians of `--runs`, each kind in turn and each alone (the pool is refilled
//!   before every measurement): a cold attempt (phase by phase), a warm attempt, `docker run
//!   --rm`, a plain `python3` subprocess (the architecture file-agent replaces) and the limit
//!   (the body in an interpreter that has already imported the libraries);
//! - throughput: `--throughput` attempts, `--concurrency` at a time, cold and warm, and as
//!   plain subprocesses: attempts per second and host CPU seconds per attempt. The warm run
//!   starts with a full pool and ends when the pool is full again, so every container it used
//!   was made inside the window;
//! - `run_python` over MCP through a real server in this process, without and with the pool.

mod mcp;
mod probe;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio_util::sync::CancellationToken;

use crate::config::SandboxConfig;
use crate::sandbox::{Job, Runner, Sandbox, Status, Timings};
use probe::Probe;

/// The script measured: pandas and xlsxwriter writing 1,000 rows, as a typical attempt does.
const SCRIPT: &str = include_str!("pandas_xlsxwriter.py");
/// How long a warm container may wait during the bench (longer than any bench runs).
const BENCH_MAX_IDLE: Duration = Duration::from_secs(3600);

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(super) struct BenchArgs {
    /// Latency samples of each kind.
    pub runs: usize,
    /// Attempts in each throughput run (0: none).
    pub throughput: usize,
    /// Attempts at once in the throughput runs (and warm containers kept).
    pub concurrency: usize,
    /// Whether to measure `run_python` over MCP.
    pub mcp: bool,
}

pub(super) async fn bench(config: SandboxConfig, args: BenchArgs) -> anyhow::Result<ExitCode> {
    let image = config.image.clone();
    let instance = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let config = SandboxConfig {
        instance: Some(instance.clone()),
        ..config
    };
    let cold = Sandbox::connect(config.clone()).await?;
    if !cold.image_present(&image).await? {
        bail!("the sandbox image {image} is missing; build it with `file-agent image build`");
    }
    let warm = Sandbox::connect(config.clone())
        .await?
        .with_warm_pool(1, BENCH_MAX_IDLE);
    let runtime = config.runtime.as_deref();
    let mut probe = Probe::start(&image, runtime, &instance, args.concurrency, SCRIPT).await?;
    let cancel = CancellationToken::new();
    eprintln!(
        "file-agent bench: {} runs of each, image {image}, runtime {}, {} CPUs",
        args.runs,
        runtime.unwrap_or("default"),
        cpus()
    );

    // One of each first, not counted: the first start pays for page-cache misses.
    settle(&warm).await;
    attempt(&cold, &cancel).await?;
    settle(&warm).await;
    attempt(&warm, &cancel).await?;
    probe::docker_run(&image, runtime, SCRIPT).await?;
    let mut samples = Samples::default();
    for _ in 0..args.runs {
        settle(&warm).await;
        samples.cold.push(attempt(&cold, &cancel).await?);
        settle(&warm).await;
        samples.warm.push(attempt(&warm, &cancel).await?);
        samples
            .docker_run
            .push(probe::docker_run(&image, runtime, SCRIPT).await?);
        samples.subprocess.push(probe.subprocess().await?);
        samples.limit.push(probe.limit().await?);
    }
    warm.shutdown().await;

    let mut rates = Vec::new();
    if args.throughput > 0 {
        eprintln!(
            "file-agent bench: throughput, {} attempts each",
            args.throughput
        );
        rates.push(("cold attempts", throughput(&cold, args, &cancel).await?));
        let pooled = Sandbox::connect(config.clone())
            .await?
            .with_warm_pool(args.concurrency, BENCH_MAX_IDLE);
        rates.push(("warm attempts", throughput(&pooled, args, &cancel).await?));
        pooled.shutdown().await;
        let before = CpuClock::now();
        let wall = probe.throughput(args.throughput, args.concurrency).await?;
        rates.push((
            "plain subprocesses",
            Rate::of(args.throughput, wall, before),
        ));
    }
    probe.stop().await;
    cold.shutdown().await;

    let mut mcp_samples = (Vec::new(), Vec::new());
    if args.mcp {
        eprintln!("file-agent bench: run_python over MCP");
        let cold_server = mcp::McpServer::start(&format!("{instance}-mcp-cold"), 0).await?;
        let warm_server = mcp::McpServer::start(&format!("{instance}-mcp-warm"), 1).await?;
        warm_server.settle().await;
        cold_server.run_python(SCRIPT).await?;
        warm_server.settle().await;
        warm_server.run_python(SCRIPT).await?;
        for _ in 0..args.runs {
            warm_server.settle().await;
            mcp_samples.0.push(cold_server.run_python(SCRIPT).await?);
            warm_server.settle().await;
            mcp_samples.1.push(warm_server.run_python(SCRIPT).await?);
        }
        cold_server.stop().await;
        warm_server.stop().await;
    }
    report(&samples, &rates, &mcp_samples, args);
    Ok(ExitCode::SUCCESS)
}

/// Latency samples, one list per kind.
#[derive(Debug, Default)]
struct Samples {
    cold: Vec<Timings>,
    warm: Vec<Timings>,
    docker_run: Vec<Duration>,
    subprocess: Vec<Duration>,
    limit: Vec<Duration>,
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
    loop {
        let ready = match sandbox.pool_stats() {
            Some(pool) if pool.ready < pool.target || pool.starting > 0 => None,
            Some(pool) => Some(pool.ready),
            None => Some(0),
        };
        if ready == Some(sandbox.live_containers()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (sandbox, left, cancel) = (sandbox.clone(), left.clone(), cancel.clone());
            tokio::spawn(async move {
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
            })
        })
        .collect();
    for worker in workers {
        worker.await??;
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

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

fn report(
    samples: &Samples,
    rates: &[(&str, Rate)],
    mcp: &(Vec<Duration>, Vec<Duration>),
    args: BenchArgs,
) {
    let phases =
        |list: &[Timings], pick: fn(&Timings) -> Duration| median(list.iter().map(pick).collect());
    println!(
        "file-agent bench: {} runs, medians (ms); script: pandas + xlsxwriter, 1,000 rows to one .xlsx\n",
        args.runs
    );
    println!("{:<34}{:>10}{:>10}", "phase of an attempt", "cold", "warm");
    type Pick = fn(&Timings) -> Duration;
    let rows: [(&str, Pick); 7] = [
        ("create + verify", |t| t.create),
        ("attach + start", |t| t.start),
        ("send the request", |t| t.copy_in),
        ("request sent to script end", |t| t.run),
        ("logs after exit", |t| t.logs),
        ("copy out", |t| t.copy_out),
        ("whole attempt (removal follows)", |t| t.total),
    ];
    for (name, pick) in rows {
        println!(
            "{name:<34}{:>10.1}{:>10.1}",
            ms(phases(&samples.cold, pick)),
            ms(phases(&samples.warm, pick))
        );
    }
    let cold = phases(&samples.cold, |t| t.total);
    let warm = phases(&samples.warm, |t| t.total);
    let docker_run = median(samples.docker_run.clone());
    let subprocess = median(samples.subprocess.clone());
    let limit = median(samples.limit.clone());
    println!();
    for (name, value) in [
        ("cold attempt", cold),
        ("warm attempt", warm),
        ("docker run --rm (CLI)", docker_run),
        ("plain python3 subprocess", subprocess),
        ("the limit (body, libraries loaded)", limit),
    ] {
        println!("{name:<38}{:>10.1}", ms(value));
    }
    println!("\nratios (below 1: the first is faster)");
    for (name, a, b) in [
        ("warm attempt / the limit", warm, limit),
        ("warm attempt / plain subprocess", warm, subprocess),
        ("cold attempt / plain subprocess", cold, subprocess),
        ("warm attempt / docker run --rm", warm, docker_run),
        ("cold attempt / docker run --rm", cold, docker_run),
    ] {
        println!("{name:<38}{:>10.2}", ratio(a, b));
    }
    if !rates.is_empty() {
        println!(
            "\nthroughput: {} attempts, {} at a time, on {} CPUs",
            args.throughput,
            args.concurrency,
            cpus()
        );
        println!("{:<24}{:>14}{:>22}", "", "attempts/s", "host CPU s/attempt");
        for (name, rate) in rates {
            println!(
                "{name:<24}{:>14.2}{:>22.2}",
                rate.per_second,
                rate.cpu_per_attempt.as_secs_f64()
            );
        }
        let find = |name: &str| rates.iter().find(|(n, _)| *n == name).map(|(_, r)| *r);
        if let (Some(cold), Some(warm), Some(plain)) = (
            find("cold attempts"),
            find("warm attempts"),
            find("plain subprocesses"),
        ) {
            println!(
                "warm / cold: {:.2}x; warm / plain subprocess: {:.2}x; cold / plain subprocess: {:.2}x",
                warm.per_second / cold.per_second,
                warm.per_second / plain.per_second,
                cold.per_second / plain.per_second
            );
        }
    }
    if !mcp.0.is_empty() {
        let (cold_call, warm_call) = (median(mcp.0.clone()), median(mcp.1.clone()));
        println!("\nrun_python over MCP (rmcp client, real server, local store)");
        println!("{:<38}{:>10.1}", "pool off (cold)", ms(cold_call));
        println!("{:<38}{:>10.1}", "pool on (warm)", ms(warm_call));
        println!(
            "warm call / docker run --rm: {:.2}; warm call / plain subprocess: {:.2}; cold call / plain subprocess: {:.2}",
            ratio(warm_call, docker_run),
            ratio(warm_call, subprocess),
            ratio(cold_call, subprocess)
        );
    }
}
