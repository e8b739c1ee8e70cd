//! The audit trail survives a crash, with the real binary stopped the way crashes stop it: a
//! last line over 1 MiB continues the chain after a restart; a SIGKILL that lands while a long
//! line is being written leaves an unfinished line, which `audit verify` reports without
//! calling it tampering and the restart cuts, keeps beside the chain and records; an append
//! that fails part-way leaves no fragment for the next line to be fused to; a kill right after
//! a rotation loses neither the file nor the link. After each, `audit verify` of the data
//! folder passes and every call answered as a success has its readable line.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::audit::file_agent;
use crate::common::{TEST_TIMEOUT, containers_of_instance, unique_instance, with_timeout};
use crate::lifecycle::{Served, serve, serve_wrapped, start_call};

/// Code for `run_python` of about `bytes` bytes: it prints `marker`, then a long comment.
fn long_code(marker: &str, bytes: usize) -> String {
    let mut code = format!("print({marker:?})\n#");
    code.extend(std::iter::repeat_n('x', bytes.saturating_sub(code.len())));
    code
}

/// Runs `code` and asserts it was answered as a success.
async fn call_ok(url: &str, code: &str) {
    let (is_error, text) = with_timeout(start_call(url, code))
        .await
        .unwrap()
        .expect("an answer");
    assert!(!is_error, "{text}");
}

/// The live file of the chain `instance` writes under `data`.
fn chain_file(data: &Path, instance: &str) -> PathBuf {
    data.join("audit").join(format!("{instance}.jsonl"))
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// `file-agent audit verify` of the whole data folder.
async fn verify(data: &Path) -> (i32, String) {
    file_agent(&["audit", "verify", data.to_str().unwrap()]).await
}

/// Every line of every chain under `data` that parses, in chain order.
fn records(data: &Path) -> Vec<Value> {
    let chains = file_agent::audit::chain::chains(&data.join("audit")).unwrap();
    chains
        .iter()
        .flat_map(|chain| &chain.files)
        .flat_map(|file| {
            let bytes = std::fs::read(file).unwrap();
            String::from_utf8_lossy(&bytes)
                .lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect::<Vec<Value>>()
        })
        .collect()
}

/// Asserts that each call in `answered` (by the marker its code prints) has its line.
fn assert_each_has_its_line(data: &Path, answered: &[String]) {
    let records = records(data);
    for marker in answered {
        let printed = format!("print({marker:?})");
        assert!(
            records
                .iter()
                .any(|r| r["code"].as_str().is_some_and(|c| c.starts_with(&printed))),
            "the call {marker} was answered as a success but has no line"
        );
    }
}

/// The side files that keep what start-up cut from `instance`'s chain.
fn side_files(data: &Path, instance: &str) -> Vec<PathBuf> {
    let prefix = format!("{instance}.jsonl.torn-");
    let mut found: Vec<PathBuf> = std::fs::read_dir(data.join("audit"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&prefix)
        })
        .collect();
    found.sort();
    found
}

/// Spins until `happened` holds, then sends SIGKILL at once: a kill timed to the microsecond,
/// on a thread of its own while the runtime's other thread serves the call. Returns how long
/// it waited.
fn kill_when(server: &mut Served, happened: impl Fn() -> bool) -> Duration {
    tokio::task::block_in_place(|| {
        let started = Instant::now();
        while !happened() {
            assert!(started.elapsed() < TEST_TIMEOUT, "it never happened");
            std::hint::spin_loop();
        }
        server.start_kill();
        started.elapsed()
    })
}

