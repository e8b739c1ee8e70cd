//! The audit folder as a set of chains. Each server writes its own chain, `<name>.jsonl`, and
//! rotation leaves `<name>.jsonl.<last seq, 12 digits>` beside it; a trail from before
//! per-server chains (`audit.jsonl` in the data folder) is one chain among the others. This
//! module finds the chains under a folder and verifies each on its own: lines from two
//! servers are never linked to each other, so no interleaving can look like tampering.
//!
//! It reads only; it never repairs or reorders a file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::pruned::DroppedFile;
use super::{Broken, CHAIN_SUFFIX, Record, Verified};

/// One chain: its files in chain order (rotated ones oldest first, then the live one).
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    /// How a reviewer finds it: the live file's path relative to the folder given
    /// (`audit/fa-1234.jsonl`, `audit.jsonl`).
    pub name: String,
    /// Its files, in order.
    pub files: Vec<PathBuf>,
}

/// What [`verify_all`] found for one chain.
#[derive(Debug)]
pub struct ChainCheck {
    /// The chain.
    pub chain: Chain,
    /// Its verdict: broken too when its first lines are gone and no retention line records
    /// deleting them.
    pub result: Result<Verified, Broken>,
    /// When its first lines are gone, the retention line that records deleting them, in words.
    pub retention: Option<String>,
}

/// What retention recorded deleting, read from the retention lines of every chain in a folder
/// (a server records what it deleted in its own chain, whichever chain the files were of):
/// the only thing that accounts for a chain whose first lines are gone, or for a chain gone
/// whole.
#[derive(Debug, Default, Clone)]
pub struct Retired {
    /// By the hex SHA-256 of each deleted file's last line.
    by_last_hash: HashMap<String, RetiredFile>,
}

/// One audit file a retention line records deleting.
#[derive(Debug, Clone, PartialEq)]
pub struct RetiredFile {
    /// What the line says of it.
    pub dropped: DroppedFile,
    /// The chain holding the retention line (its name, as [`Chain::name`]).
    pub chain: String,
    /// The retention line's position in that chain, as the verifier accepted it (never the
    /// `seq` it claims).
    pub seq: u64,
    /// The retention line's time.
    pub time: String,
}

impl std::fmt::Display for RetiredFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (lines up to #{}) deleted whole by retention, recorded by line #{} of {} at {}",
            self.dropped.file, self.dropped.last_seq, self.seq, self.chain, self.time
        )
    }
}

impl Retired {
    /// Notes what `record`, a line of `chain` at `position` in it, records deleting, if it is
    /// a retention line. The caller vouches for the line: only a line the verifier accepted
    /// at that position (and, with a key, one a signed checkpoint covers there) is evidence.
    pub fn note(&mut self, chain: &Chain, record: &Record, position: u64) {
        for dropped in record.pruned.iter().flat_map(|p| &p.audit_files) {
            self.by_last_hash.insert(
                dropped.last_hash.clone(),
                RetiredFile {
                    dropped: dropped.clone(),
                    chain: chain.name.clone(),
                    seq: position,
                    time: record.time.clone(),
                },
            );
        }
    }

