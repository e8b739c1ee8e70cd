//! The settings of long calls as MCP tasks (the `io.modelcontextprotocol/tasks` extension):
//! which tools answer a client that declares the extension with a task, how long a finished
//! task's result is kept, and how many tasks one caller may have kept at once.
//!
//! Parsing only: whether a name is one of file-agent's tools is `mcp`'s to say (it warns about
//! one that is not at start-up); here a name is only checked to be a tool's name at all.

use std::time::Duration;

use super::{ConfigError, Vars};

/// The tools that answer with a task by default: those that ask the model, research first
/// (minutes), whose calls outlast what a client or proxy holds a request open for.
pub const DEFAULT_TASK_TOOLS: [&str; 6] = [
    "conduct_deep_research",
    "generate_file",
    "modify_file",
    "analyze_file",
    "data_analysis_tool",
    "generate_tool",
];
/// `FILE_AGENT_TASK_RESULT_TTL`: seconds a finished task (its result) is kept.
pub const DEFAULT_TASK_RESULT_TTL_SECS: u64 = 600;
/// `FILE_AGENT_TASKS_PER_CALLER`: tasks one caller may have kept at once, running or finished.
pub const DEFAULT_TASKS_PER_CALLER: usize = 32;

/// `FILE_AGENT_TASKS`: which tools answer with a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskTools {
    /// `all`: every tool, saved tools too.
    All,
    /// The tools named (none: `none`, no task ever, and the extension is not offered).
    Named(Vec<String>),
}

impl TaskTools {
    /// Whether a call of `tool` answers with a task.
    pub fn includes(&self, tool: &str) -> bool {
        match self {
            Self::All => true,
            Self::Named(names) => names.iter().any(|name| name == tool),
        }
    }

    /// Whether any tool does.
    pub fn any(&self) -> bool {
        !matches!(self, Self::Named(names) if names.is_empty())
    }
}

/// Long calls as tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct TasksConfig {
    /// `FILE_AGENT_TASKS`.
    pub tools: TaskTools,
    /// `FILE_AGENT_TASK_RESULT_TTL`: how long a finished task is kept for its caller to fetch.
    pub result_ttl: Duration,
    /// `FILE_AGENT_TASKS_PER_CALLER`: tasks one caller may have kept at once; past it the oldest
    /// finished one is dropped, and with none finished a new call is refused.
    pub per_caller: usize,
}

impl Default for TasksConfig {
    fn default() -> Self {
        Self {
            tools: TaskTools::Named(DEFAULT_TASK_TOOLS.map(String::from).to_vec()),
            result_ttl: Duration::from_secs(DEFAULT_TASK_RESULT_TTL_SECS),
            per_caller: DEFAULT_TASKS_PER_CALLER,
        }
    }
}

impl TasksConfig {
    /// `FILE_AGENT_TASKS`, `FILE_AGENT_TASK_RESULT_TTL` and `FILE_AGENT_TASKS_PER_CALLER`.
    pub(super) fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        let defaults = Self::default();
        Ok(Self {
            tools: match vars.get("FILE_AGENT_TASKS") {
                None => defaults.tools,
                Some(value) => task_tools(&value)?,
            },
            result_ttl: vars.seconds(
                "FILE_AGENT_TASK_RESULT_TTL",
                DEFAULT_TASK_RESULT_TTL_SECS,
                1..=86_400,
            )?,
            per_caller: vars.count(
                "FILE_AGENT_TASKS_PER_CALLER",
                DEFAULT_TASKS_PER_CALLER,
                1..=1000,
            )?,
        })
    }
}

/// `all`, `none`, or tool names, comma-separated.
fn task_tools(value: &str) -> Result<TaskTools, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "all" => return Ok(TaskTools::All),
        "none" => return Ok(TaskTools::Named(Vec::new())),
        _ => {}
    }
    let names: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect();
    let tool_name = |name: &String| {
        name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    if names.is_empty() || !names.iter().all(tool_name) {
        return Err(ConfigError {
            var: "FILE_AGENT_TASKS",
            value: value.to_string(),
            expected: "all, none, or tool names separated by commas (e.g. conduct_deep_research,generate_file)".into(),
        });
    }
    Ok(TaskTools::Named(names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<TasksConfig, ConfigError> {
        let lookup = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        };
        TasksConfig::from_vars(&Vars::new(&lookup))
    }

    #[test]
    fn by_default_the_tools_that_ask_the_model_answer_with_tasks() {
        let config = parse(&[]).unwrap();
        assert_eq!(config, TasksConfig::default());
        assert!(config.tools.includes("conduct_deep_research"));
        assert!(config.tools.includes("generate_tool"));
        assert!(!config.tools.includes("run_python"));
        assert!(!config.tools.includes("list_tools"));
        assert_eq!(config.result_ttl, Duration::from_secs(600));
        assert_eq!(config.per_caller, 32);
    }

    #[test]
    fn all_none_and_lists_are_read_and_anything_else_is_refused() {
        let all = parse(&[("FILE_AGENT_TASKS", "ALL")]).unwrap().tools;
        assert!(all.includes("run_python") && all.includes("my_sum") && all.any());
        let none = parse(&[("FILE_AGENT_TASKS", "none")]).unwrap().tools;
        assert!(!none.includes("conduct_deep_research") && !none.any());
        let listed = parse(&[("FILE_AGENT_TASKS", " run_python , analyze_file")])
            .unwrap()
            .tools;
        assert_eq!(
            listed,
            TaskTools::Named(vec!["run_python".into(), "analyze_file".into()])
        );
        for wrong in ["Run Python", ",", "run-python", "1tool"] {
            let error = parse(&[("FILE_AGENT_TASKS", wrong)]).unwrap_err();
            assert_eq!(error.var, "FILE_AGENT_TASKS", "{wrong}");
        }
    }

    #[test]
    fn the_ttl_and_the_bound_are_range_checked() {
        let config = parse(&[
            ("FILE_AGENT_TASK_RESULT_TTL", "60"),
            ("FILE_AGENT_TASKS_PER_CALLER", "2"),
        ])
        .unwrap();
        assert_eq!(config.result_ttl, Duration::from_secs(60));
        assert_eq!(config.per_caller, 2);
        for (var, value) in [
            ("FILE_AGENT_TASK_RESULT_TTL", "0"),
            ("FILE_AGENT_TASK_RESULT_TTL", "86401"),
            ("FILE_AGENT_TASKS_PER_CALLER", "0"),
            ("FILE_AGENT_TASKS_PER_CALLER", "1001"),
        ] {
            let error = parse(&[(var, value)]).unwrap_err();
            assert_eq!(error.var, var);
            assert!(error.expected.contains("from"), "{error}");
        }
    }
}
