//! `analyze_file` and `data_analysis_tool`: a question about a table, answered by computing.
//!
//! 1. The file's kind comes from its bytes ([`table`]); the image's own inspection script
//!    (not model-written) reports its encoding, delimiter, sheets, header row, columns and a
//!    ready-made pandas call to load it. That report opens the model's first message.
//! 2. Up to [`MAX_STEPS`] steps: the model writes pandas code, it runs in a fresh container,
//!    its output (cut to [`MODEL_OUTPUT_CHARS`] for the model, whole for the report) goes
//!    back; the model sends the next step or says `ANALYSIS_COMPLETE` and answers. Each step
//!    has its own budget of [`MAX_ATTEMPTS`] attempts, and the fix prompt repeats the
//!    inspection.
//! 3. The checker ([`checker`]) reviews it; on `fail`, one redo with its feedback, reviewed
//!    again. The redo's result is accepted either way, with the matching caveat; a redo that
//!    breaks down is recorded and the first result kept.
//! 4. [`report`] renders the answer: results, quality assurance, methodology; or the JSON of
//!    `data_analysis_tool`.

mod checker;
mod report;
pub mod table;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::filename::safe_name;
use super::progress::Phase;
use super::{Author, MAX_ATTEMPTS, ToolError, ToolOutput, Tools, failure_reason, local_io};
use crate::llm::code::extract_code;
use crate::llm::{LlmError, Message};
use crate::prompts::render;
use crate::sandbox::{Input, Job, OutputFile, Runner, Status};
use crate::storage::{Caller, Download};
use crate::text::{fenced, head, tail};
use crate::untrusted::table::{self as table_kind, TableKind};

/// Steps (model-written scripts that ran) per analysis pass.
pub const MAX_STEPS: usize = 3;
/// Characters of a step's output sent back to the model.
pub const MODEL_OUTPUT_CHARS: usize = 30_000;
/// The line with which the model says the analysis is done.
pub const COMPLETE_MARKER: &str = "ANALYSIS_COMPLETE";
/// Charts kept from one pass.
const MAX_CHARTS: usize = 10;
/// The largest chart kept, in bytes: charts are read into the server's memory (and
/// `data_analysis_tool` returns one as base64), so a bigger file is left out.
const MAX_CHART_BYTES: u64 = 10 * crate::config::MIB;

/// A chart a step saved.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Its file name in `/work/out`.
    pub name: String,
    /// The PNG.
    pub bytes: Vec<u8>,
}

/// One step that ran to the end.
#[derive(Debug, Clone)]
pub struct Step {
    /// The code that succeeded.
    pub code: String,
    /// Its stdout, and the stderr worth keeping, whole.
    pub output: String,
    /// Sandbox time of the successful attempt.
    pub elapsed: Duration,
    /// Attempts this step took (1 when the first worked).
    pub attempts: usize,
    /// Why the earlier attempts failed, one line each.
    pub failures: Vec<String>,
    /// PNGs it saved.
    pub charts: Vec<Chart>,
}

/// One run of the step loop: the first pass, or the redo after a failed review.
#[derive(Debug, Clone, Default)]
pub struct Pass {
    /// The steps that ran.
    pub steps: Vec<Step>,
    /// The model's final answer (Markdown).
    pub answer: String,
    /// Whether the step limit ended the loop rather than the model.
    pub limit_reached: bool,
}

/// How the result was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quality {
    /// The checker passed the first result.
    Passed,
    /// The checker failed the first result and passed the redo.
    PassedAfterCorrection,
    /// Accepted although the last review did not pass it (or no review could be had).
    AcceptedWithCaveats,
}

/// What the checker concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The analysis stands; the checker's comment.
    Pass(String),
    /// The analysis is wrong; what must change.
    Fail(String),
    /// No verdict could be had: the reply was not the agreed JSON, or the call failed.
    Unreadable(String),
}

