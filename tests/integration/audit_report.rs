//! `file-agent audit report` as a reviewer gets it: a trail made by real attempts (every
//! ending the sandbox gives, saved tools created, updated, called, refused and deleted, a
//! retry loop that gives up, a hostile user id and hostile code) plus generated lines for
//! scale, rendered to one page that the test parses strictly (the page is well-formed XML):
//! each section holds the right rows, hostile text stays text, and an edited line turns the
//! first section into an alarm.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use file_agent::audit::{CallInfo, Record, ToolMark, hash_line};
use quick_xml::events::Event;
use rmcp::ServiceExt;
use rmcp::model::ClientConfig;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;

use crate::common::with_timeout;
use crate::fakes::openai::{FakeOpenAi, Reply};
use crate::mcp_server::{TestServer, call, env};

/// One element of the parsed page, or a piece of text (named `#text`).
#[derive(Debug, Default)]
pub struct Node {
    pub name: String,
    pub attrs: HashMap<String, String>,
    pub children: Vec<Node>,
    /// A text node's text, unescaped.
    pub text: String,
}

impl Node {
    /// All text inside, in order.
    pub fn all_text(&self) -> String {
        let mut text = self.text.clone();
        for child in &self.children {
            text.push_str(&child.all_text());
        }
        text
    }

    fn push_text(&mut self, text: &str) {
        match self.children.last_mut() {
            Some(last) if last.name == "#text" => last.text.push_str(text),
            _ => self.children.push(Node {
                name: "#text".into(),
                text: text.into(),
                ..Node::default()
            }),
        }
    }

    /// Every element below (and including) this one, depth first.
    pub fn descendants(&self) -> Vec<&Node> {
        let mut all = vec![self];
        for child in &self.children {
            all.extend(child.descendants());
        }
        all
    }

    /// The element with this id.
    pub fn by_id(&self, id: &str) -> &Node {
        self.descendants()
            .into_iter()
            .find(|n| n.attrs.get("id").is_some_and(|v| v == id))
            .unwrap_or_else(|| panic!("no element with id {id}"))
    }

    /// The rows of every table below, each as its cells' text.
    pub fn rows(&self) -> Vec<Vec<String>> {
        self.descendants()
            .into_iter()
            .filter(|n| n.name == "tr")
            .map(|tr| {
                tr.children
                    .iter()
                    .filter(|c| c.name == "td")
                    .map(|c| c.all_text())
                    .collect::<Vec<_>>()
            })
            .filter(|cells| !cells.is_empty())
            .collect()
    }
}

