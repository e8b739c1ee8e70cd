//! The audit folder as untrusted bytes (issue 60), through the real `file-agent serve` and the
//! real CLI: evidence is only what a signed checkpoint covers at its real position (a
//! retention line appended by hand, unfinished or past the last checkpoint, accounts for
//! nothing; one edited time erases no signed chain; lines found after the last checkpoint at
//! start-up are named; a prefix deleted by hand raises the alarm at start-up), and every file
//! comes in through one door (a FIFO hangs nothing, a sparse file of 8 GiB allocates nothing,
//! a lock file that is a link truncates nothing). Every CLI run and start here is bounded in
//! time, so that a regression fails instead of hanging.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::common::{CliResult, sha256_hex};
use crate::front_door::free_port;
use crate::signed_trail::{LOG_NAME, kept, run, serve_with, until_signed};
use crate::trail_gaps::{Signed, health};

/// How long a CLI run over a hostile folder may take before the test calls it hung.
const BOUND: Duration = Duration::from_secs(30);

/// `file-agent <args>` with `env`, killed and failed past [`BOUND`].
async fn cli_within(args: &[&str], env: &[(&str, &str)]) -> CliResult {
    let run = crate::common::run_cli(args, env);
    tokio::time::timeout(BOUND, run)
        .await
        .unwrap_or_else(|_| panic!("`file-agent {}` hung past {BOUND:?}", args.join(" ")))
}

/// `audit verify <data> --key <vkey> <more>`, bounded: (exit code, what it printed).
async fn verify_within(signed: &Signed, more: &[&str]) -> (i32, String) {
    let data = signed.data.path().to_str().unwrap();
    let mut args = vec!["audit", "verify", data, "--key", &signed.vkey];
    args.extend_from_slice(more);
    let done = cli_within(&args, &[]).await;
    (
        done.code.unwrap_or(-1),
        format!("{}{}", done.stdout, done.stderr),
    )
}

/// The next line of the chain whose lines are `lines`: the last line as a template, made a
/// retention line recording `pruned`, chained after it (its `prev` and `seq`), as someone
/// holding the folder but not the key would write it.
fn retention_after(lines: &[String], pruned: Value) -> String {
    let last = lines.last().unwrap();
    let mut record: Value = serde_json::from_str(last).unwrap();
    record["seq"] = json!(record["seq"].as_u64().unwrap() + 1);
    record["prev"] = json!(sha256_hex(last.as_bytes()));
    record["status"] = json!("retention");
    record["author"] = json!("file-agent");
    record["pruned"] = pruned;
    serde_json::to_string(&record).unwrap()
}

/// A dropped-file entry of a retention line.
fn dropped(file: &str, last_seq: u64, last_hash: &str, signed: Option<Value>) -> Value {
    let mut entry = json!({"file": file, "last_seq": last_seq, "last_hash": last_hash,
        "last_time": "2001-01-01T00:00:00.000Z"});
    if let Some(signed) = signed {
        entry["signed"] = signed;
    }
    entry
}

