//! Requests a client can act on the answers to. In front of rmcp on `/mcp`:
//! - [`reject_ambiguous`]: a request with two `Host`, `Authorization` or `X-File-Agent-Key`
//!   headers is refused with 400 (RFC 9112 §3.2: a server must reject more than one `Host`;
//!   two credentials are as ambiguous), instead of being judged on the first;
//! - [`check_jsonrpc`]: the body is read (within the 4 MiB limit) and checked to be one
//!   JSON-RPC message before rmcp sees it: not JSON is 400 with a JSON-RPC `-32700` parse error;
//!   not a request (no `jsonrpc: "2.0"`, no `method`, a batch) is 400 `-32600`; `params` that
//!   are not an object, or a `tools/call` whose `name` is not a string or whose `arguments` are
//!   not an object, is `-32602` (invalid params) naming the parameter, with the request's id
//!   (rmcp would answer those `-32601` "method not found");
//! - every error rmcp answers with a body that is not JSON (a bare text, sometimes echoing a
//!   header) becomes a JSON-RPC error body with `Content-Type: application/json`;
//! - [`nosniff`]: every response says `X-Content-Type-Options: nosniff`;
//! - a `notifications/cancelled` is handed to the calls under way (`mcp::InFlight`) before
//!   rmcp, whose stateless service drops notifications, answers it 202.
//!
//! Checks only the envelope: the arguments themselves are the tool's to judge.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// JSON-RPC: the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the JSON is not a request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: the method's parameters are wrong.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: the server failed.
pub const INTERNAL_ERROR: i64 = -32603;
/// Characters of a non-JSON error body kept in the JSON-RPC error's message.
const MESSAGE_MAX_CHARS: usize = 300;

/// A JSON-RPC error response: `status`, `{"jsonrpc": "2.0", "id": id, "error": {...}}`.
pub fn jsonrpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            .to_string(),
    )
        .into_response()
}

/// 400 for a request with two `Host`, `Authorization` or `X-File-Agent-Key` headers.
pub async fn reject_ambiguous(request: Request, next: Next) -> Response {
    for name in [
        header::HOST.as_str(),
        header::AUTHORIZATION.as_str(),
        super::auth::KEY_HEADER,
    ] {
        if request.headers().get_all(name).iter().count() > 1 {
            let mut response = (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": format!(
                    "the request has more than one {name} header; send exactly one"
                )})),
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
    }
    next.run(request).await
}

/// Adds `X-Content-Type-Options: nosniff` to every response that lacks it.
pub async fn nosniff(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    response
        .headers_mut()
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(HeaderValue::from_static("nosniff"));
    response
}

/// The server's shutdown token, in the request's extensions: once it fired, the server drains.
#[derive(Debug, Clone)]
pub struct Draining(pub tokio_util::sync::CancellationToken);

/// What [`check_jsonrpc`] read of a `POST /mcp` body, for the layers after it (in the
/// request's extensions): its method and id.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// `method`: none for a response.
    pub method: Option<String>,
    /// `id`: null for a notification.
    pub id: Value,
}

/// JSON-RPC: the server cannot take the request now (a server error of the implementation's
/// own range).
pub const SHUTTING_DOWN: i64 = -32000;

/// Checks a `POST /mcp` body as the module says, then hands it to rmcp, and turns a non-JSON
/// error answer into a JSON-RPC one. While the server drains (after SIGTERM), a new
/// `tools/call` is answered 503 with `Retry-After` and a JSON-RPC error: nothing of it starts,
/// so the client can send it again to another replica; every other request is served.
pub async fn check_jsonrpc(request: Request, next: Next) -> Response {
    let draining = request
        .extensions()
        .get::<Draining>()
        .is_some_and(|draining| draining.0.is_cancelled());
    if request.method() != Method::POST {
        return json_errors(next.run(request).await, Value::Null).await;
    }
    let (mut parts, body) = request.into_parts();
    let bytes = match read_body(body).await {
        Ok(bytes) => bytes,
        Err(refusal) => return refusal,
    };
    let id = match check(&bytes) {
        Ok(id) => id,
        Err(refusal) => return refusal,
    };
    let method = method_of(&bytes);
    if draining && method.as_deref() == Some("tools/call") {
        return shutting_down(id);
    }
    // rmcp's stateless service drops notifications: a cancel reaches its call from here.
    if method.as_deref() == Some("notifications/cancelled")
        && let Some(in_flight) = parts.extensions.get::<crate::mcp::InFlight>()
    {
        in_flight.notified_over_http(&parts.extensions, &bytes);
    }
    parts.extensions.insert(Envelope {
        method,
        id: id.clone(),
    });
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    json_errors(response, id).await
}

/// The whole body, up to [`super::MAX_MCP_BODY_BYTES`]; a JSON-RPC error (413 past it, 400
/// when it cannot be read) otherwise.
#[allow(clippy::result_large_err)]
async fn read_body(body: Body) -> Result<axum::body::Bytes, Response> {
    axum::body::to_bytes(body, super::MAX_MCP_BODY_BYTES)
        .await
        .map_err(|error| {
            let too_large = std::error::Error::source(&error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            if too_large {
                jsonrpc_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    Value::Null,
                    INVALID_REQUEST,
                    &format!(
                        "the request body is larger than {} MiB",
                        super::MAX_MCP_BODY_BYTES / (1024 * 1024)
                    ),
                )
            } else {
                jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    Value::Null,
                    INVALID_REQUEST,
                    &format!("the request body could not be read: {error}"),
                )
            }
        })
}

