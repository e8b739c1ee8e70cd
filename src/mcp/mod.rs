//! The MCP face of file-agent: one rmcp server handler whose `#[tool]` methods unpack their
//! arguments, call a plain function in `tools`, and map the result. This is the only module
//! that knows MCP types.
//!
//! Long calls: a client that declares the MCP Tasks extension gets a task for the tools
//! `FILE_AGENT_TASKS` names ([`tasks`]); a `notifications/cancelled` that rmcp's stateless HTTP
//! service drops reaches its call through [`cancel`].
//!
//! Errors: every [`ToolError`] becomes a tool result with `isError: true` and a message a
//! person can act on (the caller's model reads it); infrastructure faults are also logged with
//! their whole chain. Nothing here returns a JSON-RPC error for a tool's own failure.

mod annotations;
mod cancel;
mod files;
mod icons;
mod phases;
mod server_info;
mod span;
mod structured;
mod tasks;

pub use cancel::{ConnectionId, InFlight};
pub use tasks::TaskStore;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use rmcp::ErrorData;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CompleteRequestMethod, CompleteRequestParams, CompleteResult, ContentBlock, GetTaskParams,
    GetTaskResult, ListPromptsRequestMethod, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ResultType, ServerCapabilities, ServerConfig,
    UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;

use crate::config::Secret;
use crate::identity::{Identity, SCOPE_SAVED_TOOLS};
use crate::prompts::Prompts;
use crate::storage::Caller;
use crate::tools::catalog::{SAVED_TOOL_PREFIX, Tool};
use crate::tools::dynamic::NewTool;
use crate::tools::progress::{Outputs, Phase};
use crate::tools::{CALL, CallContext, CallInfo, Receipts, ToolError, ToolOutput, Tools};

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
    /// The .xlsx, .docx or .pptx file to change: its id (from the chat's files), the
    /// `file-agent://` URI of an earlier result, or over stdio a path or `file://` URI under
    /// the client's roots.
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
    /// Files to place in /work/in (default none): ids (from the chat's files),
    /// `file-agent://` URIs of earlier results, or over stdio paths or `file://` URIs under
    /// the client's roots.
    #[serde(default)]
    pub file_ids: Vec<String>,
    /// A session to run in (1-64 letters, digits, '-', '_', '.', ':'): the names the code
    /// leaves that can be pickled are kept, and the next call with the same session starts
    /// with them. Behind Open WebUI the chat is the session when none is named.
    #[serde(default)]
    pub session: Option<String>,
    /// Start the session over from nothing (default false).
    #[serde(default)]
    pub reset_session: bool,
}

/// Arguments of `analyze_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AnalyzeFileArgs {
    /// The CSV, .xlsx or .xls file: its id (from the chat's files), the `file-agent://` URI
    /// of an earlier result, or over stdio a path or `file://` URI under the client's roots.
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

/// Arguments of `create_tool`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CreateToolArgs {
    /// The tool's name, `[a-z][a-z0-9_]{0,47}`; it is called as `my_<name>`.
    pub name: String,
    /// What the tool does and returns, for the model that decides to call it.
    pub description: String,
    /// Python 3.11 defining `run(...)`, whose parameters are the schema's properties.
    pub code: String,
    /// The JSON Schema of the arguments: `{"type": "object", "properties": {...}, "required": [...]}`.
    pub input_schema: serde_json::Value,
    /// Arguments for the test call before saving (default: the schema's first `examples` entry).
    #[serde(default)]
    pub example_arguments: Option<serde_json::Value>,
    /// The JSON Schema of what `run` returns, `{"type": "object", ...}` (optional): clients then
    /// get the result as structured data, and every result is checked against it.
    #[serde(default)]
    pub output_schema: Option<serde_json::Value>,
}

/// Arguments of `generate_tool`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GenerateToolArgs {
    /// What the tool should do: what it takes and what it returns.
    pub instructions: String,
    /// The tool's name, `[a-z][a-z0-9_]{0,47}` (default: the model chooses one).
    #[serde(default)]
    pub name: Option<String>,
}

