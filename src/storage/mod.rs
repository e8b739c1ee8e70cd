//! Where input files come from and outputs go: Open WebUI's files API ([`openwebui`]) or the
//! built-in store served by this server ([`local`]), behind one small enum so the tools do not
//! care which. Every fetch is capped in bytes and time.
//!
//! This module does not run code or know about MCP; it sees a caller only as an optional bearer
//! token to forward and an [`Owner`].

pub mod local;
pub mod local_input;
pub mod openwebui;
pub mod url;

use std::time::Duration;

use thiserror::Error;

use crate::config::{Secret, StorageConfig, TransferLimits};
use crate::owner::Owner;

pub use local::LocalStore;
pub use local_input::{LocalInput, LocalInputError};
pub use openwebui::OpenWebUi;

/// Who is asking, as far as storage cares.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The bearer token of the MCP request, if any (Open WebUI's "session" auth sends the
    /// user's own token). Never one of file-agent's own tokens: the gate takes those out.
    pub bearer: Option<Secret>,
    /// Whose the files this call stores are, and which stored files it may read back by id
    /// or resource URI and list ([`Owner::may_read`], [`Owner::lists`]).
    pub owner: Owner,
    /// Files on this machine that the call names by path (a stdio client's, opened below its
    /// roots): what the caller wrote, and the open file, read from that descriptor only.
    pub local_files: Vec<(String, LocalInput)>,
}

impl Caller {
    /// A caller with no bearer token and no local files.
    pub fn new(owner: Owner) -> Self {
        Self {
            bearer: None,
            owner,
            local_files: Vec::new(),
        }
    }
}

/// A file fetched from storage.
#[derive(Debug, Clone)]
pub struct Download {
    /// Its name as stored (used for `/work/in/<name>`).
    pub name: String,
    /// The type the store reported, if any.
    pub content_type: Option<String>,
    /// Its content.
    pub bytes: Vec<u8>,
}

/// A file put into storage.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The store's id for it (what `file_id` takes).
    pub id: String,
    /// Its name.
    pub name: String,
    /// Where a user downloads it.
    pub url: String,
    /// Its size.
    pub bytes: u64,
}

/// Why a file could not be fetched or stored. Each message says what to do.
#[derive(Debug, Error)]
pub enum StorageError {
    /// The id cannot be an id of this store.
    #[error("{id:?} is not a file id: {expected}")]
    BadId {
        /// What was given.
        id: String,
        /// What ids look like here.
        expected: &'static str,
    },
    /// No such file, or the caller may not read it.
    #[error(
        "file {id} was not found, or you may not read it; check the id (attach the file to the chat again)"
    )]
    NotFound {
        /// The id.
        id: String,
    },
    /// Bigger than `FILE_AGENT_INPUT_MAX_MIB`.
    #[error(
        "file {what} is larger than the {limit_mib} MiB allowed for inputs (FILE_AGENT_INPUT_MAX_MIB)"
    )]
    TooLarge {
        /// The id or name.
        what: String,
        /// The cap in MiB.
        limit_mib: u64,
    },
    /// Slower than `FILE_AGENT_DOWNLOAD_TIMEOUT`.
    #[error(
        "fetching file {id} took longer than {after:?} (FILE_AGENT_DOWNLOAD_TIMEOUT); try again or raise the limit"
    )]
    Timeout {
        /// The id.
        id: String,
        /// The limit.
        after: Duration,
    },
    /// No token to call Open WebUI with.
    #[error(
        "no Open WebUI credential: set OPENWEBUI_API_KEY, or connect with Open WebUI's session auth so the user's token is forwarded"
    )]
    NoCredential,
    /// Open WebUI refused the token.
    #[error(
        "Open WebUI refused the credential (HTTP {status}: {detail}); check OPENWEBUI_API_KEY (and that API keys are enabled) or the MCP connection's auth mode"
    )]
    Unauthorized {
        /// 401 or 403.
        status: u16,
        /// Its message.
        detail: String,
    },
    /// Open WebUI could not be reached.
    #[error(
        "Open WebUI at {url} cannot be reached ({detail}); check INTERNAL_API_URL and that Open WebUI is up"
    )]
    Unreachable {
        /// The base URL.
        url: String,
        /// The transport error.
        detail: String,
    },
    /// Open WebUI answered with an error.
    #[error(
        "Open WebUI failed while {action} (HTTP {status}: {detail}); try again, or check its logs"
    )]
    Remote {
        /// What file-agent was doing.
        action: &'static str,
        /// The HTTP status.
        status: u16,
        /// Its message.
        detail: String,
    },
    /// A local I/O failure.
    #[error("{action}: {source}")]
    Io {
        /// What file-agent was doing.
        action: String,
        /// The error.
        source: std::io::Error,
    },
}

