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
    let parts = context.extensions.get::<http::request::Parts>();
    let tool: &str = &request.name;
    let span = tracing::info_span!(
        "mcp.server",
        otel.name = format!("tools/call {tool}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        mcp.method.name = "tools/call",
        gen_ai.tool.name = tool,
        gen_ai.operation.name = "execute_tool",
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
            .or_else(|| request.meta.as_ref().and_then(|meta| meta.get(name)))
            .and_then(|value| value.as_str())
            .map(str::to_string)
    };
    let parent = match meta("traceparent") {
        Some(traceparent) => Some((traceparent, meta("tracestate"))),
        None => parts.and_then(|p| {
            let traceparent = header(p, "traceparent")?;
            Some((traceparent, header(p, "tracestate")))
        }),
    };
    if let Some((traceparent, tracestate)) = parent {
        crate::traces::set_remote_parent(&span, &traceparent, tracestate.as_deref());
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
