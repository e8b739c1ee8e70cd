//! `run_python`'s sessions through the real server, sandbox and image (issue 62): a name set in
//! one call is there in the next call of the same session, and nowhere else (another session,
//! another user naming the same session, a call without one); a failed attempt leaves the
//! state as it was; a generator and an open file are reported as not kept while the rest is;
//! the session outlives a restart; a state edited in the folder is refused until the caller
//! starts over, and so is one rewritten together with its record (the trail is what it is
//! checked against); the audit lines' state hashes chain; behind Open WebUI the chat is the
//! session.

use std::collections::HashMap;

use rmcp::RoleClient;
use rmcp::model::ClientConfig;
use rmcp::service::RunningService;
use serde_json::{Value, json};

use crate::mcp_server::{TestServer, call, env};

type Client = RunningService<RoleClient, ClientConfig>;

/// A client of `server` that forwards Open WebUI's user id `user` (and chat id `chat`).
async fn client_of(server: &TestServer, user: Option<&str>, chat: Option<&str>) -> Client {
    let mut headers = HashMap::new();
    for (name, value) in [("x-openwebui-user-id", user), ("x-openwebui-chat-id", chat)] {
        if let Some(value) = value {
            headers.insert(
                http::HeaderName::from_static(name),
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
    }
    server.client_with_headers(headers).await
}

/// `run_python` of `code` in `session` (none: no argument): (is_error, text).
async fn run(client: &Client, session: Option<&str>, code: &str) -> (bool, String) {
    let mut args = json!({"code": code});
    if let Some(session) = session {
        args["session"] = json!(session);
    }
    call(client, "run_python", args).await
}

/// Asserts a call succeeded and printed `expected`.
async fn prints(client: &Client, session: Option<&str>, code: &str, expected: &str) -> String {
    let (is_error, text) = run(client, session, code).await;
    assert!(!is_error, "{code}: {text}");
    assert!(
        text.contains(expected),
        "{code}: expected {expected:?} in {text}"
    );
    text
}

/// The trail's lines of the session `id`, in order of time (a restarted test server writes a
/// chain of its own).
fn session_lines(server: &TestServer, id: &str) -> Vec<Value> {
    let mut lines: Vec<Value> = server
        .audit_lines()
        .into_iter()
        .filter(|line| line["session"]["id"] == id)
        .collect();
    lines.sort_by(|a, b| a["time"].as_str().cmp(&b["time"].as_str()));
    lines
}

/// Asserts that each line's `state_before` is the `state_after` of the line before.
fn assert_chained(lines: &[Value]) {
    for pair in lines.windows(2) {
        assert_eq!(
            pair[1]["session"]["state_before"], pair[0]["session"]["state_after"],
            "{pair:#?}"
        );
    }
}

#[tokio::test]
async fn a_session_keeps_its_names_for_its_owner_only_across_calls_failures_and_a_restart() {
    let server = TestServer::start(&[]).await;
    let alice = client_of(&server, Some("alice"), None).await;
    let set = "import math\nimport pandas as pd\nx = 41\ndef numbers():\n    yield 1\n\
               g = numbers()\nf = open('/etc/hostname')\n\
               df = pd.DataFrame({'a': range(100_000)})\nprint('set')\n";
    let text = prints(&alice, Some("s1"), set, "set").await;
    assert!(text.contains("file-agent: session: kept"), "{text}");
    assert!(
        text.contains("math (module math)") && text.contains(", x"),
        "{text}"
    );
    assert!(text.contains("g (a generator"), "{text}");
    assert!(text.contains("f (an open file"), "{text}");
    assert!(text.contains("Session `s1`: its state was kept"), "{text}");
    assert!(
        !text.contains(".file-agent-state"),
        "the state is no output: {text}"
    );

    prints(&alice, Some("s1"), "print(x + 1, math.pi > 3)", "42 True").await;
    let sum = "print(int(df.a.sum()), isinstance(df, pd.DataFrame))";
    prints(&alice, Some("s1"), sum, "4999950000 True").await;
    let absent = "print('x' in globals())";
    prints(&alice, Some("s2"), absent, "False").await;
    prints(&alice, None, absent, "False").await;
    let bob = client_of(&server, Some("bob"), None).await;
    prints(&bob, Some("s1"), absent, "False").await;

    // A failed attempt leaves the state as it was.
    let (is_error, text) = run(&alice, Some("s1"), "x = 100\nraise ValueError('boom')").await;
    assert!(is_error && text.contains("stays as it was"), "{text}");
    prints(&alice, Some("s1"), "print(x)", "41").await;

    let lines = server.audit_lines();
    let id = lines.last().unwrap()["session"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let chain = session_lines(&server, &id);
    assert_eq!(chain.len(), 5, "{chain:#?}");
    assert_chained(&chain);
    assert_eq!(chain[0]["session"]["state_before"], Value::Null);
    assert_ne!(chain[0]["session"]["state_after"], Value::Null);
    let failed = &chain[3];
    assert_eq!(failed["status"], "failed");
    assert_eq!(
        failed["session"]["state_before"],
        failed["session"]["state_after"]
    );
    assert!(
        !server
            .audit_lines()
            .iter()
            .any(|line| line.to_string().contains("\"s1\"")),
        "the trail holds the session's hash, never its name"
    );

    // A restart keeps the session.
    let data = server.stop().await;
    let server = TestServer::start_in(data, &[]).await;
    let alice = client_of(&server, Some("alice"), None).await;
    prints(&alice, Some("s1"), "print(x * 2)", "82").await;
    let chain = session_lines(&server, &id);
    assert_eq!(chain.len(), 6, "{chain:#?}");
    assert_chained(&chain);
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn a_state_changed_in_the_folder_is_refused_until_the_session_starts_over() {
    let server = TestServer::start(&[]).await;
    let alice = client_of(&server, Some("alice"), None).await;
    prints(&alice, Some("edited"), "secret = 'kept'\nprint('ok')", "ok").await;
    let states: Vec<_> = walk(&server.data_dir().join("sessions"))
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "state"))
        .collect();
    assert_eq!(states.len(), 1, "{states:?}");
    let mut bytes = std::fs::read(&states[0]).unwrap();
    bytes.extend_from_slice(b"tampered");
    std::fs::write(&states[0], bytes).unwrap();

    let (is_error, text) = run(&alice, Some("edited"), "print(secret)").await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("changed outside file-agent") && text.contains("reset_session"),
        "{text}"
    );
    let args =
        json!({"code": "print('secret' in globals())", "session": "edited", "reset_session": true});
    let (is_error, text) = call(&alice, "run_python", args).await;
    assert!(!is_error && text.contains("False"), "{text}");
    let reset = server.audit_lines().last().unwrap().clone();
    assert_eq!(reset["session"]["reset"], true, "{reset}");
    assert_eq!(reset["session"]["state_before"], Value::Null, "{reset}");

    // Behind Open WebUI, the chat is the session.
    let chat_1 = client_of(&server, Some("alice"), Some("chat-1")).await;
    prints(&chat_1, None, "y = 7\nprint('set')", "Session `chat-1`").await;
    prints(&chat_1, None, "print(y)", "7").await;
    let chat_2 = client_of(&server, Some("alice"), Some("chat-2")).await;
    prints(&chat_2, None, "print('y' in globals())", "False").await;

    // Callers who name no one get no session, and are told.
    let nobody = client_of(&server, None, None).await;
    let text = prints(&nobody, Some("s1"), "print('ran')", "ran").await;
    assert!(
        text.contains("No session: this call names no one"),
        "{text}"
    );
    let (is_error, text) = run(&alice, Some("no spaces"), "print(1)").await;
    assert!(is_error && text.contains("not a usable name"), "{text}");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn a_state_rewritten_with_its_record_in_the_folder_is_refused_after_a_restart() {
    let server = TestServer::start(&[]).await;
    let alice = client_of(&server, Some("alice"), None).await;
    prints(&alice, Some("forged"), "secret = 'kept'\nprint('ok')", "ok").await;
    let data = server.stop().await;
    // Whoever holds the folder puts a state of its own there, and a record that names it, as
    // file-agent would have written them.
    let states: Vec<_> = walk(&data.path().join("sessions"))
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "state"))
        .collect();
    assert_eq!(states.len(), 1, "{states:?}");
    let folder = states[0].parent().unwrap();
    let forged = b"not the state the trail records";
    let sha = crate::common::sha256_hex(forged);
    std::fs::write(folder.join(format!("{sha}.state")), forged).unwrap();
    std::fs::remove_file(&states[0]).unwrap();
    let record = json!({"state_sha256": sha, "bytes": forged.len()});
    std::fs::write(folder.join("record.json"), record.to_string()).unwrap();

    // A new server over the folder reads the trail at start-up: the trail names another state.
    let server = TestServer::start_in(data, &[]).await;
    let alice = client_of(&server, Some("alice"), None).await;
    let (is_error, text) = run(&alice, Some("forged"), "print(secret)").await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("changed outside file-agent")
            && text.contains(&format!("its record.json says {sha}"))
            && text.contains("reset_session"),
        "{text}"
    );
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn a_state_over_the_bound_is_not_kept_and_sessions_can_be_turned_off() {
    let server = TestServer::start(&env(&[("FILE_AGENT_SESSION_MAX_MIB", "1")])).await;
    let alice = client_of(&server, Some("alice"), None).await;
    prints(&alice, Some("big"), "small = 1\nprint('ok')", "ok").await;
    let big = "blob = b'x' * (2 * 1024 * 1024)\nsmall = 2\nprint('ok')";
    let text = prints(&alice, Some("big"), big, "ok").await;
    assert!(
        text.contains("larger than 1048576 bytes and was not kept"),
        "{text}"
    );
    prints(
        &alice,
        Some("big"),
        "print(small, 'blob' in globals())",
        "1 False",
    )
    .await;
    server.assert_nothing_left().await;
    drop(server);

    let off = TestServer::start(&env(&[("FILE_AGENT_SESSIONS", "off")])).await;
    let alice = client_of(&off, Some("alice"), Some("chat-1")).await;
    let (is_error, text) = run(&alice, Some("s1"), "print(1)").await;
    assert!(
        is_error && text.contains("FILE_AGENT_SESSIONS=off"),
        "{text}"
    );
    // A chat's session is quietly not used.
    let text = prints(&alice, None, "print(2)", "2").await;
    assert!(!text.contains("Session"), "{text}");
    off.assert_nothing_left().await;
}

