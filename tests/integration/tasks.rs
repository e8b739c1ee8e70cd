//! Long calls the current MCP way, with the official MCP Python SDK over Streamable HTTP
//! (`tests/sdk/tasks_client.py`), the real server in process and the real sandbox:
//! - cancellation: a running `run_python` cancelled by the SDK (its `notifications/cancelled`
//!   over the 2025-11-25 handshake, its aborted POST over 2026-07-28) has no container left
//!   within a second or so, and its audit line says `cancelled`;
//! - tasks (`io.modelcontextprotocol/tasks`): a call from a client that declares the
//!   extension answers with a task, polled from `working` to `completed`, whose result is what
//!   a plain call gives; `tasks/cancel` stops one mid-attempt and leaves nothing; another
//!   caller gets "not found" for its id, and cannot cancel it; a client that does not declare
//!   the extension gets the plain result.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use crate::common::{containers_of_instance, unique_instance, wait_for_running, with_timeout};
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
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let venv = std::env::var_os("FILE_AGENT_TEST_SDK_ENV")
            .map_or_else(|| root.join("target/test-python"), |dir| root.join(dir));
        let mut command = tokio::process::Command::new(venv.join("bin/python3"));
        command
            .arg(root.join("tests/sdk/tasks_client.py"))
            .arg(format!("{url}/mcp"));
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
async fn a_cancelled_call_leaves_nothing(legacy: bool) {
    let instance = unique_instance("cancel", 10);
    let server = server(&instance, &[]).await;
    let mut args = vec!["cancel-call", "--code", SLEEP];
    if legacy {
        args.push("--legacy");
    }
    let mut client = SdkClient::start(&server.url, &[], &args);
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
