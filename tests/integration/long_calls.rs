//! Long calls through Open WebUI 0.12.4's own MCP client (`tests/sdk/openwebui_client.py`, in
//! the venv of `scripts/test-openwebui.sh`): a research run longer than the client's fixed
//! 300 s read timeout ends with its report, in the session and the signed-token modes at once;
//! the same with a shorter read timeout, which fails on a server that sends nothing while it
//! works; the same call raw, as SSE comments then its answer; and a client that gives up
//! leaves the report to its own next call, and to no one else's.
//!
//! The tests' fake OpenAI keeps each run `in_progress` for as long as the test says
//! ([`Poll::WorkingFor`]). `FILE_AGENT_TEST_LONG_RESEARCH_SECS` lengthens the long test's run
//! (600 for the ten-minute measurement).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::with_timeout;
use crate::fakes::openai::{FakeOpenAi, Poll};
use crate::fakes::openwebui::{ALICE, FakeOpenWebUi, ForwardedUser, forwarded_headers};
use crate::mcp_server::{TestServer, env};

const TOKEN: &str = "test-access-token-0123456789";
const SECRET: &str = "forward-user-jwt-secret-0123456789abcdef";
/// The length of the long test's run unless `FILE_AGENT_TEST_LONG_RESEARCH_SECS` says.
const LONG_RUN_SECS: u64 = 330;

const BOB_USER: ForwardedUser = ForwardedUser {
    id: "u-bob",
    name: "Bob",
    email: "bob@example.com",
    role: "user",
};

/// A server with research, a keep-alive of 1 s, files and chat statuses in `owui`, access
/// tokens and Open WebUI's signed user tokens; research runs polled every `poll` seconds.
async fn server(llm: &FakeOpenAi, owui: &FakeOpenWebUi, poll: &str) -> TestServer {
    let mut vars = llm.env();
    vars.extend(env(&[
        ("FILE_AGENT_ACCESS_TOKENS", TOKEN),
        ("FILE_AGENT_OPENWEBUI_USER_JWT_SECRET", SECRET),
        ("INTERNAL_API_URL", &owui.url),
        ("FILE_AGENT_KEEP_ALIVE", "1"),
        ("FILE_AGENT_RESEARCH_POLL", poll),
        ("FILE_AGENT_RESEARCH_TIMEOUT", "1800"),
        ("DEEP_RESEARCH_MODEL", "o4-mini-deep-research"),
    ]));
    TestServer::start(&vars).await
}

/// The headers Open WebUI sends with auth "Session" and the connection's custom key: the
/// user's session token as the bearer, the chat's and the message's ids.
fn session_headers(chat: &str, message: &str) -> Vec<(&'static str, String)> {
    vec![
        ("Authorization", format!("Bearer {ALICE}")),
        ("X-File-Agent-Key", TOKEN.into()),
        ("X-OpenWebUI-Chat-Id", chat.into()),
        ("X-OpenWebUI-Message-Id", message.into()),
    ]
}

/// The headers Open WebUI sends with the signed user token (`ENABLE_FORWARD_USER_INFO_HEADERS`
/// and `FORWARD_USER_INFO_HEADER_JWT_SECRET`) and the connection's custom key.
fn signed_headers(user: &ForwardedUser, chat: &str, message: &str) -> Vec<(&'static str, String)> {
    let mut headers = forwarded_headers(user, Some(SECRET), chat, message);
    headers.push(("X-File-Agent-Key", TOKEN.into()));
    headers
}

