//! The real server (in process, on 127.0.0.1:0) driven over real MCP by an rmcp client, with
//! the real sandbox and image, and fakes of OpenAI and Open WebUI. Every test ends by checking
//! that no container of its own is left.

use std::collections::HashMap;
use std::io::Read;

use file_agent::config::Config;
use file_agent::tools::Tools;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::{TestSandbox, unique_instance, with_timeout};
use crate::fakes::dead_url;
use crate::fakes::openai::{FakeOpenAi, Reply};
use crate::fakes::openwebui::{ALICE, BOB, FakeOpenWebUi};

/// A running server and what it is made of.
pub struct TestServer {
    pub url: String,
    pub tools: Tools,
    shutdown: CancellationToken,
    _data: tempfile::TempDir,
}

impl TestServer {
    /// Starts the server with `env` on top of a unique instance and a fresh data folder.
    pub async fn start(env: &[(String, String)]) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), env).await
    }

    /// [`Self::start`] over the data folder `data` (a restart, when it held an earlier one's).
    pub async fn start_in(data: tempfile::TempDir, env: &[(String, String)]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(listener, data, env).await
    }

    /// [`Self::start_in`] on `listener`, bound by the test (which needed its address first:
    /// an OAuth issuer issues tokens for that address).
    pub async fn start_on(
        listener: tokio::net::TcpListener,
        data: tempfile::TempDir,
        env: &[(String, String)],
    ) -> Self {
        let address = listener.local_addr().unwrap();
        let mut vars: HashMap<String, String> = HashMap::from([
            ("SANDBOX_INSTANCE".into(), unique_instance("test", 12)),
            (
                "FILE_AGENT_DATA_DIR".into(),
                data.path().display().to_string(),
            ),
            ("FILE_AGENT_PUBLIC_URL".into(), format!("http://{address}")),
            ("FILE_AGENT_LLM_TIMEOUT".into(), "20".into()),
            // No warm pool unless a test asks for one (and drains it with assert_nothing_left):
            // a test that ends while a warm container is being launched would leave it behind.
            ("SANDBOX_WARM".into(), "0".into()),
        ]);
        vars.extend(env.iter().cloned());
        let config = Config::from_lookup(|name| vars.get(name).cloned()).unwrap();
        // PDFs are checked by a child process of the file-agent executable, not of this test.
        let tools = with_timeout(file_agent::server::build_tools(&config))
            .await
            .unwrap()
            .with_pdf_checker(env!("CARGO_BIN_EXE_file-agent").into());
        let shutdown = CancellationToken::new();
        let serve_tools = tools.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            file_agent::server::serve_http(serve_tools, &config, listener, stop)
                .await
                .unwrap();
        });
        Self {
            url: format!("http://{address}"),
            tools,
            shutdown,
            _data: data,
        }
    }

    /// Stops the server, once nothing of it is left on the engine, and gives back its data
    /// folder (to start another server over it).
    pub async fn stop(mut self) -> tempfile::TempDir {
        self.assert_nothing_left().await;
        self.shutdown.cancel();
        std::mem::replace(&mut self._data, tempfile::tempdir().unwrap())
    }

    /// The server's data folder (local store, audit trail).
    pub fn data_dir(&self) -> &std::path::Path {
        self._data.path()
    }

    /// An MCP client, sending `bearer` as its Authorization if given.
    /// A client that sends `headers` with every request (Open WebUI's user and chat ids).
    pub async fn client_with_headers(
        &self,
        headers: std::collections::HashMap<http::HeaderName, http::HeaderValue>,
    ) -> RunningService<RoleClient, ClientConfig> {
        let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", self.url))
            .custom_headers(headers);
        with_timeout(
            ClientConfig::default().serve(StreamableHttpClientTransport::from_config(config)),
        )
        .await
        .unwrap()
    }

    pub async fn client(&self, bearer: Option<&str>) -> RunningService<RoleClient, ClientConfig> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", self.url));
        if let Some(token) = bearer {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        with_timeout(ClientConfig::default().serve(transport))
            .await
            .unwrap()
    }

    /// Calls `tool` and returns (is_error, text).
    pub async fn call(&self, bearer: Option<&str>, tool: &str, args: Value) -> (bool, String) {
        let client = self.client(bearer).await;
        let result = call(&client, tool, args).await;
        let _ = client.cancel().await;
        result
    }

    /// Asserts no container of this server is left (removals may finish just after a reply),
    /// once its warm pool is drained: later calls run cold.
    pub async fn assert_nothing_left(&self) {
        let sandbox = self.tools.sandbox();
        with_timeout(sandbox.shutdown()).await;
        for _ in 0..50 {
            let left = with_timeout(sandbox.leftovers()).await.unwrap();
            if left == 0 && sandbox.live_containers() == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        panic!("containers left behind");
    }

    /// Downloads a link from the local store.
    pub async fn download(&self, url: &str) -> Vec<u8> {
        let response = with_timeout(reqwest::get(url)).await.unwrap();
        assert_eq!(response.status(), 200, "{url}");
        response.bytes().await.unwrap().to_vec()
    }

    /// Uploads to the local store, returning the file id.
    pub async fn upload(&self, name: &str, bytes: Vec<u8>) -> String {
        let body = upload_to(&self.url, name, bytes).await;
        body["id"].as_str().unwrap().to_string()
    }

    /// The lines of this server's audit trail so far (none before the file exists).
    pub fn audit_lines(&self) -> Vec<Value> {
        crate::common::audit_lines(self.data_dir())
    }
}

