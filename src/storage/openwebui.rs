//! Open WebUI's files API: download `GET /api/v1/files/{id}/content`, upload
//! `POST /api/v1/files/?process=false` (multipart field `file`, with its content type set, and
//! no RAG processing of generated files). Links point at `PUBLIC_DOMAIN`.
//!
//! Credentials: the MCP request's own bearer token when forwarding is on (Open WebUI's
//! "session" auth sends the user's token, so each user reaches only their files), else
//! `OPENWEBUI_API_KEY` (which reaches whatever that key's user may read). Before a tool asks a
//! model or runs anything, [`OpenWebUi::require_credential`] asks Open WebUI once whether the
//! credential is accepted (`GET /api/v1/auths/`, the session user's own record), and remembers
//! the answer for [`CREDENTIAL_CHECK_TTL`]: a refused key costs one cheap request, not a
//! model call and a sandbox attempt. The same answer names the user whose session a forwarded
//! token is ([`OpenWebUi::session_user`]), one of the identity sources (`identity`).
//!
//! Owners: with `OPENWEBUI_API_KEY` every file belongs, for Open WebUI, to the key's user, so
//! Open WebUI cannot keep file-agent's callers apart. file-agent records the owner
//! (`crate::owner::Owner`) of every file it stores there, in `openwebui-owners/<id>` under
//! its data folder, and a fetch made with the key reads a recorded file only for a caller
//! [`crate::owner::Owner::may_read`] allows. A fetch with the caller's own forwarded token is
//! Open WebUI's to decide. Files users attached in Open WebUI have no record: their id (a
//! random UUID) is the capability, as for a download link.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use serde::Deserialize;

use super::{Caller, CappedRead, Download, StorageError, Stored, decode_percent, read_capped};
use crate::config::{OpenWebUiConfig, Secret, TransferLimits};

/// Connect timeout to Open WebUI.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for an upload.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// How much of an error body goes into a message.
const DETAIL_MAX: usize = 300;
/// How long Open WebUI's answer on a credential is trusted.
pub const CREDENTIAL_CHECK_TTL: Duration = Duration::from_secs(60);
/// Time allowed for that question.
const CREDENTIAL_CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for posting one event to a chat message.
const EVENT_TIMEOUT: Duration = Duration::from_secs(2);
/// Credentials whose answer is remembered (forwarded tokens are one per user).
const CREDENTIAL_CACHE_MAX: usize = 1024;

/// Open WebUI's answers on credentials, by the SHA-256 of the token (never the token itself),
/// and when it gave them.
type CredentialCache = Mutex<HashMap<[u8; 32], (Answer, Instant)>>;

/// The largest answer of `GET /api/v1/auths/` read (a user's record, a few hundred bytes).
const SESSION_USER_MAX_BYTES: u64 = 64 * 1024;

/// What Open WebUI said of a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// 401: not accepted.
    Refused,
    /// 200: accepted, as the session of this user (`None` when the record did not parse).
    Accepted(Option<SessionUser>),
}

/// The user whose session a token is, as Open WebUI's `GET /api/v1/auths/` answers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SessionUser {
    /// Open WebUI's user id.
    pub id: String,
    /// The display name.
    #[serde(default)]
    pub name: Option<String>,
    /// The email address.
    #[serde(default)]
    pub email: Option<String>,
    /// `user`, `admin` or `pending`.
    #[serde(default)]
    pub role: Option<String>,
}

/// A client of one Open WebUI.
#[derive(Debug, Clone)]
pub struct OpenWebUi {
    http: reqwest::Client,
    internal_url: String,
    public_url: String,
    api_key: Option<Secret>,
    forward_user_token: bool,
    chat_status: bool,
    limits: TransferLimits,
    /// What Open WebUI said of each credential lately.
    credentials: Arc<CredentialCache>,
    /// Where the owners of the files stored here are recorded.
    owners_dir: std::path::PathBuf,
}

#[derive(Deserialize)]
struct FileModel {
    id: String,
    #[serde(default)]
    filename: Option<String>,
    #[serde(default)]
    meta: Option<FileMeta>,
}

#[derive(Deserialize)]
struct FileMeta {
    #[serde(default)]
    name: Option<String>,
}

impl OpenWebUi {
    /// The largest file fetched (`FILE_AGENT_INPUT_MAX_MIB`).
    pub fn max_bytes(&self) -> u64 {
        self.limits.max_bytes
    }

