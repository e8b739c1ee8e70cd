//! `file-agent run` as a user calls it: JSON on stdout, exit codes, signals.

use std::time::Duration;

use crate::common::{fixture_path, run_cli, with_timeout};

#[tokio::test]
async fn run_prints_one_json_object_and_copies_outputs_out() {
    let host = tempfile::tempdir().unwrap();
    let input = host.path().join("my data.csv");
    std::fs::write(&input, "region,amount\nnorth,1\n").unwrap();
    let script = host.path().join("script.py");
    std::fs::write(
        &script,
        "import os, pandas as pd\n\
         frame = pd.read_csv(input_file_path)\n\
         os.makedirs('charts/q3')\n\
         frame.to_csv('charts/q3/copy.csv', index=False)\n\
         print(sorted(os.listdir(input_dir)))\n",
    )
    .unwrap();
    let out = host.path().join("results");
    let result = run_cli(
        &[
            "run",
            script.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--timeout",
            "60",
            "--memory",
            "512",
        ],
        &[],
    )
    .await;
    assert_eq!(result.code, Some(0), "{} {}", result.json, result.stderr);
    let json = &result.json;
    assert_eq!(json["status"], "ok");
    assert_eq!(json["exit_code"], 0);
    assert_eq!(json["stdout"], "['my data.csv']\n");
    assert_eq!(json["stdout_truncated"], false);
    assert!(json["duration_ms"].as_u64().unwrap() > 0);
    assert_eq!(json["outputs"][0]["path"], "charts/q3/copy.csv");
    assert_eq!(json["outputs"][0]["bytes"], 22);
    assert_eq!(
        json["outputs"][0]["sha256"],
        crate::common::sha256_hex(b"region,amount\nnorth,1\n")
    );
    assert_eq!(
        std::fs::read_to_string(out.join("charts/q3/copy.csv")).unwrap(),
        "region,amount\nnorth,1\n"
    );
    for key in ["stderr", "stderr_truncated", "skipped", "message"] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
}

#[tokio::test]
async fn run_exits_1_for_a_failed_script_and_2_when_it_cannot_run() {
    let failed = run_cli(
        &[
            "run",
            fixture_path("raises.py").to_str().unwrap(),
            "--out",
            "/tmp/fa-unused",
        ],
        &[],
    )
    .await;
    assert_eq!(failed.code, Some(1));
    assert_eq!(failed.json["status"], "failed");

    let missing = run_cli(&["run", "/nonexistent/script.py"], &[]).await;
    assert_eq!(missing.code, Some(2));
    assert_eq!(missing.json["status"], "sandbox_error");
    assert!(
        missing.json["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/script.py")
    );

    let no_image = run_cli(
        &["run", fixture_path("raises.py").to_str().unwrap()],
        &[("SANDBOX_IMAGE", "file-agent-sandbox:not-built")],
    )
    .await;
    assert_eq!(no_image.code, Some(2));
    assert!(
        no_image.json["message"]
            .as_str()
            .unwrap()
            .contains("file-agent image build")
    );

    let bad_setting = run_cli(&["doctor"], &[("SCRIPT_TIMEOUT", "soon")]).await;
    assert_eq!(bad_setting.code, Some(2));
    assert!(
        bad_setting.stderr.contains("SCRIPT_TIMEOUT"),
        "{}",
        bad_setting.stderr
    );
    // doctor reads what serve reads: a setting serve refuses, doctor refuses.
    let refused = run_cli(&["doctor"], &[("FILE_AGENT_DYNAMIC_TOOLS", "yes")]).await;
    assert_eq!(refused.code, Some(2), "{}", refused.stdout);
    assert!(
        refused.stderr.contains("FILE_AGENT_DYNAMIC_TOOLS"),
        "{}",
        refused.stderr
    );
}

