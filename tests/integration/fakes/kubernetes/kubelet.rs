//! The kubelet of the double's one node: runs each pod bound to it as Docker containers on the
//! real engine, with the pod's settings translated one by one (see [`container_body`]), and
//! writes the pod's status as a kubelet would: Pending with `ContainerCreating` (or a waiting
//! reason such as `ErrImageNeverPull`, `CreateContainerConfigError`; a failed pull is retried
//! after a back-off, `ErrImagePull` then `ImagePullBackOff`), Running once every
//! container started, then Succeeded or Failed with each container's `terminated` state
//! (`exitCode`, `reason` `Completed`/`Error`/`OOMKilled`). It enforces `activeDeadlineSeconds`
//! (kills, `Failed`, reason `DeadlineExceeded`), stops containers gracefully on deletion
//! (`docker stop -t grace`) before the pod object goes, and on shutdown removes them.
//! Also the garbage collector of pods whose owner pods are all gone, and `pods/log`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::api::{self, ApiError};
use super::{Cluster, GC_PERIOD, Key, LABEL_KEY, NODE_NAME, now, timestamp};

/// The label with the pod's uid on each of its containers.
const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// The message a real kubelet writes for an exceeded `activeDeadlineSeconds`.
const DEADLINE_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";
/// The double's image pull back-off (a real kubelet starts at 10 s and doubles up to 5 min):
/// `ErrImagePull` for this long, then `ImagePullBackOff` for this long, then another pull.
const PULL_BACKOFF: Duration = Duration::from_secs(1);
/// How often a container whose OOM killer is off is checked for being under OOM.
const OOM_POLL: Duration = Duration::from_millis(50);

/// Why a container could not start: the waiting reason and message of its status.
#[derive(Debug)]
struct Waiting {
    reason: &'static str,
    message: String,
}

impl Waiting {
    fn config(message: impl Into<String>) -> Waiting {
        Waiting {
            reason: "CreateContainerConfigError",
            message: message.into(),
        }
    }
}

/// How the pod's run ended.
enum Ended {
    Completed,
    Deadline,
    Deleted(u64),
    Shutdown,
}

/// Starts the kubelet task of a pod just stored.
pub fn spawn(cluster: Arc<Cluster>, pod: &Value, deletion: watch::Receiver<Option<u64>>) {
    let kubelet = Kubelet {
        key: Key::new(
            "pods",
            pod["metadata"]["namespace"].as_str().unwrap_or_default(),
            pod["metadata"]["name"].as_str().unwrap_or_default(),
        ),
        uid: pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        pod: pod.clone(),
        cluster: cluster.clone(),
        creating: Arc::default(),
    };
    cluster.kubelets.spawn(kubelet.run(deletion));
}

/// Waits until a deletion is asked for; its grace period (0 when the pod went at once).
async fn deletion_asked(deletion: &mut watch::Receiver<Option<u64>>) -> u64 {
    loop {
        if let Some(grace) = *deletion.borrow_and_update() {
            return grace;
        }
        if deletion.changed().await.is_err() {
            return 0;
        }
    }
}

#[derive(Clone)]
struct Kubelet {
    cluster: Arc<Cluster>,
    key: Key,
    uid: String,
    /// The pod as created.
    pod: Value,
    /// Held while a container is being created: a create abandoned by a deletion still ends
    /// in a container, which the removal must wait for to see it.
    creating: Arc<tokio::sync::Mutex<()>>,
}

impl Kubelet {
    /// Changes the stored pod, if it is still this pod.
    fn update(&self, change: impl FnOnce(&mut Value)) {
        self.cluster
            .with_store(|store| store.update(&self.key, Some(&self.uid), change));
    }

