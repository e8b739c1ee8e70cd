//! `SANDBOX_BACKEND=kubernetes` end to end, over MCP, against the Kubernetes API double
//! (`fakes::kubernetes`, which runs each pod as a container of the real sandbox image on the
//! real engine): the tools work unchanged, a pod the cluster stored differently is refused,
//! a missing NetworkPolicy stops start-up, a network canary that reaches a listener stops the
//! server running code, `doctor` reads the data folder's claim, and nothing is left. Each test ends by shutting the
//! double down, which asserts that no container of its pods is left.
//!
//! `real_cluster_*` runs the same flow against a real cluster when `FILE_AGENT_TEST_KUBECONFIG`
//! names one (kind or k3d with gVisor; see `docs/DEPLOYING.md`); here it is skipped.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::common::with_timeout;
use crate::fakes::kubernetes::KubeDouble;
use crate::mcp_server::{TestServer, env, first_link, run_python_two_files_in_and_out};

pub(crate) const NAMESPACE: &str = "file-agent-sandbox";
const SERVER_POD: &str = "file-agent-server-0";

/// A double with the sandbox namespace (Pod Security restricted), the deny-all NetworkPolicy
/// of `deploy/kubernetes/` (unless `network_policy` is false), a stand-in for the server's own
/// pod, and the variables that point a server at it.
pub(crate) async fn cluster(
    network_policy: bool,
) -> (KubeDouble, tempfile::TempDir, Vec<(String, String)>) {
    let double = with_timeout(KubeDouble::start()).await;
    with_timeout(double.create_namespace(
        NAMESPACE,
        &[("pod-security.kubernetes.io/enforce", "restricted")],
    ))
    .await;
    if network_policy {
        let policy = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/kubernetes/networkpolicy.yaml"
        ))
        .unwrap();
        let policy: Value = serde_saphyr::from_str(&policy).unwrap();
        with_timeout(double.apply(policy)).await;
    }
    // `add_external_pod` stores a pod that Pod Security "restricted" refuses; this stand-in
    // for the server's pod (never run: it is on another node) passes it.
    let server = with_timeout(double.apply(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": SERVER_POD, "namespace": NAMESPACE},
        "spec": {
            "nodeName": "elsewhere",
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "server", "image": "file-agent", "securityContext": {
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]
        },
        "status": {"phase": "Running"},
    })))
    .await;
    let uid = server["metadata"]["uid"].as_str().unwrap().to_string();
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = home.path().join("kubeconfig");
    double.write_kubeconfig(&kubeconfig, NAMESPACE);
    let mut vars = env(&[
        ("SANDBOX_BACKEND", "kubernetes"),
        ("SANDBOX_NAMESPACE", NAMESPACE),
        ("KUBECONFIG", &kubeconfig.display().to_string()),
        ("POD_NAME", SERVER_POD),
        ("POD_UID", &uid),
        ("POD_NAMESPACE", NAMESPACE),
        // The network canary's own pods would change the counts these tests assert; the
        // canary's tests turn it on.
        ("SANDBOX_CANARY_INTERVAL", "0"),
    ]);
    vars.push(("SANDBOX_IMAGE".into(), pod_image().await));
    (double, home, vars)
}

/// The sandbox image as these pods need it, built once from the tree's image, with `/work`
/// mode 0777 as a kubelet makes an `emptyDir` (the double mounts a tmpfs, which Docker gives
/// the image folder's mode, 0755 root). runner.py already tolerates a `/work` it cannot
/// `chmod` (a real `emptyDir` is root's).
async fn pod_image() -> String {
    static IMAGE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    IMAGE
        .get_or_init(|| async {
            let base = file_agent::config::SandboxConfig::from_lookup(|_| None)
                .unwrap()
                .image;
            let tag = format!("{base}-kube-test");
            let folder = tempfile::tempdir().unwrap();
            std::fs::write(
                folder.path().join("Dockerfile"),
                format!("FROM {base}\nUSER 0\nRUN chmod 0777 /work\nUSER 10001:10001\n"),
            )
            .unwrap();
            let built = with_timeout(
                tokio::process::Command::new("docker")
                    .args(["build", "-q", "-t", &tag])
                    .arg(folder.path())
                    .env("DOCKER_BUILDKIT", "0")
                    .output(),
            )
            .await
            .unwrap();
            assert!(
                built.status.success(),
                "{}",
                String::from_utf8_lossy(&built.stderr)
            );
            tag
        })
        .await
        .clone()
}

