//! One attempt in a started container, from sending its request to knowing how it ended:
//! the streams (the request in; stdout and stderr out, read by [`stream::read_attempt`], the
//! one parser of what a runner sends back), the race between the runner's report, the
//! container's exit, the deadline and cancellation, and [`classify`], the pure judgement of how
//! it ended.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::query_parameters::KillContainerOptionsBuilder;
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::engine::Engine;
use super::request::Request;
use super::started::{InputStream, OutputStream};
use super::stream::{self, Reading, Relayed, Report, RunnerEnd};
use super::{COPY_OUT_GRACE, Sandbox, SandboxError, Status, Timings, archive};
use crate::config::{Limits, SandboxConfig};

/// Time allowed for the attach stream to close after the container exited.
const DRAIN_GRACE: Duration = Duration::from_secs(10);
/// Bytes of the attach stream held for the parser, per stream, before Docker is read further.
const DEMUX_BUFFER: usize = 2 * stream::FRAME_MAX_BYTES;

/// Docker's attach output as two byte streams, stdout and stderr, for the parser: a task
/// copies each message into its stream. Once a reader is dropped, what comes for it is read
/// and dropped, so the container never blocks; both streams end with the attach stream.
fn demux(
    mut output: OutputStream,
) -> (impl AsyncRead + Send + Unpin, impl AsyncRead + Send + Unpin) {
    // Duplex, not simplex: a dropped end makes the other end's writes fail and its reads end.
    let (stdout, stdout_writer) = tokio::io::duplex(DEMUX_BUFFER);
    let (stderr, stderr_writer) = tokio::io::duplex(DEMUX_BUFFER);
    tokio::spawn(async move {
        let mut writers = (Some(stdout_writer), Some(stderr_writer));
        while let Some(item) = output.next().await {
            let (writer, message) = match item {
                Ok(LogOutput::StdOut { message }) => (&mut writers.0, message),
                Ok(LogOutput::StdErr { message }) => (&mut writers.1, message),
                Ok(_) => continue,
                Err(error) => {
                    tracing::warn!(%error, "the container's output stream broke");
                    break;
                }
            };
            if let Some(sink) = writer
                && sink.write_all(&message).await.is_err()
            {
                *writer = None;
            }
        }
    });
    (stdout, stderr)
}

/// The tasks of one attempt's streams, started together.
struct Streams {
    /// Reads stdout and stderr, and unpacks the outputs.
    reading: Reading,
    /// Sends the request; gives back how long it took and the writer (kept open until the
    /// attempt is over: the runner takes its end for "the server is gone").
    copy_in: JoinHandle<(Duration, InputStream)>,
}

impl Streams {
    fn start(
        stdio: (OutputStream, InputStream),
        request: Request,
        out_dir: PathBuf,
        limits: &Limits,
    ) -> Self {
        let (output, input) = stdio;
        let (stdout, stderr) = demux(output);
        let reading = stream::read_attempt(
            stdout,
            stderr,
            request.key.clone(),
            limits.stdio_max_bytes,
            out_dir,
            archive::UnpackLimits {
                max_bytes: limits.output_max_bytes,
                max_entries: limits.output_max_files,
            },
        );
        let copy_in = send(input, request);
        Self { reading, copy_in }
    }
}

/// Sends the request (its header, then its upload, a session's state streamed from its file)
/// in a task of its own: how long it took, and the writer, which the caller keeps open until
/// the attempt is over.
fn send(mut input: InputStream, request: Request) -> JoinHandle<(Duration, InputStream)> {
    tokio::spawn(async move {
        let started = Instant::now();
        if let Err(error) = request.send(&mut input).await {
            // The runner reports a short upload; the outcome shows it.
            tracing::warn!(%error, "sending the script and inputs failed");
        }
        (started.elapsed(), input)
    })
}

