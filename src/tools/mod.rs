//! The tool flows, as plain async functions over plain Rust types: `generate_file` and
//! `modify_file` ([`files`]: the model writes Python, the sandbox runs it, a failed attempt's
//! error goes back to the model, up to [`MAX_ATTEMPTS`] attempts, each in a fresh container),
//! and `run_python` ([`python`]: the caller's own code). The MCP adapters in `mcp` only unpack
//! arguments and call these.
//!
//! This module does not know MCP types or HTTP; it reaches Docker only through `sandbox`.

pub mod filename;
mod files;
pub mod filetype;
mod python;

use std::path::Path;
use std::sync::Arc;

use thiserror::Error;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::llm::{Llm, LlmError};
use crate::prompts::Prompts;
use crate::sandbox::{Job, Outcome, Runner, Sandbox, SandboxError};
use crate::storage::{Storage, StorageError};

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

/// Everything the tools use, shared by all calls.
#[derive(Debug, Clone)]
pub struct Tools {
    sandbox: Arc<Sandbox>,
    llm: Llm,
    storage: Storage,
    prompts: Arc<Prompts>,
    /// Bounds the containers running at once; an attempt holds a permit while it runs.
    permits: Arc<Semaphore>,
}

impl Tools {
    /// Bundles the parts; `max_concurrent` containers may run at once.
    pub fn new(
        sandbox: Arc<Sandbox>,
        llm: Llm,
        storage: Storage,
        prompts: Arc<Prompts>,
        max_concurrent: usize,
    ) -> Self {
        Self {
            sandbox,
            llm,
            storage,
            prompts,
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
        }
    }

    /// The prompts in force (tool descriptions come from here).
    pub fn prompts(&self) -> &Prompts {
        &self.prompts
    }

    /// The store in use.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The sandbox.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The model client.
    pub fn llm(&self) -> &Llm {
        &self.llm
    }

    /// Runs one attempt in a fresh container, waiting for a free slot first.
    async fn run_attempt(
        &self,
        job: Job,
        out_dir: &Path,
        cancel: &CancellationToken,
    ) -> Result<Outcome, ToolError> {
        let _permit = tokio::select! {
            () = cancel.cancelled() => return Err(ToolError::Cancelled),
            permit = self.permits.acquire() => permit.map_err(|_| ToolError::Cancelled)?,
        };
        match self.sandbox.run(job, out_dir, cancel).await {
            Err(SandboxError::Cancelled) => Err(ToolError::Cancelled),
            other => Ok(other?),
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

/// The last `max` characters of `text`, marked when cut.
pub fn tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let cut: String = text.chars().skip(count - max).collect();
    format!("[… {} characters cut]\n{cut}", count - max)
}

/// A human-readable size.
pub fn human_size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1_048_576 => format!("{:.1} KB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MB", bytes as f64 / 1_048_576.0),
    }
}
