//! Typed results, the MCP way: each built-in tool's `outputSchema` (JSON Schema 2020-12, for
//! the serialised form) derived with schemars from the type in `tools::results` that its data
//! is, and a successful result's `structuredContent`, that data serialised, beside the text.
//! A saved tool has the output schema its author declared, and its return value as structured
//! content; one that declared none has neither.
//!
//! The text of a result is not touched here: Open WebUI (0.12) reads only text, and gets what
//! it always got. An error has no structured content: it is `isError` text, as before.

use std::sync::Arc;

use rmcp::handler::server::common::schema_for_output;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::Value;

use crate::tools::catalog::Tool;
use crate::tools::results::{
    AnalysisResult, Data, DataAnalysisResult, DeletedToolResult, FileResult, PythonResult,
    ResearchResult, SavedToolResult, ToolListResult,
};

/// The output schema of `tool`: the schema of the type its data is.
pub fn output_schema(tool: Tool) -> Arc<JsonObject> {
    match tool {
        Tool::GenerateFile | Tool::ModifyFile => schema_for_output::<FileResult>(),
        Tool::RunPython => schema_for_output::<PythonResult>(),
        Tool::AnalyzeFile => schema_for_output::<AnalysisResult>(),
        Tool::DataAnalysis => schema_for_output::<DataAnalysisResult>(),
        Tool::DeepResearch => schema_for_output::<ResearchResult>(),
        Tool::CreateTool | Tool::GenerateTool => schema_for_output::<SavedToolResult>(),
        Tool::ListTools => schema_for_output::<ToolListResult>(),
        Tool::DeleteTool => schema_for_output::<DeletedToolResult>(),
    }
}

/// Gives each route of `router` that [`Tool`] knows its output schema, its icon and its
/// annotations ([`super::annotations`]).
pub fn annotate<S>(router: &mut ToolRouter<S>) {
    for tool in Tool::ALL {
        if let Some(route) = router.map.get_mut(tool.name()) {
            route.attr.output_schema = Some(output_schema(tool));
            route.attr.icons = Some(super::icons::of(tool));
            route.attr.annotations = Some(super::annotations::of(tool));
        }
    }
}

/// The `tools/list` entry of a saved tool: its output schema when it declared one, the saved
/// tools' icon and their annotations.
pub fn saved_tool(mut listed: rmcp::model::Tool, output: Option<JsonObject>) -> rmcp::model::Tool {
    listed.output_schema = output.map(Arc::new);
    listed.icons = Some(super::icons::of_saved_tool());
    listed.annotations = Some(super::annotations::of_saved_tool());
    listed
}

