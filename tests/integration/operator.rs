//! What an operator sees from the real binary: a server started with `--listen` (and a port
//! the OS picks) links to, and accepts, the address it really serves; its log carries no
//! terminal colour codes when stderr is not a terminal.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::{unique_instance, with_timeout};
use crate::mcp_server::upload_to;

/// The variables that would pin the address-derived settings, removed so the defaults show.
const ADDRESS_VARIABLES: [&str; 5] = [
    "FILE_AGENT_LISTEN",
    "FILE_AGENT_PUBLIC_URL",
    "FILE_AGENT_ALLOWED_HOSTS",
    "FILE_AGENT_ALLOWED_ORIGINS",
    "INTERNAL_API_URL",
];

/// `file-agent` with a fresh data folder as its working directory (so no `.env` is read) and
/// a unique instance.
fn command(data: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"));
    command
        .current_dir(data)
        .env("SANDBOX_INSTANCE", unique_instance("op", 10))
        .env("FILE_AGENT_DATA_DIR", data)
        // No warm pool: these servers end by being killed, which would leave its containers
        // stopped until a later reap (lifecycle.rs tests that path).
        .env("SANDBOX_WARM", "0")
        .env_remove("OPENAI_API_KEY")
        .env_remove("FILE_AGENT_ACCESS_TOKENS")
        .env_remove("FILE_AGENT_LOG")
        .kill_on_drop(true);
    for name in ADDRESS_VARIABLES {
        command.env_remove(name);
    }
    command
}

/// The status of a raw `initialize` POST to `url`, with an `Origin` if given.
async fn initialize(url: &str, origin: Option<&str>) -> u16 {
    let headers: &[(&str, &str)] = match origin {
        Some(origin) => &[("origin", origin)],
        None => &[],
    };
    crate::access::initialize(url, headers)
        .await
        .status()
        .as_u16()
}

#[tokio::test]
async fn links_hosts_and_origins_follow_the_address_served_with_listen_and_port_zero() {
    let data = tempfile::tempdir().unwrap();
    // 127.0.0.2 is a loopback address that is not among the built-in allowed host names, so
    // the Host check passes only if the served address made it onto the list.
    let mut child = command(data.path())
        .args(["serve", "--listen", "127.0.0.2:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = with_timeout(async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix("file-agent: MCP at ") {
                return rest.split("/mcp").next().unwrap().to_string();
            }
        }
        panic!("the server exited before it listened");
    })
    .await;
    let port = url.rsplit(':').next().unwrap();
    assert!(url.starts_with("http://127.0.0.2:") && port != "0", "{url}");
    // Keep draining stderr so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let body = upload_to(&url, "t.csv", b"a,b\n1,2\n".to_vec()).await;
    let link = body["url"].as_str().unwrap();
    assert!(
        link.starts_with(&format!("{url}/files/")),
        "the link must point at the address served ({url}): {link}"
    );
    let download = with_timeout(reqwest::get(link)).await.unwrap();
    assert_eq!(download.status(), 200);

    assert_eq!(initialize(&url, None).await, 200, "Host {url} refused");
    assert_eq!(
        initialize(&url, Some(&url)).await,
        200,
        "Origin {url} refused"
    );
    assert_eq!(
        initialize(&url, Some("http://127.0.0.3:8000")).await,
        403,
        "an unrelated origin passed"
    );
    child.start_kill().unwrap();
    let _ = with_timeout(child.wait()).await;
}

#[tokio::test]
async fn logs_written_to_a_pipe_carry_no_colour_codes() {
    let data = tempfile::tempdir().unwrap();
    // stdio serving logs at info on stderr and ends when stdin closes.
    let output = with_timeout(
        command(data.path())
            .args(["serve", "--stdio"])
            .env("FILE_AGENT_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output(),
    )
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("INFO"), "no log line at all:\n{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "terminal escape codes in a piped log:\n{stderr:?}"
    );
}
