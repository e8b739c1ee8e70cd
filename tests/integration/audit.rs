//! The audit trail as a reviewer uses it: calls through the real server leave one
//! hash-chained JSON line per attempt (caller, code and its hash, inputs and outputs with
//! their hashes, image, limits, container, outcome); `file-agent audit verify` proves the file
//! untouched and names the first line of a tampered one; `audit show` reads it. Replicas on
//! one data folder each write their own chain, and `verify` of the folder checks them all.

use std::collections::HashMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::{until_warm, with_timeout};
use crate::fakes::openai::{FakeOpenAi, Reply};
use crate::mcp_server::{TestServer, call, llm_script, python_sdk};

const CODE: &str = "import shutil\nshutil.copy(input_file_path, 'copy.csv')\nprint('copied')";

pub async fn file_agent(args: &[&str]) -> (i32, String) {
    let output = with_timeout(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"))
            .args(args)
            .output(),
    )
    .await
    .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[tokio::test]
async fn every_attempt_is_a_chained_line_that_verify_proves_and_tampering_breaks() {
    let llm = FakeOpenAi::start(vec![Reply::Code(llm_script("excel_sales.py"))]).await;
    let mut env = llm.env();
    env.push(("SANDBOX_WARM".into(), "1".into()));
    let server = TestServer::start(&env).await;
    // The first attempt takes the warm container, once it is ready.
    until_warm(server.tools.sandbox(), 1).await;
    let input = b"a,b\n1,2\n".to_vec();
    // Uploaded as the user who then calls: an upload is its caller's.
    let uploaded = crate::mcp_server::upload_with(
        &server.url,
        "data.csv",
        input.clone(),
        &[("x-openwebui-user-id", "user-42")],
    )
    .await;
    let id = uploaded["id"].as_str().unwrap().to_string();

    // A client that forwards Open WebUI's user and chat ids and names itself in User-Agent.
    let headers = HashMap::from([
        (
            http::header::USER_AGENT,
            http::HeaderValue::from_static("audit-test-client/2.0"),
        ),
        (
            http::HeaderName::from_static("x-openwebui-user-id"),
            http::HeaderValue::from_static("user-42"),
        ),
        (
            http::HeaderName::from_static("x-openwebui-chat-id"),
            http::HeaderValue::from_static("chat-7"),
        ),
    ]);
    let client = server.client_with_headers(headers).await;
    let (is_error, text) = call(
        &client,
        "run_python",
        json!({"code": CODE, "file_ids": [id]}),
    )
    .await;
    assert!(!is_error, "{text}");
    let (is_error, text) = call(
        &client,
        "generate_file",
        json!({"instructions": "sales", "file_type": "excel"}),
    )
    .await;
    assert!(!is_error, "{text}");
    let _ = client.cancel().await;
    server.assert_nothing_left().await;

    let path = crate::common::audit_file(server.data_dir());
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let run = &lines[0];
    assert_eq!(run["tool"], "run_python");
    assert_eq!(run["author"], "caller");
    assert_eq!(run["model"], Value::Null);
    assert_eq!(run["code"], CODE);
    assert_eq!(
        run["code_sha256"],
        hex::encode(Sha256::digest(CODE.as_bytes()))
    );
    assert_eq!(run["inputs"][0]["name"], "data.csv");
    assert_eq!(
        run["inputs"][0]["sha256"],
        hex::encode(Sha256::digest(&input))
    );
    assert_eq!(run["outputs"][0]["name"], "copy.csv");
    assert_eq!(
        run["outputs"][0]["sha256"],
        hex::encode(Sha256::digest(&input))
    );
    assert_eq!(run["status"], "ok");
    assert_eq!(run["exit_code"], 0);
    assert_eq!(run["user"], "user-42");
    assert_eq!(run["chat"], "chat-7");
    // Over stateless HTTP the rmcp client's initialize info is not part of the call: what the
    // call carries is its User-Agent. The JSON-RPC id stays a JSON number.
    assert_eq!(run["client"], "audit-test-client/2.0", "{run}");
    assert!(run["request"].is_u64(), "{run}");
    assert_eq!(run["container"].as_str().unwrap().len(), 64, "{run}");
    assert_eq!(run["container_kind"], "warm", "{run}");
    assert!(run["container_created"].is_string(), "{run}");
    assert!(
        run["image_id"].as_str().unwrap().starts_with("sha256:"),
        "{run}"
    );
    assert_eq!(run["limits"]["network"], "none");
    assert_eq!(run["limits"]["memory_mib"], 1024);
    assert_eq!(run["seq"], 1);
    assert_eq!(run["prev"], "0".repeat(64));
    let generated = &lines[1];
    assert_eq!(generated["tool"], "generate_file");
    assert_eq!(generated["author"], "model");
    assert_eq!(generated["model"], crate::fakes::openai::MODEL);
    assert_eq!(generated["seq"], 2);
    assert_eq!(
        generated["prev"],
        hex::encode(Sha256::digest(text.lines().next().unwrap().as_bytes()))
    );

    let file = path.to_str().unwrap();
    let (code, out) = file_agent(&["audit", "verify", file]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok: 2 lines"), "{out}");
    let (code, out) = file_agent(&["audit", "show", file]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("#1 ") && out.contains("run_python ok"),
        "{out}"
    );
    assert!(out.contains("in: data.csv"), "{out}");

    // Someone edits the first line to hide what ran: the second line's link breaks.
    std::fs::write(
        &path,
        text.replacen("\"status\":\"ok\"", "\"status\":\"failed\"", 1),
    )
    .unwrap();
    let (code, out) = file_agent(&["audit", "verify", file]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("line 2: its prev is not the hash of the line before"),
        "{out}"
    );
}

#[tokio::test]
async fn the_client_and_request_id_are_what_the_call_carries_or_null() {
    let server = TestServer::start(&[]).await;

    // The official Python SDK: its identity reaches the call as `_meta` when it speaks the
    // stateless protocol, else only its HTTP User-Agent does.
    let output = python_sdk(&server.url, &["--client-name", "sdk-audit-test"]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines = server.audit_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let client = lines[0]["client"].as_str().unwrap_or_default();
    if stdout.contains("handshake: discover") {
        assert_eq!(client, "sdk-audit-test/9.9.9", "{stdout}");
    } else {
        assert!(client.starts_with("python-httpx/"), "{client}: {stdout}");
    }
    assert!(!client.starts_with("rmcp"), "{client}");
    assert!(lines[0]["request"].is_u64(), "{}", lines[0]);

    // The rmcp client as it comes, over stateless HTTP: no `_meta` identity, no User-Agent.
    let client = server.client(None).await;
    let (is_error, text) = call(&client, "run_python", json!({"code": "print(1)"})).await;
    assert!(!is_error, "{text}");
    let _ = client.cancel().await;
    let lines = server.audit_lines();
    assert_eq!(lines[1]["client"], Value::Null, "{}", lines[1]);
    assert!(lines[1]["request"].is_u64(), "{}", lines[1]);

    // A raw call with a string id and its identity in `_meta`.
    let response = with_timeout(
        reqwest::Client::new()
            .post(format!("{}/mcp", server.url))
            .header("accept", "application/json, text/event-stream")
            .json(&json!({
                "jsonrpc": "2.0", "id": "req-7f", "method": "tools/call",
                "params": {"name": "run_python", "arguments": {"code": "print(2)"},
                           "_meta": {"io.modelcontextprotocol/clientInfo":
                                         {"name": "raw-client", "version": "0.3"}}}
            }))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let lines = server.audit_lines();
    assert_eq!(lines[2]["request"], "req-7f", "{}", lines[2]);
    assert_eq!(lines[2]["client"], "raw-client/0.3", "{}", lines[2]);
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn two_servers_on_one_data_folder_called_at_once_keep_verifiable_chains() {
    use crate::common::{containers_of_instance, unique_instance};
    use crate::lifecycle::{serve, start_call};
    let data = tempfile::tempdir().unwrap();
    let (a, b) = (unique_instance("rep-a", 8), unique_instance("rep-b", 8));
    // As under Kubernetes: each replica's pod name names its chain.
    let first = serve(Some(&a), data.path(), &[("POD_NAME", "replica-a")]).await;
    let second = serve(Some(&b), data.path(), &[("POD_NAME", "replica-b")]).await;
    let calls: Vec<_> = (0..5)
        .flat_map(|n| {
            [
                start_call(&first.url, &format!("print('a{n}')")),
                start_call(&second.url, &format!("print('b{n}')")),
            ]
        })
        .collect();
    for call in calls {
        let (is_error, text) = with_timeout(call).await.unwrap().expect("an answer");
        assert!(!is_error, "{text}");
    }
    first.stop().await;
    second.stop().await;

    let folder = data.path().to_str().unwrap();
    let (code, out) = file_agent(&["audit", "verify", folder]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok: 2 chains, 10 lines"), "{out}");
    assert!(out.contains("audit/replica-a.jsonl: ok, 5 lines"), "{out}");
    assert!(out.contains("audit/replica-b.jsonl: ok, 5 lines"), "{out}");
    let (code, out) = file_agent(&["audit", "show", folder, "--tail", "100"]).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("[audit/replica-a.jsonl]").count(), 5, "{out}");
    assert_eq!(out.matches("run_python ok").count(), 10, "{out}");

    // An edited line in one chain is caught, and named with its chain.
    let path = data.path().join("audit/replica-b.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("print('b", "print('B", 1)).unwrap();
    let (code, out) = file_agent(&["audit", "verify", folder]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("broken: 1 of 2 chains"), "{out}");
    assert!(
        out.contains("audit/replica-b.jsonl: broken:") && out.contains("line 2: its prev"),
        "{out}"
    );
    for instance in [&a, &b] {
        assert_eq!(containers_of_instance(instance).await, 0, "{instance}");
    }
}
