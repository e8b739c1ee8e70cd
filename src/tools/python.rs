//! `run_python`: the caller's own code, with inputs fetched from storage into `/work/in` and
//! every file written to `/work/out` stored and linked. No model is involved, so it works
//! without an API key.

use std::collections::HashSet;

use tokio_util::sync::CancellationToken;

use super::filename::safe_name;
use super::progress::{Phase, announce};
use super::results::{Data, PythonResult, ResultFile};
use super::{Author, ToolError, ToolOutput, Tools, human_size, local_io, unique_name};
use crate::sandbox::{Input, Job, Outcome, Runner, Status};
use crate::storage::{Caller, content_type_for};
use crate::text::tail;

/// Characters of stdout and stderr put into the answer.
const OUTPUT_CHARS: usize = 20_000;
/// Inputs per call.
const MAX_INPUTS: usize = 20;

impl<R: Runner> Tools<R> {
    /// Runs `code` with the files `file_ids` in `/work/in`.
    pub async fn run_python(
        &self,
        code: &str,
        file_ids: &[String],
        caller: &Caller,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        check_arguments(code, file_ids)?;
        // Whatever the code writes to /work/out is stored, and which files it writes is only
        // known after it ran: without a credential to store them, refuse before running.
        self.require_credential(caller).await?;
        let inputs = self.fetch_inputs(file_ids, caller).await?;
        let out_dir = tempfile::tempdir()
            .map_err(local_io("cannot create a temporary folder for the outputs"))?;
        let job = Job {
            script: code.to_string(),
            inputs,
            file_path: None,
            input_file_path: None,
        };
        announce(Phase::Running { attempt: 1 });
        let outcome = self
            .run_attempt(job, Author::Caller, out_dir.path(), cancel)
            .await?;
        let mut text = output_text(&outcome)?;
        let (links, files) = self.store_outputs(&outcome, caller).await?;
        if links.is_empty() {
            text.push_str("\nNo files were written to /work/out.");
        } else {
            text.push_str("\nFiles:\n");
            text.push_str(&links.join("\n"));
        }
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
