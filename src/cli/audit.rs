//! `file-agent audit verify` and `audit show`: the audit trail for a reviewer, without the
//! server (and without Docker).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::audit::{self, Record};

/// Checks the chain across `files` (in order: rotated files first, oldest first).
pub fn verify(files: &[PathBuf]) -> ExitCode {
    match audit::verify(files) {
        Ok(verified) => {
            println!(
                "ok: {} lines, chain unbroken; head {}",
                verified.lines, verified.head
            );
            if let Some(prev) = verified.continues_from {
                println!(
                    "note: the first line continues an earlier file (prev {prev}); pass the rotated files before it to check that link too"
                );
            }
            ExitCode::SUCCESS
        }
        Err(broken) => {
            println!("broken: {broken}");
            ExitCode::from(1)
        }
    }
}

/// Prints the last `tail` records of `file` readably, or as they are with `json`.
pub fn show(file: &PathBuf, tail: usize, json: bool) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    for line in &lines[lines.len().saturating_sub(tail)..] {
        if json {
            println!("{line}");
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(record) => println!("{}\n", audit::describe(&record)),
            Err(error) => println!("(not an audit record: {error})\n"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
