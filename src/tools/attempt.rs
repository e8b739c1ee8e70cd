//! The attempt loop's steps: one attempt run in a fresh container once a slot is free, its
//! timings counted, its audit line prepared and written once the flow has judged the output;
//! why an attempt failed, in words for the model; and the message that asks the model to try
//! again. The flows (`files`, `analysis`, `dynamic`, `python`) loop over these.

use std::path::Path;

use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::spans;
use super::trail::{AUDIT_ERROR_CHARS, AttemptLine, Author};
use super::{CALL, MAX_ATTEMPTS, ToolError, Tools};
use crate::audit::{FileDigest, Record};
use crate::config::SandboxConfig;
use crate::sandbox::{Job, Outcome, Runner, SandboxError, Status};

impl<R: Runner> Tools<R> {
    /// The message that tells the model its attempt `attempt` failed, and why (`error`).
    pub(super) fn retry_message(&self, attempt: usize, error: &str) -> crate::llm::Message {
        crate::llm::Message::User(crate::prompts::render(
            &self.prompts.retry,
            &[
                ("attempt", &attempt.to_string()),
                ("max_attempts", &MAX_ATTEMPTS.to_string()),
                ("error", error),
            ],
        ))
    }

    /// Runs one attempt in a fresh container, waiting for a free slot first, and records it
    /// in the audit trail however it ends.
    pub(super) async fn run_attempt(
        &self,
        job: Job,
        author: Author,
        out_dir: &Path,
        cancel: &CancellationToken,
    ) -> Result<Outcome, ToolError> {
        let (outcome, line) = self.run_judged(job, author, None, out_dir, cancel).await?;
        line.commit()?;
        Ok(outcome)
    }

    /// [`Self::run_attempt`] for a flow that checks what the attempt produced (marked as a
    /// saved tool's check or call in the trail when `saved_tool` says so): its audit line is
    /// written when the returned [`AttemptLine`] is dropped, after the flow has had the chance
    /// to [`AttemptLine::refuse`] the output; a flow that hands the output on must
    /// [`AttemptLine::commit`] it first. A run that failed is written at once. Nothing runs
    /// unless room for the line could be set aside in the trail first (or the operator chose
    /// `FILE_AGENT_AUDIT_ON_FAILURE=continue`).
    pub(super) async fn run_judged(
        &self,
        job: Job,
        author: Author,
        saved_tool: Option<crate::audit::ToolMark>,
        out_dir: &Path,
        cancel: &CancellationToken,
    ) -> Result<(Outcome, AttemptLine), ToolError> {
        let started = std::time::Instant::now();
        let record = self.audit.as_ref().map(|_| Record {
            saved_tool,
            ..self.audit_record(&job, author)
        });
        let reservation = self.reserve_line(record.as_ref())?;
        let span = spans::attempt(self.runner.config(), author);
        let mut slot_at = None;
        let run = async {
            match self
                .admission
                .enter(cancel)
                .instrument(spans::queue())
                .await
            {
                Err(error) => Err(error),
                Ok(_slot) => {
                    slot_at = Some(std::time::SystemTime::now());
                    match self.runner.run(job, out_dir, cancel).await {
                        Err(SandboxError::Cancelled) => Err(ToolError::Cancelled),
                        other => other.map_err(ToolError::from),
                    }
                }
            }
        };
        let mut result = run.instrument(span.clone()).await;
        let status = status_word(&result);
        spans::record_attempt(&span, &status, result.as_ref().ok(), slot_at);
        count_attempt(&status, started.elapsed(), result.as_ref().ok());
        let mut line = AttemptLine {
            audit: self.audit.clone(),
            record: None,
            reservation,
        };
        if let Some(mut record) = record {
            record.duration_ms = started.elapsed().as_millis() as u64;
            record.status = status;
            match &result {
                Ok(outcome) => record_outcome(&mut record, outcome, author),
                Err(error) => record.error = Some(crate::error_chain(error)),
            }
            line.record = Some(record);
        }
        // The model's script tried to install a package: no retry can succeed (the sandbox
        // installs nothing), so the call ends with the runner's sentence. The line is written.
        if author == Author::Model
            && let Some(sentence) = result.as_ref().ok().and_then(install_refused)
        {
            result = Err(ToolError::ScriptFailed(sentence));
        }
        result.map(|outcome| (outcome, line))
    }
}

/// What the runner says when a script starts pip (sandbox-image/runner.py, `_install_sentence`):
/// the line starts with this, and holds [`NOT_IN_IMAGE`].
const INSTALL_PREFIX: &str = "file-agent: installing ";
/// The runner's words for a package the image lacks (`NOT_IN_IMAGE` there).
pub(super) const NOT_IN_IMAGE: &str = "the package is not in the sandbox image";

/// The runner's sentence, without its `file-agent: ` prefix, when the attempt failed because
/// its script tried to install a package.
fn install_refused(outcome: &Outcome) -> Option<String> {
    if outcome.status != Status::Failed {
        return None;
    }
    let stderr = outcome.stderr.text();
    let line = stderr
        .lines()
        .rev()
        .find(|line| line.starts_with(INSTALL_PREFIX) && line.contains(NOT_IN_IMAGE))?;
    Some(line.trim_start_matches("file-agent: ").to_string())
}

