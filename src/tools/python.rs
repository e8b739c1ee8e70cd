//! `run_python`: the caller's own code, with inputs fetched from storage into `/work/in` and
//! every file written to `/work/out` stored and linked. No model is involved, so it works
//! without an API key. A call may belong to a session (`super::session`): the state the
//! session's last successful call left goes in with it, and the state it leaves is kept.

use std::collections::HashSet;

use tokio_util::sync::CancellationToken;

use super::filename::safe_name;
use super::progress::{Phase, announce};
use super::results::{Data, PythonResult, ResultFile, SessionResult};
use super::session::{OpenSession, SessionError, SessionHold, SessionLockGuard, Sessions};
use super::trail::AttemptLine;
use super::{Author, ToolError, ToolOutput, Tools, human_size, local_io, unique_name};
use crate::audit::SessionMark;
use crate::sandbox::{Input, Job, Outcome, OutputFile, Runner, SessionJob, StateLeft, Status};
use crate::storage::{Caller, content_type_for};
use crate::text::tail;

/// Characters of stdout and stderr put into the answer.
const OUTPUT_CHARS: usize = 20_000;
/// Inputs per call.
const MAX_INPUTS: usize = 20;

/// Which session a `run_python` call asks for.
#[derive(Debug, Clone, Default)]
pub struct SessionArgs {
    /// The `session` argument.
    pub name: Option<String>,
    /// The Open WebUI chat the call came from (`X-OpenWebUI-Chat-Id`): the session when no
    /// name is given.
    pub chat: Option<String>,
    /// `reset_session`: start the session over from nothing.
    pub reset: bool,
}

/// The session a call runs in: the name the caller knows it by, the session opened, and the
/// hold on it until the state the call left is kept.
struct InSession {
    name: String,
    open: OpenSession,
    _hold: SessionHold,
    /// The session's lock across the servers sharing the folder.
    _lock: SessionLockGuard,
}

/// What becomes of a session's state after its attempt.
enum Settled {
    /// The state the attempt left is staged under its hash; it becomes the session's once
    /// the attempt's line is written.
    Staged { sha256: String, bytes: u64 },
    /// The runner found the state it would leave byte for byte the one that came in, and sent
    /// a marker naming it instead: the session keeps the state it started from.
    Same,
    /// The state stays as it was, and why (a sentence).
    Unchanged(String),
}

/// What the answer says to a caller who named a session but no one: there is nobody to keep
/// it for.
const NO_ONE: &str = "No session: this call names no one (no user and no access token), so a session could not be kept apart from other callers'; every call starts from nothing.";

impl<R: Runner> Tools<R> {
    /// Runs `code` with the files `file_ids` in `/work/in`, in the session `session` asks
    /// for, if any.
    pub async fn run_python(
        &self,
        code: &str,
        file_ids: &[String],
        session: &SessionArgs,
        caller: &Caller,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        check_arguments(code, file_ids)?;
        // Whatever the code writes to /work/out is stored, and which files it writes is only
        // known after it ran: without a credential to store them, refuse before running.
        self.require_credential(caller).await?;
        let (mut session, no_session) = self.open_python_session(session, caller).await?;
        let inputs = self.fetch_inputs(file_ids, caller).await?;
        let out_dir = tempfile::tempdir()
            .map_err(local_io("cannot create a temporary folder for the outputs"))?;
        let max_bytes = self.sessions.as_ref().map_or(0, |s| s.config().max_bytes);
        let job = Job {
            script: code.to_string(),
            inputs,
            session: session.as_mut().map(|session| SessionJob {
                state: session.open.state.take(),
                max_bytes,
            }),
            ..Job::default()
        };
        announce(Phase::Running { attempt: 1 });
        let (mut outcome, mut line) = self
            .run_judged(job, Author::Caller, None, out_dir.path(), cancel)
            .await?;
        let settled = match &session {
            Some(session) => Some(self.settle(session, &mut outcome, &mut line).await),
            None => None,
        };
        line.commit()?;
        let report = match (&session, settled) {
            (Some(session), Some(settled)) => Some(self.finish_session(session, settled).await),
            _ => None,
        };
        self.python_answer(&outcome, report, no_session, caller)
            .await
    }

