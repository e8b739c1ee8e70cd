//! The settings of the MCP server beyond the sandbox: where it listens, which model it asks,
//! where files are stored. The names and defaults of the Python File Agent are kept
//! (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `MODEL_NAME`, `INTERNAL_API_URL`, `PUBLIC_DOMAIN`,
//! `OPENWEBUI_API_KEY`, `DEEP_RESEARCH_MODEL`), so an existing `.env` works unchanged; the new
//! ones start with `FILE_AGENT_`.
//!
//! Parsing only: no I/O, no clients. A missing model key is not an error (the LLM tools then
//! answer with one, and `run_python` still works).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::{
    ConfigError, IdentityConfig, ResearchConfig, SandboxConfig, SessionsConfig, TasksConfig,
    UrlFetchConfig, Vars,
};

/// `FILE_AGENT_LISTEN`: where the HTTP server listens. Loopback: another machine reaches the
/// server only once the operator chose an address, and then only with a credential.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8000";
/// `FILE_AGENT_HEADER_TIMEOUT`: seconds a connection may take to send a request's headers,
/// and may stay idle between two requests (nginx: 60 s and 75 s).
pub const DEFAULT_HEADER_TIMEOUT_SECS: u64 = 30;
/// `FILE_AGENT_BODY_TIMEOUT`: seconds a request body may go without sending anything (nginx's
/// `client_body_timeout`: between two reads, not for the whole body).
pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 30;
/// `FILE_AGENT_MAX_CONNECTIONS`: open client connections; each is a file descriptor, so the
/// server keeps this below the descriptor limit whatever is set.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// `FILE_AGENT_WRITE_TIMEOUT`: seconds an answer may wait for the client to take a byte of it
/// (nginx's `send_timeout`: between two writes, not for the whole answer); then the
/// connection is closed.
pub const DEFAULT_WRITE_TIMEOUT_SECS: u64 = 60;
/// `FILE_AGENT_KEEP_ALIVE`: seconds between two SSE comments on a `tools/call` that still
/// works, for a client that takes SSE: a proxy's or a client's read timeout (Open WebUI's is
/// 300 s) never fires on a live call.
pub const DEFAULT_KEEP_ALIVE_SECS: u64 = 15;
/// `FILE_AGENT_MAX_UPLOADS`: uploads (`POST /files`) streamed to disk at once; more get 503.
pub const DEFAULT_MAX_UPLOADS: usize = 4;
/// `OPENAI_BASE_URL`: the OpenAI API; any compatible server (vLLM, Ollama, LiteLLM) works.
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// `MODEL_NAME`: the model that writes the Python.
pub const DEFAULT_MODEL: &str = "gpt-4o";
/// `FILE_AGENT_LLM_TIMEOUT`: seconds one chat request may take.
pub const DEFAULT_LLM_TIMEOUT_SECS: u64 = 120;
/// `FILE_AGENT_LLM_RETRIES`: extra tries of a chat request that timed out (the client itself
/// already retries rate limits, 5xx and connection errors three times with back-off).
pub const DEFAULT_LLM_TIMEOUT_RETRIES: u32 = 1;
/// `FILE_AGENT_DATA_DIR`: the local store's folder.
pub const DEFAULT_DATA_DIR: &str = "data";
/// `FILE_AGENT_INPUT_MAX_MIB`: the largest input file fetched from storage or uploaded.
pub const DEFAULT_INPUT_MAX_MIB: u64 = 50;
/// `FILE_AGENT_DOWNLOAD_TIMEOUT`: seconds to fetch one input file.
pub const DEFAULT_DOWNLOAD_TIMEOUT_SECS: u64 = 60;
/// `FILE_AGENT_SHUTDOWN_GRACE`: seconds running calls may go on after SIGTERM.
pub const DEFAULT_SHUTDOWN_GRACE_SECS: u64 = 30;
/// `FILE_AGENT_REAP_INTERVAL`: seconds between two looks for leftover containers.
pub const DEFAULT_REAP_INTERVAL_SECS: u64 = 300;
/// How often retention looks for stored files and audit files past their age (it also looks
/// once at start-up).
pub const RETENTION_INTERVAL: Duration = Duration::from_secs(3600);
/// The longest retention that can be set, in days (a hundred years).
pub const MAX_RETENTION_DAYS: u64 = 36_500;
/// The audit folder's name in `FILE_AGENT_DATA_DIR` (`FILE_AGENT_AUDIT_DIR`'s default).
pub const DEFAULT_AUDIT_FOLDER: &str = "audit";
/// `FILE_AGENT_AUDIT_MAX_MIB`: the audit file's size before it is rotated.
pub const DEFAULT_AUDIT_MAX_MIB: u64 = 100;
/// `FILE_AGENT_QUEUE_TIMEOUT`: seconds an attempt may wait for a free slot.
pub const DEFAULT_QUEUE_TIMEOUT_SECS: u64 = 60;
/// `FILE_AGENT_CALL_TIMEOUT`: seconds a whole tool call may take (research: its own timeout
/// plus a minute).
pub const DEFAULT_CALL_TIMEOUT_SECS: u64 = 600;
/// `Host` names accepted on `/mcp` besides the public URL's host.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
/// Browser origins accepted on `/mcp` besides the public URL's origin.
pub const LOOPBACK_ORIGINS: [&str; 2] = ["http://localhost:*", "http://127.0.0.1:*"];

/// A value that must never be printed: `Debug` shows only that it is set.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Everything `file-agent serve` needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The sandbox: image, runtime, limits.
    pub sandbox: SandboxConfig,
    /// The HTTP side.
    pub server: ServerConfig,
    /// Who called: Open WebUI's signed user token and OAuth issuers.
    pub identity: IdentityConfig,
    /// The model that writes code for `generate_file` and `modify_file`.
    pub llm: LlmConfig,
    /// Where inputs come from and outputs go.
    pub storage: StorageConfig,
    /// Caps on fetching one input file.
    pub transfer: TransferLimits,
    /// `FILE_AGENT_PROMPTS_DIR`: files here replace the built-in prompts of the same name.
    pub prompts_dir: Option<PathBuf>,
    /// How many attempts run and wait, and how long a call may take.
    pub admission: AdmissionConfig,
    /// The audit trail.
    pub audit: AuditConfig,
    /// `FILE_AGENT_AUDIT_RECEIPTS`: what receipt an answer carries for its audit lines.
    pub receipts: ReceiptMode,
    /// How long stored files and rotated audit files are kept.
    pub retention: RetentionConfig,
    /// Which document URLs `data_analysis_tool` may fetch.
    pub url_fetch: UrlFetchConfig,
    /// How `conduct_deep_research` runs.
    pub research: ResearchConfig,
    /// `FILE_AGENT_DYNAMIC_TOOLS`: who sees the tools that models and callers create.
    pub dynamic_tools: DynamicTools,
    /// Which calls answer with an MCP task, and how long a finished one is kept.
    pub tasks: TasksConfig,
    /// `run_python`'s sessions: on or off, and their bounds.
    pub sessions: SessionsConfig,
    /// `FILE_AGENT_DATA_DIR`: the server's folder (the local store, the audit trail, saved
    /// tools); with the host's name it also makes the default `SANDBOX_INSTANCE`.
    pub data_dir: PathBuf,
}

