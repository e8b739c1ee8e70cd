//! Docker-backed sandbox: runs one script in one fresh, locked-down container and removes it.
//! The only module that talks to the Docker API. It knows nothing of language models or MCP:
//! its input is a script, input files and limits; its output an [`Outcome`] or a
//! [`SandboxError`].
//!
//! One attempt ([`Sandbox::run`]):
//! 1. pack the request: a header line and one tar with the script and the inputs
//!    ([`request::Request`]);
//! 2. take a warm container from the pool ([`pool`]), or launch a cold one
//!    ([`launch::Launcher`]: create from [`policy::container_spec`], refuse it unless
//!    [`policy::verify`] agrees with what Docker applied, attach, start);
//! 3. send the request on stdin (kept open: its end tells the runner the server is gone) and
//!    wait up to the timeout (kill on timeout or cancellation);
//! 4. meanwhile split stdout at the runner's boundary: before it the script's stdout (capped),
//!    after it the tar of `/work/out`, unpacked safely as it streams ([`archive::unpack`]);
//! 5. read the exit code and the OOM flag, and [`classify`] how the attempt ended;
//! 6. remove the container, on every path ([`ContainerGuard`]), in the background once the
//!    result is whole. A container serves one attempt, ever: warm or cold, nothing gives it
//!    back.

pub mod archive;
pub mod guard;
pub mod image;
mod launch;
mod outcome;
pub mod policy;
mod pool;
pub mod request;
pub mod stream;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::{KillContainerOptionsBuilder, ListContainersOptionsBuilder};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use archive::{Input, InputSource};
pub use guard::ContainerGuard;
pub use outcome::{Captured, Outcome, OutputFile, SandboxError, Skipped, Status, Timings};
pub use pool::PoolStats;

use crate::config::{Limits, SandboxConfig};
use launch::{InputStream, Launcher, OutputStream, Started};
use policy::Kind;
use pool::WarmPool;
use request::Request;
use stream::{Piece, StderrSplitter, StdoutSplitter, Trailer, capture};

/// Time allowed, after the script has finished, for the runner to stream its outputs back.
pub const COPY_OUT_GRACE: Duration = Duration::from_secs(60);
/// Time allowed for the attach stream to close after the container exited.
const DRAIN_GRACE: Duration = Duration::from_secs(10);
/// Slack added to the Docker client's per-request timeout over the longest wait.
const REQUEST_SLACK: Duration = Duration::from_secs(60);
/// A container that stopped (or never started) longer ago than this belongs to no live attempt:
/// a server removes its containers as soon as they exit.
pub const STOPPED_GRACE: Duration = Duration::from_secs(60);
/// Added to [`longest_life`] for a loaded engine and clocks that differ.
const LIFE_MARGIN: Duration = Duration::from_secs(60);

/// The longest a container of a live server runs: a warm one's wait (its runner ends on its own
/// after it), then one attempt and its copy-out. A running container older than this is stuck.
pub fn longest_life(config: &SandboxConfig) -> Duration {
    config.warm_max_idle
        + policy::WARM_SELF_EXIT_SLACK
        + config.limits.timeout
        + COPY_OUT_GRACE
        + LIFE_MARGIN
}

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

/// Which of file-agent's containers [`Sandbox::reap`] removes.
#[derive(Debug, Clone)]
pub enum ReapScope {
    /// Every one, running or not (`reap --all`, and a server's start-up for its own instance).
    All,
    /// Only what belongs to no live server: containers stopped or never started for longer
    /// than `stopped_for` ([`STOPPED_GRACE`] in practice), and running ones older than the
    /// longest a live container lasts (a warm container's wait plus an attempt). The default
    /// of `reap`.
    Safe {
        /// The longest a container of a live server runs ([`longest_life`]).
        longest_life: Duration,
        /// How long a container must have been stopped to count as left behind.
        stopped_for: Duration,
    },
    /// Those created more than this long ago, running or not.
    OlderThan(Duration),
}

/// Which leftovers [`Sandbox::reap`] removes.
#[derive(Debug, Clone)]
pub struct ReapFilter {
    /// Which ones count as leftovers.
    pub scope: ReapScope,
    /// Only containers of this instance (see [`policy::INSTANCE_LABEL`]).
    pub instance: Option<String>,
}

