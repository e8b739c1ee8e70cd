//! Hostile inputs against the server itself, not the sandbox: a workbook whose one sheet holds
//! tens of millions of cells deflated to a few MB and a zip bomb that lies about its size,
//! which the server must refuse without inflating them into its own memory; download paths
//! with encoded dots, NUL or another case; a multipart file name with a path and line breaks;
//! a JSON body nested 400,000 deep; terminal escapes meant for `audit show`; a 2.4 KB PDF that
//! took lopdf to 6 GB in the server; Office outputs of 10,000 zip entries, and entries that
//! overlap to inflate one kernel thousands of times.

use serde_json::json;

use crate::common::{memory, run_cli, with_timeout};
use crate::fakes::openai::{FakeOpenAi, Reply};
use crate::mcp_server::TestServer;

/// Cells in the attack workbook's one sheet.
const ATTACK_CELLS: u64 = 24_000_000;
/// Cells in one `<row>` of it.
const ATTACK_COLUMNS: u64 = 16;
/// How much the server's peak memory may grow while it handles the attack.
const MEMORY_GROWTH_LIMIT: u64 = 256 * 1024 * 1024;

/// A zip written entry by entry from bytes already compressed (or stored), so that a test can
/// make an entry that inflates to far more than it could ever hold.
#[derive(Default)]
pub struct RawZip {
    bytes: Vec<u8>,
    central: Vec<u8>,
    count: u16,
}

/// How an entry's bytes are kept.
#[derive(Clone, Copy, PartialEq)]
pub enum Method {
    Stored,
    Deflated,
}

impl RawZip {
    /// Adds `name` with `data` as stored (already compressed when `Deflated`), declaring
    /// `crc` and `declared_size` as the inflated content's CRC-32 and size.
    pub fn add(&mut self, name: &str, method: Method, data: &[u8], crc: u32, declared_size: u32) {
        let offset = self.bytes.len() as u32;
        let method = match method {
            Method::Stored => 0u16,
            Method::Deflated => 8,
        };
        let mut fields = Vec::new();
        fields.extend_from_slice(&20u16.to_le_bytes()); // version needed
        fields.extend_from_slice(&0u16.to_le_bytes()); // flags
        fields.extend_from_slice(&method.to_le_bytes());
        fields.extend_from_slice(&0u16.to_le_bytes()); // time
        fields.extend_from_slice(&0x21u16.to_le_bytes()); // date: 1980-01-01
        fields.extend_from_slice(&crc.to_le_bytes());
        fields.extend_from_slice(&(data.len() as u32).to_le_bytes());
        fields.extend_from_slice(&declared_size.to_le_bytes());
        fields.extend_from_slice(&(name.len() as u16).to_le_bytes());
        fields.extend_from_slice(&0u16.to_le_bytes()); // extra length
        self.bytes.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        self.bytes.extend_from_slice(&fields);
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.extend_from_slice(data);

        self.central
            .extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        self.central.extend_from_slice(&20u16.to_le_bytes()); // version made by
        self.central.extend_from_slice(&fields);
        self.central.extend_from_slice(&0u16.to_le_bytes()); // comment length
        self.central.extend_from_slice(&0u16.to_le_bytes()); // disk
        self.central.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        self.central.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        self.central.extend_from_slice(&offset.to_le_bytes());
        self.central.extend_from_slice(name.as_bytes());
        self.count += 1;
    }

    /// Adds a small entry, stored, with its true CRC and size.
    pub fn add_stored(&mut self, name: &str, data: &[u8]) {
        self.add(
            name,
            Method::Stored,
            data,
            crc32fast::hash(data),
            data.len() as u32,
        );
    }

    /// The whole archive.
    pub fn finish(mut self) -> Vec<u8> {
        let offset = self.bytes.len() as u32;
        let size = self.central.len() as u32;
        self.bytes.extend_from_slice(&self.central);
        self.bytes.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        self.bytes.extend_from_slice(&0u16.to_le_bytes());
        self.bytes.extend_from_slice(&0u16.to_le_bytes());
        self.bytes.extend_from_slice(&self.count.to_le_bytes());
        self.bytes.extend_from_slice(&self.count.to_le_bytes());
        self.bytes.extend_from_slice(&size.to_le_bytes());
        self.bytes.extend_from_slice(&offset.to_le_bytes());
        self.bytes.extend_from_slice(&0u16.to_le_bytes());
        self.bytes
    }
}