    /// A client; sends nothing yet.
    pub fn new(config: &OpenWebUiConfig, limits: TransferLimits) -> Result<Self, StorageError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|error| StorageError::Unreachable {
                url: config.internal_url.clone(),
                detail: error.to_string(),
            })?;
        Ok(Self {
            http,
            internal_url: config.internal_url.clone(),
            public_url: config.public_url.clone(),
            api_key: config.api_key.clone(),
            forward_user_token: config.forward_user_token,
            chat_status: config.chat_status,
            limits,
            credentials: Arc::default(),
            owners_dir: config.owners_dir.clone(),
        })
    }

    /// Whether a request for `caller` goes with `OPENWEBUI_API_KEY` rather than the caller's
    /// own forwarded token: then Open WebUI cannot tell callers apart, and file-agent's
    /// record of owners decides.
    fn with_key(&self, caller: &Caller) -> bool {
        caller.bearer.is_none() || !self.forward_user_token
    }

    /// Records `owner` as the owner of stored file `id` (an id [`check_id`] accepted), written
    /// whole or not at all.
    fn record_owner(&self, id: &str, owner: &crate::owner::Owner) -> Result<(), StorageError> {
        let failed = |source| StorageError::Io {
            action: format!(
                "cannot record the owner of file {id} in {}",
                self.owners_dir.display()
            ),
            source,
        };
        std::fs::create_dir_all(&self.owners_dir).map_err(failed)?;
        let mut temp = tempfile::NamedTempFile::new_in(&self.owners_dir).map_err(failed)?;
        std::io::Write::write_all(&mut temp, owner.as_str().as_bytes()).map_err(failed)?;
        temp.persist(self.owners_dir.join(id))
            .map_err(|error| failed(error.error))?;
        Ok(())
    }

    /// The recorded owner of file `id`: `None` when file-agent did not store it.
    fn recorded_owner(&self, id: &str) -> Result<Option<String>, StorageError> {
        super::read_owner_record(&self.owners_dir.join(id), id)
    }

    fn token<'a>(&'a self, caller: &'a Caller) -> Result<&'a str, StorageError> {
        let forwarded = caller.bearer.as_ref().filter(|_| self.forward_user_token);
        forwarded
            .or(self.api_key.as_ref())
            .map(Secret::expose)
            .ok_or(StorageError::NoCredential)
    }

    /// `NoCredential` unless a request for `caller` would carry a token; `Unauthorized` when
    /// Open WebUI refuses that token (401), asked at most once per [`CREDENTIAL_CHECK_TTL`].
    /// Any other answer (a 403 of API-key endpoint restrictions, an error, no answer) decides
    /// nothing: the real request will say.
    pub async fn require_credential(&self, caller: &Caller) -> Result<(), StorageError> {
        let token = self.token(caller)?;
        if self.answer_on(token).await != Some(Answer::Refused) {
            Ok(())
        } else {
            Err(StorageError::Unauthorized {
                status: 401,
                detail: "Open WebUI does not accept the credential (checked before any work)"
                    .into(),
            })
        }
    }

    /// Whether calls' progress is posted to their chat (`FILE_AGENT_CHAT_STATUS`).
    pub fn chat_status(&self) -> bool {
        self.chat_status
    }

    /// Posts `event` (`{"type": "status" | "files", "data": ...}`) to message `message` of
    /// chat `chat` (`POST /api/v1/chats/{chat}/messages/{message}/event`), with the credential
    /// a request for `caller` carries (Open WebUI lets the chat's owner, or an admin, post).
    /// Bounded by [`EVENT_TIMEOUT`]; the error is for the log.
    pub async fn post_event(
        &self,
        chat: &str,
        message: &str,
        event: &serde_json::Value,
        caller: &Caller,
    ) -> Result<(), String> {
        let token = self.token(caller).map_err(|error| error.to_string())?;
        let url = format!(
            "{}/api/v1/chats/{}/messages/{}/event",
            self.internal_url,
            super::encode_path_segment(chat),
            super::encode_path_segment(message)
        );
        let response = self
            .http
            .post(&url)
            .bearer_auth(token)
            .timeout(EVENT_TIMEOUT)
            .json(event)
            .send()
            .await
            .map_err(|error| crate::error_chain(&error))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {}", response.status().as_u16()))
        }
    }

    /// Whose session `bearer` is, when this client forwards users' tokens and Open WebUI
    /// accepts it: the same question as [`Self::require_credential`]'s, answered from the same
    /// memory.
    pub async fn session_user(&self, bearer: &str) -> Option<SessionUser> {
        if !self.forward_user_token {
            return None;
        }
        match self.answer_on(bearer).await {
            Some(Answer::Accepted(user)) => user,
            _ => None,
        }
    }

    /// Open WebUI's answer on `token`, remembered for [`CREDENTIAL_CHECK_TTL`]; `None` when it
    /// gave none that decides.
    async fn answer_on(&self, token: &str) -> Option<Answer> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let known = self.credentials.lock().ok().and_then(|cache| {
            cache
                .get(&key)
                .filter(|(_, at)| at.elapsed() < CREDENTIAL_CHECK_TTL)
                .map(|(answer, _)| answer.clone())
        });
        if known.is_some() {
            return known;
        }
        let answer = self.ask_about(token).await?;
        self.remember(key, answer.clone());
        Some(answer)
    }

    /// What Open WebUI says of `token`: accepted (200, with the session's user when its record
    /// parses) or refused (401); `None` on anything else.
    async fn ask_about(&self, token: &str) -> Option<Answer> {
        let url = format!("{}/api/v1/auths/", self.internal_url);
        let response = self
            .http
            .get(&url)
            .bearer_auth(token)
            .timeout(CREDENTIAL_CHECK_TIMEOUT)
            .send()
            .await;
        match response {
            Ok(response) if response.status().is_success() => {
                let user = read_capped(response, SESSION_USER_MAX_BYTES)
                    .await
                    .ok()
                    .and_then(|bytes| serde_json::from_slice::<SessionUser>(&bytes).ok())
                    .filter(|user| !user.id.trim().is_empty());
                Some(Answer::Accepted(user))
            }
            Ok(response) if response.status() == reqwest::StatusCode::UNAUTHORIZED => {
                Some(Answer::Refused)
            }
            Ok(response) => {
                tracing::debug!(status = %response.status(), "Open WebUI's credential check decided nothing");
                None
            }
            Err(error) => {
                tracing::debug!(error = %crate::error_chain(&error), "Open WebUI's credential check got no answer");
                None
            }
        }
    }

    fn remember(&self, key: [u8; 32], answer: Answer) {
        let Ok(mut cache) = self.credentials.lock() else {
            return;
        };
        if cache.len() >= CREDENTIAL_CACHE_MAX {
            cache.retain(|_, (_, at)| at.elapsed() < CREDENTIAL_CHECK_TTL);
            if cache.len() >= CREDENTIAL_CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(key, (answer, Instant::now()));
    }

    /// `GET url` as the caller (`token`); a request that gets no answer is Open WebUI
    /// unreachable.
    async fn get_as(&self, url: &str, token: &str) -> Result<reqwest::Response, StorageError> {
        self.http
            .get(url)
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))
    }

    fn unreachable(&self, error: &reqwest::Error) -> StorageError {
        StorageError::Unreachable {
            url: self.internal_url.clone(),
            detail: crate::error_chain(error),
        }
    }

    /// Downloads file `id` within the caps.
    pub async fn fetch(&self, id: &str, caller: &Caller) -> Result<Download, StorageError> {
        check_id(id)?;
        if self.with_key(caller) && !caller.owner.may_read(self.recorded_owner(id)?.as_deref()) {
            return Err(StorageError::NotFound { id: id.to_string() });
        }
        let token = self.token(caller)?.to_string();
        match tokio::time::timeout(self.limits.timeout, self.download(id, &token)).await {
            Ok(result) => result,
            Err(_) => Err(StorageError::Timeout {
                id: id.to_string(),
                after: self.limits.timeout,
            }),
        }
    }

    /// Downloads file `id` with the caller's `token`, within the size cap: its bytes, its
    /// content type, and its name (from the Content-Disposition, else asked for).
    async fn download(&self, id: &str, token: &str) -> Result<Download, StorageError> {
        let url = format!("{}/api/v1/files/{id}/content", self.internal_url);
        let response = self.get_as(&url, token).await?;
        let response_status = response.status();
        if !response_status.is_success() {
            return Err(error_for(response, id, "downloading a file").await);
        }
        let headers = response.headers().clone();
        let bytes =
            read_capped(response, self.limits.max_bytes)
                .await
                .map_err(|error| match error {
                    CappedRead::TooLarge => StorageError::TooLarge {
                        what: id.to_string(),
                        limit_mib: self.limits.max_bytes / (1024 * 1024),
                    },
                    CappedRead::Transport(error) => self.unreachable(&error),
                })?;
        let content_type = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or(v).trim().to_string());
        let name = match headers
            .get(reqwest::header::CONTENT_DISPOSITION)
            .and_then(|v| v.to_str().ok())
            .and_then(filename_from_disposition)
        {
            Some(name) => name,
            None => self.name_of(id, token).await?,
        };
        Ok(Download {
            name,
            content_type,
            bytes,
        })
    }

    /// The stored name of `id`, from `GET /api/v1/files/{id}` (text files come without a
    /// Content-Disposition).
    async fn name_of(&self, id: &str, token: &str) -> Result<String, StorageError> {
        let url = format!("{}/api/v1/files/{id}", self.internal_url);
        let response = self.get_as(&url, token).await?;
        if !response.status().is_success() {
            return Err(error_for(response, id, "reading a file's details").await);
        }
        let model: FileModel = response.json().await.map_err(|e| StorageError::Remote {
            action: "reading a file's details",
            status: 200,
            detail: e.to_string(),
        })?;
        Ok(model
            .meta
            .and_then(|meta| meta.name)
            .or(model.filename)
            .unwrap_or_else(|| "input".into()))
    }

    /// Uploads a new file and returns its id and link.
    pub async fn store(
        &self,
        name: &str,
        content_type: &str,
        bytes: Vec<u8>,
        caller: &Caller,
    ) -> Result<Stored, StorageError> {
        let token = self.token(caller)?;
        let size = bytes.len() as u64;
        let part = reqwest::multipart::Part::bytes(bytes)
            .file_name(name.to_string())
            .mime_str(content_type)
            .map_err(|e| StorageError::Remote {
                action: "preparing an upload",
                status: 0,
                detail: e.to_string(),
            })?;
        let form = reqwest::multipart::Form::new().part("file", part);
        let url = format!("{}/api/v1/files/?process=false", self.internal_url);
        let response = self
            .http
            .post(&url)
            .bearer_auth(token)
            .timeout(UPLOAD_TIMEOUT)
            .multipart(form)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        if !response.status().is_success() {
            return Err(error_for(response, name, "uploading the result").await);
        }
        let model: FileModel = response.json().await.map_err(|e| StorageError::Remote {
            action: "uploading the result",
            status: 200,
            detail: format!("the answer has no file id: {e}"),
        })?;
        check_id(&model.id).map_err(|_| StorageError::Remote {
            action: "uploading the result",
            status: 200,
            detail: format!("the answer's file id {:?} is not usable", model.id),
        })?;
        self.record_owner(&model.id, &caller.owner)?;
        Ok(Stored {
            url: format!("{}/api/v1/files/{}/content", self.public_url, model.id),
            id: model.id,
            name: name.to_string(),
            bytes: size,
        })
    }
}

