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
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;

use crate::config::Secret;
use crate::storage::Caller;
use crate::tools::{ToolError, ToolOutput, Tools};

/// Arguments of `generate_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GenerateFileArgs {
    /// What the file should contain, in plain language.
    pub instructions: String,
    /// "excel" (an .xlsx workbook) or "docx" (a Word document).
    pub file_type: String,
    /// A short name for the file (default "output"); a unique suffix is added.
    #[serde(default)]
    pub filename_hint: Option<String>,
}

/// Arguments of `modify_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ModifyFileArgs {
    /// The id of the .xlsx or .docx file to change (from the chat's files).
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

/// The MCP server: the tools, and the router rmcp dispatches with.
#[derive(Debug, Clone)]
pub struct FileAgentServer {
    tools: Tools,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl FileAgentServer {
    /// The server over `tools`, with the tool descriptions from `prompts/`.
    pub fn new(tools: Tools) -> Self {
        let mut tool_router = Self::tool_router();
        let prompts = tools.prompts();
        for (name, description) in [
            ("generate_file", &prompts.tool_generate_file),
            ("modify_file", &prompts.tool_modify_file),
            ("run_python", &prompts.tool_run_python),
        ] {
            if let Some(route) = tool_router.map.get_mut(name) {
                route.attr.description = Some(description.clone().into());
            }
        }
        Self { tools, tool_router }
    }

    #[tool(name = "generate_file")]
    async fn generate_file(
        &self,
        Parameters(args): Parameters<GenerateFileArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let caller = caller_of(&context);
        let call = self.tools.generate_file(
            &args.instructions,
            &args.file_type,
            args.filename_hint.as_deref(),
            &caller,
            &context.ct,
        );
        finish("generate_file", &context, call).await
    }

    #[tool(name = "modify_file")]
    async fn modify_file(
        &self,
        Parameters(args): Parameters<ModifyFileArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let caller = caller_of(&context);
        let call = self.tools.modify_file(
            &args.file_id,
            &args.instructions,
            args.filename_hint.as_deref(),
            &caller,
            &context.ct,
        );
        finish("modify_file", &context, call).await
    }

    #[tool(name = "run_python")]
    async fn run_python(
        &self,
        Parameters(args): Parameters<RunPythonArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let caller = caller_of(&context);
        let call = self
            .tools
            .run_python(&args.code, &args.file_ids, &caller, &context.ct);
        finish("run_python", &context, call).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for FileAgentServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("file-agent", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Makes Excel and Word files from plain-language instructions (generate_file, \
                 modify_file) and runs Python in a network-less sandbox (run_python). Results \
                 come back as markdown download links: show them to the user.",
            )
    }
}

/// The bearer token of the HTTP request behind this call, if any (none over stdio).
fn caller_of(context: &RequestContext<RoleServer>) -> Caller {
    let bearer = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.headers.get(http::header::AUTHORIZATION))
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_string())
        })
        .filter(|token| !token.is_empty())
        .map(Secret::new);
    Caller { bearer }
}

/// Awaits a tool call, logs one line about it, and maps its result for MCP.
async fn finish(
    tool: &'static str,
    context: &RequestContext<RoleServer>,
    call: impl Future<Output = Result<ToolOutput, ToolError>>,
) -> Result<String, String> {
    let started = Instant::now();
    let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let request = format!("{:?}", context.id);
    let result = call.await;
    let duration_ms = started.elapsed().as_millis() as u64;
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

fn outcome_name(error: &ToolError) -> &'static str {
    match error {
        ToolError::InvalidArgument(_) => "invalid_argument",
        ToolError::UnsupportedInput(_) => "unsupported_input",
        ToolError::Llm(_) => "llm_error",
        ToolError::Storage(_) => "storage_error",
        ToolError::Sandbox(_) => "sandbox_error",
        ToolError::AttemptsExhausted { .. } => "attempts_exhausted",
        ToolError::ScriptFailed(_) => "script_failed",
        ToolError::Cancelled => "cancelled",
    }
}
