//! A test double of the Kubernetes API server and of one kubelet, in process, on
//! `127.0.0.1:0` over plain HTTP, speaking the real wire protocol so that real clients (kube-rs,
//! kubectl 1.32) talk to it unchanged. Each pod runs as a Docker container on the real engine.
//!
//! What it serves:
//! - discovery (`/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`, `/version`), legacy
//!   (unaggregated) form only, which clients fall back to;
//! - core/v1 `namespaces` and `pods` (create, get, list, watch, delete, deletecollection;
//!   `pods/log`, `pods/attach`), `persistentvolumeclaims` and `events` (stored; a claim is
//!   Bound at once when the default class offers its access modes, else Pending with the
//!   provisioner's `ProvisioningFailed` event), node.k8s.io/v1 `runtimeclasses`, networking.k8s.io/v1
//!   `networkpolicies` (stored, never enforced), authorization.k8s.io/v1
//!   `selfsubjectaccessreviews`; and, stored as they come with nothing acting on them (no
//!   controller: a Deployment makes no pod, a Secret is mounted nowhere), `secrets`,
//!   `configmaps`, `serviceaccounts`, `services`, `resourcequotas`, apps/v1 `deployments`,
//!   rbac.authorization.k8s.io/v1 `roles` and `rolebindings`, networking.k8s.io/v1
//!   `ingresses`, policy/v1 `poddisruptionbudgets`, so that `kubectl apply -k` of the
//!   manifests runs against it;
//! - JSON only (no protobuf), `metav1.Status` errors with the real codes, reasons and messages,
//!   `resourceVersion` on every object and list, `Table` answers for kubectl's `get`;
//! - watch streams (`?watch=1`): newline-delimited JSON events `ADDED`/`MODIFIED`/`DELETED`,
//!   resumable from a `resourceVersion`, filtered by `labelSelector` and `fieldSelector`
//!   ([`watch`]);
//! - Pod Security admission: a namespace labelled `pod-security.kubernetes.io/enforce` with
//!   `restricted` or `baseline` refuses violating pods with 403 and the real message
//!   ([`admission`]); the RuntimeClass admission refuses an unknown `runtimeClassName`;
//! - pods/attach over WebSocket with `v5.channel.k8s.io` and `v4.channel.k8s.io` ([`attach`]);
//! - a kubelet ([`kubelet`]): each container of a pod becomes a Docker container with the
//!   pod's settings, its status follows the container (Pending, Running, Succeeded/Failed with
//!   `containerStatuses`), `activeDeadlineSeconds` is enforced, deletion is graceful, and
//!   pods whose owner pods are all gone are garbage-collected.
//!
//! The interface the tests use:
//! - [`KubeDouble::start`], [`KubeDouble::url`], [`KubeDouble::write_kubeconfig`] (a token
//!   user, [`TOKEN`]; any other bearer token is refused with 401, and a request with none is
//!   let in, because kubectl 1.32 sends no bearer token over plain HTTP),
//!   [`KubeDouble::label`] (the Docker label on every container it makes),
//!   [`KubeDouble::shutdown`] (removes every container it made, waits for its kubelets);
//! - knobs: [`KubeDouble::mutate_pods`] (a mutating admission hook applied to each created pod
//!   before it is stored and admitted), [`KubeDouble::deny_verbs`] (RBAC: the verbs are
//!   refused both in `SelfSubjectAccessReview` answers and on the real requests, 403),
//!   [`KubeDouble::set_pids_limit`] (the kubelet's pod pids limit, default
//!   [`DEFAULT_PIDS_LIMIT`]), [`KubeDouble::give_pods_network`] (pods join a Docker network:
//!   a cluster whose isolation fails), [`KubeDouble::set_storage_modes`] (what the default
//!   storage class offers, by default `ReadWriteOnce` only);
//! - the cluster's rough edges: [`KubeDouble::cut_watches`] (every open watch ends by a reset
//!   connection, an `ERROR` 500 event or a clean end, [`Cut`]), [`KubeDouble::refuse_requests`]
//!   (every request answered 503 for a while or for good), [`KubeDouble::set_start_delay`]
//!   (an image slow to pull), [`KubeDouble::fail_pulls`] (pulls that fail before one works),
//!   [`KubeDouble::speed_up_deadlines`] (`activeDeadlineSeconds` on a faster clock),
//!   [`KubeDouble::leave_unschedulable`] (pods the scheduler cannot place),
//!   [`KubeDouble::kill_whole_container_on_oom`] (the kubelet's `memory.oom.group=1`);
//! - observation: [`KubeDouble::pods`] (the stored pods of a namespace, as JSON),
//!   [`KubeDouble::pod`], [`KubeDouble::create_namespace`], [`KubeDouble::apply`] (store any
//!   supported object, e.g. a RuntimeClass or a NetworkPolicy), [`KubeDouble::add_external_pod`]
//!   (a pod the double stores but does not run, e.g. the server's own pod, to own sandbox pods),
//!   [`KubeDouble::delete_pod`], [`KubeDouble::attach_protocols`] (the subprotocol negotiated
//!   by each attach so far), [`KubeDouble::requests`] (every request line served),
//!   [`KubeDouble::deletions`] (each pod deletion and its grace period).
//!
//! What the double simplifies, compared with a real API server and kubelet:
//! - No TLS, one bearer token (or none), no real authorization beyond
//!   [`KubeDouble::deny_verbs`].
//! - No scheduling: every pod is bound at once to one node, `kube-double`; no resource
//!   accounting, no RuntimeClass overhead or scheduling, no taints beyond the default
//!   tolerations it writes.
//! - Network `none` for every pod (Docker `--network none`), unless
//!   [`KubeDouble::give_pods_network`] says otherwise; NetworkPolicies are stored but change
//!   nothing; no pod IP, no Services, no DNS.
//! - Storage: one default class, no PersistentVolumes, no StorageClass objects; a claim binds
//!   or fails at create and never changes after; the failure event's message is the EBS CSI
//!   driver's for a multi-writer claim. Nothing mounts a claim (pods may not use one).
//! - Local images only: nothing is pulled; a missing image leaves the container waiting with
//!   `ErrImagePull`, then `ImagePullBackOff`, and again, on a fixed 1 s back-off (a kubelet's
//!   starts at 10 s and doubles); `ErrImageNeverPull` under `imagePullPolicy: Never`; `imageID` is
//!   the local `sha256:` id (or the image's first repo digest when it has one). An image
//!   pinned by digest, `repo@sha256:D`, runs the local image whose *id* is `sha256:D` and
//!   that has a tag of `repo`, and `imageID` is then that reference (on a real node the digest
//!   is the registry manifest's, which a local build does not have).
//! - Every `emptyDir` (memory or not) is a per-container tmpfs sized by `sizeLimit`: two
//!   containers of one pod do not share it. The ServiceAccount token volume is written into
//!   the spec (as the ServiceAccount admission does) but not mounted; other volume types are
//!   refused at container creation (`CreateContainerConfigError`).
//! - `restartPolicy` is stored but containers are never restarted; init, sidecar and ephemeral
//!   containers are not run; probes, lifecycle hooks and `ephemeral-storage` limits are
//!   ignored; `hostNetwork`/`hostPID`/`hostIPC`, `privileged` and `hostPath` are refused at
//!   container creation (never run on the shared engine).
//! - Only `create`, `get`, `list`, `watch`, `delete` and `deletecollection` (no update or
//!   patch), JSON only; label and field selectors are matched on the object as it is now (a
//!   watched object that stops matching is not turned into a `DELETED` event).
//! - No aggregated discovery and no OpenAPI documents (`/openapi/v2` and `/v3` answer 404,
//!   so kubectl's client-side schema validation is not available); the objects
//!   stored for `kubectl apply` are not validated, defaulted or acted on; `pods/exec`, port-forward and SPDY are not served.
//! - Pod Security checks implemented: host namespaces, privileged, hostPort,
//!   allowPrivilegeEscalation, capabilities, restricted volume types, runAsNonRoot, runAsUser=0,
//!   seccompProfile (not AppArmor, SELinux, procMount, sysctls, Windows, probes' hosts).
//! - The group OOM kill is real on a cgroup v2 engine (`memory.oom.group`); on cgroup v1 (as
//!   on this project's machines) the container's OOM killer is turned off and the kubelet
//!   kills the container once it is under OOM, which is what a group kill looks like from
//!   outside. Either needs the tests to run as root on the engine's host.
//! - A container's `OOMKilled` is Docker's flag or, when that flag comes late (dockerd sets it
//!   from containerd's OOM event, which on cgroup v1 can follow the exit), the kernel's own
//!   `oom-kill:` record naming the container in `/dev/kmsg` ([`kernel_killed_for_memory`]).
//! - Garbage collection only for pods owned by pods (by uid), checked every
//!   [`GC_PERIOD`]; namespace deletion removes its pods at once.
//! - A pod without `seccompProfile` runs unconfined, as it would on containerd; the default
//!   environment gets the `KUBERNETES_SERVICE_*` variables, as on a real node.

