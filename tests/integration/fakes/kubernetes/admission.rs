//! What the API server does to a pod between the request and storage, in its order: the
//! defaults (`restartPolicy`, `imagePullPolicy`, `terminationMessagePath`, requests from
//! limits, ...), the ServiceAccount admission's token volume (unless
//! `automountServiceAccountToken: false`), the default tolerations, then the tests' mutating
//! hooks (in [`super::api::create`]), validation, the RuntimeClass admission, and Pod Security
//! admission.
//!
//! Pod Security follows k8s.io/pod-security-admission (policy/check_*.go): the checks run in
//! the order of their ids (baseline first, then restricted), each failing check adds
//! `reason (detail)`, and the whole is refused as
//! `pods "x" is forbidden: violates PodSecurity "restricted:latest": reason (detail), ...`.
//! Implemented: hostNamespaces, hostPorts, privileged (baseline); allowPrivilegeEscalation,
//! capabilities_restricted, restrictedVolumes, runAsNonRoot, runAsUser, seccompProfile_restricted
//! (restricted). The namespace's `pod-security.kubernetes.io/enforce` label picks the level
//! (`baseline` or `restricted`; absent or `privileged` admits everything); the version label
//! is read only to be written back into the message.

use std::sync::Arc;

use serde_json::{Value, json};

use super::api::ApiError;
use super::resources::Resource;
use super::{Cluster, Key, random_suffix};

/// The label that picks a namespace's enforced Pod Security level.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn containers_mut(pod: &mut Value) -> impl Iterator<Item = &mut Value> {
    pod["spec"]["containers"]
        .as_array_mut()
        .into_iter()
        .flatten()
}

/// The API server's defaults and the ServiceAccount and DefaultTolerationSeconds admissions.
pub fn default_pod(pod: &mut Value) {
    if !pod["spec"].is_object() {
        pod["spec"] = json!({});
    }
    let spec = &mut pod["spec"];
    let defaults = [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("securityContext", json!({})),
        ("schedulerName", json!("default-scheduler")),
        ("serviceAccountName", json!("default")),
        ("enableServiceLinks", json!(true)),
        ("priority", json!(0)),
        ("preemptionPolicy", json!("PreemptLowerPriority")),
    ];
    for (field, value) in defaults {
        if spec[field].is_null() {
            spec[field] = value;
        }
    }
    spec["serviceAccount"] = spec["serviceAccountName"].clone();
    if spec["tolerations"].is_null() {
        spec["tolerations"] = json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ]);
    }
    let automount = spec["automountServiceAccountToken"] != false;
    let token_volume = format!("kube-api-access-{}", random_suffix());
    if automount {
        if !spec["volumes"].is_array() {
            spec["volumes"] = json!([]);
        }
        if let Some(volumes) = spec["volumes"].as_array_mut() {
            volumes.push(json!({"name": token_volume, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}));
        }
    }
    // `get_mut`, not indexing: an index would write `null` for an absent field.
    let volumes = pod["spec"].get_mut("volumes").and_then(Value::as_array_mut);
    for volume in volumes.into_iter().flatten() {
        if let Some(empty_dir) = volume.get_mut("emptyDir")
            && empty_dir.is_null()
        {
            *empty_dir = json!({});
        }
    }
    for container in containers_mut(pod) {
        let image = container["image"].as_str().unwrap_or_default().to_string();
        let tag = image.rsplit('/').next().unwrap_or_default();
        let latest = !image.contains('@') && (!tag.contains(':') || tag.ends_with(":latest"));
        let container_defaults = [
            (
                "imagePullPolicy",
                json!(if latest { "Always" } else { "IfNotPresent" }),
            ),
            ("terminationMessagePath", json!("/dev/termination-log")),
            ("terminationMessagePolicy", json!("File")),
            ("resources", json!({})),
        ];
        for (field, value) in container_defaults {
            if container[field].is_null() {
                container[field] = value;
            }
        }
        // Requests default to the limits.
        if let Some(limits) = container["resources"]["limits"].as_object().cloned() {
            if !container["resources"]["requests"].is_object() {
                container["resources"]["requests"] = json!({});
            }
            for (resource, quantity) in limits {
                if container["resources"]["requests"][&resource].is_null() {
                    container["resources"]["requests"][&resource] = quantity;
                }
            }
        }
        let ports = container.get_mut("ports").and_then(Value::as_array_mut);
        for port in ports.into_iter().flatten() {
            if port["protocol"].is_null() {
                port["protocol"] = json!("TCP");
            }
        }
        if automount {
            if !container["volumeMounts"].is_array() {
                container["volumeMounts"] = json!([]);
            }
            if let Some(mounts) = container["volumeMounts"].as_array_mut() {
                mounts
                    .push(json!({"name": token_volume, "readOnly": true, "mountPath": TOKEN_PATH}));
            }
        }
    }
}

