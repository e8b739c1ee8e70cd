//! The answer of an analysis: Markdown for `analyze_file` (Analysis Results, Quality
//! Assurance, Methodology) and the JSON `data_analysis_tool` promises its caller
//! (`{"result", "plot_image", "query_code"}`), plus the filter that keeps meaningful stderr.

use std::time::Duration;

use base64::Engine;

use super::{Analysis, MAX_STEPS, Pass, Quality, Verdict};
use crate::text::fenced;
use crate::tools::results::{
    self, AnalysisResult, AnalysisStep, DataAnalysisResult, ResultFile, Review, ReviewVerdict,
};

/// Warning categories that are noise to a reader of the results.
const NOISE: [&str; 3] = [
    "FutureWarning",
    "DeprecationWarning",
    "PendingDeprecationWarning",
];

/// `stderr` without FutureWarning and DeprecationWarning reports (the warning line and the
/// indented source line Python prints under it); everything else is kept.
pub fn meaningful_stderr(stderr: &str) -> String {
    let mut kept = Vec::new();
    let mut skipping = false;
    for line in stderr.lines() {
        if skipping && (line.starts_with(' ') || line.starts_with('\t')) {
            continue;
        }
        skipping = is_noise_warning(line);
        if !skipping {
            kept.push(line);
        }
    }
    kept.join("\n")
}

/// `path:line: FutureWarning: message`, as the warnings module prints it.
fn is_noise_warning(line: &str) -> bool {
    NOISE.iter().any(|category| {
        line.split_once(&format!(": {category}: "))
            .is_some_and(|(location, _)| {
                location
                    .rsplit_once(':')
                    .is_some_and(|(_, n)| n.chars().all(|c| c.is_ascii_digit()))
            })
    })
}

/// The Markdown answer of `analyze_file`; `charts` are the stored charts' names and URLs.
pub fn markdown(analysis: &Analysis, charts: &[(String, String)]) -> String {
    let pass = analysis.accepted();
    let mut text = String::from("## Analysis Results\n\n");
    text.push_str(pass.answer.trim());
    text.push('\n');
    if !charts.is_empty() {
        text.push_str("\n**Charts**\n\n");
        for (name, url) in charts {
            text.push_str(&format!("![{name}]({url})\n[{name}]({url})\n\n"));
        }
    }
    text.push_str("\n## Quality Assurance\n\n");
    text.push_str(&quality_assurance(analysis));
    text.push_str("\n## Methodology\n\n");
    text.push_str(&format!(
        "### Inspection of `{}` ({})\n\nA fixed script in the sandbox image read the file before any model-written code ran.\n\n{}",
        analysis.file_name,
        seconds(analysis.inspection_time),
        fenced("text", &analysis.inspection)
    ));
    push_steps(&mut text, pass, "");
    if let Some(Ok(_)) = &analysis.redo {
        text.push_str("\n### The first pass, before the checker's correction\n\n");
        text.push_str(&format!(
            "Its answer was:\n\n{}\n",
            quote(&analysis.first.answer)
        ));
        push_steps(&mut text, &analysis.first, "First pass, ");
    }
    text
}

/// What `data_analysis_tool` answers, whose JSON is its text: the results and quality
/// assurance as `result`, the first chart as base64 `plot_image` (only when one was made),
/// the steps' code as `query_code`.
pub fn json(analysis: &Analysis) -> DataAnalysisResult {
    let pass = analysis.accepted();
    let result = format!(
        "{}\n\n## Quality Assurance\n\n{}",
        pass.answer.trim(),
        quality_assurance(analysis)
    );
    let code: Vec<String> = pass
        .steps
        .iter()
        .enumerate()
        .map(|(index, step)| format!("# Step {}\n{}", index + 1, step.code.trim_end()))
        .collect();
    DataAnalysisResult {
        result,
        query_code: code.join("\n\n"),
        plot_image: pass
            .charts()
            .first()
            .map(|chart| base64::engine::general_purpose::STANDARD.encode(&chart.bytes)),
    }
}

/// What `analyze_file` answers, as data: the answer, its verdict and reviews, the steps of the
/// answer given, and the stored charts (`files`).
pub fn data(analysis: &Analysis, files: Vec<ResultFile>) -> AnalysisResult {
    let pass = analysis.accepted();
    let verdict = match analysis.quality() {
        Quality::Passed => results::Verdict::Passed,
        Quality::PassedAfterCorrection => results::Verdict::PassedAfterCorrection,
        Quality::AcceptedWithCaveats => results::Verdict::AcceptedWithCaveats,
    };
    let reviews = std::iter::once(&analysis.first_verdict)
        .chain(analysis.second_verdict.as_ref())
        .map(review)
        .collect();
    AnalysisResult {
        answer: pass.answer.trim().to_string(),
        verdict,
        reviews,
        steps: pass
            .steps
            .iter()
            .map(|step| AnalysisStep {
                code: step.code.trim_end().to_string(),
                output: step.output.clone(),
                attempts: step.attempts,
            })
            .collect(),
        step_limit_reached: pass.limit_reached,
        charts: files.iter().map(|file| file.uri.clone()).collect(),
        files,
        attempts: analysis.attempts,
    }
}

