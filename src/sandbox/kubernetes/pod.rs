//! The one place that decides how a sandbox pod is locked down, the Kubernetes twin of
//! [`super::super::policy`].
//!
//! [`pod_spec`] turns a [`SandboxConfig`] into the pod to create, and [`verify`] compares the
//! pod the API server stored (after every admission plugin and webhook) with it, field by
//! field, and refuses it when anything differs, naming the field (fail closed: a mutating
//! webhook that turns on a privilege must stop attempts, not weaken them silently). The security
//! settings are not configurable; only the limits, the image and the RuntimeClass are.
//!
//! The pod: Pod Security "restricted" (non-root uid/gid 10001, read-only root, no privilege
//! escalation, every capability dropped, seccomp `RuntimeDefault`), no service-account token,
//! no service links, no host namespaces, no hostPath; `/tmp` and `/work` on
//! memory-backed `emptyDir`s with size limits (they count against the memory limit, as the
//! Docker backend's tmpfs do); limits equal to requests for cpu, memory and ephemeral storage;
//! `restartPolicy: Never` and an `activeDeadlineSeconds` over the pod's whole life (its start
//! included, [`deadline`]), so the kubelet ends it even when no server is left to; a
//! termination grace of 1 s (never 0, a force delete); the managed and instance labels; and an
//! owner reference to the server's own pod when that pod is in the same namespace (Kubernetes
//! ignores, and garbage-collects against, an owner in another namespace).
//!
//! What a pod cannot have that a Docker container has: `noexec` on its writable folders (an
//! `emptyDir` takes no mount options), the `nofile` and `fsize` rlimits, and a pids limit of its
//! own (the kubelet's `podPidsLimit` applies to every pod of the node). SECURITY.md says so.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, Pod, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

#[cfg(test)]
use super::super::policy::WORK_SLACK_BYTES;
use super::super::policy::{self, INSTANCE_LABEL, Kind, MANAGED_LABEL, WARM_LABEL};
use super::super::{COPY_OUT_GRACE, SandboxError};
use crate::config::{Backend, DEFAULT_POD_START_TIMEOUT_SECS, MIB, SandboxConfig};

/// The sandbox container's name in its pod.
pub const CONTAINER: &str = "sandbox";
/// The uid and gid the runner and the script run as.
pub const SANDBOX_UID: i64 = 10001;
/// Room in a pod's ephemeral storage beyond the largest result ([`ephemeral_storage_bytes`]):
/// the tar's headers (512 bytes for each of up to `SANDBOX_OUTPUT_MAX_FILES` entries and their
/// padding), the frames' own 21 bytes per 64 KiB, the runner's words.
const EPHEMERAL_STORAGE_SLACK: u64 = 64 * MIB;

/// Ephemeral storage of a pod: nothing is written to the node's disk but the container's log,
/// which the node keeps whether anyone attaches or not, and in which the whole result travels
/// (encrypted: `sandbox::stream`): so room for the largest result the limits allow (all outputs,
/// stdout and stderr at their caps) and [`EPHEMERAL_STORAGE_SLACK`]. Less, and the kubelet would
/// evict a pod whose outputs are within the limits.
pub fn ephemeral_storage_bytes(limits: &crate::config::Limits) -> u64 {
    limits.output_max_bytes + 2 * limits.stdio_max_bytes as u64 + EPHEMERAL_STORAGE_SLACK
}
/// Added to the pod's whole life in `activeDeadlineSeconds` (after the start timeout, the warm
/// wait, the attempt and its copy-out): the server's own round trips, a slow node.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(60);
/// Seconds between SIGTERM and SIGKILL when a pod is deleted, here and in each delete: the
/// runner keeps nothing, so it ends at once, but a grace of 0 is a force delete (the object
/// goes while the container may still run, and the scheduler counts its resources free).
pub const TERMINATION_GRACE_SECONDS: i64 = 1;

/// Who owns a sandbox pod: the server's own pod in the same namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    /// The server pod's name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

