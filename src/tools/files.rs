//! `generate_file` and `modify_file`: the self-healing loop. The model writes a script; the
//! sandbox runs it in a fresh container; the file at `file_path` must exist and open as the
//! asked type, and a modified copy must differ from its original (by the change report, which
//! a second container computes from both files); otherwise the trimmed error goes back to the
//! model for a corrected script, up to [`MAX_ATTEMPTS`] attempts. Only a valid file is stored;
//! the original of a modification is a read-only input and is never replaced.

use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::changes::{self, Compared};
use super::filename::{output_name, safe_name};
use super::progress::{Phase, announce, short_reason};
use super::{
    AttemptLine, Author, ERROR_TAIL_CHARS, MAX_ATTEMPTS, ToolError, ToolOutput, Tools,
    failure_reason, human_size, local_io, non_empty,
};
use crate::llm::Message;
use crate::llm::code::extract_code;
use crate::sandbox::{Input, InputSource, Job, Runner};
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
        let system_prompt = match file_type {
            FileType::Excel => self.prompts.modify_excel.clone(),
            FileType::Docx => self.prompts.modify_docx.clone(),
            FileType::Pptx => self.prompts.modify_pptx.clone(),
            // `detect` refuses a PDF with its reason before this; no panic on a request path.
            FileType::Pdf => {
                return Err(ToolError::UnsupportedInput(format!(
                    "{:?} is a PDF, which modify_file cannot change",
                    original.name
                )));
            }
        };
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
            let result = match extract_code(&reply.text) {
                None => Err("your reply contained no Python code block".to_string()),
                Some(code) => {
                    tracing::debug!(attempt, %code, "generated code");
                    announce(Phase::Running { attempt });
                    self.try_code(&task, code, &file_path, cancel).await?
                }
            };
            // The attempt's audit line waits for the comparison's verdict: an unchanged copy
            // is a refused output, not `ok` (so the comparison's own line comes first).
            let result = match (result, &task.input) {
                (Ok((bytes, line)), Some(original)) => {
                    match self
                        .compare(&task, &original.source, &bytes, cancel)
                        .await?
                    {
                        Ok(report) => {
                            line.commit()?;
                            Ok((bytes, Some(report)))
                        }
                        Err(why) => {
                            line.refuse(&why);
                            Err(why)
                        }
                    }
                }
                // The file goes to the caller only once its line is in the trail.
                (Ok((bytes, line)), None) => {
                    line.commit()?;
                    Ok((bytes, None))
                }
                (Err(why), _) => Err(why),
            };
            match result {
                Ok((bytes, report)) => {
                    let size = bytes.len() as u64;
                    let stored = self
                        .store_result(
                            &task.output_name,
                            content_type_for(&task.output_name),
                            bytes,
                            caller,
                        )
                        .await?;
                    tracing::info!(
                        attempt,
                        model_ms = reply.elapsed.as_millis() as u64,
                        attempt_ms = started.elapsed().as_millis() as u64,
                        "file written"
                    );
                    let mut text = format!(
                        "{} {verb}: [{}]({})\n\n{} ({}), file id `{}`; attempt {attempt} of {MAX_ATTEMPTS}.",
                        task.file_type.label(),
                        stored.name,
                        stored.url,
                        stored.name,
                        human_size(size),
                        stored.id,
                    );
                    if let Some(report) = report {
                        text.push_str("\n\n");
                        text.push_str(&report);
                    }
                    return Ok(ToolOutput {
                        text,
                        attempts: attempt,
                    });
                }
                Err(error) => {
                    tracing::info!(attempt, error = %tail(&error, 300), "attempt failed");
                    if attempt < MAX_ATTEMPTS {
                        announce(Phase::Retrying {
                            attempt,
                            reason: short_reason(&error),
                        });
                    }
                    last_error = tail(&error, ERROR_TAIL_CHARS);
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

    /// Runs one script; `Ok(Err(reason))` is a failed attempt to report to the model (its
    /// audit line says so). A valid file comes with the attempt's audit line, still open for
    /// the comparison's verdict.
    async fn try_code(
        &self,
        task: &FileTask,
        code: String,
        file_path: &str,
        cancel: &CancellationToken,
    ) -> Result<Result<(Vec<u8>, AttemptLine), String>, ToolError> {
        let out_dir = tempfile::tempdir()
            .map_err(local_io("cannot create a temporary folder for the outputs"))?;
        let input_file_path = task
            .input
            .as_ref()
            .map(|input| format!("{INPUT_DIR}/{}", String::from_utf8_lossy(&input.name)));
        let job = Job {
            script: code,
            inputs: task.input.iter().cloned().collect(),
            file_path: Some(file_path.to_string()),
            input_file_path,
        };
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
            let written: Vec<&str> = outcome.outputs.iter().map(|f| f.path.as_str()).collect();
            let why = format!(
                "The script finished but wrote no file at file_path ({file_path}). Files written to {OUTPUT_DIR}: {written:?}. Save to the preset `file_path`.{}",
                if stderr.trim().is_empty() {
                    String::new()
                } else {
                    format!("\nstderr:\n{stderr}")
                }
            );
            line.refuse(&why);
            return Ok(Err(why));
        };
        announce(Phase::Checking {
            what: task.file_type.label().to_string(),
        });
        let bytes = tokio::fs::read(&output.host_path)
            .await
            .map_err(local_io("cannot read the attempt's output"))?;
        let file_type = task.file_type;
        let (bytes, verdict) = if file_type == FileType::Pdf {
            // A PDF's parse has no memory bound of its own: it runs in a capped child.
            let verdict = self
                .pdf
                .check(&bytes)
                .await
                .map_err(|error| local_io("cannot check the PDF")(std::io::Error::other(error)))?
                .map(|_pages| ())
                .map_err(|error| error.to_string());
            (bytes, verdict)
        } else {
            // Inflating a package within its caps can still take a second of CPU: keep it
            // off the async workers.
            tokio::task::spawn_blocking(move || {
                let verdict = detect::validate(file_type, &bytes);
                (bytes, verdict)
            })
            .await
            .map_err(|error| {
                local_io("cannot check the attempt's output")(std::io::Error::other(error))
            })?
        };
        match verdict {
            Ok(()) => Ok(Ok((bytes, line))),
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
    ) -> Result<Result<String, String>, ToolError> {
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
        let text = match compared {
            Compared::Changed(report) => format!(
                "**Changes** (computed by file-agent from the original and the result):\n{}",
                report.render()
            ),
            Compared::Unchanged => {
                return Ok(Err(format!(
                    "Your script saved the file unchanged: file-agent compared {} with the original and found no difference in content or formatting. Make the requested changes before saving to `file_path`.",
                    task.output_name
                )));
            }
            Compared::ResultUnreadable(why) => {
                return Ok(Err(format!(
                    "The saved file passed the structure check but its library cannot open it: {why}"
                )));
            }
            Compared::Unavailable(why) => {
                tracing::warn!(error = %why, "no change report");
                format!(
                    "**Changes**: file-agent could not compare the files ({why}); open the copy to check it."
                )
            }
        };
        Ok(Ok(text))
    }
}