    /// The answer of a run: its output and files, and what became of its session.
    async fn python_answer(
        &self,
        outcome: &Outcome,
        session: Option<SessionResult>,
        no_session: Option<&str>,
        caller: &Caller,
    ) -> Result<ToolOutput, ToolError> {
        let said = session
            .as_ref()
            .map(|session| format!("\nSession `{}`: {}\n", session.name, session.note))
            .or_else(|| no_session.map(|text| format!("\n{text}\n")))
            .unwrap_or_default();
        let mut text = match output_text(outcome) {
            Ok(text) => text,
            Err(ToolError::ScriptFailed(report)) => {
                return Err(ToolError::ScriptFailed(format!("{report}\n{said}")));
            }
            Err(other) => return Err(other),
        };
        let (links, files) = self.store_outputs(outcome, caller).await?;
        if links.is_empty() {
            text.push_str("\nNo files were written to /work/out.");
        } else {
            text.push_str("\nFiles:\n");
            text.push_str(&links.join("\n"));
        }
        text.push_str(&said);
        let data = PythonResult {
            stdout: tail(&outcome.stdout.text(), OUTPUT_CHARS),
            stderr: tail(&outcome.stderr.text(), OUTPUT_CHARS),
            exit_code: outcome.exit_code.unwrap_or_default(),
            files,
            skipped: outcome
                .skipped
                .iter()
                .map(|skipped| format!("/work/out/{}: {}", skipped.path, skipped.reason))
                .collect(),
            session,
        };
        Ok(ToolOutput {
            text,
            attempts: 1,
            data: Some(Data::Python(data)),
        })
    }

    /// Fetches the caller's files for `/work/in`, each under a safe name unique in the call.
    async fn fetch_inputs(
        &self,
        file_ids: &[String],
        caller: &Caller,
    ) -> Result<Vec<Input>, ToolError> {
        let mut inputs = Vec::new();
        let mut names = HashSet::new();
        for id in file_ids {
            announce(Phase::Fetching);
            let download = self.storage.fetch(id.trim(), caller).await?;
            let name = unique_name(safe_name(&download.name, "input"), &mut names);
            inputs.push(Input::from_bytes(name, download.bytes));
        }
        Ok(inputs)
    }

    /// Stores every file an attempt wrote to `/work/out`; one Markdown line for each (a link),
    /// and one for each entry that was skipped; and the stored files as data.
    pub(super) async fn store_outputs(
        &self,
        outcome: &Outcome,
        caller: &Caller,
    ) -> Result<(Vec<String>, Vec<ResultFile>), ToolError> {
        let mut used = HashSet::new();
        let mut lines = Vec::new();
        let mut files = Vec::new();
        for output in &outcome.outputs {
            let name = unique_name(
                safe_name(&output.path.replace('/', "_"), "output"),
                &mut used,
            );
            let bytes = tokio::fs::read(&output.host_path)
                .await
                .map_err(local_io("cannot read an output"))?;
            let stored = self
                .store_result(&name, content_type_for(&name), bytes, caller)
                .await?;
            lines.push(format!(
                "- [{}]({}) ({}, from /work/out/{}, file id `{}`)",
                stored.name,
                stored.url,
                human_size(stored.bytes),
                output.path,
                stored.id
            ));
            files.push(ResultFile::of(&stored));
        }
        for skipped in &outcome.skipped {
            lines.push(format!(
                "- (skipped /work/out/{}: {})",
                skipped.path, skipped.reason
            ));
        }
        Ok((lines, files))
    }
}

impl<R: Runner> Tools<R> {
    /// The session a call runs in: the one it names, else its Open WebUI chat's; none when it
    /// names none, and none with a sentence for the answer when the caller names no one. A
    /// named session is refused when sessions are off or its name is unusable; a chat's is
    /// then quietly not used.
    async fn open_python_session(
        &self,
        args: &SessionArgs,
        caller: &Caller,
    ) -> Result<(Option<InSession>, Option<&'static str>), ToolError> {
        let (name, asked) = match (&args.name, &args.chat) {
            (Some(name), _) => (name.clone(), true),
            (None, Some(chat)) => (chat.clone(), false),
            (None, None) if args.reset => {
                return Err(ToolError::InvalidArgument(
                    "reset_session starts a session over: name it with `session`".into(),
                ));
            }
            (None, None) => return Ok((None, None)),
        };
        let sessions = match &self.sessions {
            Some(sessions) if sessions.config().enabled => sessions.clone(),
            _ if asked => return Err(SessionError::Off.into()),
            _ => return Ok((None, None)),
        };
        if caller.owner.names_no_one() {
            return Ok((None, Some(NO_ONE)));
        }
        if let Err(error) = super::session::check_name(&name) {
            return if asked {
                Err(error.into())
            } else {
                Ok((None, None))
            };
        }
        let hold = sessions.hold(&Sessions::id_of(&caller.owner, &name)).await;
        sessions.ready().await?;
        let wait = self.runner.config().limits.timeout + super::session::BUSY_SLACK;
        let lock = sessions.lock(&caller.owner, &name, wait).await?;
        let (owner, reset, named) = (caller.owner.clone(), args.reset, name.clone());
        let (open, lock) = tokio::task::spawn_blocking(move || {
            (sessions.begin(&owner, &named, reset, &lock), lock)
        })
        .await
        .map_err(|e| local_io("cannot open the session")(std::io::Error::other(e)))?;
        let session = InSession {
            name,
            open: open?,
            _hold: hold,
            _lock: lock,
        };
        Ok((Some(session), None))
    }