/// The whole of one analysis, for the report.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// The question.
    pub question: String,
    /// The file's name.
    pub file_name: String,
    /// The inspection report (with a note when the name misleads).
    pub inspection: String,
    /// Time the inspection took in the sandbox.
    pub inspection_time: Duration,
    /// The first pass.
    pub first: Pass,
    /// The checker on the first pass.
    pub first_verdict: Verdict,
    /// The redo, if the first was failed: its pass, or why it broke down.
    pub redo: Option<Result<Pass, String>>,
    /// The checker on the redo.
    pub second_verdict: Option<Verdict>,
    /// Time waiting for models.
    pub model_time: Duration,
    /// Time in the sandbox, inspection included.
    pub sandbox_time: Duration,
    /// Sandbox attempts, inspection included.
    pub attempts: usize,
    /// Wall time of the whole analysis.
    pub total_time: Duration,
}

impl Analysis {
    /// The pass whose answer is given: the redo if it completed, else the first.
    pub fn accepted(&self) -> &Pass {
        match &self.redo {
            Some(Ok(pass)) => pass,
            _ => &self.first,
        }
    }

    /// The verdict in words.
    pub fn quality(&self) -> Quality {
        match (&self.first_verdict, &self.redo, &self.second_verdict) {
            (Verdict::Pass(_), _, _) => Quality::Passed,
            (Verdict::Fail(_), Some(Ok(_)), Some(Verdict::Pass(_))) => {
                Quality::PassedAfterCorrection
            }
            _ => Quality::AcceptedWithCaveats,
        }
    }
}

/// How one pass ended.
enum PassEnd {
    /// It reached an answer (or the step limit, and then an answer).
    Done(Pass),
    /// A step failed every attempt.
    BrokeDown(PassFailure),
}

/// How one attempt at a step ended.
enum StepRun {
    /// The code ran; its output and charts.
    Ran(Step),
    /// It failed; the reason, for the model to fix.
    Failed(String),
}

/// A pass that broke down: the steps that did run, and the error of the one that did not.
struct PassFailure {
    steps: usize,
    error: String,
}

/// One analysis in progress: the conversation with the model, what each step runs with (the
/// job, whose script each step replaces, and the inspection, which the fix prompt repeats),
/// the running totals, and the call's token.
struct Session<'a> {
    conversation: Vec<Message>,
    job: Job,
    inspection: String,
    clock: Clock,
    cancel: &'a CancellationToken,
}

impl<'a> Session<'a> {
    /// The session for `question` about the file `file_name` (the step's `input`), opened with
    /// the `system` prompt and the question with the inspection.
    fn new(
        system: &str,
        question: &str,
        file_name: &str,
        input: Input,
        inspection: String,
        cancel: &'a CancellationToken,
    ) -> Self {
        let conversation = vec![
            Message::System(system.to_string()),
            Message::User(format!(
                "Question:\n{question}\n\nThe file `{file_name}` is at `input_file_path`. Its inspection:\n\n{}",
                fenced("text", &inspection)
            )),
        ];
        let job = Job {
            script: String::new(),
            input_file_path: Some(format!("/work/in/{file_name}")),
            inputs: vec![input],
            file_path: None,
            session: None,
        };
        Self {
            conversation,
            job,
            inspection,
            clock: Clock::default(),
            cancel,
        }
    }
}

/// Running totals of one analysis.
#[derive(Default)]
struct Clock {
    model: Duration,
    sandbox: Duration,
    attempts: usize,
}

impl<R: Runner> Tools<R> {
    /// `analyze_file`: answers `instructions` about a stored file.
    pub async fn analyze_file(
        &self,
        file_id: &str,
        instructions: &str,
        caller: &Caller,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let file_id = super::non_empty(file_id, "file_id")?.trim();
        let instructions = super::non_empty(instructions, "instructions")?;
        self.require_llm()?;
        self.require_credential(caller).await?;
        super::progress::announce(Phase::Fetching);
        let download = self.storage.fetch(file_id, caller).await?;
        let analysis = self.analyze(download, instructions, cancel).await?;
        let mut links = Vec::new();
        let mut files = Vec::new();
        for chart in &analysis.accepted().charts() {
            let stored = self
                .store_result(&chart.name, "image/png", chart.bytes.clone(), caller)
                .await?;
            files.push(super::results::ResultFile::of(&stored));
            links.push((stored.name, stored.url));
        }
        Ok(ToolOutput {
            text: report::markdown(&analysis, &links),
            attempts: analysis.attempts,
            data: Some(super::results::Data::Analysis(report::data(
                &analysis, files,
            ))),
        })
    }

