//! Which backend runs the attempts (`SANDBOX_BACKEND`), and the Kubernetes backend's own
//! settings: the namespace of the sandbox pods (`SANDBOX_NAMESPACE`) and the server's own pod
//! (`POD_NAME`, `POD_UID`, `POD_NAMESPACE` from the downward API), which owns them; the
//! network canary (`SANDBOX_CANARY_INTERVAL`, `SANDBOX_CANARY_ADDRESSES`); the data folder's
//! claim that `doctor` checks (`FILE_AGENT_DATA_CLAIM`). Parsed with no I/O like the rest of
//! [`super`]; the cluster itself is reached only by `sandbox`.

use super::{ConfigError, Vars};

/// `SANDBOX_NAMESPACE`: where the sandbox pods go.
pub const DEFAULT_NAMESPACE: &str = "file-agent-sandbox";
/// `SANDBOX_POD_START_TIMEOUT`: seconds a new pod may take to run (scheduling, pulling the
/// image) before it is given up.
pub const DEFAULT_POD_START_TIMEOUT_SECS: u64 = 180;
/// `SANDBOX_API_OUTAGE_MAX`: seconds an attempt (or a warm pod's wait) rides out an API server
/// that cannot be reached or answers 5xx, before it fails saying so.
pub const DEFAULT_API_OUTAGE_MAX_SECS: u64 = 60;

/// `FILE_AGENT_DATA_CLAIM`: the claim of the data folder in `deploy/kubernetes/pvc.yaml`.
pub const DEFAULT_DATA_CLAIM: &str = "file-agent-data";
/// The server's namespace in `deploy/kubernetes/`, where the claim is when `POD_NAMESPACE`
/// does not say.
pub const DEFAULT_SERVER_NAMESPACE: &str = "file-agent";
/// `SANDBOX_CANARY_INTERVAL` (seconds): how often a canary pod proves the sandbox pods have no
/// network (and once at start-up).
pub const DEFAULT_CANARY_INTERVAL_SECS: u64 = 300;
/// `SANDBOX_CANARY_ADDRESSES`: the public addresses the canary tries, beside the API server's.
pub const DEFAULT_CANARY_ADDRESSES: &str = "1.1.1.1:443,8.8.8.8:53";

/// What runs the attempts.
// Parsed once at start-up and read in place: boxing the Kubernetes settings would only add a
// dereference at every match.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Backend {
    /// One container per attempt on a Docker engine (`DOCKER_HOST` or the local socket).
    #[default]
    Docker,
    /// One pod per attempt through the Kubernetes API (in-cluster settings or `KUBECONFIG`).
    Kubernetes(KubernetesConfig),
}

impl Backend {
    /// `docker` or `kubernetes`, as `SANDBOX_BACKEND` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Kubernetes(_) => "kubernetes",
        }
    }
}

/// The Kubernetes backend's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesConfig {
    /// The namespace the sandbox pods are created in.
    pub namespace: String,
    /// The server's own pod, when it runs in one: the owner of its sandbox pods.
    pub owner: Option<OwnerPod>,
    /// `KUBECONFIG`: a kubeconfig file; unset means the in-cluster settings (or
    /// `~/.kube/config`).
    pub kubeconfig: Option<std::path::PathBuf>,
    /// `SANDBOX_CANARY_INTERVAL`: how often the network canary runs; `None` (`0`) is off.
    pub canary_interval: Option<std::time::Duration>,
    /// `SANDBOX_CANARY_ADDRESSES`: `host:port`s the canary must not reach, beside the API
    /// server's own address (always tried).
    pub canary_addresses: Vec<String>,
    /// `FILE_AGENT_DATA_CLAIM`: (namespace, name) of the data folder's PersistentVolumeClaim,
    /// which `doctor` reads; `None` (`off`) when the data folder is no claim.
    pub data_claim: Option<(String, String)>,
    /// `SANDBOX_API_OUTAGE_MAX`: how long the API server may stay unreachable (refused
    /// connections, reset streams, 5xx) while a pod is waited for before the wait fails.
    pub api_outage_max: std::time::Duration,
    /// `SANDBOX_POD_START_TIMEOUT`: how long a new pod may stay Pending (scheduling, the
    /// image pull); also counted in its `activeDeadlineSeconds`.
    pub pod_start_timeout: std::time::Duration,
}

/// The server's own pod, from the downward API.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerPod {
    /// `POD_NAME`.
    pub name: String,
    /// `POD_UID`.
    pub uid: String,
    /// `POD_NAMESPACE`; unset means the client's default namespace (in a cluster, the
    /// server's own).
    pub namespace: Option<String>,
}

