//! The analysis loop over the local runner: the inspection of real files (a Windows-1252 CSV
//! with semicolons, 100,000 rows, an .xls, an empty file, files that are not what their name
//! says), a failed step fixed with the inspection in the prompt, the checker and its one redo,
//! a redo that breaks down, and the step limit.

use file_agent::storage::Caller;
use tokio_util::sync::CancellationToken;

use super::LocalTools;
use crate::analysis::{SALES_CSV, SUM_BY_REGION, code, inspection_message, pass, text};
use crate::fakes::openai::{FakeOpenAi, Reply};

fn fail(feedback: &str) -> Reply {
    Reply::Text(serde_json::json!({"verdict": "fail", "feedback": feedback}).to_string())
}

/// Asks `question` about the sales table, the fake model answering `replies`; returns the
/// model (to read what it was sent) and the answer, which must not be an error.
async fn analyze_sales(replies: Vec<Reply>, question: &str) -> (FakeOpenAi, String) {
    let llm = FakeOpenAi::start(replies).await;
    let local = LocalTools::start(&llm, &[]);
    let answer = local
        .analyze("sales.csv", SALES_CSV.as_bytes().to_vec(), question)
        .await;
    (llm, answer)
}

#[tokio::test]
async fn a_windows_1252_csv_with_semicolons_is_read_as_such() {
    let llm = FakeOpenAi::start(vec![
        code(
            "import pandas as pd\ndf = pd.read_csv(input_file_path, encoding='cp1252', sep=';', decimal=',')\nprint(df.loc[df['Stadt'] == 'Köln', 'Umsatz'].sum())\n",
        ),
        text("ANALYSIS_COMPLETE\nKöln: 1234.5 €."),
        pass(),
    ])
    .await;
    let local = LocalTools::start(&llm, &[]);
    // "Köln" and "€" in Windows-1252: ö = F6, € = 80; decimal commas.
    let mut csv = b"Stadt;Umsatz;W\xe4hrung\n".to_vec();
    csv.extend_from_slice(b"K\xf6ln;1234,5;\x80\nM\xfcnchen;99,5;\x80\nD\xfcsseldorf;10,0;\x80\n");
    let answer = local.analyze("umsatz.csv", csv, "Umsatz in Köln?").await;
    let first = inspection_message(&llm);
    assert!(first.contains("cp1252"), "{first}");
    assert!(first.contains("sep=\";\""), "{first}");
    assert!(first.contains("Köln"), "{first}");
    assert!(answer.contains("1234.5"), "{answer}");
}

#[tokio::test]
async fn a_hundred_thousand_rows_are_inspected_and_summed() {
    let llm = FakeOpenAi::start(vec![
        code("import pandas as pd\ndf = pd.read_csv(input_file_path)\nprint('rows', len(df), 'sum', df['value'].sum())\n"),
        text("ANALYSIS_COMPLETE\n100,000 rows; the values sum to 4,999,950,000."),
        pass(),
    ])
    .await;
    let local = LocalTools::start(&llm, &[]);
    let mut csv = String::from("id,group,value\n");
    for i in 0..100_000u64 {
        csv.push_str(&format!("{i},g{},{}\n", i % 7, i * 10 / 10));
    }
    let answer = local
        .analyze("big.csv", csv.into_bytes(), "Sum of value?")
        .await;
    let first = inspection_message(&llm);
    assert!(
        first.contains("100000") || first.contains("100,000"),
        "{first}"
    );
    assert!(answer.contains("rows 100000 sum 4999950000"), "{answer}");
}

