//! The one place that decides how a sandbox container is locked down.
//!
//! [`container_spec`] turns a [`SandboxConfig`] into the create request, and [`verify`] reads
//! back what Docker actually applied and refuses the container when anything differs (fail
//! closed: an engine that silently drops a limit must not run model code). The security settings
//! are not configurable on purpose; only the resource limits and the OCI runtime are.
//!
//! A container is [`Kind::Cold`] (made for an attempt that is waiting, `/work` sized to its
//! upload) or [`Kind::Warm`] (made ahead for the pool, knowing nothing of the attempt that will
//! take it). Both get the same security settings; only the runner's arguments, the size of
//! `/work` and one label differ.
//!
//! Layout inside the container, with no volume and no bind mount, so nothing the script writes
//! lands on the host's disk:
//! - `/` read-only (the image);
//! - `/work` a tmpfs: the runner unpacks `script.py` and `in/` there from stdin, read-only. Sized
//!   to the upload (plus [`WORK_SLACK_BYTES`]) when cold, to the memory limit when warm (the
//!   memory limit bounds it either way, since a tmpfs counts against it);
//! - `/work/out` a tmpfs capped at the output limit: where the script writes results; the runner
//!   streams it back as a tar after the script;
//! - `/tmp` a tmpfs capped in size. All three count against the memory limit.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, HostConfig, HostConfigLogConfig,
    ResourcesUlimits,
};

use super::SandboxError;
use crate::config::SandboxConfig;

/// Label on every container file-agent creates; the reaper looks for it.
pub const MANAGED_LABEL: &str = "io.file-agent.managed";
/// Label naming the [`super::Sandbox`] instance that created a container.
pub const INSTANCE_LABEL: &str = "io.file-agent.instance";
/// Label on the containers made ahead for the warm pool (`true`); absent on cold ones.
pub const WARM_LABEL: &str = "io.file-agent.warm";
/// The unprivileged user the script runs as.
pub const SANDBOX_USER: &str = "10001:10001";
/// Where the script is uploaded.
pub const SCRIPT_PATH: &str = "/work/script.py";
/// The command a cold container runs: the runner baked into the image, isolated mode (`-I`:
/// no user site, no `PYTHON*` variables), no byte-code writes (`-B`). Everything about the
/// attempt arrives on stdin (see `sandbox-image/runner.py` and [`super::request`]).
pub const COMMAND: [&str; 5] = [
    "python3",
    "-I",
    "-B",
    "/opt/file-agent/runner.py",
    SCRIPT_PATH,
];
/// Variables the image itself defines (see `sandbox-image/`). file-agent sets none: anything
/// else in a container's environment makes [`verify`] refuse it.
const IMAGE_VARIABLES: [&str; 5] = ["PATH", "HOME", "LANG", "MPLBACKEND", "MPLCONFIGDIR"];
/// How much longer than the pool keeps it a warm runner waits for an attempt before it ends on
/// its own (the pool replaces it first; this holds when no server is left to do so).
pub const WARM_SELF_EXIT_SLACK: std::time::Duration = std::time::Duration::from_secs(60);

/// Which container to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// For an attempt that is waiting: `/work` sized to its upload of this many bytes.
    Cold {
        /// The size of the tar the runner will unpack into `/work`.
        upload_bytes: u64,
    },
    /// For the pool: the runner imports the libraries first, then waits on stdin for at most
    /// this long before it ends on its own.
    Warm {
        /// How long the runner waits for an attempt.
        max_idle: std::time::Duration,
    },
}

impl Kind {
    /// Whether this is a pool container.
    pub fn is_warm(self) -> bool {
        matches!(self, Self::Warm { .. })
    }
}

/// The largest upload a warm container takes: its `/work` is as large as the memory limit.
pub fn warm_upload_capacity(config: &SandboxConfig) -> u64 {
    config.limits.memory_bytes.saturating_sub(WORK_SLACK_BYTES)
}

/// Room in the `/work` tmpfs beyond the upload itself.
pub const WORK_SLACK_BYTES: u64 = 1024 * 1024;

