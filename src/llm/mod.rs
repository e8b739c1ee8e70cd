//! The model that writes Python: chat completions over any OpenAI-compatible API (OpenAI,
//! vLLM, Ollama, LiteLLM), with a request timeout and retries, and the extraction of code from
//! a reply ([`code`]).
//!
//! Retries: async-openai already retries rate limits (not `insufficient_quota`), every 5xx and
//! connection errors three times with exponential back-off, honouring `Retry-After`. It does
//! not retry timeouts, so this module adds that, and only that, to avoid multiplying the two.
//!
//! This module knows nothing of the sandbox, storage or MCP, and never logs the key.

pub mod code;
pub mod research;

use std::time::{Duration, Instant};

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::types::chat::{
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestMessage,
    ChatCompletionRequestSystemMessage, ChatCompletionRequestUserMessage,
    CreateChatCompletionRequestArgs, CreateChatCompletionResponse,
};
use thiserror::Error;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::config::LlmConfig;

/// Connect timeout of the HTTP client; the whole request has `FILE_AGENT_LLM_TIMEOUT`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause before trying again after a timeout.
const TIMEOUT_BACKOFF: Duration = Duration::from_secs(1);
/// How much of an unexpected answer body goes into an error message.
const BODY_EXCERPT: usize = 200;

/// One message of a conversation with the model.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// Instructions the model follows (a prompt from `prompts/`).
    System(String),
    /// A request or an error report.
    User(String),
    /// What the model answered before.
    Assistant(String),
}

/// Why the model gave no usable answer. Each message says what to do.
#[derive(Debug, Error)]
pub enum LlmError {
    /// `OPENAI_API_KEY` is not set.
    #[error(
        "no language model is configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for a server other than OpenAI); run_python works without one"
    )]
    NotConfigured,
    /// The API refused the key.
    #[error(
        "the model API at {base_url} refused the key (HTTP {status}): {message}; check OPENAI_API_KEY"
    )]
    Unauthorized {
        /// The API's base URL.
        base_url: String,
        /// 401 or 403.
        status: u16,
        /// The API's message.
        message: String,
    },
    /// The model does not exist there.
    #[error(
        "the model {model:?} is not available at {base_url}: {message}; set MODEL_NAME (DEEP_RESEARCH_MODEL for research) to one it serves"
    )]
    ModelNotFound {
        /// `MODEL_NAME`.
        model: String,
        /// The API's base URL.
        base_url: String,
        /// The API's message.
        message: String,
    },
    /// Rate limits, quota, or server errors that lasted through the retries.
    #[error(
        "the model API at {base_url} failed (HTTP {status}) even after retries: {message}; try again later"
    )]
    Api {
        /// The API's base URL.
        base_url: String,
        /// The HTTP status.
        status: u16,
        /// The API's message.
        message: String,
    },
    /// No connection could be made, or it broke.
    #[error(
        "the model API at {base_url} cannot be reached ({detail}); check OPENAI_BASE_URL and the network"
    )]
    Unreachable {
        /// The API's base URL.
        base_url: String,
        /// The transport error.
        detail: String,
    },
    /// Every try ran past the timeout.
    #[error(
        "the model API at {base_url} did not answer within {timeout:?} ({tries} tries); raise FILE_AGENT_LLM_TIMEOUT or try again"
    )]
    Timeout {
        /// The API's base URL.
        base_url: String,
        /// `FILE_AGENT_LLM_TIMEOUT`.
        timeout: Duration,
        /// How many requests were sent.
        tries: u32,
    },
    /// The answer was not a chat completion, or had no text.
    #[error(
        "the model API at {base_url} sent an answer that is not a usable chat completion: {detail}"
    )]
    BadReply {
        /// The API's base URL.
        base_url: String,
        /// What was wrong, with an excerpt.
        detail: String,
    },
    /// The provider has no Responses API (deep research needs OpenAI's).
    #[error(
        "the model API at {base_url} does not offer OpenAI's Responses API ({detail}); conduct_deep_research needs it: point OPENAI_BASE_URL at https://api.openai.com/v1 (or a provider with /v1/responses)"
    )]
    NoResponsesApi {
        /// The API's base URL.
        base_url: String,
        /// What it answered.
        detail: String,
    },
    /// The caller went away.
    #[error("the request was cancelled")]
    Cancelled,
}

