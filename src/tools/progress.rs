//! What a call is doing, announced once by the flows as it happens ([`announce`]), and shown
//! by the MCP layer in every view it has: the log, MCP progress notifications for a client that
//! sent a progress token, and status events under the assistant's message in an Open WebUI chat.
//! The words are for the person waiting: no code, no paths, nothing secret.
//!
//! The flows do not pass a reporter along: the MCP layer puts a [`Phases`] sender in the call's
//! task-local context ([`super::CALL`]), and [`announce`] finds it there (a call without one,
//! a test's, announces to nobody).

use std::sync::{Arc, Mutex};
use tracing::Instrument as _;

use tokio::sync::mpsc::UnboundedSender;

use super::{ToolError, Tools};
use crate::sandbox::Runner;
use crate::storage::Caller;

/// One step of a call, as a user reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// Fetching the input file.
    Fetching,
    /// The model is writing the script (attempt `attempt`).
    Writing {
        /// 1-based.
        attempt: usize,
    },
    /// A script runs in a fresh sandbox.
    Running {
        /// 1-based.
        attempt: usize,
    },
    /// Checking what the script made.
    Checking {
        /// What is checked ("Excel workbook").
        what: String,
    },
    /// Comparing a modified copy with its original.
    Comparing,
    /// An attempt did not work and the model tries again.
    Retrying {
        /// The attempt that failed, 1-based.
        attempt: usize,
        /// Why, in one short line.
        reason: String,
    },
    /// Reading a data file's structure (analysis).
    Inspecting,
    /// An analysis step.
    Computing {
        /// 1-based.
        step: usize,
    },
    /// The checker reviews the answer.
    Reviewing,
    /// Saving a result.
    Storing,
    /// A result is stored: for a view that can attach it (Open WebUI's `files` event).
    Stored(StoredFile),
    /// Deep research is under way.
    Researching {
        /// Seconds since it started.
        elapsed: f64,
        /// The most it may take, in seconds.
        total: f64,
        /// Its status in words.
        status: String,
    },
    /// The call ended.
    Done {
        /// Whether it succeeded.
        ok: bool,
    },
    /// The call's client stopped waiting for the answer (its connection closed): no answer
    /// reaches it. `kept`: the work goes on, and the same caller gets its result by asking
    /// again (research).
    Left {
        /// Whether the result is kept for the caller.
        kept: bool,
    },
}

/// A stored result, as a view that attaches files needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredFile {
    /// The store's id (Open WebUI's file id, or the local store's).
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its download URL.
    pub url: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its media type.
    pub content_type: String,
    /// The SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
}

/// The attempts a file flow may take, for "attempt n of N".
const ATTEMPTS: usize = super::MAX_ATTEMPTS;

impl Phase {
    /// Whether this is the call's last phase ([`Phase::Done`], [`Phase::Left`]).
    pub fn is_last(&self) -> bool {
        matches!(self, Phase::Done { .. } | Phase::Left { .. })
    }

    /// The words a user reads; `None` for a phase that is no status ([`Phase::Stored`]).
    pub fn message(&self) -> Option<String> {
        Some(match self {
            Phase::Fetching => "Fetching the file".into(),
            Phase::Writing { attempt: 1 } => "Writing the script".into(),
            Phase::Writing { attempt } => {
                format!("Writing a corrected script (attempt {attempt} of {ATTEMPTS})")
            }
            Phase::Running { attempt: 1 } => "Running it in a fresh sandbox".into(),
            Phase::Running { attempt } => {
                format!("Running attempt {attempt} of {ATTEMPTS} in a fresh sandbox")
            }
            Phase::Checking { what } => format!("Checking the {what}"),
            Phase::Comparing => "Comparing the copy with the original".into(),
            Phase::Retrying { attempt, reason } => {
                format!("Attempt {attempt} did not work ({reason}); trying again")
            }
            Phase::Inspecting => "Reading the data file".into(),
            Phase::Computing { step } => format!("Computing the answer (step {step})"),
            Phase::Reviewing => "Checking the answer".into(),
            Phase::Storing => "Saving the result".into(),
            Phase::Stored(_) => return None,
            Phase::Researching {
                status, elapsed, ..
            } => {
                format!("Researching: {status} after {} s", *elapsed as u64)
            }
            Phase::Done { ok: true } => "Done".into(),
            Phase::Done { ok: false } => "Did not succeed; the answer says why".into(),
            Phase::Left { kept: true } => "The connection to the chat closed before the report was ready; the research goes on: ask for the same research again to get its report".into(),
            Phase::Left { kept: false } => "Stopped: the connection to the chat closed before the answer was ready".into(),
        })
    }
}

/// Where a call's phases go: the MCP layer's receiver, or nowhere.
#[derive(Debug, Clone, Default)]
pub struct Phases(Option<UnboundedSender<Phase>>);

impl Phases {
    /// Phases sent to `sender`.
    pub fn to(sender: UnboundedSender<Phase>) -> Self {
        Self(Some(sender))
    }

