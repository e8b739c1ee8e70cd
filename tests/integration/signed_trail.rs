//! A trail that proves itself (issue 45), against the real `file-agent serve` process: a key
//! made by `audit keygen`, checkpoints signed every second and at shutdown, a witness written
//! in the tests from c2sp.org/tlog-witness (`fakes::witness`) that cosigns them, receipts in
//! every tool result whose proofs (`audit prove`) the tests' independent Python verifier
//! (`tests/sdk/tlog_verify.py`, written from the C2SP and RFC texts) accepts. Then the attacks
//! a reviewer fears: the trail rewritten and re-chained, cut, a line inserted, a checkpoint of
//! another key, the rewritten trail served and signed again (a fork the witness refuses), and
//! two replicas' chains each checked on its own.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{run_cli, sha256_hex, with_timeout};
use crate::fakes::witness::FakeWitness;
use crate::front_door::{Served, free_port, post_mcp};

/// The signing key's name, and so the first part of every chain's origin.
pub(crate) const LOG_NAME: &str = "signed-trail.test/audit";

/// A key made by `audit keygen` in a folder of its own (never the data folder); its path and
/// verifier key.
pub(crate) async fn keygen(folder: &Path, name: &str) -> (PathBuf, String) {
    let key = folder.join(format!(
        "{}.key",
        crate::common::unique_instance("audit", 8)
    ));
    let made = run_cli(
        &[
            "audit",
            "keygen",
            "--name",
            name,
            "--out",
            key.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    (key, made.stdout.trim().to_string())
}

/// A server over `data` signing with `key`, each second, witnessed by `witness`; JSON logs.
pub(crate) async fn serve(
    data: &Path,
    instance: &str,
    key: &Path,
    witness: &FakeWitness,
) -> Served {
    start(data, instance, key, witness, &[], true).await
}

/// [`serve`] with `more` settings.
pub(crate) async fn serve_with(
    data: &Path,
    instance: &str,
    key: &Path,
    witness: &FakeWitness,
    more: &[(&str, &str)],
) -> Served {
    start(data, instance, key, witness, more, true).await
}

/// [`serve`], returning once `/health` answers (`ready`: once it answers 200).
pub(crate) async fn serve_as(
    data: &Path,
    instance: &str,
    key: &Path,
    witness: &FakeWitness,
    ready: bool,
) -> Served {
    start(data, instance, key, witness, &[], ready).await
}

/// The server of [`serve`], [`serve_with`] and [`serve_as`].
async fn start(
    data: &Path,
    instance: &str,
    key: &Path,
    witness: &FakeWitness,
    more: &[(&str, &str)],
    ready: bool,
) -> Served {
    let listen = format!("127.0.0.1:{}", free_port());
    let witnesses = format!("{} {}", witness.url, witness.vkey());
    let mut vars = vec![
        ("FILE_AGENT_LISTEN", listen.as_str()),
        ("SANDBOX_INSTANCE", instance),
        ("FILE_AGENT_AUDIT_SIGNING_KEY_FILE", key.to_str().unwrap()),
        ("FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL", "1"),
        ("FILE_AGENT_AUDIT_WITNESSES", &witnesses),
        ("FILE_AGENT_LOG_FORMAT", "json"),
    ];
    vars.extend_from_slice(more);
    if ready {
        Served::start(&vars, Some(data)).await
    } else {
        Served::start_answering(&vars, Some(data)).await
    }
}

/// The JSON-RPC result of a raw `tools/call` answer (JSON or one SSE event).
pub(crate) fn result_of(body: &str) -> Value {
    let json = body
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .unwrap_or(body);
    let value: Value = serde_json::from_str(json.trim()).unwrap();
    value["result"].clone()
}

/// Runs `print(n)` and returns the receipts of the call's lines.
pub(crate) async fn run(server: &Served, n: u64) -> Vec<Value> {
    let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
        "params": {"name": "run_python", "arguments": {"code": format!("print({n})")}}});
    let (status, answer) = post_mcp(&server.url, body, &[]).await;
    assert_eq!(status, 200, "{answer}");
    let result = result_of(&answer);
    assert_eq!(result["isError"], false, "{result}");
    result["_meta"]["io.file-agent/receipts"]
        .as_array()
        .unwrap_or_else(|| panic!("no receipts: {result}"))
        .clone()
}