/// The pods of the namespace other than the server's stand-in.
pub(crate) async fn sandbox_pods(double: &KubeDouble) -> Vec<Value> {
    with_timeout(double.pods(NAMESPACE))
        .await
        .into_iter()
        .filter(|pod| pod["metadata"]["name"] != SERVER_POD)
        .collect()
}

/// Waits until no sandbox pod is left (deletion and owner GC take a moment).
pub(crate) async fn assert_no_sandbox_pods(double: &KubeDouble) {
    for _ in 0..100 {
        if sandbox_pods(double).await.is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("sandbox pods left: {:?}", sandbox_pods(double).await);
}

#[tokio::test]
async fn run_python_runs_in_a_verified_pod_with_files_in_and_out_and_leaves_nothing() {
    let (double, _home, vars) = cluster(true).await;
    let created = Arc::new(Mutex::new(Vec::<Value>::new()));
    let seen = created.clone();
    double.mutate_pods(move |pod| seen.lock().unwrap().push(pod.clone()));
    let server = TestServer::start(&vars).await;
    run_python_two_files_in_and_out(&server).await;

    let pods = created.lock().unwrap().clone();
    assert_eq!(pods.len(), 2, "one pod per attempt");
    let pod = &pods[0];
    eprintln!(
        "the pod as created (after the API server's defaults):\n{}",
        serde_json::to_string_pretty(pod).unwrap()
    );
    assert_eq!(pod["metadata"]["ownerReferences"][0]["name"], SERVER_POD);
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    assert!(
        double
            .attach_protocols()
            .iter()
            .all(|p| p == "v5.channel.k8s.io"),
        "{:?}",
        double.attach_protocols()
    );
    let health: Value = reqwest::get(format!("{}/health", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["sandbox"]["backend"], "kubernetes", "{health}");
    assert_eq!(health["status"], "ok", "{health}");
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

#[tokio::test]
async fn a_pod_stored_without_read_only_root_is_refused_naming_the_field() {
    let (double, _home, vars) = cluster(true).await;
    double.mutate_pods(|pod| {
        if let Some(security) = pod["spec"]["containers"][0]["securityContext"].as_object_mut() {
            security.remove("readOnlyRootFilesystem");
        }
    });
    let server = TestServer::start(&vars).await;
    let (is_error, text) = server
        .call(
            None,
            "run_python",
            json!({"code": "open('/work/out/x.txt', 'w').write('ran')"}),
        )
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("spec.containers[0].securityContext.readOnlyRootFilesystem"),
        "{text}"
    );
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

#[tokio::test]
async fn without_a_deny_all_network_policy_the_server_does_not_start() {
    let (double, _home, mut vars) = cluster(false).await;
    let data = tempfile::tempdir().unwrap();
    vars.push((
        "FILE_AGENT_DATA_DIR".into(),
        data.path().display().to_string(),
    ));
    let config = file_agent::config::Config::from_lookup(|name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
    .unwrap();
    let error = with_timeout(file_agent::server::build_tools(&config))
        .await
        .expect_err("no NetworkPolicy: no server");
    let message = error.to_string();
    assert!(
        message.contains("NetworkPolicy") && message.contains("networkpolicy.yaml"),
        "{message}"
    );
    assert!(sandbox_pods(&double).await.is_empty());
    with_timeout(double.shutdown()).await;
}

/// The same flow against a real cluster (kind or k3d with gVisor and a NetworkPolicy CNI):
/// `FILE_AGENT_TEST_KUBECONFIG` names its kubeconfig, the manifests of `deploy/kubernetes/`
/// are applied, and `SANDBOX_IMAGE` is an image the cluster can pull. Skipped without it.
#[tokio::test]
async fn real_cluster_runs_run_python_when_configured() {
    let Ok(kubeconfig) = std::env::var("FILE_AGENT_TEST_KUBECONFIG") else {
        eprintln!("skipped: FILE_AGENT_TEST_KUBECONFIG is not set");
        return;
    };
    let mut vars = env(&[
        ("SANDBOX_BACKEND", "kubernetes"),
        ("KUBECONFIG", &kubeconfig),
        ("SANDBOX_RUNTIME", "gvisor"),
    ]);
    if let Ok(image) = std::env::var("SANDBOX_IMAGE") {
        vars.push(("SANDBOX_IMAGE".into(), image));
    }
    let server = TestServer::start(&vars).await;
    let (is_error, text) = server
        .call(
            None,
            "run_python",
            json!({"code": "print(6 * 7)\nopen('/work/out/x.txt', 'w').write('ran')"}),
        )
        .await;
    assert!(!is_error && text.contains("42"), "{text}");
    server.assert_nothing_left().await;
}

/// Warm pods come through the same pool as warm containers: each serves one attempt and is
/// deleted after it. Prints the time of an attempt in a warm pod (attach over the API
/// double's WebSocket) beside one in a warm Docker container, side by side, for the record.
#[tokio::test]
async fn warm_pods_serve_one_attempt_each_beside_warm_containers() {
    use crate::common::{TestSandbox, run_script, unique_instance};
    const RUNS: usize = 5;
    let (double, _home, vars) = cluster(true).await;
    let instance = unique_instance("kube-warm", 12);
    let mut lookup: std::collections::HashMap<String, String> = vars.into_iter().collect();
    lookup.insert("SANDBOX_INSTANCE".into(), instance.clone());
    let kube = TestSandbox::warm(1, std::time::Duration::from_secs(120), |config| {
        *config = file_agent::config::SandboxConfig::from_lookup(|name| lookup.get(name).cloned())
            .unwrap();
    })
    .await;
    let docker = TestSandbox::warm(1, std::time::Duration::from_secs(120), |config| {
        config.instance = Some(unique_instance("docker-warm", 12));
    })
    .await;
    let script = "print('hi')";
    let mut pod_ms = Vec::new();
    let mut container_ms = Vec::new();
    for _ in 0..RUNS {
        for (sandbox, times) in [(&kube, &mut pod_ms), (&docker, &mut container_ms)] {
            sandbox.until_warm(1).await;
            let started = std::time::Instant::now();
            let outcome = run_script(sandbox, script).await;
            times.push(started.elapsed().as_millis());
            assert_eq!(outcome.stdout.text().trim(), "hi", "{outcome:?}");
            assert!(outcome.warm, "{outcome:?}");
        }
    }
    pod_ms.sort();
    container_ms.sort();
    eprintln!(
        "warm attempt, median of {RUNS} (ms): pod {} (all {pod_ms:?}), container {} (all {container_ms:?})",
        pod_ms[RUNS / 2],
        container_ms[RUNS / 2]
    );
    with_timeout(kube.shutdown()).await;
    with_timeout(docker.shutdown()).await;
    kube.assert_nothing_left().await;
    docker.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// A session over pods: the state leaves one attempt's pod in its output archive and goes into
/// the next pod's upload (`session/state`), an unchanged state comes back as the runner's
/// marker, and a changed one is kept again; one pod per call.
#[tokio::test]
async fn a_session_carries_its_names_from_one_pod_to_the_next() {
    use crate::mcp_server::call;
    let (double, _home, vars) = cluster(true).await;
    let created = Arc::new(Mutex::new(0_usize));
    let seen = created.clone();
    double.mutate_pods(move |_| *seen.lock().unwrap() += 1);
    let server = TestServer::start(&vars).await;
    let alice = server
        .client_with_headers(std::collections::HashMap::from([(
            http::HeaderName::from_static("x-openwebui-user-id"),
            http::HeaderValue::from_static("alice"),
        )]))
        .await;
    let run = |code: &str| json!({"code": code, "session": "pods"});
    let set = "import pandas as pd\nx = 41\ndf = pd.DataFrame({'a': [1, 2, 3]})\nprint('set')";
    let (is_error, text) = call(&alice, "run_python", run(set)).await;
    assert!(!is_error && text.contains("its state was kept"), "{text}");
    let (is_error, text) = call(&alice, "run_python", run("print(x + 1, int(df.a.sum()))")).await;
    assert!(!is_error && text.contains("42 6"), "{text}");
    assert!(text.contains("its state is unchanged"), "{text}");
    let (is_error, text) = call(&alice, "run_python", run("x = 50\nprint('changed')")).await;
    assert!(!is_error && text.contains("its state was kept"), "{text}");
    let (is_error, text) = call(&alice, "run_python", run("print(x)")).await;
    assert!(!is_error && text.contains("50"), "{text}");
    assert_eq!(*created.lock().unwrap(), 4, "one pod per call");
    let lines: Vec<Value> = server
        .audit_lines()
        .into_iter()
        .filter(|line| line["session"].is_object())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    for pair in lines.windows(2) {
        assert_eq!(
            pair[1]["session"]["state_before"], pair[0]["session"]["state_after"],
            "{pair:#?}"
        );
    }
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// The model's flow and saved tools over MCP, each attempt in its own pod: `generate_file` with
/// the fake model, then a saved tool created (its check is an attempt) and called.
#[tokio::test]
async fn generate_file_and_a_saved_tool_run_in_pods() {
    use crate::fakes::openai::{FakeOpenAi, Reply};
    use crate::mcp_server::llm_script;
    let (double, _home, mut vars) = cluster(true).await;
    let llm = FakeOpenAi::start(vec![Reply::Code(llm_script("excel_sales.py"))]).await;
    vars.extend(llm.env());
    // One owner for every request: the test's client names no user.
    vars.push(("FILE_AGENT_DYNAMIC_TOOLS".into(), "shared".into()));
    let server = TestServer::start(&vars).await;
    let (is_error, text) = server
        .call(
            None,
            "generate_file",
            json!({"instructions": "sales by region", "file_type": "excel", "filename_hint": "Sales"}),
        )
        .await;
    assert!(!is_error, "{text}");
    let cells = crate::mcp_server::xlsx_cells(&server.download(&first_link(&text)).await, "Sales");
    assert_eq!(cells[1], vec!["North", "120"]);

    let tool = json!({
        "name": "double",
        "description": "Doubles a number.",
        "code": "def run(x):\n    \"\"\"Doubles x.\"\"\"\n    return {\"doubled\": 2 * x}\n",
        "input_schema": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"], "examples": [{"x": 21}]}
    });
    let (is_error, text) = server.call(None, "create_tool", tool).await;
    assert!(!is_error, "{text}");
    let (is_error, text) = server.call(None, "my_double", json!({"x": 4})).await;
    assert!(!is_error && text.contains('8'), "{text}");
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// A server killed mid-attempt (SIGKILL: no guard runs) leaves its pod to the cluster: the pod
/// carries its deadline and its owner, and when the owner (the server's pod) goes, Kubernetes'
/// garbage collector deletes it.
#[tokio::test]
async fn a_killed_server_leaves_its_pod_to_the_deadline_and_the_owner_gc() {
    let (double, _home, vars) = cluster(true).await;
    let data = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"))
        .arg("serve")
        .envs(vars)
        .env("FILE_AGENT_DATA_DIR", data.path())
        .env("FILE_AGENT_LISTEN", format!("127.0.0.1:{port}"))
        .env("SANDBOX_WARM", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..100 {
        if let Ok(response) = reqwest::get(format!("{url}/health")).await
            && response.status().is_success()
        {
            up = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(up, "the server did not come up");
    let call = tokio::spawn(async move {
        let transport =
            rmcp::transport::StreamableHttpClientTransport::from_uri(format!("{url}/mcp"));
        use rmcp::ServiceExt;
        let Ok(client) = rmcp::model::ClientConfig::default().serve(transport).await else {
            return;
        };
        let arguments = json!({"code": "import time\ntime.sleep(120)"});
        let _ = client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("run_python")
                    .with_arguments(arguments.as_object().unwrap().clone()),
            )
            .await;
    });
    let mut running = None;
    for _ in 0..150 {
        running = sandbox_pods(&double)
            .await
            .into_iter()
            .find(|pod| pod["status"]["phase"] == "Running");
        if running.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let pod = running.expect("a pod running the attempt");
    server.kill().await.unwrap();
    call.abort();
    assert!(pod["spec"]["activeDeadlineSeconds"].as_i64().unwrap() > 0);
    assert_eq!(pod["metadata"]["ownerReferences"][0]["name"], SERVER_POD);
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        sandbox_pods(&double).await.len(),
        1,
        "nobody deletes it yet"
    );
    assert!(with_timeout(double.delete_pod(NAMESPACE, SERVER_POD, 0)).await);
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// Whether `log` holds `secret` as it is, in hex or in base64 (at each of base64's three
/// alignments).
fn leaks(log: &[u8], secret: &[u8]) -> Option<&'static str> {
    use base64::Engine;
    let contains = |needle: &[u8]| log.windows(needle.len()).any(|w| w == needle);
    if contains(secret) {
        return Some("raw");
    }
    if contains(hex::encode(secret).as_bytes()) {
        return Some("hex");
    }
    for shift in 0..3 {
        let encoded = base64::engine::general_purpose::STANDARD.encode(&secret[shift..]);
        // The middle of the encoding does not depend on what came before.
        if contains(&encoded.as_bytes()[4..encoded.len() - 4]) {
            return Some("base64");
        }
    }
    None
}

/// A real node writes every byte a container sends to stdout or stderr to its log, and log
/// agents ship it: the double keeps it the same way, and none of a script's output, its files or
/// a saved tool's result may be in it, in any encoding.
#[tokio::test]
async fn the_node_log_holds_nothing_of_a_scripts_output_files_or_a_saved_tools_result() {
    let (double, _home, mut vars) = cluster(true).await;
    vars.push(("FILE_AGENT_DYNAMIC_TOOLS".into(), "shared".into()));
    let server = TestServer::start(&vars).await;
    let printed = format!("printed-{}", uuid::Uuid::new_v4().simple());
    let written = format!("written-{}", uuid::Uuid::new_v4().simple());
    let returned = format!("returned-{}", uuid::Uuid::new_v4().simple());
    let code = format!(
        "print('{printed}')\nimport sys\nprint('{printed}', file=sys.stderr)\n\
         open('/work/out/secret.txt', 'w').write('{written}' * 50)\n\
         open('/work/out/secret.bin', 'wb').write(b'{written}' * 3000)\n"
    );
    let (is_error, text) = server.call(None, "run_python", json!({"code": code})).await;
    assert!(!is_error, "{text}");
    assert!(text.contains(&printed), "{text}");
    let secret = text.lines().find(|l| l.contains("secret.txt")).unwrap();
    assert_eq!(
        server.download(&first_link(secret)).await,
        written.repeat(50).into_bytes()
    );
    let tool = json!({
        "name": "whisper",
        "description": "Returns a fixed word.",
        "code": format!("def run(x):\n    \"\"\"Returns it.\"\"\"\n    return {{\"word\": '{returned}', \"x\": x}}\n"),
        "input_schema": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"], "examples": [{"x": 1}]}
    });
    let (is_error, text) = server.call(None, "create_tool", tool).await;
    assert!(!is_error, "{text}");
    let (is_error, text) = server.call(None, "my_whisper", json!({"x": 2})).await;
    assert!(!is_error && text.contains(&returned), "{text}");
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;

    let log = double.node_log();
    // The log is kept (each pod said READY or began its frames), and holds no secret.
    assert!(log.len() > 3000 * written.len(), "{} bytes", log.len());
    for secret in [&printed, &written, &returned] {
        assert_eq!(leaks(&log, secret.as_bytes()), None, "{secret}");
    }
    with_timeout(double.shutdown()).await;
}

/// A TCP listener on every address of this host, counting the connections it accepts, and the
/// address a container on Docker's default bridge reaches it at (the bridge's gateway).
async fn host_listener() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((_stream, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let bridge = with_timeout(docker.inspect_network(
        "bridge",
        None::<bollard::query_parameters::InspectNetworkOptions>,
    ))
    .await
    .unwrap();
    let gateway = bridge
        .ipam
        .and_then(|ipam| ipam.config)
        .into_iter()
        .flatten()
        .find_map(|config| config.gateway)
        .filter(|gateway| !gateway.is_empty())
        .unwrap_or_else(|| "172.17.0.1".to_string());
    (format!("{gateway}:{port}"), accepted)
}

/// `/health` once the network canary has a verdict.
pub(crate) async fn health_with_canary_verdict(
    server: &TestServer,
) -> (reqwest::StatusCode, Value) {
    for _ in 0..300 {
        let response = reqwest::get(format!("{}/health", server.url))
            .await
            .unwrap();
        let status = response.status();
        let health: Value = response.json().await.unwrap();
        if health["network_canary"]["verdict"] != "pending" {
            return (status, health);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("the canary gave no verdict within 60 s");
}

/// Where the cluster's isolation fails (the double's pods join Docker's bridge, as pods do
/// where no CNI enforces the NetworkPolicy), the canary pod the server starts with reaches a
/// listener: `/health` says 503 and what was reached, `/metrics` shows it, and a call that
/// would run code is refused with the reason.
#[tokio::test]
async fn a_canary_that_reaches_a_listener_stops_the_server_running_code() {
    let (double, _home, mut vars) = cluster(true).await;
    double.give_pods_network("bridge");
    let (address, accepted) = host_listener().await;
    vars.push(("SANDBOX_CANARY_INTERVAL".into(), "600".into()));
    vars.push(("SANDBOX_CANARY_ADDRESSES".into(), address.clone()));
    let server = TestServer::start(&vars).await;
    let (status, health) = with_timeout(health_with_canary_verdict(&server)).await;
    assert_eq!(health["network_canary"]["verdict"], "reached", "{health}");
    // Only the listener here; a host whose resolver answers adds the DNS lookup.
    let reached = health["network_canary"]["reached"].as_array().unwrap();
    assert!(reached.contains(&json!(address)), "{health}");
    assert_eq!(status, reqwest::StatusCode::SERVICE_UNAVAILABLE, "{health}");
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let metrics = reqwest::get(format!("{}/metrics", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("file_agent_network_canary{verdict=\"reached\"} 1"),
        "{metrics}"
    );
    let pods_before = sandbox_pods(&double).await.len();
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print('hello')"}))
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("network canary") && text.contains(&address),
        "{text}"
    );
    assert!(!text.contains("hello\n"), "{text}");
    // Refused before the model is asked (no model is configured: that would be the error).
    let (is_error, text) = server
        .call(
            None,
            "generate_file",
            json!({"instructions": "sales by region", "file_type": "excel"}),
        )
        .await;
    assert!(is_error && text.contains("network canary"), "{text}");
    // What runs no code is not refused for it (here it answers that it names no user).
    let (_, text) = server.call(None, "list_tools", json!({})).await;
    assert!(!text.contains("network canary"), "{text}");
    assert!(
        sandbox_pods(&double).await.len() <= pods_before,
        "no pod for the calls"
    );
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// The same listener, pods with no network: the canary reaches nothing, says so, and calls run.
#[tokio::test]
async fn a_canary_of_an_isolated_cluster_reaches_nothing_and_calls_run() {
    let (double, _home, mut vars) = cluster(true).await;
    let (address, accepted) = host_listener().await;
    vars.push(("SANDBOX_CANARY_INTERVAL".into(), "600".into()));
    vars.push(("SANDBOX_CANARY_ADDRESSES".into(), address.clone()));
    let server = TestServer::start(&vars).await;
    let (status, health) = with_timeout(health_with_canary_verdict(&server)).await;
    assert_eq!(health["network_canary"]["verdict"], "isolated", "{health}");
    assert_eq!(status, reqwest::StatusCode::OK, "{health}");
    let targets = health["network_canary"]["targets"].as_array().unwrap();
    assert!(targets.contains(&json!(address)), "{health}");
    assert!(targets.len() >= 2, "the API server's address too: {health}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print('hello')"}))
        .await;
    assert!(!is_error, "{text}");
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// The data folder's claim as `doctor` reports it, on a double whose default class offers only
/// ReadWriteOnce (as GKE's, EKS's and AKS's do): the base manifests' claim binds and doctor
/// says so; the shared-storage overlay's ReadWriteMany claim stays Pending and doctor says why,
/// from the provisioner's event. Doctor's canary runs too, and reaches nothing.
#[tokio::test]
async fn doctor_says_when_the_data_claim_is_pending_and_why() {
    let (double, _home, vars) = cluster(true).await;
    with_timeout(double.create_namespace("file-agent", &[])).await;
    let claim = |folder: &str| -> Value {
        let output = std::process::Command::new("kubectl")
            .args([
                "kustomize",
                &format!("{}/deploy/{folder}", env!("CARGO_MANIFEST_DIR")),
            ])
            .output()
            .unwrap();
        assert!(output.status.success());
        serde_saphyr::from_multiple::<Value>(&String::from_utf8_lossy(&output.stdout))
            .unwrap()
            .into_iter()
            .find(|document| document["kind"] == "PersistentVolumeClaim")
            .unwrap()
    };
    with_timeout(double.apply(claim("kubernetes"))).await;
    let mut shared = claim("kubernetes-shared-storage");
    shared["metadata"]["name"] = json!("file-agent-data-shared");
    with_timeout(double.apply(shared)).await;
    let data = tempfile::tempdir().unwrap();
    let doctor = |claim: &'static str| {
        let mut env: Vec<(String, String)> = vars.clone();
        env.push((
            "FILE_AGENT_DATA_DIR".into(),
            data.path().display().to_string(),
        ));
        env.push(("FILE_AGENT_DATA_CLAIM".into(), claim.into()));
        async move {
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            crate::common::run_cli(&["doctor"], &env).await
        }
    };
    let bound = doctor("file-agent/file-agent-data").await;
    let line = |stdout: &str, what: &str| -> String {
        stdout
            .lines()
            .find(|line| line.starts_with(what))
            .unwrap_or_else(|| panic!("no {what} line: {stdout}"))
            .to_string()
    };
    let storage = line(&bound.stdout, "storage");
    assert!(
        storage.contains("ok") && storage.contains("is Bound (ReadWriteOnce, 20Gi"),
        "{storage}"
    );
    let canary = line(&bound.stdout, "canary");
    assert!(
        canary.contains("ok") && canary.contains("reached none"),
        "{canary}"
    );
    let pending = doctor("file-agent/file-agent-data-shared").await;
    assert_eq!(pending.code, Some(1), "{}", pending.stdout);
    let storage = line(&pending.stdout, "storage");
    assert!(storage.contains("FAIL"), "{storage}");
    assert!(storage.contains("is Pending (ReadWriteMany"), "{storage}");
    assert!(
        storage.contains("ProvisioningFailed") && storage.contains("MULTI_NODE_MULTI_WRITER"),
        "{storage}"
    );
    // Where the class offers ReadWriteMany, the overlay's claim binds.
    double.set_storage_modes(&["ReadWriteOnce", "ReadWriteMany"]);
    let mut shared = claim("kubernetes-shared-storage");
    shared["metadata"]["name"] = json!("file-agent-data-rwx");
    with_timeout(double.apply(shared)).await;
    let rwx = doctor("file-agent/file-agent-data-rwx").await;
    assert!(
        line(&rwx.stdout, "storage").contains("is Bound (ReadWriteMany"),
        "{}",
        rwx.stdout
    );
    let missing = doctor("file-agent/nothing").await;
    assert!(
        line(&missing.stdout, "storage").contains("does not exist"),
        "{}",
        missing.stdout
    );
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}
