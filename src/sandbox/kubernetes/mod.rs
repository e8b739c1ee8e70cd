//! The Kubernetes backend (`SANDBOX_BACKEND=kubernetes`): one pod per attempt through the
//! Kubernetes API, the only module that talks to it. [`Cluster`] does for a pod what bollard
//! does for a container: create it from [`pod::pod_spec`], refuse it unless [`pod::verify`]
//! agrees with what the API server stored, wait for it to run, attach to its stdio over the
//! `pods/attach` WebSocket (`v5.channel.k8s.io`, falling back to v4), watch it end, delete it.
//! What happens on the streams (the runner's protocol, the copy-out, how an attempt ended) is
//! shared with the Docker backend above this module; so are the warm pool and the guards.
//!
//! The waits ride out the API server ([`Cluster::watch_pod`]): broken watches, `ERROR` events
//! and refused requests are tried again with backoff until the API server has been unreachable
//! for `SANDBOX_API_OUTAGE_MAX`. Deletes are graceful (1 s), never forced.
//!
//! The cluster also has to cut the pods off the network, which a pod spec cannot say: at
//! start-up [`Cluster::check_network_policy`] refuses to serve unless a NetworkPolicy in the
//! namespace denies all ingress and egress to the sandbox pods, and none lets anything through.

pub mod pod;
mod storage;

