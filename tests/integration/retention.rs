//! Retention through the real server: off unless set; when set, old stored files and aged
//! audit files are deleted whole at start-up, young ones and live chains stay, one line of the
//! trail says what went, and what is left still verifies. Two servers pruning one folder at
//! once both keep serving, and each deleted file is recorded once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use file_agent::audit::{AuditLog, Record};
use file_agent::config::Config;

use crate::audit::file_agent;
use crate::common::{containers_of_instance, unique_instance};
use crate::lifecycle::serve;

const DAY: Duration = Duration::from_secs(86_400);

/// The audit settings a test chain is written with: rotation past 1 KiB, so that a few lines
/// make several files.
fn small_rotation() -> file_agent::config::AuditConfig {
    let mut audit = Config::from_lookup(|_| None).unwrap().audit;
    audit.max_bytes = 1024;
    audit
}

/// Writes `lines` lines dated `age` ago to the chain `name` in `folder` with the real writer
/// (so rotated files come from real rotation), then closes it (its lock is freed).
fn write_chain(folder: &Path, name: &str, lines: usize, age: Duration) {
    let log = AuditLog::open_chain(folder, name, small_rotation()).unwrap();
    let time = file_agent::time::format_rfc3339(SystemTime::now() - age);
    for n in 0..lines {
        log.append(Record {
            time: time.clone(),
            status: "ok".into(),
            author: "caller".into(),
            error: Some(format!("line {n} {}", "x".repeat(300))),
            ..Record::default()
        })
        .unwrap();
    }
}

/// A stored file `<data>/files/<id>/<name>` last written `age` ago.
fn stored_file(data: &Path, id_digit: char, age: Duration) -> PathBuf {
    let folder = data.join("files").join(id_digit.to_string().repeat(32));
    std::fs::create_dir_all(&folder).unwrap();
    let path = folder.join("report.xlsx");
    std::fs::write(&path, b"stored").unwrap();
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
    folder
}

fn files_of(folder: &Path, chain: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{chain}.jsonl")))
        .filter(|n| !n.ends_with(".lock") && !n.ends_with(".tree") && !n.ends_with(".checkpoints"))
        .collect();
    names.sort();
    names
}

/// Waits until `done` holds (the pruning runs beside the server's start).
async fn until(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The retention lines of every chain in `audit`.
fn retention_lines(audit: &Path) -> Vec<serde_json::Value> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(audit).unwrap() {
        let path = entry.unwrap().path();
        let name = path.to_string_lossy();
        if name.contains(".lock") || name.ends_with(".tree") || name.ends_with(".checkpoints") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            if value["status"] == "retention" {
                lines.push(value);
            }
        }
    }
    lines
}

