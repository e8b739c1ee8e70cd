//! The tool flows, as plain async functions over plain Rust types: `generate_file` and
//! `modify_file` ([`files`]: the model writes Python, the sandbox runs it, a failed attempt's
//! error goes back to the model, up to [`MAX_ATTEMPTS`] attempts, each in a fresh container),
//! `analyze_file` and `data_analysis_tool` ([`analysis`]: inspection, steps, a checker),
//! `conduct_deep_research` ([`research`]: a polled background run) and `run_python`
//! ([`python`]: the caller's own code). The MCP adapters in `mcp` only unpack arguments and
//! call these.
//!
//! This module does not know MCP types or HTTP; it reaches Docker only through `sandbox`.

pub mod admission;
pub mod analysis;
pub mod catalog;
pub mod changes;
pub mod dynamic;
pub mod filename;
mod files;
pub mod filetype;
pub mod ooxml;
pub mod pdf;
mod python;
pub mod research;
pub mod untrusted_zip;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use thiserror::Error;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

pub use crate::audit::CallInfo;
use crate::audit::{AuditLog, FileDigest, Record};
use crate::config::{AdmissionConfig, ResearchConfig, SandboxConfig};
use crate::llm::{Llm, LlmError};
use crate::prompts::Prompts;
use crate::sandbox::{InputSource, Job, Outcome, Runner, Sandbox, SandboxError, Status};
use crate::storage::url::{FetchError, UrlFetcher};
use crate::storage::{Storage, StorageError};
use admission::Admission;

/// Attempts per `generate_file` / `modify_file` call: the first and two corrections.
pub const MAX_ATTEMPTS: usize = 3;
/// Characters of a failed attempt's error sent back to the model (the end, where the
/// traceback's cause is).
pub const ERROR_TAIL_CHARS: usize = 4000;

/// Why a tool call failed. Every message is meant for the person (or model) who called.
#[derive(Debug, Error)]
pub enum ToolError {
    /// An argument is unusable.
    #[error("{0}")]
    InvalidArgument(String),
    /// The input file is of a kind the tool does not handle.
    #[error("{0}")]
    UnsupportedInput(String),
    /// The model could not be asked.
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// A file could not be fetched or stored.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A document URL could not be fetched.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// A deep-research run failed, was refused, or ran out of time.
    #[error("{0}")]
    Research(String),
    /// The sandbox could not run an attempt.
    #[error("the sandbox could not run the code: {0}")]
    Sandbox(#[from] SandboxError),
    /// Every attempt failed.
    #[error(
        "no valid {what} after {attempts} attempts; the last error was:\n{last_error}\nRephrase or simplify the instructions and try again."
    )]
    AttemptsExhausted {
        /// What was to be made.
        what: &'static str,
        /// How many attempts ran.
        attempts: usize,
        /// The last attempt's error.
        last_error: String,
    },
    /// The caller's own script failed (`run_python`); the report has its output.
    #[error("{0}")]
    ScriptFailed(String),
    /// The call was cancelled (client gone or shutdown).
    #[error("the call was cancelled")]
    Cancelled,
    /// Every sandbox slot is in use and the queue is full (or the wait ran out).
    #[error(
        "file-agent is busy: all {slots} sandboxes are in use and {waiting} attempts are already waiting; try again in {retry_after} s"
    )]
    Busy {
        /// Containers allowed at once.
        slots: usize,
        /// Attempts waiting when this one was refused.
        waiting: usize,
        /// Seconds after which a retry likely finds a slot.
        retry_after: u64,
    },
    /// The whole call took longer than `FILE_AGENT_CALL_TIMEOUT`.
    #[error(
        "the call took longer than {0} s (FILE_AGENT_CALL_TIMEOUT) and was stopped; ask for less, or raise the limit"
    )]
    Deadline(u64),
}