impl Sandbox {
    /// Everything between "a container is ready for the request" and its removal. The caller
    /// owns the guard and removes the container whatever this returns.
    pub(super) async fn drive(
        &self,
        id: &str,
        stdio: (OutputStream, InputStream),
        request: Request,
        out_dir: PathBuf,
        cancel: &CancellationToken,
        timings: &mut Timings,
    ) -> Result<Ended, SandboxError> {
        let limits = &self.config().limits;
        // The script's clock starts when its request is sent.
        let phase = Instant::now();
        let Streams {
            reading:
                Reading {
                    relay: mut pump,
                    finished,
                    unpacker,
                },
            copy_in,
        } = Streams::start(stdio, request, out_dir, limits);
        let (end, relayed) = self
            .await_end(id, &mut pump, finished, limits.timeout, cancel)
            .await?;
        let exited_at = Instant::now();
        let input = stop_copy_in(copy_in, timings).await;
        if !matches!(end, Some(End::Exited(_))) {
            self.kill(id).await?;
        }
        let Some(end) = end else {
            pump.abort();
            return Err(SandboxError::Cancelled);
        };
        let relayed = match relayed {
            Some(relayed) => relayed,
            None => drain(pump).await?,
        };
        drop(input);
        let unpacked = unpacked(unpacker).await?;
        time_phases(timings, &relayed, phase, exited_at);
        let oom_killed = self.memory_killed(id, relayed.report.as_ref()).await?;
        Ok(Ended {
            end,
            oom_killed,
            gvisor: runs_gvisor(self.config()),
            relayed,
            unpacked,
        })
    }

    /// Waits for whichever comes first: the runner's whole result (the relay ends with its
    /// end frame), the container's exit, the deadline (`timeout`, then the copy-out grace once
    /// the script is done) or cancellation (`None`). The relay's result comes back when it
    /// ended first.
    async fn await_end(
        &self,
        id: &str,
        pump: &mut JoinHandle<Relayed>,
        finished: oneshot::Receiver<()>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<(Option<End>, Option<Relayed>), SandboxError> {
        let exit = self.wait_exit(id);
        let deadline = async {
            tokio::select! {
                _ = tokio::time::sleep(timeout) => {}
                Ok(()) = finished => tokio::time::sleep(COPY_OUT_GRACE).await,
            }
        };
        tokio::pin!(exit, deadline);
        // Usually the relay ends first, with the runner's end frame: the result is whole and
        // the container need not be seen to exit. Otherwise (a runner that could not say, a
        // kill, a stream that ended early) Docker's exit code and OOM flag decide.
        tokio::select! {
            joined = pump => {
                let relayed = joined.map_err(|e| SandboxError::Io {
                    action: "reading the container's output".to_string(),
                    source: std::io::Error::other(e),
                })?;
                let end = match (&relayed.report, relayed.complete) {
                    (Some(report), true) => Some(End::Exited(report.exit_code)),
                    _ => tokio::select! {
                        code = &mut exit => Some(End::Exited(code?)),
                        () = &mut deadline => Some(End::TimedOut),
                        () = cancel.cancelled() => None,
                    },
                };
                Ok((end, Some(relayed)))
            }
            code = &mut exit => Ok((Some(End::Exited(code?)), None)),
            () = &mut deadline => Ok((Some(End::TimedOut), None)),
            () = cancel.cancelled() => Ok((None, None)),
        }
    }

    /// The container's exit code once it has exited (`None` when the engine does not say).
    async fn wait_exit(&self, id: &str) -> Result<Option<i64>, SandboxError> {
        let docker = match self.engine() {
            Engine::Docker(docker) => docker,
            Engine::Kubernetes(cluster) => return cluster.wait_exit(id).await,
        };
        let mut wait = docker.wait_container(id, None);
        match wait.next().await {
            Some(Ok(response)) => Ok(Some(response.status_code)),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                Ok(Some(code))
            }
            Some(Err(e)) => Err(SandboxError::docker("waiting for the container", e)),
            None => Ok(None),
        }
    }

    /// Whether the script was killed for its memory: as the runner's report says, else as the
    /// engine's flag says.
    async fn memory_killed(&self, id: &str, report: Option<&Report>) -> Result<bool, SandboxError> {
        match report.and_then(|report| report.oom_killed) {
            Some(reported) => Ok(reported),
            None => self.oom_killed(id).await,
        }
    }