/// The configured store.
#[derive(Debug, Clone)]
pub enum Storage {
    /// Open WebUI's files API.
    OpenWebUi(OpenWebUi),
    /// The built-in store.
    Local(LocalStore),
}

impl Storage {
    /// Builds the store from its settings (creates the local folder; sends no request).
    pub fn new(config: &StorageConfig, limits: TransferLimits) -> Result<Self, StorageError> {
        Ok(match config {
            StorageConfig::OpenWebUi(config) => Self::OpenWebUi(OpenWebUi::new(config, limits)?),
            StorageConfig::Local(config) => Self::Local(LocalStore::open(config, limits)?),
        })
    }

    /// `open-webui` or `local`, for logs and `/health`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::OpenWebUi(_) => "open-webui",
            Self::Local(_) => "local",
        }
    }

    /// The local store, when that is the one in use.
    pub fn local(&self) -> Option<&LocalStore> {
        match self {
            Self::Local(store) => Some(store),
            Self::OpenWebUi(_) => None,
        }
    }

    /// The Open WebUI client, when files live there.
    pub fn openwebui(&self) -> Option<&OpenWebUi> {
        match self {
            Self::OpenWebUi(client) => Some(client),
            Self::Local(_) => None,
        }
    }

    /// `NoCredential` when this store needs a credential for `caller` and has none (Open
    /// WebUI without `OPENWEBUI_API_KEY`, and no forwarded user token), `Unauthorized` when
    /// Open WebUI refuses it (asked once, remembered for a minute). The tools that fetch or
    /// store check this first, so that nothing is asked of a model and no container runs for
    /// a result that could not be stored.
    pub async fn require_credential(&self, caller: &Caller) -> Result<(), StorageError> {
        match self {
            Self::OpenWebUi(store) => store.require_credential(caller).await,
            Self::Local(_) => Ok(()),
        }
    }

    /// Fetches file `id` for `caller` (an input, or MCP's `resources/read`), within the size
    /// and time caps: a file the caller named by path from this machine, else from the store.
    /// A store's id is the capability, as for a download link, and a caller reads only the
    /// files [`Owner::may_read`] allows: its own, and those nobody known made. Open WebUI
    /// decides for its own files, by the caller's credential.
    pub async fn fetch(&self, id: &str, caller: &Caller) -> Result<Download, StorageError> {
        if let Some((_, input)) = caller.local_files.iter().find(|(named, _)| named == id) {
            return input.read(self.max_bytes()).await;
        }
        match self {
            Self::OpenWebUi(store) => store.fetch(id, caller).await,
            Self::Local(store) => {
                if !caller.owner.may_read(store.owner_of(id)?.as_deref()) {
                    return Err(StorageError::NotFound { id: id.to_string() });
                }
                store.fetch(id).await
            }
        }
    }

    /// Stores a new file; never replaces one.
    pub async fn store(
        &self,
        name: &str,
        content_type: &str,
        bytes: Vec<u8>,
        caller: &Caller,
    ) -> Result<Stored, StorageError> {
        match self {
            Self::OpenWebUi(store) => store.store(name, content_type, bytes, caller).await,
            Self::Local(store) => store.store(name, bytes, &caller.owner).await,
        }
    }

    /// The largest file fetched or read back (`FILE_AGENT_INPUT_MAX_MIB`).
    pub fn max_bytes(&self) -> u64 {
        match self {
            Self::OpenWebUi(store) => store.max_bytes(),
            Self::Local(store) => store.max_bytes(),
        }
    }

    /// The newest files (at most `limit`) that `caller` made here, newest first: none from
    /// Open WebUI, which lists its files itself.
    pub fn made_by(&self, caller: &Caller, limit: usize) -> Vec<Stored> {
        match self {
            Self::Local(store) => store.made_by(&caller.owner, limit),
            Self::OpenWebUi(_) => Vec::new(),
        }
    }
}