/// Builds the create request for one container of `kind`.
pub fn container_spec(config: &SandboxConfig, instance: &str, kind: Kind) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(config.image.clone()),
        user: Some(SANDBOX_USER.to_string()),
        cmd: Some(runner_command(kind)),
        entrypoint: Some(Vec::new()),
        working_dir: Some("/work".to_string()),
        hostname: Some("sandbox".to_string()),
        env: Some(Vec::new()),
        labels: Some(labels(instance, kind)),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        // The attempt arrives on stdin, which stays open while it runs: when its one attached
        // client (the server) goes away, Docker closes it (StdinOnce) and the runner stops.
        attach_stdin: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(false),
        host_config: Some(host_config(config, work_bytes(config, kind))),
        ..Default::default()
    }
}

/// The managed and instance labels, and the warm label on a pool container.
fn labels(instance: &str, kind: Kind) -> HashMap<String, String> {
    let mut labels = HashMap::from([
        (MANAGED_LABEL.to_string(), "true".to_string()),
        (INSTANCE_LABEL.to_string(), instance.to_string()),
    ]);
    if kind.is_warm() {
        labels.insert(WARM_LABEL.to_string(), "true".to_string());
    }
    labels
}

/// The lock-down and the limits: no network, a read-only root, no privilege or capability,
/// the pids, memory (no swap), CPU and rlimits, the tmpfs mounts (`/work` of `work_bytes`), no
/// log and no `/dev/shm`.
fn host_config(config: &SandboxConfig, work_bytes: u64) -> HostConfig {
    let limits = &config.limits;
    let memory = i64::try_from(limits.memory_bytes).unwrap_or(i64::MAX);
    HostConfig {
        network_mode: Some("none".to_string()),
        readonly_rootfs: Some(true),
        privileged: Some(false),
        cap_drop: Some(vec!["ALL".to_string()]),
        security_opt: Some(vec!["no-new-privileges".to_string()]),
        pids_limit: Some(limits.pids),
        memory: Some(memory),
        memory_swap: Some(memory),
        nano_cpus: Some((limits.cpus * 1e9).round() as i64),
        ulimits: Some(ulimits(config)),
        tmpfs: Some(tmpfs_mounts(config, work_bytes)),
        // Output is read through attach and capped there; nothing is kept on the host's disk.
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".to_string()),
            config: None,
        }),
        // No /dev/shm: it would be one more writable place (multiprocessing needs it; the
        // code this runs does not).
        ipc_mode: Some("none".to_string()),
        runtime: config.runtime.clone(),
        auto_remove: Some(false),
        init: Some(false),
        ..Default::default()
    }
}

/// The rlimits: open files; no single file larger than all outputs together; no core dumps.
fn ulimits(config: &SandboxConfig) -> Vec<ResourcesUlimits> {
    let limits = &config.limits;
    let output_bytes = i64::try_from(limits.output_max_bytes).unwrap_or(i64::MAX);
    let nofile = i64::try_from(limits.nofile).unwrap_or(i64::MAX);
    let ulimit = |name: &str, value: i64| ResourcesUlimits {
        name: Some(name.to_string()),
        soft: Some(value),
        hard: Some(value),
    };
    vec![
        ulimit("nofile", nofile),
        ulimit("fsize", output_bytes),
        ulimit("core", 0),
    ]
}

/// The runner's command line for a container of `kind` (the Docker and the Kubernetes
/// backend run the same one).
pub fn runner_command(kind: Kind) -> Vec<String> {
    let mut cmd: Vec<String> = COMMAND.iter().map(|s| s.to_string()).collect();
    if let Kind::Warm { max_idle } = kind {
        let wait = (max_idle + WARM_SELF_EXIT_SLACK).as_secs().to_string();
        cmd.splice(4..4, ["--warm".to_string(), "--max-idle".to_string(), wait]);
    }
    cmd
}

/// The size of `/work`: the upload and some slack when cold, the memory limit when warm.
pub fn work_bytes(config: &SandboxConfig, kind: Kind) -> u64 {
    match kind {
        Kind::Cold { upload_bytes } => upload_bytes.saturating_add(WORK_SLACK_BYTES),
        Kind::Warm { .. } => config.limits.memory_bytes,
    }
}

