//! Tests of the Kubernetes API double itself (`fakes::kubernetes`), with clients nobody here
//! wrote: kubectl 1.32 (`get`, `delete`, `run -i` over the WebSocket attach) and plain HTTP.
//! Pods run as containers of the real sandbox image on the real engine; every test ends by
//! shutting the double down and asserting that no container with its label is left.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::with_timeout;
use crate::fakes::kubernetes::{KubeDouble, TOKEN};

/// The sandbox image's reference (local: the double pulls nothing).
fn image() -> String {
    file_agent::config::SandboxConfig::from_lookup(|_| None)
        .unwrap()
        .image
}

/// A kubectl run in a scratch home, against the double's kubeconfig; (status, stdout, stderr).
async fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let home = kubeconfig.parent().unwrap();
    let mut command = tokio::process::Command::new("kubectl");
    command
        .args(args)
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("kubectl runs");
    if let Some(text) = stdin {
        use tokio::io::AsyncWriteExt;
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(text.as_bytes()).await.unwrap();
        drop(pipe);
    }
    let output = with_timeout(child.wait_with_output()).await.unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `kubectl run NAME -i --restart=Never` of the sandbox image running `python3 -c script`,
/// with `stdin` piped in.
async fn kubectl_run_python(
    kubeconfig: &Path,
    name: &str,
    script: &str,
    stdin: Option<&str>,
) -> (i32, String, String) {
    let image = format!("--image={}", image());
    let args = [
        "run",
        name,
        "-i",
        "--restart=Never",
        &image,
        "--image-pull-policy=Never",
        "--command",
        "--",
        "python3",
        "-c",
        script,
    ];
    kubectl(kubeconfig, &args, stdin).await
}

/// A started double and a kubeconfig for `namespace` in a scratch folder.
async fn double_with_kubeconfig(namespace: &str) -> (KubeDouble, tempfile::TempDir, PathBuf) {
    let double = with_timeout(KubeDouble::start()).await;
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = home.path().join("kubeconfig");
    double.write_kubeconfig(&kubeconfig, namespace);
    (double, home, kubeconfig)
}