    /// Docker's OOM flag, once the container has exited (waits for the exit if need be).
    async fn oom_killed(&self, id: &str) -> Result<bool, SandboxError> {
        let docker = match self.engine() {
            Engine::Docker(docker) => docker,
            Engine::Kubernetes(cluster) => return cluster.oom_killed(id).await,
        };
        let state = || async {
            docker
                .inspect_container(id, None)
                .await
                .map_err(|e| SandboxError::docker("inspecting the finished container", e))
                .map(|container| container.state.unwrap_or_default())
        };
        let mut now = state().await?;
        if now.running == Some(true) {
            let _ = tokio::time::timeout(DRAIN_GRACE, docker.wait_container(id, None).next()).await;
            now = state().await?;
        }
        Ok(now.oom_killed.unwrap_or(false))
    }

    async fn kill(&self, id: &str) -> Result<(), SandboxError> {
        let docker = match self.engine() {
            Engine::Docker(docker) => docker,
            // A pod cannot be signalled: it is deleted at once.
            Engine::Kubernetes(cluster) => return cluster.remove(id).await,
        };
        let options = KillContainerOptionsBuilder::default()
            .signal("SIGKILL")
            .build();
        match docker.kill_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            // Not running any more (409) or gone (404): nothing to kill.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => Ok(()),
            Err(e) => Err(SandboxError::docker("killing the container", e)),
        }
    }
}

/// Stops the upload if it is still going and records how long it took; the writer comes back,
/// to be held open until the attempt is over. It is done by now unless the container died
/// mid-upload; then the stream is closed or about to be, when the kill lands.
async fn stop_copy_in(
    copy_in: JoinHandle<(Duration, InputStream)>,
    timings: &mut Timings,
) -> Option<InputStream> {
    copy_in.abort();
    match copy_in.await {
        Ok((took, input)) => {
            timings.copy_in = took;
            Some(input)
        }
        Err(_) => None,
    }
}

/// The attempt's phases once its output is in: the logs (from the container's end to the
/// stream's), the run (from `sent` to the runner's end frame, else to the container's end)
/// and the copy-out (from the end frame to now, the outputs unpacked).
fn time_phases(timings: &mut Timings, relayed: &Relayed, sent: Instant, exited_at: Instant) {
    timings.logs = relayed.ended.saturating_duration_since(exited_at);
    let script_done = relayed.finished_at.unwrap_or(exited_at);
    timings.run = script_done.saturating_duration_since(sent);
    timings.copy_out = relayed
        .finished_at
        .map(|at| Instant::now().saturating_duration_since(at))
        .unwrap_or_default();
}

/// What the unpacker wrote, once the archive has ended.
async fn unpacked(
    unpacker: JoinHandle<std::io::Result<archive::Unpacked>>,
) -> Result<archive::Unpacked, SandboxError> {
    unpacker
        .await
        .map_err(|e| SandboxError::Io {
            action: "unpacking the outputs".to_string(),
            source: std::io::Error::other(e),
        })?
        .map_err(|source| SandboxError::Io {
            action: "writing the outputs".to_string(),
            source,
        })
}

/// The relay's result once the container has ended: the stream closes within [`DRAIN_GRACE`].
async fn drain(pump: JoinHandle<Relayed>) -> Result<Relayed, SandboxError> {
    let error = |source| SandboxError::Io {
        action: "reading the container's output".to_string(),
        source,
    };
    match tokio::time::timeout(DRAIN_GRACE, pump).await {
        Ok(Ok(pumped)) => Ok(pumped),
        Ok(Err(join_error)) => Err(error(std::io::Error::other(join_error))),
        Err(_) => Err(error(std::io::Error::other(
            "the output stream did not close after exit",
        ))),
    }
}

/// How the wait for the container ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// It exited, with this code if Docker (or the runner's report) knew one.
    Exited(Option<i64>),
    /// The time limit (or the copy-out grace) ran out and it was killed.
    TimedOut,
}

