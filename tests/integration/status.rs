//! What the user sees while a call works (issue 31): the flows' phases as status events under
//! the assistant's message in an Open WebUI chat (its event API, in the tests' double, which
//! checks the credential and the chat's owner as Open WebUI does), the stored file attached to
//! the message, MCP progress notifications for a client that sent a progress token, and an Open
//! WebUI that hangs or fails on events changing nothing of the call.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ProgressNotificationParam};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::common::with_timeout;
use crate::fakes::openai::{FakeOpenAi, Reply};
use crate::fakes::openwebui::{BOB, EventsAnswer, FakeOpenWebUi};
use crate::mcp_server::{ProgressRecorder, TestServer, env, llm_script, text_of};

const CHAT: &str = "chat-7";
const MESSAGE: &str = "message-9";

/// A server storing in `owui` and a model that fails once (a ZeroDivisionError) and then
/// writes the workbook.
async fn server(owui: &FakeOpenWebUi) -> (FakeOpenAi, TestServer) {
    server_with(owui, &[]).await
}

/// [`server`] with `extra` settings.
async fn server_with(owui: &FakeOpenWebUi, extra: &[(&str, &str)]) -> (FakeOpenAi, TestServer) {
    let llm = FakeOpenAi::start(vec![
        Reply::Code(llm_script("fails_zero_division.py")),
        Reply::Code(llm_script("excel_sales.py")),
    ])
    .await;
    let mut vars = llm.env();
    vars.extend(env(&[("INTERNAL_API_URL", &owui.url)]));
    vars.extend(env(extra));
    let server = TestServer::start(&vars).await;
    (llm, server)
}

/// Calls generate_file as Open WebUI's session auth does for Bob in chat [`CHAT`], message
/// [`MESSAGE`], with a progress token (the rmcp client puts one on every request); returns
/// (is_error, text, progress notifications, how long it took).
async fn generate(server: &TestServer) -> (bool, String, Vec<ProgressNotificationParam>, Duration) {
    generate_in(server, CHAT).await
}

/// [`generate`] in chat `chat`.
async fn generate_in(
    server: &TestServer,
    chat: &str,
) -> (bool, String, Vec<ProgressNotificationParam>, Duration) {
    let arguments = json!({"instructions": "a sales workbook", "file_type": "excel"});
    call_in(server, chat, "generate_file", arguments).await
}

/// Calls `tool` with `arguments` as [`generate`] does, in chat `chat`.
async fn call_in(
    server: &TestServer,
    chat: &str,
    tool: &'static str,
    arguments: Value,
) -> (bool, String, Vec<ProgressNotificationParam>, Duration) {
    let recorder = ProgressRecorder::default();
    let headers = HashMap::from([
        (
            http::HeaderName::from_static("x-openwebui-chat-id"),
            http::HeaderValue::from_str(chat).unwrap(),
        ),
        (
            http::HeaderName::from_static("x-openwebui-message-id"),
            http::HeaderValue::from_static(MESSAGE),
        ),
    ]);
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", server.url))
        .auth_header(BOB)
        .custom_headers(headers);
    let client = with_timeout(
        recorder
            .clone()
            .serve(StreamableHttpClientTransport::from_config(config)),
    )
    .await
    .unwrap();
    let arguments = arguments.as_object().cloned().unwrap();
    let started = Instant::now();
    let result =
        with_timeout(client.call_tool(CallToolRequestParams::new(tool).with_arguments(arguments)))
            .await
            .unwrap();
    let took = started.elapsed();
    let _ = client.cancel().await;
    let seen = recorder.seen.lock().unwrap().clone();
    (result.is_error == Some(true), text_of(&result), seen, took)
}

/// The status descriptions posted so far, and whether each was `done`.
fn statuses(owui: &FakeOpenWebUi) -> Vec<(String, bool)> {
    owui.events()
        .iter()
        .filter(|(chat, message, event)| {
            chat == CHAT && message == MESSAGE && event["type"] == "status"
        })
        .map(|(_, _, event)| {
            (
                event["data"]["description"].as_str().unwrap().to_string(),
                event["data"]["done"] == true,
            )
        })
        .collect()
}

