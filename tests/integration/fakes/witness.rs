//! A C2SP transparency-log witness, for the audit trail's signed checkpoints: it serves
//! `POST <prefix>/add-checkpoint` of c2sp.org/tlog-witness (v1.0.0, plus the later change that
//! an old size equal to the checkpoint's with another root hash is 422, not 409), checks the
//! log's c2sp.org/signed-note Ed25519 signatures on the c2sp.org/tlog-checkpoint, verifies the
//! RFC 6962 consistency proof (RFC 9162 §2.1.4.2) against the root it cosigned last, and answers
//! with an Ed25519 c2sp.org/tlog-cosignature (`cosignature/v1`). Written from the specs alone,
//! not from the server's implementation, so that the two check each other.
//!
//! What a real witness would not do on request: hang ([`FakeWitness::set_down`]), forget a log
//! or be shown a forked history ([`FakeWitness::forget`], [`FakeWitness::set_latest`]); and it
//! records every status it answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use sha2::{Digest, Sha256};

/// Signature type of an Ed25519 signed-note key (the log's).
const ED25519_NOTE: u8 = 0x01;
/// Signature type of a timestamped Ed25519 cosignature (the witness's).
const ED25519_COSIGNATURE: u8 = 0x04;
/// At most this many consistency proof lines in a request (tlog-witness).
const MAX_PROOF_LINES: usize = 63;
/// At most this many signature lines on a note (as Go's `note.Open`).
const MAX_SIGNATURES: usize = 100;
/// How long a request hangs while the witness is down.
const HANG: Duration = Duration::from_secs(60);

/// The root hash of the empty tree, SHA-256 of the empty string (RFC 6962 §2.1).
fn empty_root() -> [u8; 32] {
    Sha256::digest(b"").into()
}

/// A signed-note key ID: the first 4 bytes of SHA-256(name || "\n" || type || public key).
fn key_id(name: &str, signature_type: u8, public: &[u8]) -> [u8; 4] {
    let mut hash = Sha256::new();
    hash.update(name.as_bytes());
    hash.update(b"\n");
    hash.update([signature_type]);
    hash.update(public);
    let digest = hash.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

/// Whether `name` may name a note key: non-empty, no whitespace, no `+`.
fn valid_key_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c == '+')
}

/// A log's Ed25519 note key the witness trusts.
struct LogKey {
    name: String,
    id: [u8; 4],
    public: [u8; 32],
}

impl LogKey {
    /// Parses a vkey `<name>+<8 lowercase hex key ID>+<base64(0x01 || public key)>`, checking
    /// the key ID.
    fn parse(vkey: &str) -> Result<Self, String> {
        let parts: Vec<&str> = vkey.splitn(3, '+').collect();
        let [name, id, key] = parts[..] else {
            return Err("not <name>+<key ID>+<key>".into());
        };
        if !valid_key_name(name) {
            return Err("bad key name".into());
        }
        if id.len() != 8 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err("the key ID is not 8 lowercase hex digits".into());
        }
        let key = BASE64
            .decode(key)
            .map_err(|e| format!("the key is not base64: {e}"))?;
        let public: [u8; 32] = match key.split_first() {
            Some((&ED25519_NOTE, public)) => public
                .try_into()
                .map_err(|_| "the Ed25519 key is not 32 bytes".to_string())?,
            _ => return Err("not an Ed25519 (0x01) key".into()),
        };
        let computed = key_id(name, ED25519_NOTE, &public);
        if hex::encode(computed) != id {
            return Err("the key ID does not match the key".into());
        }
        Ok(Self {
            name: name.to_string(),
            id: computed,
            public,
        })
    }

    /// Whether this key may sign checkpoints of `origin`: its name is the origin, or the origin
    /// is `<name>/<anything>` (the server names its chains `<key name>/<chain>`).
    fn covers(&self, origin: &str) -> bool {
        origin == self.name
            || origin
                .strip_prefix(self.name.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    }
}

/// A parsed `add-checkpoint` request body.
struct Submission<'a> {
    old: u64,
    proof: Vec<[u8; 32]>,
    note: &'a str,
}

/// A signature line of a note.
struct NoteSignature<'a> {
    name: &'a str,
    id: [u8; 4],
    signature: Vec<u8>,
}

/// A checkpoint's note text, parsed.
struct Checkpoint<'a> {
    origin: &'a str,
    size: u64,
    root: [u8; 32],
}

/// An ASCII decimal with no leading zeros ("0" for zero), as sizes are written.
fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty()
        || !text.bytes().all(|b| b.is_ascii_digit())
        || (text.len() > 1 && text.starts_with('0'))
    {
        return None;
    }
    text.parse().ok()
}

/// A base64 hash of exactly 32 bytes.
fn parse_hash(text: &str) -> Option<[u8; 32]> {
    BASE64.decode(text).ok()?.try_into().ok()
}

/// The line at the start of `rest` (without its newline), which moves past it.
fn next_line<'a>(rest: &mut &'a str) -> Result<&'a str, String> {
    let (line, after) = rest
        .split_once('\n')
        .ok_or_else(|| "a line does not end in a newline".to_string())?;
    *rest = after;
    Ok(line)
}

