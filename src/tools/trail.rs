//! What the tools write to the audit trail: who wrote an attempt's code ([`Author`]), the part
//! of an attempt's line known before it runs, the line itself ([`AttemptLine`]) waiting for the
//! flow's verdict on the output, and the lines for which no container ran (a saved tool
//! changed, a credential or an identity refused).

use std::sync::Arc;

use super::{CALL, ToolError, Tools};
use crate::audit::availability::Reservation;
use crate::audit::{AuditLog, FileDigest, Record};
use crate::config::{AuditOnFailure, Limits};
use crate::sandbox::{Input, InputSource, Job, Runner};

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
        match audit.append(record) {
            Ok(receipt) => super::Receipts::record(receipt),
            Err(error) => tracing::error!(error = %error, "could not write the audit trail"),
        }
    }

    /// Whether a call that would run attempts may start: no when the trail cannot be written
    /// and `FILE_AGENT_AUDIT_ON_FAILURE` is `refuse` (the refusal is counted). Probes the
    /// trail, so that a trail that works again is found by the next call.
    pub fn audit_gate(&self) -> Result<(), ToolError> {
        match (&self.audit, self.audit_probe()) {
            (Some(audit), Some(Err(error))) => refusal_or_not(audit, error),
            _ => Ok(()),
        }
    }

    /// Whether the trail could take the line of an attempt with little code now (`None`
    /// without a trail): the room is set aside and given back at once. For `/health`, and the
    /// check before a call starts.
    pub fn audit_probe(&self) -> Option<Result<(), crate::audit::AuditError>> {
        let audit = self.audit.as_ref()?;
        Some(audit.probe(self.line_room(SMALL_LINE_BYTES)))
    }

    /// The room an attempt's line may need once its outputs and error are in, beyond the
    /// `known` bytes of what is known before it runs.
    fn line_room(&self, known: u64) -> u64 {
        let outputs = self.runner.config().limits.output_max_files as u64 * OUTPUT_ENTRY_BYTES;
        known + outputs + AUDIT_ERROR_CHARS as u64 * 4 + LINE_SLACK_BYTES
    }

    /// Room in the trail for the line of an attempt about to run (`record`: what is known of
    /// it before it runs), as much as the line can take once its outputs and error are in.
    /// `Ok(None)` without a trail, or when it cannot be written under
    /// `FILE_AGENT_AUDIT_ON_FAILURE=continue`.
    pub(super) fn reserve_line(
        &self,
        record: Option<&Record>,
    ) -> Result<Option<Reservation>, ToolError> {
        let (Some(audit), Some(record)) = (&self.audit, record) else {
            return Ok(None);
        };
        let known = serde_json::to_vec(record).map_or(0, |line| line.len() as u64);
        match audit.reserve(self.line_room(known)) {
            Ok(reservation) => Ok(Some(reservation)),
            Err(error) => refusal_or_not(audit, error).map(|()| None),
        }
    }

    /// The part of an attempt's audit line known before it runs.
    pub(super) fn audit_record(&self, job: &Job, author: Author) -> Record {
        let caller = CALL.try_with(|call| call.info.clone()).unwrap_or_default();
        let config = self.runner.config();
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
            inputs: job.inputs.iter().map(input_digest).collect(),
            image: config.image.clone(),
            runtime: config.runtime.clone().unwrap_or_else(|| "default".into()),
            limits: limits_json(&config.limits),
            ..Record::default()
        }
    }
}