/// How long a pod of `kind` may live before the kubelet ends it. The kubelet counts from the
/// pod's `startTime`, which it sets before it pulls the image, so the whole life is covered:
/// the start (up to `SANDBOX_POD_START_TIMEOUT`: scheduling, the pull), a warm pod's wait,
/// then one attempt and its copy-out, and the margin.
pub fn deadline(config: &SandboxConfig, kind: Kind) -> Duration {
    let start = match &config.backend {
        Backend::Kubernetes(kube) => kube.pod_start_timeout,
        Backend::Docker => Duration::from_secs(DEFAULT_POD_START_TIMEOUT_SECS),
    };
    let attempt = start + config.limits.timeout + COPY_OUT_GRACE + DEADLINE_MARGIN;
    match kind {
        Kind::Cold { .. } => attempt,
        Kind::Warm { max_idle } => max_idle + policy::WARM_SELF_EXIT_SLACK + attempt,
    }
}

/// The pod to create for one attempt (or one warm pod) named `name` in `namespace`.
pub fn pod_spec(
    config: &SandboxConfig,
    namespace: &str,
    name: &str,
    instance: &str,
    owner: Option<&Owner>,
    kind: Kind,
) -> Pod {
    Pod {
        metadata: metadata(namespace, name, instance, owner, kind),
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_string()),
            active_deadline_seconds: Some(deadline(config, kind).as_secs() as i64),
            termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            host_network: Some(false),
            host_pid: Some(false),
            host_ipc: Some(false),
            share_process_namespace: Some(false),
            hostname: Some("sandbox".to_string()),
            runtime_class_name: config.runtime.clone(),
            security_context: Some(pod_security_context()),
            containers: vec![sandbox_container(config, kind)],
            volumes: Some(volumes(config, kind)),
            ..Default::default()
        }),
        status: None,
    }
}

/// The pod's security context: non-root uid and gid 10001, seccomp `RuntimeDefault`.
fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(SANDBOX_UID),
        run_as_group: Some(SANDBOX_UID),
        seccomp_profile: Some(runtime_default()),
        ..Default::default()
    }
}

/// The memory-backed `/tmp` and `/work`.
///
/// One volume for the upload and the outputs: a mount inside another is made by the runtime as
/// root and can leave `/work` unwritable for uid 10001. The output cap is the copy-out's (as
/// with Docker), the memory limit bounds both.
fn volumes(config: &SandboxConfig, kind: Kind) -> Vec<Volume> {
    vec![
        memory_volume("tmp", config.limits.tmp_bytes),
        memory_volume(
            "work",
            policy::work_bytes(config, kind).saturating_add(config.limits.output_max_bytes),
        ),
    ]
}

/// The pod's name and namespace, its labels, and its owner reference.
fn metadata(
    namespace: &str,
    name: &str,
    instance: &str,
    owner: Option<&Owner>,
    kind: Kind,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels(instance, kind)),
        owner_references: owner.map(|owner| vec![owner_reference(owner)]),
        ..Default::default()
    }
}

/// The managed and instance labels, and the warm label on a warm pod.
fn labels(instance: &str, kind: Kind) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (MANAGED_LABEL.to_string(), "true".to_string()),
        (INSTANCE_LABEL.to_string(), instance.to_string()),
    ]);
    if kind.is_warm() {
        labels.insert(WARM_LABEL.to_string(), "true".to_string());
    }
    labels
}

/// The reference to the server's own pod, which garbage-collects the sandbox pod with it but
/// neither controls it nor blocks its own deletion.
fn owner_reference(owner: &Owner) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_string(),
        kind: "Pod".to_string(),
        name: owner.name.clone(),
        uid: owner.uid.clone(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    }
}

/// The one container: the runner on stdin, no environment, limits equal to requests, the
/// restricted security context, `/tmp` and `/work` mounted.
fn sandbox_container(config: &SandboxConfig, kind: Kind) -> Container {
    let limits = &config.limits;
    let resources = BTreeMap::from([
        ("cpu".to_string(), cpu_quantity(limits.cpus)),
        ("memory".to_string(), byte_quantity(limits.memory_bytes)),
        (
            "ephemeral-storage".to_string(),
            byte_quantity(ephemeral_storage_bytes(limits)),
        ),
    ]);
    Container {
        name: CONTAINER.to_string(),
        image: Some(config.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_string()),
        command: Some(policy::runner_command(kind)),
        working_dir: Some("/work".to_string()),
        env: Some(Vec::new()),
        env_from: Some(Vec::new()),
        // The attempt arrives on stdin, which stays open while it runs: when the one
        // attached client (the server) goes, the kubelet closes it (stdinOnce) and the
        // runner stops.
        stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(false),
        resources: Some(ResourceRequirements {
            limits: Some(resources.clone()),
            requests: Some(resources),
            ..Default::default()
        }),
        security_context: Some(restricted()),
        volume_mounts: Some(vec![mount("tmp", "/tmp"), mount("work", "/work")]),
        ..Default::default()
    }
}