/// The request body: `old N`, up to 63 proof lines, an empty line, then the note.
fn parse_submission(body: &[u8]) -> Result<Submission<'_>, String> {
    let body = std::str::from_utf8(body).map_err(|_| "the body is not UTF-8".to_string())?;
    if body.chars().any(|c| c < ' ' && c != '\n') {
        return Err("the body has a control character".into());
    }
    let mut rest = body;
    let old = next_line(&mut rest)?
        .strip_prefix("old ")
        .and_then(parse_decimal)
        .ok_or_else(|| "the first line is not `old <size>`".to_string())?;
    let mut proof = Vec::new();
    loop {
        let line = next_line(&mut rest)?;
        if line.is_empty() {
            break;
        }
        if proof.len() == MAX_PROOF_LINES {
            return Err(format!("more than {MAX_PROOF_LINES} proof lines"));
        }
        proof.push(parse_hash(line).ok_or_else(|| format!("proof line {line:?} is not a hash"))?);
    }
    Ok(Submission {
        old,
        proof,
        note: rest,
    })
}

/// Splits a signed note into its text (with its final newline) and signature lines. A note
/// without any signature (no blank line, or nothing after it) parses, with none.
fn parse_note(note: &str) -> Result<(&str, Vec<NoteSignature<'_>>), String> {
    if !note.ends_with('\n') {
        return Err("the note does not end in a newline".into());
    }
    let (text, block) = match note.rfind("\n\n") {
        Some(at) => (&note[..=at], &note[at + 2..]),
        None => (note, ""),
    };
    let mut signatures = Vec::new();
    for line in block.split_terminator('\n') {
        let (name, encoded) = line
            .strip_prefix("— ")
            .and_then(|line| line.split_once(' '))
            .ok_or_else(|| format!("signature line {line:?} is not `— <name> <base64>`"))?;
        if !valid_key_name(name) {
            return Err(format!("signature line {line:?}: bad key name"));
        }
        let bytes = BASE64
            .decode(encoded)
            .map_err(|_| format!("signature line {line:?}: not base64"))?;
        if bytes.len() < 5 {
            return Err(format!("signature line {line:?}: too short"));
        }
        signatures.push(NoteSignature {
            name,
            id: [bytes[0], bytes[1], bytes[2], bytes[3]],
            signature: bytes[4..].to_vec(),
        });
        if signatures.len() > MAX_SIGNATURES {
            return Err(format!("more than {MAX_SIGNATURES} signatures"));
        }
    }
    Ok((text, signatures))
}

/// The checkpoint in a note text: origin, size, root hash, then optional extension lines, all
/// non-empty.
fn parse_checkpoint(text: &str) -> Result<Checkpoint<'_>, String> {
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    if lines.len() < 3 || lines.iter().any(|line| line.is_empty()) {
        return Err("the checkpoint is not three or more non-empty lines".into());
    }
    Ok(Checkpoint {
        origin: lines[0],
        size: parse_decimal(lines[1]).ok_or("the checkpoint's size is not a decimal")?,
        root: parse_hash(lines[2]).ok_or("the checkpoint's root is not a base64 hash")?,
    })
}

/// SHA-256(0x01 || left || right), an interior node of an RFC 6962 tree.
fn node_hash(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update([0x01]);
    hash.update(left);
    hash.update(right);
    hash.finalize().into()
}

