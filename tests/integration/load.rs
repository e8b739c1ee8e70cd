//! Admission under load: a burst of 50 concurrent `generate_file` calls (a fast fake model)
//! against 2 slots and a queue of 4. Every call ends, either with a file or with the busy
//! error; nothing is left behind. And a call past its deadline is stopped and cleaned up.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::fakes::openai::{FakeOpenAi, Reply};
use crate::mcp_server::{TestServer, env, llm_script};

const CALLS: usize = 50;

#[tokio::test]
async fn a_burst_of_fifty_calls_finishes_or_is_told_to_come_back() {
    let replies = vec![Reply::Code(llm_script("excel_sales.py")); CALLS];
    let llm = FakeOpenAi::start(replies).await;
    let mut vars = llm.env();
    vars.extend(env(&[
        ("FILE_AGENT_MAX_CONCURRENT", "2"),
        ("FILE_AGENT_QUEUE_MAX", "4"),
        ("FILE_AGENT_QUEUE_TIMEOUT", "60"),
    ]));
    let server = std::sync::Arc::new(TestServer::start(&vars).await);
    let started = Instant::now();
    let calls: Vec<_> = (0..CALLS)
        .map(|n| {
            let server = server.clone();
            tokio::spawn(async move {
                let begun = Instant::now();
                let (is_error, text) = server
                    .call(
                        None,
                        "generate_file",
                        json!({"instructions": format!("sales {n}"), "file_type": "excel"}),
                    )
                    .await;
                (is_error, text, begun.elapsed())
            })
        })
        .collect();
    let mut done = Vec::new();
    let mut busy = Vec::new();
    for call in calls {
        let (is_error, text, took) = call.await.unwrap();
        if !is_error {
            assert!(text.contains("Excel workbook created"), "{text}");
            done.push(took);
        } else {
            assert!(
                text.contains("is busy") && text.contains("try again in"),
                "{text}"
            );
            busy.push(took);
        }
    }
    let wall = started.elapsed();
    assert_eq!(done.len() + busy.len(), CALLS);
    assert!(
        done.len() >= 6,
        "2 running + 4 queued must get through: {}",
        done.len()
    );
    assert!(!busy.is_empty(), "the queue never filled");
    done.sort();
    busy.sort();
    let pct = |list: &[Duration], p: usize| list[(list.len() * p / 100).min(list.len() - 1)];
    eprintln!(
        "load: {CALLS} calls in {:.1} s; {} done (p50 {:.2} s, p95 {:.2} s), {} busy (p50 {:.3} s)",
        wall.as_secs_f64(),
        done.len(),
        pct(&done, 50).as_secs_f64(),
        pct(&done, 95).as_secs_f64(),
        busy.len(),
        pct(&busy, 50).as_secs_f64(),
    );
    assert_eq!(server.tools.admission().queue_depth(), 0);
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn a_call_past_its_deadline_is_stopped_and_leaves_nothing() {
    let server = TestServer::start(&env(&[("FILE_AGENT_CALL_TIMEOUT", "10")])).await;
    let started = Instant::now();
    let (is_error, text) = server
        .call(
            None,
            "run_python",
            json!({"code": "import time\ntime.sleep(60)"}),
        )
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("longer than 10 s (FILE_AGENT_CALL_TIMEOUT)"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    server.assert_nothing_left().await;
}
