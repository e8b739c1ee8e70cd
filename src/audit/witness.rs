//! A checkpoint round: sign a checkpoint of the chain, send it to every witness as
//! c2sp.org/tlog-witness says (`POST <url>/add-checkpoint`: `old N`, the consistency proof
//! from the size it cosigned last, a blank line, the signed note), gather the cosignatures it
//! answers with, and keep the checkpoint with them ([`super::checkpoints`]).
//!
//! A witness cosigns only a checkpoint consistent with the last one it cosigned for this
//! origin, so a trail rewritten after a witness saw it cannot be witnessed again: the witness
//! answers 422 (or a size this chain no longer reaches), and that is an alarm (logged as an
//! error, counted, shown by `/health` and `doctor`). A witness that is down or slow is waited
//! for at most a few seconds, in a task of its own: no call ever waits for one.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::AuditLog;
use super::checkpoints::{Signed, Signing, StoredCheckpoint, Witness, WitnessAnswer};
use super::note::Note;

/// How long a witness may take to answer, in the rounds of a running server.
pub const WITNESS_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a witness's answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Signs a checkpoint of the lines written so far (when lines came since the last), has the
/// witnesses cosign it, each waited for at most `timeout`, and keeps it. `None` when there
/// was nothing new to sign, or no key.
pub async fn checkpoint_round(log: &AuditLog, timeout: Duration) -> Option<StoredCheckpoint> {
    let signed = match log.sign_checkpoint() {
        Ok(Some(signed)) => signed,
        Ok(None) => return None,
        Err(error) => {
            tracing::error!(%error, "audit trail: no checkpoint could be signed");
            return None;
        }
    };
    let signing = log.signing()?;
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .ok();
    let signed_note = Note::parse(&signed.note).ok()?;
    let mut note = signed_note.clone();
    let mut answers = Vec::new();
    let submissions = signing
        .witnesses()
        .iter()
        .enumerate()
        .map(|(index, witness)| {
            submit(
                log,
                signing,
                http.as_ref(),
                index,
                witness,
                &signed,
                &signed_note,
            )
        });
    for (witness, (answer, line)) in signing
        .witnesses()
        .iter()
        .zip(futures_util::future::join_all(submissions).await)
    {
        if let Some(line) = line
            && let Ok(cosigned) = note.with_signature_line(&line)
        {
            note = cosigned;
        }
        if answer.outcome == "inconsistent" {
            signing.raise(format!(
                "witness {} ({}) refused the checkpoint of {} lines: {}",
                witness.key.name,
                witness.url,
                signed.checkpoint.size,
                answer.detail.as_deref().unwrap_or_default()
            ));
        }
        answers.push(answer);
    }
    let stored = StoredCheckpoint {
        time: crate::time::rfc3339_now(),
        origin: signed.checkpoint.origin.clone(),
        size: signed.checkpoint.size,
        root: BASE64.encode(signed.checkpoint.root),
        checkpoint: note.encoded(),
        witnesses: answers,
    };
    // In the log first, whatever happens beside the chain: a checkpoint that cannot be kept
    // there raises the alarm (in `keep`), and its receipts are still proofs a shipped log holds.
    let _kept = signing.keep(stored.clone());
    Some(stored)
}

/// Sends `signed` to witness `index`; its answer, and its cosignature line when it gave one
/// that verifies. A 409 (the witness cosigned another size than this server thought) is
/// answered once more, from the size it named.
async fn submit(
    log: &AuditLog,
    signing: &Signing,
    http: Option<&reqwest::Client>,
    index: usize,
    witness: &Witness,
    signed: &Signed,
    note: &Note,
) -> (WitnessAnswer, Option<String>) {
    let answer = |outcome: &str, detail: Option<String>| WitnessAnswer {
        name: witness.key.name.clone(),
        outcome: outcome.into(),
        detail,
    };
    let Some(http) = http else {
        return (answer("unreachable", Some("no HTTP client".into())), None);
    };
    let size = signed.checkpoint.size;
    let mut old = signing.witnessed(index).min(size);
    for _ in 0..2 {
        let body = match request_body(log, old, size, &signed.note) {
            Ok(body) => body,
            Err(error) => return (answer("unreachable", Some(error.to_string())), None),
        };
        let url = format!("{}/add-checkpoint", witness.url);
        let response = match http.post(&url).body(body).send().await {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(witness = %witness.url, error = %crate::error_chain(&error), "audit trail: a witness did not answer");
                return (
                    answer("unreachable", Some(crate::error_chain(&error))),
                    None,
                );
            }
        };
        let status = response.status().as_u16();
        let text = capped_text(response).await;
        match status {
            200 => return cosigned(witness, signed, note, &text, index, signing, answer),
            409 => match text.trim().parse::<u64>() {
                Ok(theirs) if theirs <= size && theirs != old => old = theirs,
                Ok(theirs) => {
                    let detail = format!(
                        "it cosigned {theirs} lines of this origin before, more than the {size} this chain holds: the trail was cut, or another server signs as this origin"
                    );
                    return (answer("inconsistent", Some(detail)), None);
                }
                Err(_) => {
                    return (answer("refused", Some(format!("HTTP 409: {text}"))), None);
                }
            },
            422 => {
                let detail = format!(
                    "HTTP 422: not consistent with the {old} lines it cosigned before: lines among them were changed, removed or inserted since ({})",
                    text.trim()
                );
                return (answer("inconsistent", Some(detail)), None);
            }
            _ => {
                tracing::error!(witness = %witness.url, status, answer = %text.trim(), "audit trail: a witness refused the checkpoint; check that it knows this log's origin and key");
                return (
                    answer("refused", Some(format!("HTTP {status}: {}", text.trim()))),
                    None,
                );
            }
        }
    }
    (
        answer(
            "refused",
            Some("it answered 409 twice; see its size".into()),
        ),
        None,
    )
}

/// The answer of a witness that cosigned: its line, checked against its key.
fn cosigned(
    witness: &Witness,
    signed: &Signed,
    note: &Note,
    text: &str,
    index: usize,
    signing: &Signing,
    answer: impl Fn(&str, Option<String>) -> WitnessAnswer,
) -> (WitnessAnswer, Option<String>) {
    for line in text.split_inclusive('\n') {
        let Ok(with) = note.with_signature_line(line) else {
            continue;
        };
        if matches!(with.signed_by(&witness.key), Ok(Some(_))) {
            signing.witnessed_at(index, signed.checkpoint.size);
            return (answer("cosigned", None), Some(line.to_string()));
        }
    }
    (
        answer(
            "refused",
            Some("its answer carries no cosignature its key verifies".into()),
        ),
        None,
    )
}

/// `old N`, the proof from `old` to `size` in base64 lines, a blank line, the note.
fn request_body(log: &AuditLog, old: u64, size: u64, note: &str) -> std::io::Result<String> {
    let proof = if old == 0 {
        Vec::new()
    } else {
        log.consistency_proof(old, size)?
    };
    Ok(super::note::hashes_then_note(
        &format!("old {old}\n"),
        &proof,
        note,
    ))
}

/// At most [`MAX_ANSWER_BYTES`] of an answer, as text.
async fn capped_text(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_ANSWER_BYTES {
            bytes.truncate(MAX_ANSWER_BYTES);
            break;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_witness_answer_is_read_up_to_its_bound_only() {
        let body = "y".repeat(MAX_ANSWER_BYTES * 3);
        let response = reqwest::Response::from(http::Response::new(body));
        let text = capped_text(response).await;
        assert_eq!(text.len(), MAX_ANSWER_BYTES);
    }
}
