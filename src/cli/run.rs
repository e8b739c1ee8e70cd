//! `file-agent run`: one script, one container, one JSON object on stdout.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;

use super::RunArgs;
use crate::config::SandboxConfig;
use crate::sandbox::{Input, Job, Outcome, Runner, Sandbox, SandboxError, Status};

/// Runs the script and prints the result; never fails, so that stdout always holds the JSON.
pub(super) async fn run(mut config: SandboxConfig, args: RunArgs) -> ExitCode {
    if let Some(seconds) = args.timeout {
        config.limits.timeout = Duration::from_secs(seconds);
    }
    if let Some(mib) = args.memory {
        config.limits.memory_bytes = mib * 1024 * 1024;
    }
    let started = Instant::now();
    let result = attempt(config, &args).await;
    let (report, code) = match result {
        Ok(outcome) => {
            let code = if outcome.status == Status::Ok { 0 } else { 1 };
            (report(&outcome), code)
        }
        Err(error) => (
            json!({
                "status": "sandbox_error",
                "exit_code": null,
                "duration_ms": started.elapsed().as_millis() as u64,
                "stdout": "",
                "stderr": "",
                "stdout_truncated": false,
                "stderr_truncated": false,
                "outputs": [],
                "skipped": [],
                "message": error.to_string(),
            }),
            2,
        ),
    };
    println!("{report}");
    ExitCode::from(code)
}

async fn attempt(config: SandboxConfig, args: &RunArgs) -> Result<Outcome, SandboxError> {
    let script = std::fs::read(&args.script).map_err(|source| SandboxError::Io {
        action: format!("reading the script {}", args.script.display()),
        source,
    })?;
    let script = String::from_utf8(script).map_err(|_| SandboxError::BadInput {
        name: args.script.display().to_string(),
        reason: "a script must be UTF-8 text".to_string(),
    })?;
    let inputs = args
        .inputs
        .iter()
        .map(Input::from_path)
        .collect::<Result<Vec<_>, _>>()?;
    let sandbox = Sandbox::connect(config).await?;
    let cancel = super::shutdown_token();
    let job = Job {
        script,
        inputs,
        ..Job::default()
    };
    let outcome = sandbox.run(job, &args.out, &cancel).await;
    sandbox.shutdown().await;
    outcome
}

/// The JSON object `file-agent run` prints for a script that ran.
fn report(outcome: &Outcome) -> serde_json::Value {
    json!({
        "status": outcome.status,
        "exit_code": outcome.exit_code,
        "duration_ms": outcome.timings.total.as_millis() as u64,
        "stdout": outcome.stdout.text(),
        "stderr": outcome.stderr.text(),
        "stdout_truncated": outcome.stdout.truncated(),
        "stderr_truncated": outcome.stderr.truncated(),
        "outputs": outcome.outputs,
        "skipped": outcome.skipped,
        "message": outcome.message,
    })
}
