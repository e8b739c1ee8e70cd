//! Long calls the current MCP way, with the official MCP Python SDK over Streamable HTTP
//! (`tests/sdk/tasks_client.py`), the real server in process and the real sandbox:
//! - cancellation: a running `run_python` cancelled by the SDK (its `notifications/cancelled`
//!   over the 2025-11-25 handshake, its aborted POST over 2026-07-28) has no container left
//!   within a second or so, and its audit line says `cancelled`; a `notifications/cancelled`
//!   sent on another connection than the call's cancels it for a named caller, and not for a
//!   caller who names no one (another such caller could send it with a guessed id);
//! - tasks (`io.modelcontextprotocol/tasks`): a call from a client that declares the
//!   extension answers with a task, polled from `working` to `completed`, whose result is what
//!   a plain call gives; `tasks/cancel` stops one mid-attempt and leaves nothing; another
//!   caller gets "not found" for its id, and cannot cancel it; one caller who names no one
//!   filling `FILE_AGENT_TASKS_PER_CALLER` leaves another one room; a client that does not declare
//!   the extension gets the plain result; SIGTERM stops a running task (the real binary), its
//!   container removed and its attempt audited; a research call (the fake Responses API) runs
//!   as a task by default, and a cancelled one cancels its run at the provider within a second;
//!   over stdio (the SDK starting `file-agent serve --stdio`) a task is polled to its result.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use crate::common::{containers_of_instance, unique_instance, wait_for_running, with_timeout};
use crate::fakes::openai::{FakeOpenAi, Poll};
use crate::mcp_server::{TestServer, env};

/// Code that runs until it is stopped.
const SLEEP: &str = "import time\ntime.sleep(60)";
/// How long a cancelled attempt may take to leave no container behind.
const GONE_WITHIN: Duration = Duration::from_millis(1500);

/// `tests/sdk/tasks_client.py` running against a server, its events read as they come.
struct SdkClient {
    child: Child,
    events: Lines<BufReader<ChildStdout>>,
}

impl SdkClient {
    /// Starts the script on `url`'s `/mcp` with `headers` and `args` (a command and its options).
    fn start(url: &str, headers: &[&str], args: &[&str]) -> Self {
        Self::start_on(&format!("{url}/mcp"), headers, args)
    }

    /// Starts the script on `endpoint` (a URL, or `stdio:COMMAND`).
    fn start_on(endpoint: &str, headers: &[&str], args: &[&str]) -> Self {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let venv = crate::common::sdk_venv();
        let mut command = tokio::process::Command::new(venv.join("bin/python3"));
        command
            .arg(root.join("tests/sdk/tasks_client.py"))
            .arg(endpoint);
        for header in headers {
            command.args(["--header", header]);
        }
        let mut child = command
            .args(args)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let events = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, events }
    }

    /// The next event; panics at the end of the output.
    async fn next(&mut self) -> Value {
        let line = with_timeout(self.events.next_line()).await.unwrap();
        let line = line.expect("the SDK client ended early (see its stderr above)");
        serde_json::from_str(&line).unwrap()
    }

    /// Reads events until one has `event` = `name`; returns it with the ones before it.
    async fn until(&mut self, name: &str) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let event = self.next().await;
            if event["event"] == name {
                return (event, before);
            }
            before.push(event);
        }
    }

    /// Waits for the script to exit and asserts it succeeded.
    async fn finish(mut self) {
        let status = with_timeout(self.child.wait()).await.unwrap();
        assert!(status.success(), "{status:?}");
    }
}

/// Runs the script to its end; its one JSON line.
async fn one_shot(url: &str, headers: &[&str], args: &[&str]) -> Value {
    let mut client = SdkClient::start(url, headers, args);
    let event = client.next().await;
    client.finish().await;
    event
}