impl Backend {
    pub(crate) fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        let backend = vars.get("SANDBOX_BACKEND");
        match backend.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(Self::Docker),
            Some(v) if v == "docker" => Ok(Self::Docker),
            Some(v) if v == "kubernetes" => {
                Ok(Self::Kubernetes(KubernetesConfig::from_vars(vars)?))
            }
            Some(_) => Err(ConfigError {
                var: "SANDBOX_BACKEND",
                value: backend.unwrap_or_default(),
                expected: "docker or kubernetes".into(),
            }),
        }
    }
}

impl KubernetesConfig {
    fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        let namespace =
            dns_label(vars, "SANDBOX_NAMESPACE")?.unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let owner = OwnerPod::from_vars(vars)?;
        let server_namespace = owner
            .as_ref()
            .and_then(|owner| owner.namespace.clone())
            .unwrap_or_else(|| DEFAULT_SERVER_NAMESPACE.to_string());
        let interval = vars.seconds(
            "SANDBOX_CANARY_INTERVAL",
            DEFAULT_CANARY_INTERVAL_SECS,
            0..=86_400,
        )?;
        Ok(Self {
            namespace,
            owner,
            kubeconfig: vars.get("KUBECONFIG").map(std::path::PathBuf::from),
            canary_interval: (!interval.is_zero()).then_some(interval),
            canary_addresses: canary_addresses(vars)?,
            data_claim: data_claim(vars, server_namespace)?,
            api_outage_max: vars.seconds(
                "SANDBOX_API_OUTAGE_MAX",
                DEFAULT_API_OUTAGE_MAX_SECS,
                1..=3600,
            )?,
            pod_start_timeout: vars.seconds(
                "SANDBOX_POD_START_TIMEOUT",
                DEFAULT_POD_START_TIMEOUT_SECS,
                1..=3600,
            )?,
        })
    }
}

impl OwnerPod {
    /// `POD_NAME`, `POD_UID` and `POD_NAMESPACE` from the downward API: the pod this server
    /// runs in, when it runs in one; the first two come together or not at all.
    fn from_vars(vars: &Vars<'_>) -> Result<Option<Self>, ConfigError> {
        let name = vars.get("POD_NAME").map(|v| v.trim().to_string());
        let uid = vars.get("POD_UID").map(|v| v.trim().to_string());
        Ok(match (name, uid) {
            (None, None) => None,
            (Some(name), Some(uid)) => Some(OwnerPod {
                name,
                uid,
                namespace: dns_label(vars, "POD_NAMESPACE")?,
            }),
            (name, _) => {
                let (var, value) = if name.is_none() {
                    ("POD_NAME", String::new())
                } else {
                    ("POD_UID", String::new())
                };
                return Err(ConfigError {
                var,
                value,
                expected: "POD_NAME and POD_UID set together, from the downward API (metadata.name, metadata.uid): see deploy/kubernetes/deployment.yaml".into(),
            });
            }
        })
    }
}

/// `SANDBOX_CANARY_ADDRESSES`: a comma-separated list of `host:port` (`[v6]:port`), or `none`.
fn canary_addresses(vars: &Vars<'_>) -> Result<Vec<String>, ConfigError> {
    let value = vars
        .get("SANDBOX_CANARY_ADDRESSES")
        .unwrap_or_else(|| DEFAULT_CANARY_ADDRESSES.to_string());
    if value.trim().eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut addresses = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let port = item.rsplit_once(':').and_then(|(host, port)| {
            (!host.is_empty() && !host.contains(char::is_whitespace))
                .then(|| port.parse::<u16>().ok())
                .flatten()
        });
        if port.is_none_or(|port| port == 0) {
            return Err(ConfigError {
                var: "SANDBOX_CANARY_ADDRESSES",
                value,
                expected: "host:port items separated by commas (e.g. 1.1.1.1:443), or none".into(),
            });
        }
        addresses.push(item.to_string());
    }
    Ok(addresses)
}

/// `FILE_AGENT_DATA_CLAIM`: `NAMESPACE/NAME`, `NAME` (in the server's namespace) or `off`.
fn data_claim(
    vars: &Vars<'_>,
    server_namespace: String,
) -> Result<Option<(String, String)>, ConfigError> {
    let Some(value) = vars.get("FILE_AGENT_DATA_CLAIM") else {
        return Ok(Some((server_namespace, DEFAULT_DATA_CLAIM.to_string())));
    };
    let value = value.trim().to_string();
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let (namespace, name) = match value.split_once('/') {
        Some((namespace, name)) => (namespace.to_string(), name.to_string()),
        None => (server_namespace, value.clone()),
    };
    let valid = |part: &str| {
        !part.is_empty()
            && part.len() <= 253
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    };
    if !valid(&namespace) || !valid(&name) {
        return Err(ConfigError {
            var: "FILE_AGENT_DATA_CLAIM",
            value,
            expected: "a PersistentVolumeClaim as NAMESPACE/NAME or NAME, or off".into(),
        });
    }
    Ok(Some((namespace, name)))
}

