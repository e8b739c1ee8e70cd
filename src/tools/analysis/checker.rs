//! The checker: a second model call, with its own prompt (`prompts/checker.md`), that reviews
//! the question, the inspection, every step's code and output and the answer. Its verdict is
//! parsed strictly: one JSON object with `verdict` exactly `pass` or `fail`. Anything else is
//! not read as a pass by guessing from its words; it is recorded as unreadable.

use serde::Deserialize;

use super::{Pass, Verdict};
use crate::text::{fenced, head};

/// Characters of the inspection, and of each step's output, shown to the checker.
const REVIEW_CHARS: usize = 8_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    verdict: String,
    #[serde(default)]
    feedback: Option<String>,
}

/// Parses the checker's reply: the whole reply is one JSON object (a single ```json fence
/// around it is tolerated), `verdict` is `pass` or `fail`, and a failure says why.
pub fn parse_verdict(text: &str) -> Verdict {
    let body = strip_fence(text.trim());
    let reply: Reply = match serde_json::from_str(body) {
        Ok(reply) => reply,
        Err(error) => {
            return Verdict::Unreadable(format!(
                "the checker's reply is not the agreed JSON object ({error}): {}",
                crate::text::excerpt(text.trim(), 200)
            ));
        }
    };
    let feedback = reply.feedback.unwrap_or_default().trim().to_string();
    match reply.verdict.as_str() {
        "pass" => Verdict::Pass(feedback),
        "fail" if feedback.is_empty() => {
            Verdict::Unreadable("the checker failed the analysis without saying why".into())
        }
        "fail" => Verdict::Fail(feedback),
        other => Verdict::Unreadable(format!(
            "the checker's verdict {other:?} is neither \"pass\" nor \"fail\""
        )),
    }
}

fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(rest) = rest.strip_suffix("```") else {
        return text;
    };
    // Drop the info string ("json") on the opening line.
    match rest.split_once('\n') {
        Some((info, body)) if !info.contains('{') => body.trim(),
        _ => rest.trim(),
    }
}

/// The material the checker reviews, as one message.
pub fn review_material(question: &str, inspection: &str, pass: &Pass) -> String {
    let mut text = format!(
        "## The user's question\n\n{question}\n\n## Inspection of the file\n\n{}",
        fenced("text", &head(inspection, REVIEW_CHARS))
    );
    if pass.steps.is_empty() {
        text.push_str("\n## Steps\n\nNo code was run.\n");
    }
    for (index, step) in pass.steps.iter().enumerate() {
        text.push_str(&format!(
            "\n## Step {}\n\n{}Output:\n\n{}",
            index + 1,
            fenced("python", step.code.trim_end()),
            fenced("text", head(&step.output, REVIEW_CHARS).trim_end())
        ));
        if !step.charts.is_empty() {
            let names: Vec<&str> = step.charts.iter().map(|c| c.name.as_str()).collect();
            text.push_str(&format!("\nCharts saved: {}\n", names.join(", ")));
        }
    }
    if pass.limit_reached {
        text.push_str("\n(The step limit was reached before the analyst finished.)\n");
    }
    text.push_str(&format!(
        "\n## The analyst's final answer\n\n{}\n",
        pass.answer
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_agreed_json_is_a_verdict() {
        assert_eq!(
            parse_verdict(r#"{"verdict": "pass", "feedback": "Numbers match."}"#),
            Verdict::Pass("Numbers match.".into())
        );
        assert_eq!(
            parse_verdict("```json\n{\"verdict\": \"fail\", \"feedback\": \"Wrong sheet.\"}\n```"),
            Verdict::Fail("Wrong sheet.".into())
        );
        for unreadable in [
            "Looks good to me! PASS",
            r#"{"verdict": "PASS"}"#,
            r#"{"verdict": "pass", "feedback": "ok", "score": 9}"#,
            r#"{"verdict": "fail"}"#,
            r#"Sure: {"verdict": "pass"}"#,
            "",
        ] {
            assert!(
                matches!(parse_verdict(unreadable), Verdict::Unreadable(_)),
                "{unreadable:?} was read as a verdict"
            );
        }
    }
}