/// Uploads to the server at `base` (multipart to `{base}/files`), asserting 201; returns the
/// JSON reply.
pub async fn upload_to(base: &str, name: &str, bytes: Vec<u8>) -> Value {
    upload_with(base, name, bytes, &[]).await
}

/// [`upload_to`] with `headers` (the caller's credential and user: an upload is its
/// caller's, and only that caller's calls take it as an input).
pub async fn upload_with(
    base: &str,
    name: &str,
    bytes: Vec<u8>,
    headers: &[(&str, &str)],
) -> Value {
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(bytes).file_name(name.to_string()),
    );
    let mut request = reqwest::Client::new()
        .post(format!("{base}/files"))
        .multipart(form);
    for (header, value) in headers {
        request = request.header(*header, *value);
    }
    let response = with_timeout(request.send()).await.unwrap();
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub async fn call(
    client: &RunningService<RoleClient, ClientConfig>,
    tool: &str,
    args: Value,
) -> (bool, String) {
    let arguments = args.as_object().cloned().unwrap_or_default();
    let result: CallToolResult = with_timeout(
        client.call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments)),
    )
    .await
    .unwrap();
    (result.is_error == Some(true), text_of(&result))
}

/// The text items of a tool result, joined.
pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn llm_script(name: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/llm")
            .join(name),
    )
    .unwrap()
}

/// A fake model that answers with the fixture scripts `names` in turn, and a server using it.
pub async fn scripted_server(names: &[&str]) -> (FakeOpenAi, TestServer) {
    let llm = FakeOpenAi::start(
        names
            .iter()
            .map(|name| Reply::Code(llm_script(name)))
            .collect(),
    )
    .await;
    let server = TestServer::start(&llm.env()).await;
    (llm, server)
}

pub fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The URL of the first markdown link in `text`.
pub fn first_link(text: &str) -> String {
    let start = text.find("](").expect("a markdown link") + 2;
    let end = text[start..].find(')').unwrap() + start;
    text[start..end].to_string()
}

/// What `run_python` does on every backend: two uploads in and two files out
/// (`two_inputs_two_outputs.py`: the inputs' names, their total, `total.txt`), then a script that
/// fails and says why. Returns the first call's answer for the caller's own checks.
pub async fn run_python_two_files_in_and_out(server: &TestServer) -> String {
    let a = server.upload("a.csv", b"amount\n1\n2\n".to_vec()).await;
    let b = server.upload("b.csv", b"amount\n40\n".to_vec()).await;
    let code = crate::common::fixture_script("two_inputs_two_outputs.py");
    let (is_error, text) = server
        .call(
            None,
            "run_python",
            json!({"code": code, "file_ids": [a, b]}),
        )
        .await;
    assert!(!is_error, "{text}");
    assert!(text.contains("inputs: a.csv,b.csv"), "{text}");
    assert!(text.contains("total: 43"), "{text}");
    let total = text.lines().find(|l| l.contains("total.txt")).unwrap();
    assert_eq!(server.download(&first_link(total)).await, b"43");

    let (is_error, failed) = server
        .call(
            None,
            "run_python",
            json!({"code": "raise SystemExit('bad input')"}),
        )
        .await;
    assert!(is_error);
    assert!(failed.contains("bad input"), "{failed}");
    text
}