fn review(verdict: &Verdict) -> Review {
    let (verdict, note) = match verdict {
        Verdict::Pass(note) => (ReviewVerdict::Pass, note),
        Verdict::Fail(feedback) => (ReviewVerdict::Fail, feedback),
        Verdict::Unreadable(why) => (ReviewVerdict::None, why),
    };
    Review {
        verdict,
        note: note.clone(),
    }
}

/// The review lines after the first: the redo and its review, or the caveat of a result that
/// was never reviewed or never passed.
fn redo_lines(analysis: &Analysis) -> Vec<String> {
    let mut lines = Vec::new();
    match &analysis.redo {
        Some(Ok(_)) => {
            lines.push(
                "- A redo ran with the checker's feedback; its result is the one above.".into(),
            );
            if let Some(second) = &analysis.second_verdict {
                lines.push(format!("- Second review: {}", verdict_words(second)));
                if matches!(second, Verdict::Fail(_) | Verdict::Unreadable(_)) {
                    lines.push("- Caveat: the corrected result was accepted without a passing review; check the points above before relying on it.".into());
                }
            }
        }
        Some(Err(why)) => {
            lines.push(format!("- A redo was attempted and failed: {why}"));
            lines.push("- Caveat: the result above is the first one, which the checker did not pass; check the points above before relying on it.".into());
        }
        None => {
            if let Verdict::Unreadable(_) = analysis.first_verdict {
                lines.push(
                    "- Caveat: the result was not reviewed; check it before relying on it.".into(),
                );
            }
        }
    }
    lines
}

/// The quality-assurance section: the verdict, the reviews, the steps and the time.
fn quality_assurance(analysis: &Analysis) -> String {
    let pass = analysis.accepted();
    let mut lines = Vec::new();
    let verdict = match analysis.quality() {
        Quality::Passed => "passed",
        Quality::PassedAfterCorrection => "passed after correction",
        Quality::AcceptedWithCaveats => "accepted with caveats",
    };
    lines.push(format!("- **Checker verdict: {verdict}**"));
    lines.push(format!(
        "- First review: {}",
        verdict_words(&analysis.first_verdict)
    ));
    lines.extend(redo_lines(analysis));
    let attempts: usize = pass.steps.iter().map(|s| s.attempts).sum();
    lines.push(format!(
        "- Steps: {} of at most {MAX_STEPS}{}; {} sandbox runs in all (inspection included)",
        pass.steps.len(),
        if attempts > pass.steps.len() {
            format!(", {} attempts", attempts)
        } else {
            String::new()
        },
        analysis.attempts
    ));
    if pass.limit_reached {
        lines.push(format!(
            "- Note: the step limit ({MAX_STEPS}) was reached before the analysis was declared complete; the answer was written from the outputs so far."
        ));
    }
    lines.push(format!(
        "- Time: {} in all; model {}, sandbox {}",
        seconds(analysis.total_time),
        seconds(analysis.model_time),
        seconds(analysis.sandbox_time)
    ));
    lines.join("\n") + "\n"
}

fn verdict_words(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Pass(note) if note.is_empty() => "passed".into(),
        Verdict::Pass(note) => format!("passed ({note})"),
        Verdict::Fail(feedback) => format!("failed: {feedback}"),
        Verdict::Unreadable(why) => format!("no verdict ({why})"),
    }
}

fn push_steps(text: &mut String, pass: &Pass, prefix: &str) {
    if pass.steps.is_empty() {
        text.push_str("\nNo code ran: the answer was given from the inspection alone.\n");
    }
    for (index, step) in pass.steps.iter().enumerate() {
        text.push_str(&format!(
            "\n### {prefix}Step {} ({}{})\n\n{}",
            index + 1,
            seconds(step.elapsed),
            if step.attempts > 1 {
                format!(", attempt {}", step.attempts)
            } else {
                String::new()
            },
            fenced("python", step.code.trim_end())
        ));
        for (number, failure) in step.failures.iter().enumerate() {
            text.push_str(&format!(
                "Attempt {} failed: `{}`\n\n",
                number + 1,
                failure.replace('`', "'")
            ));
        }
        text.push_str("Output:\n\n");
        text.push_str(&fenced(
            "text",
            if step.output.trim().is_empty() {
                "(nothing printed)"
            } else {
                step.output.trim_end()
            },
        ));
        if !step.charts.is_empty() {
            let names: Vec<&str> = step.charts.iter().map(|c| c.name.as_str()).collect();
            text.push_str(&format!("Charts: {}\n", names.join(", ")));
        }
    }
}

fn quote(text: &str) -> String {
    text.trim()
        .lines()
        .map(|line| format!("> {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deprecation_noise_goes_and_real_warnings_stay() {
        let stderr = "/work/script.py:4: FutureWarning: The default of observed=False is deprecated\n  df.groupby('a').sum()\n/usr/lib/python3/dist-packages/pandas/core/x.py:12: DeprecationWarning: old\n  return x\n/work/script.py:9: RuntimeWarning: invalid value encountered in divide\n  ratio = a / b\nfile-agent: ignored reassignment of `input_file_path` on line 2";
        let kept = meaningful_stderr(stderr);
        assert!(!kept.contains("FutureWarning"), "{kept}");
        assert!(!kept.contains("groupby"), "{kept}");
        assert!(!kept.contains("DeprecationWarning"), "{kept}");
        assert!(kept.contains("RuntimeWarning"), "{kept}");
        assert!(kept.contains("ratio = a / b"), "{kept}");
        assert!(kept.contains("ignored reassignment"), "{kept}");
    }
}