/// Whether the sandbox runs under gVisor (`runsc`), where a script that exhausts the process
/// limit stops the whole sandbox.
pub fn runs_gvisor(config: &SandboxConfig) -> bool {
    config
        .runtime
        .as_deref()
        .is_some_and(|runtime| runtime.contains("runsc") || runtime.contains("gvisor"))
}

/// Everything [`Sandbox::drive`] learnt from a container that ran to an end.
pub(super) struct Ended {
    end: End,
    oom_killed: bool,
    gvisor: bool,
    pub(super) relayed: Relayed,
    pub(super) unpacked: archive::Unpacked,
}

impl Ended {
    pub(super) fn summary(&self) -> Ending<'_> {
        Ending {
            end: self.end,
            oom_killed: self.oom_killed,
            report: self.relayed.report.as_ref(),
            complete: self.relayed.complete,
            stream_error: self.relayed.error.as_deref(),
            gvisor: self.gvisor,
            limit: self.unpacked.limit.as_deref(),
            malformed: self.unpacked.malformed.as_deref(),
        }
    }
}

/// The facts [`classify`] judges an attempt by.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    /// How the wait ended: the exit code (the runner's report's, else Docker's), or the
    /// server's deadline.
    pub end: End,
    /// Whether the kernel killed the script for its memory (the runner's report, else
    /// Docker's flag).
    pub oom_killed: bool,
    /// The runner's report of how the script ended, if it came.
    pub report: Option<&'a Report>,
    /// Whether the runner's end frame came (everything it had to send has come).
    pub complete: bool,
    /// What was wrong with the runner's stream, if anything: the attempt then fails.
    pub stream_error: Option<&'a str>,
    /// Whether the sandbox runs under gVisor ([`runs_gvisor`]).
    pub gvisor: bool,
    /// The cap that stopped the unpacking, if one did.
    pub limit: Option<&'a str>,
    /// What was wrong with the output archive, if anything.
    pub malformed: Option<&'a str>,
}

/// The name of a signal the kernel uses to end a process, by number (Linux, x86 and arm).
fn signal_name(number: i64) -> Option<&'static str> {
    Some(match number {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => return None,
    })
}

/// A signal's name and number, for a message.
fn describe_signal(number: i64) -> String {
    match signal_name(number) {
        Some(name) => format!("{name} (signal {number})"),
        None => format!("signal {number}"),
    }
}