impl ToolError {
    /// Whether the fault is in file-agent's own infrastructure (logged in full) rather than in
    /// what the caller asked.
    pub fn is_infrastructure(&self) -> bool {
        match self {
            Self::Sandbox(SandboxError::BadInput { .. } | SandboxError::Cancelled) => false,
            Self::Sandbox(_) => true,
            Self::Storage(StorageError::Io { .. }) => true,
            _ => false,
        }
    }
}

/// What a successful call returns: text for the caller, and how many attempts it took.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// Markdown: status and download links, or output.
    pub text: String,
    /// Sandbox attempts run.
    pub attempts: usize,
}

/// Everything the tools use, shared by all calls. `R` runs the attempts: the Docker
/// [`Sandbox`] in the server; the tests add a runner that executes the image's scripts with the
/// host's Python (`tests/integration/local/`), so the flows above the sandbox can be tested
/// without Docker.
#[derive(Debug, Clone)]
pub struct Tools<R = Sandbox> {
    runner: Arc<R>,
    llm: Llm,
    storage: Storage,
    fetcher: UrlFetcher,
    prompts: Arc<Prompts>,
    research: ResearchConfig,
    /// Bounds the containers running and waiting; an attempt holds a slot while it runs.
    admission: Arc<Admission>,
    /// Where every attempt is recorded, when the trail is on.
    audit: Option<Arc<AuditLog>>,
    /// The tools callers and the model saved; `None` when `FILE_AGENT_DYNAMIC_TOOLS=off`.
    saved_tools: Option<Arc<dynamic::SavedTools>>,
    /// Checks PDF outputs in a memory-capped child process (never in this one).
    pdf: Arc<pdf::Checker>,
    /// The calls under way, so that shutdown can wait for them.
    calls: TaskTracker,
    /// Cancelled when shutdown stops the calls still running.
    stopping: CancellationToken,
}

/// Who wrote the code of an attempt, for the audit trail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Author {
    /// The model (`MODEL_NAME`).
    Model,
    /// The MCP caller (`run_python`, `create_tool`).
    Caller,
    /// file-agent itself (the table inspection, the change report).
    FileAgent,
}

impl Author {
    /// As the audit trail writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Author::Model => "model",
            Author::Caller => "caller",
            Author::FileAgent => "file-agent",
        }
    }
}

tokio::task_local! {
    /// The call being served on this task, set by the MCP layer around each call (a
    /// task-local, so that the tool flows need not pass it along).
    pub static CALL: CallInfo;
}

impl<R: Runner> Tools<R> {
    /// Bundles the parts; `admission` bounds the containers running and waiting.
    pub fn new(
        runner: Arc<R>,
        llm: Llm,
        storage: Storage,
        fetcher: UrlFetcher,
        prompts: Arc<Prompts>,
        research: ResearchConfig,
        admission: AdmissionConfig,
    ) -> Self {
        let pdf = Arc::new(pdf::Checker::this_program(admission.max_concurrent));
        Self {
            runner,
            llm,
            storage,
            fetcher,
            prompts,
            research,
            pdf,
            admission: Admission::new(admission),
            audit: None,
            saved_tools: None,
            calls: TaskTracker::new(),
            stopping: CancellationToken::new(),
        }
    }

