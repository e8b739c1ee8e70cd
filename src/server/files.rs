//! The local store over HTTP: `GET /files/{id}/{name}` downloads a stored file (an unguessable
//! id is the capability), `POST /files` (multipart field `file`) stores an input and answers
//! with its id, for `modify_file` and `run_python`. An upload is streamed to disk as it
//! arrives, within `FILE_AGENT_INPUT_MAX_MIB`, and at most `FILE_AGENT_MAX_UPLOADS` at once.
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
use crate::storage::local::{LocalStore, UploadError};
use crate::storage::{content_type_for, encode_path_segment};
use crate::tools::Tools;
use crate::tools::filename::safe_name;

/// Room for the multipart framing around the file.
const MULTIPART_SLACK: usize = 64 * 1024;

/// Uploads allowed at once (`FILE_AGENT_MAX_UPLOADS`).
#[derive(Debug, Clone)]
struct Uploads(std::sync::Arc<tokio::sync::Semaphore>);

/// How long stored files are kept (`FILE_AGENT_FILES_RETENTION_DAYS`), for the 404's words.
#[derive(Debug, Clone, Copy)]
struct Kept(Option<std::time::Duration>);

/// The routes, bound to `store`; `retention` is how long its files are kept, if not forever.
pub fn routes(
    store: LocalStore,
    gate: Gate,
    retention: Option<std::time::Duration>,
    max_uploads: usize,
) -> axum::Router<Tools> {
    let limit = store.max_bytes() as usize + MULTIPART_SLACK;
    let upload = post(upload).layer(DefaultBodyLimit::max(limit)).layer(
        axum::middleware::from_fn_with_state(gate, super::gate::admit),
    );
    axum::Router::new()
        .route("/files/{id}/{name}", get(download))
        .route(
            "/files",
            upload.fallback(|| async {
                let mut response = error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "only POST uploads a file here; a stored file is at /files/<id>/<name>",
                );
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
                response
            }),
        )
        .layer(axum::Extension(store))
        .layer(axum::Extension(Kept(retention)))
        .layer(axum::Extension(Uploads(std::sync::Arc::new(
            tokio::sync::Semaphore::new(max_uploads),
        ))))
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
    axum::Extension(uploads): axum::Extension<Uploads>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Response {
    let mut multipart = match multipart {
        Ok(multipart) => multipart,
        Err(rejection) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "the body is not a multipart form ({rejection}); upload with: curl -F file=@report.xlsx <server>/files"
                ),
            );
        }
    };
    // Uploads at once are bounded, so memory and disk writes stay flat whatever arrives.
    let Ok(_slot) = uploads.0.clone().try_acquire_owned() else {
        let mut response = error(
            StatusCode::SERVICE_UNAVAILABLE,
            "file-agent is receiving as many uploads as it may at once (FILE_AGENT_MAX_UPLOADS); try again in a moment",
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
        return response;
    };
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the file is larger than {} MiB (FILE_AGENT_INPUT_MAX_MIB)",
                store.max_bytes() / (1024 * 1024)
            ),
        )
    };
    let malformed = |e: axum::extract::multipart::MultipartError| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return too_large();
        }
        error(
            StatusCode::BAD_REQUEST,
            format!(
                "the multipart body is malformed or was cut off ({}); send one part named \"file\": curl -F file=@report.xlsx <server>/files",
                e.body_text()
            ),
        )
    };
    let mut stored = None;
    loop {
        let mut field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return malformed(e),
        };
        if field.name() != Some("file") {
            continue;
        }
        if stored.is_some() {
            return error(
                StatusCode::BAD_REQUEST,
                "the form has more than one part named \"file\"; upload one file per request",
            );
        }
        let name = safe_name(field.file_name().unwrap_or("upload"), "upload");
        let mut upload = match store.begin(&name).await {
            Ok(upload) => upload,
            Err(e) => {
                tracing::error!(error = %e, "storing an upload failed");
                return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
            }
        };
        loop {
            match field.chunk().await {
                Ok(Some(chunk)) => match upload.write(&chunk).await {
                    Ok(()) => {}
                    Err(UploadError::TooLarge(_)) => return too_large(),
                    Err(UploadError::Storage(e)) => {
                        tracing::error!(error = %e, "storing an upload failed");
                        return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
                    }
                },
                Ok(None) => break,
                Err(e) => return malformed(e),
            }
        }
        stored = Some(upload);
    }
    let Some(upload) = stored else {
        return error(
            StatusCode::BAD_REQUEST,
            "no multipart field named \"file\"; upload with: curl -F file=@report.xlsx <server>/files",
        );
    };
    match upload.finish().await {
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
    }
}
