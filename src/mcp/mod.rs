//! The MCP face of file-agent: one rmcp server handler whose `#[tool]` methods unpack their
//! arguments, call a plain function in `tools`, and map the result. This is the only module
//! that knows MCP types.
//!
//! Errors: every [`ToolError`] becomes a tool result with `isError: true` and a message a
//! person can act on (the caller's model reads it); infrastructure faults are also logged with
//! their whole chain. Nothing here returns a JSON-RPC error for a tool's own failure.

use std::time::Instant;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ProgressNotificationParam, ServerCapabilities, ServerConfig};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;

use crate::config::Secret;
use crate::prompts::Prompts;
use crate::storage::Caller;
use crate::tools::catalog::Tool;
use crate::tools::research::Progress;
use crate::tools::{CALL, CallInfo, ToolError, ToolOutput, Tools};

/// Arguments of `generate_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GenerateFileArgs {
    /// What the file should contain, in plain language.
    pub instructions: String,
    /// "excel" (an .xlsx workbook), "docx" (a Word document), "pptx" (a PowerPoint
    /// presentation) or "pdf".
    pub file_type: String,
    /// A short name for the file (default "output"); a unique suffix is added.
    #[serde(default)]
    pub filename_hint: Option<String>,
}

/// Arguments of `modify_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ModifyFileArgs {
    /// The id of the .xlsx, .docx or .pptx file to change (from the chat's files).
    pub file_id: String,
    /// What to change, in plain language.
    pub instructions: String,
    /// A short name for the modified copy (default "modified"); a unique suffix is added.
    #[serde(default)]
    pub filename_hint: Option<String>,
}

/// Arguments of `run_python`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunPythonArgs {
    /// The Python 3 source to run.
    pub code: String,
    /// Ids of files to place in /work/in (default none).
    #[serde(default)]
    pub file_ids: Vec<String>,
}

/// Arguments of `analyze_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AnalyzeFileArgs {
    /// The id of the CSV, .xlsx or .xls file (from the chat's files).
    pub file_id: String,
    /// The question about the data, in plain language; ask for a chart to get one.
    pub instructions: String,
}

/// Arguments of `data_analysis_tool` (the contract of the "Conversations" chat backend).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct DataAnalysisArgs {
    /// The question about the data.
    pub query: String,
    /// The http(s) URL of the CSV, .xlsx or .xls document (a presigned S3 URL, say).
    pub document: String,
    /// The document's file name, e.g. "sales.csv" (default: from the URL).
    #[serde(default)]
    pub document_name: Option<String>,
}

/// Arguments of `conduct_deep_research`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ResearchArgs {
    /// What to research, with the scope, period, region or angle that matters.
    pub instructions: String,
}

