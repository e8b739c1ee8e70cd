//! The manifests of `deploy/kubernetes/` and its overlay `deploy/kubernetes-shared-storage/`:
//! every document parses into its `k8s-openapi` type and serialises back to the same JSON (a
//! field the types drop is a typo a cluster would ignore or refuse), `kubectl kustomize`
//! (kubectl 1.32, installed here) renders both, the sandbox namespace's ResourceQuota is sized
//! to the Deployment's capacity settings in each, and the storage is what each says: one
//! replica on ReadWriteOnce (the default class of every cloud), or replicas on ReadWriteMany.
//! Offline only: no API server checks that a class offering the mode exists.

use std::path::Path;

use serde_json::Value;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes");
const SHARED_STORAGE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/kubernetes-shared-storage"
);

/// `document` through the type its `kind` names, and back.
fn round_trip(document: &Value) -> Value {
    use k8s_openapi::api::{apps, core, networking, node, policy, rbac};
    fn through<T: serde::de::DeserializeOwned + serde::Serialize>(document: &Value) -> Value {
        let typed: T =
            serde_json::from_value(document.clone()).unwrap_or_else(|e| panic!("{e}: {document}"));
        serde_json::to_value(typed).unwrap()
    }
    match document["kind"].as_str().unwrap_or_default() {
        "Namespace" => through::<core::v1::Namespace>(document),
        "ServiceAccount" => through::<core::v1::ServiceAccount>(document),
        "Service" => through::<core::v1::Service>(document),
        "PersistentVolumeClaim" => through::<core::v1::PersistentVolumeClaim>(document),
        "ResourceQuota" => through::<core::v1::ResourceQuota>(document),
        "Role" => through::<rbac::v1::Role>(document),
        "RoleBinding" => through::<rbac::v1::RoleBinding>(document),
        "RuntimeClass" => through::<node::v1::RuntimeClass>(document),
        "NetworkPolicy" => through::<networking::v1::NetworkPolicy>(document),
        "Ingress" => through::<networking::v1::Ingress>(document),
        "Deployment" => through::<apps::v1::Deployment>(document),
        "PodDisruptionBudget" => through::<policy::v1::PodDisruptionBudget>(document),
        other => panic!("no type for kind {other:?}; add it to this test"),
    }
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|document| !document.is_null())
        .collect()
}

#[test]
fn every_manifest_parses_into_its_type_and_loses_no_field() {
    let mut kinds = Vec::new();
    let files = std::fs::read_dir(DEPLOY)
        .unwrap()
        .chain(std::fs::read_dir(SHARED_STORAGE).unwrap());
    for entry in files {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".yaml") || name == "kustomization.yaml" {
            continue;
        }
        for document in documents(&path) {
            assert_eq!(
                round_trip(&document),
                document,
                "{name}: a field is not in the Kubernetes 1.32 types (a typo?)"
            );
            kinds.push(document["kind"].as_str().unwrap().to_string());
        }
    }
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "Deployment",
            "Ingress",
            "Namespace",
            "Namespace",
            "NetworkPolicy",
            "PersistentVolumeClaim",
            "PodDisruptionBudget",
            "ResourceQuota",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "RuntimeClass",
            "Service",
            "ServiceAccount"
        ]
    );
}

/// Liveness must not depend on the cluster (an API server blip would restart every replica);
/// readiness may.
#[test]
fn the_liveness_probe_asks_nothing_of_the_cluster() {
    let deployment = documents(&Path::new(DEPLOY).join("deployment.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/health");
}

/// Issue 48: the model key is optional (without it run_python and the saved tools work), so a
/// Secret without it must not keep the pod from starting; the access tokens are required.
#[test]
fn only_the_access_tokens_are_required_of_the_secret() {
    let deployment = documents(&Path::new(DEPLOY).join("deployment.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let optional = |name: &str| {
        let variable = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|variable| variable["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not in the deployment"));
        variable["valueFrom"]["secretKeyRef"]["optional"] == true
    };
    assert!(optional("OPENAI_API_KEY"));
    assert!(!optional("FILE_AGENT_ACCESS_TOKENS"));
}

#[test]
fn a_typo_is_caught() {
    let document: Value = serde_json::json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "x"},
        "spec": {"podSelector": {}, "policyType": ["Ingress", "Egress"]}
    });
    assert_ne!(round_trip(&document), document);
}

