//! `generate_file` and `modify_file`: the self-healing loop. The model writes a script; the
//! sandbox runs it in a fresh container; the file at `file_path` must exist and open as the
//! asked type, and a modified copy must differ from its original (by the change report, which
//! a second container computes from both files); otherwise the trimmed error goes back to the
//! model for a corrected script, up to [`MAX_ATTEMPTS`] attempts. Only a valid file is stored;
//! the original of a modification is a read-only input and is never replaced.

use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::changes::{self, ChangeReport, Compared};
use super::filename::{output_name, safe_name};
use super::progress::{Phase, announce, short_reason};
use super::results::{Data, FileResult, ResultFile};
use super::{
    AttemptLine, Author, ERROR_TAIL_CHARS, MAX_ATTEMPTS, ToolError, ToolOutput, Tools,
    failure_reason, human_size, local_io, non_empty,
};
use crate::llm::Message;
use crate::llm::code::extract_code;
use crate::sandbox::{Input, InputSource, Job, OutputFile, Runner};
use crate::storage::{Caller, content_type_for};
use crate::text::tail;
use crate::untrusted::detect;
use crate::untrusted::filetype::FileType;

/// Where the sandbox's `/work/out` is.
const OUTPUT_DIR: &str = "/work/out";
/// Where inputs are placed.
const INPUT_DIR: &str = "/work/in";

/// One file to be written by the model's code.
struct FileTask {
    file_type: FileType,
    system_prompt: String,
    request: String,
    output_name: String,
    input: Option<Input>,
}

impl<R: Runner> Tools<R> {
    /// Makes a new Excel, Word, PowerPoint or PDF file from plain-language instructions.
    pub async fn generate_file(
        &self,
        instructions: &str,
        file_type: &str,
        filename_hint: Option<&str>,
        caller: &Caller,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let file_type = FileType::parse(file_type).ok_or_else(|| {
            ToolError::InvalidArgument(format!(
                "file_type {file_type:?} is not supported; use \"excel\", \"docx\", \"pptx\" or \"pdf\""
            ))
        })?;
        let instructions = non_empty(instructions, "instructions")?;
        self.require_llm()?;
        self.require_credential(caller).await?;
        let system_prompt = match file_type {
            FileType::Excel => self.prompts.create_excel.clone(),
            FileType::Docx => self.prompts.create_docx.clone(),
            FileType::Pptx => self.prompts.create_pptx.clone(),
            FileType::Pdf => self.prompts.create_pdf.clone(),
        };
        let output_name = output_name(filename_hint, "output", file_type.extension());
        let request = format!(
            "Create a new {} as follows.\n\nInstructions:\n{instructions}\n\nSave it to the preset `file_path` (its name ends in .{}).",
            file_type.label(),
            file_type.extension()
        );
        let task = FileTask {
            file_type,
            system_prompt,
            request,
            output_name,
            input: None,
        };
        self.write_file(task, "created", caller, cancel).await
    }

    /// Makes a modified copy of an existing .xlsx, .docx or .pptx file, with a change report.
    pub async fn modify_file(
        &self,
        file_id: &str,
        instructions: &str,
        filename_hint: Option<&str>,
        caller: &Caller,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let file_id = non_empty(file_id, "file_id")?;
        let instructions = non_empty(instructions, "instructions")?;
        self.require_llm()?;
        self.require_credential(caller).await?;
        announce(Phase::Fetching);
        let original = self.storage.fetch(file_id.trim(), caller).await?;
        let file_type = detect::detect(
            &original.bytes,
            &original.name,
            original.content_type.as_deref(),
        )
        .map_err(ToolError::UnsupportedInput)?;
        let input_name = safe_name(
            &original.name,
            &format!("original.{}", file_type.extension()),
        );
        let system_prompt = self.modify_prompt(file_type, &original.name)?;
        let output_name = output_name(filename_hint, "modified", file_type.extension());
        let request = format!(
            "Modify the {} at the preset `input_file_path` ({INPUT_DIR}/{input_name}, read-only) and save the changed copy to the preset `file_path` (its name ends in .{}).\n\nInstructions:\n{instructions}",
            file_type.label(),
            file_type.extension()
        );
        let task = FileTask {
            file_type,
            system_prompt,
            request,
            output_name,
            input: Some(Input::from_bytes(input_name, original.bytes)),
        };
        self.write_file(task, "modified", caller, cancel).await
    }

