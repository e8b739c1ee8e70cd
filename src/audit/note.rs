//! C2SP signed notes (c2sp.org/signed-note) with Ed25519 keys, the checkpoints written in them
//! (c2sp.org/tlog-checkpoint) and witnesses' cosignatures of them (c2sp.org/tlog-cosignature,
//! `cosignature/v1`).
//!
//! A note is text ending in a newline, a blank line, then signature lines
//! `— <key name> <base64(key id ‖ signature)>`. A key id is the first four bytes of
//! SHA-256(name ‖ "\n" ‖ algorithm ‖ public key): `0x01` for a note signature over the text,
//! `0x04` for a cosignature over `cosignature/v1\ntime <T>\n` and the text. Verifier keys are
//! written `<name>+<key id, 8 hex digits>+<base64(algorithm ‖ public key)>`; a private key
//! (Go's and Cloudflare's form, not in the spec) `PRIVATE+KEY+<name>+<key id>+<base64(0x01 ‖
//! seed)>`.
//!
//! Ed25519 is aws-lc-rs's, as rustls and kube already build it. Known answers: the spec's
//! example and Go's `golang.org/x/mod/sumdb/note` vectors (tests below), and the tests'
//! independent Python verifier (`tests/sdk/tlog_verify.py`).

use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use sha2::{Digest, Sha256};

use super::merkle::Hash;

/// The algorithm byte of an Ed25519 note signature.
pub const ED25519_ALGORITHM: u8 = 0x01;
/// The algorithm byte of an Ed25519 `cosignature/v1`.
pub const COSIGNATURE_ALGORITHM: u8 = 0x04;
/// The most signature lines read from one note (the spec asks for at least 16).
const MAX_SIGNATURES: usize = 100;
/// The largest note read.
pub const MAX_NOTE_BYTES: usize = 64 * 1024;
/// The line a signature starts with: an em dash and a space.
const DASH: &str = "\u{2014} ";

/// Why a key, a note or a checkpoint is refused. Each message names what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoteError(pub String);

fn refuse<T>(message: impl Into<String>) -> Result<T, NoteError> {
    Err(NoteError(message.into()))
}

/// A key name: not empty, no Unicode space, no `+`.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c == '+')
}

/// The key id of `public` under `name` and `algorithm`.
pub fn key_id(name: &str, algorithm: u8, public: &[u8]) -> u32 {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update([b'\n', algorithm]);
    hasher.update(public);
    let digest = hasher.finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// The name, key id and base64 payload of `<name>+<hex id>+<base64>`.
fn key_parts(text: &str) -> Result<(&str, u32, Vec<u8>), NoteError> {
    // A name holds no '+', a base64 payload may: split from the left.
    let mut parts = text.trim().splitn(3, '+');
    let (Some(name), Some(id), Some(payload)) = (parts.next(), parts.next(), parts.next()) else {
        return refuse("a key is written <name>+<key id>+<base64>");
    };
    if !valid_name(name) {
        return refuse(format!("{name:?} is no key name (no spaces, no '+')"));
    }
    let id = (id.len() == 8 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| u32::from_str_radix(id, 16).ok())
        .flatten()
        .ok_or_else(|| NoteError(format!("{id:?} is no key id (8 lowercase hex digits)")))?;
    let payload = BASE64
        .decode(payload)
        .map_err(|_| NoteError("the key's last part is not base64".into()))?;
    Ok((name, id, payload))
}

/// A key that verifies note signatures (`0x01`) or cosignatures (`0x04`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
    /// Its name (the log's, or the witness's).
    pub name: String,
    /// Its key id.
    pub id: u32,
    /// [`ED25519_ALGORITHM`] or [`COSIGNATURE_ALGORITHM`].
    pub algorithm: u8,
    public: [u8; 32],
}