/// Arguments of `delete_tool`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct DeleteToolArgs {
    /// The name of the saved tool (without `my_`).
    pub name: String,
}

/// The connection of an HTTP call's client: rmcp's token of the request, which fires when the
/// client goes away (or the server stops), not on a `notifications/cancelled`.
#[derive(Debug, Clone)]
struct ClientConnection(tokio_util::sync::CancellationToken);

/// The MCP server: the tools, and the router rmcp dispatches with.
#[derive(Debug, Clone)]
pub struct FileAgentServer {
    tools: Tools,
    tool_router: ToolRouter<Self>,
    /// `FILE_AGENT_LOCAL_ROOTS`: the folders a stdio client that declares no roots may name
    /// inputs in.
    local_roots: Arc<Vec<PathBuf>>,
    /// The calls under way, for `notifications/cancelled`; shared by every request's handler.
    in_flight: InFlight,
    /// The tasks of every caller; shared by every request's handler. None offered by default.
    tasks: TaskStore,
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
        structured::annotate(&mut tool_router);
        Self {
            tools,
            tool_router,
            local_roots: Arc::default(),
            in_flight: InFlight::default(),
            tasks: TaskStore::default(),
        }
    }

    /// The server, sharing the calls under way and the tasks with the other requests' handlers.
    pub fn with_calls(mut self, in_flight: InFlight, tasks: TaskStore) -> Self {
        self.in_flight = in_flight;
        self.tasks = tasks;
        self
    }

    /// The server, letting a stdio client that declares no roots name inputs under `roots`.
    pub fn with_local_roots(mut self, roots: Vec<PathBuf>) -> Self {
        self.local_roots = Arc::new(roots);
        self
    }

    #[tool(name = "generate_file")]
    async fn generate_file(
        &self,
        Parameters(args): Parameters<GenerateFileArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
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
    ) -> CallToolResult {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let mut caller = caller_of(&context);
        let file_id = match self.inputs(&[args.file_id], &context, &mut caller).await {
            Ok(ids) => ids.concat(),
            Err(refused) => return self.finish(Tool::ModifyFile, &context, refused).await,
        };
        let call = self.tools.modify_file(
            &file_id,
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
    ) -> CallToolResult {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let mut caller = caller_of(&context);
        let file_ids = match self.inputs(&args.file_ids, &context, &mut caller).await {
            Ok(ids) => ids,
            Err(refused) => return self.finish(Tool::RunPython, &context, refused).await,
        };
        let session = crate::tools::SessionArgs {
            name: args.session,
            chat: request_header(&context, "x-openwebui-chat-id").map(str::to_string),
            reset: args.reset_session,
        };
        let call = self
            .tools
            .run_python(&args.code, &file_ids, &session, &caller, &cancel);
        self.finish(Tool::RunPython, &context, call).await
    }

    #[tool(name = "analyze_file")]
    async fn analyze_file(
        &self,
        Parameters(args): Parameters<AnalyzeFileArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let mut caller = caller_of(&context);
        let file_id = match self.inputs(&[args.file_id], &context, &mut caller).await {
            Ok(ids) => ids.concat(),
            Err(refused) => return self.finish(Tool::AnalyzeFile, &context, refused).await,
        };
        let call = self
            .tools
            .analyze_file(&file_id, &args.instructions, &caller, &cancel);
        self.finish(Tool::AnalyzeFile, &context, call).await
    }

    #[tool(name = "data_analysis_tool")]
    async fn data_analysis_tool(
        &self,
        Parameters(args): Parameters<DataAnalysisArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
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
    ) -> CallToolResult {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let owner = identity_of(&context).owner();
        let client = context.extensions.get::<ClientConnection>().map(|c| &c.0);
        let call = self
            .tools
            .deep_research(&args.instructions, &owner, &cancel, client);
        self.finish(Tool::DeepResearch, &context, call).await
    }

    #[tool(name = "create_tool")]
    async fn create_tool(
        &self,
        Parameters(args): Parameters<CreateToolArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let identity = identity_of(&context);
        let tool = NewTool {
            name: args.name,
            description: args.description,
            code: args.code,
            input_schema: args.input_schema,
            example_arguments: args.example_arguments,
            output_schema: args.output_schema,
        };
        let call = self.tools.create_tool(&identity, tool, &cancel);
        let result = self.finish(Tool::CreateTool, &context, call).await;
        tools_changed(&context, &result).await;
        result
    }

    #[tool(name = "generate_tool")]
    async fn generate_tool(
        &self,
        Parameters(args): Parameters<GenerateToolArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let identity = identity_of(&context);
        let call =
            self.tools
                .generate_tool(&identity, &args.instructions, args.name.as_deref(), &cancel);
        let result = self.finish(Tool::GenerateTool, &context, call).await;
        tools_changed(&context, &result).await;
        result
    }

    #[tool(name = "list_tools")]
    async fn list_saved_tools(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        let identity = identity_of(&context);
        let listed = self.tools.list_saved_tools(&identity);
        self.finish(Tool::ListTools, &context, async { listed })
            .await
    }

    #[tool(name = "delete_tool")]
    async fn delete_tool(
        &self,
        Parameters(args): Parameters<DeleteToolArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let identity = identity_of(&context);
        // Inside the call's scope, so that the deletion's audit line names the caller.
        let result = self
            .finish(Tool::DeleteTool, &context, async {
                self.tools.delete_tool(&identity, &args.name)
            })
            .await;
        tools_changed(&context, &result).await;
        result
    }
}

