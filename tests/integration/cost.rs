//! What an attempt used, as its runner measures it: CPU seconds, peak memory, bytes written to
//! `/work/out` and processes, under runc and gVisor, cold and warm, in containers and in the
//! Kubernetes double's pods, against the real engine and image. The bounds are the issue's: a peak of 200 MiB touched reads 200 to 300 MiB, a
//! second of spinning 0.9 to 1.3 s of CPU, a second asleep (or a warm container's `pass`,
//! whose imports came before the attempt) under 0.1 s.

use std::time::Duration;

use file_agent::sandbox::{Outcome, Resources, Status};

use crate::common::{Runtime, TestSandbox, on_each_runtime, run_script};

on_each_runtime!(
    touching_200_mib_reports_a_peak_of_200_to_300_mib,
    a_second_of_spinning_reports_a_second_of_cpu,
    a_second_asleep_reports_almost_no_cpu,
    a_warm_attempt_does_not_count_the_priming,
    a_waited_for_child_and_the_outputs_are_counted,
);

const MIB: u64 = 1 << 20;

/// A bound on an attempt's figures.
type Check = fn(&Resources);

/// Allocates 200 MiB and writes every byte of it (a repeated byte is a `memset`).
pub(crate) const TOUCH_200_MIB: &str = "data = b'\\x01' * (200 << 20)\nprint(len(data))\n";
/// Spins for one second of the process's CPU time.
pub(crate) const SPIN_1_S: &str = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 1.0:\n    pass\n";
/// Sleeps for one second.
pub(crate) const IDLE_1_S: &str = "import time\ntime.sleep(1)\n";

/// The figures of an attempt that ran to its end, shown when a bound fails.
fn used(outcome: &Outcome) -> Resources {
    assert_eq!(outcome.status, Status::Ok, "{outcome:?}");
    outcome.resources
}

/// A peak of 200 MiB touched reads between 200 and 300 MiB.
pub(crate) fn assert_200_mib(used: &Resources) {
    let peak = used.peak_memory_bytes.expect("a peak") / MIB;
    assert!((200..300).contains(&peak), "peak {peak} MiB: {used:?}");
}

/// A second of spinning reads 0.9 to 1.3 s of CPU.
pub(crate) fn assert_one_cpu_second(used: &Resources) {
    let cpu = used.cpu_s().expect("CPU seconds");
    assert!((0.9..=1.3).contains(&cpu), "{cpu} s of CPU: {used:?}");
}

/// An attempt that did almost nothing reads under 0.1 s of CPU.
pub(crate) fn assert_almost_no_cpu(used: &Resources) {
    let cpu = used.cpu_s().expect("CPU seconds");
    assert!(cpu < 0.1, "{cpu} s of CPU: {used:?}");
}

async fn touching_200_mib_reports_a_peak_of_200_to_300_mib(runtime: Runtime) {
    let sandbox = TestSandbox::on(runtime, |_| {}).await;
    let outcome = run_script(&sandbox, TOUCH_200_MIB).await;
    eprintln!("{runtime:?} 200 MiB: {:?}", outcome.resources);
    assert_200_mib(&used(&outcome));
    sandbox.assert_nothing_left().await;
}

async fn a_second_of_spinning_reports_a_second_of_cpu(runtime: Runtime) {
    let sandbox = TestSandbox::on(runtime, |_| {}).await;
    let outcome = run_script(&sandbox, SPIN_1_S).await;
    eprintln!("{runtime:?} 1 s spin: {:?}", outcome.resources);
    assert_one_cpu_second(&used(&outcome));
    sandbox.assert_nothing_left().await;
}

async fn a_second_asleep_reports_almost_no_cpu(runtime: Runtime) {
    let sandbox = TestSandbox::on(runtime, |_| {}).await;
    let outcome = run_script(&sandbox, IDLE_1_S).await;
    eprintln!("{runtime:?} 1 s idle: {:?}", outcome.resources);
    assert_almost_no_cpu(&used(&outcome));
    sandbox.assert_nothing_left().await;
}