impl VerifierKey {
    /// Parses `<name>+<key id>+<base64(algorithm ‖ public key)>`, checking the key id.
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let (name, id, payload) = key_parts(text)?;
        let (Some(&algorithm), Ok(public)) = (payload.first(), <[u8; 32]>::try_from(&payload[1..]))
        else {
            return refuse("a verifier key holds an algorithm byte and a 32-byte Ed25519 key");
        };
        if algorithm != ED25519_ALGORITHM && algorithm != COSIGNATURE_ALGORITHM {
            return refuse(format!(
                "key algorithm {algorithm:#04x} is not Ed25519 (0x01) or an Ed25519 cosignature (0x04)"
            ));
        }
        if key_id(name, algorithm, &public) != id {
            return refuse(format!("the key id of {name} does not match its key"));
        }
        Ok(Self {
            name: name.to_string(),
            id,
            algorithm,
            public,
        })
    }

    /// The key in its written form.
    pub fn encoded(&self) -> String {
        let mut payload = vec![self.algorithm];
        payload.extend_from_slice(&self.public);
        format!("{}+{:08x}+{}", self.name, self.id, BASE64.encode(payload))
    }

    /// Whether `signature` (the bytes after the key id) is this key's over `text`; for a
    /// cosignature key, also its time.
    fn check(&self, text: &str, signature: &[u8]) -> Option<Option<u64>> {
        let key = UnparsedPublicKey::new(&ED25519, self.public);
        match self.algorithm {
            COSIGNATURE_ALGORITHM => {
                let (time, signature) = (signature.get(..8)?, signature.get(8..)?);
                let time = u64::from_be_bytes(time.try_into().ok()?);
                let message = format!("cosignature/v1\ntime {time}\n{text}");
                key.verify(message.as_bytes(), signature).ok()?;
                Some(Some(time))
            }
            _ => key.verify(text.as_bytes(), signature).ok().map(|()| None),
        }
    }
}

impl std::fmt::Display for VerifierKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.encoded())
    }
}

/// A private Ed25519 key that signs notes (the log's, or in tests a witness's).
pub struct SignerKey {
    name: String,
    id: u32,
    pair: Ed25519KeyPair,
    algorithm: u8,
}

impl std::fmt::Debug for SignerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignerKey({}+{:08x})", self.name, self.id)
    }
}

impl SignerKey {
    /// A new key named `name`: its private form and its verifier key.
    pub fn generate(name: &str) -> Result<(String, String), NoteError> {
        if !valid_name(name) {
            return refuse(format!("{name:?} cannot name a key (no spaces, no '+')"));
        }
        let mut seed = [0u8; 32];
        aws_lc_rs::rand::fill(&mut seed).map_err(|_| NoteError("no randomness".into()))?;
        let key = Self::from_seed(name, &seed, ED25519_ALGORITHM)?;
        let mut payload = vec![ED25519_ALGORITHM];
        payload.extend_from_slice(&seed);
        let private = format!(
            "PRIVATE+KEY+{name}+{:08x}+{}",
            key.id,
            BASE64.encode(payload)
        );
        Ok((private, key.verifier().encoded()))
    }

    /// The key of `seed`, named `name`, signing as `algorithm` (0x01 notes, 0x04 cosignatures).
    pub fn from_seed(name: &str, seed: &[u8; 32], algorithm: u8) -> Result<Self, NoteError> {
        let pair = Ed25519KeyPair::from_seed_unchecked(seed)
            .map_err(|_| NoteError("not an Ed25519 seed".into()))?;
        let id = key_id(name, algorithm, pair.public_key().as_ref());
        Ok(Self {
            name: name.to_string(),
            id,
            pair,
            algorithm,
        })
    }

    /// Parses `PRIVATE+KEY+<name>+<key id>+<base64(0x01 ‖ seed)>`, checking the key id.
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let Some(rest) = text.trim().strip_prefix("PRIVATE+KEY+") else {
            return refuse(
                "a private key is written PRIVATE+KEY+<name>+<key id>+<base64>, as `file-agent audit keygen` writes it",
            );
        };
        let (name, id, payload) = key_parts(rest)?;
        let (Some(&ED25519_ALGORITHM), Ok(seed)) =
            (payload.first(), <[u8; 32]>::try_from(&payload[1..]))
        else {
            return refuse("a private key holds 0x01 and a 32-byte Ed25519 seed");
        };
        let key = Self::from_seed(name, &seed, ED25519_ALGORITHM)?;
        if key.id != id {
            return refuse(format!("the key id of {name} does not match its key"));
        }
        Ok(key)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its verifier key.
    pub fn verifier(&self) -> VerifierKey {
        let public: [u8; 32] = self
            .pair
            .public_key()
            .as_ref()
            .try_into()
            .unwrap_or([0; 32]);
        VerifierKey {
            name: self.name.clone(),
            id: self.id,
            algorithm: self.algorithm,
            public,
        }
    }

