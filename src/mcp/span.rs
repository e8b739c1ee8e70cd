//! The server span of an MCP request, in OpenTelemetry's semantic conventions for MCP
//! (`docs/gen-ai/mcp.md`): named `{mcp.method.name} {target}` (`tools/call run_python`), kind
//! SERVER, with the method, the tool, the JSON-RPC id, the protocol version, the session and
//! the transport; `error.type` when the call fails. Its parent is the W3C trace context in the
//! request's `params._meta` (`traceparent`, `tracestate`), else the HTTP request's
//! `traceparent` header; a malformed one starts a new trace. Ids and names only: never an
//! argument, a header's other values or a token.

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RequestContext, RoleServer};

/// The span of one `tools/call` request, not yet entered (its parent is set).
pub(super) fn tools_call(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> tracing::Span {
    request_span(
        "tools/call",
        Some(&request.name),
        context,
        request.meta.as_ref(),
    )
}

/// The span of another request (`tools/list`, `resources/list`, `resources/read`, `tasks/get`,
/// ...), named by
/// its method alone: a resource's URI holds a file's id, which is the capability to read it.
pub(super) fn other(method: &'static str, context: &RequestContext<RoleServer>) -> tracing::Span {
    request_span(method, None, context, None)
}

/// The server span of a request of `method` about `tool`, with `params_meta` (the params'
/// own `_meta`, when rmcp left it there) read for the trace context after the context's.
fn request_span(
    method: &'static str,
    tool: Option<&str>,
    context: &RequestContext<RoleServer>,
    params_meta: Option<&rmcp::model::RequestMetaObject>,
) -> tracing::Span {
    let parts = context.extensions.get::<http::request::Parts>();
    let span = tracing::info_span!(
        "mcp.server",
        otel.name = tool.map_or_else(|| method.to_string(), |tool| format!("{method} {tool}")),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        mcp.method.name = method,
        gen_ai.tool.name = tool,
        gen_ai.operation.name = tool.map(|_| "execute_tool"),
        jsonrpc.request.id = %context.id,
        mcp.protocol.version = context.protocol_version().map(|v| v.as_str().to_string()),
        mcp.session.id = parts.and_then(|p| header(p, "mcp-session-id")),
        network.transport = if parts.is_some() { "tcp" } else { "pipe" },
        network.protocol.name = parts.map(|_| "http"),
        network.protocol.version = parts.map(|p| http_version(p.version)),
        error.type = tracing::field::Empty,
        file_agent.call.id = tracing::field::Empty,
    );
    let meta = |name: &str| {
        context
            .meta
            .get(name)
            .or_else(|| params_meta.and_then(|meta| meta.get(name)))
            .and_then(|value| value.as_str())
            .map(str::to_string)
    };
    let http = parts.and_then(|p| Some((header(p, "traceparent")?, header(p, "tracestate"))));
    match (meta("traceparent"), http) {
        // The MCP message's context is the parent; the HTTP request's, when it differs, is a
        // link (one HTTP request may carry several MCP messages, and the reverse).
        (Some(traceparent), http) => {
            crate::traces::set_remote_parent(&span, &traceparent, meta("tracestate").as_deref());
            if let Some((header, state)) = http.filter(|(header, _)| *header != traceparent) {
                crate::traces::add_remote_link(&span, &header, state.as_deref());
            }
        }
        (None, Some((header, state))) => {
            crate::traces::set_remote_parent(&span, &header, state.as_deref());
        }
        (None, None) => {}
    }
    span
}

/// Marks `span` failed when the call's result is a tool error (`error.type = tool_error`, as
/// the conventions ask for a `CallToolResult` with `isError`).
pub(super) fn record_result(span: &tracing::Span, result: &CallToolResult) {
    if result.is_error == Some(true) {
        span.record("error.type", "tool_error");
        span.record("otel.status_code", "ERROR");
    }
}

/// Marks `span` failed with the JSON-RPC error code of a protocol error.
pub(super) fn record_protocol_error(span: &tracing::Span, error: &rmcp::ErrorData) {
    span.record("error.type", error.code.0.to_string());
    span.record("otel.status_code", "ERROR");
}

/// A header's value, when it is text.
fn header(parts: &http::request::Parts, name: &str) -> Option<String> {
    parts
        .headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string)
}

/// `1.1`, `2`: the HTTP version as `network.protocol.version` writes it.
fn http_version(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "0.9",
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    }
}
