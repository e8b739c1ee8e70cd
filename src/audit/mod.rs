//! The audit trail for security reviews: one JSON line per attempt, appended to a file (and to
//! stdout if asked): when, which call and caller, which model, the code's SHA-256 (and the
//! code, unless turned off), inputs and outputs with their SHA-256, the image, runtime and
//! limits, the container, how it ended and how long it took.
//!
//! Each line carries `prev`, the SHA-256 of the line before it (64 zeros for the first line
//! ever), so that a line changed, removed or inserted breaks the chain at that point:
//! [`verify`] proves a file untouched or names the first broken line. Rotation renames the
//! full file and goes on in a new one whose first line points at the old file's last line, so
//! the chain runs on across files (verify them in order). The chain shows tampering with the
//! file's contents; it cannot stop someone who can rewrite the whole file from rewriting it
//! whole, so ship the file (or stdout) to storage the server cannot modify.
//!
//! Servers that share a data folder (replicas) each write a chain of their own in the audit
//! folder, `<instance>.jsonl` and its rotated files ([`chain`]): one chain has one writer, so
//! its `prev` links stay true. A lock file beside the chain makes that a fact, not a hope.
//! [`report`] reads every chain for a reviewer.
//!
//! A line is in the trail whole or not at all: each is written with its newline in one append
//! and synced before the call's answer goes out; a write that fails part-way is cut back off,
//! and an unfinished line a crash left is cut at the next start-up and recorded by a line of
//! its own ([`recovery`]). Creating and rotating a chain file syncs the folder too.
//!
//! No attempt need run unless its line can be written: [`AuditLog::reserve`] sets aside the
//! room for a line before its attempt starts, and while it cannot, the trail is unavailable
//! ([`availability`]); the first line written once it works again says for how long it was,
//! and what that cost.

pub mod availability;
pub mod chain;
pub mod checkpoints;
pub mod merkle;
pub mod note;
pub mod proof;
pub mod pruned;
pub mod receipt;
pub mod recovery;
pub mod retention;
pub mod tree;
pub mod witness;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::config::AuditConfig;

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

/// Why the trail could not be opened or written.
#[derive(Debug, Error)]
#[error(
    "the audit trail {path} cannot be {action}: {source}; check FILE_AGENT_AUDIT_DIR (or FILE_AGENT_AUDIT_FILE) and its folder's permissions"
)]
pub struct AuditError {
    /// The file.
    pub path: String,
    /// What was being done.
    pub action: &'static str,
    /// The I/O error.
    pub source: std::io::Error,
}

/// Maps an I/O error on the trail at `path` while it was being `action` (for `map_err`).
fn failed(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> AuditError {
    let path = path.display().to_string();
    move |source| AuditError {
        path,
        action,
        source,
    }
}

struct Writer {
    file: File,
    /// The file's size: where the next line starts.
    size: u64,
    last_hash: String,
    seq: u64,
    /// A failed append left bytes after `size` that could not be cut then: cut them before
    /// writing anything else, or write nothing.
    unclean: bool,
    /// Bytes set aside past `size` for lines of attempts still running
    /// ([`AuditLog::reserve`]).
    reserved: u64,
    /// Since when the trail cannot be written (the last write or reservation failed); `None`
    /// while it can.
    unwritable: Option<availability::Outage>,
    /// Since when calls were refused or lines lost, and how many: what the next line written
    /// reports; `None` when nothing was.
    outage: Option<availability::Outage>,
    /// The chain's Merkle tree (`tree`), one leaf per line; `None` when it could not be
    /// opened or brought to the lines (then no receipt names a leaf and nothing is signed).
    tree: Option<tree::TreeFile>,
    /// A line was written whose leaf could not be added: the tree follows the lines again
    /// (read back from the files) before the next leaf.
    tree_behind: bool,
    /// The chain's tree as this writer keeps it in memory (its size, right edge and root),
    /// grown by each line it writes: what checkpoints sign. Set by the start-up check of
    /// [`AuditLog::with_signing`] once the lines give the last signed root and the tree file
    /// agrees with them; `None` before, without a key, and while the alarm says the trail is
    /// in doubt (then nothing is signed). The tree file is for proofs and restarts only.
    frontier: Option<merkle::Frontier>,
    /// The full file was renamed for a rotation, but neither a new file could be created nor
    /// the old one put back: the file written to lives under this rotated name, and the next
    /// rotation only creates the new file.
    renamed: Option<PathBuf>,
    /// A rotation failed and the trail went on in the full file: warned once, until one
    /// succeeds.
    rotation_failed: bool,
}

impl Writer {
    /// A writer appending to `file`, `size` bytes long, whose last line has hash `last_hash`
    /// and number `seq`.
    fn at_end(file: File, size: u64, last_hash: String, seq: u64) -> Self {
        Self {
            file,
            size,
            last_hash,
            seq,
            unclean: false,
            reserved: 0,
            unwritable: None,
            outage: None,
            tree: None,
            tree_behind: false,
            frontier: None,
            renamed: None,
            rotation_failed: false,
        }
    }
}

/// The open trail.
pub struct AuditLog {
    path: PathBuf,
    config: AuditConfig,
    writer: Mutex<Writer>,
    /// False from a failed write or reservation until one succeeds: read without the lock by
    /// `/health` and `/metrics`.
    writable: AtomicBool,
    /// Tool calls refused because the trail could not be written, since start-up.
    refused_total: AtomicU64,
    /// Lines that could not be written, since start-up.
    lost_total: AtomicU64,
    /// `<file>.lock`, held locked while this log is open: no second writer on the chain.
    _lock: File,
    /// The chain's origin, as receipts and checkpoints name it: `<FILE_AGENT_AUDIT_ORIGIN,
    /// else the signing key's name, else "file-agent">/<chain>`.
    origin: String,
    /// The key and the witnesses, when checkpoints are signed.
    signing: Option<checkpoints::Signing>,
}

/// Where an attempt's line is in its chain's tree: what the tool result carries in `_meta`,
/// and what `audit prove --index` proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The chain's origin.
    pub origin: String,
    /// The line's leaf index (its `seq` minus one).
    pub leaf_index: u64,
    /// SHA-256(0x00 ‖ the line's bytes).
    pub leaf_hash: merkle::Hash,
    /// The line, without its newline: what a signed receipt carries ([`receipt`]).
    pub line: std::sync::Arc<str>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.path)
            .finish()
    }
}

