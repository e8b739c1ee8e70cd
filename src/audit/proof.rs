//! What a reviewer runs against the signed checkpoints, without the server: a chain checked
//! against every checkpoint signed by the log's key ([`check_signed`], for `audit verify
//! --key`), and proofs for a receipt ([`inclusion`], [`consistency`], for `audit prove`).
//!
//! [`check_signed`] trusts nothing in the audit folder but the lines it reads: each
//! checkpoint's signature is checked with the key the reviewer gives, and its root is
//! recomputed from the trail's first lines; a checkpoint the trail does not reach, or whose
//! root the lines do not give, names the lines at fault. Lines retention deleted are stood in
//! for by the chain's tree file, which a signed root then vouches for.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::json;

use super::chain::Chain;
use super::checkpoints::{self, StoredCheckpoint};
use super::merkle::Hash;
use super::note::{Checkpoint, Note, VerifierKey};
use super::tree::{self, TreeFile};
use super::{Broken, Verified};

/// A chain checked against the checkpoints signed of it.
#[derive(Debug)]
pub struct SignedCheck {
    /// The chain's own verdict (its hash chain).
    pub chain: Result<Verified, Broken>,
    /// The origin checked.
    pub origin: String,
    /// The checkpoints found (stored, and the copies given) that the key signed, by size.
    pub checkpoints: BTreeMap<u64, (String, Hash)>,
    /// For each witness key given, the largest checkpoint it cosigned.
    pub cosigned: BTreeMap<String, u64>,
    /// What contradicts the trail, the first (smallest) checkpoint first; empty when the trail
    /// matches every checkpoint.
    pub problems: Vec<String>,
}

impl SignedCheck {
    /// Whether the chain and every checkpoint agree.
    pub fn ok(&self) -> bool {
        self.chain.is_ok() && self.problems.is_empty()
    }
}

/// Checks `chain` against the checkpoints kept beside it and `copies` (from elsewhere), all
/// of its origin, `<key's name>/<chain>` unless `origin` names it: each must be signed by
/// `key`, its cosignatures by `witnesses` must verify, two of one size must agree, and each
/// must be the root of the trail's first lines.
pub fn check_signed(
    chain: &Chain,
    origin: Option<&str>,
    key: &VerifierKey,
    witnesses: &[VerifierKey],
    copies: &[StoredCheckpoint],
) -> SignedCheck {
    let live = chain.files.last().cloned().unwrap_or_default();
    let origin = origin.map_or_else(
        || format!("{}/{}", key.name, super::chain_name(&live)),
        str::to_string,
    );
    let mut problems = Vec::new();
    let stored = checkpoints::read(&checkpoints::path_of(&live)).unwrap_or_default();
    let mut signed: BTreeMap<u64, (String, Hash)> = BTreeMap::new();
    let mut cosigned = BTreeMap::new();
    for candidate in stored.iter().chain(copies).filter(|c| c.origin == origin) {
        match checked(candidate, key, witnesses, &mut cosigned) {
            Ok(body) => match signed.get(&body.size) {
                Some((_, root)) if *root != body.root => problems.push(format!(
                    "a fork: two checkpoints of {} lines signed by {} hold different roots; the log showed two histories",
                    body.size, key.name
                )),
                _ => {
                    signed.insert(body.size, (candidate.time.clone(), body.root));
                }
            },
            Err(problem) => problems.push(format!(
                "the checkpoint of {} lines kept at {}: {problem}",
                candidate.size, candidate.time
            )),
        }
    }
    let tree = TreeFile::open_existing(&tree::path_of(&live)).ok();
    let sizes: BTreeSet<u64> = signed.keys().copied().collect();
    let verdict = super::verify_with_roots(&chain.files, sizes, tree.as_ref(), |_| {});
    if let Ok(verified) = &verdict {
        problems.extend(contradictions(&signed, verified, tree.as_ref()));
        if signed.is_empty() {
            problems.push(format!(
                "no checkpoint of {origin} signed by {} was found: the server signs one within FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL of a line; give the copies kept elsewhere with --checkpoints",
                key.name
            ));
        }
    }
    SignedCheck {
        chain: verdict,
        origin,
        checkpoints: signed,
        cosigned,
        problems,
    }
}

/// The body of `candidate` when `key` signed it, noting the cosignatures of `witnesses`.
fn checked(
    candidate: &StoredCheckpoint,
    key: &VerifierKey,
    witnesses: &[VerifierKey],
    cosigned: &mut BTreeMap<String, u64>,
) -> Result<Checkpoint, String> {
    let note = Note::parse(&candidate.checkpoint).map_err(|e| e.to_string())?;
    match note.signed_by(key) {
        Ok(Some(_)) => {}
        Ok(None) => return Err(format!("it is not signed by {key}")),
        Err(error) => return Err(error.to_string()),
    }
    let body = Checkpoint::parse(&note.text).map_err(|e| e.to_string())?;
    for witness in witnesses {
        match note.signed_by(witness) {
            Ok(Some(_)) => {
                let best = cosigned.entry(witness.name.clone()).or_insert(0);
                *best = (*best).max(body.size);
            }
            Ok(None) => {}
            Err(error) => return Err(error.to_string()),
        }
    }
    Ok(body)
}

