//! The bench's signed-receipts case (issue 55): what `FILE_AGENT_AUDIT_RECEIPTS=signed` adds to
//! a call. Two servers in this process sign checkpoints with the same kind of key (made here, in
//! a folder of its own), one answering with `line` receipts (as before), one with `signed`; a
//! short `run_python` call is timed on each in alternating rounds, from a settled pool, so both
//! see the same load: the added latency of a call alone. Then bursts of [`BURST_CALLS`] calls at
//! once on each: the added latency under load, and the calls per signature, counted from the
//! checkpoints (their sizes) the signed receipts carry.

use std::collections::BTreeSet;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use anyhow::Context as _;

use super::mcp::McpServer;
use super::owned::Owned;
use crate::audit::note::SignerKey;
use crate::audit::receipt::{Entry, META_KEY};

/// The script timed: what is added does not depend on it, so a short one.
const SCRIPT: &str = "print('receipt')";
/// Bursts of concurrent calls on each server.
const BURSTS: usize = 3;
/// Calls at once in a burst (each server runs as many at a time, each in a warm container, so
/// that they end together: what batching is for).
const BURST_CALLS: usize = 6;
/// `FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL` of both servers, in seconds.
const INTERVAL_SECS: u64 = 1;

/// What the receipts case measured.
#[derive(Debug, Default)]
pub(super) struct ReceiptsCost {
    /// Calls alone with `line` receipts, one per round.
    pub line: Vec<Duration>,
    /// The same with `signed` receipts.
    pub signed: Vec<Duration>,
    /// Calls in bursts with `line` receipts.
    pub line_burst: Vec<Duration>,
    /// The same with `signed` receipts.
    pub signed_burst: Vec<Duration>,
    /// Calls at once in a burst.
    pub burst: usize,
    /// Signed receipts that carried a checkpoint, and the checkpoints (sizes) among them.
    pub proved: usize,
    pub checkpoints: usize,
    /// Signed receipts that came unsigned.
    pub unsigned: usize,
    /// The batching window.
    pub window: Duration,
}

/// The two servers compared, `line` and `signed` receipts, signing with a key written in
/// `keys`.
async fn servers(
    owned: &Owned,
    instance: &str,
    keys: &std::path::Path,
) -> anyhow::Result<(McpServer, McpServer)> {
    let key = keys.join("bench-audit.key");
    let (private, _) = SignerKey::generate("bench.file-agent.test/audit")?;
    std::io::Write::write_all(
        &mut std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key)?,
        private.as_bytes(),
    )?;
    let settings = |mode: &str| {
        vec![
            (
                "FILE_AGENT_AUDIT_SIGNING_KEY_FILE",
                key.display().to_string(),
            ),
            (
                "FILE_AGENT_AUDIT_CHECKPOINT_INTERVAL",
                INTERVAL_SECS.to_string(),
            ),
            ("FILE_AGENT_AUDIT_RECEIPTS", mode.to_string()),
            // A folder of the server's own, whatever the environment names.
            ("FILE_AGENT_AUDIT_DIR", String::new()),
            // A burst runs at once.
            ("FILE_AGENT_MAX_CONCURRENT", BURST_CALLS.to_string()),
        ]
    };
    let mut started = Vec::new();
    for mode in ["line", "signed"] {
        let name = format!("{instance}-{mode}");
        started.push(McpServer::start_with(owned, &name, BURST_CALLS, &settings(mode)).await?);
    }
    let signed = started.pop().context("no signed server")?;
    let line = started.pop().context("no line server")?;
    Ok((line, signed))
}