/// Whether `proof` proves that the tree of `first` leaves with root `first_hash` is a prefix
/// of the tree of `second` leaves with root `second_hash`: RFC 9162 §2.1.4.2, with the cases
/// it leaves out (an empty first tree, equal sizes) handled first.
fn verify_consistency(
    first: u64,
    second: u64,
    first_hash: &[u8; 32],
    second_hash: &[u8; 32],
    proof: &[[u8; 32]],
) -> bool {
    if first > second {
        return false;
    }
    if first == 0 {
        return proof.is_empty();
    }
    if first == second {
        return proof.is_empty() && first_hash == second_hash;
    }
    // 1. An empty proof proves nothing.
    if proof.is_empty() {
        return false;
    }
    // 2. When the first tree is a complete subtree, its root is the proof's implicit first node.
    let mut path = Vec::with_capacity(proof.len() + 1);
    if first.is_power_of_two() {
        path.push(*first_hash);
    }
    path.extend_from_slice(proof);
    // 3, 4.
    let mut fn_ = first - 1;
    let mut sn = second - 1;
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    // 5.
    let mut fr = path[0];
    let mut sr = path[0];
    // 6.
    for c in &path[1..] {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    // 7.
    fr == *first_hash && sr == *second_hash && sn == 0
}

/// Why a submission is refused.
enum Refusal {
    /// 400: the body does not parse, or the old size is beyond the checkpoint's.
    BadRequest(String),
    /// 403: no valid signature from a key trusted for the origin, or a bad one from such a key.
    Forbidden(String),
    /// 409: the old size is not the size last cosigned for the origin (which is carried).
    Conflict(u64),
    /// 422: the checkpoint is not consistent with what was cosigned before.
    Inconsistent(String),
}

impl Refusal {
    fn status(&self) -> StatusCode {
        match self {
            Refusal::BadRequest(_) => StatusCode::BAD_REQUEST,
            Refusal::Forbidden(_) => StatusCode::FORBIDDEN,
            Refusal::Conflict(_) => StatusCode::CONFLICT,
            Refusal::Inconsistent(_) => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = self.status();
        match self {
            Refusal::Conflict(size) => (
                status,
                [("content-type", "text/x.tlog.size")],
                format!("{size}\n"),
            )
                .into_response(),
            Refusal::BadRequest(why) | Refusal::Forbidden(why) | Refusal::Inconsistent(why) => {
                (status, format!("{why}\n")).into_response()
            }
        }
    }
}

struct Inner {
    down: bool,
    /// Requests that came while it was down (each hangs).
    hung: usize,
    /// Per origin, the size and root hash of the checkpoint cosigned last.
    latest: HashMap<String, (u64, [u8; 32])>,
    answers: Vec<u16>,
}

/// The witness; clones share its state.
#[derive(Clone)]
pub struct FakeWitness {
    inner: Arc<Mutex<Inner>>,
    name: Arc<str>,
    key: Arc<Ed25519KeyPair>,
    key_id: [u8; 4],
    logs: Arc<Vec<LogKey>>,
    /// Its submission prefix: clients post to `{url}/add-checkpoint`.
    pub url: String,
}

impl FakeWitness {
    /// A witness named `name` (a note key name: no spaces, no `+`) cosigning with the Ed25519
    /// key of `seed`, which trusts the logs' note keys `trusted_log_keys` (vkeys
    /// `<name>+<hex key ID>+<base64(0x01 || key)>`), serving on a free loopback port.
    ///
    /// A key trusted for origin `O` is one named `O`, or named `P` where `O` is `P/<anything>`.
    pub async fn start(name: &str, seed: [u8; 32], trusted_log_keys: &[String]) -> FakeWitness {
        assert!(valid_key_name(name), "witness name {name:?}");
        let key = Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
        let key_id = key_id(name, ED25519_COSIGNATURE, key.public_key().as_ref());
        let mut witness = FakeWitness {
            inner: Arc::new(Mutex::new(Inner {
                down: false,
                hung: 0,
                latest: HashMap::new(),
                answers: Vec::new(),
            })),
            name: name.into(),
            key: Arc::new(key),
            key_id,
            logs: Arc::new(
                trusted_log_keys
                    .iter()
                    .map(|k| LogKey::parse(k).unwrap_or_else(|e| panic!("log vkey {k:?}: {e}")))
                    .collect(),
            ),
            url: String::new(),
        };
        let app = axum::Router::new()
            .route("/add-checkpoint", post(add_checkpoint))
            .with_state(witness.clone());
        witness.url = super::spawn(app).await;
        witness
    }

    /// Its cosignature verifier key: `<name>+<8 hex key ID>+<base64(0x04 || public key)>`.
    pub fn vkey(&self) -> String {
        let mut key = vec![ED25519_COSIGNATURE];
        key.extend_from_slice(self.key.public_key().as_ref());
        format!(
            "{}+{}+{}",
            self.name,
            hex::encode(self.key_id),
            BASE64.encode(key)
        )
    }

    /// While down, every request hangs for 60 s (as an unreachable witness looks to a client
    /// with a timeout), is then answered 503, and is not recorded in [`FakeWitness::answers`].
    pub fn set_down(&self, down: bool) {
        self.inner.lock().unwrap().down = down;
    }

    /// How many requests came while it was down (each hangs, then is answered 503).
    pub fn hung(&self) -> usize {
        self.inner.lock().unwrap().hung
    }

    /// The size and root hash of the checkpoint of `origin` it cosigned last.
    pub fn latest(&self, origin: &str) -> Option<(u64, [u8; 32])> {
        self.inner.lock().unwrap().latest.get(origin).copied()
    }

    /// The status of every request it answered, in order.
    pub fn answers(&self) -> Vec<u16> {
        self.inner.lock().unwrap().answers.clone()
    }

    /// How many checkpoints it cosigned (requests answered 200).
    pub fn cosigned(&self) -> usize {
        self.count(StatusCode::OK)
    }

    /// How many checkpoints it refused as inconsistent with what it cosigned before (422s).
    pub fn refused_inconsistent(&self) -> usize {
        self.count(StatusCode::UNPROCESSABLE_ENTITY)
    }

    fn count(&self, status: StatusCode) -> usize {
        let inner = self.inner.lock().unwrap();
        inner
            .answers
            .iter()
            .filter(|&&s| s == status.as_u16())
            .count()
    }

    /// Forgets `origin`, as if it never cosigned a checkpoint of it.
    pub fn forget(&self, origin: &str) {
        self.inner.lock().unwrap().latest.remove(origin);
    }

    /// Makes the checkpoint of `origin` it cosigned last one of `size` and `root` (say, of a
    /// forked history it saw earlier).
    pub fn set_latest(&self, origin: &str, size: u64, root: [u8; 32]) {
        self.inner
            .lock()
            .unwrap()
            .latest
            .insert(origin.to_string(), (size, root));
    }

    /// The cosignature line `— <name> <base64(key ID || time || signature)>\n` on a checkpoint's
    /// note `text` at `time`: Ed25519 over `cosignature/v1\ntime <time>\n<text>`.
    fn cosignature(&self, text: &str, time: u64) -> String {
        let message = format!("cosignature/v1\ntime {time}\n{text}");
        let signature = self.key.sign(message.as_bytes());
        let mut bytes = Vec::with_capacity(76);
        bytes.extend_from_slice(&self.key_id);
        bytes.extend_from_slice(&time.to_be_bytes());
        bytes.extend_from_slice(signature.as_ref());
        format!("— {} {}\n", self.name, BASE64.encode(bytes))
    }

    /// Judges a submission against (and, when it cosigns, updates) the state it holds locked,
    /// so that checking the old size and recording the new checkpoint are one step.
    fn judge(&self, inner: &mut Inner, body: &[u8]) -> Result<String, Refusal> {
        let submission = parse_submission(body).map_err(Refusal::BadRequest)?;
        let (text, signatures) = parse_note(submission.note).map_err(Refusal::BadRequest)?;
        let checkpoint = parse_checkpoint(text).map_err(Refusal::BadRequest)?;

        // Signatures: only keys trusted for this origin count; one of theirs that fails
        // rejects the note. An origin no key covers is refused the same way (403).
        let mut verified = false;
        for key in self.logs.iter().filter(|k| k.covers(checkpoint.origin)) {
            for signature in signatures
                .iter()
                .filter(|s| s.name == key.name && s.id == key.id)
            {
                UnparsedPublicKey::new(&ED25519, &key.public)
                    .verify(text.as_bytes(), &signature.signature)
                    .map_err(|_| {
                        Refusal::Forbidden(format!(
                            "invalid signature for key {}+{}",
                            key.name,
                            hex::encode(key.id)
                        ))
                    })?;
                verified = true;
            }
        }
        if !verified {
            return Err(Refusal::Forbidden(format!(
                "no signature from a key trusted for origin {:?}",
                checkpoint.origin
            )));
        }

        let old = submission.old;
        if old > checkpoint.size {
            return Err(Refusal::BadRequest(format!(
                "old size {old} is beyond the checkpoint's {}",
                checkpoint.size
            )));
        }
        let (latest_size, latest_root) = inner
            .latest
            .get(checkpoint.origin)
            .copied()
            .unwrap_or((0, empty_root()));
        if old != latest_size {
            return Err(Refusal::Conflict(latest_size));
        }
        if checkpoint.size == 0 && checkpoint.root != empty_root() {
            return Err(Refusal::Inconsistent(
                "an empty tree with another root than SHA-256(\"\")".into(),
            ));
        }
        if old == 0 && !submission.proof.is_empty() {
            return Err(Refusal::Inconsistent(
                "a consistency proof from the empty tree".into(),
            ));
        }
        if old == checkpoint.size && checkpoint.root != latest_root {
            return Err(Refusal::Inconsistent(format!(
                "another root hash for size {old}"
            )));
        }
        if old > 0
            && !verify_consistency(
                old,
                checkpoint.size,
                &latest_root,
                &checkpoint.root,
                &submission.proof,
            )
        {
            return Err(Refusal::Inconsistent(format!(
                "the consistency proof from {old} to {} does not verify",
                checkpoint.size
            )));
        }

        inner.latest.insert(
            checkpoint.origin.to_string(),
            (checkpoint.size, checkpoint.root),
        );
        Ok(self.cosignature(text, now()))
    }
}

/// Seconds since the epoch.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn add_checkpoint(State(witness): State<FakeWitness>, body: Bytes) -> Response {
    let down = {
        let mut inner = witness.inner.lock().unwrap();
        inner.hung += usize::from(inner.down);
        inner.down
    };
    if down {
        tokio::time::sleep(HANG).await;
        return (StatusCode::SERVICE_UNAVAILABLE, "down\n").into_response();
    }
    let mut inner = witness.inner.lock().unwrap();
    let answer = witness.judge(&mut inner, &body);
    let status = match &answer {
        Ok(_) => StatusCode::OK,
        Err(refusal) => refusal.status(),
    };
    inner.answers.push(status.as_u16());
    drop(inner);
    match answer {
        Ok(cosignature) => (status, cosignature).into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RFC 6962 test leaves (transparency-dev/merkle `testonly`).
    const LEAVES: [&str; 8] = [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ];

    /// Their tree's root hashes by size, 0 to 8 (published).
    const ROOTS: [&str; 9] = [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ];

    /// The published consistency proofs of that tree: (old, new, proof).
    const PROOFS: [(u64, u64, &[&str]); 3] = [
        (
            1,
            8,
            &[
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            2,
            5,
            &[
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ],
        ),
        (
            6,
            8,
            &[
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
    ];

    /// The log of the tests' checkpoints.
    const LOG: &str = "example.com/audit-log";
    /// Its key's seed: bytes 0 to 31.
    const LOG_SEED: [u8; 32] = {
        let mut seed = [0u8; 32];
        let mut i = 0;
        while i < 32 {
            seed[i] = i as u8;
            i += 1;
        }
        seed
    };
    const WITNESS: &str = "witness.example/w1";
    const WITNESS_SEED: [u8; 32] = [0x42; 32];

    fn hash(hex: &str) -> [u8; 32] {
        hex::decode(hex).unwrap().try_into().unwrap()
    }

    fn root(size: usize) -> [u8; 32] {
        hash(ROOTS[size])
    }

    fn proof(old: u64, new: u64) -> Vec<[u8; 32]> {
        let (_, _, proof) = PROOFS
            .iter()
            .find(|(o, n, _)| (*o, *n) == (old, new))
            .unwrap();
        proof.iter().map(|h| hash(h)).collect()
    }

    fn leaf_hash(leaf: &[u8]) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update([0x00]);
        hash.update(leaf);
        hash.finalize().into()
    }

    /// MTH(D[n]) of RFC 6962 §2.1.
    fn mth(leaves: &[Vec<u8>]) -> [u8; 32] {
        match leaves.len() {
            0 => empty_root(),
            1 => leaf_hash(&leaves[0]),
            n => {
                let k = split(n);
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    /// The largest power of two below `n` (n > 1).
    fn split(n: usize) -> usize {
        let mut k = 1;
        while k * 2 < n {
            k *= 2;
        }
        k
    }

    /// SUBPROOF(m, D[n], b) of RFC 6962 §2.1.2.
    fn subproof(m: usize, leaves: &[Vec<u8>], complete: bool) -> Vec<[u8; 32]> {
        let n = leaves.len();
        if m == n {
            return if complete { vec![] } else { vec![mth(leaves)] };
        }
        let k = split(n);
        if m <= k {
            let mut proof = subproof(m, &leaves[..k], complete);
            proof.push(mth(&leaves[k..]));
            proof
        } else {
            let mut proof = subproof(m - k, &leaves[k..], false);
            proof.push(mth(&leaves[..k]));
            proof
        }
    }

    fn leaves() -> Vec<Vec<u8>> {
        LEAVES.iter().map(|l| hex::decode(l).unwrap()).collect()
    }

    fn log_key() -> Ed25519KeyPair {
        Ed25519KeyPair::from_seed_unchecked(&LOG_SEED).unwrap()
    }

    /// The log's vkey, `<name>+<hex id>+<base64(0x01 || key)>`.
    fn log_vkey(name: &str) -> String {
        let public = log_key().public_key().as_ref().to_vec();
        let mut key = vec![ED25519_NOTE];
        key.extend_from_slice(&public);
        format!(
            "{name}+{}+{}",
            hex::encode(key_id(name, ED25519_NOTE, &public)),
            BASE64.encode(key)
        )
    }

    fn checkpoint_text(origin: &str, size: u64, root: &[u8; 32]) -> String {
        format!("{origin}\n{size}\n{}\n", BASE64.encode(root))
    }

    /// `text` signed by the tests' log key under the key name `name`.
    fn signed(text: &str, name: &str) -> String {
        let key = log_key();
        let mut bytes = key_id(name, ED25519_NOTE, key.public_key().as_ref()).to_vec();
        bytes.extend_from_slice(key.sign(text.as_bytes()).as_ref());
        format!("{text}\n— {name} {}\n", BASE64.encode(bytes))
    }

    fn body(old: u64, proof: &[[u8; 32]], note: &str) -> String {
        let mut body = format!("old {old}\n");
        for hash in proof {
            body.push_str(&BASE64.encode(hash));
            body.push('\n');
        }
        body.push('\n');
        body.push_str(note);
        body
    }

    /// The body submitting the tests' log's checkpoint of `origin` at `size` of the test tree.
    fn submission(origin: &str, old: u64, proof: &[[u8; 32]], size: usize) -> String {
        let text = checkpoint_text(origin, size as u64, &root(size));
        body(old, proof, &signed(&text, LOG))
    }

    /// Posts `body`; the status, content type and body of the answer.
    async fn post(witness: &FakeWitness, body: String) -> (u16, String, String) {
        let response = reqwest::Client::new()
            .post(format!("{}/add-checkpoint", witness.url))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (status, content_type, response.text().await.unwrap())
    }

    /// Checks that `answer` is one cosignature line by the witness of `vkey` on `text`, made
    /// between `from` and now; returns its time.
    fn check_cosignature(vkey: &str, text: &str, answer: &str, from: u64) -> u64 {
        let parts: Vec<&str> = vkey.splitn(3, '+').collect();
        let [name, id, key] = parts[..] else {
            panic!("{vkey}")
        };
        let key = BASE64.decode(key).unwrap();
        assert_eq!(key[0], 0x04);
        let line = answer.strip_suffix('\n').unwrap();
        assert!(!line.contains('\n'), "one line: {answer:?}");
        let encoded = line
            .strip_prefix(&format!("— {name} "))
            .unwrap_or_else(|| panic!("{answer:?}"));
        let bytes = BASE64.decode(encoded).unwrap();
        assert_eq!(bytes.len(), 76);
        assert_eq!(hex::encode(&bytes[..4]), id);
        let time = u64::from_be_bytes(bytes[4..12].try_into().unwrap());
        assert!(time >= from && time <= now(), "time {time}");
        let message = format!("cosignature/v1\ntime {time}\n{text}");
        UnparsedPublicKey::new(&ED25519, &key[1..])
            .verify(message.as_bytes(), &bytes[12..])
            .expect("the cosignature verifies");
        time
    }

    #[test]
    fn keys_notes_and_cosignatures_match_the_known_answers() {
        // The research notes' self-generated vectors (checked with Python `cryptography` and
        // the `signed_note` crate).
        assert_eq!(
            log_vkey(LOG),
            "example.com/audit-log+07499b2d+AQOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
        );
        let text = checkpoint_text(LOG, 8, &root(8));
        assert_eq!(
            signed(&text, LOG),
            "example.com/audit-log\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n\n\
             — example.com/audit-log B0mbLZLyh4863+NGjL2fjfvaQexYZxWZkzppLCjbqmguGY2Euk7E/AquVJOKG0FKm/11L34y0DGNJGXTje/dI5Y3/Q8=\n"
        );
        let witness = FakeWitness {
            inner: Arc::new(Mutex::new(Inner {
                down: false,
                hung: 0,
                latest: HashMap::new(),
                answers: Vec::new(),
            })),
            name: WITNESS.into(),
            key_id: key_id(
                WITNESS,
                ED25519_COSIGNATURE,
                Ed25519KeyPair::from_seed_unchecked(&WITNESS_SEED)
                    .unwrap()
                    .public_key()
                    .as_ref(),
            ),
            key: Arc::new(Ed25519KeyPair::from_seed_unchecked(&WITNESS_SEED).unwrap()),
            logs: Arc::new(vec![LogKey::parse(&log_vkey(LOG)).unwrap()]),
            url: String::new(),
        };
        assert_eq!(
            witness.vkey(),
            "witness.example/w1+f1ed8c47+BCFS+NGbeR0kRTJC4V8uq2y3z/p7al7TAJeWDgaYgdsS"
        );
        assert_eq!(
            witness.cosignature(&text, 1_700_000_000),
            "— witness.example/w1 8e2MRwAAAABlU/EAHJT+y+20db9Mgh2k6q2zg+rRSZM5DEY8wmPlzdju538bSnts0nIbspqJpbeBeMWdPdzaS0iW09XQR55Em5P+Dg==\n"
        );
        // The C2SP signed-note example key parses; the Go note package's, mangled, does not.
        let example =
            LogKey::parse("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k")
                .unwrap();
        assert_eq!(example.id, [0x53, 0x0d, 0x90, 0x3a]);
        for bad in [
            "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeumann+c74f20a3",
            "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10",
            "PeterNeumann+c74f20a3+",
            "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        ] {
            assert!(LogKey::parse(bad).is_err(), "{bad}");
        }
        LogKey::parse("PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
            .unwrap();
    }

    #[test]
    fn the_consistency_check_is_rfc_9162s() {
        let leaves = leaves();
        for (size, expected) in ROOTS.iter().enumerate() {
            assert_eq!(hex::encode(mth(&leaves[..size])), *expected, "root {size}");
        }
        for (old, new, published) in PROOFS {
            let computed = subproof(old as usize, &leaves[..new as usize], true);
            assert_eq!(computed, proof(old, new), "PROOF({old}, {new})");
            assert_eq!(published.len(), computed.len());
        }
        // Every pair of sizes up to 8: the proof verifies; any change to it, or to either
        // root, or to either size, does not.
        for new in 1..=8usize {
            for old in 1..=new {
                let proof = subproof(old, &leaves[..new], true);
                let (first, second) = (root(old), root(new));
                let (o, n) = (old as u64, new as u64);
                assert!(
                    verify_consistency(o, n, &first, &second, &proof),
                    "{old}→{new}"
                );
                assert!(!verify_consistency(o, n, &second, &first, &proof) || old == new);
                for i in 0..proof.len() {
                    let mut bad = proof.clone();
                    bad[i][0] ^= 1;
                    assert!(
                        !verify_consistency(o, n, &first, &second, &bad),
                        "{old}→{new} #{i}"
                    );
                    let mut short = proof.clone();
                    short.remove(i);
                    assert!(!verify_consistency(o, n, &first, &second, &short));
                }
                let mut long = proof.clone();
                long.push(first);
                assert!(!verify_consistency(o, n, &first, &second, &long));
                if old < new {
                    assert!(!verify_consistency(o, n, &root(old - 1), &second, &proof));
                    assert!(!verify_consistency(n, o, &second, &first, &proof));
                }
            }
        }
        assert!(verify_consistency(0, 8, &empty_root(), &root(8), &[]));
        assert!(!verify_consistency(
            0,
            8,
            &empty_root(),
            &root(8),
            &[root(1)]
        ));
    }

    #[tokio::test]
    async fn it_cosigns_consistent_checkpoints_and_refuses_the_rest() {
        let witness = FakeWitness::start(WITNESS, WITNESS_SEED, &[log_vkey(LOG)]).await;
        assert_eq!(
            witness.vkey(),
            "witness.example/w1+f1ed8c47+BCFS+NGbeR0kRTJC4V8uq2y3z/p7al7TAJeWDgaYgdsS"
        );
        let chain = format!("{LOG}/chain-a");

        // The first checkpoint, from nothing.
        let from = now();
        let (status, _, answer) = post(&witness, submission(&chain, 0, &[], 6)).await;
        assert_eq!(status, 200, "{answer}");
        let text = checkpoint_text(&chain, 6, &root(6));
        check_cosignature(&witness.vkey(), &text, &answer, from);
        assert_eq!(witness.latest(&chain), Some((6, root(6))));

        // On with the published proof 6 → 8.
        let (status, _, answer) = post(&witness, submission(&chain, 6, &proof(6, 8), 8)).await;
        assert_eq!(status, 200, "{answer}");
        check_cosignature(
            &witness.vkey(),
            &checkpoint_text(&chain, 8, &root(8)),
            &answer,
            from,
        );
        assert_eq!(witness.latest(&chain), Some((8, root(8))));

        // The same again: the old size is no longer the latest.
        let (status, content_type, answer) =
            post(&witness, submission(&chain, 6, &proof(6, 8), 8)).await;
        assert_eq!(
            (status, content_type.as_str(), answer.as_str()),
            (409, "text/x.tlog.size", "8\n")
        );

        // The same size again, same root: cosigned again, no proof needed.
        let (status, _, answer) = post(&witness, submission(&chain, 8, &[], 8)).await;
        assert_eq!(status, 200, "{answer}");
        // A fork: the same size, another root.
        let fork = signed(&checkpoint_text(&chain, 8, &root(7)), LOG);
        assert_eq!(post(&witness, body(8, &[], &fork)).await.0, 422);
        assert_eq!(witness.latest(&chain), Some((8, root(8))));

        // Old beyond the checkpoint's size.
        assert_eq!(post(&witness, submission(&chain, 9, &[], 8)).await.0, 400);

        // A bad proof, then the good one (2 → 5 as published).
        witness.set_latest(&chain, 2, root(2));
        let mut bad = proof(2, 5);
        bad[1][31] ^= 0x80;
        assert_eq!(post(&witness, submission(&chain, 2, &bad, 5)).await.0, 422);
        assert_eq!(
            post(&witness, submission(&chain, 2, &proof(2, 5)[..1], 5))
                .await
                .0,
            422
        );
        assert_eq!(witness.latest(&chain), Some((2, root(2))));
        assert_eq!(
            post(&witness, submission(&chain, 2, &proof(2, 5), 5))
                .await
                .0,
            200
        );
        assert_eq!(witness.latest(&chain), Some((5, root(5))));

        // A history it saw forked: a good proof from the real size 1 is checked against the
        // root it holds for 1, and fails; with the true root it passes (1 → 8 as published).
        witness.set_latest(&chain, 1, root(2));
        assert_eq!(
            post(&witness, submission(&chain, 1, &proof(1, 8), 8))
                .await
                .0,
            422
        );
        witness.set_latest(&chain, 1, root(1));
        assert_eq!(
            post(&witness, submission(&chain, 1, &proof(1, 8), 8))
                .await
                .0,
            200
        );

        // Forgotten: old 0 is right again, and a proof from 0 is refused.
        witness.forget(&chain);
        assert_eq!(witness.latest(&chain), None);
        assert_eq!(
            post(&witness, submission(&chain, 0, &[root(1)], 8)).await.0,
            422
        );
        let (status, content_type, answer) = post(&witness, submission(&chain, 3, &[], 8)).await;
        assert_eq!(
            (status, content_type.as_str(), answer.as_str()),
            (409, "text/x.tlog.size", "0\n")
        );
        // An empty tree must have the empty root.
        let empty = signed(&checkpoint_text(&chain, 0, &root(1)), LOG);
        assert_eq!(post(&witness, body(0, &[], &empty)).await.0, 422);
        assert_eq!(post(&witness, submission(&chain, 0, &[], 0)).await.0, 200);
        assert_eq!(witness.latest(&chain), Some((0, empty_root())));

        // The log's own name is an origin too; another log's name sharing its prefix is not.
        assert_eq!(post(&witness, submission(LOG, 0, &[], 3)).await.0, 200);
        let (status, _, answer) = post(&witness, submission(&format!("{LOG}s"), 0, &[], 3)).await;
        assert_eq!(status, 403, "{answer}");

        assert_eq!(
            witness.answers(),
            [
                200, 200, 409, 200, 422, 400, 422, 422, 200, 422, 200, 422, 409, 422, 200, 200, 403
            ]
        );
        assert_eq!(witness.cosigned(), 7);
        assert_eq!(witness.refused_inconsistent(), 6);
    }

    #[tokio::test]
    async fn it_refuses_notes_not_signed_by_a_trusted_key() {
        let witness = FakeWitness::start(WITNESS, WITNESS_SEED, &[log_vkey(LOG)]).await;
        let text = checkpoint_text(LOG, 8, &root(8));
        let good = signed(&text, LOG);

        // Unsigned: no signature block, or an empty one.
        assert_eq!(post(&witness, body(0, &[], &text)).await.0, 403);
        assert_eq!(
            post(&witness, body(0, &[], &format!("{text}\n"))).await.0,
            403
        );
        // Signed only by a key it does not know (same key, another name).
        let other = signed(&text, "other.example/log");
        assert_eq!(post(&witness, body(0, &[], &other)).await.0, 403);
        // The trusted key's name and ID on a signature of other bytes.
        let forged = signed(&checkpoint_text(LOG, 8, &root(7)), LOG);
        let forged_line = forged.rsplit_once("\n\n").unwrap().1;
        let wrong = format!("{text}\n{forged_line}");
        assert_eq!(post(&witness, body(0, &[], &wrong)).await.0, 403);
        // ... even beside a good one.
        let both = format!("{good}{forged_line}");
        assert_eq!(post(&witness, body(0, &[], &both)).await.0, 403);
        // A different text under a good signature.
        let tampered = good.replacen("\n8\n", "\n7\n", 1);
        assert_eq!(post(&witness, body(0, &[], &tampered)).await.0, 403);
        // A witness trusting another key only.
        let stranger = FakeWitness::start(WITNESS, WITNESS_SEED, &[]).await;
        assert_eq!(post(&stranger, body(0, &[], &good)).await.0, 403);

        // Unknown signatures are ignored beside a good one.
        let (status, _, answer) = post(
            &witness,
            body(
                0,
                &[],
                &format!("{good}{}", other.rsplit_once("\n\n").unwrap().1),
            ),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(witness.answers(), [403, 403, 403, 403, 403, 403, 200]);
        assert_eq!(witness.cosigned(), 1);
        assert_eq!(witness.refused_inconsistent(), 0);
    }

    #[tokio::test]
    async fn it_answers_400_to_malformed_bodies() {
        let witness = FakeWitness::start(WITNESS, WITNESS_SEED, &[log_vkey(LOG)]).await;
        let note = signed(&checkpoint_text(LOG, 8, &root(8)), LOG);
        let good = body(0, &[], &note);
        let proof_line = format!("{}\n", BASE64.encode(root(1)));
        let cases = [
            format!("old 00\n\n{note}"),
            format!("old -0\n\n{note}"),
            format!("old +1\n\n{note}"),
            format!("old  0\n\n{note}"),
            format!("Old 0\n\n{note}"),
            format!("old 18446744073709551616\n\n{note}"),
            format!("old 0\n{note}"),
            format!("old 0\nnot base64!\n\n{note}"),
            format!("old 0\n{}\n\n{note}", BASE64.encode([0u8; 31])),
            format!("old 0\n{}\n{note}", proof_line.repeat(64)),
            format!("old 0\r\n\n{note}"),
            "old 0".to_string(),
            good.trim_end().to_string(),
            good.replace("— ", "- "),
            good.replace(&format!("— {LOG} "), "— bad name "),
            good.replace("\n8\n", "\n08\n"),
            good.replace("XcnaeacG", "XcnaeacGX"),
            format!("{good}unexpected line\n"),
        ];
        for case in &cases {
            let (status, _, answer) = post(&witness, case.clone()).await;
            assert_eq!(status, 400, "{case:?}: {answer}");
        }
        let invalid_utf8 = reqwest::Client::new()
            .post(format!("{}/add-checkpoint", witness.url))
            .body(vec![
                b'o', b'l', b'd', b' ', b'0', b'\n', 0xff, b'\n', b'\n',
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(invalid_utf8.status().as_u16(), 400);
        // 63 proof lines parse (and are then refused as a proof from 0).
        let many = format!("old 0\n{}\n{note}", proof_line.repeat(63));
        assert_eq!(post(&witness, many).await.0, 422);
        assert_eq!(witness.answers().len(), cases.len() + 2);
        assert_eq!(witness.cosigned(), 0);
    }

    #[tokio::test]
    async fn while_down_it_hangs_and_records_nothing() {
        let witness = FakeWitness::start(WITNESS, WITNESS_SEED, &[log_vkey(LOG)]).await;
        witness.set_down(true);
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let error = client
            .post(format!("{}/add-checkpoint", witness.url))
            .body(submission(LOG, 0, &[], 8))
            .send()
            .await
            .unwrap_err();
        assert!(error.is_timeout(), "{error}");
        assert_eq!(witness.answers(), Vec::<u16>::new());
        assert_eq!(witness.latest(LOG), None);

        witness.set_down(false);
        assert_eq!(post(&witness, submission(LOG, 0, &[], 8)).await.0, 200);
        assert_eq!(witness.answers(), [200]);
        assert_eq!(witness.latest(LOG), Some((8, root(8))));
    }
}
