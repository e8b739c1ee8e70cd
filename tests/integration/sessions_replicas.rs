//! `run_python`'s sessions across two real servers (two `file-agent serve` processes) sharing
//! one `FILE_AGENT_DATA_DIR`, as replicas do (issue 62): a session started on one continues on
//! the other and back, each server reading the other's chain to accept the state it left; a
//! state edited in the folder is refused by both; two calls of one session on the two servers
//! at once run one after the other, the second starting from the state the first left.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rmcp::model::ClientConfig;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

use crate::common::{
    container_ids_of_instance, containers_of_instance, exec_in, unique_instance, wait_for_running,
    with_timeout,
};
use crate::lifecycle::{Served, serve};
use crate::mcp_server::call;

type Client = RunningService<RoleClient, ClientConfig>;

/// A client of the server at `url` that forwards Open WebUI's user id `user`.
async fn client_of(url: &str, user: &str) -> Client {
    let headers = HashMap::from([(
        http::HeaderName::from_static("x-openwebui-user-id"),
        http::HeaderValue::from_str(user).unwrap(),
    )]);
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp")).custom_headers(headers);
    with_timeout(ClientConfig::default().serve(StreamableHttpClientTransport::from_config(config)))
        .await
        .unwrap()
}

/// `run_python` of `code` in the session `session`: (is_error, text).
async fn run(client: &Client, session: &str, code: &str) -> (bool, String) {
    call(
        client,
        "run_python",
        json!({"code": code, "session": session}),
    )
    .await
}

/// Asserts a call succeeded and printed `expected`.
async fn prints(client: &Client, session: &str, code: &str, expected: &str) {
    let (is_error, text) = run(client, session, code).await;
    assert!(!is_error && text.contains(expected), "{code}: {text}");
}

/// Two servers, `a` and `b`, over the folder `data`, each with its own instance (its chain).
async fn two_servers(data: &std::path::Path) -> ((String, Served), (String, Served)) {
    let (a, b) = (unique_instance("ses-a", 8), unique_instance("ses-b", 8));
    let first = serve(Some(&a), data, &[]).await;
    let second = serve(Some(&b), data, &[]).await;
    ((a, first), (b, second))
}

/// The session state files under `data`.
fn state_files(data: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![data.join("sessions")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "state") {
                found.push(path);
            }
        }
    }
    found
}

/// Stops both servers and asserts nothing of theirs is left on the engine.
async fn stop(servers: [(String, Served); 2]) {
    for (instance, served) in servers {
        served.stop().await;
        assert_eq!(containers_of_instance(&instance).await, 0, "{instance}");
    }
}

#[tokio::test]
async fn a_session_continues_on_the_other_server_and_back_and_an_edit_is_refused_by_both() {
    let data = tempfile::tempdir().unwrap();
    let ((a, on_a), (b, on_b)) = two_servers(data.path()).await;
    let alice_a = client_of(&on_a.url, "alice").await;
    let alice_b = client_of(&on_b.url, "alice").await;
    prints(&alice_a, "s", "x = 1\nprint('set')", "set").await;
    prints(&alice_b, "s", "y = x + 1\nprint(y)", "2").await;
    // Back on A: the state is B's, which only B's chain records.
    prints(&alice_a, "s", "print(x, y)", "1 2").await;
    prints(&alice_b, "s", "print(x + y)", "3").await;

    let states = state_files(data.path());
    assert_eq!(states.len(), 1, "{states:?}");
    let mut bytes = std::fs::read(&states[0]).unwrap();
    bytes.extend_from_slice(b"edited");
    std::fs::write(&states[0], bytes).unwrap();
    for client in [&alice_a, &alice_b] {
        let (is_error, text) = run(client, "s", "print(x)").await;
        assert!(
            is_error && text.contains("changed outside file-agent"),
            "{text}"
        );
    }
    stop([(a, on_a), (b, on_b)]).await;
}

/// What the first call's script waits for: a file the test puts into its container.
const RELEASE: &str = "/tmp/release";

#[tokio::test]
async fn two_calls_of_one_session_on_two_servers_at_once_run_one_after_the_other() {
    let data = tempfile::tempdir().unwrap();
    let ((a, on_a), (b, on_b)) = two_servers(data.path()).await;
    let alice_b = client_of(&on_b.url, "alice").await;
    prints(&alice_b, "s", "x = 'from B'\nprint('set')", "set").await;

    let alice_a = client_of(&on_a.url, "alice").await;
    let first = tokio::spawn(async move {
        let code = format!(
            "import os, time\nwhile not os.path.exists('{RELEASE}'):\n    time.sleep(0.05)\nx = 'from A'\nprint('A done')"
        );
        run(&alice_a, "s", &code).await
    });
    wait_for_running(&a, 1).await;
    let second = tokio::spawn(async move { run(&alice_b, "s", "print(x)").await });
    // B's call waits for the session A's call holds (B says so in its log), and runs no
    // container meanwhile.
    let started = Instant::now();
    while !on_b
        .log()
        .contains("the session is busy in a call of another server")
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "B's call never waited for the session:\n{}",
            on_b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(containers_of_instance(&b).await, 0);
    for id in container_ids_of_instance(&a).await {
        assert_eq!(exec_in(&id, &["touch", RELEASE]).await, 0);
    }
    let (is_error, text) = with_timeout(first).await.unwrap();
    assert!(!is_error && text.contains("A done"), "{text}");
    let (is_error, text) = with_timeout(second).await.unwrap();
    assert!(!is_error && text.contains("from A"), "{text}");
    stop([(a, on_a), (b, on_b)]).await;
}