    /// What becomes of the session's state after its attempt (the state it left is taken out
    /// of the outputs), marked on the attempt's line: kept (staged) only when the attempt
    /// succeeded, left a state, and that state is within the bound.
    async fn settle(
        &self,
        session: &InSession,
        outcome: &mut Outcome,
        line: &mut AttemptLine,
    ) -> Settled {
        let left = outcome.take_session_state();
        let none_written = || {
            Settled::Unchanged(
                "no state was written (stderr says why), so the session's state stays as it was"
                    .into(),
            )
        };
        let before = session.open.state_sha256.clone();
        let settled = match left {
            _ if outcome.status != Status::Ok => Settled::Unchanged(
                "the code did not succeed, so the session's state stays as it was before this call; fix the code and call again".into(),
            ),
            Some(StateLeft::Written(file)) => self.stage(&session.open, file).await,
            Some(StateLeft::Unchanged(marker)) => {
                if names_state(&marker, before.as_deref()) {
                    Settled::Same
                } else {
                    none_written()
                }
            }
            None => none_written(),
        };
        line.session(SessionMark {
            id: session.open.id.clone(),
            state_after: match &settled {
                Settled::Staged { sha256, .. } => Some(sha256.clone()),
                Settled::Same | Settled::Unchanged(_) => before.clone(),
            },
            state_before: before,
            reset: session.open.reset,
            step: session.open.step,
        });
        settled
    }

    /// Stages the state an attempt left, unless it is over the bound.
    async fn stage(&self, open: &OpenSession, file: OutputFile) -> Settled {
        let max_bytes = self.sessions.as_ref().map_or(0, |s| s.config().max_bytes);
        if file.bytes > max_bytes {
            return Settled::Unchanged(format!(
                "the state ({}) is larger than the bound of {} (FILE_AGENT_SESSION_MAX_MIB) and was not kept; the previous state stays",
                human_size(file.bytes),
                human_size(max_bytes)
            ));
        }
        let (open, sha256, bytes) = (open.clone(), file.sha256.clone(), file.bytes);
        let staged =
            tokio::task::spawn_blocking(move || open.stage(&file.host_path, &file.sha256)).await;
        match staged {
            Ok(Ok(())) => Settled::Staged { sha256, bytes },
            Ok(Err(error)) => kept_not(&error),
            Err(error) => kept_not(&error),
        }
    }

    /// Makes a staged state the session's (its line is written by now); what the answer
    /// says of the session.
    async fn finish_session(&self, session: &InSession, settled: Settled) -> SessionResult {
        let before = session.open.state_sha256.clone();
        let before_bytes = session.open.state_bytes;
        let mut bytes_kept = None;
        let (kept, sha256, note) = match settled {
            Settled::Unchanged(note) if session.open.reset => {
                self.clear_session(&session.open).await;
                (false, None, note)
            }
            Settled::Unchanged(note) => (false, before, note),
            Settled::Staged { sha256, .. } if !self.recorded(&session.open, Some(&sha256)) => {
                (false, before, note_of(kept_not(&NOT_RECORDED)))
            }
            Settled::Same => (
                true,
                before,
                format!(
                    "its state is unchanged ({}), so it was not sent back; the next call of this session starts from it",
                    human_size(before_bytes.unwrap_or_default())
                ),
            ),
            Settled::Staged { sha256, bytes } => {
                bytes_kept = Some(bytes);
                let (open, staged) = (session.open.clone(), sha256.clone());
                match tokio::task::spawn_blocking(move || open.switch(&staged, bytes)).await {
                    Ok(Ok(())) => (
                        true,
                        Some(sha256),
                        format!(
                            "its state was kept ({}); the next call of this session starts from it",
                            human_size(bytes)
                        ),
                    ),
                    Ok(Err(error)) => (false, before, note_of(kept_not(&error))),
                    Err(error) => (false, before, note_of(kept_not(&error))),
                }
            }
        };
        SessionResult {
            name: session.name.clone(),
            kept,
            state_bytes: if kept {
                bytes_kept.or(before_bytes)
            } else {
                before_bytes
            },
            state_sha256: sha256,
            note,
        }
    }
}

/// Why a state the audit trail did not record is not kept.
const NOT_RECORDED: &str =
    "its audit line could not be written, and only a state the trail records is ever restored";

