//! The record format of the trail, one JSON line per attempt or event ([`Record`] and the
//! parts it carries), and the hashing every other part shares: a line's hash and a file's
//! hash. It does not write, read or check a line: `writer.rs` writes, `verify.rs` checks, and
//! where a line's bytes end is the door's one rule (`untrusted::door::without_line_break`).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{availability, recovery, retention};

/// `prev` of the first line of a new chain.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A file that went into or came out of an attempt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileDigest {
    /// Its name (inputs) or path under `/work/out` (outputs).
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// The hex SHA-256 of its content.
    pub sha256: String,
}

/// The tool call an attempt belongs to, and who made it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CallInfo {
    /// The tool call's id (also in the server's log line for the call).
    pub call: String,
    /// The JSON-RPC id of the MCP request, as sent (a number or a string).
    pub request: serde_json::Value,
    /// The tool.
    pub tool: String,
    /// The MCP client as the call identifies it: `name/version` from the request's `_meta`
    /// (or, over stdio, from `initialize`), else the HTTP `User-Agent`; `None` when the call
    /// carries neither.
    pub client: Option<String>,
    /// The user, when a source named one: Open WebUI's user id, or the OAuth token's user
    /// claim.
    pub user: Option<String>,
    /// What identified the caller (`identity::Source`): `oauth`, `openwebui-jwt`,
    /// `openwebui-session`, `header` (a plain header, no proof) or `access-token` (a token,
    /// no user); absent when nothing did (stdio, an open server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The OAuth issuer that signed the caller's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The access token the request came with, as the first 16 hex digits of its SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// A signed identity the call carried that was not accepted, as `source: reason`
    /// (`openwebui-jwt: expired`): why a call that came with one names no user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_refused: Option<String>,
    /// Open WebUI's chat id (`X-OpenWebUI-Chat-Id`), when sent.
    pub chat: Option<String>,
    /// Whose the call's data is (`owner::Owner`'s key: the files it stores, the saved tools it
    /// sees), so that the review page counts each owner once; absent in lines written before
    /// owner keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The call's OpenTelemetry trace id (32 hex digits), also on the call's log line and its
    /// spans; absent when traces are off (`crate::traces`) and in lines written before them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// What a line says about a saved tool (`create_tool`, `generate_tool`, a `my_<name>` call).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ToolMark {
    /// `check` (the check and test call before saving), `created`, `updated`, `saved again`,
    /// `deleted`, `call`, or `refused call` (arguments that do not fit the schema: nothing ran).
    pub action: String,
    /// The tool's name (without `my_`).
    pub name: String,
    /// Its version: the hex SHA-256 of its code and schema.
    pub version: String,
    /// Who saved it (for a call: who saved the version called), when known.
    pub owner: Option<String>,
}

impl ToolMark {
    /// A mark of `action` on version `version` of the tool `name`.
    pub fn new(action: &str, name: &str, version: &str, owner: Option<String>) -> Self {
        Self {
            action: action.to_string(),
            name: name.to_string(),
            version: version.to_string(),
            owner,
        }
    }
}

/// What a line says about the session its attempt belongs to (`run_python`'s `session`): a
/// reviewer follows a session from state to state, each line's `state_before` being the
/// `state_after` of the session's line before.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SessionMark {
    /// The session: the hex SHA-256 of its owner key and its name (never the name itself).
    pub id: String,
    /// The hex SHA-256 of the state the attempt started from; absent when it started from
    /// none (a new session, or one started over).
    pub state_before: Option<String>,
    /// The hex SHA-256 of the session's state after the attempt: the state it left when it
    /// was kept, else `state_before` (a failed attempt, a state over the bound, none written).
    pub state_after: Option<String>,
    /// Whether the caller asked for the session to start over (`reset_session`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
    /// The line's place among the session's lines: 1 for its first, one more than the line
    /// before wherever that was written (replicas write chains of their own, and a session
    /// moves between them). What orders a session's lines across chains; absent (0) in lines
    /// written before it, and without a trail to count from.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step: u64,
}

fn is_zero(step: &u64) -> bool {
    *step == 0
}

/// One attempt, or one change of a saved tool, as written. `seq` and `prev` are set by the log.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// UTC, RFC 3339 with milliseconds.
    pub time: String,
    /// Position in the chain (1 for the first line ever; continues across rotation).
    pub seq: u64,
    /// The call and its caller.
    #[serde(flatten)]
    pub caller: CallInfo,
    /// Who wrote the code: `model`, `caller` (run_python) or `file-agent` (the inspection).
    pub author: String,
    /// The model that wrote the code, when a model did.
    pub model: Option<String>,
    /// The hex SHA-256 of the code that ran.
    pub code_sha256: String,
    /// The code, unless `FILE_AGENT_AUDIT_CODE=false`.
    pub code: Option<String>,
    /// The inputs.
    pub inputs: Vec<FileDigest>,
    /// The outputs the script wrote.
    pub outputs: Vec<FileDigest>,
    /// For file-agent's own scripts (the table inspection, the change report of a
    /// `modify_file`): the hex SHA-256 of what it printed, the report the caller was shown.
    pub report_sha256: Option<String>,
    /// The image reference.
    pub image: String,
    /// The image's id.
    pub image_id: Option<String>,
    /// The OCI runtime (`default` for the engine's own).
    pub runtime: String,
    /// The limits applied.
    pub limits: serde_json::Value,
    /// The container's id (removed by now).
    pub container: Option<String>,
    /// `warm` (started ahead by the pool, before this attempt) or `cold` (started for it).
    pub container_kind: Option<String>,
    /// When the container was created (UTC, RFC 3339).
    pub container_created: Option<String>,
    /// `ok`, `failed`, `timeout`, `out_of_memory`, `output_limit`; `refused_output` when the
    /// script exited 0 but file-agent refused what it produced (`error` says why: not the asked
    /// type, nothing at `file_path`, unchanged by a modification, an unreadable saved-tool
    /// result); or why it did not run (`busy`, `cancelled`, `sandbox_error`).
    pub status: String,
    /// The script's exit code.
    pub exit_code: Option<i64>,
    /// Milliseconds, from asking for a slot to the container's removal.
    pub duration_ms: u64,
    /// What the attempt used, as its runner measured it (CPU seconds, peak memory, bytes
    /// written to `/work/out`, processes); absent when no script ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<crate::sandbox::Resources>,
    /// The error, when there was one.
    pub error: Option<String>,
    /// The saved tool this line is about, if any: its check, its saving or deletion (then
    /// no container ran: `status` is the action), or a call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_tool: Option<ToolMark>,
    /// The session the attempt belongs to, if any, with the states it went from and to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionMark>,
    /// What retention deleted, on a line whose `status` is `retention` (no container ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruned: Option<retention::Pruned>,
    /// What start-up cut from the end of the chain file, on a line whose `status` is
    /// `recovered` (no container ran): an unfinished line a crash or a failed write left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<recovery::Recovered>,
    /// On a line whose `status` is `audit_restored` (no container ran), the first written
    /// after the trail could not be: since when, for how long, the calls refused and the
    /// lines lost meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<availability::Unavailable>,
    /// The hex SHA-256 of the line before.
    pub prev: String,
}

/// The hex SHA-256 of a line (without its newline).
pub fn hash_line(line: &str) -> String {
    sha256_hex(line.as_bytes())
}

/// The hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The hex SHA-256 of a file, read in blocks.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 1 << 16];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex::encode(hasher.finalize()))
}
