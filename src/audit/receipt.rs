//! Receipts that prove themselves (`FILE_AGENT_AUDIT_RECEIPTS=signed`): an answer waits for
//! the signed checkpoint that covers its audit lines, and its receipt carries, per line, the
//! line itself, its leaf index and hash, the inclusion proof to the checkpoint's size and the
//! signed checkpoint (with the witnesses' cosignatures that came within the wait). A user
//! keeps it and checks it later, offline, against the log's verifier key alone
//! ([`verify`], `file-agent audit verify-receipt`), with nothing of the server's.
//!
//! Calls never sign. They ask the [`Batcher`] and wait; the checkpoint task
//! (`server::checkpoints`) runs at most one round per batching window (the checkpoint
//! interval, at most [`MAX_BATCH_WINDOW`]), so that the calls that end within one window
//! share one signature. An answer waits at most [`WAIT_BOUND`]: a signer that fails or
//! hangs costs a call that long at most, and its receipt then says it is unsigned, and why.
//!
//! What is handed out is checked first, as the user will check it: the proof is read from the
//! tree file and must lead from the line's leaf to the root in the signed note (never to a root
//! stored beside it); one that does not is an unsigned receipt naming the fault.
//!
//! The format, one JSON object per line (`_meta["io.file-agent/receipts"]` is a list of them):
//! `origin`, `leaf_index`, `leaf_hash` (base64 of SHA-256(0x00 ‖ line)), and with signed
//! receipts `line` (the audit line, without its newline) and either `tree_size`,
//! `inclusion_proof` (base64 hashes, RFC 9162 §2.1.3) and `checkpoint` (the signed note), or
//! `unsigned` (why not). A receipt file is the `_meta` object, that list, or one entry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

use super::checkpoints::StoredCheckpoint;
use super::merkle::{self, Hash};
use super::note::{Checkpoint, ED25519_ALGORITHM, Note, VerifierKey};
use super::tree::{self, TreeFile};
use super::{AuditLog, Receipt};
use crate::untrusted::door;

/// The longest batching window: with signed receipts, a checkpoint is signed at most this
/// long after the one before when calls wait, even when `FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL`
/// is longer.
pub const MAX_BATCH_WINDOW: Duration = Duration::from_secs(1);
/// The longest an answer waits for the checkpoint that covers its lines.
pub const WAIT_BOUND: Duration = Duration::from_secs(5);
/// How long a round for waiting calls waits for the witnesses: a cosignature that comes later
/// is in the next checkpoint, not in these receipts.
pub const WITNESS_WAIT: Duration = Duration::from_secs(2);
/// The `_meta` key of a result that carries the receipts of its audit lines.
pub const META_KEY: &str = "io.file-agent/receipts";
/// The largest receipt file `verify-receipt` reads.
pub const MAX_RECEIPT_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// One audit line's receipt, as a result's `_meta` carries it and a user saves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The chain's origin.
    pub origin: String,
    /// The line's leaf index (its `seq` minus one).
    pub leaf_index: u64,
    /// SHA-256(0x00 ‖ the line), base64.
    pub leaf_hash: String,
    /// The line itself, without its newline (signed receipts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    /// The size of the checkpoint that covers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_size: Option<u64>,
    /// The inclusion proof of the leaf in the tree of `tree_size` leaves, base64 hashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inclusion_proof: Option<Vec<String>>,
    /// The signed checkpoint note, with the cosignatures that came within the wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Why no checkpoint is in this receipt (signed receipts only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsigned: Option<String>,
    /// The same proof as a c2sp.org/tlog-proof@v1 text (the leaf index, the inclusion proof,
    /// a blank line, the signed checkpoint verbatim), whose leaf data is `line`: what software
    /// that speaks the standard checks (signed receipts only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tlog_proof: Option<String>,
}

impl Entry {
    /// The receipt of `receipt`'s line as it is written: where it is, nothing signed yet.
    pub fn of(receipt: &Receipt) -> Self {
        Self {
            origin: receipt.origin.clone(),
            leaf_index: receipt.leaf_index,
            leaf_hash: BASE64.encode(receipt.leaf_hash),
            line: None,
            tree_size: None,
            inclusion_proof: None,
            checkpoint: None,
            unsigned: None,
            tlog_proof: None,
        }
    }

