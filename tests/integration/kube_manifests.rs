//! The manifests of `deploy/kubernetes/`: every document parses into its `k8s-openapi` type
//! and serialises back to the same JSON (a field the types drop is a typo a cluster would
//! ignore or refuse), and `kubectl kustomize` (kubectl 1.32, installed here) renders them.

use std::path::Path;

use serde_json::Value;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes");

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
        "Role" => through::<rbac::v1::Role>(document),
        "RoleBinding" => through::<rbac::v1::RoleBinding>(document),
        "RuntimeClass" => through::<node::v1::RuntimeClass>(document),
        "NetworkPolicy" => through::<networking::v1::NetworkPolicy>(document),
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
    for entry in std::fs::read_dir(DEPLOY).unwrap() {
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
            "Namespace",
            "Namespace",
            "NetworkPolicy",
            "PersistentVolumeClaim",
            "PodDisruptionBudget",
            "Role",
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

#[test]
fn a_typo_is_caught() {
    let document: Value = serde_json::json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "x"},
        "spec": {"podSelector": {}, "policyType": ["Ingress", "Egress"]}
    });
    assert_ne!(round_trip(&document), document);
}

#[test]
fn kubectl_kustomize_renders_the_folder() {
    let output = std::process::Command::new("kubectl")
        .args(["kustomize", DEPLOY])
        .output()
        .expect("kubectl 1.32 is installed on these machines");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered = String::from_utf8_lossy(&output.stdout);
    assert_eq!(rendered.matches("\nkind: ").count(), 11, "{rendered}");
    assert!(rendered.contains("pod-security.kubernetes.io/enforce: restricted"));
}