/// Pod Security "restricted" for the container: non-root uid and gid 10001, read-only root, no
/// privilege or its escalation, every capability dropped, seccomp `RuntimeDefault`.
fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        run_as_user: Some(SANDBOX_UID),
        run_as_group: Some(SANDBOX_UID),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: None,
        }),
        seccomp_profile: Some(runtime_default()),
        ..Default::default()
    }
}

/// A memory-backed `emptyDir` named `volume` of at most `bytes`.
fn memory_volume(volume: &str, bytes: u64) -> Volume {
    Volume {
        name: volume.to_string(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".to_string()),
            size_limit: Some(byte_quantity(bytes)),
        }),
        ..Default::default()
    }
}

/// The volume `volume` mounted at `path`.
fn mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_string(),
        mount_path: path.to_string(),
        ..Default::default()
    }
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_string(),
        localhost_profile: None,
    }
}

/// CPUs as a quantity: whole CPUs, else millicores (the API server's canonical forms).
fn cpu_quantity(cpus: f64) -> Quantity {
    let milli = (cpus * 1000.0).round() as u64;
    Quantity(if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    })
}

/// Bytes as a quantity, in MiB when whole.
fn byte_quantity(bytes: u64) -> Quantity {
    Quantity(if bytes.is_multiple_of(MIB) {
        format!("{}Mi", bytes / MIB)
    } else {
        bytes.to_string()
    })
}

/// A quantity in thousandths of its unit (`"1"` and `"1000m"` and `"1k"`/1000 compare equal;
/// `"1Gi"` and `"1024Mi"` too), or `None` when it is not one.
pub fn quantity_millis(quantity: &str) -> Option<i128> {
    let quantity = quantity.trim();
    let split = quantity
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((number * factor * 1000.0).round() as i128)
}

/// Objects in which the stored pod may not have a key the wanted one lacks: a webhook that
/// adds a capability, a privilege or a host path fails here even where the wanted pod is
/// silent. Elsewhere the API server's defaults (`dnsPolicy`, `tolerations`, ...) are allowed.
const CLOSED_OBJECTS: [&str; 6] = [
    "securityContext",
    "capabilities",
    "seccompProfile",
    "resources",
    "emptyDir",
    "volumes[]",
];

/// Compares the pod the API server stored with the one [`pod_spec`] asked for; any
/// difference is a [`SandboxError::PodMismatch`] naming the field, and the pod must not run an
/// attempt. Every field of the wanted pod must come back equal (quantities by value; a `false`
/// or an empty list may come back absent, as the API server omits them); lists must keep their
/// length (no injected container, volume, variable or mount); [`CLOSED_OBJECTS`] must gain no
/// key; and the pod may have no init or ephemeral containers.
pub fn verify(wanted: &Pod, applied: &Pod) -> Result<(), SandboxError> {
    let name = applied.metadata.name.clone().unwrap_or_default();
    let mismatch = |field: String, wanted: String, applied: String| SandboxError::PodMismatch {
        pod: name.clone(),
        field,
        wanted,
        applied,
    };
    let wanted_json = serde_json::to_value(wanted).unwrap_or(Value::Null);
    let applied_json = serde_json::to_value(applied).unwrap_or(Value::Null);
    for part in ["metadata", "spec"] {
        let applied_part = applied_json.get(part).unwrap_or(&Value::Null);
        compare(part, "", &wanted_json[part], applied_part)
            .map_err(|(field, wanted, applied)| mismatch(field, wanted, applied))?;
    }
    if let Some((field, count)) = added_containers(applied) {
        return Err(mismatch(
            field.to_string(),
            "none".to_string(),
            format!("{count} container(s)"),
        ));
    }
    Ok(())
}

/// The first kind of container the pod should not have (init or ephemeral), and how many.
fn added_containers(pod: &Pod) -> Option<(&'static str, usize)> {
    let spec = pod.spec.clone().unwrap_or_default();
    [
        (
            "spec.initContainers",
            spec.init_containers.map_or(0, |c| c.len()),
        ),
        (
            "spec.ephemeralContainers",
            spec.ephemeral_containers.map_or(0, |c| c.len()),
        ),
    ]
    .into_iter()
    .find(|(_, count)| *count > 0)
}

