//! The bench's sessions case (issue 62): what a session adds to a `run_python` call. One server
//! in this process with one warm container; its client names a user (Open WebUI's header, which
//! a loopback server without access tokens takes as the caller), since a session needs an
//! owner. Each pair below is timed in alternating order within a round, from a settled pool,
//! so both calls of a round see the same load:
//!
//! - the same short call without a session, and in a session that keeps no names;
//! - a short call in a session that keeps a DataFrame of about [`DATAFRAME_MIB`] MiB of
//!   float64, beside the same short call without a session (what keeping it adds). Then, once,
//!   the same call rebuilding that DataFrame from the workbook it came from, which the sandbox
//!   writes once (xlsxwriter) and which a script without a session must read on every call
//!   (pandas over openpyxl): over ten million cells, minutes on two cores, so one sample. The
//!   session's DataFrame is made from the same seeded numbers (reading the workbook a second
//!   time would only add minutes): the same shape, dtypes and size.

use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::mcp::McpServer;
use super::owned::Owned;

/// The DataFrame kept: about this many MiB of float64 (`df.memory_usage(deep=True)`).
const DATAFRAME_MIB: usize = 100;
/// Its columns: an Excel sheet holds at most 1,048,576 rows.
const COLUMNS: usize = 13;
/// The user the bench's client names.
const USER: &str = "bench";
/// Seconds a call may run: reading a workbook of ten million cells takes long on two cores.
const SCRIPT_TIMEOUT_SECS: u64 = 900;
/// Each container's memory: openpyxl holds every cell as a Python object while pandas reads.
const MEMORY_MIB: u64 = 3072;
/// `/work/out`'s size: xlsxwriter keeps the sheet's XML there until the workbook is closed.
const OUTPUT_MAX_MIB: u64 = 1024;

/// The DataFrame's rows.
const ROWS: usize = DATAFRAME_MIB * 1024 * 1024 / 8 / COLUMNS;

/// The lines that make the DataFrame's numbers, seeded: the workbook's and the session's are the
/// same.
fn numbers() -> String {
    format!(
        "import numpy as np\nvalues = np.random.default_rng(62).random(({ROWS}, {COLUMNS})).round(3)"
    )
}

/// The short call of the first pair.
const SHORT: &str = "print('session')";
/// What the DataFrame's calls print (its rows and a sum): the same with and without a session.
const SUMMARY: &str = "print(len(df), round(float(df['c0'].sum()), 3))";

/// What the sessions case measured, one sample per round of each.
#[derive(Debug, Default)]
pub(super) struct SessionsCost {
    /// The short call without a session.
    pub plain: Vec<Duration>,
    /// The same call in a session that keeps no names.
    pub empty: Vec<Duration>,
    /// The summary in a session that keeps the DataFrame.
    pub kept: Vec<Duration>,
    /// The same summary rebuilding the DataFrame from its workbook (one sample).
    pub rebuilt: Duration,
    /// The DataFrame's size, as pandas counts it.
    pub dataframe_bytes: u64,
    /// The session's state holding it.
    pub state_bytes: u64,
    /// The workbook's size.
    pub workbook_bytes: u64,
    /// How long writing the workbook took (once).
    pub workbook_written: Duration,
}

/// `rounds` rounds of each pair (after one of each that is not counted).
pub(super) async fn measure(
    owned: &Owned,
    instance: &str,
    rounds: usize,
) -> anyhow::Result<SessionsCost> {
    eprintln!(
        "file-agent bench: sessions: run_python without and with a session, and a {DATAFRAME_MIB} MiB DataFrame kept against rebuilt from its workbook"
    );
    let settings = [
        ("SCRIPT_TIMEOUT", SCRIPT_TIMEOUT_SECS.to_string()),
        ("SANDBOX_MEMORY_MIB", MEMORY_MIB.to_string()),
        ("SANDBOX_OUTPUT_MAX_MIB", OUTPUT_MAX_MIB.to_string()),
        ("FILE_AGENT_INPUT_MAX_MIB", "1024".to_string()),
        ("FILE_AGENT_SESSIONS", "true".to_string()),
    ];
    let name = format!("{instance}-sessions");
    let server = McpServer::start_as(owned, &name, 1, &settings, Some(USER)).await?;
    let mut cost = SessionsCost::default();
    let workbook = write_workbook(&server, &mut cost).await?;
    let numbers = numbers();
    let keep = format!(
        "import pandas as pd\n{numbers}\ndf = pd.DataFrame(values, columns=[f'c{{i}}' for i in range({COLUMNS})])\n\
         del values\nprint(int(df.memory_usage(deep=True).sum()))\n{SUMMARY}"
    );
    let (_, result) = timed(&server, call(&keep, Some("bench-dataframe"))).await?;
    cost.dataframe_bytes = first_number(&result);
    cost.state_bytes = state_bytes(&result)?;
    for round in 0..=rounds {
        let mut pair = [(Some("bench-empty"), SHORT), (None, SHORT)];
        if round % 2 == 1 {
            pair.reverse();
        }
        let mut short = (Duration::ZERO, Duration::ZERO);
        for (session, code) in pair {
            let (took, _) = timed(&server, call(code, session)).await?;
            match session {
                Some(_) => short.1 = took,
                None => short.0 = took,
            }
        }
        let kept = timed(&server, call(SUMMARY, Some("bench-dataframe")))
            .await?
            .0;
        if round > 0 {
            cost.plain.push(short.0);
            cost.empty.push(short.1);
            cost.kept.push(kept);
        }
    }
    let rebuild = format!("import pandas as pd\ndf = pd.read_excel(input_file_path)\n{SUMMARY}");
    cost.rebuilt = timed(&server, with_file(&rebuild, &workbook, None))
        .await?
        .0;
    server.stop().await;
    Ok(cost)
}

