//! What a reviewer runs against the signed checkpoints, without the server: a folder's chains
//! checked against every checkpoint signed by the log's key ([`check_signed_chains`], for
//! `audit verify --key`, `doctor` and the server's start-up), and proofs for a receipt
//! ([`inclusion`], [`consistency`], for `audit prove`).
//!
//! [`check_signed_chains`] trusts nothing in the audit folder but the lines it reads: each
//! checkpoint's signature is checked with the key the reviewer gives, and its root is
//! recomputed from the trail's first lines; a checkpoint the trail does not reach, or whose
//! root the lines do not give, names the lines at fault. Lines retention deleted are stood in
//! for by the chain's tree file, which a signed root then vouches for. Evidence (a retention
//! line) is only a line a signed checkpoint covers, at the position the verifier read it at.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::json;

use super::chain::Chain;
use super::checkpoints::{self, StoredCheckpoint};
use super::merkle::Hash;
use super::note::VerifierKey;
use super::tree::{self, TreeFile};
use super::{Broken, Verified};

/// A checkpoint of the chain signed by the log's key, as its note signs it.
#[derive(Debug, Clone, PartialEq)]
pub struct SignedPoint {
    /// Its root.
    pub root: Hash,
    /// When the record carrying it says it was kept: not signed, shown as such.
    pub kept_at: String,
    /// The witnesses whose cosignature verifies, each with the time it signed.
    pub cosigned: Vec<(String, u64)>,
}

/// A chain checked against the checkpoints signed of it.
#[derive(Debug)]
pub struct SignedCheck {
    /// The chain's own verdict (its hash chain, and its missing first lines accounted for).
    pub chain: Result<Verified, Broken>,
    /// The origin checked.
    pub origin: String,
    /// The checkpoints found (stored, and the copies given) that the key signed for this
    /// origin, by size, as their notes sign them.
    pub checkpoints: BTreeMap<u64, SignedPoint>,
    /// For each witness key given, the largest checkpoint it cosigned.
    pub cosigned: BTreeMap<String, u64>,
    /// When the chain's first lines are gone, the retention line that records deleting them.
    pub retention: Option<String>,
    /// Why the checkpoints file beside the chain cannot be read, when it exists and cannot
    /// (also among `problems`).
    pub store_error: Option<String>,
    /// What contradicts the trail, the first (smallest) checkpoint first; empty when the trail
    /// matches every checkpoint.
    pub problems: Vec<String>,
    /// The largest size whose signed root the trail's lines give: every line up to it is
    /// covered, at its position, by a signed checkpoint. Only those lines are evidence (of a
    /// retention, of an age).
    pub covered: u64,
    /// The lines after [`Self::covered`], when there are any: no signed checkpoint covers
    /// them, so they prove nothing (named, not a failure: a running server signs its newest
    /// lines within its checkpoint interval).
    pub unsigned: Option<(u64, u64)>,
    /// The retention lines the verifier accepted, with their positions: evidence once
    /// [`Self::covered`] reaches them.
    retention_lines: Vec<(u64, super::Record)>,
}

impl SignedCheck {
    /// Whether the chain and every checkpoint agree.
    pub fn ok(&self) -> bool {
        self.chain.is_ok() && self.problems.is_empty()
    }
}

/// The origin of `chain` when `origin` (a full origin) does not name it:
/// `<key's name>/<chain>`.
pub fn origin_of(chain: &Chain, key: &VerifierKey, origin: Option<&str>) -> String {
    let live = chain.files.last().cloned().unwrap_or_default();
    origin.map_or_else(
        || format!("{}/{}", key.name, super::chain_name(&live)),
        str::to_string,
    )
}

