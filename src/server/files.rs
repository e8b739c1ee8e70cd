//! The local store over HTTP: `GET /files/{id}/{name}` downloads a stored file (an unguessable
//! id is the capability), `POST /files` (multipart field `file`) stores an input and answers
//! with its id, for `modify_file` and `run_python`. An upload passes the same gate as `/mcp`
//! and belongs to the caller it names (`identity::Identity::owner`): only that caller's tool
//! calls take it as an input. An upload is streamed to disk as it
//! arrives, within `FILE_AGENT_INPUT_MAX_MIB`, and at most `FILE_AGENT_MAX_UPLOADS` at once.
//!
//! Downloads are sent as attachments with `nosniff` and a sandboxing CSP, so an HTML or SVG
//! file a script wrote cannot run in this server's origin.

use axum::Json;
use axum::body::Body;
use axum::extract::multipart::Field;
use axum::extract::{DefaultBodyLimit, Multipart, Path};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use super::gate::Gate;
use crate::identity::{Identity, Owner};
use crate::storage::local::{LocalStore, Upload, UploadError};
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
    attachment_headers(response.headers_mut(), &name, length);
    response
}

/// A download's headers: its type and length, sent as an attachment under its name, with
/// `nosniff` and a sandboxing CSP so that nothing in it runs in this server's origin.
fn attachment_headers(headers: &mut axum::http::HeaderMap, name: &str, length: Option<u64>) {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type_for(name)),
    );
    if let Ok(value) = HeaderValue::from_str(&format!(
        "attachment; filename*=UTF-8''{}",
        encode_path_segment(name)
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
}

async fn upload(
    axum::Extension(store): axum::Extension<LocalStore>,
    axum::Extension(uploads): axum::Extension<Uploads>,
    identity: Option<axum::Extension<Identity>>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Response {
    // The gate put the caller's identity here, as for `/mcp`; the upload is its owner's.
    let identity = identity
        .map(|axum::Extension(identity)| identity)
        .unwrap_or(Identity {
            over_http: true,
            ..Identity::default()
        });
    if let Some(refused) = identity
        .conflict
        .as_ref()
        .or(identity.user_required.as_ref())
    {
        let mut response = error(
            StatusCode::FORBIDDEN,
            format!("the upload is refused, as its tool calls would be: {refused}"),
        );
        // The body was not read: the connection cannot carry another request.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
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
        return busy();
    };
    let upload = match receive(&store, &mut multipart, &identity.owner()).await {
        Ok(upload) => upload,
        Err(response) => return response,
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
        Err(e) => storage_failed(e),
    }
}

/// 503 with `Retry-After`: as many uploads as allowed are under way.
fn busy() -> Response {
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "file-agent is receiving as many uploads as it may at once (FILE_AGENT_MAX_UPLOADS); try again in a moment",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    response
}

/// Reads the form: its one part named `file`, written to the store as it arrives (other parts
/// are skipped).
async fn receive(
    store: &LocalStore,
    multipart: &mut Multipart,
    owner: &Owner,
) -> Result<Upload, Response> {
    let mut stored = None;
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| malformed(store, e))?
    {
        if field.name() != Some("file") {
            continue;
        }
        if stored.is_some() {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "the form has more than one part named \"file\"; upload one file per request",
            ));
        }
        stored = Some(write_field(store, &mut field, owner).await?);
    }
    stored.ok_or_else(|| {
        error(
            StatusCode::BAD_REQUEST,
            "no multipart field named \"file\"; upload with: curl -F file=@report.xlsx <server>/files",
        )
    })
}

/// Streams one part to a new file of the store, under the part's file name made safe.
async fn write_field(
    store: &LocalStore,
    field: &mut Field<'_>,
    owner: &Owner,
) -> Result<Upload, Response> {
    let name = safe_name(field.file_name().unwrap_or("upload"), "upload");
    let mut upload = store.begin(&name, owner).await.map_err(storage_failed)?;
    while let Some(chunk) = field.chunk().await.map_err(|e| malformed(store, e))? {
        upload.write(&chunk).await.map_err(|e| match e {
            UploadError::TooLarge(_) => too_large(store),
            UploadError::Storage(e) => storage_failed(e),
        })?;
    }
    Ok(upload)
}

/// 413: the file passes `FILE_AGENT_INPUT_MAX_MIB`.
fn too_large(store: &LocalStore) -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the file is larger than {} MiB (FILE_AGENT_INPUT_MAX_MIB)",
            store.max_bytes() / (1024 * 1024)
        ),
    )
}

/// 400 for a body that is no well-formed form, 413 for one cut at the body limit.
fn malformed(store: &LocalStore, e: axum::extract::multipart::MultipartError) -> Response {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return too_large(store);
    }
    error(
        StatusCode::BAD_REQUEST,
        format!(
            "the multipart body is malformed or was cut off ({}); send one part named \"file\": curl -F file=@report.xlsx <server>/files",
            e.body_text()
        ),
    )
}

/// 500, logged: the store could not write the upload.
fn storage_failed(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "storing an upload failed");
    error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}