    /// Sends `phase` (never blocks; a receiver gone is no error).
    pub fn send(&self, phase: Phase) {
        if let Some(sender) = &self.0 {
            let _ = sender.send(phase);
        }
    }
}

/// What a call made, in order: the MCP layer returns each file as a resource link and each
/// picture as image content, beside the text. Pictures are kept only when the call's client
/// takes them inline ([`Outputs::with_images`]), so no bytes are copied for one that does not.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    made: Arc<Mutex<Vec<Made>>>,
    images: bool,
}

/// One thing a call made.
#[derive(Debug, Clone, PartialEq)]
pub enum Made {
    /// A stored file; a PNG of at most [`INLINE_IMAGE_MAX`] bytes also as its bytes, when the
    /// call keeps pictures.
    File {
        /// The file.
        file: StoredFile,
        /// Its bytes, when it is a picture a client may show inline.
        image: Option<Vec<u8>>,
    },
    /// A PNG chart that was not stored (`data_analysis_tool`'s).
    Image(Vec<u8>),
}

/// The largest PNG also returned inline, as MCP image content (base64 in the result).
pub const INLINE_IMAGE_MAX: usize = 1024 * 1024;

impl Outputs {
    /// Outputs that keep pictures (PNGs up to [`INLINE_IMAGE_MAX`]) when `images`.
    pub fn with_images(images: bool) -> Self {
        Self {
            images,
            ..Self::default()
        }
    }

    /// Everything recorded so far, in order.
    pub fn taken(&self) -> Vec<Made> {
        self.made
            .lock()
            .map(|made| made.clone())
            .unwrap_or_default()
    }
}

/// Records `made` for the call being served on this task, if any.
pub fn record(made: Made) {
    let _ = super::CALL.try_with(|call| {
        if let Ok(mut all) = call.outputs.made.lock() {
            all.push(made);
        }
    });
}

/// `bytes`, copied, when the call being served keeps pictures inline and they are a PNG of at
/// most [`INLINE_IMAGE_MAX`] bytes.
pub fn inline_image(content_type: &str, bytes: &[u8]) -> Option<Vec<u8>> {
    let wanted = super::CALL
        .try_with(|call| call.outputs.images)
        .unwrap_or(false);
    (wanted && content_type == "image/png" && bytes.len() <= INLINE_IMAGE_MAX)
        .then(|| bytes.to_vec())
}

/// Announces `phase` for the call being served on this task, if any.
pub fn announce(phase: Phase) {
    let _ = super::CALL.try_with(|call| call.phases.send(phase));
}

impl<R: Runner> Tools<R> {
    /// Stores a result, announcing it: "Saving the result", then the file itself (which a
    /// chat attaches to the assistant's message).
    pub(super) async fn store_result(
        &self,
        name: &str,
        content_type: &str,
        bytes: Vec<u8>,
        caller: &Caller,
    ) -> Result<StoredFile, ToolError> {
        announce(Phase::Storing);
        let image = inline_image(content_type, &bytes);
        let sha256 = crate::audit::sha256_hex(&bytes);
        let span = super::spans::upload(self.storage.kind(), content_type, bytes.len());
        let stored = self
            .storage
            .store(name, content_type, bytes, caller)
            .instrument(span.clone())
            .await;
        super::spans::record_verdict(&span, stored.is_ok());
        let stored = stored?;
        let file = StoredFile {
            id: stored.id.clone(),
            name: stored.name.clone(),
            url: stored.url.clone(),
            bytes: stored.bytes,
            content_type: content_type.to_string(),
            sha256,
        };
        record(Made::File {
            file: file.clone(),
            image,
        });
        announce(Phase::Stored(file.clone()));
        Ok(file)
    }
}

/// `error` as one short line for a user: its last non-empty line (where a traceback names its
/// cause), each path cut to its file name, at most 100 characters.
pub fn short_reason(error: &str) -> String {
    let line = error
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty() && !line.starts_with("```"))
        .unwrap_or("an error");
    let words: Vec<String> = line
        .split(' ')
        .map(|word| match word.strip_prefix('/') {
            Some(path) => path.rsplit('/').next().unwrap_or(path).to_string(),
            None => word.to_string(),
        })
        .collect();
    crate::text::excerpt(&crate::text::one_line(&words.join(" ")), 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_one_short_line_without_paths() {
        let error = "The code did not succeed\n\nstderr:\n```\nTraceback (most recent call last):\n  File \"/work/script.py\", line 3\nZeroDivisionError: division by zero\n```\n";
        assert_eq!(short_reason(error), "ZeroDivisionError: division by zero");
        assert_eq!(
            short_reason("nothing at /work/out/report.xlsx"),
            "nothing at report.xlsx"
        );
        assert!(short_reason(&"x".repeat(500)).chars().count() <= 101);
        assert_eq!(
            Phase::Retrying {
                attempt: 1,
                reason: "ZeroDivisionError: division by zero".into()
            }
            .message()
            .unwrap(),
            "Attempt 1 did not work (ZeroDivisionError: division by zero); trying again"
        );
    }
}
