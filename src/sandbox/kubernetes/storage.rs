//! The data folder's PersistentVolumeClaim, as `file-agent doctor` reports it. A claim no
//! storage class can satisfy (`ReadWriteMany` where the default class offers only
//! `ReadWriteOnce`, as on GKE, EKS and AKS) stays Pending, and so does every replica that mounts
//! it, with nothing in the server's own log (it never starts): doctor, run with a kubeconfig,
//! reads the claim's phase and the events the provisioner wrote about it, and says why. It only
//! reads (`get persistentvolumeclaims`, `list events` in the server's namespace).

use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim};
use kube::api::{Api, ListParams};

use super::{Cluster, api_error};
use crate::sandbox::SandboxError;

/// What the claim's status and events say.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimCheck {
    /// `FILE_AGENT_DATA_CLAIM=off`.
    Off,
    /// Not allowed to read it.
    NotAllowed {
        /// `namespace/name`.
        claim: String,
    },
    /// No such claim.
    Missing {
        /// `namespace/name`.
        claim: String,
    },
    /// Bound to a volume.
    Bound {
        /// `namespace/name`.
        claim: String,
        /// Its access modes, its capacity and its class, in words.
        detail: String,
    },
    /// Pending (or Lost): no volume, so no pod that mounts it starts.
    Unbound {
        /// `namespace/name`.
        claim: String,
        /// `Pending` or `Lost`.
        phase: String,
        /// Its access modes and class, in words.
        detail: String,
        /// The latest event's reason and message, if any could be read.
        why: Option<String>,
        /// Whether it only waits for a pod to use it (`WaitForFirstConsumer`): not a fault.
        waits_for_consumer: bool,
    },
}

impl ClaimCheck {
    /// The doctor line: `Some(true)` ok, `Some(false)` to fix, `None` unknown; and its text.
    pub fn line(&self) -> (Option<bool>, String) {
        match self {
            ClaimCheck::Off => (
                None,
                "FILE_AGENT_DATA_CLAIM=off: the data folder's volume is not checked".into(),
            ),
            ClaimCheck::NotAllowed { claim } => (
                None,
                format!(
                    "claim {claim}: not allowed to read it (get persistentvolumeclaims, list events in its namespace)"
                ),
            ),
            ClaimCheck::Missing { claim } => (
                Some(false),
                format!(
                    "claim {claim} does not exist; apply deploy/kubernetes/pvc.yaml, or set FILE_AGENT_DATA_CLAIM to the claim of FILE_AGENT_DATA_DIR (or off)"
                ),
            ),
            ClaimCheck::Bound { claim, detail } => {
                (Some(true), format!("claim {claim} is Bound ({detail})"))
            }
            ClaimCheck::Unbound {
                claim,
                detail,
                waits_for_consumer: true,
                ..
            } => (
                None,
                format!(
                    "claim {claim} is Pending ({detail}) until a pod mounts it (the class binds on first use); if the server's pod is Pending too, see its events"
                ),
            ),
            ClaimCheck::Unbound {
                claim,
                phase,
                detail,
                why,
                ..
            } => (
                Some(false),
                format!(
                    "claim {claim} is {phase} ({detail}), so the server's pods cannot start: {}. The default class of GKE, EKS and AKS offers only ReadWriteOnce: use deploy/kubernetes (one replica, ReadWriteOnce), or name a ReadWriteMany class (EFS, Filestore, Azure Files, CephFS, NFS) in deploy/kubernetes-shared-storage",
                    why.as_deref().unwrap_or("no event says why")
                ),
            ),
        }
    }
}

impl Cluster {
    /// The data folder's claim (`FILE_AGENT_DATA_CLAIM`): its phase, and for one that is not
    /// Bound the latest event about it.
    pub(crate) async fn data_claim(&self) -> Result<ClaimCheck, SandboxError> {
        let Some((namespace, name)) = self.data_claim.clone() else {
            return Ok(ClaimCheck::Off);
        };
        let claim = format!("{namespace}/{name}");
        let claims = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &namespace);
        let found = match claims.get_opt(&name).await {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(ClaimCheck::Missing { claim }),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                return Ok(ClaimCheck::NotAllowed { claim });
            }
            Err(error) => return Err(api_error("reading the data folder's claim", error)),
        };
        let (phase, detail) = match claim_state(&found) {
            ClaimState::Bound(detail) => return Ok(ClaimCheck::Bound { claim, detail }),
            ClaimState::Unbound { phase, detail } => (phase, detail),
        };
        let (why, waits_for_consumer) = self.why_unbound(&namespace, &name).await;
        Ok(ClaimCheck::Unbound {
            claim,
            phase,
            detail,
            why,
            waits_for_consumer,
        })
    }

    /// Why claim `name` is not Bound, from the latest event about it, and whether that event
    /// says it only waits for a pod to use it; or why the events could not be read.
    async fn why_unbound(&self, namespace: &str, name: &str) -> (Option<String>, bool) {
        let events = Api::<Event>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default().fields(&format!(
                "involvedObject.kind=PersistentVolumeClaim,involvedObject.name={name}"
            )))
            .await;
        match events {
            Ok(list) => {
                let latest = list.items.into_iter().max_by_key(event_time);
                let waits = latest
                    .as_ref()
                    .is_some_and(|e| e.reason.as_deref() == Some("WaitForFirstConsumer"));
                let why = latest.map(|event| {
                    format!(
                        "{}: {}",
                        event.reason.unwrap_or_default(),
                        event.message.unwrap_or_default()
                    )
                });
                (why, waits)
            }
            Err(kube::Error::Api(status)) if status.code == 403 => (
                Some("not allowed to list its events (list events)".to_string()),
                false,
            ),
            Err(error) => (
                Some(format!("its events could not be read: {error}")),
                false,
            ),
        }
    }
}

/// A claim's phase, in words.
enum ClaimState {
    /// Bound: its access modes, capacity and class.
    Bound(String),
    /// Not bound: its phase (`Pending` when it has none), its access modes and class.
    Unbound { phase: String, detail: String },
}

/// What a claim's spec and status say: its phase, access modes, class and, once Bound, its
/// capacity.
fn claim_state(found: &PersistentVolumeClaim) -> ClaimState {
    let spec = found.spec.clone().unwrap_or_default();
    let status = found.status.clone().unwrap_or_default();
    let modes = spec.access_modes.unwrap_or_default().join(", ");
    let class = spec
        .storage_class_name
        .map_or("the default class".to_string(), |class| {
            format!("class {class}")
        });
    let phase = status.phase.unwrap_or_else(|| "Pending".into());
    if phase == "Bound" {
        let capacity = status
            .capacity
            .and_then(|capacity| capacity.get("storage").map(|q| q.0.clone()))
            .unwrap_or_default();
        return ClaimState::Bound(format!("{modes}, {capacity}, {class}"));
    }
    ClaimState::Unbound {
        phase,
        detail: format!("{modes}, {class}"),
    }
}

/// When an event happened, as text that sorts by time: its last timestamp, else its event
/// time, else when it was created.
fn event_time(event: &Event) -> String {
    event
        .last_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| event.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| {
            event
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
        })
        .unwrap_or_default()
}
