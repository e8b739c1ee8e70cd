//! Safe by default, and a front door that holds (issue 37): no code runs for a caller on
//! another machine without a credential, the data folder is the server's own, slow, idle and
//! heavy clients are bounded, untrusted text never shapes the log, and every malformed request
//! gets an error a client can read. Over real sockets, most against the real `file-agent
//! serve` process.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::with_timeout;
use crate::mcp_server::{TestServer, env};

const TOKEN: &str = "front-door-token-0123456789abcdef";

/// A real `file-agent serve` process; its stderr (the log) goes to a file.
pub struct Served {
    child: tokio::process::Child,
    pub url: String,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Starts `file-agent serve` under `sh -c 'umask 000; exec ...'` (the loosest umask a host
    /// can have) with `vars`, its data folder `data` (else one in a fresh folder), and waits
    /// for `/health`.
    pub async fn start(vars: &[(&str, &str)], data: Option<&std::path::Path>) -> Self {
        Self::start_until(vars, data, |status| status.is_success()).await
    }

    /// [`Self::start`], returning once `/health` answers at all: a server that starts
    /// unready (an audit alarm says 503).
    pub async fn start_answering(vars: &[(&str, &str)], data: Option<&std::path::Path>) -> Self {
        Self::start_until(vars, data, |_| true).await
    }

    async fn start_until(
        vars: &[(&str, &str)],
        data: Option<&std::path::Path>,
        ready: impl Fn(reqwest::StatusCode) -> bool,
    ) -> Self {
        let (child, dir, log) = Self::spawn(vars, data);
        let port = vars
            .iter()
            .find(|(name, _)| *name == "FILE_AGENT_LISTEN")
            .and_then(|(_, value)| value.rsplit(':').next())
            .unwrap()
            .to_string();
        let url = format!("http://127.0.0.1:{port}");
        let served = Self {
            child,
            url,
            log,
            _dir: dir,
        };
        let started = Instant::now();
        loop {
            if let Ok(response) = reqwest::get(format!("{}/health", served.url)).await
                && ready(response.status())
            {
                return served;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the server did not start:\n{}",
                served.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn spawn(
        vars: &[(&str, &str)],
        data: Option<&std::path::Path>,
    ) -> (tokio::process::Child, tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let data = data.map_or_else(|| dir.path().join("data"), std::path::Path::to_path_buf);
        let child = tokio::process::Command::new("sh")
            .args(["-c", "umask 000; exec \"$0\" serve"])
            .arg(env!("CARGO_BIN_EXE_file-agent"))
            .current_dir(dir.path())
            .env("FILE_AGENT_DATA_DIR", &data)
            .env("SANDBOX_WARM", "0")
            .env(
                "SANDBOX_INSTANCE",
                crate::common::unique_instance("door", 12),
            )
            .envs(vars.iter().copied())
            .stderr(std::fs::File::create(&log).unwrap())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        (child, dir, log)
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, and the wait for it to end; the log.
    pub async fn stop(self) -> String {
        self.stop_keeping().await.0
    }

    /// [`Self::stop`], keeping its folder (the data) for a look.
    pub async fn stop_keeping(mut self) -> (String, tempfile::TempDir) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let _ = with_timeout(self.child.wait()).await;
        let log = self.log();
        (log, self._dir)
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// This host's first address that is not loopback (the bridge Docker made, at least).
pub fn non_loopback_address() -> std::net::IpAddr {
    let output = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|address| address.parse::<std::net::IpAddr>().ok())
        .find(|address| !address.is_loopback() && address.is_ipv4())
        .expect("a non-loopback address on this host")
}

/// A `tools/call` of run_python, as JSON-RPC.
fn run_python(code: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
           "params": {"name": "run_python", "arguments": {"code": code}}})
}

pub async fn post_mcp(url: &str, body: Value, headers: &[(&str, &str)]) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("host", "localhost")
        .json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = with_timeout(request.send()).await.unwrap();
    let status = response.status().as_u16();
    // A refusal sent before the body was read closes the connection, and says so.
    if status == 401 {
        assert_eq!(response.headers()["connection"], "close");
    }
    (status, with_timeout(response.text()).await.unwrap())
}

#[tokio::test]
async fn only_loopback_is_open_and_beyond_it_a_credential_is_required() {
    // Beyond loopback without a credential: it does not start, and says what to set.
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let (child, _dir, log) = Served::spawn(&[("FILE_AGENT_LISTEN", &listen)], None);
    let status = with_timeout(child.wait_with_output()).await.unwrap().status;
    let log = std::fs::read_to_string(log).unwrap();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("refusing to listen on 0.0.0.0")
            && log.contains("FILE_AGENT_ACCESS_TOKENS")
            && log.contains("FILE_AGENT_OAUTH_ISSUER"),
        "{log}"
    );

    // On loopback (what the default address is), another machine cannot even connect.
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let served = Served::start(&[("FILE_AGENT_LISTEN", &listen)], None).await;
    let outside = std::net::SocketAddr::new(non_loopback_address(), port);
    assert!(
        std::net::TcpStream::connect_timeout(&outside, Duration::from_secs(2)).is_err(),
        "reached from {outside}"
    );
    served.stop().await;

    // Beyond loopback with a token: from the other address, a call with the `Host` header a
    // browser check wants but no token is refused; with the token it runs.
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let served = Served::start(
        &[
            ("FILE_AGENT_LISTEN", &listen),
            ("FILE_AGENT_ACCESS_TOKENS", TOKEN),
        ],
        None,
    )
    .await;
    let outside = format!("http://{}:{port}", non_loopback_address());
    let (status, body) = post_mcp(&outside, run_python("print('RAN', 6 * 7)"), &[]).await;
    assert_eq!(status, 401, "{body}");
    let bearer = format!("Bearer {TOKEN}");
    let (status, body) = post_mcp(
        &outside,
        run_python("print('RAN', 6 * 7)"),
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("RAN 42"), "{body}");
    served.stop().await;
}

#[tokio::test]
async fn everything_the_server_creates_is_its_own_even_under_umask_000() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let served = Served::start(&[("FILE_AGENT_LISTEN", &listen)], None).await;
    // A stored upload, an output file, a saved tool, the audit trail, the lock.
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(b"a,b\n1,2\n".to_vec()).file_name("t.csv"),
    );
    let stored = with_timeout(
        reqwest::Client::new()
            .post(format!("{}/files", served.url))
            .multipart(form)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(stored.status(), 201);
    let (status, body) = post_mcp(
        &served.url,
        run_python("open(f'{output_dir}/out.txt', 'w').write('x')"),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, dir) = served.stop_keeping().await;
    let data = dir.path().join("data");
    let mut seen = 0;
    let mut walk = vec![data.clone()];
    while let Some(path) = walk.pop() {
        let metadata = std::fs::metadata(&path).unwrap();
        let mode = metadata.permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
        seen += 1;
        if metadata.is_dir() {
            walk.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    assert!(seen >= 8, "{seen} places");

    // A data folder others can write: refused, naming the fix.
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let (child, _dir, log) = Served::spawn(&[("FILE_AGENT_LISTEN", &listen)], Some(open.path()));
    let status = with_timeout(child.wait_with_output()).await.unwrap().status;
    let log = std::fs::read_to_string(log).unwrap();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("writable by every local user") && log.contains("chmod o-w"),
        "{log}"
    );
    // One others can only read is tightened, with a warning.
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let served = Served::start(&[("FILE_AGENT_LISTEN", &listen)], Some(open.path())).await;
    let mode = std::fs::metadata(open.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o750);
    let log = served.stop().await;
    assert!(log.contains("tightened"), "{log}");
}

/// Opens `count` connections that each send half a request's headers and stop.
fn stalled_connections(address: std::net::SocketAddr, count: usize) -> Vec<std::net::TcpStream> {
    (0..count)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(address).unwrap();
            stream
                .write_all(b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nX-Half: ")
                .unwrap();
            stream
        })
        .collect()
}

