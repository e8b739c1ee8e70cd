//! PowerPoint and PDF files, and the change report of `modify_file` on hostile originals,
//! through the real server, sandbox and image, with the fake model (the exact reports and the
//! retry of an unchanged copy are in the fast tier, `local::files`). What file-agent made is read back by readers that
//! file-agent does not use: the slides' XML read here, the PDF by poppler's `pdftotext` and
//! `pdfinfo` (installed by `scripts/test-setup.sh`).

use std::io::{Read, Write};

use serde_json::json;

use crate::mcp_server::{TestServer, file_id, first_link, scripted_server, xlsx_fixture};

/// The text of each slide of a deck, in the presentation's order, read from its XML parts.
fn slide_texts(deck: &[u8]) -> Vec<String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(deck.to_vec())).unwrap();
    let mut read = |name: &str| {
        let mut text = String::new();
        archive
            .by_name(name)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        text
    };
    let presentation = read("ppt/presentation.xml");
    let relations = read("ppt/_rels/presentation.xml.rels");
    let ids: Vec<&str> = presentation
        .split("<p:sldId ")
        .skip(1)
        .map(|tag| between(tag, "r:id=\"", "\""))
        .collect();
    ids.iter()
        .map(|id| {
            let relation = relations
                .split("<Relationship ")
                .find(|r| r.contains(&format!("Id=\"{id}\"")))
                .unwrap();
            let target = between(relation, "Target=\"", "\"");
            let slide = read(&format!("ppt/{}", target.trim_start_matches("/ppt/")));
            slide
                .split("<a:t>")
                .skip(1)
                .map(|run| run.split("</a:t>").next().unwrap())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text.find(start).unwrap() + start.len();
    let to = text[from..].find(end).unwrap() + from;
    &text[from..to]
}

/// Runs a poppler tool on `pdf` and returns its stdout.
fn poppler(tool: &str, pdf: &[u8]) -> String {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(pdf).unwrap();
    let mut command = std::process::Command::new(tool);
    command.arg(file.path());
    if tool == "pdftotext" {
        command.arg("-");
    }
    let output = command.output().unwrap_or_else(|e| {
        panic!("{tool} (poppler-utils, installed by scripts/test-setup.sh): {e}")
    });
    assert!(output.status.success(), "{tool} failed: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn a_deck_and_a_pdf_are_made_checked_and_read_back() {
    let (llm, server) =
        scripted_server(&["pptx_deck.py", "writes_text_as_pdf.py", "pdf_report.py"]).await;

    let (is_error, text) = server
        .call(
            None,
            "generate_file",
            json!({"instructions": "a sales deck", "file_type": "pptx", "filename_hint": "deck"}),
        )
        .await;
    assert!(!is_error, "{text}");
    eprintln!("generate_file (pptx) answered:\n{text}");
    assert!(
        text.starts_with("PowerPoint presentation created"),
        "{text}"
    );
    let url = first_link(&text);
    assert!(url.contains("/deck_") && url.ends_with(".pptx"), "{url}");
    let slides = slide_texts(&server.download(&url).await);
    assert_eq!(slides.len(), 3, "{slides:?}");
    assert!(slides[0].contains("Q3 Sales Review"), "{slides:?}");
    assert!(slides[1].contains("Revenue up 12 percent"), "{slides:?}");
    assert!(slides[2].contains("Sales by Region"), "{slides:?}");
    let system = llm.message(0, 0);
    assert!(system.contains("python-pptx"), "{system}");

    // A file that starts like a PDF but is not one goes back to the model.
    let (is_error, text) = server
        .call(
            None,
            "generate_file",
            json!({"instructions": "the report as a PDF", "file_type": "pdf"}),
        )
        .await;
    assert!(!is_error, "{text}");
    eprintln!("generate_file (pdf) answered:\n{text}");
    assert!(
        text.contains("PDF document created") && text.contains("attempt 2 of 3"),
        "{text}"
    );
    let retry = llm.message(2, 3);
    assert!(retry.contains("not a valid PDF document"), "{retry}");
    assert!(llm.message(1, 0).contains("reportlab"));
    let pdf = server.download(&first_link(&text)).await;
    let words = poppler("pdftotext", &pdf);
    assert!(
        words.contains("Quarterly Report") && words.contains("Outlook"),
        "{words}"
    );
    assert!(words.contains("North") && words.contains("120"), "{words}");
    let info = poppler("pdfinfo", &pdf);
    assert!(
        info.lines()
            .any(|l| l.starts_with("Pages:") && l.ends_with(" 2")),
        "{info}"
    );
    server.assert_nothing_left().await;
}

/// Calls `modify_file` on `id` and returns the answer's change report (from "**Changes**").
async fn modify(server: &TestServer, id: &str) -> (String, String) {
    let (is_error, text) = server
        .call(
            None,
            "modify_file",
            json!({"file_id": id, "instructions": "change it"}),
        )
        .await;
    assert!(!is_error, "{text}");
    eprintln!("modify_file answered:\n{text}");
    let report = text[text.find("**Changes**").expect("a change report")..].to_string();
    (text, report)
}

/// A workbook of `rows` x `columns` formula cells, each `=A1+1`, written here.
fn formula_workbook(rows: usize, columns: usize) -> Vec<u8> {
    let column = |mut index: usize| {
        let mut name = String::new();
        loop {
            name.insert(0, (b'A' + (index % 26) as u8) as char);
            if index < 26 {
                return name;
            }
            index = index / 26 - 1;
        }
    };
    let names: Vec<String> = (0..columns).map(column).collect();
    let mut sheet = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>"#,
    );
    for row in 1..=rows {
        sheet.push_str(&format!("<row r=\"{row}\">"));
        for name in &names {
            sheet.push_str(&format!("<c r=\"{name}{row}\"><f>A1+1</f></c>"));
        }
        sheet.push_str("</row>");
    }
    sheet.push_str("</sheetData></worksheet>");
    let template = xlsx_fixture();
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(template)).unwrap();
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index).unwrap();
        let name = entry.name().unwrap().to_string();
        let mut content = Vec::new();
        entry.read_to_end(&mut content).unwrap();
        out.start_file(&name, options).unwrap();
        if name == "xl/worksheets/sheet1.xml" {
            out.write_all(sheet.as_bytes()).unwrap();
        } else {
            out.write_all(&content).unwrap();
        }
    }
    out.finish().unwrap().into_inner()
}