    /// Why the lines before `verified`'s first line of `chain` are gone: `Ok(None)` when none
    /// are, `Ok(Some(words))` when a retention line records deleting them (the file it names
    /// is of this chain, its last line's hash is the first line's `prev`, and its last `seq`
    /// is the one before the first line's); otherwise `Err`, naming the lines deleted by hand.
    pub fn account(&self, chain: &Chain, verified: &Verified) -> Result<Option<String>, String> {
        let Some(prev) = &verified.continues_from else {
            return Ok(None);
        };
        let gone = verified.first_seq.saturating_sub(1);
        if gone == 0 {
            return Err(
                "its first line, #1, does not start from the genesis: lines were put before it"
                    .into(),
            );
        }
        let live = chain
            .files
            .last()
            .and_then(|f| f.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match self.by_last_hash.get(prev) {
            Some(retired)
                if retired.dropped.last_seq == gone && of_chain(&retired.dropped.file, &live) =>
            {
                Ok(Some(format!(
                    "lines 1..{gone} were deleted by retention: {retired}; the tree file stands in for them"
                )))
            }
            _ => Err(format!(
                "lines 1..{gone} are gone and no retention line records deleting them (the first line left, #{}, continues from a line no retention line names): they were deleted by hand, or the files holding them were not given",
                verified.first_seq
            )),
        }
    }

    /// The retention record of the chain `name`'s live file, `<name>.jsonl`, deleted whole
    /// (the chain retired) after retention checked it against its signed checkpoint of `size`
    /// lines and root `root` (base64): the record must name that very root, so that a record
    /// of another chain, or of another history of this one, retires nothing.
    pub fn whole(&self, name: &str, size: u64, root: &str) -> Option<&RetiredFile> {
        let live = format!("{name}{CHAIN_SUFFIX}");
        self.by_last_hash.values().find(|retired| {
            retired.dropped.file == live
                && retired
                    .dropped
                    .signed
                    .as_ref()
                    .is_some_and(|signed| signed.size == size && signed.root == root)
                && retired.dropped.last_seq >= size
        })
    }
}

/// Whether the audit file `file` is one of the chain whose live file is named `live`.
fn of_chain(file: &str, live: &str) -> bool {
    file == live
        || file
            .strip_prefix(live)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The chains of `path`: the files given as one chain when `path` is a file; when it is a
/// folder, the chains in it and in its `audit/` subfolder (so both the data folder and the
/// audit folder can be given). Sorted by name.
pub fn chains(path: &Path) -> std::io::Result<Vec<Chain>> {
    if !path.is_dir() {
        // Reading it proves it exists; the error names it otherwise.
        std::fs::metadata(path)?;
        return Ok(vec![Chain {
            name: path.display().to_string(),
            files: vec![path.to_path_buf()],
        }]);
    }
    let mut found = chains_in(path, "")?;
    let sub = path.join(crate::config::DEFAULT_AUDIT_FOLDER);
    if sub.is_dir() {
        found.extend(chains_in(&sub, "audit/")?);
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// The chains whose files lie directly in `folder`, named `<prefix><name>.jsonl`.
fn chains_in(folder: &Path, prefix: &str) -> std::io::Result<Vec<Chain>> {
    let mut by_name: std::collections::BTreeMap<String, Vec<(u64, PathBuf)>> = Default::default();
    for entry in std::fs::read_dir(folder)? {
        // Whatever bears a chain file's name is one, a link, a FIFO or a folder too: the door
        // refuses to read it, and the chain's verdict names it, instead of it going unseen.
        let entry = entry?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some((name, order)) = chain_part(&file_name) else {
            continue;
        };
        by_name
            .entry(name.to_string())
            .or_default()
            .push((order, entry.path()));
    }
    Ok(by_name
        .into_iter()
        .map(|(name, mut files)| {
            files.sort();
            Chain {
                name: format!("{prefix}{name}{CHAIN_SUFFIX}"),
                files: files.into_iter().map(|(_, path)| path).collect(),
            }
        })
        .collect())
}

/// `x.jsonl` → (`x`, last); `x.jsonl.000000001234` → (`x`, 1234); anything else (the lock
/// files, the side files of a recovery, `x.jsonl.torn-<seq>`, notes a reviewer left) → `None`.
fn chain_part(file_name: &str) -> Option<(&str, u64)> {
    if let Some(name) = file_name.strip_suffix(CHAIN_SUFFIX) {
        return (!name.is_empty()).then_some((name, u64::MAX));
    }
    let (stem, number) = file_name.rsplit_once('.')?;
    let name = stem.strip_suffix(CHAIN_SUFFIX)?;
    let valid =
        !name.is_empty() && !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
    valid.then(|| (name, number.parse().unwrap_or(u64::MAX - 1)))
}

/// The files of the chain whose live file is `live`, in chain order: its rotated files oldest
/// first, then `live` itself (when it exists).
pub fn files_of(live: &Path) -> std::io::Result<Vec<PathBuf>> {
    let live_name = live
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let folder = live.parent().filter(|p| !p.as_os_str().is_empty());
    let mut rotated: Vec<(u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(folder.unwrap_or_else(|| Path::new(".")))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let number = name
            .strip_prefix(&live_name)
            .and_then(|rest| rest.strip_prefix('.'))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(number) = number {
            rotated.push((number, entry.path()));
        }
    }
    rotated.sort();
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, path)| path).collect();
    if live.exists() {
        files.push(live.to_path_buf());
    }
    Ok(files)
}

/// The newest rotated file of the chain whose live file is `live`: the highest-numbered
/// `<live file name>.<digits>` beside it. The chain continues from its last line when the live
/// file holds none yet (a crash right after a rotation).
pub fn newest_rotated(live: &Path) -> std::io::Result<Option<PathBuf>> {
    let mut files = files_of(live)?;
    if files.last().is_some_and(|last| last == live) {
        files.pop();
    }
    Ok(files.pop())
}

/// Verifies every chain on its own, and accounts for every chain whose first lines are gone
/// with the retention lines of all of them ([`Retired::account`]): one that no retention
/// line accounts for is broken, at its first line. Without a key only lines the verifier
/// accepted count (whole, chained, before any break): they are as trustworthy as the folder,
/// which is why `audit verify --key` counts only what a signed checkpoint covers.
pub fn verify_all(chains: Vec<Chain>) -> Vec<ChainCheck> {
    let mut retired = Retired::default();
    let results: Vec<(Chain, Result<Verified, Broken>)> = chains
        .into_iter()
        .map(|chain| {
            let result = super::verify_each(&chain.files, |record, position| {
                if let Some(position) = position {
                    retired.note(&chain, &record, position);
                }
            });
            (chain, result)
        })
        .collect();
    results
        .into_iter()
        .map(|(chain, result)| {
            let (result, retention) = accounted(&chain, result, &retired);
            ChainCheck {
                chain,
                result,
                retention,
            }
        })
        .collect()
}

/// `result` with its missing first lines accounted for by `retired`: the words that account
/// for them, or a break at the chain's first line that names them.
pub fn accounted(
    chain: &Chain,
    result: Result<Verified, Broken>,
    retired: &Retired,
) -> (Result<Verified, Broken>, Option<String>) {
    let Ok(verified) = result else {
        return (result, None);
    };
    match retired.account(chain, &verified) {
        Ok(retention) => (Ok(verified), retention),
        Err(problem) => (
            Err(Broken {
                file: chain
                    .files
                    .first()
                    .map(|f| f.display().to_string())
                    .unwrap_or_default(),
                line: 1,
                problem,
            }),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_files_are_grouped_by_name_in_rotation_order() {
        assert_eq!(chain_part("fa-1.jsonl"), Some(("fa-1", u64::MAX)));
        assert_eq!(chain_part("fa-1.jsonl.000000000012"), Some(("fa-1", 12)));
        assert_eq!(chain_part("fa-1.jsonl.lock"), None);
        assert_eq!(chain_part("fa-1.jsonl.torn-000000000012"), None);
        assert_eq!(chain_part("fa-1.jsonl.torn-000000000012-1"), None);
        assert_eq!(chain_part("notes.txt"), None);
        assert_eq!(chain_part(".jsonl"), None);

        let data = tempfile::tempdir().unwrap();
        let folder = data.path().join("audit");
        std::fs::create_dir(&folder).unwrap();
        for file in [
            "audit.jsonl",
            "audit.jsonl.000000000009",
            "audit/b.jsonl",
            "audit/b.jsonl.000000000100",
            "audit/b.jsonl.000000000020",
            "audit/b.jsonl.lock",
            "audit/a.jsonl",
        ] {
            std::fs::write(data.path().join(file), "").unwrap();
        }
        let found = chains(data.path()).unwrap();
        let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["audit.jsonl", "audit/a.jsonl", "audit/b.jsonl"]);
        let b: Vec<String> = found[2]
            .files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            b,
            ["b.jsonl.000000000020", "b.jsonl.000000000100", "b.jsonl"]
        );
        // The audit folder itself, given directly.
        assert_eq!(chains(&folder).unwrap().len(), 2);
    }

    #[test]
    fn a_missing_prefix_is_retention_only_where_a_retention_line_proves_it() {
        let chain = Chain {
            name: "audit/b.jsonl".into(),
            files: vec![PathBuf::from("/x/audit/b.jsonl")],
        };
        let verified = Verified {
            lines: 2,
            continues_from: Some("ab".repeat(32)),
            head: String::new(),
            roots: Default::default(),
            first_seq: 5,
            crash_traces: Vec::new(),
            frontier: None,
        };
        let mut retired = Retired::default();
        let by_hand = retired.account(&chain, &verified).unwrap_err();
        assert!(by_hand.contains("lines 1..4 are gone"), "{by_hand}");
        let line = |file: &str, last_seq: u64| Record {
            seq: 9,
            time: "t".into(),
            pruned: Some(super::super::pruned::Pruned {
                audit_files: vec![DroppedFile {
                    file: file.into(),
                    last_seq,
                    last_hash: "ab".repeat(32),
                    last_time: "t".into(),
                    signed: None,
                }],
                ..Default::default()
            }),
            ..Record::default()
        };
        // Another chain's file, or sequence numbers that do not meet: not proof.
        retired.note(&chain, &line("a.jsonl.000000000004", 4), 9);
        assert!(retired.account(&chain, &verified).is_err());
        retired.note(&chain, &line("b.jsonl.000000000003", 3), 9);
        assert!(retired.account(&chain, &verified).is_err());
        retired.note(&chain, &line("b.jsonl.000000000004", 4), 9);
        let proved = retired.account(&chain, &verified).unwrap().unwrap();
        assert!(proved.contains("deleted by retention"), "{proved}");
    }
}