fn tmpfs_mounts(config: &SandboxConfig, work_bytes: u64) -> HashMap<String, String> {
    let limits = &config.limits;
    // Inodes bound the file count in the kernel, well above the copy-out cap so that the cap,
    // not ENOSPC, is what a script that writes too many files meets.
    let inodes = limits.output_max_files.saturating_mul(4).max(1024);
    HashMap::from([
        (
            "/tmp".to_string(),
            format!("rw,nosuid,nodev,noexec,size={},mode=1777", limits.tmp_bytes),
        ),
        (
            "/work".to_string(),
            format!("rw,nosuid,nodev,noexec,size={work_bytes},uid=10001,gid=10001,mode=0755"),
        ),
        (
            "/work/out".to_string(),
            format!(
                "rw,nosuid,nodev,noexec,size={},nr_inodes={inodes},uid=10001,gid=10001,mode=0700",
                limits.output_max_bytes
            ),
        ),
    ])
}

/// Compares what Docker applied with what [`container_spec`] asked for. Any difference is a
/// [`SandboxError::PolicyMismatch`] and the caller must not start the container.
pub fn verify(
    wanted: &ContainerCreateBody,
    applied: &ContainerInspectResponse,
) -> Result<(), SandboxError> {
    verify_host_config(
        wanted.host_config.clone().unwrap_or_default(),
        applied.host_config.clone().unwrap_or_default(),
    )?;
    let config = applied.config.clone().unwrap_or_default();
    check("User", &wanted.user, &config.user)?;
    check("Image", &wanted.image, &config.image)?;
    check("Cmd", &wanted.cmd, &config.cmd)?;
    only_image_variables(config.env.unwrap_or_default())?;
    let mounts: Vec<_> = applied
        .mounts
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.typ, m.destination))
        .collect();
    check("Mounts", &Vec::new(), &mounts)?;
    Ok(())
}

/// The lock-down and the limits Docker applied (`got`) against those asked for (`want`).
fn verify_host_config(want: HostConfig, got: HostConfig) -> Result<(), SandboxError> {
    verify_lockdown(&got)?;
    check("PidsLimit", &want.pids_limit, &got.pids_limit)?;
    check("Memory", &want.memory, &got.memory)?;
    check("MemorySwap", &want.memory_swap, &got.memory_swap)?;
    check("NanoCpus", &want.nano_cpus, &got.nano_cpus)?;
    check("Tmpfs", &want.tmpfs, &got.tmpfs)?;
    check("IpcMode", &want.ipc_mode, &got.ipc_mode)?;
    check(
        "Binds",
        &Vec::<String>::new(),
        &got.binds.unwrap_or_default(),
    )?;
    check(
        "LogConfig.Type",
        &Some("none".to_string()),
        &got.log_config.and_then(|c| c.typ),
    )?;
    if want.runtime.is_some() {
        check("Runtime", &want.runtime, &got.runtime)?;
    }
    check(
        "Ulimits",
        &sorted_ulimits(want.ulimits),
        &sorted_ulimits(got.ulimits),
    )
}

/// The settings that are never configurable: no network, a read-only root, no privilege, every
/// capability dropped and none added, `no-new-privileges`.
fn verify_lockdown(got: &HostConfig) -> Result<(), SandboxError> {
    check("NetworkMode", &Some("none".to_string()), &got.network_mode)?;
    check("ReadonlyRootfs", &Some(true), &got.readonly_rootfs)?;
    check("Privileged", &Some(false), &got.privileged.or(Some(false)))?;
    check("CapDrop", &Some(vec!["ALL".to_string()]), &got.cap_drop)?;
    check(
        "CapAdd",
        &Vec::<String>::new(),
        &got.cap_add.clone().unwrap_or_default(),
    )?;
    let no_new_privileges = got
        .security_opt
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|opt| opt == "no-new-privileges" || opt == "no-new-privileges:true");
    check("SecurityOpt no-new-privileges", &true, &no_new_privileges)
}

/// Rlimits as sorted (name, soft, hard), to compare whatever order Docker lists them in.
fn sorted_ulimits(
    ulimits: Option<Vec<ResourcesUlimits>>,
) -> Vec<(Option<String>, Option<i64>, Option<i64>)> {
    let mut sorted: Vec<_> = ulimits
        .unwrap_or_default()
        .into_iter()
        .map(|u| (u.name, u.soft, u.hard))
        .collect();
    sorted.sort();
    sorted
}