/// What [`Sandbox::reap`] removed, and what it left alone.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Containers removed.
    pub containers: usize,
    /// Running warm containers left alone (ready for an attempt, or serving one).
    pub left_warm: usize,
    /// Running attempt containers left alone.
    pub left_running: usize,
    /// Stopped containers left alone because they stopped too recently.
    pub left_recent: usize,
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

/// A connection to the Docker engine, the settings every attempt uses, and the warm pool.
#[derive(Clone)]
pub struct Sandbox {
    launcher: Launcher,
    /// Containers started ahead; `None` when the pool is off.
    pool: Option<Arc<WarmPool>>,
    /// Whatever makes this process the owner of its instance label (a locked file), held as
    /// long as the sandbox lives.
    _instance_claim: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("instance", &self.launcher.instance)
            .field("pool", &self.pool_stats())
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Connects to the engine (`DOCKER_HOST` or the local socket) and negotiates the API
    /// version, since Debian's engine speaks an older one than the client's default. The pool
    /// is off until [`Sandbox::with_warm_pool`].
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
            launcher: Launcher {
                docker,
                config,
                instance,
                live: Arc::new(AtomicUsize::new(0)),
                tracker: TaskTracker::new(),
            },
            pool: None,
            _instance_claim: None,
        })
    }

    /// Keeps `claim` (a lock that makes this process the owner of its instance label) alive
    /// as long as the sandbox.
    pub fn holding(mut self, claim: Option<impl std::any::Any + Send + Sync>) -> Self {
        if let Some(claim) = claim {
            self._instance_claim = Some(Arc::new(claim));
        }
        self
    }

    /// Starts a pool that keeps `size` warm containers ready (none when `size` is 0), each
    /// replaced after waiting `max_idle`. Call it once, from within the runtime.
    pub fn with_warm_pool(mut self, size: usize, max_idle: Duration) -> Self {
        if size > 0 && self.pool.is_none() {
            self.pool = Some(Arc::new(WarmPool::start(
                self.launcher.clone(),
                size,
                max_idle,
            )));
        }
        self
    }

    /// The pool's numbers; `None` when the pool is off.
    pub fn pool_stats(&self) -> Option<PoolStats> {
        self.pool.as_ref().map(|pool| pool.stats())
    }

    fn docker(&self) -> &Docker {
        &self.launcher.docker
    }

    /// The settings in force.
    pub fn config(&self) -> &SandboxConfig {
        &self.launcher.config
    }

    /// The value of this instance's [`policy::INSTANCE_LABEL`].
    pub fn instance(&self) -> &str {
        &self.launcher.instance
    }

    /// Containers created by this instance and not yet removed (warm ones included).
    pub fn live_containers(&self) -> usize {
        self.launcher.live.load(Ordering::SeqCst)
    }

    /// Drains the pool and waits for removals started by dropped guards.
    pub async fn shutdown(&self) {
        if let Some(pool) = &self.pool {
            pool.drain().await;
        }
        self.launcher.tracker.close();
        self.launcher.tracker.wait().await;
    }

    /// Engine version, runtimes and image presence, for `file-agent doctor`.
    pub async fn diagnose(&self) -> Result<Diagnosis, SandboxError> {
        let version = self
            .docker()
            .version()
            .await
            .map_err(|e| SandboxError::docker("reading the engine version", e))?;
        let info = self
            .docker()
            .info()
            .await
            .map_err(|e| SandboxError::docker("reading the engine info", e))?;
        let image = match self.docker().inspect_image(&self.config().image).await {
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
        match self.docker().inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => Err(SandboxError::docker("inspecting the image", e)),
        }
    }

    /// Removes file-agent's containers that match `filter`, killing them if they run, and
    /// counts what it left alone.
    pub async fn reap(&self, filter: &ReapFilter) -> Result<ReapReport, SandboxError> {
        let mut labels = vec![format!("{}=true", policy::MANAGED_LABEL)];
        if let Some(instance) = &filter.instance {
            labels.push(format!("{}={instance}", policy::INSTANCE_LABEL));
        }
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        let containers = self.containers_labelled(&labels).await?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(i64::MAX);
        let mut report = ReapReport::default();
        for container in containers {
            let Some(id) = container.id.clone() else {
                continue;
            };
            let age =
                Duration::from_secs(now.saturating_sub(container.created.unwrap_or(0)) as u64);
            let running =
                container.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING);
            let warm = container
                .labels
                .as_ref()
                .is_some_and(|labels| labels.contains_key(policy::WARM_LABEL));
            let remove = match &filter.scope {
                ReapScope::All => true,
                ReapScope::OlderThan(min_age) => age >= *min_age,
                ReapScope::Safe { longest_life, .. } if running => {
                    let stuck = age >= *longest_life;
                    if !stuck && warm {
                        report.left_warm += 1;
                    } else if !stuck {
                        report.left_running += 1;
                    }
                    stuck
                }
                ReapScope::Safe { stopped_for, .. } => {
                    let stopped_long_ago = self.stopped_for(&id, age).await? >= *stopped_for;
                    if !stopped_long_ago {
                        report.left_recent += 1;
                    }
                    stopped_long_ago
                }
            };
            if remove {
                guard::remove_container(self.docker(), &id).await?;
                report.containers += 1;
            }
        }
        Ok(report)
    }

    /// How long a container that is not running has been stopped: since it finished, or,
    /// when it never started, since it was created (`age`). Zero when it is gone already.
    async fn stopped_for(&self, id: &str, age: Duration) -> Result<Duration, SandboxError> {
        let state = match self.docker().inspect_container(id, None).await {
            Ok(inspected) => inspected.state.unwrap_or_default(),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(Duration::ZERO),
            Err(e) => return Err(SandboxError::docker("inspecting a stopped container", e)),
        };
        let finished = state
            .finished_at
            .as_deref()
            .and_then(crate::time::parse_rfc3339)
            .filter(|at| *at > UNIX_EPOCH);
        Ok(match finished {
            Some(at) => SystemTime::now().duration_since(at).unwrap_or_default(),
            None => age,
        })
    }

    /// Containers labelled with this instance that still exist (for tests and health checks):
    /// zero when no attempt is under way and the pool is empty.
    pub async fn leftovers(&self) -> Result<usize, SandboxError> {
        let label = format!("{}={}", policy::INSTANCE_LABEL, self.instance());
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
        self.docker()
            .list_containers(Some(options))
            .await
            .map_err(|e| SandboxError::docker("listing containers", e))
    }

    /// Everything between "a container is ready for the request" and its removal. The caller
    /// owns the guard and removes the container whatever this returns.
    async fn drive(
        &self,
        id: &str,
        stdio: (OutputStream, InputStream),
        request: Request,
        out_dir: PathBuf,
        cancel: &CancellationToken,
        timings: &mut Timings,
    ) -> Result<Ended, SandboxError> {
        let (output, mut input) = stdio;
        let docker = self.docker();
        let limits = &self.config().limits;
        // The script's clock starts when its request is sent.
        let phase = Instant::now();
        let (archive_tx, archive_rx) = mpsc::channel::<Bytes>(16);
        let (seen_tx, seen_rx) = oneshot::channel();
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
        let mut pump = tokio::spawn(pump(
            output,
            (boundary, exit_marker),
            limits.stdio_max_bytes,
            archive_tx,
            seen_tx,
        ));
        // The request goes while the script's clock runs. stdin is not closed after it: the
        // runner takes its end for "the server is gone". The writer comes back out of the task
        // so that it lives until the attempt is over.
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
        tokio::pin!(exit, deadline);
        // Usually the pump ends first, with the runner's closing line: the result is whole and
        // the container need not be seen to exit. Otherwise (a runner that could not say, a
        // kill, a stream that ended early) Docker's exit code and OOM flag decide.
        let mut pumped = None;
        let end = tokio::select! {
            joined = &mut pump => {
                let done = joined.map_err(|e| SandboxError::Io {
                    action: "reading the container's output".to_string(),
                    source: std::io::Error::other(e),
                })?;
                let reported = done.trailer;
                pumped = Some(done);
                match reported {
                    Some(trailer) => Some(End::Exited(Some(trailer.exit_code))),
                    None => tokio::select! {
                        code = &mut exit => Some(End::Exited(code?)),
                        () = &mut deadline => Some(End::TimedOut),
                        () = cancel.cancelled() => None,
                    },
                }
            }
            code = &mut exit => Some(End::Exited(code?)),
            () = &mut deadline => Some(End::TimedOut),
            () = cancel.cancelled() => None,
        };
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
            None => match tokio::time::timeout(DRAIN_GRACE, pump).await {
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
            },
        };
        drop(input);
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

    /// Docker's OOM flag, once the container has exited (waits for the exit if need be).
    async fn oom_killed(&self, id: &str) -> Result<bool, SandboxError> {
        let state = || async {
            self.docker()
                .inspect_container(id, None)
                .await
                .map_err(|e| SandboxError::docker("inspecting the finished container", e))
                .map(|container| container.state.unwrap_or_default())
        };
        let mut now = state().await?;
        if now.running == Some(true) {
            let _ =
                tokio::time::timeout(DRAIN_GRACE, self.docker().wait_container(id, None).next())
                    .await;
            now = state().await?;
        }
        Ok(now.oom_killed.unwrap_or(false))
    }

    async fn kill(&self, id: &str) -> Result<(), SandboxError> {
        let options = KillContainerOptionsBuilder::default()
            .signal("SIGKILL")
            .build();
        match self.docker().kill_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            // Not running any more (409) or gone (404): nothing to kill.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => Ok(()),
            Err(e) => Err(SandboxError::docker("killing the container", e)),
        }
    }

    /// A warm container from the pool, else a cold one launched now.
    async fn container_for(
        &self,
        upload_bytes: u64,
        cancel: &CancellationToken,
    ) -> Result<Started, SandboxError> {
        if let Some(pool) = &self.pool
            && let Some(warm) = pool.take(upload_bytes, cancel).await
        {
            return Ok(warm);
        }
        self.launcher
            .launch(Kind::Cold { upload_bytes }, cancel)
            .await
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
        let timeout = self.config().limits.timeout;
        let request = tokio::task::spawn_blocking(move || Request::build(&job, timeout))
            .await
            .map_err(|e| SandboxError::Io {
                action: "packing the inputs".to_string(),
                source: std::io::Error::other(e),
            })??;
        // Counted from here to the result: the pool refills a lone attempt's container after it.
        let _attempt = self.pool.as_ref().map(|pool| pool.attempt());
        let container = self
            .container_for(request.upload.len() as u64, cancel)
            .await?;
        let Started {
            guard,
            image_id,
            output,
            input,
            kind,
            created_at,
            create,
            start,
        } = container;
        let mut timings = Timings::default();
        if !kind.is_warm() {
            timings.create = create;
            timings.start = start;
        }
        let ended = self
            .drive(
                guard.id(),
                (output, input),
                request,
                out_dir.to_path_buf(),
                cancel,
                &mut timings,
            )
            .await;
        let container_id = guard.id().to_string();
        // The result is whole: the container goes while the caller reads it. The tracker holds
        // the removal, so shutdown (and `file-agent run`) still waits for it; a failure is
        // logged and left to the reaper.
        self.launcher.tracker.spawn(async move {
            if let Err(error) = guard.remove().await {
                tracing::error!(%error, "could not remove a finished sandbox container; the reaper will");
            }
        });
        timings.total = started.elapsed();
        let ended = ended?;
        let (status, exit_code, message) = classify(&ended.summary(), &self.config().limits);
        Ok(Outcome {
            status,
            exit_code,
            stdout: ended.pumped.stdout,
            stderr: ended.pumped.stderr,
            outputs: ended.unpacked.files,
            skipped: ended.unpacked.skipped,
            timings,
            message,
            container_id,
            image_id,
            warm: kind.is_warm(),
            container_created: created_at,
        })
    }
}

/// How the wait for the container ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// It exited, with this code if Docker knew one.
    Exited(Option<i64>),
    /// The time limit (or the copy-out grace) ran out and it was killed.
    TimedOut,
}

/// Everything [`Sandbox::drive`] learnt from a container that ran to an end.
struct Ended {
    end: End,
    oom_killed: bool,
    boundary_seen: bool,
    pumped: Pumped,
    unpacked: archive::Unpacked,
}

impl Ended {
    fn summary(&self) -> Ending<'_> {
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
struct Ending<'a> {
    /// How the wait ended.
    end: End,
    /// Docker's OOM flag.
    oom_killed: bool,
    /// Whether the runner's boundary came (the script finished and outputs followed).
    boundary_seen: bool,
    /// Whether the runner's closing line came (it saw its script end and said how).
    runner_reported: bool,
    /// The cap that stopped the unpacking, if one did.
    limit: Option<&'a str>,
    /// What was wrong with the output archive, if anything.
    malformed: Option<&'a str>,
}

/// How an attempt ended, as a status, an exit code and one sentence a person can act on.
fn classify(ending: &Ending<'_>, limits: &Limits) -> (Status, Option<i64>, String) {
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
struct Pumped {
    stdout: Captured,
    stderr: Captured,
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