/// Open WebUI ids are UUIDs; anything that could change the URL's path is refused.
fn check_id(id: &str) -> Result<(), StorageError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(StorageError::BadId {
            id: id.to_string(),
            expected: "an Open WebUI file id (a UUID such as 3f2b...-...)",
        })
    }
}

/// Maps an error answer to a [`StorageError`], with FastAPI's `detail` when there is one.
async fn error_for(response: reqwest::Response, what: &str, action: &'static str) -> StorageError {
    let status = response.status().as_u16();
    let body = response.text().await.unwrap_or_default();
    let detail = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v.get("detail")
                .map(|d| d.as_str().map(str::to_string).unwrap_or(d.to_string()))
        })
        .unwrap_or_else(|| crate::text::excerpt(body.trim(), DETAIL_MAX));
    match status {
        401 | 403 => StorageError::Unauthorized { status, detail },
        404 => StorageError::NotFound {
            id: what.to_string(),
        },
        413 => StorageError::Remote {
            action,
            status,
            detail: format!("{detail} (the file is larger than Open WebUI accepts)"),
        },
        _ => StorageError::Remote {
            action,
            status,
            detail,
        },
    }
}

/// The file name in a Content-Disposition header: RFC 5987 `filename*=UTF-8''...` first, then
/// `filename="..."`.
pub fn filename_from_disposition(header: &str) -> Option<String> {
    let mut plain = None;
    for param in header.split(';').map(str::trim) {
        if let Some(value) = param.strip_prefix("filename*=") {
            let encoded = value.trim_matches('"');
            let encoded = encoded
                .split_once("''")
                .map(|(_, rest)| rest)
                .unwrap_or(encoded);
            if let Some(name) = decode_percent(encoded).filter(|n| !n.is_empty()) {
                return Some(name);
            }
        } else if let Some(value) = param.strip_prefix("filename=") {
            plain = Some(value.trim_matches('"').to_string()).filter(|n| !n.is_empty());
        }
    }
    plain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_forms_of_content_disposition() {
        assert_eq!(
            filename_from_disposition("attachment; filename*=UTF-8''Q3%20Bericht%20M%C3%A4rz.xlsx")
                .unwrap(),
            "Q3 Bericht März.xlsx"
        );
        assert_eq!(
            filename_from_disposition("inline; filename=\"a.pdf\"").unwrap(),
            "a.pdf"
        );
        assert_eq!(filename_from_disposition("attachment"), None);
    }

    #[test]
    fn ids_that_could_change_the_path_are_refused() {
        assert!(check_id("3f2b1c9e-0d7a-4a8e-9b1e-2c3d4e5f6a7b").is_ok());
        for id in ["", "../etc", "a/b", "x?y", "a b"] {
            assert!(check_id(id).is_err(), "{id}");
        }
    }
}