impl AuditLog {
    /// Opens (or creates) the chain `name` in `folder`: `<folder>/<name>.jsonl`.
    pub fn open_chain(folder: &Path, name: &str, config: AuditConfig) -> Result<Self, AuditError> {
        if !crate::config::valid_chain_name(name) {
            return Err(AuditError {
                path: folder.display().to_string(),
                action: "opened",
                source: std::io::Error::other(format!(
                    "{name:?} cannot name a chain (letters, digits, '-', '_', '.')"
                )),
            });
        }
        Self::open(&folder.join(format!("{name}{CHAIN_SUFFIX}")), config)
    }

    /// Opens (or creates) the trail at `path`, continuing the chain of what is there. Fails
    /// when another open log (of this process or another) writes it.
    pub fn open(path: &Path, config: AuditConfig) -> Result<Self, AuditError> {
        let error = |action| failed(path, action);
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(error("created"))?;
        }
        let lock = lock_chain(path)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)
            .map_err(error("opened"))?;
        // A file just created must still be there after a crash of the machine.
        recovery::sync_folder(path).map_err(error("opened"))?;
        let (last_hash, seq, last_line) = chain_head(&file, path).map_err(error("read"))?;
        let cut = recovery::cut_unfinished(&file, path, seq + 1).map_err(error("recovered"))?;
        let size = file.metadata().map_err(error("read"))?.len();
        let mut writer = Writer::at_end(file, size, last_hash, seq);
        writer.tree = open_tree(path, seq, last_line.as_deref());
        let origin = format!(
            "{}/{}",
            config.origin.as_deref().unwrap_or(DEFAULT_ORIGIN),
            chain_name(path)
        );
        let log = Self {
            path: path.to_path_buf(),
            config,
            writer: Mutex::new(writer),
            writable: AtomicBool::new(true),
            refused_total: AtomicU64::new(0),
            lost_total: AtomicU64::new(0),
            _lock: lock,
            origin,
            signing: None,
        };
        if let Some((recovered, problem)) = cut {
            log.append_recovered(recovered, problem)?;
        }
        Ok(log)
    }

    /// Signs checkpoints with `signing` from now on, once the start-up check passes: the
    /// chain's lines, read whole, must chain, give the root of the last checkpoint this key
    /// signed (as its note says), and agree with the tree file. Then the tree of those lines
    /// is kept in memory and grows with each line; otherwise the alarm is raised and nothing
    /// is signed while this server runs. Lines that no checkpoint covers yet are named (the
    /// first checkpoint signs them). Fails when the tree cannot stand behind a checkpoint (its
    /// lines could not be read back into it).
    pub fn with_signing(mut self, signing: checkpoints::Signing) -> Result<Self, AuditError> {
        {
            let mut writer = self.lock_writer();
            let Some(tree) = writer.tree.as_ref() else {
                return Err(failed(&self.path, "signed")(std::io::Error::other(
                    "the chain has no tree to sign (see the error above: its first lines were deleted before it had one); give this server a chain of its own to start afresh (SANDBOX_INSTANCE, or POD_NAME under Kubernetes)",
                )));
            };
            let last = signing.last_signed();
            match start_up_check(&self.path, tree, writer.seq, last.as_ref()) {
                Ok(frontier) => {
                    if last.is_none() && frontier.size() > 0 {
                        signing.name_first_signing(format!(
                            "lines 1..{} of {} are covered by no checkpoint this key signed (none kept beside the chain verifies with it): the next checkpoint signs them for the first time. If this chain was signed before, its checkpoints were deleted: check it against the copies shipped elsewhere (audit verify --key --checkpoints)",
                            frontier.size(),
                            signing.origin()
                        ));
                    }
                    writer.frontier = Some(frontier);
                }
                Err(alarm) => signing.raise(format!(
                    "{alarm}; nothing is signed until an operator acts (docs/OPERATING.md, \"The audit alarm\")"
                )),
            }
        }
        self.origin = signing.origin().to_string();
        self.signing = Some(signing);
        Ok(self)
    }

    /// The signing, when checkpoints are signed.
    pub fn signing(&self) -> Option<&checkpoints::Signing> {
        self.signing.as_ref()
    }

    /// The chain's origin.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Signs a checkpoint of every line written so far, unless no line came since the last
    /// one; `None` without a key, and while the alarm holds the signer back. Its size and root
    /// are the writer's own, kept in memory from the lines it wrote (never read back from the
    /// tree file); the tree file is synced first, so that its proofs cover what is signed.
    pub fn sign_checkpoint(&self) -> Result<Option<checkpoints::Signed>, AuditError> {
        let Some(signing) = &self.signing else {
            return Ok(None);
        };
        let writer = self.lock_writer();
        let Some(frontier) = writer.frontier.as_ref() else {
            return Ok(None);
        };
        let Some(tree) = writer.tree.as_ref().filter(|_| !writer.tree_behind) else {
            return Ok(None);
        };
        let size = frontier.size();
        if size <= signing.signed_size() {
            return Ok(None);
        }
        tree.sync().map_err(failed(tree.path(), "synced"))?;
        Ok(signing.sign(size, frontier.root()))
    }

    /// The consistency proof between the chain's trees of `old` and `new` lines.
    pub fn consistency_proof(&self, old: u64, new: u64) -> std::io::Result<Vec<merkle::Hash>> {
        let writer = self.lock_writer();
        let tree = writer
            .tree
            .as_ref()
            .ok_or_else(|| std::io::Error::other("the chain has no tree"))?;
        tree.consistency_proof(old, new)
    }

    /// The `recovered` line: what start-up cut, and why its bytes were not kept if they
    /// were not.
    fn append_recovered(
        &self,
        recovered: recovery::Recovered,
        problem: Option<String>,
    ) -> Result<(), AuditError> {
        self.append(Record {
            time: crate::time::rfc3339_now(),
            author: "file-agent".into(),
            status: recovery::RECOVERED_STATUS.into(),
            recovered: Some(recovered),
            error: problem,
            ..Record::default()
        })
        .map(drop)
    }

    /// Whether the code itself goes into each line.
    pub fn includes_code(&self) -> bool {
        self.config.include_code
    }

    /// The file written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record` as the next link of the chain (and prints it when configured). After
    /// an outage, the line that says so goes first. The receipt names the line's leaf.
    pub fn append(&self, record: Record) -> Result<Receipt, AuditError> {
        let mut writer = self.lock_writer();
        self.append_locked(&mut writer, record)
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// [`Self::append`] with the writer held: an open outage is closed by its line first; a
    /// failure opens one (or adds to it).
    fn append_locked(&self, writer: &mut Writer, record: Record) -> Result<Receipt, AuditError> {
        let written = self
            .close_outage(writer)
            .and_then(|()| self.write_line(writer, record));
        if let Err(error) = &written {
            self.count_lost(writer, error);
        }
        written
    }

    /// Writes `record` as the next line, rotating first when it would pass the size limit, and
    /// adds its leaf to the tree.
    fn write_line(&self, writer: &mut Writer, mut record: Record) -> Result<Receipt, AuditError> {
        let error = |action| failed(&self.path, action);
        record.seq = writer.seq + 1;
        record.prev = writer.last_hash.clone();
        let line = serde_json::to_string(&record).map_err(|e| AuditError {
            path: self.path.display().to_string(),
            action: "written",
            source: std::io::Error::other(e),
        })?;
        if writer.unclean {
            let size = writer.size;
            cut_back(&writer.file, size).map_err(error("written"))?;
            writer.unclean = false;
        }
        if writer.size > 0 && writer.size + line.len() as u64 + 1 > self.config.max_bytes {
            self.rotate_full(writer)?;
        }
        self.write_synced(writer, &line)?;
        writer.size += line.len() as u64 + 1;
        writer.last_hash = hash_line(&line);
        writer.seq = record.seq;
        self.note_success(writer);
        if self.config.stdout {
            println!("{line}");
        }
        let leaf_hash = merkle::leaf_hash(line.as_bytes());
        if let Some(frontier) = writer.frontier.as_mut() {
            frontier.push(leaf_hash);
        }
        self.grow_tree(writer, leaf_hash);
        Ok(Receipt {
            origin: self.origin.clone(),
            leaf_index: record.seq - 1,
            leaf_hash,
            line: line.into(),
        })
    }

    /// Adds the leaf of the line just written (the chain's line `writer.seq`). The line is
    /// synced and acknowledged already: a leaf that cannot be added now is added later from
    /// the line, before the next one (or at the next start).
    fn grow_tree(&self, writer: &mut Writer, leaf: merkle::Hash) {
        let Some(tree) = writer.tree.as_mut() else {
            return;
        };
        let grown = if writer.tree_behind {
            chain::files_of(&self.path)
                .and_then(|files| tree.follow(writer.seq, None, &files).map(drop))
        } else {
            tree.append(leaf)
        };
        match grown {
            Ok(()) => writer.tree_behind = false,
            Err(error) => {
                if !writer.tree_behind {
                    tracing::error!(tree = %tree.path().display(), %error, "audit trail: a line's leaf could not be added to the tree; it will be from the line, before the next one");
                }
                writer.tree_behind = true;
            }
        }
    }

    /// Writes `line` and its newline at the end of the file and syncs it; on failure, cuts
    /// back what of it was written.
    fn write_synced(&self, writer: &mut Writer, line: &str) -> Result<(), AuditError> {
        let start = writer.size;
        let written = writer
            .file
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| writer.file.sync_data());
        let Err(source) = written else {
            return Ok(());
        };
        // Not synced, so never acknowledged: not a line. Cut back what of it reached the
        // file (a full disk takes part of it), so that the next line starts clean instead
        // of fused to a fragment.
        if let Err(cut) = cut_back(&writer.file, start) {
            tracing::error!(file = %self.path.display(), error = %cut, "audit trail: a failed line could not be cut off; it will be before the next line is written");
            writer.unclean = true;
        }
        Err(failed(&self.path, "written")(source))
    }

    /// Rotates the full file; when that fails with the full file still in place (out of
    /// inodes or descriptors, a quota), the trail goes on in it past its limit, and the next
    /// line tries again: a rotation that cannot be done now costs no line and no call.
    fn rotate_full(&self, writer: &mut Writer) -> Result<(), AuditError> {
        match self.rotate(writer) {
            Ok(()) => {
                if std::mem::take(&mut writer.rotation_failed) {
                    tracing::warn!(file = %self.path.display(), "audit trail rotated again after a failed rotation");
                }
                Ok(())
            }
            Err(error) if writer.renamed.is_none() => {
                if !std::mem::replace(&mut writer.rotation_failed, true) {
                    tracing::error!(%error, "audit trail: the full file could not be rotated; lines go on in it, past FILE_AGENT_AUDIT_MAX_MIB, and each next line tries again");
                }
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// Renames the full file after its last line's `seq` and goes on in a new one. When the
    /// new one cannot be created, the full file is put back under its name, so that nothing
    /// changed; only if that fails too is the renamed file kept as the one written
    /// ([`Writer::renamed`]), and the next rotation creates the new one.
    fn rotate(&self, writer: &mut Writer) -> Result<(), AuditError> {
        let error = |action| failed(&self.path, action);
        let rotated = match writer.renamed.clone() {
            Some(rotated) => rotated,
            None => {
                let rotated = rotated_name(&self.path, writer.seq);
                // Room set aside past the end is not the old file's: give it back first.
                cut_back(&writer.file, writer.size).map_err(error("rotated"))?;
                std::fs::rename(&self.path, &rotated).map_err(error("rotated"))?;
                rotated
            }
        };
        let created = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&self.path);
        let file = match created {
            Ok(file) => file,
            Err(source) => {
                writer.renamed = std::fs::rename(&rotated, &self.path).err().map(|_| rotated);
                let _ = recovery::sync_folder(&self.path);
                return Err(error("opened")(source));
            }
        };
        writer.file = file;
        writer.size = 0;
        writer.renamed = None;
        // Both names must outlive a crash of the machine: a rename lost would leave the
        // new file's lines after the old ones' in no file, and a new file lost would
        // restart the chain where the rotated file ends, with nothing to say so.
        recovery::sync_folder(&self.path).map_err(error("rotated"))?;
        tracing::info!(rotated = %rotated.display(), "audit trail rotated");
        Ok(())
    }
}

/// The file name of a chain's live file: `<name>.jsonl`.
pub const CHAIN_SUFFIX: &str = ".jsonl";

/// `path` with `suffix` added to its file name (`audit.jsonl` → `audit.jsonl<suffix>`): the
/// files that live beside a chain file, its lock, its rotated files, a recovery's side files,
/// its tree and its checkpoints.
pub(crate) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// The lock file of the chain file `path`: `<path>.lock`.
fn lock_path(path: &Path) -> PathBuf {
    beside(path, ".lock")
}

/// The file name of `path`, as a line of the trail names a file of the audit folder.
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Takes `<path>.lock`, or says which other writer holds it.
fn lock_chain(path: &Path) -> Result<File, AuditError> {
    let lock_path = lock_path(path);
    let error = |source| AuditError {
        path: path.display().to_string(),
        action: "locked",
        source,
    };
    let lock = File::create(&lock_path).map_err(error)?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(error(std::io::Error::other(
            "another file-agent server writes this chain; give each server that shares the folder its own SANDBOX_INSTANCE (under Kubernetes, POD_NAME)",
        ))),
        Err(std::fs::TryLockError::Error(source)) => Err(error(source)),
    }
}

