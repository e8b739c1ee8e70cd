//! A fake of Open WebUI's files API (backend/open_webui/routers/files.py): upload
//! `POST /api/v1/files/` (multipart `file`), `GET /api/v1/files/{id}`, and
//! `GET /api/v1/files/{id}/content` with the stored type and an RFC 5987
//! Content-Disposition; and `GET /api/v1/auths/` (backend/open_webui/routers/auths.py): the
//! session user of the bearer token, 401 for a token Open WebUI does not accept. Access is per
//! user, by bearer token; a file another user owns is a 404, as in Open WebUI. Errors are
//! FastAPI's `{"detail": ...}`. And `POST /api/v1/chats/{id}/messages/{message_id}/event`
//! (backend/open_webui/routers/chats.py): an event for a message of a chat the caller owns
//! (else 401, as Open WebUI answers), recorded in order; it can be made to hang or fail.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

/// A token for user "alice" (an API key, as an admin would configure).
pub const ALICE: &str = "sk-alice";
/// A token for user "bob".
pub const BOB: &str = "token-bob";

/// One stored file.
#[derive(Debug, Clone)]
pub struct StoredFile {
    /// Its owner's token.
    pub owner: String,
    /// Its name.
    pub filename: String,
    /// The multipart part's content type.
    pub content_type: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Whether the upload had `?process=false`.
    pub process_false: bool,
}

#[derive(Default)]
struct Inner {
    files: HashMap<String, StoredFile>,
    /// When set, every request gets this status.
    fail_with: Option<u16>,
    /// Requests of `GET /api/v1/auths/` so far.
    session_checks: usize,
    /// Every bearer token sent to any route, in order.
    bearers: Vec<String>,
    /// Chats by id: their owner's token.
    chats: HashMap<String, String>,
    /// Events accepted: (chat, message, event).
    events: Vec<(String, String, serde_json::Value)>,
    /// Requests of the event route so far, refused ones included.
    event_requests: usize,
    /// How the event route answers.
    events_answer: EventsAnswer,
}

/// How the fake's event route answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EventsAnswer {
    /// As Open WebUI: `true`.
    #[default]
    Normally,
    /// Never.
    Hang,
    /// 500.
    Fail,
}

/// The fake and its files.
#[derive(Clone, Default)]
pub struct FakeOpenWebUi {
    inner: Arc<Mutex<Inner>>,
    /// Its base URL.
    pub url: String,
}

impl FakeOpenWebUi {
    /// Starts an empty fake.
    pub async fn start() -> Self {
        let mut fake = Self::default();
        let app = axum::Router::new()
            .route("/api/v1/files/", post(upload))
            .route("/api/v1/files/{id}", get(details))
            .route("/api/v1/files/{id}/content", get(content))
            .route("/api/v1/auths/", get(session_user))
            .route(
                "/api/v1/chats/{id}/messages/{message_id}/event",
                post(message_event),
            )
            .with_state(fake.clone());
        fake.url = super::spawn(app).await;
        fake
    }

    /// Puts a file there as `owner`, returning its id.
    pub fn add(&self, owner: &str, filename: &str, content_type: &str, bytes: Vec<u8>) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        self.inner.lock().unwrap().files.insert(
            id.clone(),
            StoredFile {
                owner: owner.into(),
                filename: filename.into(),
                content_type: content_type.into(),
                bytes,
                process_false: false,
            },
        );
        id
    }

    /// File `id`, if stored.
    pub fn get(&self, id: &str) -> Option<StoredFile> {
        self.inner.lock().unwrap().files.get(id).cloned()
    }

    /// Requests of the session user (`GET /api/v1/auths/`) so far.
    pub fn session_checks(&self) -> usize {
        self.inner.lock().unwrap().session_checks
    }

    /// Makes `owner` (a token) own chat `id`.
    pub fn add_chat(&self, id: &str, owner: &str) {
        self.inner
            .lock()
            .unwrap()
            .chats
            .insert(id.into(), owner.into());
    }

    /// The events accepted so far, in order: (chat, message, event).
    pub fn events(&self) -> Vec<(String, String, serde_json::Value)> {
        self.inner.lock().unwrap().events.clone()
    }

    /// Requests of the event route so far, accepted or not.
    pub fn event_requests(&self) -> usize {
        self.inner.lock().unwrap().event_requests
    }

    /// How the event route answers from now on.
    pub fn answer_events(&self, answer: EventsAnswer) {
        self.inner.lock().unwrap().events_answer = answer;
    }

    /// Every bearer token it was sent so far.
    pub fn bearers(&self) -> Vec<String> {
        self.inner.lock().unwrap().bearers.clone()
    }

    /// Makes every request answer `status` from now on.
    pub fn fail_with(&self, status: u16) {
        self.inner.lock().unwrap().fail_with = Some(status);
    }
}

