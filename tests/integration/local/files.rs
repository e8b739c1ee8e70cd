//! `generate_file` and `modify_file` over the local runner: the retry loop (the error of a
//! failed attempt goes back to the model; three failures are one clean error), the preset
//! `file_path` that model code cannot reassign, and the change report of every modification,
//! exact for .xlsx, .docx and .pptx, with an unchanged copy sent back to the model.

use file_agent::tools::ToolError;

use super::LocalTools;
use crate::fakes::openai::{FakeOpenAi, Reply};
use crate::mcp_server::{file_id, llm_script, xlsx_cells, xlsx_fixture};

/// The fake model, answering with the fixture scripts `names` in order.
async fn scripted(names: &[&str]) -> FakeOpenAi {
    FakeOpenAi::start(
        names
            .iter()
            .map(|name| Reply::Code(llm_script(name)))
            .collect(),
    )
    .await
}

#[tokio::test]
async fn a_failed_attempt_goes_back_to_the_model_and_the_second_succeeds() {
    let llm = scripted(&["fails_zero_division.py", "excel_sales.py"]).await;
    let local = LocalTools::start(&llm, &[]);
    let text = local.generate("sales", "excel").await.unwrap().text;
    assert!(text.contains("attempt 2 of 3"), "{text}");
    assert_eq!(local.runs(), 2);
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1]["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        4,
        "system, request, first reply, error report"
    );
    assert_eq!(messages[2]["role"], "assistant");
    let report = messages[3]["content"].as_str().unwrap();
    assert!(report.contains("ZeroDivisionError"), "{report}");
    assert!(report.contains("Attempt 1 of 3"), "{report}");
    let cells = xlsx_cells(&local.linked_file(&text).await, "Sales");
    assert_eq!(cells[0][0], "Region", "{cells:?}");
}