/// The one chain file of `instance` under `data`, and its lines.
pub(crate) fn chain(data: &Path, instance: &str) -> (PathBuf, Vec<String>) {
    let path = data.join("audit").join(format!("{instance}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text.lines().map(str::to_string).collect())
}

/// The checkpoints kept beside a chain file.
pub(crate) fn kept(live: &Path) -> Vec<Value> {
    let path = PathBuf::from(format!("{}.checkpoints", live.display()));
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Waits until a checkpoint of at least `lines` lines is kept beside `live`.
pub(crate) async fn until_signed(live: &Path, lines: usize) -> Value {
    let started = Instant::now();
    loop {
        if let Some(last) = kept(live).into_iter().last()
            && last["size"].as_u64().unwrap() as usize >= lines
        {
            return last;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no checkpoint of {lines} lines"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the tests' Python verifier with `args`, `input` on stdin; its JSON answer.
pub(crate) async fn python_verifier(args: &[&str], input: &str) -> Value {
    use tokio::io::AsyncWriteExt;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = crate::common::sdk_venv();
    let mut child = tokio::process::Command::new(venv.join("bin/python3"))
        .arg(root.join("tests/sdk/tlog_verify.py"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let output = with_timeout(child.wait_with_output()).await.unwrap();
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stdout)))
}

/// `audit verify <data> --key ...`: (exit code, what it printed).
pub(crate) async fn verify(data: &Path, key: &str, more: &[&str]) -> (i32, String) {
    let mut args = vec!["audit", "verify", data.to_str().unwrap(), "--key", key];
    args.extend_from_slice(more);
    let done = run_cli(&args, &[]).await;
    (
        done.code.unwrap_or(-1),
        format!("{}{}", done.stdout, done.stderr),
    )
}

/// The chain file re-chained after `change` edited its lines: every `prev` recomputed, as an
/// attacker with the folder would (the hash chain then verifies again).
pub(crate) fn rewrite(live: &Path, change: impl FnOnce(&mut Vec<Value>)) {
    let text = std::fs::read_to_string(live).unwrap();
    let mut records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    change(&mut records);
    let mut prev = records[0]["prev"].as_str().unwrap().to_string();
    let mut out = String::new();
    for (index, record) in records.iter_mut().enumerate() {
        record["seq"] = json!(index as u64 + 1);
        record["prev"] = json!(prev);
        let line = serde_json::to_string(record).unwrap();
        prev = sha256_hex(line.as_bytes());
        out.push_str(&line);
        out.push('\n');
    }
    std::fs::write(live, out).unwrap();
    // The tree no longer fits: whoever rewrites the lines drops it (the server builds it anew).
    let _ = std::fs::remove_file(format!("{}.tree", live.display()));
}

#[tokio::test]
async fn each_answer_carries_a_receipt_that_an_independent_verifier_proves_in_a_witnessed_checkpoint()
 {
    let keys = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (key, vkey) = keygen(keys.path(), LOG_NAME).await;
    let witness = FakeWitness::start("witness.test/w1", [9; 32], std::slice::from_ref(&vkey)).await;
    let instance = crate::common::unique_instance("signed", 12);
    let server = serve(data.path(), &instance, &key, &witness).await;

    let mut receipts = Vec::new();
    for n in 1..=3 {
        receipts.extend(run(&server, n).await);
    }
    assert_eq!(receipts.len(), 3, "{receipts:?}");
    let origin = format!("{LOG_NAME}/{instance}");
    let (live, lines) = chain(data.path(), &instance);
    for (index, receipt) in receipts.iter().enumerate() {
        assert_eq!(receipt["origin"], origin.as_str());
        assert_eq!(receipt["leaf_index"], index as u64, "{receipt}");
    }
    until_signed(&live, lines.len()).await;

    // Each receipt's proof, checked by the independent verifier, against the line itself.
    let line_file = keys.path().join("line");
    for receipt in &receipts {
        let index = receipt["leaf_index"].as_u64().unwrap();
        let proved = run_cli(
            &[
                "audit",
                "prove",
                data.path().to_str().unwrap(),
                "--index",
                &index.to_string(),
            ],
            &[],
        )
        .await;
        assert_eq!(proved.code, Some(0), "{}", proved.stderr);
        assert_eq!(proved.json["leaf_hash"], receipt["leaf_hash"]);
        std::fs::write(&line_file, &lines[index as usize]).unwrap();
        let checked = python_verifier(
            &[
                "inclusion",
                "--key",
                &vkey,
                "--witness-key",
                &witness.vkey(),
                "--line-file",
                line_file.to_str().unwrap(),
            ],
            &proved.stdout,
        )
        .await;
        assert_eq!(checked["ok"], true, "{checked}");
        assert_eq!(checked["line_checked"], true);
    }
    // The kept checkpoint was cosigned by the witness, and so is in its view of the log.
    let last = kept(&live).into_iter().last().unwrap();
    assert_eq!(last["witnesses"][0]["outcome"], "cosigned", "{last}");
    assert_eq!(
        witness.latest(&origin).unwrap().0,
        last["size"].as_u64().unwrap()
    );

    // More lines, then SIGTERM: the last lines are signed at shutdown too, and the checkpoints
    // are consistent with one another.
    run(&server, 4).await;
    let first_size = kept(&live)[0]["size"].as_u64().unwrap();
    let log = server.stop().await;
    let (_, lines) = chain(data.path(), &instance);
    let last = kept(&live).into_iter().last().unwrap();
    assert_eq!(
        last["size"].as_u64().unwrap() as usize,
        lines.len(),
        "signed at shutdown"
    );
    assert!(
        log.contains("audit checkpoint"),
        "the log carries the checkpoints"
    );
    if first_size < lines.len() as u64 {
        let proved = run_cli(
            &[
                "audit",
                "prove",
                data.path().to_str().unwrap(),
                "--consistency",
                &first_size.to_string(),
                &lines.len().to_string(),
            ],
            &[],
        )
        .await;
        assert_eq!(proved.code, Some(0), "{}", proved.stderr);
        let checked = python_verifier(&["consistency", "--key", &vkey], &proved.stdout).await;
        assert_eq!(checked["ok"], true, "{checked}");
    }
    let (code, said) = verify(data.path(), &vkey, &["--witness-key", &witness.vkey()]).await;
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("witnessed by witness.test/w1"), "{said}");

    // The review page: which checkpoint the trail matches and who witnessed it, and each
    // attempt's receipt.
    let (code, page) = crate::audit_report::report(data.path(), &[]).await;
    assert_eq!(code, 0);
    let integrity = crate::audit_report::parse(&page)
        .by_id("integrity")
        .all_text();
    assert!(
        integrity.contains(&format!(
            "matches the signed checkpoint of {} lines",
            lines.len()
        )) && integrity.contains("witnessed by witness.test/w1"),
        "{integrity}"
    );
    let first = receipts[0]["leaf_hash"].as_str().unwrap();
    assert!(page.contains(first), "the receipt {first} is on the page");

    // Every checkpoint the log printed verifies on its own (what a log shipper keeps).
    let events: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["fields"]["message"] == "audit checkpoint")
        .collect();
    assert!(events.len() >= 2, "{log}");
    for event in events {
        let note = event["fields"]["checkpoint"].as_str().unwrap();
        let checked = python_verifier(&["checkpoint", "--key", &vkey], note).await;
        assert_eq!(checked["ok"], true, "{checked}");
        assert_eq!(checked["origin"], origin.as_str());
    }
    crate::mcp_server::assert_no_containers_of(instance).await;
}

#[tokio::test]
async fn a_rewritten_cut_or_padded_trail_fails_against_the_key_and_the_copies_kept_elsewhere() {
    let keys = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (key, vkey) = keygen(keys.path(), LOG_NAME).await;
    let witness = FakeWitness::start("witness.test/w1", [9; 32], std::slice::from_ref(&vkey)).await;
    let instance = crate::common::unique_instance("signed", 12);
    let server = serve(data.path(), &instance, &key, &witness).await;
    for n in 1..=3 {
        run(&server, n).await;
    }
    let log = server.stop().await;
    let shipped = keys.path().join("shipped-log.jsonl");
    std::fs::write(&shipped, &log).unwrap();
    let (live, honest) = chain(data.path(), &instance);
    let honest_text = std::fs::read_to_string(&live).unwrap();
    let honest_checkpoints =
        std::fs::read_to_string(format!("{}.checkpoints", live.display())).unwrap();
    let restore = || {
        std::fs::write(&live, &honest_text).unwrap();
        std::fs::write(
            format!("{}.checkpoints", live.display()),
            &honest_checkpoints,
        )
        .unwrap();
    };
    let (code, said) = verify(data.path(), &vkey, &[]).await;
    assert_eq!(code, 0, "{said}");

    // 1. The first line's user changed and every later prev recomputed: the hash chain alone
    //    says ok, as it did before checkpoints.
    rewrite(&live, |records| records[0]["user"] = json!("mallory"));
    let plain = run_cli(&["audit", "verify", data.path().to_str().unwrap()], &[]).await;
    assert_eq!(plain.code, Some(0), "{}", plain.stdout);
    let (code, said) = verify(data.path(), &vkey, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("rewritten") && said.contains("lines 1.."),
        "{said}"
    );
    let (code, page) = crate::audit_report::report(data.path(), &[]).await;
    assert_eq!(code, 1, "the review page says the trail is broken");
    assert!(page.contains("does not match the trail"), "{page}");
    // ... and with the checkpoints beside the chain deleted too, against the copy in the
    //     shipped logs.
    std::fs::remove_file(format!("{}.checkpoints", live.display())).unwrap();
    let (code, said) = verify(data.path(), &vkey, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("no checkpoint"), "{said}");
    let (code, said) = verify(
        data.path(),
        &vkey,
        &["--checkpoints", shipped.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("rewritten"), "{said}");
    restore();

    // 2. Cut: the last line removed.
    rewrite(&live, |records| {
        records.pop();
    });
    let (code, said) = verify(data.path(), &vkey, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("truncated"), "{said}");
    restore();

    // 3. A line inserted at the start.
    rewrite(&live, |records| {
        let mut forged = records[0].clone();
        forged["user"] = json!("nobody");
        records.insert(0, forged);
    });
    let (code, said) = verify(data.path(), &vkey, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("rewritten"), "{said}");
    restore();

    // 4. A checkpoint signed by another key, added beside the chain.
    let (other, other_vkey) = keygen(keys.path(), LOG_NAME).await;
    assert_ne!(other_vkey, vkey);
    let forged = forged_checkpoint(
        &other,
        &format!("{LOG_NAME}/{instance}"),
        honest.len() as u64 + 5,
    );
    let mut checkpoints = honest_checkpoints.clone();
    checkpoints.push_str(&format!("{forged}\n"));
    std::fs::write(format!("{}.checkpoints", live.display()), checkpoints).unwrap();
    let (code, said) = verify(data.path(), &vkey, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("not signed by"), "{said}");
    restore();
    let (code, said) = verify(
        data.path(),
        &vkey,
        &["--checkpoints", shipped.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 0, "restored: {said}");

    // 5. A fork: the rewritten trail served again with its checkpoints file gone. The server
    //    signs the new history; the witness, which cosigned the old one, refuses it (an
    //    alarm: /health and doctor say so); the copies kept elsewhere contradict it.
    rewrite(&live, |records| records[0]["user"] = json!("mallory"));
    std::fs::remove_file(format!("{}.checkpoints", live.display())).unwrap();
    let server = serve(data.path(), &instance, &key, &witness).await;
    run(&server, 9).await;
    let started = Instant::now();
    while witness.refused_inconsistent() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the witness never refused: {:?}",
            witness.answers()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let health: Value = reqwest::get(format!("{}/health", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        health["audit"]["alarm"]
            .as_str()
            .unwrap_or_default()
            .contains("witness.test/w1"),
        "{health}"
    );
    let metrics = reqwest::get(format!("{}/metrics", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // One alarm for each refusal the server has heard by now: at least the one waited for,
    // and no more than the witness has given (another checkpoint round may have been refused
    // between the wait and this read on a busy machine).
    let alarms: usize = metrics
        .lines()
        .find_map(|line| line.strip_prefix("file_agent_audit_alarms_total "))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or_else(|| panic!("no alarm count: {metrics}"));
    let refusals = witness.refused_inconsistent();
    assert!(
        (1..=refusals).contains(&alarms),
        "{alarms} alarms, {refusals} refusals: {metrics}"
    );
    server.stop().await;
    let last = kept(&live).into_iter().last().unwrap();
    assert_eq!(last["witnesses"][0]["outcome"], "inconsistent", "{last}");
    let doctor = run_cli(
        &["doctor"],
        &[
            ("FILE_AGENT_DATA_DIR", data.path().to_str().unwrap()),
            ("FILE_AGENT_AUDIT_SIGNING_KEY_FILE", key.to_str().unwrap()),
        ],
    )
    .await;
    assert!(
        doctor.stdout.contains("witness  FAIL") && doctor.stdout.contains("inconsistent"),
        "{}",
        doctor.stdout
    );
    let (code, said) = verify(
        data.path(),
        &vkey,
        &["--checkpoints", shipped.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("fork") || said.contains("rewritten"),
        "{said}"
    );
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// `file-agent serve` over `data` with the signing key `key`, which must refuse to start: what
/// it said.
async fn serve_refused(data: &Path, key: &Path) -> String {
    let listen = format!("127.0.0.1:{}", free_port());
    let refused = run_cli(
        &["serve"],
        &[
            ("FILE_AGENT_DATA_DIR", data.to_str().unwrap()),
            ("FILE_AGENT_AUDIT_SIGNING_KEY_FILE", key.to_str().unwrap()),
            ("FILE_AGENT_LISTEN", &listen),
        ],
    )
    .await;
    assert_ne!(refused.code, Some(0), "{}", refused.stderr);
    refused.stderr
}

/// A checkpoint record of `size` lines signed by the key in `key_file`, as a forger with that
/// key would add it.
fn forged_checkpoint(key_file: &Path, origin: &str, size: u64) -> String {
    let key =
        file_agent::audit::note::SignerKey::parse(&std::fs::read_to_string(key_file).unwrap())
            .unwrap();
    let body = file_agent::audit::note::Checkpoint {
        origin: origin.into(),
        size,
        root: [7; 32],
    };
    json!({"time": "2026-01-01T00:00:00.000Z", "origin": origin, "size": size,
           "root": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [7u8; 32]),
           "checkpoint": key.sign(&body.text()), "witnesses": []})
    .to_string()
}

#[tokio::test]
async fn two_replicas_chains_are_each_signed_and_checked_on_their_own_and_a_key_in_the_data_folder_refuses_the_start()
 {
    let keys = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (key, vkey) = keygen(keys.path(), LOG_NAME).await;
    let witness = FakeWitness::start("witness.test/w1", [9; 32], std::slice::from_ref(&vkey)).await;
    let (a, b) = (
        crate::common::unique_instance("replica-a", 8),
        crate::common::unique_instance("replica-b", 8),
    );
    let first = serve(data.path(), &a, &key, &witness).await;
    let second = serve(data.path(), &b, &key, &witness).await;
    run(&first, 1).await;
    run(&second, 2).await;
    run(&first, 3).await;
    first.stop().await;
    second.stop().await;
    let (code, said) = verify(data.path(), &vkey, &[]).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(&format!("{LOG_NAME}/{a}")) && said.contains(&format!("{LOG_NAME}/{b}")),
        "{said}"
    );
    // One replica's chain rewritten: only it fails.
    let (live_b, _) = chain(data.path(), &b);
    rewrite(&live_b, |records| records[0]["user"] = json!("mallory"));
    let (code, said) = verify(data.path(), &vkey, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains(&format!("{b}.jsonl: broken")), "{said}");
    assert!(said.contains(&format!("{a}.jsonl: ok")), "{said}");

    // A key the trail's own folder holds could sign any rewrite: the server refuses to start.
    let inside = data.path().join("audit.key");
    std::fs::copy(&key, &inside).unwrap();
    let refused = serve_refused(data.path(), &inside).await;
    assert!(refused.contains("inside the data folder"), "{refused}");
    // ... as does one other users may read.
    let open = keys.path().join("open.key");
    std::fs::copy(&key, &open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let refused = serve_refused(data.path(), &open).await;
    assert!(refused.contains("open to other users"), "{refused}");
    crate::mcp_server::assert_no_containers_of(a).await;
    crate::mcp_server::assert_no_containers_of(b).await;
}

#[tokio::test]
async fn the_independent_verifier_passes_the_known_answers_the_specs_publish() {
    let checked = python_verifier(&["selftest"], "").await;
    assert_eq!(checked["ok"], true, "{checked}");
    assert!(
        checked["known_answers"].as_u64().unwrap() >= 90,
        "{checked}"
    );
}

/// The longest a call may take while a checkpoint round waits on a hung witness: a call that
/// waited for the round (10 s, `audit::witness::WITNESS_TIMEOUT`) would take 8 s or more here.
const CALL_WHILE_WITNESS_HANGS: Duration = Duration::from_secs(6);

/// A witness that never answers delays no call: checkpoints are sent from a task of their own,
/// each witness waited for at most a few seconds; the calls answer, and `/health` stays 200.
#[tokio::test]
async fn a_witness_that_never_answers_delays_no_call() {
    let keys = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (key, vkey) = keygen(keys.path(), LOG_NAME).await;
    let witness = FakeWitness::start("witness.test/w1", [9; 32], std::slice::from_ref(&vkey)).await;
    witness.set_down(true);
    let instance = crate::common::unique_instance("signed", 12);
    let server = serve(data.path(), &instance, &key, &witness).await;
    // The first call's line starts a round within the interval (1 s), which then waits the
    // witness's whole timeout: the next calls come while it waits (the witness holds its
    // request).
    assert_eq!(run(&server, 1).await.len(), 1);
    // The round has started once the witness holds its request.
    let asked = Instant::now();
    while witness.hung() == 0 {
        assert!(
            asked.elapsed() < Duration::from_secs(60),
            "no checkpoint reached the witness within 60 s of the first call"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for n in 2..=3 {
        let started = Instant::now();
        let receipts = run(&server, n).await;
        let took = started.elapsed();
        assert!(
            took < CALL_WHILE_WITNESS_HANGS,
            "call {n} took {took:?} while the witness hung: it waited for the checkpoint round"
        );
        assert_eq!(receipts.len(), 1);
    }
    let health = reqwest::get(format!("{}/health", server.url))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    server.stop().await;
    assert_eq!(witness.cosigned(), 0);
    crate::mcp_server::assert_no_containers_of(instance).await;
}