    /// With the line, unsigned for `reason`.
    fn unsigned(receipt: &Receipt, reason: String) -> Self {
        Self {
            line: Some(receipt.line.to_string()),
            unsigned: Some(reason),
            ..Self::of(receipt)
        }
    }
}

/// What the checkpoint task last published: the rounds it finished, and the newest signed
/// checkpoint then.
#[derive(Debug, Clone, Default)]
struct Published {
    /// Rounds finished (a round's number is its place in the order they began).
    round: u64,
    /// The newest checkpoint kept after it.
    checkpoint: Option<StoredCheckpoint>,
    /// The task stopped: no round will come.
    closed: bool,
}

/// Where calls wait for the checkpoint that covers their lines, and the checkpoint task learns
/// that they do.
#[derive(Debug)]
pub struct Batcher {
    log: Arc<AuditLog>,
    /// The least time between two rounds for waiting calls.
    window: Duration,
    /// A call waits: the task runs a round (a permit is kept when it is busy, so a call that
    /// asks during a round gets the next).
    wanted: Notify,
    /// Rounds begun: one begun after a call asked signs every line written before.
    begun: AtomicU64,
    published: watch::Sender<Published>,
}

impl Batcher {
    /// Batches for `log` (which signs), a round at most every `interval`, capped at
    /// [`MAX_BATCH_WINDOW`].
    pub fn new(log: Arc<AuditLog>, interval: Duration) -> Self {
        Self {
            log,
            window: interval.min(MAX_BATCH_WINDOW),
            wanted: Notify::new(),
            begun: AtomicU64::new(0),
            published: watch::Sender::new(Published::default()),
        }
    }

    /// The batching window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The trail it signs.
    pub fn log(&self) -> &Arc<AuditLog> {
        &self.log
    }

    /// Resolves when a call waits for a checkpoint (for the checkpoint task).
    pub async fn wanted(&self) {
        self.wanted.notified().await;
    }

    /// Runs a round (`audit::witness::checkpoint_round`, the witnesses waited for at most
    /// `witness_timeout`) and tells the waiting calls (for the checkpoint task); whether it
    /// signed a checkpoint (it does not when no line came since the last).
    pub async fn round(&self, witness_timeout: Duration) -> bool {
        let number = self.begun.fetch_add(1, Ordering::SeqCst) + 1;
        let signed = super::witness::checkpoint_round(&self.log, witness_timeout).await;
        let fresh = signed.is_some();
        let newest = signed.or_else(|| self.log.signing().and_then(|s| s.last()));
        self.published.send_modify(|published| {
            published.round = published.round.max(number);
            if newest.as_ref().map(|c| c.size) > published.checkpoint.as_ref().map(|c| c.size) {
                published.checkpoint = newest;
            }
        });
        fresh
    }

    /// No round comes any more: the calls still waiting stop waiting (for the checkpoint task,
    /// at shutdown).
    pub fn close(&self) {
        self.published
            .send_modify(|published| published.closed = true);
    }

    /// The signed receipts of `receipts`, once a checkpoint covers them, or after
    /// [`WAIT_BOUND`] unsigned, saying why.
    pub async fn signed(&self, receipts: Vec<Receipt>) -> Vec<Entry> {
        self.signed_within(receipts, WAIT_BOUND).await
    }

    /// [`Self::signed`], waiting at most `bound`.
    pub async fn signed_within(&self, receipts: Vec<Receipt>, bound: Duration) -> Vec<Entry> {
        let ours: Vec<&Receipt> = receipts
            .iter()
            .filter(|r| r.origin == self.log.origin())
            .collect();
        let Some(needed) = ours.iter().map(|r| r.leaf_index + 1).max() else {
            return receipts.iter().map(Entry::of).collect();
        };
        let waited = self.covering(needed, bound).await;
        receipts
            .iter()
            .map(|receipt| match &waited {
                _ if receipt.origin != self.log.origin() => Entry::of(receipt),
                Ok(checkpoint) => self.entry(receipt, checkpoint),
                Err(reason) => Entry::unsigned(receipt, reason.clone()),
            })
            .collect()
    }

