//! What the tools write to the audit trail: who wrote an attempt's code ([`Author`]), the part
//! of an attempt's line known before it runs, the line itself ([`AttemptLine`]) waiting for the
//! flow's verdict on the output, and the lines for which no container ran (a saved tool
//! changed, a credential or an identity refused).

use std::sync::Arc;

use super::{CALL, ToolError, Tools};
use crate::audit::{AuditLog, FileDigest, Record};
use crate::sandbox::{InputSource, Job, Runner};

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

impl<R: Runner> Tools<R> {
    /// [`Storage::require_credential`], with a refusal written to the audit trail as
    /// `refused_credential` (and the reason in `error`): nothing ran, but a reviewer sees who
    /// was turned away, when, and why. The reason never holds the credential itself.
    pub(super) async fn require_credential(
        &self,
        caller: &crate::storage::Caller,
    ) -> Result<(), ToolError> {
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

    /// The refusal of a call whose identity contradicts itself (`reason` says how), written to
    /// the audit trail as `refused_identity`: nothing ran.
    pub fn refuse_identity(&self, reason: String) -> ToolError {
        self.audit_nothing_ran(Record {
            status: "refused_identity".into(),
            error: Some(reason.clone()),
            ..Record::default()
        });
        ToolError::Identity(reason)
    }

    /// A line of the audit trail for a change of a saved tool, when no container ran (saving,
    /// deleting): `status` is the action.
    pub(super) fn audit_event(&self, author: Author, mark: crate::audit::ToolMark) {
        self.audit_nothing_ran(Record {
            author: author.as_str().into(),
            status: mark.action.clone(),
            saved_tool: Some(mark),
            ..Record::default()
        });
    }

    /// Appends `record`, a line for which no container ran, stamped now with the call's caller.
    pub(super) fn audit_nothing_ran(&self, record: Record) {
        let Some(audit) = &self.audit else { return };
        let record = Record {
            time: crate::time::rfc3339_now(),
            caller: CALL.try_with(|call| call.info.clone()).unwrap_or_default(),
            ..record
        };
        if let Err(error) = audit.append(record) {
            tracing::error!(error = %error, "could not write the audit trail");
        }
    }

    /// The part of an attempt's audit line known before it runs.
    pub(super) fn audit_record(&self, job: &Job, author: Author) -> Record {
        let caller = CALL.try_with(|call| call.info.clone()).unwrap_or_default();
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

/// `status` of an attempt whose script ended well but whose output file-agent refused: no
/// file at `file_path`, not a file of the asked type, a modification that changed nothing, a
/// saved tool's result that cannot be read. `error` says why.
pub const REFUSED_OUTPUT: &str = "refused_output";

/// Characters of an attempt's error kept in its audit line (the end).
pub(super) const AUDIT_ERROR_CHARS: usize = 1000;

/// An attempt's audit line, waiting for the flow's verdict on what the attempt produced: it is
/// appended when dropped, so a flow that returns early (`?`) still writes it as it stands.
/// A script that exited 0 is `ok` only if the flow did not [`Self::refuse`] its output.
#[must_use = "the line is written when dropped; refuse it first when the output is refused"]
pub struct AttemptLine {
    pub(super) audit: Option<Arc<AuditLog>>,
    pub(super) record: Option<Record>,
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