    /// The signature line of `text` (`time` for a cosignature): `— <name> <base64>\n`.
    pub fn signature_line(&self, text: &str, time: u64) -> String {
        let mut bytes = self.id.to_be_bytes().to_vec();
        if self.algorithm == COSIGNATURE_ALGORITHM {
            bytes.extend_from_slice(&time.to_be_bytes());
            let message = format!("cosignature/v1\ntime {time}\n{text}");
            bytes.extend_from_slice(self.pair.sign(message.as_bytes()).as_ref());
        } else {
            bytes.extend_from_slice(self.pair.sign(text.as_bytes()).as_ref());
        }
        format!("{DASH}{} {}\n", self.name, BASE64.encode(bytes))
    }

    /// `text` signed: the note.
    pub fn sign(&self, text: &str) -> String {
        format!("{text}\n{}", self.signature_line(text, 0))
    }
}

/// One signature line of a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The key name.
    pub name: String,
    /// The key id.
    pub id: u32,
    /// The signature (after the key id).
    pub bytes: Vec<u8>,
    /// The line as written, with its newline.
    pub line: String,
}

/// A note: its text and its signature lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The signed text, ending in a newline.
    pub text: String,
    /// Its signatures, in order.
    pub signatures: Vec<Signature>,
}

impl Note {
    /// Parses a signed note strictly: UTF-8, no control character but the newline, the text
    /// up to the last blank line, then at least one and at most 100 signature lines.
    pub fn parse(note: &str) -> Result<Self, NoteError> {
        if note.len() > MAX_NOTE_BYTES {
            return refuse(format!("a note is at most {MAX_NOTE_BYTES} bytes"));
        }
        if note.chars().any(|c| c.is_control() && c != '\n') {
            return refuse("a note holds no control character but the newline");
        }
        let Some(split) = note.rfind("\n\n") else {
            return refuse("a note is its text, a blank line and its signatures");
        };
        let (text, signed) = (&note[..=split], &note[split + 2..]);
        if signed.is_empty() || !signed.ends_with('\n') {
            return refuse("a note's last signature line ends in a newline");
        }
        let mut signatures = Vec::new();
        for line in signed.split_inclusive('\n') {
            if signatures.len() == MAX_SIGNATURES {
                return refuse(format!("a note has at most {MAX_SIGNATURES} signatures"));
            }
            signatures.push(signature(line)?);
        }
        Ok(Self {
            text: text.to_string(),
            signatures,
        })
    }

    /// Which of this note's signatures `key` made: `Ok(Some(time))` (the cosignature's time,
    /// 0 for a note signature) when one verifies, `Ok(None)` when none is `key`'s, `Err` when
    /// one carries `key`'s name and id and does not verify (the note must be refused).
    pub fn signed_by(&self, key: &VerifierKey) -> Result<Option<u64>, NoteError> {
        for signature in &self.signatures {
            if signature.name != key.name || signature.id != key.id {
                continue;
            }
            return match key.check(&self.text, &signature.bytes) {
                Some(time) => Ok(Some(time.unwrap_or(0))),
                None => refuse(format!(
                    "the signature of {}+{:08x} does not verify: the note was changed, or signed by another key of that name",
                    key.name, key.id
                )),
            };
        }
        Ok(None)
    }

    /// The note with `line` added (a cosignature), unless an identical line is there.
    pub fn with_signature_line(&self, line: &str) -> Result<Self, NoteError> {
        let added = signature(line)?;
        let mut note = self.clone();
        if !note.signatures.iter().any(|s| s.line == added.line) {
            note.signatures.push(added);
        }
        Ok(note)
    }

    /// The note as written.
    pub fn encoded(&self) -> String {
        let mut out = format!("{}\n", self.text);
        for signature in &self.signatures {
            out.push_str(&signature.line);
        }
        out
    }
}