/// Item 1, a prefix: lines 1..2 deleted by hand, and a retention line "recording" it appended
/// unfinished, then whole but past the last signed checkpoint, used to read `deleted by
/// retention` with exit 0.
#[tokio::test]
async fn a_retention_line_no_signed_checkpoint_covers_accounts_for_no_prefix() {
    let (signed, instance) = Signed::with_chain("unsigned-retention", 4).await;
    let (live, lines) = signed.chain(&instance);
    let forged = retention_after(
        &lines,
        json!({"audit_files": [dropped(
            &format!("{instance}.jsonl.000000000002"),
            2,
            &sha256_hex(lines[1].as_bytes()),
            None,
        )]}),
    );
    let kept_lines = format!("{}\n", lines[2..].join("\n"));
    for (what, tail) in [
        ("unfinished", forged.clone()),
        ("whole", format!("{forged}\n")),
    ] {
        std::fs::write(&live, format!("{kept_lines}{tail}")).unwrap();
        let (code, said) = verify_within(&signed, &[]).await;
        assert_eq!(code, 1, "{what}: {said}");
        assert!(said.contains("no retention line"), "{what}: {said}");
        assert!(!said.contains("deleted by retention"), "{what}: {said}");
    }
    // Without the key, an unfinished line is no line either.
    std::fs::write(&live, format!("{kept_lines}{forged}")).unwrap();
    let plain = cli_within(
        &["audit", "verify", signed.data.path().to_str().unwrap()],
        &[],
    )
    .await;
    assert_eq!(plain.code, Some(1), "{}", plain.stdout);
    assert!(
        !plain.stdout.contains("deleted by retention"),
        "{}",
        plain.stdout
    );
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// Item 1, a whole chain: chain b deleted whole, and a retention line of chain a "retiring" it,
/// its signed root copied from the shipped logs, appended unfinished and claiming to be line 1
/// (which a checkpoint covers), used to read `retired, 1 lines signed` with exit 0; appended
/// whole, after the last checkpoint, it must not either.
#[tokio::test]
async fn a_retention_line_past_the_last_checkpoint_retires_no_chain() {
    let signed = Signed::new().await;
    let (a, b) = instances("keeps", "retired");
    let (first, second) = (signed.serve(&a).await, signed.serve(&b).await);
    run(&first, 1).await;
    run(&second, 2).await;
    let (live_b, _) = signed.chain(&b);
    let last_b = until_signed(&live_b, 1).await;
    let shipped = signed.keys.path().join("shipped.jsonl");
    let log = format!("{}{}", first.stop().await, second.stop().await);
    std::fs::write(&shipped, log).unwrap();
    let copies = ["--checkpoints", shipped.to_str().unwrap()];
    let (code, said) = verify_within(&signed, &copies).await;
    assert_eq!(code, 0, "{said}");

    let (_, lines_b) = signed.chain(&b);
    for entry in std::fs::read_dir(signed.data.path().join("audit")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with(&b) {
            std::fs::remove_file(path).unwrap();
        }
    }
    let (live_a, lines_a) = signed.chain(&a);
    let root = json!({"origin": format!("{LOG_NAME}/{b}"), "size": last_b["size"],
        "root": last_b["root"]});
    let forged = retention_after(
        &lines_a,
        json!({"audit_files": [dropped(
            &format!("{b}.jsonl"),
            lines_b.len() as u64,
            &sha256_hex(lines_b.last().unwrap().as_bytes()),
            Some(root),
        )]}),
    );
    // Unfinished, it is checked by no chain: it may claim to be line 1, which a checkpoint
    // covers.
    let mut claims_one: Value = serde_json::from_str(&forged).unwrap();
    claims_one["seq"] = json!(1);
    let claims_one = serde_json::to_string(&claims_one).unwrap();
    let whole = format!("{}\n", lines_a.join("\n"));
    for (what, tail) in [("unfinished", claims_one), ("whole", format!("{forged}\n"))] {
        std::fs::write(&live_a, format!("{whole}{tail}")).unwrap();
        let (code, said) = verify_within(&signed, &copies).await;
        assert_eq!(code, 1, "{what}: {said}");
        assert!(
            said.contains(&format!("{LOG_NAME}/{b}")) && said.contains("deleted by hand"),
            "{what}: {said}"
        );
        assert!(!said.contains("retired,"), "{what}: {said}");
    }
    crate::mcp_server::assert_no_containers_of(a).await;
    crate::mcp_server::assert_no_containers_of(b).await;
}

/// Two new instance names.
fn instances(first: &str, second: &str) -> (String, String) {
    (
        crate::common::unique_instance(first, 8),
        crate::common::unique_instance(second, 8),
    )
}

/// A signed server of `instance` over the folder that prunes audit files older than 30 days.
async fn serve_pruning(signed: &Signed, instance: &str) -> crate::front_door::Served {
    let retention = [("FILE_AGENT_AUDIT_RETENTION_DAYS", "30")];
    serve_with(
        signed.data.path(),
        instance,
        &signed.key,
        &signed.witness,
        &retention,
    )
    .await
}

/// Waits until the server's log holds `text`, at most [`BOUND`].
async fn until_logged(server: &crate::front_door::Served, text: &str) -> String {
    let started = Instant::now();
    loop {
        let log = server.log();
        if log.contains(text) {
            return log;
        }
        assert!(started.elapsed() < BOUND, "never logged {text:?}:\n{log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Item 2: with one server stopped, its last line's time set to 2001, another server's
/// retention used to delete that chain, its tree and its checkpoints. Ages come from signed
/// lines only: that chain no longer matches its checkpoints, so it is kept and named.
#[tokio::test]
async fn one_edited_time_erases_no_signed_chain() {
    let signed = Signed::new().await;
    let (keeper, edited) = instances("keeper", "edited");
    let server = signed.serve(&edited).await;
    run(&server, 1).await;
    server.stop().await;
    let (live, lines) = signed.chain(&edited);
    let mut last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    last["time"] = json!("2001-01-01T00:00:00.000Z");
    let mut text: Vec<String> = lines[..lines.len() - 1].to_vec();
    text.push(serde_json::to_string(&last).unwrap());
    std::fs::write(&live, format!("{}\n", text.join("\n"))).unwrap();

    let server = serve_pruning(&signed, &keeper).await;
    until_logged(&server, "cannot tell the age").await;
    server.stop().await;
    for suffix in ["", ".tree", ".checkpoints"] {
        let file = format!("{}{suffix}", live.display());
        assert!(Path::new(&file).exists(), "{file} was deleted");
    }
    crate::mcp_server::assert_no_containers_of(keeper).await;
    crate::mcp_server::assert_no_containers_of(edited).await;
}

/// Item 2's other half: a chain whose lines are old and signed goes whole, and its retention
/// line records the signed root it was checked against, which `audit verify --checkpoints`
/// compares with the shipped copies.
#[tokio::test]
async fn an_old_signed_chain_is_retired_with_the_signed_root_it_was_checked_against() {
    let signed = Signed::new().await;
    let (keeper, old) = instances("keeper", "old");
    let folder = signed.data.path().join("audit");
    let log = file_agent::audit::AuditLog::open_chain(
        &folder,
        &old,
        file_agent::config::Config::from_lookup(|_| None)
            .unwrap()
            .audit,
    )
    .unwrap();
    let time =
        file_agent::time::format_rfc3339(SystemTime::now() - Duration::from_secs(40 * 86_400));
    for n in 0..3 {
        log.append(file_agent::audit::Record {
            time: time.clone(),
            status: "ok".into(),
            author: "caller".into(),
            error: Some(format!("line {n}")),
            ..Default::default()
        })
        .unwrap();
    }
    drop(log);
    // A server of that chain signs its lines (naming them as never signed), then stops.
    let server = signed.serve(&old).await;
    let (live, _) = signed.chain(&old);
    until_signed(&live, 3).await;
    let shipped_old = server.stop().await;

    let server = serve_pruning(&signed, &keeper).await;
    let started = Instant::now();
    while live.exists() {
        assert!(started.elapsed() < BOUND, "the old signed chain stayed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (keeper_live, retention_line, lines) = loop {
        let (keeper_live, lines) = signed.chain(&keeper);
        let found = lines
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|r| r["status"] == "retention");
        if let Some(found) = found {
            break (keeper_live, found, lines.len());
        }
        assert!(started.elapsed() < BOUND, "no retention line");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    until_signed(&keeper_live, lines).await;
    let shipped_keeper = server.stop().await;
    let entry = &retention_line["pruned"]["audit_files"][0];
    assert_eq!(entry["signed"]["size"], 3, "{retention_line}");
    assert_eq!(entry["signed"]["origin"], format!("{LOG_NAME}/{old}"));

    let shipped = signed.keys.path().join("shipped.jsonl");
    std::fs::write(&shipped, format!("{shipped_old}{shipped_keeper}")).unwrap();
    let (code, said) = verify_within(&signed, &["--checkpoints", shipped.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(&format!("{LOG_NAME}/{old}: retired")),
        "{said}"
    );
    crate::mcp_server::assert_no_containers_of(keeper).await;
}

/// Item 3: a well-chained line appended while the server was stopped used to be signed at the
/// next round in silence. It is still signed (a crash leaves such lines too), but named: a
/// warning, `/health`'s `unsigned_at_start`, and `audit verify --key` until it is signed.
#[tokio::test]
async fn a_restarted_server_names_the_lines_it_finds_after_its_last_checkpoint() {
    let (signed, instance) = Signed::with_chain("restart", 2).await;
    let (live, lines) = signed.chain(&instance);
    let mut appended: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    appended["seq"] = json!(3);
    appended["prev"] = json!(sha256_hex(lines.last().unwrap().as_bytes()));
    appended["user"] = json!("someone else");
    let line = serde_json::to_string(&appended).unwrap();
    std::fs::write(&live, format!("{}\n{line}\n", lines.join("\n"))).unwrap();
    let (code, said) = verify_within(&signed, &[]).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("lines 3..3 are covered by no signed checkpoint"),
        "{said}"
    );

    let server = signed.serve(&instance).await;
    let (status, body) = health(&server.url).await;
    assert_eq!(status, 200, "{body}");
    let named = body["audit"]["unsigned_at_start"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"));
    assert!(named.contains("lines 3..3"), "{named}");
    let log = server.stop().await;
    assert!(
        log.contains("found at start-up after the last checkpoint"),
        "{log}"
    );
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// Item 9: the first lines of the chain deleted by hand (tree and checkpoints kept) while the
/// server was stopped used to be accepted at start-up, and signed on. Now the start-up check
/// holds the prefix as `audit verify --key` does: the alarm, nothing signed.
#[tokio::test]
async fn start_up_raises_the_alarm_on_a_prefix_deleted_by_hand() {
    let (signed, instance) = Signed::with_chain("prefix-start", 4).await;
    let (live, lines) = signed.chain(&instance);
    std::fs::write(&live, format!("{}\n", lines[2..].join("\n"))).unwrap();
    let signed_before = kept(&live).len();
    let server = signed.serve_unready(&instance).await;
    let (status, body) = health(&server.url).await;
    assert_eq!(status, 503, "{body}");
    let alarm = body["audit"]["alarm"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"));
    assert!(alarm.contains("no retention line"), "{alarm}");
    server.stop().await;
    assert_eq!(kept(&live).len(), signed_before, "a checkpoint was signed");
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// Item 6: a FIFO in place of a chain's checkpoints file used to hang `audit verify --key`,
/// `audit report` and the start-up. Each now answers, naming it.
#[tokio::test]
async fn a_fifo_in_the_folder_hangs_nothing() {
    let (signed, instance) = Signed::with_chain("fifo", 1).await;
    let (live, _) = signed.chain(&instance);
    let checkpoints = format!("{}.checkpoints", live.display());
    std::fs::remove_file(&checkpoints).unwrap();
    nix::unistd::mkfifo(checkpoints.as_str(), nix::sys::stat::Mode::S_IRWXU).unwrap();

    let (code, said) = verify_within(&signed, &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("a FIFO"), "{said}");
    let data = signed.data.path().to_str().unwrap();
    let report = cli_within(&["audit", "report", data, "--json"], &[]).await;
    assert!(
        report.json.is_object(),
        "{}{}",
        report.stdout,
        report.stderr
    );

    let server = tokio::time::timeout(BOUND, signed.serve_unready(&instance))
        .await
        .expect("the server hung at start-up on a FIFO");
    let (status, body) = health(&server.url).await;
    assert_eq!(status, 503, "{body}");
    let alarm = body["audit"]["alarm"].as_str().unwrap_or_default();
    assert!(alarm.contains("a FIFO"), "{body}");
    server.stop().await;
    crate::mcp_server::assert_no_containers_of(instance).await;
}

/// Item 7: a sparse file of 8 GiB with no newline among the chains used to make `audit verify`
/// abort on an allocation of gigabytes. It reads one line's bound of it and names it.
#[tokio::test]
async fn a_sparse_file_of_8_gib_is_named_within_a_line_bound() {
    let data = tempfile::tempdir().unwrap();
    let audit = data.path().join("audit");
    std::fs::create_dir(&audit).unwrap();
    let sparse = std::fs::File::create(audit.join("sparse.jsonl")).unwrap();
    sparse.set_len(8 << 30).unwrap();
    drop(sparse);
    let folder = data.path().to_str().unwrap();
    let done = cli_within(&["audit", "verify", folder], &[]).await;
    assert_eq!(done.code, Some(1), "{}{}", done.stdout, done.stderr);
    assert!(
        done.stdout.contains("sparse.jsonl") && done.stdout.contains("longer than 16777216 bytes"),
        "{}",
        done.stdout
    );
    let report = cli_within(&["audit", "report", folder, "--json"], &[]).await;
    assert_eq!(report.code, Some(1), "{}", report.stderr);
}

/// Item 8: a lock file that is a symbolic link used to make the server truncate the file it
/// points at, outside the data folder. The server refuses to start, saying why; the file is
/// untouched.
#[tokio::test]
async fn a_lock_file_that_is_a_link_truncates_nothing() {
    let data = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let precious = outside.path().join("precious");
    std::fs::write(&precious, b"keep me").unwrap();
    let audit = data.path().join("audit");
    std::fs::create_dir(&audit).unwrap();
    let instance = crate::common::unique_instance("lock-link", 8);
    std::os::unix::fs::symlink(&precious, audit.join(format!("{instance}.jsonl.lock"))).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let refused = cli_within(
        &["serve"],
        &[
            ("FILE_AGENT_DATA_DIR", data.path().to_str().unwrap()),
            ("SANDBOX_INSTANCE", &instance),
            ("SANDBOX_WARM", "0"),
            ("FILE_AGENT_LISTEN", &listen),
        ],
    )
    .await;
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep me");
    assert_ne!(refused.code, Some(0), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("symbolic link"),
        "{}",
        refused.stderr
    );
}

/// Issue 62 (the CLI's own bounded read through the door): `audit verify-receipt` opened the
/// receipt, `--line` and `--key` files it was given plainly, so a FIFO with no writer hung it
/// and a link was followed. Each is refused at once now, the error naming the file by its role
/// (not as a file of the audit folder), and the CLI returns within the bound.
#[tokio::test]
async fn a_fifo_or_a_link_given_to_verify_receipt_is_refused_at_once_by_its_role() {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (_key, vkey) = crate::signed_trail::keygen(dir.path(), LOG_NAME).await;
    let fifo = at("fifo");
    nix::unistd::mkfifo(fifo.as_str(), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let proof = at("receipt.tlog-proof");
    std::fs::write(&proof, "c2sp.org/tlog-proof@v1\nindex 0\n").unwrap();
    std::fs::write(at("line.jsonl"), "{}\n").unwrap();
    std::os::unix::fs::symlink(at("line.jsonl"), at("line-link.jsonl")).unwrap();
    std::fs::write(at("verifier.key"), &vkey).unwrap();
    std::os::unix::fs::symlink(at("verifier.key"), at("key-link")).unwrap();
    let receipt = |file: &str, key: &str, line: Option<&str>| {
        let mut args = vec!["audit".to_string(), "verify-receipt".into(), file.into()];
        args.extend(["--key".into(), key.into()]);
        args.extend(
            line.into_iter()
                .flat_map(|l| ["--line".to_string(), l.into()]),
        );
        args
    };
    let cases = [
        (receipt(&fifo, &vkey, None), "the receipt file", "a FIFO"),
        (
            receipt(&proof, &vkey, Some(&fifo)),
            "the --line file",
            "a FIFO",
        ),
        (
            receipt(&proof, &vkey, Some(&at("line-link.jsonl"))),
            "the --line file",
            "symbolic link",
        ),
        (receipt(&proof, &fifo, None), "the --key file", "a FIFO"),
        (
            receipt(&proof, &at("key-link"), None),
            "the --key file",
            "symbolic link",
        ),
    ];
    for (args, role, what) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = Instant::now();
        let done = cli_within(&args, &[]).await;
        assert_eq!(done.code, Some(2), "{args:?}: {}", done.stderr);
        assert!(
            done.stderr.contains(role) && done.stderr.contains(what),
            "{args:?}: {}",
            done.stderr
        );
        assert!(!done.stderr.contains("audit folder"), "{}", done.stderr);
        assert!(started.elapsed() < BOUND, "{args:?}");
    }
}
