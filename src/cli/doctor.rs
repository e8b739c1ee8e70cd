//! `file-agent doctor`: is everything in place to run attempts, and if not, what fixes it.

use std::process::ExitCode;

use crate::config::SandboxConfig;
use crate::sandbox::Sandbox;

/// Prints one line per check; exits 1 when something must be fixed.
pub(super) async fn doctor(config: SandboxConfig) -> anyhow::Result<ExitCode> {
    let mut problems = 0;
    let limits = config.limits.clone();
    let image = config.image.clone();
    let runtime = config.runtime.clone();
    let sandbox = match Sandbox::connect(config).await {
        Ok(sandbox) => sandbox,
        Err(error) => {
            println!("docker   FAIL  {error}");
            return Ok(ExitCode::from(1));
        }
    };
    let diagnosis = sandbox.diagnose().await?;
    println!(
        "docker   ok    engine {}, API {} (negotiated), cgroup v{}",
        diagnosis.engine_version, diagnosis.api_version, diagnosis.cgroup_version
    );
    match &diagnosis.image {
        Some((id, size)) => println!(
            "image    ok    {image} ({}, {:.0} MB)",
            id.trim_start_matches("sha256:").get(..12).unwrap_or(id),
            *size as f64 / 1e6
        ),
        None => {
            problems += 1;
            println!("image    FAIL  {image} is missing; build it with `file-agent image build`");
        }
    }
    match &runtime {
        None => println!(
            "runtime  ok    the engine's default (runc); for a stronger boundary install gVisor and set SANDBOX_RUNTIME=runsc"
        ),
        Some(name) if diagnosis.runtimes.contains(name) => {
            println!("runtime  ok    {name}")
        }
        Some(name) => {
            problems += 1;
            println!(
                "runtime  FAIL  {name} is not registered with the engine (it has: {}); install it or unset SANDBOX_RUNTIME",
                diagnosis.runtimes.join(", ")
            );
        }
    }
    println!(
        "limits   ok    timeout {} s, memory {} MiB (no swap), {} CPU, {} pids, {} open files, /tmp {} MiB",
        limits.timeout.as_secs(),
        limits.memory_bytes >> 20,
        limits.cpus,
        limits.pids,
        limits.nofile,
        limits.tmp_bytes >> 20
    );
    println!(
        "outputs  ok    {} MiB and {} files at most; stdout and stderr kept up to {} bytes each",
        limits.output_max_bytes >> 20,
        limits.output_max_files,
        limits.stdio_max_bytes
    );
    println!(
        "policy   ok    network none, read-only root, all capabilities dropped, no-new-privileges, user 10001, checked after every create"
    );
    Ok(if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