/// `FILE_AGENT_DYNAMIC_TOOLS`: whether tools can be created (`create_tool`, `generate_tool`)
/// and who sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DynamicTools {
    /// `off`: no tool can be created, listed or called; the four tools that manage them are
    /// not listed.
    Off,
    /// `per-user` (the default): each owner (the Open WebUI user, or the access token, or, with
    /// neither, the one local user) sees and calls only its own tools.
    #[default]
    PerUser,
    /// `shared`: every caller sees, calls, replaces and deletes every tool. Only for a team
    /// that trusts each other: a tool runs with the arguments, not the data, of whoever calls it.
    Shared,
}

impl DynamicTools {
    fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        let value = vars.get("FILE_AGENT_DYNAMIC_TOOLS");
        match value.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(Self::default()),
            Some(v) if v == "off" => Ok(Self::Off),
            Some(v) if v == "per-user" => Ok(Self::PerUser),
            Some(v) if v == "shared" => Ok(Self::Shared),
            Some(_) => Err(ConfigError {
                var: "FILE_AGENT_DYNAMIC_TOOLS",
                value: value.unwrap_or_default(),
                expected: "off, per-user or shared".into(),
            }),
        }
    }
}

/// The audit trail.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditConfig {
    /// Where the lines go.
    pub place: AuditPlace,
    /// `POD_NAME` (the downward API under Kubernetes): the name of this server's chain in
    /// the audit folder; else the server's instance names it.
    pub chain: Option<String>,
    /// `FILE_AGENT_AUDIT_STDOUT`: also print each line on stdout (HTTP mode only).
    pub stdout: bool,
    /// `FILE_AGENT_AUDIT_CODE`: put the code itself in each line, not only its hash.
    pub include_code: bool,
    /// `FILE_AGENT_AUDIT_MAX_MIB`, in bytes: rotate past this size.
    pub max_bytes: u64,
    /// `FILE_AGENT_AUDIT_ON_FAILURE`: what happens to attempts while the trail cannot be
    /// written.
    pub on_failure: AuditOnFailure,
    /// `FILE_AGENT_AUDIT_ORIGIN`: the first part of the chain's origin (`<it>/<chain>`), as
    /// receipts and checkpoints name it; unset, the signing key's name (or `file-agent`).
    pub origin: Option<String>,
    /// `FILE_AGENT_AUDIT_SIGNING_KEY_FILE`: the private key that signs checkpoints
    /// (`file-agent audit keygen` makes one); none, no checkpoint is signed.
    pub signing_key_file: Option<PathBuf>,
    /// `FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL`: how often a checkpoint is signed, when lines
    /// came since the last one.
    pub checkpoint_interval: Duration,
    /// `FILE_AGENT_AUDIT_WITNESSES`: each witness's submission URL and cosignature key.
    pub witnesses: Vec<(String, String)>,
}

/// `FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL`'s default, in seconds.
pub const DEFAULT_CHECKPOINT_INTERVAL_SECS: u64 = 60;

/// `FILE_AGENT_AUDIT_ON_FAILURE`: what file-agent does while its audit trail cannot be written,
/// as auditd's `disk_full_action` chooses between halting and going on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuditOnFailure {
    /// `refuse` (the default): no attempt runs unless its line can be written; an attempt that
    /// ran but whose line could not be written is answered as failed, its output withheld.
    #[default]
    Refuse,
    /// `continue`: attempts run and answer as usual; the lines that could not be written are
    /// lost (counted, and stated by the first line written once the trail works again).
    Continue,
}

impl AuditOnFailure {
    /// As the setting spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refuse => "refuse",
            Self::Continue => "continue",
        }
    }
}

/// `FILE_AGENT_AUDIT_RECEIPTS`: what an answer's receipt (`_meta`, `io.file-agent/receipts`)
/// holds for each of its audit lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReceiptMode {
    /// `line` (the default): the line's origin, leaf index and leaf hash, at once; a signed
    /// checkpoint covers it within `FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL`, and `audit prove`
    /// proves it then.
    #[default]
    Line,
    /// `signed`: the answer waits (at most about a second, batched with the calls ending
    /// meanwhile) for the signed checkpoint that covers its lines, and its receipt carries
    /// the line, the inclusion proof and the checkpoint: it proves itself offline
    /// (`audit verify-receipt`). Needs `FILE_AGENT_AUDIT_SIGNING_KEY_FILE`.
    Signed,
}

impl ReceiptMode {
    /// As the setting spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Line => "line",
            Self::Signed => "signed",
        }
    }

    /// `FILE_AGENT_AUDIT_RECEIPTS`, `line` when unset; `signed` only with a signing key.
    fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        let Some(value) = vars.get("FILE_AGENT_AUDIT_RECEIPTS") else {
            return Ok(Self::default());
        };
        let mode = match value.trim().to_ascii_lowercase().as_str() {
            "line" => Self::Line,
            "signed" => Self::Signed,
            _ => {
                return Err(ConfigError {
                    var: "FILE_AGENT_AUDIT_RECEIPTS",
                    value,
                    expected: "line (the default) or signed".into(),
                });
            }
        };
        if mode == Self::Signed && vars.get("FILE_AGENT_AUDIT_SIGNING_KEY_FILE").is_none() {
            return Err(ConfigError {
                var: "FILE_AGENT_AUDIT_RECEIPTS",
                value,
                expected: "line, or signed together with FILE_AGENT_AUDIT_SIGNING_KEY_FILE (signed receipts carry a checkpoint signed with that key)".into(),
            });
        }
        Ok(mode)
    }
}

/// Retention: off (keep forever) unless set. What counts as a file's age is in `retention`'s
/// own doc (`server::retention`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RetentionConfig {
    /// `FILE_AGENT_FILES_RETENTION_DAYS`: files of the local store older than this are deleted.
    pub files: Option<Duration>,
    /// `FILE_AGENT_AUDIT_RETENTION_DAYS`: audit files whose last line is older than this are
    /// deleted whole (never the file a server is writing).
    pub audit: Option<Duration>,
}

