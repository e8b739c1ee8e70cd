//! How many attempts a server runs at once when `FILE_AGENT_MAX_CONCURRENT` is not set: the
//! CPUs this process may use. With Docker that is `available_parallelism` (the host's cores, or
//! the container's CPU quota). Under Kubernetes it is the server pod's own CPU limit, read from
//! its cgroup, or a fixed [`KUBERNETES_DEFAULT_SLOTS`] when the pod has none: never the node's
//! core count, which a pod without a CPU limit sees (64 on a large node, and as many warm pods
//! per replica). It reads two small cgroup files and nothing else; the manifests set the
//! numbers themselves (`deploy/kubernetes/deployment.yaml`).

use std::path::Path;

/// Slots under Kubernetes when the server's pod has no CPU limit and the manifests set none
/// (the value `deploy/kubernetes/deployment.yaml` sets).
pub const KUBERNETES_DEFAULT_SLOTS: usize = 4;
/// Slots under Docker when `available_parallelism` cannot tell.
const FALLBACK_SLOTS: usize = 2;

/// The default slots: under Kubernetes (`kubernetes`) the CPU limit `cgroup_limit` (rounded
/// up) or [`KUBERNETES_DEFAULT_SLOTS`]; under Docker `available`, the CPUs the process sees.
pub fn default_slots(kubernetes: bool, cgroup_limit: Option<f64>, available: usize) -> usize {
    if kubernetes {
        return cgroup_limit.map_or(KUBERNETES_DEFAULT_SLOTS, |cpus| {
            (cpus.ceil() as usize).max(1)
        });
    }
    available.max(1)
}

/// The default slots of this process, for `kubernetes` or Docker.
pub fn own_default_slots(kubernetes: bool) -> usize {
    let available = std::thread::available_parallelism().map_or(FALLBACK_SLOTS, usize::from);
    let limit = if kubernetes {
        own_cpu_limit(Path::new("/sys/fs/cgroup"))
    } else {
        None
    };
    default_slots(kubernetes, limit, available)
}

/// This process's CPU limit in CPUs, from cgroup v2 `cpu.max` or v1 `cpu/cpu.cfs_quota_us`
/// and `cpu.cfs_period_us` under `root`; `None` when there is none (or nothing to read).
pub fn own_cpu_limit(root: &Path) -> Option<f64> {
    if let Ok(text) = std::fs::read_to_string(root.join("cpu.max")) {
        return cpu_max(&text);
    }
    let quota = std::fs::read_to_string(root.join("cpu/cpu.cfs_quota_us")).ok()?;
    let period = std::fs::read_to_string(root.join("cpu/cpu.cfs_period_us")).ok()?;
    cpu_max(&format!("{} {}", quota.trim(), period.trim()))
}

/// `QUOTA PERIOD` (cgroup v2's `cpu.max`; v1's quota is `-1` for none) as CPUs.
fn cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota: f64 = fields.next()?.parse().ok()?;
    let period: f64 = fields.next().unwrap_or("100000").parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_kubernetes_the_node_cores_never_count() {
        assert_eq!(default_slots(true, None, 64), KUBERNETES_DEFAULT_SLOTS);
        assert_eq!(default_slots(true, Some(1.5), 64), 2);
        assert_eq!(default_slots(true, Some(4.0), 64), 4);
        assert_eq!(default_slots(true, Some(0.2), 64), 1);
        assert_eq!(default_slots(false, None, 64), 64);
        assert_eq!(
            default_slots(false, Some(4.0), 64),
            64,
            "Docker: what the process sees"
        );
    }

    #[test]
    fn the_cpu_limit_is_read_from_cgroup_v2_or_v1() {
        assert_eq!(cpu_max("max 100000\n"), None);
        assert_eq!(cpu_max("200000 100000\n"), Some(2.0));
        assert_eq!(cpu_max("-1 100000"), None);
        assert_eq!(cpu_max("50000 100000"), Some(0.5));
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cpu.max"), "300000 100000\n").unwrap();
        assert_eq!(own_cpu_limit(v2.path()), Some(3.0));
        std::fs::write(v2.path().join("cpu.max"), "max 100000\n").unwrap();
        assert_eq!(own_cpu_limit(v2.path()), None);
        let v1 = tempfile::tempdir().unwrap();
        std::fs::create_dir(v1.path().join("cpu")).unwrap();
        std::fs::write(v1.path().join("cpu/cpu.cfs_quota_us"), "150000\n").unwrap();
        std::fs::write(v1.path().join("cpu/cpu.cfs_period_us"), "100000\n").unwrap();
        assert_eq!(own_cpu_limit(v1.path()), Some(1.5));
        assert_eq!(own_cpu_limit(&v1.path().join("nothing")), None);
    }
}