/// Raw DEFLATE of `head`, then `middle` repeated `times` times, then `tail`, with the CRC-32
/// and the size of the whole, without ever holding the inflated whole: `middle` (at least
/// 32 KiB, the DEFLATE window) is compressed once after a sync flush, and since every copy
/// of it is preceded by the same window, the same compressed bytes are valid for each copy.
pub fn deflate_repeated(
    head: &[u8],
    middle: &[u8],
    times: u64,
    tail: &[u8],
) -> (Vec<u8>, u32, u64) {
    use flate2::{Compress, Compression, FlushCompress, Status};
    assert!(middle.len() >= 32 * 1024 && times >= 1);
    let mut compress = Compress::new(Compression::best(), false);
    let mut part = |input: &[u8], finish: bool| {
        let flush = if finish {
            FlushCompress::Finish
        } else {
            FlushCompress::Sync
        };
        let mut out = Vec::new();
        let start = compress.total_in();
        loop {
            out.reserve(64 * 1024);
            let consumed = (compress.total_in() - start) as usize;
            let status = compress
                .compress_vec(&input[consumed..], &mut out, flush)
                .unwrap();
            let all_in = (compress.total_in() - start) as usize == input.len();
            let flushed = if finish {
                status == Status::StreamEnd
            } else {
                out.len() < out.capacity()
            };
            if all_in && flushed {
                return out;
            }
        }
    };
    let mut first = head.to_vec();
    first.extend_from_slice(middle);
    let mut stream = part(&first, false);
    let repeated = part(middle, false);
    for _ in 1..times {
        stream.extend_from_slice(&repeated);
    }
    stream.extend_from_slice(&part(tail, true));

    let mut crc = crc32fast::Hasher::new();
    crc.update(head);
    let mut middle_crc = crc32fast::Hasher::new();
    middle_crc.update(middle);
    for _ in 0..times {
        crc.combine(&middle_crc);
    }
    crc.update(tail);
    let size = head.len() as u64 + middle.len() as u64 * times + tail.len() as u64;
    (stream, crc.finalize(), size)
}

/// The parts of a one-sheet workbook around `sheet` (already compressed).
pub fn workbook_with_sheet(sheet: &[u8], method: Method, crc: u32, declared_size: u32) -> Vec<u8> {
    let mut zip = RawZip::default();
    add_workbook_parts(&mut zip, sheet, method, crc, declared_size);
    zip.finish()
}

/// Adds the parts of a one-sheet workbook around `sheet` (already compressed) to `zip`.
fn add_workbook_parts(
    zip: &mut RawZip,
    sheet: &[u8],
    method: Method,
    crc: u32,
    declared_size: u32,
) {
    zip.add_stored(
        "[Content_Types].xml",
        br#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>"#,
    );
    zip.add_stored(
        "_rels/.rels",
        br#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>"#,
    );
    zip.add_stored(
        "xl/workbook.xml",
        br#"<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="Data" sheetId="1" r:id="rId1"/></sheets></workbook>"#,
    );
    zip.add_stored(
        "xl/_rels/workbook.xml.rels",
        br#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>"#,
    );
    zip.add(
        "xl/worksheets/sheet1.xml",
        method,
        sheet,
        crc,
        declared_size,
    );
}

/// A valid .xlsx whose one sheet has `cells` cells (rows of [`ATTACK_COLUMNS`] cells without
/// `r` attributes, which the format allows), deflated to a few MB.
pub fn attack_workbook(cells: u64) -> Vec<u8> {
    let row = format!(
        "<row>{}</row>",
        "<c><v>1</v></c>".repeat(ATTACK_COLUMNS as usize)
    );
    let rows_per_block = 256;
    let block = row.repeat(rows_per_block);
    let times = cells / (ATTACK_COLUMNS * rows_per_block as u64);
    let (sheet, crc, size) = deflate_repeated(
        br#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>"#,
        block.as_bytes(),
        times,
        b"</sheetData></worksheet>",
    );
    workbook_with_sheet(&sheet, Method::Deflated, crc, size as u32)
}

#[tokio::test]
async fn a_workbook_of_millions_of_cells_is_refused_without_inflating_it_in_the_server() {
    let workbook = attack_workbook(ATTACK_CELLS);
    eprintln!(
        "attack workbook: {} cells, {} bytes",
        ATTACK_CELLS,
        workbook.len()
    );
    assert!(workbook.len() < 8 * 1024 * 1024, "{}", workbook.len());
    let (is_error, text) = modified_as_it_is("cells.xlsx", workbook).await;
    assert!(is_error, "the attack workbook was accepted: {text}");
    assert!(
        text.contains("xl/worksheets/sheet1.xml") && text.contains("zip bomb"),
        "{text}"
    );
}