/// A Kubernetes namespace name: a DNS label (lower-case letters, digits and `-`, at most 63).
fn dns_label(vars: &Vars<'_>, var: &'static str) -> Result<Option<String>, ConfigError> {
    match vars.get(var).map(|v| v.trim().to_string()) {
        Some(name)
            if name.len() > 63
                || name.starts_with('-')
                || name.ends_with('-')
                || !name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') =>
        {
            Err(ConfigError {
                var,
                value: name,
                expected: "a namespace name: up to 63 lower-case letters, digits or '-'".into(),
            })
        }
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn backend(vars: &[(&str, &str)]) -> Result<Backend, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = |name: &str| map.get(name).cloned();
        Backend::from_vars(&Vars::new(&lookup))
    }

    #[test]
    fn docker_is_the_default_and_kubernetes_reads_its_namespace_and_owner() {
        assert_eq!(backend(&[]).unwrap(), Backend::Docker);
        assert_eq!(
            backend(&[("SANDBOX_BACKEND", "kubernetes")]).unwrap(),
            Backend::Kubernetes(KubernetesConfig {
                namespace: DEFAULT_NAMESPACE.into(),
                owner: None,
                kubeconfig: None,
                canary_interval: Some(std::time::Duration::from_secs(300)),
                canary_addresses: vec!["1.1.1.1:443".into(), "8.8.8.8:53".into()],
                data_claim: Some(("file-agent".into(), "file-agent-data".into())),
                api_outage_max: std::time::Duration::from_secs(DEFAULT_API_OUTAGE_MAX_SECS),
                pod_start_timeout: std::time::Duration::from_secs(DEFAULT_POD_START_TIMEOUT_SECS),
            })
        );
        let Backend::Kubernetes(config) = backend(&[
            ("SANDBOX_BACKEND", "Kubernetes"),
            ("SANDBOX_NAMESPACE", "sandboxes"),
            ("POD_NAME", "file-agent-7d9"),
            ("POD_UID", "0b7c"),
        ])
        .unwrap() else {
            panic!("not kubernetes")
        };
        assert_eq!(config.namespace, "sandboxes");
        assert_eq!(config.owner.unwrap().name, "file-agent-7d9");
    }

    #[test]
    fn the_canary_and_the_data_claim_are_settings() {
        let kube = ("SANDBOX_BACKEND", "kubernetes");
        let Backend::Kubernetes(config) = backend(&[
            kube,
            ("SANDBOX_CANARY_INTERVAL", "0"),
            ("SANDBOX_CANARY_ADDRESSES", "none"),
            ("FILE_AGENT_DATA_CLAIM", "off"),
        ])
        .unwrap() else {
            panic!("not kubernetes")
        };
        assert_eq!(config.canary_interval, None);
        assert!(config.canary_addresses.is_empty());
        assert_eq!(config.data_claim, None);
        let Backend::Kubernetes(config) = backend(&[
            kube,
            (
                "SANDBOX_CANARY_ADDRESSES",
                "172.17.0.1:8080, [2606:4700::1111]:443",
            ),
            ("POD_NAME", "p"),
            ("POD_UID", "u"),
            ("POD_NAMESPACE", "tools"),
        ])
        .unwrap() else {
            panic!("not kubernetes")
        };
        assert_eq!(
            config.canary_addresses,
            ["172.17.0.1:8080", "[2606:4700::1111]:443"]
        );
        assert_eq!(
            config.data_claim,
            Some(("tools".into(), "file-agent-data".into()))
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        assert_eq!(
            backend(&[("SANDBOX_BACKEND", "podman")]).unwrap_err().var,
            "SANDBOX_BACKEND"
        );
        let kube = ("SANDBOX_BACKEND", "kubernetes");
        assert_eq!(
            backend(&[kube, ("SANDBOX_NAMESPACE", "Not_A_Name")])
                .unwrap_err()
                .var,
            "SANDBOX_NAMESPACE"
        );
        for (var, value) in [
            ("SANDBOX_CANARY_ADDRESSES", "1.1.1.1"),
            ("SANDBOX_CANARY_ADDRESSES", "1.1.1.1:0"),
            ("SANDBOX_CANARY_INTERVAL", "soon"),
            ("FILE_AGENT_DATA_CLAIM", "Data_Claim"),
        ] {
            assert_eq!(backend(&[kube, (var, value)]).unwrap_err().var, var);
        }
        let error = backend(&[kube, ("POD_NAME", "x")]).unwrap_err();
        assert_eq!(error.var, "POD_UID");
        assert!(error.expected.contains("downward API"), "{error}");
        assert_eq!(
            backend(&[kube, ("SANDBOX_API_OUTAGE_MAX", "0")])
                .unwrap_err()
                .var,
            "SANDBOX_API_OUTAGE_MAX"
        );
        assert_eq!(
            backend(&[kube, ("SANDBOX_POD_START_TIMEOUT", "soon")])
                .unwrap_err()
                .var,
            "SANDBOX_POD_START_TIMEOUT"
        );
    }
}
