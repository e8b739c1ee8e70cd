//! Files the MCP way (issue 39), with the official MCP Python SDK as the client
//! (`tests/sdk/resources_client.py`): over stdio, as a desktop client starts the server and
//! declares a root, and over HTTP with two users. Outputs come back as resource links that
//! `resources/read` returns byte for byte; inputs go in by path under the root or by an
//! output's URI; what is outside, or another user's, is refused with nothing run.

use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::unique_instance;
use crate::mcp_server::{TestServer, assert_no_containers_of};

/// A 1x1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// A script writing a text file, a binary one, an empty one, one at the 1 MiB bound, one past
/// it, and a PNG.
fn outputs_script() -> String {
    format!(
        "import base64\n\
         open('/work/out/text.txt', 'w', encoding='utf-8').write('h\\u00e9llo\\n')\n\
         open('/work/out/data.bin', 'wb').write(bytes(range(256)) * 4)\n\
         open('/work/out/empty.txt', 'wb').close()\n\
         open('/work/out/bound.bin', 'wb').write(b'\\x01' * (1 << 20))\n\
         open('/work/out/over.bin', 'wb').write(b'\\x02' * ((1 << 20) + 1))\n\
         open('/work/out/chart.png', 'wb').write(base64.b64decode('{PNG}'))\n\
         print('made')\n"
    )
}

/// The bytes the script writes, by name.
fn expected(name: &str) -> Vec<u8> {
    use base64::Engine;
    match name {
        "text.txt" => "héllo\n".as_bytes().to_vec(),
        "data.bin" => (0..=255u8).collect::<Vec<_>>().repeat(4),
        "empty.txt" => Vec::new(),
        "bound.bin" => vec![1; 1 << 20],
        "over.bin" => vec![2; (1 << 20) + 1],
        "chart.png" => base64::engine::general_purpose::STANDARD
            .decode(PNG)
            .unwrap(),
        other => panic!("unexpected output {other}"),
    }
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Runs `plan` with the SDK client and `args`; one JSON value per step.
async fn sdk(plan: &Value, args: &[String]) -> Vec<Value> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), plan.to_string()).unwrap();
    let mut all = vec!["--plan".to_string(), file.path().display().to_string()];
    all.extend_from_slice(args);
    let output = crate::mcp_server::sdk_script("resources_client.py", &all).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the SDK client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The resource links of a call's result: (uri, name, size).
