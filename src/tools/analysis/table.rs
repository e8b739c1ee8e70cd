//! The job that inspects a table: `sandbox-image/inspect_table/`, shipped in the image, so the
//! first look at a file is deterministic and never model-written. What kind of table a file
//! holds is told from its bytes by [`untrusted::table`](crate::untrusted::table).

use crate::sandbox::{Input, Job};
use crate::untrusted::table::TableKind;

/// The inspection package, in the image's folder of file-agent's own scripts.
const INSPECT_PACKAGE: &str = "inspect_table";

/// The job that runs the inspection script on `input`.
pub fn inspection_job(input: Input, kind: TableKind) -> Job {
    let name = String::from_utf8_lossy(&input.name).into_owned();
    let path = format!("/work/in/{name}");
    Job::image_package(
        INSPECT_PACKAGE,
        &[("KIND", kind.code()), ("PATH", &path), ("NAME", &name)],
        vec![input],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inspection_job_quotes_hostile_names_as_python_strings() {
        let job = inspection_job(
            Input::from_bytes("a\"b'\\c.csv", b"x\n".to_vec()),
            TableKind::Csv,
        );
        assert!(
            job.script.contains(r#""NAME": "a\"b'\\c.csv""#),
            "{}",
            job.script
        );
        assert!(job.script.contains(r#""KIND": "csv""#), "{}", job.script);
    }
}
