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
//! 4. meanwhile read the runner's frames ([`stream::read_attempt`]): the script's stdout and
//!    stderr (capped), the runner's report, then the tar of `/work/out`, unpacked safely as it
//!    streams ([`archive::unpack`]);
//! 5. take the exit code and the OOM flag from the report (else from Docker), and [`classify`]
//!    how the attempt ended;
//! 6. remove the container, on every path ([`ContainerGuard`]), in the background once the
//!    result is whole. A container serves one attempt, ever: warm or cold, nothing gives it
//!    back.

pub mod archive;
mod attempt;
pub mod canary;
mod engine;
pub mod guard;
pub mod image;
pub mod kubernetes;
mod launch;
mod outcome;
pub mod policy;
mod pool;
pub mod request;
mod started;
pub mod stream;
pub mod wheels;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::query_parameters::ListContainersOptionsBuilder;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use archive::{Input, InputSource};
pub use attempt::{End, Ending, classify, runs_gvisor};
pub use canary::{CanaryReport, Verdict};
pub use guard::ContainerGuard;
pub use outcome::{
    Captured, Outcome, OutputFile, Resources, SandboxError, Skipped, StateLeft, Status, Timings,
};
pub use pool::PoolStats;

use crate::config::{Backend, SandboxConfig};
use canary::CanaryState;
use engine::Engine;
use guard::PendingRemovals;
use launch::Launcher;
use policy::Kind;
use pool::WarmPool;
use request::Request;
use started::Started;

/// Time allowed, after the script has finished, for the runner to stream its outputs back.
pub const COPY_OUT_GRACE: Duration = Duration::from_secs(60);
/// Slack added to the Docker client's per-request timeout over the longest wait.
const REQUEST_SLACK: Duration = Duration::from_secs(60);
/// How long shutdown tries the removals that failed before it gives up on them (and names
/// them in the log).
pub const SHUTDOWN_REMOVALS: Duration = Duration::from_secs(10);
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
    /// A session's state in and its bound out, when the attempt belongs to one.
    pub session: Option<SessionJob>,
}

/// A session's part of a [`Job`]: the state the session's last successful attempt left, which
/// the runner restores before the script runs, and the most the state this attempt leaves may
/// be. A state is opaque bytes here: only the runner, inside the container, pickles and
/// unpickles it. The state an attempt leaves comes back as the output
/// [`SESSION_STATE_OUTPUT`], or, when it is byte for byte the state that came in, as the small
/// marker [`SESSION_STATE_UNCHANGED`] ([`Outcome::take_session_state`]).
#[derive(Debug, Clone, Default)]
pub struct SessionJob {
    /// The state to restore (`/work/session/state`), when the session has one: streamed from
    /// its file into the upload, never read whole into memory.
    pub state: Option<StateFile>,
    /// The bound on the state this attempt leaves: the runner keeps none larger.
    pub max_bytes: u64,
}

/// A session's kept state, as a file on the host: where it is, and the SHA-256 and size its
/// bytes had when they were checked. The upload streams it and checks the hash again on the
/// way ([`request::Upload`]), so bytes changed after the check never reach a runner whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFile {
    /// The file.
    pub path: std::path::PathBuf,
    /// Its hex SHA-256.
    pub sha256: String,
    /// Its size in bytes.
    pub bytes: u64,
}

/// The path under `/work/out` where the runner writes the state a session's attempt leaves.
pub const SESSION_STATE_OUTPUT: &str = ".file-agent-state";
/// The path under `/work/out` where the runner writes, instead of the state, the hex SHA-256 of
/// the state that came in when the state it would leave is the same bytes: the state is then
/// not sent back, and the session keeps the one it started from.
pub const SESSION_STATE_UNCHANGED: &str = ".file-agent-state-unchanged";

