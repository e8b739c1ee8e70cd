//! Checkpoints a reviewer can count on and proofs others' software checks (issue 60, part 2),
//! through the real `file-agent serve` and the real CLI: a checkpoint reaches the log before
//! its receipts go out, and one that cannot be kept beside the chain raises the alarm; a
//! user's receipt for a line later removed from the trail is a fork `audit verify
//! --checkpoints` finds; a receipt's `tlog_proof` verifies with `proofbundle` (PyPI), which no
//! one here wrote; and `aics-witness` (PyPI), a C2SP witness by another author, cosigns the
//! checkpoints and `audit verify --witness-key` accepts its cosignatures.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{run_cli, with_timeout};
use crate::front_door::{Served, free_port};
use crate::signed_trail::{LOG_NAME, chain, run, serve_with, until_signed, verify};
use crate::trail_gaps::{Signed, health, metrics};

/// Signed receipts, each answer waiting for its checkpoint.
const SIGNED_RECEIPTS: (&str, &str) = ("FILE_AGENT_AUDIT_RECEIPTS", "signed");

/// A server of `instance` over `setup`'s folder with `more` settings, once `/health` is 200.
async fn serve(setup: &Signed, instance: &str, more: &[(&str, &str)]) -> Served {
    serve_with(
        setup.data.path(),
        instance,
        &setup.key,
        &setup.witness,
        more,
    )
    .await
}

/// `<chain>.jsonl.checkpoints` of `instance` under `data`.
fn store(data: &Path, instance: &str) -> PathBuf {
    let (live, _) = chain(data, instance);
    PathBuf::from(format!("{}.checkpoints", live.display()))
}

/// Writes `text` to `name` in the folder apart from the data (the key's); its path.
fn write(setup: &Signed, name: &str, text: &str) -> PathBuf {
    let path = setup.keys.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The signed notes of the `audit checkpoint` events of a JSON log.
fn logged_checkpoints(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["fields"]["message"] == "audit checkpoint")
        .filter_map(|event| event["fields"]["checkpoint"].as_str().map(str::to_string))
        .collect()
}