/// The file id quoted in a tool's answer.
pub fn file_id(text: &str) -> String {
    let start = text.find("file id `").expect("a file id") + "file id `".len();
    let end = text[start..].find('`').unwrap() + start;
    text[start..end].to_string()
}

pub fn xlsx_cells(bytes: &[u8], sheet: &str) -> Vec<Vec<String>> {
    use calamine::Reader;
    let mut workbook = calamine::Xlsx::new(std::io::Cursor::new(bytes.to_vec())).unwrap();
    let range = workbook.worksheet_range(sheet).unwrap();
    range
        .rows()
        .map(|row| row.iter().map(|c| c.to_string()).collect())
        .collect()
}

fn docx_text(bytes: &[u8]) -> String {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes.to_vec())).unwrap();
    let mut document = String::new();
    archive
        .by_name("word/document.xml")
        .unwrap()
        .read_to_string(&mut document)
        .unwrap();
    document
}

pub fn xlsx_fixture() -> Vec<u8> {
    // A workbook made by the real sandbox in an earlier test would do; a tiny one written by
    // the generator below keeps this test independent.
    let mut buffer = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut buffer);
        let options = zip::write::SimpleFileOptions::default();
        let parts = [
            (
                "[Content_Types].xml",
                r#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>"#,
            ),
            (
                "_rels/.rels",
                r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>"#,
            ),
            (
                "xl/workbook.xml",
                r#"<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="Sales" sheetId="1" r:id="rId1"/></sheets></workbook>"#,
            ),
            (
                "xl/_rels/workbook.xml.rels",
                r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>"#,
            ),
            (
                "xl/worksheets/sheet1.xml",
                r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>Region</t></is></c><c r="B1" t="inlineStr"><is><t>Sales</t></is></c></row><row r="2"><c r="A2" t="inlineStr"><is><t>North</t></is></c><c r="B2"><v>120</v></c></row></sheetData></worksheet>"#,
            ),
        ];
        for (name, content) in parts {
            zip.start_file(name, options).unwrap();
            std::io::Write::write_all(&mut zip, content.as_bytes()).unwrap();
        }
        zip.finish().unwrap();
    }
    buffer.into_inner()
}

const XLSX: &str = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";
const DOCX: &str = "application/vnd.openxmlformats-officedocument.wordprocessingml.document";