/// `audit.jsonl` → `audit.jsonl.000000001234`, numbered by its last line's `seq`, so that
/// the rotated files sort in chain order.
fn rotated_name(path: &Path, last_seq: u64) -> PathBuf {
    beside(path, &format!(".{last_seq:012}"))
}

/// Cuts `file` back to `size` and syncs it.
fn cut_back(file: &File, size: u64) -> std::io::Result<()> {
    file.set_len(size)?;
    file.sync_data()
}

/// The hex SHA-256 and `seq` of the chain's last line: the live file's last whole line; when
/// it holds none (a crash right after a rotation, or a first line cut as unfinished), the
/// newest rotated file's; the genesis for a new chain.
fn chain_head(file: &File, path: &Path) -> std::io::Result<(String, u64, Option<Vec<u8>>)> {
    let mut line = recovery::last_line(file)?;
    if line.is_none()
        && let Some(rotated) = chain::newest_rotated(path)?
    {
        line = recovery::last_line(&File::open(rotated)?)?;
    }
    Ok(match line {
        None => (GENESIS.to_string(), 0, None),
        Some(line) => {
            let seq = serde_json::from_slice::<Record>(&line).map_or(0, |r| r.seq);
            (sha256_hex(&line), seq, Some(line))
        }
    })
}

