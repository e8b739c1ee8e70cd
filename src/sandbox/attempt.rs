//! One attempt in a started container, from sending its request to knowing how it ended:
//! the streams (request in, stdout/stderr and the output archive out), the race between the
//! runner's report, the container's exit, the deadline and cancellation, and [`classify`],
//! the pure judgement of how it ended.

use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::query_parameters::KillContainerOptionsBuilder;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::engine::Engine;
use super::launch::{InputStream, OutputStream};
use super::request::Request;
use super::stream::{Piece, StderrSplitter, StdoutSplitter, Trailer, capture};
use super::{COPY_OUT_GRACE, Captured, Sandbox, SandboxError, Status, Timings, archive};
use crate::config::Limits;

/// Time allowed for the attach stream to close after the container exited.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// The tasks of one attempt's streams, started together.
struct Streams {
    /// Reads stdout and stderr, and feeds the archive to the unpacker.
    pump: JoinHandle<Pumped>,
    /// Fires when the runner's boundary came: the script has finished.
    script_done: oneshot::Receiver<()>,
    /// Sends the request; gives back how long it took and the writer (kept open until the
    /// attempt is over: the runner takes its end for "the server is gone").
    copy_in: JoinHandle<(Duration, InputStream)>,
    /// Unpacks the output archive into the caller's folder, as hostile input.
    unpacker: JoinHandle<std::io::Result<archive::Unpacked>>,
}