impl Job {
    /// A job that runs the image's fixed script `/opt/file-agent/<name>` as `__main__`, with
    /// `globals` preset as Python strings (quoted, so a hostile file name stays a string), on
    /// `inputs`; `input_file_path` is the first of them. Used for file-agent's own one-file
    /// script (`model_tool.py`), never for a script the model wrote.
    pub fn image_script(name: &str, globals: &[(&str, &str)], inputs: Vec<Input>) -> Self {
        let script = format!(
            "import runpy\nrunpy.run_path({}, init_globals={}, run_name=\"__main__\")\n",
            python_string(&format!("{IMAGE_SCRIPTS}/{name}")),
            python_dict(globals)
        );
        Self::for_image(script, inputs)
    }

    /// A job that runs the `__main__.py` of the image's fixed package `/opt/file-agent/<name>/`
    /// as `__main__`, with `globals` and `inputs` as for [`Job::image_script`]. Used for
    /// file-agent's own scripts of a module per file type (the table inspection, the change
    /// report). `python3 -I` leaves the scripts' folder off `sys.path`, so the job appends it
    /// (appends: nothing in the folder comes before a library of the image).
    pub fn image_package(name: &str, globals: &[(&str, &str)], inputs: Vec<Input>) -> Self {
        let script = format!(
            "import runpy\nimport sys\nsys.path.append({})\n\
             runpy.run_module({}, init_globals={}, run_name=\"__main__\")\n",
            python_string(&format!("{IMAGE_SCRIPTS}/")),
            python_string(name),
            python_dict(globals)
        );
        Self::for_image(script, inputs)
    }

    /// A job of one of the image's scripts: `input_file_path` is the first input, if any.
    fn for_image(script: String, inputs: Vec<Input>) -> Self {
        let input_file_path = inputs
            .first()
            .map(|input| format!("/work/in/{}", String::from_utf8_lossy(&input.name)));
        Self {
            script,
            inputs,
            file_path: None,
            input_file_path,
            session: None,
        }
    }
}

/// Where the image keeps file-agent's own scripts.
const IMAGE_SCRIPTS: &str = "/opt/file-agent";

