//! The audit folder as a set of chains. Each server writes its own chain, `<name>.jsonl`, and
//! rotation leaves `<name>.jsonl.<last seq, 12 digits>` beside it; a trail from before
//! per-server chains (`audit.jsonl` in the data folder) is one chain among the others. This
//! module finds the chains under a folder and verifies each on its own: lines from two
//! servers are never linked to each other, so no interleaving can look like tampering.
//!
//! It reads only; it never repairs or reorders a file.

use std::path::{Path, PathBuf};

use super::{Broken, CHAIN_SUFFIX, Verified};

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
    /// Its verdict.
    pub result: Result<Verified, Broken>,
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
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
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

/// Verifies every chain on its own.
pub fn verify_all(chains: Vec<Chain>) -> Vec<ChainCheck> {
    chains
        .into_iter()
        .map(|chain| ChainCheck {
            result: super::verify(&chain.files),
            chain,
        })
        .collect()
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
}