#[tokio::test]
async fn a_failed_step_is_fixed_with_the_inspection_in_the_prompt() {
    let (llm, answer) = analyze_sales(
        vec![
        code("import pandas as pd\ndf = pd.read_csv(input_file_path)\nprint(df['Amount'].sum())\n"),
        code("import warnings\nimport pandas as pd\ndf = pd.read_csv(input_file_path)\nwarnings.warn('this API changes', FutureWarning)\nwarnings.warn('amounts look like cents', UserWarning)\nprint(df['amount'].sum())\n"),
        text("ANALYSIS_COMPLETE\nThe total is 600."),
        pass(),
    ],
        "Total amount?",
    )
    .await;
    let fix = llm.last_messages()[1].clone();
    assert!(fix.contains("KeyError: 'Amount'"), "{fix}");
    assert!(fix.contains("Attempt 1 of 3"), "{fix}");
    assert!(
        fix.contains("pd.read_csv(input_file_path"),
        "the inspection is missing: {fix}"
    );
    assert!(answer.contains("attempt 2"), "{answer}");
    assert!(
        answer.contains("Attempt 1 failed: `KeyError: 'Amount'`"),
        "{answer}"
    );
    // A meaningful warning stays in the output; deprecation noise does not.
    assert!(
        answer.contains("UserWarning: amounts look like cents"),
        "{answer}"
    );
    assert!(
        !answer.contains("FutureWarning: this API changes"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_failed_review_leads_to_one_redo_that_passes() {
    let (llm, answer) = analyze_sales(
        vec![
        code(
            "import pandas as pd\ndf = pd.read_csv(input_file_path)\nprint(df['amount'].mean())\n",
        ),
        text("ANALYSIS_COMPLETE\nThe total is 200."),
        fail("The question asks for the total; the code printed the mean."),
        code("import pandas as pd\ndf = pd.read_csv(input_file_path)\nprint(df['amount'].sum())\n"),
        text("ANALYSIS_COMPLETE\nThe total is 600."),
        pass(),
    ],
        "Total amount?",
    )
    .await;
    let redo = llm.last_messages()[3].clone();
    assert!(redo.contains("printed the mean"), "{redo}");
    let results = answer.split("## Quality Assurance").next().unwrap();
    assert!(
        results.contains("The total is 600.") && !results.contains("200"),
        "{answer}"
    );
    for part in [
        "**Checker verdict: passed after correction**",
        "First review: failed: The question asks for the total",
        "Second review: passed",
        "### The first pass, before the checker's correction",
        "> The total is 200.",
    ] {
        assert!(answer.contains(part), "missing {part:?} in:\n{answer}");
    }
}

#[tokio::test]
async fn a_redo_that_breaks_down_is_recorded_and_the_first_result_kept_with_a_caveat() {
    let broken = "raise RuntimeError('still broken')\n";
    let (_llm, answer) = analyze_sales(
        vec![
            code(SUM_BY_REGION),
            text("ANALYSIS_COMPLETE\nThe total is 600."),
            fail("Also report the product split."),
            code(broken),
            code(broken),
            code(broken),
        ],
        "Total amount?",
    )
    .await;
    for part in [
        "The total is 600.",
        "**Checker verdict: accepted with caveats**",
        "A redo was attempted and failed: step 1 of the redo failed 3 times",
        "still broken",
        "which the checker did not pass",
    ] {
        assert!(answer.contains(part), "missing {part:?} in:\n{answer}");
    }
}

#[tokio::test]
async fn the_step_limit_ends_the_loop_and_says_so() {
    let step = "import pandas as pd\nprint(len(pd.read_csv(input_file_path)))\n";
    let (llm, answer) = analyze_sales(
        vec![
            code(step),
            code(step),
            code(step),
            text("ANALYSIS_COMPLETE\nThere are 3 rows."),
            text("The analysis looks right to me."),
        ],
        "How many rows?",
    )
    .await;
    assert!(
        llm.last_messages()[3].contains("last step allowed"),
        "{:?}",
        llm.last_messages()
    );
    for part in [
        "There are 3 rows.",
        "the step limit (3) was reached",
        "Steps: 3 of at most 3",
        // A checker reply that is not the agreed JSON is no verdict, not a pass.
        "**Checker verdict: accepted with caveats**",
        "no verdict (the checker's reply is not the agreed JSON",
    ] {
        assert!(answer.contains(part), "missing {part:?} in:\n{answer}");
    }
}

#[tokio::test]
async fn empty_and_misnamed_files_get_clear_errors_or_a_note() {
    let llm = FakeOpenAi::start(vec![
        code("import pandas as pd\nprint(pd.read_excel(input_file_path).shape)\n"),
        text("ANALYSIS_COMPLETE\n2 rows."),
        pass(),
    ])
    .await;
    let local = LocalTools::start(&llm, &[]);
    for (name, bytes, words) in [
        ("empty.csv", Vec::new(), "is empty"),
        (
            "data.csv",
            b"%PDF-1.7\n%\xe2\xe3\n1 0 obj\n".to_vec(),
            "is a PDF",
        ),
        (
            "junk.csv",
            vec![0x00, 0xff, 0x13, 0x37, 0x00, 0x42],
            "binary data",
        ),
    ] {
        let id = local.upload(name, bytes).await;
        let answer = local.analyze_id(&id, "Summarise").await.unwrap_err();
        let answer = answer.to_string();
        assert!(answer.contains(words), "{name}: {answer}");
    }
    // An .xlsx that calls itself .csv is read as the workbook it is, with a note.
    let made = local
        .tools
        .run_python(
            "import pandas as pd\npd.DataFrame({'a': [1, 2]}).to_excel('/work/out/table.xlsx', index=False)\n",
            &[],
            &file_agent::tools::SessionArgs::default(),
            &Caller::new(file_agent::owner::Owner::local()),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    let workbook = local.linked_file(&made.text).await;
    let answer = local.analyze("table.csv", workbook, "Shape?").await;
    assert!(answer.contains("(2, 1)"), "the workbook was read: {answer}");
    let first = inspection_message(&llm);
    assert!(
        first.contains("named \"table.csv\", but its content is a Excel workbook"),
        "{first}"
    );
    assert_eq!(
        llm.requests().len(),
        3,
        "the refused files never reached the model"
    );
}

#[tokio::test]
async fn a_legacy_xls_is_inspected_and_read() {
    let llm = FakeOpenAi::start(vec![
        code("import pandas as pd\nprint(pd.read_excel(input_file_path).to_string())\n"),
        text("ANALYSIS_COMPLETE\nTwo cities."),
        pass(),
    ])
    .await;
    let local = LocalTools::start(&llm, &[]);
    let xls = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tables/cities.xls"),
    )
    .unwrap();
    let answer = local.analyze("cities.xls", xls, "Which cities?").await;
    let first = inspection_message(&llm);
    assert!(first.contains("pd.read_excel(input_file_path"), "{first}");
    assert!(first.contains("Lyon"), "{first}");
    assert!(answer.contains("Two cities."), "{answer}");
    assert!(
        answer.contains("Graz") && answer.contains("298479"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_step_that_fails_every_attempt_is_one_clear_error() {
    let broken = "import pandas as pd\nprint(pd.read_csv(input_file_path)['nope'].sum())\n";
    let llm = FakeOpenAi::start(vec![code(broken), code(broken), code(broken)]).await;
    let local = LocalTools::start(&llm, &[]);
    let id = local
        .upload("sales.csv", SALES_CSV.as_bytes().to_vec())
        .await;
    let answer = local.analyze_id(&id, "Sum of nope?").await.unwrap_err();
    let answer = answer.to_string();
    assert!(
        answer.contains("no valid analysis after 3 attempts"),
        "{answer}"
    );
    assert!(answer.contains("step 1 failed 3 times"), "{answer}");
    assert!(answer.contains("KeyError: 'nope'"), "{answer}");
    // No checker was asked about a result that does not exist.
    assert_eq!(llm.requests().len(), 3);
}