/// The MCP server: the tools, and the router rmcp dispatches with.
#[derive(Debug, Clone)]
pub struct FileAgentServer {
    tools: Tools,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl FileAgentServer {
    /// The server over `tools`, with the tool descriptions from `prompts/`.
    ///
    /// # Panics
    /// When a `#[tool]` method and [`Tool`] do not name the same tools: a build that cannot
    /// describe a tool must not start.
    pub fn new(tools: Tools) -> Self {
        let mut tool_router = Self::tool_router();
        if let Err(error) = describe(&mut tool_router, tools.prompts()) {
            panic!("{error}");
        }
        Self { tools, tool_router }
    }

    #[tool(name = "generate_file")]
    async fn generate_file(
        &self,
        Parameters(args): Parameters<GenerateFileArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let caller = caller_of(&context);
        let call = self.tools.generate_file(
            &args.instructions,
            &args.file_type,
            args.filename_hint.as_deref(),
            &caller,
            &cancel,
        );
        self.finish(Tool::GenerateFile, &context, call).await
    }

    #[tool(name = "modify_file")]
    async fn modify_file(
        &self,
        Parameters(args): Parameters<ModifyFileArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let caller = caller_of(&context);
        let call = self.tools.modify_file(
            &args.file_id,
            &args.instructions,
            args.filename_hint.as_deref(),
            &caller,
            &cancel,
        );
        self.finish(Tool::ModifyFile, &context, call).await
    }

    #[tool(name = "run_python")]
    async fn run_python(
        &self,
        Parameters(args): Parameters<RunPythonArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let caller = caller_of(&context);
        let call = self
            .tools
            .run_python(&args.code, &args.file_ids, &caller, &cancel);
        self.finish(Tool::RunPython, &context, call).await
    }

    #[tool(name = "analyze_file")]
    async fn analyze_file(
        &self,
        Parameters(args): Parameters<AnalyzeFileArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let caller = caller_of(&context);
        let call = self
            .tools
            .analyze_file(&args.file_id, &args.instructions, &caller, &cancel);
        self.finish(Tool::AnalyzeFile, &context, call).await
    }

    #[tool(name = "data_analysis_tool")]
    async fn data_analysis_tool(
        &self,
        Parameters(args): Parameters<DataAnalysisArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let call = self.tools.data_analysis(
            &args.query,
            &args.document,
            args.document_name.as_deref(),
            &cancel,
        );
        self.finish(Tool::DataAnalysis, &context, call).await
    }

    #[tool(name = "conduct_deep_research")]
    async fn conduct_deep_research(
        &self,
        Parameters(args): Parameters<ResearchArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        // Progress goes out in order through one task, and only to a client that asked.
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<Progress>();
        let forwarder = context.meta.get_progress_token().map(|token| {
            let peer = context.peer.clone();
            tokio::spawn(async move {
                while let Some(progress) = receiver.recv().await {
                    let notification =
                        ProgressNotificationParam::new(token.clone(), progress.elapsed)
                            .with_total(progress.total)
                            .with_message(progress.message);
                    if let Err(error) = peer.notify_progress(notification).await {
                        tracing::debug!(%error, "could not send a progress notification");
                    }
                }
            })
        });
        let report = move |progress: Progress| {
            let _ = sender.send(progress);
        };
        let call = self
            .tools
            .deep_research(&args.instructions, &report, &cancel);
        let result = self.finish(Tool::DeepResearch, &context, call).await;
        drop(report);
        if let Some(forwarder) = forwarder {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), forwarder).await;
        }
        result
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for FileAgentServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("file-agent", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Makes Excel, Word, PowerPoint and PDF files from plain-language instructions \
                 (generate_file) and changed copies of Office files with a report of what \
                 changed (modify_file), answers questions about data files by computing them \
                 (analyze_file; data_analysis_tool for a document URL), researches topics on \
                 the web (conduct_deep_research) and runs Python in a network-less sandbox \
                 (run_python). Files come back as markdown download links: show them to the \
                 user.",
            )
    }
}

/// Gives each route of `router` its description from [`Tool`], and refuses a route that
/// [`Tool`] does not know or a [`Tool`] that has no route.
fn describe<S>(router: &mut ToolRouter<S>, prompts: &Prompts) -> Result<(), String> {
    for tool in Tool::ALL {
        let route = router.map.get_mut(tool.name()).ok_or_else(|| {
            format!(
                "tools::catalog::Tool names {:?}, but no #[tool] method serves it",
                tool.name()
            )
        })?;
        route.attr.description = Some(tool.description(prompts).to_string().into());
    }
    match router.map.keys().find(|name| Tool::named(name).is_none()) {
        Some(name) => Err(format!(
            "the #[tool] method {name:?} has no entry in tools::catalog::Tool (its description and deadline)"
        )),
        None => Ok(()),
    }
}

/// Longest client name, user id or chat id kept for the audit trail, in characters.
const CALLER_FIELD_MAX_CHARS: usize = 200;

/// Who is calling, for the audit trail: the MCP client as the call itself identifies it, and
/// Open WebUI's user and chat ids when it forwards them (`ENABLE_FORWARD_USER_INFO_HEADERS`).
///
/// The client is, in this order: the `_meta` client info of the request (the stateless
/// protocol sends it on every request); the client's `initialize` info, only over stdio,
/// where there was a real handshake (over stateless HTTP rmcp fills the peer info with its
/// own default, `rmcp/<version>`, which names our library, not the caller); the HTTP
/// `User-Agent`; else nothing. A wrong name in an audit trail is worse than none.
fn call_info(
    call: &str,
    request: serde_json::Value,
    tool: &str,
    context: &RequestContext<RoleServer>,
) -> CallInfo {
    let capped = |text: &str| -> String { text.chars().take(CALLER_FIELD_MAX_CHARS).collect() };
    let parts = context.extensions.get::<http::request::Parts>();
    let header = |name: &str| {
        parts
            .and_then(|parts| parts.headers.get(name))
            .and_then(|value| value.to_str().ok())
            .map(capped)
    };
    let handshake = match parts {
        Some(_) => None,
        None => context
            .peer
            .peer_info()
            .map(|info| info.client_info.clone()),
    };
    let client = context
        .meta
        .client_info()
        .or(handshake)
        .map(|info| capped(&format!("{}/{}", info.name, info.version)))
        .or_else(|| header("user-agent"));
    CallInfo {
        call: call.to_string(),
        request,
        tool: tool.to_string(),
        client,
        user: header("x-openwebui-user-id"),
        chat: header("x-openwebui-chat-id"),
    }
}

