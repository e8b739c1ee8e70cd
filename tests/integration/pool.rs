//! The warm pool against the real engine and image: an attempt in a container started before
//! it, never two attempts in one container, refills, idle replacement, cold fallback, the
//! script's clock starting at take, drain on shutdown, and the runner stopping on its own when
//! nobody is attached any more.

use std::collections::HashSet;
use std::time::Duration;

use file_agent::sandbox::{Job, Status};

use crate::common::{
    TestSandbox, fixture_script, run_job, run_script, spawn_attempt, with_timeout,
};

const IDLE: Duration = Duration::from_secs(300);

#[tokio::test]
async fn an_attempt_takes_a_warm_container_once_and_the_pool_refills() {
    let sandbox = TestSandbox::warm(1, IDLE, |_| {}).await;
    let mut containers = HashSet::new();
    for round in 0..3 {
        sandbox.until_warm(1).await;
        // The script sees the libraries already imported (the runner's preload) and leaves a
        // mark that a reused container would show to the next attempt.
        let outcome = run_script(
            &sandbox,
            "import sys, os\nprint('preloaded', 'pandas' in sys.modules)\nprint('marks', os.listdir('/tmp'))\nopen('/tmp/mark', 'w').write('x')\nimport pandas\npandas.MARK = 1",
        )
        .await;
        assert_eq!(outcome.status, Status::Ok, "round {round}: {outcome:?}");
        assert!(outcome.warm, "round {round} ran cold");
        let stdout = outcome.stdout.text();
        assert!(stdout.contains("preloaded True"), "{stdout}");
        assert!(
            stdout.contains("marks ['matplotlib']"),
            "a used container: {stdout}"
        );
        assert!(
            containers.insert(outcome.container_id.clone()),
            "container {} served two attempts",
            outcome.container_id
        );
        // Removed right after the result, in the background.
        with_timeout(async {
            while crate::common::container_exists(&outcome.container_id).await {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    }
    let stats = sandbox.pool_stats().unwrap();
    assert_eq!((stats.takes, stats.misses), (3, 0), "{stats:?}");
    with_timeout(sandbox.shutdown()).await;
    sandbox.assert_nothing_left().await;
}

#[tokio::test]
async fn a_warm_container_left_idle_also_has_the_libraries_many_attempts_need() {
    let sandbox = TestSandbox::warm(1, IDLE, |_| {}).await;
    // The runner's own word that the idle imports are done, however long the load makes them.
    sandbox.until_primed(1).await;
    let outcome = run_script(
        &sandbox,
        "import sys\nprint(all(m in sys.modules for m in ['openpyxl', 'docx', 'matplotlib.pyplot']))",
    )
    .await;
    assert!(outcome.warm);
    assert_eq!(outcome.stdout.text().trim(), "True", "{outcome:?}");
    with_timeout(sandbox.shutdown()).await;
    sandbox.assert_nothing_left().await;
}

/// Priming (the warm worker's own small workbook, document, presentation, chart and PDF, before
/// READY and while idle) leaves nothing a script can see: the same files in /tmp and /work, the
/// same folder, environment, umask, open descriptors, warning filters and chart settings, and
/// no figure open, as in a cold container that imported the same libraries.
#[tokio::test]
async fn priming_leaves_nothing_a_script_can_see() {
    let look = fixture_script("what_a_script_sees.py");
    let cold = TestSandbox::new(|_| {}).await;
    let in_cold = run_script(&cold, &look).await;
    assert_eq!(in_cold.status, Status::Ok, "{in_cold:?}");
    assert!(!in_cold.warm);

    let warm = TestSandbox::warm(1, IDLE, |_| {}).await;
    // Once the runner says the idle imports and their priming are done.
    warm.until_primed(1).await;
    let in_warm = run_script(&warm, &look).await;
    assert_eq!(in_warm.status, Status::Ok, "{in_warm:?}");
    assert!(in_warm.warm);

    let seen = |outcome: &file_agent::sandbox::Outcome| -> serde_json::Value {
        serde_json::from_str(outcome.stdout.text().trim()).unwrap()
    };
    let (cold_view, warm_view) = (seen(&in_cold), seen(&in_warm));
    assert_eq!(warm_view["modules_primed"], true, "{warm_view}");
    assert_eq!(warm_view["figures"], serde_json::json!([]), "{warm_view}");
    assert_eq!(cold_view, warm_view);
    for sandbox in [cold, warm] {
        with_timeout(sandbox.shutdown()).await;
        sandbox.assert_nothing_left().await;
    }
}

#[tokio::test]
async fn two_attempts_at_once_from_a_pool_of_one_each_get_their_own_container() {
    let sandbox = TestSandbox::warm(1, IDLE, |_| {}).await;
    // One takes the ready container; the other waits for the launch the take set off, or
    // starts a cold container when that would be quicker. Neither shares.
    let (first, second) = tokio::join!(
        run_script(&sandbox, "print(1)"),
        run_script(&sandbox, "print(2)")
    );
    assert_eq!(first.status, Status::Ok, "{first:?}");
    assert_eq!(second.status, Status::Ok, "{second:?}");
    assert_ne!(first.container_id, second.container_id);
    assert!(first.warm || second.warm, "the ready one was taken");
    let stats = sandbox.pool_stats().unwrap();
    assert_eq!(stats.takes + stats.misses, 2, "{stats:?}");
    with_timeout(sandbox.shutdown()).await;
    sandbox.assert_nothing_left().await;
}

#[tokio::test]
async fn a_lone_attempt_is_not_slowed_by_its_refill_which_follows_it() {
    let sandbox = TestSandbox::warm(1, IDLE, |_| {}).await;
    let attempt = spawn_attempt(&sandbox, "import time\ntime.sleep(2)");
    // While it runs alone, the pool does not start its replacement...
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let during = sandbox.pool_stats().unwrap();
    assert_eq!(
        (during.takes, during.ready, during.starting),
        (1, 0, 0),
        "{during:?}"
    );
    let outcome = with_timeout(attempt).await.unwrap().unwrap();
    assert!(outcome.warm);
    // ...and does once it has ended.
    sandbox.until_warm(1).await;
    with_timeout(sandbox.shutdown()).await;
    sandbox.assert_nothing_left().await;
}

#[tokio::test]
async fn the_scripts_clock_starts_when_its_code_is_sent() {
    // A container that waited longer than the time limit still gives its attempt the whole
    // limit.
    let sandbox = TestSandbox::warm(1, IDLE, |c| c.limits.timeout = Duration::from_secs(3)).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let outcome = run_script(&sandbox, "import time\ntime.sleep(2)\nprint('on time')").await;
    assert_eq!(outcome.status, Status::Ok, "{outcome:?}");
    assert!(outcome.warm);
    // And a warm attempt is held to the limit like a cold one.
    sandbox.until_warm(1).await;
    let outcome = run_script(&sandbox, &fixture_script("endless.py")).await;
    assert_eq!(outcome.status, Status::Timeout, "{outcome:?}");
    assert!(outcome.warm);
    with_timeout(sandbox.shutdown()).await;
    sandbox.assert_nothing_left().await;
}

#[tokio::test]
async fn a_container_that_waited_too_long_is_replaced_unused() {
    let sandbox = TestSandbox::warm(1, Duration::from_secs(2), |_| {}).await;
    with_timeout(async {
        while sandbox.pool_stats().unwrap().replaced == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    sandbox.until_warm(1).await;
    let outcome = run_script(&sandbox, "print('fresh')").await;
    assert!(outcome.warm);
    with_timeout(sandbox.shutdown()).await;
    sandbox.assert_nothing_left().await;
}

#[tokio::test]
async fn an_upload_larger_than_a_warm_container_holds_runs_cold() {
    // Room for the preloaded libraries (about 80 MiB), not for the upload.
    let sandbox = TestSandbox::warm(1, IDLE, |c| c.limits.memory_bytes = 160 << 20).await;
    let out = tempfile::tempdir().unwrap();
    let job = Job {
        script: "import os\nprint(os.path.getsize(input_file_path))".to_string(),
        inputs: vec![file_agent::sandbox::Input {
            name: b"big.bin".to_vec(),
            source: file_agent::sandbox::InputSource::Bytes(vec![7; 170 << 20]),
        }],
        ..Job::default()
    };
    let outcome = run_job(&sandbox, job, out.path()).await;
    eprintln!(
        "{:?} {:?} {}",
        outcome.status, outcome.timings, outcome.message
    );
    assert!(!outcome.warm, "{outcome:?}");
    assert_eq!(sandbox.pool_stats().unwrap().misses, 1);
    with_timeout(sandbox.shutdown()).await;
    sandbox.assert_nothing_left().await;
}

#[tokio::test]
async fn shutdown_drains_the_pool() {
    let sandbox = TestSandbox::warm(2, IDLE, |_| {}).await;
    assert_eq!(with_timeout(sandbox.leftovers()).await.unwrap(), 2);
    with_timeout(sandbox.shutdown()).await;
    assert_eq!(sandbox.live_containers(), 0);
    sandbox.assert_nothing_left().await;
}