/// A misspelt setting is ignored by the configuration, so the hardened runtime or the
/// authentication asked for would be off in silence: serve warns, doctor fails, and both name
/// the setting meant. A short access token stops serve before it announces anything.
#[tokio::test]
async fn misspelt_settings_are_named_and_bad_tokens_stop_serve_before_it_announces() {
    let doctor = run_cli(&["doctor"], &[("SANDBOX_RUNTME", "runsc")]).await;
    assert_eq!(doctor.code, Some(1), "{}", doctor.stdout);
    assert!(
        doctor
            .stdout
            .contains("SANDBOX_RUNTME is not a file-agent setting and is ignored; did you mean SANDBOX_RUNTIME?"),
        "{}",
        doctor.stdout
    );
    let data = tempfile::tempdir().unwrap();
    let serve = run_cli(
        &["serve", "--listen", "127.0.0.1:0"],
        &[
            ("FILE_AGENT_DATA_DIR", data.path().to_str().unwrap()),
            ("FILE_AGENT_ACCES_TOKENS", "x"),
            ("FILE_AGENT_ACCESS_TOKENS", "short"),
        ],
    )
    .await;
    assert_eq!(serve.code, Some(2), "{}", serve.stderr);
    assert!(
        serve
            .stderr
            .contains("FILE_AGENT_ACCES_TOKENS is not a file-agent setting")
            && serve
                .stderr
                .contains("did you mean FILE_AGENT_ACCESS_TOKENS?"),
        "{}",
        serve.stderr
    );
    assert!(
        serve
            .stderr
            .contains("FILE_AGENT_ACCESS_TOKENS: token number 1 is shorter than 16"),
        "{}",
        serve.stderr
    );
    assert!(!serve.stderr.contains("MCP at http"), "{}", serve.stderr);
}

/// With `FILE_AGENT_LOG_FORMAT=json` every line on stderr is one JSON object, the fatal error
/// included, so a log collector loses nothing; a value that is neither format stops the
/// process and names the variable.
#[tokio::test]
async fn json_logs_are_one_object_per_line_and_a_bad_format_is_named() {
    let data = tempfile::tempdir().unwrap();
    let serve = run_cli(
        &["serve", "--listen", "127.0.0.1:0"],
        &[
            ("FILE_AGENT_DATA_DIR", data.path().to_str().unwrap()),
            ("FILE_AGENT_LOG_FORMAT", "json"),
            ("FILE_AGENT_ACCES_TOKENS", "x"),
            ("FILE_AGENT_ACCESS_TOKENS", "short"),
        ],
    )
    .await;
    assert_eq!(serve.code, Some(2), "{}", serve.stderr);
    let lines: Vec<serde_json::Value> = serve
        .stderr
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let warning = lines
        .iter()
        .find(|line| line["level"] == "WARN")
        .unwrap_or_else(|| panic!("no warning: {}", serve.stderr));
    assert!(
        warning["fields"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("FILE_AGENT_ACCES_TOKENS")),
        "{warning}"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["level"], "ERROR", "{last}");
    assert!(
        last["fields"]["error"]
            .as_str()
            .is_some_and(|error| error.contains("FILE_AGENT_ACCESS_TOKENS")),
        "{last}"
    );

    let bad = run_cli(&["doctor"], &[("FILE_AGENT_LOG_FORMAT", "yaml")]).await;
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(
        bad.stderr
            .contains("FILE_AGENT_LOG_FORMAT must be text or json, not \"yaml\""),
        "{}",
        bad.stderr
    );
}

#[tokio::test]
async fn sigterm_kills_the_attempt_and_removes_its_container() {
    let instance = format!("sigterm-{}", std::process::id());
    let out = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"))
        .args(["run", fixture_path("endless.py").to_str().unwrap(), "--out"])
        .arg(out.path())
        .env("SANDBOX_INSTANCE", &instance)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let sandbox = crate::common::TestSandbox::new(|c| c.instance = Some(instance.clone())).await;
    // Wait until its container runs, then stop it the way `docker stop` or systemd would.
    crate::common::wait_for_running(&instance, 1).await;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = with_timeout(child.wait_with_output()).await.unwrap();
    assert_eq!(output.status.code(), Some(2));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        json["message"].as_str().unwrap().contains("cancelled"),
        "{json}"
    );
    sandbox.assert_nothing_left().await;
}