    /// The first checkpoint of at least `needed` lines, or why none came.
    async fn covering(&self, needed: u64, bound: Duration) -> Result<StoredCheckpoint, String> {
        let mut published = self.published.subscribe();
        // Every round begun after this one signs the lines written so far, ours among them.
        let asked = self.begun.load(Ordering::SeqCst);
        self.wanted.notify_one();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            {
                let now = published.borrow_and_update();
                if let Some(checkpoint) = now.checkpoint.as_ref().filter(|c| c.size >= needed) {
                    return Ok(checkpoint.clone());
                }
                if now.round > asked {
                    return Err(self.failed(needed));
                }
                if now.closed {
                    return Err(format!(
                        "the server was stopping: the checkpoint it signs at shutdown covers line {needed}; prove it then with `file-agent audit prove --index {}`",
                        needed - 1
                    ));
                }
            }
            match tokio::time::timeout_at(deadline, published.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    return Err(format!(
                        "no checkpoint covered line {needed} within {:.1} s (the signer is slow or stuck: see the server's log); a later checkpoint covers it: prove it with `file-agent audit prove --index {}`",
                        bound.as_secs_f64(),
                        needed - 1
                    ));
                }
            }
        }
    }

    /// Why a round begun after the call asked signed nothing that covers line `needed`.
    fn failed(&self, needed: u64) -> String {
        match self.log.signing().and_then(|s| s.alarm()) {
            Some(alarm) => {
                format!("no checkpoint is signed while the audit trail's alarm is raised: {alarm}")
            }
            None => format!(
                "the signer signed no checkpoint that covers line {needed} (see the server's log: the tree may not follow the lines)"
            ),
        }
    }

    /// `receipt` proved in `checkpoint`, or unsigned when the tree does not prove it.
    fn entry(&self, receipt: &Receipt, checkpoint: &StoredCheckpoint) -> Entry {
        match prove(self.log.path(), receipt, &checkpoint.checkpoint) {
            Ok((size, proof)) => Entry {
                line: Some(receipt.line.to_string()),
                tree_size: Some(size),
                inclusion_proof: Some(proof.iter().map(|h| BASE64.encode(h)).collect()),
                tlog_proof: Some(tlog_proof(
                    receipt.leaf_index,
                    &proof,
                    &checkpoint.checkpoint,
                )),
                checkpoint: Some(checkpoint.checkpoint.clone()),
                ..Entry::of(receipt)
            },
            Err(reason) => {
                tracing::error!(leaf = receipt.leaf_index, %reason, "audit trail: a receipt could not be proved in its checkpoint");
                Entry::unsigned(receipt, reason)
            }
        }
    }
}

/// The inclusion proof of `receipt`'s leaf in the checkpoint `note`, read from the tree file
/// beside the chain file `live` and checked against the note's signed root.
fn prove(
    live: &std::path::Path,
    receipt: &Receipt,
    note: &str,
) -> Result<(u64, Vec<Hash>), String> {
    let body = Note::parse(note)
        .and_then(|note| Checkpoint::parse(&note.text))
        .map_err(|error| format!("the checkpoint kept is unreadable: {error}"))?;
    let tree = TreeFile::open_existing(&tree::path_of(live))
        .map_err(|error| format!("the chain's tree file cannot be read: {error}"))?;
    let proof = tree
        .inclusion_proof(receipt.leaf_index, body.size)
        .map_err(|error| format!("no proof from the chain's tree file: {error}"))?;
    if !merkle::verify_inclusion(
        receipt.leaf_index,
        body.size,
        &receipt.leaf_hash,
        &proof,
        &body.root,
    ) {
        return Err(format!(
            "the chain's tree file does not prove line {} in the signed checkpoint of {} lines: the trail was changed since it was signed (run `audit verify --key`)",
            receipt.leaf_index + 1,
            body.size
        ));
    }
    Ok((body.size, proof))
}

/// The first line of a c2sp.org/tlog-proof@v1 text.
pub const TLOG_PROOF_HEADER: &str = "c2sp.org/tlog-proof@v1";

/// Leaf `index`'s inclusion `proof` in the signed checkpoint `note` as a c2sp.org/tlog-proof@v1
/// text: the header, `index N`, one base64 hash a line, a blank line, the note verbatim.
pub fn tlog_proof(index: u64, proof: &[Hash], note: &str) -> String {
    super::note::hashes_then_note(
        &format!("{TLOG_PROOF_HEADER}\nindex {index}\n"),
        proof,
        note,
    )
}

