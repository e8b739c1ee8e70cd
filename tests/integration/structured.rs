//! Typed results as a client author meets them: the official MCP Python SDK
//! (`tests/sdk/structured_client.py`) lists an output schema and an icon for every built-in
//! tool, calls each tool (the model-backed ones against the fake OpenAI) and validates every
//! `structuredContent` against its tool's schema with `jsonschema`, over Streamable HTTP and
//! over stdio.

use serde_json::{Value, json};

use crate::analysis::{SALES_CSV, SUM_BY_REGION, code, document_server, pass, text};
use crate::common::unique_instance;
use crate::fakes::openai::{FakeOpenAi, Poll, Reply};
use crate::mcp_server::{
    TestServer, assert_no_containers_of, env, llm_script, sdk_script, upload_with,
};

/// The structured content the client printed for `tool` (the last call of it).
fn structured(stdout: &str, tool: &str) -> Value {
    let prefix = format!("structured {tool}: ");
    let line = stdout
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no structured content of {tool}:\n{stdout}"));
    serde_json::from_str(line).unwrap()
}

/// Runs the client with `args`; its stdout, after asserting it succeeded.
async fn client(args: &[String]) -> String {
    let output = sdk_script("structured_client.py", args).await;
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the SDK client failed (is its venv there? scripts/test-python.sh makes it)\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

#[tokio::test]
async fn the_python_sdk_validates_every_tools_structured_content_against_its_output_schema() {
    let analysis = [
        code(SUM_BY_REGION),
        text("ANALYSIS_COMPLETE\nNorth sold **400** and South **200**."),
        pass(),
    ];
    let mut replies = vec![
        Reply::Code(llm_script("excel_sales.py")),
        Reply::Code(llm_script("modify_excel.py")),
    ];
    replies.extend(analysis.iter().cloned());
    replies.extend(analysis.iter().cloned());
    let llm = FakeOpenAi::with_replies_and_research(replies, vec![Poll::Completed]).await;
    let mut vars = llm.env();
    vars.extend(env(&[
        ("FILE_AGENT_URL_ALLOWED_NETWORKS", "127.0.0.0/8"),
        ("FILE_AGENT_RESEARCH_POLL", "0.05"),
        ("DEEP_RESEARCH_MODEL", "o4-mini-deep-research"),
    ]));
    let server = TestServer::start(&vars).await;
    let upload = upload_with(
        &server.url,
        "sales.csv",
        SALES_CSV.as_bytes().to_vec(),
        &[("X-OpenWebUI-User-Id", "sdk-user")],
    )
    .await;
    let csv = upload["id"].as_str().unwrap().to_string();
    let documents = document_server("/sales.csv").await;
    let calls = [
        json!(["generate_file", {"instructions": "Sales by region", "file_type": "excel"}]),
        json!(["modify_file", {"file_id": "{uri}", "instructions": "Add a target column"}]),
        json!(["analyze_file", {"file_id": csv, "instructions": "Sales by region?"}]),
        json!(["data_analysis_tool", {"query": "Sales by region?", "document": format!("{documents}/sales.csv")}]),
        json!(["conduct_deep_research", {"instructions": "When was async/await stabilised in Rust?"}]),
    ];
    let mut args = vec![
        format!("{}/mcp", server.url),
        "--user-id".into(),
        "sdk-user".into(),
    ];
    for call in calls {
        args.push("--call".into());
        args.push(format!("{}={}", call[0].as_str().unwrap(), call[1]));
    }
    let stdout = client(&args).await;

    // Every built-in tool, and the saved tool with its declared schema, lists an output schema.
    assert!(
        stdout.contains("schemas: analyze_file,conduct_deep_research,create_tool,data_analysis_tool,delete_tool,generate_file,generate_tool,list_tools,modify_file,run_python\n"),
        "{stdout}"
    );
    assert!(stdout.contains(",my_add,"), "{stdout}");
    let python = structured(&stdout, "run_python");
    assert_eq!(
        (python["stdout"].clone(), python["exit_code"].clone()),
        (json!("4\n"), json!(0))
    );
    assert_eq!(python["files"][0]["name"], "n.txt", "{python}");
    // sha256("4")
    assert_eq!(
        python["files"][0]["sha256"],
        "4b227777d4dd1fc61c6f884f48641d02b4d121d3fd328cb08b5531fcacdabf8a"
    );
    assert_eq!(structured(&stdout, "my_add"), json!({"sum": 5}));
    assert_eq!(
        structured(&stdout, "create_tool")["example_result"],
        json!({"sum": 3})
    );
    assert_eq!(structured(&stdout, "delete_tool")["name"], "my_add");
    let generated = structured(&stdout, "generate_file");
    assert!(
        generated["files"][0]["uri"]
            .as_str()
            .unwrap()
            .starts_with("file-agent://files/")
    );
    let modified = structured(&stdout, "modify_file");
    assert_eq!(modified["changes"]["kind"], "xlsx", "{modified}");
    let analysis = structured(&stdout, "analyze_file");
    assert_eq!(analysis["verdict"], "passed", "{analysis}");
    assert!(
        analysis["steps"][0]["output"]
            .as_str()
            .unwrap()
            .contains("400")
    );
    let data = structured(&stdout, "data_analysis_tool");
    assert!(data["query_code"].as_str().unwrap().starts_with("# Step 1"));
    let research = structured(&stdout, "conduct_deep_research");
    assert_eq!(
        research["sources"][1]["url"], "https://www.rust-lang.org/",
        "{research}"
    );
    server.assert_nothing_left().await;
}

#[tokio::test]
async fn over_stdio_the_python_sdk_gets_schemas_icons_and_structured_content() {
    let data = tempfile::tempdir().unwrap();
    let instance = unique_instance("structured", 12);
    let args: Vec<String> = vec![
        "--stdio".into(),
        "env".into(),
        format!("SANDBOX_INSTANCE={instance}"),
        format!("FILE_AGENT_DATA_DIR={}", data.path().display()),
        env!("CARGO_BIN_EXE_file-agent").into(),
        "serve".into(),
        "--stdio".into(),
    ];
    let stdout = client(&args).await;
    assert!(stdout.contains("schemas: "), "{stdout}");
    let python = structured(&stdout, "run_python");
    assert_eq!(python["stdout"], "4\n", "{python}");
    assert_no_containers_of(instance).await;
}