    fn containers(&self) -> Vec<Value> {
        self.pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    async fn run(self, mut deletion: watch::Receiver<Option<u64>>) {
        if let Some(message) = self.cluster.unschedulable() {
            // The scheduler found no room: never bound, never run, until deleted.
            self.update(|pod| {
                pod["status"]["phase"] = json!("Pending");
                pod["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
                    "reason": "Unschedulable", "message": message,
                    "lastProbeTime": null, "lastTransitionTime": now()}]);
            });
            tokio::select! {
                _ = deletion_asked(&mut deletion) => self.finalize().await,
                () = self.cluster.stop.cancelled() => {}
            }
            return;
        }
        let containers = self.containers();
        self.update(|pod| {
            pod["spec"]["nodeName"] = json!(NODE_NAME);
            let status = &mut pod["status"];
            status["startTime"] = json!(now());
            status["hostIP"] = json!("127.0.0.1");
            status["hostIPs"] = json!([{"ip": "127.0.0.1"}]);
            status["conditions"] = conditions(false, None);
            status["containerStatuses"] = json!(
                containers
                    .iter()
                    .map(|c| container_status(
                        c,
                        json!({"waiting": {"reason": "ContainerCreating"}}),
                        false,
                        None
                    ))
                    .collect::<Vec<_>>()
            );
        });
        let deadline = self.pod["spec"]["activeDeadlineSeconds"].as_u64();
        let speedup = self.cluster.deadline_speedup();
        let deadline = async move {
            match deadline {
                Some(seconds) => {
                    tokio::time::sleep(Duration::from_secs(seconds) / speedup as u32).await
                }
                None => std::future::pending().await,
            }
        };
        let ended = tokio::select! {
            () = self.run_containers() => Ended::Completed,
            () = deadline => Ended::Deadline,
            grace = deletion_asked(&mut deletion) => Ended::Deleted(grace),
            () = self.cluster.stop.cancelled() => Ended::Shutdown,
        };
        match ended {
            Ended::Completed => {}
            Ended::Deadline => self.end_at_deadline().await,
            Ended::Deleted(grace) => {
                // As a kubelet does, the stopped containers' states are written before the
                // pod goes.
                self.stop_containers(grace).await;
                self.record_terminated(|status| {
                    status["conditions"] = conditions(false, Some("PodCompleted"));
                })
                .await;
                return self.finalize().await;
            }
            Ended::Shutdown => return self.remove_containers().await,
        }
        // Terminal: the containers stay (for logs) until the pod is deleted.
        tokio::select! {
            _ = deletion_asked(&mut deletion) => self.finalize().await,
            () = self.cluster.stop.cancelled() => self.remove_containers().await,
        }
    }

    /// Removes the containers, then the pod object (if it is still this pod).
    async fn finalize(&self) {
        self.remove_containers().await;
        self.cluster
            .with_store(|store| store.remove(&self.key, Some(&self.uid)));
    }

    /// Removes the pod's containers, once no create is in flight.
    async fn remove_containers(&self) {
        let _creating = self.creating.lock().await;
        remove_labelled(&self.cluster, Some(&self.uid)).await;
    }

    fn set_container(&self, index: usize, status: Value) {
        self.update(|pod| pod["status"]["containerStatuses"][index] = status);
    }

    /// Creates and starts every container, then waits for them all; stays pending forever when
    /// one cannot be created or started (as a kubelet keeps retrying).
    async fn run_containers(&self) {
        let containers = self.containers();
        // An image slow to pull: the pod waits, ContainerCreating, its startTime already set.
        tokio::time::sleep(self.cluster.start_delay()).await;
        let mut failing_pulls = self.cluster.failing_pulls();
        let mut created = Vec::new();
        for (index, container) in containers.iter().enumerate() {
            let result = loop {
                let result = if failing_pulls > 0 {
                    failing_pulls -= 1;
                    Err(Waiting {
                        reason: "ErrImagePull",
                        message: "failed to pull and unpack image: a test's registry hiccup"
                            .to_string(),
                    })
                } else {
                    self.create_in_task(container).await
                };
                // As a kubelet: a failed pull is retried after a back-off, forever.
                let Err(Waiting {
                    reason: "ErrImagePull",
                    message,
                }) = result
                else {
                    break result;
                };
                let waiting = |reason: &str, message: &str| {
                    container_status(
                        container,
                        json!({"waiting": {"reason": reason, "message": message}}),
                        false,
                        None,
                    )
                };
                self.set_container(index, waiting("ErrImagePull", &message));
                tokio::time::sleep(PULL_BACKOFF).await;
                let image = container["image"].as_str().unwrap_or_default();
                self.set_container(
                    index,
                    waiting(
                        "ImagePullBackOff",
                        &format!("Back-off pulling image \"{image}\": {message}"),
                    ),
                );
                tokio::time::sleep(PULL_BACKOFF).await;
            };
            match result {
                Ok((id, image_id)) => created.push((id, image_id)),
                Err(waiting) => {
                    self.set_container(
                        index,
                        container_status(
                            container,
                            json!({"waiting": {"reason": waiting.reason, "message": waiting.message}}),
                            false,
                            None,
                        ),
                    );
                    return std::future::pending().await;
                }
            }
        }
        for (index, (id, _)) in created.iter().enumerate() {
            let started = self.cluster.docker().start_container(id, None).await;
            if started.is_ok() && self.cluster.oom_group() {
                self.kill_whole_on_oom(id).await;
            }
            if let Err(error) = started {
                self.set_container(
                    index,
                    container_status(
                        &containers[index],
                        json!({"waiting": {"reason": "RunContainerError", "message": error.to_string()}}),
                        false,
                        None,
                    ),
                );
                return std::future::pending().await;
            }
        }
        let started_at = now();
        self.update(|pod| {
            pod["status"]["phase"] = json!("Running");
            pod["status"]["conditions"] = conditions(true, None);
            pod["status"]["containerStatuses"] = json!(
                containers
                    .iter()
                    .zip(&created)
                    .map(|(c, (id, image_id))| {
                        let mut status = container_status(
                            c,
                            json!({"running": {"startedAt": started_at}}),
                            true,
                            Some((id, image_id)),
                        );
                        status["started"] = json!(true);
                        status
                    })
                    .collect::<Vec<_>>()
            );
        });
        let waits = created.iter().enumerate().map(|(index, (id, image_id))| {
            let container = &containers[index];
            async move {
                let mut wait = self.cluster.docker().wait_container(id, None);
                // A non-zero exit is an error item here; the exit code is read from inspect.
                let _ = wait.next().await;
                let state = terminated_state(&self.cluster, id).await;
                let code = state["terminated"]["exitCode"].as_i64().unwrap_or(-1);
                self.set_container(
                    index,
                    container_status(container, state, false, Some((id, image_id))),
                );
                code
            }
        });
        let codes = futures_util::future::join_all(waits).await;
        let phase = if codes.iter().all(|c| *c == 0) {
            "Succeeded"
        } else {
            "Failed"
        };
        self.update(|pod| {
            pod["status"]["phase"] = json!(phase);
            pod["status"]["conditions"] = conditions(false, Some("PodCompleted"));
        });
    }

    /// Creates one container in its own task, which a deletion cannot abandon half-way.
    async fn create_in_task(&self, container: &Value) -> Result<(String, String), Waiting> {
        let creating = self.creating.clone().lock_owned().await;
        let (kubelet, spec) = (self.clone(), container.clone());
        tokio::spawn(async move {
            let result = kubelet.create(&spec).await;
            drop(creating);
            result
        })
        .await
        .unwrap_or_else(|error| {
            Err(Waiting {
                reason: "CreateContainerError",
                message: error.to_string(),
            })
        })
    }

    /// `memory.oom.group=1` for a started container: on cgroup v2 the kernel's own switch;
    /// on cgroup v1, the OOM killer turned off for the container and the container killed
    /// whole (`SIGKILL`) once it is under OOM. Either way no process of it outlives the OOM.
    async fn kill_whole_on_oom(&self, id: &str) {
        let Ok(inspected) = self.cluster.docker().inspect_container(id, None).await else {
            return;
        };
        let Some(pid) = inspected.state.and_then(|s| s.pid).filter(|pid| *pid > 0) else {
            return;
        };
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let v1 = cgroups.lines().find_map(|line| {
            line.split_once(":memory:")
                .map(|(_, path)| path.to_string())
        });
        if let Some(path) = v1 {
            let control = format!("/sys/fs/cgroup/memory{path}/memory.oom_control");
            if let Err(error) = std::fs::write(&control, "1") {
                panic!("the kube double cannot turn the OOM killer off ({control}): {error}");
            }
            let (cluster, id) = (self.cluster.clone(), id.to_string());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(OOM_POLL).await;
                    let Ok(state) = std::fs::read_to_string(&control) else {
                        return;
                    };
                    if state.lines().any(|line| line == "under_oom 1") {
                        cluster.mark_oom_group_killed(&id);
                        let options =
                            bollard::query_parameters::KillContainerOptionsBuilder::default()
                                .signal("SIGKILL")
                                .build();
                        let _ = cluster.docker().kill_container(&id, Some(options)).await;
                        return;
                    }
                }
            });
        } else if let Some(path) = cgroups.lines().find_map(|line| line.strip_prefix("0::")) {
            let group = format!("/sys/fs/cgroup{path}/memory.oom.group");
            if let Err(error) = std::fs::write(&group, "1") {
                panic!("the kube double cannot set {group}: {error}");
            }
            // The kernel kills the group and Docker flags the container OOMKilled.
        }
    }

    /// `activeDeadlineSeconds` passed: kill the containers, the pod Failed/DeadlineExceeded.
    async fn end_at_deadline(&self) {
        self.stop_containers(0).await;
        self.record_terminated(|status| {
            status["phase"] = json!("Failed");
            status["reason"] = json!("DeadlineExceeded");
            status["message"] = json!(DEADLINE_MESSAGE);
            status["conditions"] = conditions(false, Some("PodFailed"));
        })
        .await;
    }

    /// Writes each stopped container's `terminated` state into the pod's status, with
    /// `change` to the rest of the status.
    async fn record_terminated(&self, change: impl FnOnce(&mut Value)) {
        let ids = container_ids(&self.cluster, Some(&self.uid)).await;
        let mut states = HashMap::new();
        for (id, name) in ids {
            states.insert(name, (terminated_state(&self.cluster, &id).await, id));
        }
        let containers = self.containers();
        self.update(|pod| {
            change(&mut pod["status"]);
            for (index, container) in containers.iter().enumerate() {
                let name = container["name"].as_str().unwrap_or_default();
                if let Some((state, id)) = states.get(name) {
                    let image_id = pod["status"]["containerStatuses"][index]["imageID"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    pod["status"]["containerStatuses"][index] =
                        container_status(container, state.clone(), false, Some((id, &image_id)));
                }
            }
        });
    }

    /// `docker stop -t grace` on every container of the pod.
    async fn stop_containers(&self, grace: u64) {
        let ids = container_ids(&self.cluster, Some(&self.uid)).await;
        let stops = ids.iter().map(|(id, _)| {
            let options = StopContainerOptionsBuilder::default()
                .t(i32::try_from(grace).unwrap_or(i32::MAX))
                .build();
            self.cluster.docker().stop_container(id, Some(options))
        });
        // A container already stopped answers 304, which is fine.
        let _ = futures_util::future::join_all(stops).await;
    }

    /// Creates the Docker container of one pod container.
    async fn create(&self, container: &Value) -> Result<(String, String), Waiting> {
        let docker = self.cluster.docker();
        let image = container["image"].as_str().unwrap_or_default();
        let (engine_image, inspected) = resolve_image(docker, image).await.ok_or_else(|| {
            if container["imagePullPolicy"] == "Never" {
                Waiting {
                    reason: "ErrImageNeverPull",
                    message: format!(
                        "Container image \"{image}\" is not present with pull policy of Never"
                    ),
                }
            } else {
                Waiting {
                    reason: "ErrImagePull",
                    message: format!(
                        "the kube double pulls no image: \"{image}\" is not present on the engine"
                    ),
                }
            }
        })?;
        let image_id = if engine_image == image {
            inspected
                .repo_digests
                .as_ref()
                .and_then(|d| d.first().cloned())
                .or(inspected.id.clone())
                .unwrap_or_default()
        } else {
            image.to_string()
        };
        let image_user = inspected
            .config
            .as_ref()
            .and_then(|c| c.user.clone())
            .unwrap_or_default();
        let runtime = self.runtime()?;
        let mut body = container_body(
            &self.pod,
            container,
            &image_user,
            runtime,
            self.cluster.id(),
            self.cluster.pids_limit(),
        )?;
        body.image = Some(engine_image);
        // A cluster whose isolation fails: the pod joins a Docker network.
        if let (Some(network), Some(host)) = (self.cluster.pod_network(), body.host_config.as_mut())
        {
            host.network_mode = Some(network);
        }
        let name = format!(
            "k8s_{}_{}_{}_{}",
            container["name"].as_str().unwrap_or("c"),
            self.key.name,
            self.key.namespace,
            &super::random_suffix()
        );
        let created = docker
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                body,
            )
            .await
            .map_err(|e| Waiting {
                reason: "CreateContainerError",
                message: e.to_string(),
            })?;
        Ok((created.id, image_id))
    }

    /// The Docker runtime of the pod's RuntimeClass (its `handler`), if it names one.
    fn runtime(&self) -> Result<Option<String>, Waiting> {
        let Some(class) = self.pod["spec"]["runtimeClassName"].as_str() else {
            return Ok(None);
        };
        let handler = self.cluster.with_store(|store| {
            store
                .get(&Key::new("runtimeclasses", "", class))
                .and_then(|c| c["handler"].as_str().map(str::to_string))
        });
        handler
            .map(Some)
            .ok_or_else(|| Waiting::config(format!("RuntimeClass \"{class}\" not found")))
    }
}

