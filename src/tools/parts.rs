//! [`Tools`]: the parts every call shares (the runner, the model, the store, the prompts, the
//! admission slots, the audit trail, the saved tools, the PDF checker) and the calls' own
//! bookkeeping (a token per call, the tracker shutdown waits on). The attempt loop is in
//! [`attempt`](super::attempt), the lines it writes to the audit trail in [`trail`](super::trail).

use std::sync::Arc;

use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use super::admission::Admission;
use super::research_runs::ResearchRuns;
use super::{ToolError, catalog, dynamic};
use crate::audit::AuditLog;
use crate::audit::receipt::{Batcher, Entry};
use crate::config::{AdmissionConfig, ResearchConfig};
use crate::llm::{Llm, LlmError};
use crate::prompts::Prompts;
use crate::sandbox::{Runner, Sandbox};
use crate::storage::Storage;
use crate::storage::url::UrlFetcher;
use crate::untrusted::pdf;

/// Everything the tools use, shared by all calls. `R` runs the attempts: the Docker
/// [`Sandbox`] in the server; the tests add a runner that executes the image's scripts with the
/// host's Python (`tests/integration/local/`), so the flows above the sandbox can be tested
/// without Docker.
#[derive(Debug, Clone)]
pub struct Tools<R = Sandbox> {
    pub(super) runner: Arc<R>,
    pub(super) llm: Llm,
    pub(super) storage: Storage,
    pub(super) fetcher: UrlFetcher,
    pub(super) prompts: Arc<Prompts>,
    pub(super) research: ResearchConfig,
    /// Bounds the containers running and waiting; an attempt holds a slot while it runs.
    pub(super) admission: Arc<Admission>,
    /// Where every attempt is recorded, when the trail is on.
    pub(super) audit: Option<Arc<AuditLog>>,
    /// Where answers wait for the checkpoint that covers their lines, with signed receipts
    /// (`FILE_AGENT_AUDIT_RECEIPTS=signed`).
    pub(super) signed_receipts: Option<Arc<Batcher>>,
    /// The tools callers and the model saved; `None` when `FILE_AGENT_DYNAMIC_TOOLS=off`.
    pub(super) saved_tools: Option<Arc<dynamic::SavedTools>>,
    /// `run_python`'s sessions; `None` when no store was given (then none is kept).
    pub(super) sessions: Option<Arc<super::session::Sessions>>,
    /// Checks PDF outputs in a memory-capped child process (never in this one).
    pub(super) pdf: Arc<pdf::Checker>,
    /// The calls under way, so that shutdown can wait for them.
    pub(super) calls: TaskTracker,
    /// Cancelled when shutdown stops the calls still running.
    pub(super) stopping: CancellationToken,
    /// Research runs whose caller left, and their reports kept for that caller.
    pub(super) research_runs: Arc<ResearchRuns>,
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
        let research_runs = Arc::new(ResearchRuns::new(research.keep_for, research.kept_max));
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
            signed_receipts: None,
            saved_tools: None,
            sessions: None,
            calls: TaskTracker::new(),
            stopping: CancellationToken::new(),
            research_runs,
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

    /// Tool calls running now.
    pub fn calls_running(&self) -> usize {
        self.calls.len()
    }

    /// Resolves once no call is running (calls that start meanwhile are waited for too).
    pub async fn calls_finished(&self) {
        self.calls.close();
        self.calls.wait().await;
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

    /// Keeps `run_python`'s sessions in `sessions`.
    pub fn with_sessions(mut self, sessions: super::session::Sessions) -> Self {
        self.sessions = Some(Arc::new(sessions));
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

    /// Answers carry signed receipts: each waits for the checkpoint `batcher` gets signed.
    pub fn with_signed_receipts(mut self, batcher: Arc<Batcher>) -> Self {
        self.signed_receipts = Some(batcher);
        self
    }

    /// Where answers wait for their checkpoint, with signed receipts.
    pub fn signed_receipts(&self) -> Option<&Arc<Batcher>> {
        self.signed_receipts.as_ref()
    }

    /// The receipts an answer carries for `receipts`, its lines: where each line is, and with
    /// signed receipts, once a checkpoint covers them (or the bound passed), the proofs.
    pub async fn receipts(&self, receipts: Vec<crate::audit::Receipt>) -> Vec<Entry> {
        match &self.signed_receipts {
            Some(batcher) if !receipts.is_empty() => batcher.signed(receipts).await,
            _ => receipts.iter().map(Entry::of).collect(),
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

    /// The audit trail, when it is on.
    pub fn audit_log(&self) -> Option<&Arc<AuditLog>> {
        self.audit.as_ref()
    }

    /// The model client.
    pub fn llm(&self) -> &Llm {
        &self.llm
    }

    /// `NotConfigured` unless a model key is set: the tools that ask a model check this
    /// before fetching anything.
    pub(super) fn require_llm(&self) -> Result<(), ToolError> {
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
}

impl<R: Runner> Tools<R> {
    /// Why a call that would run code is refused now, if it is (the runner's
    /// [`Runner::refusal`]).
    pub fn refusal(&self) -> Option<ToolError> {
        self.runner.refusal().map(ToolError::Sandbox)
    }
}

impl Tools<Sandbox> {
    /// The sandbox (its pool, its containers, its engine).
    pub fn sandbox(&self) -> &Sandbox {
        &self.runner
    }
}