/// A c2sp.org/tlog-proof@v1 text read as a receipt of `line` (the leaf data: the proof
/// carries none): its index, inclusion proof and signed checkpoint, the origin and size as the
/// checkpoint's body says (checked by [`verify`] once its signature is).
pub fn from_tlog_proof(text: &str, line: &[u8]) -> Result<Entry, ReceiptError> {
    let (index, proof, note) = parse_tlog_proof(text)?;
    let body = Note::parse(note)
        .and_then(|n| Checkpoint::parse(&n.text))
        .map_err(|e| ReceiptError::Note(e.0))?;
    Ok(Entry {
        origin: body.origin,
        leaf_index: index,
        leaf_hash: BASE64.encode(merkle::leaf_hash(line)),
        line: Some(String::from_utf8_lossy(line).into_owned()),
        tree_size: Some(body.size),
        inclusion_proof: Some(proof),
        checkpoint: Some(note.to_string()),
        unsigned: None,
        tlog_proof: Some(text.to_string()),
    })
}

/// A c2sp.org/tlog-proof@v1 text's leaf index, inclusion proof (base64 hashes, each checked
/// to be one) and signed note, its signatures not checked. An `extra` line is refused:
/// file-agent writes none.
fn parse_tlog_proof(text: &str) -> Result<(u64, Vec<String>, &str), ReceiptError> {
    let format = |what: &str| ReceiptError::Format(format!("a tlog-proof: {what}"));
    let (head, note) = text
        .split_once("\n\n")
        .ok_or_else(|| format("no blank line before the checkpoint"))?;
    let mut lines = head.split('\n');
    if lines.next() != Some(TLOG_PROOF_HEADER) {
        return Err(format(&format!(
            "its first line is not {TLOG_PROOF_HEADER}"
        )));
    }
    let index = lines
        .next()
        .and_then(|l| l.strip_prefix("index "))
        .filter(|n| *n == "0" || (!n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit())))
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| {
            format("its second line is not `index N` (no extra line, no leading zero)")
        })?;
    let proof: Vec<String> = lines.map(str::to_string).collect();
    for (at, hash) in proof.iter().enumerate() {
        decode_hash(hash, &format!("tlog-proof hash {}", at + 1))?;
    }
    Ok((index, proof, note))
}

/// A receipt's `tlog_proof`, when it has one, must carry what its own fields do (the fields
/// are what [`verify`] proved): the same leaf index, proof and checkpoint.
fn check_tlog_proof(entry: &Entry) -> Result<(), ReceiptError> {
    let Some(text) = &entry.tlog_proof else {
        return Ok(());
    };
    let (index, proof, note) = parse_tlog_proof(text)?;
    if index != entry.leaf_index
        || Some(&proof) != entry.inclusion_proof.as_ref()
        || Some(note) != entry.checkpoint.as_deref()
    {
        return Err(ReceiptError::Format(
            "its tlog_proof does not carry the leaf index, proof and checkpoint its other fields do: it was changed".into(),
        ));
    }
    Ok(())
}

/// The receipts in a receipt file: one entry, a list of them, a result's `_meta` object, or a
/// result holding one.
pub fn entries(value: serde_json::Value) -> Result<Vec<Entry>, ReceiptError> {
    let list = match value {
        serde_json::Value::Object(mut object) => {
            if let Some(meta) = object.remove("_meta") {
                return entries(meta);
            }
            match object.remove(META_KEY) {
                Some(list) => list,
                None => serde_json::Value::Array(vec![serde_json::Value::Object(object)]),
            }
        }
        other => other,
    };
    let serde_json::Value::Array(items) = list else {
        return Err(ReceiptError::Format(format!(
            "a receipt file holds a JSON object: one receipt, the result's _meta, or its {META_KEY:?} list"
        )));
    };
    if items.is_empty() {
        return Err(ReceiptError::Format("the file holds no receipt".into()));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            serde_json::from_value(item)
                .map_err(|error| ReceiptError::Format(format!("receipt {}: {error}", index + 1)))
        })
        .collect()
}