fn detail(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"detail": message}))).into_response()
}

/// The user's token, or the error Open WebUI gives.
#[allow(clippy::result_large_err)]
fn authenticate(fake: &FakeOpenWebUi, headers: &HeaderMap) -> Result<String, Response> {
    if let Some(status) = fake.inner.lock().unwrap().fail_with {
        let status = StatusCode::from_u16(status).unwrap();
        return Err(detail(status, "Internal Server Error"));
    }
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    if let Some(token) = &token {
        fake.inner.lock().unwrap().bearers.push(token.clone());
    }
    match token {
        None => Err(detail(StatusCode::UNAUTHORIZED, "Not authenticated")),
        Some(token) if token == ALICE || token == BOB => Ok(token),
        Some(_) => Err(detail(
            StatusCode::UNAUTHORIZED,
            "Your session has expired or the token is invalid. Please sign in again.",
        )),
    }
}

const NOT_FOUND: &str = "We could not find what you're looking for :/";

/// The session user of the bearer token, as Open WebUI answers it (fewer fields).
async fn session_user(State(fake): State<FakeOpenWebUi>, headers: HeaderMap) -> Response {
    fake.inner.lock().unwrap().session_checks += 1;
    match authenticate(&fake, &headers) {
        Ok(user) => Json(json!({
            "token": user, "token_type": "Bearer", "expires_at": null, "id": user,
            "email": format!("{user}@example.com"), "name": user, "role": "user",
            "profile_image_url": "", "permissions": {}
        }))
        .into_response(),
        Err(response) => response,
    }
}

/// An event for a message: only the chat's owner may post (Open WebUI also lets an admin with
/// `ENABLE_ADMIN_CHAT_ACCESS`); the body is `{"type": ..., "data": {...}}`.
async fn message_event(
    State(fake): State<FakeOpenWebUi>,
    Path((chat, message)): Path<(String, String)>,
    headers: HeaderMap,
    Json(event): Json<serde_json::Value>,
) -> Response {
    fake.inner.lock().unwrap().event_requests += 1;
    let user = match authenticate(&fake, &headers) {
        Ok(user) => user,
        Err(response) => return response,
    };
    let answer = fake.inner.lock().unwrap().events_answer;
    match answer {
        EventsAnswer::Hang => {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        }
        EventsAnswer::Fail => return detail(StatusCode::INTERNAL_SERVER_ERROR, "boom"),
        EventsAnswer::Normally => {}
    }
    let mut inner = fake.inner.lock().unwrap();
    if inner.chats.get(&chat) != Some(&user) {
        return detail(
            StatusCode::UNAUTHORIZED,
            "You do not have permission to access this resource. Please contact your administrator for assistance.",
        );
    }
    if !event["type"].is_string() || !event["data"].is_object() {
        return detail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "type and data are required",
        );
    }
    inner.events.push((chat, message, event));
    Json(true).into_response()
}

async fn upload(
    State(fake): State<FakeOpenWebUi>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    mut multipart: Multipart,
) -> Response {
    let user = match authenticate(&fake, &headers) {
        Ok(user) => user,
        Err(response) => return response,
    };
    while let Ok(Some(field)) = multipart.next_field().await {
        if field.name() != Some("file") {
            continue;
        }
        let filename = field.file_name().unwrap_or("").to_string();
        let content_type = field
            .content_type()
            .unwrap_or("application/octet-stream")
            .to_string();
        let bytes = field.bytes().await.unwrap().to_vec();
        let id = uuid::Uuid::new_v4().to_string();
        let size = bytes.len();
        fake.inner.lock().unwrap().files.insert(
            id.clone(),
            StoredFile {
                owner: user.clone(),
                filename: filename.clone(),
                content_type: content_type.clone(),
                bytes,
                process_false: query.get("process").map(String::as_str) == Some("false"),
            },
        );
        return Json(json!({
            "id": id, "user_id": user, "hash": null, "filename": filename,
            "data": {}, "meta": {"name": filename, "content_type": content_type, "size": size},
            "created_at": 1_763_000_000, "updated_at": 1_763_000_000
        }))
        .into_response();
    }
    detail(
        StatusCode::BAD_REQUEST,
        "There was an error parsing the body",
    )
}