/// The origin's first part when neither `FILE_AGENT_AUDIT_ORIGIN` nor a signing key names it.
pub const DEFAULT_ORIGIN: &str = "file-agent";

/// The name of the chain whose live file is `path`: its file name without `.jsonl`.
pub fn chain_name(path: &Path) -> String {
    let name = file_name(path);
    name.strip_suffix(CHAIN_SUFFIX).unwrap_or(&name).to_string()
}

/// The tree of the chain at `path`, brought to its `lines` (the last one `last`); `None`, with
/// the error logged, when it cannot be.
fn open_tree(path: &Path, lines: u64, last: Option<&[u8]>) -> Option<tree::TreeFile> {
    let tree_path = tree::path_of(path);
    let opened = tree::TreeFile::open(&tree_path).and_then(|mut tree| {
        let files = chain::files_of(path)?;
        let added = tree.follow(lines, last, &files)?;
        if added > 0 {
            tracing::info!(tree = %tree_path.display(), added, "audit trail: the tree caught up with the lines");
        }
        Ok(tree)
    });
    match opened {
        Ok(tree) => Some(tree),
        Err(error) => {
            tracing::error!(tree = %tree_path.display(), %error, "audit trail: no tree for this chain: its lines get no receipts and no checkpoint is signed");
            None
        }
    }
}

/// The start-up check of a signed chain whose live file is `path`, whose writer counts `lines`
/// lines: its lines, read whole through the one verifier, must chain, reach and give the root
/// of `last` (the last checkpoint this key signed, as its note says), and the tree file must
/// give the same roots as the lines. The tree of the lines, for the writer to keep in memory;
/// or why the trail is in doubt.
fn start_up_check(
    path: &Path,
    tree: &tree::TreeFile,
    lines: u64,
    last: Option<&checkpoints::KeptCheckpoint>,
) -> Result<merkle::Frontier, String> {
    let files = chain::files_of(path).map_err(|e| format!("the chain cannot be read: {e}"))?;
    let signed = last.map(|kept| &kept.signed.checkpoint);
    let sizes = signed.iter().map(|c| c.size).chain([lines]).collect();
    let verified = verify_with_roots(&files, sizes, Some(tree), |_| {})
        .map_err(|broken| format!("the chain is broken: {broken}"))?;
    let held = verified.first_seq.saturating_sub(1) + verified.lines;
    if held != lines {
        return Err(format!(
            "the chain's files hold {held} lines where its last line is #{lines}"
        ));
    }
    let frontier = match verified.frontier.clone() {
        Some(frontier) => frontier,
        None if lines == 0 => merkle::Frontier::default(),
        None => {
            return Err(format!(
                "lines 1..{} are gone and the tree file does not hold them",
                verified.first_seq.saturating_sub(1)
            ));
        }
    };
    let tree_root = tree
        .root(lines)
        .map_err(|e| format!("the tree file cannot be read: {e}"))?;
    if tree_root != frontier.root() {
        return Err(format!(
            "the tree file {} does not agree with the chain's {lines} lines: it was changed, or damaged; once `audit verify --key` shows the lines match the signed checkpoints, delete it and the server builds it again from the lines",
            tree.path().display()
        ));
    }
    let (Some(signed), Some(kept)) = (signed, last) else {
        return Ok(frontier);
    };
    let when = format!("kept at {}, an unsigned time", kept.record.time);
    if signed.size > lines {
        return Err(format!(
            "the trail holds {lines} lines, but the checkpoint this server signed of {} lines ({when}) covers more: lines {}..{} are gone",
            signed.size,
            lines + 1,
            signed.size
        ));
    }
    let ours = if signed.size < verified.first_seq {
        tree.root(signed.size).ok()
    } else {
        verified.roots.get(&signed.size).copied()
    };
    if ours != Some(signed.root) {
        return Err(format!(
            "the trail's lines 1..{} no longer give the root of the checkpoint of {} lines this server signed ({when}): a line among them was changed, removed or inserted since it was signed",
            signed.size, signed.size
        ));
    }
    Ok(frontier)
}

