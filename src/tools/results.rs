//! What each tool returns as data, beside its text: plain structs that serialise to the JSON a
//! program reads, and from which `mcp` derives each tool's output schema, so that the schema
//! and the data come from one type. The text a chat shows is made by the flows as before; these
//! say the same things as fields.
//!
//! This module knows no MCP: `mcp::structured` maps [`Data`] to a result's `structuredContent`
//! and each type to its tool's `outputSchema`.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

pub use crate::untrusted::change_report::ChangeReport;

/// The data of one successful call, by tool. Serialised untagged: each variant is its own
/// object, as its tool's output schema describes it.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Data {
    /// `generate_file`, `modify_file`.
    File(FileResult),
    /// `run_python`.
    Python(PythonResult),
    /// `analyze_file`.
    Analysis(AnalysisResult),
    /// `data_analysis_tool`.
    DataAnalysis(DataAnalysisResult),
    /// `conduct_deep_research`.
    Research(ResearchResult),
    /// `list_tools`.
    ToolList(ToolListResult),
    /// `create_tool`, `generate_tool`.
    SavedTool(SavedToolResult),
    /// `delete_tool`.
    Deleted(DeletedToolResult),
    /// A saved tool's return value, for a tool that declared its output schema.
    Returned(Value),
}

/// A file a call stored.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ResultFile {
    /// Its name.
    pub name: String,
    /// Its resource URI (`file-agent://files/<id>/<name>`): `resources/read` returns it, and a
    /// tool takes it back as an input.
    pub uri: String,
    /// Where a person downloads it.
    pub download_url: String,
    /// Its media type.
    pub mime_type: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// The SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
}

/// `generate_file` and `modify_file`: the file made, and for a modification what changed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FileResult {
    /// The file made (one).
    pub files: Vec<ResultFile>,
    /// Sandbox attempts it took, at most 3.
    pub attempts: usize,
    /// `modify_file`: what differs between the original and the copy, as file-agent computed
    /// it. Absent for `generate_file`, or when no comparison could be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangeReport>,
    /// `modify_file`: why no comparison could be made (the copy stands), when none was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes_unavailable: Option<String>,
}

/// `run_python`: what the code printed and wrote.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PythonResult {
    /// Its stdout, the last 20,000 characters.
    pub stdout: String,
    /// Its stderr, the last 20,000 characters.
    pub stderr: String,
    /// Its exit code (0: only a run that succeeded has a result).
    pub exit_code: i64,
    /// The files it wrote to `/work/out`, stored.
    pub files: Vec<ResultFile>,
    /// Entries of `/work/out` that were not kept, and why.
    pub skipped: Vec<String>,
    /// The session the call ran in, when it ran in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionResult>,
}

/// `run_python`'s session: what became of its state. Which names were kept, and why others
/// were not, the runner says on stderr (`file-agent: session: ...`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionResult {
    /// The session's name, as given (or the Open WebUI chat's id).
    pub name: String,
    /// Whether this call's state was kept: the next call of the session starts from it.
    pub kept: bool,
    /// The size of the session's state after the call, in bytes (none: no state).
    pub state_bytes: Option<u64>,
    /// The hex SHA-256 of the session's state after the call, as the audit line records it.
    pub state_sha256: Option<String>,
    /// What happened to the state, in a sentence.
    pub note: String,
}

/// How the checker judged an analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The first result passed its review.
    Passed,
    /// The first failed, the redo passed.
    PassedAfterCorrection,
    /// Accepted without a passing review: see `reviews`.
    AcceptedWithCaveats,
}

/// One review by the checker.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Review {
    /// `pass`, `fail`, or `none` (no verdict could be had).
    pub verdict: ReviewVerdict,
    /// The checker's comment, its feedback, or why there was no verdict.
    pub note: String,
}

/// One review's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReviewVerdict {
    /// It passed.
    Pass,
    /// It failed.
    Fail,
    /// No verdict.
    None,
}

