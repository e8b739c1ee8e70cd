//! The resources the double serves and the discovery documents that describe them
//! (`APIVersions`, `APIGroupList`, `APIGroup`, `APIResourceList`), in the legacy form that
//! client-go and kube-rs fall back to when the server does not offer aggregated discovery.

use serde_json::{Value, json};

/// One served resource.
#[derive(Debug)]
pub struct Resource {
    /// Empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
    pub short_names: &'static [&'static str],
}

impl Resource {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `runtimeclasses.node.k8s.io`, as messages name a resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

const READ_WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "watch",
];

/// Everything served.
pub const RESOURCES: &[Resource] = &[
    Resource {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        verbs: &["create", "delete", "get", "list", "watch"],
        short_names: &["ns"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["po"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["pvc"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["ev"],
    },
    Resource {
        group: "node.k8s.io",
        version: "v1",
        plural: "runtimeclasses",
        singular: "runtimeclass",
        kind: "RuntimeClass",
        namespaced: false,
        verbs: READ_WRITE,
        short_names: &[],
    },
    Resource {
        group: "networking.k8s.io",
        version: "v1",
        plural: "networkpolicies",
        singular: "networkpolicy",
        kind: "NetworkPolicy",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["netpol"],
    },
    // Stored as they come, for `kubectl apply -k` of the manifests (kube_production.rs):
    // nothing acts on them (no controllers, no Deployment ever makes a pod).
    Resource {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &[],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["cm"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["sa"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["svc"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "resourcequotas",
        singular: "resourcequota",
        kind: "ResourceQuota",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["quota"],
    },
    Resource {
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["deploy"],
    },
    Resource {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "roles",
        singular: "role",
        kind: "Role",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &[],
    },
    Resource {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "rolebindings",
        singular: "rolebinding",
        kind: "RoleBinding",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &[],
    },
    Resource {
        group: "networking.k8s.io",
        version: "v1",
        plural: "ingresses",
        singular: "ingress",
        kind: "Ingress",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["ing"],
    },
    Resource {
        group: "policy",
        version: "v1",
        plural: "poddisruptionbudgets",
        singular: "poddisruptionbudget",
        kind: "PodDisruptionBudget",
        namespaced: true,
        verbs: READ_WRITE,
        short_names: &["pdb"],
    },
    Resource {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "selfsubjectaccessreviews",
        singular: "selfsubjectaccessreview",
        kind: "SelfSubjectAccessReview",
        namespaced: false,
        verbs: &["create"],
        short_names: &[],
    },
];

/// The resource `plural` of `group/version`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource of an object's `apiVersion` and `kind`.
pub fn of_kind(api_version: &str, kind: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&str> = RESOURCES
        .iter()
        .map(|r| r.group)
        .filter(|g| !g.is_empty())
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// `GET /api`.
pub fn api_versions(address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    })
}

fn group_document(group: &str) -> Value {
    let version = json!({"groupVersion": format!("{group}/v1"), "version": "v1"});
    json!({
        "name": group,
        "versions": [version.clone()],
        "preferredVersion": version,
    })
}

/// `GET /apis`.
pub fn api_group_list() -> Value {
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups().into_iter().map(group_document).collect::<Vec<_>>(),
    })
}

/// `GET /apis/{group}`, if served.
pub fn api_group(group: &str) -> Option<Value> {
    groups().contains(&group).then(|| {
        let mut document = group_document(group);
        document["kind"] = json!("APIGroup");
        document["apiVersion"] = json!("v1");
        document
    })
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`, if served.
pub fn api_resource_list(group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for resource in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut entry = json!({
            "name": resource.plural,
            "singularName": resource.singular,
            "namespaced": resource.namespaced,
            "kind": resource.kind,
            "verbs": resource.verbs,
        });
        if !resource.short_names.is_empty() {
            entry["shortNames"] = json!(resource.short_names);
        }
        if resource.plural == "pods" {
            entry["categories"] = json!(["all"]);
        }
        resources.push(entry);
        if resource.plural == "pods" {
            resources.push(
                json!({"name": "pods/attach", "singularName": "", "namespaced": true,
                "kind": "PodAttachOptions", "verbs": ["create", "get"]}),
            );
            resources.push(
                json!({"name": "pods/log", "singularName": "", "namespaced": true,
                "kind": "Pod", "verbs": ["get"]}),
            );
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// `GET /version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-kube-double",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}