/// A C2SP text that carries hashes and a note: `head` (its first lines, each ending in a
/// newline), one base64 hash a line, a blank line, then `note` verbatim: a
/// c2sp.org/tlog-witness `add-checkpoint` body, a c2sp.org/tlog-proof.
pub fn hashes_then_note(head: &str, hashes: &[Hash], note: &str) -> String {
    let mut text = head.to_string();
    for hash in hashes {
        text.push_str(&BASE64.encode(hash));
        text.push('\n');
    }
    text.push('\n');
    text.push_str(note);
    text
}

/// One signature line, `— <name> <base64>\n`.
fn signature(line: &str) -> Result<Signature, NoteError> {
    let Some(rest) = line
        .strip_prefix(DASH)
        .and_then(|rest| rest.strip_suffix('\n'))
    else {
        return refuse(format!(
            "{line:?} is not a signature line (— <name> <base64>)"
        ));
    };
    let Some((name, payload)) = rest.split_once(' ') else {
        return refuse(format!(
            "{line:?} is not a signature line (— <name> <base64>)"
        ));
    };
    let bytes = BASE64
        .decode(payload)
        .ok()
        .filter(|bytes| bytes.len() >= 5 && valid_name(name))
        .ok_or_else(|| NoteError(format!("{line:?} is not a signature line")))?;
    Ok(Signature {
        name: name.to_string(),
        id: u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        bytes: bytes[4..].to_vec(),
        line: line.to_string(),
    })
}

/// A checkpoint's body (c2sp.org/tlog-checkpoint): the log's origin, its size and its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Which log (here: which server's chain).
    pub origin: String,
    /// How many leaves (lines).
    pub size: u64,
    /// The root of those leaves.
    pub root: Hash,
}