/// Refuses any variable in the container's environment but the image's own.
fn only_image_variables(env: Vec<String>) -> Result<(), SandboxError> {
    for variable in env {
        let name = variable.split('=').next().unwrap_or_default();
        if !IMAGE_VARIABLES.contains(&name) {
            return Err(SandboxError::PolicyMismatch {
                field: "Env",
                wanted: format!("only the image's {}", IMAGE_VARIABLES.join(", ")),
                applied: format!("a variable named {name:?}"),
            });
        }
    }
    Ok(())
}

fn check<T: PartialEq + std::fmt::Debug>(
    field: &'static str,
    wanted: &T,
    applied: &T,
) -> Result<(), SandboxError> {
    if wanted == applied {
        Ok(())
    } else {
        Err(SandboxError::PolicyMismatch {
            field,
            wanted: format!("{wanted:?}"),
            applied: format!("{applied:?}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limits;
    use bollard::models::ContainerConfig;

    fn config() -> SandboxConfig {
        SandboxConfig {
            image: "file-agent-sandbox:test".to_string(),
            runtime: None,
            limits: Limits::default(),
            instance: None,
            warm: None,
            warm_max_idle: std::time::Duration::from_secs(300),
            backend: crate::config::Backend::Docker,
            extra_packages: None,
        }
    }

    fn spec() -> ContainerCreateBody {
        container_spec(&config(), "instance-1", Kind::Cold { upload_bytes: 4096 })
    }

    /// What a faithful engine reports back for `spec()`.
    fn applied(spec: &ContainerCreateBody) -> ContainerInspectResponse {
        ContainerInspectResponse {
            host_config: spec.host_config.clone(),
            config: Some(ContainerConfig {
                user: spec.user.clone(),
                image: spec.image.clone(),
                cmd: spec.cmd.clone(),
                env: Some(vec![
                    "PATH=/usr/bin:/bin".to_string(),
                    "MPLBACKEND=Agg".to_string(),
                ]),
                ..Default::default()
            }),
            mounts: Some(Vec::new()),
            ..Default::default()
        }
    }

    #[test]
    fn the_spec_locks_the_container_down() {
        let spec = spec();
        let host = spec.host_config.clone().unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.privileged, Some(false));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(host.cap_add, None);
        assert_eq!(
            host.security_opt,
            Some(vec!["no-new-privileges".to_string()])
        );
        assert_eq!(host.pids_limit, Some(128));
        assert_eq!(host.memory, Some(1 << 30));
        assert_eq!(host.memory_swap, host.memory, "no swap beyond memory");
        assert_eq!(host.nano_cpus, Some(1_000_000_000));
        assert_eq!(host.binds, None);
        assert_eq!(host.log_config.unwrap().typ.as_deref(), Some("none"));
        let tmpfs = host.tmpfs.unwrap();
        assert!(tmpfs["/tmp"].contains("size=67108864"), "{tmpfs:?}");
        assert!(tmpfs["/work/out"].contains("uid=10001"), "{tmpfs:?}");
        assert!(tmpfs["/work/out"].contains("size=268435456"), "{tmpfs:?}");
        assert!(tmpfs["/work"].contains(&format!("size={}", 4096 + WORK_SLACK_BYTES)));
        assert!(
            tmpfs
                .values()
                .all(|o| o.contains("noexec") && o.contains("nosuid"))
        );
        let ulimits = host.ulimits.unwrap();
        assert!(
            ulimits
                .iter()
                .any(|u| u.name.as_deref() == Some("nofile") && u.hard == Some(1024))
        );
        assert!(
            ulimits
                .iter()
                .any(|u| u.name.as_deref() == Some("fsize") && u.hard == Some(256 << 20))
        );
        assert_eq!(spec.user.as_deref(), Some("10001:10001"));
        assert_eq!(
            spec.env,
            Some(Vec::new()),
            "nothing of the attempt in the environment"
        );
        assert_eq!(spec.cmd.as_deref().unwrap(), COMMAND.map(String::from));
        let labels = spec.labels.unwrap();
        assert_eq!(labels[MANAGED_LABEL], "true");
        assert_eq!(labels[INSTANCE_LABEL], "instance-1");
        assert!(!labels.contains_key(WARM_LABEL));
    }

    #[test]
    fn a_warm_container_differs_only_in_its_runner_arguments_work_size_and_label() {
        let config = config();
        let max_idle = std::time::Duration::from_secs(300);
        let warm = container_spec(&config, "instance-1", Kind::Warm { max_idle });
        let cold = spec();
        assert_eq!(
            warm.cmd.as_deref().unwrap(),
            [
                "python3",
                "-I",
                "-B",
                "/opt/file-agent/runner.py",
                "--warm",
                "--max-idle",
                "360",
                SCRIPT_PATH
            ]
        );
        assert_eq!(warm.labels.as_ref().unwrap()[WARM_LABEL], "true");
        let (mut warm_host, mut cold_host) = (warm.host_config.unwrap(), cold.host_config.unwrap());
        let (mut warm_tmpfs, mut cold_tmpfs) = (
            warm_host.tmpfs.take().unwrap(),
            cold_host.tmpfs.take().unwrap(),
        );
        let work = warm_tmpfs.remove("/work").unwrap();
        assert!(work.contains(&format!("size={}", 1u64 << 30)), "{work}");
        cold_tmpfs.remove("/work");
        assert_eq!(warm_tmpfs, cold_tmpfs);
        assert_eq!(format!("{warm_host:?}"), format!("{cold_host:?}"));
        assert_eq!(warm.env, cold.env);
        assert_eq!(warm.user, cold.user);
    }

    #[test]
    fn the_runtime_is_passed_when_configured() {
        let mut config = config();
        config.runtime = Some("runsc".to_string());
        let spec = container_spec(&config, "i", Kind::Cold { upload_bytes: 0 });
        assert_eq!(spec.host_config.unwrap().runtime.as_deref(), Some("runsc"));
    }

    #[test]
    fn verify_accepts_what_was_asked_for() {
        let spec = spec();
        verify(&spec, &applied(&spec)).unwrap();
    }

    #[test]
    fn verify_refuses_every_weakened_setting() {
        let spec = spec();
        type Weaken = fn(&mut ContainerInspectResponse);
        let cases: Vec<(&str, Weaken)> = vec![
            ("NetworkMode", |a| {
                a.host_config.as_mut().unwrap().network_mode = Some("bridge".into())
            }),
            ("ReadonlyRootfs", |a| {
                a.host_config.as_mut().unwrap().readonly_rootfs = Some(false)
            }),
            ("Privileged", |a| {
                a.host_config.as_mut().unwrap().privileged = Some(true)
            }),
            ("CapAdd", |a| {
                a.host_config.as_mut().unwrap().cap_add = Some(vec!["SYS_ADMIN".into()])
            }),
            ("MemorySwap", |a| {
                a.host_config.as_mut().unwrap().memory_swap = Some(-1)
            }),
            ("PidsLimit", |a| {
                a.host_config.as_mut().unwrap().pids_limit = None
            }),
            ("SecurityOpt no-new-privileges", |a| {
                a.host_config.as_mut().unwrap().security_opt = Some(vec![])
            }),
            ("Binds", |a| {
                a.host_config.as_mut().unwrap().binds = Some(vec!["/:/host".into()])
            }),
            ("Env", |a| {
                a.config
                    .as_mut()
                    .unwrap()
                    .env
                    .as_mut()
                    .unwrap()
                    .push("OPENAI_API_KEY=sk-test".into())
            }),
            ("User", |a| {
                a.config.as_mut().unwrap().user = Some("0".into())
            }),
            ("Cmd", |a| {
                a.config.as_mut().unwrap().cmd = Some(vec!["sh".into()])
            }),
            ("Mounts", |a| {
                a.mounts = Some(vec![bollard::models::MountPoint {
                    typ: Some("bind".to_string()),
                    destination: Some("/host".to_string()),
                    ..Default::default()
                }])
            }),
        ];
        for (field, weaken) in cases {
            let mut applied = applied(&spec);
            weaken(&mut applied);
            match verify(&spec, &applied) {
                Err(SandboxError::PolicyMismatch { field: got, .. }) => {
                    assert_eq!(got, field)
                }
                other => panic!("{field}: expected a refusal, got {other:?}"),
            }
        }
    }
}