/// A line's bytes as the chain reads them: the bytes before its `\n`, less a `\r` just before
/// it (a file whose line ends were converted to CRLF reads as the server wrote it). The one
/// rule for `audit verify`, the start-up check, the tree's catch-up and the chain's head.
pub(crate) fn without_line_break(bytes: &[u8]) -> &[u8] {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    bytes.strip_suffix(b"\r").unwrap_or(bytes)
}

/// The hex SHA-256 of a line (without its newline).
pub fn hash_line(line: &str) -> String {
    sha256_hex(line.as_bytes())
}

/// What [`verify`] found.
#[derive(Debug, PartialEq)]
pub struct Verified {
    /// Lines checked.
    pub lines: u64,
    /// `prev` of the first line when it is not the genesis: the files continue a chain whose
    /// earlier part was not given.
    pub continues_from: Option<String>,
    /// The hash of the last line (the value the next line will carry).
    pub head: String,
    /// The Merkle roots asked of [`verify_with_roots`], by size.
    pub roots: std::collections::BTreeMap<u64, merkle::Hash>,
    /// The `seq` of the first line read (1 unless retention deleted the first files).
    pub first_seq: u64,
    /// The tree of every line read (the lines before the first stood in for by the tree file),
    /// when [`verify_with_roots`] computed it: its size, right edge and root.
    pub frontier: Option<merkle::Frontier>,
    /// What crashes left, in order: lines that record an unfinished line cut at start-up,
    /// and unfinished lines not cut yet. Not tampering: none of them was ever acknowledged.
    pub crash_traces: Vec<CrashTrace>,
}

/// A crash's trace in a chain that verifies.
#[derive(Debug, Clone, PartialEq)]
pub enum CrashTrace {
    /// A `recovered` line: start-up cut an unfinished line and said so.
    Recovered {
        /// The file holding the `recovered` line.
        file: String,
        /// Its 1-based line number.
        line: u64,
        /// What was cut.
        cut: recovery::Recovered,
    },
    /// A file that ends in an unfinished line (no newline): a crash or a failed write while
    /// it was written, and no server has started on the chain since to cut it. It is not
    /// part of the chain.
    Unfinished {
        /// The file.
        file: String,
        /// The unfinished line's 1-based number.
        line: u64,
        /// Its length.
        bytes: u64,
    },
}

impl std::fmt::Display for CrashTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CrashTrace::Recovered { file, line, cut } => write!(
                f,
                "{file}, line {line}: recovered after a crash or a failed write: {cut}; it was never acknowledged"
            ),
            CrashTrace::Unfinished { file, line, bytes } => write!(
                f,
                "{file}, line {line}: unfinished ({bytes} bytes, no newline): a write cut short by a crash or a full disk, never acknowledged and not part of the chain; the server cuts it and records that when it next starts"
            ),
        }
    }
}

/// Where the chain breaks.
#[derive(Debug, Error, PartialEq)]
#[error("{file}, line {line}: {problem}")]
pub struct Broken {
    /// The file.
    pub file: String,
    /// The 1-based line number in that file.
    pub line: u64,
    /// What is wrong.
    pub problem: String,
}

/// Checks the chain across `files`, in order: every line parses, its `prev` is the hash of the
/// line before, and `seq` counts up by one. A file's unfinished last line (no newline) is no
/// line of the chain: it is reported among the [`CrashTrace`]s, as are `recovered` lines.
pub fn verify(files: &[PathBuf]) -> Result<Verified, Broken> {
    verify_each(files, |_| {})
}

/// [`verify`], handing every line that parses to `visit` on the way, those after a break too
/// (the verdict names the first break), so that one read both checks and uses the chain.
pub fn verify_each(files: &[PathBuf], mut visit: impl FnMut(Record)) -> Result<Verified, Broken> {
    let mut verifier = Verifier::default();
    for path in files {
        verifier.read_file(path, &mut visit);
    }
    verifier.verdict()
}

/// [`verify_each`], also computing the Merkle root of the chain's first `n` lines for each
/// `n` in `sizes` (up to its first break), found in [`Verified::roots`]. When the files start
/// after line 1 (retention deleted the first ones), the chain's tree file `tree` stands in for
/// the lines that are gone; without it no root is computed.
pub fn verify_with_roots(
    files: &[PathBuf],
    sizes: std::collections::BTreeSet<u64>,
    tree: Option<&tree::TreeFile>,
    mut visit: impl FnMut(Record),
) -> Result<Verified, Broken> {
    let mut verifier = Verifier {
        roots: Some(Roots {
            sizes,
            frontier: None,
            found: Default::default(),
            unavailable: false,
        }),
        ..Verifier::default()
    };
    for path in files {
        verifier.read_file_with(path, &mut visit, tree);
    }
    verifier.verdict()
}

/// The roots [`verify_with_roots`] computes as it reads.
#[derive(Debug, Default)]
struct Roots {
    /// The sizes asked for.
    sizes: std::collections::BTreeSet<u64>,
    /// The tree of the lines so far.
    frontier: Option<merkle::Frontier>,
    /// The roots found.
    found: std::collections::BTreeMap<u64, merkle::Hash>,
    /// The lines before the first one read are gone and no tree stands in for them.
    unavailable: bool,
}

/// What reading one line of a chain file gave.
enum LineRead<'a> {
    /// The end of the file.
    End,
    /// A last line without its newline, of this many bytes.
    Unfinished(u64),
    /// An error reading, or a line that is not UTF-8.
    Unreadable(String),
    /// A line, without its line break.
    Line(&'a str),
}