/// A chat client for one model, or the lack of one.
#[derive(Debug, Clone)]
pub struct Llm {
    client: Option<Client<OpenAIConfig>>,
    config: LlmConfig,
}

/// A reply and what it cost.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The text of the first choice.
    pub text: String,
    /// Time spent, retries included.
    pub elapsed: Duration,
}

impl Llm {
    /// Builds the client (no request is sent). Without a key, every call is `NotConfigured`.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        let client = match &config.api_key {
            None => None,
            Some(key) => {
                let http = reqwest::Client::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .timeout(config.timeout)
                    .build()
                    .map_err(|error| LlmError::Unreachable {
                        base_url: config.base_url.clone(),
                        detail: format!("cannot build the HTTP client: {error}"),
                    })?;
                let api = OpenAIConfig::new()
                    .with_api_base(config.base_url.clone())
                    .with_api_key(key.expose());
                Some(Client::build(http, api))
            }
        };
        Ok(Self { client, config })
    }

    /// Whether a key is configured.
    pub fn is_configured(&self) -> bool {
        self.client.is_some()
    }

    /// The model's name.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// Sends the conversation and returns the text of the answer.
    pub async fn complete(
        &self,
        messages: &[Message],
        cancel: &CancellationToken,
    ) -> Result<Reply, LlmError> {
        let client = self.client.as_ref().ok_or(LlmError::NotConfigured)?;
        let request = CreateChatCompletionRequestArgs::default()
            .model(self.config.model.clone())
            .messages(messages.iter().map(to_request_message).collect::<Vec<_>>())
            .build()
            .map_err(|error| self.bad_reply(format!("cannot build the request: {error}")))?;
        let started = Instant::now();
        let tries = self.config.timeout_retries + 1;
        for attempt in 1..=tries {
            let chat = client.chat();
            let sent = Instant::now();
            let span = self.request_span(&self.config.model);
            let answer = tokio::select! {
                () = cancel.cancelled() => return Err(LlmError::Cancelled),
                answer = chat.create(request.clone()).instrument(span.clone()) => answer,
            };
            record_answer(&span, &answer);
            crate::metrics::metrics().llm_request(answer_word(&answer), sent.elapsed());
            match answer {
                Ok(response) => {
                    return Ok(Reply {
                        text: self.reply_text(response)?,
                        elapsed: started.elapsed(),
                    });
                }
                Err(OpenAIError::Reqwest(error)) if error.is_timeout() && attempt < tries => {
                    tracing::warn!(attempt, "the model API timed out; trying again");
                    crate::metrics::metrics().llm_retry();
                    tokio::select! {
                        () = cancel.cancelled() => return Err(LlmError::Cancelled),
                        () = tokio::time::sleep(TIMEOUT_BACKOFF) => {}
                    }
                }
                Err(error) => return Err(self.classify(error, tries, &self.config.model)),
            }
        }
        Err(LlmError::Timeout {
            base_url: self.config.base_url.clone(),
            timeout: self.config.timeout,
            tries,
        })
    }

    /// The span of one request to `model` (a chat completion, or a research run's request of
    /// the Responses API), in OpenTelemetry's GenAI client conventions: the model and the
    /// server, never a message.
    fn request_span(&self, model: &str) -> tracing::Span {
        let url = reqwest::Url::parse(&self.config.base_url).ok();
        tracing::info_span!(
            "chat",
            otel.name = format!("chat {model}"),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = "openai",
            gen_ai.request.model = model,
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            server.address = url.as_ref().and_then(|url| url.host_str().map(str::to_string)),
            server.port = url.and_then(|url| url.port_or_known_default()).map(i64::from),
            error.type = tracing::field::Empty,
            file_agent.llm.request = tracing::field::Empty,
        )
    }

    /// The text of the first choice; a reply without text is a bad reply.
    fn reply_text(&self, response: CreateChatCompletionResponse) -> Result<String, LlmError> {
        response
            .choices
            .into_iter()
            .next()
            .and_then(|choice| choice.message.content)
            .filter(|text| !text.trim().is_empty())
            .ok_or_else(|| self.bad_reply("the reply has no text".into()))
    }

    fn bad_reply(&self, detail: String) -> LlmError {
        LlmError::BadReply {
            base_url: self.config.base_url.clone(),
            detail,
        }
    }

    /// An API error in words; `model` is the model the request named.
    fn classify(&self, error: OpenAIError, tries: u32, model: &str) -> LlmError {
        let base_url = self.config.base_url.clone();
        match error {
            OpenAIError::ApiError(response) => api_refusal(
                base_url,
                model,
                response.status_code.as_u16(),
                response.api_error.message.clone(),
                &response.api_error.code.clone().unwrap_or_default(),
            ),
            OpenAIError::Reqwest(error) if error.is_timeout() => LlmError::Timeout {
                base_url,
                timeout: self.config.timeout,
                tries,
            },
            OpenAIError::Reqwest(error) => match error.status() {
                Some(status) if matches!(status.as_u16(), 401 | 403) => LlmError::Unauthorized {
                    base_url,
                    status: status.as_u16(),
                    message: "no details".into(),
                },
                _ => LlmError::Unreachable {
                    base_url,
                    detail: crate::error_chain(&error),
                },
            },
            OpenAIError::JSONDeserialize(error, body) => LlmError::BadReply {
                base_url,
                detail: format!(
                    "{error}; it began: {:?}",
                    crate::text::excerpt(&body, BODY_EXCERPT)
                ),
            },
            other => LlmError::BadReply {
                base_url,
                detail: other.to_string(),
            },
        }
    }
}