/// Guaranteed when every container's requests equal its limits for cpu and memory,
/// BestEffort when nothing is asked, Burstable otherwise.
pub fn qos_class(pod: &Value) -> &'static str {
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let resources: Vec<&Value> = containers.iter().map(|c| &c["resources"]).collect();
    let empty = |v: &Value| v.as_object().is_none_or(|o| o.is_empty());
    if resources
        .iter()
        .all(|r| empty(&r["limits"]) && empty(&r["requests"]))
    {
        return "BestEffort";
    }
    let guaranteed = resources.iter().all(|r| {
        ["cpu", "memory"]
            .iter()
            .all(|k| !r["limits"][k].is_null() && r["limits"][k] == r["requests"][k])
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The validation this double does: containers with names and images.
pub fn validate_pod(resource: &Resource, name: &str, pod: &Value) -> Result<(), ApiError> {
    let containers = pod["spec"]["containers"].as_array();
    if containers.is_none_or(|c| c.is_empty()) {
        return Err(ApiError::invalid(
            resource,
            name,
            "spec.containers",
            "Required value",
        ));
    }
    for (index, container) in containers.into_iter().flatten().enumerate() {
        for field in ["name", "image"] {
            if container[field].as_str().is_none_or(str::is_empty) {
                return Err(ApiError::invalid(
                    resource,
                    name,
                    &format!("spec.containers[{index}].{field}"),
                    "Required value",
                ));
            }
        }
    }
    Ok(())
}

/// The RuntimeClass admission: a pod naming a RuntimeClass that does not exist is refused.
pub fn admit_runtime_class(
    cluster: &Arc<Cluster>,
    resource: &Resource,
    name: &str,
    pod: &Value,
) -> Result<(), ApiError> {
    let Some(class) = pod["spec"]["runtimeClassName"].as_str() else {
        return Ok(());
    };
    let exists =
        cluster.with_store(|store| store.get(&Key::new("runtimeclasses", "", class)).is_some());
    if exists {
        Ok(())
    } else {
        Err(ApiError::forbidden(
            resource,
            name,
            &format!("pod rejected: RuntimeClass \"{class}\" not found"),
        ))
    }
}

/// Pod Security admission for the namespace's enforced level.
pub fn admit_pod_security(
    cluster: &Arc<Cluster>,
    resource: &Resource,
    namespace: &str,
    name: &str,
    pod: &Value,
) -> Result<(), ApiError> {
    let labels = cluster.with_store(|store| {
        store
            .get(&Key::new("namespaces", "", namespace))
            .map(|n| n["metadata"]["labels"].clone())
            .unwrap_or(Value::Null)
    });
    let level = labels[ENFORCE_LABEL].as_str().unwrap_or("privileged");
    let restricted = match level {
        "restricted" => true,
        "baseline" => false,
        _ => return Ok(()),
    };
    let version = labels[ENFORCE_VERSION_LABEL].as_str().unwrap_or("latest");
    let violations = evaluate(&pod["spec"], restricted);
    if violations.is_empty() {
        return Ok(());
    }
    let detail: Vec<String> = violations
        .into_iter()
        .map(|(reason, detail)| {
            if detail.is_empty() {
                reason.to_string()
            } else {
                format!("{reason} ({detail})")
            }
        })
        .collect();
    Err(ApiError::forbidden(
        resource,
        name,
        &format!(
            "violates PodSecurity \"{level}:{version}\": {}",
            detail.join(", ")
        ),
    ))
}

fn join_quote(items: &[String]) -> String {
    if items.is_empty() {
        return String::new();
    }
    format!("\"{}\"", items.join("\", \""))
}

fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 { singular } else { plural }
}

/// `container "a"` or `containers "a", "b"`.
fn containers_named(names: &[String]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// Every failed check as (reason, detail), in the registry's order.
pub fn evaluate(spec: &Value, restricted: bool) -> Vec<(&'static str, String)> {
    let containers: Vec<&Value> = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|field| spec[*field].as_array().into_iter().flatten())
        .collect();
    let name = |c: &Value| c["name"].as_str().unwrap_or_default().to_string();
    let context = |c: &Value, field: &str| c["securityContext"][field].clone();
    let pod_context = |field: &str| spec["securityContext"][field].clone();
    let mut failed = Vec::new();

    // Baseline, sorted by id: hostNamespaces, hostPorts, privileged.
    let host: Vec<&str> = [
        ("hostNetwork", "hostNetwork=true"),
        ("hostPID", "hostPID=true"),
        ("hostIPC", "hostIPC=true"),
    ]
    .iter()
    .filter(|(field, _)| spec[*field] == true)
    .map(|(_, text)| *text)
    .collect();
    if !host.is_empty() {
        failed.push(("host namespaces", host.join(", ")));
    }
    let mut port_containers = Vec::new();
    let mut ports = std::collections::BTreeSet::new();
    for c in &containers {
        let host_ports: Vec<i64> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["hostPort"].as_i64())
            .filter(|p| *p != 0)
            .collect();
        if !host_ports.is_empty() {
            port_containers.push(name(c));
            ports.extend(host_ports.iter().map(|p| p.to_string()));
        }
    }
    if !port_containers.is_empty() {
        let ports: Vec<String> = ports.into_iter().collect();
        failed.push((
            "hostPort",
            format!(
                "{} {} {} {}",
                containers_named(&port_containers),
                pluralize("uses", "use", port_containers.len()),
                pluralize("hostPort", "hostPorts", ports.len()),
                ports.join(", ")
            ),
        ));
    }
    let privileged: Vec<String> = containers
        .iter()
        .filter(|c| context(c, "privileged") == true)
        .map(|c| name(c))
        .collect();
    if !privileged.is_empty() {
        failed.push((
            "privileged",
            format!(
                "{} must not set securityContext.privileged=true",
                containers_named(&privileged)
            ),
        ));
    }
    if !restricted {
        // Baseline's own capabilities, hostPath and seccomp checks are not implemented.
        return failed;
    }

    // Restricted, sorted by id.
    let escalating: Vec<String> = containers
        .iter()
        .filter(|c| context(c, "allowPrivilegeEscalation") != false)
        .map(|c| name(c))
        .collect();
    if !escalating.is_empty() {
        failed.push((
            "allowPrivilegeEscalation != false",
            format!(
                "{} must set securityContext.allowPrivilegeEscalation=false",
                containers_named(&escalating)
            ),
        ));
    }

    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut added = std::collections::BTreeSet::new();
    for c in &containers {
        let capabilities = context(c, "capabilities");
        if !capabilities.is_object() {
            missing_drop.push(name(c));
            continue;
        }
        let drops_all = capabilities["drop"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|d| d == "ALL");
        if !drops_all {
            missing_drop.push(name(c));
        }
        let forbidden: Vec<String> = capabilities["add"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|a| *a != "NET_BIND_SERVICE")
            .map(str::to_string)
            .collect();
        if !forbidden.is_empty() {
            adding.push(name(c));
            added.extend(forbidden);
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_named(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let added: Vec<String> = added.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&adding),
            join_quote(&added)
        ));
    }
    if !details.is_empty() {
        failed.push(("unrestricted capabilities", details.join("; ")));
    }

    const ALLOWED_VOLUMES: &[&str] = &[
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    let mut bad_volumes = Vec::new();
    let mut bad_types = std::collections::BTreeSet::new();
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let Some(fields) = volume.as_object() else {
            continue;
        };
        if ALLOWED_VOLUMES.iter().any(|t| fields.contains_key(*t)) {
            continue;
        }
        bad_volumes.push(volume["name"].as_str().unwrap_or_default().to_string());
        let kind = fields
            .keys()
            .find(|k| *k != "name")
            .cloned()
            .unwrap_or_else(|| "unknown".to_string());
        bad_types.insert(kind);
    }
    if !bad_volumes.is_empty() {
        let types: Vec<String> = bad_types.into_iter().collect();
        failed.push((
            "restricted volume types",
            format!(
                "{} {} {} {} {}",
                pluralize("volume", "volumes", bad_volumes.len()),
                join_quote(&bad_volumes),
                pluralize("uses", "use", bad_volumes.len()),
                pluralize(
                    "restricted volume type",
                    "restricted volume types",
                    types.len()
                ),
                join_quote(&types)
            ),
        ));
    }

    // runAsNonRoot
    let mut bad_setters = Vec::new();
    let pod_non_root = match pod_context("runAsNonRoot") {
        Value::Bool(false) => {
            bad_setters.push("pod".to_string());
            false
        }
        Value::Bool(true) => true,
        _ => false,
    };
    let explicit: Vec<String> = containers
        .iter()
        .filter(|c| context(c, "runAsNonRoot") == false)
        .map(|c| name(c))
        .collect();
    let implicit: Vec<String> = containers
        .iter()
        .filter(|c| context(c, "runAsNonRoot").is_null() && !pod_non_root)
        .map(|c| name(c))
        .collect();
    if !explicit.is_empty() {
        bad_setters.push(containers_named(&explicit));
    }
    if !bad_setters.is_empty() {
        failed.push((
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                bad_setters.join(" and ")
            ),
        ));
    } else if !implicit.is_empty() {
        failed.push((
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_named(&implicit)
            ),
        ));
    }

    // runAsUser
    let mut root_setters = Vec::new();
    if pod_context("runAsUser") == 0 {
        root_setters.push("pod".to_string());
    }
    let root: Vec<String> = containers
        .iter()
        .filter(|c| context(c, "runAsUser") == 0)
        .map(|c| name(c))
        .collect();
    if !root.is_empty() {
        root_setters.push(containers_named(&root));
    }
    if !root_setters.is_empty() {
        failed.push((
            "runAsUser=0",
            format!("{} must not set runAsUser=0", root_setters.join(" and ")),
        ));
    }

    // seccompProfile_restricted
    let valid = |profile: &Value| {
        matches!(
            profile["type"].as_str(),
            Some("RuntimeDefault" | "Localhost")
        )
    };
    let mut seccomp_setters = Vec::new();
    let mut bad_values = std::collections::BTreeSet::new();
    let pod_profile = pod_context("seccompProfile");
    let mut pod_set = false;
    if pod_profile.is_object() {
        if valid(&pod_profile) {
            pod_set = true;
        } else {
            seccomp_setters.push("pod".to_string());
            bad_values.insert(pod_profile["type"].as_str().unwrap_or_default().to_string());
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in &containers {
        let profile = context(c, "seccompProfile");
        if profile.is_object() {
            if !valid(&profile) {
                explicit.push(name(c));
                bad_values.insert(profile["type"].as_str().unwrap_or_default().to_string());
            }
        } else if !pod_set {
            implicit.push(name(c));
        }
    }
    if !explicit.is_empty() {
        seccomp_setters.push(containers_named(&explicit));
    }
    if !seccomp_setters.is_empty() {
        let values: Vec<String> = bad_values.into_iter().collect();
        failed.push((
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                seccomp_setters.join(" and "),
                join_quote(&values)
            ),
        ));
    } else if !implicit.is_empty() {
        failed.push((
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_named(&implicit)
            ),
        ));
    }
    failed
}