impl RetentionConfig {
    fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        let days = |var| {
            vars.number(
                var,
                0,
                0..=MAX_RETENTION_DAYS,
                "whole days (0 or unset: keep forever)",
            )
            .map(|days| (days > 0).then(|| Duration::from_secs(days * 86_400)))
        };
        Ok(Self {
            files: days("FILE_AGENT_FILES_RETENTION_DAYS")?,
            audit: days("FILE_AGENT_AUDIT_RETENTION_DAYS")?,
        })
    }

    /// Whether anything is pruned at all.
    pub fn enabled(&self) -> bool {
        self.files.is_some() || self.audit.is_some()
    }
}

/// Where the audit trail is written.
#[derive(Debug, Clone, PartialEq)]
pub enum AuditPlace {
    /// `FILE_AGENT_AUDIT_FILE=off`: nowhere (stdout only, if asked).
    Off,
    /// `FILE_AGENT_AUDIT_DIR` (default `<FILE_AGENT_DATA_DIR>/audit`): a folder in which each
    /// server writes its own chain, `<instance>.jsonl`, so replicas can share it.
    Folder(PathBuf),
    /// `FILE_AGENT_AUDIT_FILE=<path>`: one file, one chain, for one server only.
    File(PathBuf),
}

/// Admission control.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionConfig {
    /// `FILE_AGENT_MAX_CONCURRENT`: containers running at once (default: the CPU count).
    pub max_concurrent: usize,
    /// `FILE_AGENT_QUEUE_MAX`: attempts waiting for a slot (default: twice the slots); past it
    /// a call is told the server is busy.
    pub queue_max: usize,
    /// `FILE_AGENT_QUEUE_TIMEOUT`: the longest wait for a slot.
    pub queue_timeout: Duration,
    /// `FILE_AGENT_CALL_TIMEOUT`: the longest a tool call may take, from start to answer.
    pub call_timeout: Duration,
}

/// The HTTP server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// `FILE_AGENT_LISTEN`.
    pub listen: SocketAddr,
    /// `FILE_AGENT_PUBLIC_URL`: how users reach this server (links to the local store).
    pub public_url: String,
    /// `FILE_AGENT_ALLOWED_HOSTS`: `Host` values accepted on `/mcp`; `None` accepts any (`*`).
    pub allowed_hosts: Option<Vec<String>>,
    /// `FILE_AGENT_ALLOWED_ORIGINS`: browser `Origin`s accepted on `/mcp` (a request without
    /// one passes); `None` accepts any (`*`).
    pub allowed_origins: Option<Vec<String>>,
    /// Which of the three above the environment set; the others follow the address served
    /// ([`Config::serve_at`]).
    pub pinned: Pinned,
    /// `FILE_AGENT_ACCESS_TOKENS`: when any is set (here or in the file), `/mcp` and uploads
    /// need one of them.
    pub access_tokens: Vec<Secret>,
    /// `FILE_AGENT_ACCESS_TOKENS_FILE`: more tokens, one per line (`#` starts a comment).
    pub access_tokens_file: Option<PathBuf>,
    /// `FILE_AGENT_METRICS_TOKEN`: when set, `/metrics` needs it as a bearer token.
    pub metrics_token: Option<Secret>,
    /// `FILE_AGENT_SHUTDOWN_GRACE`: on SIGTERM, how long running calls may go on before their
    /// containers are killed.
    pub shutdown_grace: Duration,
    /// `FILE_AGENT_REAP_INTERVAL`: how often leftover containers are looked for while serving
    /// (`None`: only at start-up).
    pub reap_interval: Option<Duration>,
    /// `FILE_AGENT_HEADER_TIMEOUT`: the longest a connection may take to send a request's
    /// headers, or stay idle between requests; then it is closed.
    pub header_timeout: Duration,
    /// `FILE_AGENT_BODY_TIMEOUT`: the longest a request body may go without sending a byte.
    pub body_timeout: Duration,
    /// `FILE_AGENT_MAX_CONNECTIONS`: client connections open at once (kept below the
    /// descriptor limit); past it a connection gets 503 and is closed.
    pub max_connections: usize,
    /// `FILE_AGENT_MAX_CONNECTIONS_PER_PEER`: connections one client address may hold at once;
    /// `None`: half of the connection cap (nginx's `limit_conn` per `$binary_remote_addr`).
    pub max_connections_per_peer: Option<usize>,
    /// `FILE_AGENT_WRITE_TIMEOUT`: the longest an answer may wait for the client to take a
    /// byte of it; then the connection is closed.
    pub write_timeout: Duration,
    /// `FILE_AGENT_KEEP_ALIVE`: while a `tools/call` works, how often a client that takes SSE
    /// gets a keep-alive comment.
    pub keep_alive: Duration,
    /// `FILE_AGENT_MAX_UPLOADS`: uploads at once; past it an upload gets 503.
    pub max_uploads: usize,
    /// `FILE_AGENT_LOCAL_ROOTS`: over stdio, the folders a client that declares no roots may
    /// name input files in by path (absolute, comma-separated).
    pub local_roots: Vec<PathBuf>,
}

/// Which address-dependent settings were set explicitly (and so do not follow the address
/// served).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pinned {
    /// `FILE_AGENT_PUBLIC_URL` is set.
    pub public_url: bool,
    /// `FILE_AGENT_ALLOWED_HOSTS` is set.
    pub allowed_hosts: bool,
    /// `FILE_AGENT_ALLOWED_ORIGINS` is set.
    pub allowed_origins: bool,
}

/// The OpenAI-compatible chat API.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmConfig {
    /// `OPENAI_API_KEY`; without it the LLM tools answer with a clear error.
    pub api_key: Option<Secret>,
    /// `OPENAI_BASE_URL`, with `/v1`, no trailing slash.
    pub base_url: String,
    /// `MODEL_NAME`.
    pub model: String,
    /// `FILE_AGENT_LLM_TIMEOUT`: one request, from sending to the whole answer.
    pub timeout: Duration,
    /// `FILE_AGENT_LLM_RETRIES`: extra tries after a timeout.
    pub timeout_retries: u32,
}

/// Where files live.
#[derive(Debug, Clone, PartialEq)]
pub enum StorageConfig {
    /// Open WebUI's files API (when `INTERNAL_API_URL` is set).
    OpenWebUi(OpenWebUiConfig),
    /// Files under a local folder, served by file-agent itself.
    Local(LocalStoreConfig),
}

/// Open WebUI's files API.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenWebUiConfig {
    /// `INTERNAL_API_URL`: how file-agent reaches Open WebUI (e.g. `http://open-webui:8080`).
    pub internal_url: String,
    /// `PUBLIC_DOMAIN`: how users reach Open WebUI, for download links; default the internal URL.
    pub public_url: String,
    /// `OPENWEBUI_API_KEY`: used when a request carries no user token (or forwarding is off).
    pub api_key: Option<Secret>,
    /// `FILE_AGENT_FORWARD_USER_TOKEN`: use the bearer token of the MCP request (Open WebUI's
    /// "session" auth sends the user's own token), so each user reaches only their own files.
    pub forward_user_token: bool,
    /// `FILE_AGENT_CHAT_STATUS`: post a call's progress as status events under the assistant's
    /// message when the call names its chat and message.
    pub chat_status: bool,
    /// Where the owner of each file file-agent stores there is recorded (`openwebui-owners` in
    /// `FILE_AGENT_DATA_DIR`): with `OPENWEBUI_API_KEY`, Open WebUI sees one user for all.
    pub owners_dir: PathBuf,
}