/// `modify_file` of `workbook` by a model whose script copies it unchanged; asserts the
/// server's memory stayed within [`MEMORY_GROWTH_LIMIT`] and that nothing was left.
async fn modified_as_it_is(name: &str, workbook: Vec<u8>) -> (bool, String) {
    let copy = "import shutil\nshutil.copy(input_file_path, file_path)\nprint('copied')\n";
    let llm = FakeOpenAi::start(vec![Reply::Code(copy.into()); 3]).await;
    let server = TestServer::start(&llm.env()).await;
    let id = server.upload(name, workbook).await;

    // Peak memory from here on (the test runs alone in its process under nextest; writing 5
    // to clear_refs resets the high-water mark).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = memory("VmRSS:");
    let (is_error, text) = server
        .call(
            None,
            "modify_file",
            json!({"file_id": id, "instructions": "keep it as it is"}),
        )
        .await;
    let peak = memory("VmHWM:");
    let growth = peak.saturating_sub(before);
    eprintln!(
        "server memory: {} MiB before, {} MiB peak, growth {} MiB",
        before >> 20,
        peak >> 20,
        growth >> 20
    );
    assert!(
        growth < MEMORY_GROWTH_LIMIT,
        "the server's memory grew by {} MiB",
        growth >> 20
    );
    server.assert_nothing_left().await;
    (is_error, text)
}

#[test]
fn the_attack_workbook_is_a_real_workbook() {
    use calamine::Reader;
    // Small enough to read whole: every cell is there, and the zip's CRC and sizes hold.
    let cells = 16 * 256 * 40;
    let bytes = attack_workbook(cells);
    let mut workbook = calamine::Xlsx::new(std::io::Cursor::new(bytes)).unwrap();
    let range = workbook.worksheet_range("Data").unwrap();
    assert_eq!(range.get_size(), ((cells / ATTACK_COLUMNS) as usize, 16));
    assert_eq!(range.get((100, 7)), Some(&calamine::Data::Float(1.0)));
}

#[tokio::test]
async fn a_zip_bomb_sheet_that_lies_about_its_size_is_refused() {
    // 2 GiB of blanks inside the sheet, declared as 4 KiB.
    let blanks = vec![b' '; 64 * 1024];
    let (sheet, crc, _size) = deflate_repeated(
        br#"<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>"#,
        &blanks,
        32 * 1024,
        b"</sheetData></worksheet>",
    );
    let workbook = workbook_with_sheet(&sheet, Method::Deflated, crc, 4096);
    let (is_error, text) = modified_as_it_is("bomb.xlsx", workbook).await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("sheet1.xml") && text.contains("zip bomb"),
        "{text}"
    );
}

