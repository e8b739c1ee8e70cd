//! `conduct_deep_research`: one background run of OpenAI's deep research, polled until it
//! ends. Polls every `FILE_AGENT_RESEARCH_POLL` (5 s) for at most `FILE_AGENT_RESEARCH_TIMEOUT`
//! (600 s); a poll that fails for a transient reason is logged and tried again at the next
//! tick; each change of status is logged and reported as progress. A run that times out, whose
//! call is cancelled (`notifications/cancelled`, `tasks/cancel`) or that shutdown stops is
//! cancelled at the API, so it stops costing money. A run whose caller went away over HTTP (a
//! closed stream: the client's timeout, a closed tab) goes on without it, and its report is
//! kept for that caller's next call with the same instructions ([`super::research_runs`]).
//!
//! The report keeps the model's text, marks each URL citation inline as `[[n]](url)` and ends
//! with the numbered sources.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::progress::{Phase, announce};
use super::research_runs::{Ended, Found, RunKey};
use super::results::{Data, ResearchResult, Source};
use super::{ToolError, ToolOutput, Tools, non_empty};
use crate::config::ResearchConfig;
use crate::llm::research::{Citation, ResearchRun, RunStatus};
use crate::llm::{Llm, LlmError};
use crate::owner::Owner;
use crate::sandbox::Runner;

/// The first line of a report that a call gets from a run an earlier call of its caller
/// started and stopped waiting for.
const FROM_EARLIER_CALL: &str = "_This report comes from the research run that an earlier call with the same instructions started and stopped waiting for._";

/// Why polling stopped before the run ended.
enum Stopped {
    /// The run failed, was refused, or ran out of time.
    Failed(ToolError),
    /// The call's token fired; the run is still going at the provider.
    Cancelled(ResearchRun),
}

impl<R: Runner> Tools<R> {
    /// Researches `instructions` on the web for `owner`, announcing the run's status as it is
    /// polled. `client` is the HTTP client's connection, which fires when it goes away (`None`
    /// over stdio and for a task, where leaving cannot be told from cancelling): a run whose
    /// caller left goes on and is kept; an earlier run of the same caller and instructions
    /// that was kept is joined or given back first.
    pub async fn deep_research(
        &self,
        instructions: &str,
        owner: &Owner,
        cancel: &CancellationToken,
        client: Option<&CancellationToken>,
    ) -> Result<ToolOutput, ToolError> {
        let instructions = non_empty(instructions, "instructions")?;
        self.require_llm()?;
        let key = RunKey::new(owner, instructions);
        if let Some(key) = &key
            && let Some(found) = self.research_runs.find(key)
        {
            return self.earlier_run(key, found, cancel).await;
        }
        let config = &self.research;
        let started = Instant::now();
        let run = self
            .llm
            .start_research(&config.model, &self.prompts.research, instructions, cancel)
            .await?;
        tracing::info!(id = %run.id, model = %config.model, status = run.status.as_str(), "research started");
        announce(researching(config, &run, started));
        let run = match poll(&self.llm, config, run, started, cancel).await {
            Ok(run) => run,
            Err(Stopped::Failed(error)) => return Err(error),
            Err(Stopped::Cancelled(run)) => {
                return Err(self
                    .stopped(run, started, key.filter(|_| self.caller_left(client)))
                    .await);
            }
        };
        tracing::info!(id = %run.id, status = run.status.as_str(), searches = run.searches, elapsed_s = started.elapsed().as_secs(), "research ended");
        finish(run, &config.model, started.elapsed())
    }

    /// Whether the call's client went away (its connection closed) rather than the call being
    /// cancelled or the server stopping.
    fn caller_left(&self, client: Option<&CancellationToken>) -> bool {
        client.is_some_and(CancellationToken::is_cancelled) && !self.stopping.is_cancelled()
    }