fn readable(fake: &FakeOpenWebUi, user: &str, id: &str) -> Option<StoredFile> {
    fake.get(id).filter(|file| file.owner == user)
}

async fn details(
    State(fake): State<FakeOpenWebUi>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let user = match authenticate(&fake, &headers) {
        Ok(user) => user,
        Err(response) => return response,
    };
    match readable(&fake, &user, &id) {
        Some(file) => Json(json!({
            "id": id, "user_id": file.owner, "filename": file.filename,
            "meta": {"name": file.filename, "content_type": file.content_type, "size": file.bytes.len()},
        }))
        .into_response(),
        None => detail(StatusCode::NOT_FOUND, NOT_FOUND),
    }
}

async fn content(
    State(fake): State<FakeOpenWebUi>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let user = match authenticate(&fake, &headers) {
        Ok(user) => user,
        Err(response) => return response,
    };
    let Some(file) = readable(&fake, &user, &id) else {
        return detail(StatusCode::NOT_FOUND, NOT_FOUND);
    };
    let mut response = (
        StatusCode::OK,
        [("content-type", file.content_type.clone())],
        file.bytes.clone(),
    )
        .into_response();
    // Open WebUI sends no Content-Disposition for text/plain, `inline` for PDF.
    if file.content_type != "text/plain" {
        let kind = if file.content_type == "application/pdf" {
            "inline"
        } else {
            "attachment"
        };
        let encoded: String = file
            .filename
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        response.headers_mut().insert(
            "content-disposition",
            format!("{kind}; filename*=UTF-8''{encoded}")
                .parse()
                .unwrap(),
        );
    }
    response
}

/// A user of Open WebUI, as it forwards one.
#[derive(Debug, Clone)]
pub struct ForwardedUser {
    /// Its id (`user.id`).
    pub id: &'static str,
    /// Its name.
    pub name: &'static str,
    /// Its email address.
    pub email: &'static str,
    /// `user` or `admin`.
    pub role: &'static str,
}

/// The headers Open WebUI 0.12 sends an MCP server about `user` with
/// `ENABLE_FORWARD_USER_INFO_HEADERS=true` (`build_tool_server_headers` in
/// open_webui/utils/tools.py, `include_user_info_headers` in open_webui/utils/headers.py): with
/// `FORWARD_USER_INFO_HEADER_JWT_SECRET` set (`jwt_secret`), one HS256 JWT in
/// `X-OpenWebUI-User-Jwt` instead of the plain `X-OpenWebUI-User-*` headers; then the chat's
/// and the message's ids.
pub fn forwarded_headers(
    user: &ForwardedUser,
    jwt_secret: Option<&str>,
    chat_id: &str,
    message_id: &str,
) -> Vec<(&'static str, String)> {
    let mut headers = match jwt_secret {
        Some(secret) => vec![(
            "x-openwebui-user-jwt",
            mint_forward_user_jwt(user, secret, 300),
        )],
        None => vec![
            ("x-openwebui-user-name", user.name.into()),
            ("x-openwebui-user-id", user.id.into()),
            ("x-openwebui-user-email", user.email.into()),
            ("x-openwebui-user-role", user.role.into()),
        ],
    };
    headers.push(("x-openwebui-chat-id", chat_id.into()));
    headers.push(("x-openwebui-message-id", message_id.into()));
    headers
}

/// Open WebUI 0.12's `_mint_forward_user_jwt`: PyJWT's HS256 with the stripped secret, claims
/// `sub`, `email`, `name`, `role`, `iss` "open-webui", `iat` now and `exp` now + `expires_in`
/// (`FORWARD_USER_INFO_HEADER_JWT_EXPIRES_SECONDS`, 300 by default; negative for a token that
/// has already expired).
pub fn mint_forward_user_jwt(user: &ForwardedUser, secret: &str, expires_in: i64) -> String {
    let now = super::issuer::now() as i64;
    let claims = json!({
        "sub": user.id, "email": user.email, "name": user.name, "role": user.role,
        "iss": "open-webui", "iat": now, "exp": now + expires_in,
    });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.trim().as_bytes()),
    )
    .unwrap()
}
