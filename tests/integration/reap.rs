//! Reaping leftovers without touching live work: a bare `file-agent reap` removes only what no
//! live server can be using (stopped a while ago, or running longer than any live container
//! lasts) and says what it left alone; `--all` removes everything.

use std::time::Duration;

use file_agent::sandbox::{ReapFilter, ReapScope};

use crate::common::{
    TestSandbox, containers_of_instance, fixture_script, run_cli, spawn_attempt, unique_instance,
    wait_for_running, with_timeout,
};

#[tokio::test]
async fn a_bare_reap_leaves_live_attempts_and_warm_containers_alone_and_says_so() {
    let instance = unique_instance("reap", 10);
    let named = |c: &mut file_agent::config::SandboxConfig| c.instance = Some(instance.clone());
    // A server's pool with one warm container, and a cold attempt under way.
    let pool = TestSandbox::warm(1, Duration::from_secs(300), named).await;
    let cold = TestSandbox::new(named).await;
    let attempt = spawn_attempt(&cold, &fixture_script("endless.py"));
    wait_for_running(&instance, 2).await;

    let bare = run_cli(&["reap", "--instance", &instance], &[]).await;
    assert_eq!(bare.code, Some(0), "{}", bare.stderr);
    let said = bare.stdout;
    assert!(said.contains("removed 0 container(s)"), "{said}");
    assert!(
        said.contains("left 2 running container(s) alone: 1 warm")
            && said.contains("1 attempt(s) under way")
            && said.contains("reap --all"),
        "{said}"
    );
    assert_eq!(containers_of_instance(&instance).await, 2, "{said}");

    let all = run_cli(&["reap", "--instance", &instance, "--all"], &[]).await;
    let said = all.stdout;
    assert!(said.contains("removed 2 container(s)"), "{said}");
    let _ = with_timeout(attempt).await;
    with_timeout(pool.shutdown()).await;
    pool.assert_nothing_left().await;
}

#[tokio::test]
async fn the_safe_scope_removes_what_stopped_and_what_outlived_any_live_container() {
    let sandbox = TestSandbox::new(|_| {}).await;
    let instance = Some(sandbox.instance().to_string());
    let never_started = crate::common::orphan_container(&sandbox).await;
    let safe = |longest_life: Duration, stopped_for: Duration| ReapFilter {
        scope: ReapScope::Safe {
            longest_life,
            stopped_for,
        },
        instance: instance.clone(),
    };
    // Stopped too recently: left, and counted.
    let report = sandbox
        .reap(&safe(Duration::from_secs(3600), Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(
        (report.containers, report.left_recent),
        (0, 1),
        "{report:?}"
    );
    assert!(crate::common::container_exists(&never_started).await);
    let report = sandbox
        .reap(&safe(Duration::from_secs(3600), Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(report.containers, 1, "{report:?}");
    assert!(!crate::common::container_exists(&never_started).await);

    // A running attempt is left until it is older than the longest life.
    let running = spawn_attempt(&sandbox, &fixture_script("endless.py"));
    wait_for_running(sandbox.instance(), 1).await;
    let report = sandbox
        .reap(&safe(Duration::from_secs(3600), Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(
        (report.containers, report.left_running),
        (0, 1),
        "{report:?}"
    );
    let report = sandbox
        .reap(&safe(Duration::ZERO, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(
        report.containers, 1,
        "a stuck container is removed: {report:?}"
    );
    let _ = with_timeout(running).await;
    sandbox.assert_nothing_left().await;
}