/// The checkpoints in a copy a reviewer gives `audit verify --checkpoints`: a user's receipt
/// file in any form [`entries`] reads (a result, its `_meta`, the receipts list, one receipt;
/// pretty-printed or not), read whole when the file is one JSON value of at most
/// [`MAX_RECEIPT_FILE_BYTES`]; else one JSON value a line, each of those forms or a shipped
/// log's event or a checkpoints file's record ([`super::checkpoints::read_lines`]). A receipt
/// without a checkpoint (unsigned) gives none.
pub fn read_copy(path: &std::path::Path) -> std::io::Result<Vec<StoredCheckpoint>> {
    use std::io::Read;
    // Through the door: a regular file only, never blocking on a FIFO given by mistake.
    let mut file = door::open_read_as(path, "the --checkpoints file")?;
    let mut head = Vec::new();
    (&mut file)
        .take(MAX_RECEIPT_FILE_BYTES + 1)
        .read_to_end(&mut head)?;
    if head.len() as u64 <= MAX_RECEIPT_FILE_BYTES
        && let Ok(value) = serde_json::from_slice::<serde_json::Value>(&head)
    {
        return Ok(checkpoints_in(value));
    }
    super::checkpoints::read_lines(std::io::Cursor::new(head).chain(file), checkpoints_in)
}

/// The checkpoints one JSON value holds: receipts (a list of them, a result or its `_meta`
/// holding the list, one receipt), a stored record, or a log event carrying one.
fn checkpoints_in(value: serde_json::Value) -> Vec<StoredCheckpoint> {
    match value {
        serde_json::Value::Array(items) => items.into_iter().flat_map(checkpoints_in).collect(),
        serde_json::Value::Object(mut object) => {
            if let Some(inner) = object.remove("_meta").or_else(|| object.remove(META_KEY)) {
                return checkpoints_in(inner);
            }
            super::checkpoints::from_value(serde_json::Value::Object(object))
                .into_iter()
                .collect()
        }
        _ => Vec::new(),
    }
}

/// What a receipt proves: its line is line `leaf_index + 1` of `origin`, in the checkpoint of
/// `tree_size` lines signed by the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proved {
    /// The chain.
    pub origin: String,
    /// The line's leaf index.
    pub leaf_index: u64,
    /// The checkpoint's size.
    pub tree_size: u64,
    /// Whether the line itself was given and hashes to the leaf.
    pub line_checked: bool,
    /// The witnesses (of those given) whose cosignature the checkpoint carries.
    pub cosigned_by: Vec<String>,
}

/// Why a receipt does not prove its line. Each message says what failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    /// The file is not a receipt.
    #[error("not a receipt: {0}")]
    Format(String),
    /// The server gave no checkpoint.
    #[error(
        "the receipt is unsigned (the server said: {0}); it proves nothing by itself: once a checkpoint covers the line, `file-agent audit prove --index N` on the server's trail gives one"
    )]
    Unsigned(String),
    /// The key given cannot check a log's signature.
    #[error(
        "--key {0} is a witness's cosignature key, not the log's key (its algorithm byte is 0x04, the log's is 0x01)"
    )]
    NotLogKey(String),
    /// The note is malformed.
    #[error("the checkpoint is not a valid signed note: {0}")]
    Note(String),
    /// The note has no signature of the key.
    #[error(
        "the checkpoint is not signed by {key}: it carries signatures of {signers}; check that you hold this log's key"
    )]
    NotSigned {
        /// The key given.
        key: String,
        /// The names on the note's signature lines.
        signers: String,
    },
    /// The note carries a signature of the key's name and id that does not verify.
    #[error("the checkpoint's signature does not verify: {0}")]
    BadSignature(String),
    /// The signed origin is not the receipt's, or not a chain of the log.
    #[error("origin: {0}")]
    Origin(String),
    /// The receipt's size is not the signed one.
    #[error(
        "the receipt says the checkpoint covers {claimed} lines, the signed checkpoint says {signed}"
    )]
    Size {
        /// The receipt's `tree_size`.
        claimed: u64,
        /// The note's.
        signed: u64,
    },
    /// The proof does not lead from the leaf to the signed root.
    #[error(
        "the inclusion proof does not lead from leaf {leaf_index} (line {}) to the signed root of {tree_size} lines: the receipt's leaf hash or proof was changed, or the line is not in that checkpoint",
        leaf_index + 1
    )]
    Proof {
        /// The leaf.
        leaf_index: u64,
        /// The checkpoint's size.
        tree_size: u64,
    },
    /// The line's hash is not the leaf.
    #[error(
        "the line does not hash to the receipt's leaf (SHA-256(0x00 ‖ line) is {actual}, the leaf is {leaf}): this is not the line the server wrote"
    )]
    Line {
        /// The leaf hash of the line given.
        actual: String,
        /// The receipt's leaf hash.
        leaf: String,
    },
    /// A witness given did not cosign.
    #[error("the checkpoint carries no cosignature of witness {0}")]
    NotCosigned(String),
}