mod admission;
mod api;
mod attach;
mod kubelet;
mod resources;
mod watch;

pub use kubelet::kernel_killed_for_memory;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use bollard::Docker;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The Docker label key on every container the double makes; its value is the double's id.
pub const LABEL_KEY: &str = "io.file-agent.kube-double";
/// The bearer token the double accepts (and writes into kubeconfigs).
pub const TOKEN: &str = "kube-double-token";
/// The kubelet's pod pids limit unless [`KubeDouble::set_pids_limit`] says otherwise.
pub const DEFAULT_PIDS_LIMIT: i64 = 1024;
/// The one node every pod is bound to.
pub const NODE_NAME: &str = "kube-double";
/// How often the garbage collector looks for pods whose owners are gone.
pub const GC_PERIOD: Duration = Duration::from_millis(500);
/// How long [`KubeDouble::shutdown`] waits for kubelets to finish before removing by label.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Watch events kept for clients that resume from a `resourceVersion`.
const HISTORY: usize = 100_000;

/// A mutating admission hook.
type Hook = Arc<dyn Fn(&mut Value) + Send + Sync>;

/// The running double. Dropping it without [`KubeDouble::shutdown`] (a test that panicked)
/// still removes its containers, through the docker CLI, synchronously.
pub struct KubeDouble {
    cluster: Arc<Cluster>,
    url: String,
    server: tokio::task::JoinHandle<()>,
    /// Set by [`KubeDouble::shutdown`], so that drop has nothing left to do.
    shut_down: bool,
}

