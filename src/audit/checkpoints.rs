//! Signed checkpoints of a chain (c2sp.org/tlog-checkpoint): with a signing key
//! (`FILE_AGENT_AUDIT_SIGNING_KEY_FILE`), the server signs its chain's tree size and root
//! every `FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL` when lines were added, and at shutdown. Each
//! checkpoint goes to the configured witnesses ([`super::witness`]), then is kept beside the
//! chain, `<chain file>.checkpoints` (one JSON record per line, with the witnesses'
//! cosignatures and answers), and written to the log as an event, so whatever ships the logs
//! takes a copy off the host. A checkpoint never covers a line that is not synced: lines are
//! synced as they are written, and the tree before it is signed.
//!
//! What a checkpoint proves: that the holder of the key saw these lines, in this order, at
//! that time. Whoever can rewrite the audit folder can rewrite lines and the tree, but cannot
//! sign a checkpoint of the rewritten trail without the key, and the checkpoints already out
//! (shipped logs, a witness, a reviewer's copy) then contradict it: `audit verify --key`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use super::merkle::Hash;
use super::note::{Checkpoint, SignerKey, VerifierKey};
use crate::untrusted::door;

/// The longest record of the checkpoints file read (a note with its cosignatures).
const MAX_RECORD_BYTES: u64 = 256 * 1024;

/// One checkpoint as kept beside the chain (and as `audit verify --checkpoints` reads copies:
/// any JSON line whose `checkpoint` field, or `fields.checkpoint` in a JSON log line, holds a
/// signed note).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredCheckpoint {
    /// When it was signed (UTC, RFC 3339).
    pub time: String,
    /// Its origin.
    pub origin: String,
    /// Lines covered.
    pub size: u64,
    /// Their root, base64.
    pub root: String,
    /// The signed note, with the witnesses' cosignature lines after the log's signature.
    pub checkpoint: String,
    /// What each witness answered.
    #[serde(default)]
    pub witnesses: Vec<WitnessAnswer>,
}

/// What one witness answered to one checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WitnessAnswer {
    /// Its key's name.
    pub name: String,
    /// `cosigned`, `inconsistent` (it holds a history this checkpoint does not extend: an
    /// alarm), `refused` (it does not take this log's checkpoints: a configuration error) or
    /// `unreachable`.
    pub outcome: String,
    /// What it said, when not cosigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The checkpoints file of the chain whose live file is `live`: `<live>.checkpoints`.
pub fn path_of(live: &Path) -> PathBuf {
    super::beside(live, ".checkpoints")
}

/// The checkpoints in `path` (a checkpoints file, or shipped JSON logs), in file order.
pub fn read(path: &Path) -> std::io::Result<Vec<StoredCheckpoint>> {
    // Opened through the door (`untrusted::door`): a regular file only, no link, never blocking.
    read_lines(door::open_read(path)?, |value| {
        from_value(value).into_iter().collect()
    })
}

/// The checkpoints `each` finds in the JSON values of `from`, one a line, in order, read
/// through the door's bounded line reader; lines that hold none are skipped, as is a record
/// longer than [`MAX_RECORD_BYTES`].
pub fn read_lines(
    from: impl Read,
    each: impl Fn(serde_json::Value) -> Vec<StoredCheckpoint>,
) -> std::io::Result<Vec<StoredCheckpoint>> {
    let mut lines = door::Lines::new(from, MAX_RECORD_BYTES as usize);
    let mut found = Vec::new();
    while let Some(line) = lines.next_line() {
        let line = match line? {
            door::Line::Whole(line) | door::Line::Unfinished(line) => line,
            door::Line::TooLong => continue,
        };
        if let Ok(value) = serde_json::from_slice(line) {
            found.extend(each(value));
        }
    }
    Ok(found)
}

