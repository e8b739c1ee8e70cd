//! Helpers shared by the integration tests.

use std::ops::Deref;
use std::path::PathBuf;
use std::time::Duration;

use file_agent::config::SandboxConfig;
use file_agent::sandbox::{Job, Outcome, Runner, Sandbox, SandboxError, policy};
use sha2::Digest;
use tokio_util::sync::CancellationToken;

/// Every await in a test is bounded by this.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Awaits `future`, failing the test if it takes longer than [`TEST_TIMEOUT`].
pub async fn with_timeout<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(TEST_TIMEOUT, future)
        .await
        .expect("the test timed out")
}

/// The OCI runtime a sandbox test runs under.
#[derive(Clone, Copy, Debug)]
pub enum Runtime {
    /// The engine's default, runc.
    Default,
    /// gVisor, registered as `runsc` by `scripts/bootstrap.sh`.
    Gvisor,
}

impl Runtime {
    /// The `SANDBOX_RUNTIME` value, `None` for the engine's default.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Runtime::Default => None,
            Runtime::Gvisor => Some("runsc"),
        }
    }
}

/// A sandbox with the default configuration (so the real image), adjusted by the test.
pub struct TestSandbox(Sandbox);

impl TestSandbox {
    pub async fn new(adjust: impl FnOnce(&mut SandboxConfig)) -> Self {
        Self::on(Runtime::Default, adjust).await
    }

    /// A sandbox whose containers run under `runtime`.
    pub async fn on(runtime: Runtime, adjust: impl FnOnce(&mut SandboxConfig)) -> Self {
        let mut config = SandboxConfig::from_lookup(|_| None).unwrap();
        config.runtime = runtime.name().map(str::to_string);
        adjust(&mut config);
        Self(with_timeout(Sandbox::connect(config)).await.unwrap())
    }

    /// A sandbox whose pool keeps `size` warm containers, once they are all ready.
    pub async fn warm(
        size: usize,
        max_idle: Duration,
        adjust: impl FnOnce(&mut SandboxConfig),
    ) -> Self {
        Self::warm_on(Runtime::Default, size, max_idle, adjust).await
    }

    /// A warm sandbox whose containers run under `runtime`.
    pub async fn warm_on(
        runtime: Runtime,
        size: usize,
        max_idle: Duration,
        adjust: impl FnOnce(&mut SandboxConfig),
    ) -> Self {
        let Self(sandbox) = Self::on(runtime, adjust).await;
        let sandbox = Self(sandbox.with_warm_pool(size, max_idle));
        sandbox.until_warm(size).await;
        sandbox
    }

    /// Waits until the pool has `ready` containers ready.
    pub async fn until_warm(&self, ready: usize) {
        until_warm(&self.0, ready).await;
    }

    /// Waits until the pool's `ready` containers have done their idle preload too (the only
    /// running containers of this sandbox's instance).
    pub async fn until_primed(&self, ready: usize) {
        self.until_warm(ready).await;
        let label = format!("{}={}", policy::INSTANCE_LABEL, self.0.instance());
        until_primed(&label, ready).await;
    }

    /// Asserts that this sandbox left no container, allowing a moment for removals started by
    /// dropped guards.
    pub async fn assert_nothing_left(&self) {
        let mut left = 0;
        for _ in 0..50 {
            left = with_timeout(self.0.leftovers()).await.unwrap();
            if left == 0 && self.0.live_containers() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "left behind: {left} containers, {} live",
            self.0.live_containers()
        );
    }
}

impl Deref for TestSandbox {
    type Target = Sandbox;
    fn deref(&self) -> &Sandbox {
        &self.0
    }
}

