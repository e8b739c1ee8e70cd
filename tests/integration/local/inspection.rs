//! The table inspection's heuristics (`sandbox-image/inspect_table/`), run as file-agent runs
//! it (the same job, through the local runner) on small tables made here: where the header is,
//! what is above it, how the file must be loaded, and the notes that keep a model from misreading
//! it. An edit of the script is tested here in seconds, without an image rebuild.

use file_agent::config::SandboxConfig;
use file_agent::sandbox::{Input, Job, Runner, Status};
use file_agent::tools::analysis::table;
use file_agent::untrusted::table as table_kind;
use tokio_util::sync::CancellationToken;

use super::LocalRunner;
use crate::common::with_timeout;

fn runner() -> LocalRunner {
    LocalRunner::new(SandboxConfig::from_lookup(|_| None).unwrap())
}

/// Runs `job`; returns its outcome and the folder its outputs went to.
async fn run(runner: &LocalRunner, job: Job) -> (file_agent::sandbox::Outcome, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let outcome = with_timeout(runner.run(job, out.path(), &CancellationToken::new()))
        .await
        .unwrap();
    (outcome, out)
}

/// The inspection of `bytes` named `name`, as the model would read it.
async fn inspect(name: &str, bytes: Vec<u8>) -> String {
    let detected = table_kind::detect(&bytes, name).unwrap();
    let job = table::inspection_job(Input::from_bytes(name, bytes), detected.kind);
    let (outcome, _out) = run(&runner(), job).await;
    assert_eq!(outcome.status, Status::Ok, "{}", outcome.stderr.text());
    outcome.stdout.text()
}

/// Asserts that `inspection` has every one of `lines` as a whole line.
fn assert_lines(inspection: &str, lines: &[&str]) {
    for line in lines {
        assert!(
            inspection.lines().any(|l| l == *line),
            "missing line {line:?} in:\n{inspection}"
        );
    }
}

#[tokio::test]
async fn title_rows_above_the_header_are_skipped_and_shown() {
    let csv = "Quarterly revenue report\n\nGenerated 2026-11-01 by finance\nRegion,Quarter,Revenue\nEast,Q1,200\nWest,Q1,150\nEast,Q2,250\nWest,Q2,100\n";
    assert_lines(
        &inspect("titles.csv", csv.into()).await,
        &[
            "- Header: line 4 (skiprows=3), below 2 title/preamble row(s) that are not part of the table.",
            "  line 1: Quarterly revenue report",
            "  line 3: Generated 2026-11-01 by finance",
            "**How to load:** `df = pd.read_csv(input_file_path, skiprows=3)`",
            "Shape: 4 rows x 3 columns (as loaded above).",
        ],
    );

    // The same table in a workbook, made with openpyxl by a job of the same runner.
    let make = Job {
        script: "from openpyxl import Workbook\nwb = Workbook()\nws = wb.active\nws.title = 'Sales'\nws.append(['Quarterly revenue report'])\nws.append([])\nws.append(['Generated 2026-11-01 by finance'])\nws.append(['Region', 'Quarter', 'Revenue'])\nfor row in [['East', 'Q1', 200], ['West', 'Q1', 150]]:\n    ws.append(row)\nwb.save('/work/out/report.xlsx')\n".into(),
        ..Job::default()
    };
    let (outcome, out) = run(&runner(), make).await;
    assert_eq!(outcome.status, Status::Ok, "{}", outcome.stderr.text());
    let workbook = std::fs::read(out.path().join("report.xlsx")).unwrap();
    let inspection = inspect("report.xlsx", workbook).await;
    assert!(
        inspection
            .contains("`df = pd.read_excel(input_file_path, sheet_name=\"Sales\", header=3)`"),
        "{inspection}"
    );
    assert!(
        inspection.contains("Quarterly revenue report"),
        "{inspection}"
    );
}

#[tokio::test]
async fn a_preamble_line_on_the_header_is_not_taken_for_it() {
    let csv = "Client: ACME,Period: Q1,,\nRegion,Product,Units,Revenue\nNorth,Widget,3,300\nSouth,Gadget,5,500\nEast,Widget,2,200\n";
    assert_lines(
        &inspect("preamble.csv", csv.into()).await,
        &[
            "- Header: line 2 (skiprows=1), below 1 title/preamble row(s) that are not part of the table.",
            "  line 1: Client: ACME | Period: Q1",
            "- Units: int64",
        ],
    );
}

#[tokio::test]
async fn years_over_numbers_are_a_header_and_rows_of_numbers_are_not() {
    let crosstab = ",2021,2022,2023\nNorth,10,12,14\nSouth,20,22,24\nEast,5,6,7\n";
    assert_lines(
        &inspect("crosstab.csv", crosstab.into()).await,
        &[
            "- Header: line 1 (the first non-blank line, pandas' default).",
            "- 2021: int64",
        ],
    );
    let values = "1,2,3\n4,5,6\n7,8,9\n10,11,12\n";
    assert_lines(
        &inspect("values.csv", values.into()).await,
        &[
            "- Header: none detected (the first rows hold values, not column names); read with header=None, so columns are numbered 0, 1, 2, ....",
            "**How to load:** `df = pd.read_csv(input_file_path, header=None)`",
            "Shape: 4 rows x 3 columns (as loaded above).",
        ],
    );
}

#[tokio::test]
async fn doubtful_headers_totals_rows_and_decimal_commas_get_notes() {
    let text_only = "code,label\nA1,Alpha\nB2,Beta\nC3,Gamma\n";
    assert_lines(
        &inspect("codes.csv", text_only.into()).await,
        &[
            "- Header: line 1 (the first non-blank line, pandas' default); the rows below it are text too, so check that these are column names.",
        ],
    );
    let totals = "region,amount\nNorth,100\nSouth,200\nTotal,300\n";
    assert_lines(
        &inspect("totals.csv", totals.into()).await,
        &[
            "- The row 1 from the end (index 2) looks like a totals row ('Total'); drop it before summing.",
        ],
    );
    let euro = "Name;Betrag;Datum\nA;1.234,56;01.02.2024\nB;99,5;15.03.2024\nC;10,00;31.12.2024\n";
    assert_lines(
        &inspect("euro.csv", euro.into()).await,
        &[
            "**How to load:** `df = pd.read_csv(input_file_path, sep=\";\", decimal=\",\", thousands=\".\", dtype={\"Datum\": str})`",
            "- Betrag: float64",
        ],
    );
}
