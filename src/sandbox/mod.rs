//! Docker-backed sandbox: runs one script in one fresh, locked-down container and removes it.
//! The only module that talks to the Docker API. It knows nothing of language models or MCP:
//! its input is a script, input files and limits; its output an [`Outcome`] or a
//! [`SandboxError`].
//!
//! One attempt ([`Sandbox::run`]):
//! 1. create the container from [`policy::container_spec`], inspect it and refuse it unless
//!    Docker applied every setting ([`policy::verify`]);
//! 2. attach to stdin, stdout and stderr, start, and send one tar with the script and the
//!    inputs on stdin (the runner unpacks it into the `/work` tmpfs);
//! 3. wait up to the timeout (kill on timeout or cancellation);
//! 4. meanwhile split stdout at the runner's boundary: before it the script's stdout (capped),
//!    after it the tar of `/work/out`, unpacked safely as it streams ([`archive::unpack`]);
//! 5. read the exit code and the OOM flag;
//! 6. remove the container, on every path ([`ContainerGuard`]).

pub mod archive;
pub mod guard;
pub mod image;
mod outcome;
pub mod policy;
pub mod stream;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::container::{AttachContainerResults, LogOutput};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use archive::{Input, InputSource};
pub use guard::ContainerGuard;
pub use outcome::{Captured, Outcome, OutputFile, SandboxError, Skipped, Status, Timings};

use crate::config::SandboxConfig;
use stream::{Piece, StdoutSplitter, capture};

/// Time allowed, after the script has finished, for the runner to stream its outputs back.
const COPY_OUT_GRACE: Duration = Duration::from_secs(60);
/// Time allowed for the attach stream to close after the container exited.
const DRAIN_GRACE: Duration = Duration::from_secs(10);
/// Slack added to the Docker client's per-request timeout over the longest wait.
const REQUEST_SLACK: Duration = Duration::from_secs(60);

/// One script to run, with its inputs.
#[derive(Debug, Clone, Default)]
pub struct Job {
    /// The Python source.
    pub script: String,
    /// Files placed at `/work/in/<name>`.
    pub inputs: Vec<Input>,
    /// What the runner presets as `file_path` (where the prompts ask the code to save).
    pub file_path: Option<String>,
    /// What the runner presets as `input_file_path`; by default the only input, if one.
    pub input_file_path: Option<String>,
}

/// A way to run jobs: Docker today, perhaps Kubernetes later.
pub trait Runner {
    /// Runs `job`, writing its outputs under `out_dir`, until done or `cancel` fires.
    fn run(
        &self,
        job: Job,
        out_dir: &Path,
        cancel: &CancellationToken,
    ) -> impl std::future::Future<Output = Result<Outcome, SandboxError>> + Send;
}

/// Which leftovers [`Sandbox::reap`] removes.
#[derive(Debug, Default, Clone)]
pub struct ReapFilter {
    /// Only containers created longer ago than this, so that a reaper does not kill the live
    /// attempts of another replica sharing the engine.
    pub older_than: Option<Duration>,
    /// Only containers of this instance (see [`policy::INSTANCE_LABEL`]).
    pub instance: Option<String>,
}

/// What [`Sandbox::reap`] removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Containers removed.
    pub containers: usize,
}

/// The Docker engine as [`Sandbox::diagnose`] found it.
#[derive(Debug)]
pub struct Diagnosis {
    /// The engine's version.
    pub engine_version: String,
    /// The API version the engine speaks (and the client negotiated).
    pub api_version: String,
    /// The OCI runtimes the engine has.
    pub runtimes: Vec<String>,
    /// The engine's cgroup version.
    pub cgroup_version: String,
    /// The image, if present: (id, size in bytes).
    pub image: Option<(String, i64)>,
}

/// A connection to the Docker engine and the settings every attempt uses.
#[derive(Debug, Clone)]
pub struct Sandbox {
    docker: Docker,
    config: SandboxConfig,
    /// Labels this instance's containers, so tests and shutdown can tell them apart.
    instance: String,
    /// Containers created and not yet removed.
    live: Arc<AtomicUsize>,
    /// Removals started by dropped guards; [`Sandbox::shutdown`] waits for them.
    tracker: TaskTracker,
}