/// Reads the next line of `reader` into `bytes`.
fn read_line<'a>(reader: &mut impl BufRead, bytes: &'a mut Vec<u8>) -> LineRead<'a> {
    bytes.clear();
    match reader.read_until(b'\n', bytes) {
        Ok(0) => return LineRead::End,
        Ok(_) => {}
        Err(e) => return LineRead::Unreadable(e.to_string()),
    }
    if bytes.last() != Some(&b'\n') {
        // At the end of the file, as nothing follows a read without its newline.
        return LineRead::Unfinished(bytes.len() as u64);
    }
    let length = without_line_break(bytes).len();
    bytes.truncate(length);
    match std::str::from_utf8(bytes) {
        Ok(line) => LineRead::Line(line),
        Err(e) => LineRead::Unreadable(e.to_string()),
    }
}

/// What [`verify_each`] knows so far, line after line.
#[derive(Debug, Default)]
struct Verifier {
    /// The hash and `seq` of the last line checked.
    previous: Option<(String, u64)>,
    continues_from: Option<String>,
    lines: u64,
    crash_traces: Vec<CrashTrace>,
    /// Once set, lines are still read and visited but no longer checked.
    first_break: Option<Broken>,
    /// The roots to compute, when asked.
    roots: Option<Roots>,
    /// The `seq` of the first line checked.
    first_seq: u64,
}

impl Verifier {
    /// Reads the lines of one file of the chain, up to its end or a line that cannot be read.
    fn read_file(&mut self, path: &Path, visit: &mut impl FnMut(Record)) {
        self.read_file_with(path, visit, None);
    }

    /// [`Self::read_file`], with the chain's tree standing in for lines before the first one.
    fn read_file_with(
        &mut self,
        path: &Path,
        visit: &mut impl FnMut(Record),
        tree: Option<&tree::TreeFile>,
    ) {
        let file_name = path.display().to_string();
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) => return self.break_at(&file_name, 0, format!("cannot be read: {e}")),
        };
        let mut reader = BufReader::new(file);
        let mut bytes = Vec::new();
        for number in 1.. {
            let line = match read_line(&mut reader, &mut bytes) {
                LineRead::End => break,
                LineRead::Unfinished(length) => {
                    self.crash_traces.push(CrashTrace::Unfinished {
                        file: file_name.clone(),
                        line: number,
                        bytes: length,
                    });
                    break;
                }
                LineRead::Unreadable(problem) => {
                    self.break_at(&file_name, number, format!("cannot be read: {problem}"));
                    break;
                }
                LineRead::Line(line) => line,
            };
            match serde_json::from_str::<Record>(line) {
                Ok(record) => {
                    if self.first_break.is_none() {
                        self.check(&record, line, &file_name, number);
                        if self.first_break.is_none() {
                            self.grow(&record, line, tree);
                        }
                    }
                    visit(record);
                }
                Err(e) => {
                    self.break_at(&file_name, number, format!("is not an audit record ({e})"));
                }
            }
        }
    }

    /// Adds a checked line to the roots being computed, when asked.
    fn grow(&mut self, record: &Record, line: &str, tree: Option<&tree::TreeFile>) {
        if self.first_seq == 0 {
            self.first_seq = record.seq;
        }
        let Some(roots) = self.roots.as_mut() else {
            return;
        };
        if roots.frontier.is_none() && !roots.unavailable {
            let before = record.seq.saturating_sub(1);
            roots.frontier = match (before, tree) {
                (0, _) => Some(merkle::Frontier::default()),
                (before, Some(tree)) if tree.size() >= before => {
                    merkle::Frontier::of_stored(before, tree).ok()
                }
                _ => None,
            };
            roots.unavailable = roots.frontier.is_none();
        }
        if let Some(frontier) = roots.frontier.as_mut() {
            frontier.push(merkle::leaf_hash(line.as_bytes()));
            if roots.sizes.contains(&frontier.size()) {
                roots.found.insert(frontier.size(), frontier.root());
            }
        }
    }

    /// Keeps the break at line `line` of `file` when it is the first.
    fn break_at(&mut self, file: &str, line: u64, problem: String) {
        self.first_break.get_or_insert(Broken {
            file: file.to_string(),
            line,
            problem,
        });
    }

    /// Checks line `number` of `file` (`record`, parsed from `line`) against the one before.
    fn check(&mut self, record: &Record, line: &str, file: &str, number: u64) {
        let problem = match &self.previous {
            None if record.prev != GENESIS => {
                self.continues_from = Some(record.prev.clone());
                None
            }
            None => None,
            Some((hash, _)) if &record.prev != hash => Some(
                "its prev is not the hash of the line before: that line, or this one, was changed, removed or inserted".to_string(),
            ),
            Some((_, seq)) if record.seq != seq + 1 => Some(format!(
                "its seq is {} where {} was due",
                record.seq,
                seq + 1
            )),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            return self.break_at(file, number, problem);
        }
        self.previous = Some((hash_line(line), record.seq));
        self.lines += 1;
        if let Some(cut) = &record.recovered {
            self.crash_traces.push(CrashTrace::Recovered {
                file: file.to_string(),
                line: number,
                cut: cut.clone(),
            });
        }
    }

    /// The verdict once every file is read: the first break, or the chain's head.
    fn verdict(self) -> Result<Verified, Broken> {
        match self.first_break {
            Some(broken) => Err(broken),
            None => Ok(Verified {
                lines: self.lines,
                continues_from: self.continues_from,
                head: self
                    .previous
                    .map_or_else(|| GENESIS.to_string(), |(hash, _)| hash),
                crash_traces: self.crash_traces,
                frontier: self.roots.as_ref().and_then(|roots| roots.frontier.clone()),
                roots: self.roots.map(|roots| roots.found).unwrap_or_default(),
                first_seq: self.first_seq,
            }),
        }
    }
}

/// One record in a few readable lines, for a terminal. Every value that a caller, a script
/// or a model could have chosen goes through [`printable`], so a line can neither carry
/// terminal escape sequences nor forge a line of its own.
pub fn describe(record: &Record) -> String {
    let mut text = headline(record);
    describe_container(&mut text, record);
    if let Some(tool) = &record.saved_tool {
        describe_saved_tool(&mut text, tool);
    }
    if let Some(pruned) = &record.pruned {
        describe_pruned(&mut text, pruned);
    }
    if let Some(cut) = &record.recovered {
        text.push_str(&format!("\n  recovered at start-up: {cut}"));
    }
    if let Some(outage) = &record.unavailable {
        text.push_str(&format!("\n  {}", printable(&outage.to_string())));
    }
    if !record.inputs.is_empty() {
        text.push_str(&format!("\n  in: {}", describe_files(&record.inputs)));
    }
    if !record.outputs.is_empty() {
        text.push_str(&format!("\n  out: {}", describe_files(&record.outputs)));
    }
    if let Some(error) = &record.error {
        text.push_str(&format!(
            "\n  error: {}",
            printable(&crate::text::excerpt(error, 300))
        ));
    }
    text
}