impl Streams {
    fn start(
        stdio: (OutputStream, InputStream),
        request: Request,
        out_dir: PathBuf,
        limits: &Limits,
    ) -> Self {
        let (output, mut input) = stdio;
        let (archive_tx, archive_rx) = mpsc::channel::<Bytes>(16);
        let (seen_tx, script_done) = oneshot::channel();
        let unpack_limits = archive::UnpackLimits {
            max_bytes: limits.output_max_bytes,
            max_entries: limits.output_max_files,
        };
        let unpacker = tokio::task::spawn_blocking(move || {
            archive::unpack(ChannelReader::new(archive_rx), &out_dir, unpack_limits)
        });
        let Request {
            header,
            upload,
            boundary,
            exit_marker,
        } = request;
        let pump = tokio::spawn(pump(
            output,
            (boundary, exit_marker),
            limits.stdio_max_bytes,
            archive_tx,
            seen_tx,
        ));
        let copy_in = tokio::spawn(async move {
            let started = Instant::now();
            let sent = async {
                input.write_all(&header).await?;
                input.write_all(&upload).await?;
                input.flush().await
            }
            .await;
            if let Err(error) = sent {
                // The runner reports a short upload on stderr; the outcome shows it.
                tracing::warn!(%error, "sending the script and inputs failed");
            }
            (started.elapsed(), input)
        });
        Self {
            pump,
            script_done,
            copy_in,
            unpacker,
        }
    }
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
            mut pump,
            script_done,
            copy_in,
            unpacker,
        } = Streams::start(stdio, request, out_dir, limits);
        let (end, pumped) = self
            .await_end(id, &mut pump, script_done, limits.timeout, cancel)
            .await?;
        let exited_at = Instant::now();
        // Done by now unless the container died mid-upload; then the stream is closed or about
        // to be, when the kill below lands.
        copy_in.abort();
        let input = match copy_in.await {
            Ok((took, input)) => {
                timings.copy_in = took;
                Some(input)
            }
            Err(_) => None,
        };
        if !matches!(end, Some(End::Exited(_))) {
            self.kill(id).await?;
        }
        let Some(end) = end else {
            pump.abort();
            return Err(SandboxError::Cancelled);
        };
        let pumped = match pumped {
            Some(pumped) => pumped,
            None => drain(pump).await?,
        };
        drop(input);
        timings.logs = pumped.ended.saturating_duration_since(exited_at);
        let unpacked = unpacked(unpacker).await?;
        let script_done = pumped.boundary_at.unwrap_or(exited_at);
        timings.run = script_done.saturating_duration_since(phase);
        timings.copy_out = pumped
            .boundary_at
            .map(|at| Instant::now().saturating_duration_since(at))
            .unwrap_or_default();
        let oom_killed = match pumped.trailer.and_then(|trailer| trailer.oom_killed) {
            Some(reported) => reported,
            None => self.oom_killed(id).await?,
        };
        Ok(Ended {
            end,
            oom_killed,
            boundary_seen: pumped.boundary_at.is_some(),
            pumped,
            unpacked,
        })
    }

    /// Waits for whichever comes first: the runner's closing report (the pump ends with it),
    /// the container's exit, the deadline (`timeout`, then the copy-out grace once the script
    /// is done) or cancellation (`None`). The pump's result comes back when it ended first.
    async fn await_end(
        &self,
        id: &str,
        pump: &mut JoinHandle<Pumped>,
        script_done: oneshot::Receiver<()>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<(Option<End>, Option<Pumped>), SandboxError> {
        let exit = async {
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
        };
        let deadline = async {
            tokio::select! {
                _ = tokio::time::sleep(timeout) => {}
                Ok(()) = script_done => tokio::time::sleep(COPY_OUT_GRACE).await,
            }
        };
        tokio::pin!(exit, deadline);
        // Usually the pump ends first, with the runner's closing line: the result is whole and
        // the container need not be seen to exit. Otherwise (a runner that could not say, a
        // kill, a stream that ended early) Docker's exit code and OOM flag decide.
        tokio::select! {
            joined = pump => {
                let done = joined.map_err(|e| SandboxError::Io {
                    action: "reading the container's output".to_string(),
                    source: std::io::Error::other(e),
                })?;
                let end = match done.trailer {
                    Some(trailer) => Some(End::Exited(Some(trailer.exit_code))),
                    None => tokio::select! {
                        code = &mut exit => Some(End::Exited(code?)),
                        () = &mut deadline => Some(End::TimedOut),
                        () = cancel.cancelled() => None,
                    },
                };
                Ok((end, Some(done)))
            }
            code = &mut exit => Ok((Some(End::Exited(code?)), None)),
            () = &mut deadline => Ok((Some(End::TimedOut), None)),
            () = cancel.cancelled() => Ok((None, None)),
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

/// The pump's result once the container has ended: the stream closes within [`DRAIN_GRACE`].
async fn drain(pump: JoinHandle<Pumped>) -> Result<Pumped, SandboxError> {
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
    /// It exited, with this code if Docker knew one.
    Exited(Option<i64>),
    /// The time limit (or the copy-out grace) ran out and it was killed.
    TimedOut,
}

/// Everything [`Sandbox::drive`] learnt from a container that ran to an end.
pub(super) struct Ended {
    end: End,
    oom_killed: bool,
    boundary_seen: bool,
    pub(super) pumped: Pumped,
    pub(super) unpacked: archive::Unpacked,
}

impl Ended {
    pub(super) fn summary(&self) -> Ending<'_> {
        Ending {
            end: self.end,
            oom_killed: self.oom_killed,
            boundary_seen: self.boundary_seen,
            runner_reported: self.pumped.trailer.is_some(),
            limit: self.unpacked.limit.as_deref(),
            malformed: self.unpacked.malformed.as_deref(),
        }
    }
}

/// The facts [`classify`] judges an attempt by.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    /// How the wait ended.
    pub end: End,
    /// Whether the kernel killed the script for its memory (the runner's report, else
    /// Docker's flag).
    pub oom_killed: bool,
    /// Whether the runner's boundary came (the script finished and outputs followed).
    pub boundary_seen: bool,
    /// Whether the runner's closing line came (it saw its script end and said how).
    pub runner_reported: bool,
    /// The cap that stopped the unpacking, if one did.
    pub limit: Option<&'a str>,
    /// What was wrong with the output archive, if anything.
    pub malformed: Option<&'a str>,
}

/// How an attempt ended, as a status, an exit code and one sentence a person can act on.
pub fn classify(ending: &Ending<'_>, limits: &Limits) -> (Status, Option<i64>, String) {
    let code = match ending.end {
        End::TimedOut if ending.boundary_seen => {
            return (
                Status::Timeout,
                None,
                format!(
                    "the script finished but copying its outputs out took longer than {} s; write smaller or fewer files",
                    COPY_OUT_GRACE.as_secs()
                ),
            );
        }
        End::TimedOut => {
            return (
                Status::Timeout,
                None,
                format!(
                    "the script ran longer than {} s and was killed; make it faster or raise SCRIPT_TIMEOUT",
                    limits.timeout.as_secs()
                ),
            );
        }
        End::Exited(code) => code,
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
    match (ending.limit, ending.malformed, code) {
        (Some(limit), _, code) => (
            Status::OutputLimit,
            code,
            format!("the script wrote {limit}; what came before the limit was kept"),
        ),
        (None, _, Some(0)) if !ending.boundary_seen => (
            Status::Ok,
            Some(0),
            "the script exited before the runner could return its outputs (os._exit?); no files were copied out".to_string(),
        ),
        (None, Some(malformed), Some(0)) => (
            Status::Failed,
            Some(0),
            format!("the outputs could not be read back: {malformed}"),
        ),
        (None, _, Some(0)) => (Status::Ok, Some(0), "the script succeeded".to_string()),
        // The runner (PID 1) always reports before it exits; without its report, the sandbox
        // itself went down. Under gVisor that is how a script that exhausts the process limit
        // ends: the limit also binds gVisor's own kernel, which stops.
        (None, _, code) if !ending.runner_reported => (
            Status::Failed,
            code,
            format!(
                "the sandbox stopped before its runner could report (exit code {}): the script probably started more processes or threads than the limit of {} allows, which ends a gVisor sandbox; start fewer, or raise SANDBOX_PIDS",
                code.map(|c| c.to_string())
                    .unwrap_or_else(|| "unknown".into()),
                limits.pids
            ),
        ),
        (None, _, code) => (
            Status::Failed,
            code,
            format!(
                "the script failed with exit code {}; see stderr",
                code.map(|c| c.to_string())
                    .unwrap_or_else(|| "unknown".into())
            ),
        ),
    }
}

/// What the attach stream carried.
pub(super) struct Pumped {
    pub(super) stdout: Captured,
    pub(super) stderr: Captured,
    /// When the runner's boundary arrived (the script had finished).
    boundary_at: Option<Instant>,
    /// The runner's closing line, when it came.
    trailer: Option<Trailer>,
    /// When the stream closed.
    ended: Instant,
}

/// Reads the attach stream: stdout and stderr into capped buffers, the archive to the
/// unpacker. It ends when the stream does, or as soon as everything has come: the runner's
/// closing line on stderr, and the archive's end (the unpacker has stopped reading). Bytes past
/// a cap, or after the unpacker stopped, are read and dropped so that the container never blocks
/// on a full pipe.
async fn pump(
    mut output: impl Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin,
    markers: (String, String),
    cap: usize,
    archive: mpsc::Sender<Bytes>,
    seen: oneshot::Sender<()>,
) -> Pumped {
    let (boundary, exit_marker) = markers;
    let mut splitter = StdoutSplitter::new(boundary.into_bytes());
    let mut trailer_splitter = StderrSplitter::new(exit_marker.into_bytes());
    let mut stdout = Captured::default();
    let mut stderr = Captured::default();
    let mut boundary_at = None;
    let mut seen = Some(seen);
    let mut archive = Some(archive);
    loop {
        let item = match (&archive, trailer_splitter.trailer()) {
            // Both streams are complete once the archive has ended too.
            (None, Some(_)) => break,
            (Some(sender), Some(_)) => tokio::select! {
                item = output.next() => item,
                () = sender.closed() => {
                    archive = None;
                    continue;
                }
            },
            (_, None) => output.next().await,
        };
        let Some(item) = item else { break };
        let message = match item {
            Ok(LogOutput::StdOut { message }) => message,
            Ok(LogOutput::StdErr { message }) => {
                for bytes in trailer_splitter.push(message) {
                    capture(&mut stderr, cap, &bytes);
                }
                continue;
            }
            Ok(_) => continue,
            Err(error) => {
                tracing::warn!(%error, "the container's output stream broke");
                break;
            }
        };
        for piece in splitter.push(message) {
            match piece {
                Piece::Stdout(bytes) => capture(&mut stdout, cap, &bytes),
                Piece::Boundary => {
                    boundary_at = Some(Instant::now());
                    if let Some(seen) = seen.take() {
                        let _ = seen.send(());
                    }
                }
                Piece::Archive(bytes) => {
                    if let Some(sender) = &archive
                        && sender.send(bytes).await.is_err()
                    {
                        // The unpacker is done (the archive ended, or a limit); drain the rest.
                        archive = None;
                    }
                }
            }
        }
    }
    if let Some(rest) = splitter.finish() {
        capture(&mut stdout, cap, &rest);
    }
    if let Some(rest) = trailer_splitter.finish() {
        capture(&mut stderr, cap, &rest);
    }
    Pumped {
        stdout,
        stderr,
        boundary_at,
        trailer: trailer_splitter.trailer(),
        ended: Instant::now(),
    }
}

/// A blocking reader over the chunks the pump sends; EOF when the pump is done.
struct ChannelReader {
    chunks: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl ChannelReader {
    fn new(chunks: mpsc::Receiver<Bytes>) -> Self {
        Self {
            chunks,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        crate::config::SandboxConfig::from_lookup(|_| None)
            .unwrap()
            .limits
    }

    fn ended(code: i64, runner_reported: bool) -> Ending<'static> {
        Ending {
            end: End::Exited(Some(code)),
            oom_killed: false,
            boundary_seen: runner_reported,
            runner_reported,
            limit: None,
            malformed: None,
        }
    }

    #[test]
    fn a_script_that_fails_points_at_its_stderr() {
        let (status, code, message) = classify(&ended(1, true), &limits());
        assert_eq!((status, code), (Status::Failed, Some(1)));
        assert!(message.contains("see stderr"), "{message}");
    }

    #[test]
    fn a_sandbox_that_went_down_without_its_runners_report_names_the_likely_limit() {
        let (status, code, message) = classify(&ended(2, false), &limits());
        assert_eq!((status, code), (Status::Failed, Some(2)));
        assert!(
            message.contains("SANDBOX_PIDS") && !message.contains("see stderr"),
            "{message}"
        );
    }

    #[test]
    fn oom_and_timeout_come_before_the_exit_code() {
        let oom = Ending {
            oom_killed: true,
            ..ended(137, false)
        };
        assert_eq!(classify(&oom, &limits()).0, Status::OutOfMemory);
        let late = Ending {
            end: End::TimedOut,
            ..ended(0, false)
        };
        let (status, code, message) = classify(&late, &limits());
        assert_eq!((status, code), (Status::Timeout, None));
        assert!(message.contains("SCRIPT_TIMEOUT"), "{message}");
    }
}
