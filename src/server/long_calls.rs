//! Long calls over HTTP: while a `tools/call` works, bytes flow to its client, so that no read
//! timeout between the client and file-agent (Open WebUI's MCP client has a fixed 300 s one, a
//! reverse proxy its own) ends a call that is still alive.
//!
//! rmcp answers a stateless request with one JSON body when the handler's first message is
//! its answer, and with SSE when the handler first sends a notification (progress, for a
//! client that sent a progress token; those streams carry rmcp's own keep-alive comments).
//! A call that sends nothing would leave the connection silent until its answer. So
//! [`stream_long_calls`] waits for rmcp's answer for one `FILE_AGENT_KEEP_ALIVE`; a call
//! answered by then is passed on as it is (JSON, with rmcp's status). A call still working
//! then, from a client whose `Accept` takes `text/event-stream`, is answered `200` with SSE
//! at once: an SSE comment every `FILE_AGENT_KEEP_ALIVE`, then rmcp's answer as the stream's
//! `message` event (or rmcp's own stream, when it turned to SSE). This works the same for
//! both protocol versions: at 2026-07-28 rmcp keeps the response's headers until the
//! handler's first message, so a setting of rmcp alone could not start the stream early.
//!
//! A client whose `Accept` lacks `text/event-stream` is refused by rmcp (406), as before. A
//! client that goes away drops the stream, and with it rmcp's pending answer: rmcp then
//! fires the call's token exactly as it does for a JSON answer.
//!
//! Does not read or parse the request: `requests::check_jsonrpc` did, and left its
//! [`Envelope`](super::requests::Envelope) in the request's extensions.

use std::pin::Pin;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::requests::{Envelope, INTERNAL_ERROR};

/// The SSE comment sent while a call works (a line starting with `:`, which every SSE client
/// skips).
const KEEP_ALIVE_COMMENT: &[u8] = b": file-agent is working on the call\n\n";
/// The largest answer of rmcp's re-framed as an SSE event (file-agent's own answers are far
/// smaller: outputs are capped by the tools).
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;
/// `Content-Type` of an SSE stream.
const EVENT_STREAM: &str = "text/event-stream";

/// rmcp's answer to a call, still to come.
type Answer = Pin<Box<dyn Future<Output = Response> + Send>>;

/// The `/mcp` layer described in the module: a `tools/call` from a client that takes SSE and
/// that is not answered within `every` is answered with SSE, a comment every `every`.
pub async fn stream_long_calls(
    State(every): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let id = match request.extensions().get::<Envelope>() {
        Some(envelope)
            if envelope.method.as_deref() == Some("tools/call") && takes_sse(request.headers()) =>
        {
            envelope.id.clone()
        }
        _ => return next.run(request).await,
    };
    let mut answer: Answer = Box::pin(next.run(request));
    match tokio::time::timeout(every, &mut answer).await {
        Ok(response) => response,
        Err(_) => streamed(answer, every, id),
    }
}

/// Whether the request's `Accept` names `text/event-stream` (rmcp refuses a `POST` whose
/// `Accept` lacks it or `application/json`, with 406, as the MCP spec says).
fn takes_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|item| item.split(';').next().unwrap_or_default().trim())
        .any(|media| media.eq_ignore_ascii_case(EVENT_STREAM))
}

/// Where the stream is: waiting for rmcp's answer (a comment every tick), relaying rmcp's own
/// stream, or done.
enum Progress {
    Waiting(Answer, tokio::time::Interval),
    Relaying(axum::body::BodyDataStream),
    Done,
}

