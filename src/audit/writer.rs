//! The writer of one chain: [`AuditLog`] opens the chain (taking its lock, cutting an
//! unfinished line, checking a signed chain against its last checkpoint at start-up), keeps
//! the chain's head and its tree in memory, appends each line whole and synced, and rotates
//! the file when it is full. It does not read a trail back for a reviewer (`verify.rs`
//! does) nor say where a chain's files are named (`store.rs`).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64};

use thiserror::Error;

use crate::config::AuditConfig;

use super::{
    CHAIN_SUFFIX, Record, availability, chain, chain_head, chain_name, checkpoints, cut_back,
    hash_line, lock_chain, merkle, recovery, rotated_name, tree, verify_with_roots,
};
use crate::untrusted::door;

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

pub(super) struct Writer {
    pub(super) file: File,
    /// The file's size: where the next line starts.
    pub(super) size: u64,
    last_hash: String,
    seq: u64,
    /// A failed append left bytes after `size` that could not be cut then: cut them before
    /// writing anything else, or write nothing.
    pub(super) unclean: bool,
    /// Bytes set aside past `size` for lines of attempts still running
    /// ([`AuditLog::reserve`]).
    pub(super) reserved: u64,
    /// Since when the trail cannot be written (the last write or reservation failed); `None`
    /// while it can.
    pub(super) unwritable: Option<availability::Outage>,
    /// Since when calls were refused or lines lost, and how many: what the next line written
    /// reports; `None` when nothing was.
    pub(super) outage: Option<availability::Outage>,
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
    pub(super) path: PathBuf,
    pub(super) config: AuditConfig,
    writer: Mutex<Writer>,
    /// False from a failed write or reservation until one succeeds: read without the lock by
    /// `/health` and `/metrics`.
    pub(super) writable: AtomicBool,
    /// Tool calls refused because the trail could not be written, since start-up.
    pub(super) refused_total: AtomicU64,
    /// Lines that could not be written, since start-up.
    pub(super) lost_total: AtomicU64,
    /// `<file>.lock`, held locked while this log is open: no second writer on the chain.
    _lock: File,
    /// The chain's origin, as receipts and checkpoints name it: `<FILE_AGENT_AUDIT_ORIGIN,
    /// else the signing key's name, else "file-agent">/<chain>`.
    origin: String,
    /// The key and the witnesses, when checkpoints are signed.
    signing: Option<checkpoints::Signing>,
    /// Lines start-up found after the last signed checkpoint, in words (shown until stopped).
    unsigned_at_start: Mutex<Option<String>>,
    /// The sessions' last states, told of each session line written ([`Self::follow_sessions`]).
    session_states: Option<std::sync::Arc<super::sessions::SessionStates>>,
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
    /// The line, without its newline: what a signed receipt carries ([`receipt`](super::receipt)).
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
        let file = door::open_append(path).map_err(error("opened"))?;
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
            unsigned_at_start: Mutex::new(None),
            session_states: None,
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
            if signing.alarm().is_none() {
                // Else raised already (what was signed before cannot be read): nothing is
                // signed.
                let start = start_up_check(&self.path, tree, writer.seq, &signing);
                self.start_signing(&mut writer, start, &signing);
            }
        }
        self.origin = signing.origin().to_string();
        self.signing = Some(signing);
        Ok(self)
    }

    /// What the start-up check `start` found, kept: the frontier to sign from, with the lines
    /// no checkpoint this key signed named; or the alarm.
    fn start_signing(
        &self,
        writer: &mut Writer,
        start: Result<merkle::Frontier, String>,
        signing: &checkpoints::Signing,
    ) {
        let signed = signing
            .last_signed()
            .map_or(0, |kept| kept.signed.checkpoint.size);
        match start {
            Ok(frontier) if frontier.size() > signed && signed == 0 => {
                signing.name_first_signing(format!(
                    "lines 1..{} of {} are covered by no checkpoint this key signed (none kept beside the chain verifies with it): the next checkpoint signs them for the first time. If this chain was signed before, its checkpoints were deleted: check it against the copies shipped elsewhere (audit verify --key --checkpoints)",
                    frontier.size(),
                    signing.origin()
                ));
                writer.frontier = Some(frontier);
            }
            Ok(frontier) => {
                if frontier.size() > signed {
                    self.name_unsigned_at_start(signed, frontier.size(), signing.origin());
                }
                writer.frontier = Some(frontier);
            }
            Err(alarm) => signing.raise(format!(
                "{alarm}; nothing is signed until an operator acts (docs/OPERATING.md, \"The audit alarm\")"
            )),
        }
    }

    /// Names lines `signed + 1..=lines`, found at start-up after the last checkpoint this key
    /// signed: a crash between a line and its checkpoint leaves such lines, and so does
    /// someone who appended well-chained lines while no server ran. They are signed by the
    /// next checkpoint all the same (refusing would stop the signing after every crash, and a
    /// chain can only be added to), but never silently: a warning now, `/health`
    /// (`unsigned_at_start`) until this server stops, and `doctor`.
    fn name_unsigned_at_start(&self, signed: u64, lines: u64, origin: &str) {
        let note = format!(
            "lines {}..{lines} of {origin} were found at start-up after the last checkpoint this key signed (of {signed} lines): this server did not sign them, and the next checkpoint will. A crash between a line and its checkpoint leaves such lines; so does someone who appended lines while no server ran: read them (audit show --tail {}) before they are signed",
            signed + 1,
            lines - signed
        );
        tracing::warn!(origin = %origin, "audit trail: {note}");
        if let Ok(mut unsigned) = self.unsigned_at_start.lock() {
            *unsigned = Some(note);
        }
    }

    /// What start-up found after the last signed checkpoint, when it found lines there
    /// ([`Self::name_unsigned_at_start`]).
    pub fn unsigned_at_start(&self) -> Option<String> {
        self.unsigned_at_start
            .lock()
            .map_or(None, |unsigned| unsigned.clone())
    }

    /// Keeps the sessions' last states as the trail holds them, the chains of `folder` (this
    /// one among them) read on a thread of its own from now on, and each session line this log
    /// writes noted as it is written.
    pub fn follow_sessions(mut self, folder: &Path) -> Self {
        let states = std::sync::Arc::new(super::sessions::SessionStates::new(folder, &self.path));
        let reader = states.clone();
        let started = std::thread::Builder::new()
            .name("session-states".into())
            .spawn(move || drop(reader.load()));
        if let Err(error) = started {
            tracing::warn!(%error, "no thread to read the sessions' last states: read now, before serving");
            states.load();
        }
        self.session_states = Some(states);
        self
    }

    /// The sessions' last states, when [`Self::follow_sessions`] keeps them.
    pub fn session_states(&self) -> Option<&std::sync::Arc<super::sessions::SessionStates>> {
        self.session_states.as_ref()
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

    pub(super) fn lock_writer(&self) -> std::sync::MutexGuard<'_, Writer> {
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
    pub(super) fn write_line(
        &self,
        writer: &mut Writer,
        mut record: Record,
    ) -> Result<Receipt, AuditError> {
        let error = |action| failed(&self.path, action);
        record.seq = writer.seq + 1;
        record.prev = writer.last_hash.clone();
        let line = serde_json::to_string(&record).map_err(|e| AuditError {
            path: self.path.display().to_string(),
            action: "written",
            source: std::io::Error::other(e),
        })?;
        if line.len() >= door::MAX_LINE_BYTES {
            return Err(failed(&self.path, "written")(std::io::Error::other(
                format!(
                    "the line is {} bytes, past the {} bytes every reader of the trail takes as a line",
                    line.len(),
                    door::MAX_LINE_BYTES
                ),
            )));
        }
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
        if let (Some(states), Some(mark)) = (&self.session_states, &record.session) {
            states.note(mark);
        }
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
    pub(super) fn rotate_full(&self, writer: &mut Writer) -> Result<(), AuditError> {
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
        let created = door::open_append(&self.path);
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

/// The origin's first part when neither `FILE_AGENT_AUDIT_ORIGIN` nor a signing key names it.
pub const DEFAULT_ORIGIN: &str = "file-agent";

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
    signing: &checkpoints::Signing,
) -> Result<merkle::Frontier, String> {
    let last = signing.last_signed();
    let last = last.as_ref();
    let files = chain::files_of(path).map_err(|e| format!("the chain cannot be read: {e}"))?;
    let signed = last.map(|kept| &kept.signed.checkpoint);
    let sizes = signed.iter().map(|c| c.size).chain([lines]).collect();
    let verified = verify_with_roots(&files, sizes, Some(tree), |_, _| {})
        .map_err(|broken| format!("the chain is broken: {broken}"))?;
    if verified.continues_from.is_some() {
        prefix_accounted(path, signing)?;
    }
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

/// The start-up check of a chain whose first lines are gone: as `audit verify --key` holds
/// it, a retention line in the folder, covered by a signed checkpoint of its own chain, must
/// record deleting them; else they were deleted by hand, and the trail is in doubt.
fn prefix_accounted(path: &Path, signing: &checkpoints::Signing) -> Result<(), String> {
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    let folder = folder.unwrap_or_else(|| Path::new("."));
    let chains =
        chain::chains(folder).map_err(|e| format!("the audit folder cannot be read: {e}"))?;
    let origin = signing.origin();
    let prefix = origin.rsplit_once('/').map_or(origin, |(prefix, _)| prefix);
    let origin_of = |chain: &chain::Chain| {
        let live = chain.files.last().cloned().unwrap_or_default();
        Some(format!("{prefix}/{}", chain_name(&live)))
    };
    let (checks, _) =
        super::proof::check_signed_chains(&chains, origin_of, &signing.verifier(), &[], &[]);
    let own = chain_name(path);
    let check = chains
        .iter()
        .zip(&checks)
        .find(|(chain, _)| {
            chain
                .files
                .last()
                .is_some_and(|live| chain_name(live) == own)
        })
        .map(|(_, check)| check);
    match check.map(|check| &check.chain) {
        Some(Err(broken)) => Err(format!("the chain is broken: {broken}")),
        Some(Ok(_)) => Ok(()),
        None => Err("the chain is not in its folder".into()),
    }
}
