//! What the signed trail costs (issue 45): a line's append (written and synced, its leaf added
//! to the chain's tree) beside the leaf alone, signing a checkpoint, and proofs in a tree of a
//! million lines, each from the medians of many runs in one process. No Docker: the trail is
//! files.

use std::time::{Duration, Instant};

use crate::audit::merkle;
use crate::audit::note::{Checkpoint, ED25519_ALGORITHM, SignerKey};
use crate::audit::tree::TreeFile;
use crate::audit::{AuditLog, CallInfo, Record};

/// Lines appended to measure an append.
const LINES: usize = 400;
/// Leaves of the large tree.
const BIG_TREE: u64 = 1_000_000;
/// Proofs timed in the large tree.
const PROOFS: usize = 2_000;

/// The figures.
#[derive(Debug)]
pub(super) struct TrailCost {
    append: Vec<Duration>,
    leaf: Vec<Duration>,
    line_bytes: usize,
    sign: Vec<Duration>,
    build: Duration,
    tree_bytes: u64,
    inclusion: Vec<Duration>,
    consistency: Vec<Duration>,
}

/// Measures it all in a temporary folder.
pub(super) fn measure() -> anyhow::Result<TrailCost> {
    let dir = tempfile::tempdir()?;
    let (append, leaf, line_bytes) = appends(dir.path())?;
    let key = SignerKey::from_seed("bench.example/audit", &[1; 32], ED25519_ALGORITHM)?;
    let text = Checkpoint {
        origin: "bench.example/audit/chain".into(),
        size: BIG_TREE,
        root: [3; 32],
    }
    .text();
    let sign = (0..1000)
        .map(|_| timed(|| drop(std::hint::black_box(key.sign(&text)))))
        .collect();
    let path = dir.path().join("big.tree");
    let started = Instant::now();
    let mut tree = TreeFile::open(&path)?;
    for n in 0..BIG_TREE {
        tree.append(merkle::leaf_hash(&n.to_be_bytes()))?;
    }
    let build = started.elapsed();
    let tree_bytes = std::fs::metadata(&path)?.len();
    let mut inclusion = Vec::with_capacity(PROOFS);
    let mut consistency = Vec::with_capacity(PROOFS);
    let mut index = 12_345u64;
    for _ in 0..PROOFS {
        // A spread of indices and old sizes across the tree (a fixed LCG: repeatable).
        index = (index
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1))
            % BIG_TREE;
        let started = Instant::now();
        std::hint::black_box(tree.inclusion_proof(index, BIG_TREE)?);
        inclusion.push(started.elapsed());
        let started = Instant::now();
        std::hint::black_box(tree.consistency_proof(index + 1, BIG_TREE)?);
        consistency.push(started.elapsed());
    }
    Ok(TrailCost {
        append,
        leaf,
        line_bytes,
        sign,
        build,
        tree_bytes,
        inclusion,
        consistency,
    })
}

/// [`LINES`] appends of a typical attempt's line, and its leaf added to a tree alone.
fn appends(dir: &std::path::Path) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, usize)> {
    let config = crate::config::Config::from_lookup(|_| None)?.audit;
    let log = AuditLog::open(&dir.join("bench.jsonl"), config)?;
    let record = Record {
        time: crate::time::rfc3339_now(),
        caller: CallInfo {
            tool: "generate_file".into(),
            user: Some("u-1234".into()),
            ..CallInfo::default()
        },
        author: "model".into(),
        code_sha256: "ab".repeat(32),
        code: Some(include_str!("pandas_xlsxwriter.py").to_string()),
        status: "ok".into(),
        ..Record::default()
    };
    let line_bytes = serde_json::to_string(&record)?.len();
    let mut append = Vec::with_capacity(LINES);
    for _ in 0..LINES {
        let started = Instant::now();
        log.append(record.clone())?;
        append.push(started.elapsed());
    }
    let line = serde_json::to_string(&record)?;
    let mut tree = TreeFile::open(&dir.join("leaves.tree"))?;
    let mut leaf = Vec::with_capacity(LINES);
    for _ in 0..LINES {
        let started = Instant::now();
        tree.append(merkle::leaf_hash(line.as_bytes()))?;
        leaf.push(started.elapsed());
    }
    Ok((append, leaf, line_bytes))
}

fn timed(work: impl FnOnce()) -> Duration {
    let started = Instant::now();
    work();
    started.elapsed()
}

fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

fn max(samples: &[Duration]) -> Duration {
    samples.iter().max().copied().unwrap_or_default()
}

/// Prints the figures.
pub(super) fn print(cost: &TrailCost) {
    let (append, leaf) = (median(&cost.append), median(&cost.leaf));
    println!("\nsigned audit trail (medians):");
    println!(
        "  a line's append ({} bytes, written and synced): {:.1} µs; its leaf in the tree alone: {:.1} µs ({:.2} % of the append)",
        cost.line_bytes,
        micros(append),
        micros(leaf),
        100.0 * leaf.as_secs_f64() / append.as_secs_f64().max(f64::EPSILON)
    );
    println!(
        "  signing a checkpoint (Ed25519 note): {:.1} µs",
        micros(median(&cost.sign))
    );
    println!(
        "  a tree of {BIG_TREE} lines: built in {:.2} s, {} MB on disk",
        cost.build.as_secs_f64(),
        cost.tree_bytes / 1_000_000
    );
    println!(
        "  at {BIG_TREE} lines: inclusion proof {:.1} µs (max {:.1} µs), consistency proof {:.1} µs (max {:.1} µs), over {PROOFS} each",
        micros(median(&cost.inclusion)),
        micros(max(&cost.inclusion)),
        micros(median(&cost.consistency)),
        micros(max(&cost.consistency))
    );
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