#[tokio::test]
async fn aged_files_are_deleted_whole_when_retention_is_set_and_the_trail_still_verifies() {
    let data = tempfile::tempdir().unwrap();
    let audit = data.path().join("audit");
    let me = unique_instance("keep", 8);
    // This server's own chain: old rotated files, then young lines in its live file.
    write_chain(&audit, &me, 12, 40 * DAY);
    write_chain(&audit, &me, 1, Duration::ZERO);
    // A replica that is gone: its whole chain, live file included, is 40 days old.
    write_chain(&audit, "gone-replica", 6, 40 * DAY);
    // A replica that is gone but wrote 10 days ago: kept whole.
    write_chain(&audit, "young-replica", 6, 10 * DAY);
    let old = stored_file(data.path(), 'a', 40 * DAY);
    let young = stored_file(data.path(), 'b', 10 * DAY);
    let mine_before = files_of(&audit, &me);
    assert!(mine_before.len() >= 3, "{mine_before:?}");
    assert!(files_of(&audit, "gone-replica").len() >= 2);

    // Off by default: a server without the settings deletes nothing.
    let server = serve(Some(&me), data.path(), &[]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.stop().await;
    assert!(old.exists() && young.exists());
    assert_eq!(files_of(&audit, &me), mine_before);
    assert!(!files_of(&audit, "gone-replica").is_empty());
    assert!(retention_lines(&audit).is_empty());

    let settings = [
        ("FILE_AGENT_FILES_RETENTION_DAYS", "30"),
        ("FILE_AGENT_AUDIT_RETENTION_DAYS", "30"),
    ];
    let server = serve(Some(&me), data.path(), &settings).await;
    until("the old stored file was not deleted", || !old.exists()).await;
    until("no retention line was written", || {
        !retention_lines(&audit).is_empty()
    })
    .await;
    // An old link now says why it may be gone.
    let link = format!("{}/files/{}/report.xlsx", server.url, "a".repeat(32));
    let response = reqwest::get(link).await.unwrap();
    assert_eq!(response.status(), 404);
    let body = response.text().await.unwrap();
    assert!(body.contains("FILE_AGENT_FILES_RETENTION_DAYS"), "{body}");
    server.stop().await;

    assert!(young.exists(), "a file younger than the setting went");
    assert!(
        files_of(&audit, "gone-replica").is_empty(),
        "the aged chain of a gone replica stayed"
    );
    assert!(!audit.join("gone-replica.jsonl.lock").exists());
    assert!(
        files_of(&audit, "young-replica").len() >= 2,
        "a young chain went"
    );
    let mine_after = files_of(&audit, &me);
    assert_eq!(
        mine_after,
        vec![format!("{me}.jsonl")],
        "only the live file stays"
    );

    let lines = retention_lines(&audit);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let pruned = &lines[0]["pruned"];
    assert_eq!(pruned["stored_files"], 1);
    assert_eq!(pruned["stored_ids"][0], "a".repeat(32));
    let dropped: Vec<&str> = pruned["audit_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["file"].as_str().unwrap())
        .collect();
    let mut expected: Vec<String> = mine_before
        .iter()
        .filter(|n| !n.ends_with(".jsonl"))
        .cloned()
        .collect();
    expected.extend(files_of_names("gone-replica", &dropped));
    let mut got: Vec<String> = dropped.iter().map(|s| s.to_string()).collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);

    // What is left verifies, and the report says why the chain starts where it does.
    let folder = data.path().to_str().unwrap();
    let (code, out) = file_agent(&["audit", "verify", folder]).await;
    assert_eq!(code, 0, "{out}");
    let (code, out) = file_agent(&["audit", "report", folder, "--json"]).await;
    assert_eq!(code, 0, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let chain = report["integrity"]["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == format!("audit/{me}.jsonl"))
        .unwrap()
        .clone();
    assert_eq!(
        report["summary"]["retention_lines"], 1,
        "{}",
        report["summary"]
    );
    assert!(
        report["summary"]["statuses"].get("retention").is_none(),
        "the retention line counted as an attempt: {}",
        report["summary"]
    );
    let why = chain["deleted_by_retention"].as_str().unwrap_or_default();
    assert!(why.contains("deleted whole by retention"), "{chain}");
    let (code, out) = file_agent(&["audit", "show", folder, "--tail", "1"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("retention") && out.contains("deleted whole"),
        "{out}"
    );
    assert_eq!(containers_of_instance(&me).await, 0);
}

/// The names in `dropped` that belong to `chain`.
fn files_of_names(chain: &str, dropped: &[&str]) -> Vec<String> {
    dropped
        .iter()
        .filter(|n| n.starts_with(&format!("{chain}.jsonl")))
        .map(|n| n.to_string())
        .collect()
}

#[tokio::test]
async fn two_servers_pruning_one_folder_at_once_both_serve_and_each_file_is_recorded_once() {
    let data = tempfile::tempdir().unwrap();
    let audit = data.path().join("audit");
    write_chain(&audit, "gone-replica", 30, 40 * DAY);
    for digit in ['1', '2', '3', '4', '5', '6'] {
        stored_file(data.path(), digit, 40 * DAY);
    }
    let old_files = files_of(&audit, "gone-replica");
    let settings = [
        ("FILE_AGENT_FILES_RETENTION_DAYS", "1"),
        ("FILE_AGENT_AUDIT_RETENTION_DAYS", "1"),
    ];
    let (a, b) = (unique_instance("ret-a", 8), unique_instance("ret-b", 8));
    let (first, second) = tokio::join!(
        serve(Some(&a), data.path(), &settings),
        serve(Some(&b), data.path(), &settings)
    );
    until("the gone replica's chain stayed", || {
        files_of(&audit, "gone-replica").is_empty()
    })
    .await;
    until("stored files stayed", || {
        std::fs::read_dir(data.path().join("files"))
            .unwrap()
            .count()
            == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for served in [&first, &second] {
        let health = reqwest::get(format!("{}/health", served.url))
            .await
            .unwrap();
        assert!(health.status().is_success());
    }
    first.stop().await;
    second.stop().await;
    let lines = retention_lines(&audit);
    let mut recorded: Vec<String> = lines
        .iter()
        .flat_map(|l| {
            l["pruned"]["audit_files"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|f| f["file"].as_str().unwrap().to_string())
        .collect();
    recorded.sort();
    assert_eq!(recorded, old_files, "each deleted audit file once");
    let stored: u64 = lines
        .iter()
        .map(|l| l["pruned"]["stored_files"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(stored, 6, "each deleted stored file once");
    let (code, out) = file_agent(&["audit", "verify", data.path().to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}");
}