    /// A run whose call was stopped: cancelled at the provider, unless its caller left (`key`)
    /// and there is room to let it go on without them ([`Self::go_on_without_caller`]).
    async fn stopped(&self, run: ResearchRun, started: Instant, key: Option<RunKey>) -> ToolError {
        if let Some(key) = key {
            if let Some(sender) = self.research_runs.adopt(&key, started) {
                tracing::info!(id = %run.id, elapsed_s = started.elapsed().as_secs(), keep_s = self.research.keep_for.as_secs(), "research: the caller stopped waiting; the run goes on, and its report is kept for the caller's next call with the same instructions");
                self.go_on_without_caller(key, run, started, sender);
                return ToolError::Left { kept: true };
            }
            tracing::warn!(id = %run.id, kept = self.research_runs.len(), "research: the caller stopped waiting and FILE_AGENT_RESEARCH_KEPT_MAX runs are kept already; the run is cancelled");
        }
        self.llm.cancel_research(&run.id).await;
        ToolError::Cancelled
    }

    /// Polls `run` on its own task (among the calls shutdown waits for and stops) until it
    /// ends, and keeps what it ended with for its caller.
    fn go_on_without_caller(
        &self,
        key: RunKey,
        run: ResearchRun,
        started: Instant,
        sender: tokio::sync::watch::Sender<Option<Ended>>,
    ) {
        let (llm, config, runs) = (
            self.llm.clone(),
            self.research.clone(),
            self.research_runs.clone(),
        );
        let (token, calls) = (self.stopping.child_token(), self.calls.clone());
        tokio::spawn(calls.track_future(async move {
            let ended = match poll(&llm, &config, run, started, &token).await {
                Ok(run) => {
                    tracing::info!(id = %run.id, status = run.status.as_str(), elapsed_s = started.elapsed().as_secs(), keep_s = config.keep_for.as_secs(), "research ended without its caller; the report is kept for the caller's next call with the same instructions");
                    finish(run, &config.model, started.elapsed()).map_err(|error| error.to_string())
                }
                Err(Stopped::Failed(error)) => {
                    tracing::info!(error = %error, "research ended without its caller, without a report");
                    Err(error.to_string())
                }
                Err(Stopped::Cancelled(run)) => {
                    tracing::info!(id = %run.id, "research without its caller stopped by shutdown; cancelled at the provider");
                    llm.cancel_research(&run.id).await;
                    runs.forget(&key);
                    return;
                }
            };
            runs.finish(&key, ended, &sender);
        }));
    }

    /// The answer from an earlier run of the same caller and instructions: its kept report,
    /// or, while it still goes, its end (its status announced every poll meanwhile). A call
    /// that stops waiting for it leaves it going.
    async fn earlier_run(
        &self,
        key: &RunKey,
        found: Found,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let (mut ended, started) = match found {
            Found::Kept(ended) => {
                tracing::info!(
                    "research: the report kept from an earlier call is given to its caller"
                );
                return from_earlier_call(*ended);
            }
            Found::Running(ended, started) => (ended, started),
        };
        tracing::info!(
            elapsed_s = started.elapsed().as_secs(),
            "research: the caller joins the run its earlier call stopped waiting for"
        );
        let total = self.research.max_wait.as_secs_f64();
        loop {
            announce(Phase::Researching {
                elapsed: started.elapsed().as_secs_f64(),
                total,
                status: "in progress".into(),
            });
            tokio::select! {
                () = cancel.cancelled() => return Err(ToolError::Cancelled),
                waited = ended.wait_for(Option::is_some) => {
                    let result = waited.map(|ended| ended.clone()).ok().flatten();
                    self.research_runs.take(key);
                    return match result {
                        Some(ended) => from_earlier_call(ended),
                        None => Err(ToolError::Research(
                            "the earlier research run was stopped (the server is shutting down); start it again".into(),
                        )),
                    };
                }
                () = tokio::time::sleep(self.research.poll_interval) => {}
            }
        }
    }
}

/// A kept answer, given to the caller's next call: the report marked as coming from the
/// earlier call's run.
fn from_earlier_call(ended: Ended) -> Result<ToolOutput, ToolError> {
    let mut output = ended.map_err(ToolError::Research)?;
    output.text = format!("{FROM_EARLIER_CALL}\n\n{}", output.text);
    Ok(output)
}