    /// A token for one call: cancelled when `request` is (the client went away) or when
    /// shutdown stops the calls. Drop the guard when the call is over.
    pub fn call_token(&self, request: &CancellationToken) -> (CancellationToken, DropGuard) {
        let token = self.stopping.child_token();
        let (request, linked) = (request.clone(), token.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = request.cancelled() => linked.cancel(),
                () = linked.cancelled() => {}
            }
        });
        (token.clone(), token.drop_guard())
    }

    /// `call`, counted among the calls under way.
    pub fn track<F: Future>(&self, call: F) -> impl Future<Output = F::Output> {
        self.calls.track_future(call)
    }

    /// The token that stops every call (its containers are killed and removed).
    pub fn stopping(&self) -> &CancellationToken {
        &self.stopping
    }

    /// Stops the calls still running and waits up to `wait` for them to clean up.
    pub async fn stop_calls(&self, wait: std::time::Duration) {
        self.stopping.cancel();
        self.calls.close();
        if tokio::time::timeout(wait, self.calls.wait()).await.is_err() {
            tracing::error!(
                calls = self.calls.len(),
                "calls still running after shutdown"
            );
        }
    }

    /// Serves the tools in `saved` (`None`: saved tools are off).
    pub fn with_saved_tools(mut self, saved: Option<dynamic::SavedTools>) -> Self {
        self.saved_tools = saved.map(Arc::new);
        self
    }

    /// Checks PDFs with `program` (a `file-agent` executable) instead of this process's own:
    /// for a server started inside another program, such as a test.
    pub fn with_pdf_checker(mut self, program: std::path::PathBuf) -> Self {
        let parallel = self.admission.config().max_concurrent;
        self.pdf = Arc::new(pdf::Checker::new(program, parallel));
        self
    }

    /// Records every attempt in `audit`.
    pub fn with_audit(mut self, audit: Arc<AuditLog>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// The prompts in force (tool descriptions come from here).
    pub fn prompts(&self) -> &Prompts {
        &self.prompts
    }

    /// The store in use.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The model client.
    pub fn llm(&self) -> &Llm {
        &self.llm
    }

    /// The message that tells the model its attempt `attempt` failed, and why (`error`).
    fn retry_message(&self, attempt: usize, error: &str) -> crate::llm::Message {
        crate::llm::Message::User(crate::prompts::render(
            &self.prompts.retry,
            &[
                ("attempt", &attempt.to_string()),
                ("max_attempts", &MAX_ATTEMPTS.to_string()),
                ("error", error),
            ],
        ))
    }

    /// `NotConfigured` unless a model key is set: the tools that ask a model check this
    /// before fetching anything.
    fn require_llm(&self) -> Result<(), ToolError> {
        if self.llm.is_configured() {
            Ok(())
        } else {
            Err(LlmError::NotConfigured.into())
        }
    }

    /// The slots and the queue.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The most a whole call of `tool` may take: research gets its own timeout plus a minute.
    pub fn call_deadline(&self, tool: catalog::Tool) -> std::time::Duration {
        tool.deadline(self.admission.config().call_timeout, self.research.max_wait)
    }

    /// Runs one attempt in a fresh container, waiting for a free slot first, and records it
    /// in the audit trail however it ends.
    async fn run_attempt(
        &self,
        job: Job,
        author: Author,
        out_dir: &Path,
        cancel: &CancellationToken,
    ) -> Result<Outcome, ToolError> {
        self.run_judged(job, author, None, out_dir, cancel)
            .await
            .map(|(outcome, _line)| outcome)
    }

    /// [`Self::run_attempt`] for a flow that checks what the attempt produced (marked as a
    /// saved tool's check or call in the trail when `saved_tool` says so): its audit line is
    /// written when the returned [`AttemptLine`] is dropped, after the flow has had the chance
    /// to [`AttemptLine::refuse`] the output. A run that failed is written at once.
    async fn run_judged(
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
        let result = match self.admission.enter(cancel).await {
            Err(error) => Err(error),
            Ok(_slot) => match self.runner.run(job, out_dir, cancel).await {
                Err(SandboxError::Cancelled) => Err(ToolError::Cancelled),
                other => other.map_err(ToolError::from),
            },
        };
        let status = match &result {
            Ok(outcome) => serde_json::to_value(outcome.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            Err(ToolError::Busy { .. }) => "busy".into(),
            Err(ToolError::Cancelled) => "cancelled".into(),
            Err(_) => "sandbox_error".into(),
        };
        let tool = CALL.try_with(|call| call.tool.clone()).unwrap_or_default();
        let metrics = crate::metrics::metrics();
        metrics.attempt(&tool, &status, started.elapsed());
        if let Ok(outcome) = &result {
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
        let mut line = AttemptLine {
            audit: self.audit.clone(),
            record: None,
        };
        if let Some(mut record) = record {
            record.duration_ms = started.elapsed().as_millis() as u64;
            record.status = status;
            match &result {
                Ok(outcome) => {
                    record.exit_code = outcome.exit_code;
                    record.container = Some(outcome.container_id.clone());
                    record.container_kind =
                        Some(if outcome.warm { "warm" } else { "cold" }.to_string());
                    record.container_created =
                        Some(crate::time::format_rfc3339(outcome.container_created));
                    record.image_id = Some(outcome.image_id.clone());
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
                        record.report_sha256 =
                            Some(crate::audit::sha256_hex(&outcome.stdout.bytes));
                    }
                }
                Err(error) => record.error = Some(crate::error_chain(error)),
            }
            line.record = Some(record);
        }
        result.map(|outcome| (outcome, line))
    }

    /// [`Storage::require_credential`], with a refusal written to the audit trail as
    /// `refused_credential` (and the reason in `error`): nothing ran, but a reviewer sees who
    /// was turned away, when, and why. The reason never holds the credential itself.
    async fn require_credential(&self, caller: &crate::storage::Caller) -> Result<(), ToolError> {
        let checked = self.storage.require_credential(caller).await;
        if let Err(error) = &checked {
            self.audit_nothing_ran(Record {
                status: "refused_credential".into(),
                error: Some(crate::error_chain(error)),
                ..Record::default()
            });
        }
        Ok(checked?)
    }

    /// A line of the audit trail for a change of a saved tool, when no container ran (saving,
    /// deleting): `status` is the action.
    fn audit_event(&self, author: Author, mark: crate::audit::ToolMark) {
        self.audit_nothing_ran(Record {
            author: author.as_str().into(),
            status: mark.action.clone(),
            saved_tool: Some(mark),
            ..Record::default()
        });
    }

    /// Appends `record`, a line for which no container ran, stamped now with the call's caller.
    fn audit_nothing_ran(&self, record: Record) {
        let Some(audit) = &self.audit else { return };
        let record = Record {
            time: crate::time::rfc3339_now(),
            caller: CALL.try_with(Clone::clone).unwrap_or_default(),
            ..record
        };
        if let Err(error) = audit.append(record) {
            tracing::error!(error = %error, "could not write the audit trail");
        }
    }

    /// The part of an attempt's audit line known before it runs.
    fn audit_record(&self, job: &Job, author: Author) -> Record {
        let caller = CALL.try_with(Clone::clone).unwrap_or_default();
        let config = self.runner.config();
        let limits = &config.limits;
        let include_code = self
            .audit
            .as_ref()
            .is_some_and(|audit| audit.includes_code());
        Record {
            time: crate::time::rfc3339_now(),
            caller,
            author: author.as_str().into(),
            model: (author == Author::Model).then(|| self.llm.model().to_string()),
            code_sha256: crate::audit::sha256_hex(job.script.as_bytes()),
            code: include_code.then(|| job.script.clone()),
            inputs: job
                .inputs
                .iter()
                .map(|input| {
                    let (bytes, sha256) = match &input.source {
                        InputSource::Bytes(bytes) => {
                            (bytes.len() as u64, crate::audit::sha256_hex(bytes))
                        }
                        InputSource::Path(path) => (
                            std::fs::metadata(path).map_or(0, |m| m.len()),
                            crate::audit::sha256_file(path).unwrap_or_default(),
                        ),
                    };
                    FileDigest {
                        name: String::from_utf8_lossy(&input.name).into_owned(),
                        bytes,
                        sha256,
                    }
                })
                .collect(),
            image: config.image.clone(),
            runtime: config.runtime.clone().unwrap_or_else(|| "default".into()),
            limits: serde_json::json!({
                "timeout_s": limits.timeout.as_secs(),
                "memory_mib": limits.memory_bytes / (1024 * 1024),
                "cpus": limits.cpus,
                "pids": limits.pids,
                "nofile": limits.nofile,
                "tmp_mib": limits.tmp_bytes / (1024 * 1024),
                "output_max_mib": limits.output_max_bytes / (1024 * 1024),
                "output_max_files": limits.output_max_files,
                "network": "none",
            }),
            ..Record::default()
        }
    }
}

impl Tools<Sandbox> {
    /// The sandbox (its pool, its containers, its engine).
    pub fn sandbox(&self) -> &Sandbox {
        &self.runner
    }
}

/// `status` of an attempt whose script ended well but whose output file-agent refused: no
/// file at `file_path`, not a file of the asked type, a modification that changed nothing, a
/// saved tool's result that cannot be read. `error` says why.
pub const REFUSED_OUTPUT: &str = "refused_output";
/// Characters of an attempt's error kept in its audit line (the end).
const AUDIT_ERROR_CHARS: usize = 1000;

/// An attempt's audit line, waiting for the flow's verdict on what the attempt produced: it is
/// appended when dropped, so a flow that returns early (`?`) still writes it as it stands.
/// A script that exited 0 is `ok` only if the flow did not [`Self::refuse`] its output.
#[must_use = "the line is written when dropped; refuse it first when the output is refused"]
pub struct AttemptLine {
    audit: Option<Arc<AuditLog>>,
    record: Option<Record>,
}

impl AttemptLine {
    /// Marks an attempt whose script ended well as [`REFUSED_OUTPUT`], with `why`, and writes
    /// the line. A line whose status is already a failure keeps it.
    pub fn refuse(mut self, why: &str) {
        if let Some(record) = &mut self.record
            && record.status == "ok"
        {
            record.status = REFUSED_OUTPUT.into();
            record.error = Some(crate::text::tail(why, AUDIT_ERROR_CHARS));
        }
    }
}

impl Drop for AttemptLine {
    fn drop(&mut self) {
        if let (Some(audit), Some(record)) = (&self.audit, self.record.take())
            && let Err(error) = audit.append(record)
        {
            tracing::error!(error = %error, "could not write the audit trail");
        }
    }
}

/// Maps a local I/O failure (temporary folders, reading outputs) to a [`ToolError`].
fn local_io(action: &'static str) -> impl FnOnce(std::io::Error) -> ToolError {
    move |source| {
        ToolError::Sandbox(SandboxError::Io {
            action: action.into(),
            source,
        })
    }
}

/// Why an attempt failed, in words for the model, or `None` when the script succeeded.
fn failure_reason(outcome: &Outcome, config: &SandboxConfig) -> Option<String> {
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
            "The script used more than the {} MiB memory limit and was killed.",
            limits.memory_bytes / (1024 * 1024)
        )),
        Status::OutputLimit => Some(format!(
            "The script wrote too much output: {}",
            outcome.message
        )),
    }
}