/// The folder in `FILE_AGENT_DATA_DIR` where the owners of files stored in Open WebUI are kept.
pub const OPENWEBUI_OWNERS_FOLDER: &str = "openwebui-owners";

/// The built-in store.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalStoreConfig {
    /// `FILE_AGENT_DATA_DIR`.
    pub data_dir: PathBuf,
    /// The public URL of this server; files are at `<public_url>/files/<id>/<name>`.
    pub public_url: String,
}

/// Caps on one input file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransferLimits {
    /// `FILE_AGENT_INPUT_MAX_MIB`, in bytes.
    pub max_bytes: u64,
    /// `FILE_AGENT_DOWNLOAD_TIMEOUT`.
    pub timeout: Duration,
}

impl Config {
    /// The configuration from the process environment (after `.env` was loaded into it).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The configuration from any lookup of variable names; empty values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        let data_dir = vars
            .get("FILE_AGENT_DATA_DIR")
            .map_or_else(|| PathBuf::from(DEFAULT_DATA_DIR), PathBuf::from);
        let server = ServerConfig::from_vars(&vars)?;
        let listen = server.listen;
        let sandbox = SandboxConfig::from_vars(&vars)?;
        let kubernetes = matches!(sandbox.backend, super::Backend::Kubernetes(_));
        let mut config = Self {
            admission: AdmissionConfig::from_vars(&vars, kubernetes)?,
            sandbox,
            server,
            identity: IdentityConfig::from_vars(&vars)?,
            llm: LlmConfig::from_vars(&vars)?,
            storage: StorageConfig::from_vars(&vars, &data_dir)?,
            transfer: TransferLimits::from_vars(&vars)?,
            prompts_dir: vars.get("FILE_AGENT_PROMPTS_DIR").map(PathBuf::from),
            audit: AuditConfig::from_vars(&vars, &data_dir)?,
            receipts: ReceiptMode::from_vars(&vars)?,
            retention: RetentionConfig::from_vars(&vars)?,
            url_fetch: UrlFetchConfig::from_vars(&vars)?,
            research: ResearchConfig::from_vars(&vars)?,
            dynamic_tools: DynamicTools::from_vars(&vars)?,
            tasks: TasksConfig::from_vars(&vars)?,
            sessions: SessionsConfig::from_vars(&vars)?,
            data_dir,
        };
        // The public URL, hosts and origins not set follow the address served.
        config.serve_at(listen);
        Ok(config)
    }

    /// Makes the settings that depend on where the server listens follow `served`, the
    /// address it really serves (after `--listen`, and with the port the OS chose for port
    /// 0): the public URL (local store links), the allowed `Host` names and the allowed
    /// browser origins, each unless its variable set it.
    pub fn serve_at(&mut self, served: SocketAddr) {
        let server = &mut self.server;
        server.listen = served;
        if !server.pinned.public_url {
            server.public_url = default_public_url(served);
        }
        if let StorageConfig::Local(local) = &mut self.storage {
            local.public_url = server.public_url.clone();
        }
        if !server.pinned.allowed_hosts {
            let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| h.to_string()).collect();
            if let Some(host) = url_authority(&server.public_url)
                && !hosts.contains(&host)
            {
                hosts.push(host);
            }
            server.allowed_hosts = Some(hosts);
        }
        if !server.pinned.allowed_origins {
            let mut origins: Vec<String> = LOOPBACK_ORIGINS.iter().map(|o| o.to_string()).collect();
            if let Some(origin) = url_origin(&server.public_url) {
                origins.push(origin);
            }
            server.allowed_origins = Some(origins);
        }
    }
}

impl ServerConfig {
    /// The `FILE_AGENT_*` settings of the HTTP side. The public URL, hosts and origins that
    /// the environment leaves unset are filled in by [`Config::serve_at`] (and again once the
    /// listener is bound, since `--listen` and port 0 are only known then).
    fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        let listen = listen(vars)?;
        let public_url = url(vars, "FILE_AGENT_PUBLIC_URL")?;
        let allowed_hosts = list_or_any(vars, "FILE_AGENT_ALLOWED_HOSTS", |host| host.to_string());
        let allowed_origins = list_or_any(vars, "FILE_AGENT_ALLOWED_ORIGINS", |origin| {
            origin.trim_end_matches('/').to_string()
        });
        let pinned = Pinned {
            public_url: public_url.is_some(),
            allowed_hosts: allowed_hosts.is_some(),
            allowed_origins: allowed_origins.is_some(),
        };
        Ok(Self {
            listen,
            public_url: public_url.unwrap_or_default(),
            allowed_hosts: allowed_hosts.flatten(),
            allowed_origins: allowed_origins.flatten(),
            pinned,
            access_tokens: access_tokens(vars)?,
            access_tokens_file: vars.get("FILE_AGENT_ACCESS_TOKENS_FILE").map(PathBuf::from),
            metrics_token: match vars.get("FILE_AGENT_METRICS_TOKEN") {
                Some(token) => {
                    super::refuse_placeholder("FILE_AGENT_METRICS_TOKEN", &token)?;
                    Some(Secret::new(token.trim()))
                }
                None => None,
            },
            shutdown_grace: vars.seconds(
                "FILE_AGENT_SHUTDOWN_GRACE",
                DEFAULT_SHUTDOWN_GRACE_SECS,
                0..=3600,
            )?,
            reap_interval: reap_interval(vars)?,
            header_timeout: vars.seconds(
                "FILE_AGENT_HEADER_TIMEOUT",
                DEFAULT_HEADER_TIMEOUT_SECS,
                1..=3600,
            )?,
            body_timeout: vars.seconds(
                "FILE_AGENT_BODY_TIMEOUT",
                DEFAULT_BODY_TIMEOUT_SECS,
                1..=3600,
            )?,
            max_connections: vars.count(
                "FILE_AGENT_MAX_CONNECTIONS",
                DEFAULT_MAX_CONNECTIONS,
                16..=1_000_000,
            )?,
            max_connections_per_peer: vars
                .get("FILE_AGENT_MAX_CONNECTIONS_PER_PEER")
                .map(|_| vars.count("FILE_AGENT_MAX_CONNECTIONS_PER_PEER", 1, 1..=1_000_000))
                .transpose()?,
            write_timeout: vars.seconds(
                "FILE_AGENT_WRITE_TIMEOUT",
                DEFAULT_WRITE_TIMEOUT_SECS,
                1..=3600,
            )?,
            keep_alive: vars.seconds("FILE_AGENT_KEEP_ALIVE", DEFAULT_KEEP_ALIVE_SECS, 1..=290)?,
            max_uploads: vars.count("FILE_AGENT_MAX_UPLOADS", DEFAULT_MAX_UPLOADS, 1..=1024)?,
            local_roots: local_roots(vars)?,
        })
    }
}