/// The engine's reference for a pod's image, and its inspection. A reference pinned by digest,
/// `repo@sha256:D`, names the local image whose id is `sha256:D` and that carries a tag of
/// `repo` (a simplification: a registry's digest is the manifest's, not the image id).
async fn resolve_image(
    docker: &bollard::Docker,
    image: &str,
) -> Option<(String, bollard::models::ImageInspect)> {
    if let Ok(inspected) = docker.inspect_image(image).await {
        return Some((image.to_string(), inspected));
    }
    let (repository, digest) = image.split_once('@')?;
    let inspected = docker.inspect_image(digest).await.ok()?;
    let tagged = inspected.repo_tags.iter().flatten().any(|tag| {
        tag.rsplit_once(':')
            .is_some_and(|(repo, _)| repo == repository)
    });
    (tagged && inspected.id.as_deref() == Some(digest)).then(|| (digest.to_string(), inspected))
}

/// The pod's conditions: all true while running, Ready false otherwise.
fn conditions(ready: bool, reason: Option<&str>) -> Value {
    let at = now();
    let readiness = |kind: &str| {
        let mut condition = json!({"type": kind, "status": if ready { "True" } else { "False" },
            "lastProbeTime": null, "lastTransitionTime": at});
        if !ready {
            condition["reason"] = json!(reason.unwrap_or("ContainersNotReady"));
        }
        condition
    };
    json!([
        {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": at},
        {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": at},
        readiness("Ready"),
        readiness("ContainersReady"),
        {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": at},
    ])
}

/// One entry of `containerStatuses`.
fn container_status(
    container: &Value,
    state: Value,
    ready: bool,
    ids: Option<(&String, &String)>,
) -> Value {
    let mut status = json!({
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": ready,
        "started": false,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    });
    if let Some((id, image_id)) = ids {
        status["containerID"] = json!(format!("docker://{id}"));
        status["imageID"] = json!(image_id);
    }
    status
}

/// The `terminated` state of an exited container, from `docker inspect`; kept in the
/// cluster's record too ([`super::KubeDouble::terminated_states`]), since the kubelet writes it.
async fn terminated_state(cluster: &Cluster, id: &str) -> Value {
    let inspected = cluster.docker().inspect_container(id, None).await.ok();
    let state = inspected.and_then(|i| i.state).unwrap_or_default();
    let code = state.exit_code.unwrap_or(-1);
    let oom_killed = state.oom_killed == Some(true)
        || cluster.oom_group_killed(id)
        || (code == 137 && kernel_killed_for_memory(id));
    let reason = if oom_killed {
        "OOMKilled"
    } else if code == 0 {
        "Completed"
    } else {
        "Error"
    };
    let docker_time = |t: Option<String>| {
        t.as_deref()
            .and_then(file_agent::time::parse_rfc3339)
            .map(timestamp)
            .unwrap_or_else(now)
    };
    let terminated = json!({
        "exitCode": code,
        "reason": reason,
        "startedAt": docker_time(state.started_at),
        "finishedAt": docker_time(state.finished_at),
        "containerID": format!("docker://{id}"),
    });
    cluster
        .terminated
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(terminated.clone());
    json!({ "terminated": terminated })
}

/// Whether the kernel's log names this container in an OOM kill: what decides `OOMKilled`
/// when Docker's flag does not. dockerd sets that flag from containerd's OOM event, which on a
/// cgroup v1 host can arrive after the exit the kubelet already read (seen under load); the
/// kernel writes its `oom-kill:` record, with the container's memory cgroup (whose path holds
/// the container's id), before it sends the SIGKILL, so the record is there by the time the
/// exit is. Read from `/dev/kmsg` (root, as the double's tests run; a host that refuses it
/// leaves Docker's flag alone deciding).
pub fn kernel_killed_for_memory(id: &str) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(mut kmsg) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open("/dev/kmsg")
    else {
        return false;
    };
    // One record per read, from the oldest kept; EPIPE when the ring overwrote the next one
    // (read on), EAGAIN at the end.
    let mut record = vec![0u8; 16 * 1024];
    for _ in 0..100_000 {
        match kmsg.read(&mut record) {
            Ok(0) => return false,
            Ok(n) => {
                let text = String::from_utf8_lossy(&record[..n]);
                if text.contains(id) && text.contains("memcg=") {
                    return true;
                }
            }
            Err(error) if error.raw_os_error() == Some(nix::libc::EPIPE) => {}
            Err(_) => return false,
        }
    }
    false
}

/// A Kubernetes quantity (`500m`, `1.5`, `256Mi`, `1G`, `129e6`) in base units.
pub fn quantity(text: &str) -> Option<f64> {
    let text = text.trim();
    let suffixes: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (suffix, factor) in suffixes {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    text.parse::<f64>().ok()
}

fn quantity_of(value: &Value) -> Option<f64> {
    match value {
        Value::String(s) => quantity(s),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

/// The Docker settings equivalent to one container of `pod`: image, command and args, user
/// and group, `readOnlyRootFilesystem`, capabilities, `no-new-privileges` from
/// `allowPrivilegeEscalation: false`, seccomp (unconfined unless `RuntimeDefault`, as on
/// containerd), `emptyDir` mounts as tmpfs sized by `sizeLimit`, cpu and memory limits, the
/// kubelet's pids limit, network none, stdin/stdinOnce/tty, and the RuntimeClass's runtime.
/// What a real kubelet would run but this double must not (host namespaces, privileged,
/// hostPath and other volume types) is refused.
fn container_body(
    pod: &Value,
    container: &Value,
    image_user: &str,
    runtime: Option<String>,
    double_id: &str,
    pids_limit: i64,
) -> Result<ContainerCreateBody, Waiting> {
    let spec = &pod["spec"];
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let container_name = container["name"].as_str().unwrap_or_default();
    let whose = format!("(pod: \"{pod_name}_{namespace}\", container: {container_name})");
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[field] == true {
            return Err(Waiting::config(format!(
                "the kube double does not run pods with {field}"
            )));
        }
    }
    let context = &container["securityContext"];
    let pod_context = &spec["securityContext"];
    let setting = |field: &str| {
        if context[field].is_null() {
            pod_context[field].clone()
        } else {
            context[field].clone()
        }
    };
    if context["privileged"] == true {
        return Err(Waiting::config(
            "the kube double does not run privileged containers",
        ));
    }

    // The user, and the kubelet's runAsNonRoot check against it.
    let run_as_user = setting("runAsUser").as_i64();
    let run_as_group = setting("runAsGroup").as_i64();
    let (image_uid, image_gid) = match image_user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (image_user, None),
    };
    if setting("runAsNonRoot") == true {
        match run_as_user {
            Some(0) => {
                return Err(Waiting::config(format!(
                    "container's runAsUser breaks non-root policy {whose}"
                )));
            }
            Some(_) => {}
            None if image_uid.is_empty() || image_uid == "0" || image_uid == "root" => {
                return Err(Waiting::config(format!(
                    "container has runAsNonRoot and image will run as root {whose}"
                )));
            }
            None if image_uid.parse::<u32>().is_err() => {
                return Err(Waiting::config(format!(
                    "container has runAsNonRoot and image has non-numeric user ({image_uid}), cannot verify user is non-root {whose}"
                )));
            }
            None => {}
        }
    }
    let user = match (run_as_user, run_as_group) {
        (None, None) => None,
        (uid, gid) => {
            let uid = uid
                .map(|u| u.to_string())
                .unwrap_or_else(|| image_uid.to_string());
            let gid = gid.map(|g| g.to_string()).or(image_gid.map(str::to_string));
            Some(match gid {
                Some(gid) => format!("{uid}:{gid}"),
                None => uid,
            })
        }
    };
    let mut groups: Vec<String> = pod_context["supplementalGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| g.to_string())
        .collect();
    if let Some(fs_group) = pod_context["fsGroup"].as_i64() {
        groups.push(fs_group.to_string());
    }

    let mut security_opt = Vec::new();
    if context["allowPrivilegeEscalation"] == false {
        security_opt.push("no-new-privileges".to_string());
    }
    match setting("seccompProfile")["type"].as_str() {
        Some("RuntimeDefault") => {}
        Some("Localhost") => {
            return Err(Waiting::config(
                "the kube double has no Localhost seccomp profiles",
            ));
        }
        // Absent or Unconfined: containerd runs the container unconfined.
        _ => security_opt.push("seccomp=unconfined".to_string()),
    }
    let capability_list = |field: &str| -> Option<Vec<String>> {
        context["capabilities"][field].as_array().map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
    };

    // Volumes: emptyDir as tmpfs, the ServiceAccount token skipped, anything else refused.
    let volumes: HashMap<&str, &Value> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| Some((v["name"].as_str()?, v)))
        .collect();
    let mut tmpfs = HashMap::new();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let volume_name = mount["name"].as_str().unwrap_or_default();
        let path = mount["mountPath"].as_str().unwrap_or_default();
        let Some(volume) = volumes.get(volume_name) else {
            return Err(Waiting::config(format!(
                "volume \"{volume_name}\" is mounted but not defined"
            )));
        };
        if volume["emptyDir"].is_object() {
            let mut options = vec![
                if mount["readOnly"] == true {
                    "ro"
                } else {
                    "rw"
                }
                .to_string(),
                "exec".to_string(),
                "mode=0777".to_string(),
            ];
            if let Some(size) = quantity_of(&volume["emptyDir"]["sizeLimit"]) {
                options.push(format!("size={}", size as u64));
            }
            tmpfs.insert(path.to_string(), options.join(","));
        } else if volume["projected"].is_object() && volume_name.starts_with("kube-api-access-") {
            continue;
        } else {
            return Err(Waiting::config(format!(
                "the kube double mounts only emptyDir volumes (volume \"{volume_name}\")"
            )));
        }
    }

    let limits = &container["resources"]["limits"];
    let memory = quantity_of(&limits["memory"]).map(|m| m as i64);
    let nano_cpus = quantity_of(&limits["cpu"]).map(|c| (c * 1e9) as i64);

    // The environment a real node gives every container, then the container's own.
    let mut env: Vec<String> = [
        "KUBERNETES_SERVICE_HOST=10.96.0.1",
        "KUBERNETES_SERVICE_PORT=443",
        "KUBERNETES_SERVICE_PORT_HTTPS=443",
        "KUBERNETES_PORT=tcp://10.96.0.1:443",
        "KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
        "KUBERNETES_PORT_443_TCP_PROTO=tcp",
        "KUBERNETES_PORT_443_TCP_PORT=443",
        "KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for variable in container["env"].as_array().into_iter().flatten() {
        let name = variable["name"].as_str().unwrap_or_default();
        let value = if let Some(path) = variable["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            let found = path.split('.').fold(pod, |v, part| &v[part]);
            found.as_str().unwrap_or_default().to_string()
        } else {
            variable["value"].as_str().unwrap_or_default().to_string()
        };
        env.push(format!("{name}={value}"));
    }

    let strings = |field: &str| -> Option<Vec<String>> {
        container[field].as_array().map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
    };
    let stdin = container["stdin"] == true;
    let labels = HashMap::from([
        (LABEL_KEY.to_string(), double_id.to_string()),
        (
            POD_UID_LABEL.to_string(),
            pod["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ),
        ("io.kubernetes.pod.name".to_string(), pod_name.to_string()),
        (
            "io.kubernetes.pod.namespace".to_string(),
            namespace.to_string(),
        ),
        (
            "io.kubernetes.container.name".to_string(),
            container_name.to_string(),
        ),
    ]);
    Ok(ContainerCreateBody {
        image: container["image"].as_str().map(str::to_string),
        entrypoint: strings("command"),
        cmd: strings("args"),
        working_dir: container["workingDir"].as_str().map(str::to_string),
        env: Some(env),
        user,
        hostname: Some(pod_name.chars().take(63).collect()),
        tty: Some(container["tty"] == true),
        open_stdin: Some(stdin),
        stdin_once: Some(container["stdinOnce"] == true),
        attach_stdin: Some(stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        network_disabled: None,
        labels: Some(labels),
        host_config: Some(HostConfig {
            network_mode: Some("none".to_string()),
            readonly_rootfs: Some(context["readOnlyRootFilesystem"] == true),
            cap_drop: capability_list("drop"),
            cap_add: capability_list("add"),
            security_opt: Some(security_opt),
            group_add: (!groups.is_empty()).then_some(groups),
            tmpfs: Some(tmpfs),
            memory,
            memory_swap: memory,
            nano_cpus,
            pids_limit: Some(pids_limit),
            runtime,
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The containers with this double's label (and this pod uid's, when given): (id, container
/// name in the pod).
async fn container_ids(cluster: &Cluster, uid: Option<&str>) -> Vec<(String, String)> {
    let mut labels = vec![format!("{LABEL_KEY}={}", cluster.id())];
    if let Some(uid) = uid {
        labels.push(format!("{POD_UID_LABEL}={uid}"));
    }
    let filters = HashMap::from([("label", labels)]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    cluster
        .docker()
        .list_containers(Some(options))
        .await
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| {
            let name = c
                .labels
                .as_ref()
                .and_then(|l| l.get("io.kubernetes.container.name").cloned())
                .unwrap_or_default();
            Some((c.id?, name))
        })
        .collect()
}

/// Force-removes the double's containers (of one pod, when `uid` is given).
pub async fn remove_labelled(cluster: &Cluster, uid: Option<&str>) {
    let ids = container_ids(cluster, uid).await;
    // The node's log keeps what each container wrote, after the container is gone.
    for (id, _) in &ids {
        let options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .follow(false)
            .build();
        let mut logged = Vec::new();
        let mut stream = cluster.docker().logs(id, Some(options));
        while let Some(Ok(chunk)) = stream.next().await {
            logged.extend_from_slice(&chunk.into_bytes());
        }
        cluster
            .node_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(&logged);
    }
    let removals = ids.iter().map(|(id, _)| {
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        cluster.docker().remove_container(id, Some(options))
    });
    let _ = futures_util::future::join_all(removals).await;
}

/// The container a request names, or the pod's first (as the API server defaults it).
pub fn container_name(pod: &Value, asked: Option<&str>) -> String {
    asked
        .or(pod["spec"]["containers"][0]["name"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The Docker id of a pod's container (`container`, or its first), once it has one.
pub fn container_id(pod: &Value, container: Option<&str>) -> Option<String> {
    let name = container_name(pod, container);
    pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)?["containerID"]
        .as_str()?
        .strip_prefix("docker://")
        .map(str::to_string)
}

/// `GET pods/{name}/log`: what the container wrote so far, stdout and stderr.
pub async fn logs(
    cluster: &Cluster,
    pod: &Value,
    container: Option<&String>,
) -> Result<String, ApiError> {
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let name = container_name(pod, container.map(String::as_str));
    let Some(id) = container_id(pod, Some(&name)) else {
        return Err(ApiError::bad_request(format!(
            "container \"{name}\" in pod \"{pod_name}\" is waiting to start: ContainerCreating"
        )));
    };
    let options = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .follow(false)
        .build();
    let mut text = String::new();
    let mut stream = cluster.docker().logs(&id, Some(options));
    while let Some(Ok(chunk)) = stream.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
    }
    Ok(text)
}

/// Every [`GC_PERIOD`], deletes the pods all of whose owners (by uid) are gone.
pub fn spawn_garbage_collector(cluster: Arc<Cluster>) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(GC_PERIOD) => {}
                () = cluster.stop.cancelled() => return,
            }
            let orphans: Vec<Key> = cluster.with_store(|store| {
                let uids: std::collections::HashSet<String> = store
                    .all()
                    .filter_map(|(_, o)| o["metadata"]["uid"].as_str().map(str::to_string))
                    .collect();
                store
                    .list("pods", None)
                    .into_iter()
                    .filter(|(_, pod)| {
                        let owners = pod["metadata"]["ownerReferences"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default();
                        !owners.is_empty()
                            && pod["metadata"]["deletionTimestamp"].is_null()
                            && owners
                                .iter()
                                .all(|o| o["uid"].as_str().is_none_or(|uid| !uids.contains(uid)))
                    })
                    .map(|(key, _)| key)
                    .collect()
            });
            for key in orphans {
                let _ = api::delete_pod(&cluster, &key.namespace, &key.name, None);
            }
        }
    });
}