/// Checks that the running container's image is the one pinned in `image` (`...@sha256:...`);
/// an image reference without a digest is not checked.
pub fn verify_image(image: &str, pod: &Pod) -> Result<(), SandboxError> {
    let Some((_, digest)) = image.split_once('@') else {
        return Ok(());
    };
    let image_id = image_id(pod);
    if image_id.ends_with(digest) {
        Ok(())
    } else {
        Err(SandboxError::PodMismatch {
            pod: pod.metadata.name.clone().unwrap_or_default(),
            field: "status.containerStatuses[0].imageID".to_string(),
            wanted: format!("an image with digest {digest} (SANDBOX_IMAGE)"),
            applied: format!("{image_id:?}"),
        })
    }
}

/// The image id the kubelet reports for the sandbox container (`...@sha256:...`).
pub fn image_id(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().find(|s| s.name == CONTAINER))
        .map(|status| status.image_id.clone())
        .unwrap_or_default()
}

type Difference = (String, String, String);

/// `wanted` against `applied` at `path` (`key` is the last step's name, for
/// [`CLOSED_OBJECTS`]).
fn compare(path: &str, key: &str, wanted: &Value, applied: &Value) -> Result<(), Difference> {
    match (wanted, applied) {
        (Value::Object(want), Value::Object(got)) => compare_objects(path, key, want, got),
        (Value::Array(want), _) => compare_lists(path, key, want, applied),
        (Value::Bool(false), Value::Null) => Ok(()),
        (Value::String(want), Value::String(got)) if want == got => Ok(()),
        (Value::String(want), Value::String(got))
            if is_quantity_path(path)
                && quantity_millis(want).is_some()
                && quantity_millis(want) == quantity_millis(got) =>
        {
            Ok(())
        }
        (want, got) if want == got => Ok(()),
        _ => Err(difference(path, wanted, applied)),
    }
}

/// Every field of `want` compared with the same field of `got`; in one of [`CLOSED_OBJECTS`],
/// a field only `got` has is a difference too.
fn compare_objects(
    path: &str,
    key: &str,
    want: &serde_json::Map<String, Value>,
    got: &serde_json::Map<String, Value>,
) -> Result<(), Difference> {
    for (field, value) in want {
        let next = format!("{path}.{field}");
        compare(&next, field, value, got.get(field).unwrap_or(&Value::Null))?;
    }
    if CLOSED_OBJECTS.contains(&key)
        && let Some(extra) = got.keys().find(|field| !want.contains_key(*field))
    {
        return Err((
            format!("{path}.{extra}"),
            "absent".to_string(),
            got[extra].to_string(),
        ));
    }
    Ok(())
}

/// Two lists of the same length compared item by item (an absent list is an empty one).
fn compare_lists(path: &str, key: &str, want: &[Value], applied: &Value) -> Result<(), Difference> {
    let got: &[Value] = match applied {
        Value::Array(got) => got,
        Value::Null => &[],
        _ => return Err(difference(path, &Value::from(want), applied)),
    };
    if want.len() != got.len() {
        return Err((
            path.to_string(),
            format!("{} item(s): {}", want.len(), Value::from(want)),
            format!("{} item(s): {applied}", got.len()),
        ));
    }
    let item_key = format!("{key}[]");
    for (index, (want, got)) in want.iter().zip(got).enumerate() {
        compare(&format!("{path}[{index}]"), &item_key, want, got)?;
    }
    Ok(())
}

/// The difference at `path`: what was wanted and what was applied (`absent` for nothing).
fn difference(path: &str, wanted: &Value, applied: &Value) -> Difference {
    (
        path.to_string(),
        wanted.to_string(),
        if applied.is_null() {
            "absent".to_string()
        } else {
            applied.to_string()
        },
    )
}