/// `FILE_AGENT_LOCAL_ROOTS`: absolute folders, comma-separated.
fn local_roots(vars: &Vars<'_>) -> Result<Vec<PathBuf>, ConfigError> {
    let Some(value) = vars.get("FILE_AGENT_LOCAL_ROOTS") else {
        return Ok(Vec::new());
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|root| !root.is_empty())
        .map(|root| {
            let path = PathBuf::from(root);
            if path.is_absolute() {
                Ok(path)
            } else {
                Err(ConfigError {
                    var: "FILE_AGENT_LOCAL_ROOTS",
                    value: value.clone(),
                    expected: "absolute folders, comma-separated, e.g. /home/me/reports".into(),
                })
            }
        })
        .collect()
}

impl LlmConfig {
    /// `OPENAI_API_KEY`, `OPENAI_BASE_URL`, `MODEL_NAME` and the request timeout and retries.
    fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            api_key: vars
                .get("OPENAI_API_KEY")
                .map(|key| Secret::new(key.trim())),
            base_url: url(vars, "OPENAI_BASE_URL")?
                .unwrap_or_else(|| DEFAULT_OPENAI_BASE_URL.into()),
            model: vars
                .get("MODEL_NAME")
                .map(|m| m.trim().to_string())
                .unwrap_or_else(|| DEFAULT_MODEL.into()),
            timeout: vars.seconds("FILE_AGENT_LLM_TIMEOUT", DEFAULT_LLM_TIMEOUT_SECS, 1..=3600)?,
            timeout_retries: vars.count(
                "FILE_AGENT_LLM_RETRIES",
                DEFAULT_LLM_TIMEOUT_RETRIES,
                0..=5,
            )?,
        })
    }
}

impl StorageConfig {
    /// Open WebUI's files API when `INTERNAL_API_URL` is set, else the local store in
    /// `data_dir` (whose public URL [`Config::serve_at`] fills in).
    fn from_vars(vars: &Vars<'_>, data_dir: &std::path::Path) -> Result<Self, ConfigError> {
        let Some(internal_url) = url(vars, "INTERNAL_API_URL")? else {
            return Ok(StorageConfig::Local(LocalStoreConfig {
                data_dir: data_dir.to_path_buf(),
                public_url: String::new(),
            }));
        };
        let public_url = match vars.get("PUBLIC_DOMAIN") {
            // The Python File Agent took a bare domain as well as a URL.
            Some(domain) if !domain.contains("://") => {
                parse_url(format!("https://{}", domain.trim()), "PUBLIC_DOMAIN")?
            }
            Some(url) => parse_url(url, "PUBLIC_DOMAIN")?,
            None => internal_url.clone(),
        };
        Ok(StorageConfig::OpenWebUi(OpenWebUiConfig {
            internal_url,
            public_url,
            api_key: vars
                .get("OPENWEBUI_API_KEY")
                .map(|key| Secret::new(key.trim())),
            forward_user_token: vars.flag("FILE_AGENT_FORWARD_USER_TOKEN", true)?,
            chat_status: vars.flag("FILE_AGENT_CHAT_STATUS", true)?,
            owners_dir: data_dir.join(OPENWEBUI_OWNERS_FOLDER),
        }))
    }
}

impl AdmissionConfig {
    /// Slots (default: the CPUs this process may use; under Kubernetes its pod's CPU limit,
    /// never the node's cores: [`super::capacity`]), the queue and the call deadline.
    fn from_vars(vars: &Vars<'_>, kubernetes: bool) -> Result<Self, ConfigError> {
        let max_concurrent = match vars.get("FILE_AGENT_MAX_CONCURRENT") {
            Some(_) => vars.count("FILE_AGENT_MAX_CONCURRENT", 1, 1..=256)?,
            None => super::capacity::own_default_slots(kubernetes).min(256),
        };
        Ok(Self {
            max_concurrent,
            queue_max: vars.count("FILE_AGENT_QUEUE_MAX", max_concurrent * 2, 0..=10_000)?,
            queue_timeout: vars.seconds(
                "FILE_AGENT_QUEUE_TIMEOUT",
                DEFAULT_QUEUE_TIMEOUT_SECS,
                0..=3600,
            )?,
            call_timeout: vars.seconds(
                "FILE_AGENT_CALL_TIMEOUT",
                DEFAULT_CALL_TIMEOUT_SECS,
                10..=86_400,
            )?,
        })
    }
}

/// `FILE_AGENT_LISTEN`, else [`DEFAULT_LISTEN`].
fn listen(vars: &Vars<'_>) -> Result<SocketAddr, ConfigError> {
    let listen_value = vars
        .get("FILE_AGENT_LISTEN")
        .unwrap_or_else(|| DEFAULT_LISTEN.into());
    listen_value.trim().parse().map_err(|_| ConfigError {
        var: "FILE_AGENT_LISTEN",
        value: listen_value.clone(),
        expected: "an address and port, e.g. 0.0.0.0:8000 or 127.0.0.1:8000".into(),
    })
}

/// `FILE_AGENT_ACCESS_TOKENS`: comma-separated, blanks dropped.
fn access_tokens(vars: &Vars<'_>) -> Result<Vec<Secret>, ConfigError> {
    let Some(value) = vars.get("FILE_AGENT_ACCESS_TOKENS") else {
        return Ok(Vec::new());
    };
    let tokens: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .collect();
    for token in &tokens {
        super::refuse_placeholder("FILE_AGENT_ACCESS_TOKENS", token)?;
    }
    Ok(tokens.into_iter().map(Secret::new).collect())
}

/// `FILE_AGENT_REAP_INTERVAL`; `None` for 0 (off).
fn reap_interval(vars: &Vars<'_>) -> Result<Option<Duration>, ConfigError> {
    Ok(
        match vars.number(
            "FILE_AGENT_REAP_INTERVAL",
            DEFAULT_REAP_INTERVAL_SECS,
            0..=86_400,
            "whole seconds (0: off)",
        )? {
            0 => None,
            secs => Some(Duration::from_secs(secs)),
        },
    )
}