/// What in `signed` the trail contradicts: a checkpoint past its end (lines cut), or one
/// whose root its lines do not give (lines changed, removed or inserted), naming the range
/// between the last checkpoint it matches and that one.
fn contradictions(
    signed: &BTreeMap<u64, (String, Hash)>,
    verified: &Verified,
    tree: Option<&TreeFile>,
) -> Vec<String> {
    let lines = verified.first_seq.saturating_sub(1) + verified.lines;
    let mut matched = 0;
    let mut problems = Vec::new();
    for (&size, (time, root)) in signed {
        let ours = if size < verified.first_seq {
            // The lines are gone (retention): the tree file stands in for them.
            tree.and_then(|tree| tree.root(size).ok())
        } else {
            verified.roots.get(&size).copied()
        };
        let problem = if size > lines {
            format!(
                "truncated: the checkpoint signed at {time} covers {size} lines, the trail holds {lines}: lines {}..{size} are gone",
                lines + 1
            )
        } else {
            match ours {
                Some(ours) if ours == *root => {
                    matched = size;
                    continue;
                }
                Some(_) => format!(
                    "rewritten: the checkpoint of {size} lines signed at {time} does not match the trail: a line among lines {}..{size} was changed, removed or inserted since it was signed",
                    matched + 1
                ),
                None => format!(
                    "the checkpoint of {size} lines signed at {time} cannot be checked: the trail's first lines are gone and its tree file does not hold them"
                ),
            }
        };
        problems.push(problem);
    }
    problems
}

/// `audit prove --index`: the inclusion proof of line `index + 1` of `chain` against the latest
/// checkpoint kept beside it, as JSON.
pub fn inclusion(chain: &Chain, index: u64) -> Result<serde_json::Value, String> {
    let (tree, kept) = proof_sources(chain)?;
    let checkpoint = kept
        .iter()
        .filter(|c| c.size > index)
        .max_by_key(|c| c.size)
        .ok_or_else(|| {
            format!(
                "no checkpoint kept for {} covers leaf {index} (line {}) yet: one is signed within FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL of a line",
                chain.name,
                index + 1
            )
        })?;
    matching_tree(&tree, checkpoint)?;
    let proof = tree
        .inclusion_proof(index, checkpoint.size)
        .map_err(|e| e.to_string())?;
    let leaf = tree.leaf(index).map_err(|e| e.to_string())?;
    Ok(json!({
        "origin": checkpoint.origin,
        "leaf_index": index,
        "leaf_hash": BASE64.encode(leaf),
        "tree_size": checkpoint.size,
        "inclusion_proof": proof.iter().map(|h| BASE64.encode(h)).collect::<Vec<_>>(),
        "checkpoint": checkpoint.checkpoint,
    }))
}

/// `audit prove --consistency OLD NEW`: the consistency proof between the checkpoints of `old`
/// and `new` lines kept beside `chain`, as JSON.
pub fn consistency(chain: &Chain, old: u64, new: u64) -> Result<serde_json::Value, String> {
    let (tree, kept) = proof_sources(chain)?;
    let of_size = |size: u64| {
        kept.iter().find(|c| c.size == size).ok_or_else(|| {
            let sizes: Vec<String> = kept.iter().map(|c| c.size.to_string()).collect();
            format!(
                "no checkpoint of {size} lines is kept for {}; kept: {}",
                chain.name,
                sizes.join(", ")
            )
        })
    };
    let (older, newer) = (of_size(old)?, of_size(new)?);
    matching_tree(&tree, newer)?;
    let proof = tree
        .consistency_proof(old, new)
        .map_err(|e| e.to_string())?;
    Ok(json!({
        "origin": newer.origin,
        "old_size": old,
        "new_size": new,
        "consistency_proof": proof.iter().map(|h| BASE64.encode(h)).collect::<Vec<_>>(),
        "old_checkpoint": older.checkpoint,
        "new_checkpoint": newer.checkpoint,
    }))
}

/// The chain's tree file and kept checkpoints.
fn proof_sources(chain: &Chain) -> Result<(TreeFile, Vec<StoredCheckpoint>), String> {
    let live = chain.files.last().ok_or("the chain has no file")?;
    let tree_path = tree::path_of(live);
    let tree = TreeFile::open_existing(&tree_path)
        .map_err(|error| format!("{}: {error}", tree_path.display()))?;
    let kept = checkpoints::read(&checkpoints::path_of(live)).unwrap_or_default();
    Ok((tree, kept))
}

/// Refuses a proof from a tree that does not give `checkpoint`'s root.
fn matching_tree(tree: &TreeFile, checkpoint: &StoredCheckpoint) -> Result<(), String> {
    let root = tree.root(checkpoint.size).map_err(|e| e.to_string())?;
    if BASE64.encode(root) != checkpoint.root {
        return Err(format!(
            "the tree file no longer gives the root of the checkpoint of {} lines: the trail was changed since it was signed (run `audit verify --key`)",
            checkpoint.size
        ));
    }
    Ok(())
}

/// The chain of `folder` a command is about: the one named `name` (its file name or its
/// chain name), or the only one.
pub fn pick_chain(chains: Vec<Chain>, name: Option<&str>, folder: &Path) -> Result<Chain, String> {
    let listed = || {
        chains
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match name {
        Some(name) => chains
            .iter()
            .find(|chain| {
                let stem = chain
                    .files
                    .last()
                    .map(|live| super::chain_name(live))
                    .unwrap_or_default();
                chain.name == name || stem == name || name.ends_with(&format!("/{stem}"))
            })
            .cloned()
            .ok_or_else(|| {
                format!(
                    "no chain {name:?} in {}; its chains: {}",
                    folder.display(),
                    listed()
                )
            }),
        None if chains.len() == 1 => chains
            .into_iter()
            .next()
            .ok_or_else(|| "no chain".to_string()),
        None => Err(format!(
            "{} holds {} chains; name one with --chain (or give a receipt's origin): {}",
            folder.display(),
            chains.len(),
            listed()
        )),
    }
}
