//! A fake of the OpenAI chat completions API: `POST /v1/chat/completions` with bearer auth,
//! answering from a script of replies, with OpenAI's real error bodies (401
//! `invalid_api_key`, 404 `model_not_found`, 500 `server_error`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
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
}

#[derive(Default)]
struct Inner {
    replies: VecDeque<Reply>,
    requests: Vec<Value>,
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
        let mut fake = Self::default();
        fake.inner.lock().unwrap().replies = replies.into();
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(fake.clone());
        fake.base_url = format!("{}/v1", super::spawn(app).await);
        fake
    }

    /// The JSON bodies of the chat requests received.
    pub fn requests(&self) -> Vec<Value> {
        self.inner.lock().unwrap().requests.clone()
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