impl Sandbox {
    /// Connects to the engine (`DOCKER_HOST` or the local socket) and negotiates the API
    /// version, since Debian's engine speaks an older one than the client's default.
    pub async fn connect(config: SandboxConfig) -> Result<Self, SandboxError> {
        let request_timeout = config.limits.timeout + COPY_OUT_GRACE + REQUEST_SLACK;
        let docker = Docker::connect_with_defaults()
            .map_err(|source| SandboxError::DockerUnreachable { source })?
            .with_timeout(request_timeout)
            .negotiate_version()
            .await
            .map_err(|source| SandboxError::DockerUnreachable { source })?;
        docker
            .ping()
            .await
            .map_err(|source| SandboxError::DockerUnreachable { source })?;
        let instance = config
            .instance
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        Ok(Self {
            docker,
            config,
            instance,
            live: Arc::new(AtomicUsize::new(0)),
            tracker: TaskTracker::new(),
        })
    }

    /// The settings in force.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// The value of this instance's [`policy::INSTANCE_LABEL`].
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Containers created by this instance and not yet removed.
    pub fn live_containers(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Waits for removals started by dropped guards.
    pub async fn shutdown(&self) {
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Engine version, runtimes and image presence, for `file-agent doctor`.
    pub async fn diagnose(&self) -> Result<Diagnosis, SandboxError> {
        let version = self
            .docker
            .version()
            .await
            .map_err(|e| SandboxError::docker("reading the engine version", e))?;
        let info = self
            .docker
            .info()
            .await
            .map_err(|e| SandboxError::docker("reading the engine info", e))?;
        let image = match self.docker.inspect_image(&self.config.image).await {
            Ok(image) => Some((image.id.unwrap_or_default(), image.size.unwrap_or(0))),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => None,
            Err(e) => return Err(SandboxError::docker("inspecting the image", e)),
        };
        let mut runtimes: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
        runtimes.sort();
        Ok(Diagnosis {
            engine_version: version.version.unwrap_or_default(),
            api_version: version.api_version.unwrap_or_default(),
            runtimes,
            cgroup_version: info
                .cgroup_version
                .map(|v| v.to_string())
                .unwrap_or_default(),
            image,
        })
    }

    /// Whether the configured image is on the engine.
    pub async fn image_present(&self, image: &str) -> Result<bool, SandboxError> {
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => Err(SandboxError::docker("inspecting the image", e)),
        }
    }

    /// Removes file-agent's containers that match `filter`, killing them if they run.
    pub async fn reap(&self, filter: &ReapFilter) -> Result<ReapReport, SandboxError> {
        let mut labels = vec![format!("{}=true", policy::MANAGED_LABEL)];
        if let Some(instance) = &filter.instance {
            labels.push(format!("{}={instance}", policy::INSTANCE_LABEL));
        }
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        let older_than = filter.older_than;
        let containers = self.containers_labelled(&labels).await?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(i64::MAX);
        let mut report = ReapReport::default();
        for container in containers {
            let old_enough = match older_than {
                None => true,
                Some(age) => container.created.unwrap_or(0) + age.as_secs() as i64 <= now,
            };
            if let (true, Some(id)) = (old_enough, container.id) {
                guard::remove_container(&self.docker, &id).await?;
                report.containers += 1;
            }
        }
        Ok(report)
    }

    /// Containers labelled with this instance that still exist (for tests and health checks):
    /// zero when no attempt is under way.
    pub async fn leftovers(&self) -> Result<usize, SandboxError> {
        let label = format!("{}={}", policy::INSTANCE_LABEL, self.instance);
        Ok(self.containers_labelled(&[&label]).await?.len())
    }

    /// All containers, running or not, that carry every one of `labels` (`key=value`).
    async fn containers_labelled(
        &self,
        labels: &[&str],
    ) -> Result<Vec<bollard::models::ContainerSummary>, SandboxError> {
        let filters = std::collections::HashMap::from([("label", labels.to_vec())]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        self.docker
            .list_containers(Some(options))
            .await
            .map_err(|e| SandboxError::docker("listing containers", e))
    }

    fn create_error(&self, error: bollard::errors::Error) -> SandboxError {
        match &error {
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            } => SandboxError::ImageMissing {
                image: self.config.image.clone(),
            },
            bollard::errors::Error::DockerResponseServerError { message, .. }
                if message.contains("runtime") =>
            {
                SandboxError::RuntimeMissing {
                    runtime: self.config.runtime.clone().unwrap_or_default(),
                }
            }
            _ => SandboxError::docker("creating the container", error),
        }
    }

    /// Everything between create and remove. The caller owns the guard and removes the
    /// container whatever this returns.
    async fn drive(
        &self,
        guard: &ContainerGuard,
        attempt: Prepared,
        cancel: &CancellationToken,
        timings: &mut Timings,
    ) -> Result<Outcome, SandboxError> {
        let Prepared {
            spec,
            upload,
            boundary,
            out_dir,
        } = attempt;
        let id = guard.id();
        let docker = &self.docker;
        let limits = &self.config.limits;

        let applied = docker
            .inspect_container(id, None)
            .await
            .map_err(|e| SandboxError::docker("inspecting the new container", e))?;
        policy::verify(&spec, &applied)?;
        let image_id = applied.image.clone().unwrap_or_default();
        // Attach before start, so that no byte of output is missed.
        let phase = Instant::now();
        let AttachContainerResults { output, mut input } = docker
            .attach_container(
                id,
                Some(
                    AttachContainerOptionsBuilder::default()
                        .stdin(true)
                        .stdout(true)
                        .stderr(true)
                        .stream(true)
                        .logs(false)
                        .build(),
                ),
            )
            .await
            .map_err(|e| SandboxError::docker("attaching to the container", e))?;
        docker
            .start_container(id, None)
            .await
            .map_err(|e| SandboxError::docker("starting the container", e))?;
        let (archive_tx, archive_rx) = mpsc::channel::<Bytes>(16);
        let (seen_tx, seen_rx) = oneshot::channel();
        let unpack_limits = archive::UnpackLimits {
            max_bytes: limits.output_max_bytes,
            max_entries: limits.output_max_files,
        };
        let unpacker = tokio::task::spawn_blocking(move || {
            archive::unpack(ChannelReader::new(archive_rx), &out_dir, unpack_limits)
        });
        let pump = tokio::spawn(pump(
            output,
            boundary,
            limits.stdio_max_bytes,
            archive_tx,
            seen_tx,
        ));
        // The upload goes while the interpreter starts, under the same deadline as the script;
        // closing stdin tells the runner (and Docker, through StdinOnce) that nothing more comes.
        let copy_in = tokio::spawn(async move {
            let started = Instant::now();
            let sent = async {
                input.write_all(&upload).await?;
                input.shutdown().await
            }
            .await;
            if let Err(error) = sent {
                // The runner reports a short upload on stderr; the outcome shows it.
                tracing::warn!(%error, "sending the script and inputs failed");
            }
            started.elapsed()
        });

        let exit = async {
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
        // The timeout is the script's; once the runner has sent the boundary, the copy-out
        // gets its own grace period.
        let deadline = async {
            tokio::select! {
                _ = tokio::time::sleep(limits.timeout) => {}
                Ok(()) = seen_rx => tokio::time::sleep(COPY_OUT_GRACE).await,
            }
        };
        enum End {
            Exited(Option<i64>),
            TimedOut,
            Cancelled,
        }
        let end = tokio::select! {
            code = exit => End::Exited(code?),
            () = deadline => End::TimedOut,
            () = cancel.cancelled() => End::Cancelled,
        };
        let exited_at = Instant::now();
        // Done by now unless the container died mid-upload; then the stream is closed or about
        // to be, when the kill below lands.
        copy_in.abort();
        timings.copy_in = copy_in.await.unwrap_or_default();
        if !matches!(end, End::Exited(_)) {
            self.kill(id).await?;
        }
        if matches!(end, End::Cancelled) {
            pump.abort();
            return Err(SandboxError::Cancelled);
        }

        let pumped = match tokio::time::timeout(DRAIN_GRACE, pump).await {
            Ok(Ok(pumped)) => pumped,
            Ok(Err(join_error)) => {
                return Err(SandboxError::Io {
                    action: "reading the container's output".to_string(),
                    source: std::io::Error::other(join_error),
                });
            }
            Err(_) => {
                return Err(SandboxError::Io {
                    action: "reading the container's output".to_string(),
                    source: std::io::Error::other("the output stream did not close after exit"),
                });
            }
        };
        timings.logs = pumped.ended.saturating_duration_since(exited_at);
        let unpacked = unpacker
            .await
            .map_err(|e| SandboxError::Io {
                action: "unpacking the outputs".to_string(),
                source: std::io::Error::other(e),
            })?
            .map_err(|source| SandboxError::Io {
                action: "writing the outputs".to_string(),
                source,
            })?;
        let script_done = pumped.boundary_at.unwrap_or(exited_at);
        timings.run = script_done.saturating_duration_since(phase);
        timings.copy_out = pumped
            .boundary_at
            .map(|at| Instant::now().saturating_duration_since(at))
            .unwrap_or_default();

        let state = docker
            .inspect_container(id, None)
            .await
            .map_err(|e| SandboxError::docker("inspecting the finished container", e))?
            .state
            .unwrap_or_default();
        let oom_killed = state.oom_killed.unwrap_or(false);
        let (status, exit_code, message) = match end {
            End::TimedOut if pumped.boundary_at.is_some() => (
                Status::Timeout,
                None,
                format!(
                    "the script finished but copying its outputs out took longer than {} s; write smaller or fewer files",
                    COPY_OUT_GRACE.as_secs()
                ),
            ),
            End::TimedOut => (
                Status::Timeout,
                None,
                format!(
                    "the script ran longer than {} s and was killed; make it faster or raise SCRIPT_TIMEOUT",
                    limits.timeout.as_secs()
                ),
            ),
            End::Exited(code) if oom_killed => (
                Status::OutOfMemory,
                code,
                format!(
                    "the script used more than {} MiB of memory (its files in /work/out and /tmp count too) and was killed; process less data at once or raise SANDBOX_MEMORY_MIB",
                    limits.memory_bytes / (1024 * 1024)
                ),
            ),
            End::Exited(code) => match (&unpacked.limit, &unpacked.malformed, code) {
                (Some(limit), _, code) => (
                    Status::OutputLimit,
                    code,
                    format!("the script wrote {limit}; what came before the limit was kept"),
                ),
                (None, _, Some(0)) if pumped.boundary_at.is_none() => (
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
                (None, _, code) => (
                    Status::Failed,
                    code,
                    format!(
                        "the script failed with exit code {}; see stderr",
                        code.map(|c| c.to_string()).unwrap_or_else(|| "unknown".into())
                    ),
                ),
            },
            End::Cancelled => unreachable!("returned above"),
        };
        Ok(Outcome {
            status,
            exit_code,
            stdout: pumped.stdout,
            stderr: pumped.stderr,
            outputs: unpacked.files,
            skipped: unpacked.skipped,
            timings: Timings::default(),
            message,
            container_id: id.to_string(),
            image_id,
        })
    }

    async fn kill(&self, id: &str) -> Result<(), SandboxError> {
        let options = KillContainerOptionsBuilder::default()
            .signal("SIGKILL")
            .build();
        match self.docker.kill_container(id, Some(options)).await {
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

impl Runner for Sandbox {
    async fn run(
        &self,
        job: Job,
        out_dir: &Path,
        cancel: &CancellationToken,
    ) -> Result<Outcome, SandboxError> {
        let started = Instant::now();
        let mut timings = Timings::default();
        // The runner marks the end of the script's stdout with the hash of this seed (see
        // sandbox-image/runner.py), so the marker itself is nowhere in the container's environment.
        let seed = uuid::Uuid::new_v4().simple().to_string();
        let boundary = format!(
            "\n--file-agent-outputs-{}--\n",
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes()))
        );
        let mut env = vec![format!("FILE_AGENT_BOUNDARY_SEED={seed}")];
        if let Some(path) = &job.file_path {
            env.push(format!("FILE_AGENT_FILE_PATH={path}"));
        }
        if let Some(path) = &job.input_file_path {
            env.push(format!("FILE_AGENT_INPUT_FILE_PATH={path}"));
        }
        let Job { script, inputs, .. } = job;
        let upload = tokio::task::spawn_blocking(move || archive::pack(script.as_bytes(), &inputs))
            .await
            .map_err(|e| SandboxError::Io {
                action: "packing the inputs".to_string(),
                source: std::io::Error::other(e),
            })??;

        env.push(format!("FILE_AGENT_UPLOAD_BYTES={}", upload.len()));

        let phase = Instant::now();
        let spec = policy::container_spec(&self.config, &self.instance, env, upload.len() as u64);
        let created = tokio::select! {
            created = self.docker.create_container(None, spec.clone()) => {
                created.map_err(|e| self.create_error(e))?
            }
            () = cancel.cancelled() => return Err(SandboxError::Cancelled),
        };
        let guard = ContainerGuard::new(
            self.docker.clone(),
            created.id,
            self.live.clone(),
            self.tracker.clone(),
        );
        timings.create = phase.elapsed();
        let prepared = Prepared {
            spec,
            upload,
            boundary,
            out_dir: out_dir.to_path_buf(),
        };
        let result = self.drive(&guard, prepared, cancel, &mut timings).await;
        let phase = Instant::now();
        let removed = guard.remove().await;
        timings.remove = phase.elapsed();
        timings.total = started.elapsed();
        let mut outcome = result?;
        removed?;
        outcome.timings = timings;
        Ok(outcome)
    }
}

/// What an attempt needs once its container exists.
struct Prepared {
    /// The create request, to verify against what Docker applied.
    spec: bollard::models::ContainerCreateBody,
    /// The tar of the script and inputs.
    upload: Vec<u8>,
    /// The marker the runner writes between stdout and the output archive.
    boundary: String,
    /// Where the outputs are unpacked.
    out_dir: PathBuf,
}

/// What the attach stream carried.
struct Pumped {
    stdout: Captured,
    stderr: Captured,
    /// When the runner's boundary arrived (the script had finished).
    boundary_at: Option<Instant>,
    /// When the stream closed.
    ended: Instant,
}

/// Reads the attach stream to its end: stdout and stderr into capped buffers, the archive to
/// the unpacker. Bytes past a cap, or after the unpacker stopped, are read and dropped so that
/// the container never blocks on a full pipe.
async fn pump(
    mut output: impl Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin,
    boundary: String,
    cap: usize,
    archive: mpsc::Sender<Bytes>,
    seen: oneshot::Sender<()>,
) -> Pumped {
    let mut splitter = StdoutSplitter::new(boundary.into_bytes());
    let mut stdout = Captured::default();
    let mut stderr = Captured::default();
    let mut boundary_at = None;
    let mut seen = Some(seen);
    let mut archive = Some(archive);
    while let Some(item) = output.next().await {
        let message = match item {
            Ok(LogOutput::StdOut { message }) => message,
            Ok(LogOutput::StdErr { message }) => {
                capture(&mut stderr, cap, &message);
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
                        // The unpacker stopped at a limit; drain the rest.
                        archive = None;
                    }
                }
            }
        }
    }
    if let Some(rest) = splitter.finish() {
        capture(&mut stdout, cap, &rest);
    }
    Pumped {
        stdout,
        stderr,
        boundary_at,
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