/// The session's state files in `server`'s folder.
fn state_files(server: &TestServer) -> Vec<std::path::PathBuf> {
    walk(&server.data_dir().join("sessions"))
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "state"))
        .collect()
}

#[tokio::test]
async fn an_unchanged_state_is_not_sent_back_nor_written_again() {
    use std::os::unix::fs::MetadataExt;
    let server = TestServer::start(&[]).await;
    let alice = client_of(&server, Some("alice"), None).await;
    prints(&alice, Some("same"), "x = 41\nprint('set')", "set").await;
    let first = state_files(&server);
    assert_eq!(first.len(), 1, "{first:?}");
    let inode = std::fs::metadata(&first[0]).unwrap().ino();

    // The runner finds the state it would leave the same bytes, and sends a marker instead:
    // the file kept is not written again (a new write renames a new file over it).
    let text = prints(&alice, Some("same"), "print(x + 1)", "42").await;
    assert!(text.contains("its state is unchanged"), "{text}");
    assert!(!text.contains(".file-agent-state"), "{text}");
    assert_eq!(state_files(&server), first);
    assert_eq!(std::fs::metadata(&first[0]).unwrap().ino(), inode);
    let line = server.audit_lines().last().unwrap().clone();
    assert_eq!(
        line["session"]["state_after"], line["session"]["state_before"],
        "{line}"
    );
    assert_ne!(line["session"]["state_after"], Value::Null, "{line}");

    // A change is kept as before, and the trail chains across the unchanged call.
    prints(&alice, Some("same"), "x = 43\nprint('changed')", "changed").await;
    let changed = state_files(&server);
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_ne!(changed, first);
    prints(&alice, Some("same"), "print(x)", "43").await;
    let id = line["session"]["id"].as_str().unwrap().to_string();
    let chain = session_lines(&server, &id);
    assert_eq!(chain.len(), 4, "{chain:#?}");
    assert_chained(&chain);
    server.assert_nothing_left().await;
}