#[tokio::test]
async fn a_workbook_of_a_million_formulas_is_compared_within_the_sandbox_limits() {
    let (_llm, server) = scripted_server(&["replaces_workbook.py"]).await;
    let workbook = server
        .upload("huge.xlsx", formula_workbook(1000, 1000))
        .await;
    let started = std::time::Instant::now();
    let (_, report) = modify(&server, &workbook).await;
    // The one sheet at the same position under another name is a rename; every formula of
    // the original is counted, streamed row by row inside the container's memory limit.
    assert!(
        report.contains("- sheet `Sales` renamed to `Summary`\n")
            && report.contains("1,000,000 cells changed (first 5: `Summary`!A1: `=A1+1` -> `Cells in the original: 1,000,000`;")
            && report.contains("rows 1,000 -> 1; columns 1,000 -> 1"),
        "{report}"
    );
    eprintln!(
        "million-formula comparison: {:?}; {report}",
        started.elapsed()
    );
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn a_deck_with_a_huge_picture_is_compared_within_the_sandbox_limits() {
    let (_llm, server) = scripted_server(&["retitles_slide.py"]).await;
    let (is_error, made) = server
        .call(
            None,
            "run_python",
            json!({"code": crate::common::fixture_script("huge_picture_deck.py")}),
        )
        .await;
    assert!(!is_error, "{made}");
    let (_, report) = modify(&server, &file_id(&made)).await;
    assert!(report.contains("changed: slide 1 `Renamed`"), "{report}");
    server.assert_nothing_left().await;
}
