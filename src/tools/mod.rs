//! The tool flows, as plain async functions over plain Rust types: `generate_file` and
//! `modify_file` ([`files`]: the model writes Python, the sandbox runs it, a failed attempt's
//! error goes back to the model, up to [`MAX_ATTEMPTS`] attempts, each in a fresh container),
//! `analyze_file` and `data_analysis_tool` ([`analysis`]: inspection, steps, a checker),
//! `conduct_deep_research` ([`research`]: a polled background run) and `run_python`
//! ([`python`]: the caller's own code). The MCP adapters in `mcp` only unpack arguments and
//! call these.
//!
//! What every flow shares: [`Tools`] and its parts ([`parts`]), the attempt loop's steps
//! ([`attempt`]), the lines written to the audit trail ([`trail`]), the tool catalog, the
//! admission slots and output names. Nothing here parses bytes the server did not write: the
//! flows hand those to [`crate::untrusted`].
//!
//! This module does not know MCP types or HTTP; it reaches Docker only through `sandbox`.

pub mod admission;
pub mod analysis;
pub mod catalog;
pub mod changes;
pub mod dynamic;
pub mod filename;
pub mod progress;
pub mod research;
pub mod research_runs;
pub mod results;

mod attempt;
mod files;
mod parts;
mod python;
pub mod session;
mod spans;
mod trail;

use std::collections::HashSet;

use thiserror::Error;

pub use crate::audit::CallInfo;
use crate::llm::LlmError;
use crate::sandbox::SandboxError;
use crate::storage::StorageError;
use crate::storage::url::FetchError;
use attempt::failure_reason;
pub use parts::Tools;
pub use python::SessionArgs;
pub use trail::{AttemptLine, Author, REFUSED_OUTPUT};

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
    /// The client stopped waiting (its connection closed) and the work goes on without it:
    /// `kept`, a research run whose report is kept for the caller's next call.
    #[error(
        "the client stopped waiting; the research goes on, and its report is kept for the same caller's next call with the same instructions"
    )]
    Left {
        /// Whether the work goes on and its result is kept.
        kept: bool,
    },
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
    /// The caller's identity contradicts itself (a plain header naming another user than the
    /// proven one): nothing ran.
    #[error("this request's identity is contradictory, so file-agent runs nothing for it: {0}")]
    Identity(String),
    /// The audit trail cannot be written and `FILE_AGENT_AUDIT_ON_FAILURE` is `refuse`: no
    /// attempt runs (or, when its line failed after it ran, its output is withheld).
    #[error(
        "file-agent runs no code it cannot record, and the audit trail cannot be written: {0}. Free space in the audit folder (FILE_AGENT_AUDIT_DIR), or have the operator set FILE_AGENT_AUDIT_ON_FAILURE=continue to run without a record; try again later"
    )]
    AuditUnavailable(String),
    /// A session cannot be used (its name, its bound, its state changed in the folder).
    #[error(transparent)]
    Session(#[from] session::SessionError),
}

impl ToolError {
    /// Whether the fault is in file-agent's own infrastructure (logged in full) rather than in
    /// what the caller asked.
    pub fn is_infrastructure(&self) -> bool {
        match self {
            Self::Sandbox(SandboxError::BadInput { .. } | SandboxError::Cancelled) => false,
            Self::Sandbox(_) => true,
            Self::Storage(StorageError::Io { .. }) => true,
            Self::AuditUnavailable(_) => true,
            Self::Session(session::SessionError::Io { .. } | session::SessionError::Trail(_)) => {
                true
            }
            _ => false,
        }
    }
}

/// What a successful call returns: text for the caller, the same as data for a program, and
/// how many attempts it took.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// Markdown: status and download links, or output.
    pub text: String,
    /// Sandbox attempts run.
    pub attempts: usize,
    /// The result as data ([`results`]); `None` for a saved tool that declared no output
    /// schema.
    pub data: Option<results::Data>,
}

/// The call being served: who made it (for the audit trail) and where its phases go.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The call and its caller, as the audit trail writes them.
    pub info: CallInfo,
    /// Where [`progress::announce`] sends the call's phases.
    pub phases: progress::Phases,
    /// What the call made ([`progress::record`]).
    pub outputs: progress::Outputs,
    /// The receipts of the call's audit lines ([`crate::audit::Receipt`]), in order.
    pub receipts: Receipts,
    /// Attempts the call has started so far: the next one's number, for its span.
    pub attempts: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

/// Where a call's audit lines are in their chain's tree, gathered as they are written.
#[derive(Debug, Clone, Default)]
pub struct Receipts(std::sync::Arc<std::sync::Mutex<Vec<crate::audit::Receipt>>>);

impl Receipts {
    /// Adds `receipt` to the receipts of the call on this task, if one is.
    pub fn record(receipt: crate::audit::Receipt) {
        let _ = CALL.try_with(|call| {
            call.receipts
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(receipt)
        });
    }

    /// The receipts gathered.
    pub fn taken(&self) -> Vec<crate::audit::Receipt> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

tokio::task_local! {
    /// The call being served on this task, set by the MCP layer around each call (a
    /// task-local, so that the tool flows need not pass it along).
    pub static CALL: CallContext;
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
