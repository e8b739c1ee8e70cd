//! The tools file-agent serves, each named once: its MCP name, where its description comes
//! from, and how long a call may take. `mcp` checks at start-up that its `#[tool]` methods and
//! this list name the same tools.

use std::time::Duration;

use crate::prompts::Prompts;

/// One of file-agent's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `generate_file`: a new .xlsx, .docx, .pptx or .pdf from instructions.
    GenerateFile,
    /// `modify_file`: a changed copy of a chat file.
    ModifyFile,
    /// `run_python`: the caller's own code in the sandbox.
    RunPython,
    /// `analyze_file`: a question about a chat file's table.
    AnalyzeFile,
    /// `data_analysis_tool`: a question about a table behind a URL.
    DataAnalysis,
    /// `conduct_deep_research`: a polled research run.
    DeepResearch,
    /// `create_tool`: save a tool the caller wrote.
    CreateTool,
    /// `generate_tool`: save a tool the model writes from a description.
    GenerateTool,
    /// `list_tools`: the caller's saved tools.
    ListTools,
    /// `delete_tool`: remove one of them.
    DeleteTool,
}

/// What every saved tool's MCP name starts with; no built-in tool's name does, so a saved
/// tool can never stand in for one.
pub const SAVED_TOOL_PREFIX: &str = "my_";

impl Tool {
    /// Every tool, in the order clients list them.
    pub const ALL: [Tool; 10] = [
        Tool::GenerateFile,
        Tool::ModifyFile,
        Tool::RunPython,
        Tool::AnalyzeFile,
        Tool::DataAnalysis,
        Tool::DeepResearch,
        Tool::CreateTool,
        Tool::GenerateTool,
        Tool::ListTools,
        Tool::DeleteTool,
    ];

    /// The name clients call it by.
    pub fn name(self) -> &'static str {
        match self {
            Tool::GenerateFile => "generate_file",
            Tool::ModifyFile => "modify_file",
            Tool::RunPython => "run_python",
            Tool::AnalyzeFile => "analyze_file",
            Tool::DataAnalysis => "data_analysis_tool",
            Tool::DeepResearch => "conduct_deep_research",
            Tool::CreateTool => "create_tool",
            Tool::GenerateTool => "generate_tool",
            Tool::ListTools => "list_tools",
            Tool::DeleteTool => "delete_tool",
        }
    }

    /// Whether it manages saved tools (not listed when `FILE_AGENT_DYNAMIC_TOOLS=off`).
    pub fn manages_saved_tools(self) -> bool {
        matches!(
            self,
            Tool::CreateTool | Tool::GenerateTool | Tool::ListTools | Tool::DeleteTool
        )
    }

    /// Whether a call of it runs sandbox attempts: refused before it starts while the sandbox
    /// may run no code (the network canary reached the network, or has not proven it does not)
    /// or the audit trail cannot be written (under `FILE_AGENT_AUDIT_ON_FAILURE=refuse`).
    pub fn runs_attempts(self) -> bool {
        !matches!(
            self,
            Tool::DeepResearch | Tool::ListTools | Tool::DeleteTool
        )
    }

    /// The tool named `name`, if there is one.
    pub fn named(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// Its description for clients, from `prompts/tools/`.
    pub fn description(self, prompts: &Prompts) -> &str {
        match self {
            Tool::GenerateFile => &prompts.tool_generate_file,
            Tool::ModifyFile => &prompts.tool_modify_file,
            Tool::RunPython => &prompts.tool_run_python,
            Tool::AnalyzeFile => &prompts.tool_analyze_file,
            Tool::DataAnalysis => &prompts.tool_data_analysis,
            Tool::DeepResearch => &prompts.tool_research,
            Tool::CreateTool => &prompts.tool_create_tool,
            Tool::GenerateTool => &prompts.tool_generate_tool,
            Tool::ListTools => &prompts.tool_list_tools,
            Tool::DeleteTool => &prompts.tool_delete_tool,
        }
    }

    /// How long one call may take: `call_timeout` (`FILE_AGENT_CALL_TIMEOUT`), except deep
    /// research, which may wait for its provider up to `research_wait` and a minute more.
    pub fn deadline(self, call_timeout: Duration, research_wait: Duration) -> Duration {
        match self {
            Tool::DeepResearch => call_timeout.max(research_wait + Duration::from_secs(60)),
            _ => call_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found_again() {
        for tool in Tool::ALL {
            assert_eq!(Tool::named(tool.name()), Some(tool));
        }
        assert_eq!(Tool::named("generate_files"), None);
    }

    #[test]
    fn no_built_in_name_can_be_taken_by_a_saved_tool() {
        for tool in Tool::ALL {
            assert!(
                !tool.name().starts_with(SAVED_TOOL_PREFIX),
                "{}",
                tool.name()
            );
        }
    }

    #[test]
    fn only_research_outlives_the_call_timeout() {
        let (call, wait) = (Duration::from_secs(300), Duration::from_secs(1200));
        assert_eq!(Tool::RunPython.deadline(call, wait), call);
        assert_eq!(
            Tool::DeepResearch.deadline(call, wait),
            Duration::from_secs(1260)
        );
        assert_eq!(
            Tool::DeepResearch.deadline(call, Duration::ZERO),
            call,
            "never shorter than the call timeout"
        );
    }
}
