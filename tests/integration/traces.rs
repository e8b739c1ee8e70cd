//! One trace per call (issue 47): the real `file-agent serve` exports OTLP over HTTP to a
//! receiver that decodes it with the official `opentelemetry-proto` package
//! (`tests/sdk/otlp_receiver.py`), and the official MCP Python SDK sends the call's
//! `traceparent` in `params._meta`. The tree, the audit line's `trace_id`, and the absence of
//! the script's text and of the access token in every byte exported are checked on what the
//! receiver got.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

use crate::common::{audit_lines, run_cli, unique_instance, wait_for_containers, with_timeout};
use crate::fakes::openai::{FakeOpenAi, KEY, MODEL, Poll, Reply};
use crate::front_door::{Served, free_port, post_mcp};
use crate::mcp_server::{llm_script, python_sdk};

const TOKEN: &str = "trace-test-token-5f1c0ffee0ddba11";
/// The client's trace and span: the server span must be their child.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";
/// The HTTP request's trace context, beside the one in `_meta`.
const HTTP_TRACE: &str = "11111111111111111111111111111111";
const HTTP_SPAN: &str = "2222222222222222";
/// A marker only the script's text holds (its output is a number).
const MARKER: &str = "zebra-quokka-7781";

/// The receiver, running; stopped when dropped.
struct Receiver {
    child: tokio::process::Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Receiver {
    async fn start() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let venv = crate::common::sdk_venv();
        let dir = tempfile::tempdir().unwrap();
        let mut child = tokio::process::Command::new(venv.join("bin/python3"))
            .arg(root.join("tests/sdk/otlp_receiver.py"))
            .arg(dir.path())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        with_timeout(tokio::io::BufReader::new(stdout).read_line(&mut line))
            .await
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("port: ")
            .unwrap_or_else(|| panic!("the receiver did not start (is opentelemetry-proto in the venv? scripts/test-python.sh): {line:?}"))
            .parse()
            .unwrap();
        Self { child, port, dir }
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("spans.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn raw(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("raw.bin")).unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// The one span named `name` among `spans` under `parent` (a span id).
fn child<'a>(spans: &'a [Value], parent: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = spans
        .iter()
        .filter(|span| span["name"] == name && span["parent_span_id"] == parent)
        .collect();
    assert_eq!(found.len(), 1, "one {name} under {parent}: {spans:#?}");
    found[0]
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[tokio::test]
async fn a_call_is_one_trace_under_the_clients_traceparent_joined_to_its_audit_line() {
    let receiver = Receiver::start().await;
    let endpoint = format!("http://127.0.0.1:{}", receiver.port);
    let listen = format!("127.0.0.1:{}", free_port());
    let instance = unique_instance("traces", 12);
    let served = Served::start(
        &[
            ("FILE_AGENT_LISTEN", listen.as_str()),
            ("FILE_AGENT_ACCESS_TOKENS", TOKEN),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "file-agent-under-test"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
            ("SANDBOX_INSTANCE", instance.as_str()),
        ],
        None,
    )
    .await;
    let code = format!("marker = {MARKER:?}\nprint(len(marker))");
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN}-01");
    let output = python_sdk(
        &served.url,
        &[
            "--token",
            TOKEN,
            "--no-list",
            "--code",
            &code,
            "--traceparent",
            &traceparent,
            "--tracestate",
            "rojo=00f067aa0ba902b7",
            // The HTTP request's own context differs: a link, not the parent.
            "--header",
            &format!("traceparent=00-{HTTP_TRACE}-{HTTP_SPAN}-01"),
        ],
    )
    .await;
    assert!(output.status.success(), "{output:?}");
    // A malformed traceparent is no error: the call runs, in a trace of its own.
    let output = python_sdk(
        &served.url,
        &[
            "--token",
            TOKEN,
            "--no-list",
            "--traceparent",
            "00-zz-not-a-trace-01",
        ],
    )
    .await;
    assert!(output.status.success(), "{output:?}");
    let (log, dir) = served.stop_keeping().await;
    wait_for_containers(&instance, 0).await;
    let spans = until_exported(&receiver, 2).await;

    // The server span: a child of the client's span, in the conventions' names.
    let server = child(&spans, PARENT_SPAN, "tools/call run_python");
    assert_eq!(server["trace_id"], TRACE_ID, "{server:#}");
    assert_eq!(server["kind"], "SPAN_KIND_SERVER");
    assert_eq!(server["trace_state"], "rojo=00f067aa0ba902b7");
    let attributes = &server["attributes"];
    assert_eq!(attributes["mcp.method.name"], "tools/call");
    assert_eq!(attributes["gen_ai.tool.name"], "run_python");
    assert_eq!(attributes["gen_ai.operation.name"], "execute_tool");
    assert!(attributes["jsonrpc.request.id"].is_string(), "{server:#}");
    assert!(attributes["mcp.protocol.version"].is_string(), "{server:#}");
    assert_eq!(attributes["network.transport"], "tcp");
    assert_eq!(attributes["network.protocol.name"], "http");
    assert!(attributes.get("error.type").is_none(), "{server:#}");
    assert_eq!(server["resource"]["service.name"], "file-agent-under-test");
    assert_eq!(
        server["links"],
        json!([{"trace_id": HTTP_TRACE, "span_id": HTTP_SPAN}])
    );
    // The SDK's tools/list after the call (it did not list first): a server span too.
    let list = spans
        .iter()
        .find(|span| span["name"] == "tools/list")
        .unwrap_or_else(|| panic!("no tools/list span: {spans:#?}"));
    assert_eq!(list["kind"], "SPAN_KIND_SERVER");
    assert_eq!(list["attributes"]["mcp.method.name"], "tools/list");
    assert!(
        list["attributes"].get("gen_ai.tool.name").is_none(),
        "{list:#}"
    );

    // The attempt under it, and the sandbox's phases under the attempt.
    let server_id = server["span_id"].as_str().unwrap();
    let attempt = child(&spans, server_id, "attempt");
    assert_eq!(attempt["attributes"]["file_agent.attempt.number"], 1);
    assert_eq!(attempt["attributes"]["file_agent.attempt.status"], "ok");
    assert_eq!(
        attempt["attributes"]["file_agent.sandbox.backend"],
        "docker"
    );
    assert_eq!(
        attempt["attributes"]["file_agent.attempt.container"],
        "cold"
    );
    // What it used, as the audit line's `resources` says it.
    let peak = attempt["attributes"]["file_agent.attempt.peak_memory_bytes"].as_i64();
    assert!(peak.is_some_and(|peak| peak > 1 << 20), "{attempt:#}");
    let cpu = attempt["attributes"]["file_agent.attempt.cpu_user_s"].as_f64();
    assert!(cpu.is_some_and(|cpu| cpu >= 0.0), "{attempt:#}");
    let attempt_id = attempt["span_id"].as_str().unwrap();
    for phase in ["queue", "create", "start", "copy_in", "run", "copy_out"] {
        let span = child(&spans, attempt_id, phase);
        assert_eq!(span["trace_id"], TRACE_ID, "{span:#}");
    }
    let run = child(&spans, attempt_id, "run");
    let took = run["end_ns"].as_u64().unwrap() - run["start_ns"].as_u64().unwrap();
    assert!(took > 0, "{run:#}");

    // The malformed traceparent's call: a root span of a new trace.
    let other: Vec<&Value> = spans
        .iter()
        .filter(|span| span["name"] == "tools/call run_python" && span["trace_id"] != TRACE_ID)
        .collect();
    assert_eq!(other.len(), 1, "{spans:#?}");
    assert_eq!(other[0]["parent_span_id"], "");

    // The audit line and the log line carry the trace id.
    let lines = audit_lines(&dir.path().join("data"));
    let ours: Vec<&Value> = lines
        .iter()
        .filter(|line| line["trace_id"] == TRACE_ID)
        .collect();
    assert_eq!(ours.len(), 1, "{lines:#?}");
    assert_eq!(ours[0]["call"], server["attributes"]["file_agent.call.id"]);
    assert!(log.contains(&format!("trace_id=\"{TRACE_ID}\"")), "{log}");
    // The review page shows it with the attempt.
    let data = dir.path().join("data");
    let page = dir.path().join("review.html");
    let report = run_cli(
        &[
            "audit",
            "report",
            data.to_str().unwrap(),
            "--out",
            page.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(report.code, Some(0), "{}", report.stderr);
    let page = std::fs::read_to_string(page).unwrap();
    assert!(
        page.contains(&format!("<dt>trace</dt><dd><code>{TRACE_ID}</code>")),
        "the review page does not show the trace id"
    );

    // Nothing of the code, and no token, in any byte exported.
    let raw = receiver.raw();
    assert!(!raw.is_empty());
    assert!(!contains(&raw, MARKER), "the script's text was exported");
    assert!(!contains(&raw, TOKEN), "the access token was exported");
}

/// The spans the receiver has once `calls` tools/call server spans are in (the server flushes its
/// queue when it stops), waiting up to 10 s.
async fn until_exported(receiver: &Receiver, calls: usize) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let spans = receiver.spans();
        let servers = spans
            .iter()
            .filter(|span| span["attributes"]["mcp.method.name"] == "tools/call")
            .count();
        if servers >= calls || started.elapsed() > Duration::from_secs(10) {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One call from the official SDK, which a failing collector must not slow; then the
/// dropped-spans counter, once it moves (or after `patience`).
async fn call_then_count_drops(served: &Served, patience: Duration) -> f64 {
    let started = Instant::now();
    let output = python_sdk(&served.url, &["--no-list"]).await;
    assert!(output.status.success(), "{output:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let mut dropped = 0.0;
    let waiting = Instant::now();
    while dropped == 0.0 && waiting.elapsed() < patience {
        tokio::time::sleep(Duration::from_millis(250)).await;
        dropped = crate::faults::metric(&served.url, "file_agent_trace_spans_dropped_total")
            .await
            .expect("no dropped-spans counter in /metrics");
    }
    dropped
}

#[tokio::test]
async fn a_collector_that_is_down_or_a_full_queue_fails_no_call_and_drops_are_counted_and_said() {
    // Nothing listens on this port: every export is refused.
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let listen = format!("127.0.0.1:{}", free_port());
    let instance = unique_instance("traces", 12);
    let served = Served::start(
        &[
            ("FILE_AGENT_LISTEN", listen.as_str()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            // A queue of two: a call's spans overflow it, and the drops are said too.
            ("OTEL_BSP_MAX_QUEUE_SIZE", "2"),
            ("SANDBOX_INSTANCE", instance.as_str()),
        ],
        None,
    )
    .await;
    let dropped = call_then_count_drops(&served, Duration::from_secs(30)).await;
    let log = served.stop().await;
    wait_for_containers(&instance, 0).await;
    assert!(dropped >= 1.0, "no span counted as dropped\n{log}");
    assert!(
        log.contains("traces: an export to the collector failed"),
        "{log}"
    );
    assert!(log.contains("traces: the export queue is full"), "{log}");
}

/// A collector that takes connections and never answers: every export hangs until it is
/// dropped.
async fn silent_collector() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let holding = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (endpoint, holding)
}

#[tokio::test]
async fn a_collector_that_never_answers_slows_no_call_and_a_full_queue_is_counted() {
    let (endpoint, collector) = silent_collector().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let instance = unique_instance("traces", 12);
    let served = Served::start(
        &[
            ("FILE_AGENT_LISTEN", listen.as_str()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "2"),
            // No export fails while the test looks: what is counted is the full queue's.
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "120000"),
            ("OTEL_BSP_EXPORT_TIMEOUT", "120000"),
            ("SANDBOX_INSTANCE", instance.as_str()),
        ],
        None,
    )
    .await;
    let dropped = call_then_count_drops(&served, Duration::from_secs(20)).await;
    // The collector goes: the hung export fails at once and the server stops promptly.
    collector.abort();
    let log = served.stop().await;
    wait_for_containers(&instance, 0).await;
    assert!(
        dropped >= 1.0,
        "a full queue's drops were not counted\n{log}"
    );
    assert!(log.contains("traces: the export queue is full"), "{log}");
}

/// A receiver, and the real binary exporting its traces to it, its model `llm`, with `extra`
/// settings.
async fn traced_server(llm: &FakeOpenAi, extra: &[(&str, &str)]) -> (Receiver, Served) {
    let receiver = Receiver::start().await;
    let endpoint = format!("http://127.0.0.1:{}/v1/traces", receiver.port);
    let listen = format!("127.0.0.1:{}", free_port());
    let llm_env = llm.env();
    let mut vars: Vec<(&str, &str)> = llm_env
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    vars.extend([
        ("FILE_AGENT_LISTEN", listen.as_str()),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "200"),
    ]);
    vars.extend_from_slice(extra);
    let served = Served::start(&vars, None).await;
    (receiver, served)
}

#[tokio::test]
async fn a_retried_generate_file_shows_both_attempts_and_model_requests_under_the_http_traceparent()
{
    const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const CLIENT_SPAN: &str = "b7ad6b7169203331";
    const FAILURE: &str = "first-try-fails-on-purpose";
    const ASKED: &str = "sales by region, privately";
    let llm = FakeOpenAi::start(vec![
        Reply::Code(format!("raise ValueError({FAILURE:?})")),
        Reply::Code(llm_script("excel_sales.py")),
    ])
    .await;
    let instance = unique_instance("traces", 12);
    let (receiver, served) = traced_server(&llm, &[("SANDBOX_INSTANCE", instance.as_str())]).await;
    // No `_meta` trace context: the HTTP request's `traceparent` header is the parent.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "generate_file", "arguments": {
            "instructions": ASKED, "file_type": "excel", "filename_hint": "Sales"}}});
    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let (status, body) = post_mcp(&served.url, call, &[("traceparent", &traceparent)]).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("attempt 2 of 3"), "{body}");
    served.stop().await;
    wait_for_containers(&instance, 0).await;
    let spans = until_exported(&receiver, 1).await;

    let server = child(&spans, CLIENT_SPAN, "tools/call generate_file");
    assert_eq!(server["trace_id"], TRACE);
    assert_eq!(server["attributes"]["jsonrpc.request.id"], "7");
    let server_id = server["span_id"].as_str().unwrap();
    let attempts: Vec<&Value> = spans
        .iter()
        .filter(|span| span["name"] == "attempt" && span["parent_span_id"] == server_id)
        .collect();
    let endings: Vec<(i64, &str)> = attempts
        .iter()
        .map(|span| {
            let attributes = &span["attributes"];
            (
                attributes["file_agent.attempt.number"].as_i64().unwrap(),
                attributes["file_agent.attempt.status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(endings, vec![(1, "failed"), (2, "ok")], "{spans:#?}");
    assert_eq!(attempts[0]["status"], "STATUS_CODE_ERROR");
    let chats: Vec<&Value> = spans
        .iter()
        .filter(|span| span["parent_span_id"] == server_id && span["kind"] == "SPAN_KIND_CLIENT")
        .collect();
    assert_eq!(chats.len(), 2, "{spans:#?}");
    for chat in chats {
        assert_eq!(chat["name"], format!("chat {MODEL}"));
        let attributes = &chat["attributes"];
        assert_eq!(attributes["gen_ai.operation.name"], "chat");
        assert_eq!(attributes["gen_ai.request.model"], MODEL);
        assert_eq!(attributes["gen_ai.usage.input_tokens"], 100);
        assert_eq!(attributes["gen_ai.usage.output_tokens"], 50);
    }
    // The file's check, then its upload to the local store.
    let check = child(&spans, server_id, "check");
    assert_eq!(
        check["attributes"]["file_agent.check.file_type"],
        "Excel workbook"
    );
    assert_eq!(check["attributes"]["file_agent.outcome"], "ok");
    let upload = child(&spans, server_id, "upload");
    assert_eq!(upload["attributes"]["file_agent.storage"], "local");
    assert!(
        upload["attributes"]["file_agent.upload.bytes"]
            .as_i64()
            .unwrap()
            > 0
    );
    assert!(upload["start_ns"].as_u64() >= check["end_ns"].as_u64());
    // No prompt, no code, no error text, no key.
    let raw = receiver.raw();
    for secret in [ASKED, FAILURE, KEY, "xlsxwriter"] {
        assert!(!contains(&raw, secret), "{secret:?} was exported");
    }
}

#[tokio::test]
async fn a_research_run_shows_its_start_and_polls_as_model_requests_without_its_question() {
    const QUESTION: &str = "the-secret-question-about-walruses";
    let llm =
        FakeOpenAi::with_research(vec![Poll::Queued, Poll::InProgress, Poll::Completed]).await;
    let (receiver, served) = traced_server(
        &llm,
        &[
            ("FILE_AGENT_RESEARCH_POLL", "0.05"),
            ("DEEP_RESEARCH_MODEL", "o4-mini-deep-research"),
        ],
    )
    .await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "conduct_deep_research", "arguments": {"instructions": QUESTION}}});
    let (status, body) = post_mcp(&served.url, call, &[]).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("## Sources"), "{body}");
    served.stop().await;
    let spans = until_exported(&receiver, 1).await;

    let server = spans
        .iter()
        .find(|span| span["name"] == "tools/call conduct_deep_research")
        .unwrap_or_else(|| panic!("no server span: {spans:#?}"));
    let requests: Vec<&str> = spans
        .iter()
        .filter(|span| span["parent_span_id"] == server["span_id"])
        .filter(|span| span["name"] == "chat o4-mini-deep-research")
        .map(|span| {
            assert_eq!(span["kind"], "SPAN_KIND_CLIENT");
            assert_eq!(
                span["attributes"]["gen_ai.request.model"],
                "o4-mini-deep-research"
            );
            span["attributes"]["file_agent.llm.request"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(requests[0], "research_start", "{spans:#?}");
    assert!(requests.len() >= 3, "{requests:?}");
    assert!(
        requests[1..]
            .iter()
            .all(|request| *request == "research_poll"),
        "{requests:?}"
    );
    assert!(
        !contains(&receiver.raw(), QUESTION),
        "the question is in a span"
    );
}

#[tokio::test]
async fn a_tasks_request_has_its_server_span_and_a_refusal_its_error_code() {
    const TRACE: &str = "5bf92f3577b34da6a3ce929d0e0e4737";
    let receiver = Receiver::start().await;
    let endpoint = format!("http://127.0.0.1:{}/v1/traces", receiver.port);
    let listen = format!("127.0.0.1:{}", free_port());
    let served = Served::start(
        &[
            ("FILE_AGENT_LISTEN", listen.as_str()),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ],
        None,
    )
    .await;
    let declared = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let get = json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/get", "params": {
        "taskId": "no-such-task",
        "_meta": {"io.modelcontextprotocol/clientCapabilities": declared,
                  "traceparent": format!("00-{TRACE}-{PARENT_SPAN}-01")}}});
    let (status, body) = post_mcp(&served.url, get, &[]).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("-32602"), "{body}");
    served.stop().await;
    let started = Instant::now();
    let span = loop {
        let spans = receiver.spans();
        if let Some(span) = spans.iter().find(|span| span["name"] == "tasks/get") {
            break span.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no tasks/get span: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(span["kind"], "SPAN_KIND_SERVER");
    assert_eq!(span["trace_id"], TRACE);
    assert_eq!(span["parent_span_id"], PARENT_SPAN);
    assert_eq!(span["attributes"]["mcp.method.name"], "tasks/get");
    assert_eq!(span["attributes"]["error.type"], "-32602");
    assert!(
        !contains(&receiver.raw(), "no-such-task"),
        "the task id is in a span"
    );
}
