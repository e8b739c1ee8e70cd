//! The bench's yardsticks that are not file-agent: `docker run --rm` of the script, and a probe
//! container (`probe.py`) that times, from the inside, the script's body in an interpreter that
//! has already imported its libraries (the limit) and the script as a fresh `python3` process
//! (the plain subprocess file-agent replaces). Both use the docker CLI and the sandbox image, so
//! they pay what a user of those would pay.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::sandbox::policy;

const PROBE: &str = include_str!("probe.py");

/// `--runtime` for the docker CLI when the sandbox uses one, so the yardsticks run on it too.
fn runtime_args(runtime: Option<&str>) -> Vec<String> {
    runtime
        .map(|runtime| vec!["--runtime".to_string(), runtime.to_string()])
        .unwrap_or_default()
}

/// The labels that make a container file-agent's, of `instance` (`reap` finds it).
fn labels(instance: &str) -> [String; 4] {
    [
        "--label".to_string(),
        format!("{}=true", policy::MANAGED_LABEL),
        "--label".to_string(),
        format!("{}={instance}", policy::INSTANCE_LABEL),
    ]
}

/// `docker run --rm -i` of the script on the image (and runtime), with `output_dir` set to
/// `/tmp`: the simplest fresh container per run, labelled as file-agent's `instance`, so that
/// a bench stopped mid-run removes it.
pub(super) async fn docker_run(
    image: &str,
    runtime: Option<&str>,
    instance: &str,
    script: &str,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut child = Command::new("docker")
        .args(["run", "--rm", "-i", "--network", "none"])
        .args(runtime_args(runtime))
        .args(labels(instance))
        .arg(image)
        .args(["python3", "-I", "-B", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("running the docker CLI for the baseline")?;
    let mut stdin = child.stdin.take().context("no stdin for docker run")?;
    stdin
        .write_all(format!("output_dir = '/tmp'\n{script}").as_bytes())
        .await?;
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

/// The probe container, answering one command at a time.
pub(super) struct Probe {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Probe {
    /// Starts the probe with `cpus` CPUs (for the subprocess throughput at that concurrency),
    /// labelled as file-agent's so that `reap` finds it if the bench is killed.
    pub(super) async fn start(
        image: &str,
        runtime: Option<&str>,
        instance: &str,
        cpus: usize,
        script: &str,
    ) -> anyhow::Result<Self> {
        let mut child = Command::new("docker")
            .args(["run", "--rm", "-i", "--network", "none", "--read-only"])
            .args(runtime_args(runtime))
            .args(["--user", policy::SANDBOX_USER, "--tmpfs", "/tmp:size=512m"])
            .arg(format!("--cpus={cpus}"))
            .args(["--memory", "4g", "--pids-limit", "512"])
            .args(labels(instance))
            .args([image, "python3", "-I", "-B", "-c", PROBE])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("running the docker CLI for the probe")?;
        let mut stdin = child.stdin.take().context("no stdin for the probe")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout for the probe")?);
        stdin
            .write_all(format!("script {}\n", serde_json::to_string(script)?).as_bytes())
            .await?;
        let mut probe = Self {
            child,
            stdin,
            stdout,
        };
        let ready = probe.read_line().await?;
        if ready != "ready" {
            bail!("the probe did not start: {ready:?}");
        }
        Ok(probe)
    }

    /// The script's body in the probe's own interpreter.
    pub(super) async fn limit(&mut self) -> anyhow::Result<Duration> {
        self.ask("limit").await
    }

    /// The script as a fresh `python3` process.
    pub(super) async fn subprocess(&mut self) -> anyhow::Result<Duration> {
        self.ask("subprocess").await
    }

    /// `count` subprocesses, `concurrency` at a time: the wall time for all.
    pub(super) async fn throughput(
        &mut self,
        count: usize,
        concurrency: usize,
    ) -> anyhow::Result<Duration> {
        self.ask(&format!("throughput {count} {concurrency}")).await
    }

    /// Stops the probe (its container goes with it: `--rm`).
    pub(super) async fn stop(mut self) {
        drop(self.stdin);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        let _ = self.child.kill().await;
    }

    async fn ask(&mut self, command: &str) -> anyhow::Result<Duration> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        let answer = self.read_line().await?;
        let seconds: f64 = answer
            .parse()
            .with_context(|| format!("the probe answered {answer:?} to {command}"))?;
        Ok(Duration::from_secs_f64(seconds))
    }

    async fn read_line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line).await? == 0 {
            bail!("the probe container ended");
        }
        Ok(line.trim().to_string())
    }
}