/// Under gVisor (`SANDBOX_RUNTIME=runsc`) the state goes in and comes out as under runc: a
/// DataFrame and a number kept, a generator not, an unchanged state not sent back, a change
/// kept, each attempt in a container of its own.
#[tokio::test]
async fn a_session_keeps_its_names_under_gvisor() {
    let server = TestServer::start(&env(&[("SANDBOX_RUNTIME", "runsc")])).await;
    let alice = client_of(&server, Some("alice"), None).await;
    let set = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\nx = 41\n\
               g = (i for i in range(3))\nprint('set')";
    let text = prints(&alice, Some("g"), set, "set").await;
    assert!(text.contains("g (a generator"), "{text}");
    let text = prints(
        &alice,
        Some("g"),
        "print(x + 1, int(df['a'].sum()))",
        "42 3",
    )
    .await;
    assert!(text.contains("its state is unchanged"), "{text}");
    prints(&alice, Some("g"), "x = 1\nprint('changed')", "changed").await;
    prints(&alice, Some("g"), "print(x, 'g' in globals())", "1 False").await;
    let lines: Vec<Value> = server
        .audit_lines()
        .into_iter()
        .filter(|line| !line["session"].is_null())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert!(
        lines.iter().all(|line| line["runtime"] == "runsc"),
        "{lines:#?}"
    );
    let containers: std::collections::HashSet<_> =
        lines.iter().map(|line| line["container"].clone()).collect();
    assert_eq!(containers.len(), 4, "one container per attempt: {lines:#?}");
    assert_chained(&lines);
    server.assert_nothing_left().await;
}