/// A checkpoint from one JSON object: a stored record, a log event carrying one, or a signed
/// receipt (its `checkpoint`, the time unknown).
pub fn from_value(value: serde_json::Value) -> Option<StoredCheckpoint> {
    if let Ok(stored) = serde_json::from_value::<StoredCheckpoint>(value.clone()) {
        return Some(stored);
    }
    let note = value
        .get("checkpoint")
        .or_else(|| value.get("fields").and_then(|f| f.get("checkpoint")))?
        .as_str()?;
    let parsed = super::note::Note::parse(note).ok()?;
    let body = Checkpoint::parse(&parsed.text).ok()?;
    let time = match value.get("timestamp").and_then(|t| t.as_str()) {
        Some(time) => time.to_string(),
        None if value.get("leaf_index").is_some() => "unknown (a receipt)".to_string(),
        None => String::new(),
    };
    Some(StoredCheckpoint {
        time,
        origin: body.origin,
        size: body.size,
        root: BASE64.encode(body.root),
        checkpoint: note.to_string(),
        witnesses: Vec::new(),
    })
}

/// How far in the future a witness's cosignature may be dated before it is refused: clocks
/// differ a little, never by this much.
pub const MAX_COSIGNATURE_SKEW: std::time::Duration = std::time::Duration::from_secs(600);

/// A kept record as its note signs it: what the signer, the start-up check, `audit verify` and
/// `doctor` believe, never the JSON fields beside the note (`time`, `origin`, `size`, `root`,
/// `witnesses`), which anyone who can write the folder can edit.
#[derive(Debug, Clone, PartialEq)]
pub struct SignedRecord {
    /// The signed body: origin, size, root.
    pub checkpoint: Checkpoint,
    /// The witnesses (of those given) whose cosignature verifies, each with the time it
    /// signed (seconds since the epoch, as c2sp.org/tlog-cosignature signs it).
    pub cosigned: Vec<(String, u64)>,
    /// What is wrong beside a good signature, in words: the record's JSON disagrees with its
    /// note, or a cosignature is dated in the future (then it is not counted).
    pub problems: Vec<String>,
}

/// Checks `record`'s note with the log's `key` and the cosignatures of `witnesses`: its
/// signed body, or why the note is refused (not signed by `key`, a signature that does not
/// verify, a body that is no checkpoint).
pub fn verify_record(
    record: &StoredCheckpoint,
    key: &VerifierKey,
    witnesses: &[VerifierKey],
) -> Result<SignedRecord, String> {
    let note = super::note::Note::parse(&record.checkpoint).map_err(|e| e.to_string())?;
    match note.signed_by(key) {
        Ok(Some(_)) => {}
        Ok(None) => return Err(format!("it is not signed by {key}")),
        Err(error) => return Err(error.to_string()),
    }
    let (checkpoint, edited) = note_body(record, &note)?;
    let mut problems: Vec<String> = edited.into_iter().collect();
    let latest = std::time::SystemTime::now() + MAX_COSIGNATURE_SKEW;
    let mut cosigned = Vec::new();
    for witness in witnesses {
        match note.signed_by(witness) {
            Ok(Some(time))
                if std::time::UNIX_EPOCH + std::time::Duration::from_secs(time) > latest =>
            {
                problems.push(format!(
                    "the cosignature of {} is dated {}, in the future: not counted",
                    witness.name,
                    format_epoch(time)
                ));
            }
            Ok(Some(time)) => cosigned.push((witness.name.clone(), time)),
            Ok(None) => {}
            Err(error) => problems.push(format!("the cosignature of {}: {error}", witness.name)),
        }
    }
    Ok(SignedRecord {
        checkpoint,
        cosigned,
        problems,
    })
}

