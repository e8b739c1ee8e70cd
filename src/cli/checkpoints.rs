//! `file-agent audit keygen`, `audit prove` and `audit verify --key`: the signed checkpoints
//! for a reviewer, without the server. The work is in `audit::proof`; this prints it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::audit::chain;
use crate::audit::note::{SignerKey, VerifierKey};
use crate::audit::proof;

/// Writes a new private key named `name` to `out` (refusing an existing file) and prints its
/// verifier key.
pub fn keygen(name: &str, out: &Path) -> anyhow::Result<ExitCode> {
    let (private, verifier) = SignerKey::generate(name)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| {
            format!(
                "cannot create {} (an existing key is never overwritten)",
                out.display()
            )
        })?;
    writeln!(file, "{private}").with_context(|| format!("cannot write {}", out.display()))?;
    file.sync_all()?;
    eprintln!(
        "file-agent: wrote the private key to {} (mode 0600): point FILE_AGENT_AUDIT_SIGNING_KEY_FILE at it, outside the data and audit folders. Give reviewers and witnesses the verifier key:",
        out.display()
    );
    println!("{verifier}");
    Ok(ExitCode::SUCCESS)
}

/// Prints the proof `audit prove` asks for, as JSON.
pub fn prove(
    folder: &Path,
    chain: Option<&str>,
    index: Option<u64>,
    consistency: Option<&[u64]>,
) -> anyhow::Result<ExitCode> {
    let chains = chain::chains(folder)
        .with_context(|| format!("cannot read the audit folder {}", folder.display()))?;
    let chain = proof::pick_chain(chains, chain, folder).map_err(anyhow::Error::msg)?;
    let proved = match (index, consistency) {
        (Some(index), _) => proof::inclusion(&chain, index),
        (None, Some([old, new])) => proof::consistency(&chain, *old, *new),
        _ => Err("give --index N, or --consistency OLD NEW".into()),
    }
    .map_err(anyhow::Error::msg)?;
    println!("{}", serde_json::to_string_pretty(&proved)?);
    Ok(ExitCode::SUCCESS)
}

/// `audit verify --key`: every chain under `paths` against the checkpoints signed by `key`.
pub fn verify_signed(
    paths: &[PathBuf],
    key: &str,
    witness_keys_given: &[String],
    copies: &[PathBuf],
    origin: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let key = VerifierKey::parse(key).context("--key")?;
    let witnesses = witness_keys(witness_keys_given)?;
    let kept = read_copies(copies)?;
    let chains = chains_of(paths)?;
    if chains.is_empty() {
        anyhow::bail!("no audit chain (<name>.jsonl) under the paths given");
    }
    let origin_of = |chain: &chain::Chain| {
        origin.map(|prefix| {
            let live = chain.files.last().cloned().unwrap_or_default();
            format!("{prefix}/{}", crate::audit::chain_name(&live))
        })
    };
    let (checks, retired) = proof::check_signed_chains(&chains, origin_of, &key, &witnesses, &kept);
    let missing = proof::missing_chains(&kept, &key, &checks, &retired);
    let broken = checks.iter().filter(|check| !check.ok()).count()
        + missing.iter().filter(|m| !m.ok()).count();
    let total = checks.len() + missing.len();
    if broken == 0 {
        println!(
            "ok: {total} chains, every chain unbroken and matching every checkpoint signed by {key}"
        );
    } else {
        println!(
            "broken: {broken} of {total} chains contradict the checkpoints signed by {key}, or are gone"
        );
    }
    for (chain, check) in chains.iter().zip(&checks) {
        print_signed(chain, check);
    }
    for gone in &missing {
        print_gone(gone);
    }
    Ok(if broken == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `--witness-key`, each given: the witnesses' verifier keys.
pub(super) fn witness_keys(given: &[String]) -> anyhow::Result<Vec<VerifierKey>> {
    given
        .iter()
        .map(|k| VerifierKey::parse(k).context("--witness-key"))
        .collect()
}

/// The checkpoint records of the copies kept elsewhere (`--checkpoints`): shipped logs,
/// checkpoints files, users' receipt files.
fn read_copies(
    copies: &[PathBuf],
) -> anyhow::Result<Vec<crate::audit::checkpoints::StoredCheckpoint>> {
    let mut kept = Vec::new();
    for copy in copies {
        kept.extend(
            crate::audit::receipt::read_copy(copy)
                .with_context(|| format!("cannot read the checkpoints in {}", copy.display()))?,
        );
    }
    Ok(kept)
}

/// The chains of a folder given alone, or the one chain the files given make.
fn chains_of(paths: &[PathBuf]) -> anyhow::Result<Vec<chain::Chain>> {
    Ok(match paths {
        [folder] if folder.is_dir() => chain::chains(folder)
            .with_context(|| format!("cannot read the audit folder {}", folder.display()))?,
        files => vec![chain::Chain {
            name: files
                .last()
                .map(|f| f.display().to_string())
                .unwrap_or_default(),
            files: files.to_vec(),
        }],
    })
}

/// One origin of the copies with no chain in the folder: retired by a signed retention line,
/// or deleted by hand.
fn print_gone(gone: &proof::MissingChain) {
    match &gone.retired {
        Some(retired) => println!(
            "  {}: retired, {} lines signed: {retired}",
            gone.origin, gone.size
        ),
        None => println!(
            "  {}: broken: the copies hold checkpoints of it up to {} lines, but the folder holds no chain of it and no signed retention line records retiring it: it was deleted by hand",
            gone.origin, gone.size
        ),
    }
}

/// One chain's verdict against its checkpoints. Times kept beside a note are not signed and
/// say so; the witnesses' times are those their cosignatures sign.
fn print_signed(chain: &chain::Chain, check: &proof::SignedCheck) {
    let verified = match &check.chain {
        Ok(verified) => verified,
        Err(broken) => {
            println!("  {}: broken: {broken}", chain.name);
            for problem in &check.problems {
                println!("    {problem}");
            }
            return;
        }
    };
    let lines = verified.first_seq.saturating_sub(1) + verified.lines;
    let verdict = if check.problems.is_empty() {
        "ok"
    } else {
        "broken"
    };
    println!(
        "  {}: {verdict}, {lines} lines, origin {}",
        chain.name, check.origin
    );
    for problem in &check.problems {
        println!("    {problem}");
    }
    if let Some((size, point)) = check.checkpoints.last_key_value() {
        use base64::Engine;
        let cosigned = if point.cosigned.is_empty() {
            String::new()
        } else {
            format!(
                ", cosigned by {}",
                crate::audit::checkpoints::describe_cosigned(&point.cosigned)
            )
        };
        println!(
            "    {} checkpoints signed; the latest covers {size} lines (root {}{cosigned}; kept at {}, an unsigned time){}",
            check.checkpoints.len(),
            base64::engine::general_purpose::STANDARD.encode(point.root),
            point.kept_at,
            if lines > *size {
                format!("; lines {}..{lines} were written since", size + 1)
            } else {
                String::new()
            }
        );
    }
    for (witness, size) in &check.cosigned {
        println!("    witnessed by {witness}: up to {size} lines");
    }
    if let Some(retention) = &check.retention {
        println!("    {retention}");
    }
    if let Some((first, last)) = check.unsigned {
        println!(
            "    note: lines {first}..{last} are covered by no signed checkpoint: they prove nothing (no retention, no age); a running server signs its newest lines within FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL, a stopped one never will: then they were written after its last checkpoint, or by hand"
        );
    }
    for trace in &verified.crash_traces {
        println!("    crash: {trace}");
    }
}