fn code_text(code: Option<i64>) -> String {
    code.map(|c| c.to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// A judgement of an attempt: its status, its exit code and one sentence a person can act on.
type Verdict = (Status, Option<i64>, String);

/// How an attempt ended, as a status, an exit code and one sentence a person can act on.
pub fn classify(ending: &Ending<'_>, limits: &Limits) -> Verdict {
    let code = match exit_code(ending, limits) {
        Ok(code) => code,
        Err(timed_out) => return timed_out,
    };
    if ending.oom_killed {
        return (
            Status::OutOfMemory,
            code,
            format!(
                "the script used more than {} MiB of memory (its files in /work/out and /tmp count too) and was killed; process less data at once or raise SANDBOX_MEMORY_MIB",
                limits.memory_bytes / (1024 * 1024)
            ),
        );
    }
    if let Some(error) = ending.stream_error {
        return (
            Status::Failed,
            code,
            format!(
                "the sandbox's result could not be read ({error}); the attempt counts as failed: run it again, and report it if it keeps happening"
            ),
        );
    }
    match ending.report {
        Some(report) => reported(ending, report, code),
        None => no_report(ending, code, limits),
    }
}

/// The exit code of an attempt that ended by itself, or the verdict on one a deadline ended:
/// the server's (during the script, or during the copy-out once it was done) or the runner's
/// own (the server's did not act: a loaded engine).
fn exit_code(ending: &Ending<'_>, limits: &Limits) -> Result<Option<i64>, Verdict> {
    let timed_out = || {
        format!(
            "the script ran longer than {} s and was killed; make it faster or raise SCRIPT_TIMEOUT",
            limits.timeout.as_secs()
        )
    };
    let report = ending.report;
    match ending.end {
        End::TimedOut if report.is_some_and(|r| r.ended == RunnerEnd::Exited) => Err((
            Status::Timeout,
            None,
            format!(
                "the script finished but copying its outputs out took longer than {} s; write smaller or fewer files",
                COPY_OUT_GRACE.as_secs()
            ),
        )),
        End::TimedOut => Err((Status::Timeout, None, timed_out())),
        End::Exited(_) if report.is_some_and(|r| r.ended == RunnerEnd::Deadline) => {
            Err((Status::Timeout, None, timed_out()))
        }
        End::Exited(code) => Ok(code),
    }
}

/// An attempt whose runner reported: whether it received the request, whether its outputs
/// came whole and within the caps, and how the script ended.
fn reported(ending: &Ending<'_>, report: &Report, code: Option<i64>) -> Verdict {
    if report.ended == RunnerEnd::BadRequest {
        return (
            Status::Failed,
            code,
            "the sandbox could not receive the script and its inputs; see stderr".to_string(),
        );
    }
    if !ending.complete {
        return (
            Status::Failed,
            code,
            format!(
                "the script ended (exit code {}) but its outputs did not arrive whole; run it again",
                code_text(code)
            ),
        );
    }
    match (ending.limit, ending.malformed, code) {
        (Some(limit), _, code) => (
            Status::OutputLimit,
            code,
            format!("the script wrote {limit}; what came before the limit was kept"),
        ),
        (None, Some(malformed), Some(0)) => (
            Status::Failed,
            Some(0),
            format!("the outputs could not be read back: {malformed}"),
        ),
        (None, _, Some(0)) => (Status::Ok, Some(0), "the script succeeded".to_string()),
        (None, _, code) => script_failed(report, code),
    }
}

/// A script that ended with an exit code other than 0: killed by SIGKILL (not for its memory,
/// which was judged before), ended by another signal, or failed.
fn script_failed(report: &Report, code: Option<i64>) -> Verdict {
    match report.signal {
        Some(9) => (
            Status::Failed,
            code,
            format!(
                "the script was killed by {} (not for its memory): something in the sandbox killed it; see stderr",
                describe_signal(9)
            ),
        ),
        Some(signal) => (
            Status::Failed,
            code,
            format!(
                "the script was ended by {} (exit code {}); see stderr",
                describe_signal(i64::from(signal)),
                code_text(code)
            ),
        ),
        None => (
            Status::Failed,
            code,
            format!(
                "the script failed with exit code {}; see stderr",
                code_text(code)
            ),
        ),
    }
}

/// An attempt whose runner (PID 1) never reported: the sandbox itself went down, since the
/// runner reports whatever the script does.
fn no_report(ending: &Ending<'_>, code: Option<i64>, limits: &Limits) -> Verdict {
    // Under gVisor that is how a script that exhausts the process limit ends: the limit also
    // binds gVisor's own kernel, which stops. So does one that exhausts the memory limit, which
    // the engine does not always flag as out of memory then (Docker 20.10: now and then not).
    if ending.gvisor {
        return (
            Status::Failed,
            code,
            format!(
                "the sandbox stopped before its runner could report (exit code {}): the script probably started more processes or threads than the limit of {} allows, or used more than the {} MiB of memory it may; either ends a gVisor sandbox; start fewer or use less, or raise SANDBOX_PIDS or SANDBOX_MEMORY_MIB",
                code_text(code),
                limits.pids,
                limits.memory_bytes / (1024 * 1024)
            ),
        );
    }
    let cause = match code {
        Some(code @ 129..=192) => format!(
            "its runner was ended by {} from outside the container (exit code {code})",
            describe_signal(code - 128)
        ),
        code => format!("its runner exited with code {}", code_text(code)),
    };
    (
        Status::Failed,
        code,
        format!(
            "the sandbox stopped before it could report how the script ended: {cause}; see stderr, and run it again"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        crate::config::SandboxConfig::from_lookup(|_| None)
            .unwrap()
            .limits
    }

    fn report(exit_code: Option<i64>, signal: Option<i32>) -> Report {
        Report {
            ended: RunnerEnd::Exited,
            exit_code,
            signal,
            oom_killed: Some(false),
            duration_s: 0.1,
            stdout_dropped: 0,
            stderr_dropped: 0,
            resources: Default::default(),
        }
    }

    fn ended(code: i64, report: Option<&Report>) -> Ending<'_> {
        Ending {
            end: End::Exited(Some(code)),
            oom_killed: false,
            report,
            complete: report.is_some(),
            stream_error: None,
            gvisor: false,
            limit: None,
            malformed: None,
        }
    }

    #[test]
    fn a_script_that_fails_points_at_its_stderr() {
        let reported = report(Some(1), None);
        let (status, code, message) = classify(&ended(1, Some(&reported)), &limits());
        assert_eq!((status, code), (Status::Failed, Some(1)));
        assert!(message.contains("see stderr"), "{message}");
    }

    #[test]
    fn a_signal_ending_is_named_for_what_it_is() {
        let reported = report(Some(130), Some(2));
        let (status, code, message) = classify(&ended(130, Some(&reported)), &limits());
        assert_eq!((status, code), (Status::Failed, Some(130)));
        assert!(message.contains("SIGINT (signal 2)"), "{message}");
        assert!(!message.contains("SANDBOX_PIDS"), "{message}");
        // A script's own sys.exit(130) is an exit code, not a signal.
        let exited = report(Some(130), None);
        let (_, _, message) = classify(&ended(130, Some(&exited)), &limits());
        assert!(
            message.contains("exit code 130") && !message.contains("SIGINT"),
            "{message}"
        );
    }

    #[test]
    fn without_the_runners_report_only_gvisor_is_blamed_on_the_process_limit() {
        let gvisor = Ending {
            gvisor: true,
            ..ended(2, None)
        };
        let (status, code, message) = classify(&gvisor, &limits());
        assert_eq!((status, code), (Status::Failed, Some(2)));
        assert!(message.contains("SANDBOX_PIDS"), "{message}");
        let (status, _, message) = classify(&ended(130, None), &limits());
        assert_eq!(status, Status::Failed);
        assert!(
            message.contains("SIGINT") && !message.contains("SANDBOX_PIDS"),
            "{message}"
        );
        // Exit 0 without a report is no success: the runner always reports.
        let (status, _, message) = classify(&ended(0, None), &limits());
        assert_eq!(status, Status::Failed, "{message}");
    }

    #[test]
    fn a_stream_that_does_not_parse_or_ends_early_fails() {
        let reported = report(Some(0), None);
        let broken = Ending {
            stream_error: Some("a frame of unknown kind 0x71"),
            ..ended(0, Some(&reported))
        };
        let (status, _, message) = classify(&broken, &limits());
        assert_eq!(status, Status::Failed);
        assert!(message.contains("unknown kind"), "{message}");
        let cut = Ending {
            complete: false,
            ..ended(0, Some(&reported))
        };
        assert_eq!(classify(&cut, &limits()).0, Status::Failed);
        assert_eq!(
            classify(&ended(0, Some(&reported)), &limits()).0,
            Status::Ok
        );
    }

    #[test]
    fn oom_and_timeouts_come_before_the_exit_code() {
        let oom = Ending {
            oom_killed: true,
            ..ended(137, None)
        };
        assert_eq!(classify(&oom, &limits()).0, Status::OutOfMemory);
        let late = Ending {
            end: End::TimedOut,
            ..ended(0, None)
        };
        let (status, code, message) = classify(&late, &limits());
        assert_eq!((status, code), (Status::Timeout, None));
        assert!(message.contains("SCRIPT_TIMEOUT"), "{message}");
        let runner_deadline = Report {
            ended: RunnerEnd::Deadline,
            ..report(None, None)
        };
        let (status, code, _) = classify(&ended(124, Some(&runner_deadline)), &limits());
        assert_eq!((status, code), (Status::Timeout, None));
    }
}