/// The checkpoint `note` (the note of `record`, its signatures not checked) carries, and where
/// `record`'s JSON fields disagree with it, in words: for readers without the key (the
/// review page), which still show the note's values, never the JSON's.
pub fn note_body(
    record: &StoredCheckpoint,
    note: &super::note::Note,
) -> Result<(Checkpoint, Option<String>), String> {
    let checkpoint = Checkpoint::parse(&note.text).map_err(|e| e.to_string())?;
    let mut edited = Vec::new();
    if record.origin != checkpoint.origin {
        edited.push(format!(
            "its JSON says origin {}, its signed note says {}",
            record.origin, checkpoint.origin
        ));
    }
    if record.size != checkpoint.size {
        edited.push(format!(
            "its JSON says {} lines, its signed note says {} lines",
            record.size, checkpoint.size
        ));
    }
    if record.root != BASE64.encode(checkpoint.root) {
        edited.push(format!(
            "its JSON says root {}, its signed note says {}",
            record.root,
            BASE64.encode(checkpoint.root)
        ));
    }
    let edited = (!edited.is_empty()).then(|| {
        format!(
            "the record was edited: {}; only the signed note is believed",
            edited.join("; ")
        )
    });
    Ok((checkpoint, edited))
}

/// Seconds since the epoch as RFC 3339 (UTC).
pub fn format_epoch(seconds: u64) -> String {
    crate::time::format_rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds))
}