/// Checks `entry` offline against the log's `key`: the note's signature, its origin (the
/// receipt's, and a chain of `origin_prefix`, the key's name unless given), the proof of the
/// leaf to the signed root and, when the line is given (`line`, else the receipt's own), that
/// it hashes to the leaf; and that each of `witnesses` cosigned.
pub fn verify(
    entry: &Entry,
    key: &VerifierKey,
    origin_prefix: Option<&str>,
    line: Option<&[u8]>,
    witnesses: &[VerifierKey],
) -> Result<Proved, ReceiptError> {
    if let Some(reason) = &entry.unsigned {
        return Err(ReceiptError::Unsigned(reason.clone()));
    }
    let (note, body) = signed_note(entry, key)?;
    check_origin(
        &body.origin,
        &entry.origin,
        origin_prefix.unwrap_or(&key.name),
    )?;
    let leaf = check_proof(entry, &body)?;
    check_tlog_proof(entry)?;
    let line = line.or(entry.line.as_deref().map(str::as_bytes));
    if let Some(line) = line {
        let actual = merkle::leaf_hash(line);
        if actual != leaf {
            return Err(ReceiptError::Line {
                actual: BASE64.encode(actual),
                leaf: entry.leaf_hash.clone(),
            });
        }
    }
    let mut cosigned_by = Vec::new();
    for witness in witnesses {
        match note.signed_by(witness) {
            Ok(Some(_)) => cosigned_by.push(witness.name.clone()),
            Ok(None) => return Err(ReceiptError::NotCosigned(witness.encoded())),
            Err(error) => return Err(ReceiptError::BadSignature(error.0)),
        }
    }
    Ok(Proved {
        origin: body.origin,
        leaf_index: entry.leaf_index,
        tree_size: body.size,
        line_checked: line.is_some(),
        cosigned_by,
    })
}

fn missing(field: &str) -> ReceiptError {
    ReceiptError::Format(format!("it has no {field:?}"))
}

