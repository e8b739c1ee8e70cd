//! The fast tier's [`Runner`]: `sandbox-image/runner.py`, the very script that is PID 1 of
//! every container, run as a local process with the host's Python (the image's wheels, from
//! `scripts/sandbox-python.sh`) in a temporary folder. It speaks the same protocol as a
//! container (the header line and the tar on stdin; frames back), and its result goes through
//! the same parser ([`stream::read_attempt`]), unpacker and [`classify`] as the Docker
//! sandbox's, so the tool flows above see the same [`Outcome`].
//!
//! It contains nothing: no namespace, no limit but the time limit, the host's network. It
//! exists only in this test binary, so no setting of a release build can reach it, and it runs
//! only scripts the tests wrote (the fake model's fixtures and file-agent's own scripts).
//!
//! Paths: a container's `/work` is the temporary folder here (`runner.py --work`), and the
//! image's `/opt/file-agent/` is `sandbox-image/`. Both are rewritten in the job's script and
//! preset paths before it is sent, so fixtures and file-agent's jobs keep their real paths.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, SystemTime};

use file_agent::config::SandboxConfig;
use file_agent::sandbox::archive::UnpackLimits;
use file_agent::sandbox::request::Request;
use file_agent::sandbox::stream::{self, Reading};
use file_agent::sandbox::{End, Ending, Job, Outcome, Runner, SandboxError, Timings, classify};
use tokio_util::sync::CancellationToken;

/// The repository's root (where `sandbox-image/` is).
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Where the image keeps its scripts, as file-agent's jobs name them.
const IMAGE_SCRIPTS: &str = "/opt/file-agent/";
/// The container's work folder, as scripts and preset paths name it.
const WORK: &str = "/work/";

/// Runs jobs with `runner.py` and the host's Python; see the module's comment.
#[derive(Debug)]
pub struct LocalRunner {
    config: SandboxConfig,
    python: PathBuf,
    /// Jobs run so far (their "container" ids).
    runs: AtomicUsize,
}

impl LocalRunner {
    /// A runner with `config`'s limits (only the time limit and the output caps apply). Panics
    /// with what to do when the venv of `scripts/sandbox-python.sh` is missing.
    pub fn new(config: SandboxConfig) -> Self {
        let python = python_env().join("bin/python3");
        assert!(
            python.exists(),
            "{} is missing: run scripts/sandbox-python.sh (or scripts/test-setup.sh) first",
            python.display()
        );
        Self {
            config,
            python,
            runs: AtomicUsize::new(0),
        }
    }

    /// How many jobs it has run.
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// The venv with the image's wheels.
fn python_env() -> PathBuf {
    crate::common::test_venv("FILE_AGENT_TEST_PYTHON_ENV", "target/sandbox-python")
}

/// `job` with the container's paths moved to `work` and `sandbox-image/`.
fn relocate(mut job: Job, work: &Path) -> Job {
    let work = format!("{}/", work.display());
    let scripts = format!("{ROOT}/sandbox-image/");
    // `/work/` first: the checkout's own path may contain it (`/work/main/sandbox-image/`).
    let moved = |text: &str| text.replace(WORK, &work).replace(IMAGE_SCRIPTS, &scripts);
    let script = moved(&job.script);
    job.script = script;
    job.file_path = job.file_path.as_deref().map(moved);
    job.input_file_path = job.input_file_path.as_deref().map(moved);
    job
}

fn io_error(action: &str) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::Io {
        action: action.to_string(),
        source,
    }
}

impl Runner for LocalRunner {
    fn config(&self) -> &SandboxConfig {
        &self.config
    }