/// Runs `tests/sdk/openwebui_client.py` against `server` with `headers`, calling `tool` with
/// `arguments`, with `extra` options; its last JSON line (the call's end), within `limit`.
async fn openwebui_call(
    server: &TestServer,
    headers: &[(&'static str, String)],
    tool: &str,
    arguments: Value,
    extra: &[&str],
    limit: Duration,
) -> Value {
    let mut options: Vec<String> = vec![
        "--tool".into(),
        tool.into(),
        "--args".into(),
        arguments.to_string(),
    ];
    options.extend(extra.iter().map(|option| option.to_string()));
    for (name, value) in headers {
        options.extend(["--header".into(), format!("{name}={value}")]);
    }
    openwebui_client(server, &options, &[], limit).await
}

/// Runs `tests/sdk/openwebui_client.py` against `server` with `options`, Open WebUI's settings
/// `settings` in its environment; its last JSON line (the call's end), within `limit`.
pub(crate) async fn openwebui_client(
    server: &TestServer,
    options: &[String],
    settings: &[(&str, &str)],
    limit: Duration,
) -> Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = crate::common::test_venv("FILE_AGENT_TEST_OPENWEBUI_ENV", "target/test-openwebui");
    let mut command = tokio::process::Command::new(venv.join("bin/python3"));
    command
        .arg(root.join("tests/sdk/openwebui_client.py"))
        .arg(format!("{}/mcp", server.url))
        .args(options)
        .envs(settings.iter().copied())
        .kill_on_drop(true);
    let output = tokio::time::timeout(limit, command.output())
        .await
        .expect("Open WebUI's client did not end in time")
        .expect("Open WebUI's client could not start (scripts/test-openwebui.sh makes its venv)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|end| end["event"] != "connected")
        .unwrap_or_else(|| {
            panic!("no end from Open WebUI's client\nstdout:\n{stdout}\nstderr:\n{stderr}")
        })
}

/// The text of a result's content, as Open WebUI passes it to the model.
pub(crate) fn text(end: &Value) -> String {
    end["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The status descriptions posted to chat `chat`, in order.
fn statuses(owui: &FakeOpenWebUi, chat: &str) -> Vec<String> {
    owui.events()
        .into_iter()
        .filter(|(id, _, event)| id == chat && event["type"] == "status")
        .filter_map(|(_, _, event)| event["data"]["description"].as_str().map(str::to_string))
        .collect()
}

fn research(instructions: &str) -> Value {
    json!({"instructions": instructions})
}

/// The case: a run that the provider keeps `in_progress` past Open WebUI's 300 s read
/// timeout, asked from a session-auth chat and a signed-token chat at once; both reports
/// arrive, and the session chat's last status is "Done".
#[tokio::test]
async fn a_research_run_past_open_webuis_read_timeout_reaches_both_chats() {
    let secs = std::env::var("FILE_AGENT_TEST_LONG_RESEARCH_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .unwrap_or(LONG_RUN_SECS);
    let llm = FakeOpenAi::with_research(vec![Poll::WorkingFor(Duration::from_secs(secs))]).await;
    let owui = FakeOpenWebUi::start().await;
    owui.add_chat("chat-session", ALICE);
    let server = server(&llm, &owui, "5").await;
    let limit = Duration::from_secs(secs + 120);
    let started = Instant::now();
    let (session_chat, signed_chat) = (
        session_headers("chat-session", "message-1"),
        signed_headers(&BOB_USER, "chat-signed", "message-2"),
    );
    let session = openwebui_call(
        &server,
        &session_chat,
        "conduct_deep_research",
        research("When was async/await stabilised in Rust?"),
        &[],
        limit,
    );
    let signed = openwebui_call(
        &server,
        &signed_chat,
        "conduct_deep_research",
        research("When did Rust 1.0 ship?"),
        &[],
        limit,
    );
    let (session, signed) = tokio::join!(session, signed);
    let took = started.elapsed();
    eprintln!(
        "research of {secs} s at the provider: both reports after {took:?}; session {session}; signed {signed}"
    );
    for end in [&session, &signed] {
        assert_eq!(end["event"], "result", "{end}");
        assert!(
            text(end).contains("[[1]](https://blog.rust-lang.org/"),
            "{end}"
        );
        assert!(end["seconds"].as_f64().unwrap() >= secs as f64, "{end}");
    }
    let (requests, _, cancels) = llm.research_seen();
    assert_eq!((requests.len(), cancels), (2, 0));
    let shown = statuses(&owui, "chat-session");
    assert_eq!(shown.last().map(String::as_str), Some("Done"), "{shown:?}");
}

/// The same with the client's read timeout at 4 s and a run of 10 s: quick, and on a server
/// that sends nothing while a call works the client's read times out (it did before
/// `FILE_AGENT_KEEP_ALIVE`). The same call, raw: SSE comments, then the answer.
#[tokio::test]
async fn a_call_longer_than_the_clients_read_timeout_is_kept_alive() {
    let llm = FakeOpenAi::with_research(vec![Poll::WorkingFor(Duration::from_secs(10))]).await;
    let owui = FakeOpenWebUi::start().await;
    owui.add_chat("chat-1", ALICE);
    let server = server(&llm, &owui, "0.5").await;
    let end = openwebui_call(
        &server,
        &session_headers("chat-1", "message-1"),
        "conduct_deep_research",
        research("When was async/await stabilised in Rust?"),
        &["--read-timeout", "4"],
        // A bound: Open WebUI's client alone took over 60 s beside a loaded suite.
        Duration::from_secs(180),
    )
    .await;
    assert_eq!(end["event"], "result", "{end}");
    assert!(text(&end).contains("## Sources"), "{end}");
    assert!(end["seconds"].as_f64().unwrap() >= 10.0, "{end}");

    // Raw: a long call is a stream of comments, then its answer as one event; a quick
    // request stays one JSON body; a client that takes only JSON is refused by rmcp, as ever.
    let post = |accept: &'static str, body: Value| {
        reqwest::Client::new()
            .post(format!("{}/mcp", server.url))
            .header("accept", accept)
            .header("x-file-agent-key", TOKEN)
            .json(&body)
            .send()
    };
    let both = "application/json, text/event-stream";
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "conduct_deep_research",
                                 "arguments": research("When did Rust 1.0 ship?")}});
    let response = with_timeout(post(both, call.clone())).await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let body = with_timeout(response.text()).await.unwrap();
    assert!(
        body.matches(": file-agent is working").count() >= 5,
        "{body}"
    );
    let answer = body
        .lines()
        .find_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str::<Value>(data).unwrap())
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(answer["id"], 7, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.contains("## Sources")),
        "{answer}"
    );
    let list = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"});
    let response = with_timeout(post(both, list)).await.unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
    let response = with_timeout(post("application/json", call)).await.unwrap();
    assert_eq!(response.status(), 406);
}