/// A warm worker imported pandas and primed it (most of a CPU second) before it took the job:
/// none of that is the attempt's. It waits for the runner's word that the idle preload has run
/// too.
async fn a_warm_attempt_does_not_count_the_priming(runtime: Runtime) {
    let sandbox = TestSandbox::warm_on(runtime, 1, Duration::from_secs(300), |_| {}).await;
    sandbox.until_primed(1).await;
    let outcome = run_script(&sandbox, "pass\n").await;
    assert!(outcome.warm, "it ran cold");
    eprintln!("{runtime:?} warm pass: {:?}", outcome.resources);
    let used = used(&outcome);
    assert_almost_no_cpu(&used);
    // The libraries imported ahead stay in the script's process: they are its memory too.
    assert!(
        used.peak_memory_bytes.expect("a peak") > 30 * MIB,
        "{used:?}"
    );
    with_timeout_shutdown(&sandbox).await;
}

async fn with_timeout_shutdown(sandbox: &TestSandbox) {
    crate::common::with_timeout(sandbox.shutdown()).await;
    sandbox.assert_nothing_left().await;
}

/// A child the script waits for is its CPU; the outputs are the files' bytes; each process
/// takes a PID.
async fn a_waited_for_child_and_the_outputs_are_counted(runtime: Runtime) {
    let sandbox = TestSandbox::on(runtime, |_| {}).await;
    let script = format!(
        "import subprocess, sys\nsubprocess.run([sys.executable, '-c', {SPIN_1_S:?}], check=True)\n\
         open('/work/out/a.bin', 'wb').write(b'x' * 12345)\n\
         import os\nos.makedirs('/work/out/sub')\nopen('/work/out/sub/b.txt', 'w').write('hello')\n"
    );
    let outcome = run_script(&sandbox, &script).await;
    eprintln!("{runtime:?} child and outputs: {:?}", outcome.resources);
    let used = used(&outcome);
    assert_one_cpu_second(&used);
    assert_eq!(used.output_bytes, Some(12345 + 5), "{used:?}");
    // The worker and the Python it started, and no thread of PID 1's.
    assert_eq!(used.processes, Some(2), "{used:?}");
    sandbox.assert_nothing_left().await;
}

/// A script killed for its memory cannot report its end: its peak comes from PID 1's `wait4`
/// of it, and the message says it. Under runc only: gVisor's out-of-memory kill ends the whole
/// sandbox, PID 1 included, so no report comes (the answer then says the limit alone).
#[tokio::test]
async fn an_out_of_memory_attempt_says_its_peak() {
    let sandbox = TestSandbox::on(Runtime::Default, |c| c.limits.memory_bytes = 256 << 20).await;
    let outcome = run_script(&sandbox, &crate::common::fixture_script("memory_hog.py")).await;
    eprintln!(
        "out of memory: {:?}: {}",
        outcome.resources, outcome.message
    );
    assert_eq!(outcome.status, Status::OutOfMemory, "{outcome:?}");
    let peak = outcome
        .resources
        .peak_memory_bytes
        .expect("a peak")
        .div_ceil(MIB);
    assert!((128..=257).contains(&peak), "{peak} MiB: {outcome:?}");
    let said = format!("its largest process had reached {peak} MiB");
    assert!(outcome.message.contains(&said), "{}", outcome.message);
    sandbox.assert_nothing_left().await;
}

