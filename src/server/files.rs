//! The local store over HTTP: `GET /files/{id}/{name}` downloads a stored file (an unguessable
//! id is the capability), `POST /files` (multipart field `file`) stores an input and answers
//! with its id, for `modify_file` and `run_python`.
//!
//! Downloads are sent as attachments with `nosniff` and a sandboxing CSP, so an HTML or SVG
//! file a script wrote cannot run in this server's origin.

use axum::Json;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Multipart, Path};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use super::gate::Gate;
use crate::storage::local::LocalStore;
use crate::storage::{content_type_for, encode_path_segment};
use crate::tools::Tools;
use crate::tools::filename::safe_name;

/// Room for the multipart framing around the file.
const MULTIPART_SLACK: usize = 64 * 1024;

/// How long stored files are kept (`FILE_AGENT_FILES_RETENTION_DAYS`), for the 404's words.
#[derive(Debug, Clone, Copy)]
struct Kept(Option<std::time::Duration>);

/// The routes, bound to `store`; `retention` is how long its files are kept, if not forever.
pub fn routes(
    store: LocalStore,
    gate: Gate,
    retention: Option<std::time::Duration>,
) -> axum::Router<Tools> {
    let limit = store.max_bytes() as usize + MULTIPART_SLACK;
    let upload = post(upload).layer(DefaultBodyLimit::max(limit)).layer(
        axum::middleware::from_fn_with_state(gate, super::gate::admit),
    );
    axum::Router::new()
        .route("/files/{id}/{name}", get(download))
        .route("/files", upload)
        .layer(axum::Extension(store))
        .layer(axum::Extension(Kept(retention)))
}

/// The 404 of a download: under a retention, an old link's file may have been deleted.
fn not_found(kept: Kept) -> Response {
    let message = match kept.0 {
        Some(age) => format!(
            "no such file; check the link. Files here are deleted {} days after they were made (FILE_AGENT_FILES_RETENTION_DAYS): make it again if the link is older",
            age.as_secs() / 86_400
        ),
        None => "no such file; check the link".into(),
    };
    error(StatusCode::NOT_FOUND, message)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

async fn download(
    axum::Extension(store): axum::Extension<LocalStore>,
    axum::Extension(kept): axum::Extension<Kept>,
    Path((id, name)): Path<(String, String)>,
) -> Response {
    let Some(path) = store.locate(&id, &name) else {
        return not_found(kept);
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(file) => file,
        Err(_) => return not_found(kept),
    };
    let length = file.metadata().await.map(|m| m.len()).ok();
    let mut response = Body::from_stream(tokio_util::io::ReaderStream::new(file)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type_for(&name)),
    );
    if let Ok(value) = HeaderValue::from_str(&format!(
        "attachment; filename*=UTF-8''{}",
        encode_path_segment(&name)
    )) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    if let Some(length) = length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox"),
    );
    response
}

async fn upload(
    axum::Extension(store): axum::Extension<LocalStore>,
    mut multipart: Multipart,
) -> Response {
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the file is larger than {} MiB (FILE_AGENT_INPUT_MAX_MIB)",
                store.max_bytes() / (1024 * 1024)
            ),
        )
    };
    loop {
        let mut field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => return too_large(),
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad multipart body: {e}")),
        };
        if field.name() != Some("file") {
            continue;
        }
        let name = safe_name(field.file_name().unwrap_or("upload"), "upload");
        let mut bytes = Vec::new();
        loop {
            match field.chunk().await {
                Ok(Some(chunk)) => {
                    if (bytes.len() + chunk.len()) as u64 > store.max_bytes() {
                        return too_large();
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => return too_large(),
                Err(e) => {
                    return error(StatusCode::BAD_REQUEST, format!("bad multipart body: {e}"));
                }
            }
        }
        return match store.store(&name, bytes).await {
            Ok(stored) => (
                StatusCode::CREATED,
                Json(json!({
                    "id": stored.id,
                    "filename": stored.name,
                    "url": stored.url,
                    "bytes": stored.bytes,
                })),
            )
                .into_response(),
            Err(e) => {
                tracing::error!(error = %e, "storing an upload failed");
                error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            }
        };
    }
    error(
        StatusCode::BAD_REQUEST,
        "no multipart field named \"file\"; upload with: curl -F file=@report.xlsx <server>/files",
    )
}