/// An input's name, size and SHA-256, for the audit record (a host file is read for it).
fn input_digest(input: &Input) -> FileDigest {
    let (bytes, sha256) = match &input.source {
        InputSource::Bytes(bytes) => (bytes.len() as u64, crate::audit::sha256_hex(bytes)),
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
}

/// The limits an attempt ran under, as the audit record keeps them.
fn limits_json(limits: &Limits) -> serde_json::Value {
    serde_json::json!({
        "timeout_s": limits.timeout.as_secs(),
        "memory_mib": limits.memory_bytes / (1024 * 1024),
        "cpus": limits.cpus,
        "pids": limits.pids,
        "nofile": limits.nofile,
        "tmp_mib": limits.tmp_bytes / (1024 * 1024),
        "output_max_mib": limits.output_max_bytes / (1024 * 1024),
        "output_max_files": limits.output_max_files,
        "network": "none",
    })
}

/// `status` of an attempt whose script ended well but whose output file-agent refused: no
/// file at `file_path`, not a file of the asked type, a modification that changed nothing, a
/// saved tool's result that cannot be read. `error` says why.
pub const REFUSED_OUTPUT: &str = "refused_output";

/// Characters of an attempt's error kept in its audit line (the end).
pub(super) const AUDIT_ERROR_CHARS: usize = 1000;

/// Bytes an attempt's line may take for each output file (its path, size and hash, as JSON;
/// a longer path may pass the room set aside, and then needs the disk to have more).
const OUTPUT_ENTRY_BYTES: u64 = 256;
/// Bytes of an attempt's line beyond what is known before it runs, its outputs and its error:
/// the container, its times, the exit code, what it used.
const LINE_SLACK_BYTES: u64 = 4096;
/// What is known before it runs of an attempt with a few lines of code (its caller, the
/// limits, the code): what a probe of the trail sets aside for it.
const SMALL_LINE_BYTES: u64 = 2048;

/// A trail that could not be written (`error`): under `refuse`, the refusal of the call
/// (counted); under `continue`, a warning and on.
fn refusal_or_not(audit: &AuditLog, error: crate::audit::AuditError) -> Result<(), ToolError> {
    match audit.on_failure() {
        AuditOnFailure::Refuse => {
            audit.count_refused();
            Err(ToolError::AuditUnavailable(error.to_string()))
        }
        AuditOnFailure::Continue => {
            tracing::warn!(%error, "the audit trail cannot be written; running without a record (FILE_AGENT_AUDIT_ON_FAILURE=continue)");
            Ok(())
        }
    }
}

/// An attempt's audit line, waiting for the flow's verdict on what the attempt produced: it is
/// appended when dropped, so a flow that returns early (`?`) still writes it as it stands.
/// A script that exited 0 is `ok` only if the flow did not [`Self::refuse`] its output.
#[must_use = "the line is written when dropped; refuse it first when the output is refused"]
pub struct AttemptLine {
    pub(super) audit: Option<Arc<AuditLog>>,
    pub(super) record: Option<Record>,
    /// The room set aside for the line before the attempt ran; given back once it is written.
    pub(super) reservation: Option<Reservation>,
}

impl AttemptLine {
    /// Writes the line now. The attempt's output may go to the caller only when this is
    /// `Ok`: a line that cannot be written makes the attempt a failure for the caller, its
    /// output withheld, unless `FILE_AGENT_AUDIT_ON_FAILURE` is `continue`.
    pub fn commit(mut self) -> Result<(), ToolError> {
        let (Some(audit), Some(record)) = (self.audit.clone(), self.record.take()) else {
            return Ok(());
        };
        let written = audit.append(record);
        self.reservation = None;
        match written {
            Ok(receipt) => {
                super::Receipts::record(receipt);
                Ok(())
            }
            Err(error) => {
                tracing::error!(%error, "could not write an attempt's audit line");
                refusal_or_not(&audit, error)
            }
        }
    }

    /// Marks the line with the session its attempt belongs to and the states it went from and
    /// to. The state the attempt left is the session's, not an output: it leaves the line's
    /// outputs (its hash is `state_after` when it was kept).
    pub fn session(&mut self, mark: crate::audit::SessionMark) {
        if let Some(record) = &mut self.record {
            record
                .outputs
                .retain(|file| file.name != crate::sandbox::SESSION_STATE_OUTPUT);
            record.session = Some(mark);
        }
    }

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
        if let (Some(audit), Some(record)) = (&self.audit, self.record.take()) {
            match audit.append(record) {
                Ok(receipt) => super::Receipts::record(receipt),
                Err(error) => tracing::error!(error = %error, "could not write the audit trail"),
            }
        }
        self.reservation = None;
    }
}
