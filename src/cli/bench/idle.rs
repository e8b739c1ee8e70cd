//! What the warm pool costs while it waits: a warm container's memory, as `docker stats` reports
//! it, once it is ready and once its idle priming is done; and how long the pool takes to be
//! full again after an attempt.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::Command;

use super::{filling, settle};
use crate::sandbox::{Sandbox, policy};

/// When the runner starts its idle imports (`IDLE_PRELOAD_AFTER_S` in runner.py).
const IDLE_PRELOAD_AFTER: Duration = Duration::from_secs(3);
/// The longest wait for the idle imports to end (their memory to stop growing).
const IDLE_PRIMING_MAX: Duration = Duration::from_secs(60);
/// Memory that grew less than this in a second is taken as settled.
const SETTLED_MIB: f64 = 0.5;

/// A warm container's memory in MiB.
#[derive(Debug, Clone, Copy)]
pub(super) struct IdleCost {
    /// When it has just said READY.
    pub ready_mib: f64,
    /// Once its idle imports and priming are done.
    pub primed_mib: f64,
    /// How long after READY the idle priming ended (its memory stopped growing).
    pub priming: Duration,
}

/// The memory of the pool's one container, ready then primed. Call it while the pool's are
/// the only containers labelled with `instance`.
pub(super) async fn measure(warm: &Sandbox, instance: &str) -> anyhow::Result<IdleCost> {
    settle(warm).await;
    let ready_at = Instant::now();
    let id = pool_container(instance).await?;
    let ready_mib = memory_mib(&id).await?;
    tokio::time::sleep(IDLE_PRELOAD_AFTER).await;
    let mut primed_mib = memory_mib(&id).await?;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = memory_mib(&id).await?;
        let settled = now - primed_mib < SETTLED_MIB;
        primed_mib = now;
        if settled || ready_at.elapsed() > IDLE_PRIMING_MAX {
            break;
        }
    }
    Ok(IdleCost {
        ready_mib,
        primed_mib,
        priming: ready_at.elapsed().saturating_sub(Duration::from_secs(1)),
    })
}

/// From now (an attempt's end) until the pool is full again, nothing starting.
pub(super) async fn refill(warm: &Sandbox) -> Duration {
    let started = Instant::now();
    while filling(warm) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    started.elapsed()
}

/// The one running container labelled with `instance`.
async fn pool_container(instance: &str) -> anyhow::Result<String> {
    let output = Command::new("docker")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label={}={instance}", policy::INSTANCE_LABEL))
        .output()
        .await
        .context("running docker ps")?;
    let ids: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    match ids.as_slice() {
        [id] => Ok(id.clone()),
        _ => bail!(
            "expected one warm container of {instance}, found {}",
            ids.len()
        ),
    }
}

/// The container's memory use as `docker stats` shows it (its cgroup's, less the page cache).
async fn memory_mib(id: &str) -> anyhow::Result<f64> {
    let output = Command::new("docker")
        .args(["stats", "--no-stream", "--format", "{{.MemUsage}}", id])
        .output()
        .await
        .context("running docker stats")?;
    let text = String::from_utf8_lossy(&output.stdout);
    parse_mib(&text).with_context(|| format!("docker stats answered {text:?}"))
}

/// `86.5MiB / 1GiB` → 86.5.
fn parse_mib(usage: &str) -> Option<f64> {
    let used = usage.split('/').next()?.trim();
    let split = used.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = used.split_at(split);
    let scale = match unit {
        "B" => 1.0 / (1024.0 * 1024.0),
        "KiB" | "kB" => 1.0 / 1024.0,
        "MiB" | "MB" => 1.0,
        "GiB" | "GB" => 1024.0,
        _ => return None,
    };
    Some(number.trim().parse::<f64>().ok()? * scale)
}

#[cfg(test)]
mod tests {
    use super::parse_mib;

    #[test]
    fn docker_stats_memory_reads_in_mib() {
        assert_eq!(parse_mib("86.5MiB / 1GiB"), Some(86.5));
        assert_eq!(parse_mib("1.5GiB / 4GiB"), Some(1536.0));
        assert_eq!(parse_mib("512KiB / 1GiB"), Some(0.5));
        assert_eq!(parse_mib("--"), None);
    }
}