/// The test process's memory, in bytes: (now, the peak since the last [`reset_peak`]).
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap()
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Sets the process's peak memory to what it uses now (Linux 4.0 and later).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

#[tokio::test]
async fn a_large_state_goes_in_without_the_server_holding_it_in_memory() {
    const STATE_MIB: u64 = 96;
    let server = TestServer::start(&[]).await;
    let alice = client_of(&server, Some("alice"), None).await;
    let set = format!("blob = bytes({STATE_MIB} * 2**20)\nprint('set')");
    prints(&alice, Some("large"), &set, "set").await;
    let kept = state_files(&server);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(std::fs::metadata(&kept[0]).unwrap().len() > STATE_MIB << 20);

    // The server (in this process: nextest runs each test in a process of its own) streams
    // the state from its file: its peak memory grows by far less than the state.
    reset_peak();
    let (before, _) = memory();
    prints(
        &alice,
        Some("large"),
        "print(len(blob))",
        &(STATE_MIB << 20).to_string(),
    )
    .await;
    let (_, peak) = memory();
    let grew = peak.saturating_sub(before) >> 20;
    eprintln!("peak memory grew by {grew} MiB while a {STATE_MIB} MiB state went in");
    assert!(grew < STATE_MIB / 3, "the peak grew by {grew} MiB");
    server.assert_nothing_left().await;
}

/// Every file under `root`.
fn walk(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                folders.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    files
}