/// What every handler and kubelet shares.
pub struct Cluster {
    /// Every stored object and the watch history; one lock, so that a watch subscribes at an
    /// exact revision.
    store: Mutex<Store>,
    docker: Docker,
    /// This double's id: the value of [`LABEL_KEY`] on its containers.
    id: String,
    /// `127.0.0.1:PORT`, for discovery's server address.
    address: String,
    hooks: RwLock<Vec<Hook>>,
    denied: Mutex<HashSet<String>>,
    pids_limit: AtomicI64,
    /// The pods' kubelet tasks.
    kubelets: TaskTracker,
    /// Cancelled by shutdown: kubelets remove their containers and end.
    stop: CancellationToken,
    attach_protocols: Mutex<Vec<String>>,
    requests: Mutex<Vec<String>>,
    /// Every byte each removed container wrote to stdout and stderr, as a node keeps it under
    /// `/var/log/pods` for log agents to ship.
    node_log: Mutex<Vec<u8>>,
    /// Every container state the kubelet wrote as `terminated`, in order (a pod and its status
    /// may be gone before a test polls it).
    terminated: Mutex<Vec<Value>>,
    /// The Docker network pods join instead of `none` ([`KubeDouble::give_pods_network`]).
    pod_network: Mutex<Option<String>>,
    /// The access modes the default storage class offers ([`KubeDouble::set_storage_modes`]).
    storage_modes: Mutex<Vec<String>>,
    /// [`KubeDouble::cut_watches`]: every open watch hears it.
    cuts: broadcast::Sender<Cut>,
    /// [`KubeDouble::refuse_requests`]: `Some(None)` for good, `Some(Some(t))` until `t`.
    refusing: Mutex<Option<Option<std::time::Instant>>>,
    /// Every pod deletion asked for: (pod name, the grace period in effect).
    deletions: Mutex<Vec<(String, u64)>>,
    /// [`KubeDouble::set_start_delay`], in milliseconds.
    start_delay_ms: AtomicU64,
    /// [`KubeDouble::fail_pulls`].
    failing_pulls: AtomicU32,
    /// [`KubeDouble::speed_up_deadlines`].
    deadline_speedup: AtomicU64,
    /// [`KubeDouble::kill_whole_container_on_oom`].
    oom_group: AtomicBool,
    /// [`KubeDouble::leave_unschedulable`]: the scheduler's message, while pods stay unbound.
    unschedulable: Mutex<Option<String>>,
    /// Containers the kubelet killed whole for their memory (reported `OOMKilled`).
    oom_group_killed: Mutex<HashSet<String>>,
}