/// Item 4: `<chain>.jsonl.checkpoints` replaced by a folder under a running server. The
/// checkpoint used to be written there first and logged only after, so it never reached the
/// log while its receipt went out, with `/health` 200 and an ERROR saying it was in the log.
/// Now it is logged first (also with `FILE_AGENT_LOG=warn`, which used to drop the event), and
/// the alarm is raised: ERROR, metric, `/health` 503, `doctor` FAIL.
#[tokio::test]
async fn a_checkpoint_that_cannot_be_kept_is_in_the_log_before_its_receipt_and_raises_the_alarm() {
    let setup = Signed::new().await;
    let instance = crate::common::unique_instance("unkept", 8);
    let server = serve(
        &setup,
        &instance,
        &[SIGNED_RECEIPTS, ("FILE_AGENT_LOG", "warn")],
    )
    .await;
    let first = run(&server, 1).await;
    let store = store(setup.data.path(), &instance);
    std::fs::remove_file(&store).unwrap();
    std::fs::create_dir(&store).unwrap();
    let second = run(&server, 2).await;
    let entry = &second[0];
    assert!(entry["unsigned"].is_null(), "{entry}");
    assert!(entry["tree_size"].as_u64().unwrap() >= 2, "{entry}");

    let (status, body) = health(&server.url).await;
    assert_eq!(status, 503, "{body}");
    let alarm = body["audit"]["alarm"].as_str().unwrap_or_default();
    assert!(
        alarm.contains("is signed and in the server's log")
            && alarm.contains("cannot be kept beside the chain")
            && alarm.contains("Is a directory"),
        "{body}"
    );
    let metrics = metrics(&server.url).await;
    assert!(
        metrics.contains("file_agent_audit_alarms_total 1"),
        "{metrics}"
    );
    let log = server.stop().await;
    let logged = logged_checkpoints(&log);
    for receipt in [&first[0], entry] {
        let note = receipt["checkpoint"].as_str().unwrap();
        assert!(
            logged.iter().any(|n| n == note),
            "a receipt's checkpoint is not in the log: {note}\n{log}"
        );
    }
    assert!(
        log.contains("audit trail alarm") && !log.contains("(it is in the log)"),
        "{log}"
    );
    let doctor = run_cli(
        &["doctor"],
        &[
            ("FILE_AGENT_DATA_DIR", setup.data.path().to_str().unwrap()),
            (
                "FILE_AGENT_AUDIT_SIGNING_KEY_FILE",
                setup.key.to_str().unwrap(),
            ),
        ],
    )
    .await;
    assert!(
        doctor.stdout.contains("FAIL") && doctor.stdout.contains("cannot be read"),
        "{}",
        doctor.stdout
    );
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// Item 5, the whole story: a checkpoint the folder did not keep, its receipt handed to a
/// user; the line removed and the server restarted, which signs a new line 2. The log shipped
/// since says ok; the user's receipt, given to `--checkpoints` in each form a user saves it,
/// is a second signed root of 2 lines: a fork, and verify fails. `--checkpoints` used to read
/// JSON lines only, so a saved `_meta` (pretty-printed) added nothing.
#[tokio::test]
async fn a_users_receipt_for_a_line_later_removed_is_a_fork_verify_finds() {
    let setup = Signed::new().await;
    let instance = crate::common::unique_instance("forked", 8);
    let server = serve(&setup, &instance, &[SIGNED_RECEIPTS]).await;
    run(&server, 1).await;
    let store = store(setup.data.path(), &instance);
    std::fs::remove_file(&store).unwrap();
    std::fs::create_dir(&store).unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run_python", "arguments": {"code": "print(2)"}}});
    let (_, answer) = crate::front_door::post_mcp(&server.url, body, &[]).await;
    let result = crate::signed_trail::result_of(&answer);
    server.stop().await;
    let meta = result["_meta"].clone();
    let entry = meta["io.file-agent/receipts"][0].clone();
    assert_eq!(entry["tree_size"], 2, "{entry}");

    // Whoever holds the folder: line 2 gone, the folder and the tree with it.
    let (live, lines) = chain(setup.data.path(), &instance);
    assert_eq!(lines.len(), 2, "{lines:?}");
    std::fs::write(&live, format!("{}\n", lines[0])).unwrap();
    std::fs::remove_dir(&store).unwrap();
    std::fs::remove_file(format!("{}.tree", live.display())).unwrap();
    let server = serve(&setup, &instance, &[SIGNED_RECEIPTS]).await;
    let again = run(&server, 3).await;
    assert_eq!(again[0]["tree_size"], 2, "{again:?}");
    assert_ne!(again[0]["checkpoint"], entry["checkpoint"]);
    let shipped = write(&setup, "shipped.jsonl", &server.stop().await);
    let shipped = shipped.to_str().unwrap();
    let (code, said) = verify(setup.data.path(), &setup.vkey, &["--checkpoints", shipped]).await;
    assert_eq!(code, 0, "the log shipped since sees no fork: {said}");

    let list = meta["io.file-agent/receipts"].clone();
    let forms = [
        ("meta.json", serde_json::to_string_pretty(&meta).unwrap()),
        (
            "result.json",
            serde_json::to_string_pretty(&result).unwrap(),
        ),
        ("list.json", list.to_string()),
        ("entry.json", serde_json::to_string_pretty(&entry).unwrap()),
        ("entry.jsonl", format!("{entry}\n")),
    ];
    for (name, text) in forms {
        let receipt = write(&setup, name, &text);
        let copies = [
            "--checkpoints",
            shipped,
            "--checkpoints",
            receipt.to_str().unwrap(),
        ];
        let (code, said) = verify(setup.data.path(), &setup.vkey, &copies).await;
        assert_eq!(code, 1, "{name}: {said}");
        assert!(
            said.contains("a fork: two checkpoints of 2 lines")
                && said.contains("unknown (a receipt)"),
            "{name}: {said}"
        );
    }

    // With no copy of the new history's checkpoint of 2 lines, only a larger one: the
    // receipt's root is not a prefix of the checkpoint of 3 lines the trail matches.
    let server = serve(&setup, &instance, &[SIGNED_RECEIPTS]).await;
    assert_eq!(run(&server, 4).await[0]["tree_size"], 3);
    server.stop().await;
    let text = std::fs::read_to_string(&store).unwrap();
    std::fs::write(&store, format!("{}\n", text.lines().last().unwrap())).unwrap();
    let receipt = write(&setup, "meta.json", &meta.to_string());
    let copies = ["--checkpoints", receipt.to_str().unwrap()];
    let (code, said) = verify(setup.data.path(), &setup.vkey, &copies).await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("rewritten: the checkpoint of 2 lines")
            && said.contains("the checkpoint of 3 lines, signed too, matches it: a fork"),
        "{said}"
    );
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// Runs `code` with the tests' Python venv (`scripts/test-python.sh`), `input` on stdin; its
/// stdout as JSON.
async fn python(code: &str, input: &Value) -> Value {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(crate::common::sdk_venv().join("bin/python3"))
        .args(["-c", code])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let output = with_timeout(child.wait_with_output()).await.unwrap();
    serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// proofbundle's verifier of a c2sp.org/tlog-proof@v1 text, given the leaf data, the log's key
/// and the witnesses' keys, one cosignature required.
const PROOFBUNDLE: &str = "
import json, sys
from proofbundle.tlogproof import verify_tlog_proof
given = json.load(sys.stdin)
verdict = verify_tlog_proof(given['text'], given['line'].encode(), given['key'],
                            given['witnesses'], threshold=len(given['witnesses']))
print(json.dumps({k: verdict.get(k) for k in ('ok', 'log_ok', 'witnesses_ok', 'inclusion_ok',
                                                'tree_size', 'index')}))
";

/// A signed receipt's `tlog_proof` is the standard proof of its line: `proofbundle` (PyPI)
/// verifies it against the log's key and the witness's, and refuses another line;
/// `audit verify-receipt` reads it as a receipt file, given the line.
#[tokio::test]
async fn a_receipts_tlog_proof_verifies_with_proofbundle_and_verify_receipt() {
    let setup = Signed::new().await;
    let instance = crate::common::unique_instance("tlogproof", 8);
    let server = serve(&setup, &instance, &[SIGNED_RECEIPTS]).await;
    run(&server, 1).await;
    let entry = run(&server, 2).await[0].clone();
    server.stop().await;
    let text = entry["tlog_proof"]
        .as_str()
        .unwrap_or_else(|| panic!("{entry}"));
    let line = entry["line"].as_str().unwrap();
    let given = json!({"text": text, "line": line, "key": setup.vkey,
        "witnesses": [setup.witness.vkey()]});
    let verdict = python(PROOFBUNDLE, &given).await;
    assert_eq!(verdict["ok"], true, "{verdict}");
    assert_eq!(verdict["index"], entry["leaf_index"], "{verdict}");
    let other = json!({"text": text, "line": line.replace("print(2)", "print(3)"),
        "key": setup.vkey, "witnesses": [setup.witness.vkey()]});
    let verdict = python(PROOFBUNDLE, &other).await;
    assert_eq!(
        (&verdict["ok"], &verdict["inclusion_ok"]),
        (&json!(false), &json!(false)),
        "{verdict}"
    );

    let proof = write(&setup, "receipt.tlog-proof", text);
    let line_file = write(&setup, "line.jsonl", &format!("{line}\n"));
    let proof = proof.to_str().unwrap();
    let args = ["audit", "verify-receipt", proof, "--key", &setup.vkey];
    let mut with_line = args.to_vec();
    with_line.extend(["--line", line_file.to_str().unwrap()]);
    let done = run_cli(&with_line, &[]).await;
    assert_eq!(done.code, Some(0), "{}{}", done.stdout, done.stderr);
    assert!(
        done.stdout.contains("ok: receipt 1") && done.stdout.contains("its line hashes"),
        "{}",
        done.stdout
    );
    let done = run_cli(&args, &[]).await;
    assert_ne!(done.code, Some(0), "{}", done.stdout);
    assert!(done.stderr.contains("--line FILE"), "{}", done.stderr);
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// `aics-witness` (PyPI), run from the tests' venv: its vkey, once `init` made it, and the
/// running witness.
struct AicsWitness {
    vkey: String,
    url: String,
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl AicsWitness {
    /// A witness named `name` that trusts the log `origin` signed by `log_vkey`.
    async fn start(name: &str, origin: &str, log_vkey: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = crate::common::sdk_venv().join("bin/aics-witness");
        let config = dir.path().join("witness.json");
        let config = config.to_str().unwrap();
        let listen = format!("127.0.0.1:{}", free_port());
        let aics = |args: &[&str]| {
            let output = std::process::Command::new(&bin)
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            assert!(
                output.status.success(),
                "{args:?}: {text}{}",
                String::from_utf8_lossy(&output.stderr)
            );
            text
        };
        let said = aics(&["init", "-c", config, "--name", name, "--listen", &listen]);
        let vkey = said
            .split_whitespace()
            .find(|word| word.starts_with(&format!("{name}+")))
            .unwrap_or_else(|| panic!("no vkey in: {said}"))
            .to_string();
        aics(&[
            "add-log", "-c", config, "--origin", origin, "--vkey", log_vkey,
        ]);
        let child = tokio::process::Command::new(&bin)
            .args(["serve", "-c", config])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(&listen).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "aics-witness did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self {
            vkey,
            url: format!("http://{listen}"),
            _child: child,
            _dir: dir,
        }
    }
}

/// A third-party witness as one of `FILE_AGENT_AUDIT_WITNESSES`: `aics-witness` cosigns each
/// checkpoint (its answer kept `cosigned`), and `audit verify --witness-key` with its key
/// counts its cosignatures.
#[tokio::test]
async fn a_third_party_c2sp_witness_cosigns_and_verify_accepts_its_cosignatures() {
    let setup = Signed::new().await;
    let instance = crate::common::unique_instance("aics", 8);
    let origin = format!("{LOG_NAME}/{instance}");
    let aics = AicsWitness::start("witness.test/aics", &origin, &setup.vkey).await;
    let witnesses = format!("{} {}", aics.url, aics.vkey);
    let server = serve(
        &setup,
        &instance,
        &[("FILE_AGENT_AUDIT_WITNESSES", &witnesses)],
    )
    .await;
    run(&server, 1).await;
    run(&server, 2).await;
    let (live, _) = chain(setup.data.path(), &instance);
    let last = until_signed(&live, 2).await;
    server.stop().await;
    assert_eq!(last["witnesses"][0]["outcome"], "cosigned", "{last}");
    assert!(
        last["checkpoint"]
            .as_str()
            .unwrap()
            .contains("\n— witness.test/aics "),
        "{last}"
    );
    let (_, lines) = chain(setup.data.path(), &instance);
    let (code, said) = verify(
        setup.data.path(),
        &setup.vkey,
        &["--witness-key", &aics.vkey],
    )
    .await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(&format!(
            "witnessed by witness.test/aics: up to {} lines",
            lines.len()
        )),
        "{said}"
    );
    crate::mcp_server::assert_no_containers_of(instance).await;
}