/// Sends `request` as it is (no client normalising the path) and returns the status code.
async fn raw_status(server: &TestServer, request: &[u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = server.url.trim_start_matches("http://").to_string();
    let mut stream = with_timeout(tokio::net::TcpStream::connect(address))
        .await
        .unwrap();
    with_timeout(stream.write_all(request)).await.unwrap();
    let mut response = Vec::new();
    let _ = with_timeout(stream.read_to_end(&mut response)).await;
    let text = String::from_utf8_lossy(&response);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

#[tokio::test]
async fn download_paths_with_encoded_dots_nul_or_other_case_find_nothing() {
    let server = TestServer::start(&[]).await;
    let id = server.upload("report.csv", b"a,b\n1,2\n".to_vec()).await;
    let get = |path: String| {
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").into_bytes()
    };
    assert_eq!(
        raw_status(&server, &get(format!("/files/{id}/report.csv"))).await,
        200
    );
    let upper = id.to_ascii_uppercase();
    for path in [
        format!("/files/{id}/%2e%2e%2f%2e%2e%2fetc%2fpasswd"),
        format!("/files/{id}/..%2F..%2F..%2Fetc%2Fpasswd"),
        format!("/files/{id}/%2E%2E"),
        format!("/files/{id}/..%5c..%5cetc%5cpasswd"),
        format!("/files/{id}/%252e%252e%252fetc%252fpasswd"),
        format!("/files/%2e%2e/{id}"),
        format!("/files/{id}/report.csv%00"),
        format!("/files/{id}/report.csv%00.txt"),
        format!("/files/{id}%00/report.csv"),
        format!("/files/{upper}/report.csv"),
        format!("/files/{id}/REPORT.CSV"),
        format!("/files/{id}/.%2freport.csv"),
        format!("/files/{id}/report.csv/"),
    ] {
        let status = raw_status(&server, &get(path.clone())).await;
        assert_eq!(status, 404, "{path}");
    }
}

#[tokio::test]
async fn a_hostile_multipart_file_name_is_stored_as_a_plain_one() {
    let server = TestServer::start(&[]).await;
    let boundary = "xBOUNDARYx";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../../evil\\r\\n.csv\"\r\nContent-Type: text/csv\r\n\r\na,b\n1,2\n\r\n--{boundary}--\r\n"
    );
    let response = with_timeout(
        reqwest::Client::new()
            .post(format!("{}/files", server.url))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 201);
    let stored: serde_json::Value = response.json().await.unwrap();
    assert_eq!(stored["filename"], "evil_r_n.csv", "{stored}");
    let url = stored["url"].as_str().unwrap();
    assert!(url.ends_with("/evil_r_n.csv"), "{url}");
    // Nothing landed outside the store.
    let files = server.data_dir().join("files");
    let folders: Vec<_> = std::fs::read_dir(&files).unwrap().collect();
    assert_eq!(folders.len(), 1);
    assert!(!server.data_dir().join("evil.csv").exists());
}

#[tokio::test]
async fn the_server_survives_a_json_body_nested_400000_deep() {
    let server = TestServer::start(&[]).await;
    let depth = 400_000;
    for body in [
        format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
        format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth)),
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"run_python\",\"arguments\":{{\"code\":{}1{}}}}}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
    ] {
        let response = with_timeout(
            reqwest::Client::new()
                .post(format!("{}/mcp", server.url))
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(body)
                .send(),
        )
        .await
        .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        assert!(
            (400..500).contains(&status) || text.contains("\"error\""),
            "{status}: {text}"
        );
    }
    let health = with_timeout(reqwest::get(format!("{}/health", server.url)))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "print(6 * 7)"}))
        .await;
    assert!(!is_error && text.contains("42"), "{text}");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn audit_show_prints_no_terminal_escapes_from_a_hostile_client_or_code() {
    let server = TestServer::start(&[]).await;
    let code = "import sys\nsys.stderr.write('\\x1b[2J\\x1b]0;owned\\x07\\x9b31m')\nsys.exit(3)\n";
    let response = with_timeout(
        reqwest::Client::new()
            .post(format!("{}/mcp", server.url))
            .header("accept", "application/json, text/event-stream")
            .header("x-openwebui-user-id", "user-1")
            .json(&json!({
                "jsonrpc": "2.0", "id": "\u{1b}[31mid", "method": "tools/call",
                "params": {"name": "run_python", "arguments": {"code": code},
                           "_meta": {"io.modelcontextprotocol/clientInfo":
                                         {"name": "\u{1b}]0;title\u{7}\u{1b}[2Jevil", "version": "\u{9b}1\r\n"}}}
            }))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    server.assert_nothing_left().await;
    let file = crate::common::audit_file(server.data_dir());
    let audit = std::fs::read_to_string(&file).unwrap();
    assert!(
        audit.contains("\\u001b"),
        "the hostile values are recorded: {audit}"
    );
    let output = run_cli(&["audit", "show", file.to_str().unwrap()], &[]).await;
    assert_eq!(output.code, Some(0));
    let shown = output.stdout;
    assert!(shown.contains("evil"), "{shown}");
    let control = shown.chars().find(|c| c.is_control() && *c != '\n');
    assert_eq!(
        control, None,
        "a control character reached the terminal: {shown:?}"
    );
}

/// The parts of a one-slide presentation, each `(name, content)`.
fn deck_parts() -> Vec<(&'static str, &'static [u8])> {
    vec![
        (
            "[Content_Types].xml",
            br#"<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/><Override PartName="/ppt/presentation.xml" ContentType="application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml"/></Types>"#,
        ),
        (
            "_rels/.rels",
            br#"<Relationships><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="ppt/presentation.xml"/></Relationships>"#,
        ),
        (
            "ppt/presentation.xml",
            br#"<p:presentation xmlns:p="p" xmlns:r="r"><p:sldIdLst><p:sldId id="256" r:id="rId2"/></p:sldIdLst></p:presentation>"#,
        ),
        (
            "ppt/_rels/presentation.xml.rels",
            br#"<Relationships><Relationship Id="rId2" Type="x/slide" Target="slides/slide1.xml"/></Relationships>"#,
        ),
        ("ppt/slides/slide1.xml", br#"<p:sld xmlns:p="p"><p:cSld/></p:sld>"#),
    ]
}

/// Validates `bytes` as `file_type`, asserting it took under 2 s and grew this process's
/// peak memory by under 64 MiB; returns the verdict.
fn validated_within_bounds(
    file_type: file_agent::untrusted::filetype::FileType,
    bytes: &[u8],
) -> Result<(), String> {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = memory("VmRSS:");
    let started = std::time::Instant::now();
    let verdict = file_agent::untrusted::detect::validate(file_type, bytes);
    let (took, growth) = (started.elapsed(), memory("VmHWM:").saturating_sub(before));
    eprintln!(
        "{} bytes: {took:?}, +{} MiB: {verdict:?}",
        bytes.len(),
        growth >> 20
    );
    assert!(took < std::time::Duration::from_secs(2), "took {took:?}");
    assert!(growth < 64 * 1024 * 1024, "grew by {} MiB", growth >> 20);
    verdict
}

#[test]
fn office_outputs_of_ten_thousand_entries_are_checked_within_bounds_and_one_more_is_refused() {
    use file_agent::untrusted::filetype::FileType;
    let filler = |zip: &mut RawZip, count: usize| {
        for n in 0..count {
            zip.add_stored(&format!("ppt/media/filler{n}.bin"), b"x");
        }
    };
    for (extra, accepted) in [(10_000 - 5, true), (10_000 - 4, false)] {
        let mut zip = RawZip::default();
        for (name, content) in deck_parts() {
            zip.add_stored(name, content);
        }
        filler(&mut zip, extra);
        let verdict = validated_within_bounds(FileType::Pptx, &zip.finish());
        assert_eq!(
            verdict.is_ok(),
            accepted,
            "{} entries: {verdict:?}",
            extra + 5
        );
        if !accepted {
            let error = verdict.unwrap_err();
            assert!(
                error.contains("10000") || error.contains("10,000"),
                "{error}"
            );
        }
    }
    // A workbook with 10,001 entries too.
    let mut zip = RawZip::default();
    for n in 0..10_001 {
        zip.add_stored(&format!("xl/media/filler{n}.bin"), b"x");
    }
    assert!(validated_within_bounds(FileType::Excel, &zip.finish()).is_err());
}

#[test]
fn overlapping_entries_that_share_one_kernel_are_refused_within_bounds() {
    use file_agent::untrusted::filetype::FileType;
    // David Fifield's non-recursive zip bomb, small: entry i's compressed data is a stored
    // DEFLATE block quoting entry i+1's local header, then entry i+1's compressed data; the
    // last one's is a kernel that inflates to 1 MiB. Each entry inflates to the kernel's MiB
    // plus the headers after it, and all of them share the same bytes.
    let entries = 2_000usize;
    let kernel_size = 1024 * 1024usize;
    let kernel = {
        use std::io::Write;
        let mut encoder =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&vec![b'a'; kernel_size]).unwrap();
        encoder.finish().unwrap()
    };
    let names: Vec<String> = (0..entries)
        .map(|n| format!("xl/media/m{n:05}.bin"))
        .collect();
    let local_header = |name: &str, crc: u32, compressed: u64, size: u64| {
        let mut header = Vec::new();
        header.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        header.extend_from_slice(&20u16.to_le_bytes());
        header.extend_from_slice(&0u16.to_le_bytes());
        header.extend_from_slice(&8u16.to_le_bytes());
        header.extend_from_slice(&0u16.to_le_bytes());
        header.extend_from_slice(&0x21u16.to_le_bytes());
        header.extend_from_slice(&crc.to_le_bytes());
        header.extend_from_slice(&(compressed as u32).to_le_bytes());
        header.extend_from_slice(&(size as u32).to_le_bytes());
        header.extend_from_slice(&(name.len() as u16).to_le_bytes());
        header.extend_from_slice(&0u16.to_le_bytes());
        header.extend_from_slice(name.as_bytes());
        header
    };
    // From the last entry back: its header, compressed size, size and CRC.
    let mut headers = vec![Vec::new(); entries];
    let mut sums = vec![(0u32, 0u64, 0u64); entries];
    let mut kernel_crc = crc32fast::Hasher::new();
    kernel_crc.update(&vec![b'a'; kernel_size]);
    let (mut crc, mut compressed, mut size) =
        (kernel_crc.clone(), kernel.len() as u64, kernel_size as u64);
    for index in (0..entries).rev() {
        sums[index] = (crc.clone().finalize(), compressed, size);
        headers[index] = local_header(&names[index], sums[index].0, compressed, size);
        if index > 0 {
            let quoted = &headers[index];
            let mut next = crc32fast::Hasher::new();
            next.update(quoted);
            next.combine(&crc);
            crc = next;
            compressed += 5 + quoted.len() as u64;
            size += quoted.len() as u64;
        }
    }
    let mut zip = RawZip::default();
    let sheet = br#"<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData/></worksheet>"#;
    add_workbook_parts(
        &mut zip,
        sheet,
        Method::Stored,
        crc32fast::hash(sheet),
        sheet.len() as u32,
    );
    let bytes = &mut zip.bytes;
    let mut offsets = Vec::new();
    for (index, header) in headers.iter().enumerate() {
        if index > 0 {
            let length = header.len() as u16;
            bytes.push(0);
            bytes.extend_from_slice(&length.to_le_bytes());
            bytes.extend_from_slice(&(!length).to_le_bytes());
        }
        offsets.push(bytes.len() as u32);
        bytes.extend_from_slice(header);
    }
    bytes.extend_from_slice(&kernel);
    // A stored block's 5 bytes sit between one header and the next: entry i's data starts
    // right after its header, at those 5 bytes.
    for index in 0..entries {
        let central = &mut zip.central;
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes());
        central.extend_from_slice(&headers[index][4..30]);
        central.extend_from_slice(&0u16.to_le_bytes());
        central.extend_from_slice(&0u16.to_le_bytes());
        central.extend_from_slice(&0u16.to_le_bytes());
        central.extend_from_slice(&0u32.to_le_bytes());
        central.extend_from_slice(&offsets[index].to_le_bytes());
        central.extend_from_slice(names[index].as_bytes());
        zip.count += 1;
    }
    let bytes = zip.finish();
    // About 2 GiB inflated in total from a file of a few hundred KiB.
    assert!(bytes.len() < 1024 * 1024, "{}", bytes.len());
    let first = &sums[0];
    assert!(first.2 > kernel_size as u64);
    // Refused when the directory is read, before anything is inflated (counting every
    // entry's bytes against the 1 GiB cap took 10 s of CPU in a debug build).
    let error = validated_within_bounds(FileType::Excel, &bytes).unwrap_err();
    assert!(error.contains("overlap"), "{error}");
}