impl AuditConfig {
    /// The `FILE_AGENT_AUDIT_*` settings; the folder defaults to `audit` in `data_dir`.
    fn from_vars(vars: &Vars<'_>, data_dir: &std::path::Path) -> Result<Self, ConfigError> {
        let place = AuditPlace::from_vars(vars, data_dir)?;
        let chain = chain_name(vars)?;
        Ok(Self {
            place,
            chain,
            stdout: vars.flag("FILE_AGENT_AUDIT_STDOUT", false)?,
            include_code: vars.flag("FILE_AGENT_AUDIT_CODE", true)?,
            max_bytes: vars.mib(
                "FILE_AGENT_AUDIT_MAX_MIB",
                DEFAULT_AUDIT_MAX_MIB,
                1..=100_000,
            )?,
            on_failure: AuditOnFailure::from_vars(vars)?,
            origin: origin(vars)?,
            signing_key_file: vars
                .get("FILE_AGENT_AUDIT_SIGNING_KEY_FILE")
                .map(|path| PathBuf::from(path.trim())),
            checkpoint_interval: vars.seconds(
                "FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL",
                DEFAULT_CHECKPOINT_INTERVAL_SECS,
                1..=86_400,
            )?,
            witnesses: witnesses(vars)?,
        })
    }
}

/// `FILE_AGENT_AUDIT_ORIGIN`: a note key name (no spaces, no `+`), without a trailing `/`.
fn origin(vars: &Vars<'_>) -> Result<Option<String>, ConfigError> {
    let Some(value) = vars.get("FILE_AGENT_AUDIT_ORIGIN") else {
        return Ok(None);
    };
    let origin = value.trim().trim_end_matches('/');
    if origin.is_empty() || origin.chars().any(|c| c.is_whitespace() || c == '+') {
        return Err(ConfigError {
            var: "FILE_AGENT_AUDIT_ORIGIN",
            value,
            expected: "a name without spaces or '+', such as files.example.com/audit".into(),
        });
    }
    Ok(Some(origin.to_string()))
}

/// `FILE_AGENT_AUDIT_WITNESSES`: comma-separated `<url> <verifier key>` pairs. The keys are
/// read when the server starts (`audit::checkpoints::witnesses`).
fn witnesses(vars: &Vars<'_>) -> Result<Vec<(String, String)>, ConfigError> {
    let Some(value) = vars.get("FILE_AGENT_AUDIT_WITNESSES") else {
        return Ok(Vec::new());
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let mut parts = entry.split_whitespace();
            match (parts.next(), parts.next(), parts.next()) {
                (Some(url), Some(key), None)
                    if url.starts_with("http://") || url.starts_with("https://") =>
                {
                    Ok((url.to_string(), key.to_string()))
                }
                _ => Err(ConfigError {
                    var: "FILE_AGENT_AUDIT_WITNESSES",
                    value: value.clone(),
                    expected: "comma-separated `<url> <verifier key>` pairs, e.g. `https://witness.example/w1 witness.example/w1+1a2b3c4d+BCFS...`".into(),
                }),
            }
        })
        .collect()
}

impl AuditPlace {
    /// `FILE_AGENT_AUDIT_FILE` (a file, or `off`) or `FILE_AGENT_AUDIT_DIR`, not both; the
    /// folder `audit` in `data_dir` when neither is set.
    fn from_vars(vars: &Vars<'_>, data_dir: &std::path::Path) -> Result<Self, ConfigError> {
        let file = vars.get("FILE_AGENT_AUDIT_FILE");
        let folder = vars.get("FILE_AGENT_AUDIT_DIR");
        Ok(match (file, folder) {
            (Some(file), _) if file.trim().eq_ignore_ascii_case("off") => AuditPlace::Off,
            (Some(file), Some(_)) => {
                return Err(ConfigError {
                    var: "FILE_AGENT_AUDIT_FILE",
                    value: file,
                    expected:
                        "unset when FILE_AGENT_AUDIT_DIR is set (one place for the trail), or off"
                            .into(),
                });
            }
            (Some(file), None) => AuditPlace::File(PathBuf::from(file.trim())),
            (None, Some(folder)) => AuditPlace::Folder(PathBuf::from(folder.trim())),
            (None, None) => AuditPlace::Folder(data_dir.join(DEFAULT_AUDIT_FOLDER)),
        })
    }
}

/// `POD_NAME` as the name of this server's chain, when set.
fn chain_name(vars: &Vars<'_>) -> Result<Option<String>, ConfigError> {
    Ok(match vars.get("POD_NAME") {
        Some(name) if valid_chain_name(name.trim()) => Some(name.trim().to_string()),
        Some(name) => {
            return Err(ConfigError {
                var: "POD_NAME",
                value: name,
                expected: "a pod name (letters, digits, '-', '_' or '.', up to 253)".into(),
            });
        }
        None => None,
    })
}

impl AuditOnFailure {
    /// `FILE_AGENT_AUDIT_ON_FAILURE`, `refuse` when unset.
    fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        Ok(match vars.get("FILE_AGENT_AUDIT_ON_FAILURE") {
            None => AuditOnFailure::default(),
            Some(value) => match value.trim().to_ascii_lowercase().as_str() {
                "refuse" => AuditOnFailure::Refuse,
                "continue" => AuditOnFailure::Continue,
                _ => {
                    return Err(ConfigError {
                        var: "FILE_AGENT_AUDIT_ON_FAILURE",
                        value,
                        expected: "refuse (no attempt without its audit line) or continue".into(),
                    });
                }
            },
        })
    }
}

impl TransferLimits {
    /// The size and time caps on fetching one input file.
    fn from_vars(vars: &Vars<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            max_bytes: vars.mib("FILE_AGENT_INPUT_MAX_MIB", DEFAULT_INPUT_MAX_MIB, 1..=4096)?,
            timeout: vars.seconds(
                "FILE_AGENT_DOWNLOAD_TIMEOUT",
                DEFAULT_DOWNLOAD_TIMEOUT_SECS,
                1..=3600,
            )?,
        })
    }
}

/// `var` as an absolute http(s) URL without a trailing slash, if set.
fn url(vars: &Vars<'_>, var: &'static str) -> Result<Option<String>, ConfigError> {
    vars.get(var).map(|value| parse_url(value, var)).transpose()
}

/// `var` as a comma-separated list, each item trimmed and passed through `item`; `Some(None)`
/// for `*` (anything), `None` when unset.
fn list_or_any(
    vars: &Vars<'_>,
    var: &str,
    item: impl Fn(&str) -> String,
) -> Option<Option<Vec<String>>> {
    vars.get(var).map(|value| {
        (value.trim() != "*").then(|| {
            value
                .split(',')
                .map(|entry| item(entry.trim()))
                .filter(|entry| !entry.is_empty())
                .collect()
        })
    })
}

