//! The Kubernetes backend against what a real cluster does to a pod's life, in the API double
//! (`fakes::kubernetes`) with its knobs: watches cut (a reset, an `ERROR` 500, a clean end)
//! and an API server that refuses every request for a while or for good; an image slow to
//! pull; a pull that fails once; out of memory that kills the whole container; graceful
//! deletes. Each test ends with no sandbox pod and no container left.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{fixture_script, with_timeout};
use crate::fakes::kubernetes::{Cut, KubeDouble};
use crate::kubernetes::{assert_no_sandbox_pods, cluster, sandbox_pods};
use crate::mcp_server::TestServer;

/// Waits until a sandbox pod runs.
async fn until_a_pod_runs(double: &KubeDouble) {
    for _ in 0..300 {
        if sandbox_pods(double)
            .await
            .iter()
            .any(|pod| pod["status"]["phase"] == "Running")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no sandbox pod ran");
}

/// How many watch requests the double has served.
fn watches(double: &KubeDouble) -> usize {
    double
        .requests()
        .iter()
        .filter(|line| line.starts_with("GET ") && line.contains("watch=true"))
        .count()
}

/// The API server's hiccups of a rolling upgrade, while a pod is slow to start (4 s) and then
/// runs a 7 s script: every watch is cut in each of the three ways, and the API server
/// refuses every request with 503 twice (2 s while the pod starts, 3 s while the script
/// runs). The call answers as if nothing happened.
#[tokio::test]
async fn an_attempt_rides_out_cut_watches_and_an_api_server_refusing_for_seconds() {
    let (double, _home, vars) = cluster(true).await;
    double.set_start_delay(Duration::from_secs(4));
    let server = TestServer::start(&vars).await;
    let began = Instant::now();
    let call = server.call(
        None,
        "run_python",
        json!({"code": "import time\ntime.sleep(7)\nprint('slept')"}),
    );
    let outages = async {
        let at = |seconds: f64| {
            tokio::time::sleep_until((began + Duration::from_secs_f64(seconds)).into())
        };
        // While the pod is Pending (its image "pulling" for 4 s).
        at(1.0).await;
        double.cut_watches(Cut::Reset);
        at(1.5).await;
        double.cut_watches(Cut::Error500);
        double.refuse_requests(Some(Duration::from_secs(2)));
        at(4.0).await;
        double.cut_watches(Cut::Clean);
        // While the script sleeps (from about 5 s to 12 s).
        at(6.5).await;
        double.cut_watches(Cut::Reset);
        at(7.5).await;
        double.cut_watches(Cut::Error500);
        double.refuse_requests(Some(Duration::from_secs(3)));
        at(11.0).await;
        double.cut_watches(Cut::Clean);
    };
    let ((is_error, text), ()) = tokio::join!(call, outages);
    eprintln!(
        "answered after {:?}, {} watch requests",
        began.elapsed(),
        watches(&double)
    );
    assert!(!is_error, "{text}");
    assert!(text.contains("slept"), "{text}");
    assert!(watches(&double) >= 4, "the watches were renewed");
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// An API server gone for good (every request refused, the open watch reset) ends the call
/// within the bound (`SANDBOX_API_OUTAGE_MAX`, 3 s here) with an error that says so; `/livez`
/// still answers while `/health` says 503. Once the API server is back, the reaper removes
/// the pod the failed call could not delete, with a grace period of 1 s.
#[tokio::test]
async fn with_the_api_server_gone_for_good_the_call_ends_within_the_bound_saying_so() {
    const BOUND: Duration = Duration::from_secs(3);
    let (double, _home, mut vars) = cluster(true).await;
    vars.push(("SANDBOX_API_OUTAGE_MAX".into(), BOUND.as_secs().to_string()));
    let server = TestServer::start(&vars).await;
    let call = server.call(
        None,
        "run_python",
        json!({"code": "import time\ntime.sleep(60)"}),
    );
    let outage = async {
        until_a_pod_runs(&double).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        double.refuse_requests(None);
        double.cut_watches(Cut::Reset);
        Instant::now()
    };
    let ((is_error, text), gone_at) = tokio::join!(call, outage);
    let took = gone_at.elapsed();
    eprintln!("the call ended {took:?} after the API server went (bound {BOUND:?})");
    assert!(is_error, "{text}");
    assert!(
        text.contains("unreachable for") && text.contains("SANDBOX_API_OUTAGE_MAX"),
        "{text}"
    );
    assert!(took >= BOUND, "{took:?}");
    assert!(took < BOUND + Duration::from_secs(5), "{took:?}");

    let health = with_timeout(reqwest::get(format!("{}/health", server.url)))
        .await
        .unwrap();
    assert_eq!(health.status(), 503, "the cluster is away: not ready");
    let live = with_timeout(reqwest::get(format!("{}/livez", server.url)))
        .await
        .unwrap();
    assert_eq!(live.status(), 200, "but alive: no restart");

    double.refuse_requests(Some(Duration::ZERO));
    let left = sandbox_pods(&double).await;
    assert_eq!(
        left.len(),
        1,
        "the pod could not be deleted while the API was gone"
    );
    let name = left[0]["metadata"]["name"].as_str().unwrap().to_string();
    let sandbox = server.tools.sandbox();
    let report = with_timeout(sandbox.reap(&file_agent::sandbox::ReapFilter {
        scope: file_agent::sandbox::ReapScope::All,
        instance: Some(sandbox.instance().to_string()),
    }))
    .await
    .unwrap();
    assert_eq!(report.containers, 1, "{report:?}");
    assert!(
        double.deletions().contains(&(name, 1)),
        "{:?}",
        double.deletions()
    );
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// The kubelet counts `activeDeadlineSeconds` from `startTime`, before the image is pulled.
/// Here a minute of the double's deadline clock passes in 3 s, and the image takes 10 s to
/// pull: 200 s at that clock, more than the old margin (120 s) and the old deadline
/// (10 + 60 + 120 = 190 s with `SCRIPT_TIMEOUT=10`). The attempt still runs.
#[tokio::test]
async fn a_pod_whose_image_is_slower_than_the_old_margin_still_runs_its_attempt() {
    let (double, _home, mut vars) = cluster(true).await;
    vars.push(("SCRIPT_TIMEOUT".into(), "10".into()));
    double.speed_up_deadlines(20);
    double.set_start_delay(Duration::from_secs(10));
    let server = TestServer::start(&vars).await;
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print(6 * 7)"}))
        .await;
    assert!(!is_error, "{text}");
    assert!(text.contains("42"), "{text}");
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// Out of memory with `memory.oom.group=1`: the kubelet kills the whole container, the runner
/// with the script, so no report comes; the pod's status (`OOMKilled`) says why, and so does
/// the call. Pods are deleted with a grace period of 1 s, never force-deleted.
#[tokio::test]
async fn out_of_memory_that_kills_the_whole_container_is_reported_as_such() {
    let (double, _home, mut vars) = cluster(true).await;
    vars.push(("SANDBOX_MEMORY_MIB".into(), "256".into()));
    double.kill_whole_container_on_oom();
    let server = TestServer::start(&vars).await;
    let (is_error, text) = server
        .call(
            None,
            "run_python",
            json!({"code": fixture_script("memory_hog.py")}),
        )
        .await;
    assert!(is_error, "{text}");
    assert!(text.contains("256 MiB of memory"), "{text}");
    // The pod's last status, as the kubelet wrote it (the pod may be gone already: polling it
    // raced its deletion under load).
    let terminated = double.terminated_states()[0].clone();
    assert_eq!(terminated["reason"], "OOMKilled", "{terminated}");
    assert_eq!(terminated["exitCode"], 137, "killed whole: {terminated}");
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    let deletions = double.deletions();
    assert!(!deletions.is_empty());
    assert!(
        deletions.iter().all(|(_, grace)| *grace == 1),
        "{deletions:?}"
    );
    with_timeout(double.shutdown()).await;
}

/// The kubelet retries a failed pull by itself: a first `ErrImagePull` (and the
/// `ImagePullBackOff` after it) is waited out, and an image that cannot be pulled fails the
/// call once the kubelet's pull after its back-off failed too, with the reason in the error.
#[tokio::test]
async fn a_failed_pull_is_waited_out_and_a_backed_off_one_is_reported() {
    let (double, _home, mut vars) = cluster(true).await;
    double.fail_pulls(1);
    let server = TestServer::start(&vars).await;
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print('pulled')"}))
        .await;
    assert!(!is_error, "{text}");
    assert!(text.contains("pulled"), "{text}");
    server.assert_nothing_left().await;

    vars.retain(|(key, _)| key != "SANDBOX_IMAGE");
    vars.push((
        "SANDBOX_IMAGE".into(),
        "file-agent-sandbox:no-such-image".into(),
    ));
    double.fail_pulls(0);
    let server = TestServer::start(&vars).await;
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print('never')"}))
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("ErrImagePull (and again after the kubelet's ImagePullBackOff)"),
        "{text}"
    );
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// A warm pod whose log cannot be read (no `get pods/log`) is ready only once its attach
/// shows the runner's READY line, never on the failed read, and serves its attempt warm.
#[tokio::test]
async fn a_warm_pod_whose_log_cannot_be_read_is_ready_from_its_attach() {
    use crate::common::{TestSandbox, run_script, unique_instance};
    let (double, _home, vars) = cluster(true).await;
    double.deny_verbs(&["get pods/log"]);
    let mut lookup: std::collections::HashMap<String, String> = vars.into_iter().collect();
    lookup.insert("SANDBOX_INSTANCE".into(), unique_instance("kube-nolog", 12));
    let sandbox = TestSandbox::warm(1, Duration::from_secs(120), |config| {
        *config = file_agent::config::SandboxConfig::from_lookup(|name| lookup.get(name).cloned())
            .unwrap();
    })
    .await;
    sandbox.until_warm(1).await;
    let outcome = run_script(&sandbox, "print('hi')").await;
    assert_eq!(outcome.stdout.text().trim(), "hi", "{outcome:?}");
    assert!(outcome.warm, "{outcome:?}");
    assert!(
        double.requests().iter().any(|line| line.contains("/log")),
        "the log was asked for, and refused"
    );
    with_timeout(sandbox.shutdown()).await;
    sandbox.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}

/// A pod the scheduler cannot place (or that a quota keeps out) is given up after
/// `SANDBOX_POD_START_TIMEOUT` (2 s here), with the scheduler's reason in the error.
#[tokio::test]
async fn a_pod_that_cannot_be_scheduled_is_given_up_with_the_reason() {
    let (double, _home, mut vars) = cluster(true).await;
    vars.push(("SANDBOX_POD_START_TIMEOUT".into(), "2".into()));
    double.leave_unschedulable("0/3 nodes are available: 3 Insufficient memory.");
    let server = TestServer::start(&vars).await;
    let began = Instant::now();
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print('never')"}))
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("did not run within 2 s (SANDBOX_POD_START_TIMEOUT)"),
        "{text}"
    );
    assert!(
        text.contains("Unschedulable: 0/3 nodes are available: 3 Insufficient memory."),
        "{text}"
    );
    assert!(began.elapsed() < Duration::from_secs(10));
    server.assert_nothing_left().await;
    assert_no_sandbox_pods(&double).await;
    with_timeout(double.shutdown()).await;
}
