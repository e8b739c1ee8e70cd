//! `file-agent bench`: one attempt phase by phase, beside `docker run --rm` of the same script on
//! the same image, measured alternately in the same run so that both see the same machine load.

use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::config::SandboxConfig;
use crate::sandbox::{Job, Runner, Sandbox, Status, Timings};

/// The script measured: pandas and xlsxwriter writing 1,000 rows, as a typical attempt does.
const SCRIPT: &str = include_str!("../../benches/fixtures/pandas_xlsxwriter.py");

pub(super) async fn bench(config: SandboxConfig, runs: usize) -> anyhow::Result<ExitCode> {
    let image = config.image.clone();
    let sandbox = Sandbox::connect(config).await?;
    if !sandbox.image_present(&image).await? {
        bail!("the sandbox image {image} is missing; build it with `file-agent image build`");
    }
    let cancel = CancellationToken::new();
    let mut attempts: Vec<Timings> = Vec::with_capacity(runs);
    let mut docker_runs: Vec<Duration> = Vec::with_capacity(runs);
    // One warm-up of each, not counted: the first start pays for page-cache misses.
    let _ = attempt(&sandbox, &cancel).await?;
    let _ = docker_run(&image).await?;
    for _ in 0..runs {
        attempts.push(attempt(&sandbox, &cancel).await?);
        docker_runs.push(docker_run(&image).await?);
    }
    sandbox.shutdown().await;

    let phase = |pick: fn(&Timings) -> Duration| median(attempts.iter().map(pick).collect());
    let rows = [
        ("create + verify", phase(|t| t.create)),
        ("copy in", phase(|t| t.copy_in)),
        ("start to script end", phase(|t| t.run)),
        ("logs after exit", phase(|t| t.logs)),
        ("copy out", phase(|t| t.copy_out)),
        ("remove", phase(|t| t.remove)),
    ];
    let whole = phase(|t| t.total);
    let baseline = median(docker_runs);
    println!("file-agent bench: {runs} runs each, medians, image {image}");
    println!("script: pandas + xlsxwriter, 1,000 rows to one .xlsx\n");
    println!("{:<28}{:>10}", "phase (file-agent attempt)", "ms");
    for (name, value) in rows {
        println!("{name:<28}{:>10.1}", ms(value));
    }
    println!("{:<28}{:>10.1}", "whole attempt", ms(whole));
    println!("{:<28}{:>10.1}", "docker run --rm (CLI)", ms(baseline));
    println!(
        "\nratio attempt / docker run --rm: {:.2} (below 1 is faster)",
        whole.as_secs_f64() / baseline.as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
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

/// `docker run --rm -i` of the same script through the same runner, without copy-out.
async fn docker_run(image: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut child = tokio::process::Command::new("docker")
        .args(["run", "--rm", "-i", "--network", "none", image])
        .args([
            "python3",
            "-I",
            "-B",
            "/opt/file-agent/runner.py",
            "/dev/stdin",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("running the docker CLI for the baseline")?;
    let mut stdin = child.stdin.take().context("no stdin for docker run")?;
    stdin.write_all(SCRIPT.as_bytes()).await?;
    drop(stdin);
    let output = child.wait_with_output().await?;
    if !output.status.success() {
        bail!(
            "docker run --rm failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(started.elapsed())
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