/// `file-agent bench` stopped by SIGTERM half-way, while a server it runs in its own process
/// keeps a warm pool (the traces' part), removes every container it started: none carries one
/// of its instances' labels once it has exited, and it exits 130.
#[tokio::test]
async fn a_bench_stopped_by_sigterm_leaves_none_of_its_containers() {
    use tokio::io::AsyncBufReadExt as _;
    // Each part of a bench takes well under a minute on a quiet machine.
    const PART_MAX: Duration = Duration::from_secs(400);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"))
        .args(["bench", "--runs", "1", "--pairs", "0", "--throughput", "0"])
        .args(["--no-mcp", "--no-receipts", "--no-trail"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = String::new();
    let mut next_line = async || {
        let line = tokio::time::timeout(PART_MAX, stderr.next_line())
            .await
            .unwrap_or_else(|_| panic!("the bench said nothing more in {PART_MAX:?}:\n{said}"))
            .unwrap();
        let line = line.unwrap_or_else(|| panic!("the bench ended early:\n{said}"));
        said.push_str(&line);
        said.push('\n');
        line
    };
    // Its first line names the label its containers carry.
    let first = next_line().await;
    let instance = first
        .split("io.file-agent.instance=")
        .nth(1)
        .and_then(|rest| rest.strip_suffix('*'))
        .unwrap_or_else(|| panic!("no instance in {first:?}"))
        .to_string();
    while !next_line().await.contains("traces off and on") {}
    // The traces' server up, and its pool filling.
    let traced = format!("{instance}-traces");
    tokio::time::timeout(PART_MAX, async {
        while crate::common::containers_of_instance(&traced).await == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the traces' server started no container");
    let pid = child.id().unwrap().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let mut rest = String::new();
    while let Some(line) = with_timeout(stderr.next_line()).await.unwrap() {
        rest.push_str(&line);
        rest.push('\n');
    }
    let exit = with_timeout(child.wait()).await.unwrap();
    assert_eq!(exit.code(), Some(130), "{rest}");
    assert!(rest.contains("removed"), "{rest}");
    let left = crate::common::containers_labelled_from(&instance).await;
    assert!(left.is_empty(), "left by the bench: {left:?}\n{rest}");
}

/// `image prune` removes the tags of its repository that no container uses and keeps the one a
/// container uses. Scoped to a throw-away repository of this test's own: other servers on this
/// engine build real `file-agent-sandbox:<hash>` images at the same time, and none may go.
#[tokio::test]
async fn image_prune_removes_unused_old_images_and_keeps_used_ones() {
    let repository = format!("file-agent-prune-test-{}", std::process::id());
    let docker = |args: &[&str]| {
        let output = std::process::Command::new("docker")
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "docker {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    // Two distinct images (a label each, so two ids) from an empty root filesystem.
    let empty = tempfile::tempdir().unwrap();
    let tar = empty.path().join("empty.tar");
    let status = std::process::Command::new("tar")
        .args(["-cf", tar.to_str().unwrap(), "-T", "/dev/null"])
        .status()
        .unwrap();
    assert!(status.success());
    for tag in ["old", "busy"] {
        docker(&[
            "import",
            "--change",
            &format!("LABEL prune-test={tag}"),
            tar.to_str().unwrap(),
            &format!("{repository}:{tag}"),
        ]);
    }
    let container = docker(&["create", &format!("{repository}:busy"), "/nothing"]);
    let pruned = run_cli(&["image", "prune", "--repository", &repository], &[]).await;
    let listed = docker(&["images", "--format", "{{.Tag}}", &repository]);
    docker(&["rm", &container]);
    docker(&["rmi", &format!("{repository}:busy")]);
    assert_eq!(pruned.code, Some(0), "{} {}", pruned.stdout, pruned.stderr);
    assert!(
        pruned.stdout.contains(&format!("removed {repository}:old"))
            && pruned
                .stdout
                .contains(&format!("kept {repository}:busy: a container uses it")),
        "{}",
        pruned.stdout
    );
    assert_eq!(listed, "busy");
}

/// Issue 48: a server that listens beyond loopback with the local store, and a public URL on
/// loopback (compose's default) or a cluster-internal name (Kubernetes'), hands out links no
/// user's browser opens: serve warns at start, doctor fails naming FILE_AGENT_PUBLIC_URL.
#[tokio::test]
async fn links_users_cannot_open_are_warned_about_and_fail_doctor() {
    const TOKEN: &str = "links-token-0123456789abcdef0123456789";
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap();
    let base = [
        ("FILE_AGENT_DATA_DIR", data_dir),
        ("FILE_AGENT_ACCESS_TOKENS", TOKEN),
        ("FILE_AGENT_LISTEN", "0.0.0.0:8000"),
    ];
    let doctor = run_cli(&["doctor"], &base).await;
    assert_eq!(doctor.code, Some(1), "{}", doctor.stdout);
    assert!(
        doctor
            .stdout
            .contains("links    FAIL  download links start with http://localhost:8000")
            && doctor.stdout.contains("FILE_AGENT_PUBLIC_URL"),
        "{}",
        doctor.stdout
    );
    let mut cluster = base.to_vec();
    cluster.push((
        "FILE_AGENT_PUBLIC_URL",
        "http://file-agent.file-agent.svc:8000",
    ));
    let doctor = run_cli(&["doctor"], &cluster).await;
    assert!(
        doctor.stdout.contains("a name inside the cluster"),
        "{}",
        doctor.stdout
    );
    let mut public = base.to_vec();
    public.push(("FILE_AGENT_PUBLIC_URL", "https://files.example.com"));
    let doctor = run_cli(&["doctor"], &public).await;
    assert!(
        doctor
            .stdout
            .contains("links    ok    download links start with https://files.example.com"),
        "{}",
        doctor.stdout
    );

    let port = crate::front_door::free_port();
    let listen = format!("0.0.0.0:{port}");
    let served = crate::front_door::Served::start(
        &[
            ("FILE_AGENT_ACCESS_TOKENS", TOKEN),
            ("FILE_AGENT_LISTEN", &listen),
        ],
        None,
    )
    .await;
    let log = served.stop().await;
    assert!(
        log.contains(&format!(
            "download links start with http://localhost:{port}"
        )) && log.contains("set FILE_AGENT_PUBLIC_URL"),
        "{log}"
    );
}

/// Issue 48: a placeholder from the docs or `.env.example`, uncommented as it stands, passes
/// every length rule; as a token or secret it refuses the start, naming the variable and
/// never echoing the value.
#[tokio::test]
async fn a_placeholder_as_a_token_or_secret_refuses_the_start() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap();
    for (var, value) in [
        ("FILE_AGENT_ACCESS_TOKENS", "<openssl rand -hex 32>"),
        ("FILE_AGENT_METRICS_TOKEN", "<another random token>"),
        (
            "FILE_AGENT_OPENWEBUI_USER_JWT_SECRET",
            "<openssl rand -hex 32, set on both sides>",
        ),
        ("FILE_AGENT_ACCESS_TOKENS", "$(openssl rand -hex 32)"),
    ] {
        let serve = run_cli(
            &["serve", "--listen", "127.0.0.1:0"],
            &[("FILE_AGENT_DATA_DIR", data_dir), (var, value)],
        )
        .await;
        assert_eq!(serve.code, Some(2), "{var}={value}: {}", serve.stderr);
        assert!(
            serve.stderr.contains(var) && serve.stderr.contains("placeholder"),
            "{}",
            serve.stderr
        );
        assert!(!serve.stderr.contains(value), "{}", serve.stderr);
    }
}

/// Issue 48: `--version` says the release and the sandbox image this build makes and runs, the
/// tag `file-agent image build` gives it.
#[tokio::test]
async fn the_version_names_the_release_and_its_sandbox_image() {
    let version = run_cli(&["--version"], &[]).await;
    assert_eq!(version.code, Some(0));
    // The tests' build is unoptimised (Cargo.toml's [profile.bench]) and says so; the binary
    // and this test are one package, built alike.
    let expected = format!(
        "file-agent {} (sandbox image {}{})",
        env!("CARGO_PKG_VERSION"),
        file_agent::sandbox::image::default_tag(),
        if cfg!(debug_assertions) {
            "; unoptimised build"
        } else {
            ""
        }
    );
    assert_eq!(version.stdout.trim(), expected);
}