pub use storage::ClaimCheck;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bollard::container::LogOutput;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{
    Api, AttachParams, AttachedProcess, DeleteParams, ListParams, PostParams, WatchEvent,
    WatchParams,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::guard::{PendingRemovals, Remover};
use super::policy::{INSTANCE_LABEL, Kind, MANAGED_LABEL, WARM_LABEL};
use super::started::{Attached, InputStream, OutputStream, Started};
use super::{ContainerGuard, ReapFilter, ReapReport, SandboxError};
use crate::config::{KubernetesConfig, SandboxConfig};
use pod::Owner;

/// Bytes buffered per stream between the WebSocket and the readers.
const ATTACH_BUFFER_BYTES: usize = 256 * 1024;
/// What the runner writes on stdout once a warm pod's imports are done (as in the pool).
const READY: &[u8] = b"--file-agent-ready--\n";
/// How often a warm pod's log is read for its ready line.
const READY_POLL: Duration = Duration::from_millis(100);
/// Server-side timeout of one watch request; the watch is renewed after it.
const WATCH_SECONDS: u32 = 60;
/// How long [`Cluster::diagnose`] (`/health`, `doctor`) waits for the API server's version.
const DIAGNOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How much longer than [`WATCH_SECONDS`] a watch may stay silent before it is taken for dead.
const WATCH_SILENCE_SLACK: Duration = Duration::from_secs(15);
/// A watch that ends cleanly sooner than this after it began is renewed after
/// [`RETRY_BACKOFF_MIN`], not at once.
const WATCH_MIN_LIFE: Duration = Duration::from_secs(1);
/// The first wait after the API server failed; it doubles up to [`RETRY_BACKOFF_MAX`].
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(200);
/// The longest wait between two tries at an API server that fails.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// A connection to the API server and where the pods go.
#[derive(Clone)]
pub(crate) struct Cluster {
    client: kube::Client,
    pods: Api<Pod>,
    namespace: String,
    /// The server's own pod, when it can own the sandbox pods (same namespace).
    owner: Option<Owner>,
    /// The API server's URL as this client reaches it: the network canary's first target.
    api_server: http::Uri,
    /// The data folder's claim, (namespace, name), which `doctor` reads.
    data_claim: Option<(String, String)>,
    /// `SANDBOX_API_OUTAGE_MAX`: how long a wait rides out an unreachable API server.
    outage_max: Duration,
    /// `SANDBOX_POD_START_TIMEOUT`: how long a new pod may take to run.
    start_timeout: Duration,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("namespace", &self.namespace)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// What [`Cluster::diagnose`] found.
#[derive(Debug)]
pub struct ClusterDiagnosis {
    /// The API server's version (`v1.32.1`).
    pub version: String,
}

fn api_error(action: &'static str, error: kube::Error) -> SandboxError {
    let message = match &error {
        // The quota admission answers 403 too, but RBAC is not what to check then.
        kube::Error::Api(status)
            if status.code == 403 && status.message.contains("exceeded quota") =>
        {
            format!(
                "{} (403: the sandbox namespace's ResourceQuota is used up; wait for running attempts, or keep deploy/kubernetes/resourcequota.yaml in step with FILE_AGENT_MAX_CONCURRENT and SANDBOX_WARM per replica)",
                status.message
            )
        }
        kube::Error::Api(status) if status.code == 403 => format!(
            "{} (403 Forbidden: check the Role of file-agent's ServiceAccount in deploy/kubernetes/rbac.yaml, and the namespace's Pod Security level)",
            status.message
        ),
        kube::Error::Api(status) => {
            format!("{} ({} {})", status.message, status.code, status.reason)
        }
        other => format!(
            "{other}; check that the API server is reachable (KUBECONFIG, or the in-cluster settings)"
        ),
    };
    SandboxError::Kubernetes { action, message }
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Whether a failed request is the API server being away for a while (no connection, a
/// reset, 5xx, 429) and worth trying again, rather than a refusal (4xx) that will not change.
fn retryable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        kube::Error::UpgradeConnection(kube::client::UpgradeConnectionError::ProtocolSwitch(
            code,
        )) => code.is_server_error() || code.as_u16() == 429,
        _ => false,
    }
}

/// How one watch request ended.
enum WatchEnd {
    /// The server ended it (its timeout): renew from the last version.
    Clean,
    /// 410: the version is too old; read the pod again.
    Expired,
    /// A reset, an `ERROR` event, silence: read the pod again, after a backoff.
    Broke(String),
}

/// What reading the pod again came to, in [`Cluster::watch_pod`].
enum Reread<T> {
    /// `until` answered (`Some`), or the pod is gone (`None`): the wait is over.
    Over(Option<T>),
    /// The pod's version as read: watch from there.
    At(String),
    /// The read failed and its backoff was waited: read again.
    Again,
}

/// What following one watch request came to, in [`Cluster::watch_pod`].
enum Watched<T> {
    /// `until` answered (`Some`), or the pod was deleted (`None`): the wait is over.
    Over(Option<T>),
    /// The watch ended with no answer, and how.
    Ended(WatchEnd),
}

/// Follows the events of one watch of pod `name`, keeping `version` at the last one seen,
/// until `until` answers, the pod is deleted, or the watch ends. The server ends a watch at
/// [`WATCH_SECONDS`]; one that says nothing for longer went dead without a reset (a vanished
/// API server), and is given up.
async fn follow<T>(
    events: impl Stream<Item = Result<WatchEvent<Pod>, kube::Error>>,
    name: &str,
    outage: &mut Outage,
    until: &impl Fn(&Pod) -> Option<T>,
    version: &mut String,
) -> Watched<T> {
    let mut events = std::pin::pin!(events);
    let silent = tokio::time::Instant::now()
        + Duration::from_secs(u64::from(WATCH_SECONDS))
        + WATCH_SILENCE_SLACK;
    loop {
        let event = match tokio::time::timeout_at(silent, events.next()).await {
            Err(_) => return Watched::Ended(WatchEnd::Broke("the watch went silent".to_string())),
            Ok(None) => return Watched::Ended(WatchEnd::Clean),
            Ok(Some(Err(error))) => return Watched::Ended(WatchEnd::Broke(error.to_string())),
            Ok(Some(Ok(event))) => event,
        };
        match event {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod)
                if pod.metadata.name.as_deref() == Some(name) =>
            {
                outage.reached();
                if let Some(found) = until(&pod) {
                    return Watched::Over(Some(found));
                }
                *version = pod.metadata.resource_version.clone().unwrap_or_default();
            }
            WatchEvent::Deleted(pod) if pod.metadata.name.as_deref() == Some(name) => {
                return Watched::Over(None);
            }
            WatchEvent::Bookmark(bookmark) => {
                outage.reached();
                *version = bookmark.metadata.resource_version;
            }
            // The version is too old: start again from the pod as it is now.
            WatchEvent::Error(status) if status.code == 410 => {
                return Watched::Ended(WatchEnd::Expired);
            }
            WatchEvent::Error(status) => {
                return Watched::Ended(WatchEnd::Broke(format!(
                    "an ERROR event: {} ({})",
                    status.message, status.code
                )));
            }
            _ => {}
        }
    }
}

/// After a watch that `ended` with no answer: whether the pod must be read again before the
/// next watch. A clean end is renewed from the last version (after [`RETRY_BACKOFF_MIN`] when
/// it came sooner than [`WATCH_MIN_LIFE`]: a server that ends every watch at once is not asked
/// again at once); a broken one counts towards the outage.
async fn after_watch(
    ended: WatchEnd,
    began: Instant,
    name: &str,
    outage: &mut Outage,
) -> Result<bool, SandboxError> {
    match ended {
        WatchEnd::Clean if began.elapsed() >= WATCH_MIN_LIFE => Ok(false),
        WatchEnd::Clean => {
            tokio::time::sleep(RETRY_BACKOFF_MIN).await;
            Ok(false)
        }
        WatchEnd::Expired => Ok(true),
        WatchEnd::Broke(error) => {
            outage.failed(name, error).await?;
            Ok(true)
        }
    }
}

/// An API server failing for a while, as one wait sees it: each failure waits a doubling
/// backoff; once failures have gone on, with no answer between them, past `max`, the wait
/// gives up with [`SandboxError::ApiUnreachable`].
struct Outage {
    max: Duration,
    action: &'static str,
    /// When the failures began; `None` while the API answers.
    since: Option<Instant>,
    backoff: Duration,
}

impl Outage {
    fn new(max: Duration, action: &'static str) -> Self {
        Self {
            max,
            action,
            since: None,
            backoff: RETRY_BACKOFF_MIN,
        }
    }

    /// Runs one request for no longer than the time left before the bound (`Err`: no answer
    /// in time). The client's own retries of a 503 back off for minutes; this wait does not
    /// outlast its bound for them. A request that fails counts towards the outage from when
    /// it began.
    async fn bounded<T>(
        &mut self,
        request: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, String> {
        let began = Instant::now();
        let left = self
            .since
            .map_or(self.max, |since| self.max.saturating_sub(since.elapsed()))
            .max(RETRY_BACKOFF_MIN);
        let answer = tokio::time::timeout(left, request).await;
        if !matches!(answer, Ok(Ok(_))) {
            self.since.get_or_insert(began);
        }
        answer.map_err(|_| format!("no answer within {} ms", left.as_millis()))
    }

    /// The API server answered.
    fn reached(&mut self) {
        self.since = None;
        self.backoff = RETRY_BACKOFF_MIN;
    }

    /// The API server failed (`error`) while waiting for pod `name`: waits the backoff (never
    /// past the bound), or gives up once the failures have lasted `max`.
    async fn failed(&mut self, name: &str, error: String) -> Result<(), SandboxError> {
        let since = *self.since.get_or_insert_with(Instant::now);
        let lasted = since.elapsed();
        if lasted >= self.max {
            return Err(SandboxError::ApiUnreachable {
                action: self.action,
                after: lasted,
                last: error,
            });
        }
        tracing::warn!(pod = %name, %error, lasted_ms = lasted.as_millis() as u64, "the API server failed; trying again");
        tokio::time::sleep(self.backoff.min(self.max - lasted)).await;
        self.backoff = (self.backoff * 2).min(RETRY_BACKOFF_MAX);
        Ok(())
    }
}

/// The client's settings: from the one file `KUBECONFIG` names, or inferred (in-cluster, or
/// kube's own reading of `KUBECONFIG`, a list of files `a:b` included).
async fn client_config(config: &KubernetesConfig) -> Result<kube::Config, SandboxError> {
    match &config.kubeconfig {
        Some(path) if !path.to_string_lossy().contains(':') => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| cannot_connect(format!("KUBECONFIG={}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| cannot_connect(format!("KUBECONFIG={}: {e}", path.display())))
        }
        _ => kube::Config::infer()
            .await
            .map_err(|e| cannot_connect(e.to_string())),
    }
}

/// The API server cannot be reached, or its settings not read: `message`, and what to do.
fn cannot_connect(message: String) -> SandboxError {
    SandboxError::Kubernetes {
        action: "connecting to the API server",
        message: format!("{message}; run file-agent in the cluster, or set KUBECONFIG"),
    }
}

/// Waiting reasons after which a pod will not run without someone acting: an image it may
/// never pull, a name that is no image, a container it cannot make. A failed pull
/// (`ErrImagePull`, then `ImagePullBackOff`) is not one: the kubelet pulls again after its
/// back-off, and only a retry that fails too is taken as final ([`Cluster::wait_running`]).
fn is_fatal_waiting(reason: &str) -> bool {
    matches!(
        reason,
        "ErrImageNeverPull"
            | "InvalidImageName"
            | "CreateContainerConfigError"
            | "CreateContainerError"
    )
}

/// Why a pod's container cannot start, if one of its waiting reasons says it never will
/// ([`is_fatal_waiting`]), or its pull failed again after the kubelet's back-off (`backed_off`
/// is set on `ImagePullBackOff`, and the `ErrImagePull` after it is the retry failing too).
fn cannot_start(status: &PodStatus, backed_off: &AtomicBool, image: &str) -> Option<SandboxError> {
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|s| s.state.as_ref()?.waiting.as_ref());
    for waiting in waiting {
        let reason = waiting.reason.as_deref().unwrap_or_default();
        let retry_failed = reason == "ErrImagePull" && backed_off.load(Ordering::SeqCst);
        if reason == "ImagePullBackOff" {
            backed_off.store(true, Ordering::SeqCst);
        }
        if is_fatal_waiting(reason) || retry_failed {
            let retried = if retry_failed {
                " (and again after the kubelet's ImagePullBackOff)"
            } else {
                ""
            };
            return Some(SandboxError::Kubernetes {
                action: "starting the sandbox pod",
                message: format!(
                    "{reason}{retried}: {} (image {image}); push the sandbox image where the cluster can pull it and set SANDBOX_IMAGE",
                    waiting.message.clone().unwrap_or_default()
                ),
            });
        }
    }
    None
}

/// The error for a pod that ended (`phase`) before it ran an attempt.
fn ended_before_running(
    pod: &Pod,
    status: &PodStatus,
    phase: &str,
    namespace: &str,
) -> SandboxError {
    SandboxError::Kubernetes {
        action: "starting the sandbox pod",
        message: format!(
            "pod {} ended ({phase}: {}) before it ran an attempt; see `kubectl -n {namespace} describe pod`",
            pod.metadata.name.clone().unwrap_or_default(),
            status
                .reason
                .clone()
                .or(status.message.clone())
                .unwrap_or_default()
        ),
    }
}

/// Keeps why pod `name` is Pending in `pending` (for the start timeout's error), and logs it
/// when it changes.
fn note_pending(pod: &Pod, name: &str, pending: &std::sync::Mutex<Option<String>>) {
    let why = pending_reason(pod);
    let mut last = pending.lock().unwrap_or_else(|e| e.into_inner());
    if why.is_some() && *last != why {
        tracing::info!(pod = %name, reason = why.as_deref().unwrap_or_default(), "the sandbox pod is pending");
        *last = why;
    }
}

/// Why a pod is still Pending, in words, if its status says: not scheduled (the scheduler's
/// message: no node with room, a quota), or its container waiting for something (an image
/// being pulled again after `ErrImagePull`).
fn pending_reason(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let unscheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False");
    if let Some(condition) = unscheduled {
        return Some(format!(
            "{}: {}",
            condition
                .reason
                .clone()
                .unwrap_or_else(|| "not scheduled".into()),
            condition.message.clone().unwrap_or_default()
        ));
    }
    status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|s| s.state.as_ref()?.waiting.as_ref())
        .find(|w| w.message.is_some() || w.reason.as_deref() != Some("ContainerCreating"))
        .map(|w| {
            format!(
                "{}: {}",
                w.reason.clone().unwrap_or_default(),
                w.message.clone().unwrap_or_default()
            )
        })
}

impl Cluster {
    /// Connects with the in-cluster settings or `KUBECONFIG`, and checks the server's own pod
    /// (the owner of its sandbox pods) when `POD_NAME` and `POD_UID` say which it is.
    pub(crate) async fn connect(config: &KubernetesConfig) -> Result<Self, SandboxError> {
        let kube_config = client_config(config).await?;
        let default_namespace = kube_config.default_namespace.clone();
        let api_server = kube_config.cluster_url.clone();
        let client =
            kube::Client::try_from(kube_config).map_err(|e| cannot_connect(e.to_string()))?;
        let pods = Api::namespaced(client.clone(), &config.namespace);
        let mut cluster = Self {
            client,
            pods,
            namespace: config.namespace.clone(),
            owner: None,
            api_server,
            data_claim: config.data_claim.clone(),
            outage_max: config.api_outage_max,
            start_timeout: config.pod_start_timeout,
        };
        if let Some(owner) = &config.owner {
            let owner_namespace = owner.namespace.clone().unwrap_or(default_namespace);
            if owner_namespace != config.namespace {
                tracing::warn!(server_namespace = %owner_namespace, sandbox_namespace = %config.namespace, "the sandbox pods get no owner reference: Kubernetes only honours an owner in the same namespace. A crashed replica's pods end at their activeDeadlineSeconds and the other replicas' reaper deletes them");
            } else {
                cluster.owner = Some(cluster.check_owner(&owner.name, &owner.uid).await?);
            }
        }
        Ok(cluster)
    }

    /// Reads the server's own pod `name` and checks that its uid is `uid` (`POD_NAME` and
    /// `POD_UID`): the owner the sandbox pods will name.
    async fn check_owner(&self, name: &str, uid: &str) -> Result<Owner, SandboxError> {
        let found = self
            .pods
            .get(name)
            .await
            .map_err(|e| api_error("reading the server's own pod (POD_NAME)", e))?;
        let found_uid = found.metadata.uid.unwrap_or_default();
        if found_uid != uid {
            return Err(SandboxError::Kubernetes {
                action: "checking the server's own pod",
                message: format!(
                    "pod {name} has uid {found_uid}, but POD_UID is {uid}; set both from the downward API (metadata.name, metadata.uid)"
                ),
            });
        }
        Ok(Owner {
            name: name.to_string(),
            uid: uid.to_string(),
        })
    }

    /// The API server's addresses, `ip:port` (or its `host:port` when the name does not
    /// resolve here): what a sandbox pod must never reach.
    pub(crate) async fn api_server_addresses(&self) -> Vec<String> {
        let Some(host) = self.api_server.host() else {
            return Vec::new();
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port =
            self.api_server
                .port_u16()
                .unwrap_or(if self.api_server.scheme_str() == Some("http") {
                    80
                } else {
                    443
                });
        match tokio::net::lookup_host((host.as_str(), port)).await {
            Ok(found) => {
                let mut addresses: Vec<String> = found.map(|a| a.to_string()).collect();
                addresses.dedup();
                addresses
            }
            Err(_) if host.contains(':') => vec![format!("[{host}]:{port}")],
            Err(_) => vec![format!("{host}:{port}")],
        }
    }

    /// The namespace of the sandbox pods.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The API server's version.
    pub(crate) async fn diagnose(&self) -> Result<ClusterDiagnosis, SandboxError> {
        // Bounded: the client retries a 503 for minutes, and `/health` must answer.
        let info = tokio::time::timeout(DIAGNOSE_TIMEOUT, self.client.apiserver_version())
            .await
            .map_err(|_| SandboxError::Kubernetes {
                action: "reading the API server's version",
                message: format!(
                    "no answer within {} s; check that the API server is reachable",
                    DIAGNOSE_TIMEOUT.as_secs()
                ),
            })?
            .map_err(|e| api_error("reading the API server's version", e))?;
        Ok(ClusterDiagnosis {
            version: info.git_version,
        })
    }

    /// Refuses unless a NetworkPolicy denies all ingress and egress to the sandbox pods of
    /// `instance` (cold and warm), and no policy that may select them allows anything (policies
    /// add up: one rule anywhere undoes the deny-all).
    pub(crate) async fn check_network_policy(&self, instance: &str) -> Result<(), SandboxError> {
        let policies = Api::<NetworkPolicy>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .map_err(|e| api_error("listing the NetworkPolicies of the sandbox namespace", e))?
            .items;
        judge_network_policies(&self.namespace, instance, &policies)
    }

    /// Creates, verifies, starts and attaches one pod of `kind`; the guard owns it from the
    /// moment it exists.
    pub(crate) async fn launch(
        &self,
        config: &SandboxConfig,
        instance: &str,
        kind: Kind,
        bookkeeping: (Arc<AtomicUsize>, TaskTracker, Arc<PendingRemovals>),
        cancel: &CancellationToken,
    ) -> Result<Started, SandboxError> {
        let created_at = SystemTime::now();
        let phase = Instant::now();
        let name = format!("fa-{}", &uuid::Uuid::new_v4().simple().to_string()[..20]);
        let wanted = pod::pod_spec(
            config,
            &self.namespace,
            &name,
            instance,
            self.owner.as_ref(),
            kind,
        );
        // Not raced against `cancel`: a create abandoned in flight may still make a pod that
        // nothing owns. Once it exists the guard owns it, and a cancel deletes it.
        let created = self
            .pods
            .create(&PostParams::default(), &wanted)
            .await
            .map_err(|e| api_error("creating the sandbox pod", e))?;
        let (live, tracker, pending) = bookkeeping;
        let guard = ContainerGuard::new(
            std::sync::Arc::new(self.clone()),
            name.clone(),
            live,
            tracker,
            pending,
        );
        let result = tokio::select! {
            // Boxed: the wait and its retries make a large future, too large for a caller's
            // stack in a debug build.
            result = Box::pin(self.verify_and_attach(&wanted, created, &config.image, kind)) => result,
            () = cancel.cancelled() => Err(SandboxError::Cancelled),
        };
        Started::settle(guard, result, kind, (created_at, phase)).await
    }

    /// Verify what was stored, wait for the pod to run, verify again (with the image it runs),
    /// attach: the image id, the stdio, and how long waiting and attaching took.
    async fn verify_and_attach(
        &self,
        wanted: &Pod,
        created: Pod,
        image: &str,
        kind: Kind,
    ) -> Result<Attached, SandboxError> {
        pod::verify(wanted, &created)?;
        let name = created.metadata.name.clone().unwrap_or_default();
        let phase = Instant::now();
        let running = self.wait_running_in_time(&created, &name).await?;
        pod::verify(wanted, &running)?;
        pod::verify_image(image, &running)?;
        let attached = self.attach(&name).await?;
        let (output, stdin) = self.streams(attached, name, kind)?;
        Ok((pod::image_id(&running), output, stdin, phase.elapsed()))
    }

    /// The attach session's stdout and stderr as one [`OutputStream`] (which holds the session
    /// open), and its stdin. A warm pod's output says READY once, from its log or the attach.
    fn streams(
        &self,
        mut attached: AttachedProcess,
        name: String,
        kind: Kind,
    ) -> Result<(OutputStream, InputStream), SandboxError> {
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (attached.stdin(), attached.stdout(), attached.stderr())
        else {
            return Err(SandboxError::Kubernetes {
                action: "attaching to the sandbox pod",
                message: "the attach session lacks stdin, stdout or stderr".into(),
            });
        };
        let output = AttachedOutput {
            streams: futures_util::stream::select(
                tokio_util::io::ReaderStream::new(stdout)
                    .map(|chunk| chunk.map(|message| LogOutput::StdOut { message })),
                tokio_util::io::ReaderStream::new(stderr)
                    .map(|chunk| chunk.map(|message| LogOutput::StdErr { message })),
            )
            .map(|item| item.map_err(bollard::errors::Error::from))
            .boxed(),
            _session: attached,
        };
        let output: OutputStream = match kind {
            Kind::Cold { .. } => Box::pin(output),
            Kind::Warm { .. } => {
                let said = Arc::new(AtomicBool::new(false));
                let from_log = self.ready_from_log(name, said.clone());
                warm_output(from_log, Box::pin(output), said)
            }
        };
        Ok((output, Box::pin(stdin)))
    }

    /// [`Self::wait_running`] within `SANDBOX_POD_START_TIMEOUT`; a pod that takes longer is
    /// an error that says why it was last Pending and where to look.
    async fn wait_running_in_time(&self, created: &Pod, name: &str) -> Result<Pod, SandboxError> {
        let pending = std::sync::Mutex::new(None);
        tokio::time::timeout(self.start_timeout, self.wait_running(created, &pending))
            .await
            .map_err(|_| {
                let why = pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .map(|why| format!(", last Pending because {why}"))
                    .unwrap_or_default();
                SandboxError::Kubernetes {
                    action: "starting the sandbox pod",
                    message: format!(
                        "pod {name} did not run within {} s (SANDBOX_POD_START_TIMEOUT){why}; see `kubectl -n {} describe pod {name}` (image pull, scheduling, quota, RuntimeClass)",
                        self.start_timeout.as_secs(),
                        self.namespace
                    ),
                }
            })?
    }

    /// Attaches to the sandbox container's stdin, stdout and stderr, riding out an unreachable
    /// API server: nothing reached the runner when the attach was refused, so it can be asked
    /// again.
    async fn attach(&self, name: &str) -> Result<AttachedProcess, SandboxError> {
        let params = AttachParams {
            container: Some(pod::CONTAINER.to_string()),
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
            max_stdin_buf_size: Some(ATTACH_BUFFER_BYTES),
            max_stdout_buf_size: Some(ATTACH_BUFFER_BYTES),
            max_stderr_buf_size: Some(ATTACH_BUFFER_BYTES),
        };
        let mut outage = Outage::new(self.outage_max, "attaching to the sandbox pod");
        loop {
            match outage.bounded(self.pods.attach(name, &params)).await {
                Ok(Ok(attached)) => return Ok(attached),
                Ok(Err(error)) if !retryable(&error) => {
                    return Err(api_error("attaching to the sandbox pod", error));
                }
                Ok(Err(error)) => outage.failed(name, error.to_string()).await?,
                Err(silence) => outage.failed(name, silence).await?,
            }
        }
    }

    /// Whether a warm pod's log shows its READY line: polled until it does (`true`), until the
    /// attach has seen it first (`said`), or until the log cannot be read (`false`: no `get
    /// pods/log`, say; then only the attach can say READY, never a guess).
    fn ready_from_log(
        &self,
        name: String,
        said: Arc<AtomicBool>,
    ) -> impl std::future::Future<Output = bool> + Send + 'static {
        let pods = self.pods.clone();
        async move {
            while !said.load(Ordering::SeqCst) {
                match pods.logs(&name, &Default::default()).await {
                    Ok(log) if log.as_bytes().windows(READY.len()).any(|w| w == READY) => {
                        return true;
                    }
                    Ok(_) => {}
                    // The API server is away for a moment: the next poll asks again.
                    Err(error) if retryable(&error) => {}
                    Err(error) => {
                        tracing::debug!(%error, pod = %name, "cannot read a warm pod's log; waiting for the attach to show its ready line");
                        return false;
                    }
                }
                tokio::time::sleep(READY_POLL).await;
            }
            false
        }
    }

    /// Waits until the pod runs; a pod that fails first, or whose image cannot be pulled, is
    /// an error that says why. A failed pull counts only once the kubelet's back-off has said
    /// so (`ImagePullBackOff`) and its next pull failed too: a first `ErrImagePull` (a registry
    /// hiccup) is waited out, as the kubelet retries it. While it is Pending, why
    /// (unschedulable, an image being pulled) is logged when it changes and kept in `pending`
    /// for the timeout's error.
    async fn wait_running(
        &self,
        created: &Pod,
        pending: &std::sync::Mutex<Option<String>>,
    ) -> Result<Pod, SandboxError> {
        let name = created.metadata.name.clone().unwrap_or_default();
        let namespace = self.namespace.clone();
        let image = created
            .spec
            .as_ref()
            .and_then(|spec| spec.containers.first())
            .and_then(|container| container.image.clone())
            .unwrap_or_default();
        // Set once the kubelet has backed off a failed pull: the next failed pull is its
        // retry failing too, and then the image is taken to be unpullable.
        let backed_off = AtomicBool::new(false);
        let outcome = Box::pin(self.watch_pod(created, |pod| {
            let status = pod.status.as_ref()?;
            if let Some(error) = cannot_start(status, &backed_off, &image) {
                return Some(Err(error));
            }
            match status.phase.as_deref() {
                Some("Running") => Some(Ok(pod.clone())),
                Some(phase @ ("Failed" | "Succeeded")) => {
                    Some(Err(ended_before_running(pod, status, phase, &namespace)))
                }
                _ => {
                    note_pending(pod, &name, pending);
                    None
                }
            }
        }))
        .await?;
        outcome.unwrap_or_else(|| {
            Err(SandboxError::Kubernetes {
                action: "starting the sandbox pod",
                message: format!("pod {name} was deleted before it ran"),
            })
        })
    }

    /// Watches one pod from `seen` on until `until` says something, or the pod is deleted
    /// (`None`). It rides out the API server as kube-runtime's `watcher` does: a watch that
    /// ends cleanly is renewed from the last version seen; a stream that breaks, an `ERROR`
    /// event of any code (410 Expired, or a 500 from an API server restarting), or a watch or
    /// read refused with 5xx, 429 or no connection, reads the pod again and watches anew, with
    /// a doubling backoff. Only when the API server stays unreachable past
    /// `SANDBOX_API_OUTAGE_MAX` does the wait fail ([`SandboxError::ApiUnreachable`]); a 4xx
    /// (403: RBAC) fails at once.
    async fn watch_pod<T>(
        &self,
        seen: &Pod,
        until: impl Fn(&Pod) -> Option<T>,
    ) -> Result<Option<T>, SandboxError> {
        if let Some(found) = until(seen) {
            return Ok(Some(found));
        }
        let name = seen.metadata.name.clone().unwrap_or_default();
        let mut version = seen.metadata.resource_version.clone().unwrap_or_default();
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(WATCH_SECONDS);
        let mut outage = Outage::new(self.outage_max, "watching the sandbox pod");
        // After a broken watch the events since `version` may be lost: the pod is read first.
        let mut reread = false;
        loop {
            if reread {
                match self.reread(&name, &mut outage, &until).await? {
                    Reread::Over(found) => return Ok(found),
                    Reread::At(now) => version = now,
                    Reread::Again => continue,
                }
            }
            let began = Instant::now();
            let Some(events) = self.watch(&name, &params, &version, &mut outage).await? else {
                reread = true;
                continue;
            };
            let ended = match follow(events, &name, &mut outage, &until, &mut version).await {
                Watched::Over(found) => return Ok(found),
                Watched::Ended(ended) => ended,
            };
            reread = after_watch(ended, began, &name, &mut outage).await?;
        }
    }

    /// Starts one watch of pod `name` from `version`; `None` after a retryable failure and its
    /// backoff (the pod is then read again, as events may have been lost).
    async fn watch(
        &self,
        name: &str,
        params: &WatchParams,
        version: &str,
        outage: &mut Outage,
    ) -> Result<
        Option<impl Stream<Item = Result<WatchEvent<Pod>, kube::Error>> + use<>>,
        SandboxError,
    > {
        match outage.bounded(self.pods.watch(params, version)).await {
            Ok(Ok(events)) => Ok(Some(events)),
            Ok(Err(error)) if !retryable(&error) => {
                Err(api_error("watching the sandbox pod", error))
            }
            Ok(Err(error)) => {
                outage.failed(name, error.to_string()).await?;
                Ok(None)
            }
            Err(silence) => {
                outage.failed(name, silence).await?;
                Ok(None)
            }
        }
    }

    /// Reads pod `name` again after a broken watch, for [`Self::watch_pod`]: `until`'s answer,
    /// the version to watch from, or, after a retryable failure and its backoff, a try again.
    async fn reread<T>(
        &self,
        name: &str,
        outage: &mut Outage,
        until: &impl Fn(&Pod) -> Option<T>,
    ) -> Result<Reread<T>, SandboxError> {
        match outage.bounded(self.pods.get_opt(name)).await {
            Ok(Ok(Some(pod))) => {
                outage.reached();
                if let Some(found) = until(&pod) {
                    return Ok(Reread::Over(Some(found)));
                }
                Ok(Reread::At(
                    pod.metadata.resource_version.unwrap_or_default(),
                ))
            }
            Ok(Ok(None)) => Ok(Reread::Over(None)),
            Ok(Err(error)) if !retryable(&error) => {
                Err(api_error("reading the sandbox pod", error))
            }
            Ok(Err(error)) => {
                outage.failed(name, error.to_string()).await?;
                Ok(Reread::Again)
            }
            Err(silence) => {
                outage.failed(name, silence).await?;
                Ok(Reread::Again)
            }
        }
    }

    /// The pod now (`None`: gone), riding out an unreachable API server as [`Self::watch_pod`]
    /// does.
    async fn read_pod(
        &self,
        name: &str,
        action: &'static str,
    ) -> Result<Option<Pod>, SandboxError> {
        let mut outage = Outage::new(self.outage_max, action);
        loop {
            match outage.bounded(self.pods.get_opt(name)).await {
                Ok(Ok(pod)) => return Ok(pod),
                Ok(Err(error)) if !retryable(&error) => return Err(api_error(action, error)),
                Ok(Err(error)) => outage.failed(name, error.to_string()).await?,
                Err(silence) => outage.failed(name, silence).await?,
            }
        }
    }

    /// The sandbox container's exit code, once it has ended; `None` when the pod is gone.
    pub(crate) async fn wait_exit(&self, name: &str) -> Result<Option<i64>, SandboxError> {
        let Some(pod) = self.read_pod(name, "reading the sandbox pod").await? else {
            return Ok(None);
        };
        let code =
            Box::pin(self.watch_pod(&pod, |pod| terminated(pod).map(|(code, _)| code))).await?;
        Ok(code)
    }

    /// Whether the container was killed for its memory (once it has ended; a pod that is gone
    /// says no). The kubelet says `OOMKilled` whether the kernel killed the script alone or,
    /// with cgroup v2's `memory.oom.group` (Kubernetes 1.28 on), the whole container, the
    /// runner included, before it could report.
    pub(crate) async fn oom_killed(&self, name: &str) -> Result<bool, SandboxError> {
        let pod = self
            .read_pod(name, "reading the finished sandbox pod")
            .await?;
        Ok(pod
            .as_ref()
            .and_then(terminated)
            .is_some_and(|(_, reason)| reason == "OOMKilled"))
    }

    /// Deletes a pod with a short grace ([`pod::TERMINATION_GRACE_SECONDS`]), not a force
    /// delete (grace 0): the object then stays until the kubelet has stopped the container,
    /// so the scheduler does not count its cpu and memory free while it still runs. One that
    /// is already gone is fine.
    pub(crate) async fn remove(&self, name: &str) -> Result<(), SandboxError> {
        let grace = pod::TERMINATION_GRACE_SECONDS as u32;
        match self
            .pods
            .delete(name, &DeleteParams::default().grace_period(grace))
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if is_not_found(&error) => Ok(()),
            Err(error) => Err(api_error("deleting a sandbox pod", error)),
        }
    }

    /// file-agent's pods, with `labels` (`key=value`).
    async fn labelled(&self, labels: &[String]) -> Result<Vec<Pod>, SandboxError> {
        Ok(self
            .pods
            .list(&ListParams::default().labels(&labels.join(",")))
            .await
            .map_err(|e| api_error("listing sandbox pods", e))?
            .items)
    }

    /// Pods of `instance` that still exist.
    pub(crate) async fn leftovers(&self, instance: &str) -> Result<usize, SandboxError> {
        Ok(self
            .labelled(&[format!("{INSTANCE_LABEL}={instance}")])
            .await?
            .len())
    }

    /// Deletes file-agent's pods that match `filter`, as [`super::Sandbox::reap`] does with
    /// containers.
    pub(crate) async fn reap(&self, filter: &ReapFilter) -> Result<ReapReport, SandboxError> {
        let mut labels = vec![format!("{MANAGED_LABEL}=true")];
        if let Some(instance) = &filter.instance {
            labels.push(format!("{INSTANCE_LABEL}={instance}"));
        }
        let now = SystemTime::now();
        let mut report = ReapReport::default();
        for pod in self.labelled(&labels).await? {
            let Some(name) = pod.metadata.name.clone() else {
                continue;
            };
            let created = pod
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(|t| crate::time::parse_rfc3339(&t.0.to_string()))
                .unwrap_or(now);
            let age = now.duration_since(created).unwrap_or_default();
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            let running = matches!(phase.as_deref(), Some("Pending" | "Running") | None)
                && terminated(&pod).is_none();
            let warm = pod
                .metadata
                .labels
                .as_ref()
                .is_some_and(|labels| labels.contains_key(WARM_LABEL));
            let finished = pod
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .filter_map(|s| s.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
                .filter_map(|t| crate::time::parse_rfc3339(&t.0.to_string()))
                .max();
            let stopped_for = finished
                .map(|at| now.duration_since(at).unwrap_or_default())
                .unwrap_or(age);
            if filter
                .scope
                .removes(running, warm, age, stopped_for, &mut report)
            {
                self.remove(&name).await?;
                report.containers += 1;
            }
        }
        Ok(report)
    }

    /// Whether this client may do `verb` on `resource` (`pods`, `pods/attach`) in the
    /// namespace, by a SelfSubjectAccessReview.
    pub(crate) async fn may(
        &self,
        verb: &str,
        group: &str,
        resource: &str,
    ) -> Result<bool, SandboxError> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let (resource, subresource) = match resource.split_once('/') {
            Some((resource, sub)) => (resource, Some(sub.to_string())),
            None => (resource, None),
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(self.namespace.clone()),
                    verb: Some(verb.to_string()),
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    subresource,
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SelfSubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| api_error("asking the API server what file-agent may do", e))?;
        Ok(answer.status.is_some_and(|status| status.allowed))
    }

    /// Whether the namespace exists (`None`: not allowed to read it).
    pub(crate) async fn namespace_exists(&self) -> Result<Option<bool>, SandboxError> {
        use k8s_openapi::api::core::v1::Namespace;
        self.optional::<Namespace>(&self.namespace, "reading the namespace")
            .await
    }

    /// Whether a RuntimeClass exists (`None`: not allowed to read it).
    pub(crate) async fn runtime_class_exists(
        &self,
        name: &str,
    ) -> Result<Option<bool>, SandboxError> {
        use k8s_openapi::api::node::v1::RuntimeClass;
        self.optional::<RuntimeClass>(name, "reading the RuntimeClass")
            .await
    }

    async fn optional<K>(
        &self,
        name: &str,
        action: &'static str,
    ) -> Result<Option<bool>, SandboxError>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        match Api::<K>::all(self.client.clone()).get_opt(name).await {
            Ok(found) => Ok(Some(found.is_some())),
            Err(kube::Error::Api(status)) if status.code == 403 => Ok(None),
            Err(error) => Err(api_error(action, error)),
        }
    }
}

