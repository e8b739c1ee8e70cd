//! OpenAI's Responses API, for deep research: start a run in background mode with the web
//! search tool, read its state by id, cancel it. The polling loop is the tool's
//! (`tools::research`); this module only speaks the API and turns its answers into plain
//! types.
//!
//! A provider without `/v1/responses` (most OpenAI-compatible servers) answers the start with
//! 404/405/501 or a body that is not a response: that becomes [`LlmError::NoResponsesApi`].
//! async-openai retries a start that gets a 5xx, so such a start may begin more than one run.

use async_openai::error::OpenAIError;
use async_openai::types::responses::{
    CreateResponseArgs, OutputItem, Response, Status, Tool, WebSearchTool,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::{Llm, LlmError};

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Waiting to start.
    Queued,
    /// Running.
    InProgress,
    /// Done, with a report.
    Completed,
    /// Failed; see the error.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Stopped early (a token limit, say); may have partial text.
    Incomplete,
}

impl RunStatus {
    /// Whether the run will not change any more.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Queued | Self::InProgress)
    }

    /// The API's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Incomplete => "incomplete",
        }
    }
}

/// A cited web page: the span of the text it supports, in characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Citation {
    /// The page's title.
    pub title: String,
    /// Its address.
    pub url: String,
    /// First character of the supported span.
    pub start: usize,
    /// One past its last character.
    pub end: usize,
}

/// A run as last seen.
#[derive(Debug, Clone)]
pub struct ResearchRun {
    /// The response id (`resp_...`).
    pub id: String,
    /// Its status.
    pub status: RunStatus,
    /// The report so far (all output text joined).
    pub text: String,
    /// The URL citations, in the order given.
    pub citations: Vec<Citation>,
    /// Web searches and page visits made.
    pub searches: usize,
    /// Why it failed or stopped early.
    pub error: Option<String>,
}

impl Llm {
    /// Starts a background research run of `model` on `input`, guided by `instructions`.
    pub async fn start_research(
        &self,
        model: &str,
        instructions: &str,
        input: &str,
        cancel: &CancellationToken,
    ) -> Result<ResearchRun, LlmError> {
        let client = self.client.as_ref().ok_or(LlmError::NotConfigured)?;
        let request = CreateResponseArgs::default()
            .model(model)
            .instructions(instructions)
            .input(input)
            .background(true)
            .tools(vec![Tool::WebSearchPreview(WebSearchTool::default())])
            .build()
            .map_err(|error| self.bad_reply(format!("cannot build the request: {error}")))?;
        let responses = client.responses();
        let span = self.request_span(model);
        span.record("file_agent.llm.request", "research_start");
        let answer = tokio::select! {
            () = cancel.cancelled() => return Err(LlmError::Cancelled),
            answer = responses.create(request).instrument(span.clone()) => answer,
        };
        record_response(&span, &answer);
        match answer {
            Ok(response) => Ok(run_of(&response)),
            Err(OpenAIError::ApiError(error))
                if matches!(error.status_code.as_u16(), 404 | 405 | 501)
                    && error.api_error.code.as_deref() != Some("model_not_found") =>
            {
                Err(self.no_responses_api(format!(
                    "HTTP {}: {}",
                    error.status_code.as_u16(),
                    error.api_error.message
                )))
            }
            Err(OpenAIError::JSONDeserialize(error, body)) => Err(self.no_responses_api(format!(
                "its answer is not a response ({error}); it began: {:?}",
                crate::text::excerpt(&body, 120)
            ))),
            Err(error) => Err(self.classify(error, 1, model)),
        }
    }

    /// The run's current state; `model` is the model the run was started with.
    pub async fn research_status(
        &self,
        id: &str,
        model: &str,
        cancel: &CancellationToken,
    ) -> Result<ResearchRun, LlmError> {
        let client = self.client.as_ref().ok_or(LlmError::NotConfigured)?;
        let responses = client.responses();
        let span = self.request_span(model);
        span.record("file_agent.llm.request", "research_poll");
        let answer = tokio::select! {
            () = cancel.cancelled() => return Err(LlmError::Cancelled),
            answer = responses.retrieve(id).instrument(span.clone()) => answer,
        };
        record_response(&span, &answer);
        answer
            .map(|response| run_of(&response))
            .map_err(|error| self.classify(error, 1, model))
    }

    /// Asks the API to stop a run (best effort: a failure is only logged).
    pub async fn cancel_research(&self, id: &str) {
        let Some(client) = self.client.as_ref() else {
            return;
        };
        if let Err(error) = client.responses().cancel(id).await {
            tracing::warn!(id, error = %error, "could not cancel the research run");
        }
    }

    fn no_responses_api(&self, detail: String) -> LlmError {
        LlmError::NoResponsesApi {
            base_url: self.config.base_url.clone(),
            detail,
        }
    }
}

/// What a research request's span keeps of its answer: the model that answered and the token
/// counts so far (a run's usage grows as it goes), or that it failed. No text, no citation.
fn record_response(span: &tracing::Span, answer: &Result<Response, OpenAIError>) {
    super::record_reply(span, answer, |response| {
        let usage = response.usage.as_ref();
        (
            response.model.as_str(),
            usage.map(|usage| (usage.input_tokens, usage.output_tokens)),
        )
    });
}

fn run_of(response: &Response) -> ResearchRun {
    let status = match response.status {
        Status::Queued => RunStatus::Queued,
        Status::InProgress => RunStatus::InProgress,
        Status::Completed => RunStatus::Completed,
        Status::Failed => RunStatus::Failed,
        Status::Cancelled => RunStatus::Cancelled,
        Status::Incomplete => RunStatus::Incomplete,
    };
    let searches = response
        .output
        .iter()
        .filter(|item| matches!(item, OutputItem::WebSearchCall(_)))
        .count();
    let (text, citations) = text_and_citations(response);
    let error = response
        .error
        .as_ref()
        .map(|error| error.message.clone())
        .or_else(|| {
            response
                .incomplete_details
                .as_ref()
                .map(|details| format!("stopped early: {}", details.reason))
        });
    ResearchRun {
        id: response.id.clone(),
        status,
        text,
        citations,
        searches,
        error,
    }
}

/// The output text and its URL citations. The typed annotation fields are private in
/// async-openai, so this walks the response as JSON; citation offsets are shifted when more
/// than one text part is joined.
fn text_and_citations(response: &Response) -> (String, Vec<Citation>) {
    let value = serde_json::to_value(response).unwrap_or(Value::Null);
    let mut text = String::new();
    let mut citations = Vec::new();
    let items = value["output"].as_array().into_iter().flatten();
    for item in items.filter(|item| item["type"] == "message") {
        let parts = item["content"].as_array().into_iter().flatten();
        for part in parts.filter(|part| part["type"] == "output_text") {
            let part_text = part["text"].as_str().unwrap_or_default();
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            let offset = text.chars().count();
            text.push_str(part_text);
            let annotations = part["annotations"].as_array().into_iter().flatten();
            for annotation in annotations.filter(|a| a["type"] == "url_citation") {
                let (Some(url), Some(start), Some(end)) = (
                    annotation["url"].as_str(),
                    annotation["start_index"].as_u64(),
                    annotation["end_index"].as_u64(),
                ) else {
                    continue;
                };
                citations.push(Citation {
                    title: annotation["title"].as_str().unwrap_or(url).to_string(),
                    url: url.to_string(),
                    start: offset + start as usize,
                    end: offset + end as usize,
                });
            }
        }
    }
    (text, citations)
}
