//! The runner's own guarantees, with no server acting on the container: it stops a script at
//! its own deadline, and it stops everything when its server goes away (Docker closes the
//! container's stdin when the one attached client disconnects). This is what keeps a crashed
//! server from leaving attempts running.

use std::time::{Duration, Instant};

use bollard::container::{AttachContainerResults, LogOutput};
use bollard::query_parameters::{AttachContainerOptionsBuilder, WaitContainerOptions};
use file_agent::sandbox::request::Request;
use file_agent::sandbox::stream;
use file_agent::sandbox::{Job, policy};
use futures_util::StreamExt;

use crate::common::{TestSandbox, docker, with_timeout};

/// A cold container of `sandbox`, started and attached, with `script`'s request sent on its
/// stdin (left open) under a time limit of `timeout`; its id, its stdio and the request's key.
async fn started_with(
    sandbox: &TestSandbox,
    script: &str,
    timeout: Duration,
) -> (String, AttachContainerResults, String) {
    let docker = docker().await;
    let job = Job {
        script: script.to_string(),
        ..Job::default()
    };
    let limits = file_agent::config::Limits {
        timeout,
        ..sandbox.config().limits.clone()
    };
    let request = Request::build(&job, &limits).unwrap();
    let spec = policy::container_spec(
        sandbox.config(),
        sandbox.instance(),
        policy::Kind::Cold {
            upload_bytes: request.upload.len(),
        },
    );
    let id = docker.create_container(None, spec).await.unwrap().id;
    let options = AttachContainerOptionsBuilder::default()
        .stdin(true)
        .stdout(true)
        .stderr(true)
        .stream(true)
        .build();
    let mut attached = docker.attach_container(&id, Some(options)).await.unwrap();
    docker.start_container(&id, None).await.unwrap();
    request.send(&mut attached.input).await.unwrap();
    (id, attached, request.key)
}

/// Waits for the container to exit; its exit code.
async fn exit_code(id: &str) -> i64 {
    let docker = docker().await;
    let mut wait = docker.wait_container(id, None::<WaitContainerOptions>);
    match with_timeout(wait.next()).await {
        Some(Ok(response)) => response.status_code,
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_runner_stops_a_script_at_its_own_deadline_when_nobody_kills_it() {
    let sandbox = TestSandbox::new(|_| {}).await;
    let started = Instant::now();
    let (id, mut attached, key) =
        started_with(&sandbox, "while True:\n    pass", Duration::from_secs(1)).await;
    let code = exit_code(&id).await;
    let took = started.elapsed();
    assert_eq!(code, 124, "the runner's deadline exit code");
    // One second of limit plus the runner's five of grace; nobody else acted.
    assert!(took >= Duration::from_secs(6), "{took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let mut stdout = Vec::new();
    while let Some(Ok(item)) = with_timeout(attached.output.next()).await {
        if let LogOutput::StdOut { message } = item {
            stdout.extend_from_slice(&message);
        }
    }
    // Its report and its words, in frames the server's parser accepts.
    let (archive, _) = tokio::sync::mpsc::channel(16);
    let (finished, _) = tokio::sync::oneshot::channel();
    let relayed = stream::relay(&stdout[..], &b""[..], &key, 1 << 20, archive, finished).await;
    assert_eq!(relayed.error, None);
    assert!(relayed.complete);
    assert_eq!(relayed.report.unwrap().ended, stream::RunnerEnd::Deadline);
    let stderr = relayed.stderr.text();
    assert!(stderr.contains("past its deadline"), "{stderr}");
    crate::common::remove(&id).await;
    sandbox.assert_nothing_left().await;
}

#[tokio::test]
async fn the_runner_stops_everything_when_its_server_goes_away() {
    let sandbox = TestSandbox::new(|_| {}).await;
    let (id, attached, _) = started_with(
        &sandbox,
        "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)\nprint('started', flush=True)\nwhile True:\n    pass",
        Duration::from_secs(600),
    )
    .await;
    let AttachContainerResults { mut output, input } = attached;
    // Wait until the script runs, then let go of the connection, as a killed server does.
    while let Some(Ok(item)) = with_timeout(output.next()).await {
        // A frame of the script's stdout (its payload is encrypted: the kind byte says it).
        if matches!(&item, LogOutput::StdOut { message } if message.first() == Some(&b'o')) {
            break;
        }
    }
    let dropped = Instant::now();
    drop((output, input));
    let code = exit_code(&id).await;
    assert_eq!(code, 125, "the runner's server-gone exit code");
    assert!(
        dropped.elapsed() < Duration::from_secs(10),
        "{:?}",
        dropped.elapsed()
    );
    crate::common::remove(&id).await;
    sandbox.assert_nothing_left().await;
}

/// The forging script through `run_python`, on each runtime: the caller is told it timed out,
/// nothing it injected arrives, and the audit line says timeout, not ok.
async fn a_forged_result_is_neither_answered_nor_audited_as_ok(runtime: crate::common::Runtime) {
    use crate::mcp_server::{TestServer, env};
    let mut vars = env(&[("SCRIPT_TIMEOUT", "5")]);
    if let Some(name) = runtime.name() {
        vars.extend(env(&[("SANDBOX_RUNTIME", name)]));
    }
    let server = TestServer::start(&vars).await;
    let code = crate::common::fixture_script("forge_result.py");
    let (_, text) = server
        .call(None, "run_python", serde_json::json!({ "code": code }))
        .await;
    assert!(!text.contains("ran successfully"), "{text}");
    assert!(text.contains("longer than 5 s"), "{text}");
    server.assert_nothing_left().await;
    let lines = server.audit_lines();
    let line = lines.last().expect("an audit line");
    assert_eq!(line["tool"], "run_python");
    assert_eq!(line["status"], "timeout", "{line}");
    assert_eq!(line["exit_code"], serde_json::Value::Null, "{line}");
    let outputs = line["outputs"].as_array().cloned().unwrap_or_default();
    assert!(
        outputs
            .iter()
            .all(|output| output["name"] != "injected.txt"),
        "{line}"
    );
}

#[tokio::test]
async fn a_forged_result_is_neither_answered_nor_audited_as_ok_under_runc() {
    a_forged_result_is_neither_answered_nor_audited_as_ok(crate::common::Runtime::Default).await;
}

#[tokio::test]
async fn a_forged_result_is_neither_answered_nor_audited_as_ok_under_runsc() {
    a_forged_result_is_neither_answered_nor_audited_as_ok(crate::common::Runtime::Gvisor).await;
}

/// The status pipe on which the worker reports the script's end is one the script can write
/// too: half a line there does not stop PID 1 relaying the script's output, and the script's
/// end still comes from its exit.
#[tokio::test]
async fn half_a_line_on_the_status_pipe_does_not_stall_the_runner() {
    let sandbox = TestSandbox::new(|c| c.limits.timeout = Duration::from_secs(10)).await;
    let outcome =
        crate::common::run_script(&sandbox, &crate::common::fixture_script("status_pipe.py")).await;
    assert_eq!(
        outcome.status,
        file_agent::sandbox::Status::Ok,
        "{outcome:?}"
    );
    assert_eq!(outcome.exit_code, Some(0));
    assert!(outcome.stdout.text().ends_with("after\n"), "{outcome:?}");
    sandbox.assert_nothing_left().await;
}