/// What a chat request's span keeps of its answer: the model that answered and the token
/// counts, or the kind of error (`answer_word`'s).
fn record_answer(span: &tracing::Span, answer: &Result<CreateChatCompletionResponse, OpenAIError>) {
    record_reply(span, answer, |response| {
        let usage = response.usage.as_ref();
        (
            response.model.as_str(),
            usage.map(|usage| (usage.prompt_tokens, usage.completion_tokens)),
        )
    });
}

/// What a model request's span keeps of any answer: the model that answered and the input
/// and output token counts (`reply` reads them off the answer), or the kind of error. Never a
/// message.
fn record_reply<T>(
    span: &tracing::Span,
    answer: &Result<T, OpenAIError>,
    reply: impl Fn(&T) -> (&str, Option<(u32, u32)>),
) {
    match answer {
        Ok(response) => {
            let (model, tokens) = reply(response);
            span.record("gen_ai.response.model", model);
            if let Some((input, output)) = tokens {
                span.record("gen_ai.usage.input_tokens", i64::from(input));
                span.record("gen_ai.usage.output_tokens", i64::from(output));
            }
        }
        Err(_) => {
            span.record("error.type", answer_word(answer));
            span.record("otel.status_code", "ERROR");
        }
    }
}

fn to_request_message(message: &Message) -> ChatCompletionRequestMessage {
    match message {
        Message::System(text) => ChatCompletionRequestSystemMessage::from(text.as_str()).into(),
        Message::User(text) => ChatCompletionRequestUserMessage::from(text.as_str()).into(),
        Message::Assistant(text) => {
            ChatCompletionRequestAssistantMessage::from(text.as_str()).into()
        }
    }
}

/// How a request to the model API ended, in one word for the metrics.
fn answer_word<T>(answer: &Result<T, OpenAIError>) -> &'static str {
    match answer {
        Ok(_) => "ok",
        Err(OpenAIError::Reqwest(error)) if error.is_timeout() => "timeout",
        Err(_) => "error",
    }
}

/// The API's refusal with HTTP `status`, its `message` and error `code`: a key it does not
/// take, a model it does not have, or any other refusal.
fn api_refusal(
    base_url: String,
    model: &str,
    status: u16,
    message: String,
    code: &str,
) -> LlmError {
    match status {
        401 | 403 => LlmError::Unauthorized {
            base_url,
            status,
            message,
        },
        404 => LlmError::ModelNotFound {
            model: model.to_string(),
            base_url,
            message,
        },
        _ if code == "model_not_found" => LlmError::ModelNotFound {
            model: model.to_string(),
            base_url,
            message,
        },
        _ => LlmError::Api {
            base_url,
            status,
            message,
        },
    }
}