    /// The system prompt for modifying a file of `file_type`; a PDF (named `name`) cannot be
    /// modified.
    fn modify_prompt(&self, file_type: FileType, name: &str) -> Result<String, ToolError> {
        match file_type {
            FileType::Excel => Ok(self.prompts.modify_excel.clone()),
            FileType::Docx => Ok(self.prompts.modify_docx.clone()),
            FileType::Pptx => Ok(self.prompts.modify_pptx.clone()),
            // `detect` refuses a PDF with its reason before this; no panic on a request path.
            FileType::Pdf => Err(ToolError::UnsupportedInput(format!(
                "{name:?} is a PDF, which modify_file cannot change"
            ))),
        }
    }

    /// The loop: ask, run, check, and either store or report back to the model.
    async fn write_file(
        &self,
        task: FileTask,
        verb: &str,
        caller: &Caller,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let mut conversation = vec![
            Message::System(task.system_prompt.clone()),
            Message::User(task.request.clone()),
        ];
        let file_path = format!("{OUTPUT_DIR}/{}", task.output_name);
        let mut last_error = String::new();
        for attempt in 1..=MAX_ATTEMPTS {
            let started = Instant::now();
            announce(Phase::Writing { attempt });
            let reply = self.llm.complete(&conversation, cancel).await?;
            conversation.push(Message::Assistant(reply.text.clone()));
            match self
                .checked_file(&task, &reply.text, attempt, &file_path, cancel)
                .await?
            {
                Ok(written) => {
                    let (text, data) = self
                        .store_file(&task, verb, attempt, written, caller)
                        .await?;
                    tracing::info!(
                        attempt,
                        model_ms = reply.elapsed.as_millis() as u64,
                        attempt_ms = started.elapsed().as_millis() as u64,
                        "file written"
                    );
                    return Ok(ToolOutput {
                        text,
                        attempts: attempt,
                        data: Some(Data::File(data)),
                    });
                }
                Err(error) => {
                    last_error = failed_attempt(attempt, &error);
                    conversation.push(self.retry_message(attempt, &last_error));
                }
            }
        }
        Err(ToolError::AttemptsExhausted {
            what: task.file_type.label(),
            attempts: MAX_ATTEMPTS,
            last_error,
        })
    }

    /// One attempt at the model's `reply`: its code run, its file checked and, for a
    /// modification, compared with the original. A valid file comes with its change report;
    /// `Ok(Err(reason))` is a failed attempt to report to the model.
    async fn checked_file(
        &self,
        task: &FileTask,
        reply: &str,
        attempt: usize,
        file_path: &str,
        cancel: &CancellationToken,
    ) -> Result<Result<Written, String>, ToolError> {
        let Some(code) = extract_code(reply) else {
            return Ok(Err("your reply contained no Python code block".to_string()));
        };
        tracing::debug!(attempt, %code, "generated code");
        announce(Phase::Running { attempt });
        let (mut written, line) = match self.try_code(task, code, file_path, cancel).await? {
            Ok(written) => written,
            Err(why) => return Ok(Err(why)),
        };
        // The attempt's audit line waits for the comparison's verdict: an unchanged copy is a
        // refused output, not `ok` (so the comparison's own line comes first). The file goes
        // to the caller only once its line is in the trail.
        let Some(original) = &task.input else {
            line.commit()?;
            return Ok(Ok(written));
        };
        match self
            .compare(task, &original.source, &written.bytes, cancel)
            .await?
        {
            Ok(report) => {
                line.commit()?;
                written.report = Some(report);
                Ok(Ok(written))
            }
            Err(why) => {
                line.refuse(&why);
                Ok(Err(why))
            }
        }
    }