/// Asks for research on `instructions` as a chat sending `headers` does, through Open WebUI's
/// client, which gives up after `give_up` seconds when given; the call's end.
async fn ask(
    server: &TestServer,
    headers: &[(&'static str, String)],
    instructions: &str,
    give_up: Option<&str>,
) -> Value {
    let extra: Vec<&str> = give_up.map_or_else(Vec::new, |after| vec!["--give-up-after", after]);
    let arguments = research(instructions);
    // Generous: Open WebUI's client alone (its package's imports) took over 60 s to end beside
    // a loaded suite.
    let limit = Duration::from_secs(180);
    openwebui_call(
        server,
        headers,
        "conduct_deep_research",
        arguments,
        &extra,
        limit,
    )
    .await
}

/// Whether `end` is a report from a run an earlier call started.
fn from_earlier_call(end: &Value) -> bool {
    end["event"] == "result"
        && text(end).contains("an earlier call with the same instructions")
        && text(end).contains("## Sources")
}

/// A chat whose client gives up (its own timeout) leaves the run going at the provider; the
/// same caller's next call with the same instructions joins it while it goes, or gets the kept
/// report once it ended; another caller with the same instructions starts a run of its own.
/// The chat's status says the connection closed and the research goes on.
#[tokio::test]
async fn a_client_that_gives_up_leaves_the_report_to_its_next_call_only() {
    let llm = FakeOpenAi::with_research(vec![Poll::WorkingFor(Duration::from_secs(5))]).await;
    let owui = FakeOpenWebUi::start().await;
    owui.add_chat("chat-1", ALICE);
    let server = server(&llm, &owui, "0.2").await;
    let alice = session_headers("chat-1", "message-1");
    let question = "When was async/await stabilised in Rust?";
    let gave_up = ask(&server, &alice, question, Some("1.5")).await;
    assert_eq!(gave_up["event"], "gave-up", "{gave_up}");
    // Its status says what became of the run, not "the answer says why".
    let deadline = Instant::now() + Duration::from_secs(10);
    while !statuses(&owui, "chat-1")
        .last()
        .is_some_and(|status| status.contains("the research goes on"))
    {
        let shown = statuses(&owui, "chat-1");
        assert!(Instant::now() < deadline, "{shown:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let shown = statuses(&owui, "chat-1");
    assert!(
        !shown
            .iter()
            .any(|status| status.contains("the answer says why"))
    );

    // The next call joins the run still going: the report, no second run, no cancel.
    let joined = ask(&server, &alice, question, None).await;
    assert!(from_earlier_call(&joined), "{joined}");
    let (requests, _, cancels) = llm.research_seen();
    assert_eq!((requests.len(), cancels), (1, 0));

    // Given up again, on another question, and back once its run ended: the kept report at once.
    let other = "When did Rust 1.0 ship?";
    let ended_before = llm.research_completions();
    let gave_up = ask(&server, &alice, other, Some("1")).await;
    assert_eq!(gave_up["event"], "gave-up", "{gave_up}");
    // Until the server has seen its run end at the provider (5 s of work there).
    let deadline = Instant::now() + Duration::from_secs(60);
    while llm.research_completions() == ended_before {
        assert!(Instant::now() < deadline, "the run never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let polls = llm.research_seen().1;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(llm.research_seen().1, polls, "the ended run is not polled");
    let kept = ask(&server, &alice, other, None).await;
    assert!(from_earlier_call(&kept), "{kept}");
    assert!(kept["seconds"].as_f64().unwrap() < 3.0, "{kept}");
    assert_eq!(llm.research_seen().0.len(), 2);

    // Bob, with the same instructions as a run Alice left: a run of his own.
    let third = "A third question";
    let gave_up = ask(&server, &alice, third, Some("1")).await;
    assert_eq!(gave_up["event"], "gave-up", "{gave_up}");
    let bob = signed_headers(&BOB_USER, "chat-2", "message-2");
    let bobs = ask(&server, &bob, third, None).await;
    assert_eq!(bobs["event"], "result", "{bobs}");
    assert!(!text(&bobs).contains("an earlier call"), "{bobs}");
    let (requests, _, cancels) = llm.research_seen();
    assert_eq!((requests.len(), cancels), (4, 0));
}