/// Python that writes to `file_path` a 2.4 KB PDF whose object stream lists ten ids at one
/// offset holding an array of a million empty arrays (the red team's file).
const REPEATED_OFFSET_PDF: &str = r#"import zlib
ids = 10
content = b"".join(b"%d 0 " % (100 + i) for i in range(ids))
first = len(content)
content += b"[" + b"[]" * 1_000_000 + b"]"
packed = zlib.compress(content, 9)
stream = b"<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>\nstream\n" % (ids, first, len(packed)) + packed + b"\nendstream"
objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
           b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>", stream]
out = b"%PDF-1.5\n"
offsets = []
for number, body in enumerate(objects, 1):
    offsets.append(len(out))
    out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
xref = len(out)
out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
for offset in offsets:
    out += b"%010d 00000 n \n" % offset
out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
open(file_path, "wb").write(out)
print(len(out), "bytes")
"#;

#[tokio::test]
async fn a_pdf_that_took_lopdf_to_six_gigabytes_is_refused_while_the_servers_memory_stays_flat() {
    let llm = FakeOpenAi::start(vec![Reply::Code(REPEATED_OFFSET_PDF.into()); 3]).await;
    let server = TestServer::start(&llm.env()).await;
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = memory("VmRSS:");
    let (is_error, text) = server
        .call(
            None,
            "generate_file",
            json!({"instructions": "a report", "file_type": "pdf"}),
        )
        .await;
    let growth = memory("VmHWM:").saturating_sub(before);
    eprintln!("server memory grew by {} MiB: {text}", growth >> 20);
    assert!(is_error, "{text}");
    assert!(text.contains("MiB of memory"), "{text}");
    assert!(
        growth < 64 * 1024 * 1024,
        "the server's memory grew by {} MiB",
        growth >> 20
    );
    server.assert_nothing_left().await;
}