/// The receipt's checkpoint note, when `key` (a log's key) signed it, and its body.
fn signed_note(entry: &Entry, key: &VerifierKey) -> Result<(Note, Checkpoint), ReceiptError> {
    if key.algorithm != ED25519_ALGORITHM {
        return Err(ReceiptError::NotLogKey(key.encoded()));
    }
    let note = entry
        .checkpoint
        .as_deref()
        .ok_or_else(|| missing("checkpoint"))?;
    let note = Note::parse(note).map_err(|e| ReceiptError::Note(e.0))?;
    match note.signed_by(key) {
        Ok(Some(_)) => {}
        Ok(None) => {
            return Err(ReceiptError::NotSigned {
                key: key.encoded(),
                signers: note
                    .signatures
                    .iter()
                    .map(|s| format!("{}+{:08x}", s.name, s.id))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Err(error) => return Err(ReceiptError::BadSignature(error.0)),
    }
    let body = Checkpoint::parse(&note.text).map_err(|e| ReceiptError::Note(e.0))?;
    Ok((note, body))
}

/// The receipt's leaf, once its size is the signed one and its proof leads to the signed root.
fn check_proof(entry: &Entry, body: &Checkpoint) -> Result<Hash, ReceiptError> {
    let claimed = entry.tree_size.ok_or_else(|| missing("tree_size"))?;
    if claimed != body.size {
        return Err(ReceiptError::Size {
            claimed,
            signed: body.size,
        });
    }
    let leaf = decode_hash(&entry.leaf_hash, "leaf_hash")?;
    let proof = entry
        .inclusion_proof
        .as_ref()
        .ok_or_else(|| missing("inclusion_proof"))?
        .iter()
        .enumerate()
        .map(|(index, hash)| decode_hash(hash, &format!("inclusion_proof[{index}]")))
        .collect::<Result<Vec<_>, _>>()?;
    if !merkle::verify_inclusion(entry.leaf_index, body.size, &leaf, &proof, &body.root) {
        return Err(ReceiptError::Proof {
            leaf_index: entry.leaf_index,
            tree_size: body.size,
        });
    }
    Ok(leaf)
}

/// The signed origin must be the receipt's, and a chain of the log `prefix`.
fn check_origin(signed: &str, claimed: &str, prefix: &str) -> Result<(), ReceiptError> {
    if signed != claimed {
        return Err(ReceiptError::Origin(format!(
            "the receipt names {claimed:?}, the signed checkpoint is of {signed:?}"
        )));
    }
    let chain = signed
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('/'));
    if !chain.is_some_and(crate::config::valid_chain_name) {
        return Err(ReceiptError::Origin(format!(
            "the signed checkpoint is of {signed:?}, not of a chain of {prefix:?} (<{prefix}>/<chain>); give --origin when the server sets FILE_AGENT_AUDIT_ORIGIN"
        )));
    }
    Ok(())
}

fn decode_hash(text: &str, field: &str) -> Result<Hash, ReceiptError> {
    BASE64
        .decode(text)
        .ok()
        .and_then(|bytes| Hash::try_from(bytes).ok())
        .ok_or_else(|| ReceiptError::Format(format!("{field} is not the base64 of 32 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::note::SignerKey;

    /// A receipt of line 2 of a 3-line chain, signed by `key`.
    fn signed_entry(key: &SignerKey) -> Entry {
        let lines: Vec<String> = (1..=3).map(|n| format!("{{\"seq\":{n}}}")).collect();
        let leaves: Vec<Hash> = lines
            .iter()
            .map(|l| merkle::leaf_hash(l.as_bytes()))
            .collect();
        let reader = MemoryTree::of(&leaves);
        let root = merkle::root(3, &reader).unwrap();
        let proof = merkle::inclusion_proof(1, 3, &reader).unwrap();
        let origin = format!("{}/chain-a", key.name());
        let note = key.sign(
            &Checkpoint {
                origin: origin.clone(),
                size: 3,
                root,
            }
            .text(),
        );
        Entry {
            origin,
            leaf_index: 1,
            leaf_hash: BASE64.encode(leaves[1]),
            line: Some(lines[1].clone()),
            tree_size: Some(3),
            inclusion_proof: Some(proof.iter().map(|h| BASE64.encode(h)).collect()),
            tlog_proof: Some(tlog_proof(1, &proof, &note)),
            checkpoint: Some(note),
            unsigned: None,
        }
    }

    /// Stored hashes in memory.
    struct MemoryTree(Vec<Hash>);

    impl MemoryTree {
        fn of(leaves: &[Hash]) -> Self {
            let mut tree = Self(Vec::new());
            for (n, leaf) in leaves.iter().enumerate() {
                let hashes = merkle::hashes_to_store(n as u64, *leaf, &tree).unwrap();
                tree.0.extend(hashes);
            }
            tree
        }
    }

    impl merkle::HashReader for MemoryTree {
        fn read_hash(&self, index: u64) -> std::io::Result<Hash> {
            Ok(self.0[index as usize])
        }
    }

    fn key() -> SignerKey {
        SignerKey::from_seed("receipts.test/audit", &[5; 32], ED25519_ALGORITHM).unwrap()
    }

    #[test]
    fn a_signed_receipt_verifies_with_its_line_and_each_fault_is_named() {
        let key = key();
        let entry = signed_entry(&key);
        let proved = verify(&entry, &key.verifier(), None, None, &[]).unwrap();
        assert_eq!((proved.leaf_index, proved.tree_size), (1, 3));
        assert!(proved.line_checked);

        let rewritten = Entry {
            line: Some("{\"seq\":2,\"x\":1}".into()),
            ..entry.clone()
        };
        let error = verify(&rewritten, &key.verifier(), None, None, &[]).unwrap_err();
        assert!(matches!(error, ReceiptError::Line { .. }), "{error}");

        let other = SignerKey::from_seed("receipts.test/audit", &[6; 32], ED25519_ALGORITHM)
            .unwrap()
            .verifier();
        let error = verify(&entry, &other, None, None, &[]).unwrap_err();
        assert!(matches!(error, ReceiptError::NotSigned { .. }), "{error}");

        let moved = Entry {
            leaf_index: 0,
            ..entry.clone()
        };
        let error = verify(&moved, &key.verifier(), None, None, &[]).unwrap_err();
        assert!(matches!(error, ReceiptError::Proof { .. }), "{error}");

        let relabelled = Entry {
            origin: "receipts.test/audit/chain-b".into(),
            ..entry.clone()
        };
        let error = verify(&relabelled, &key.verifier(), None, None, &[]).unwrap_err();
        assert!(matches!(error, ReceiptError::Origin(_)), "{error}");
        let error = verify(&entry, &key.verifier(), Some("elsewhere"), None, &[]).unwrap_err();
        assert!(error.to_string().contains("--origin"), "{error}");

        let unsigned = Entry {
            unsigned: Some("the signer is stuck".into()),
            ..entry.clone()
        };
        let error = verify(&unsigned, &key.verifier(), None, None, &[]).unwrap_err();
        assert!(error.to_string().contains("the signer is stuck"), "{error}");
    }

    #[test]
    fn a_receipts_tlog_proof_verifies_as_a_receipt_of_its_line_and_must_agree_with_its_fields() {
        let key = key();
        let entry = signed_entry(&key);
        let text = entry.tlog_proof.clone().unwrap();
        assert!(
            text.starts_with("c2sp.org/tlog-proof@v1\nindex 1\n"),
            "{text}"
        );
        let line = entry.line.clone().unwrap();
        let standard = from_tlog_proof(&text, line.as_bytes()).unwrap();
        let proved = verify(&standard, &key.verifier(), None, None, &[]).unwrap();
        assert_eq!((proved.leaf_index, proved.tree_size), (1, 3));
        let error = verify(
            &from_tlog_proof(&text, b"{\"seq\":9}").unwrap(),
            &key.verifier(),
            None,
            None,
            &[],
        )
        .unwrap_err();
        assert!(matches!(error, ReceiptError::Proof { .. }), "{error}");
        let moved = Entry {
            tlog_proof: Some(text.replace("index 1\n", "index 0\n")),
            ..entry.clone()
        };
        let error = verify(&moved, &key.verifier(), None, None, &[]).unwrap_err();
        assert!(
            error.to_string().contains("its tlog_proof does not"),
            "{error}"
        );
        for bad in [
            "c2sp.org/tlog-proof@v1\nindex 01\n\nx",
            "index 1\n\nx",
            "no blank",
        ] {
            assert!(from_tlog_proof(bad, b"x").is_err(), "{bad}");
        }
    }

    #[test]
    fn receipt_files_give_their_checkpoints_in_every_form_a_user_saves() {
        let dir = tempfile::tempdir().unwrap();
        let key = key();
        let note = |size| {
            key.sign(
                &Checkpoint {
                    origin: "receipts.test/audit/c".into(),
                    size,
                    root: [size as u8; 32],
                }
                .text(),
            )
        };
        let entry = |size| {
            serde_json::json!({"origin": "receipts.test/audit/c", "leaf_index": 0,
            "leaf_hash": "x", "tree_size": size, "checkpoint": note(size)})
        };
        let unsigned = serde_json::json!({"origin": "o", "leaf_index": 0, "leaf_hash": "x",
            "unsigned": "the signer is stuck"});
        let list = serde_json::json!([entry(2), unsigned, entry(3)]);
        let forms = [
            (serde_json::json!({META_KEY: list.clone()}), 2),
            (
                serde_json::json!({"content": [], "_meta": {META_KEY: list.clone()}}),
                2,
            ),
            (list, 2),
            (entry(4), 1),
        ];
        for (form, count) in forms {
            let path = dir.path().join("receipt.json");
            std::fs::write(&path, serde_json::to_string_pretty(&form).unwrap()).unwrap();
            let read = read_copy(&path).unwrap();
            assert_eq!(read.len(), count, "{form}");
            assert_eq!(read[0].time, "unknown (a receipt)");
            let one_line = dir.path().join("receipt.jsonl");
            std::fs::write(&one_line, format!("{form}\n{form}\n")).unwrap();
            assert_eq!(read_copy(&one_line).unwrap().len(), 2 * count);
        }
    }

    #[test]
    fn a_receipt_file_is_an_entry_a_list_or_a_results_meta() {
        let entry = signed_entry(&key());
        let value = serde_json::to_value(&entry).unwrap();
        let list = serde_json::json!([value.clone(), value.clone()]);
        let meta = serde_json::json!({ META_KEY: list.clone() });
        let result = serde_json::json!({"content": [], "_meta": meta.clone()});
        assert_eq!(entries(value).unwrap(), vec![entry.clone()]);
        for file in [list, meta, result] {
            assert_eq!(entries(file).unwrap().len(), 2);
        }
        let error = entries(serde_json::json!({"leaf_index": 1})).unwrap_err();
        assert!(error.to_string().contains("origin"), "{error}");
        assert!(entries(serde_json::json!("x")).is_err());
    }
}