/// Waits until the chat has its final status (posted after the answer, never before it).
async fn wait_for_done(owui: &FakeOpenWebUi) -> Vec<(String, bool)> {
    with_timeout(async {
        loop {
            let seen = statuses(owui);
            if seen.last().is_some_and(|(_, done)| *done) {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test]
async fn a_retried_generation_shows_its_phases_in_the_chat_and_as_mcp_progress() {
    let owui = FakeOpenWebUi::start().await;
    owui.add_chat(CHAT, BOB);
    let (_llm, server) = server(&owui).await;
    let (is_error, text, progress, _) = generate(&server).await;
    assert!(!is_error, "{text}");

    // The chat: the phases in order, the retry with its one-line reason, ending done.
    let seen = wait_for_done(&owui).await;
    let descriptions: Vec<&str> = seen.iter().map(|(d, _)| d.as_str()).collect();
    let expected = [
        "Writing the script",
        "Running it in a fresh sandbox",
        "Attempt 1 did not work (ZeroDivisionError: division by zero); trying again",
        "Writing a corrected script (attempt 2 of 3)",
        "Running attempt 2 of 3 in a fresh sandbox",
        "Checking the Excel workbook",
        "Saving the result",
        "Done",
    ];
    let mut at = 0;
    for description in &descriptions {
        if at < expected.len() && *description == expected[at] {
            at += 1;
        }
    }
    assert_eq!(at, expected.len(), "{descriptions:#?}");
    assert!(seen.iter().rev().skip(1).all(|(_, done)| !done), "{seen:?}");
    for description in &descriptions {
        assert!(
            !description.contains("/work") && !description.contains("import "),
            "{description}"
        );
    }
    // The workbook is attached to the message, as the file Open WebUI stored.
    let files: Vec<Value> = owui
        .events()
        .into_iter()
        .filter(|(_, _, event)| event["type"] == "files")
        .map(|(_, _, event)| event["data"]["files"][0].clone())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0]["type"], "file");
    let stored = owui.get(files[0]["id"].as_str().unwrap()).unwrap();
    assert_eq!(stored.owner, BOB);
    assert!(files[0]["name"].as_str().unwrap().ends_with(".xlsx"));

    // The MCP client: the same phases as progress notifications, in order.
    let messages: Vec<String> = progress.iter().filter_map(|p| p.message.clone()).collect();
    let mut at = 0;
    for message in &messages {
        if at < expected.len() - 1 && *message == expected[at] {
            at += 1;
        }
    }
    assert_eq!(at, expected.len() - 1, "{messages:#?}");
    assert!(
        progress.windows(2).all(|w| w[0].progress < w[1].progress),
        "{progress:?}"
    );
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn an_open_webui_that_hangs_or_fails_on_events_changes_nothing_of_the_call() {
    let mut took = Vec::new();
    for (answer, status) in [
        (EventsAnswer::Normally, "false"),
        (EventsAnswer::Normally, "true"),
        (EventsAnswer::Hang, "true"),
        (EventsAnswer::Fail, "true"),
    ] {
        let owui = FakeOpenWebUi::start().await;
        owui.add_chat(CHAT, BOB);
        owui.answer_events(answer);
        let (_llm, server) = server_with(&owui, &[("FILE_AGENT_CHAT_STATUS", status)]).await;
        let (is_error, text, _, duration) = generate(&server).await;
        assert!(!is_error, "{answer:?}: {text}");
        assert!(text.contains(".xlsx"), "{answer:?}: {text}");
        took.push(duration);
        server.assert_nothing_left().await;
    }
    // A hanging event route (each post waits out its 2 s bound) does not hold the call up.
    eprintln!(
        "generate_file with chat status off, and on with the event route answering, hanging, failing: {took:?}"
    );
    for duration in &took[1..] {
        assert!(*duration < took[0] + Duration::from_secs(2), "{took:?}");
    }
}

#[tokio::test]
async fn another_users_chat_gets_no_events_and_the_call_is_unchanged() {
    let owui = FakeOpenWebUi::start().await;
    owui.add_chat(CHAT, "sk-alice");
    let (_llm, server) = server(&owui).await;
    let (is_error, text, _, _) = generate(&server).await;
    assert!(!is_error, "{text}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(owui.events().is_empty(), "{:?}", owui.events());
    server.assert_nothing_left().await;
}

/// Open WebUI saves no temporary chat (`temporary:<id>`, and the legacy `local:<id>`) and no
/// channel's (`channel:<id>`), and its event route refuses them (401: no such chat; measured
/// with Open WebUI 0.12.4): file-agent posts nothing there.
#[tokio::test]
async fn chats_open_webui_does_not_save_get_no_event_requests() {
    let owui = FakeOpenWebUi::start().await;
    let chats = ["temporary:chat-7", "local:chat-7", "channel:chat-7"];
    let llm = FakeOpenAi::start(
        chats
            .iter()
            .map(|_| Reply::Code(llm_script("excel_sales.py")))
            .collect(),
    )
    .await;
    let mut vars = llm.env();
    vars.extend(env(&[("INTERNAL_API_URL", &owui.url)]));
    let server = TestServer::start(&vars).await;
    for chat in chats {
        let (is_error, text, _, _) = generate_in(&server, chat).await;
        assert!(!is_error, "{text}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(owui.event_requests(), 0, "{:?}", owui.events());
    server.assert_nothing_left().await;
}

/// A call that saves two files shows "Saving the result" once, not once per file (a chat keeps
/// its statuses), and attaches both files.
#[tokio::test]
async fn a_call_saving_two_files_shows_each_status_once_and_attaches_both() {
    let owui = FakeOpenWebUi::start().await;
    owui.add_chat(CHAT, BOB);
    let server = TestServer::start(&env(&[("INTERNAL_API_URL", &owui.url)])).await;
    let code = "open('/work/out/a.txt', 'w').write('a')\nopen('/work/out/b.txt', 'w').write('b')\n";
    let (is_error, text, _, _) = call_in(&server, CHAT, "run_python", json!({"code": code})).await;
    assert!(!is_error, "{text}");
    let seen = wait_for_done(&owui).await;
    let descriptions: Vec<&str> = seen.iter().map(|(text, _)| text.as_str()).collect();
    assert_eq!(
        descriptions,
        ["Running it in a fresh sandbox", "Saving the result", "Done"],
        "{seen:?}"
    );
    let files = owui
        .events()
        .iter()
        .filter(|(_, _, event)| event["type"] == "files")
        .count();
    assert_eq!(files, 2, "{:?}", owui.events());
    server.assert_nothing_left().await;
}