impl Remover for Cluster {
    fn remove<'a>(
        &'a self,
        id: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<(), SandboxError>> {
        Box::pin(Cluster::remove(self, id))
    }
}

/// The sandbox container's exit code and reason, once it has terminated.
fn terminated(pod: &Pod) -> Option<(i64, String)> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|status| status.name == pod::CONTAINER)?
        .state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| (i64::from(t.exit_code), t.reason.clone().unwrap_or_default()))
}

/// The attach session's stdout and stderr as one stream, holding the session: dropping it
/// closes the WebSocket (and, `stdinOnce`, the runner's stdin).
struct AttachedOutput {
    streams: Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>,
    _session: kube::api::AttachedProcess,
}

impl Stream for AttachedOutput {
    type Item = Result<LogOutput, bollard::errors::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.streams.as_mut().poll_next(cx)
    }
}

/// A warm pod's output: its READY line said once, by whichever sees it first: the pod's log
/// (`from_log`: the runner may say it before the attach begins, and an attach sees only what
/// comes after) or the attach itself. A log that cannot be read says nothing, so READY then
/// comes only from the attach: it is never said on a guess. `said` records that it was.
fn warm_output(
    from_log: impl std::future::Future<Output = bool> + Send + 'static,
    attach: OutputStream,
    said: Arc<AtomicBool>,
) -> OutputStream {
    let attach_ended = CancellationToken::new();
    let log_said = said.clone();
    let ended = attach_ended.clone();
    let from_log = futures_util::stream::once(async move {
        tokio::select! {
            seen = from_log => seen && !log_said.swap(true, Ordering::SeqCst),
            // Once the attach is over, so is the wait for the log.
            () = ended.cancelled() => false,
        }
    })
    .filter_map(|say| async move {
        say.then(|| {
            Ok(LogOutput::StdOut {
                message: Bytes::from_static(READY),
            })
        })
    });
    Box::pin(futures_util::stream::select(
        from_log,
        StripReady::new(attach, said, attach_ended),
    ))
}