/// Polls `run` every `FILE_AGENT_RESEARCH_POLL` until it ends. Past
/// `FILE_AGENT_RESEARCH_TIMEOUT` the run is cancelled; when `cancel` fires, polling stops and
/// the caller decides what becomes of the run; a transient failed poll is tried again at the
/// next interval.
async fn poll(
    llm: &Llm,
    config: &ResearchConfig,
    mut run: ResearchRun,
    started: Instant,
    cancel: &CancellationToken,
) -> Result<ResearchRun, Stopped> {
    let mut failed_polls = 0u32;
    while !run.status.is_terminal() {
        let left = config.max_wait.saturating_sub(started.elapsed());
        if left.is_zero() {
            llm.cancel_research(&run.id).await;
            return Err(Stopped::Failed(timed_out(config, &run)));
        }
        tokio::select! {
            () = cancel.cancelled() => return Err(Stopped::Cancelled(run)),
            () = tokio::time::sleep(config.poll_interval.min(left)) => {}
        }
        if started.elapsed() >= config.max_wait {
            continue;
        }
        match llm.research_status(&run.id, &config.model, cancel).await {
            Ok(next) => {
                failed_polls = 0;
                if next.status != run.status {
                    tracing::info!(id = %run.id, from = run.status.as_str(), to = next.status.as_str(), elapsed_s = started.elapsed().as_secs(), "research status");
                }
                run = next;
                announce(researching(config, &run, started));
            }
            Err(LlmError::Cancelled) => return Err(Stopped::Cancelled(run)),
            Err(error) if is_transient(&error) => {
                failed_polls += 1;
                tracing::warn!(id = %run.id, failed_polls, error = %error, "research poll failed; trying again");
            }
            Err(error) => return Err(Stopped::Failed(error.into())),
        }
    }
    Ok(run)
}

/// The error for a run that did not finish within `FILE_AGENT_RESEARCH_TIMEOUT`.
fn timed_out(config: &ResearchConfig, run: &ResearchRun) -> ToolError {
    ToolError::Research(format!(
        "the research did not finish within {} s (status: {}) and was cancelled; narrow the question, or raise FILE_AGENT_RESEARCH_TIMEOUT",
        config.max_wait.as_secs(),
        run.status.as_str()
    ))
}

/// The run's status and how much of the wait has passed.
fn researching(config: &ResearchConfig, run: &ResearchRun, started: Instant) -> Phase {
    Phase::Researching {
        elapsed: started.elapsed().as_secs_f64(),
        total: config.max_wait.as_secs_f64(),
        status: run.status.as_str().replace('_', " "),
    }
}

/// A failed poll worth trying again: the network, a timeout, a 429 or 5xx, a garbled answer.
fn is_transient(error: &LlmError) -> bool {
    match error {
        LlmError::Unreachable { .. } | LlmError::Timeout { .. } | LlmError::BadReply { .. } => true,
        LlmError::Api { status, .. } => *status == 429 || *status >= 500,
        _ => false,
    }
}

fn finish(run: ResearchRun, model: &str, took: Duration) -> Result<ToolOutput, ToolError> {
    let why = run
        .error
        .clone()
        .unwrap_or_else(|| "no reason given".into());
    match run.status {
        RunStatus::Completed | RunStatus::Incomplete if !run.text.trim().is_empty() => {
            let report = cite(&run.text, &run.citations);
            let mut text = report.clone();
            if run.status == RunStatus::Incomplete {
                text.push_str(&format!(
                    "\n\n_Note: the research stopped early ({why}); the report may be unfinished._"
                ));
            }
            text.push_str(&format!(
                "\n\n_Deep research by {model}: {} web searches and page visits, {} min {} s._",
                run.searches,
                took.as_secs() / 60,
                took.as_secs() % 60
            ));
            let data = ResearchResult {
                report,
                sources: sources(&run.citations),
                complete: run.status == RunStatus::Completed,
                searches: run.searches,
                model: model.to_string(),
            };
            Ok(ToolOutput {
                text,
                attempts: 0,
                data: Some(Data::Research(data)),
            })
        }
        RunStatus::Completed => Err(ToolError::Research(
            "the research finished without a report; try again, perhaps with more specific instructions"
                .into(),
        )),
        RunStatus::Failed => Err(ToolError::Research(format!(
            "the research failed at the provider: {why}; try again later"
        ))),
        RunStatus::Cancelled => Err(ToolError::Research(
            "the research run was cancelled at the provider; start it again".into(),
        )),
        RunStatus::Incomplete => Err(ToolError::Research(format!(
            "the research stopped early without a report ({why}); narrow the question and try again"
        ))),
        RunStatus::Queued | RunStatus::InProgress => Err(ToolError::Research(
            "the research had not finished".into(),
        )),
    }
}