    /// Stores the valid file and words the answer: its link, its size and id, the attempt,
    /// what it used, and the change report of a modification.
    async fn store_file(
        &self,
        task: &FileTask,
        verb: &str,
        attempt: usize,
        written: Written,
        caller: &Caller,
    ) -> Result<(String, FileResult), ToolError> {
        let Written {
            bytes,
            report,
            usage,
        } = written;
        let size = bytes.len() as u64;
        let stored = self
            .store_result(
                &task.output_name,
                content_type_for(&task.output_name),
                bytes,
                caller,
            )
            .await?;
        let mut text = format!(
            "{} {verb}: [{}]({})\n\n{} ({}), file id `{}`; attempt {attempt} of {MAX_ATTEMPTS}.",
            task.file_type.label(),
            stored.name,
            stored.url,
            stored.name,
            human_size(size),
            stored.id,
        );
        if let Some(usage) = usage {
            text.push_str(&format!(" The attempt {usage}."));
        }
        let mut data = FileResult {
            files: vec![ResultFile::of(&stored)],
            attempts: attempt,
            changes: None,
            changes_unavailable: None,
        };
        if let Some(report) = report {
            text.push_str("\n\n");
            text.push_str(&report.text);
            data.changes = report.report;
            data.changes_unavailable = report.unavailable;
        }
        Ok((text, data))
    }

    /// Runs one script; `Ok(Err(reason))` is a failed attempt to report to the model (its
    /// audit line says so). A valid file comes with the attempt's audit line, still open for
    /// the comparison's verdict.
    async fn try_code(
        &self,
        task: &FileTask,
        code: String,
        file_path: &str,
        cancel: &CancellationToken,
    ) -> Result<Result<(Written, AttemptLine), String>, ToolError> {
        let out_dir = tempfile::tempdir()
            .map_err(local_io("cannot create a temporary folder for the outputs"))?;
        let job = task.job(code, file_path);
        let (outcome, line) = self
            .run_judged(job, Author::Model, None, out_dir.path(), cancel)
            .await?;
        let stderr = outcome.stderr.text();
        let reason = failure_reason(&outcome, self.runner.config());
        if let Some(reason) = reason {
            return Ok(Err(reason));
        }
        let wanted = file_path
            .trim_start_matches(OUTPUT_DIR)
            .trim_start_matches('/');
        let Some(output) = outcome.outputs.iter().find(|file| file.path == wanted) else {
            let why = no_file_at(file_path, &outcome.outputs, &stderr);
            line.refuse(&why);
            return Ok(Err(why));
        };
        announce(Phase::Checking {
            what: task.file_type.label().to_string(),
        });
        let bytes = tokio::fs::read(&output.host_path)
            .await
            .map_err(local_io("cannot read the attempt's output"))?;
        let span = super::spans::check(task.file_type.label(), bytes.len());
        let (bytes, verdict) = self
            .validate(task.file_type, bytes)
            .instrument(span.clone())
            .await?;
        super::spans::record_verdict(&span, verdict.is_ok());
        let written = Written {
            bytes,
            report: None,
            usage: outcome.resources.summary(),
        };
        match verdict {
            Ok(()) => Ok(Ok((written, line))),
            Err(why) => {
                let why = format!(
                    "The file at file_path is not a valid {}: {why}.",
                    task.file_type.label()
                );
                line.refuse(&why);
                Ok(Err(why))
            }
        }
    }

    /// Whether `bytes` open as a valid file of `file_type`, by the caps-bound parsers of
    /// `untrusted`; the bytes come back with the verdict.
    async fn validate(
        &self,
        file_type: FileType,
        bytes: Vec<u8>,
    ) -> Result<(Vec<u8>, Result<(), String>), ToolError> {
        if file_type == FileType::Pdf {
            // A PDF's parse has no memory bound of its own: it runs in a capped child.
            let verdict = self
                .pdf
                .check(&bytes)
                .await
                .map_err(|error| local_io("cannot check the PDF")(std::io::Error::other(error)))?
                .map(|_pages| ())
                .map_err(|error| error.to_string());
            return Ok((bytes, verdict));
        }
        // Inflating a package within its caps can still take a second of CPU: keep it off the
        // async workers.
        tokio::task::spawn_blocking(move || {
            let verdict = detect::validate(file_type, &bytes);
            (bytes, verdict)
        })
        .await
        .map_err(|error| {
            local_io("cannot check the attempt's output")(std::io::Error::other(error))
        })
    }

