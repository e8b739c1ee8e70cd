//! `analyze_file` and `data_analysis_tool` through the real server, sandbox and image, with a
//! scripted fake model: the inspection of real files (title rows above a header, a
//! Windows-1252 CSV with semicolons, an .xls, 100,000 rows, an empty file, a file that is not
//! what its name says), the step loop, the checker and its redo, charts, and URL fetching
//! under the address policy.

use serde_json::{Value, json};

use crate::fakes::openai::{FakeOpenAi, Reply};
use crate::mcp_server::{TestServer, env, file_id, first_link};

pub fn code(text: &str) -> Reply {
    Reply::Code(text.to_string())
}

pub fn text(text: &str) -> Reply {
    Reply::Text(text.to_string())
}

pub fn pass() -> Reply {
    text(r#"{"verdict": "pass", "feedback": "The figures match the output."}"#)
}

/// Uploads `bytes` as `name`, asks `question` with `analyze_file`, and returns the answer,
/// which must not be an error.
async fn analyze(server: &TestServer, name: &str, bytes: Vec<u8>, question: &str) -> String {
    let id = server.upload(name, bytes).await;
    let (is_error, answer) = server
        .call(
            None,
            "analyze_file",
            json!({"file_id": id, "instructions": question}),
        )
        .await;
    assert!(!is_error, "{answer}");
    answer
}

/// The first user message of the analysis: the question and the inspection.
pub fn inspection_message(llm: &FakeOpenAi) -> String {
    llm.message(0, 1)
}

pub const SALES_CSV: &str =
    "region,product,amount\nNorth,Widget,100\nSouth,Widget,200\nNorth,Gadget,300\n";

pub const SUM_BY_REGION: &str = "import pandas as pd\ndf = pd.read_csv(input_file_path)\nprint(df.groupby('region')['amount'].sum().to_string())\nprint('total', df['amount'].sum())\n";

#[tokio::test]
async fn a_csv_question_is_answered_checked_and_explained() {
    let llm = FakeOpenAi::start(vec![
        code(SUM_BY_REGION),
        text("ANALYSIS_COMPLETE\nNorth sold **400** and South **200**; the total is **600**."),
        pass(),
    ])
    .await;
    let server = TestServer::start(&llm.env()).await;
    let answer = analyze(
        &server,
        "sales.csv",
        SALES_CSV.as_bytes().to_vec(),
        "Sales by region?",
    )
    .await;
    for part in [
        "## Analysis Results",
        "the total is **600**",
        "## Quality Assurance",
        "**Checker verdict: passed**",
        "The figures match the output.",
        "Steps: 1 of at most 3",
        "## Methodology",
        "### Inspection of `sales.csv`",
        "### Step 1",
        "groupby('region')",
        "total 600",
    ] {
        assert!(answer.contains(part), "missing {part:?} in:\n{answer}");
    }
    // The inspection opened the conversation; the checker saw the code and its output.
    let first = inspection_message(&llm);
    assert!(first.contains("Sales by region?"), "{first}");
    assert!(first.contains("pd.read_csv(input_file_path"), "{first}");
    let review = llm.last_messages()[2].clone();
    assert!(
        review.contains("total 600") && review.contains("the total is **600**"),
        "{review}"
    );
    let checker_prompt = llm.message(2, 0);
    assert!(checker_prompt.contains("\"verdict\""), "{checker_prompt}");
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn title_rows_above_the_header_are_found_and_a_chart_is_linked() {
    let llm = FakeOpenAi::start(vec![
        code(
            "import pandas as pd\nimport matplotlib.pyplot as plt\ndf = pd.read_excel(input_file_path, sheet_name='Sales', header=3)\ntotals = df.groupby('Region')['Revenue'].sum()\nprint(totals.to_string())\ntotals.plot.bar(title='Revenue by region')\nplt.savefig('revenue.png')\nplt.close()\nopen('huge.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + bytes(11 * 1024 * 1024))\n",
        ),
        text("ANALYSIS_COMPLETE\nEast leads with 450."),
        pass(),
    ])
    .await;
    let server = TestServer::start(&llm.env()).await;
    // The workbook is made by the real sandbox: a title, a blank row, a note, then the header.
    let (is_error, made) = server
        .call(
            None,
            "run_python",
            json!({"code": "from openpyxl import Workbook\nwb = Workbook()\nws = wb.active\nws.title = 'Sales'\nws.append(['Quarterly revenue report'])\nws.append([])\nws.append(['Generated 2026-11-01 by finance'])\nws.append(['Region', 'Quarter', 'Revenue'])\nfor row in [['East', 'Q1', 200], ['West', 'Q1', 150], ['East', 'Q2', 250], ['West', 'Q2', 100]]:\n    ws.append(row)\nwb.save('/work/out/report.xlsx')\n"}),
        )
        .await;
    assert!(!is_error, "{made}");
    let (is_error, answer) = server
        .call(
            None,
            "analyze_file",
            json!({"file_id": file_id(&made), "instructions": "Revenue by region, as a bar chart"}),
        )
        .await;
    assert!(!is_error, "{answer}");
    let first = inspection_message(&llm);
    assert!(first.contains("header=3"), "{first}");
    assert!(first.contains("Quarterly revenue report"), "{first}");
    assert!(answer.contains("East leads with 450."), "{answer}");
    let chart = answer
        .lines()
        .find(|line| line.starts_with("![revenue"))
        .unwrap_or_else(|| panic!("no chart in:\n{answer}"));
    let png = server.download(&first_link(chart)).await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(answer.contains("Charts: revenue"), "{answer}");
    // A "chart" past the size cap is not read into the server, nor linked.
    assert!(!answer.contains("/huge.png"), "{answer}");
    server.assert_nothing_left().await;
}

/// A file server on loopback: `/sales.csv`, `/big.csv` (2.4 MB), and `/redirect` to `target`.
pub async fn document_server(target: &str) -> String {
    use axum::response::Redirect;
    use axum::routing::get;
    let target = target.to_string();
    let app = axum::Router::new()
        .route("/sales.csv", get(|| async { SALES_CSV }))
        .route("/big.csv", get(|| async { "x,y\n1,2\n".repeat(300_000) }))
        .route(
            "/redirect",
            get(move || async move { Redirect::temporary(&target) }),
        );
    crate::fakes::spawn(app).await
}

#[tokio::test]
async fn data_analysis_tool_fetches_the_url_and_answers_in_its_json_contract() {
    let llm = FakeOpenAi::start(vec![
        code("import pandas as pd\nimport matplotlib.pyplot as plt\ndf = pd.read_csv(input_file_path)\ns = df.groupby('region')['amount'].sum()\nprint(s.to_string())\ns.plot.pie()\nplt.savefig('share.png')\n"),
        text("ANALYSIS_COMPLETE\nNorth has two thirds of the sales."),
        pass(),
    ])
    .await;
    let mut vars = llm.env();
    vars.extend(env(&[("FILE_AGENT_URL_ALLOWED_NETWORKS", "127.0.0.0/8")]));
    let server = TestServer::start(&vars).await;
    let files = document_server("/sales.csv").await;
    let (is_error, answer) = server
        .call(
            None,
            "data_analysis_tool",
            json!({"query": "Share of sales by region, as a pie chart", "document": format!("{files}/redirect?X-Amz-Signature=abc"), "document_name": "sales.csv"}),
        )
        .await;
    assert!(!is_error, "{answer}");
    let value: Value = serde_json::from_str(&answer).expect("JSON text");
    let result = value["result"].as_str().unwrap();
    assert!(
        result.starts_with("North has two thirds of the sales."),
        "{result}"
    );
    assert!(result.contains("Checker verdict: passed"), "{result}");
    assert!(
        value["query_code"]
            .as_str()
            .unwrap()
            .contains("# Step 1\nimport pandas"),
        "{value}"
    );
    use base64::Engine;
    let png = base64::engine::general_purpose::STANDARD
        .decode(value["plot_image"].as_str().expect("a plot"))
        .unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn data_analysis_tool_refuses_internal_addresses_and_redirects_to_them() {
    let llm = FakeOpenAi::start(vec![]).await;
    let files = document_server("http://169.254.169.254/latest/meta-data/iam").await;

    // By default loopback is not fetched, and the signature never shows in the error.
    let server = TestServer::start(&llm.env()).await;
    let (is_error, answer) = server
        .call(
            None,
            "data_analysis_tool",
            json!({"query": "q", "document": format!("{files}/sales.csv?X-Amz-Signature=secret123"), "document_name": "sales.csv"}),
        )
        .await;
    assert!(is_error, "{answer}");
    assert!(
        answer.contains("a loopback address") && answer.contains("FILE_AGENT_URL_ALLOWED_NETWORKS"),
        "{answer}"
    );
    assert!(!answer.contains("secret123"), "{answer}");
    drop(server);

    // Loopback allowed: the redirect to the metadata address is still refused, and so are a
    // scheme other than http(s) and a document over the size cap.
    let mut vars = llm.env();
    vars.extend(env(&[
        ("FILE_AGENT_URL_ALLOWED_NETWORKS", "127.0.0.0/8"),
        ("FILE_AGENT_INPUT_MAX_MIB", "1"),
    ]));
    let server = TestServer::start(&vars).await;
    for (document, words) in [
        (
            format!("{files}/redirect"),
            "169.254.169.254 is 169.254.169.254, a link-local address",
        ),
        ("file:///etc/passwd".to_string(), "only http and https"),
        (format!("{files}/missing.csv"), "HTTP 404"),
        (format!("{files}/big.csv"), "larger than the 1 MiB"),
    ] {
        let (is_error, answer) = server
            .call(
                None,
                "data_analysis_tool",
                json!({"query": "q", "document": document, "document_name": "x.csv"}),
            )
            .await;
        assert!(is_error, "{document}: {answer}");
        assert!(answer.contains(words), "{document}: {answer}");
    }
    drop(server);

    // With a host allow-list, another name for the same address is refused.
    let mut vars = llm.env();
    vars.extend(env(&[
        ("FILE_AGENT_URL_ALLOWED_NETWORKS", "127.0.0.0/8"),
        ("FILE_AGENT_URL_ALLOWED_HOSTS", "127.0.0.1"),
    ]));
    let server = TestServer::start(&vars).await;
    let document = files.replace("127.0.0.1", "localhost") + "/sales.csv";
    let (is_error, answer) = server
        .call(
            None,
            "data_analysis_tool",
            json!({"query": "q", "document": document, "document_name": "x.csv"}),
        )
        .await;
    assert!(
        is_error && answer.contains("not in FILE_AGENT_URL_ALLOWED_HOSTS"),
        "{answer}"
    );
    assert!(llm.requests().is_empty(), "nothing reached the model");
    server.assert_nothing_left().await;
}