    /// `data_analysis_tool`: answers `query` about the document at a URL; JSON text back.
    pub async fn data_analysis(
        &self,
        query: &str,
        document: &str,
        document_name: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let query = super::non_empty(query, "query")?;
        let document = super::non_empty(document, "document")?;
        self.require_llm()?;
        let download = self.fetcher.fetch(document, document_name).await?;
        let analysis = self.analyze(download, query, cancel).await?;
        // The chart the JSON carries as `plot_image`, also as image content for MCP clients.
        if let Some(chart) = analysis.accepted().charts().first()
            && let Some(image) = super::progress::inline_image("image/png", &chart.bytes)
        {
            super::progress::record(super::progress::Made::Image(image));
        }
        let data = report::json(&analysis);
        Ok(ToolOutput {
            text: serde_json::to_value(&data).unwrap_or_default().to_string(),
            attempts: analysis.attempts,
            data: Some(super::results::Data::DataAnalysis(data)),
        })
    }

    /// Inspects, runs the steps, has them checked, and redoes once if the checker fails them.
    async fn analyze(
        &self,
        download: Download,
        question: &str,
        cancel: &CancellationToken,
    ) -> Result<Analysis, ToolError> {
        let started = Instant::now();
        let (mut session, file_name, inspection_time) =
            self.open_session(download, question, cancel).await?;
        let first = match self.pass(&mut session).await? {
            PassEnd::Done(pass) => pass,
            PassEnd::BrokeDown(failure) => {
                return Err(ToolError::AttemptsExhausted {
                    what: "analysis",
                    attempts: MAX_ATTEMPTS,
                    last_error: format!(
                        "step {} failed {MAX_ATTEMPTS} times: {}",
                        failure.steps + 1,
                        failure.error
                    ),
                });
            }
        };
        let first_verdict = self.review(question, &first, &mut session).await?;
        let (redo, second_verdict) = match &first_verdict {
            Verdict::Fail(feedback) => self.redo(question, feedback, &mut session).await?,
            _ => (None, None),
        };
        Ok(Analysis {
            question: question.to_string(),
            file_name,
            inspection: session.inspection,
            inspection_time,
            first,
            first_verdict,
            redo,
            second_verdict,
            model_time: session.clock.model,
            sandbox_time: session.clock.sandbox,
            attempts: session.clock.attempts,
            total_time: started.elapsed(),
        })
    }