/// Writes the workbook in the sandbox; its resource URI, to pass back as an input.
async fn write_workbook(server: &McpServer, cost: &mut SessionsCost) -> anyhow::Result<String> {
    let numbers = numbers();
    let script = format!(
        "import xlsxwriter\n{numbers}\n\
         book = xlsxwriter.Workbook('/work/out/sales.xlsx', {{'constant_memory': True, 'tmpdir': '/work/out'}})\n\
         sheet = book.add_worksheet()\n\
         sheet.write_row(0, 0, [f'c{{i}}' for i in range({COLUMNS})])\n\
         for row, numbers in enumerate(values.tolist(), start=1):\n    sheet.write_row(row, 0, numbers)\n\
         book.close()\nprint('written')"
    );
    let (took, result) = timed(server, call(&script, None)).await?;
    cost.workbook_written = took;
    let file = result
        .structured_content
        .as_ref()
        .and_then(|data| data["files"].get(0).cloned())
        .context("the workbook call stored no file")?;
    cost.workbook_bytes = file["bytes"].as_u64().unwrap_or_default();
    file["uri"]
        .as_str()
        .map(str::to_string)
        .context("the stored workbook has no URI")
}

/// The arguments of a call of `code`, in `session` if one.
fn call(code: &str, session: Option<&str>) -> Value {
    let mut arguments = json!({ "code": code });
    if let Some(session) = session {
        arguments["session"] = json!(session);
    }
    arguments
}

/// [`call`], with the workbook as its input.
fn with_file(code: &str, workbook: &str, session: Option<&str>) -> Value {
    let mut arguments = call(code, session);
    arguments["file_ids"] = json!([workbook]);
    arguments
}

/// One call from a settled pool.
async fn timed(
    server: &McpServer,
    arguments: Value,
) -> anyhow::Result<(Duration, rmcp::model::CallToolResult)> {
    server.settle().await;
    server.call_python_with(arguments).await
}

/// The first whole number the call's stdout prints.
fn first_number(result: &rmcp::model::CallToolResult) -> u64 {
    let data = result.structured_content.clone().unwrap_or_default();
    data["stdout"]
        .as_str()
        .unwrap_or_default()
        .split_whitespace()
        .find_map(|word| word.parse().ok())
        .unwrap_or_default()
}

/// The size of the state the session kept, as the result says.
fn state_bytes(result: &rmcp::model::CallToolResult) -> anyhow::Result<u64> {
    let session = result
        .structured_content
        .as_ref()
        .map(|data| data["session"].clone())
        .unwrap_or_default();
    if session["kept"] != true {
        bail!("the bench's session kept no state: {session}");
    }
    Ok(session["state_bytes"].as_u64().unwrap_or_default())
}

/// Prints the figures: medians, and what a session adds.
pub(super) fn print(cost: &SessionsCost) {
    let median = |values: &[Duration]| {
        let mut sorted = values.to_vec();
        sorted.sort();
        sorted.get(sorted.len() / 2).copied().unwrap_or_default()
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    let (plain, empty) = (median(&cost.plain), median(&cost.empty));
    let (kept, rebuilt) = (median(&cost.kept), cost.rebuilt);
    println!(
        "\nsessions (run_python over MCP, warm, {} rounds, p50 ms)",
        cost.plain.len()
    );
    println!(
        "{:<46}{:>10.1}",
        "a short call without a session",
        ms(plain)
    );
    println!(
        "{:<46}{:>10.1}",
        "the same call in a session keeping no names",
        ms(empty)
    );
    println!(
        "{:<46}{:>10.1}",
        "added by the session",
        ms(empty) - ms(plain)
    );
    println!(
        "{:<46}{:>10.1}",
        format!(
            "a call keeping a {:.0} MiB DataFrame",
            mib(cost.dataframe_bytes)
        ),
        ms(kept)
    );
    println!(
        "{:<46}{:>10.1}",
        "added by its state, over the short call",
        ms(kept) - ms(plain)
    );
    println!(
        "{:<46}{:>10.1}",
        "the same call reading it from its workbook (1)",
        ms(rebuilt)
    );
    println!(
        "{:<46}{:>10.2}",
        "kept / rebuilt",
        kept.as_secs_f64() / rebuilt.as_secs_f64().max(1e-9)
    );
    println!(
        "state {:.1} MiB; workbook {:.1} MiB, written once in {:.1} s",
        mib(cost.state_bytes),
        mib(cost.workbook_bytes),
        cost.workbook_written.as_secs_f64()
    );
}