/// The witnesses' cosignatures of a signed record in words: `W at T, V at U`.
pub fn describe_cosigned(cosigned: &[(String, u64)]) -> String {
    cosigned
        .iter()
        .map(|(name, time)| format!("{name} at {}", format_epoch(*time)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A checkpoint kept beside the chain, and what its note signs.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptCheckpoint {
    /// The record as kept (its `time` and `witnesses` are not signed).
    pub record: StoredCheckpoint,
    /// What its note signs.
    pub signed: SignedRecord,
}

/// A witness, as `FILE_AGENT_AUDIT_WITNESSES` names it.
#[derive(Debug, Clone)]
pub struct Witness {
    /// Its submission prefix: checkpoints go to `<url>/add-checkpoint`.
    pub url: String,
    /// Its cosignature key.
    pub key: VerifierKey,
}

/// What the server signs with, and what it knows of the checkpoints it signed.
#[derive(Debug)]
pub struct Signing {
    key: SignerKey,
    origin: String,
    witnesses: Vec<Witness>,
    store: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The size of the last checkpoint signed, as its note says.
    signed: u64,
    /// The size each witness last cosigned (by index), as far as this server knows.
    witnessed: Vec<u64>,
    /// Why the trail is in doubt: a witness refused a checkpoint as inconsistent, or the trail
    /// no longer matches a checkpoint signed before.
    alarm: Option<String>,
    /// The last checkpoint kept whose note this server's key signed, for this origin.
    last: Option<KeptCheckpoint>,
    /// Set when the chain held lines that no kept checkpoint covers while a key was
    /// configured: the first checkpoint signs them, and this says so.
    first_signing: Option<String>,
}

/// A checkpoint signed, before the witnesses have answered.
#[derive(Debug, Clone)]
pub struct Signed {
    /// Its body.
    pub checkpoint: Checkpoint,
    /// The signed note.
    pub note: String,
}

impl Signing {
    /// Signing with `key` as `origin`, the checkpoints kept in `store`, sent to `witnesses`.
    /// Of what was kept before, only notes this key signed for this origin are believed, and
    /// only what they sign: which size was signed last, its root, and what each witness
    /// cosigned. A record that does not verify, names another origin, or whose JSON
    /// disagrees with its note is logged and ignored (its note is what counts).
    pub fn new(key: SignerKey, origin: String, witnesses: Vec<Witness>, store: PathBuf) -> Self {
        let verifier = key.verifier();
        let witness_keys: Vec<VerifierKey> = witnesses.iter().map(|w| w.key.clone()).collect();
        let mut state = State {
            witnessed: vec![0; witnesses.len()],
            ..State::default()
        };
        let kept = match read(&store) {
            Ok(kept) => kept,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => {
                // Not a file the server can read (a FIFO, a link, a folder put in its place):
                // what was signed before is unknown, so nothing is signed until an operator
                // looks.
                let alarm = format!(
                    "the checkpoints kept beside the chain cannot be read ({error}): what was signed before is unknown"
                );
                tracing::error!(origin = %origin, "audit trail alarm: {alarm}");
                crate::metrics::metrics().audit_alarm();
                state.alarm = Some(alarm);
                Vec::new()
            }
        };
        for record in kept {
            let signed = match verify_record(&record, &verifier, &witness_keys) {
                Ok(signed) if signed.checkpoint.origin == origin => signed,
                Ok(signed) => {
                    tracing::warn!(store = %store.display(), "audit trail: a record kept beside this chain is a checkpoint of {}, not of {origin}: ignored", signed.checkpoint.origin);
                    continue;
                }
                Err(problem) => {
                    tracing::warn!(store = %store.display(), "audit trail: a record kept beside this chain (kept at {}) is not believed: {problem}", record.time);
                    continue;
                }
            };
            for problem in &signed.problems {
                tracing::warn!(store = %store.display(), "audit trail: the checkpoint of {} lines kept beside this chain: {problem}", signed.checkpoint.size);
            }
            for (name, _) in &signed.cosigned {
                if let Some(index) = witnesses.iter().position(|w| &w.key.name == name) {
                    state.witnessed[index] = state.witnessed[index].max(signed.checkpoint.size);
                }
            }
            if signed.checkpoint.size >= state.signed {
                state.signed = signed.checkpoint.size;
                state.last = Some(KeptCheckpoint { record, signed });
            }
        }
        Self {
            key,
            origin,
            witnesses,
            store,
            state: Mutex::new(state),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The origin of this server's chain.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The witnesses.
    pub fn witnesses(&self) -> &[Witness] {
        &self.witnesses
    }

    /// The log's verifier key.
    pub fn verifier(&self) -> VerifierKey {
        self.key.verifier()
    }

    /// The size of the last checkpoint signed.
    pub fn signed_size(&self) -> u64 {
        self.state().signed
    }

    /// The last checkpoint kept that this server's key signed, its `origin`, `size` and
    /// `root` as its note signs them (its `time` and `witnesses` are the record's, unsigned).
    pub fn last(&self) -> Option<StoredCheckpoint> {
        self.last_signed().map(|kept| {
            let body = &kept.signed.checkpoint;
            StoredCheckpoint {
                origin: body.origin.clone(),
                size: body.size,
                root: BASE64.encode(body.root),
                ..kept.record
            }
        })
    }

    /// The last checkpoint kept that this server's key signed, with what its note signs.
    pub fn last_signed(&self) -> Option<KeptCheckpoint> {
        self.state().last.clone()
    }

    /// Why the first checkpoint of this chain covers lines no checkpoint covered before, when
    /// it does (named at start-up).
    pub fn first_signing(&self) -> Option<String> {
        self.state().first_signing.clone()
    }

    /// Notes that the chain's lines were never covered by a checkpoint this key signed: logged
    /// as a warning, and shown by `/health` until a checkpoint covers them.
    pub fn name_first_signing(&self, note: String) {
        tracing::warn!(origin = %self.origin, "audit trail: {note}");
        self.state().first_signing = Some(note);
    }

    /// The size witness `index` last cosigned.
    pub fn witnessed(&self, index: usize) -> u64 {
        self.state().witnessed.get(index).copied().unwrap_or(0)
    }

    /// Why the trail is in doubt, if it is.
    pub fn alarm(&self) -> Option<String> {
        self.state().alarm.clone()
    }

    /// Raises the alarm: logged as an error, counted, shown by `/health` and `doctor`.
    pub fn raise(&self, alarm: String) {
        tracing::error!(origin = %self.origin, "audit trail alarm: {alarm}");
        crate::metrics::metrics().audit_alarm();
        self.state().alarm = Some(alarm);
    }

    /// Signs the checkpoint of `size` lines with root `root`, unless one of that size is
    /// signed already.
    pub fn sign(&self, size: u64, root: Hash) -> Option<Signed> {
        let mut state = self.state();
        if size == 0 || size <= state.signed {
            return None;
        }
        let checkpoint = Checkpoint {
            origin: self.origin.clone(),
            size,
            root,
        };
        let note = self.key.sign(&checkpoint.text());
        state.signed = size;
        Some(Signed { checkpoint, note })
    }

    /// Notes that witness `index` cosigned a checkpoint of `size`.
    pub fn witnessed_at(&self, index: usize, size: u64) {
        if let Some(witnessed) = self.state().witnessed.get_mut(index) {
            *witnessed = (*witnessed).max(size);
        }
    }

    /// Logs `stored` as an event (`audit checkpoint`, [`LOG_TARGET`], which the log filter
    /// never drops), first, so that whatever ships the logs holds every checkpoint whose
    /// receipts go out; then keeps it beside the chain (appended and synced). A checkpoint that
    /// cannot be kept raises the alarm, saying it is in the log but not beside the chain (a
    /// server restarted without it would not know it signed it); the error is returned too.
    pub fn keep(&self, stored: StoredCheckpoint) -> std::io::Result<()> {
        let cosigned: Vec<&str> = stored
            .witnesses
            .iter()
            .filter(|a| a.outcome == "cosigned")
            .map(|a| a.name.as_str())
            .collect();
        tracing::info!(
            target: LOG_TARGET,
            origin = %stored.origin,
            size = stored.size,
            root = %stored.root,
            cosigned_by = ?cosigned,
            checkpoint = %stored.checkpoint,
            "audit checkpoint"
        );
        crate::metrics::metrics().audit_checkpoint();
        let kept = self.append_to_store(&stored);
        if let Err(error) = &kept {
            self.raise(format!(
                "the checkpoint of {} lines (root {}) is signed and in the server's log (`audit checkpoint`), but cannot be kept beside the chain in {}: {error}. A server restarted without it does not know it signed it: put a regular file the server can append to back there (docs/OPERATING.md, \"The audit alarm\"), check the trail against the shipped logs (`audit verify --key --checkpoints`), then restart",
                stored.size,
                stored.root,
                self.store.display()
            ));
        }
        let witness_keys: Vec<VerifierKey> = self.witnesses.iter().map(|w| w.key.clone()).collect();
        let signed = verify_record(&stored, &self.key.verifier(), &witness_keys);
        let mut state = self.state();
        if let Ok(signed) = signed {
            state.first_signing = None;
            state.last = Some(KeptCheckpoint {
                record: stored,
                signed,
            });
        }
        kept
    }

    /// Appends `stored` to the checkpoints file and syncs it.
    fn append_to_store(&self, stored: &StoredCheckpoint) -> std::io::Result<()> {
        let line = serde_json::to_string(stored).map_err(std::io::Error::other)?;
        // Through the door: a regular file, no link, never truncated.
        let mut file = door::open_append(&self.store)?;
        file.write_all(format!("{line}\n").as_bytes())?;
        file.sync_data()
    }
}

/// The target of the `audit checkpoint` log event: let through whatever `FILE_AGENT_LOG` says,
/// since a shipped log is where a reviewer finds the checkpoints a rewritten folder lost.
pub const LOG_TARGET: &str = "file_agent::audit::checkpoint";

/// The longest signing key file read.
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// The signing of the chain whose live file is `live`, when `FILE_AGENT_AUDIT_SIGNING_KEY_FILE`
/// is set: the key read and checked, the origin, the witnesses. The key must live where the
/// trail does not: a key inside the data folder (`data_dir`) or the audit folder (`audit_dir`),
/// or one other users may read, refuses the start, since whoever can rewrite the trail could
/// then sign the rewrite.
pub fn load(
    config: &crate::config::AuditConfig,
    data_dir: &Path,
    audit_dir: Option<&Path>,
    live: &Path,
) -> Result<Option<Signing>, String> {
    let Some((key, witnesses)) = settings(config, data_dir, audit_dir)? else {
        return Ok(None);
    };
    let origin = format!(
        "{}/{}",
        config.origin.as_deref().unwrap_or(key.name()),
        super::chain_name(live)
    );
    tracing::info!(%origin, key = %key.verifier(), witnesses = witnesses.len(), "audit checkpoints are signed");
    Ok(Some(Signing::new(key, origin, witnesses, path_of(live))))
}

/// The signing key and the witnesses, when `FILE_AGENT_AUDIT_SIGNING_KEY_FILE` is set: read and
/// checked as [`load`] does, for `doctor` too.
pub fn settings(
    config: &crate::config::AuditConfig,
    data_dir: &Path,
    audit_dir: Option<&Path>,
) -> Result<Option<(SignerKey, Vec<Witness>)>, String> {
    let Some(path) = &config.signing_key_file else {
        return Ok(None);
    };
    Ok(Some((
        read_key(path, data_dir, audit_dir)?,
        witnesses(&config.witnesses)?,
    )))
}

/// Reads the signing key at `path`, refusing one inside the trail's folders or one other users
/// may read, write or run (any of the mode's last three bits). The owner's group may read it:
/// a Kubernetes Secret mounted with `defaultMode: 0400` in a pod with an `fsGroup` is
/// `0440`, owned by root and that group, since the kubelet adds group read for the fsGroup.
fn read_key(path: &Path, data_dir: &Path, audit_dir: Option<&Path>) -> Result<SignerKey, String> {
    let shown = path.display();
    let canonical = path.canonicalize().map_err(|error| {
        format!("FILE_AGENT_AUDIT_SIGNING_KEY_FILE {shown} cannot be read: {error}; make one with `file-agent audit keygen`")
    })?;
    for (folder, what) in [
        (Some(data_dir), "the data folder"),
        (audit_dir, "the audit folder"),
    ] {
        if let Some(folder) = folder.and_then(|f| f.canonicalize().ok())
            && canonical.starts_with(&folder)
        {
            return Err(format!(
                "FILE_AGENT_AUDIT_SIGNING_KEY_FILE {shown} is inside {what} ({}): whoever can rewrite the trail could read the key and sign the rewrite. Keep it where the trail is not: a Kubernetes Secret, a file mounted read-only from elsewhere",
                folder.display()
            ));
        }
    }
    let metadata = std::fs::metadata(&canonical)
        .map_err(|error| format!("FILE_AGENT_AUDIT_SIGNING_KEY_FILE {shown}: {error}"))?;
    let mode = std::os::unix::fs::PermissionsExt::mode(&metadata.permissions());
    if mode & 0o007 != 0 {
        return Err(format!(
            "FILE_AGENT_AUDIT_SIGNING_KEY_FILE {shown} is open to other users (mode {:o}): `chmod 600` it (its group may read it, no one else: in Kubernetes, defaultMode: 0400 on the Secret's volume, which the pod's fsGroup makes 0440)",
            mode & 0o777
        ));
    }
    if metadata.len() > MAX_KEY_FILE_BYTES {
        return Err(format!(
            "FILE_AGENT_AUDIT_SIGNING_KEY_FILE {shown} is larger than a key ({} bytes)",
            metadata.len()
        ));
    }
    let text = std::fs::read_to_string(&canonical)
        .map_err(|error| format!("FILE_AGENT_AUDIT_SIGNING_KEY_FILE {shown}: {error}"))?;
    SignerKey::parse(&text)
        .map_err(|error| format!("FILE_AGENT_AUDIT_SIGNING_KEY_FILE {shown}: {error}"))
}

/// `FILE_AGENT_AUDIT_WITNESSES`'s entries (`<url> <verifier key>`) as witnesses; the error
/// names the entry.
pub fn witnesses(entries: &[(String, String)]) -> Result<Vec<Witness>, String> {
    entries
        .iter()
        .map(|(url, key)| {
            let key = VerifierKey::parse(key).map_err(|error| {
                format!("FILE_AGENT_AUDIT_WITNESSES: the key of {url}: {error}")
            })?;
            if key.algorithm != super::note::COSIGNATURE_ALGORITHM {
                return Err(format!(
                    "FILE_AGENT_AUDIT_WITNESSES: the key of {url} is not a cosignature key (its algorithm byte must be 0x04, as c2sp.org/tlog-cosignature has it)"
                ));
            }
            Ok(Witness {
                url: url.trim_end_matches('/').to_string(),
                key,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_past_the_bound_is_skipped_and_the_next_one_read() {
        let dir = tempfile::tempdir().unwrap();
        let key = SignerKey::from_seed("log.example/audit", &[7; 32], 1).unwrap();
        let note = key.sign(
            &Checkpoint {
                origin: "o".into(),
                size: 1,
                root: [1; 32],
            }
            .text(),
        );
        let good = serde_json::json!({"checkpoint": note}).to_string();
        let huge =
            serde_json::json!({"checkpoint": "x".repeat(MAX_RECORD_BYTES as usize)}).to_string();
        let path = dir.path().join("copies.jsonl");
        std::fs::write(&path, format!("{huge}\n{good}\n")).unwrap();
        let read = read(&path).unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].checkpoint, note);
    }

    #[test]
    fn a_key_file_is_refused_when_others_may_read_it_or_it_is_larger_than_a_key() {
        use std::os::unix::fs::PermissionsExt;
        let (data, keys) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (private, _) = SignerKey::generate("log.example/audit").unwrap();
        let path = keys.path().join("audit.key");
        std::fs::write(&path, &private).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_key(&path, data.path(), None).is_ok());
        // What a Secret with defaultMode 0400 becomes under an fsGroup: group read is fine.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o440)).unwrap();
        assert!(read_key(&path, data.path(), None).is_ok());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o604)).unwrap();
        let error = read_key(&path, data.path(), None).unwrap_err();
        assert!(error.contains("open to other users"), "{error}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(
            &path,
            format!("{private}\n{}", " ".repeat(MAX_KEY_FILE_BYTES as usize)),
        )
        .unwrap();
        let error = read_key(&path, data.path(), None).unwrap_err();
        assert!(error.contains("larger than a key"), "{error}");
        let inside = data.path().join("audit.key");
        std::fs::write(&inside, &private).unwrap();
        std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o600)).unwrap();
        let error = read_key(&inside, data.path(), None).unwrap_err();
        assert!(error.contains("inside the data folder"), "{error}");
    }

    #[test]
    fn checkpoints_are_read_from_the_store_and_from_shipped_json_logs() {
        let dir = tempfile::tempdir().unwrap();
        let key = SignerKey::from_seed("log.example/audit", &[7; 32], 1).unwrap();
        let signing = Signing::new(
            SignerKey::from_seed("log.example/audit", &[7; 32], 1).unwrap(),
            "log.example/audit/chain-1".into(),
            Vec::new(),
            dir.path().join("c.jsonl.checkpoints"),
        );
        let signed = signing.sign(3, [1; 32]).unwrap();
        assert!(signing.sign(3, [1; 32]).is_none(), "that size is signed");
        let stored = StoredCheckpoint {
            time: "t".into(),
            origin: signed.checkpoint.origin.clone(),
            size: 3,
            root: BASE64.encode([1; 32]),
            checkpoint: signed.note.clone(),
            witnesses: Vec::new(),
        };
        signing.keep(stored.clone()).unwrap();
        assert_eq!(
            read(&dir.path().join("c.jsonl.checkpoints")).unwrap(),
            vec![stored.clone()]
        );
        // A JSON log line carrying the note, among other lines.
        let log = dir.path().join("log.jsonl");
        let event = serde_json::json!({"timestamp": "t", "level": "INFO",
            "fields": {"message": "audit checkpoint", "checkpoint": signed.note}});
        std::fs::write(&log, format!("not json\n{{\"level\":\"INFO\"}}\n{event}\n")).unwrap();
        let shipped = read(&log).unwrap();
        assert_eq!(shipped.len(), 1);
        assert_eq!((shipped[0].size, &shipped[0].checkpoint), (3, &signed.note));
        assert_eq!(key.verifier(), signing.verifier());
        // Reopened: the size signed is known.
        let again = Signing::new(
            key,
            "log.example/audit/chain-1".into(),
            Vec::new(),
            dir.path().join("c.jsonl.checkpoints"),
        );
        assert_eq!(again.signed_size(), 3);
    }

    #[test]
    fn a_checkpoint_that_cannot_be_kept_raises_the_alarm_and_is_still_the_last_signed() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("c.jsonl.checkpoints");
        std::fs::create_dir(&store).unwrap();
        let origin = "log.example/audit/chain-1".to_string();
        let key = SignerKey::from_seed("log.example/audit", &[7; 32], 1).unwrap();
        let signing = Signing::new(key, origin.clone(), Vec::new(), store);
        let signed = signing.sign(2, [1; 32]).unwrap();
        let stored = StoredCheckpoint {
            time: "t".into(),
            origin,
            size: 2,
            root: BASE64.encode([1; 32]),
            checkpoint: signed.note,
            witnesses: Vec::new(),
        };
        assert!(signing.keep(stored).is_err());
        let alarm = signing.alarm().unwrap();
        assert!(
            alarm.contains("the checkpoint of 2 lines")
                && alarm.contains("is signed and in the server's log")
                && alarm.contains("cannot be kept beside the chain"),
            "{alarm}"
        );
        assert_eq!(signing.last().unwrap().size, 2);
    }

    #[test]
    fn only_what_a_note_signs_is_believed_and_an_edited_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("c.jsonl.checkpoints");
        let key = || SignerKey::from_seed("log.example/audit", &[7; 32], 1).unwrap();
        let origin = "log.example/audit/chain-1".to_string();
        let signing = Signing::new(key(), origin.clone(), Vec::new(), store.clone());
        let signed = signing.sign(3, [1; 32]).unwrap();
        let honest = StoredCheckpoint {
            time: "t".into(),
            origin: origin.clone(),
            size: 3,
            root: BASE64.encode([1; 32]),
            checkpoint: signed.note.clone(),
            witnesses: Vec::new(),
        };
        let edited = StoredCheckpoint {
            size: u64::MAX,
            ..honest.clone()
        };
        let foreign = StoredCheckpoint {
            checkpoint: SignerKey::from_seed("log.example/audit", &[8; 32], 1)
                .unwrap()
                .sign(&signed.checkpoint.text()),
            size: 9,
            ..honest.clone()
        };
        let lines: String = [&honest, &edited, &foreign]
            .iter()
            .map(|r| format!("{}\n", serde_json::to_string(r).unwrap()))
            .collect();
        std::fs::write(&store, lines).unwrap();
        let again = Signing::new(key(), origin, Vec::new(), store);
        assert_eq!(again.signed_size(), 3, "the JSON size is not believed");
        assert_eq!(again.last().unwrap().size, 3);
        let named = verify_record(&edited, &key().verifier(), &[]).unwrap();
        assert!(
            named.problems[0].contains("its JSON says 18446744073709551615 lines"),
            "{:?}",
            named.problems
        );
        let refused = verify_record(&foreign, &key().verifier(), &[]).unwrap_err();
        assert!(refused.contains("is not signed by"), "{refused}");
    }
}