    /// Compares a modified copy (`result`) with its original in the sandbox. `Ok(Err(..))` when
    /// the copy is unchanged or unreadable (a failed attempt, for the model to fix); otherwise
    /// the report for the answer, which says so when no report could be made (the copy is
    /// still good).
    async fn compare(
        &self,
        task: &FileTask,
        original: &InputSource,
        result: &[u8],
        cancel: &CancellationToken,
    ) -> Result<Result<Changes, String>, ToolError> {
        announce(Phase::Comparing);
        let out_dir = tempfile::tempdir()
            .map_err(local_io("cannot create a temporary folder for the outputs"))?;
        let job = changes::report_job(task.file_type, original.clone(), result.to_vec());
        let outcome = self
            .run_attempt(job, Author::FileAgent, out_dir.path(), cancel)
            .await?;
        let compared = changes::judge(
            outcome.status,
            failure_reason(&outcome, self.runner.config()),
            &outcome.stdout.text(),
            &outcome.stderr.text(),
        );
        Ok(change_report(task, compared))
    }
}

/// The answer's change report from the comparison, or why the attempt failed: the copy is
/// unchanged, or its library cannot open it. A comparison that could not be made still lets
/// the copy through, saying so.
fn change_report(task: &FileTask, compared: Compared) -> Result<Changes, String> {
    match compared {
        Compared::Changed(report) => Ok(Changes {
            text: format!(
                "**Changes** (computed by file-agent from the original and the result):\n{}",
                report.render()
            ),
            report: Some(report),
            unavailable: None,
        }),
        Compared::Unchanged => Err(format!(
            "Your script saved the file unchanged: file-agent compared {} with the original and found no difference in content or formatting. Make the requested changes before saving to `file_path`.",
            task.output_name
        )),
        Compared::ResultUnreadable(why) => Err(format!(
            "The saved file passed the structure check but its library cannot open it: {why}"
        )),
        Compared::Unavailable(why) => {
            tracing::warn!(error = %why, "no change report");
            Ok(Changes {
                text: format!(
                    "**Changes**: file-agent could not compare the files ({why}); open the copy to check it."
                ),
                report: None,
                unavailable: Some(why),
            })
        }
    }
}

/// Logs a failed attempt and announces the retry if one is left; the error's tail, for the
/// model and for the final error.
fn failed_attempt(attempt: usize, error: &str) -> String {
    tracing::info!(attempt, error = %tail(error, 300), "attempt failed");
    if attempt < MAX_ATTEMPTS {
        announce(Phase::Retrying {
            attempt,
            reason: short_reason(error),
        });
    }
    tail(error, ERROR_TAIL_CHARS)
}

/// Why an attempt that ended well still failed: no file at `file_path`; what was written, and
/// the script's stderr if it said anything.
fn no_file_at(file_path: &str, outputs: &[OutputFile], stderr: &str) -> String {
    let written: Vec<&str> = outputs.iter().map(|f| f.path.as_str()).collect();
    format!(
        "The script finished but wrote no file at file_path ({file_path}). Files written to {OUTPUT_DIR}: {written:?}. Save to the preset `file_path`.{}",
        if stderr.trim().is_empty() {
            String::new()
        } else {
            format!("\nstderr:\n{stderr}")
        }
    )
}

impl FileTask {
    /// The job for one script of the model's: the input (if any) at `/work/in/<name>`, the
    /// output expected at `file_path`.
    fn job(&self, code: String, file_path: &str) -> Job {
        let input_file_path = self
            .input
            .as_ref()
            .map(|input| format!("{INPUT_DIR}/{}", String::from_utf8_lossy(&input.name)));
        Job {
            script: code,
            inputs: self.input.iter().cloned().collect(),
            file_path: Some(file_path.to_string()),
            input_file_path,
            session: None,
        }
    }
}

/// A valid file an attempt wrote: its bytes, the change report of a modification, and what
/// the attempt used ("used 1.2 s of CPU and 212 MiB"), when measured.
struct Written {
    bytes: Vec<u8>,
    report: Option<Changes>,
    usage: Option<String>,
}

/// A modification's change report: its words in the answer, and the same as data.
struct Changes {
    text: String,
    report: Option<ChangeReport>,
    unavailable: Option<String>,
}