#[tokio::test]
async fn a_last_line_over_1_mib_continues_the_chain_after_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let me = unique_instance("long", 8);
    let server = serve(Some(&me), data.path(), &[]).await;
    // FILE_AGENT_AUDIT_CODE is on by default: the code is in the line.
    call_ok(&server.url, &long_code("first", 1_100_000)).await;
    server.stop().await;
    let last_line = size(&chain_file(data.path(), &me));
    assert!(last_line > 1 << 20, "{last_line}");

    let restarting = Instant::now();
    let server = serve(Some(&me), data.path(), &[]).await;
    eprintln!(
        "restart with a {last_line}-byte last line: serving after {:?}",
        restarting.elapsed()
    );
    call_ok(&server.url, "print('second')").await;
    server.stop().await;

    let (code, out) = verify(data.path()).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok: 1 chains, 2 lines"), "{out}");
    assert!(!out.contains("crash:"), "{out}");
    assert_eq!(containers_of_instance(&me).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_while_it_writes_a_long_line_restarts_clean_and_verify_reports_it() {
    // Each trial: a call whose line is about 3.5 MiB, and a SIGKILL the moment the chain file
    // starts to grow. The kernel copies a write page by page and stops at a fatal signal, so a
    // kill that lands within the copy (a few milliseconds) tears the line. Trials go on until
    // one did, each on the restarted server, which cuts what the last one tore.
    const TRIALS: usize = 8;
    let data = tempfile::tempdir().unwrap();
    let me = unique_instance("torn", 8);
    let chain = chain_file(data.path(), &me);
    let mut answered = vec!["first".to_string()];
    let mut fragments = Vec::new();
    for trial in 1..=TRIALS {
        let mut server = serve(Some(&me), data.path(), &[]).await;
        if trial == 1 {
            call_ok(&server.url, &long_code("first", 200)).await;
        }
        let before = size(&chain);
        let marker = format!("killed-{trial}");
        let call = start_call(&server.url, &long_code(&marker, 3_500_000));
        let waited = kill_when(&mut server, || size(&chain) > before);
        server.kill().await;
        if let Some((false, _)) = with_timeout(call).await.unwrap() {
            answered.push(marker);
        }
        let bytes = std::fs::read(&chain).unwrap();
        let whole = bytes
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1);
        eprintln!(
            "trial {trial}: killed {waited:?} after the call started; the file grew from {before} to {} bytes: {}",
            bytes.len(),
            if whole == bytes.len() {
                "no line torn".to_string()
            } else {
                format!("{} bytes of a line torn", bytes.len() - whole)
            }
        );
        if whole < bytes.len() {
            fragments.push(bytes[whole..].to_vec());
            // Before any restart: not tampering, an unfinished line.
            let (code, out) = verify(data.path()).await;
            assert_eq!(code, 0, "{out}");
            assert!(
                out.contains("crash: ") && out.contains("no newline"),
                "{out}"
            );
            break;
        }
    }
    assert!(
        !fragments.is_empty(),
        "no kill in {TRIALS} trials landed while a line was being written"
    );

    let server = serve(Some(&me), data.path(), &[]).await;
    for n in 0..2 {
        let marker = format!("after-{n}");
        call_ok(&server.url, &long_code(&marker, 200)).await;
        answered.push(marker);
    }
    server.stop().await;

    let (code, out) = verify(data.path()).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("recovered after a crash"), "{out}");
    assert!(
        !out.contains("no newline"),
        "an unfinished line is left: {out}"
    );
    let recovered: Vec<Value> = records(data.path())
        .into_iter()
        .filter(|r| r["status"] == "recovered")
        .collect();
    assert_eq!(recovered.len(), fragments.len(), "{recovered:?}");
    let sides = side_files(data.path(), &me);
    assert_eq!(sides.len(), fragments.len(), "{sides:?}");
    for ((line, side), fragment) in recovered.iter().zip(&sides).zip(&fragments) {
        assert_eq!(&std::fs::read(side).unwrap(), fragment);
        let cut = &line["recovered"];
        assert_eq!(cut["bytes"], fragment.len() as u64);
        assert_eq!(cut["sha256"], crate::common::sha256_hex(fragment));
        assert_eq!(
            cut["kept"].as_str(),
            side.file_name().unwrap().to_str(),
            "{line}"
        );
    }
    assert_each_has_its_line(data.path(), &answered);
    // The review page says the same, and counts no attempt for a recovery.
    let (code, out) =
        file_agent(&["audit", "report", data.path().to_str().unwrap(), "--json"]).await;
    assert_eq!(code, 0, "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["integrity"]["intact"], true);
    let traces = &report["integrity"]["chains"][0]["crash_traces"];
    assert_eq!(
        traces.as_array().map(Vec::len),
        Some(fragments.len()),
        "{traces}"
    );
    assert!(
        report["summary"]["statuses"].get("recovered").is_none(),
        "{}",
        report["summary"]
    );
    assert_eq!(containers_of_instance(&me).await, 0);
}