    /// Detects the table's kind, inspects it, and opens the session with the inspection (and
    /// a note when the file's name misleads): the session, the file's name in the sandbox and
    /// the inspection's time.
    async fn open_session<'a>(
        &self,
        download: Download,
        question: &str,
        cancel: &'a CancellationToken,
    ) -> Result<(Session<'a>, String, Duration), ToolError> {
        let detected = table_kind::detect(&download.bytes, &download.name)
            .map_err(ToolError::UnsupportedInput)?;
        let file_name = safe_name(&download.name, &format!("data.{}", detected.kind.code()));
        let input = Input::from_bytes(file_name.as_str(), download.bytes);
        let mut clock = Clock::default();
        let (mut inspection, inspection_time) = self
            .inspect(input.clone(), detected.kind, &file_name, &mut clock, cancel)
            .await?;
        if let Some(note) = detected.note {
            inspection = format!("{note}\n\n{inspection}");
        }
        let session = Session {
            clock,
            ..Session::new(
                &self.prompts.analyze,
                question,
                &file_name,
                input,
                inspection,
                cancel,
            )
        };
        Ok((session, file_name, inspection_time))
    }

    /// The redo after the checker failed the first pass with `feedback`: its pass and the
    /// checker's verdict on it, or why it broke down.
    async fn redo(
        &self,
        question: &str,
        feedback: &str,
        session: &mut Session<'_>,
    ) -> Result<(Option<Result<Pass, String>>, Option<Verdict>), ToolError> {
        session.conversation.push(Message::User(render(
            &self.prompts.analysis_redo,
            &[("feedback", feedback)],
        )));
        match self.pass(session).await? {
            PassEnd::Done(pass) => {
                let verdict = self.review(question, &pass, session).await?;
                Ok((Some(Ok(pass)), Some(verdict)))
            }
            PassEnd::BrokeDown(failure) => Ok((
                Some(Err(format!(
                    "step {} of the redo failed {MAX_ATTEMPTS} times: {}",
                    failure.steps + 1,
                    failure.error
                ))),
                None,
            )),
        }
    }

    /// Runs the image's inspection script; an unreadable file is the caller's error.
    async fn inspect(
        &self,
        input: crate::sandbox::Input,
        kind: TableKind,
        file_name: &str,
        clock: &mut Clock,
        cancel: &CancellationToken,
    ) -> Result<(String, Duration), ToolError> {
        super::progress::announce(Phase::Inspecting);
        let out_dir = tempfile::tempdir()
            .map_err(local_io("cannot create a temporary folder for the outputs"))?;
        let outcome = self
            .run_attempt(
                table::inspection_job(input, kind),
                Author::FileAgent,
                out_dir.path(),
                cancel,
            )
            .await?;
        clock.sandbox += outcome.timings.total;
        clock.attempts += 1;
        let stdout = outcome.stdout.text();
        match outcome.status {
            Status::Ok if !stdout.trim().is_empty() => Ok((stdout, outcome.timings.total)),
            Status::Failed if outcome.exit_code == Some(2) => {
                Err(ToolError::UnsupportedInput(format!(
                    "{file_name:?} cannot be analysed: {}",
                    outcome.stderr.text().trim()
                )))
            }
            _ => Err(ToolError::UnsupportedInput(format!(
                "the inspection of {file_name:?} ({}) failed: {}",
                kind.label(),
                failure_reason(&outcome, self.runner.config())
                    .unwrap_or_else(|| "it printed nothing".into())
            ))),
        }
    }

    /// One pass of up to [`MAX_STEPS`] steps.
    async fn pass(&self, session: &mut Session<'_>) -> Result<PassEnd, ToolError> {
        let mut steps: Vec<Step> = Vec::new();
        let mut chart_names = HashSet::new();
        for step_number in 1..=MAX_STEPS {
            super::progress::announce(Phase::Computing { step: step_number });
            let reply = self.ask(session).await?;
            if let Some(answer) = final_answer(&reply) {
                return Ok(PassEnd::Done(Pass {
                    steps,
                    answer,
                    limit_reached: false,
                }));
            }
            let step = match self
                .step(session, reply, step_number, &mut chart_names)
                .await?
            {
                Ok(step) => step,
                Err(error) => {
                    return Ok(PassEnd::BrokeDown(PassFailure {
                        steps: steps.len(),
                        error,
                    }));
                }
            };
            session
                .conversation
                .push(self.step_message(step_number, &step));
            steps.push(step);
        }
        session
            .conversation
            .push(Message::User(self.prompts.analysis_final.clone()));
        let reply = self.ask(session).await?;
        let answer = final_answer(&reply).unwrap_or_else(|| reply.trim().to_string());
        Ok(PassEnd::Done(Pass {
            steps,
            answer,
            limit_reached: true,
        }))
    }

    /// One step, from the model's `reply`: its code run, and on failure the error sent back
    /// for a fix, up to [`MAX_ATTEMPTS`] attempts. `Ok(Err(error))` when every attempt failed:
    /// the last error's tail.
    async fn step(
        &self,
        session: &mut Session<'_>,
        mut reply: String,
        step_number: usize,
        chart_names: &mut HashSet<String>,
    ) -> Result<Result<Step, String>, ToolError> {
        let mut failures = Vec::new();
        loop {
            let attempt = failures.len() + 1;
            let result = match extract_code(&reply) {
                None => StepRun::Failed(format!(
                    "your reply had neither a fenced python block nor a line with {COMPLETE_MARKER}"
                )),
                Some(code) => {
                    tracing::debug!(step = step_number, attempt, %code, "analysis code");
                    self.run_step(session, code, chart_names).await?
                }
            };
            match result {
                StepRun::Ran(mut step) => {
                    step.attempts = attempt;
                    step.failures = failures;
                    return Ok(Ok(step));
                }
                StepRun::Failed(error) => {
                    tracing::info!(step = step_number, attempt, error = %tail(&error, 300), "analysis attempt failed");
                    if attempt == MAX_ATTEMPTS {
                        return Ok(Err(tail(&error, super::ERROR_TAIL_CHARS)));
                    }
                    failures.push(last_line(&error));
                    let fix = self.fix_message(attempt, &error, &session.inspection);
                    session.conversation.push(fix);
                    reply = self.ask(session).await?;
                }
            }
        }
    }

    /// The message that asks for a fix of attempt `attempt` after `error`, with the
    /// inspection again.
    fn fix_message(&self, attempt: usize, error: &str, inspection: &str) -> Message {
        Message::User(render(
            &self.prompts.analysis_fix,
            &[
                ("attempt", &attempt.to_string()),
                ("max_attempts", &MAX_ATTEMPTS.to_string()),
                (
                    "error",
                    &fenced("text", &tail(error, super::ERROR_TAIL_CHARS)),
                ),
                ("inspection", &fenced("text", inspection)),
            ],
        ))
    }

    /// The message that gives the model step `step_number`'s output, cut to
    /// [`MODEL_OUTPUT_CHARS`].
    fn step_message(&self, step_number: usize, step: &Step) -> Message {
        let shown = if step.output.trim().is_empty() {
            "(the step printed nothing)".to_string()
        } else {
            head(&step.output, MODEL_OUTPUT_CHARS)
        };
        Message::User(render(
            &self.prompts.analysis_step,
            &[
                ("step", &step_number.to_string()),
                ("max_steps", &MAX_STEPS.to_string()),
                ("output", &fenced("text", &shown)),
            ],
        ))
    }

    /// Asks the model and records its answer in the conversation.
    async fn ask(&self, session: &mut Session<'_>) -> Result<String, ToolError> {
        let reply = self
            .llm
            .complete(&session.conversation, session.cancel)
            .await?;
        session.clock.model += reply.elapsed;
        session
            .conversation
            .push(Message::Assistant(reply.text.clone()));
        Ok(reply.text)
    }

    /// Runs one attempt at a step's code.
    async fn run_step(
        &self,
        session: &mut Session<'_>,
        code: String,
        chart_names: &mut HashSet<String>,
    ) -> Result<StepRun, ToolError> {
        let out_dir = tempfile::tempdir()
            .map_err(local_io("cannot create a temporary folder for the outputs"))?;
        let job = Job {
            script: code.clone(),
            ..session.job.clone()
        };
        let outcome = self
            .run_attempt(job, Author::Model, out_dir.path(), session.cancel)
            .await?;
        session.clock.sandbox += outcome.timings.total;
        session.clock.attempts += 1;
        if let Some(reason) = failure_reason(&outcome, self.runner.config()) {
            return Ok(StepRun::Failed(reason));
        }
        let mut output = outcome.stdout.text();
        let warnings = report::meaningful_stderr(&outcome.stderr.text());
        if !warnings.trim().is_empty() {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&format!("[stderr]\n{}", warnings.trim_end()));
        }
        let charts = charts(&outcome.outputs, chart_names).await?;
        Ok(StepRun::Ran(Step {
            code,
            output,
            elapsed: outcome.timings.total,
            attempts: 1,
            failures: Vec::new(),
            charts,
        }))
    }

    /// Has the checker review a pass. A failed call is recorded, not fatal (the analysis
    /// itself is done); only cancellation ends the call.
    async fn review(
        &self,
        question: &str,
        pass: &Pass,
        session: &mut Session<'_>,
    ) -> Result<Verdict, ToolError> {
        super::progress::announce(Phase::Reviewing);
        let messages = [
            Message::System(self.prompts.checker.clone()),
            Message::User(checker::review_material(
                question,
                &session.inspection,
                pass,
            )),
        ];
        match self.llm.complete(&messages, session.cancel).await {
            Ok(reply) => {
                session.clock.model += reply.elapsed;
                let verdict = checker::parse_verdict(&reply.text);
                tracing::info!(verdict = ?verdict, "checker");
                Ok(verdict)
            }
            Err(LlmError::Cancelled) => Err(ToolError::Cancelled),
            Err(error) => Ok(Verdict::Unreadable(format!(
                "the checker could not be asked: {error}"
            ))),
        }
    }
}