/// A record's first two lines: what ended how and when, then the call and who made it.
fn headline(record: &Record) -> String {
    let caller = &record.caller;
    let who = who(caller);
    format!(
        "#{} {} {} {} in {} ms{}\n  call {} request {}{}",
        record.seq,
        printable(&record.time),
        printable(&caller.tool),
        printable(&record.status),
        record.duration_ms,
        record
            .exit_code
            .map(|c| format!(", exit {c}"))
            .unwrap_or_default(),
        printable(&caller.call),
        printable(&caller.request.to_string()),
        if who.is_empty() {
            String::new()
        } else {
            format!(", {who}")
        },
    )
}

/// "client .., user .., chat ..", as far as the call says.
fn who(caller: &CallInfo) -> String {
    [
        caller
            .client
            .as_deref()
            .map(|c| format!("client {}", printable(c))),
        caller
            .user
            .as_deref()
            .map(|u| format!("user {}", printable(u))),
        caller
            .chat
            .as_deref()
            .map(|c| format!("chat {}", printable(c))),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ")
}

/// Which code a record ran, and where: its hash and author, its image, runtime and container,
/// and the container's kind.
fn describe_container(text: &mut String, record: &Record) {
    // A saved tool's creation or deletion ran no code in no container: such a line holds
    // neither, and shows neither.
    if !record.code_sha256.is_empty() {
        text.push_str(&format!(
            "\n  code sha256 {}{}",
            printable(&record.code_sha256),
            record
                .model
                .as_deref()
                .map(|m| format!(" written by {}", printable(m)))
                .unwrap_or_default(),
        ));
    }
    if !record.image.is_empty() {
        text.push_str(&format!(
            "\n  image {} on {}, container {}",
            printable(&record.image),
            printable(&record.runtime),
            printable(
                record
                    .container
                    .as_deref()
                    .map_or("none", |c| c.get(..12).unwrap_or(c))
            ),
        ));
    }
    if let Some(kind) = &record.container_kind {
        text.push_str(&format!(
            " ({kind}, created {})",
            record.container_created.as_deref().unwrap_or("?")
        ));
    }
}

/// The saved tool a record concerns, what was done to it and which version.
fn describe_saved_tool(text: &mut String, tool: &ToolMark) {
    text.push_str(&format!(
        "\n  saved tool {} {}, version {}…{}",
        printable(&tool.name),
        printable(&tool.action),
        printable(tool.version.get(..12).unwrap_or(&tool.version)),
        tool.owner
            .as_deref()
            .map(|owner| format!(", saved by {}", printable(owner)))
            .unwrap_or_default()
    ));
}

/// What a retention line deleted: stored files, audit files, and each audit file's last line.
fn describe_pruned(text: &mut String, pruned: &retention::Pruned) {
    if let Some(before) = &pruned.files_before {
        text.push_str(&format!(
            "\n  retention: {} stored file(s) written before {} deleted",
            pruned.stored_files,
            printable(before)
        ));
    }
    if let Some(before) = &pruned.audit_before {
        text.push_str(&format!(
            "\n  retention: audit files whose last line is before {} deleted: {}",
            printable(before),
            pruned.audit_files.len()
        ));
    }
    for dropped in &pruned.audit_files {
        text.push_str(&format!(
            "\n  audit file {} deleted whole (last line #{} of {}, sha256 {}…)",
            printable(&dropped.file),
            dropped.last_seq,
            printable(&dropped.last_time),
            printable(dropped.last_hash.get(..12).unwrap_or(&dropped.last_hash))
        ));
    }
}

/// Files in one line: name, size and the start of the hash of each.
fn describe_files(list: &[FileDigest]) -> String {
    list.iter()
        .map(|f| {
            format!(
                "{} ({} bytes, sha256 {}…)",
                printable(&f.name),
                f.bytes,
                printable(f.sha256.get(..12).unwrap_or(&f.sha256))
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `text` with every control character (C0, DEL, C1: terminal escapes, line breaks) and every
/// bidirectional formatting character (which can reorder what a reader sees) written as a
/// `\u{..}` escape.
pub(crate) fn printable(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            shown.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            shown.push(c);
        }
    }
    shown
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_bytes: u64) -> AuditConfig {
        AuditConfig {
            place: crate::config::AuditPlace::Off,
            chain: None,
            stdout: false,
            include_code: true,
            max_bytes,
            on_failure: crate::config::AuditOnFailure::Refuse,
            origin: None,
            signing_key_file: None,
            checkpoint_interval: std::time::Duration::from_secs(60),
            witnesses: Vec::new(),
        }
    }

    fn record(tool: &str) -> Record {
        Record {
            time: crate::time::rfc3339_now(),
            caller: CallInfo {
                tool: tool.into(),
                ..CallInfo::default()
            },
            status: "ok".into(),
            ..Record::default()
        }
    }

    #[test]
    fn a_chain_verifies_survives_reopening_and_catches_a_changed_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, config(1 << 30)).unwrap();
        log.append(record("a")).unwrap();
        log.append(record("b")).unwrap();
        drop(log);
        let log = AuditLog::open(&path, config(1 << 30)).unwrap();
        log.append(record("c")).unwrap();
        let verified = verify(std::slice::from_ref(&path)).unwrap();
        assert_eq!(verified.lines, 3);
        assert_eq!(verified.continues_from, None);

        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("\"tool\":\"b\"", "\"tool\":\"x\"", 1)).unwrap();
        let broken = verify(std::slice::from_ref(&path)).unwrap_err();
        assert_eq!(broken.line, 3, "{broken}");

        let lines: Vec<&str> = text.lines().collect();
        std::fs::write(&path, format!("{}\n{}\n", lines[0], lines[2])).unwrap();
        assert_eq!(verify(std::slice::from_ref(&path)).unwrap_err().line, 2);
    }

    #[test]
    fn a_chain_has_one_writer_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::open_chain(dir.path(), "replica-a", config(1 << 30)).unwrap();
        let second = AuditLog::open_chain(dir.path(), "replica-a", config(1 << 30)).unwrap_err();
        assert!(second.to_string().contains("SANDBOX_INSTANCE"), "{second}");
        let other = AuditLog::open_chain(dir.path(), "replica-b", config(1 << 30)).unwrap();
        log.append(record("a")).unwrap();
        other.append(record("b")).unwrap();
        drop(log);
        AuditLog::open_chain(dir.path(), "replica-a", config(1 << 30)).unwrap();
        let chains = chain::chains(dir.path()).unwrap();
        assert_eq!(chains.len(), 2);
        assert!(chain::verify_all(chains).iter().all(|c| c.result.is_ok()));
    }

    #[test]
    fn described_records_carry_no_control_or_bidi_characters() {
        let mut hostile = record("run\u{1b}[2J");
        hostile.code_sha256 = "ab".repeat(32);
        hostile.image = "file-agent-sandbox:x".into();
        hostile.caller.client = Some("\u{1b}]0;title\u{7}evil\r\n#2 forged".into());
        hostile.error = Some("\u{9b}31m\u{202e}txt.exe".into());
        let text = describe(&hostile);
        assert!(
            !text
                .chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{text:?}"
        );
        assert!(text.contains("evil\\u{d}\\u{a}#2 forged"), "{text}");
        assert_eq!(text.lines().count(), 5, "{text}");
    }

    #[test]
    fn a_saved_tool_event_shows_no_empty_code_or_container() {
        let mut event = record("create_tool");
        event.status = "created".into();
        event.saved_tool = Some(ToolMark::new("created", "double", &"c".repeat(64), None));
        let text = describe(&event);
        assert!(
            !text.contains("code sha256") && !text.contains("image"),
            "{text}"
        );
        assert!(text.contains("saved tool double created"), "{text}");
    }

    #[test]
    fn an_unfinished_line_is_cut_at_start_up_and_recorded_and_verify_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, config(1 << 30)).unwrap();
        log.append(record("a")).unwrap();
        // A line longer than any block read backwards, so that its hash is only right if it
        // is read whole.
        let mut long = record("b");
        long.code = Some("#".repeat(1_300_000));
        log.append(long).unwrap();
        drop(log);
        let whole = std::fs::read(&path).unwrap();
        let fragment = br#"{"time":"2026-01-01T00:00:00.000Z","seq":3,"tool":"c","code":"pri"#;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(fragment)
            .unwrap();
        let before = verify(std::slice::from_ref(&path)).unwrap();
        assert_eq!(before.lines, 2);
        assert!(
            matches!(&before.crash_traces[..], [CrashTrace::Unfinished { line: 3, bytes, .. }] if *bytes == fragment.len() as u64),
            "{:?}",
            before.crash_traces
        );

        let log = AuditLog::open(&path, config(1 << 30)).unwrap();
        log.append(record("d")).unwrap();
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(std::str::from_utf8(&whole).unwrap()));
        let side = dir.path().join("audit.jsonl.torn-000000000003");
        assert_eq!(std::fs::read(&side).unwrap(), fragment);
        let lines: Vec<Record> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4);
        let recovered = &lines[2];
        assert_eq!(recovered.status, recovery::RECOVERED_STATUS);
        assert_eq!(recovered.seq, 3);
        let cut = recovered.recovered.as_ref().unwrap();
        assert_eq!(cut.offset, whole.len() as u64);
        assert_eq!(cut.bytes, fragment.len() as u64);
        assert_eq!(cut.sha256, sha256_hex(fragment));
        assert_eq!(cut.kept.as_deref(), Some("audit.jsonl.torn-000000000003"));
        assert!(describe(recovered).contains("recovered at start-up: an unfinished line of"));

        let after = verify(std::slice::from_ref(&path)).unwrap();
        assert_eq!(after.lines, 4);
        assert!(
            matches!(
                &after.crash_traces[..],
                [CrashTrace::Recovered { line: 3, .. }]
            ),
            "{:?}",
            after.crash_traces
        );
        assert!(
            after.crash_traces[0]
                .to_string()
                .contains("kept in audit.jsonl.torn-000000000003")
        );
        // A whole line that does not parse is still a break.
        std::fs::write(&path, format!("{text}{{\"half\n")).unwrap();
        assert_eq!(verify(std::slice::from_ref(&path)).unwrap_err().line, 5);
    }

    #[test]
    fn a_live_file_left_without_lines_by_a_crash_after_rotation_continues_the_rotated_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, config(600)).unwrap();
        for tool in ["a", "b", "c"] {
            log.append(record(tool)).unwrap();
        }
        drop(log);
        // A crash right after the next rotation: the full file renamed, the new one holding
        // only an unfinished first line (or nothing, or not there yet: the same path).
        std::fs::rename(&path, rotated_name(&path, 3)).unwrap();
        std::fs::write(&path, b"{\"time\":").unwrap();

        let log = AuditLog::open(&path, config(600)).unwrap();
        log.append(record("d")).unwrap();
        let chains = chain::chains(dir.path()).unwrap();
        assert_eq!(chains.len(), 1, "{chains:?}");
        let verified = verify(&chains[0].files).unwrap();
        assert_eq!(verified.lines, 5, "a, b, c, the recovery, d");
        assert_eq!(verified.continues_from, None);
        assert_eq!(verified.crash_traces.len(), 1);
    }

    #[test]
    fn rotation_starts_a_new_file_that_continues_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, config(600)).unwrap();
        for tool in ["a", "b", "c", "d", "e", "f"] {
            log.append(record(tool)).unwrap();
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|p| p != &path && !p.to_string_lossy().ends_with(".tree"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "nothing was rotated");
        let alone = verify(std::slice::from_ref(&path)).unwrap();
        assert!(alone.continues_from.is_some());
        files.push(path);
        let all = verify(&files).unwrap();
        assert_eq!(all.lines, 6);
        assert_eq!(all.continues_from, None);
    }
}
