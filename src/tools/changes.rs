//! The change report of a `modify_file`: what differs between the original and the result,
//! computed by file-agent, never taken from the model's word.
//!
//! Both files are untrusted, so they are compared inside the sandbox by a fixed script of the
//! image (the package `sandbox-image/change_report/`, like the table inspection). This module builds that
//! job and judges how it ended; the JSON it prints is read and rendered by
//! [`untrusted::change_report`](crate::untrusted::change_report).

use crate::sandbox::{Input, InputSource, Job, Status};
use crate::text::excerpt;
pub use crate::untrusted::change_report::ChangeReport;
use crate::untrusted::filetype::FileType;

/// The comparison package, in the image's folder of file-agent's own scripts.
const REPORT_PACKAGE: &str = "change_report";

/// How a comparison ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Compared {
    /// Differences found: the report.
    Changed(ChangeReport),
    /// The result does not differ from the original: a failed attempt.
    Unchanged,
    /// The result cannot be opened by the library that reads it: a failed attempt.
    ResultUnreadable(String),
    /// No report (a limit was reached, or the original cannot be read): the copy stands.
    Unavailable(String),
}

/// Reads how the comparison script ended: `failure` is why the attempt failed, if it did
/// (the time or memory limit, in words), `stdout` and `stderr` what it printed.
pub fn judge(status: Status, failure: Option<String>, stdout: &str, stderr: &str) -> Compared {
    let said = stderr.trim();
    match status {
        Status::Ok => match ChangeReport::parse(stdout) {
            Ok(report) if report.changed() => Compared::Changed(report),
            Ok(_) => Compared::Unchanged,
            Err(why) => Compared::Unavailable(why),
        },
        // The script's own one-sentence refusal (exit 2) names the file it could not read.
        Status::Failed if said.starts_with("The result") => {
            Compared::ResultUnreadable(excerpt(said, 400))
        }
        Status::Failed if !said.is_empty() && !said.contains("Traceback") => {
            Compared::Unavailable(excerpt(said, 300))
        }
        _ => Compared::Unavailable(
            failure
                .unwrap_or_else(|| "it failed".into())
                .lines()
                .next()
                .unwrap_or("it failed")
                .to_string(),
        ),
    }
}

/// The job that compares `original` with `result` (both of `kind`) in the sandbox.
pub fn report_job(kind: FileType, original: InputSource, result: Vec<u8>) -> Job {
    let extension = kind.extension();
    let input = |side: &str, source| Input {
        name: format!("{side}.{extension}").into_bytes(),
        source,
    };
    Job::image_package(
        REPORT_PACKAGE,
        &[
            ("KIND", extension),
            ("BEFORE", &format!("/work/in/original.{extension}")),
            ("AFTER", &format!("/work/in/result.{extension}")),
        ],
        vec![
            input("original", original),
            input("result", InputSource::Bytes(result)),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_comparison_decides_between_report_retry_and_no_report() {
        let same = r#"{"kind":"docx","changed":false}"#;
        let differs = r#"{"kind":"docx","changed":true}"#;
        assert_eq!(judge(Status::Ok, None, same, ""), Compared::Unchanged);
        assert!(matches!(
            judge(Status::Ok, None, differs, ""),
            Compared::Changed(_)
        ));
        assert!(matches!(
            judge(Status::Ok, None, "garbage", ""),
            Compared::Unavailable(_)
        ));
        let unreadable =
            "The result cannot be read as a Word document (KeyError: word/document.xml).";
        assert_eq!(
            judge(Status::Failed, Some("exit 2".into()), "", unreadable),
            Compared::ResultUnreadable(unreadable.into())
        );
        let original = "The original cannot be read as a Word document (x).";
        assert_eq!(
            judge(Status::Failed, Some("exit 2".into()), "", original),
            Compared::Unavailable(original.into())
        );
        assert_eq!(
            judge(
                Status::Timeout,
                Some("The script ran longer than the 90 s time limit and was killed.".into()),
                "",
                ""
            ),
            Compared::Unavailable(
                "The script ran longer than the 90 s time limit and was killed.".into()
            )
        );
    }

    #[test]
    fn the_job_quotes_fixed_names_and_carries_both_files() {
        let job = report_job(
            FileType::Pptx,
            InputSource::Bytes(b"a".to_vec()),
            b"b".to_vec(),
        );
        assert!(
            job.script.contains(r#""BEFORE": "/work/in/original.pptx""#),
            "{}",
            job.script
        );
        assert!(job.script.contains(r#""AFTER": "/work/in/result.pptx""#));
        assert!(
            job.script.starts_with(
                "import runpy\nimport sys\nsys.path.append(\"/opt/file-agent/\")\n\
                 runpy.run_module(\"change_report\""
            ),
            "{}",
            job.script
        );
        assert_eq!(
            job.input_file_path.as_deref(),
            Some("/work/in/original.pptx")
        );
        assert_eq!(job.inputs.len(), 2);
        assert_eq!(job.file_path, None);
    }
}
