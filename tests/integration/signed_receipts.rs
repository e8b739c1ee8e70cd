//! Receipts that prove themselves (issue 55), against the real `file-agent serve` process with
//! `FILE_AGENT_AUDIT_RECEIPTS=signed`, a key made by `audit keygen` and a witness
//! (`fakes::witness`): the receipt in a real `run_python` answer is saved as a user would save
//! it and checked offline, with `audit verify-receipt` and with the tests' independent Python
//! verifier, against the key alone. Then what must not pass, each for its own reason: the line
//! rewritten, the line and its leaf hash rewritten, another key.

use std::path::Path;

use serde_json::json;

use crate::common::run_cli;
use crate::fakes::witness::FakeWitness;
use crate::front_door::post_mcp;
use crate::signed_trail::{keygen, python_verifier, result_of, serve_with};

/// The signing key's name, and so the first part of every chain's origin.
const LOG_NAME: &str = "signed-receipts.test/audit";

/// `audit verify-receipt FILE --key KEY more...`: (exit code, what it printed).
async fn verify_receipt(file: &Path, key: &str, more: &[&str]) -> (i32, String) {
    let mut args = vec![
        "audit",
        "verify-receipt",
        file.to_str().unwrap(),
        "--key",
        key,
    ];
    args.extend_from_slice(more);
    let done = run_cli(&args, &[]).await;
    (
        done.code.unwrap_or(-1),
        format!("{}{}", done.stdout, done.stderr),
    )
}

#[tokio::test]
async fn a_receipt_saved_from_a_real_call_verifies_offline_and_a_rewritten_line_or_another_key_does_not()
 {
    let keys = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (key, vkey) = keygen(keys.path(), LOG_NAME).await;
    let witness = FakeWitness::start("witness.test/w1", [9; 32], std::slice::from_ref(&vkey)).await;
    let instance = crate::common::unique_instance("receipts", 12);
    let signed = [("FILE_AGENT_AUDIT_RECEIPTS", "signed")];
    let server = serve_with(data.path(), &instance, &key, &witness, &signed).await;

    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "run_python", "arguments": {"code": "print('receipt')"}}});
    let (status, answer) = post_mcp(&server.url, body, &[]).await;
    assert_eq!(status, 200, "{answer}");
    let result = result_of(&answer);
    assert_eq!(result["isError"], false, "{result}");
    // What a user saves: the result's _meta, as it came.
    let meta = result["_meta"].clone();
    let entry = meta["io.file-agent/receipts"][0].clone();
    assert!(entry["unsigned"].is_null(), "{entry}");
    assert_eq!(
        entry["origin"],
        format!("{LOG_NAME}/{instance}").as_str(),
        "{entry}"
    );
    // The line in the receipt is the line the server wrote.
    let live = data.path().join("audit").join(format!("{instance}.jsonl"));
    let lines: Vec<String> = std::fs::read_to_string(&live)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let index = entry["leaf_index"].as_u64().unwrap() as usize;
    assert_eq!(entry["line"], lines[index].as_str());
    assert!(entry["tree_size"].as_u64().unwrap() > index as u64);
    assert!(
        entry["checkpoint"]
            .as_str()
            .unwrap()
            .contains("\n— witness.test/w1 "),
        "the witness's cosignature came within the wait: {entry}"
    );
    let saved = keys.path().join("receipt.json");
    std::fs::write(&saved, serde_json::to_string_pretty(&meta).unwrap()).unwrap();
    let log = server.stop().await;
    assert!(log.contains("audit checkpoint"), "{log}");

    // Offline, with the key alone (given as text, and as a file), and the witness's key.
    let key_file = keys.path().join("log.vkey");
    std::fs::write(&key_file, format!("{vkey}\n")).unwrap();
    for key in [vkey.as_str(), key_file.to_str().unwrap()] {
        let (code, said) = verify_receipt(&saved, key, &["--witness-key", &witness.vkey()]).await;
        assert_eq!(code, 0, "{said}");
        assert!(
            said.contains("ok: receipt 1")
                && said.contains("its line hashes to the leaf")
                && said.contains("cosigned by witness.test/w1")
                && said.contains("run_python ok"),
            "{said}"
        );
    }
    // The line given apart (as `audit show --json` prints it, with its newline).
    let line_file = keys.path().join("line.jsonl");
    std::fs::write(&line_file, format!("{}\n", lines[index])).unwrap();
    let (code, said) =
        verify_receipt(&saved, &vkey, &["--line", line_file.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{said}");
    // The same line saved with a CRLF line end reads as the trail reads its lines.
    std::fs::write(&line_file, format!("{}\r\n", lines[index])).unwrap();
    let (code, said) =
        verify_receipt(&saved, &vkey, &["--line", line_file.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{said}");
    let checked = python_verifier(
        &["receipt", "--key", &vkey, "--witness-key", &witness.vkey()],
        &meta.to_string(),
    )
    .await;
    assert_eq!(checked["ok"], true, "{checked}");
    assert_eq!(checked["receipts"][0]["line_checked"], true, "{checked}");

    // The line rewritten (the call's status): its hash is no longer the leaf.
    let mut rewritten = entry.clone();
    let line = lines[index].replace("\"status\":\"ok\"", "\"status\":\"failed\"");
    assert_ne!(line, lines[index]);
    rewritten["line"] = json!(line);
    let forged = keys.path().join("rewritten.json");
    std::fs::write(&forged, rewritten.to_string()).unwrap();
    let (code, said) = verify_receipt(&forged, &vkey, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("failed: receipt 1") && said.contains("does not hash to the receipt's leaf"),
        "{said}"
    );
    let checked = python_verifier(&["receipt", "--key", &vkey], &rewritten.to_string()).await;
    assert_eq!(checked["ok"], false, "{checked}");
    assert!(
        checked["error"]
            .as_str()
            .unwrap()
            .contains("leaf_hash is not"),
        "{checked}"
    );
    // ... and its leaf hash with it: the proof no longer leads to the signed root.
    use base64::Engine;
    rewritten["leaf_hash"] = json!(
        base64::engine::general_purpose::STANDARD
            .encode(file_agent::audit::merkle::leaf_hash(line.as_bytes()))
    );
    std::fs::write(&forged, rewritten.to_string()).unwrap();
    let (code, said) = verify_receipt(&forged, &vkey, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("the inclusion proof does not lead from leaf"),
        "{said}"
    );
    let checked = python_verifier(&["receipt", "--key", &vkey], &rewritten.to_string()).await;
    assert!(
        checked["error"]
            .as_str()
            .unwrap()
            .contains("inclusion proof for leaf"),
        "{checked}"
    );

    // Another key of the same name: the checkpoint is not its.
    let (_, other) = keygen(keys.path(), LOG_NAME).await;
    let (code, said) = verify_receipt(&saved, &other, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("the checkpoint is not signed by"), "{said}");
    let checked = python_verifier(&["receipt", "--key", &other], &meta.to_string()).await;
    assert!(
        checked["error"]
            .as_str()
            .unwrap()
            .contains("note has no verifiable signatures"),
        "{checked}"
    );
    crate::mcp_server::assert_no_containers_of(instance).await;
}