/// `value`, unless it is blank.
fn non_empty<'a>(value: &'a str, name: &str) -> Result<&'a str, ToolError> {
    if value.trim().is_empty() {
        Err(ToolError::InvalidArgument(format!(
            "{name} is empty; say what you want"
        )))
    } else {
        Ok(value)
    }
}

/// `name`, or `stem-2.ext`, `stem-3.ext`, ... when it is taken; records the result in `taken`.
fn unique_name(name: String, taken: &mut HashSet<String>) -> String {
    let mut candidate = name.clone();
    let mut n = 2;
    while !taken.insert(candidate.clone()) {
        candidate = match name.rsplit_once('.') {
            Some((stem, ext)) => format!("{stem}-{n}.{ext}"),
            None => format!("{name}-{n}"),
        };
        n += 1;
    }
    candidate
}

/// A human-readable size.
pub fn human_size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1_048_576 => format!("{:.1} KB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MB", bytes as f64 / 1_048_576.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_names_get_a_numbered_stem_and_keep_their_extension() {
        let mut taken = HashSet::new();
        assert_eq!(unique_name("a.csv".into(), &mut taken), "a.csv");
        assert_eq!(unique_name("a.csv".into(), &mut taken), "a-2.csv");
        assert_eq!(unique_name("a.csv".into(), &mut taken), "a-3.csv");
        assert_eq!(unique_name("notes".into(), &mut taken), "notes");
        assert_eq!(unique_name("notes".into(), &mut taken), "notes-2");
    }
}