#[tokio::test]
async fn an_append_that_fails_part_way_leaves_no_fragment_and_the_next_line_starts_clean() {
    // A full disk, made small: a file-size limit (RLIMIT_FSIZE) set on the running server with
    // prlimit. A write past it writes what fits and fails (EFBIG), as one on a full filesystem
    // writes what fits and fails (ENOSPC); raising it is the space coming back. The shell
    // ignores SIGXFSZ for the server (an ignored signal stays ignored across exec); otherwise
    // the kernel would kill it rather than fail the write. No mount, no privilege.
    let data = tempfile::tempdir().unwrap();
    let me = unique_instance("full", 8);
    let chain = chain_file(data.path(), &me);
    let wrapper = ["sh", "-c", "trap '' XFSZ; exec \"$@\"", "sh"];
    let server = serve_wrapped(&wrapper, Some(&me), data.path(), &[]).await;
    call_ok(&server.url, &long_code("before", 200)).await;
    let clean = size(&chain);

    prlimit(server.pid(), &format!("{}:", clean + 64 * 1024)).await;
    // The attempt ran (the limit leaves room to reserve: fallocate does not count against
    // RLIMIT_FSIZE), but its line could not be written: the call is a failure, its output
    // withheld.
    let (is_error, text) = with_timeout(start_call(&server.url, &long_code("unrecorded", 1 << 20)))
        .await
        .unwrap()
        .expect("an answer");
    assert!(is_error, "answered with no line in the trail: {text}");
    assert!(text.contains("audit trail cannot be written"), "{text}");
    assert!(
        !text.contains("unrecorded"),
        "the output was not withheld: {text}"
    );
    assert_eq!(
        size(&chain),
        clean,
        "the failed line left a fragment of {} bytes",
        size(&chain) - clean
    );
    prlimit(server.pid(), "unlimited:").await;
    call_ok(&server.url, &long_code("after", 200)).await;
    server.stop().await;

    let (code, out) = verify(data.path()).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok: 1 chains, 3 lines"), "{out}");
    assert!(!out.contains("crash:"), "{out}");
    let text = std::fs::read_to_string(&chain).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // The first line once the trail works again says what the outage cost.
    let restored: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(restored["status"], "audit_restored", "{restored}");
    assert_eq!(restored["unavailable"]["lines_lost"], 1, "{restored}");
    assert_eq!(
        restored["prev"],
        crate::common::sha256_hex(lines[0].as_bytes())
    );
    let after: Value = serde_json::from_str(lines[2]).unwrap();
    assert!(
        after["code"]
            .as_str()
            .unwrap()
            .starts_with("print(\"after\")")
    );
    assert_eq!(after["seq"], 3);
    assert_eq!(
        after["prev"],
        crate::common::sha256_hex(lines[1].as_bytes())
    );
    assert_each_has_its_line(data.path(), &["before".into(), "after".into()]);
    assert_eq!(containers_of_instance(&me).await, 0);
}

/// Sets the file-size limit of the process `pid` (`soft:hard`; an empty side is left as is).
async fn prlimit(pid: u32, limits: &str) {
    let status = with_timeout(
        tokio::process::Command::new("prlimit")
            .args(["--pid", &pid.to_string(), &format!("--fsize={limits}")])
            .status(),
    )
    .await
    .unwrap();
    assert!(status.success(), "prlimit --fsize={limits}: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_right_after_a_rotation_loses_no_file_and_no_link() {
    let data = tempfile::tempdir().unwrap();
    let me = unique_instance("rot", 8);
    let chain = chain_file(data.path(), &me);
    // The smallest rotation size, 1 MiB: two lines of 600 KB do not fit in one file.
    let settings = [("FILE_AGENT_AUDIT_MAX_MIB", "1")];
    let mut server = serve(Some(&me), data.path(), &settings).await;
    let mut answered = vec!["first".to_string()];
    call_ok(&server.url, &long_code("first", 600_000)).await;

    // The second line rotates the file first: kill the moment the full file is renamed, when
    // the new file has no whole line yet.
    let rotated = chain.with_file_name(format!("{me}.jsonl.000000000001"));
    let call = start_call(&server.url, &long_code("second", 600_000));
    kill_when(&mut server, || rotated.exists());
    server.kill().await;
    eprintln!(
        "killed after the rotation: the new file {}",
        match std::fs::metadata(&chain) {
            Err(_) => "was not there yet".to_string(),
            Ok(meta) => format!("held {} bytes", meta.len()),
        }
    );
    if let Some((false, _)) = with_timeout(call).await.unwrap() {
        answered.push("second".into());
    }

    let server = serve(Some(&me), data.path(), &settings).await;
    call_ok(&server.url, &long_code("third", 200)).await;
    answered.push("third".into());
    server.stop().await;

    let (code, out) = verify(data.path()).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("in 2 files"), "{out}");
    assert!(!out.contains("continues an earlier"), "{out}");
    let seqs: Vec<u64> = records(data.path())
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_each_has_its_line(data.path(), &answered);
    assert_eq!(containers_of_instance(&me).await, 0);
}