/// Checks each of `chains` (the chains of one folder) against the checkpoints kept beside it
/// and `copies` (from elsewhere), all of its origin, `<key's name>/<chain>` unless `origin_of`
/// names it: each must be signed by `key`, its cosignatures by `witnesses` must verify, two of
/// one size must agree, and each must be the root of the trail's first lines. A chain's
/// missing first lines are accounted for by the retention lines of the folder that a signed
/// checkpoint of their own chain covers, at their real position (never by what a line claims
/// of itself, never by an unfinished line or one after the last signed checkpoint): those
/// retention lines are returned too, for [`missing_chains`].
pub fn check_signed_chains(
    chains: &[Chain],
    origin_of: impl Fn(&Chain) -> Option<String>,
    key: &VerifierKey,
    witnesses: &[VerifierKey],
    copies: &[StoredCheckpoint],
) -> (Vec<SignedCheck>, super::chain::Retired) {
    let checks: Vec<SignedCheck> = chains
        .iter()
        .map(|chain| check_one(chain, origin_of(chain).as_deref(), key, witnesses, copies))
        .collect();
    let mut retired = super::chain::Retired::default();
    for (chain, check) in chains.iter().zip(&checks) {
        for (position, record) in &check.retention_lines {
            if *position <= check.covered {
                retired.note(chain, record, *position);
            }
        }
    }
    let checks = chains
        .iter()
        .zip(checks)
        .map(|(chain, mut check)| {
            let (verdict, retention) = super::chain::accounted(chain, check.chain, &retired);
            check.chain = verdict;
            check.retention = retention;
            check
        })
        .collect();
    (checks, retired)
}

/// One chain against its checkpoints, before its missing first lines are accounted for. Only
/// a note's signed body is believed: its origin binds it to a chain, its size and root are
/// what is checked; a record kept beside the chain whose note is of another origin, or whose
/// JSON disagrees with its note, is named.
fn check_one(
    chain: &Chain,
    origin: Option<&str>,
    key: &VerifierKey,
    witnesses: &[VerifierKey],
    copies: &[StoredCheckpoint],
) -> SignedCheck {
    let live = chain.files.last().cloned().unwrap_or_default();
    let origin = origin_of(chain, key, origin);
    let (stored, store_error) = kept_beside(&live);
    let mut problems: Vec<String> = store_error.iter().cloned().collect();
    let (signed, cosigned) = signed_points(&stored, copies, &origin, key, witnesses, &mut problems);
    let tree = match TreeFile::open_existing(&tree::path_of(&live)) {
        Ok(tree) => Some(tree),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => {
            problems.push(format!("its tree file cannot be read: {error}"));
            None
        }
    };
    let sizes: BTreeSet<u64> = signed.keys().copied().collect();
    let mut retention_lines = Vec::new();
    let verdict = super::verify_with_roots(&chain.files, sizes, tree.as_ref(), |record, at| {
        if let Some(at) = at
            && record.pruned.is_some()
        {
            retention_lines.push((at, record));
        }
    });
    let (mut covered, mut unsigned) = (0, None);
    if let Ok(verified) = &verdict {
        let (contradicted, matched) = contradictions(&signed, verified, tree.as_ref());
        problems.extend(contradicted);
        covered = matched;
        let lines = verified.first_seq.saturating_sub(1) + verified.lines;
        if lines > covered {
            unsigned = Some((covered + 1, lines));
        }
        if signed.is_empty() {
            problems.push(none_found(&origin, key));
        }
    }
    SignedCheck {
        chain: verdict,
        origin,
        checkpoints: signed,
        cosigned,
        retention: None,
        store_error,
        problems,
        covered,
        unsigned,
        retention_lines,
    }
}