/// How [`KubeDouble::cut_watches`] ends the watches open at that moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// The connection breaks mid-stream (no last chunk), as when an API server dies.
    Reset,
    /// An `ERROR` event with a 500 `Status` (an API server restarting, an etcd leader
    /// change), then the end of the stream.
    Error500,
    /// The stream ends cleanly, as at its `timeoutSeconds`.
    Clean,
}

/// A stored object's address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The resource's plural name (`pods`).
    pub resource: &'static str,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(resource: &'static str, namespace: &str, name: &str) -> Key {
        Key {
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// One watch event.
#[derive(Clone, Debug)]
pub struct Event {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    pub key: Key,
    pub object: Value,
    pub revision: u64,
}

/// The objects, the revision counter, the history of events and the kubelets' deletion signals.
pub struct Store {
    revision: u64,
    objects: BTreeMap<Key, Value>,
    history: std::collections::VecDeque<Event>,
    events: broadcast::Sender<Event>,
    /// Per pod uid: the deletion grace period, once a deletion is asked for.
    kubelets: HashMap<String, tokio::sync::watch::Sender<Option<u64>>>,
}

impl Store {
    fn new() -> Store {
        let (events, _) = broadcast::channel(4096);
        Store {
            revision: 1,
            objects: BTreeMap::new(),
            history: Default::default(),
            events,
            kubelets: HashMap::new(),
        }
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// The objects of `resource`, in `namespace` (`None` for all).
    pub fn list(&self, resource: &'static str, namespace: Option<&str>) -> Vec<(Key, Value)> {
        self.objects
            .iter()
            .filter(|(k, _)| k.resource == resource && namespace.is_none_or(|n| k.namespace == n))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Every stored object, for the garbage collector.
    pub fn all(&self) -> impl Iterator<Item = (&Key, &Value)> {
        self.objects.iter()
    }

    /// Stores `object` at `key` with a new resourceVersion (ADDED or MODIFIED); returns it.
    pub fn put(&mut self, key: Key, mut object: Value) -> Value {
        self.revision += 1;
        object["metadata"]["resourceVersion"] = json!(self.revision.to_string());
        let kind = if self.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.objects.insert(key.clone(), object.clone());
        self.emit(kind, key, object.clone());
        object
    }

    /// Changes the object at `key` (if its uid is `uid`, when given) and stores it.
    pub fn update(
        &mut self,
        key: &Key,
        uid: Option<&str>,
        change: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        let mut object = self.objects.get(key)?.clone();
        if uid.is_some_and(|uid| object["metadata"]["uid"] != uid) {
            return None;
        }
        change(&mut object);
        Some(self.put(key.clone(), object))
    }

    /// Removes the object at `key` (if its uid is `uid`, when given): a DELETED event.
    pub fn remove(&mut self, key: &Key, uid: Option<&str>) -> Option<Value> {
        let object = self.objects.get(key)?;
        if uid.is_some_and(|uid| object["metadata"]["uid"] != uid) {
            return None;
        }
        let mut object = self.objects.remove(key)?;
        self.revision += 1;
        object["metadata"]["resourceVersion"] = json!(self.revision.to_string());
        if let Some(uid) = object["metadata"]["uid"].as_str() {
            self.kubelets.remove(uid);
        }
        self.emit("DELETED", key.clone(), object.clone());
        Some(object)
    }

    fn emit(&mut self, kind: &'static str, key: Key, object: Value) {
        let event = Event {
            kind,
            key,
            object,
            revision: self.revision,
        };
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(event.clone());
        // No receiver is not an error: nobody watches.
        let _ = self.events.send(event);
    }

    /// The events after `revision`, or `None` when the history no longer reaches back so far.
    pub fn since(&self, revision: u64) -> Option<Vec<Event>> {
        if let Some(first) = self.history.front()
            && first.revision > revision + 1
        {
            return None;
        }
        Some(
            self.history
                .iter()
                .filter(|e| e.revision > revision)
                .cloned()
                .collect(),
        )
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }
}

impl Cluster {
    /// Runs `f` with the store locked. Never held across an await.
    pub fn with_store<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let mut store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut store)
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn pids_limit(&self) -> i64 {
        self.pids_limit.load(Ordering::Relaxed)
    }

    /// The Docker network pods join, when isolation is to fail.
    pub fn pod_network(&self) -> Option<String> {
        self.pod_network
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The access modes the default storage class offers.
    pub fn storage_modes(&self) -> Vec<String> {
        self.storage_modes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Applies the mutating admission hooks to a pod.
    pub fn mutate(&self, pod: &mut Value) {
        let hooks = self.hooks.read().unwrap_or_else(|e| e.into_inner()).clone();
        for hook in hooks {
            hook(pod);
        }
    }

    /// Whether RBAC refuses `verb` on `resource` (`pods`, `pods/attach`).
    pub fn denies(&self, verb: &str, resource: &str) -> bool {
        let denied = self.denied.lock().unwrap_or_else(|e| e.into_inner());
        denied.contains(verb) || denied.contains(&format!("{verb} {resource}"))
    }

    /// Whether [`KubeDouble::refuse_requests`] is in force now.
    pub fn refuses(&self) -> bool {
        let mut refusing = self.refusing.lock().unwrap_or_else(|e| e.into_inner());
        match *refusing {
            Some(Some(until)) if std::time::Instant::now() >= until => {
                *refusing = None;
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    pub fn cuts(&self) -> broadcast::Receiver<Cut> {
        self.cuts.subscribe()
    }

    fn record_deletion(&self, name: &str, grace: u64) {
        self.deletions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), grace));
    }

    /// The kubelet's wait before it creates a new pod's containers (an image slow to pull).
    pub fn start_delay(&self) -> Duration {
        Duration::from_millis(self.start_delay_ms.load(Ordering::Relaxed))
    }

    /// How many pulls of each new pod fail before one succeeds.
    pub fn failing_pulls(&self) -> u32 {
        self.failing_pulls.load(Ordering::Relaxed)
    }

    /// How many times faster than real time `activeDeadlineSeconds` runs out.
    pub fn deadline_speedup(&self) -> u64 {
        self.deadline_speedup.load(Ordering::Relaxed).max(1)
    }

    /// The scheduler's message while [`KubeDouble::leave_unschedulable`] is in force.
    pub fn unschedulable(&self) -> Option<String> {
        self.unschedulable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn oom_group(&self) -> bool {
        self.oom_group.load(Ordering::Relaxed)
    }

    fn mark_oom_group_killed(&self, id: &str) {
        self.oom_group_killed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string());
    }

    pub fn oom_group_killed(&self, id: &str) -> bool {
        self.oom_group_killed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(id)
    }

    fn record_request(&self, line: String) {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }

    fn record_attach(&self, protocol: String) {
        self.attach_protocols
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(protocol);
    }

    /// Asks the kubelet of pod `uid` to stop it with `grace` seconds; false when no kubelet
    /// runs it (an external pod, or one already gone).
    pub fn signal_deletion(store: &Store, uid: &str, grace: u64) -> bool {
        match store.kubelets.get(uid) {
            Some(sender) => {
                sender.send_replace(Some(grace));
                true
            }
            None => false,
        }
    }
}

/// `at` as Kubernetes writes times: `2026-11-23T20:00:00Z`.
pub fn timestamp(at: SystemTime) -> String {
    let text = file_agent::time::format_rfc3339(at);
    match text.split_once('.') {
        Some((seconds, _)) => format!("{seconds}Z"),
        None => text,
    }
}

/// Now, as [`timestamp`] writes it.
pub fn now() -> String {
    timestamp(SystemTime::now())
}

/// Five characters as the API server appends to a `generateName` (and to volume names).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

impl KubeDouble {
    /// Starts the double on a free loopback port, with the namespaces `default` and
    /// `kube-system`, and its garbage collector.
    pub async fn start() -> KubeDouble {
        let docker = Docker::connect_with_local_defaults().expect("a Docker engine");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("a bound address").to_string();
        let cluster = Arc::new(Cluster {
            store: Mutex::new(Store::new()),
            docker,
            id: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
            address: address.clone(),
            hooks: RwLock::new(Vec::new()),
            denied: Mutex::new(HashSet::new()),
            pids_limit: AtomicI64::new(DEFAULT_PIDS_LIMIT),
            kubelets: TaskTracker::new(),
            stop: CancellationToken::new(),
            attach_protocols: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            node_log: Mutex::new(Vec::new()),
            terminated: Mutex::new(Vec::new()),
            pod_network: Mutex::new(None),
            storage_modes: Mutex::new(vec!["ReadWriteOnce".to_string()]),
            cuts: broadcast::channel(16).0,
            refusing: Mutex::new(None),
            deletions: Mutex::new(Vec::new()),
            start_delay_ms: AtomicU64::new(0),
            failing_pulls: AtomicU32::new(0),
            deadline_speedup: AtomicU64::new(1),
            oom_group: AtomicBool::new(false),
            unschedulable: Mutex::new(None),
            oom_group_killed: Mutex::new(HashSet::new()),
        });
        for namespace in ["default", "kube-system"] {
            api::create_namespace(&cluster, namespace, &[]);
        }
        let app = api::router(cluster.clone());
        // No Nagle: attach writes many small frames, which would otherwise wait for ACKs.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        kubelet::spawn_garbage_collector(cluster.clone());
        KubeDouble {
            cluster,
            url: format!("http://{address}"),
            server,
            shut_down: false,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Writes a kubeconfig whose current context points at the double, as user [`TOKEN`], in
    /// `namespace`.
    pub fn write_kubeconfig(&self, path: &Path, namespace: &str) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-double\n  cluster:\n    server: {url}\nusers:\n- name: kube-double\n  user:\n    token: {TOKEN}\ncontexts:\n- name: kube-double\n  context:\n    cluster: kube-double\n    user: kube-double\n    namespace: {namespace}\ncurrent-context: kube-double\n",
            url = self.url
        );
        std::fs::write(path, text).expect("the kubeconfig is written");
    }

    /// The Docker label (key, value) on every container the double makes.
    pub fn label(&self) -> (&str, &str) {
        (LABEL_KEY, &self.cluster.id)
    }

    /// Adds a mutating admission hook: applied to every created pod (after the API server's
    /// defaults, before Pod Security admission and storage), like a mutating webhook.
    pub fn mutate_pods(&self, hook: impl Fn(&mut Value) + Send + Sync + 'static) {
        self.cluster
            .hooks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::new(hook));
    }

    /// Denies RBAC verbs from now on. An entry is a verb (`delete`: on every resource) or a
    /// verb and a resource (`get pods/attach`, `create pods`). SelfSubjectAccessReviews answer
    /// `allowed: false` for them, and the requests themselves get 403.
    pub fn deny_verbs(&self, verbs: &[&str]) {
        let mut denied = self
            .cluster
            .denied
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        denied.extend(verbs.iter().map(|v| v.to_string()));
    }

    /// Pods created from now on join this Docker network (`bridge`) instead of none: a
    /// cluster whose NetworkPolicy is stored but not enforced (a CNI without policy support,
    /// a cluster-wide rule that allows the traffic), where pods reach what the network reaches.
    pub fn give_pods_network(&self, network: &str) {
        *self
            .cluster
            .pod_network
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(network.to_string());
    }

    /// The access modes the default storage class offers from now on (by default only
    /// `ReadWriteOnce`, as the default classes of GKE, EKS and AKS).
    pub fn set_storage_modes(&self, modes: &[&str]) {
        *self
            .cluster
            .storage_modes
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = modes.iter().map(|m| m.to_string()).collect();
    }

    /// Sets the kubelet's pod pids limit for pods created from now on.
    pub fn set_pids_limit(&self, limit: i64) {
        self.cluster.pids_limit.store(limit, Ordering::Relaxed);
    }

    /// Ends every watch open now, the way `how` says (the client must watch again).
    pub fn cut_watches(&self, how: Cut) {
        // No open watch is not an error.
        let _ = self.cluster.cuts.send(how);
    }

    /// Answers every request 503 `ServiceUnavailable` (watches, reads, creates, attaches:
    /// an API server that is down behind its load balancer) for `period`, or for good when
    /// `None`. Streams already open are left alone; [`Self::cut_watches`] ends them.
    pub fn refuse_requests(&self, period: Option<Duration>) {
        *self
            .cluster
            .refusing
            .lock()
            .unwrap_or_else(|e| e.into_inner()) =
            Some(period.map(|period| std::time::Instant::now() + period));
    }

    /// Every pod deletion asked for so far: (pod name, the grace period in effect: the
    /// request's `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds`).
    pub fn deletions(&self) -> Vec<(String, u64)> {
        self.cluster
            .deletions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Pods created from now on wait `delay` (Pending, `ContainerCreating`) before their
    /// containers are made: an image slow to pull. `startTime` is set before it, as a kubelet
    /// sets it before the pull, so `activeDeadlineSeconds` counts it.
    pub fn set_start_delay(&self, delay: Duration) {
        self.cluster
            .start_delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// The first `pulls` image pulls of each pod created from now on fail (`ErrImagePull`),
    /// and the kubelet backs off (`ImagePullBackOff`) and pulls again, as a real one does
    /// after a registry hiccup.
    pub fn fail_pulls(&self, pulls: u32) {
        self.cluster.failing_pulls.store(pulls, Ordering::Relaxed);
    }

    /// `activeDeadlineSeconds` of pods created from now on runs out `factor` times faster
    /// than real time (so a test can show what a deadline of minutes does, in seconds).
    pub fn speed_up_deadlines(&self, factor: u64) {
        self.cluster
            .deadline_speedup
            .store(factor.max(1), Ordering::Relaxed);
    }

    /// Pods created from now on are never bound to the node: they stay Pending with
    /// `PodScheduled` False, reason `Unschedulable` and the scheduler's `message` (no node
    /// with room, say), until deleted.
    pub fn leave_unschedulable(&self, message: &str) {
        *self
            .cluster
            .unschedulable
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(message.to_string());
    }

    /// Out of memory kills the whole container, its first process (the runner) included, as
    /// the kubelet's `memory.oom.group=1` does on cgroup v2 since Kubernetes 1.28; the
    /// container is then `terminated` with reason `OOMKilled`. On a cgroup v1 engine (as
    /// here) the kubelet turns the kernel's OOM killer off for the container
    /// (`memory.oom_control`), sees it under OOM, and kills it whole; on cgroup v2 it sets
    /// `memory.oom.group`.
    pub fn kill_whole_container_on_oom(&self) {
        self.cluster.oom_group.store(true, Ordering::Relaxed);
    }

    /// The stored pods of `namespace`, as the API would return them (with kind and apiVersion).
    pub async fn pods(&self, namespace: &str) -> Vec<Value> {
        self.cluster.with_store(|store| {
            store
                .list("pods", Some(namespace))
                .into_iter()
                .map(|(_, pod)| pod)
                .collect()
        })
    }

    /// One stored pod.
    pub async fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.cluster
            .with_store(|store| store.get(&Key::new("pods", namespace, name)).cloned())
    }

    /// Creates a namespace with these labels (e.g. `("pod-security.kubernetes.io/enforce",
    /// "restricted")`).
    pub async fn create_namespace(&self, name: &str, labels: &[(&str, &str)]) {
        api::create_namespace(&self.cluster, name, labels);
    }

    /// Stores any supported object (a RuntimeClass, a NetworkPolicy, a Namespace, or a Pod
    /// the kubelet will not run) as the API server would; returns it as stored.
    pub async fn apply(&self, object: Value) -> Value {
        api::store_object(&self.cluster, object).expect("a supported object")
    }

    /// Stores a pod that the double does not run (as if on another node): the owner a test
    /// names in its sandbox pods' ownerReferences. Returns its uid.
    pub async fn add_external_pod(&self, namespace: &str, name: &str) -> String {
        let pod = self
            .apply(json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"nodeName": "elsewhere", "containers": [{"name": "server", "image": "file-agent"}]},
                "status": {"phase": "Running"},
            }))
            .await;
        pod["metadata"]["uid"].as_str().expect("a uid").to_string()
    }

    /// Deletes a pod as `DELETE .../pods/NAME` would, with `grace` seconds.
    pub async fn delete_pod(&self, namespace: &str, name: &str, grace: u64) -> bool {
        api::delete_pod(&self.cluster, namespace, name, Some(grace)).is_ok()
    }

    /// The subprotocol each attach so far negotiated, in order.
    pub fn attach_protocols(&self) -> Vec<String> {
        self.cluster
            .attach_protocols
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What the node's log holds: every byte the pods' containers wrote to stdout and stderr
    /// (a real node writes it to `/var/log/pods` whether anyone attaches or not).
    pub fn node_log(&self) -> Vec<u8> {
        self.cluster
            .node_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every `terminated` container state the kubelet wrote, in order.
    pub fn terminated_states(&self) -> Vec<Value> {
        self.cluster
            .terminated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every request served, as `METHOD /path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.cluster
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops serving, ends every kubelet (their containers removed), then removes any
    /// container still carrying this double's label.
    pub async fn shutdown(mut self) {
        self.shut_down = true;
        self.server.abort();
        self.cluster.stop.cancel();
        self.cluster.kubelets.close();
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, self.cluster.kubelets.wait()).await;
        kubelet::remove_labelled(&self.cluster, None).await;
    }
}

impl Drop for KubeDouble {
    fn drop(&mut self) {
        if self.shut_down {
            return;
        }
        self.server.abort();
        self.cluster.stop.cancel();
        let label = format!("label={LABEL_KEY}={}", self.cluster.id);
        let listed = std::process::Command::new("docker")
            .args(["ps", "-aq", "--filter", &label])
            .output();
        if let Ok(listed) = listed {
            let ids = String::from_utf8_lossy(&listed.stdout).into_owned();
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f"])
                    .args(&ids)
                    .output();
            }
        }
    }
}