/// A warm runner's READY line when it is the first thing on stdout: passed on unless the log
/// said it already (`said`), then dropped. Cancels `ended` when the attach stream ends.
struct StripReady {
    inner: OutputStream,
    /// stdout seen so far while it may still be the READY line; `None` once decided.
    pending: Option<Vec<u8>>,
    said: Arc<AtomicBool>,
    ended: CancellationToken,
}

impl StripReady {
    fn new(inner: OutputStream, said: Arc<AtomicBool>, ended: CancellationToken) -> Self {
        Self {
            inner,
            pending: Some(Vec::new()),
            said,
            ended,
        }
    }
}

impl Stream for StripReady {
    type Item = Result<LogOutput, bollard::errors::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let item = match self.inner.as_mut().poll_next(cx) {
                Poll::Ready(item) => item,
                Poll::Pending => return Poll::Pending,
            };
            if item.is_none() {
                self.ended.cancel();
            }
            let Some(pending) = self.pending.as_mut() else {
                return Poll::Ready(item);
            };
            match item {
                Some(Ok(LogOutput::StdOut { message })) => {
                    pending.extend_from_slice(&message);
                    if pending.as_slice() == READY {
                        self.pending = None;
                        if self.said.swap(true, Ordering::SeqCst) {
                            continue;
                        }
                        return Poll::Ready(Some(Ok(LogOutput::StdOut {
                            message: Bytes::from_static(READY),
                        })));
                    }
                    if READY.starts_with(pending) {
                        continue;
                    }
                    let seen = self.pending.take().unwrap_or_default();
                    return Poll::Ready(Some(Ok(LogOutput::StdOut {
                        message: Bytes::from(seen),
                    })));
                }
                Some(other) => return Poll::Ready(Some(other)),
                None => {
                    let seen = self.pending.take().unwrap_or_default();
                    if seen.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(LogOutput::StdOut {
                        message: Bytes::from(seen),
                    })));
                }
            }
        }
    }
}