/// The bearer token of the HTTP request behind this call, if any (none over stdio).
fn caller_of(context: &RequestContext<RoleServer>) -> Caller {
    let bearer = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| crate::bearer_token(&parts.headers))
        .map(Secret::new);
    Caller { bearer }
}

impl FileAgentServer {
    /// Awaits a tool call within its deadline, logs one line about it, and maps its result for
    /// MCP. A call past the deadline is dropped: its container guard removes the container.
    async fn finish(
        &self,
        tool: Tool,
        context: &RequestContext<RoleServer>,
        call: impl Future<Output = Result<ToolOutput, ToolError>>,
    ) -> Result<String, String> {
        let deadline = self.tools.call_deadline(tool);
        let tool = tool.name();
        let started = Instant::now();
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        // The JSON-RPC id as JSON: a number stays a number, a string a string.
        let request = serde_json::to_value(&context.id).unwrap_or_default();
        let info = call_info(&id, request.clone(), tool, context);
        let call = self.tools.track(tokio::time::timeout(deadline, call));
        let result = match CALL.scope(info, call).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::Deadline(deadline.as_secs())),
        };
        let duration_ms = started.elapsed().as_millis() as u64;
        crate::metrics::metrics()
            .tool_call(tool, result.as_ref().map_or_else(outcome_name, |_| "ok"));
        match result {
            Ok(output) => {
                tracing::info!(call = %id, %request, tool, attempts = output.attempts, outcome = "ok", duration_ms, "tool call");
                Ok(output.text)
            }
            Err(error) => {
                let outcome = outcome_name(&error);
                if error.is_infrastructure() {
                    tracing::error!(call = %id, %request, tool, outcome, duration_ms, error = %crate::error_chain(&error), "tool call");
                } else {
                    tracing::info!(call = %id, %request, tool, outcome, duration_ms, error = %error, "tool call");
                }
                Err(format!("{tool} failed: {error}"))
            }
        }
    }
}

fn outcome_name(error: &ToolError) -> &'static str {
    match error {
        ToolError::InvalidArgument(_) => "invalid_argument",
        ToolError::UnsupportedInput(_) => "unsupported_input",
        ToolError::Llm(_) => "llm_error",
        ToolError::Storage(_) => "storage_error",
        ToolError::Fetch(_) => "fetch_error",
        ToolError::Research(_) => "research_error",
        ToolError::Sandbox(_) => "sandbox_error",
        ToolError::AttemptsExhausted { .. } => "attempts_exhausted",
        ToolError::ScriptFailed(_) => "script_failed",
        ToolError::Cancelled => "cancelled",
        ToolError::Busy { .. } => "busy",
        ToolError::Deadline(_) => "deadline",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompts() -> Prompts {
        Prompts::load(None).unwrap()
    }

    #[test]
    fn every_tool_method_is_in_the_catalog_and_described() {
        let mut router = FileAgentServer::tool_router();
        describe(&mut router, &prompts()).unwrap();
        let prompts = prompts();
        for tool in Tool::ALL {
            let description = router.map[tool.name()].attr.description.clone().unwrap();
            assert_eq!(description, tool.description(&prompts), "{}", tool.name());
            assert!(!description.is_empty(), "{}", tool.name());
        }
    }

    #[test]
    fn a_tool_without_a_method_or_a_method_without_an_entry_stops_the_start() {
        let mut router = FileAgentServer::tool_router();
        router.map.remove("run_python");
        let error = describe(&mut router, &prompts()).unwrap_err();
        assert!(error.contains("\"run_python\""), "{error}");

        let mut router = FileAgentServer::tool_router();
        let route = router.map["run_python"].clone();
        router.map.insert("run_pyhton".into(), route);
        let error = describe(&mut router, &prompts()).unwrap_err();
        assert!(error.contains("\"run_pyhton\""), "{error}");
    }
}