/// Sends `request` on a new connection to `address` and reads the answer until the server
/// closes it (at most 5 s). Blocking: run it off the test's runtime thread.
fn exchange(address: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.write_all(request).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// Whether the server closed `stream` (a read gives end of file or a reset).
fn closed(stream: &mut std::net::TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buffer = [0u8; 512];
    match stream.read(&mut buffer) {
        Ok(0) => true,
        Ok(_) => closed(stream),
        Err(error) => !matches!(
            error.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[tokio::test]
async fn stalled_and_idle_clients_are_closed_while_real_calls_are_served() {
    let server = TestServer::start(&env(&[("FILE_AGENT_HEADER_TIMEOUT", "3")])).await;
    let address: std::net::SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    let started = Instant::now();
    let mut stalled = tokio::task::spawn_blocking(move || stalled_connections(address, 300))
        .await
        .unwrap();
    // An idle keep-alive connection: one whole request, then nothing.
    let mut idle = std::net::TcpStream::connect(address).unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    // Meanwhile the server serves.
    let health = with_timeout(reqwest::get(format!("{}/health", server.url)))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print(6 * 7)"}))
        .await;
    assert!(!is_error && text.contains("42"), "{text}");
    // All closed by the header timeout (3 s), well before 10 s.
    let (all_closed, idle_closed) = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let open = stalled
                .iter_mut()
                .map(|s| !closed(s))
                .filter(|open| *open)
                .count();
            let idle_done = closed(&mut idle);
            if (open == 0 && idle_done) || Instant::now() > deadline {
                return (open == 0, idle_done);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    })
    .await
    .unwrap();
    assert!(
        all_closed,
        "stalled connections still open after {:?}",
        started.elapsed()
    );
    assert!(idle_closed, "an idle keep-alive connection still open");
    assert!(started.elapsed() < Duration::from_secs(10));
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn past_the_connection_cap_a_client_gets_503_and_the_server_stays_up() {
    // The cap of all connections, not one address's share of it.
    let server = TestServer::start(&env(&[
        ("FILE_AGENT_MAX_CONNECTIONS", "16"),
        ("FILE_AGENT_MAX_CONNECTIONS_PER_PEER", "16"),
    ]))
    .await;
    let address: std::net::SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    let held = tokio::task::spawn_blocking(move || stalled_connections(address, 16))
        .await
        .unwrap();
    // No wait: the kernel's accept queue is first in, first out, so the server takes all
    // sixteen (connected already) before the one too many.
    // The server runs on this test's thread: block elsewhere.
    let answer = tokio::task::spawn_blocking(move || exchange(address, b""))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.contains("retry-after: 1") && answer.contains("FILE_AGENT_MAX_CONNECTIONS"));
    drop(held);
    // Once those are gone, it serves again.
    let started = Instant::now();
    loop {
        if let Ok(response) = reqwest::get(format!("{}/health", server.url)).await
            && response.status() == 200
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The peak resident memory of process `pid`, in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|line| line.starts_with("VmHWM"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .unwrap()
        * 1024
}

#[tokio::test]
async fn sixteen_uploads_at_the_size_limit_keep_memory_flat() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let served = Served::start(
        &[
            ("FILE_AGENT_LISTEN", &listen),
            ("FILE_AGENT_INPUT_MAX_MIB", "16"),
            ("FILE_AGENT_MAX_UPLOADS", "16"),
        ],
        None,
    )
    .await;
    let pid = served.child.id().unwrap();
    let before = peak_memory(pid);
    let body = vec![b'x'; 16 * 1024 * 1024];
    let uploads = (0..16).map(|n| {
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(body.clone()).file_name(format!("big-{n}.bin")),
        );
        reqwest::Client::new()
            .post(format!("{}/files", served.url))
            .multipart(form)
            .send()
    });
    for response in with_timeout(futures_util::future::join_all(uploads)).await {
        assert_eq!(response.unwrap().status(), 201);
    }
    let growth = peak_memory(pid).saturating_sub(before);
    eprintln!(
        "16 parallel uploads of 16 MiB: peak RSS {} MiB before, grew {} MiB",
        before >> 20,
        growth >> 20
    );
    // 256 MiB arrived; held whole it would be at least that.
    assert!(growth < 64 << 20, "grew {} MiB", growth >> 20);
    served.stop().await;
}

#[tokio::test]
async fn untrusted_text_never_shapes_the_log_in_either_format() {
    const SCRIPT: &str = "import sys\nsys.stderr.write('x\\n2026-01-01T00:00:00.000000Z  WARN file_agent::server: FORGED-LINE \\x1b[31mred\\x1b[0m \\u202eevil\\n')\nraise SystemExit(3)";
    for format in ["text", "json"] {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let served = Served::start(
            &[
                ("FILE_AGENT_LISTEN", &listen),
                ("FILE_AGENT_LOG_FORMAT", format),
            ],
            None,
        )
        .await;
        let (status, body) = post_mcp(&served.url, run_python(SCRIPT), &[]).await;
        assert_eq!(status, 200, "{body}");
        let log = served.stop().await;
        assert!(
            log.contains("FORGED-LINE"),
            "{format}: the stderr is logged:\n{log}"
        );
        assert!(
            !log.contains('\u{1b}'),
            "{format}: an escape sequence reached the log"
        );
        // (In JSON it stays inside a string, which no reader takes for structure.)
        assert!(
            format == "json" || !log.contains('\u{202e}'),
            "{format}: a bidi override reached the log"
        );
        for line in log.lines() {
            assert!(
                !line.starts_with("2026-01-01"),
                "{format}: a forged record is a line of its own: {line}"
            );
            if format == "json" {
                assert!(
                    serde_json::from_str::<Value>(line).is_ok(),
                    "not one JSON record: {line}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_debug_log_holds_no_presigned_signature() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let served = Served::start(
        &[("FILE_AGENT_LISTEN", &listen), ("FILE_AGENT_LOG", "debug")],
        None,
    )
    .await;
    let url = "https://bucket.example.com/data.csv?X-Amz-Signature=SIGNATURE0123456789&X-Amz-Credential=CRED";
    let (status, body) = post_mcp(
        &served.url,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "data_analysis_tool",
                          "arguments": {"query": "rows?", "document": url}}}),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let log = served.stop().await;
    assert!(log.contains("data_analysis_tool"), "{log}");
    assert!(!log.contains("SIGNATURE0123456789"), "{log}");
    assert!(!log.contains("X-Amz-Credential=CRED"), "{log}");
}

/// The status, the `Content-Type`, `nosniff` and the JSON-RPC error code of a raw POST /mcp.
async fn raw_mcp(server: &TestServer, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/mcp", server.url))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = with_timeout(request.send()).await.unwrap();
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["x-content-type-options"],
        "nosniff",
        "{body}"
    );
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    let text = with_timeout(response.text()).await.unwrap();
    assert!(
        content_type.starts_with("application/json"),
        "{body}: {content_type} {text}"
    );
    (status, serde_json::from_str(&text).unwrap())
}

#[tokio::test]
async fn every_malformed_request_gets_an_error_a_client_can_read() {
    let server = TestServer::start(&[]).await;
    let cases: [(&str, u16, i64, &str); 6] = [
        (
            "{\"jsonrpc\": \"2.0\", \"id\": 1, \"meth",
            400,
            -32700,
            "not JSON",
        ),
        ("[1, 2]", 400, -32600, "batches"),
        (
            "{\"id\": 1, \"method\": \"tools/list\"}",
            400,
            -32600,
            "jsonrpc",
        ),
        (
            "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": null}",
            200,
            -32602,
            "params",
        ),
        (
            "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": {\"name\": null}}",
            200,
            -32602,
            "params.name",
        ),
        (
            "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": {\"name\": \"run_python\", \"arguments\": [1]}}",
            200,
            -32602,
            "params.arguments",
        ),
    ];
    for (body, status, code, says) in cases {
        let (got, answer) = raw_mcp(&server, body, &[]).await;
        assert_eq!(got, status, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(says),
            "{body}: {answer}"
        );
    }
    // An argument of the wrong type inside well-formed `arguments`: a tool error naming it, as
    // MCP asks (input validation errors are tool execution errors, for the model to correct).
    let (status, answer) = raw_mcp(
        &server,
        "{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": \"tools/call\", \"params\": {\"name\": \"run_python\", \"arguments\": {\"code\": 5}}}",
        &[],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(answer.to_string().contains("expected a string"), "{answer}");
    // Not JSON at all, with another content type: the same parse error.
    let response = with_timeout(
        reqwest::Client::new()
            .post(format!("{}/mcp", server.url))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "text/plain")
            .body("hello")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 400);
    let answer: Value = response.json().await.unwrap();
    assert!(
        answer["error"]["code"] == -32700 || answer["error"]["code"] == -32600,
        "{answer}"
    );

    // Two Host headers, or two Authorization headers: 400, never judged on the first.
    for (name, first, second) in [
        ("host", "localhost", "evil.example"),
        ("authorization", "Bearer a", "Bearer b"),
    ] {
        let body = "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/list\"}";
        let host = if name == "host" {
            String::new()
        } else {
            "Host: localhost\r\n".to_string()
        };
        let request = format!(
            "POST /mcp HTTP/1.1\r\n{host}{name}: {first}\r\n{name}: {second}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let address = server.url.trim_start_matches("http://").parse().unwrap();
        let answer = tokio::task::spawn_blocking(move || exchange(address, request.as_bytes()))
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 400"), "{name}: {answer}");
        assert!(answer.contains("more than one"), "{name}: {answer}");
    }

    // Uploads: each error names what is wrong; GET /files is 405.
    let client = reqwest::Client::new();
    let files = format!("{}/files", server.url);
    let get = with_timeout(client.get(&files).send()).await.unwrap();
    assert_eq!(get.status(), 405);
    let not_multipart = with_timeout(client.post(&files).body("x").send())
        .await
        .unwrap();
    assert_eq!(not_multipart.status(), 400);
    assert!(
        not_multipart
            .text()
            .await
            .unwrap()
            .contains("not a multipart form")
    );
    let two = reqwest::multipart::Form::new()
        .part(
            "file",
            reqwest::multipart::Part::bytes(b"1".to_vec()).file_name("a.csv"),
        )
        .part(
            "file",
            reqwest::multipart::Part::bytes(b"2".to_vec()).file_name("b.csv"),
        );
    let response = with_timeout(client.post(&files).multipart(two).send())
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("more than one part named")
    );
}
