//! The server's life as an operator sees it, with the real binary: SIGTERM lets a running
//! call finish within the grace period, kills what runs past it, and leaves no container; a
//! server killed with SIGKILL mid-attempt leaves no script running (its containers stop on
//! their own), and the restarted server (the same default instance, from the host and the data
//! folder) removes them at start-up.

use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::ClientConfig;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;

use crate::common::{
    container_ids_of_instance, containers_of_instance, exec_in, try_exec_in, unique_instance,
    wait_for_containers, wait_for_running, with_timeout,
};
use crate::mcp_server::call;

/// A `file-agent serve` child process on a free port.
pub struct Served {
    child: tokio::process::Child,
    pub url: String,
    /// Where its stderr (the log) goes, for a failing test to show.
    log: tempfile::NamedTempFile,
}

impl Served {
    /// Stops the server as an operator does (SIGTERM) and waits for it to exit: its
    /// containers are removed before it does.
    pub async fn stop(mut self) {
        signal(&self.child, "-TERM").await;
        let status = with_timeout(self.child.wait()).await.unwrap();
        assert!(status.success(), "{status:?}");
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// Sends SIGKILL now, without waiting: for a kill timed to the microsecond.
    pub fn start_kill(&mut self) {
        self.child.start_kill().unwrap();
    }

    /// Kills the server with SIGKILL (if [`Self::start_kill`] did not) and waits until it is
    /// gone.
    pub async fn kill(mut self) {
        let _ = self.child.start_kill();
        with_timeout(self.child.wait()).await.unwrap();
    }
}

/// Starts the server; `instance` `None` leaves `SANDBOX_INSTANCE` to its default. The pool is
/// off unless `extra` sets `SANDBOX_WARM`, so that containers can be counted.
pub async fn serve(
    instance: Option<&str>,
    data: &std::path::Path,
    extra: &[(&str, &str)],
) -> Served {
    serve_wrapped(&[], instance, data, extra).await
}

/// [`serve`] through `wrapper`, a command that ends by exec'ing its arguments (so that the
/// process, its id and its signals stay the server's); `&[]` for none.
pub async fn serve_wrapped(
    wrapper: &[&str],
    instance: Option<&str>,
    data: &std::path::Path,
    extra: &[(&str, &str)],
) -> Served {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let binary = env!("CARGO_BIN_EXE_file-agent");
    let mut command = match wrapper {
        [] => tokio::process::Command::new(binary),
        [program, args @ ..] => {
            let mut command = tokio::process::Command::new(program);
            command.args(args).arg(binary);
            command
        }
    };
    match instance {
        Some(instance) => command.env("SANDBOX_INSTANCE", instance),
        None => command.env_remove("SANDBOX_INSTANCE"),
    };
    let log = tempfile::NamedTempFile::new().unwrap();
    let child = command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("SANDBOX_WARM", "0")
        .env("FILE_AGENT_DATA_DIR", data)
        .env("FILE_AGENT_PUBLIC_URL", &url)
        .env_remove("OPENAI_API_KEY")
        .envs(extra.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(log.reopen().unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while reqwest::get(format!("{url}/health")).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the server did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Served { child, url, log }
}

/// Starts `code` with run_python in the background; returns (is_error, text) when it ends.
pub fn start_call(url: &str, code: &str) -> tokio::task::JoinHandle<Option<(bool, String)>> {
    let (url, code) = (format!("{url}/mcp"), code.to_string());
    tokio::spawn(async move {
        let client = ClientConfig::default()
            .serve(StreamableHttpClientTransport::from_uri(url))
            .await
            .map_err(|error| eprintln!("start_call: no session: {error}"))
            .ok()?;
        let arguments = json!({"code": code}).as_object().cloned().unwrap();
        let result = client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("run_python").with_arguments(arguments),
            )
            .await
            .map_err(|error| eprintln!("start_call: no answer: {error}"))
            .ok()?;
        let text = crate::mcp_server::text_of(&result);
        Some((result.is_error == Some(true), text))
    })
}

/// Waits (at most 120 s: eight official-SDK clients starting at once on a loaded machine
/// took over 60 s) until `/metrics` says `depth` calls wait for a slot.
async fn wait_for_queue(url: &str, depth: usize) {
    let started = Instant::now();
    while crate::faults::metric(url, "file_agent_queue_depth").await != Some(depth as f64) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "queue never {depth} deep"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The warm pool as the server's /health shows it.
async fn served_pool(url: &str) -> serde_json::Value {
    let health: serde_json::Value = reqwest::get(format!("{url}/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    health["warm_pool"].clone()
}

async fn signal(child: &tokio::process::Child, name: &str) {
    let pid = child.id().unwrap().to_string();
    let status = tokio::process::Command::new("kill")
        .args([name, &pid])
        .status()
        .await
        .unwrap();
    assert!(status.success());
}

/// What the released call's script waits for: a file the test puts into its container (with
/// `docker exec`) after SIGTERM, so that the call is running at SIGTERM and ends after it
/// however slow the machine is.
const RELEASE: &str = "/tmp/release";
/// The grace: from SIGTERM, time enough to release the call and receive its answer on a
/// loaded machine (a `docker exec` and the end of an attempt: well under a second when quiet).
const GRACE: Duration = Duration::from_secs(10);

/// A script that waits until [`RELEASE`] exists, then prints `said`.
fn released_script(said: &str) -> String {
    format!(
        "import os, time\nwhile not os.path.exists('{RELEASE}'):\n    time.sleep(0.05)\nprint('{said}')"
    )
}

/// Puts [`RELEASE`] into every running container of `instance`, again and again (a queued
/// call starts in a new one), until aborted. A container that ends meanwhile is skipped.
async fn release_until_gone(instance: String) {
    loop {
        for id in container_ids_of_instance(&instance).await {
            let _ = try_exec_in(&id, &["touch", RELEASE]).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn sigterm_lets_a_running_call_finish_and_kills_one_past_the_grace() {
    let data = tempfile::tempdir().unwrap();
    let name = unique_instance("life", 10);
    let grace = GRACE.as_secs().to_string();
    let mut served = serve(
        Some(&name),
        data.path(),
        &[("FILE_AGENT_SHUTDOWN_GRACE", &grace)],
    )
    .await;
    let released = start_call(&served.url, &released_script("finished"));
    let endless = start_call(&served.url, "import time\ntime.sleep(600)");
    wait_for_running(&name, 2).await;
    let signalled = Instant::now();
    signal(&served.child, "-TERM").await;
    // Both containers get the file: the endless script does not look.
    for id in container_ids_of_instance(&name).await {
        assert_eq!(exec_in(&id, &["touch", RELEASE]).await, 0);
    }

    let log = |what: &str| format!("{what}\nthe server's log:\n{}", served.log());
    let answer = with_timeout(released).await.unwrap();
    let (is_error, text) =
        answer.unwrap_or_else(|| panic!("{}", log("the released call got no answer")));
    assert!(!is_error && text.contains("finished"), "{}", log(&text));
    // The call past the grace is stopped, and its caller told so.
    let answer = with_timeout(endless).await.unwrap();
    let (is_error, text) =
        answer.unwrap_or_else(|| panic!("{}", log("the stopped call got no answer")));
    assert!(is_error && text.contains("cancelled"), "{}", log(&text));
    let status = with_timeout(served.child.wait()).await.unwrap();
    assert!(status.success(), "{status:?}");
    let took = signalled.elapsed();
    assert!(took >= GRACE, "stopped before the grace: {took:?}");
    assert!(took < GRACE + Duration::from_secs(30), "{took:?}");
    assert_eq!(containers_of_instance(&name).await, 0);
}

#[tokio::test]
async fn a_killed_server_leaves_nothing_running_and_its_restart_removes_the_rest() {
    let data = tempfile::tempdir().unwrap();
    // No SANDBOX_INSTANCE: the default is stable per host and data folder.
    let name = file_agent::server::stable_instance(data.path());
    let mut served = serve(None, data.path(), &[("SANDBOX_WARM", "2")]).await;
    // Both warm containers ready (started is not enough: a call before the first is ready would
    // start a cold container beside them).
    with_timeout(async {
        while served_pool(&served.url).await["ready"].as_u64() != Some(2) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let running = start_call(&served.url, "while True:\n    pass");
    // The endless attempt in one warm container, and the other one still waiting (a lone
    // attempt's replacement is started after it).
    with_timeout(async {
        while served_pool(&served.url).await["takes"]
            .as_u64()
            .unwrap_or(0)
            == 0
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    wait_for_running(&name, 2).await;
    signal(&served.child, "-KILL").await;
    let _ = with_timeout(served.child.wait()).await;
    running.abort();
    // Nobody reads their output any more: the runners stop on their own, at once.
    let killed = Instant::now();
    wait_for_running(&name, 0).await;
    assert!(
        killed.elapsed() < Duration::from_secs(15),
        "still running {:?} after the crash",
        killed.elapsed()
    );
    assert_eq!(
        containers_of_instance(&name).await,
        2,
        "the stopped containers stay until a reaper comes"
    );

    let restarted = serve(None, data.path(), &[]).await;
    assert_eq!(
        containers_of_instance(&name).await,
        0,
        "the restart did not reap"
    );
    // And the restarted server works.
    let client = with_timeout(ClientConfig::default().serve(
        StreamableHttpClientTransport::from_uri(format!("{}/mcp", restarted.url)),
    ))
    .await
    .unwrap();
    let (is_error, text) = call(&client, "run_python", json!({"code": "print(2 + 2)"})).await;
    assert!(!is_error && text.contains('4'), "{text}");
    let _ = client.cancel().await;
    wait_for_containers(&name, 0).await;
}

/// A rolling update, as the official MCP SDK sees it: four calls in flight when SIGTERM comes
/// each get their result (the listener stays open while they finish, and then until no
/// request came for a moment, so the tools/list the SDK sends after a call's answer, before it
/// hands over the result, is answered); meanwhile readiness says 503 and a new tool call gets
/// 503 with a JSON-RPC error saying nothing started; the server exits once they are done.
#[tokio::test]
async fn sigterm_delivers_the_results_of_calls_in_flight_to_the_official_sdk() {
    drain_with_calls_in_flight(4).await;
}

/// The same with eight calls in flight, four of them queued for a slot when SIGTERM comes.
#[tokio::test]
async fn sigterm_delivers_the_results_of_eight_calls_in_flight_to_the_official_sdk() {
    drain_with_calls_in_flight(8).await;
}

/// `calls` official-SDK clients, each calling run_python without listing the tools first,
/// SIGTERM while four run and the rest wait for a slot; every one must print its result. Each
/// script waits to be released (a file the test puts into every running container after the
/// signal): with a fixed sleep, on a loaded machine the first calls ended before the last
/// clients had started, so the queue never filled.
async fn drain_with_calls_in_flight(calls: usize) {
    let data = tempfile::tempdir().unwrap();
    let name = unique_instance("drain", 10);
    let mut served = serve(
        Some(&name),
        data.path(),
        &[
            ("FILE_AGENT_SHUTDOWN_GRACE", "60"),
            ("FILE_AGENT_MAX_CONCURRENT", "4"),
            ("FILE_AGENT_QUEUE_MAX", "8"),
        ],
    )
    .await;
    let clients: Vec<_> = (0..calls)
        .map(|_| {
            let url = served.url.clone();
            tokio::spawn(async move {
                crate::mcp_server::python_sdk(
                    &url,
                    &["--no-list", "--code", &released_script("done")],
                )
                .await
            })
        })
        .collect();
    wait_for_containers(&name, 4).await;
    // Every call in flight before SIGTERM: four running, the rest queued for a slot.
    wait_for_queue(&served.url, calls - 4).await;
    let signalled = Instant::now();
    signal(&served.child, "-TERM").await;

    // Draining: not ready (once the signal is handled), and a new call is refused with a
    // reason, not a refused connection.
    let health = with_timeout(async {
        loop {
            let health = reqwest::get(format!("{}/health", served.url))
                .await
                .unwrap();
            if health.status() == 503 {
                return health;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let health: serde_json::Value = health.json().await.unwrap();
    assert_eq!(health["status"], "draining", "{health}");
    let refused = with_timeout(
        reqwest::Client::new()
            .post(format!("{}/mcp", served.url))
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                          "params": {"name": "run_python", "arguments": {"code": "print(1)"}}}))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let refused: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(refused["id"], 5);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{refused}"
    );

    let releasing = tokio::spawn(release_until_gone(name.clone()));
    for client in clients {
        let output = with_timeout(client).await.unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("result: done"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    releasing.abort();
    let status = with_timeout(served.child.wait()).await.unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        signalled.elapsed() < Duration::from_secs(40),
        "it waited for the calls, not for the grace: {:?}",
        signalled.elapsed()
    );
    assert_eq!(containers_of_instance(&name).await, 0);
}
