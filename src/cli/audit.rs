//! `file-agent audit verify`, `audit show` and `audit report`: the audit trail for a
//! reviewer, without the server (and without Docker). Each takes the data folder or the
//! audit folder (every chain in it, rotated files included) or, as before, files. And
//! `audit verify-receipt`: a receipt a user saved, checked against the log's key alone.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::audit::chain::{self, Chain};
use crate::audit::note::VerifierKey;
use crate::audit::{self, Record, receipt};
use crate::report::{self, Filter};
use crate::untrusted::door;

/// Checks the chain across `files` (in order: rotated files first, oldest first), or, given
/// one folder, every chain in it, each on its own. What crashes left (an unfinished line cut
/// at start-up and recorded, or one not cut yet) is printed as `crash:` lines and does not
/// make a chain broken.
pub fn verify(paths: &[PathBuf]) -> anyhow::Result<ExitCode> {
    if let [folder] = paths
        && folder.is_dir()
    {
        return verify_folder(folder);
    }
    Ok(match audit::verify(paths) {
        Ok(verified) => {
            println!(
                "ok: {} lines, chain unbroken; head {}",
                verified.lines, verified.head
            );
            if let Some(prev) = &verified.continues_from {
                println!(
                    "note: the first line continues an earlier file (prev {prev}); pass the rotated files before it to check that link too"
                );
            }
            for trace in &verified.crash_traces {
                println!("crash: {trace}");
            }
            ExitCode::SUCCESS
        }
        Err(broken) => {
            println!("broken: {broken}");
            ExitCode::from(1)
        }
    })
}