/// The checkpoints of `origin` among `stored` (kept beside the chain) and `copies` that `key`
/// signed, by size, as their notes sign them, and the largest size each of `witnesses`
/// cosigned; what is wrong with the others, when they sit beside the chain or claim it, goes
/// to `problems`.
fn signed_points(
    stored: &[StoredCheckpoint],
    copies: &[StoredCheckpoint],
    origin: &str,
    key: &VerifierKey,
    witnesses: &[VerifierKey],
    problems: &mut Vec<String>,
) -> (BTreeMap<u64, SignedPoint>, BTreeMap<String, u64>) {
    let mut signed: BTreeMap<u64, SignedPoint> = BTreeMap::new();
    let mut cosigned = BTreeMap::new();
    let candidates = stored
        .iter()
        .map(|c| (c, true))
        .chain(copies.iter().map(|c| (c, false)));
    for (candidate, beside) in candidates {
        let record = match checkpoints::verify_record(candidate, key, witnesses) {
            Ok(record) => record,
            Err(problem) if beside || candidate.origin == *origin => {
                problems.push(format!(
                    "the checkpoint record of {} lines kept at {} (an unsigned time): {problem}",
                    candidate.size, candidate.time
                ));
                continue;
            }
            Err(_) => continue,
        };
        let body = &record.checkpoint;
        if body.origin != origin {
            // A copy of another chain's checkpoint is none of this chain's business, unless
            // it sits beside this chain or its JSON claims this chain.
            if beside || candidate.origin == *origin {
                problems.push(format!(
                    "a checkpoint record kept {} at {} (an unsigned time) is not of {origin}: its signed note says {}",
                    if beside { "beside this chain" } else { "in the copies" },
                    candidate.time,
                    body.origin
                ));
            }
            continue;
        }
        for problem in &record.problems {
            problems.push(format!(
                "the checkpoint of {} lines kept at {} (an unsigned time): {problem}",
                body.size, candidate.time
            ));
        }
        problems.extend(take_point(
            &mut signed,
            &mut cosigned,
            &record,
            &candidate.time,
            &key.name,
        ));
    }
    (signed, cosigned)
}

/// That no checkpoint of `origin` signed by `key` was found, and where to look.
fn none_found(origin: &str, key: &VerifierKey) -> String {
    format!(
        "no checkpoint of {origin} signed by {} was found: the server signs one within FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL of a line; give the copies kept elsewhere with --checkpoints",
        key.name
    )
}

/// The checkpoints kept beside the chain file `live` (none when it has no checkpoints file),
/// and why they cannot be read when its file exists and cannot.
fn kept_beside(live: &Path) -> (Vec<StoredCheckpoint>, Option<String>) {
    let store = checkpoints::path_of(live);
    match checkpoints::read(&store) {
        Ok(stored) => (stored, None),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => (Vec::new(), None),
        Err(error) => (
            Vec::new(),
            Some(format!(
                "the checkpoints kept beside the chain cannot be read ({}: {error}); only the copies given with --checkpoints are checked",
                store.display()
            )),
        ),
    }
}

/// Adds a verified checkpoint of this chain to `signed` (and its witnesses to `cosigned`, the
/// largest size each cosigned); a second checkpoint of the same size with another root is the
/// fork it returns.
fn take_point(
    signed: &mut BTreeMap<u64, SignedPoint>,
    cosigned: &mut BTreeMap<String, u64>,
    record: &checkpoints::SignedRecord,
    kept_at: &str,
    key_name: &str,
) -> Option<String> {
    let body = &record.checkpoint;
    for (name, _) in &record.cosigned {
        let best = cosigned.entry(name.clone()).or_insert(0);
        *best = (*best).max(body.size);
    }
    match signed.get_mut(&body.size) {
        Some(point) if point.root != body.root => {
            return Some(format!(
                "a fork: two checkpoints of {} lines signed by {key_name} hold different roots (one kept at {}, one at {}, unsigned times); the log showed two histories",
                body.size, point.kept_at, kept_at
            ));
        }
        Some(point) => {
            for cosignature in &record.cosigned {
                if !point.cosigned.contains(cosignature) {
                    point.cosigned.push(cosignature.clone());
                }
            }
        }
        None => {
            signed.insert(
                body.size,
                SignedPoint {
                    root: body.root,
                    kept_at: kept_at.to_string(),
                    cosigned: record.cosigned.clone(),
                },
            );
        }
    }
    None
}

/// An origin the copies hold checkpoints of, signed by the key, with no chain in the folder.
#[derive(Debug)]
pub struct MissingChain {
    /// The origin, as its notes sign it.
    pub origin: String,
    /// The largest size signed of it in the copies.
    pub size: u64,
    /// The retention line that records retiring its chain whole, when one does and it
    /// covers every line signed; `None`: the chain was deleted by hand.
    pub retired: Option<String>,
}

impl MissingChain {
    /// Whether retention accounts for it.
    pub fn ok(&self) -> bool {
        self.retired.is_some()
    }
}

