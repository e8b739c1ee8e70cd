//! What a retention line records: the files and stored ids one pruning deleted, in the
//! `pruned` field of its line. The record format only: deciding what may go and deleting it is
//! `retention`'s job, and reading a chain whose first files went is `chain`'s; both use these
//! types, so they live apart from either.

use serde::{Deserialize, Serialize};

/// `status` of the line that records a pruning.
pub const RETENTION_STATUS: &str = "retention";

/// One audit file retention deleted.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DroppedFile {
    /// Its name in the audit folder (`fa-1234.jsonl.000000004711`).
    pub file: String,
    /// `seq` of its last line.
    pub last_seq: u64,
    /// The hex SHA-256 of its last line: the `prev` of the first line after it.
    pub last_hash: String,
    /// The time of its last line.
    pub last_time: String,
    /// The signed checkpoint of its chain that retention checked the chain against before
    /// deleting the file (with a signing key): `audit verify --key --checkpoints` compares it
    /// with the copies shipped elsewhere. Absent without a key, and in lines from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed: Option<SignedRoot>,
}

/// A signed checkpoint's size and root, as a retention line records what it checked.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SignedRoot {
    /// The chain's origin, as the note signs it.
    pub origin: String,
    /// Lines covered.
    pub size: u64,
    /// Their root, base64.
    pub root: String,
}

/// What one pruning deleted: the `pruned` field of its line in the trail.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Pruned {
    /// The audit files' cut-off: files whose last line is older went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_before: Option<String>,
    /// Audit files deleted, oldest first per chain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit_files: Vec<DroppedFile>,
    /// The stored files' cut-off: files written before it went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_before: Option<String>,
    /// How many stored files (the local store's folders) were deleted.
    #[serde(default)]
    pub stored_files: u64,
    /// Their ids, up to [`MAX_LISTED_IDS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stored_ids: Vec<String>,
}

/// Ids of deleted stored files listed in one line (the count is always whole).
pub const MAX_LISTED_IDS: usize = 200;