    async fn run(
        &self,
        job: Job,
        out_dir: &Path,
        cancel: &CancellationToken,
    ) -> Result<Outcome, SandboxError> {
        let started = Instant::now();
        let number = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let limits = &self.config.limits;
        let work = tempfile::tempdir().map_err(io_error("making the work folder"))?;
        let job = relocate(job, work.path());
        let request = Request::build(&job, limits)?;
        // The image has /work/out (the runner makes /work read-only before the script runs).
        std::fs::create_dir(work.path().join("out")).map_err(io_error("making out/"))?;
        let home = work.path().join("home");
        std::fs::create_dir(&home).map_err(io_error("making the home folder"))?;
        let mut child = tokio::process::Command::new(&self.python)
            .arg("-I")
            .arg("-B")
            .arg(Path::new(ROOT).join("sandbox-image/runner.py"))
            .arg("--work")
            .arg(work.path())
            .arg(work.path().join("script.py"))
            // The image's environment, with the host's folders.
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &home)
            .env("MPLBACKEND", "Agg")
            .env("MPLCONFIGDIR", python_env().join("matplotlib"))
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group, so that a timeout or a cancellation kills what the script
            // started too, as removing a container does.
            .process_group(0)
            .spawn()
            .map_err(io_error("starting the host's Python"))?;
        let group = child.id();
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(io_error("opening the runner's pipes")(
                std::io::Error::other("a pipe is missing"),
            ));
        };
        let Reading {
            relay,
            finished: _,
            unpacker,
        } = stream::read_attempt(
            stdout,
            stderr,
            request.key.clone(),
            limits.stdio_max_bytes,
            out_dir.to_path_buf(),
            UnpackLimits {
                max_bytes: limits.output_max_bytes,
                max_entries: limits.output_max_files,
            },
        );
        let phase = Instant::now();
        // The runner takes the end of stdin for "the server is gone": keep it open until the
        // runner has exited, as a container's attach connection stays open.
        request
            .send(&mut stdin)
            .await
            .map_err(io_error("sending the request"))?;
        let copy_in = phase.elapsed();
        let end = tokio::select! {
            status = child.wait() => {
                let status = status.map_err(io_error("waiting for the runner"))?;
                End::Exited(status.code().map(i64::from))
            }
            () = tokio::time::sleep(limits.timeout) => End::TimedOut,
            () = cancel.cancelled() => {
                kill_group(group);
                let _ = child.kill().await;
                make_removable(work.path());
                return Err(SandboxError::Cancelled);
            }
        };
        if end == End::TimedOut {
            kill_group(group);
            let _ = child.kill().await;
        }
        drop(stdin);
        let run = phase.elapsed();
        let relayed = relay
            .await
            .map_err(|e| io_error("reading the runner's output")(std::io::Error::other(e)))?;
        let unpacked = unpacker
            .await
            .map_err(std::io::Error::other)
            .and_then(|unpacked| unpacked)
            .map_err(io_error("writing the outputs"))?;
        make_removable(work.path());

        let end = match (end, &relayed.report) {
            (End::Exited(_), Some(report)) => End::Exited(report.exit_code),
            (end, _) => end,
        };
        let ending = Ending {
            end,
            oom_killed: relayed
                .report
                .as_ref()
                .and_then(|report| report.oom_killed)
                .unwrap_or(false),
            report: relayed.report.as_ref(),
            complete: relayed.complete,
            stream_error: relayed.error.as_deref(),
            gvisor: false,
            limit: unpacked.limit.as_deref(),
            malformed: unpacked.malformed.as_deref(),
        };
        let (status, exit_code, message) = classify(&ending, limits);
        let resources =
            (relayed.report.as_ref()).map_or_else(Default::default, |report| report.resources);
        Ok(Outcome {
            status,
            exit_code,
            stdout: relayed.stdout,
            stderr: relayed.stderr,
            outputs: unpacked.files,
            skipped: unpacked.skipped,
            timings: Timings {
                copy_in,
                run,
                total: started.elapsed(),
                ..Timings::default()
            },
            message,
            container_id: format!("local-{number}"),
            image_id: "local".to_string(),
            warm: false,
            container_created: SystemTime::now(),
            resources,
        })
    }
}

/// Kills the process group `group` (the runner and whatever the script started).
fn kill_group(group: Option<u32>) {
    if let Some(group) = group {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .status();
    }
}

/// The runner makes `/work` and `/work/in` read-only, as in a container; give the owner back
/// the right to remove them (a non-root user could not delete the folder otherwise).
fn make_removable(work: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for folder in [work.join("in"), work.to_path_buf()] {
        let _ = std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o755));
    }
}
