//! The runner's own guarantees, with no server acting on the container: it stops a script at
//! its own deadline, and it stops everything when its server goes away (Docker closes the
//! container's stdin when the one attached client disconnects). This is what keeps a crashed
//! server from leaving attempts running.

use std::time::{Duration, Instant};

use bollard::container::{AttachContainerResults, LogOutput};
use bollard::query_parameters::{AttachContainerOptionsBuilder, WaitContainerOptions};
use file_agent::sandbox::request::Request;
use file_agent::sandbox::{Job, policy};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::common::{TestSandbox, docker, with_timeout};

/// A cold container of `sandbox`, started and attached, with `script`'s request sent on its
/// stdin (left open) under a time limit of `timeout`.
async fn started_with(
    sandbox: &TestSandbox,
    script: &str,
    timeout: Duration,
) -> (String, AttachContainerResults) {
    let docker = docker().await;
    let job = Job {
        script: script.to_string(),
        ..Job::default()
    };
    let request = Request::build(&job, timeout).unwrap();
    let spec = policy::container_spec(
        sandbox.config(),
        sandbox.instance(),
        policy::Kind::Cold {
            upload_bytes: request.upload.len() as u64,
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
    attached.input.write_all(&request.to_bytes()).await.unwrap();
    attached.input.flush().await.unwrap();
    (id, attached)
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
    let (id, mut attached) =
        started_with(&sandbox, "while True:\n    pass", Duration::from_secs(1)).await;
    let code = exit_code(&id).await;
    let took = started.elapsed();
    assert_eq!(code, 124, "the runner's deadline exit code");
    // One second of limit plus the runner's five of grace; nobody else acted.
    assert!(took >= Duration::from_secs(6), "{took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let mut stderr = String::new();
    while let Some(Ok(item)) = with_timeout(attached.output.next()).await {
        if let LogOutput::StdErr { message } = item {
            stderr.push_str(&String::from_utf8_lossy(&message));
        }
    }
    assert!(stderr.contains("past its deadline"), "{stderr}");
    crate::common::remove(&id).await;
    sandbox.assert_nothing_left().await;
}

#[tokio::test]
async fn the_runner_stops_everything_when_its_server_goes_away() {
    let sandbox = TestSandbox::new(|_| {}).await;
    let (id, attached) = started_with(
        &sandbox,
        "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)\nprint('started', flush=True)\nwhile True:\n    pass",
        Duration::from_secs(600),
    )
    .await;
    let AttachContainerResults { mut output, input } = attached;
    // Wait until the script runs, then let go of the connection, as a killed server does.
    while let Some(Ok(item)) = with_timeout(output.next()).await {
        if matches!(&item, LogOutput::StdOut { message } if message.starts_with(b"started")) {
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
