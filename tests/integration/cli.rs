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
    with_timeout(async {
        while sandbox.leftovers().await.unwrap() == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
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