/// A Python string literal for `text` (JSON's escapes are valid Python).
fn python_string(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

/// A Python dict literal of string keys and values.
fn python_dict(entries: &[(&str, &str)]) -> String {
    let entries: Vec<String> = entries
        .iter()
        .map(|(key, value)| format!("{}: {}", python_string(key), python_string(value)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// A way to run jobs. The server's is [`Sandbox`] (Docker); the tests add one that runs the
/// image's runner with the host's Python, compiled only into the test binary, so that the
/// flows above this seam (`tools`) can be tested without Docker. Whatever runs a job must give
/// the same [`Outcome`] for the same script: the runner's protocol ([`request`], [`stream`],
/// [`archive`]) and the judgement of how it ended ([`classify`]) are public for that.
pub trait Runner: std::fmt::Debug + Send + Sync + 'static {
    /// The settings every job runs with (limits, image, runtime).
    fn config(&self) -> &SandboxConfig;

    /// Why no job may run now, if so (under Kubernetes: the network canary reached the
    /// network, or has not proven yet that it does not). A call that would run code is
    /// refused with it before anything else.
    fn refusal(&self) -> Option<SandboxError> {
        None
    }

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

impl ReapScope {
    /// [`ReapScope::Safe`] for containers made with `config`: running ones past
    /// [`longest_life`], stopped ones after [`STOPPED_GRACE`].
    pub fn safe(config: &SandboxConfig) -> Self {
        Self::Safe {
            longest_life: longest_life(config),
            stopped_for: STOPPED_GRACE,
        }
    }
}

impl ReapScope {
    /// Whether a container (or pod) `age` old is a leftover to remove; what it leaves alone is
    /// counted in `report`. `stopped_for` matters only when it is not `running`.
    fn removes(
        &self,
        running: bool,
        warm: bool,
        age: Duration,
        stopped_for: Duration,
        report: &mut ReapReport,
    ) -> bool {
        match self {
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
            ReapScope::Safe {
                stopped_for: grace, ..
            } => {
                let stopped_long_ago = stopped_for >= *grace;
                if !stopped_long_ago {
                    report.left_recent += 1;
                }
                stopped_long_ago
            }
        }
    }
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
#[derive(Debug, Clone)]
pub struct Diagnosis {
    /// The engine's version.
    pub engine_version: String,
    /// The API version the engine speaks (and the client negotiated).
    pub api_version: String,
    /// The OCI runtimes the engine has.
    pub runtimes: Vec<String>,
    /// The engine's cgroup version.
    pub cgroup_version: String,
    /// The runtime the engine uses when none is asked for (`runc` unless configured).
    pub default_runtime: Option<String>,
    /// The image, if present: (id, size in bytes).
    pub image: Option<(String, i64)>,
}

/// A connection to the Docker engine, the settings every attempt uses, and the warm pool.
#[derive(Clone)]
pub struct Sandbox {
    launcher: Launcher,
    /// Containers started ahead; `None` when the pool is off.
    pool: Option<Arc<WarmPool>>,
    /// Stops the task that tries failed removals again, when the last clone of the sandbox
    /// goes (or at [`Sandbox::shutdown`]).
    _retry_stop: Arc<tokio_util::sync::DropGuard>,
    /// Whatever makes this process the owner of its instance label (a locked file), held as
    /// long as the sandbox lives.
    _instance_claim: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// The network canary's last verdict (under Kubernetes, when it runs): unless it says
    /// the sandbox reached nothing, no attempt runs.
    canary: Option<CanaryState>,
    /// Cancelled by [`Sandbox::shutdown`]: ends the canary's task and its attempt.
    stop: CancellationToken,
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
        let engine = match &config.backend {
            Backend::Docker => Engine::Docker(Self::connect_docker(&config).await?),
            Backend::Kubernetes(kube) => {
                Engine::Kubernetes(Box::new(kubernetes::Cluster::connect(kube).await?))
            }
        };
        let instance = config
            .instance
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        let pending = Arc::new(PendingRemovals::default());
        let retry_stop = CancellationToken::new();
        tokio::spawn(pending.clone().retry(retry_stop.clone()));
        Ok(Self {
            launcher: Launcher {
                engine,
                config,
                instance,
                live: Arc::new(AtomicUsize::new(0)),
                tracker: TaskTracker::new(),
                pending,
            },
            pool: None,
            _retry_stop: retry_stop.drop_guard().into(),
            _instance_claim: None,
            canary: None,
            stop: CancellationToken::new(),
        })
    }

    async fn connect_docker(config: &SandboxConfig) -> Result<Docker, SandboxError> {
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
        Ok(docker)
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

    /// Under Kubernetes with `SANDBOX_CANARY_INTERVAL` set: runs the network canary
    /// ([`canary`]) now and every interval (sooner after one that could not conclude), in a
    /// task that ends at [`Sandbox::shutdown`]; every attempt is refused until a canary has
    /// reached nothing, and whenever the last one did not. With the interval 0 it warns that
    /// nothing proves the pods isolated. Call it once, from within the runtime.
    pub async fn with_network_canary(mut self) -> Self {
        let Some((interval, targets)) = self.canary_plan().await else {
            return self;
        };
        // `SANDBOX_CANARY_INTERVAL=0` turns it off (doctor still runs one).
        let Some(interval) = interval else {
            tracing::warn!(
                "SANDBOX_CANARY_INTERVAL=0: no network canary runs, so nothing proves that the sandbox pods are cut off from the network; code runs on the NetworkPolicy's word alone (and the CNI's enforcement of it)"
            );
            return self;
        };
        if self.config().limits.timeout < canary::SCRIPT_NEEDS {
            tracing::warn!(
                "SCRIPT_TIMEOUT ({} s) is shorter than the network canary's script may need ({} s): canaries that time out prove nothing, and then no code runs",
                self.config().limits.timeout.as_secs(),
                canary::SCRIPT_NEEDS.as_secs()
            );
        }
        let state = CanaryState::new(targets);
        self.canary = Some(state.clone());
        tokio::spawn(self.clone().watch_network(state, interval));
        self
    }

    /// The canary's task: a canary, then a wait ([`canary::next_wait`]: the interval after
    /// one that concluded, a short and doubling one after one that could not), until shutdown.
    async fn watch_network(self, state: CanaryState, interval: Duration) {
        let mut failures: u32 = 0;
        loop {
            state.schedule(None);
            let targets = state.targets();
            let verdict = tokio::select! {
                verdict = self.run_canary(&targets, &self.stop) => verdict,
                () = self.stop.cancelled() => return,
            };
            failures = match verdict {
                Verdict::Failed(_) => failures.saturating_add(1),
                _ => 0,
            };
            let wait = canary::next_wait(failures, interval);
            state.schedule(Some(wait));
            state.record(verdict);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.stop.cancelled() => return,
            }
        }
    }

    /// Runs one network canary now and waits for its verdict (`file-agent doctor`); `None`
    /// when the backend has none (Docker: `NetworkMode=none` is verified on every container).
    pub async fn probe_network(&self) -> Option<CanaryReport> {
        let (_, targets) = self.canary_plan().await?;
        let state = CanaryState::new(targets);
        state.record(self.run_canary(&state.targets(), &self.stop).await);
        Some(state.report())
    }

    /// The canary's last verdict, when it runs.
    pub fn network_canary(&self) -> Option<CanaryReport> {
        self.canary.as_ref().map(CanaryState::report)
    }

    /// Under Kubernetes: the canary's interval (`None`: off) and its targets, the API server's
    /// addresses first.
    async fn canary_plan(&self) -> Option<(Option<Duration>, Vec<String>)> {
        let (Backend::Kubernetes(kube), Some(cluster)) = (&self.config().backend, self.cluster())
        else {
            return None;
        };
        let mut targets = cluster.api_server_addresses().await;
        targets.extend(kube.canary_addresses.iter().cloned());
        Some((kube.canary_interval, targets))
    }

    /// One canary attempt: a cold pod, never a warm one (the canary must be what an attempt
    /// gets from now on, and must not take a pod an attempt is waiting for).
    async fn run_canary(&self, targets: &[String], cancel: &CancellationToken) -> Verdict {
        let job = Job {
            script: canary::script(targets, canary::DNS_NAME),
            ..Job::default()
        };
        let folder = match tempfile::tempdir() {
            Ok(folder) => folder,
            Err(error) => return Verdict::Failed(format!("no temporary folder: {error}")),
        };
        match self
            .run_with(job, folder.path(), cancel, Through::Canary)
            .await
        {
            Ok(outcome) => canary::judge(&outcome),
            Err(error) => Verdict::Failed(error.to_string()),
        }
    }

    /// The pool's numbers; `None` when the pool is off.
    pub fn pool_stats(&self) -> Option<PoolStats> {
        self.pool.as_ref().map(|pool| pool.stats())
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.launcher.engine
    }

    /// The Kubernetes cluster, under that backend.
    pub(crate) fn cluster(&self) -> Option<&kubernetes::Cluster> {
        match self.engine() {
            Engine::Kubernetes(cluster) => Some(cluster.as_ref()),
            Engine::Docker(_) => None,
        }
    }

    /// `docker` or `kubernetes`.
    pub fn backend(&self) -> &'static str {
        self.config().backend.name()
    }

    /// What the backend must have before attempts may run, beyond what a container's (or
    /// pod's) own settings can say: under Kubernetes, a NetworkPolicy that cuts the sandbox
    /// pods off the network. Docker's `NetworkMode=none` is in the container itself.
    pub async fn check_isolation(&self) -> Result<(), SandboxError> {
        match self.cluster() {
            Some(cluster) => cluster.check_network_policy(self.instance()).await,
            None => Ok(()),
        }
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

    /// Containers (or pods) whose removal failed and is being tried again.
    pub fn pending_removals(&self) -> usize {
        self.launcher.pending.len()
    }

    /// Stops the canary, drains the pool, waits for removals started by dropped guards, and
    /// tries the removals that failed once more, for at most [`SHUTDOWN_REMOVALS`].
    pub async fn shutdown(&self) {
        self.stop.cancel();
        if let Some(pool) = &self.pool {
            pool.drain().await;
        }
        self.launcher.tracker.close();
        self.launcher.tracker.wait().await;
        self.launcher.pending.drain(SHUTDOWN_REMOVALS).await;
    }

    /// Engine version, runtimes and image presence, for `file-agent doctor`.
    pub async fn diagnose(&self) -> Result<Diagnosis, SandboxError> {
        let docker = match self.engine() {
            Engine::Docker(docker) => docker,
            Engine::Kubernetes(cluster) => {
                let found = cluster.diagnose().await?;
                return Ok(Diagnosis {
                    engine_version: found.version,
                    api_version: "v1".to_string(),
                    runtimes: self.config().runtime.iter().cloned().collect(),
                    cgroup_version: String::new(),
                    default_runtime: None,
                    image: None,
                });
            }
        };
        let version = docker
            .version()
            .await
            .map_err(|e| SandboxError::docker("reading the engine version", e))?;
        let info = docker
            .info()
            .await
            .map_err(|e| SandboxError::docker("reading the engine info", e))?;
        let image = match docker.inspect_image(&self.config().image).await {
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
            default_runtime: info.default_runtime,
            image,
        })
    }

    /// Whether the configured image is on the engine.
    /// Under Kubernetes the cluster pulls the image when a pod starts: not checked here.
    pub async fn image_present(&self, image: &str) -> Result<bool, SandboxError> {
        let docker = match self.engine() {
            Engine::Docker(docker) => docker,
            Engine::Kubernetes(_) => return Ok(true),
        };
        match docker.inspect_image(image).await {
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
        let docker = match self.engine() {
            Engine::Docker(docker) => docker,
            Engine::Kubernetes(cluster) => return cluster.reap(filter).await,
        };
        let mut labels = vec![format!("{}=true", policy::MANAGED_LABEL)];
        if let Some(instance) = &filter.instance {
            labels.push(format!("{}={instance}", policy::INSTANCE_LABEL));
        }
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        let containers = containers_labelled(docker, &labels).await?;
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
            let stopped_for = match &filter.scope {
                ReapScope::Safe { .. } if !running => self.stopped_for(docker, &id, age).await?,
                _ => Duration::ZERO,
            };
            if filter
                .scope
                .removes(running, warm, age, stopped_for, &mut report)
            {
                engine::remove_container(docker, &id).await?;
                report.containers += 1;
            }
        }
        Ok(report)
    }

    /// How long a container that is not running has been stopped: since it finished, or,
    /// when it never started, since it was created (`age`). Zero when it is gone already.
    async fn stopped_for(
        &self,
        docker: &Docker,
        id: &str,
        age: Duration,
    ) -> Result<Duration, SandboxError> {
        let state = match docker.inspect_container(id, None).await {
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
        let docker = match self.engine() {
            Engine::Docker(docker) => docker,
            Engine::Kubernetes(cluster) => return cluster.leftovers(self.instance()).await,
        };
        let label = format!("{}={}", policy::INSTANCE_LABEL, self.instance());
        Ok(containers_labelled(docker, &[&label]).await?.len())
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

/// All containers, running or not, that carry every one of `labels` (`key=value`).
async fn containers_labelled(
    docker: &Docker,
    labels: &[&str],
) -> Result<Vec<bollard::models::ContainerSummary>, SandboxError> {
    let filters = std::collections::HashMap::from([("label", labels.to_vec())]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(options))
        .await
        .map_err(|e| SandboxError::docker("listing containers", e))
}

impl Runner for Sandbox {
    fn config(&self) -> &SandboxConfig {
        &self.launcher.config
    }

    fn refusal(&self) -> Option<SandboxError> {
        self.canary.as_ref().and_then(CanaryState::refusal)
    }

    async fn run(
        &self,
        job: Job,
        out_dir: &Path,
        cancel: &CancellationToken,
    ) -> Result<Outcome, SandboxError> {
        self.run_with(job, out_dir, cancel, Through::Attempt).await
    }
}

/// Whose job [`Sandbox::run_with`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Through {
    /// An attempt: refused unless the canary says the sandbox reached nothing; a warm container
    /// when one is ready.
    Attempt,
    /// The network canary: always runs, always in a cold container.
    Canary,
}

impl Sandbox {
    async fn run_with(
        &self,
        job: Job,
        out_dir: &Path,
        cancel: &CancellationToken,
        through: Through,
    ) -> Result<Outcome, SandboxError> {
        if through == Through::Attempt
            && let Some(refusal) = self.refusal()
        {
            return Err(refusal);
        }
        let started = Instant::now();
        let request = self.request(job).await?;
        // Counted from here to the result: the pool refills a lone attempt's container after it.
        // The canary is no attempt the pool should make room for.
        let _attempt = self
            .pool
            .as_ref()
            .filter(|_| through == Through::Attempt)
            .map(|pool| pool.attempt());
        let container = self
            .container_through(through, request.upload.len(), cancel)
            .await?;
        self.run_in(container, request, out_dir, cancel, started)
            .await
    }

    /// Runs the request in the started container and removes the container once its result
    /// is whole; `started` is when the whole run began, for the total time.
    async fn run_in(
        &self,
        container: Started,
        request: Request,
        out_dir: &Path,
        cancel: &CancellationToken,
        started: Instant,
    ) -> Result<Outcome, SandboxError> {
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
        // the removal, so shutdown (and `file-agent run`) still waits for it.
        guard.remove_in_background();
        timings.total = started.elapsed();
        Ok(self.outcome(ended?, timings, container_id, image_id, kind, created_at))
    }

    /// Packs the job into its request, off the async threads (the inputs are read and tarred).
    async fn request(&self, job: Job) -> Result<Request, SandboxError> {
        let limits = self.config().limits.clone();
        tokio::task::spawn_blocking(move || Request::build(&job, &limits))
            .await
            .map_err(|e| SandboxError::Io {
                action: "packing the inputs".to_string(),
                source: std::io::Error::other(e),
            })?
    }

    /// A started container for an upload of `upload_bytes`: from the pool for an attempt, a
    /// cold one of its own for the canary.
    async fn container_through(
        &self,
        through: Through,
        upload_bytes: u64,
        cancel: &CancellationToken,
    ) -> Result<Started, SandboxError> {
        match through {
            Through::Attempt => self.container_for(upload_bytes, cancel).await,
            Through::Canary => {
                self.launcher
                    .launch(Kind::Cold { upload_bytes }, cancel)
                    .await
            }
        }
    }

    /// The outcome of a container that ran to an end: its status and message as [`classify`]
    /// judges them, its output, and where and how long it ran.
    fn outcome(
        &self,
        ended: attempt::Ended,
        timings: Timings,
        container_id: String,
        image_id: String,
        kind: Kind,
        created_at: SystemTime,
    ) -> Outcome {
        let (status, exit_code, mut message) = classify(&ended.summary(), &self.config().limits);
        let resources = (ended.relayed.report.as_ref())
            .map_or_else(Resources::default, |report| report.resources);
        if status == Status::OutOfMemory
            && let Some(peak) = resources.peak_memory_bytes
        {
            message.push_str(&format!(
                " (its largest process had reached {} MiB when it was killed)",
                peak.div_ceil(1 << 20)
            ));
        }
        Outcome {
            status,
            exit_code,
            stdout: ended.relayed.stdout,
            stderr: ended.relayed.stderr,
            outputs: ended.unpacked.files,
            skipped: ended.unpacked.skipped,
            timings,
            message,
            container_id,
            image_id,
            warm: kind.is_warm(),
            container_created: created_at,
            resources,
        }
    }
}
