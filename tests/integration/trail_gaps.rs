//! The trail against whoever holds its folder (issue 55), through the real `file-agent serve`
//! and the real CLI: a prefix deleted by hand, a chain deleted whole, a chain replaced by
//! another whose checkpoint records were relabelled, checkpoint records whose unsigned JSON
//! was edited to freeze the signer or to pass a rewrite, a tree file changed under a running
//! server, and a trail whose line ends were turned into CRLF. Each says what a reviewer reads.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use crate::common::run_cli;
use crate::fakes::witness::FakeWitness;
use crate::signed_trail::{
    LOG_NAME, chain, kept, keygen, rewrite, run, serve, serve_as, until_signed, verify,
};

/// A signing key, a witness and a data folder, for servers and `audit verify` runs over it.
pub(crate) struct Signed {
    /// The data folder the servers write their chains to.
    pub(crate) data: tempfile::TempDir,
    /// The folder of the key (never the data folder), and of the shipped logs.
    pub(crate) keys: tempfile::TempDir,
    /// The private key's file.
    pub(crate) key: PathBuf,
    /// Its verifier key.
    pub(crate) vkey: String,
    /// The witness that cosigns each checkpoint.
    pub(crate) witness: FakeWitness,
}

impl Signed {
    pub(crate) async fn new() -> Self {
        let keys = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let (key, vkey) = keygen(keys.path(), LOG_NAME).await;
        let witness =
            FakeWitness::start("witness.test/w1", [9; 32], std::slice::from_ref(&vkey)).await;
        Self {
            data,
            keys,
            key,
            vkey,
            witness,
        }
    }

    /// A new folder with one chain of `lines` calls, all signed, its server stopped.
    pub(crate) async fn with_chain(name: &str, lines: u64) -> (Self, String) {
        let signed = Self::new().await;
        let instance = crate::common::unique_instance(name, 8);
        let server = signed.serve(&instance).await;
        for n in 1..=lines {
            run(&server, n).await;
        }
        let (live, _) = signed.chain(&instance);
        until_signed(&live, lines as usize).await;
        server.stop().await;
        (signed, instance)
    }

    /// A server of `instance` over the folder, once `/health` answers 200.
    pub(crate) async fn serve(&self, instance: &str) -> crate::front_door::Served {
        serve(self.data.path(), instance, &self.key, &self.witness).await
    }

    /// A server of `instance` over the folder, once `/health` answers at all.
    pub(crate) async fn serve_unready(&self, instance: &str) -> crate::front_door::Served {
        serve_as(self.data.path(), instance, &self.key, &self.witness, false).await
    }

    /// The chain file of `instance` and its lines.
    pub(crate) fn chain(&self, instance: &str) -> (PathBuf, Vec<String>) {
        chain(self.data.path(), instance)
    }

    /// `audit verify <folder> --key <vkey> <more>`: (exit code, what it printed).
    pub(crate) async fn verify(&self, more: &[&str]) -> (i32, String) {
        verify(self.data.path(), &self.vkey, more).await
    }
}

/// The origin, size and root a kept record's signed note carries (not its JSON fields).
fn signed_body(record: &Value) -> (String, u64, [u8; 32]) {
    use file_agent::audit::note::{Checkpoint, Note};
    let note = Note::parse(record["checkpoint"].as_str().unwrap()).unwrap();
    let body = Checkpoint::parse(&note.text).unwrap();
    (body.origin, body.size, body.root)
}

/// The RFC 6962 root of `lines`.
fn root_of(lines: &[String]) -> [u8; 32] {
    let mut frontier = file_agent::audit::merkle::Frontier::default();
    for line in lines {
        frontier.push(file_agent::audit::merkle::leaf_hash(line.as_bytes()));
    }
    frontier.root()
}

/// The largest size signed in the notes kept beside `live`.
fn largest_signed(live: &Path) -> u64 {
    kept(live)
        .iter()
        .map(|record| signed_body(record).1)
        .max()
        .unwrap_or(0)
}