/// The longest owner record read (`<id>/.owner` in the local store, `openwebui-owners/<id>`):
/// a key holds a user id of at most `identity::FIELD_MAX_CHARS` characters and an issuer's URL,
/// each percent-encoded.
const MAX_OWNER_BYTES: u64 = 4096;

/// The owner recorded at `path` for file `id`: `None` when there is no record. A record that
/// cannot be read, or is longer than any key, is an error: the file is then nobody's to read,
/// rather than everybody's.
pub(crate) fn read_owner_record(
    path: &std::path::Path,
    id: &str,
) -> Result<Option<String>, StorageError> {
    let failed = |source| StorageError::Io {
        action: format!("cannot read the owner of file {id}"),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(failed(error)),
    };
    let mut owner = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_OWNER_BYTES + 1),
        &mut owner,
    )
    .map_err(failed)?;
    if owner.len() as u64 > MAX_OWNER_BYTES {
        return Err(failed(std::io::Error::other(format!(
            "{} is longer than any owner key ({MAX_OWNER_BYTES} bytes)",
            path.display()
        ))));
    }
    Ok(Some(owner))
}

/// The content type to label a file with, from its extension.
pub fn content_type_for(name: &str) -> &'static str {
    let extension = name
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase());
    match extension.as_deref() {
        Some("xlsx") => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        Some("docx") => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        Some("pptx") => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        Some("pdf") => "application/pdf",
        Some("csv") => "text/csv",
        Some("txt" | "log" | "md") => "text/plain",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("svg") => "image/svg+xml",
        Some("html" | "htm") => "text/html",
        _ => "application/octet-stream",
    }
}

/// The scheme and authority of every stored output's resource URI (MCP's `resources/read`
/// returns it; the tools take it back as an input).
pub const RESOURCE_URI_PREFIX: &str = "file-agent://files/";

/// The resource URI of stored file `id` called `name`.
pub fn resource_uri(id: &str, name: &str) -> String {
    format!("{RESOURCE_URI_PREFIX}{id}/{}", encode_path_segment(name))
}

/// Percent-encodes a path segment (everything but unreserved ASCII).
pub fn encode_path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Why [`read_capped`] stopped.
pub(crate) enum CappedRead {
    /// The body is (or announced itself as) larger than the cap.
    TooLarge,
    /// The transfer broke.
    Transport(reqwest::Error),
}

/// The whole body of `response`, refused as soon as it is known to exceed `max` bytes: by its
/// `Content-Length`, or while it streams (a length can be absent or a lie).
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    max: u64,
) -> Result<Vec<u8>, CappedRead> {
    if response.content_length().is_some_and(|length| length > max) {
        return Err(CappedRead::TooLarge);
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(CappedRead::Transport)? {
        if (bytes.len() + chunk.len()) as u64 > max {
            return Err(CappedRead::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Decodes `%XX` escapes; `None` when the result is not UTF-8.
pub fn decode_percent(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let high = (bytes[i + 1] as char).to_digit(16);
            let low = (bytes[i + 2] as char).to_digit(16);
            if let (Some(high), Some(low)) = (high, low) {
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_percent_encoding() {
        for name in ["report.xlsx", "Bericht März 2026.docx", "a%b&c.csv"] {
            let encoded = encode_path_segment(name);
            assert!(
                !encoded.contains(' ') && !encoded.contains('&'),
                "{encoded}"
            );
            assert_eq!(decode_percent(&encoded).unwrap(), name);
        }
        assert_eq!(
            content_type_for("x.XLSX"),
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
        );
    }
}