fn is_quantity_path(path: &str) -> bool {
    path.contains(".resources.") || path.ends_with(".sizeLimit")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limits;

    fn config() -> SandboxConfig {
        SandboxConfig {
            image: "registry.example/file-agent-sandbox@sha256:abc".to_string(),
            runtime: Some("gvisor".to_string()),
            limits: Limits::default(),
            instance: None,
            warm: None,
            warm_max_idle: Duration::from_secs(300),
            backend: crate::config::Backend::Docker,
            extra_packages: None,
        }
    }

    fn owner() -> Owner {
        Owner {
            name: "file-agent-0".into(),
            uid: "1234".into(),
        }
    }

    fn cold() -> Pod {
        pod_spec(
            &config(),
            "file-agent-sandbox",
            "fa-1",
            "replica-a",
            Some(&owner()),
            Kind::Cold { upload_bytes: 4096 },
        )
    }

    fn json(pod: &Pod) -> Value {
        serde_json::to_value(pod).unwrap()
    }

    /// `pod` as a real API server stores it: falses and empty lists dropped, quantities in
    /// canonical form, defaults added.
    fn stored(pod: &Pod) -> Pod {
        let mut value = json(pod);
        let spec = value["spec"].as_object_mut().unwrap();
        for field in ["hostNetwork", "hostPID", "hostIPC"] {
            spec.remove(field);
        }
        spec.insert("dnsPolicy".into(), "ClusterFirst".into());
        spec.insert("serviceAccountName".into(), "default".into());
        spec.insert(
            "tolerations".into(),
            serde_json::json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]),
        );
        let container = &mut value["spec"]["containers"][0];
        let container = container.as_object_mut().unwrap();
        container.remove("env");
        container.remove("envFrom");
        container.remove("tty");
        container.insert(
            "terminationMessagePath".into(),
            "/dev/termination-log".into(),
        );
        value["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1Gi".into();
        value["metadata"]["uid"] = "u-1".into();
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_pod_is_restricted_and_single_use() {
        let pod = json(&cold());
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["enableServiceLinks"], false);
        assert_eq!(spec["hostNetwork"], false);
        assert_eq!(spec["hostPID"], false);
        assert_eq!(spec["hostIPC"], false);
        assert_eq!(spec["runtimeClassName"], "gvisor");
        assert_eq!(spec["activeDeadlineSeconds"], 180 + 90 + 60 + 60);
        assert_eq!(spec["terminationGracePeriodSeconds"], 1);
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        assert_eq!(spec["securityContext"]["runAsUser"], 10001);
        assert_eq!(spec["securityContext"]["runAsGroup"], 10001);
        assert_eq!(
            spec["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let container = &spec["containers"][0];
        let security = &container["securityContext"];
        assert_eq!(security["readOnlyRootFilesystem"], true);
        assert_eq!(security["allowPrivilegeEscalation"], false);
        assert_eq!(security["privileged"], false);
        assert_eq!(security["runAsNonRoot"], true);
        assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
        assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
        assert_eq!(container["stdin"], true);
        assert_eq!(container["stdinOnce"], true);
        assert_eq!(container["env"], serde_json::json!([]));
        let resources = &container["resources"];
        assert_eq!(resources["limits"], resources["requests"]);
        assert_eq!(resources["limits"]["cpu"], "1");
        assert_eq!(resources["limits"]["memory"], "1024Mi");
        // The largest result (256 MiB of outputs, 1 MiB each of stdout and stderr) and 64 MiB.
        assert_eq!(resources["limits"]["ephemeral-storage"], "322Mi");
        let volumes = spec["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 2);
        for volume in volumes {
            assert_eq!(volume["emptyDir"]["medium"], "Memory", "{volume}");
            assert!(volume.get("hostPath").is_none());
        }
        assert_eq!(volumes[0]["emptyDir"]["sizeLimit"], "64Mi");
        assert_eq!(
            volumes[1]["emptyDir"]["sizeLimit"],
            (4096 + WORK_SLACK_BYTES + (256 << 20)).to_string()
        );
        let mounts: Vec<&str> = container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        assert_eq!(mounts, ["/tmp", "/work"]);
        let labels = &pod["metadata"]["labels"];
        assert_eq!(labels[MANAGED_LABEL], "true");
        assert_eq!(labels[INSTANCE_LABEL], "replica-a");
        assert!(labels.get(WARM_LABEL).is_none());
        let owner = &pod["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "Pod");
        assert_eq!(owner["uid"], "1234");
    }

    #[test]
    fn a_warm_pod_waits_first_and_lives_longer() {
        let warm = pod_spec(
            &config(),
            "ns",
            "fa-2",
            "replica-a",
            None,
            Kind::Warm {
                max_idle: Duration::from_secs(300),
            },
        );
        let pod = json(&warm);
        assert_eq!(pod["metadata"]["labels"][WARM_LABEL], "true");
        assert!(pod["metadata"].get("ownerReferences").is_none());
        assert_eq!(
            pod["spec"]["activeDeadlineSeconds"],
            180 + 300 + 60 + 90 + 60 + 60
        );
        let command = pod["spec"]["containers"][0]["command"].to_string();
        assert!(command.contains("--warm"), "{command}");
    }

    #[test]
    fn what_a_faithful_api_server_stores_passes() {
        let wanted = cold();
        verify(&wanted, &stored(&wanted)).unwrap();
    }

    fn refused(edit: impl Fn(&mut Value)) -> String {
        let wanted = cold();
        let mut applied = json(&stored(&wanted));
        edit(&mut applied);
        let applied: Pod = serde_json::from_value(applied).unwrap();
        match verify(&wanted, &applied) {
            Err(SandboxError::PodMismatch { field, .. }) => field,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn any_weakening_is_refused_with_the_field_named() {
        let container = "spec.containers[0]";
        assert_eq!(
            refused(|pod| {
                pod["spec"]["containers"][0]["securityContext"]
                    .as_object_mut()
                    .unwrap()
                    .remove("readOnlyRootFilesystem");
            }),
            format!("{container}.securityContext.readOnlyRootFilesystem")
        );
        assert_eq!(
            refused(
                |pod| pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
                    serde_json::json!(["NET_RAW"])
            ),
            format!("{container}.securityContext.capabilities.add")
        );
        assert_eq!(
            refused(|pod| pod["spec"]["hostNetwork"] = true.into()),
            "spec.hostNetwork"
        );
        assert_eq!(
            refused(|pod| pod["spec"]["automountServiceAccountToken"] = true.into()),
            "spec.automountServiceAccountToken"
        );
        assert_eq!(
            refused(|pod| pod["spec"]["volumes"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"name": "host", "hostPath": {"path": "/"}}))),
            "spec.volumes"
        );
        assert_eq!(
            refused(|pod| pod["spec"]["containers"][0]["env"] =
                serde_json::json!([{"name": "OPENAI_API_KEY", "value": "sk"}])),
            format!("{container}.env")
        );
        assert_eq!(
            refused(
                |pod| pod["spec"]["containers"][0]["resources"]["limits"]["memory"] = "2Gi".into()
            ),
            format!("{container}.resources.limits.memory")
        );
        assert_eq!(
            refused(|pod| pod["spec"]["volumes"][1]["emptyDir"]
                .as_object_mut()
                .unwrap()
                .remove("medium")
                .map(|_| ())
                .unwrap()),
            "spec.volumes[1].emptyDir.medium"
        );
        assert_eq!(
            refused(|pod| pod["spec"]["initContainers"] =
                serde_json::json!([{"name": "x", "image": "busybox"}])),
            "spec.initContainers"
        );
        assert_eq!(
            refused(
                |pod| pod["spec"]["securityContext"]["seccompProfile"]["type"] =
                    "Unconfined".into()
            ),
            "spec.securityContext.seccompProfile.type"
        );
        assert_eq!(
            refused(|pod| pod["spec"]["runtimeClassName"] = "runc".into()),
            "spec.runtimeClassName"
        );
    }

    #[test]
    fn quantities_compare_by_value() {
        assert_eq!(quantity_millis("1"), quantity_millis("1000m"));
        assert_eq!(quantity_millis("1Gi"), quantity_millis("1024Mi"));
        assert_eq!(quantity_millis("1073741824"), quantity_millis("1Gi"));
        assert_eq!(quantity_millis("500m"), Some(500));
        assert_ne!(quantity_millis("1G"), quantity_millis("1Gi"));
        assert_eq!(quantity_millis("lots"), None);
        assert_eq!(cpu_quantity(0.5).0, "500m");
        assert_eq!(cpu_quantity(2.0).0, "2");
    }

    #[test]
    fn a_pinned_image_must_be_the_one_running() {
        let mut pod = cold();
        pod.status = Some(serde_json::from_value(serde_json::json!({
            "containerStatuses": [{"name": "sandbox", "image": "x", "imageID": "registry.example/file-agent-sandbox@sha256:abc", "ready": true, "restartCount": 0}]
        })).unwrap());
        verify_image(&config().image, &pod).unwrap();
        verify_image("file-agent-sandbox:tag", &pod).unwrap();
        let Err(SandboxError::PodMismatch { field, .. }) =
            verify_image("registry.example/file-agent-sandbox@sha256:def", &pod)
        else {
            panic!("a different digest must be refused")
        };
        assert!(field.contains("imageID"));
    }
}