/// `result` with `data` as its structured content (nothing for none).
pub fn with_data(mut result: CallToolResult, data: Option<Data>) -> CallToolResult {
    result.structured_content = data.map(|data| {
        serde_json::to_value(data).unwrap_or_else(|error| {
            // The types serialise plain fields only; a failure would be a bug, not input.
            tracing::error!(%error, "a result's data did not serialise");
            Value::Null
        })
    });
    result
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::results::*;

    fn file() -> ResultFile {
        ResultFile {
            name: "report-3f2a.xlsx".into(),
            uri: "file-agent://files/0b5e7c4d9a1f4e2b8c3d6a7f1e2d3c4b/report-3f2a.xlsx".into(),
            download_url: "http://127.0.0.1:8000/files/0b5e7c4d9a1f4e2b8c3d6a7f1e2d3c4b".into(),
            mime_type: "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet".into(),
            bytes: 5120,
            sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        }
    }

    fn change_report() -> ChangeReport {
        ChangeReport::parse(
            r#"{"kind": "xlsx", "changed": true, "sheets_added": ["Totals"],
                "sheets": [{"name": "Q3", "cells_changed": 1,
                            "examples": [{"cell": "B7", "before": "10", "after": "12"}]}]}"#,
        )
        .unwrap()
    }

    /// An example of each tool's data, as a successful call of it returns it.
    fn example(tool: Tool) -> Data {
        match tool {
            Tool::GenerateFile => Data::File(FileResult {
                files: vec![file()],
                attempts: 1,
                changes: None,
                changes_unavailable: None,
            }),
            Tool::ModifyFile => Data::File(FileResult {
                files: vec![file()],
                attempts: 2,
                changes: Some(change_report()),
                changes_unavailable: None,
            }),
            Tool::RunPython => Data::Python(PythonResult {
                stdout: "4\n".into(),
                stderr: String::new(),
                exit_code: 0,
                files: vec![file()],
                skipped: vec!["/work/out/link: a symbolic link".into()],
                session: None,
            }),
            Tool::AnalyzeFile => Data::Analysis(AnalysisResult {
                answer: "Revenue grew 12%.".into(),
                verdict: Verdict::PassedAfterCorrection,
                reviews: vec![
                    Review {
                        verdict: ReviewVerdict::Fail,
                        note: "Q4 is missing".into(),
                    },
                    Review {
                        verdict: ReviewVerdict::Pass,
                        note: String::new(),
                    },
                ],
                steps: vec![AnalysisStep {
                    code: "print(df.sum())".into(),
                    output: "revenue 1200\n".into(),
                    attempts: 1,
                }],
                step_limit_reached: false,
                charts: vec![file().uri],
                files: vec![file()],
                attempts: 4,
            }),
            Tool::DataAnalysis => Data::DataAnalysis(DataAnalysisResult {
                result: "Revenue grew 12%.\n\n## Quality Assurance\n\n- passed".into(),
                query_code: "# Step 1\nprint(df.sum())".into(),
                plot_image: Some("iVBORw0KGgo=".into()),
            }),
            Tool::DeepResearch => Data::Research(ResearchResult {
                report: "Rust is fast [[1]](https://www.rust-lang.org/).".into(),
                sources: vec![Source {
                    title: "Rust".into(),
                    url: "https://www.rust-lang.org/".into(),
                }],
                complete: true,
                searches: 12,
                model: "o4-mini-deep-research".into(),
            }),
            Tool::CreateTool | Tool::GenerateTool => Data::SavedTool(SavedToolResult {
                name: "my_add".into(),
                version: "4be3c1a2f9d0".into(),
                revision: 1,
                action: "created".into(),
                example_arguments: json!({"a": 1, "b": 2}),
                example_result: json!({"sum": 3}),
                attempts: 1,
            }),
            Tool::ListTools => Data::ToolList(ToolListResult {
                tools: vec![SavedToolInfo {
                    name: "my_add".into(),
                    description: "Adds two integers.".into(),
                    version: "4be3c1a2f9d0".into(),
                    revision: 1,
                    author: "caller".into(),
                    model: None,
                    updated: "2026-07-28T10:00:00Z".into(),
                    input_schema: json!({"type": "object"}),
                    output_schema: Some(json!({"type": "object"})),
                }],
            }),
            Tool::DeleteTool => Data::Deleted(DeletedToolResult {
                name: "my_add".into(),
                version: "4be3c1a2f9d0".into(),
            }),
        }
    }

    fn validator(tool: Tool) -> jsonschema::Validator {
        let schema = Value::Object(output_schema(tool).as_ref().clone());
        jsonschema::draft202012::new(&schema)
            .unwrap_or_else(|error| panic!("{}: {error}\n{schema:#}", tool.name()))
    }

    #[test]
    fn each_tools_example_result_validates_against_its_output_schema() {
        for tool in Tool::ALL {
            let result = with_data(CallToolResult::success(vec![]), Some(example(tool)));
            let content = result.structured_content.unwrap();
            assert!(content.is_object(), "{}", tool.name());
            let validator = validator(tool);
            let errors: Vec<String> = validator
                .iter_errors(&content)
                .map(|e| e.to_string())
                .collect();
            assert!(
                errors.is_empty(),
                "{}: {errors:?}\n{content:#}",
                tool.name()
            );
        }
    }

    #[test]
    fn a_schema_change_that_breaks_a_result_fails() {
        // Without a required field, or with one of the wrong type, a result does not validate.
        let python = validator(Tool::RunPython);
        let mut content = serde_json::to_value(example(Tool::RunPython)).unwrap();
        assert!(python.is_valid(&content));
        content["exit_code"] = json!("0");
        assert!(!python.is_valid(&content));
        content.as_object_mut().unwrap().remove("exit_code");
        assert!(!python.is_valid(&content));
        let modify = validator(Tool::ModifyFile);
        let mut content = serde_json::to_value(example(Tool::ModifyFile)).unwrap();
        assert!(modify.is_valid(&content));
        content["changes"]["kind"] = json!("odt");
        assert!(!modify.is_valid(&content));
    }

    #[test]
    fn every_output_schema_is_a_2020_12_object_schema() {
        for tool in Tool::ALL {
            let schema = output_schema(tool);
            assert_eq!(schema["type"], "object", "{}", tool.name());
            assert_eq!(
                schema["$schema"],
                "https://json-schema.org/draft/2020-12/schema",
                "{}",
                tool.name()
            );
        }
    }

    #[test]
    fn data_analysis_text_is_the_json_of_its_structured_content() {
        let Data::DataAnalysis(data) = example(Tool::DataAnalysis) else {
            unreachable!()
        };
        let text = serde_json::to_value(&data).unwrap().to_string();
        let result = with_data(
            CallToolResult::success(vec![]),
            Some(Data::DataAnalysis(data)),
        );
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(Some(parsed), result.structured_content);
        // The text as it was made before there was structured content.
        let mut before = json!({"result": parsed_field(&text, "result"), "query_code": parsed_field(&text, "query_code")});
        before["plot_image"] = json!(parsed_field(&text, "plot_image"));
        assert_eq!(text, before.to_string());
    }

    fn parsed_field(text: &str, name: &str) -> Value {
        serde_json::from_str::<Value>(text).unwrap()[name].clone()
    }

    /// The router's own routes, not the catalog's list: a `#[tool]` method the catalog lacks
    /// would be listed without a schema or an icon, and must fail here.
    #[test]
    fn every_route_of_the_server_lists_its_output_schema_and_icon() {
        let mut router = super::super::FileAgentServer::tool_router();
        annotate(&mut router);
        let listed = router.list_all();
        assert!(!listed.is_empty());
        for route in listed {
            let name = route.name.as_ref();
            let tool = Tool::named(name).unwrap_or_else(|| {
                panic!("the route {name:?} is not in tools::catalog::Tool::ALL: annotate gave it no output schema or icon")
            });
            assert_eq!(route.output_schema, Some(output_schema(tool)), "{name}");
            assert_eq!(route.icons, Some(super::super::icons::of(tool)), "{name}");
        }
    }

    #[test]
    fn an_error_carries_no_structured_content() {
        let result = with_data(CallToolResult::error(vec![]), None);
        assert_eq!(result.structured_content, None);
    }
}