impl Checkpoint {
    /// The note text: three lines.
    pub fn text(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            BASE64.encode(self.root)
        )
    }

    /// Parses a note's text strictly (extension lines are allowed and ignored).
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let mut lines = text.split_inclusive('\n');
        let mut next = || lines.next().and_then(|line| line.strip_suffix('\n'));
        let (Some(origin), Some(size), Some(root)) = (next(), next(), next()) else {
            return refuse("a checkpoint is three lines: origin, size, root");
        };
        let valid_size = !size.is_empty()
            && size.bytes().all(|b| b.is_ascii_digit())
            && (size == "0" || !size.starts_with('0'));
        let size = valid_size
            .then(|| size.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| NoteError(format!("{size:?} is no tree size")))?;
        let root: Hash = BASE64
            .decode(root)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| NoteError("a checkpoint's root is the base64 of 32 bytes".into()))?;
        if origin.is_empty() {
            return refuse("a checkpoint names its origin");
        }
        if lines.any(|line| line == "\n" || !line.ends_with('\n')) {
            return refuse("a checkpoint's extension lines are not empty");
        }
        Ok(Self {
            origin: origin.to_string(),
            size,
            root,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's `golang.org/x/mod/sumdb/note` example key and note.
    const PETER_PRIVATE: &str =
        "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
    const PETER: &str = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
    const ENOCH: &str = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop";
    const TEXT: &str = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
    const PETER_SIGNATURE: &str = "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";
    const ENOCH_SIGNATURE: &str = "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n";

    #[test]
    fn gos_note_vectors_sign_and_verify_byte_for_byte() {
        let signer = SignerKey::parse(PETER_PRIVATE).unwrap();
        assert_eq!(signer.verifier().encoded(), PETER);
        let note = signer.sign(TEXT);
        assert_eq!(note, format!("{TEXT}\n{PETER_SIGNATURE}"));
        let both = Note::parse(&format!("{TEXT}\n{PETER_SIGNATURE}{ENOCH_SIGNATURE}")).unwrap();
        let (peter, enoch) = (
            VerifierKey::parse(PETER).unwrap(),
            VerifierKey::parse(ENOCH).unwrap(),
        );
        assert_eq!(both.signed_by(&peter), Ok(Some(0)));
        assert_eq!(both.signed_by(&enoch), Ok(Some(0)));
        // A changed text fails the key whose signature it carries.
        let changed = Note::parse(&note.replacen("problem", "pr0blem", 1)).unwrap();
        assert!(changed.signed_by(&peter).is_err());
        assert_eq!(
            changed.signed_by(&enoch),
            Ok(None),
            "not its signature: ignored"
        );
    }

    #[test]
    fn the_spec_example_verifies_and_malformed_notes_and_keys_are_refused() {
        let key = VerifierKey::parse(
            "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",
        )
        .unwrap();
        let note = "This is an example message.\n\n— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n";
        assert_eq!(Note::parse(note).unwrap().signed_by(&key), Ok(Some(0)));
        for bad in [
            TEXT.to_string(),
            format!("{TEXT}\n"),
            format!("{TEXT}\n{}", PETER_SIGNATURE.trim_end()),
            format!("\x01{TEXT}\n{PETER_SIGNATURE}"),
            format!(
                "{TEXT}\n— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
            ),
            format!("{TEXT}\n{PETER_SIGNATURE}Unexpected line.\n"),
            format!("{TEXT}\n{}", PETER_SIGNATURE.repeat(101)),
        ] {
            assert!(Note::parse(&bad).is_err(), "{bad:?}");
        }
        for bad in [
            "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10T",
            "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        ] {
            assert!(VerifierKey::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_checkpoint_and_a_witness_cosignature_match_the_known_answers() {
        // /tmp-free: the log and witness keys from fixed seeds, as the tests' Python
        // verifier's known answers have them.
        let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
        let log = SignerKey::from_seed("example.com/audit-log", &seed, ED25519_ALGORITHM).unwrap();
        assert_eq!(
            log.verifier().encoded(),
            "example.com/audit-log+07499b2d+AQOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
        );
        let root: Hash =
            hex::decode("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")
                .unwrap()
                .try_into()
                .unwrap();
        let checkpoint = Checkpoint {
            origin: "example.com/audit-log".into(),
            size: 8,
            root,
        };
        let note = log.sign(&checkpoint.text());
        assert!(note.ends_with("— example.com/audit-log B0mbLZLyh4863+NGjL2fjfvaQexYZxWZkzppLCjbqmguGY2Euk7E/AquVJOKG0FKm/11L34y0DGNJGXTje/dI5Y3/Q8=\n"), "{note}");
        let witness =
            SignerKey::from_seed("witness.example/w1", &[0x42; 32], COSIGNATURE_ALGORITHM).unwrap();
        assert_eq!(
            witness.verifier().encoded(),
            "witness.example/w1+f1ed8c47+BCFS+NGbeR0kRTJC4V8uq2y3z/p7al7TAJeWDgaYgdsS"
        );
        let line = witness.signature_line(&checkpoint.text(), 1_700_000_000);
        assert_eq!(
            line,
            "— witness.example/w1 8e2MRwAAAABlU/EAHJT+y+20db9Mgh2k6q2zg+rRSZM5DEY8wmPlzdju538bSnts0nIbspqJpbeBeMWdPdzaS0iW09XQR55Em5P+Dg==\n"
        );
        let parsed = Note::parse(&note)
            .unwrap()
            .with_signature_line(&line)
            .unwrap();
        assert_eq!(Checkpoint::parse(&parsed.text).unwrap(), checkpoint);
        assert_eq!(parsed.signed_by(&log.verifier()), Ok(Some(0)));
        assert_eq!(
            parsed.signed_by(&witness.verifier()),
            Ok(Some(1_700_000_000))
        );
        for bad in [
            "o\n05\nAAAA\n",
            "o\n5\n",
            "\n5\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        ] {
            assert!(Checkpoint::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn generated_keys_round_trip() {
        let (private, public) = SignerKey::generate("file-agent.example/audit").unwrap();
        let key = SignerKey::parse(&private).unwrap();
        assert_eq!(key.verifier().encoded(), public);
        let note = Note::parse(&key.sign("a\n")).unwrap();
        assert_eq!(
            note.signed_by(&VerifierKey::parse(&public).unwrap()),
            Ok(Some(0))
        );
        assert!(SignerKey::generate("with space").is_err());
    }

    #[test]
    fn a_note_past_the_size_bound_is_refused_before_it_is_read() {
        let signer = SignerKey::parse(PETER_PRIVATE).unwrap();
        let long = format!("{}\n", "x".repeat(MAX_NOTE_BYTES));
        let error = Note::parse(&signer.sign(&long)).unwrap_err();
        assert!(error.0.contains("at most"), "{error}");
        let fits = format!("{}\n", "x".repeat(MAX_NOTE_BYTES - 200));
        assert!(Note::parse(&signer.sign(&fits)).is_ok());
    }
}