/// The text with each citation marked inline and a numbered list of sources (numbered by
/// first citation; a page cited twice keeps its number). A span that is the page's own
/// Markdown link is replaced by the numbered link; another span gets the link after it.
/// Spans that do not fit the text (offsets past its end, overlaps) are listed, not marked.
pub fn cite(text: &str, citations: &[Citation]) -> String {
    let sources = sources(citations);
    let mut numbered: Vec<(usize, &Citation)> = citations
        .iter()
        .map(|citation| {
            let index = sources.iter().position(|source| source.url == citation.url);
            (index.unwrap_or_default() + 1, citation)
        })
        .collect();
    let chars: Vec<char> = text.chars().collect();
    numbered.sort_by_key(|(_, citation)| (citation.start, citation.end));
    let mut out = String::new();
    let mut at = 0;
    for (number, citation) in numbered {
        if citation.start < at || citation.end > chars.len() || citation.start > citation.end {
            continue;
        }
        let span: String = chars[citation.start..citation.end].iter().collect();
        out.extend(&chars[at..citation.start]);
        let link = format!("[[{number}]]({})", citation.url);
        if span.contains(&citation.url) {
            out.push_str(&link);
        } else {
            out.push_str(&span);
            out.push(' ');
            out.push_str(&link);
        }
        at = citation.end;
    }
    out.extend(&chars[at..]);
    if !sources.is_empty() {
        out.push_str("\n\n## Sources\n\n");
        for (index, Source { title, url }) in sources.iter().enumerate() {
            out.push_str(&format!(
                "{}. [{}]({url})\n",
                index + 1,
                title.replace(['[', ']'], "")
            ));
        }
    }
    out
}

/// The pages `citations` cite, each once, numbered (from 1) by its first citation.
pub fn sources(citations: &[Citation]) -> Vec<Source> {
    let mut sources: Vec<Source> = Vec::new();
    for citation in citations {
        if !sources.iter().any(|source| source.url == citation.url) {
            sources.push(Source {
                title: citation.title.clone(),
                url: citation.url.clone(),
            });
        }
    }
    sources
}

#[cfg(test)]
mod tests {
    use super::*;

    fn citation(title: &str, url: &str, start: usize, end: usize) -> Citation {
        Citation {
            title: title.into(),
            url: url.into(),
            start,
            end,
        }
    }

    #[test]
    fn citations_are_numbered_inline_and_listed_once_each() {
        let text =
            "Async was stable in 1.39 ([blog](https://b.example/a)). Rust is fast. Née 2015.";
        let link_start = text.find("([blog]").unwrap();
        let link_end = link_start + "([blog](https://b.example/a))".len();
        let fast = text.find("Rust is fast").unwrap();
        let nee = text[..text.find("Née").unwrap()].chars().count();
        let report = cite(
            text,
            &[
                citation("Blog", "https://b.example/a", link_start, link_end),
                citation("Site", "https://s.example/", fast, fast + 12),
                citation(
                    "Blog",
                    "https://b.example/a",
                    nee,
                    nee + "Née 2015.".chars().count(),
                ),
                citation("Broken", "https://x.example/", 500, 600),
            ],
        );
        assert!(report.starts_with("Async was stable in 1.39 [[1]](https://b.example/a). Rust is fast [[2]](https://s.example/)."), "{report}");
        assert!(
            report.contains("Née 2015. [[1]](https://b.example/a)"),
            "{report}"
        );
        assert!(report.contains("## Sources\n\n1. [Blog](https://b.example/a)\n2. [Site](https://s.example/)\n3. [Broken](https://x.example/)\n"), "{report}");
    }
}
