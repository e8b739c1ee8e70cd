//! The network canary fails closed, against the Kubernetes API double: no code runs before the
//! first canary has reached nothing, nor after one that could not conclude (which is tried again
//! within seconds, not after `SANDBOX_CANARY_INTERVAL`); with the canary off (the interval 0)
//! code runs and the server warns that nothing proves the pods isolated. A canary that reaches
//! the network is `kubernetes::a_canary_that_reaches_a_listener_stops_the_server_running_code`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::with_timeout;
use crate::kubernetes::{assert_no_sandbox_pods, cluster, health_with_canary_verdict};
use crate::mcp_server::TestServer;

/// `/health`: its status and body.
async fn health(url: &str) -> (reqwest::StatusCode, Value) {
    let response = reqwest::get(format!("{url}/health")).await.unwrap();
    (response.status(), response.json().await.unwrap())
}

/// `/health` once the network canary's verdict is `verdict`, and how long that took.
async fn health_once(server: &TestServer, verdict: &str) -> (Value, Duration) {
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(60) {
        let (_, body) = health(&server.url).await;
        if body["network_canary"]["verdict"] == verdict {
            return (body, began.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the canary did not say {verdict} within 60 s");
}

/// Counts the pods the double is asked to create from now on.
fn count_pods(double: &crate::fakes::kubernetes::KubeDouble) -> Arc<AtomicUsize> {
    let created = Arc::new(AtomicUsize::new(0));
    let count = created.clone();
    double.mutate_pods(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
    });
    created
}

/// While the first canary's pod is still starting (an image slow to pull), a call that would
/// run code is refused with why, no pod is made for it, and `/health` answers 503 `pending`;
/// once the canary has reached nothing, calls run.
#[tokio::test]
async fn no_code_runs_before_the_first_canary_has_reached_nothing() {
    let (double, _home, mut vars) = cluster(true).await;
    let created = count_pods(&double);
    double.set_start_delay(Duration::from_secs(4));
    vars.push(("SANDBOX_CANARY_INTERVAL".into(), "600".into()));
    let began = Instant::now();
    let server = TestServer::start(&vars).await;
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print('hello')"}))
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("nothing has proven yet that the sandbox pods are cut off from the network")
            && text.contains("no network canary has finished yet")
            && text.contains("a canary is running now"),
        "{text}"
    );
    let (status, body) = health(&server.url).await;
    assert_eq!(body["network_canary"]["verdict"], "pending", "{body}");
    assert_eq!(status, reqwest::StatusCode::SERVICE_UNAVAILABLE, "{body}");
    double.set_start_delay(Duration::ZERO);
    let (status, body) = with_timeout(health_with_canary_verdict(&server)).await;
    eprintln!("the first canary passed {:?} after start", began.elapsed());
    assert_eq!(body["network_canary"]["verdict"], "isolated", "{body}");
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert!(body["network_canary"]["next_at"].is_string(), "{body}");
    assert_eq!(created.load(Ordering::SeqCst), 1, "only the canary's pod");
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print(6 * 7)"}))
        .await;
    assert!(!is_error && text.contains("42"), "{text}");
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// A canary that cannot conclude (its pod never starts within `SANDBOX_POD_START_TIMEOUT`, as
/// where the network drops what the pod needs) proves nothing: calls are refused with what it
/// said and when the next one runs, `/health` answers 503 `failed` with the error, `/metrics`
/// says `failed`. The next canary comes after `FIRST_RETRY` (5 s), not the interval (600 s),
/// and once one reaches nothing, calls run.
#[tokio::test]
async fn a_canary_that_cannot_conclude_refuses_code_until_a_retry_reaches_nothing() {
    let (double, _home, mut vars) = cluster(true).await;
    double.set_start_delay(Duration::from_secs(60));
    vars.push(("SANDBOX_CANARY_INTERVAL".into(), "600".into()));
    vars.push(("SANDBOX_POD_START_TIMEOUT".into(), "4".into()));
    let server = TestServer::start(&vars).await;
    let (body, _) = health_once(&server, "failed").await;
    let failed_at = Instant::now();
    let (status, _) = health(&server.url).await;
    assert_eq!(status, reqwest::StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let error = body["network_canary"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("SANDBOX_POD_START_TIMEOUT"), "{body}");
    assert!(body["network_canary"]["next_at"].is_string(), "{body}");
    let metrics = reqwest::get(format!("{}/metrics", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("file_agent_network_canary{verdict=\"failed\"} 1"),
        "{metrics}"
    );
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print('hello')"}))
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("the last network canary could not conclude")
            && text.contains("did not run within 4 s (SANDBOX_POD_START_TIMEOUT)")
            && text.contains("the next canary starts in "),
        "{text}"
    );
    double.set_start_delay(Duration::ZERO);
    let (body, waited) = health_once(&server, "isolated").await;
    eprintln!(
        "the retry passed {:?} after the failed canary",
        failed_at.elapsed()
    );
    assert!(waited < Duration::from_secs(20), "{waited:?}: {body}");
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print(6 * 7)"}))
        .await;
    assert!(!is_error && text.contains("42"), "{text}");
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// `SANDBOX_CANARY_INTERVAL=0` (as `kubernetes::cluster` sets): no canary runs, code runs, and
/// `file-agent serve` warns at start that nothing proves the sandbox pods isolated.
#[tokio::test]
async fn with_the_canary_off_code_runs_and_serve_warns_that_isolation_is_unproven() {
    let (double, _home, vars) = cluster(true).await;
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("serve.log");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("SANDBOX_WARM", "0")
        .env("FILE_AGENT_DATA_DIR", data.path().join("data"))
        .env("FILE_AGENT_PUBLIC_URL", &url)
        .env_remove("OPENAI_API_KEY")
        .envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let began = Instant::now();
    while reqwest::get(format!("{url}/health")).await.is_err() {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "serve did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    let warning = logged
        .lines()
        .find(|line| line.contains("SANDBOX_CANARY_INTERVAL=0"))
        .unwrap_or_else(|| panic!("no warning: {logged}"));
    assert!(
        warning.contains("WARN")
            && warning
                .contains("nothing proves that the sandbox pods are cut off from the network"),
        "{warning}"
    );
    let (status, body) = health(&url).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert!(body.get("network_canary").is_none(), "{body}");
    let called = crate::lifecycle::start_call(&url, "print(6 * 7)");
    let (is_error, text) = with_timeout(called).await.unwrap().unwrap();
    assert!(!is_error && text.contains("42"), "{text}");
    let pid = child.id().unwrap().to_string();
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    assert!(with_timeout(child.wait()).await.unwrap().success());
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}