impl Pass {
    /// Every chart of the pass, in step order.
    pub fn charts(&self) -> Vec<&Chart> {
        self.steps.iter().flat_map(|step| &step.charts).collect()
    }
}

/// The charts among a step's `outputs`: PNGs (by name and by signature) no larger than
/// [`MAX_CHART_BYTES`], up to [`MAX_CHARTS`] in the pass, each under a name unique in it.
async fn charts(
    outputs: &[OutputFile],
    chart_names: &mut HashSet<String>,
) -> Result<Vec<Chart>, ToolError> {
    let mut charts = Vec::new();
    for file in outputs {
        if !file.path.to_ascii_lowercase().ends_with(".png")
            || chart_names.len() >= MAX_CHARTS
            || file.bytes > MAX_CHART_BYTES
        {
            continue;
        }
        let bytes = tokio::fs::read(&file.host_path)
            .await
            .map_err(local_io("cannot read a chart"))?;
        if !bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            continue;
        }
        let name = super::unique_name(
            safe_name(&file.path.replace('/', "_"), "chart.png"),
            chart_names,
        );
        charts.push(Chart { name, bytes });
    }
    Ok(charts)
}

/// The answer after a line that is only the marker (bold or code markup around it is fine);
/// `None` when there is no such line.
fn final_answer(reply: &str) -> Option<String> {
    let lines: Vec<&str> = reply.lines().collect();
    let at = lines.iter().position(|line| {
        line.trim()
            .trim_matches(|c| matches!(c, '*' | '`' | '#' | ' ' | ':' | '_'))
            == COMPLETE_MARKER
            || line.trim() == COMPLETE_MARKER
    })?;
    let after = lines[at + 1..].join("\n").trim().to_string();
    if after.is_empty() {
        Some(lines[..at].join("\n").trim().to_string())
    } else {
        Some(after)
    }
}

/// The last non-empty line of an error (where a traceback names the exception).
fn last_line(error: &str) -> String {
    error
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("(no message)")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_ends_the_loop_only_on_a_line_of_its_own() {
        assert_eq!(
            final_answer("ANALYSIS_COMPLETE\nTotal sales: **1,234**.").as_deref(),
            Some("Total sales: **1,234**.")
        );
        assert_eq!(
            final_answer("**ANALYSIS_COMPLETE**\n\nThe answer.").as_deref(),
            Some("The answer.")
        );
        assert_eq!(
            final_answer("The answer is 4.\nANALYSIS_COMPLETE").as_deref(),
            Some("The answer is 4.")
        );
        assert_eq!(final_answer("```python\nprint(1)\n```"), None);
        assert_eq!(
            final_answer("I will print ANALYSIS_COMPLETE when done.\n```python\nx\n```"),
            None
        );
    }
}