impl<R: Runner> Tools<R> {
    /// Whether the trail's last line of the session `open` is its attempt's, leaving `state`.
    fn recorded(&self, open: &OpenSession, state: Option<&str>) -> bool {
        self.sessions
            .as_ref()
            .is_some_and(|sessions| sessions.recorded(open, state))
    }

    /// Empties a session started over whose attempt left no state, once its line (a reset
    /// from nothing) is in the trail; a failure is logged, and the next call is refused until
    /// it starts over again.
    async fn clear_session(&self, open: &OpenSession) {
        if !self.recorded(open, None) {
            return;
        }
        let open = open.clone();
        match tokio::task::spawn_blocking(move || open.clear()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "could not empty a session started over"),
            Err(error) => tracing::error!(%error, "could not empty a session started over"),
        }
    }
}

/// A state that could not be written into the session's folder: logged, and said.
fn kept_not(error: &dyn std::fmt::Display) -> Settled {
    tracing::error!(%error, "could not keep a session's state");
    Settled::Unchanged(format!(
        "the state could not be kept ({error}); the previous state stays"
    ))
}

fn note_of(settled: Settled) -> String {
    match settled {
        Settled::Unchanged(note) => note,
        Settled::Staged { .. } | Settled::Same => String::new(),
    }
}

/// Whether the runner's unchanged marker names `before`, the state the attempt started from:
/// its content is that state's hex SHA-256 and a newline, which the marker's own hash and size
/// (taken as it was copied out) tell without opening it again; anything else (or no state
/// before) is no marker. Nothing is read after the attempt: a call in a session whose state
/// did not change costs no file access more than one without.
fn names_state(marker: &OutputFile, before: Option<&str>) -> bool {
    before.is_some_and(|before| {
        let named = format!("{before}\n");
        marker.bytes == named.len() as u64
            && marker.sha256 == crate::audit::sha256_hex(named.as_bytes())
    })
}

fn push_block(text: &mut String, label: &str, body: &str) {
    if !body.trim().is_empty() {
        text.push_str(&format!("\n{label}:\n```\n{}\n```\n", body.trim_end()));
    }
}

/// Refuses empty code and more than [`MAX_INPUTS`] files.
fn check_arguments(code: &str, file_ids: &[String]) -> Result<(), ToolError> {
    if code.trim().is_empty() {
        return Err(ToolError::InvalidArgument(
            "code is empty; pass the Python to run".into(),
        ));
    }
    if file_ids.len() > MAX_INPUTS {
        return Err(ToolError::InvalidArgument(format!(
            "{} file_ids given; at most {MAX_INPUTS} per call",
            file_ids.len()
        )));
    }
    Ok(())
}

/// The run's stdout and stderr (their tails) for the answer; a run that did not succeed is
/// the caller's error, with them and what to do.
fn output_text(outcome: &Outcome) -> Result<String, ToolError> {
    let stdout = tail(&outcome.stdout.text(), OUTPUT_CHARS);
    let stderr = tail(&outcome.stderr.text(), OUTPUT_CHARS);
    if outcome.status != Status::Ok {
        let mut report = format!("The code did not succeed: {}\n", outcome.message);
        if let Some(used) = outcome.resources.summary() {
            report.push_str(&format!("It {used}.\n"));
        }
        push_block(&mut report, "stdout", &stdout);
        push_block(&mut report, "stderr", &stderr);
        report.push_str("\nNo files were kept. Fix the code and call run_python again.");
        return Err(ToolError::ScriptFailed(report));
    }
    let mut text = match outcome.resources.summary() {
        Some(used) => format!("The code ran successfully; it {used}.\n"),
        None => String::from("The code ran successfully.\n"),
    };
    push_block(&mut text, "stdout", &stdout);
    push_block(&mut text, "stderr", &stderr);
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runner's marker as it came out: its content's size and hash.
    fn marker(content: &str) -> OutputFile {
        OutputFile {
            path: crate::sandbox::SESSION_STATE_UNCHANGED.into(),
            host_path: std::path::PathBuf::new(),
            bytes: content.len() as u64,
            sha256: crate::audit::sha256_hex(content.as_bytes()),
        }
    }

    #[test]
    fn a_marker_names_a_state_by_its_hash_and_size_alone() {
        let before = "ab".repeat(32);
        assert!(names_state(&marker(&format!("{before}\n")), Some(&before)));
        let other = "cd".repeat(32);
        assert!(!names_state(&marker(&format!("{other}\n")), Some(&before)));
        assert!(!names_state(&marker(&before), Some(&before)), "no newline");
        assert!(!names_state(&marker(&format!("{before}\n")), None));
    }
}