/// `/health`'s status and body.
pub(crate) async fn health(url: &str) -> (u16, Value) {
    let response = reqwest::get(format!("{url}/health")).await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// `/metrics` as text.
pub(crate) async fn metrics(url: &str) -> String {
    let response = reqwest::get(format!("{url}/metrics")).await.unwrap();
    response.text().await.unwrap()
}

/// Attack 1: the first lines of a live chain deleted by hand (no retention line says so, not at
/// a file boundary, the tree file kept) used to pass as retention.
#[tokio::test]
async fn a_prefix_deleted_by_hand_is_named_and_fails() {
    let (signed, instance) = Signed::with_chain("prefix", 4).await;
    let (live, lines) = signed.chain(&instance);
    let (code, said) = signed.verify(&[]).await;
    assert_eq!(code, 0, "{said}");

    std::fs::write(&live, format!("{}\n", lines[2..].join("\n"))).unwrap();
    let (code, said) = signed.verify(&[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("lines 1..2") && said.contains("no retention line"),
        "{said}"
    );
    assert!(!said.contains("deleted by retention"), "{said}");
    let plain = run_cli(
        &["audit", "verify", signed.data.path().to_str().unwrap()],
        &[],
    )
    .await;
    assert_eq!(plain.code, Some(1), "{}", plain.stdout);
    assert!(plain.stdout.contains("lines 1..2"), "{}", plain.stdout);
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// Attack 2: a chain deleted whole (lines, tree, checkpoints) while the shipped logs hold its
/// signed checkpoints used to leave `verify --checkpoints` saying ok for the chains left.
#[tokio::test]
async fn a_chain_deleted_whole_is_named_by_the_checkpoints_shipped_elsewhere() {
    let signed = Signed::new().await;
    let (a, b) = (
        crate::common::unique_instance("kept", 8),
        crate::common::unique_instance("gone", 8),
    );
    let (first, second) = (signed.serve(&a).await, signed.serve(&b).await);
    run(&first, 1).await;
    run(&second, 2).await;
    let shipped = signed.keys.path().join("shipped.jsonl");
    let log = format!("{}{}", first.stop().await, second.stop().await);
    std::fs::write(&shipped, log).unwrap();
    let copies = ["--checkpoints", shipped.to_str().unwrap()];
    let (code, said) = signed.verify(&copies).await;
    assert_eq!(code, 0, "{said}");

    for entry in std::fs::read_dir(signed.data.path().join("audit")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with(&b) {
            std::fs::remove_file(path).unwrap();
        }
    }
    let (code, said) = signed.verify(&copies).await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains(&format!("{LOG_NAME}/{b}")) && said.contains("no chain"),
        "{said}"
    );
    crate::mcp_server::assert_no_containers_of(a).await;
    crate::mcp_server::assert_no_containers_of(b).await;
}

/// Attack 3: chain a's lines and tree replaced by chain b's, and b's checkpoint records
/// relabelled a's in their JSON (the signed notes untouched), used to verify from the folder
/// alone.
#[tokio::test]
async fn a_chain_replaced_by_another_is_named_by_the_origin_its_notes_sign() {
    let signed = Signed::new().await;
    let (a, b) = (
        crate::common::unique_instance("chain-a", 8),
        crate::common::unique_instance("chain-b", 8),
    );
    let (first, second) = (signed.serve(&a).await, signed.serve(&b).await);
    run(&first, 1).await;
    for n in 2..=4 {
        run(&second, n).await;
    }
    first.stop().await;
    second.stop().await;
    let (live_a, _) = signed.chain(&a);
    let (live_b, _) = signed.chain(&b);
    for suffix in ["", ".tree"] {
        std::fs::copy(
            format!("{}{suffix}", live_b.display()),
            format!("{}{suffix}", live_a.display()),
        )
        .unwrap();
    }
    let relabelled: String = kept(&live_b)
        .into_iter()
        .map(|mut record| {
            record["origin"] = json!(format!("{LOG_NAME}/{a}"));
            format!("{record}\n")
        })
        .collect();
    std::fs::write(format!("{}.checkpoints", live_a.display()), relabelled).unwrap();

    let (code, said) = signed.verify(&[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains(&format!("{a}.jsonl: broken")), "{said}");
    assert!(
        said.contains(&format!("its signed note says {LOG_NAME}/{b}")),
        "{said}"
    );
    crate::mcp_server::assert_no_containers_of(a).await;
    crate::mcp_server::assert_no_containers_of(b).await;
}

/// Attack 4, first half: a copy of a checkpoint record whose JSON `size` is 2^64-1 put among
/// the kept ones used to freeze the signer: after a restart and two more calls, the last
/// checkpoint still covered 3 of 5 lines.
#[tokio::test]
async fn a_kept_record_with_a_forged_size_does_not_freeze_the_signer() {
    let (signed, instance) = Signed::with_chain("frozen", 3).await;
    let (live, _) = signed.chain(&instance);
    assert_eq!(largest_signed(&live), 3);
    let mut forged = kept(&live).into_iter().last().unwrap();
    forged["size"] = json!(u64::MAX);
    let store = format!("{}.checkpoints", live.display());
    let mut text = std::fs::read_to_string(&store).unwrap();
    text.push_str(&format!("{forged}\n"));
    std::fs::write(&store, text).unwrap();

    let server = signed.serve(&instance).await;
    run(&server, 4).await;
    run(&server, 5).await;
    let log = server.stop().await;
    let (_, lines) = signed.chain(&instance);
    assert_eq!(lines.len(), 5);
    assert_eq!(largest_signed(&live), 5, "the signer froze: {log}");
    // The edited record is named, not believed.
    let (code, said) = signed.verify(&[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("its signed note says 3 lines") && said.contains("JSON"),
        "{said}"
    );
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// Attack 4, second half: a rewrite whose last kept record had its JSON `root` edited to match
/// used to pass the start-up check, and the server then signed the forged trail with the real
/// key. Now the start-up check reads the signed note: the alarm is raised (ERROR, metric,
/// `/health` 503, `doctor` FAIL) and nothing is signed, also at shutdown.
#[tokio::test]
async fn a_rewrite_whose_kept_root_was_edited_raises_the_alarm_and_nothing_is_signed() {
    let (signed, instance) = Signed::with_chain("forged", 3).await;
    let (live, _) = signed.chain(&instance);
    rewrite(&live, |records| records[0]["user"] = json!("mallory"));
    let (_, lines) = signed.chain(&instance);
    let store = format!("{}.checkpoints", live.display());
    let mut records = kept(&live);
    let last = records.last_mut().unwrap();
    last["root"] = json!(BASE64.encode(root_of(&lines)));
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&store, text).unwrap();
    let signed_before = kept(&live).len();

    let server = signed.serve_unready(&instance).await;
    let (status, body) = health(&server.url).await;
    assert_eq!(status, 503, "{body}");
    let alarm = body["audit"]["alarm"].as_str().unwrap_or_default();
    assert!(
        alarm.contains("lines 1..3") && alarm.contains("signed"),
        "{body}"
    );
    run(&server, 4).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let metrics = metrics(&server.url).await;
    assert!(
        metrics.contains("file_agent_audit_alarms_total 1"),
        "{metrics}"
    );
    let log = server.stop().await;
    assert!(
        log.contains("ERROR") && log.contains("audit trail alarm"),
        "{log}"
    );
    assert_eq!(
        kept(&live).len(),
        signed_before,
        "the forged trail was signed"
    );
    let doctor = run_cli(
        &["doctor"],
        &[
            ("FILE_AGENT_DATA_DIR", signed.data.path().to_str().unwrap()),
            (
                "FILE_AGENT_AUDIT_SIGNING_KEY_FILE",
                signed.key.to_str().unwrap(),
            ),
        ],
    )
    .await;
    assert!(
        doctor.stdout.contains("FAIL") && doctor.stdout.contains("lines 1..3"),
        "{}",
        doctor.stdout
    );
    let (code, said) = signed.verify(&[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("rewritten"), "{said}");
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// Attack 4, the running server: each checkpoint's root used to be read back from the tree
/// file, so a running server signed whatever that file held. Now it signs the root of the
/// tree it keeps in memory, from the lines it wrote.
#[tokio::test]
async fn a_running_server_signs_its_own_tree_not_the_tree_file() {
    let signed = Signed::new().await;
    let instance = crate::common::unique_instance("memory", 12);
    let server = signed.serve(&instance).await;
    run(&server, 1).await;
    run(&server, 2).await;
    let (live, _) = signed.chain(&instance);
    until_signed(&live, 2).await;
    // Every stored hash overwritten in place, under the running server.
    let tree = format!("{}.tree", live.display());
    let length = std::fs::metadata(&tree).unwrap().len();
    std::fs::write(&tree, vec![0u8; length as usize]).unwrap();
    run(&server, 3).await;
    let last = until_signed(&live, 3).await;
    let (_, lines) = signed.chain(&instance);
    assert_eq!(signed_body(&last).2, root_of(&lines), "{last}");
    server.stop().await;
    let (code, said) = signed.verify(&[]).await;
    assert_eq!(code, 0, "{said}");
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// CRLF line ends: `audit verify` reads a line as the server does at start-up, so a trail
/// whose line ends were converted (and whose tree is built again from its lines) verifies and
/// raises no alarm.
#[tokio::test]
async fn crlf_line_ends_are_read_alike_by_verify_and_at_start_up() {
    let (signed, instance) = Signed::with_chain("crlf", 2).await;
    let (live, lines) = signed.chain(&instance);
    std::fs::write(&live, format!("{}\r\n", lines.join("\r\n"))).unwrap();
    std::fs::remove_file(format!("{}.tree", live.display())).unwrap();
    let (code, said) = signed.verify(&[]).await;
    assert_eq!(code, 0, "{said}");

    let server = signed.serve_unready(&instance).await;
    let (status, body) = health(&server.url).await;
    assert_eq!(body["audit"]["alarm"], Value::Null, "{body}");
    assert_eq!(status, 200, "{body}");
    run(&server, 3).await;
    server.stop().await;
    let (code, said) = signed.verify(&[]).await;
    assert_eq!(code, 0, "{said}");
    crate::mcp_server::assert_no_containers_of(instance).await;
}