impl Config {
    /// Why users' browsers cannot open the local store's download links, if they cannot: the
    /// server listens beyond loopback (so its users are elsewhere), but its public URL names
    /// loopback or a cluster-internal name (`*.svc`, `*.cluster.local`), as it does by default
    /// under compose (`http://localhost:8000`) or Kubernetes.
    pub fn unreachable_links(&self) -> Option<String> {
        let StorageConfig::Local(local) = &self.storage else {
            return None;
        };
        if self.server.listen.ip().is_loopback() {
            return None;
        }
        let host = url_authority(&local.public_url)?;
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        let place = if name == "localhost"
            || name.ends_with(".localhost")
            || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        {
            "loopback"
        } else if name.ends_with(".svc") || name.ends_with(".cluster.local") {
            "a name inside the cluster"
        } else {
            return None;
        };
        Some(format!(
            "download links start with {}, which is {place}: users' browsers on other machines cannot open them; set FILE_AGENT_PUBLIC_URL to this server's address as users reach it (its host name, or the proxy's URL in front of it)",
            local.public_url
        ))
    }
}

/// `http://<address>:<port>` of the address served; `localhost` when it is every address
/// (`0.0.0.0`, `::`), which no browser can reach by that name.
fn default_public_url(served: SocketAddr) -> String {
    let host = match served.ip() {
        ip if ip.is_unspecified() => "localhost".to_string(),
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
    };
    format!("http://{host}:{}", served.port())
}

/// An absolute http(s) URL, without a trailing slash.
fn parse_url(value: String, var: &'static str) -> Result<String, ConfigError> {
    let trimmed = value.trim().trim_end_matches('/');
    match reqwest::Url::parse(trimmed) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
            Ok(trimmed.to_string())
        }
        _ => Err(ConfigError {
            var,
            value,
            expected: "an http:// or https:// URL, e.g. http://open-webui:8080".into(),
        }),
    }
}

/// The origin of a URL (`scheme://host[:port]`), as a browser's `Origin` header carries it.
fn url_origin(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    Some(url.origin().ascii_serialization()).filter(|origin| origin != "null")
}

/// The host (and port, if any) of a URL, as a `Host` header would carry it.
fn url_authority(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?.trim_matches(['[', ']']).to_string();
    Some(host)
}