/// Raw HTTP to the double, with its token.
async fn request(
    double: &KubeDouble,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut request = client
        .request(method, format!("{}{path}", double.url()))
        .bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = with_timeout(request.send()).await.unwrap();
    let status = response.status().as_u16();
    let text = with_timeout(response.text()).await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `GET path`; (status, body).
async fn get(double: &KubeDouble, path: &str) -> (u16, Value) {
    request(double, reqwest::Method::GET, path, None).await
}

/// `DELETE path`; (status, body).
async fn delete(double: &KubeDouble, path: &str) -> (u16, Value) {
    request(double, reqwest::Method::DELETE, path, None).await
}

/// Creates `pod` in `namespace` over HTTP; (status, body).
async fn create_pod(double: &KubeDouble, namespace: &str, pod: Value) -> (u16, Value) {
    let path = format!("/api/v1/namespaces/{namespace}/pods");
    request(double, reqwest::Method::POST, &path, Some(pod)).await
}

/// What a SelfSubjectAccessReview of `verb` on `resource`/`subresource` answers.
async fn allowed(double: &KubeDouble, verb: &str, resource: &str, subresource: &str) -> bool {
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": "default", "verb": verb, "resource": resource, "subresource": subresource}}});
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let (status, body) = request(double, reqwest::Method::POST, path, Some(review)).await;
    assert_eq!(status, 201, "{body}");
    body["status"]["allowed"].as_bool().unwrap()
}

/// Waits until the pod satisfies `done`; returns it.
async fn until_pod(
    double: &KubeDouble,
    namespace: &str,
    name: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    with_timeout(async {
        loop {
            if let Some(pod) = double.pod(namespace, name).await
                && done(&pod)
            {
                return pod;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// Waits until the pod is gone.
async fn until_gone(double: &KubeDouble, namespace: &str, name: &str) {
    with_timeout(async {
        while double.pod(namespace, name).await.is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
}

/// The Docker containers carrying `label` (`key=value`).
async fn labelled(label: &str) -> Vec<bollard::models::ContainerSummary> {
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let filters = std::collections::HashMap::from([("label", vec![label.to_string()])]);
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    with_timeout(docker.list_containers(Some(options)))
        .await
        .unwrap()
}

/// The double's label, as `key=value`.
fn label_of(double: &KubeDouble) -> String {
    let (key, value) = double.label();
    format!("{key}={value}")
}

/// The Docker containers carrying the double's label.
async fn containers_of(double: &KubeDouble) -> Vec<bollard::models::ContainerSummary> {
    labelled(&label_of(double)).await
}

/// `docker inspect` of the one container of pod `name`.
async fn inspect_container_of(
    double: &KubeDouble,
    name: &str,
) -> bollard::models::ContainerInspectResponse {
    let containers = containers_of(double).await;
    let container = containers
        .iter()
        .find(|c| c.labels.as_ref().unwrap()["io.kubernetes.pod.name"] == name)
        .expect("the pod's container");
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    with_timeout(docker.inspect_container(container.id.as_deref().unwrap(), None))
        .await
        .unwrap()
}

/// Shuts the double down and asserts that it left no container.
async fn shutdown_and_assert_clean(double: KubeDouble) {
    let label = label_of(&double);
    with_timeout(double.shutdown()).await;
    let left = labelled(&label).await;
    assert!(left.is_empty(), "containers left: {left:?}");
    // A container whose create was in flight at shutdown would appear only now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let late = labelled(&label).await;
    assert!(
        late.is_empty(),
        "containers created after shutdown: {late:?}"
    );
}

/// A pod spec that passes Pod Security "restricted", running `script` in Python.
fn restricted_pod(name: &str, script: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kube-double-test"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 10001, "runAsGroup": 10001,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "main",
                "image": image(),
                "imagePullPolicy": "Never",
                "command": ["python3", "-c", script],
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
                "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}},
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }],
            "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}],
        },
    })
}

#[tokio::test]
async fn a_pod_runs_as_a_locked_down_container_and_reports_its_exit() {
    let double = with_timeout(KubeDouble::start()).await;
    double
        .create_namespace(
            "sandbox",
            &[("pod-security.kubernetes.io/enforce", "restricted")],
        )
        .await;
    let script = "import os; open('/tmp/x', 'w').write('ok'); print(os.getuid(), os.getgid(), open('/tmp/x').read()); raise SystemExit(3)";
    let (status, created) = request(
        &double,
        reqwest::Method::POST,
        "/api/v1/namespaces/sandbox/pods",
        Some(restricted_pod("runner", script)),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"]["phase"], "Pending");
    assert_eq!(
        created["spec"]["containers"][0]["terminationMessagePath"],
        "/dev/termination-log"
    );
    assert_eq!(
        created["spec"]["containers"][0]["resources"]["requests"]["memory"],
        "256Mi"
    );
    assert!(
        created["spec"]["containers"][0].get("ports").is_none(),
        "{created}"
    );
    assert!(
        created["spec"]["volumes"].as_array().unwrap().len() == 1,
        "no token volume: {created}"
    );

    let pod = until_pod(&double, "sandbox", "runner", |p| {
        p["status"]["phase"] == "Failed"
    })
    .await;
    let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 3, "{pod}");
    assert_eq!(terminated["reason"], "Error");
    assert!(
        pod["status"]["containerStatuses"][0]["imageID"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );

    let (status, log) = get(&double, "/api/v1/namespaces/sandbox/pods/runner/log").await;
    assert_eq!(status, 200);
    assert_eq!(log, Value::String("10001 10001 ok\n".to_string()));

    // What Docker was told.
    assert_eq!(containers_of(&double).await.len(), 1);
    let inspected = inspect_container_of(&double, "runner").await;
    let host = inspected.host_config.unwrap();
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(host.readonly_rootfs, Some(true));
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
    assert_eq!(
        host.security_opt,
        Some(vec!["no-new-privileges".to_string()])
    );
    assert_eq!(host.memory, Some(256 * 1024 * 1024));
    assert_eq!(host.nano_cpus, Some(500_000_000));
    assert_eq!(
        host.pids_limit,
        Some(crate::fakes::kubernetes::DEFAULT_PIDS_LIMIT)
    );
    assert!(host.tmpfs.unwrap()["/tmp"].contains(&format!("size={}", 16 * 1024 * 1024)));
    assert_eq!(
        inspected.config.unwrap().user.as_deref(),
        Some("10001:10001")
    );

    // Deleting the pod removes its container.
    let (status, deleted) = delete(&double, "/api/v1/namespaces/sandbox/pods/runner").await;
    assert_eq!(status, 200, "{deleted}");
    until_gone(&double, "sandbox", "runner").await;
    assert!(containers_of(&double).await.is_empty());
    let (status, missing) = get(&double, "/api/v1/namespaces/sandbox/pods/runner").await;
    assert_eq!(status, 404);
    assert_eq!(missing["reason"], "NotFound");
    assert_eq!(missing["message"], "pods \"runner\" not found");
    shutdown_and_assert_clean(double).await;
}

#[tokio::test]
async fn kubectl_gets_deletes_and_runs_with_attach() {
    let (double, _home, kubeconfig) = double_with_kubeconfig("default").await;

    // kubectl run -i: create, wait for Running, attach over WebSocket, stdin to the container,
    // its output back, then the exit read from the pod's status.
    let script = "import sys; print(sys.stdin.read().upper(), end='')";
    let (code, stdout, stderr) =
        kubectl_run_python(&kubeconfig, "shout", script, Some("hello from kubectl\n")).await;
    assert_eq!(
        code,
        0,
        "stdout: {stdout}\nstderr: {stderr}\nrequests: {:#?}",
        double.requests()
    );
    assert!(
        stdout.contains("HELLO FROM KUBECTL"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(
        double.attach_protocols(),
        vec!["v5.channel.k8s.io".to_string()]
    );
    assert!(
        double
            .requests()
            .iter()
            .any(|r| r.starts_with("GET /api/v1/namespaces/default/pods/shout/attach")),
        "{:#?}",
        double.requests()
    );
    let pod = until_pod(&double, "default", "shout", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(pod["spec"]["containers"][0]["stdinOnce"], true);

    // A failing command's exit code comes back through kubectl.
    let (code, _, stderr) = kubectl_run_python(
        &kubeconfig,
        "fails",
        "import sys; sys.stdin.read(); sys.exit(7)",
        Some(""),
    )
    .await;
    assert_eq!(code, 7, "stderr: {stderr}");

    // kubectl get pods prints the table the double serves.
    let (code, stdout, stderr) = kubectl(&kubeconfig, &["get", "pods"], None).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{stdout}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("shout ") && l.contains("Completed")),
        "{stdout}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("fails ") && l.contains("Error")),
        "{stdout}"
    );
    let (code, stdout, _) = kubectl(
        &kubeconfig,
        &["get", "pod", "shout", "-o", "jsonpath={.status.phase}"],
        None,
    )
    .await;
    assert_eq!((code, stdout.as_str()), (0, "Succeeded"));
    let (code, stdout, _) = kubectl(&kubeconfig, &["logs", "shout"], None).await;
    assert_eq!((code, stdout.as_str()), (0, "HELLO FROM KUBECTL\n"));

    // kubectl delete pod waits for the pod to go (a watch), and its container goes with it.
    let (code, stdout, stderr) = kubectl(&kubeconfig, &["delete", "pod", "shout"], None).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(stdout.contains("pod \"shout\" deleted"), "{stdout}");
    assert!(double.pod("default", "shout").await.is_none());
    let (code, _, stderr) = kubectl(&kubeconfig, &["delete", "pod", "shout"], None).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("pods \"shout\" not found"), "{stderr}");
    let (code, _, _) = kubectl(
        &kubeconfig,
        &["delete", "pod", "fails", "--grace-period=0", "--force"],
        None,
    )
    .await;
    assert_eq!(code, 0);
    let (_, stdout, stderr) = kubectl(&kubeconfig, &["get", "pods"], None).await;
    assert!(
        stdout.is_empty() && stderr.contains("No resources found in default namespace."),
        "{stdout}{stderr}"
    );
    shutdown_and_assert_clean(double).await;
}

#[tokio::test]
async fn a_restricted_namespace_refuses_a_pod_with_the_violations_named() {
    let (double, _home, kubeconfig) = double_with_kubeconfig("locked").await;
    double
        .create_namespace(
            "locked",
            &[("pod-security.kubernetes.io/enforce", "restricted")],
        )
        .await;
    let (code, _, stderr) = kubectl(
        &kubeconfig,
        &[
            "run",
            "loose",
            "--restart=Never",
            &format!("--image={}", image()),
        ],
        None,
    )
    .await;
    assert_eq!(code, 1);
    assert_eq!(
        stderr.trim(),
        "Error from server (Forbidden): pods \"loose\" is forbidden: violates PodSecurity \"restricted:latest\": \
         allowPrivilegeEscalation != false (container \"loose\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"loose\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"loose\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"loose\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    assert!(double.pods("locked").await.is_empty());

    // Over HTTP: the Status object, code and reason; a root user and a hostPath named too.
    let mut pod = restricted_pod("rooted", "pass");
    pod["spec"]["securityContext"]["runAsUser"] = json!(0);
    pod["spec"]["volumes"] = json!([{"name": "host", "hostPath": {"path": "/"}}]);
    pod["spec"]["containers"][0]["volumeMounts"] = json!([]);
    let (status, body) = request(
        &double,
        reqwest::Method::POST,
        "/api/v1/namespaces/locked/pods",
        Some(pod),
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(body["code"], 403);
    assert_eq!(
        body["message"],
        "pods \"rooted\" is forbidden: violates PodSecurity \"restricted:latest\": \
         restricted volume types (volume \"host\" uses restricted volume type \"hostPath\"), \
         runAsUser=0 (pod must not set runAsUser=0)"
    );

    // The same pod in an unlabelled namespace is admitted; a second create is a conflict.
    let (status, _) = create_pod(&double, "default", restricted_pod("twice", "pass")).await;
    assert_eq!(status, 201);
    let (status, body) = create_pod(&double, "default", restricted_pod("twice", "pass")).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );
    let (status, body) = request(
        &double,
        reqwest::Method::POST,
        "/api/v1/namespaces/nowhere/pods",
        Some(restricted_pod("x", "pass")),
    )
    .await;
    assert_eq!(
        (status, body["message"].as_str()),
        (404, Some("namespaces \"nowhere\" not found"))
    );
    shutdown_and_assert_clean(double).await;
}

#[tokio::test]
async fn active_deadline_kills_and_owner_gc_collects() {
    let double = with_timeout(KubeDouble::start()).await;
    let sleeper = "import time; time.sleep(120)";

    // activeDeadlineSeconds: the kubelet kills the pod, Failed with DeadlineExceeded.
    let mut pod = restricted_pod("late", sleeper);
    pod["spec"]["activeDeadlineSeconds"] = json!(2);
    let (status, _) = create_pod(&double, "default", pod).await;
    assert_eq!(status, 201);
    until_pod(&double, "default", "late", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let pod = until_pod(&double, "default", "late", |p| {
        p["status"]["phase"] == "Failed"
    })
    .await;
    assert_eq!(pod["status"]["reason"], "DeadlineExceeded", "{pod}");
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 137,
        "{pod}"
    );

    // Owner references: when the owner pod goes, its dependents are collected.
    let owner = double.add_external_pod("default", "server").await;
    let mut pod = restricted_pod("owned", sleeper);
    pod["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "server", "uid": owner}]);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(1);
    let (status, _) = create_pod(&double, "default", pod).await;
    assert_eq!(status, 201);
    until_pod(&double, "default", "owned", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    tokio::time::sleep(crate::fakes::kubernetes::GC_PERIOD * 3).await;
    assert!(
        double.pod("default", "owned").await.is_some(),
        "collected while its owner lives"
    );
    let url = format!(
        "{}/api/v1/namespaces/default/pods?watch=1&fieldSelector=metadata.name%3Downed",
        double.url()
    );
    let watch = with_timeout(reqwest::Client::new().get(url).bearer_auth(TOKEN).send())
        .await
        .unwrap();
    assert!(double.delete_pod("default", "server", 0).await);
    until_gone(&double, "default", "owned").await;
    // Graceful: the deletion is marked first, and the container's end is written before the
    // pod goes. Python as PID 1 ignores SIGTERM (no handler), so the grace ends in SIGKILL.
    let events = watch_objects(watch, |events| {
        events.iter().any(|e| e["type"] == "DELETED")
    })
    .await;
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "MODIFIED"
                && !e["object"]["metadata"]["deletionTimestamp"].is_null()),
        "{events:?}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "DELETED");
    let terminated = &last["object"]["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 137, "{last}");
    let left: Vec<_> = containers_of(&double)
        .await
        .into_iter()
        .filter(|c| c.labels.as_ref().unwrap()["io.kubernetes.pod.name"] == "owned")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    shutdown_and_assert_clean(double).await;
}

/// Attaches to `pod` over a raw WebSocket offering `protocols`, sends `stdin` (then, under v5,
/// closes it with channel 255); (stdout, stderr, the Status on channel 3, negotiated protocol).
async fn attach_raw(
    double: &KubeDouble,
    pod: &str,
    protocols: &str,
    stdin: &[u8],
) -> (String, String, Value, String) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    let url = format!(
        "{}/api/v1/namespaces/default/pods/{pod}/attach?container=main&stdin=true&stdout=true&stderr=true",
        double.url().replace("http://", "ws://")
    );
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", protocols.parse().unwrap());
    request
        .headers_mut()
        .insert("Authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (mut socket, response) = with_timeout(tokio_tungstenite::connect_async(request))
        .await
        .unwrap();
    let negotiated = response.headers()["Sec-WebSocket-Protocol"]
        .to_str()
        .unwrap()
        .to_string();
    let mut frame = vec![0u8];
    frame.extend_from_slice(stdin);
    with_timeout(socket.send(Message::binary(frame)))
        .await
        .unwrap();
    if negotiated.starts_with("v5") {
        with_timeout(socket.send(Message::binary(vec![255u8, 0])))
            .await
            .unwrap();
    }
    let (mut stdout, mut stderr, mut status) = (Vec::new(), Vec::new(), Value::Null);
    while let Some(message) = with_timeout(socket.next()).await {
        match message.unwrap() {
            Message::Binary(data) => match data[0] {
                1 => stdout.extend_from_slice(&data[1..]),
                2 => stderr.extend_from_slice(&data[1..]),
                3 if data.len() > 1 => status = serde_json::from_slice(&data[1..]).unwrap(),
                _ => {}
            },
            Message::Close(_) => break,
            _ => {}
        }
    }
    (
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
        status,
        negotiated,
    )
}

/// A pod whose container keeps stdin open for one attach, running `script`.
async fn stdin_pod(double: &KubeDouble, name: &str, script: &str) {
    let mut pod = restricted_pod(name, script);
    pod["spec"]["containers"][0]["stdin"] = json!(true);
    pod["spec"]["containers"][0]["stdinOnce"] = json!(true);
    let (status, body) = create_pod(double, "default", pod).await;
    assert_eq!(status, 201, "{body}");
    until_pod(double, "default", name, |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
}

#[tokio::test]
async fn attach_speaks_v5_with_half_close_and_v4() {
    let double = with_timeout(KubeDouble::start()).await;
    // v5 preferred when both are offered (as kube-rs offers them); channel 255 ends stdin and
    // the output written after that still arrives, then the Status.
    let script = "import sys; data = sys.stdin.read(); print(data.upper()); print('after eof', file=sys.stderr)";
    stdin_pod(&double, "five", script).await;
    let (stdout, stderr, status, negotiated) = attach_raw(
        &double,
        "five",
        "v5.channel.k8s.io, v4.channel.k8s.io",
        b"half closed",
    )
    .await;
    assert_eq!(negotiated, "v5.channel.k8s.io");
    assert_eq!(stdout, "HALF CLOSED\n");
    assert_eq!(stderr, "after eof\n");
    assert_eq!(status, json!({"metadata": {}, "status": "Success"}));

    // v4: no half-close, so the script reads a known length.
    let script =
        "import sys; data = sys.stdin.read(4); print(data.upper()); print('four', file=sys.stderr)";
    stdin_pod(&double, "four", script).await;
    let (stdout, stderr, status, negotiated) =
        attach_raw(&double, "four", "v4.channel.k8s.io", b"abcd").await;
    assert_eq!(negotiated, "v4.channel.k8s.io");
    assert_eq!((stdout.as_str(), stderr.as_str()), ("ABCD\n", "four\n"));
    assert_eq!(status["status"], "Success");
    assert_eq!(
        double.attach_protocols(),
        vec![
            "v5.channel.k8s.io".to_string(),
            "v4.channel.k8s.io".to_string()
        ]
    );
    until_pod(&double, "default", "four", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;

    // A completed pod cannot be attached to.
    let (status, body) = get(
        &double,
        "/api/v1/namespaces/default/pods/four/attach?stdout=true",
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        body["message"],
        "cannot attach a container in a completed pod; current phase is Succeeded"
    );
    shutdown_and_assert_clean(double).await;
}

#[tokio::test]
async fn knobs_rbac_mutation_runtime_class_and_oom() {
    let double = with_timeout(KubeDouble::start()).await;

    // SelfSubjectAccessReview answers per deny_verbs, and the denied request itself gets 403.
    assert!(allowed(&double, "delete", "pods", "").await);
    double.deny_verbs(&["delete", "get pods/attach"]);
    assert!(!allowed(&double, "delete", "pods", "").await);
    assert!(!allowed(&double, "get", "pods", "attach").await);
    assert!(allowed(&double, "get", "pods", "").await);
    let (status, body) = delete(&double, "/api/v1/namespaces/default/pods/any").await;
    assert_eq!(status, 403);
    assert_eq!(
        body["message"],
        "pods \"any\" is forbidden: User \"kube-double\" cannot delete resource \"pods\" in API group \"\" in the namespace \"default\""
    );

    // A wrong token is refused.
    let response = with_timeout(
        reqwest::Client::new()
            .get(format!("{}/api/v1/namespaces/default/pods", double.url()))
            .bearer_auth("wrong")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status().as_u16(), 401);

    // The mutation hook sees every pod before it is stored; the RuntimeClass's handler is
    // the Docker runtime; an unknown RuntimeClass is refused.
    double.mutate_pods(|pod| {
        pod["spec"]["containers"][0]["securityContext"]
            .as_object_mut()
            .unwrap()
            .remove("readOnlyRootFilesystem");
    });
    double.set_pids_limit(64);
    let mut pod = restricted_pod("gvisor", "print('hi')");
    pod["spec"]["runtimeClassName"] = json!("gvisor");
    let (status, body) = create_pod(&double, "default", pod.clone()).await;
    assert_eq!(status, 403);
    assert_eq!(
        body["message"],
        "pods \"gvisor\" is forbidden: pod rejected: RuntimeClass \"gvisor\" not found"
    );
    double
        .apply(json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"}, "handler": "runsc"}))
        .await;
    let (status, body) = create_pod(&double, "default", pod).await;
    assert_eq!(status, 201, "{body}");
    assert!(body["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"].is_null());
    let pod = until_pod(&double, "default", "gvisor", |p| {
        p["status"]["phase"] != "Pending" && p["status"]["phase"] != "Running"
    })
    .await;
    assert_eq!(pod["status"]["phase"], "Succeeded", "{pod}");
    let inspected = inspect_container_of(&double, "gvisor").await;
    let host = inspected.host_config.unwrap();
    assert_eq!(host.runtime.as_deref(), Some("runsc"));
    assert_eq!(host.pids_limit, Some(64));
    assert_eq!(host.readonly_rootfs, Some(false));

    // An image the engine lacks is not pulled: the container waits.
    let mut pod = restricted_pod("absent", "pass");
    pod["spec"]["containers"][0]["image"] = json!("kube-double-absent:1");
    let (status, _) = create_pod(&double, "default", pod).await;
    assert_eq!(status, 201);
    let pod = until_pod(&double, "default", "absent", |p| {
        !p["status"]["containerStatuses"][0]["state"]["waiting"]["message"].is_null()
    })
    .await;
    let waiting = &pod["status"]["containerStatuses"][0]["state"]["waiting"];
    assert_eq!(waiting["reason"], "ErrImageNeverPull", "{pod}");
    assert_eq!(
        waiting["message"],
        "Container image \"kube-double-absent:1\" is not present with pull policy of Never"
    );
    assert_eq!(pod["status"]["phase"], "Pending");

    // An image pinned by digest runs the local image of that id (and of that repository).
    let local = image();
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let id = with_timeout(docker.inspect_image(&local))
        .await
        .unwrap()
        .id
        .unwrap();
    let repository = local.rsplit_once(':').unwrap().0;
    let pinned = format!("{repository}@{id}");
    let mut pod = restricted_pod("pinned", "pass");
    pod["spec"]["containers"][0]["image"] = json!(pinned);
    let (status, _) = create_pod(&double, "default", pod).await;
    assert_eq!(status, 201);
    let pod = until_pod(&double, "default", "pinned", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["imageID"],
        json!(pinned)
    );
    let mut pod = restricted_pod("mispinned", "pass");
    pod["spec"]["containers"][0]["image"] = json!(format!("elsewhere/other@{id}"));
    let (status, _) = create_pod(&double, "default", pod).await;
    assert_eq!(status, 201);
    let pod = until_pod(&double, "default", "mispinned", |p| {
        !p["status"]["containerStatuses"][0]["state"]["waiting"]["message"].is_null()
    })
    .await;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ErrImageNeverPull"
    );

    // Over its memory limit, the container is OOMKilled.
    let mut pod = restricted_pod("hungry", "x = bytearray(512 * 1024 * 1024)");
    pod["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("64Mi");
    let (status, _) = create_pod(&double, "default", pod).await;
    assert_eq!(status, 201);
    let pod = until_pod(&double, "default", "hungry", |p| {
        p["status"]["phase"] == "Failed"
    })
    .await;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "OOMKilled",
        "{pod}"
    );
    shutdown_and_assert_clean(double).await;
}

/// What decides `OOMKilled` when Docker's flag is late (seen under load on this cgroup v1
/// engine: a pod over its limit read `Error`): the kernel's record of the kill names the
/// container out of memory, and does not name one killed by a plain SIGKILL.
#[tokio::test]
async fn the_kernel_s_record_tells_an_oom_kill_from_a_plain_sigkill() {
    use bollard::models::{ContainerCreateBody, HostConfig};
    use bollard::query_parameters::{KillContainerOptionsBuilder, RemoveContainerOptionsBuilder};
    use futures_util::StreamExt;
    let docker = bollard::Docker::connect_with_local_defaults()
        .unwrap()
        .negotiate_version()
        .await
        .unwrap();
    let run = |script: &str| ContainerCreateBody {
        image: Some(image()),
        cmd: Some(vec!["python3".into(), "-c".into(), script.into()]),
        network_disabled: Some(true),
        labels: Some([("app".to_string(), "kube-double-test".to_string())].into()),
        host_config: Some(HostConfig {
            memory: Some(64 << 20),
            memory_swap: Some(64 << 20),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let hungry = docker
        .create_container(None, run("x = bytearray(512 * 1024 * 1024)"))
        .await
        .unwrap()
        .id;
    let sleeper = docker
        .create_container(None, run("import time; time.sleep(60)"))
        .await
        .unwrap()
        .id;
    for id in [&hungry, &sleeper] {
        docker.start_container(id, None).await.unwrap();
    }
    let kill = KillContainerOptionsBuilder::default()
        .signal("SIGKILL")
        .build();
    docker.kill_container(&sleeper, Some(kill)).await.unwrap();
    let mut codes = Vec::new();
    for id in [&hungry, &sleeper] {
        let _ = tokio::time::timeout(
            Duration::from_secs(60),
            docker.wait_container(id, None).next(),
        )
        .await;
        let state = docker.inspect_container(id, None).await.unwrap().state;
        codes.push(state.and_then(|state| state.exit_code));
    }
    let told = (
        crate::fakes::kubernetes::kernel_killed_for_memory(&hungry),
        crate::fakes::kubernetes::kernel_killed_for_memory(&sleeper),
    );
    // Removed before anything is asserted, so that a failure leaves no container behind.
    for id in [&hungry, &sleeper] {
        let remove = RemoveContainerOptionsBuilder::default().force(true).build();
        docker.remove_container(id, Some(remove)).await.unwrap();
    }
    assert_eq!(codes, [Some(137), Some(137)]);
    assert_eq!(told, (true, false), "(over its memory, SIGKILLed)");
}

#[tokio::test]
async fn a_pod_deleted_while_its_container_is_created_leaves_no_container() {
    let double = with_timeout(KubeDouble::start()).await;
    for round in 0..12 {
        let name = format!("brief-{round}");
        let (status, _) = request(
            &double,
            reqwest::Method::POST,
            "/api/v1/namespaces/default/pods",
            Some(restricted_pod(&name, "import time; time.sleep(60)")),
        )
        .await;
        assert_eq!(status, 201);
        // Let the kubelet reach Docker on some rounds, not on others.
        tokio::time::sleep(Duration::from_millis((round % 6) * 15)).await;
        let (status, _) = delete(
            &double,
            &format!("/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0"),
        )
        .await;
        assert_eq!(status, 200);
        assert!(double.pod("default", &name).await.is_none());
    }
    // Removal is the kubelet's, after the pod object went: wait for it, not for shutdown.
    with_timeout(async {
        while !containers_of(&double).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        containers_of(&double).await.is_empty(),
        "a container appeared after its pod went"
    );
    shutdown_and_assert_clean(double).await;
}

/// Reads watch events (whole) from a streaming response until `until` says stop.
async fn watch_objects(
    response: reqwest::Response,
    until: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    use futures_util::StreamExt;
    let mut body = response.bytes_stream();
    let (mut buffer, mut events) = (Vec::new(), Vec::new());
    while !until(&events) {
        let Some(chunk) = with_timeout(body.next()).await else {
            break;
        };
        buffer.extend_from_slice(&chunk.unwrap());
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            events.push(serde_json::from_slice(&line).unwrap());
        }
    }
    events
}

/// Reads watch events until `until` says stop; their (type, name).
async fn watch_events(
    response: reqwest::Response,
    until: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let brief = |events: &[Value]| -> Vec<(String, String)> {
        events
            .iter()
            .map(|e| {
                let name = e["object"]["metadata"]["name"].as_str().unwrap_or_default();
                (e["type"].as_str().unwrap().to_string(), name.to_string())
            })
            .collect()
    };
    brief(&watch_objects(response, |events| until(&brief(events))).await)
}

#[tokio::test]
async fn watches_resume_from_a_revision_and_honour_selectors() {
    let double = with_timeout(KubeDouble::start()).await;
    let (status, list) = get(
        &double,
        "/api/v1/namespaces/default/pods?labelSelector=app%3Dkube-double-test",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(list["kind"], "PodList");
    let revision = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // Two pods, one labelled; the watch from the list's revision sees only the labelled one,
    // from ADDED to its run's MODIFIED events, then DELETED.
    let mut other = restricted_pod("other", "pass");
    other["metadata"]["labels"] = json!({"app": "else"});
    for pod in [other, restricted_pod("watched", "pass")] {
        let (status, _) = create_pod(&double, "default", pod).await;
        assert_eq!(status, 201);
    }
    until_pod(&double, "default", "watched", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert!(double.delete_pod("default", "watched", 0).await);
    let url = format!(
        "{}/api/v1/namespaces/default/pods?watch=1&resourceVersion={revision}&labelSelector=app+in+(kube-double-test)&timeoutSeconds=30",
        double.url()
    );
    let response = with_timeout(reqwest::Client::new().get(url).bearer_auth(TOKEN).send())
        .await
        .unwrap();
    let events = watch_events(response, |events| {
        events.iter().any(|(kind, _)| kind == "DELETED")
    })
    .await;
    assert_eq!(
        events.first(),
        Some(&("ADDED".to_string(), "watched".to_string())),
        "{events:?}"
    );
    assert!(
        events.iter().all(|(_, name)| name == "watched"),
        "{events:?}"
    );
    assert!(
        events.iter().filter(|(kind, _)| kind == "MODIFIED").count() >= 2,
        "{events:?}"
    );

    // Without a revision: the objects as they are now, by field selector; then the timeout ends it.
    let url = format!(
        "{}/api/v1/namespaces/default/pods?watch=true&fieldSelector=metadata.name%3Dother&timeoutSeconds=1",
        double.url()
    );
    let response = with_timeout(reqwest::Client::new().get(url).bearer_auth(TOKEN).send())
        .await
        .unwrap();
    let events = watch_events(response, |_| false).await;
    assert_eq!(
        events[0],
        ("ADDED".to_string(), "other".to_string()),
        "{events:?}"
    );
    assert!(events.iter().all(|(_, name)| name == "other"), "{events:?}");
    shutdown_and_assert_clean(double).await;
}

#[tokio::test]
async fn a_double_dropped_without_shutdown_removes_its_containers() {
    let double = with_timeout(KubeDouble::start()).await;
    let (status, _) = create_pod(
        &double,
        "default",
        restricted_pod("left", "import time; time.sleep(60)"),
    )
    .await;
    assert_eq!(status, 201);
    until_pod(&double, "default", "left", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let label = label_of(&double);
    assert_eq!(containers_of(&double).await.len(), 1);
    // As when a test panics before its shutdown.
    drop(double);
    let left = labelled(&label).await;
    assert!(left.is_empty(), "{left:?}");
}

/// Measures, side by side, one attach round trip (connect, 4 bytes in, output and end back) to
/// a warm pod through the double against `docker attach` to an equal warm container. Run by
/// hand: `cargo nextest run --run-ignored only -E 'test(/attach_overhead/)' --no-capture`.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn attach_overhead_against_docker() {
    use bollard::container::{AttachContainerResults, LogOutput};
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    const ROUNDS: usize = 10;
    let script = "import sys; data = sys.stdin.read(4); print(data.upper())";
    let double = with_timeout(KubeDouble::start()).await;
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let (mut through_double, mut direct) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let name = format!("warm-{round}");
        stdin_pod(&double, &name, script).await;
        let started = std::time::Instant::now();
        let (stdout, _, _, _) = attach_raw(&double, &name, "v5.channel.k8s.io", b"abcd").await;
        through_double.push(started.elapsed());
        assert_eq!(stdout, "ABCD\n");

        let (key, value) = double.label();
        let body = bollard::models::ContainerCreateBody {
            image: Some(image()),
            entrypoint: Some(vec!["python3".into(), "-c".into(), script.into()]),
            open_stdin: Some(true),
            stdin_once: Some(true),
            attach_stdin: Some(true),
            labels: Some(std::collections::HashMap::from([(
                key.to_string(),
                value.to_string(),
            )])),
            // The pod's limits (500m cpu, 256Mi): a cpu quota alone costs more than the attach.
            host_config: Some(bollard::models::HostConfig {
                network_mode: Some("none".into()),
                nano_cpus: Some(500_000_000),
                memory: Some(256 * 1024 * 1024),
                ..Default::default()
            }),
            ..Default::default()
        };
        let id = with_timeout(docker.create_container(None, body))
            .await
            .unwrap()
            .id;
        with_timeout(docker.start_container(&id, None))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let started = std::time::Instant::now();
        let options = bollard::query_parameters::AttachContainerOptionsBuilder::default()
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .stream(true)
            .build();
        let AttachContainerResults {
            mut output,
            mut input,
        } = with_timeout(docker.attach_container(&id, Some(options)))
            .await
            .unwrap();
        input.write_all(b"abcd").await.unwrap();
        input.flush().await.unwrap();
        let mut stdout = Vec::new();
        while let Some(Ok(chunk)) = with_timeout(output.next()).await {
            if let LogOutput::StdOut { message } = chunk {
                stdout.extend_from_slice(&message);
            }
        }
        direct.push(started.elapsed());
        assert_eq!(stdout, b"ABCD\n");
    }
    through_double.sort();
    direct.sort();
    println!(
        "attach round trip, median of {ROUNDS}: through the double {:?}, docker attach {:?}",
        through_double[ROUNDS / 2],
        direct[ROUNDS / 2]
    );
    shutdown_and_assert_clean(double).await;
}
