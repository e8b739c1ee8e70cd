//! `conduct_deep_research`: one background run of OpenAI's deep research, polled until it
//! ends. Polls every `FILE_AGENT_RESEARCH_POLL` (5 s) for at most `FILE_AGENT_RESEARCH_TIMEOUT`
//! (600 s); a poll that fails for a transient reason is logged and tried again at the next
//! tick; each change of status is logged and reported as progress. A run that times out or
//! whose caller goes away is cancelled at the API, so it stops costing money.
//!
//! The report keeps the model's text, marks each URL citation inline as `[[n]](url)` and ends
//! with the numbered sources.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::progress::{Phase, announce};
use super::results::{Data, ResearchResult, Source};
use super::{ToolError, ToolOutput, Tools, non_empty};
use crate::llm::LlmError;
use crate::llm::research::{Citation, ResearchRun, RunStatus};
use crate::sandbox::Runner;

impl<R: Runner> Tools<R> {
    /// Researches `instructions` on the web, announcing the run's status as it is polled.
    pub async fn deep_research(
        &self,
        instructions: &str,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let instructions = non_empty(instructions, "instructions")?;
        self.require_llm()?;
        let config = &self.research;
        let started = Instant::now();
        let run = self
            .llm
            .start_research(&config.model, &self.prompts.research, instructions, cancel)
            .await?;
        tracing::info!(id = %run.id, model = %config.model, status = run.status.as_str(), "research started");
        self.announce_progress(&run, started);
        let run = self.wait_for(run, started, cancel).await?;
        tracing::info!(id = %run.id, status = run.status.as_str(), searches = run.searches, elapsed_s = started.elapsed().as_secs(), "research ended");
        finish(run, &config.model, started.elapsed())
    }

    /// Polls the run every `FILE_AGENT_RESEARCH_POLL` until it ends. Past
    /// `FILE_AGENT_RESEARCH_TIMEOUT`, or when the call is cancelled, the run is cancelled too;
    /// a transient failed poll is tried again at the next interval.
    async fn wait_for(
        &self,
        mut run: ResearchRun,
        started: Instant,
        cancel: &CancellationToken,
    ) -> Result<ResearchRun, ToolError> {
        let config = &self.research;
        let mut failed_polls = 0u32;
        while !run.status.is_terminal() {
            let left = config.max_wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                self.llm.cancel_research(&run.id).await;
                return Err(self.timed_out(&run));
            }
            tokio::select! {
                () = cancel.cancelled() => {
                    self.llm.cancel_research(&run.id).await;
                    return Err(ToolError::Cancelled);
                }
                () = tokio::time::sleep(config.poll_interval.min(left)) => {}
            }
            if started.elapsed() >= config.max_wait {
                continue;
            }
            match self
                .llm
                .research_status(&run.id, &config.model, cancel)
                .await
            {
                Ok(next) => {
                    failed_polls = 0;
                    if next.status != run.status {
                        tracing::info!(id = %run.id, from = run.status.as_str(), to = next.status.as_str(), elapsed_s = started.elapsed().as_secs(), "research status");
                    }
                    run = next;
                    self.announce_progress(&run, started);
                }
                Err(LlmError::Cancelled) => {
                    self.llm.cancel_research(&run.id).await;
                    return Err(ToolError::Cancelled);
                }
                Err(error) if is_transient(&error) => {
                    failed_polls += 1;
                    tracing::warn!(id = %run.id, failed_polls, error = %error, "research poll failed; trying again");
                }
                Err(error) => return Err(error.into()),
            }
        }
        Ok(run)
    }

    /// The error for a run that did not finish within `FILE_AGENT_RESEARCH_TIMEOUT`.
    fn timed_out(&self, run: &ResearchRun) -> ToolError {
        ToolError::Research(format!(
            "the research did not finish within {} s (status: {}) and was cancelled; narrow the question, or raise FILE_AGENT_RESEARCH_TIMEOUT",
            self.research.max_wait.as_secs(),
            run.status.as_str()
        ))
    }

    /// Announces the run's status and how much of the wait has passed.
    fn announce_progress(&self, run: &ResearchRun, started: Instant) {
        announce(Phase::Researching {
            elapsed: started.elapsed().as_secs_f64(),
            total: self.research.max_wait.as_secs_f64(),
            status: run.status.as_str().replace('_', " "),
        })
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