/// 503 with `Retry-After` to a tool call that comes while the server drains: nothing of it
/// started, so the client may send it again.
fn shutting_down(id: Value) -> Response {
    let mut response = jsonrpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        SHUTTING_DOWN,
        "file-agent is shutting down and started nothing of this call; send it again (another replica, or this one once restarted, will answer)",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

/// The message's id (null for a notification or a response) when `body` is one well-formed
/// JSON-RPC message; else `Err` with the answer.
#[allow(clippy::result_large_err)]
fn check(body: &[u8]) -> Result<Value, Response> {
    let object = one_object(body)?;
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid_request("the message lacks \"jsonrpc\": \"2.0\""));
    }
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    if !matches!(id, Value::Null | Value::String(_) | Value::Number(_)) {
        return Err(invalid_request("\"id\" must be a string or a number"));
    }
    let Some(method) = object.get("method") else {
        // A response to a server's request (it has a result or an error).
        return if object.contains_key("result") || object.contains_key("error") {
            Ok(Value::Null)
        } else {
            Err(invalid_request(
                "the message has no \"method\": a request needs one (e.g. \"tools/call\")",
            ))
        };
    };
    let Some(method) = method.as_str() else {
        return Err(invalid_request("\"method\" must be a string"));
    };
    check_params(&object, method, &id)?;
    Ok(id)
}

/// `body` as one JSON object: not something else, not a batch.
#[allow(clippy::result_large_err)]
fn one_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, Response> {
    let message: Value = serde_json::from_slice(body).map_err(|error| {
        jsonrpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            PARSE_ERROR,
            &format!("the body is not JSON ({error}); send one JSON-RPC 2.0 message"),
        )
    })?;
    match message {
        Value::Object(object) => Ok(object),
        Value::Array(_) => Err(invalid_request(
            "JSON-RPC batches are not supported (MCP sends one message per request)",
        )),
        _ => Err(invalid_request(
            "the body is not a JSON-RPC message: send an object with \"jsonrpc\": \"2.0\" and a \"method\"",
        )),
    }
}

/// 400 with `INVALID_REQUEST`, `message` saying why the body is no valid JSON-RPC message.
fn invalid_request(message: &str) -> Response {
    jsonrpc_error(
        StatusCode::BAD_REQUEST,
        Value::Null,
        INVALID_REQUEST,
        message,
    )
}

/// The params of a request with `method`: an object when present, and for `tools/call` a
/// tool name and an object of arguments; an `INVALID_PARAMS` error naming what is wrong
/// otherwise.
#[allow(clippy::result_large_err)]
fn check_params(
    object: &serde_json::Map<String, Value>,
    method: &str,
    id: &Value,
) -> Result<(), Response> {
    let invalid_params =
        |message: &str| jsonrpc_error(StatusCode::OK, id.clone(), INVALID_PARAMS, message);
    let params = match object.get("params") {
        None => None,
        Some(Value::Object(params)) => Some(params),
        Some(_) => return Err(invalid_params("\"params\" must be an object")),
    };
    if method == "tools/call" {
        let Some(params) = params else {
            return Err(invalid_params(
                "tools/call needs \"params\": {\"name\": <tool>, \"arguments\": {...}}",
            ));
        };
        if !params.get("name").is_some_and(Value::is_string) {
            return Err(invalid_params(
                "\"params.name\" must be the tool's name, a string",
            ));
        }
        if !params
            .get("arguments")
            .is_none_or(|arguments| arguments.is_object() || arguments.is_null())
        {
            return Err(invalid_params(
                "\"params.arguments\" must be an object of the tool's arguments",
            ));
        }
    }
    Ok(())
}

/// The `method` of a message that [`check`] passed.
fn method_of(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Method {
        method: Option<String>,
    }
    serde_json::from_slice::<Method>(body).ok()?.method
}

/// `response`, unless it is an error whose body is not JSON: then a JSON-RPC error with the
/// same status, its text (cut short) as the message, and the request's `id`, so that a client
/// waiting for that request's answer gets it (rmcp answers a call cut short by shutdown with a
/// bare 500).
async fn json_errors(response: Response, id: Value) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let message: String = match text.trim() {
        "" => status.canonical_reason().unwrap_or("error").to_string(),
        text => text.chars().take(MESSAGE_MAX_CHARS).collect(),
    };
    let code = if status.is_server_error() {
        INTERNAL_ERROR
    } else {
        INVALID_REQUEST
    };
    let mut converted = jsonrpc_error(status, id, code, &message);
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            converted.headers_mut().append(name, value.clone());
        }
    }
    converted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_of(body: &str) -> Option<u16> {
        check(body.as_bytes())
            .err()
            .map(|response| response.status().as_u16())
    }

    #[test]
    fn only_well_formed_messages_pass() {
        for good in [
            r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#,
            r#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#,
            r#"{"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "run_python", "arguments": {"code": "1"}}}"#,
            r#"{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_tools"}}"#,
            r#"{"jsonrpc": "2.0", "id": 3, "result": {}}"#,
        ] {
            assert!(check(good.as_bytes()).is_ok(), "{good}");
        }
        for (bad, status) in [
            ("{not json", 400),
            ("[]", 400),
            ("42", 400),
            (r#"{"id": 1, "method": "tools/list"}"#, 400),
            (r#"{"jsonrpc": "2.0", "id": 1}"#, 400),
            (r#"{"jsonrpc": "2.0", "id": {}, "method": "x"}"#, 400),
            (r#"{"jsonrpc": "2.0", "id": 1, "method": 7}"#, 400),
            (
                r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": null}"#,
                200,
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": null}}"#,
                200,
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": "a"}}"#,
                200,
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}"#,
                200,
            ),
        ] {
            assert_eq!(status_of(bad), Some(status), "{bad}");
        }
    }
}