/// The attempt's status in one word, for the metrics and the audit trail: the sandbox's
/// status, or `busy`, `cancelled` or `sandbox_error` when it did not run.
fn status_word(result: &Result<Outcome, ToolError>) -> String {
    match result {
        Ok(outcome) => serde_json::to_value(outcome.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        Err(ToolError::Busy { .. }) => "busy".into(),
        Err(ToolError::Cancelled) => "cancelled".into(),
        Err(_) => "sandbox_error".into(),
    }
}

/// Counts the attempt in the metrics, under the call's tool and its `status`, with the
/// phases of one that ran.
fn count_attempt(status: &str, took: std::time::Duration, outcome: Option<&Outcome>) {
    let tool = CALL
        .try_with(|call| call.info.tool.clone())
        .unwrap_or_default();
    let metrics = crate::metrics::metrics();
    metrics.attempt(&tool, status, took);
    if let Some(outcome) = outcome {
        metrics.attempt_resources(&tool, status, &outcome.resources);
        let timings = &outcome.timings;
        for (phase, took) in [
            ("create", timings.create),
            ("start", timings.start),
            ("copy_in", timings.copy_in),
            ("run", timings.run),
            ("logs", timings.logs),
            ("copy_out", timings.copy_out),
        ] {
            metrics.phase(phase, took);
        }
    }
}

/// What the audit record keeps of an attempt that ran: its exit code, its container and
/// image, its outputs' digests, its error, and for file-agent's own script (the change
/// report) the digest of what it reported.
fn record_outcome(record: &mut Record, outcome: &Outcome, author: Author) {
    record.exit_code = outcome.exit_code;
    record.container = Some(outcome.container_id.clone());
    record.container_kind = Some(if outcome.warm { "warm" } else { "cold" }.to_string());
    record.container_created = Some(crate::time::format_rfc3339(outcome.container_created));
    record.image_id = Some(outcome.image_id.clone());
    record.resources = Some(outcome.resources);
    record.outputs = outcome
        .outputs
        .iter()
        .map(|file| FileDigest {
            name: file.path.clone(),
            bytes: file.bytes,
            sha256: file.sha256.clone(),
        })
        .collect();
    if outcome.status != Status::Ok {
        record.error = Some(crate::text::tail(&outcome.message, AUDIT_ERROR_CHARS));
    }
    if author == Author::FileAgent {
        record.report_sha256 = Some(crate::audit::sha256_hex(&outcome.stdout.bytes));
    }
}

/// Why an attempt failed, in words for the model, or `None` when the script succeeded.
pub(super) fn failure_reason(outcome: &Outcome, config: &SandboxConfig) -> Option<String> {
    let limits = &config.limits;
    match outcome.status {
        Status::Ok => None,
        Status::Failed => {
            let stderr = outcome.stderr.text();
            Some(format!(
                "The script failed (exit code {}).\n{}",
                outcome.exit_code.unwrap_or(-1),
                if stderr.trim().is_empty() {
                    outcome.message.clone()
                } else {
                    stderr
                }
            ))
        }
        Status::Timeout => Some(format!(
            "The script ran longer than the {} s time limit and was killed.",
            limits.timeout.as_secs()
        )),
        Status::OutOfMemory => Some(format!(
            "The script used more than the {} MiB memory limit and was killed{}.",
            limits.memory_bytes / (1024 * 1024),
            outcome
                .resources
                .peak_memory_bytes
                .map(|peak| format!(
                    " (its largest process had reached {} MiB)",
                    peak.div_ceil(1 << 20)
                ))
                .unwrap_or_default()
        )),
        Status::OutputLimit => Some(format!(
            "The script wrote too much output: {}",
            outcome.message
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::Resources;

    #[test]
    fn an_out_of_memory_reason_says_the_peak_when_it_was_measured() {
        let config = SandboxConfig::from_lookup(|_| None).unwrap();
        let mut outcome = Outcome {
            status: Status::OutOfMemory,
            exit_code: Some(137),
            stdout: Default::default(),
            stderr: Default::default(),
            outputs: Vec::new(),
            skipped: Vec::new(),
            timings: Default::default(),
            message: String::new(),
            container_id: String::new(),
            image_id: String::new(),
            warm: false,
            container_created: std::time::SystemTime::UNIX_EPOCH,
            resources: Resources::default(),
        };
        let unmeasured = failure_reason(&outcome, &config).unwrap();
        assert!(
            unmeasured.ends_with("limit and was killed."),
            "{unmeasured}"
        );
        outcome.resources.peak_memory_bytes = Some(1000 << 20);
        let measured = failure_reason(&outcome, &config).unwrap();
        assert!(
            measured.ends_with("killed (its largest process had reached 1000 MiB)."),
            "{measured}"
        );
    }
}
