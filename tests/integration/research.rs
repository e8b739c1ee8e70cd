//! `conduct_deep_research` through the real server against a fake of OpenAI's Responses API:
//! a run that goes queued → in_progress (with a garbled poll in between) → completed, one that
//! fails, one that never finishes, and a provider without the API. The client sends a progress
//! token and records the notifications.

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ProgressNotificationParam};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

use crate::common::with_timeout;
use crate::fakes::openai::{FakeOpenAi, Poll};
use crate::mcp_server::{ProgressRecorder, TestServer, env, text_of};

/// Calls `conduct_deep_research`; returns (is_error, text, progress notifications).
async fn research(
    server: &TestServer,
    instructions: &str,
) -> (bool, String, Vec<ProgressNotificationParam>) {
    let recorder = ProgressRecorder::default();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", server.url)),
    );
    let client = with_timeout(recorder.clone().serve(transport))
        .await
        .unwrap();
    let arguments = json!({"instructions": instructions})
        .as_object()
        .cloned()
        .unwrap();
    // The rmcp client puts a progress token on every request.
    let result =
        with_timeout(client.call_tool(
            CallToolRequestParams::new("conduct_deep_research").with_arguments(arguments),
        ))
        .await
        .unwrap();
    let _ = client.cancel().await;
    let text = text_of(&result);
    let seen = recorder.seen.lock().unwrap().clone();
    (result.is_error == Some(true), text, seen)
}

/// A server whose model is `llm`, its research runs polled every 50 ms, with `extra` settings.
pub async fn server_for(llm: &FakeOpenAi, extra: &[(&str, &str)]) -> TestServer {
    let mut vars = llm.env();
    vars.extend(env(&[
        ("FILE_AGENT_RESEARCH_POLL", "0.05"),
        ("DEEP_RESEARCH_MODEL", "o4-mini-deep-research"),
    ]));
    vars.extend(env(extra));
    TestServer::start(&vars).await
}

#[tokio::test]
async fn a_run_is_polled_to_completion_with_progress_and_cited_sources() {
    let llm = FakeOpenAi::with_research(vec![
        Poll::Queued,
        Poll::InProgress,
        Poll::Garbage,
        Poll::InProgress,
        Poll::Completed,
    ])
    .await;
    let server = server_for(&llm, &[]).await;
    let (is_error, report, progress) =
        research(&server, "When was async/await stabilised in Rust?").await;
    assert!(!is_error, "{report}");
    assert!(
        report.starts_with("Async/await was stabilized in Rust 1.39 [[1]](https://blog.rust-lang.org/2019/11/07/Async-await-stable.html). Rust 1.0 shipped in May 2015 [[2]](https://www.rust-lang.org/)."),
        "{report}"
    );
    assert!(report.contains("## Sources\n\n1. [Async-await on stable Rust!](https://blog.rust-lang.org/2019/11/07/Async-await-stable.html)\n2. [Rust Programming Language](https://www.rust-lang.org/)"), "{report}");
    assert!(
        report.contains("o4-mini-deep-research: 2 web searches"),
        "{report}"
    );

    let (requests, polls, cancels) = llm.research_seen();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request["background"], true);
    assert_eq!(request["model"], "o4-mini-deep-research");
    assert_eq!(request["tools"][0]["type"], "web_search_preview");
    assert_eq!(request["input"], "When was async/await stabilised in Rust?");
    assert!(
        request["instructions"].as_str().unwrap().contains("Cite"),
        "{request}"
    );
    // The garbled poll was tried again rather than ending the run.
    assert_eq!(polls, 5);
    assert_eq!(cancels, 0);

    let messages: Vec<String> = progress.iter().filter_map(|p| p.message.clone()).collect();
    assert!(
        messages.iter().any(|m| m.contains("queued")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("in progress")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("completed")),
        "{messages:?}"
    );
    assert!(
        progress.iter().all(|p| p.total == Some(600.0)),
        "{progress:?}"
    );
    assert!(
        progress.windows(2).all(|w| w[0].progress <= w[1].progress),
        "{progress:?}"
    );
}

#[tokio::test]
async fn a_failed_run_is_a_clear_error() {
    let llm = FakeOpenAi::with_research(vec![Poll::InProgress, Poll::Failed]).await;
    let server = server_for(&llm, &[]).await;
    let (is_error, text, _) = research(&server, "Anything").await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("failed at the provider: The model failed to generate a response."),
        "{text}"
    );
}

#[tokio::test]
async fn a_run_that_never_finishes_is_cancelled_at_the_deadline() {
    let llm = FakeOpenAi::with_research(vec![Poll::InProgress]).await;
    let server = server_for(&llm, &[("FILE_AGENT_RESEARCH_TIMEOUT", "1")]).await;
    let started = std::time::Instant::now();
    let (is_error, text, progress) = research(&server, "Anything").await;
    assert!(is_error, "{text}");
    assert!(text.contains("did not finish within 1 s"), "{text}");
    assert!(text.contains("FILE_AGENT_RESEARCH_TIMEOUT"), "{text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let (_, polls, cancels) = llm.research_seen();
    assert!(polls >= 5, "{polls} polls");
    assert_eq!(cancels, 1, "the run was not cancelled at the API");
    assert!(progress.len() >= 5, "{progress:?}");
}

#[tokio::test]
async fn a_provider_without_the_responses_api_is_named() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = server_for(&llm, &[]).await;
    let (is_error, text, _) = research(&server, "Anything").await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("does not offer OpenAI's Responses API"),
        "{text}"
    );
    assert!(text.contains("OPENAI_BASE_URL"), "{text}");
}

#[tokio::test]
async fn research_without_a_key_says_what_to_set() {
    let server = TestServer::start(&[]).await;
    let (is_error, text, _) = research(&server, "Anything").await;
    assert!(is_error, "{text}");
    assert!(text.contains("OPENAI_API_KEY"), "{text}");
}
