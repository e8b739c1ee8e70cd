//! What MCP 2026-07-28 says a server SHOULD do and third-party scanners check, through the
//! real server over raw JSON-RPC (the wire a scanner sees): every result names the server in
//! its `_meta` (`io.modelcontextprotocol/serverInfo`) beside what its `_meta` already holds
//! (a call's audit receipts, a task's stored result; `mcp::server_info` says which answers
//! rmcp makes without one); methods of a capability the server does
//! not declare (prompts, completions) are not served; every tool carries the four behaviour
//! hints. The 401's scope in OAuth mode is in `identity.rs`; stdio's results in `mcp_server.rs`.

use serde_json::{Value, json};

use crate::common::{unique_instance, with_timeout};
use crate::mcp_server::{TestServer, env};

const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const RECEIPTS: &str = "io.file-agent/receipts";
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A 2026-07-28 request (per-request `_meta`, the standard headers) of `method` with `params`,
/// from a client that declares `capabilities`: the HTTP status and the JSON-RPC answer.
async fn send(url: &str, method: &str, mut params: Value, capabilities: Value) -> (u16, Value) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "surface-test", "version": "1"},
    });
    let mut request = reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    let name = ["name", "uri", "taskId"]
        .iter()
        .find_map(|key| params[*key].as_str());
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let response = with_timeout(request.send()).await.unwrap();
    let status = response.status().as_u16();
    let body = with_timeout(response.text()).await.unwrap();
    (status, json_rpc(&body))
}

/// The JSON-RPC answer of a body that is one JSON object or an SSE stream (its last event).
fn json_rpc(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str(body) {
        return value;
    }
    body.lines()
        .rev()
        .filter_map(|line| line.strip_prefix("data:"))
        .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {body}"))
}

/// The result of a successful 2026-07-28 request.
async fn result(url: &str, method: &str, params: Value) -> Value {
    let (status, answer) = send(url, method, params, json!({})).await;
    assert_eq!(status, 200, "{method}: {answer}");
    answer["result"].clone()
}

/// Asserts that `result` names file-agent and its version in its `_meta`.
fn names_the_server(what: &str, result: &Value) {
    let info = &result["_meta"][SERVER_INFO];
    assert_eq!(info["name"], "file-agent", "{what}: {result}");
    assert_eq!(
        info["version"],
        env!("CARGO_PKG_VERSION"),
        "{what}: {result}"
    );
}

#[tokio::test]
async fn every_result_names_the_server_beside_what_its_meta_holds() {
    let instance = unique_instance("surface", 10);
    let server = TestServer::start(&env(&[
        ("SANDBOX_INSTANCE", instance.as_str()),
        ("FILE_AGENT_TASKS", "all"),
    ]))
    .await;
    let url = server.url.as_str();

    names_the_server(
        "server/discover",
        &result(url, "server/discover", json!({})).await,
    );
    for method in ["tools/list", "resources/list", "resources/templates/list"] {
        names_the_server(method, &result(url, method, json!({})).await);
    }

    // The legacy handshake too (its `serverInfo` field is required there; `_meta` besides).
    let initialize = crate::access::initialize(url, &[]).await;
    let body = with_timeout(initialize.text()).await.unwrap();
    names_the_server("initialize", &json_rpc(&body)["result"]);

    // A call that wrote audit lines: its receipts stay beside the server's name.
    let code = "open('/work/out/note.txt', 'w').write('hi')\nprint(6 * 7)";
    let call = result(
        url,
        "tools/call",
        json!({"name": "run_python", "arguments": {"code": code}}),
    )
    .await;
    names_the_server("tools/call", &call);
    assert!(
        call["_meta"][RECEIPTS]
            .as_array()
            .is_some_and(|list| !list.is_empty()),
        "{call}"
    );
    let uri = call["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "resource_link")
        .and_then(|item| item["uri"].as_str())
        .unwrap_or_else(|| panic!("no resource link: {call}"))
        .to_string();
    names_the_server(
        "resources/read",
        &result(url, "resources/read", json!({"uri": uri})).await,
    );

    // A task: its creation, its polls and its stored result.
    let declared = json!({"extensions": {TASKS: {}}});
    let params = json!({"name": "run_python", "arguments": {"code": "print(7)"}});
    let (status, created) = send(url, "tools/call", params, declared.clone()).await;
    assert_eq!(status, 200, "{created}");
    let created = &created["result"];
    assert_eq!(created["resultType"], "task", "{created}");
    names_the_server("the task's creation", created);
    let id = created["taskId"].as_str().unwrap().to_string();
    // Bounded like every wait of the suite: a task that never ends fails saying so.
    let started = std::time::Instant::now();
    let done = loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the task {id} was still working after 120 s"
        );
        let (status, polled) =
            send(url, "tasks/get", json!({"taskId": id}), declared.clone()).await;
        assert_eq!(status, 200, "{polled}");
        let polled = polled["result"].clone();
        names_the_server("tasks/get", &polled);
        if polled["status"] != "working" {
            break polled;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    names_the_server("the task's result", &done["result"]);
    assert!(done["result"]["_meta"][RECEIPTS].is_array(), "{done}");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn prompts_and_completions_are_neither_declared_nor_served() {
    let server = TestServer::start(&[]).await;
    let discovered = result(&server.url, "server/discover", json!({})).await;
    let capabilities = &discovered["capabilities"];
    assert!(capabilities["tools"].is_object(), "{discovered}");
    assert!(capabilities.get("prompts").is_none(), "{discovered}");
    assert!(capabilities.get("completions").is_none(), "{discovered}");
    for (method, params) in [
        ("prompts/list", json!({})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": "b"}}),
        ),
    ] {
        let (status, answer) = send(&server.url, method, params, json!({})).await;
        assert_eq!(status, 404, "{method}: {answer}");
        assert_eq!(answer["error"]["code"], -32601, "{method}: {answer}");
    }
}

#[tokio::test]
async fn every_tool_says_what_it_does_to_its_world() {
    let server = TestServer::start(&[]).await;
    let listed = result(&server.url, "tools/list", json!({})).await;
    let tools = listed["tools"].as_array().unwrap();
    assert!(tools.len() >= 6, "{listed}");
    let hints = |name: &str| -> [bool; 4] {
        let tool = tools
            .iter()
            .find(|tool| tool["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not listed"));
        let annotations = &tool["annotations"];
        [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ]
        .map(|hint| {
            annotations[hint]
                .as_bool()
                .unwrap_or_else(|| panic!("{name} lacks {hint}: {tool}"))
        })
    };
    for tool in tools {
        hints(tool["name"].as_str().unwrap());
    }
    // [read-only, destructive, idempotent, open world]
    assert_eq!(hints("run_python"), [false, false, false, false]);
    assert_eq!(hints("modify_file"), [false, false, false, false]);
    assert_eq!(hints("generate_file"), [false, false, false, false]);
    assert_eq!(hints("data_analysis_tool"), [true, false, true, true]);
    assert_eq!(hints("conduct_deep_research"), [true, false, true, true]);
    assert_eq!(hints("list_tools"), [true, false, true, false]);
    assert_eq!(hints("delete_tool"), [false, true, true, false]);
}