/// Whether `selector` selects a pod labelled `labels` (matchLabels and matchExpressions).
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => true,
        }
    });
    by_labels && by_expressions
}

/// The NetworkPolicy verdict for the sandbox pods of `instance`: `Ok` when one policy denies
/// them all ingress and egress and no policy that selects them allows any.
fn judge_network_policies(
    namespace: &str,
    instance: &str,
    policies: &[NetworkPolicy],
) -> Result<(), SandboxError> {
    let cold = BTreeMap::from([
        (MANAGED_LABEL.to_string(), "true".to_string()),
        (INSTANCE_LABEL.to_string(), instance.to_string()),
    ]);
    let mut warm = cold.clone();
    warm.insert(WARM_LABEL.to_string(), "true".to_string());
    let mut deny_all = None;
    for policy in policies {
        let name = policy.metadata.name.clone().unwrap_or_default();
        let Some(spec) = &policy.spec else { continue };
        let selector = spec.pod_selector.clone().unwrap_or_default();
        let selected = [&cold, &warm].map(|labels| selects(&selector, labels));
        if !selected.iter().any(|s| *s) {
            continue;
        }
        let ingress_rules = spec.ingress.as_ref().map_or(0, Vec::len);
        let egress_rules = spec.egress.as_ref().map_or(0, Vec::len);
        if ingress_rules + egress_rules > 0 {
            return Err(SandboxError::NetworkPolicyMissing {
                namespace: namespace.to_string(),
                detail: format!(
                    "NetworkPolicy {name} selects them and allows {ingress_rules} ingress and {egress_rules} egress rule(s); policies add up, so remove it or narrow its podSelector"
                ),
            });
        }
        let types = spec.policy_types.clone().unwrap_or_default();
        if selected.iter().all(|s| *s)
            && types.iter().any(|t| t == "Ingress")
            && types.iter().any(|t| t == "Egress")
        {
            deny_all.get_or_insert(name);
        }
    }
    match deny_all {
        Some(_) => Ok(()),
        None => Err(SandboxError::NetworkPolicyMissing {
            namespace: namespace.to_string(),
            detail: format!(
                "{} NetworkPolicy(s) found, none with policyTypes [Ingress, Egress], no rules, and a podSelector that selects {MANAGED_LABEL}=true",
                policies.len()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(value: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(value).unwrap()
    }

    fn deny_all() -> NetworkPolicy {
        policy(serde_json::json!({
            "metadata": {"name": "deny-all"},
            "spec": {"podSelector": {"matchLabels": {MANAGED_LABEL: "true"}}, "policyTypes": ["Ingress", "Egress"]}
        }))
    }

    #[test]
    fn a_deny_all_policy_is_needed_and_no_allowing_one_may_select_the_pods() {
        assert!(judge_network_policies("ns", "a", &[deny_all()]).is_ok());
        let everything = policy(serde_json::json!({
            "metadata": {"name": "all-pods"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        }));
        assert!(judge_network_policies("ns", "a", &[everything]).is_ok());
        let error = judge_network_policies("ns", "a", &[]).unwrap_err();
        assert!(error.to_string().contains("networkpolicy.yaml"), "{error}");
        let ingress_only = policy(serde_json::json!({
            "metadata": {"name": "ingress-only"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}
        }));
        assert!(judge_network_policies("ns", "a", &[ingress_only]).is_err());
        let dns = policy(serde_json::json!({
            "metadata": {"name": "allow-dns"},
            "spec": {"podSelector": {"matchExpressions": [{"key": MANAGED_LABEL, "operator": "Exists"}]},
                     "policyTypes": ["Egress"], "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}
        }));
        let error = judge_network_policies("ns", "a", &[deny_all(), dns]).unwrap_err();
        assert!(error.to_string().contains("allow-dns"), "{error}");
        let others = policy(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"], "egress": [{}]}
        }));
        assert!(judge_network_policies("ns", "a", &[deny_all(), others]).is_ok());
        let only_warm = policy(serde_json::json!({
            "metadata": {"name": "warm-only"},
            "spec": {"podSelector": {"matchLabels": {WARM_LABEL: "true"}}, "policyTypes": ["Ingress", "Egress"]}
        }));
        assert!(
            judge_network_policies("ns", "a", &[only_warm]).is_err(),
            "cold pods are not covered"
        );
    }

    #[tokio::test]
    async fn a_ready_line_seen_by_the_attach_is_dropped_and_anything_else_kept() {
        let chunks = |parts: &[&'static [u8]]| -> OutputStream {
            let items: Vec<_> = parts
                .iter()
                .map(|p| {
                    Ok(LogOutput::StdOut {
                        message: Bytes::from_static(p),
                    })
                })
                .collect();
            Box::pin(futures_util::stream::iter(items))
        };
        let collect = |stream: OutputStream| async move {
            let mut out = Vec::new();
            let said = Arc::new(AtomicBool::new(true));
            let mut stream = StripReady::new(stream, said, CancellationToken::new());
            while let Some(Ok(LogOutput::StdOut { message })) = stream.next().await {
                out.extend_from_slice(&message);
            }
            out
        };
        assert_eq!(
            collect(chunks(&[b"--file-agent-", b"ready--\n", b"hello"])).await,
            b"hello"
        );
        assert_eq!(collect(chunks(&[b"--file", b"x"])).await, b"--filex");
        assert_eq!(collect(chunks(&[b"hello"])).await, b"hello");
    }

    fn stdout(parts: &[&'static [u8]]) -> Vec<Result<LogOutput, bollard::errors::Error>> {
        parts
            .iter()
            .map(|p| {
                Ok(LogOutput::StdOut {
                    message: Bytes::from_static(p),
                })
            })
            .collect()
    }

    async fn all_stdout(mut stream: OutputStream) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(item) =
            tokio::time::timeout(std::time::Duration::from_secs(5), stream.next())
                .await
                .unwrap()
        {
            if let Ok(LogOutput::StdOut { message }) = item {
                out.extend_from_slice(&message);
            }
        }
        out
    }

    #[tokio::test]
    async fn a_warm_pod_is_ready_once_from_the_log_or_the_attach_never_from_a_failed_log_read() {
        let said = || Arc::new(AtomicBool::new(false));
        // The log saw it first: READY once, the attach's copy dropped.
        let attach: OutputStream = Box::pin(futures_util::stream::iter(stdout(&[
            b"--file-agent-ready--\n",
            b"frames",
        ])));
        let out = all_stdout(warm_output(async { true }, attach, said())).await;
        assert_eq!(out, b"--file-agent-ready--\nframes");
        // The log could not be read: READY comes from the attach, once.
        let attach: OutputStream = Box::pin(futures_util::stream::iter(stdout(&[
            b"--file-agent-",
            b"ready--\nframes",
        ])));
        let out = all_stdout(warm_output(async { false }, attach, said())).await;
        assert_eq!(out, b"--file-agent-ready--\nframes");
        // The log could not be read and the runner has not said it yet: nothing is ready.
        let attach: OutputStream = Box::pin(futures_util::stream::pending());
        let mut output = warm_output(async { false }, attach, said());
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(300), output.next())
                .await
                .is_err(),
            "READY said though neither the log nor the attach showed it"
        );
        // A log that never shows it does not keep the stream open once the attach ended.
        let attach: OutputStream = Box::pin(futures_util::stream::iter(stdout(&[b"x"])));
        let out = all_stdout(warm_output(std::future::pending(), attach, said())).await;
        assert_eq!(out, b"x");
    }

    #[test]
    fn a_pending_pod_says_why() {
        let pod = |status: serde_json::Value| -> Pod {
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": "fa-1"}, "status": status}),
            )
            .unwrap()
        };
        let unschedulable = pod(serde_json::json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient memory."}]}));
        assert_eq!(
            pending_reason(&unschedulable).unwrap(),
            "Unschedulable: 0/3 nodes are available: 3 Insufficient memory."
        );
        let pulling = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [{
            "name": "sandbox", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull", "message": "registry timeout"}}}]}),
        );
        assert_eq!(
            pending_reason(&pulling).unwrap(),
            "ErrImagePull: registry timeout"
        );
        let creating = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [{
            "name": "sandbox", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(pending_reason(&creating), None);
        assert!(!is_fatal_waiting("ErrImagePull"), "the kubelet retries it");
        assert!(!is_fatal_waiting("ImagePullBackOff"), "and again after it");
        assert!(is_fatal_waiting("ErrImageNeverPull"));
    }

    #[tokio::test]
    async fn an_outage_is_ridden_out_until_its_bound_and_no_longer() {
        let max = Duration::from_millis(600);
        let began = Instant::now();
        let mut outage = Outage::new(max, "watching the sandbox pod");
        let mut tries = 0;
        let error = loop {
            tries += 1;
            if let Err(error) = outage.failed("fa-1", "503".into()).await {
                break error;
            }
        };
        // Never before the bound; and not a second bound's worth after it (a margin a busy
        // machine's late timers stay within, where 300 ms would not).
        let took = began.elapsed();
        assert!(took >= max && took < max * 2, "{took:?}");
        assert!(tries >= 3, "with backoff in between: {tries}");
        let SandboxError::ApiUnreachable { after, last, .. } = &error else {
            panic!("{error}")
        };
        assert!(*after >= max && last == "503", "{error}");
        assert!(
            error.to_string().contains("SANDBOX_API_OUTAGE_MAX"),
            "{error}"
        );

        // An answer in between starts the count again.
        let mut outage = Outage::new(max, "reading the sandbox pod");
        outage.failed("fa-1", "reset".into()).await.unwrap();
        tokio::time::sleep(max).await;
        outage.reached();
        outage.failed("fa-1", "reset".into()).await.unwrap();

        // A request that never answers is cut at the bound, which then has passed.
        let mut outage = Outage::new(max, "attaching to the sandbox pod");
        let began = Instant::now();
        let silent = std::future::pending::<Result<(), kube::Error>>();
        assert!(outage.bounded(silent).await.is_err());
        assert!(outage.failed("fa-1", "silence".into()).await.is_err());
        assert!(began.elapsed() < max * 2, "{:?}", began.elapsed());
    }

    #[test]
    fn a_quota_refusal_is_not_taken_for_rbac() {
        let refusal = |message: &str| {
            let status: kube::core::Status = serde_json::from_value(serde_json::json!({
                "status": "Failure", "message": message, "reason": "Forbidden", "code": 403
            }))
            .unwrap();
            api_error(
                "creating the sandbox pod",
                kube::Error::Api(Box::new(status)),
            )
            .to_string()
        };
        let quota = refusal(
            "pods \"fa-1\" is forbidden: exceeded quota: sandbox, requested: cpu=1, used: cpu=8, limited: cpu=8",
        );
        assert!(quota.contains("ResourceQuota is used up"), "{quota}");
        assert!(!quota.contains("rbac.yaml"), "{quota}");
        let rbac = refusal("pods is forbidden: User \"x\" cannot create resource \"pods\"");
        assert!(rbac.contains("rbac.yaml"), "{rbac}");
    }
}
