//! A fake of the OpenAI API: `POST /v1/chat/completions` with bearer auth, answering from a
//! script of replies, with OpenAI's real error bodies (401 `invalid_api_key`, 404
//! `model_not_found`, 500 `server_error`); and, when given a research plan, the Responses API
//! in background mode (`POST /v1/responses`, `GET /v1/responses/{id}`, `POST .../cancel`)
//! with the response objects OpenAI sends. Without a plan, `/v1/responses` answers like an
//! OpenAI-compatible server that lacks it (FastAPI's 404 `{"detail": "Not Found"}`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::Path;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// The key the fake accepts.
pub const KEY: &str = "sk-test-fake-key";
/// The model the fake serves.
pub const MODEL: &str = "gpt-fake";

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A reply whose content is this Python in a ```python fence.
    Code(String),
    /// A 200 whose body is not JSON at all (a proxy's HTML page).
    Garbage,
    /// A reply whose content is this text as it is (an answer, a checker's verdict).
    Text(String),
    /// 429 with `Retry-After: 1`, as a rate limit answers.
    RateLimited,
    /// No answer, ever (the request hangs).
    Hang,
}

/// What one poll of a research run answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Poll {
    /// The run is still queued.
    Queued,
    /// The run is working.
    InProgress,
    /// An HTML page with status 200 (a proxy hiccup).
    Garbage,
    /// Done, with a report and two URL citations (the last one repeats).
    Completed,
    /// The run failed at the provider.
    Failed,
    /// Working (`in_progress`) until this long after the run was created, then
    /// [`Poll::Completed`]: a run as long as a real one, whatever the polls.
    WorkingFor(std::time::Duration),
}

/// The report text of [`Poll::Completed`] and its cited pages.
pub const REPORT: &str = "Async/await was stabilized in Rust 1.39 ([blog.rust-lang.org](https://blog.rust-lang.org/2019/11/07/Async-await-stable.html)). Rust 1.0 shipped in May 2015 ([rust-lang.org](https://www.rust-lang.org/)).";

#[derive(Default)]
struct Inner {
    replies: VecDeque<Reply>,
    requests: Vec<Value>,
    /// Every header value of every chat request, in order.
    header_values: Vec<String>,
    research: Option<VecDeque<Poll>>,
    research_requests: Vec<Value>,
    /// When each run was created, by its index (the end of its id).
    research_created: Vec<std::time::Instant>,
    polls: usize,
    /// Polls answered with a completed run.
    completions: usize,
    cancels: usize,
}

/// The fake and what it saw.
#[derive(Clone, Default)]
pub struct FakeOpenAi {
    inner: Arc<Mutex<Inner>>,
    /// Its base URL, with `/v1`.
    pub base_url: String,
}

impl FakeOpenAi {
    /// Starts the fake with these replies, in order.
    pub async fn start(replies: Vec<Reply>) -> Self {
        Self::serve(replies, None).await
    }

    /// Starts the fake with a Responses API whose polls answer `polls` in order (the last
    /// one repeats).
    pub async fn with_research(polls: Vec<Poll>) -> Self {
        Self::serve(Vec::new(), Some(polls)).await
    }

    /// Starts the fake with these chat replies and a Responses API answering `polls`.
    pub async fn with_replies_and_research(replies: Vec<Reply>, polls: Vec<Poll>) -> Self {
        Self::serve(replies, Some(polls)).await
    }

    async fn serve(replies: Vec<Reply>, research: Option<Vec<Poll>>) -> Self {
        let mut fake = Self::default();
        {
            let mut inner = fake.inner.lock().unwrap();
            inner.replies = replies.into();
            inner.research = research.map(Into::into);
        }
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/v1/responses", post(create_response))
            .route("/v1/responses/{id}", get(retrieve_response))
            .route("/v1/responses/{id}/cancel", post(cancel_response))
            .with_state(fake.clone());
        fake.base_url = format!("{}/v1", super::spawn(app).await);
        fake
    }

    /// The JSON bodies of the chat requests received.
    pub fn requests(&self) -> Vec<Value> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// Every header value the chat requests carried, in order.
    pub fn header_values(&self) -> Vec<String> {
        self.inner.lock().unwrap().header_values.clone()
    }

    /// The text of message `message` of chat request `request` (both counted from 0).
    pub fn message(&self, request: usize, message: usize) -> String {
        self.requests()[request]["messages"][message]["content"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The text of the last message of each chat request.
    pub fn last_messages(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|request| {
                let messages = request["messages"].as_array().cloned().unwrap_or_default();
                messages
                    .last()
                    .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                    .unwrap_or_default()
            })
            .collect()
    }

    /// The bodies of `POST /v1/responses`, the polls and the cancels received.
    pub fn research_seen(&self) -> (Vec<Value>, usize, usize) {
        let inner = self.inner.lock().unwrap();
        (inner.research_requests.clone(), inner.polls, inner.cancels)
    }

    /// How many polls were answered with a completed run: the server has seen a run end.
    pub fn research_completions(&self) -> usize {
        self.inner.lock().unwrap().completions
    }

    /// The environment that points file-agent at this fake.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("OPENAI_API_KEY".into(), KEY.into()),
            ("OPENAI_BASE_URL".into(), self.base_url.clone()),
            ("MODEL_NAME".into(), MODEL.into()),
        ]
    }
}

fn error(status: StatusCode, message: &str, kind: &str, code: Option<&str>) -> Response {
    (
        status,
        Json(json!({"error": {"message": message, "type": kind, "param": null, "code": code}})),
    )
        .into_response()
}

async fn completions(
    State(fake): State<FakeOpenAi>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    fake.inner.lock().unwrap().header_values.extend(
        headers
            .values()
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()),
    );
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if auth != format!("Bearer {KEY}") {
        return error(
            StatusCode::UNAUTHORIZED,
            "Incorrect API key provided: sk-wr***. You can find your API key at https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            Some("invalid_api_key"),
        );
    }
    let model = body["model"].as_str().unwrap_or_default().to_string();
    if model != MODEL {
        return error(
            StatusCode::NOT_FOUND,
            &format!("The model `{model}` does not exist or you do not have access to it."),
            "invalid_request_error",
            Some("model_not_found"),
        );
    }
    let reply = {
        let mut inner = fake.inner.lock().unwrap();
        inner.requests.push(body);
        inner.replies.pop_front()
    };
    let content = match reply {
        Some(Reply::Code(code)) => format!("Here is the script:\n\n```python\n{code}\n```\n"),
        Some(Reply::Text(text)) => text,
        Some(Reply::RateLimited) => {
            let mut response = error(
                StatusCode::TOO_MANY_REQUESTS,
                "Rate limit reached for requests. Please try again in 1s.",
                "requests",
                Some("rate_limit_exceeded"),
            );
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
            return response;
        }
        Some(Reply::Hang) => {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            return StatusCode::GATEWAY_TIMEOUT.into_response();
        }
        Some(Reply::Garbage) => {
            return (
                StatusCode::OK,
                [("content-type", "text/html")],
                "<html><body>502 Bad Gateway</body></html>",
            )
                .into_response();
        }
        None => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
            );
        }
    };
    Json(json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_763_000_000u32,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": null, "annotations": []},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
        "service_tier": "default",
        "system_fingerprint": "fp_fake"
    }))
    .into_response()
}

/// `None` when the key is right, else OpenAI's 401.
fn refuse_bad_key(headers: &HeaderMap) -> Option<Response> {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    (auth != Some(format!("Bearer {KEY}").as_str())).then(|| {
        error(
            StatusCode::UNAUTHORIZED,
            "Incorrect API key provided.",
            "invalid_request_error",
            Some("invalid_api_key"),
        )
    })
}

/// The id of run `index` (counted from 0), as OpenAI's look.
fn run_id(index: usize) -> String {
    format!("resp_68b0c1d2e3f48190a1b2c3d4e5f6{index:04x}")
}

/// The index of the run `id` names, if it is one of [`run_id`]'s.
fn run_index(id: &str) -> Option<usize> {
    let hex = id.strip_prefix("resp_68b0c1d2e3f48190a1b2c3d4e5f6")?;
    usize::from_str_radix(hex, 16).ok()
}

/// A response object as OpenAI sends it, in `status`.
fn response_object(status: &str, request: &Value) -> Value {
    json!({
        "id": "resp_68b0c1d2e3f48190a1b2c3d4e5f6a7b8",
        "object": "response",
        "created_at": 1_756_400_000u64,
        "status": status,
        "background": true,
        "error": null,
        "incomplete_details": null,
        "instructions": request["instructions"],
        "max_output_tokens": null,
        "model": format!("{}-2025-06-26", request["model"].as_str().unwrap_or("o4-mini-deep-research")),
        "output": [],
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": "medium", "summary": null},
        "service_tier": "auto",
        "store": true,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [{"type": "web_search_preview", "search_context_size": "medium",
                   "user_location": {"type": "approximate", "city": null, "country": "US", "region": null, "timezone": null}}],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": null,
        "user": null,
        "metadata": {}
    })
}

async fn create_response(
    State(fake): State<FakeOpenAi>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if fake.inner.lock().unwrap().research.is_none() {
        return (StatusCode::NOT_FOUND, Json(json!({"detail": "Not Found"}))).into_response();
    }
    if let Some(refusal) = refuse_bad_key(&headers) {
        return refusal;
    }
    let mut object = response_object("queued", &body);
    let mut inner = fake.inner.lock().unwrap();
    object["id"] = json!(run_id(inner.research_requests.len()));
    inner.research_requests.push(body);
    inner.research_created.push(std::time::Instant::now());
    Json(object).into_response()
}

async fn retrieve_response(
    State(fake): State<FakeOpenAi>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refusal) = refuse_bad_key(&headers) {
        return refusal;
    }
    let (poll, request, created) = {
        let mut inner = fake.inner.lock().unwrap();
        inner.polls += 1;
        let index = run_index(&id).unwrap_or(inner.research_requests.len().saturating_sub(1));
        let request = inner
            .research_requests
            .get(index)
            .cloned()
            .unwrap_or(Value::Null);
        let created = inner.research_created.get(index).copied();
        let plan = inner.research.get_or_insert_with(VecDeque::new);
        let poll = if plan.len() > 1 {
            plan.pop_front()
        } else {
            plan.front().cloned()
        };
        (poll.unwrap_or(Poll::InProgress), request, created)
    };
    let poll = match poll {
        Poll::WorkingFor(length) if created.is_some_and(|at| at.elapsed() < length) => {
            Poll::InProgress
        }
        Poll::WorkingFor(_) => Poll::Completed,
        poll => poll,
    };
    if !id.starts_with("resp_") {
        return error(
            StatusCode::NOT_FOUND,
            &format!("Response with id '{id}' not found."),
            "invalid_request_error",
            None,
        );
    }
    let object = |status: &str| {
        let mut object = response_object(status, &request);
        object["id"] = json!(id);
        object
    };
    match poll {
        Poll::Queued => Json(object("queued")).into_response(),
        Poll::InProgress | Poll::WorkingFor(_) => Json(object("in_progress")).into_response(),
        Poll::Garbage => (
            StatusCode::OK,
            [("content-type", "text/html")],
            "<html><body>upstream hiccup</body></html>",
        )
            .into_response(),
        Poll::Failed => {
            let mut object = object("failed");
            object["error"] = json!({"code": "server_error", "message": "The model failed to generate a response."});
            Json(object).into_response()
        }
        Poll::Completed => {
            fake.inner.lock().unwrap().completions += 1;
            let mut object = object("completed");
            let blog = "https://blog.rust-lang.org/2019/11/07/Async-await-stable.html";
            let first = REPORT.find("([blog").unwrap();
            let first_end = REPORT.find(".html))").unwrap() + ".html))".len();
            let second = REPORT.find("([rust-lang.org]").unwrap();
            object["completed_at"] = json!(1_756_400_420u64);
            object["output"] = json!([
                {"id": "rs_1", "type": "reasoning", "summary": []},
                {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "Rust async await stabilization version"}},
                {"id": "ws_2", "type": "web_search_call", "status": "completed", "action": {"type": "open_page", "url": blog}},
                {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": REPORT, "logprobs": [], "annotations": [
                    {"type": "url_citation", "start_index": first, "end_index": first_end, "title": "Async-await on stable Rust!", "url": blog},
                    {"type": "url_citation", "start_index": second, "end_index": REPORT.len() - 1, "title": "Rust Programming Language", "url": "https://www.rust-lang.org/"}
                 ]}]}
            ]);
            object["usage"] = json!({"input_tokens": 20110, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3418, "output_tokens_details": {"reasoning_tokens": 2944}, "total_tokens": 23528});
            Json(object).into_response()
        }
    }
}

async fn cancel_response(State(fake): State<FakeOpenAi>, headers: HeaderMap) -> Response {
    if let Some(refusal) = refuse_bad_key(&headers) {
        return refusal;
    }
    let request = {
        let mut inner = fake.inner.lock().unwrap();
        inner.cancels += 1;
        inner
            .research_requests
            .last()
            .cloned()
            .unwrap_or(Value::Null)
    };
    Json(response_object("cancelled", &request)).into_response()
}