/// After a saved tool was created, replaced or deleted: tells a client with a session (stdio)
/// that the list changed. Over stateless HTTP there is no session to tell: clients see the
/// change on their next `tools/list`.
async fn tools_changed(context: &RequestContext<RoleServer>, result: &CallToolResult) {
    if result.is_error == Some(true) || context.extensions.get::<http::request::Parts>().is_some() {
        return;
    }
    let sent = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        context.peer.notify_tool_list_changed(),
    )
    .await;
    if !matches!(sent, Ok(Ok(()))) {
        tracing::debug!("could not send notifications/tools/list_changed");
    }
}

/// Who is calling, as the server's gate established it for the HTTP request behind this call
/// (`server::gate`); over stdio, the one local user.
/// A `tasks/*` request of the caller's (by its owner key), in its server span.
fn task_request<T>(
    method: &'static str,
    context: &RequestContext<RoleServer>,
    handle: impl FnOnce(&crate::owner::Owner) -> Result<T, ErrorData>,
) -> Result<T, ErrorData> {
    let span = span::other(method, context);
    let _entered = span.enter();
    let answer = handle(&identity_of(context).owner());
    if let Err(error) = &answer {
        span::record_protocol_error(&span, error);
    }
    answer
}

fn identity_of(context: &RequestContext<RoleServer>) -> Identity {
    match context.extensions.get::<http::request::Parts>() {
        Some(parts) => http_identity(&parts.extensions),
        None => Identity::default(),
    }
}

/// What tells this request's caller from others for cancellation and the tasks' bound: its
/// owner key, and for a caller who names no one its connection (`cancel::Scope`).
fn scope_of(context: &RequestContext<RoleServer>) -> cancel::Scope {
    let connection = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<ConnectionId>().copied());
    cancel::Scope::of(&identity_of(context).owner(), connection)
}

/// Who sent an HTTP request, from its `extensions`: the gate's identity, else an HTTP caller
/// that names nobody.
fn http_identity(extensions: &http::Extensions) -> Identity {
    extensions
        .get::<Identity>()
        .cloned()
        .unwrap_or_else(|| Identity {
            over_http: true,
            ..Identity::default()
        })
}