/// A `200` SSE answer: a comment now and every `every` until `answer` comes, then the answer.
fn streamed(answer: Answer, every: Duration, id: Value) -> Response {
    let ticks = tokio::time::interval(every);
    let stream = futures_util::stream::unfold(Progress::Waiting(answer, ticks), move |progress| {
        let id = id.clone();
        async move {
            match progress {
                Progress::Waiting(mut answer, mut ticks) => tokio::select! {
                    response = &mut answer => {
                        let (event, next) = as_events(response, &id).await;
                        Some((Ok(event), next))
                    }
                    _ = ticks.tick() => Some((
                        Ok(Bytes::from_static(KEEP_ALIVE_COMMENT)),
                        Progress::Waiting(answer, ticks),
                    )),
                },
                Progress::Relaying(mut body) => body
                    .next()
                    .await
                    .map(|chunk| (chunk, Progress::Relaying(body))),
                Progress::Done => None,
            }
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // nginx passes the stream on as it comes instead of buffering it.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// rmcp's answer inside the stream already begun: its own SSE stream as it comes (after one
/// more comment), else its body as one `message` event; an error answer that is not JSON-RPC
/// (rmcp's bare 500 on shutdown) becomes a JSON-RPC error for the call's `id`.
async fn as_events(response: Response, id: &Value) -> (Bytes, Progress) {
    let status = response.status();
    let is_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with(EVENT_STREAM));
    if is_stream && status == StatusCode::OK {
        let body = response.into_body().into_data_stream();
        return (
            Bytes::from_static(KEEP_ALIVE_COMMENT),
            Progress::Relaying(body),
        );
    }
    let body = axum::body::to_bytes(response.into_body(), MAX_ANSWER_BYTES).await;
    let message = match body {
        Ok(bytes) if is_jsonrpc(&bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(bytes) => error_message(id, status, &String::from_utf8_lossy(&bytes)),
        Err(error) => error_message(
            id,
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the answer could not be read: {error}"),
        ),
    };
    (Bytes::from(event(&message)), Progress::Done)
}

/// Whether `bytes` are one JSON-RPC message.
fn is_jsonrpc(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes).is_ok_and(|value| value["jsonrpc"] == "2.0")
}

/// A JSON-RPC error for `id`: what an answer with `status` and `text` said.
fn error_message(id: &Value, status: StatusCode, text: &str) -> String {
    let text: String = text.trim().chars().take(300).collect();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": INTERNAL_ERROR, "message": message}})
        .to_string()
}

/// `message` as one SSE `message` event (a `data:` line per line of it).
fn event(message: &str) -> String {
    let mut event = String::with_capacity(message.len() + 16);
    for line in message.lines() {
        event.push_str("data: ");
        event.push_str(line);
        event.push('\n');
    }
    event.push('\n');
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_accept_that_names_sse_gets_a_stream() {
        let accepts = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
            takes_sse(&headers)
        };
        assert!(accepts("application/json, text/event-stream"));
        assert!(accepts("text/event-stream;q=0.5"));
        assert!(!accepts("*/*"));
        assert!(!accepts("application/json"));
        assert!(!takes_sse(&HeaderMap::new()));
    }

    #[test]
    fn an_answer_is_one_event_and_an_error_names_the_call() {
        assert_eq!(event("{\"a\":1}"), "data: {\"a\":1}\n\n");
        assert_eq!(event("a\nb"), "data: a\ndata: b\n\n");
        let error: Value = serde_json::from_str(&error_message(
            &json!(7),
            StatusCode::INTERNAL_SERVER_ERROR,
            "",
        ))
        .unwrap();
        assert_eq!(error["id"], 7);
        assert_eq!(error["error"]["message"], "Internal Server Error");
    }

    #[tokio::test]
    async fn a_slow_answer_comes_after_comments_as_one_event() {
        let answer: Answer = Box::pin(async {
            tokio::time::sleep(Duration::from_millis(120)).await;
            Response::new(Body::from(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#))
        });
        let response = streamed(answer, Duration::from_millis(30), json!(1));
        assert_eq!(response.headers()[header::CONTENT_TYPE], EVENT_STREAM);
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        let comments = text.matches(": file-agent").count();
        assert!(comments >= 3, "{text}");
        assert!(
            text.ends_with("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"),
            "{text}"
        );
    }
}