/// Whether `name` may name a chain (a file in the audit folder): 1 to 253 letters, digits,
/// `-`, `_` or `.`, not starting with `.` (a pod name or an instance always fits).
pub fn valid_chain_name(name: &str) -> bool {
    (1..=253).contains(&name.len())
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_are_the_python_file_agents_and_the_local_store() {
        let config = config(&[]).unwrap();
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:8000");
        assert_eq!(config.server.public_url, "http://127.0.0.1:8000");
        assert_eq!(config.server.header_timeout, Duration::from_secs(30));
        assert_eq!(config.server.max_connections, 1024);
        assert_eq!(config.llm.model, "gpt-4o");
        assert_eq!(config.llm.base_url, "https://api.openai.com/v1");
        assert_eq!(config.llm.api_key, None);
        assert_eq!(config.sandbox.limits.timeout, Duration::from_secs(90));
        assert_eq!(
            config.storage,
            StorageConfig::Local(LocalStoreConfig {
                data_dir: PathBuf::from("data"),
                public_url: "http://127.0.0.1:8000".into()
            })
        );
        let hosts = config.server.allowed_hosts.unwrap();
        assert!(hosts.contains(&"localhost".to_string()), "{hosts:?}");
    }

    #[test]
    fn under_kubernetes_the_slots_default_to_the_pods_cpu_limit_never_the_nodes_cores() {
        let kube = config(&[("SANDBOX_BACKEND", "kubernetes")]).unwrap();
        let own_limit =
            super::super::capacity::own_cpu_limit(std::path::Path::new("/sys/fs/cgroup"));
        assert_eq!(
            kube.admission.max_concurrent,
            super::super::capacity::default_slots(true, own_limit, usize::MAX)
        );
        assert_eq!(kube.admission.queue_max, kube.admission.max_concurrent * 2);
        let set = config(&[
            ("SANDBOX_BACKEND", "kubernetes"),
            ("FILE_AGENT_MAX_CONCURRENT", "6"),
        ])
        .unwrap();
        assert_eq!(set.admission.max_concurrent, 6);
        let docker = config(&[]).unwrap();
        assert_eq!(
            docker.admission.max_concurrent,
            std::thread::available_parallelism().map_or(2, usize::from)
        );
        assert!(config(&[("FILE_AGENT_MAX_CONCURRENT", "0")]).is_err());
    }

    #[test]
    fn address_defaults_follow_the_address_served_unless_set() {
        let mut config = config(&[("FILE_AGENT_LISTEN", "0.0.0.0:8000")]).unwrap();
        config.serve_at("10.1.2.3:18555".parse().unwrap());
        assert_eq!(config.server.public_url, "http://10.1.2.3:18555");
        let StorageConfig::Local(local) = &config.storage else {
            panic!("expected the local store");
        };
        assert_eq!(local.public_url, "http://10.1.2.3:18555");
        let hosts = config.server.allowed_hosts.clone().unwrap();
        assert!(hosts.contains(&"10.1.2.3".to_string()), "{hosts:?}");
        let origins = config.server.allowed_origins.clone().unwrap();
        assert!(
            origins.contains(&"http://10.1.2.3:18555".to_string()),
            "{origins:?}"
        );
        // Every address is reached as localhost; IPv6 gets brackets.
        config.serve_at("[::]:9000".parse().unwrap());
        assert_eq!(config.server.public_url, "http://localhost:9000");
        config.serve_at("[::1]:9001".parse().unwrap());
        assert_eq!(config.server.public_url, "http://[::1]:9001");

        let mut set = config_with(&[
            ("FILE_AGENT_PUBLIC_URL", "https://files.example.com"),
            ("FILE_AGENT_ALLOWED_HOSTS", "files.example.com"),
            ("FILE_AGENT_ALLOWED_ORIGINS", "*"),
        ]);
        set.serve_at("127.0.0.1:18555".parse().unwrap());
        assert_eq!(set.server.public_url, "https://files.example.com");
        assert_eq!(
            set.server.allowed_hosts,
            Some(vec!["files.example.com".to_string()])
        );
        assert_eq!(set.server.allowed_origins, None);
        assert_eq!(set.server.listen.port(), 18555);
    }

    fn config_with(vars: &[(&str, &str)]) -> Config {
        config(vars).unwrap()
    }

    #[test]
    fn origins_default_to_loopback_and_the_public_url_and_tokens_are_secrets() {
        let config = config(&[
            ("FILE_AGENT_PUBLIC_URL", "https://files.example.com/"),
            (
                "FILE_AGENT_ACCESS_TOKENS",
                " token-one-0123456789 ,token-two-0123456789",
            ),
        ])
        .unwrap();
        let origins = config.server.allowed_origins.clone().unwrap();
        assert!(
            origins.contains(&"https://files.example.com".to_string()),
            "{origins:?}"
        );
        assert!(
            origins.contains(&"http://localhost:*".to_string()),
            "{origins:?}"
        );
        assert_eq!(config.server.access_tokens.len(), 2);
        assert_eq!(
            config.server.access_tokens[0].expose(),
            "token-one-0123456789"
        );
        assert!(!format!("{:?}", config.server).contains("token-one"));
        let any = config_with_origins("*");
        assert_eq!(any.server.allowed_origins, None);
    }

    fn config_with_origins(value: &str) -> Config {
        config(&[("FILE_AGENT_ALLOWED_ORIGINS", value)]).unwrap()
    }

    #[test]
    fn open_webui_is_chosen_by_internal_api_url_and_public_domain_may_be_bare() {
        let config = config(&[
            ("INTERNAL_API_URL", "http://open-webui:8080/"),
            ("PUBLIC_DOMAIN", "chat.example.com"),
            ("OPENWEBUI_API_KEY", "sk-admin"),
            ("FILE_AGENT_PUBLIC_URL", "https://files.example.com"),
        ])
        .unwrap();
        let StorageConfig::OpenWebUi(owui) = config.storage else {
            panic!("expected Open WebUI storage");
        };
        assert_eq!(owui.internal_url, "http://open-webui:8080");
        assert_eq!(owui.public_url, "https://chat.example.com");
        assert!(owui.forward_user_token);
        assert_eq!(owui.api_key.unwrap().expose(), "sk-admin");
        let hosts = config.server.allowed_hosts.unwrap();
        assert!(
            hosts.contains(&"files.example.com".to_string()),
            "{hosts:?}"
        );
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let config = config(&[
            ("OPENAI_API_KEY", "sk-very-secret"),
            ("INTERNAL_API_URL", "http://owui:8080"),
            ("OPENWEBUI_API_KEY", "sk-also-secret"),
        ])
        .unwrap();
        let printed = format!("{config:?}");
        assert!(!printed.contains("very-secret"), "{printed}");
        assert!(!printed.contains("also-secret"), "{printed}");
    }

    #[test]
    fn wrong_values_name_their_variable() {
        for (var, value) in [
            ("FILE_AGENT_LISTEN", "8000"),
            ("OPENAI_BASE_URL", "api.openai.com"),
            ("INTERNAL_API_URL", "ftp://x"),
            ("FILE_AGENT_INPUT_MAX_MIB", "0"),
            ("FILE_AGENT_FORWARD_USER_TOKEN", "maybe"),
            ("FILE_AGENT_LLM_TIMEOUT", "soon"),
            ("FILE_AGENT_AUDIT_ON_FAILURE", "halt"),
        ] {
            let mut vars = vec![(var, value)];
            if var == "FILE_AGENT_FORWARD_USER_TOKEN" {
                vars.push(("INTERNAL_API_URL", "http://owui:8080"));
            }
            let err = config(&vars).unwrap_err();
            assert_eq!(err.var, var, "{err}");
        }
        assert!(
            config(&[("FILE_AGENT_ALLOWED_HOSTS", "*")])
                .unwrap()
                .server
                .allowed_hosts
                .is_none()
        );
    }

    #[test]
    fn signed_receipts_are_off_unless_set_and_need_a_signing_key() {
        assert_eq!(config(&[]).unwrap().receipts, ReceiptMode::Line);
        let bad = config(&[("FILE_AGENT_AUDIT_RECEIPTS", "always")]).unwrap_err();
        assert_eq!(bad.var, "FILE_AGENT_AUDIT_RECEIPTS");
        let keyless = config(&[("FILE_AGENT_AUDIT_RECEIPTS", "signed")]).unwrap_err();
        assert!(
            keyless
                .to_string()
                .contains("FILE_AGENT_AUDIT_SIGNING_KEY_FILE"),
            "{keyless}"
        );
        let signed = config(&[
            ("FILE_AGENT_AUDIT_RECEIPTS", " Signed "),
            (
                "FILE_AGENT_AUDIT_SIGNING_KEY_FILE",
                "/run/secrets/audit.key",
            ),
        ])
        .unwrap();
        assert_eq!(signed.receipts, ReceiptMode::Signed);
    }

    #[test]
    fn retention_is_off_unless_set_and_a_bad_value_names_its_variable() {
        let off = config(&[]).unwrap().retention;
        assert_eq!(off, RetentionConfig::default());
        assert!(!off.enabled());
        let zero = config(&[("FILE_AGENT_AUDIT_RETENTION_DAYS", "0")]).unwrap();
        assert!(!zero.retention.enabled());
        let set = config(&[
            ("FILE_AGENT_FILES_RETENTION_DAYS", "30"),
            ("FILE_AGENT_AUDIT_RETENTION_DAYS", "365"),
        ])
        .unwrap()
        .retention;
        assert_eq!(set.files, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(set.audit, Some(Duration::from_secs(365 * 86_400)));
        for bad in ["-1", "30d", "36501"] {
            let error = config(&[("FILE_AGENT_FILES_RETENTION_DAYS", bad)]).unwrap_err();
            assert_eq!(error.var, "FILE_AGENT_FILES_RETENTION_DAYS");
            assert!(error.to_string().contains("whole days"), "{error}");
        }
    }

    #[test]
    fn links_on_loopback_or_a_cluster_name_are_unreachable_once_the_server_listens_beyond_loopback()
    {
        let config = |listen: &str, public: Option<&str>| {
            let mut vars = vec![("FILE_AGENT_LISTEN", listen.to_string())];
            if let Some(public) = public {
                vars.push(("FILE_AGENT_PUBLIC_URL", public.to_string()));
            }
            Config::from_lookup(move |name: &str| {
                vars.iter()
                    .find(|(var, _)| *var == name)
                    .map(|(_, value)| value.clone())
            })
            .unwrap()
        };
        // Loopback listening: the default links are fine.
        assert_eq!(config("127.0.0.1:8000", None).unreachable_links(), None);
        // Every address: the default `http://localhost:8000` is not.
        let every = config("0.0.0.0:8000", None).unreachable_links().unwrap();
        assert!(
            every.contains("http://localhost:8000") && every.contains("FILE_AGENT_PUBLIC_URL"),
            "{every}"
        );
        for unreachable in [
            "http://file-agent.file-agent.svc:8000",
            "http://file-agent.file-agent.svc.cluster.local:8000",
            "http://127.0.0.1:8000",
            "http://[::1]:8000",
        ] {
            let problem = config("0.0.0.0:8000", Some(unreachable)).unreachable_links();
            assert!(problem.is_some(), "{unreachable}");
        }
        for reachable in ["https://files.example.com", "http://10.1.2.3:8000"] {
            assert_eq!(
                config("0.0.0.0:8000", Some(reachable)).unreachable_links(),
                None
            );
        }
    }
}