#[tokio::test]
async fn three_failures_give_a_clean_tool_error() {
    let llm = scripted(&[
        "fails_zero_division.py",
        "writes_nothing.py",
        "writes_corrupt_xlsx.py",
    ])
    .await;
    let local = LocalTools::start(&llm, &[]);
    let error = local.generate("sales", "excel").await.unwrap_err();
    assert!(
        matches!(error, ToolError::AttemptsExhausted { attempts: 3, .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("after 3 attempts"), "{text}");
    assert!(text.contains("not a valid Excel workbook"), "{text}");
    let second_report = llm.message(2, 5);
    assert!(
        second_report.contains("wrote no file at file_path"),
        "{second_report}"
    );
}

#[tokio::test]
async fn model_code_that_reassigns_file_path_still_saves_where_asked() {
    let llm = scripted(&["reassigns_file_path.py"]).await;
    let local = LocalTools::start(&llm, &[]);
    let text = local.generate("stock", "excel").await.unwrap().text;
    assert!(text.contains("attempt 1 of 3"), "{text}");
    // What the attempt used, as run_python's answer says it (issue 47).
    assert!(
        text.contains("The attempt used ") && text.contains(" s of CPU and "),
        "{text}"
    );
    let cells = xlsx_cells(&local.linked_file(&text).await, "Stock");
    assert_eq!(cells[1], vec!["Apples", "3"]);
}

/// `modify_file` on `id`; returns the answer and its change report (from "**Changes**").
async fn modify(local: &LocalTools, id: &str) -> (String, String) {
    let text = local.modify(id, "change it").await.unwrap().text;
    let report = text[text.find("**Changes**").expect("a change report")..].to_string();
    (text, report)
}

#[tokio::test]
async fn every_modification_comes_with_the_change_file_agent_computed() {
    let llm = scripted(&[
        "modify_excel.py",
        "docx_report.py",
        "modify_docx.py",
        "pptx_deck.py",
        "modify_pptx.py",
    ])
    .await;
    let local = LocalTools::start(&llm, &[]);

    let workbook = local.upload("sales.xlsx", xlsx_fixture()).await;
    let (_, report) = modify(&local, &workbook).await;
    assert_eq!(
        report,
        "**Changes** (computed by file-agent from the original and the result):\n\
         - sheet `Sales`: 2 cells changed (`Sales`!C1: (empty) -> `Target`; `Sales`!C2: (empty) -> `150`); columns 2 -> 3\n"
    );

    let created = file_id(&local.generate("make it", "docx").await.unwrap().text);
    let (_, report) = modify(&local, &created).await;
    assert_eq!(
        report,
        "**Changes** (computed by file-agent from the original and the result):\n\
         - paragraphs: 2 -> 3 (1 added)\n\
         - added: `Approved by the board.`\n"
    );

    let created = file_id(&local.generate("make it", "pptx").await.unwrap().text);
    let (text, report) = modify(&local, &created).await;
    assert!(
        text.starts_with("PowerPoint presentation modified"),
        "{text}"
    );
    assert_eq!(
        report,
        "**Changes** (computed by file-agent from the original and the result):\n\
         - slides: 3 -> 4\n\
         - added: slide 4 `Next steps`\n\
         - changed: slide 2 `Highlights` (text)\n"
    );
    // Five model attempts and three comparisons; each report is pinned in the audit trail by
    // the hash of what the script printed.
    assert_eq!(local.runs(), 8);
    let reports: Vec<_> = local
        .audit_lines()
        .into_iter()
        .filter(|line| line["author"] == "file-agent")
        .collect();
    assert_eq!(reports.len(), 3);
    for line in reports {
        assert_eq!(line["report_sha256"].as_str().unwrap().len(), 64, "{line}");
    }
}

#[tokio::test]
async fn a_copy_saved_unchanged_goes_back_to_the_model() {
    let llm = scripted(&["saves_unchanged.py", "modify_excel.py"]).await;
    let local = LocalTools::start(&llm, &[]);
    let workbook = local.upload("sales.xlsx", xlsx_fixture()).await;
    let (text, _) = modify(&local, &workbook).await;
    assert!(text.contains("attempt 2 of 3"), "{text}");
    let retry = llm.message(1, 3);
    assert!(retry.contains("saved the file unchanged"), "{retry}");
    // The first attempt's script exited 0, but the comparison refused its copy: its audit line
    // says so (after the comparison's own line); the second attempt's is ok.
    let models: Vec<_> = local
        .audit_lines()
        .into_iter()
        .filter(|line| line["author"] == "model")
        .collect();
    assert_eq!(models.len(), 2);
    assert_eq!(models[0]["status"], "refused_output", "{}", models[0]);
    assert_eq!(models[0]["exit_code"], 0);
    let error = models[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("saved the file unchanged"), "{error}");
    assert_eq!(models[1]["status"], "ok", "{}", models[1]);
    assert!(models[1]["error"].is_null());
}

/// The model wrote a workbook three times when a presentation was asked for: the tool fails,
/// and no line of the audit trail may read `ok` for those attempts.
#[tokio::test]
async fn an_output_of_the_wrong_type_is_a_refused_attempt_in_the_audit_trail() {
    let llm = scripted(&["excel_sales.py", "excel_sales.py", "excel_sales.py"]).await;
    let local = LocalTools::start(&llm, &[]);
    let error = local.generate("a deck", "pptx").await.unwrap_err();
    assert!(
        matches!(error, ToolError::AttemptsExhausted { attempts: 3, .. }),
        "{error:?}"
    );
    let lines = local.audit_lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for line in lines {
        assert_eq!(line["status"], "refused_output", "{line}");
        assert_eq!(line["exit_code"], 0, "{line}");
        let error = line["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("not a valid PowerPoint presentation"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_key_open_webui_refuses_fails_before_any_model_request_or_attempt() {
    use crate::fakes::openwebui::{ALICE, FakeOpenWebUi};
    let llm = scripted(&["excel_sales.py", "excel_sales.py", "excel_sales.py"]).await;
    let owui = FakeOpenWebUi::start().await;
    let refused = LocalTools::start(
        &llm,
        &[
            ("INTERNAL_API_URL", &owui.url),
            ("OPENWEBUI_API_KEY", "sk-not-accepted"),
        ],
    );
    for _ in 0..2 {
        let error = refused.generate("sales", "excel").await.unwrap_err();
        assert!(
            matches!(&error, ToolError::Storage(_)) && error.to_string().contains("HTTP 401"),
            "{error}"
        );
    }
    assert!(llm.requests().is_empty(), "the model was asked");
    assert_eq!(refused.runs(), 0, "an attempt ran");
    assert_eq!(owui.session_checks(), 1, "the refusal is remembered");
    // Nothing ran, but a reviewer sees each refusal in the trail, and why.
    let lines = refused.audit_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in &lines {
        assert_eq!(line["status"], "refused_credential", "{line}");
        assert!(line["error"].as_str().unwrap().contains("401"), "{line}");
        assert!(!line.to_string().contains("sk-not-accepted"), "{line}");
    }

    // An accepted key is asked about once too, then the call does its work.
    let accepted = LocalTools::start(
        &llm,
        &[
            ("INTERNAL_API_URL", &owui.url),
            ("OPENWEBUI_API_KEY", ALICE),
        ],
    );
    let text = accepted.generate("sales", "excel").await.unwrap().text;
    assert!(text.contains("created"), "{text}");
    assert_eq!(owui.session_checks(), 2);
    assert_eq!(llm.requests().len(), 1);
}