/// Parses the page strictly: any markup error fails the test.
pub fn parse(page: &str) -> Node {
    let mut reader = quick_xml::Reader::from_str(page);
    let mut stack = vec![Node::default()];
    loop {
        match reader.read_event().unwrap() {
            Event::Start(start) => stack.push(element(&start)),
            Event::Empty(start) => {
                let node = element(&start);
                stack.last_mut().unwrap().children.push(node);
            }
            Event::End(end) => {
                let node = stack.pop().unwrap();
                assert_eq!(node.name.as_str(), end.name().as_ref(), "mismatched tags");
                stack.last_mut().unwrap().children.push(node);
            }
            Event::Text(text) => {
                let text = text.xml10_content();
                stack.last_mut().unwrap().push_text(&text);
            }
            Event::GeneralRef(entity) => {
                let name = entity.xml10_content();
                let c = match name.as_ref() {
                    "amp" => "&",
                    "lt" => "<",
                    "gt" => ">",
                    "quot" => "\"",
                    "#39" => "'",
                    other => panic!("unexpected entity &{other};"),
                };
                stack.last_mut().unwrap().push_text(c);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(stack.len(), 1, "unclosed elements");
    stack.pop().unwrap()
}

fn element(start: &quick_xml::events::BytesStart) -> Node {
    Node {
        name: start.name().as_ref().to_string(),
        attrs: start
            .attributes()
            .map(|a| {
                let a = a.unwrap();
                (
                    a.key.as_ref().to_string(),
                    a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                        .unwrap()
                        .into_owned(),
                )
            })
            .collect(),
        ..Node::default()
    }
}

/// Appends `count` generated attempt lines as the chain `name` in `folder`, every ending and
/// a status no report knows among them, over `days` days before now.
pub fn generate_chain(folder: &Path, name: &str, count: u64, days: u64) {
    const STATUSES: [&str; 10] = [
        "ok",
        "ok",
        "ok",
        "failed",
        "timeout",
        "out_of_memory",
        "output_limit",
        "busy",
        "refused_output",
        "quarantined",
    ];
    std::fs::create_dir_all(folder).unwrap();
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(folder.join(format!("{name}.jsonl"))).unwrap(),
    );
    let now = std::time::SystemTime::now();
    let mut prev = "0".repeat(64);
    for seq in 1..=count {
        let back = std::time::Duration::from_secs(days * 86_400 * (count - seq) / count.max(1));
        let status = STATUSES[(seq % STATUSES.len() as u64) as usize];
        let code = format!(
            "import pandas as pd\ndf = pd.read_csv(input_file_path)\nprint(df.describe())  # attempt {seq}\n"
        );
        let record = Record {
            time: file_agent::time::format_rfc3339(now - back),
            seq,
            caller: CallInfo {
                call: format!("gen-call-{}", seq / 2),
                request: json!(seq),
                tool: ["run_python", "generate_file", "data_analysis_tool"][(seq % 3) as usize]
                    .into(),
                client: Some("open-webui/0.6".into()),
                user: Some(format!("user-{}", seq % 37)),
                identity: Some("openwebui-jwt".into()),
                chat: Some(format!("chat-{}", seq % 101)),
                ..CallInfo::default()
            },
            author: "model".into(),
            model: Some("gpt-test".into()),
            code_sha256: file_agent::audit::sha256_hex(code.as_bytes()),
            code: Some(code),
            inputs: vec![file_agent::audit::FileDigest {
                name: "sales.csv".into(),
                bytes: 18_000,
                sha256: "ab".repeat(32),
            }],
            image: "file-agent-sandbox:test".into(),
            image_id: Some(format!("sha256:{}", "cd".repeat(32))),
            runtime: "default".into(),
            limits: json!({"timeout_s": 90, "memory_mib": 1024, "network": "none"}),
            container: Some("ef".repeat(32)),
            container_kind: Some("warm".into()),
            status: status.into(),
            exit_code: Some(i64::from(status != "ok")),
            duration_ms: 900 + seq % 500,
            error: (status != "ok").then(|| format!("ended {status}")),
            saved_tool: (seq % 50 == 0)
                .then(|| ToolMark::new("call", "generated_tool", &"12".repeat(32), None)),
            prev: prev.clone(),
            ..Record::default()
        };
        let line = serde_json::to_string(&record).unwrap();
        writeln!(file, "{line}").unwrap();
        prev = hash_line(&line);
    }
    file.flush().unwrap();
}

pub async fn report(folder: &Path, extra: &[&str]) -> (i32, String) {
    let out = folder.join("report.html");
    let mut args = vec![
        "audit",
        "report",
        folder.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let output = with_timeout(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"))
            .args(&args)
            .output(),
    )
    .await
    .unwrap();
    let code = output.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (code, std::fs::read_to_string(out).unwrap())
}

const HOSTILE_USER: &str = "<script>alert(1)</script>";
const HOSTILE_CODE: &str = "# </pre><img src=x onerror=alert(1)>\nprint('hostile')";
const DOUBLE_1: &str = "def run(x):\n    return {\"doubled\": 2 * x}\n";
const DOUBLE_2: &str = "def run(x):\n    # twice, as a float\n    return {\"doubled\": 2.0 * x}\n";

fn tool(code: &str) -> serde_json::Value {
    json!({
        "name": "double",
        "description": "Doubles a number.",
        "code": code,
        "input_schema": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"], "examples": [{"x": 21}]}
    })
}

#[tokio::test]
async fn the_report_of_a_real_trail_holds_each_ending_each_tool_version_and_hostile_text_as_text() {
    // Every script fails: generate_file's retry loop gives up after its attempts.
    let llm = FakeOpenAi::start(vec![Reply::Code("raise SystemExit('no')".into()); 3]).await;
    let mut settings = llm.env();
    settings.extend(env(&[
        ("SANDBOX_WARM", "0"),
        // Time enough for the memory hog to reach its limit on a busy machine (at 4 s it was
        // killed for its time instead, beside a loaded suite).
        ("SCRIPT_TIMEOUT", "10"),
        ("SANDBOX_MEMORY_MIB", "256"),
        ("SANDBOX_OUTPUT_MAX_FILES", "3"),
        ("FILE_AGENT_MAX_CONCURRENT", "1"),
        ("FILE_AGENT_QUEUE_MAX", "0"),
    ]));
    let server = TestServer::start(&settings).await;
    let headers = HashMap::from([(
        http::HeaderName::from_static("x-openwebui-user-id"),
        http::HeaderValue::from_static(HOSTILE_USER),
    )]);
    let client = server.client_with_headers(headers).await;
    let run = |code: &str| json!({"code": code});
    let (is_error, text) = call(&client, "run_python", run(HOSTILE_CODE)).await;
    assert!(!is_error, "{text}");
    let (is_error, _) = call(&client, "run_python", run("raise ValueError('bad')")).await;
    assert!(is_error);
    let memory = crate::common::fixture_script("memory_hog.py");
    let (is_error, text) = call(&client, "run_python", run(&memory)).await;
    assert!(is_error && text.contains("memory"), "{text}");
    let many = "for n in range(10):\n    open(f'{output_dir}/f{n}.txt', 'w').write('x')";
    let (_, text) = call(&client, "run_python", run(many)).await;
    assert!(text.contains("output") || text.contains("3"), "{text}");
    // A timeout holds the only slot; a call meanwhile is told the server is busy.
    let sleeper = {
        let url = server.url.clone();
        tokio::spawn(async move {
            let client = ClientConfig::default()
                .serve(StreamableHttpClientTransport::from_uri(format!(
                    "{url}/mcp"
                )))
                .await
                .unwrap();
            call(
                &client,
                "run_python",
                json!({"code": "import time\ntime.sleep(30)"}),
            )
            .await
        })
    };
    // Once it holds the slot.
    crate::common::with_timeout(async {
        while server.tools.admission().running() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let (is_error, text) = call(&client, "run_python", run("print(1)")).await;
    assert!(is_error && text.contains("busy"), "{text}");
    let (is_error, text) = with_timeout(sleeper).await.unwrap();
    assert!(is_error && text.contains("longer than 10 s"), "{text}");
    let (is_error, _) = call(
        &client,
        "generate_file",
        json!({"instructions": "sales", "file_type": "excel"}),
    )
    .await;
    assert!(is_error);
    // A saved tool: refused at its check, created, updated, called, refused, deleted.
    let (is_error, _) = call(
        &client,
        "create_tool",
        tool("def run(x):\n    raise RuntimeError(x)\n"),
    )
    .await;
    assert!(is_error);
    for code in [DOUBLE_1, DOUBLE_2] {
        let (is_error, text) = call(&client, "create_tool", tool(code)).await;
        assert!(!is_error, "{text}");
    }
    let (is_error, text) = call(&client, "my_double", json!({"x": 4})).await;
    assert!(!is_error, "{text}");
    let (is_error, _) = call(&client, "my_double", json!({"x": "four"})).await;
    assert!(is_error);
    let (is_error, text) = call(&client, "delete_tool", json!({"name": "double"})).await;
    assert!(!is_error, "{text}");
    let _ = client.cancel().await;
    let data = server.data_dir().to_path_buf();
    let real = server.audit_lines();
    // Scale: a second chain of generated lines beside the real one.
    generate_chain(&data.join("audit"), "generated", 3000, 20);

    let (code, page) = report(&data, &[]).await;
    assert_eq!(code, 0);
    assert!(
        !page.contains("<script") && !page.contains("<img"),
        "markup from the trail"
    );
    let html = parse(&page);
    assert!(
        html.descendants()
            .iter()
            .all(|n| n.name != "script" && n.name != "img" && n.name != "link"),
        "an element from the trail, or an external resource"
    );

    let integrity = html.by_id("integrity");
    assert!(
        integrity
            .all_text()
            .contains("Every chain verified: 2 chains"),
        "{}",
        integrity.all_text()
    );
    let chains = integrity.rows();
    assert_eq!(chains.len(), 2, "{chains:?}");
    assert_eq!(chains[0][0], "audit/generated.jsonl");
    assert_eq!(chains[0][2], "3000");

    let attempts = real
        .iter()
        .filter(|l| {
            !["created", "updated", "saved again", "deleted"]
                .contains(&l["status"].as_str().unwrap())
        })
        .count();
    let summary = html.by_id("summary");
    let stats = summary.all_text();
    assert!(
        stats.contains(&format!("{}attempts", attempts + 3000)),
        "{stats}"
    );
    let endings: HashMap<String, String> = summary
        .rows()
        .into_iter()
        .filter(|r| r.len() == 2)
        .map(|r| (r[0].clone(), r[1].clone()))
        .collect();
    for ending in [
        "ok",
        "failed",
        "timeout",
        "OOM",
        "output limit",
        "busy",
        "refused",
    ] {
        assert_ne!(
            endings.get(ending).map(String::as_str),
            Some("0"),
            "{ending}: {endings:?}"
        );
    }
    assert!(
        summary.descendants().iter().any(|n| n.name == "svg"),
        "the chart"
    );

    let attention = html.by_id("attention").rows();
    let what = |needle: &str| {
        attention
            .iter()
            .find(|row| row[1].contains(needle))
            .unwrap_or_else(|| panic!("no {needle} in {attention:?}"))
            .clone()
    };
    // The sleeper's client sent no user id.
    let row = what("time limit");
    assert_eq!(
        (row[2].as_str(), row[4].as_str()),
        ("—", "run_python"),
        "{row:?}"
    );
    let row = what("memory limit");
    assert_eq!(row[2], HOSTILE_USER, "{row:?}");
    what("output size limit");
    what("retry loop gave up after 3 attempts");
    what("saved tool refused");
    what("saved tool call refused");
    what("unknown to this report");
    // Every row links to its attempt's detail, which carries that attempt.
    let timeout_link = html
        .by_id("attention")
        .descendants()
        .into_iter()
        .find(|n| n.name == "a")
        .unwrap()
        .attrs["href"]
        .clone();
    let detail = html.by_id(timeout_link.trim_start_matches('#'));
    assert_eq!(detail.name, "details");

    let users = html.by_id("users").rows();
    // The user came in a plain header: the table says nothing proved it.
    assert!(
        users
            .iter()
            .any(|r| r[0] == HOSTILE_USER && r[1] == "header"),
        "{users:?}"
    );
    let tools = html.by_id("tools").rows();
    let run_python = tools.iter().find(|r| r[0] == "run_python").unwrap();
    assert!(
        run_python[1].parse::<u64>().unwrap() > 1000,
        "{run_python:?}"
    );

    let saved = html.by_id("saved-tools");
    let double = saved
        .descendants()
        .into_iter()
        .find(|n| n.name == "details" && n.all_text().contains("my_double"))
        .unwrap();
    let timeline = double.rows();
    let actions: Vec<String> = timeline.iter().map(|r| r[1].clone()).collect();
    // Each change names who made it, the deletion too.
    for row in &timeline {
        assert_eq!(row[3], HOSTILE_USER, "{row:?}");
    }
    for action in [
        "check",
        "created",
        "updated",
        "call",
        "refused call",
        "deleted",
    ] {
        assert!(actions.iter().any(|a| a == action), "{action}: {actions:?}");
    }
    let code: Vec<String> = double
        .descendants()
        .into_iter()
        .filter(|n| n.attrs.get("class").is_some_and(|c| c == "code"))
        .map(Node::all_text)
        .collect();
    assert!(
        code.contains(&DOUBLE_1.to_string()) && code.contains(&DOUBLE_2.to_string()),
        "{code:?}"
    );
    let diff = double
        .descendants()
        .into_iter()
        .find(|n| n.attrs.get("class").is_some_and(|c| c == "diff"))
        .unwrap()
        .all_text();
    assert!(
        diff.contains("- ") && diff.contains("+     # twice, as a float"),
        "{diff}"
    );

    let details = html.by_id("details");
    assert!(
        details
            .descendants()
            .iter()
            .any(|n| n.name == "pre" && n.all_text() == HOSTILE_CODE),
        "the hostile code, as text"
    );

    // The same content as JSON, and the filters.
    let output = with_timeout(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"))
            .args([
                "audit",
                "report",
                data.to_str().unwrap(),
                "--json",
                "--user",
                HOSTILE_USER,
            ])
            .output(),
    )
    .await
    .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let mine = real
        .iter()
        .filter(|l| l["user"] == HOSTILE_USER && l["status"] != "created")
        .count();
    assert!(
        json["summary"]["attempts"].as_u64().unwrap() >= 10,
        "{}",
        json["summary"]
    );
    assert!(json["summary"]["attempts"].as_u64().unwrap() as usize <= mine);
    assert_eq!(json["integrity"]["intact"], true);

    // Someone edits one generated line: the report says so first, and exits 1.
    let path = data.join("audit/generated.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replacen("\"status\":\"timeout\"", "\"status\":\"ok\"", 1),
    )
    .unwrap();
    let (code, page) = report(&data, &[]).await;
    assert_eq!(code, 1);
    let html = parse(&page);
    let title = html
        .descendants()
        .into_iter()
        .find(|n| n.name == "title")
        .unwrap()
        .all_text();
    assert!(title.starts_with("BROKEN"), "{title}");
    let integrity = html.by_id("integrity");
    let alarm = integrity
        .children
        .iter()
        .find(|n| n.attrs.get("class").is_some_and(|c| c == "alarm"))
        .expect("the alarm comes right after the heading");
    let alarm = alarm.all_text();
    assert!(
        alarm.contains("BROKEN")
            && alarm.contains("audit/generated.jsonl")
            && alarm.contains("line 5"),
        "{alarm}"
    );
    server.assert_nothing_left().await;
}

/// The page's size stays bounded however long the trail; run by hand for the figures in
/// `docs/OPERATING.md` ("The review page"):
/// `cargo nextest run -E 'test(/report_of_100000/)' --run-ignored only`.
#[tokio::test]
#[ignore = "a measurement: about a minute in a debug build"]
async fn a_report_of_100000_lines_is_bounded() {
    let data = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    generate_chain(&data.path().join("audit"), "generated", 100_000, 90);
    let bytes = std::fs::metadata(data.path().join("audit/generated.jsonl"))
        .unwrap()
        .len();
    eprintln!(
        "generated 100,000 lines ({} MiB) in {:?}",
        bytes >> 20,
        started.elapsed()
    );
    let started = std::time::Instant::now();
    let (code, page) = report(data.path(), &[]).await;
    eprintln!(
        "report: {} KiB in {:?}",
        page.len() >> 10,
        started.elapsed()
    );
    assert_eq!(code, 0);
    parse(&page);
    assert!(page.len() < 16 << 20, "{}", page.len());
}

/// Writes `sessions` attempts of one `run_python` session as the chain `session.jsonl` in
/// `folder`, each line chained to the one before: (state_before, state_after, reset) per line.
fn session_chain(folder: &Path, steps: &[(Option<&str>, Option<&str>, bool)]) {
    std::fs::create_dir_all(folder).unwrap();
    let mut file = std::fs::File::create(folder.join("session.jsonl")).unwrap();
    let mut prev = "0".repeat(64);
    for (n, (before, after, reset)) in steps.iter().enumerate() {
        let record = Record {
            time: format!("2026-03-01T12:00:0{n}.000Z"),
            seq: n as u64 + 1,
            caller: CallInfo {
                call: format!("call-{n}"),
                request: json!(n),
                tool: "run_python".into(),
                user: Some("alice".into()),
                chat: Some("chat-a".into()),
                ..CallInfo::default()
            },
            author: "caller".into(),
            code_sha256: "00".repeat(32),
            status: "ok".into(),
            exit_code: Some(0),
            session: Some(file_agent::audit::SessionMark {
                id: SESSION_ID.into(),
                state_before: before.map(str::to_string),
                state_after: after.map(str::to_string),
                reset: *reset,
                ..Default::default()
            }),
            prev: prev.clone(),
            ..Record::default()
        };
        let line = serde_json::to_string(&record).unwrap();
        writeln!(file, "{line}").unwrap();
        prev = hash_line(&line);
    }
}

const SESSION_ID: &str = "5e551015aaaabbbbccccddddeeeeffff00001111222233334444555566667777";

/// The rows of the page's only session: (state before, state after, chain) per attempt, the
/// hashes whole (as a reviewer copies them).
fn session_rows(page: &Node) -> Vec<(String, String, String)> {
    let section = page.by_id("sessions");
    let session = section.by_id("session-0");
    assert!(
        session.all_text().contains(SESSION_ID),
        "the id, whole when copied"
    );
    session
        .rows()
        .into_iter()
        .map(|cells| (cells[2].clone(), cells[3].clone(), cells[5].clone()))
        .collect()
}

/// Issue 62: the review page follows a session from state to state (its id, each attempt's
/// states, a reset) and marks, in the session and in "needs attention", an attempt whose
/// `state_before` is not the `state_after` of the session's attempt before it: a state
/// changed in the folder (record and all) and signed into a well-chained trail.
#[tokio::test]
async fn the_review_page_follows_a_session_from_state_to_state_and_marks_where_it_breaks() {
    let (a, b, c) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
    let data = tempfile::tempdir().unwrap();
    let folder = data.path().join("audit");
    session_chain(
        &folder,
        &[
            (None, Some(&a), false),
            (Some(&a), Some(&b), false),
            (Some(&b), Some(&c), false),
            (None, Some(&a), true),
        ],
    );
    let (code, page) = report(data.path(), &[]).await;
    assert_eq!(code, 0);
    let page = parse(&page);
    let rows = session_rows(&page);
    assert_eq!(rows.len(), 4, "{rows:?}");
    for pair in rows.windows(2).take(2) {
        assert_eq!(
            pair[1].0, pair[0].1,
            "each starts from the state the one before left"
        );
    }
    assert_eq!(
        (rows[1].0.as_str(), rows[2].1.as_str()),
        (a.as_str(), c.as_str())
    );
    assert!(rows[3].2.contains("started over"), "{:?}", rows[3]);
    let text = page.by_id("sessions").all_text();
    assert!(!text.contains("BROKEN"), "{text}");
    assert!(
        page.by_id("a0-2").all_text().contains(&b),
        "the detail shows the states"
    );

    // Someone who can write the folder rewrote the state (and the server's record): the third
    // attempt starts from a state the second did not leave. The trail itself is intact.
    let forged = "f".repeat(64);
    session_chain(
        &folder,
        &[
            (None, Some(&a), false),
            (Some(&a), Some(&b), false),
            (Some(&forged), Some(&c), false),
        ],
    );
    let (code, page) = report(data.path(), &[]).await;
    assert_eq!(code, 0, "the lines chain: only the session's states do not");
    let page = parse(&page);
    let rows = session_rows(&page);
    assert!(rows[1].2.contains("follows"), "{:?}", rows[1]);
    assert!(rows[2].2.starts_with("BROKEN"), "{:?}", rows[2]);
    assert!(
        rows[2].2.contains("ffffffffffff") && rows[2].2.contains("bbbbbbbbbbbb"),
        "{:?}",
        rows[2]
    );
    let attention = page.by_id("attention").rows();
    assert!(
        attention
            .iter()
            .any(|row| row[1].contains("BROKEN session chain") && row[2] == "alice"),
        "{attention:?}"
    );
    let detail = page.by_id("a0-3").all_text();
    assert!(detail.contains("session chain BROKEN"), "{detail}");
}