fn links(result: &Value) -> Vec<(String, String, u64)> {
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "resource_link")
        .map(|item| {
            (
                item["uri"].as_str().unwrap().to_string(),
                item["name"].as_str().unwrap().to_string(),
                item["size"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Checks a call that made the six outputs, and the reads of its links 0..6 that follow it;
/// the PNG also inline when `inline` (over stdio).
fn assert_outputs_read_back(made: &Value, reads: &[Value], inline: bool) {
    assert_eq!(made["is_error"], false, "{made}");
    let links = links(made);
    let mut names: Vec<&str> = links.iter().map(|(_, name, _)| name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "bound.bin",
            "chart.png",
            "data.bin",
            "empty.txt",
            "over.bin",
            "text.txt"
        ]
    );
    for ((uri, name, size), read) in links.iter().zip(reads) {
        let bytes = expected(name);
        assert_eq!(*size, bytes.len() as u64, "{name}");
        assert!(uri.starts_with("file-agent://files/"), "{uri}");
        if name == "over.bin" {
            // Past the bound: refused, and the error says which bound.
            assert_eq!(read["ok"], false, "{read}");
            assert!(
                read["error"]
                    .as_str()
                    .unwrap()
                    .contains("FILE_AGENT_INPUT_MAX_MIB"),
                "{read}"
            );
            continue;
        }
        assert_eq!(read["ok"], true, "{name}: {read}");
        assert_eq!(read["sha256"], sha256(&bytes), "{name}");
        assert_eq!(read["length"], bytes.len(), "{name}");
        assert_eq!(read["uri"], uri.as_str());
    }
    // Over stdio the PNG also inline, as image content; over HTTP (Open WebUI) not.
    let images: Vec<&Value> = made["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "image")
        .collect();
    if !inline {
        assert!(images.is_empty(), "{made}");
        return;
    }
    assert_eq!(images.len(), 1, "{made}");
    assert_eq!(images[0]["sha256"], sha256(&expected("chart.png")));
    assert_eq!(images[0]["mimeType"], "image/png");
}

/// The steps that make the outputs and read each back: step 0, then 1..=6.
fn make_and_read() -> Vec<Value> {
    let mut plan = vec![json!({"call": "run_python", "args": {"code": outputs_script()}})];
    plan.extend((0..6).map(|link| json!({"read": format!("{{{{0.{link}}}}}")})));
    plan
}

fn run_reading(file_ids: Value, path: &str) -> Value {
    json!({"call": "run_python", "args": {
        "code": format!("print(open('/work/in/{path}', encoding='utf-8').read())"),
        "file_ids": file_ids,
    }})
}

#[tokio::test]
async fn a_stdio_client_gives_files_by_path_under_its_root_and_gets_results_through_mcp() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("reports");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("q3.csv"), "region,total\nnorth,7\n").unwrap();
    std::fs::write(home.path().join("secret.txt"), "TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(home.path().join("secret.txt"), root.join("link.txt")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let instance = unique_instance("mcpfiles", 12);

    let q3 = root.join("q3.csv");
    let mut plan = make_and_read();
    plan.extend([
        // 7, 8: by path and by file:// URI under the root.
        run_reading(json!([q3.display().to_string()]), "q3.csv"),
        run_reading(json!([format!("file://{}", q3.display())]), "q3.csv"),
        // 9, 10, 11: outside, a `..` escape, a link in the root (refused wherever it points).
        run_reading(
            json!([home.path().join("secret.txt").display().to_string()]),
            "secret.txt",
        ),
        run_reading(
            json!([format!("{}/../secret.txt", root.display())]),
            "secret.txt",
        ),
        run_reading(
            json!([root.join("link.txt").display().to_string()]),
            "link.txt",
        ),
        // 12: an output's URI given back as an input.
        run_reading(json!(["{{0.0}}"]), "NAME0"),
        // 13
        json!({"list": true}),
    ]);
    let mut args = vec![
        "--stdio".to_string(),
        env!("CARGO_BIN_EXE_file-agent").to_string(),
        "--root".into(),
        root.display().to_string(),
    ];
    for (key, value) in [
        ("SANDBOX_INSTANCE", instance.clone()),
        ("FILE_AGENT_DATA_DIR", data.path().display().to_string()),
        ("FILE_AGENT_INPUT_MAX_MIB", "1".into()),
    ] {
        args.extend(["--env".into(), format!("{key}={value}")]);
    }
    // Step 12 reads the file of link 0, whatever its name: the script learns it from /work/in.
    plan[12]["args"]["code"] = json!(
        "import hashlib, os\nname = os.listdir('/work/in')[0]\nprint(name, hashlib.sha256(open('/work/in/' + name, 'rb').read()).hexdigest())"
    );
    let results = sdk(&json!(plan), &args).await;

    assert_outputs_read_back(&results[0], &results[1..7], true);
    // No reference in the text that does not work here: over stdio with no URL set, each link
    // is the file's path on this machine, and it holds the file.
    let text = results[0]["text"].as_str().unwrap();
    assert!(!text.contains("http://"), "{text}");
    for (_, name, _) in links(&results[0]) {
        let marker = format!("[{name}](");
        let start = text.find(&marker).unwrap_or_else(|| panic!("{text}")) + marker.len();
        let link = &text[start..start + text[start..].find(')').unwrap()];
        let path = link
            .strip_prefix("file://")
            .unwrap_or_else(|| panic!("{link}"));
        let path = file_agent::storage::decode_percent(path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected(&name), "{path}");
    }

    for by in [&results[7], &results[8]] {
        assert_eq!(by["is_error"], false, "{by}");
        assert!(by["text"].as_str().unwrap().contains("north,7"), "{by}");
    }
    for (refused, why) in results[9..12].iter().zip([
        "outside the folders",
        "outside the folders",
        "is a symbolic link below the root",
    ]) {
        assert_eq!(refused["is_error"], true, "{refused}");
        let text = refused["text"].as_str().unwrap();
        assert!(text.contains(why), "{text}");
        assert!(text.contains(&root.display().to_string()), "{text}");
        assert!(!text.contains("TOP-SECRET"), "{text}");
    }
    let (_, name0, _) = links(&results[0])[0].clone();
    let again = results[12]["text"].as_str().unwrap();
    assert_eq!(results[12]["is_error"], false, "{again}");
    assert!(
        again.contains(&format!("{name0} {}", sha256(&expected(&name0)))),
        "{again}"
    );
    let listed: Vec<&str> = results[13]["uris"]
        .as_array()
        .unwrap()
        .iter()
        .map(|uri| uri.as_str().unwrap())
        .collect();
    for (uri, _, _) in links(&results[0]) {
        assert!(listed.contains(&uri.as_str()), "{uri} not in {listed:?}");
    }

    // The refused calls ran nothing: four attempts in the trail, none of them the refused.
    let trail = crate::common::audit_text(data.path());
    let attempts = trail
        .lines()
        .filter(|line| line.contains("\"tool\":\"run_python\""))
        .count();
    assert_eq!(attempts, 4, "{trail}");
    assert!(!trail.contains("secret.txt") && !trail.contains("link.txt"));
    assert_no_containers_of(instance).await;
}

#[tokio::test]
async fn over_http_a_user_reads_and_lists_only_their_own_results_and_paths_are_refused() {
    let server = TestServer::start(&crate::mcp_server::env(&[(
        "FILE_AGENT_INPUT_MAX_MIB",
        "1",
    )]))
    .await;
    let url = format!("{}/mcp", server.url);
    let as_user = |user: &str| {
        vec![
            url.clone(),
            "--header".into(),
            format!("X-OpenWebUI-User-Id={user}"),
        ]
    };

    let mut plan = make_and_read();
    plan.push(json!({"list": true}));
    plan.push(run_reading(json!(["/etc/hostname"]), "hostname"));
    let alice = sdk(&json!(plan), &as_user("alice")).await;
    assert_outputs_read_back(&alice[0], &alice[1..7], false);
    // Over HTTP the text keeps its download links.
    assert!(
        alice[0]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("{}/files/", server.url))
    );
    let alices: Vec<String> = links(&alice[0])
        .into_iter()
        .map(|(uri, _, _)| uri)
        .collect();
    assert_eq!(
        alice[7]["uris"].as_array().unwrap().len(),
        6,
        "{}",
        alice[7]
    );
    let path = &alice[8];
    assert_eq!(path["is_error"], true, "{path}");
    assert!(
        path["text"]
            .as_str()
            .unwrap()
            .contains("over HTTP file-agent cannot read your disk"),
        "{path}"
    );

    // Bob cannot read alice's files by their URI, and lists none of them; alice's URI given as
    // bob's input is refused too.
    let mut plan: Vec<Value> = alices.iter().map(|uri| json!({"read": uri})).collect();
    plan.push(json!({"list": true}));
    plan.push(run_reading(json!([alices[0]]), "x"));
    let bob = sdk(&json!(plan), &as_user("bob")).await;
    for read in &bob[..6] {
        assert_eq!(read["ok"], false, "{read}");
        assert!(
            read["error"].as_str().unwrap().contains("not yours"),
            "{read}"
        );
    }
    assert_eq!(bob[6]["uris"], json!([]));
    assert_eq!(bob[7]["is_error"], true, "{}", bob[7]);
    assert!(
        bob[7]["text"].as_str().unwrap().contains("was not found"),
        "{}",
        bob[7]
    );
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn a_stdio_client_without_roots_reads_only_under_file_agent_local_roots() {
    let home = tempfile::tempdir().unwrap();
    let real = home.path().join("shared");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("notes.txt"), "from the folder").unwrap();
    // The root as set is a link to the folder: it is resolved once, as the user's own setting.
    let folder = home.path().join("shared-link");
    std::os::unix::fs::symlink(&real, &folder).unwrap();
    let input = folder.join("notes.txt");
    let data = tempfile::tempdir().unwrap();
    let instance = unique_instance("mcproots", 12);
    let plan = json!([run_reading(
        json!([input.display().to_string()]),
        "notes.txt"
    )]);
    let args = |roots: Option<&Path>| {
        let mut args = vec![
            "--stdio".to_string(),
            env!("CARGO_BIN_EXE_file-agent").to_string(),
        ];
        let mut env = vec![
            format!("SANDBOX_INSTANCE={instance}"),
            format!("FILE_AGENT_DATA_DIR={}", data.path().display()),
        ];
        if let Some(roots) = roots {
            env.push(format!("FILE_AGENT_LOCAL_ROOTS={}", roots.display()));
        }
        for pair in env {
            args.extend(["--env".into(), pair]);
        }
        args
    };

    let without = sdk(&plan, &args(None)).await;
    assert_eq!(without[0]["is_error"], true, "{}", without[0]);
    let text = without[0]["text"].as_str().unwrap();
    assert!(
        text.contains("declares no roots") && text.contains("FILE_AGENT_LOCAL_ROOTS"),
        "{text}"
    );

    let with = sdk(&plan, &args(Some(&folder))).await;
    assert_eq!(with[0]["is_error"], false, "{}", with[0]);
    assert!(
        with[0]["text"]
            .as_str()
            .unwrap()
            .contains("from the folder"),
        "{}",
        with[0]
    );
    assert_no_containers_of(instance).await;
}