/// One computed step of an analysis.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct AnalysisStep {
    /// The code that ran.
    pub code: String,
    /// What it printed (and the stderr worth keeping).
    pub output: String,
    /// Attempts it took.
    pub attempts: usize,
}

/// `analyze_file`: the answer, how it was checked, and how it was computed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AnalysisResult {
    /// The answer (Markdown).
    pub answer: String,
    /// The checker's verdict on the answer given.
    pub verdict: Verdict,
    /// The reviews, in order: the first, and the redo's when there was one.
    pub reviews: Vec<Review>,
    /// The steps of the answer given, in order.
    pub steps: Vec<AnalysisStep>,
    /// Whether the step limit ended the analysis before the model declared it complete.
    pub step_limit_reached: bool,
    /// The charts, stored: their resource URIs (`file-agent://files/...`).
    pub charts: Vec<String>,
    /// The stored charts.
    pub files: Vec<ResultFile>,
    /// Sandbox attempts, the inspection included.
    pub attempts: usize,
}

/// `data_analysis_tool`: the seed's contract, the object its text is the JSON of.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DataAnalysisResult {
    /// The answer and its quality assurance (Markdown).
    pub result: String,
    /// The steps' code, each under a `# Step n` line.
    pub query_code: String,
    /// The first chart, a base64 PNG; absent when none was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plot_image: Option<String>,
}

/// A source a research report cites.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Source {
    /// The page's title.
    pub title: String,
    /// Its address.
    pub url: String,
}

/// `conduct_deep_research`: the report and what it cites.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResearchResult {
    /// The report (Markdown, citations marked `[[n]](url)`, with its list of sources).
    pub report: String,
    /// The sources, numbered as in the report (the first is `[1]`).
    pub sources: Vec<Source>,
    /// Whether the run finished (false: it stopped early, and the report may be unfinished).
    pub complete: bool,
    /// Web searches and page visits made.
    pub searches: usize,
    /// The model that researched.
    pub model: String,
}

/// A saved tool as `list_tools` shows it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SavedToolInfo {
    /// The name it is called by (`my_<name>`).
    pub name: String,
    /// What it does (another user's has a note before it).
    pub description: String,
    /// Its version (the first 12 hex digits of its hash).
    pub version: String,
    /// Its revision: 1, then one more per change.
    pub revision: u64,
    /// `caller` or `model`: who wrote its code.
    pub author: String,
    /// The model that wrote it, when a model did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// When it was last saved (RFC 3339).
    pub updated: String,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
    /// The JSON Schema of its return value, when its author declared one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

/// `list_tools`: the caller's saved tools.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ToolListResult {
    /// The tools, by name.
    pub tools: Vec<SavedToolInfo>,
}

/// `create_tool` and `generate_tool`: the tool saved and its test call.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SavedToolResult {
    /// The name it is called by (`my_<name>`).
    pub name: String,
    /// Its version (the first 12 hex digits of its hash).
    pub version: String,
    /// Its revision.
    pub revision: u64,
    /// `created`, `updated` or `saved again` (the same code and schema).
    pub action: String,
    /// The arguments of the test call.
    pub example_arguments: Value,
    /// What the test call returned.
    pub example_result: Value,
    /// Sandbox attempts it took (`generate_tool`: one per reply of the model).
    pub attempts: usize,
}

/// `delete_tool`: the tool deleted.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DeletedToolResult {
    /// The name it was called by (`my_<name>`).
    pub name: String,
    /// The version deleted (the first 12 hex digits of its hash).
    pub version: String,
}

impl ResultFile {
    /// The data of a stored file.
    pub fn of(file: &super::progress::StoredFile) -> Self {
        Self {
            name: file.name.clone(),
            uri: crate::storage::resource_uri(&file.id, &file.name),
            download_url: file.url.clone(),
            mime_type: file.content_type.clone(),
            bytes: file.bytes,
            sha256: file.sha256.clone(),
        }
    }
}