/// `kubectl kustomize folder`, as YAML text.
fn kustomize(folder: &str) -> String {
    let output = std::process::Command::new("kubectl")
        .args(["kustomize", folder])
        .output()
        .expect("kubectl 1.32 is installed on these machines");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The rendered documents of `folder`.
fn rendered(folder: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(&kustomize(folder))
        .unwrap()
        .into_iter()
        .filter(|document| !document.is_null())
        .collect()
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    let mut found = documents.iter().filter(|d| d["kind"] == kind);
    let first = found.next().unwrap_or_else(|| panic!("no {kind}"));
    assert!(found.next().is_none(), "one {kind}");
    first
}

#[test]
fn kubectl_kustomize_renders_the_folder() {
    let rendered = kustomize(DEPLOY);
    assert_eq!(rendered.matches("\nkind: ").count(), 13, "{rendered}");
    assert!(rendered.contains("pod-security.kubernetes.io/enforce: restricted"));
    let shared = kustomize(SHARED_STORAGE);
    assert_eq!(shared.matches("\nkind: ").count(), 14, "{shared}");
}

/// A Kubernetes quantity (`8`, `500m`, `8Gi`, `1024Mi`) as a number of units.
fn quantity(text: &str) -> f64 {
    let text = text.trim();
    for (suffix, factor) in [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("m", 0.001),
    ] {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().unwrap() * factor;
        }
    }
    text.parse().unwrap()
}

fn as_quantity(value: &Value) -> f64 {
    match value {
        Value::String(text) => quantity(text),
        other => other.as_f64().unwrap(),
    }
}

/// The quota in each rendering holds, per replica, the attempts and warm pods the Deployment
/// sets plus 2 spare (the network canary, one pod being replaced), each with the cpu and memory
/// file-agent's own pod spec gives it under the Deployment's settings; and the server has a
/// CPU limit, so nothing is guessed from the node.
#[test]
fn the_sandbox_quota_is_sized_to_the_deployments_capacity_settings() {
    use file_agent::sandbox::kubernetes::pod::pod_spec;
    use file_agent::sandbox::policy::Kind;
    const SPARE_PODS: f64 = 2.0;
    for folder in [DEPLOY, SHARED_STORAGE] {
        let documents = rendered(folder);
        let deployment = of_kind(&documents, "Deployment");
        let replicas = deployment["spec"]["replicas"].as_f64().unwrap();
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert!(
            container["resources"]["limits"]["cpu"].is_string(),
            "{folder}: the server has a CPU limit"
        );
        let env: std::collections::HashMap<String, String> = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| Some((v["name"].as_str()?.into(), v["value"].as_str()?.into())))
            .collect();
        let setting = |name: &str| -> f64 {
            env.get(name)
                .unwrap_or_else(|| panic!("{folder}: deployment.yaml sets {name}"))
                .parse()
                .unwrap()
        };
        let per_replica =
            setting("FILE_AGENT_MAX_CONCURRENT") + setting("SANDBOX_WARM") + SPARE_PODS;
        let config =
            file_agent::config::SandboxConfig::from_lookup(|name| env.get(name).cloned()).unwrap();
        let pod = pod_spec(
            &config,
            "file-agent-sandbox",
            "fa-x",
            "x",
            None,
            Kind::Cold { upload_bytes: 0 },
        );
        let pod = serde_json::to_value(pod).unwrap();
        let resources = &pod["spec"]["containers"][0]["resources"];
        let quota = of_kind(&documents, "ResourceQuota");
        assert_eq!(quota["metadata"]["namespace"], "file-agent-sandbox");
        let hard = &quota["spec"]["hard"];
        let pods = replicas * per_replica;
        assert_eq!(as_quantity(&hard["pods"]), pods, "{folder}: {hard}");
        for (key, per_pod) in [
            ("requests.cpu", &resources["requests"]["cpu"]),
            ("limits.cpu", &resources["limits"]["cpu"]),
            ("requests.memory", &resources["requests"]["memory"]),
            ("limits.memory", &resources["limits"]["memory"]),
        ] {
            assert_eq!(
                as_quantity(&hard[key]),
                pods * as_quantity(per_pod),
                "{folder}: {key} in {hard}"
            );
        }
    }
}

/// The base asks for what every default class offers (ReadWriteOnce) and so runs one replica,
/// replaced by Recreate (a rolling update would wait forever for a volume the old pod holds on
/// another node); the overlay asks for ReadWriteMany and runs several, with a disruption budget.
#[test]
fn the_base_is_one_replica_on_read_write_once_and_the_overlay_scales_on_read_write_many() {
    let base = rendered(DEPLOY);
    let claim = of_kind(&base, "PersistentVolumeClaim");
    assert_eq!(
        claim["spec"]["accessModes"],
        serde_json::json!(["ReadWriteOnce"])
    );
    let deployment = of_kind(&base, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    assert!(base.iter().all(|d| d["kind"] != "PodDisruptionBudget"));
    let shared = rendered(SHARED_STORAGE);
    let claim = of_kind(&shared, "PersistentVolumeClaim");
    assert_eq!(
        claim["spec"]["accessModes"],
        serde_json::json!(["ReadWriteMany"])
    );
    let deployment = of_kind(&shared, "Deployment");
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() > 1);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    let budget = of_kind(&shared, "PodDisruptionBudget");
    assert_eq!(budget["spec"]["minAvailable"], 1);
}