#[tokio::test]
async fn generate_excel_end_to_end_into_the_local_store() {
    let llm = FakeOpenAi::start(vec![Reply::Code(llm_script("excel_sales.py"))]).await;
    let server = TestServer::start(&llm.env()).await;
    let (is_error, text) = server
        .call(
            None,
            "generate_file",
            json!({"instructions": "sales by region", "file_type": "excel", "filename_hint": "Sales Q3"}),
        )
        .await;
    assert!(!is_error, "{text}");
    assert!(text.contains("attempt 1 of 3"), "{text}");
    let url = first_link(&text);
    assert!(url.starts_with(&format!("{}/files/", server.url)), "{url}");
    assert!(url.contains("Sales_Q3_") && url.ends_with(".xlsx"), "{url}");
    let cells = xlsx_cells(&server.download(&url).await, "Sales");
    assert_eq!(cells[0], vec!["Region", "Sales"]);
    assert_eq!(cells[1], vec!["North", "120"]);
    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("xlsxwriter"), "{system}");
    assert!(
        requests[0]["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("sales by region")
    );
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn generate_docx_into_open_webui_with_its_content_type_and_no_processing() {
    let llm = FakeOpenAi::start(vec![Reply::Code(llm_script("docx_report.py"))]).await;
    let owui = FakeOpenWebUi::start().await;
    let mut vars = llm.env();
    vars.extend(env(&[
        ("INTERNAL_API_URL", &owui.url),
        ("PUBLIC_DOMAIN", "https://chat.example.com"),
        ("OPENWEBUI_API_KEY", ALICE),
    ]));
    let server = TestServer::start(&vars).await;
    let (is_error, text) = server
        .call(
            None,
            "generate_file",
            json!({"instructions": "a report", "file_type": "docx"}),
        )
        .await;
    assert!(!is_error, "{text}");
    let url = first_link(&text);
    let id = file_id(&text);
    assert_eq!(
        url,
        format!("https://chat.example.com/api/v1/files/{id}/content")
    );
    let stored = owui.get(&id).unwrap();
    assert_eq!(stored.owner, ALICE);
    assert_eq!(stored.content_type, DOCX);
    assert!(stored.process_false);
    assert!(stored.filename.starts_with("output_") && stored.filename.ends_with(".docx"));
    let document = docx_text(&stored.bytes);
    assert!(document.contains("Quarterly Report"), "{document}");
    assert!(document.contains("Revenue grew by 12 percent."));
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn modify_xlsx_in_open_webui_with_the_users_own_token_keeps_the_original() {
    let llm = FakeOpenAi::start(vec![Reply::Code(llm_script("modify_excel.py"))]).await;
    let owui = FakeOpenWebUi::start().await;
    let original = xlsx_fixture();
    let id = owui.add(BOB, "Sales März.xlsx", XLSX, original.clone());
    let mut vars = llm.env();
    // The server's own key is Alice's: only forwarding Bob's token can reach Bob's file.
    vars.extend(env(&[
        ("INTERNAL_API_URL", &owui.url),
        ("OPENWEBUI_API_KEY", ALICE),
    ]));
    let server = TestServer::start(&vars).await;

    let (is_error, text) = server
        .call(
            Some(BOB),
            "modify_file",
            json!({"file_id": id, "instructions": "add a target column"}),
        )
        .await;
    assert!(!is_error, "{text}");
    let new_id = file_id(&text);
    assert_ne!(new_id, id);
    let modified = owui.get(&new_id).unwrap();
    assert_eq!(
        modified.owner, BOB,
        "stored as the user, with the user's token"
    );
    assert!(
        modified.filename.starts_with("modified_"),
        "{}",
        modified.filename
    );
    let cells = xlsx_cells(&modified.bytes, "Sales");
    assert_eq!(cells[0], vec!["Region", "Sales", "Target"]);
    assert_eq!(cells[1], vec!["North", "120", "150"]);
    assert_eq!(
        owui.get(&id).unwrap().bytes,
        original,
        "the original is untouched"
    );
    let request = llm.message(0, 1);
    assert!(request.contains("/work/in/Sales_März.xlsx"), "{request}");

    // Without Bob's token the server's key (Alice) cannot read Bob's file.
    let (is_error, text) = server
        .call(
            None,
            "modify_file",
            json!({"file_id": id, "instructions": "again"}),
        )
        .await;
    assert!(is_error);
    assert!(
        text.contains("was not found, or you may not read it"),
        "{text}"
    );
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn modify_docx_in_the_local_store_keeps_the_original() {
    let llm = FakeOpenAi::start(vec![
        Reply::Code(llm_script("docx_report.py")),
        Reply::Code(llm_script("modify_docx.py")),
    ])
    .await;
    let server = TestServer::start(&llm.env()).await;
    let (_, created) = server
        .call(
            None,
            "generate_file",
            json!({"instructions": "report", "file_type": "docx"}),
        )
        .await;
    let original_id = file_id(&created);
    let original = server.download(&first_link(&created)).await;

    let (is_error, text) = server
        .call(None, "modify_file", json!({"file_id": original_id, "instructions": "add approval", "filename_hint": "approved"}))
        .await;
    assert!(!is_error, "{text}");
    let modified = server.download(&first_link(&text)).await;
    let document = docx_text(&modified);
    assert!(document.contains("Quarterly Report") && document.contains("Approved by the board."));
    assert_eq!(server.download(&first_link(&created)).await, original);
    assert!(first_link(&text).contains("/approved_"));
    let system = llm.message(1, 0);
    assert!(
        system.contains("input_file_path"),
        "the modify prompt was used"
    );
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn run_python_with_two_inputs_and_two_outputs_needs_no_key() {
    let server = TestServer::start(&[]).await;
    let text = run_python_two_files_in_and_out(&server).await;
    let links: Vec<&str> = text.lines().filter(|l| l.starts_with("- [")).collect();
    assert_eq!(links.len(), 2, "{text}");
    let summary = links
        .iter()
        .find(|l| l.contains("charts_summary.csv"))
        .unwrap();
    assert_eq!(server.download(&first_link(summary)).await, b"total\n43\n");

    let (is_error, text) = server
        .call(
            None,
            "generate_file",
            json!({"instructions": "x", "file_type": "excel"}),
        )
        .await;
    assert!(is_error);
    assert!(text.contains("OPENAI_API_KEY"), "{text}");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn bad_arguments_and_inputs_are_clear_errors_and_leave_nothing() {
    let llm = FakeOpenAi::start(vec![]).await;
    let mut vars = llm.env();
    vars.extend(env(&[("FILE_AGENT_INPUT_MAX_MIB", "1")]));
    let server = TestServer::start(&vars).await;
    let pdf = server.upload("scan.pdf", b"%PDF-1.7\n...".to_vec()).await;
    let xls = server
        .upload(
            "old.xls",
            [0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1, 0, 0].to_vec(),
        )
        .await;
    let big = server.upload("big.csv", vec![b'x'; 1024 * 1024 - 10]).await;
    // Over the limit as an upload too.
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(vec![0u8; 2 * 1024 * 1024]).file_name("huge.bin"),
    );
    let response = reqwest::Client::new()
        .post(format!("{}/files", server.url))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);

    let cases = [
        (
            "generate_file",
            json!({"instructions": "x", "file_type": "odt"}),
            "use \"excel\", \"docx\", \"pptx\" or \"pdf\"",
        ),
        (
            "modify_file",
            json!({"file_id": "0".repeat(32), "instructions": "x"}),
            "was not found",
        ),
        (
            "modify_file",
            json!({"file_id": "../../etc/passwd", "instructions": "x"}),
            "is not a file id",
        ),
        (
            "modify_file",
            json!({"file_id": pdf, "instructions": "x"}),
            "is a PDF",
        ),
        (
            "modify_file",
            json!({"file_id": xls, "instructions": "x"}),
            "legacy Excel .xls",
        ),
        (
            "run_python",
            json!({"code": "print(1)", "file_ids": ["f".repeat(32)]}),
            "was not found",
        ),
        ("run_python", json!({"code": ""}), "code is empty"),
        (
            "generate_file",
            json!({"file_type": "excel"}),
            "instructions",
        ),
    ];
    for (tool, args, expected) in cases {
        let (is_error, text) = server.call(None, tool, args.clone()).await;
        assert!(is_error, "{tool} {args}: {text}");
        assert!(text.contains(expected), "{tool} {args}: {text}");
    }
    // A file of exactly the cap is fine; the same with the cap lowered is refused.
    let (is_error, text) = server
        .call(
            None,
            "run_python",
            json!({"code": "print(len(open(input_files[0]).read()))", "file_ids": [big]}),
        )
        .await;
    assert!(!is_error, "{text}");
    assert!(llm.requests().is_empty(), "no model call for bad input");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn oversized_inputs_are_refused_before_anything_runs() {
    let owui = FakeOpenWebUi::start().await;
    let id = owui.add(ALICE, "big.csv", "text/csv", vec![b'1'; 2 * 1024 * 1024]);
    let server = TestServer::start(&env(&[
        ("INTERNAL_API_URL", &owui.url),
        ("OPENWEBUI_API_KEY", ALICE),
        ("FILE_AGENT_INPUT_MAX_MIB", "1"),
    ]))
    .await;
    let (is_error, text) = server
        .call(
            None,
            "run_python",
            json!({"code": "print(1)", "file_ids": [id]}),
        )
        .await;
    assert!(is_error);
    assert!(text.contains("larger than the 1 MiB"), "{text}");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn a_hostile_filename_hint_becomes_a_plain_name() {
    let llm = FakeOpenAi::start(vec![Reply::Code(llm_script("excel_sales.py"))]).await;
    let server = TestServer::start(&llm.env()).await;
    let (is_error, text) = server
        .call(None, "generate_file", json!({"instructions": "x", "file_type": "excel", "filename_hint": "../../etc/passwd\u{0}\r\n<script>"}))
        .await;
    assert!(!is_error, "{text}");
    let url = first_link(&text);
    let name = url.rsplit('/').next().unwrap();
    assert!(
        name.starts_with("etc_passwd_script_") && name.ends_with(".xlsx"),
        "{name}"
    );
    server.download(&url).await;
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn open_webui_down_or_failing_is_a_clear_error() {
    let owui = FakeOpenWebUi::start().await;
    let id = owui.add(ALICE, "a.csv", "text/csv", b"amount\n1\n".to_vec());
    let dead = dead_url().await;
    let cases: [(&str, &str, u16, &str); 4] = [
        (&dead, ALICE, 0, "cannot be reached"),
        (&owui.url, "sk-wrong", 0, "refused the credential (HTTP 401"),
        (&owui.url, ALICE, 404, "was not found"),
        (&owui.url, ALICE, 500, "HTTP 500"),
    ];
    for (url, key, fail_with, expected) in cases {
        let owui_for_case = if fail_with != 0 {
            let fake = FakeOpenWebUi::start().await;
            let same = fake.add(ALICE, "a.csv", "text/csv", b"x".to_vec());
            fake.fail_with(fail_with);
            Some((fake, same))
        } else {
            None
        };
        let (base, file) = match &owui_for_case {
            Some((fake, same)) => (fake.url.clone(), same.clone()),
            None => (url.to_string(), id.clone()),
        };
        let server = TestServer::start(&env(&[
            ("INTERNAL_API_URL", &base),
            ("OPENWEBUI_API_KEY", key),
        ]))
        .await;
        let (is_error, text) = server
            .call(
                None,
                "run_python",
                json!({"code": "print(open(input_files[0]).read())", "file_ids": [file]}),
            )
            .await;
        assert!(is_error, "{expected}: {text}");
        assert!(text.contains(expected), "{expected}: {text}");
        server.assert_nothing_left().await;
    }
    // Outputs that cannot be uploaded are an error too, and the attempt's container is gone.
    let server = TestServer::start(&env(&[
        ("INTERNAL_API_URL", &owui.url),
        ("OPENWEBUI_API_KEY", "sk-wrong"),
    ]))
    .await;
    let (is_error, text) = server
        .call(
            None,
            "run_python",
            json!({"code": "open(output_dir + '/x.txt', 'w').write('x')"}),
        )
        .await;
    assert!(is_error && text.contains("HTTP 401"), "{text}");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn without_an_open_webui_credential_every_storing_tool_fails_before_any_work() {
    // A model that would answer, an Open WebUI that holds a file, but no OPENWEBUI_API_KEY
    // and a connection that forwards no user token.
    let llm = FakeOpenAi::start(vec![
        Reply::Code(llm_script("excel_sales.py")),
        Reply::Code(llm_script("excel_sales.py")),
    ])
    .await;
    let owui = FakeOpenWebUi::start().await;
    let id = owui.add(ALICE, "sales.xlsx", XLSX, xlsx_fixture());
    let mut vars = llm.env();
    vars.extend(env(&[("INTERNAL_API_URL", &owui.url)]));
    let server = TestServer::start(&vars).await;
    for (tool, args) in [
        (
            "generate_file",
            json!({"instructions": "sales", "file_type": "excel"}),
        ),
        (
            "modify_file",
            json!({"file_id": id, "instructions": "add a column"}),
        ),
        (
            "run_python",
            json!({"code": "open(output_dir + '/x.txt', 'w').write('x')"}),
        ),
        ("run_python", json!({"code": "print(1)", "file_ids": [id]})),
        (
            "analyze_file",
            json!({"file_id": id, "instructions": "total sales"}),
        ),
    ] {
        let started = std::time::Instant::now();
        let (is_error, text) = server.call(None, tool, args.clone()).await;
        assert!(is_error, "{tool} {args}: {text}");
        assert!(
            text.contains("no Open WebUI credential") && text.contains("OPENWEBUI_API_KEY"),
            "{tool} {args}: {text}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{tool} took {:?}",
            started.elapsed()
        );
    }
    assert!(llm.requests().is_empty(), "the model was asked");
    // Each call is one `refused_credential` line of the audit trail, and no container ran.
    let lines = crate::common::audit_lines(server.data_dir());
    assert_eq!(lines.len(), 5, "{lines:?}");
    for line in &lines {
        assert_eq!(line["status"], "refused_credential", "{line}");
        assert!(line["container"].is_null(), "an attempt ran: {line}");
    }
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn the_llm_down_refusing_or_answering_garbage_is_a_clear_error() {
    let dead = dead_url().await;
    let garbage = FakeOpenAi::start(vec![Reply::Garbage]).await;
    let fake = FakeOpenAi::start(vec![]).await;
    let cases = [
        (
            env(&[
                ("OPENAI_API_KEY", "sk-x"),
                ("OPENAI_BASE_URL", &format!("{dead}/v1")),
            ]),
            "cannot be reached",
        ),
        (garbage.env(), "not a usable chat completion"),
        (
            env(&[
                ("OPENAI_API_KEY", "sk-wrong"),
                ("OPENAI_BASE_URL", &fake.base_url),
                ("MODEL_NAME", "gpt-fake"),
            ]),
            "refused the key (HTTP 401)",
        ),
        (
            env(&[
                ("OPENAI_API_KEY", crate::fakes::openai::KEY),
                ("OPENAI_BASE_URL", &fake.base_url),
                ("MODEL_NAME", "no-such-model"),
            ]),
            "set MODEL_NAME",
        ),
        (fake.env(), "HTTP 500"),
    ];
    for (vars, expected) in cases {
        let server = TestServer::start(&vars).await;
        let (is_error, text) = server
            .call(
                None,
                "generate_file",
                json!({"instructions": "x", "file_type": "excel"}),
            )
            .await;
        assert!(is_error, "{expected}: {text}");
        assert!(text.contains(expected), "{expected}: {text}");
        assert!(
            !text.contains("sk-x") && !text.contains("sk-wrong"),
            "no key in errors: {text}"
        );
        server.assert_nothing_left().await;
    }
}

#[tokio::test]
async fn tools_are_listed_with_descriptions_from_prompts_and_health_tells_no_secrets() {
    let llm = FakeOpenAi::start(vec![]).await;
    let owui = FakeOpenWebUi::start().await;
    let mut vars = llm.env();
    vars.extend(env(&[
        ("INTERNAL_API_URL", &owui.url),
        ("OPENWEBUI_API_KEY", "sk-owui-secret"),
    ]));
    let server = TestServer::start(&vars).await;
    let client = server.client(None).await;
    let tools = with_timeout(client.list_all_tools()).await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "analyze_file",
            "conduct_deep_research",
            "create_tool",
            "data_analysis_tool",
            "delete_tool",
            "generate_file",
            "generate_tool",
            "list_tools",
            "modify_file",
            "run_python"
        ]
    );
    // The server lists the packages its image's manifest names (the lists' names only when the
    // image has none): the descriptions are the prompts rendered with the same manifest.
    let sandbox = TestSandbox::new(|_| {}).await;
    let image = file_agent::config::SandboxConfig::from_lookup(|_| None)
        .unwrap()
        .image;
    let prompts = match with_timeout(sandbox.image_manifest(&image)).await.unwrap() {
        Some(manifest) => {
            file_agent::prompts::Prompts::load_with(None, &manifest.prompt_text()).unwrap()
        }
        None => file_agent::prompts::Prompts::default(),
    };
    for (name, description) in [
        ("run_python", &prompts.tool_run_python),
        ("analyze_file", &prompts.tool_analyze_file),
        ("data_analysis_tool", &prompts.tool_data_analysis),
        ("conduct_deep_research", &prompts.tool_research),
    ] {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        assert_eq!(tool.description.as_deref().unwrap(), description.as_str());
    }
    // The "Conversations" backend calls data_analysis_tool with exactly these arguments.
    let data_analysis = tools
        .iter()
        .find(|t| t.name == "data_analysis_tool")
        .unwrap();
    let properties = data_analysis.input_schema["properties"]
        .as_object()
        .unwrap();
    let mut arguments: Vec<&str> = properties.keys().map(String::as_str).collect();
    arguments.sort();
    assert_eq!(arguments, ["document", "document_name", "query"]);
    let _ = client.cancel().await;

    let response = reqwest::get(format!("{}/health", server.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["image"]["present"], true);
    assert_eq!(health["storage"], "open-webui");
    assert!(
        !body.contains(crate::fakes::openai::KEY) && !body.contains("sk-owui-secret"),
        "{body}"
    );
}

#[tokio::test]
async fn only_allowed_host_names_reach_mcp() {
    let server = TestServer::start(&env(&[(
        "FILE_AGENT_ALLOWED_HOSTS",
        "file-agent,localhost",
    )]))
    .await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let send = |host: &'static str| {
        reqwest::Client::new()
            .post(format!("{}/mcp", server.url))
            .header("Host", host)
            .header("Accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
    };
    assert_eq!(send("evil.example").await.unwrap().status(), 403);
    let ok = send("file-agent").await.unwrap();
    assert_eq!(ok.status(), 200);
    let body: Value = ok.json().await.unwrap();
    assert_eq!(body["result"]["serverInfo"]["name"], "file-agent");
}

#[tokio::test]
async fn the_stdio_transport_initializes_lists_and_calls() {
    let data = tempfile::tempdir().unwrap();
    let instance = unique_instance("test", 12);
    let transport = stdio_server(data.path(), &instance);
    // Over stdio there is a real handshake: the audit trail names the client from it.
    let mut config = ClientConfig::default();
    config.client_info = rmcp::model::Implementation::new("stdio-test-client", "4.2");
    let client = with_timeout(config.serve(transport)).await.unwrap();
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "file-agent");
    let tools = with_timeout(client.list_all_tools()).await.unwrap();
    assert_eq!(tools.len(), 10);
    // Every result names the server over stdio too.
    let listed = with_timeout(client.list_tools(None)).await.unwrap();
    let named = listed
        .meta
        .as_ref()
        .and_then(|meta| meta.get("io.modelcontextprotocol/serverInfo"));
    assert_eq!(named.unwrap()["name"], "file-agent", "{listed:?}");
    let (is_error, text) = call(&client, "run_python", json!({"code": "print(6 * 7)"})).await;
    assert!(!is_error, "{text}");
    assert!(text.contains("42"), "{text}");
    let _ = client.cancel().await;
    let audit = crate::common::audit_text(data.path());
    let line: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
    assert_eq!(line["client"], "stdio-test-client/4.2", "{line}");

    assert_no_containers_of(instance).await;
}

/// `file-agent serve --stdio` over the data folder `data`, as sandbox instance `instance`,
/// with no model key and no Open WebUI: the client side of its stdio.
pub fn stdio_server(data: &std::path::Path, instance: &str) -> rmcp::transport::TokioChildProcess {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"));
    command
        .args(["serve", "--stdio"])
        .current_dir(data)
        .env("SANDBOX_INSTANCE", instance)
        .env("FILE_AGENT_DATA_DIR", data)
        .env_remove("OPENAI_API_KEY")
        .env_remove("INTERNAL_API_URL");
    let (transport, _stderr) = rmcp::transport::TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    transport
}

/// Asserts that no container of the sandbox instance `instance` is left.
pub async fn assert_no_containers_of(instance: String) {
    let sandbox = file_agent::sandbox::Sandbox::connect({
        let mut config = file_agent::config::SandboxConfig::from_lookup(|_| None).unwrap();
        config.instance = Some(instance);
        config
    })
    .await
    .unwrap();
    assert_eq!(sandbox.leftovers().await.unwrap(), 0);
}

/// Runs the official MCP Python SDK's client (`tests/sdk/python_client.py`) against the server
/// at `url`, with `args` after the endpoint, with the venv's Python that `scripts/test-python.sh`
/// made (`target/test-python`, or `FILE_AGENT_TEST_SDK_ENV`).
pub async fn python_sdk(url: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec![format!("{url}/mcp")];
    all.extend(args.iter().map(|arg| arg.to_string()));
    sdk_script("python_client.py", &all).await
}

/// Runs `tests/sdk/<script>` with `args`, with the venv's Python that `scripts/test-python.sh`
/// made (`target/test-python`, or `FILE_AGENT_TEST_SDK_ENV`), where the official MCP SDK is.
pub async fn sdk_script(
    script: &str,
    args: &[impl AsRef<std::ffi::OsStr>],
) -> std::process::Output {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = crate::common::sdk_venv();
    with_timeout(
        tokio::process::Command::new(venv.join("bin/python3"))
            .arg(root.join("tests/sdk").join(script))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn the_official_python_sdk_lists_and_calls_the_tools() {
    let server = TestServer::start(&[]).await;
    let output = python_sdk(&server.url, &["--user-id", "sdk-user", "--saved-tool"]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the MCP Python SDK client failed (is its venv there? scripts/test-python.sh makes it)\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("tools: analyze_file,conduct_deep_research,create_tool,data_analysis_tool,delete_tool,generate_file,generate_tool,list_tools,modify_file,run_python"),
        "{stdout}"
    );
    assert!(stdout.contains("result: 4"), "{stdout}");
    // A tool saved with create_tool is listed with its schema and called, as `my_add`.
    assert!(
        stdout.contains("saved tool listed: my_add properties: a,b"),
        "{stdout}"
    );
    assert!(
        stdout.contains("saved tool result: { \"sum\": 5 }"),
        "{stdout}"
    );
    server.assert_nothing_left().await;
}

/// An MCP client that keeps the progress notifications it gets.
#[derive(Clone, Default)]
pub struct ProgressRecorder {
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<rmcp::model::ProgressNotificationParam>>>,
}

impl rmcp::ClientHandler for ProgressRecorder {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.seen.lock().unwrap().push(params);
    }
}