/// The header `name` of the HTTP request behind this call, when there is one and it is text.
fn request_header<'a>(context: &'a RequestContext<RoleServer>, name: &str) -> Option<&'a str> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.headers.get(name))
        .and_then(|value| value.to_str().ok())
}

// `#[tool_handler]` writes only the methods not written here: `list_tools` and `call_tool` add
// the caller's saved tools (`my_<name>`) to the built-in ones.
#[tool_handler(router = self.tool_router)]
impl ServerHandler for FileAgentServer {
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let span = span::other("tools/list", &context);
        let _entered = span.enter();
        let tools = self.tools_for(&identity_of(&context));
        // The list depends on the caller: a client may cache it for itself only.
        let hints = context
            .protocol_version()
            .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28);
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools,
            meta: server_info::meta(),
            next_cursor: None,
            ttl_ms: hints.then_some(0),
            cache_scope: hints.then_some(CacheScope::Private),
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if self.answers_with_task(&request.name, &context) {
            let mut task = self.start_task(request, context);
            server_info::add_to_call(&mut task);
            return Ok(task);
        }
        // The call's own token: rmcp's (the client gone; over stdio, its cancel) or a
        // `notifications/cancelled` that names it over HTTP.
        let id = serde_json::to_value(&context.id).unwrap_or_default();
        // Over HTTP rmcp's token fires when the client goes away; the child below also fires
        // on a cancel. Kept apart, the tools can tell a client that left from a cancel.
        if context.extensions.get::<http::request::Parts>().is_some() {
            let connection = ClientConnection(context.ct.clone());
            context.extensions.insert(connection);
        }
        context.ct = context.ct.child_token();
        let _in_flight = self
            .in_flight
            .register(scope_of(&context), &id, context.ct.clone());
        self.call_traced(request, context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let mut got = task_request("tasks/get", &context, |owner| {
            self.tasks.get(owner, &request.task_id)
        })?;
        server_info::add(&mut got.meta);
        Ok(got)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        task_request("tasks/cancel", &context, |owner| {
            self.tasks.cancel(owner, &request.task_id)
        })
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        task_request("tasks/update", &context, |owner| {
            self.tasks.update(owner, &request.task_id)
        })
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let span = span::other("resources/list", &context);
        let _entered = span.enter();
        let mut listed = files::list(self.tools.storage(), &caller_of(&context));
        server_info::add(&mut listed.meta);
        Ok(listed)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult {
            meta: server_info::meta(),
            ..ListResourceTemplatesResult::default()
        })
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        use tracing::Instrument as _;
        let span = span::other("resources/read", &context);
        let read = files::read(self.tools.storage(), &request.uri, &caller_of(&context))
            .instrument(span.clone())
            .await;
        if let Err(error) = &read {
            span::record_protocol_error(&span, error);
        }
        read.map(|mut read| {
            server_info::add(&mut read.meta);
            read.into()
        })
    }

    // No prompts (nor completions) are offered, so none is declared and the methods are not
    // served: -32601, over HTTP with 404 (rmcp's defaults answer an empty list, and an empty
    // completion, for a capability the server never declared).
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Err(ErrorData::method_not_found::<ListPromptsRequestMethod>())
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Err(ErrorData::method_not_found::<CompleteRequestMethod>())
    }

    fn get_info(&self) -> ServerConfig {
        let mut capabilities = if self.tools.saved_tools_on() {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .build()
        } else {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build()
        };
        if self.tasks.offered() {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(
                    rmcp::model::TASKS_EXTENSION_ID.to_string(),
                    Default::default(),
                );
        }
        let mut config = ServerConfig::new(capabilities);
        // `initialize`'s result, and through rmcp `server/discover`'s, name the server in
        // their `_meta` too.
        config.meta = server_info::meta();
        config
            .with_server_info(server_info::implementation())
            .with_instructions(
                "Makes Excel, Word, PowerPoint and PDF files from plain-language instructions \
                 (generate_file) and changed copies of Office files with a report of what \
                 changed (modify_file), answers questions about data files by computing them \
                 (analyze_file; data_analysis_tool for a document URL), researches topics on \
                 the web (conduct_deep_research) and runs Python in a network-less sandbox \
                 (run_python). Tools you save with create_tool or generate_tool are listed and \
                 called as my_<name>. Files come back as markdown download links (show them \
                 to the user) and as resource links that resources/read returns; a result's \
                 file-agent:// URI can be given back as an input.",
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

impl FileAgentServer {
    /// A `tools/call` in its span, which records how it ended.
    async fn call_traced(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        use tracing::Instrument as _;
        let span = span::tools_call(&request, &context);
        let mut response = self
            .call_tool_in_span(request, context)
            .instrument(span.clone())
            .await;
        if let Ok(response) = &mut response {
            server_info::add_to_call(response);
        }
        match &response {
            Ok(CallToolResponse::Complete(result)) => span::record_result(&span, result),
            Ok(_) => {}
            Err(error) => span::record_protocol_error(&span, error),
        }
        response
    }

    /// Whether this call answers with a task: its client declares the Tasks extension (in the
    /// request, or over stdio at `initialize`) and `FILE_AGENT_TASKS` names its tool.
    fn answers_with_task(&self, tool: &str, context: &RequestContext<RoleServer>) -> bool {
        self.tasks.serves(tool)
            && context
                .client_capabilities()
                .is_some_and(|capabilities| capabilities.supports_tasks())
    }

    /// Answers the call with a task and runs it on its own ([`tasks`]): with the task's token
    /// in place of the request's, and its phases as the task's status instead of progress.
    fn start_task(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let owner = identity_of(&context).owner();
        let tool = request.name.to_string();
        let deadline = self
            .tools
            .call_deadline(Tool::named(&tool).unwrap_or(Tool::RunPython));
        let server = self.clone();
        let scope = scope_of(&context);
        let started = self
            .tasks
            .start(&owner, scope, deadline, move |token, status| {
                context.ct = token;
                context.extensions.insert(status);
                async move { server.call_traced(request, context).await }
            });
        match started {
            Ok(task) => CallToolResponse::Task(task),
            Err(refused) => CallToolResult::error(vec![ContentBlock::text(format!(
                "{tool} failed: {refused}"
            ))])
            .into(),
        }
    }

    /// A `tools/call`: a built-in tool through the router, a saved `my_<name>` tool here.
    async fn call_tool_in_span(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(name) = request.name.strip_prefix(SAVED_TOOL_PREFIX) else {
            let call = ToolCallContext::new(self, request, context);
            return self.tool_router.call(call).await;
        };
        let (cancel, _stop) = self.tools.call_token(&context.ct);
        let identity = identity_of(&context);
        let caller = caller_of(&context);
        let arguments = serde_json::Value::Object(request.arguments.clone().unwrap_or_default());
        let call = self
            .tools
            .call_saved_tool(&identity, name, arguments, &caller, &cancel);
        let deadline = self.tools.call_deadline(Tool::RunPython);
        let result = self
            .finish_as(&request.name, deadline, &context, call)
            .await;
        Ok(result.into())
    }
}

/// Who is calling, for the audit trail: the MCP client as the call itself identifies it, the
/// user and what identified them ([`identity_of`]), and Open WebUI's chat id when it forwards
/// it (`ENABLE_FORWARD_USER_INFO_HEADERS`).
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
    let header = |name: &str| request_header(context, name).map(crate::identity::capped);
    let handshake = match context.extensions.get::<http::request::Parts>() {
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
        .map(|info| crate::identity::capped(&format!("{}/{}", info.name, info.version)))
        .or_else(|| header("user-agent"));
    let identity = identity_of(context);
    let owner = identity.owner().to_string();
    CallInfo {
        call: call.to_string(),
        request,
        tool: tool.to_string(),
        client,
        identity: identity.source().map(|source| source.as_str().to_string()),
        issuer: identity.user.as_ref().and_then(|user| user.issuer.clone()),
        token_id: identity.token.clone(),
        identity_refused: identity.refused.clone(),
        user: identity.user.map(|user| user.id),
        chat: header("x-openwebui-chat-id"),
        owner: Some(owner),
        trace_id: crate::traces::current_trace_id(),
    }
}

/// The caller as storage sees it: the bearer token of the HTTP request behind this call, if
/// any (none over stdio; never one of file-agent's own, which the gate took out), and its
/// owner ([`Identity::owner`]).
fn caller_of(context: &RequestContext<RoleServer>) -> Caller {
    let bearer = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| crate::bearer_token(&parts.headers))
        .map(Secret::new);
    Caller {
        bearer,
        ..Caller::new(identity_of(context).owner())
    }
}

impl FileAgentServer {
    /// The file ids for `values` ([`files::resolve`]); a refusal as the call's result, so
    /// that the log and the metrics see it like any other.
    async fn inputs(
        &self,
        values: &[String],
        context: &RequestContext<RoleServer>,
        caller: &mut Caller,
    ) -> Result<Vec<String>, std::future::Ready<Result<ToolOutput, ToolError>>> {
        files::resolve(values, context, &self.local_roots, caller)
            .await
            .map_err(|refused| std::future::ready(Err(ToolError::InvalidArgument(refused))))
    }

    /// Awaits a tool call within its deadline, logs one line about it, and maps its result for
    /// MCP: the text, and a resource link (and inline image) for each file the call made. A
    /// call past the deadline is dropped: its container guard removes the container.
    async fn finish(
        &self,
        tool: Tool,
        context: &RequestContext<RoleServer>,
        call: impl Future<Output = Result<ToolOutput, ToolError>>,
    ) -> CallToolResult {
        let deadline = self.tools.call_deadline(tool);
        self.finish_as(tool.name(), deadline, context, call).await
    }

    /// [`Self::finish`] for the tool called `tool` (a built-in or a saved `my_<name>`).
    async fn finish_as(
        &self,
        tool: &str,
        deadline: std::time::Duration,
        context: &RequestContext<RoleServer>,
        call: impl Future<Output = Result<ToolOutput, ToolError>>,
    ) -> CallToolResult {
        let started = Instant::now();
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        tracing::Span::current().record("file_agent.call.id", &id);
        // The JSON-RPC id as JSON: a number stays a number, a string a string.
        let request = serde_json::to_value(&context.id).unwrap_or_default();
        let (call_context, shown) = self.call_context(&id, &request, tool, context);
        let (phases, outputs) = (call_context.phases.clone(), call_context.outputs.clone());
        let receipts = call_context.receipts.clone();
        // A request whose plain header contradicts its proven user runs nothing, nor does one
        // `refusal` refuses. (Decided here rather than by wrapping `call` in one more future:
        // in a debug build every wrapper copies the whole call's state on the stack.)
        let result = match (identity_of(context).conflict, self.refusal(tool)) {
            (Some(conflict), _) => {
                Err(CALL.sync_scope(call_context, || self.tools.refuse_identity(conflict)))
            }
            (None, Some(refused)) => {
                // Its phases end here: nothing is left to show.
                drop(call_context);
                Err(refused)
            }
            (None, None) => {
                let call = self.tools.track(tokio::time::timeout(deadline, call));
                match CALL.scope(call_context, call).await {
                    Ok(result) => result,
                    Err(_) => Err(ToolError::Deadline(deadline.as_secs())),
                }
            }
        };
        phases.send(self.last_phase(context, &result));
        // The last progress notifications go out before the answer, which ends the exchange.
        drop(phases);
        let _ = tokio::time::timeout(PROGRESS_FLUSH, shown).await;
        let mut answered = answer(tool, &id, &request, started, result, &outputs);
        add_receipts(
            &mut answered.meta,
            self.tools.receipts(receipts.taken()).await,
        );
        answered
    }

    /// How the call ended, as its views show it: done, or, when its HTTP client went away
    /// (and the server is not stopping), that no answer reaches it.
    fn last_phase(
        &self,
        context: &RequestContext<RoleServer>,
        result: &Result<ToolOutput, ToolError>,
    ) -> Phase {
        let left = context
            .extensions
            .get::<ClientConnection>()
            .is_some_and(|connection| connection.0.is_cancelled())
            && !self.tools.stopping().is_cancelled();
        match result {
            Err(ToolError::Left { kept }) => Phase::Left { kept: *kept },
            Err(_) if left => Phase::Left { kept: false },
            result => Phase::Done { ok: result.is_ok() },
        }
    }

    /// What the flows of call `id` read from their task: the caller for the audit trail, where
    /// the phases go (and the task showing them), and where the outputs are recorded.
    fn call_context(
        &self,
        id: &str,
        request: &serde_json::Value,
        tool: &str,
        context: &RequestContext<RoleServer>,
    ) -> (CallContext, tokio::task::JoinHandle<()>) {
        let info = call_info(id, request.clone(), tool, context);
        // The call's phases, shown in the log, as MCP progress and in an Open WebUI chat.
        let (phases, shown) = phases::start(self.phase_views(context), id, tool);
        // Pictures come inline over stdio only (files::content says why).
        let over_stdio = context.extensions.get::<http::request::Parts>().is_none();
        let outputs = Outputs::with_images(over_stdio);
        let call_context = CallContext {
            info,
            phases,
            outputs,
            receipts: Receipts::default(),
            attempts: Default::default(),
        };
        (call_context, shown)
    }

    /// Why `tool` may run nothing now: a call that would run attempts while the sandbox may
    /// run no code (the network canary reached the network, or has not proven it does not) or
    /// the audit trail cannot be written (unless the operator chose
    /// FILE_AGENT_AUDIT_ON_FAILURE=continue) is refused before the model is asked, not after.
    fn refusal(&self, tool: &str) -> Option<ToolError> {
        let runs_attempts =
            Tool::named(tool).map_or(tool.starts_with(SAVED_TOOL_PREFIX), Tool::runs_attempts);
        if !runs_attempts {
            return None;
        }
        self.tools
            .refusal()
            .or_else(|| self.tools.audit_gate().err())
    }
}

/// A call's answer, counted in `/metrics` and logged in one line (an infrastructure fault with
/// its whole chain): the output and its files, or the error as an `isError` result.
fn answer(
    tool: &str,
    id: &str,
    request: &serde_json::Value,
    started: Instant,
    result: Result<ToolOutput, ToolError>,
    outputs: &Outputs,
) -> CallToolResult {
    let duration_ms = started.elapsed().as_millis() as u64;
    // The call's trace, when traces are on: the log line joins the trace and the audit lines.
    let trace_id = crate::traces::current_trace_id();
    // Saved tools share one label: their names are the callers' to choose.
    let label = if tool.starts_with(SAVED_TOOL_PREFIX) {
        "saved_tool"
    } else {
        tool
    };
    crate::metrics::metrics().tool_call(label, result.as_ref().map_or_else(outcome_name, |_| "ok"));
    match result {
        Ok(output) => {
            tracing::info!(call = %id, %request, tool, trace_id, attempts = output.attempts, outcome = "ok", duration_ms, "tool call");
            let content = files::content(output.text, outputs.taken());
            structured::with_data(CallToolResult::success(content), output.data)
        }
        Err(error) => {
            let outcome = outcome_name(&error);
            if error.is_infrastructure() {
                tracing::error!(call = %id, %request, tool, trace_id, outcome, duration_ms, error = %crate::error_chain(&error), "tool call");
            } else {
                tracing::info!(call = %id, %request, tool, trace_id, outcome, duration_ms, error = %error, "tool call");
            }
            CallToolResult::error(vec![ContentBlock::text(format!("{tool} failed: {error}"))])
        }
    }
}

/// The key of a result's `_meta` that carries the receipts of its audit lines.
pub const RECEIPTS_META: &str = crate::audit::receipt::META_KEY;

/// Adds to a result's `_meta` the receipts of the lines its call wrote
/// (`audit::receipt::Entry`: each line's origin, leaf index and leaf hash, for `file-agent
/// audit prove --index`; with signed receipts, the line, its proof and the signed
/// checkpoint), beside what it holds; nothing without lines.
fn add_receipts(
    meta: &mut Option<rmcp::model::MetaObject>,
    receipts: Vec<crate::audit::receipt::Entry>,
) {
    if receipts.is_empty() {
        return;
    }
    let Ok(list) = serde_json::to_value(receipts) else {
        return;
    };
    meta.get_or_insert_with(Default::default)
        .insert(RECEIPTS_META.into(), list);
}

/// The longest an answer waits for the progress notifications queued before it.
const PROGRESS_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

impl FileAgentServer {
    /// The tools `identity` sees: the built-in ones it may use, then its saved tools
    /// (`my_<name>`).
    fn tools_for(&self, identity: &Identity) -> Vec<rmcp::model::Tool> {
        // The tools that change saved tools are listed only where saved tools are on and the
        // caller may change them.
        let changes_saved = self.tools.saved_tools_on() && identity.allows(SCOPE_SAVED_TOOLS);
        let mut tools: Vec<rmcp::model::Tool> = self
            .tool_router
            .list_all()
            .into_iter()
            .filter(|tool| match Tool::named(&tool.name) {
                Some(Tool::ListTools) => self.tools.saved_tools_on(),
                Some(tool) if tool.manages_saved_tools() => changes_saved,
                _ => true,
            })
            .collect();
        tools.extend(
            self.tools
                .saved_tools_for(identity)
                .into_iter()
                .map(|tool| {
                    let listed = rmcp::model::Tool::new(
                        tool.listed_name(),
                        crate::tools::dynamic::description_for(&tool, identity),
                        std::sync::Arc::new(tool.input_schema),
                    );
                    structured::saved_tool(listed, tool.output_schema)
                }),
        );
        tools
    }

    /// Where this call's phases are shown besides the log: the status of the task it runs as,
    /// else MCP progress when the request has a progress token; status events when it names an Open WebUI chat (one it saves: not a
    /// temporary chat or a channel's) and message and the files go to that Open WebUI (with
    /// `FILE_AGENT_CHAT_STATUS` on).
    fn phase_views(&self, context: &RequestContext<RoleServer>) -> phases::Views {
        // A task's phases are its status: no progress goes to the request that made it.
        let task = context.extensions.get::<tasks::StatusMessage>().cloned();
        let progress = context
            .meta
            .get_progress_token()
            .filter(|_| task.is_none())
            .map(|token| (context.peer.clone(), token));
        let header = |name: &str| {
            request_header(context, name)
                .map(str::trim)
                .filter(|value| !value.is_empty() && value.len() <= 200)
                .map(str::to_string)
        };
        let chat = match (
            self.tools.storage().openwebui(),
            header("x-openwebui-chat-id").filter(|chat| phases::saved_chat(chat)),
            header("x-openwebui-message-id"),
        ) {
            (Some(openwebui), Some(chat), Some(message)) if openwebui.chat_status() => {
                Some(phases::ChatMessage {
                    openwebui: openwebui.clone(),
                    chat,
                    message,
                    caller: caller_of(context),
                })
            }
            _ => None,
        };
        phases::Views {
            progress,
            chat,
            task,
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
        ToolError::Left { .. } => "client_left",
        ToolError::Busy { .. } => "busy",
        ToolError::Deadline(_) => "deadline",
        ToolError::Identity(_) => "refused_identity",
        ToolError::AuditUnavailable(_) => "audit_unavailable",
        ToolError::Session(_) => "session_error",
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
