//! Who may call the server: access tokens on `/mcp` and uploads (401 with
//! `WWW-Authenticate`), downloads and `/health` left open, a server token never forwarded to
//! Open WebUI as a user's, and browser `Origin`s checked against the allow-list.

use std::collections::HashMap;

use rmcp::ServiceExt;
use rmcp::model::ClientConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

use crate::common::with_timeout;
use crate::fakes::openwebui::{ALICE, BOB, FakeOpenWebUi};
use crate::mcp_server::{TestServer, call, env};

const TOKEN: &str = "test-access-token-0123456789";

/// A raw `initialize` POST to `{url}/mcp` with `headers`; returns the status and the headers.
pub(crate) async fn initialize(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}
        }));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    with_timeout(request.send()).await.unwrap()
}

#[tokio::test]
async fn tokens_guard_mcp_and_uploads_but_not_downloads_or_health() {
    let server = TestServer::start(&env(&[("FILE_AGENT_ACCESS_TOKENS", TOKEN)])).await;

    let missing = initialize(&server.url, &[]).await;
    assert_eq!(missing.status(), 401);
    assert_eq!(
        missing.headers()["www-authenticate"],
        "Bearer realm=\"file-agent\""
    );
    let wrong = initialize(
        &server.url,
        &[("authorization", "Bearer not-the-token-at-all")],
    )
    .await;
    assert_eq!(wrong.status(), 401);
    assert!(
        wrong.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("error=\"invalid_token\"")
    );
    let bearer = format!("Bearer {TOKEN}");
    assert_eq!(
        initialize(&server.url, &[("authorization", &bearer)])
            .await
            .status(),
        200
    );
    assert_eq!(
        initialize(&server.url, &[("x-file-agent-key", TOKEN)])
            .await
            .status(),
        200
    );

    let (is_error, text) = server
        .call(Some(TOKEN), "run_python", json!({"code": "print(6 * 7)"}))
        .await;
    assert!(!is_error && text.contains("42"), "{text}");

    let form = || {
        reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(b"a,b\n1,2\n".to_vec()).file_name("t.csv"),
        )
    };
    let client = reqwest::Client::new();
    let refused = client
        .post(format!("{}/files", server.url))
        .multipart(form())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let stored = client
        .post(format!("{}/files", server.url))
        .header("x-file-agent-key", TOKEN)
        .multipart(form())
        .send()
        .await
        .unwrap();
    assert_eq!(stored.status(), 201);
    let url = stored.json::<serde_json::Value>().await.unwrap()["url"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(server.download(&url).await, b"a,b\n1,2\n");
    let health = reqwest::get(format!("{}/health", server.url))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // It names what runs the attempts: the backend and the runtime the engine uses.
    let health: serde_json::Value = with_timeout(health.json()).await.unwrap();
    assert_eq!(health["sandbox"]["backend"], "docker", "{health}");
    assert!(health["sandbox"]["runtime"].is_string(), "{health}");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn the_server_token_is_never_forwarded_but_the_users_token_is() {
    let owui = FakeOpenWebUi::start().await;
    let id = owui.add(BOB, "bob.csv", "text/csv", b"x\n1\n".to_vec());
    let server = TestServer::start(&env(&[
        ("FILE_AGENT_ACCESS_TOKENS", TOKEN),
        ("INTERNAL_API_URL", &owui.url),
        ("OPENWEBUI_API_KEY", ALICE),
    ]))
    .await;
    let code = json!({"code": "import os\nprint(os.listdir('/work/in'))", "file_ids": [id]});

    // Session auth next to a token: Bob's bearer reaches Open WebUI, the key stays here.
    let headers = HashMap::from([(
        http::HeaderName::from_static("x-file-agent-key"),
        http::HeaderValue::from_static(TOKEN),
    )]);
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", server.url))
        .auth_header(BOB)
        .custom_headers(headers);
    let client = with_timeout(
        ClientConfig::default().serve(StreamableHttpClientTransport::from_config(config)),
    )
    .await
    .unwrap();
    let (is_error, text) = call(&client, "run_python", code.clone()).await;
    assert!(!is_error && text.contains("bob.csv"), "{text}");
    let _ = client.cancel().await;

    // The server token as the bearer is taken out: the server's own key (Alice's) is used,
    // and Bob's file is not hers.
    let (is_error, text) = server.call(Some(TOKEN), "run_python", code).await;
    assert!(is_error && text.contains("not found"), "{text}");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn a_browser_origin_outside_the_allow_list_is_refused() {
    let server = TestServer::start(&env(&[(
        "FILE_AGENT_ALLOWED_ORIGINS",
        "https://chat.example.com",
    )]))
    .await;
    assert_eq!(
        initialize(&server.url, &[("origin", "https://evil.example")])
            .await
            .status(),
        403
    );
    assert_eq!(
        initialize(&server.url, &[("origin", "https://chat.example.com")])
            .await
            .status(),
        200
    );
    // Clients that are not browsers send no Origin.
    assert_eq!(initialize(&server.url, &[]).await.status(), 200);
}

/// An admin who registers file-agent by its IP address gets a 403 from the DNS-rebinding guard;
/// its body must say which setting lets that address in.
#[tokio::test]
async fn a_host_outside_the_allow_list_is_refused_with_the_setting_that_allows_it() {
    let server = TestServer::start(&env(&[(
        "FILE_AGENT_ALLOWED_HOSTS",
        "localhost,file-agent",
    )]))
    .await;
    let refused = initialize(&server.url, &[("host", "192.168.1.20:8000")]).await;
    assert_eq!(refused.status(), 403);
    let body = with_timeout(refused.text()).await.unwrap();
    assert!(
        body.contains("FILE_AGENT_ALLOWED_HOSTS") && body.contains("192.168.1.20:8000"),
        "{body}"
    );
    let allowed = initialize(&server.url, &[("host", "file-agent:8000")]).await;
    assert_eq!(allowed.status(), 200);
}

#[tokio::test]
async fn metrics_count_calls_and_attempts_behind_their_own_token() {
    let server = TestServer::start(&env(&[
        ("FILE_AGENT_METRICS_TOKEN", "metrics-secret-token"),
        ("FILE_AGENT_MAX_CONCURRENT", "3"),
    ]))
    .await;
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print(1)"}))
        .await;
    assert!(!is_error, "{text}");
    let url = format!("{}/metrics", server.url);
    let client = reqwest::Client::new();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    let response = client
        .get(&url)
        .bearer_auth("metrics-secret-token")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let body = response.text().await.unwrap();
    let value = |prefix: &str| -> f64 {
        body.lines()
            .find(|line| line.starts_with(prefix))
            .and_then(|line| line.rsplit_once(' '))
            .map(|(_, v)| v.parse().unwrap())
            .unwrap_or_else(|| panic!("no {prefix} in:\n{body}"))
    };
    assert!(value("file_agent_tool_calls_total{tool=\"run_python\",outcome=\"ok\"}") >= 1.0);
    assert!(
        value("file_agent_attempt_duration_seconds_count{tool=\"run_python\",status=\"ok\"}")
            >= 1.0
    );
    assert!(value("file_agent_sandbox_phase_seconds_count{phase=\"run\"}") >= 1.0);
    assert_eq!(value("file_agent_sandbox_slots "), 3.0);
    assert_eq!(value("file_agent_queue_depth "), 0.0);
    assert!(!body.contains("metrics-secret-token"));
    server.assert_nothing_left().await;
}