/// Through the Kubernetes double, over MCP: each figure within its bounds in the audit line's
/// `resources`, the answer's line saying the CPU and memory, and a warm pod's `pass` without
/// its priming.
#[tokio::test]
async fn pods_report_what_their_attempts_used_in_the_trail_and_the_answer() {
    use crate::kubernetes::{assert_no_sandbox_pods, cluster};
    let (double, _home, vars) = cluster(true).await;
    let server = crate::mcp_server::TestServer::start(&vars).await;
    let checks: [(&str, Check); 3] = [
        (TOUCH_200_MIB, assert_200_mib),
        (SPIN_1_S, assert_one_cpu_second),
        (IDLE_1_S, assert_almost_no_cpu),
    ];
    for (code, check) in checks {
        let (is_error, text) = server
            .call(None, "run_python", serde_json::json!({ "code": code }))
            .await;
        assert!(!is_error, "{text}");
        assert!(text.contains(" s of CPU and "), "{text}");
        let line = server.audit_lines().pop().expect("an audit line");
        eprintln!("pod: {code:?}: {}", line["resources"]);
        let used: Resources = serde_json::from_value(line["resources"].clone()).unwrap();
        check(&used);
    }
    let first = server.call(
        None,
        "run_python",
        serde_json::json!({"code": TOUCH_200_MIB}),
    );
    let (_, text) = first.await;
    let mib: u64 = text
        .split(" s of CPU and ")
        .nth(1)
        .and_then(|rest| rest.split(" MiB").next())
        .and_then(|mib| mib.parse().ok())
        .unwrap_or_else(|| panic!("no memory in the answer: {text}"));
    assert!((200..300).contains(&mib), "{text}");
    server.assert_nothing_left().await;
    warm_pod_pass(&double, &vars).await;
    assert_no_sandbox_pods(&double).await;
    crate::common::with_timeout(double.shutdown()).await;
}

/// The same figures from pods of a RuntimeClass whose handler is gVisor (`runsc`).
#[tokio::test]
async fn gvisor_pods_report_what_their_attempts_used() {
    use crate::kubernetes::{assert_no_sandbox_pods, cluster};
    let (double, _home, mut vars) = cluster(true).await;
    let class = serde_json::json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": "gvisor"}, "handler": "runsc"});
    crate::common::with_timeout(double.apply(class)).await;
    vars.push(("SANDBOX_RUNTIME".into(), "gvisor".into()));
    let lookup: std::collections::HashMap<String, String> = vars.iter().cloned().collect();
    let kube = TestSandbox::on(Runtime::Default, |config| {
        *config = file_agent::config::SandboxConfig::from_lookup(|name| lookup.get(name).cloned())
            .unwrap();
    })
    .await;
    let checks: [(&str, Check); 3] = [
        (TOUCH_200_MIB, assert_200_mib),
        (SPIN_1_S, assert_one_cpu_second),
        (IDLE_1_S, assert_almost_no_cpu),
    ];
    for (code, check) in checks {
        let outcome = run_script(&kube, code).await;
        eprintln!("gVisor pod: {code:?}: {:?}", outcome.resources);
        check(&used(&outcome));
        assert_eq!(outcome.resources.processes, Some(1), "{outcome:?}");
    }
    kube.assert_nothing_left().await;
    warm_pod_pass(&double, &vars).await;
    assert_no_sandbox_pods(&double).await;
    crate::common::with_timeout(double.shutdown()).await;
}

/// A warm pod's `pass`: under 0.1 s of CPU, its imports and priming not counted.
async fn warm_pod_pass(double: &crate::fakes::kubernetes::KubeDouble, vars: &[(String, String)]) {
    let mut lookup: std::collections::HashMap<String, String> = vars.iter().cloned().collect();
    let instance = crate::common::unique_instance("kube-cost", 12);
    lookup.insert("SANDBOX_INSTANCE".into(), instance);
    let kube = TestSandbox::warm(1, Duration::from_secs(120), |config| {
        *config = file_agent::config::SandboxConfig::from_lookup(|name| lookup.get(name).cloned())
            .unwrap();
    })
    .await;
    // The double's only pod: the warm one.
    let (key, value) = double.label();
    crate::common::until_primed(&format!("{key}={value}"), 1).await;
    let outcome = run_script(&kube, "pass\n").await;
    assert!(outcome.warm, "it ran cold");
    eprintln!("warm pod pass: {:?}", outcome.resources);
    assert_almost_no_cpu(&used(&outcome));
    with_timeout_shutdown(&kube).await;
}