fn verify_folder(folder: &Path) -> anyhow::Result<ExitCode> {
    let chains = chain::chains(folder)
        .with_context(|| format!("cannot read the audit folder {}", folder.display()))?;
    if chains.is_empty() {
        anyhow::bail!(
            "{} holds no audit chain (<name>.jsonl); give the data folder, its audit/ folder, or the files",
            folder.display()
        );
    }
    let checks = chain::verify_all(chains);
    let broken = checks.iter().filter(|c| c.result.is_err()).count();
    let lines: u64 = checks
        .iter()
        .filter_map(|c| c.result.as_ref().ok())
        .map(|v| v.lines)
        .sum();
    if broken == 0 {
        println!(
            "ok: {} chains, {lines} lines, every chain unbroken",
            checks.len()
        );
    } else {
        println!("broken: {broken} of {} chains", checks.len());
    }
    for check in &checks {
        print_chain_check(check);
    }
    Ok(if broken == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One chain's verdict: its lines, files and head, what it continues, what crashes left; or
/// where it breaks.
fn print_chain_check(check: &chain::ChainCheck) {
    let verified = match &check.result {
        Ok(verified) => verified,
        Err(error) => return println!("  {}: broken: {error}", check.chain.name),
    };
    println!(
        "  {}: ok, {} lines in {} files; head {}",
        check.chain.name,
        verified.lines,
        check.chain.files.len(),
        verified.head
    );
    if let Some(retention) = &check.retention {
        println!("    note: {retention}");
    }
    for trace in &verified.crash_traces {
        println!("    crash: {trace}");
    }
}

/// Prints the last `tail` records under `path` that pass `filter`, oldest first, readably
/// or as stored with `json`. With several chains, records are ordered by time and each is
/// prefixed with its chain.
pub fn show(path: &Path, tail: usize, json: bool, filter: &Filter) -> anyhow::Result<ExitCode> {
    let chains: Vec<Chain> =
        chain::chains(path).with_context(|| format!("cannot read {}", path.display()))?;
    let many = chains.len() > 1;
    for (_, index, _, line) in newest_lines(&chains, tail, filter)? {
        if json {
            println!("{line}");
            continue;
        }
        if many {
            println!("[{}]", chains[index].name);
        }
        match serde_json::from_str::<Record>(&line) {
            Ok(record) => println!("{}\n", audit::describe(&record)),
            Err(error) => println!("(not an audit record: {error})\n"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// (time, chain, line number, line) of the newest `tail` lines of `chains` that pass
/// `filter`, oldest first; memory holds `tail` lines, never the trail.
fn newest_lines(
    chains: &[Chain],
    tail: usize,
    filter: &Filter,
) -> anyhow::Result<std::collections::BTreeSet<(String, usize, u64, String)>> {
    let mut kept: std::collections::BTreeSet<(String, usize, u64, String)> = Default::default();
    for (index, chain) in chains.iter().enumerate() {
        let mut number = 0;
        for file in &chain.files {
            let mut lines = door::Lines::open(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            while let Some(read) = lines.next_line() {
                let read = read.with_context(|| format!("cannot read {}", file.display()))?;
                number += 1;
                let line = match read {
                    door::Line::Whole(line) => String::from_utf8_lossy(line).into_owned(),
                    // Not lines of the chain (`audit verify` names them): not shown.
                    door::Line::Unfinished(_) | door::Line::TooLong => continue,
                };
                if line.trim().is_empty() {
                    continue;
                }
                let time = match serde_json::from_str::<Record>(&line) {
                    Ok(record) if !filter.admits(&record) => continue,
                    Ok(record) => record.time,
                    // Not a record: shown (as such) unless a filter asks for something.
                    Err(_) if filter_set(filter) => continue,
                    Err(_) => String::new(),
                };
                kept.insert((time, index, number, line));
                if kept.len() > tail {
                    kept.pop_first();
                }
            }
        }
    }
    Ok(kept)
}

/// The report as HTML, written to `out` (and a line saying so) or printed.
fn write_page(
    report: &report::Report,
    out: Option<&Path>,
    started: std::time::Instant,
) -> anyhow::Result<()> {
    let page = report::html::render(report);
    let Some(out) = out else {
        print!("{page}");
        return Ok(());
    };
    std::fs::write(out, &page).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!(
        "file-agent: wrote {} ({} KiB, {} attempts, {} chains) in {:.1} s",
        out.display(),
        page.len() / 1024,
        report.summary.attempts,
        report.integrity.chains.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn filter_set(filter: &Filter) -> bool {
    filter.since.is_some()
        || filter.until.is_some()
        || filter.user.is_some()
        || filter.tool.is_some()
}

/// Writes the report of `path` to `out` (HTML) or prints it as JSON. Exit 1 when a chain is
/// broken, so that a script running it cannot miss that either.
pub fn report(
    path: &Path,
    filter: &Filter,
    out: Option<&Path>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let report = report::gather(path, filter);
    if json {
        serde_json::to_writer(std::io::stdout().lock(), &report)?;
        println!();
    } else {
        write_page(&report, out, started)?;
    }
    if report.integrity.intact {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("file-agent: the audit trail is BROKEN; the report's first section says where");
        Ok(ExitCode::from(1))
    }
}

/// The longest key file `--key` reads.
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// `--key`: a verifier key as written, or a file holding one.
fn verifier_key(given: &str) -> anyhow::Result<VerifierKey> {
    let parsed = VerifierKey::parse(given);
    let path = Path::new(given);
    // Whatever is there by that name is read through the door, which names a FIFO or a link.
    if parsed.is_ok() || std::fs::symlink_metadata(path).is_err() {
        return parsed
            .context("--key (a verifier key <name>+<id>+<base64>, or a file holding one)");
    }
    let text = read_text_within(path, MAX_KEY_FILE_BYTES, "the --key file")?;
    VerifierKey::parse(text.trim()).with_context(|| format!("--key: the key in {}", path.display()))
}

/// The text of `path`, read through the door's bounded reader (a regular file, no link
/// followed, never blocking: a FIFO or a device given by mistake is refused at once), refused
/// past `limit` bytes; `role` names the file in a refusal ("the receipt file").
fn read_text_within(path: &Path, limit: u64, role: &str) -> anyhow::Result<String> {
    let bytes = door::read_within(path, role, limit)
        .with_context(|| format!("cannot read {role} {}", path.display()))?;
    String::from_utf8(bytes)
        .with_context(|| format!("cannot read {role} {} as text", path.display()))
}

/// `audit verify-receipt`: each receipt in `file` against `key` (and `line`, `witnesses`).
pub fn verify_receipt(
    file: &Path,
    key: &str,
    line: Option<&Path>,
    witnesses: &[String],
    origin: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let key = verifier_key(key)?;
    let witnesses = super::checkpoints::witness_keys(witnesses)?;
    let text = read_text_within(file, receipt::MAX_RECEIPT_FILE_BYTES, "the receipt file")?;
    let (entries, line) = if text.starts_with(receipt::TLOG_PROOF_HEADER) {
        let Some(path) = line else {
            anyhow::bail!(
                "{} is a c2sp.org/tlog-proof, which carries no leaf data: give the audit line with --line FILE",
                file.display()
            );
        };
        let line = read_receipt_line(path)?;
        let entry =
            receipt::from_tlog_proof(&text, &line).with_context(|| file.display().to_string())?;
        (vec![entry], Some(line))
    } else {
        let value: serde_json::Value = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not JSON: save the result's _meta as it came (or a receipt's tlog_proof text)",
                file.display()
            )
        })?;
        let entries = receipt::entries(value).with_context(|| file.display().to_string())?;
        let line = match line {
            Some(_) if entries.len() > 1 => anyhow::bail!(
                "{} holds {} receipts: --line checks one; save the receipt of that line alone",
                file.display(),
                entries.len()
            ),
            Some(path) => Some(read_receipt_line(path)?),
            None => None,
        };
        (entries, line)
    };
    let mut failed = 0;
    for (number, entry) in entries.iter().enumerate() {
        let which = format!(
            "receipt {} (line {} of {})",
            number + 1,
            entry.leaf_index + 1,
            audit::printable(&entry.origin)
        );
        match receipt::verify(entry, &key, origin, line.as_deref(), &witnesses) {
            Ok(proved) => print_proved(&which, &proved, &key, entry, line.as_deref()),
            Err(error) => {
                failed += 1;
                println!("failed: {which}: {}", audit::printable(&error.to_string()));
            }
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The audit line of `--line`, as the trail reads one: its bytes less the line break (`\n`
/// or `\r\n`).
fn read_receipt_line(path: &Path) -> anyhow::Result<Vec<u8>> {
    let text = read_text_within(path, receipt::MAX_RECEIPT_FILE_BYTES, "the --line file")?;
    Ok(door::without_line_break(text.as_bytes()).to_vec())
}

/// What one receipt proved, and what its line says.
fn print_proved(
    which: &str,
    proved: &receipt::Proved,
    key: &VerifierKey,
    entry: &receipt::Entry,
    line: Option<&[u8]>,
) {
    let cosigned = if proved.cosigned_by.is_empty() {
        String::new()
    } else {
        format!("; cosigned by {}", proved.cosigned_by.join(", "))
    };
    let checked = if proved.line_checked {
        "its line hashes to the leaf"
    } else {
        "the line itself was not given (--line FILE): only its leaf hash is proved"
    };
    println!(
        "ok: {which} is in the checkpoint of {} lines signed by {}; {checked}{cosigned}",
        proved.tree_size,
        key.encoded()
    );
    let shown = line
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .or_else(|| entry.line.clone());
    if let Some(record) = shown.and_then(|l| serde_json::from_str::<Record>(&l).ok()) {
        for text in audit::describe(&record).lines() {
            println!("  {text}");
        }
    }
}