/// Every origin of `copies` signed by `key` that none of `checks` is, and whether a retention
/// line of the folder (`retired`, as [`check_signed_chains`] gathered it: only lines a signed
/// checkpoint of their own chain covers) records retiring its chain: `<origin's last
/// part>.jsonl` deleted whole after retention checked it against the very checkpoint the copies
/// hold as the largest signed of it (same origin, size and root).
pub fn missing_chains(
    copies: &[StoredCheckpoint],
    key: &VerifierKey,
    checks: &[SignedCheck],
    retired: &super::chain::Retired,
) -> Vec<MissingChain> {
    let mut signed: BTreeMap<String, (u64, Hash)> = BTreeMap::new();
    for copy in copies {
        if let Ok(record) = checkpoints::verify_record(copy, key, &[]) {
            let body = record.checkpoint;
            let largest = signed.entry(body.origin).or_insert((0, body.root));
            if body.size >= largest.0 {
                *largest = (body.size, body.root);
            }
        }
    }
    signed
        .into_iter()
        .filter(|(origin, _)| !checks.iter().any(|check| &check.origin == origin))
        .map(|(origin, (size, root))| {
            let name = origin.rsplit('/').next().unwrap_or(&origin);
            let retired = retired
                .whole(name, size, &BASE64.encode(root))
                .filter(|record| {
                    record
                        .dropped
                        .signed
                        .as_ref()
                        .is_some_and(|signed| signed.origin == origin)
                })
                .map(|record| record.to_string());
            MissingChain {
                origin,
                size,
                retired,
            }
        })
        .collect()
}

/// What in `signed` the trail contradicts: a checkpoint past its end (lines cut), or one
/// whose root its lines do not give (lines changed, removed or inserted), naming the range
/// between the last checkpoint it matches and that one.
fn contradictions(
    signed: &BTreeMap<u64, SignedPoint>,
    verified: &Verified,
    tree: Option<&TreeFile>,
) -> (Vec<String>, u64) {
    let lines = verified.first_seq.saturating_sub(1) + verified.lines;
    let mut matched = 0;
    let mut covered = 0;
    let mut problems = Vec::new();
    for (&size, point) in signed {
        let time = format!("kept at {}, an unsigned time", point.kept_at);
        let ours = trail_root(size, verified, tree);
        let problem = if size > lines {
            format!(
                "truncated: the checkpoint of {size} lines ({time}) covers more than the {lines} the trail holds: lines {}..{size} are gone",
                lines + 1
            )
        } else {
            match ours {
                Some(ours) if ours == point.root => {
                    matched = size;
                    covered = covered.max(size);
                    continue;
                }
                Some(_) => format!(
                    "rewritten: the checkpoint of {size} lines ({time}) does not match the trail: a line among lines {}..{size} was changed, removed or inserted since it was signed{}",
                    matched + 1,
                    fork_with(signed, size, verified, tree)
                ),
                None => format!(
                    "the checkpoint of {size} lines ({time}) cannot be checked: the trail's first lines are gone and its tree file does not hold them"
                ),
            }
        };
        problems.push(problem);
    }
    (problems, covered)
}

/// The root of the trail's first `size` lines: from its lines, or where retention deleted
/// them, from its tree file (which a signed root then vouches for).
fn trail_root(size: u64, verified: &Verified, tree: Option<&TreeFile>) -> Option<Hash> {
    if size < verified.first_seq {
        tree.and_then(|tree| tree.root(size).ok())
    } else {
        verified.roots.get(&size).copied()
    }
}

/// When a checkpoint larger than `size` matches the trail, that both were signed: the log
/// signed two histories that do not extend each other (a fork); else nothing.
fn fork_with(
    signed: &BTreeMap<u64, SignedPoint>,
    size: u64,
    verified: &Verified,
    tree: Option<&TreeFile>,
) -> String {
    let matching = signed
        .range(size + 1..)
        .find(|(larger, point)| trail_root(**larger, verified, tree) == Some(point.root));
    matching.map_or_else(String::new, |(larger, _)| {
        format!(
            "; the checkpoint of {larger} lines, signed too, matches it: a fork, two signed histories that do not extend each other"
        )
    })
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
        "tlog_proof": super::receipt::tlog_proof(index, &proof, &checkpoint.checkpoint),
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