/// A server with `extra` settings on a named instance (so its containers can be counted).
async fn server(instance: &str, extra: &[(&str, &str)]) -> TestServer {
    let mut vars = env(&[("SANDBOX_INSTANCE", instance)]);
    vars.extend(env(extra));
    TestServer::start(&vars).await
}

/// Waits until `instance` has no container; how long that took.
async fn until_none_left(instance: &str) -> Duration {
    let started = Instant::now();
    while containers_of_instance(instance).await > 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "never gone");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

/// The audit line of the one run_python attempt so far.
fn attempt_line(server: &TestServer) -> Value {
    let lines: Vec<Value> = server
        .audit_lines()
        .into_iter()
        .filter(|line| line["tool"] == "run_python")
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    lines[0].clone()
}

/// The SDK cancels a running call (`legacy`: the 2025-11-25 handshake, where it POSTs
/// `notifications/cancelled`; else 2026-07-28, where it aborts the POST): its container is
/// gone within [`GONE_WITHIN`] and its audit line says cancelled.
/// The caller is named (a user header): a `notifications/cancelled` of a caller who names no
/// one reaches no call it did not come with on one connection.
async fn a_cancelled_call_leaves_nothing(legacy: bool) {
    let instance = unique_instance("cancel", 10);
    let server = server(&instance, &[]).await;
    let mut args = vec!["cancel-call", "--code", SLEEP];
    if legacy {
        args.push("--legacy");
    }
    let mut client = SdkClient::start(&server.url, &["X-OpenWebUI-User-Id=alice"], &args);
    client.until("running").await;
    wait_for_running(&instance, 1).await;
    client.until("cancelled").await;
    let took = until_none_left(&instance).await;
    assert!(took < GONE_WITHIN, "the container stayed {took:?}");
    client.finish().await;
    let line = attempt_line(&server);
    assert_eq!(line["status"], "cancelled", "{line}");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn notifications_cancelled_stops_the_call_and_its_container() {
    a_cancelled_call_leaves_nothing(true).await;
}

#[tokio::test]
async fn an_aborted_request_stops_the_call_and_its_container() {
    a_cancelled_call_leaves_nothing(false).await;
}

/// Code that runs a few seconds and says it ended.
const SLEEP_THEN_DONE: &str = "import time\ntime.sleep(6)\nprint('done')";

/// A raw `tools/call` of run_python [`SLEEP_THEN_DONE`] with JSON-RPC id 7 and `headers`, on a
/// client (a connection) of its own; once its container runs, a `notifications/cancelled` of
/// id 7 POSTed with `headers` on another client's connection, as an HTTP client's pool does
/// (the call's POST holds the first connection). Whether the call was cancelled: its container
/// gone within [`GONE_WITHIN`] of the notification, else the call answers with its output.
async fn cancelled_from_another_connection(headers: &[(&str, &str)]) -> bool {
    let instance = unique_instance("xcancel", 10);
    let server = server(&instance, &[]).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "run_python", "arguments": {"code": SLEEP_THEN_DONE}}});
    let (url, owned): (String, Vec<(String, String)>) = (
        server.url.clone(),
        headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    let answer = tokio::spawn(async move {
        let headers: Vec<(&str, &str)> = owned
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        crate::front_door::post_mcp(&url, call, &headers).await
    });
    wait_for_running(&instance, 1).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "the user pressed stop"}});
    let (status, body) = crate::front_door::post_mcp(&server.url, cancel, headers).await;
    assert_eq!(status, 202, "{body}");
    let sent = Instant::now();
    let cancelled = loop {
        if containers_of_instance(&instance).await == 0 {
            break true;
        }
        if sent.elapsed() > GONE_WITHIN {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (status, body) = answer.await.unwrap();
    assert_eq!(status, 200, "{body}");
    if !cancelled {
        assert!(body.contains("done"), "the call ran to its end: {body}");
    }
    let line = attempt_line(&server);
    let status = if cancelled { "cancelled" } else { "ok" };
    assert_eq!(line["status"], status, "{line}");
    server.assert_nothing_left().await;
    cancelled
}

/// A named caller's client may send its cancel on any connection: it cancels its call.
#[tokio::test]
async fn a_named_callers_cancel_on_another_connection_stops_its_call() {
    assert!(cancelled_from_another_connection(&[("X-OpenWebUI-User-Id", "alice")]).await);
}

/// Callers who name no one share one owner key, and JSON-RPC ids are small counters: a cancel
/// from another connection could come from another of them, and cancels nothing.
#[tokio::test]
async fn a_cancel_from_a_caller_who_names_no_one_reaches_no_call_of_another_connection() {
    assert!(!cancelled_from_another_connection(&[]).await);
}

/// Callers who name no one share one owner key, but not its bound of tasks: one of them with
/// `FILE_AGENT_TASKS_PER_CALLER` tasks running leaves another (another connection) room.
#[tokio::test]
async fn a_caller_who_names_no_one_cannot_fill_the_others_room_for_tasks() {
    let instance = unique_instance("tnobody", 10);
    let server = server(
        &instance,
        &[
            ("FILE_AGENT_TASKS", "all"),
            ("FILE_AGENT_TASKS_PER_CALLER", "1"),
        ],
    )
    .await;
    let long = json!({ "code": SLEEP_THEN_DONE }).to_string();
    let mut first = SdkClient::start(
        &server.url,
        &[],
        &["task", "--tool", "run_python", "--args", &long],
    );
    let (created, _) = first.until("created").await;
    assert_eq!(created["task"]["status"], "working", "{created}");
    let short = json!({ "code": "print('mine too')" }).to_string();
    let mut second = SdkClient::start(
        &server.url,
        &[],
        &["task", "--tool", "run_python", "--args", &short],
    );
    let event = second.next().await;
    assert_eq!(
        event["event"], "created",
        "refused a task for another's: {event}"
    );
    let (end, _) = second.until("end").await;
    assert_eq!(end["task"]["status"], "completed", "{end}");
    second.finish().await;
    let (end, _) = first.until("end").await;
    assert_eq!(end["task"]["status"], "completed", "{end}");
    first.finish().await;
    server.assert_nothing_left().await;
}

/// The `result` of a `result` event, without what differs between two runs of the same code:
/// its `_meta` (each call's own audit receipts) and the text's first line (what it used).
fn result_of(event: &Value) -> Value {
    let mut result = event["result"].clone();
    result.as_object_mut().unwrap().remove("_meta");
    for item in result["content"].as_array_mut().unwrap() {
        if let Some(text) = item["text"].as_str() {
            let rest = text
                .split_once('\n')
                .map_or("", |(_, rest)| rest)
                .to_string();
            item["text"] = Value::String(rest);
        }
    }
    result
}

#[tokio::test]
async fn a_task_is_polled_to_its_result_which_is_a_plain_calls() {
    let instance = unique_instance("task", 10);
    let server = server(&instance, &[("FILE_AGENT_TASKS", "all")]).await;
    let arguments = json!({"code": "import time\ntime.sleep(2)\nprint(6 * 7)"}).to_string();
    let mut client = SdkClient::start(
        &server.url,
        &[],
        &["task", "--tool", "run_python", "--args", &arguments],
    );
    let (created, _) = client.until("created").await;
    let task = &created["task"];
    assert_eq!(task["resultType"], "task", "{task}");
    assert_eq!(task["status"], "working", "{task}");
    assert!(task["ttlMs"].as_u64().unwrap() > 600_000, "{task}");
    let (end, statuses) = client.until("end").await;
    assert!(
        statuses.iter().any(|status| status["status"] == "working"
            && status["statusMessage"]
                .as_str()
                .is_some_and(|message| message.contains("sandbox"))),
        "{statuses:?}"
    );
    assert_eq!(end["task"]["status"], "completed", "{end}");
    let (result, _) = client.until("result").await;
    client.finish().await;
    assert!(
        result["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("42"),
        "{result}"
    );

    // Without the extension, the same call answers in the request, with the same result.
    let plain = one_shot(
        &server.url,
        &[],
        &["call", "--tool", "run_python", "--args", &arguments],
    )
    .await;
    assert_eq!(result_of(&plain), result_of(&result));
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn a_cancelled_task_leaves_nothing_and_is_audited() {
    let instance = unique_instance("tcancel", 10);
    let server = server(&instance, &[("FILE_AGENT_TASKS", "all")]).await;
    let arguments = json!({ "code": SLEEP }).to_string();
    let mut client = SdkClient::start(
        &server.url,
        &[],
        &[
            "task",
            "--tool",
            "run_python",
            "--args",
            &arguments,
            "--cancel-when-running",
        ],
    );
    client.until("cancel-sent").await;
    let took = until_none_left(&instance).await;
    assert!(took < GONE_WITHIN, "the container stayed {took:?}");
    let (end, _) = client.until("end").await;
    assert_eq!(end["task"]["status"], "cancelled", "{end}");
    client.finish().await;
    assert_eq!(attempt_line(&server)["status"], "cancelled");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn another_caller_can_neither_see_nor_cancel_a_task() {
    let instance = unique_instance("towner", 10);
    let server = server(&instance, &[("FILE_AGENT_TASKS", "all")]).await;
    let alice = "X-OpenWebUI-User-Id=alice";
    let bob = "X-OpenWebUI-User-Id=bob";
    let arguments = json!({"code": "import time\ntime.sleep(3)\nprint('mine')"}).to_string();
    let mut client = SdkClient::start(
        &server.url,
        &[alice],
        &["task", "--tool", "run_python", "--args", &arguments],
    );
    let (created, _) = client.until("created").await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    for command in ["get", "cancel"] {
        let answer = one_shot(&server.url, &[bob], &[command, "--task-id", &id]).await;
        assert_eq!(answer["ok"], false, "{command}: {answer}");
        assert_eq!(answer["code"], -32602, "{command}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains("not found"),
            "{answer}"
        );
    }
    // Its owner sees it; bob's cancel did not touch it.
    let mine = one_shot(&server.url, &[alice], &["get", "--task-id", &id]).await;
    assert_eq!(mine["ok"], true, "{mine}");
    let (end, _) = client.until("end").await;
    assert_eq!(end["task"]["status"], "completed", "{end}");
    assert!(
        end["task"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("mine"),
        "{end}"
    );
    client.finish().await;
    server.assert_nothing_left().await;
}

/// A task outlives the request that made it, but not the server: SIGTERM stops it once the
/// grace is over, removes its container before the process exits, and its attempt is audited.
#[tokio::test]
async fn sigterm_stops_a_running_task_and_audits_it() {
    let data = tempfile::tempdir().unwrap();
    let instance = unique_instance("tstop", 10);
    let served = crate::lifecycle::serve(
        Some(&instance),
        data.path(),
        &[
            ("FILE_AGENT_TASKS", "all"),
            ("FILE_AGENT_SHUTDOWN_GRACE", "1"),
        ],
    )
    .await;
    let arguments = json!({ "code": SLEEP }).to_string();
    let mut client = SdkClient::start(
        &served.url,
        &[],
        &["task", "--tool", "run_python", "--args", &arguments],
    );
    client.until("created").await;
    wait_for_running(&instance, 1).await;
    served.stop().await;
    assert_eq!(containers_of_instance(&instance).await, 0);
    let lines = crate::common::audit_lines(data.path());
    let attempt = lines
        .iter()
        .find(|line| line["tool"] == "run_python")
        .expect("the task's attempt has its line");
    assert_eq!(attempt["status"], "cancelled", "{attempt}");
}

#[tokio::test]
async fn a_research_call_runs_as_a_task_by_default_with_its_report_and_sources() {
    let llm = FakeOpenAi::with_research(vec![
        Poll::Queued,
        Poll::InProgress,
        Poll::InProgress,
        Poll::Completed,
    ])
    .await;
    // Polled every 0.5 s, the run lasts about 1.5 s: long enough for the client, which polls
    // every 0.2 s, to see it working on a loaded machine (at 0.05 s the run could end before
    // the client's first poll, and the test failed at six tests at once).
    let server = crate::research::server_for(&llm, &[("FILE_AGENT_RESEARCH_POLL", "0.5")]).await;
    let arguments = json!({"instructions": "When was async/await stabilised in Rust?"}).to_string();
    let mut client = SdkClient::start(
        &server.url,
        &[],
        &[
            "task",
            "--tool",
            "conduct_deep_research",
            "--args",
            &arguments,
        ],
    );
    let (created, _) = client.until("created").await;
    assert_eq!(created["task"]["resultType"], "task", "{created}");
    let (end, statuses) = client.until("end").await;
    assert!(
        statuses.iter().any(|status| status["status"] == "working"),
        "{statuses:?}"
    );
    assert_eq!(end["task"]["status"], "completed", "{end}");
    let (result, _) = client.until("result").await;
    client.finish().await;
    let result = &result["result"];
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("## Sources"), "{text}");
    let sources = &result["structuredContent"]["sources"];
    assert_eq!(
        sources[0]["url"], "https://blog.rust-lang.org/2019/11/07/Async-await-stable.html",
        "{result}"
    );
    assert_eq!(llm.research_seen().0.len(), 1);
}

#[tokio::test]
async fn a_research_task_cancelled_mid_run_cancels_the_run_at_the_provider() {
    // The run never ends on its own: the last poll repeats. The default FILE_AGENT_TASKS has
    // research among the tools that answer with a task.
    let llm = FakeOpenAi::with_research(vec![Poll::Queued, Poll::InProgress]).await;
    let server = crate::research::server_for(&llm, &[]).await;
    let arguments = json!({"instructions": "A question that takes forever"}).to_string();
    let mut client = SdkClient::start(
        &server.url,
        &[],
        &[
            "task",
            "--tool",
            "conduct_deep_research",
            "--args",
            &arguments,
            "--cancel-when-running",
            "--cancel-on",
            "in progress",
        ],
    );
    client.until("cancel-sent").await;
    let sent = Instant::now();
    let (end, _) = client.until("end").await;
    assert_eq!(end["task"]["status"], "cancelled", "{end}");
    client.finish().await;
    while llm.research_seen().2 == 0 {
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "the run was not cancelled at the provider within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let polls = llm.research_seen().1;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(llm.research_seen().1, polls, "polled after the cancel");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn over_stdio_a_task_is_polled_to_its_result() {
    let data = tempfile::tempdir().unwrap();
    let instance = unique_instance("stask", 10);
    let endpoint = format!(
        "stdio:env SANDBOX_INSTANCE={instance} FILE_AGENT_TASKS=all FILE_AGENT_DATA_DIR={} {} serve --stdio",
        data.path().display(),
        env!("CARGO_BIN_EXE_file-agent")
    );
    let arguments = json!({"code": "print(6 * 7)"}).to_string();
    let mut client = SdkClient::start_on(
        &endpoint,
        &[],
        &["task", "--tool", "run_python", "--args", &arguments],
    );
    let (created, _) = client.until("created").await;
    assert_eq!(created["task"]["resultType"], "task", "{created}");
    let (end, _) = client.until("end").await;
    assert_eq!(end["task"]["status"], "completed", "{end}");
    let (result, _) = client.until("result").await;
    client.finish().await;
    let text = result["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("42"), "{result}");
    assert_eq!(
        result["result"]["structuredContent"]["stdout"], "42\n",
        "{result}"
    );
    until_none_left(&instance).await;
}