/// Waits until `sandbox`'s pool has `ready` containers ready.
pub async fn until_warm(sandbox: &Sandbox, ready: usize) {
    with_timeout(async {
        while sandbox.pool_stats().expect("a pool").ready < ready {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// Runs `job` with its outputs in `out`, within [`TEST_TIMEOUT`].
pub async fn run_job(sandbox: &Sandbox, job: Job, out: &std::path::Path) -> Outcome {
    with_timeout(sandbox.run(job, out, &CancellationToken::new()))
        .await
        .unwrap()
}

/// Runs `script` with its outputs in a temporary folder, within [`TEST_TIMEOUT`].
pub async fn run_script(sandbox: &Sandbox, script: &str) -> Outcome {
    let out = tempfile::tempdir().unwrap();
    let job = Job {
        script: script.to_string(),
        ..Job::default()
    };
    run_job(sandbox, job, out.path()).await
}

/// Starts `script` in the background; the handle gives the attempt's result when it ends.
pub fn spawn_attempt(
    sandbox: &Sandbox,
    script: &str,
) -> tokio::task::JoinHandle<Result<Outcome, SandboxError>> {
    let (sandbox, script) = (sandbox.clone(), script.to_string());
    tokio::spawn(async move {
        let out = tempfile::tempdir().unwrap();
        let job = Job {
            script,
            ..Job::default()
        };
        sandbox
            .run(job, out.path(), &CancellationToken::new())
            .await
    })
}

/// `prefix-` and `hex_chars` random hex digits: an instance no other test shares.
/// The text of every chain of the audit trail in the data folder `data` (one per server that
/// wrote there), chain after chain; empty before any line.
pub fn audit_text(data: &std::path::Path) -> String {
    let Ok(chains) = file_agent::audit::chain::chains(&data.join("audit")) else {
        return String::new();
    };
    chains
        .iter()
        .flat_map(|chain| &chain.files)
        .map(|file| std::fs::read_to_string(file).unwrap())
        .collect()
}

/// The lines of [`audit_text`], parsed.
pub fn audit_lines(data: &std::path::Path) -> Vec<serde_json::Value> {
    audit_text(data)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The one chain file the server over `data` writes (the test's only server there).
pub fn audit_file(data: &std::path::Path) -> std::path::PathBuf {
    let chains = file_agent::audit::chain::chains(&data.join("audit")).unwrap();
    assert_eq!(chains.len(), 1, "{chains:?}");
    chains[0].files.last().unwrap().clone()
}

pub fn unique_instance(prefix: &str, hex_chars: usize) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..hex_chars]
    )
}

/// The venv a set-up script made for the tests: the folder `$variable` names (relative to the
/// checkout, or absolute), else `default` under the checkout. The scripts and their variables:
/// `scripts/test-python.sh` (`FILE_AGENT_TEST_SDK_ENV`, `target/test-python`),
/// `scripts/test-openwebui.sh` (`FILE_AGENT_TEST_OPENWEBUI_ENV`, `target/test-openwebui`) and
/// `scripts/sandbox-python.sh` (`FILE_AGENT_TEST_PYTHON_ENV`, `target/sandbox-python`).
pub fn test_venv(variable: &str, default: &str) -> PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::env::var_os(variable).map_or_else(|| root.join(default), |dir| root.join(dir))
}

/// The official MCP Python SDK's venv (`scripts/test-python.sh`).
pub fn sdk_venv() -> PathBuf {
    test_venv("FILE_AGENT_TEST_SDK_ENV", "target/test-python")
}

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/scripts")
        .join(name)
}

pub fn fixture_script(name: &str) -> String {
    std::fs::read_to_string(fixture_path(name)).unwrap()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

pub async fn docker() -> bollard::Docker {
    bollard::Docker::connect_with_defaults()
        .unwrap()
        .negotiate_version()
        .await
        .unwrap()
}

/// The runner's word that a warm worker has done its idle preload (`IDLE_PRIMED_MARK` in
/// sandbox-image/runner.py): an empty file, there until the worker's job arrives.
pub const IDLE_PRIMED_MARK: &str = "/tmp/.file-agent-idle-primed";
/// The longest wait for a warm runner's idle preload: about 3 s after READY on a quiet
/// machine, far longer beside a busy suite (the imports and priming of five libraries compete
/// for the two cores).
pub const PRIMED_WAIT_MAX: Duration = Duration::from_secs(90);

/// Runs `command` in container `id` (`docker exec`, as the image's sandbox user) and returns its
/// exit code.
pub async fn exec_in(id: &str, command: &[&str]) -> i64 {
    try_exec_in(id, command)
        .await
        .unwrap_or_else(|error| panic!("docker exec in {id}: {error}"))
}

/// [`exec_in`], or the engine's error (the container is not running).
pub async fn try_exec_in(id: &str, command: &[&str]) -> Result<i64, bollard::errors::Error> {
    let docker = docker().await;
    let config = bollard::models::ExecConfig {
        cmd: Some(command.iter().map(|part| part.to_string()).collect()),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        ..Default::default()
    };
    let exec = with_timeout(docker.create_exec(id, config)).await?;
    let detached = bollard::exec::StartExecOptions {
        detach: true,
        ..Default::default()
    };
    with_timeout(docker.start_exec(&exec.id, Some(detached))).await?;
    with_timeout(async {
        loop {
            let state = docker.inspect_exec(&exec.id).await?;
            if state.running == Some(false) {
                return Ok(state.exit_code.unwrap_or(-1));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Waits until `count` running containers carry `label` (`key=value`) and the runner in each
/// says it has done its idle preload ([`IDLE_PRIMED_MARK`]); fails after [`PRIMED_WAIT_MAX`],
/// saying which are not.
pub async fn until_primed(label: &str, count: usize) {
    let started = std::time::Instant::now();
    let filters =
        std::collections::HashMap::from([("label", vec![label]), ("status", vec!["running"])]);
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .filters(&filters)
        .build();
    loop {
        let containers = with_timeout(docker().await.list_containers(Some(options.clone())))
            .await
            .unwrap();
        let mut waiting = Vec::new();
        for container in &containers {
            let id = container.id.clone().unwrap_or_default();
            if exec_in(&id, &["test", "-e", IDLE_PRIMED_MARK]).await != 0 {
                waiting.push(id);
            }
        }
        if containers.len() == count && waiting.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < PRIMED_WAIT_MAX,
            "{label}: {} running containers, {waiting:?} not done with the idle preload after {PRIMED_WAIT_MAX:?}",
            containers.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates a container with this sandbox's labels and abandons it, as a crash would.
pub async fn orphan_container(sandbox: &Sandbox) -> String {
    let spec = policy::container_spec(
        sandbox.config(),
        sandbox.instance(),
        policy::Kind::Cold { upload_bytes: 0 },
    );
    with_timeout(docker().await.create_container(None, spec))
        .await
        .unwrap()
        .id
}

/// How many containers carry this instance label (running or not).
pub async fn containers_of_instance(instance: &str) -> usize {
    containers_where(instance, &[]).await
}

/// How many containers of this instance are running.
pub async fn running_containers_of_instance(instance: &str) -> usize {
    containers_where(instance, &[("status", "running")]).await
}

/// The longest [`wait_for_containers`] and [`wait_for_running`] wait: a container is usually
/// there within a second, but beside a loaded suite on two cores creating and starting one has
/// taken over 30 s.
pub const CONTAINERS_WAIT_MAX: Duration = Duration::from_secs(90);

/// Waits (up to [`CONTAINERS_WAIT_MAX`]) until this instance has exactly `count` containers.
pub async fn wait_for_containers(instance: &str, count: usize) {
    wait_for(instance, count, false).await;
}

/// Waits (up to [`CONTAINERS_WAIT_MAX`]) until exactly `count` containers of this instance are
/// running.
pub async fn wait_for_running(instance: &str, count: usize) {
    wait_for(instance, count, true).await;
}

async fn wait_for(instance: &str, count: usize, running: bool) {
    let started = std::time::Instant::now();
    loop {
        let now = if running {
            running_containers_of_instance(instance).await
        } else {
            containers_of_instance(instance).await
        };
        if now == count {
            return;
        }
        assert!(
            started.elapsed() < CONTAINERS_WAIT_MAX,
            "{instance}: never {count} {}containers in {CONTAINERS_WAIT_MAX:?}",
            if running { "running " } else { "" }
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The ids of this instance's containers (running or not).
pub async fn container_ids_of_instance(instance: &str) -> Vec<String> {
    containers_listed(instance, &[])
        .await
        .into_iter()
        .filter_map(|container| container.id)
        .collect()
}

/// The names of file-agent's containers (running or not) whose instance label starts with
/// `prefix`: a bench's instance and those of the servers it starts.
pub async fn containers_labelled_from(prefix: &str) -> Vec<String> {
    let filters = std::collections::HashMap::from([("label", vec![policy::INSTANCE_LABEL])]);
    listed(&filters)
        .await
        .into_iter()
        .filter(|container| {
            container
                .labels
                .as_ref()
                .and_then(|labels| labels.get(policy::INSTANCE_LABEL))
                .is_some_and(|instance| instance.starts_with(prefix))
        })
        .map(|container| format!("{:?} {:?}", container.names, container.labels))
        .collect()
}

async fn containers_where(instance: &str, more: &[(&str, &str)]) -> usize {
    containers_listed(instance, more).await.len()
}

async fn containers_listed(
    instance: &str,
    more: &[(&str, &str)],
) -> Vec<bollard::models::ContainerSummary> {
    let label = format!("io.file-agent.instance={instance}");
    let mut filters = std::collections::HashMap::from([("label", vec![label.as_str()])]);
    for (key, value) in more {
        filters.insert(key, vec![value]);
    }
    listed(&filters).await
}

/// The containers (running or not) that match `filters`.
async fn listed(
    filters: &std::collections::HashMap<&str, Vec<&str>>,
) -> Vec<bollard::models::ContainerSummary> {
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .all(true)
        .filters(filters)
        .build();
    with_timeout(docker().await.list_containers(Some(options)))
        .await
        .unwrap()
}

/// Removes a container a test made by hand.
pub async fn remove(id: &str) {
    let options = bollard::query_parameters::RemoveContainerOptionsBuilder::default()
        .force(true)
        .build();
    with_timeout(docker().await.remove_container(id, Some(options)))
        .await
        .unwrap();
}

pub async fn container_exists(id: &str) -> bool {
    with_timeout(docker().await.inspect_container(id, None))
        .await
        .is_ok()
}

/// What `file-agent` printed and how it exited.
pub struct CliResult {
    pub code: Option<i32>,
    pub json: serde_json::Value,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the real binary with extra environment variables.
pub async fn run_cli(args: &[&str], env: &[(&str, &str)]) -> CliResult {
    let output = with_timeout(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"))
            .args(args)
            .envs(env.iter().copied())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    CliResult {
        code: output.status.code(),
        json: serde_json::from_str(stdout.trim()).unwrap_or(serde_json::Value::Null),
        stdout: stdout.clone().into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `VmHWM` or `VmRSS` of this process, in bytes.
pub fn memory(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|value| value.parse().ok())
        .unwrap();
    kib * 1024
}

/// Defines `runc::<test>` and `runsc::<test>` for each async `<test>(runtime)` named: one
/// test per runtime, the engine's default and gVisor.
macro_rules! on_each_runtime {
    ($($test:ident),* $(,)?) => {
        mod runc {
            $(#[tokio::test]
            async fn $test() {
                super::$test(crate::common::Runtime::Default).await
            })*
        }
        mod runsc {
            $(#[tokio::test]
            async fn $test() {
                super::$test(crate::common::Runtime::Gvisor).await
            })*
        }
    };
}
pub(crate) use on_each_runtime;