/// `rounds` rounds of a call alone on each server (in turn first), after one of each that is
/// not counted, then [`BURSTS`] bursts of [`BURST_CALLS`] calls on each.
pub(super) async fn measure(
    owned: &Owned,
    instance: &str,
    rounds: usize,
) -> anyhow::Result<ReceiptsCost> {
    eprintln!("file-agent bench: run_python over MCP, line and signed receipts");
    let keys = tempfile::tempdir()?;
    let (line, signed) = servers(owned, instance, keys.path()).await?;
    let mut cost = ReceiptsCost {
        burst: BURST_CALLS,
        window: crate::audit::receipt::MAX_BATCH_WINDOW.min(Duration::from_secs(INTERVAL_SECS)),
        ..ReceiptsCost::default()
    };
    for round in 0..=rounds {
        let signed_first = round % 2 == 1;
        let first = alone(if signed_first { &signed } else { &line }).await?;
        let second = alone(if signed_first { &line } else { &signed }).await?;
        let ((line_call, _), (signed_call, entries)) = if signed_first {
            (second, first)
        } else {
            (first, second)
        };
        if round > 0 {
            cost.line.push(line_call);
            cost.signed.push(signed_call);
            cost.unsigned += entries.iter().filter(|e| e.unsigned.is_some()).count();
        }
    }
    let mut sizes = BTreeSet::new();
    for _ in 0..BURSTS {
        cost.line_burst
            .extend(burst(&line).await?.into_iter().map(|(d, _)| d));
        for (took, entries) in burst(&signed).await? {
            cost.signed_burst.push(took);
            for entry in entries {
                match entry.tree_size {
                    Some(size) => {
                        cost.proved += 1;
                        sizes.insert(size);
                    }
                    None => cost.unsigned += 1,
                }
            }
        }
    }
    cost.checkpoints = sizes.len();
    line.stop().await;
    signed.stop().await;
    Ok(cost)
}

/// One call from a settled pool: its round trip and its receipts.
async fn alone(server: &McpServer) -> anyhow::Result<(Duration, Vec<Entry>)> {
    server.settle().await;
    call(server).await
}

/// [`BURST_CALLS`] calls at once, from a settled pool.
async fn burst(server: &McpServer) -> anyhow::Result<Vec<(Duration, Vec<Entry>)>> {
    server.settle().await;
    futures_util::future::join_all((0..BURST_CALLS).map(|_| call(server)))
        .await
        .into_iter()
        .collect()
}

async fn call(server: &McpServer) -> anyhow::Result<(Duration, Vec<Entry>)> {
    let (took, result) = server.call_python(SCRIPT).await?;
    let entries = result
        .meta
        .as_ref()
        .and_then(|meta| meta.0.get(META_KEY))
        .cloned()
        .context("a bench call's result carries no receipts")?;
    Ok((took, serde_json::from_value(entries)?))
}

/// Prints the figures: medians, the added latency (goal: under one window) and the calls per
/// signature.
pub(super) fn print(cost: &ReceiptsCost) {
    let median = |values: &[Duration]| {
        let mut sorted = values.to_vec();
        sorted.sort();
        sorted.get(sorted.len() / 2).copied().unwrap_or_default()
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let added = |signed: Duration, line: Duration| ms(signed) - ms(line);
    let (line, signed) = (median(&cost.line), median(&cost.signed));
    let (line_burst, signed_burst) = (median(&cost.line_burst), median(&cost.signed_burst));
    println!(
        "\nsigned receipts (FILE_AGENT_AUDIT_RECEIPTS), run_python over MCP, warm, p50 (ms); batching window {:.0} ms",
        ms(cost.window)
    );
    println!("{:<38}{:>10.1}", "a call alone, line receipts", ms(line));
    println!(
        "{:<38}{:>10.1}",
        "a call alone, signed receipts",
        ms(signed)
    );
    println!(
        "{:<38}{:>10.1}",
        "added per call alone",
        added(signed, line)
    );
    println!(
        "{:<38}{:>10.1}",
        format!("{} at once, line receipts", cost.burst),
        ms(line_burst)
    );
    println!(
        "{:<38}{:>10.1}",
        format!("{} at once, signed receipts", cost.burst),
        ms(signed_burst)
    );
    println!(
        "{:<38}{:>10.1}",
        "added per call under load",
        added(signed_burst, line_burst)
    );
    println!(
        "bursts: {} signed receipts in {} checkpoints: {:.1} calls per signature; {} unsigned",
        cost.proved,
        cost.checkpoints,
        cost.proved as f64 / cost.checkpoints.max(1) as f64,
        cost.unsigned
    );
}
