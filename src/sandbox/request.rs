//! What the runner receives on stdin for one attempt: one line of JSON (the header), then the
//! tar of the script and the inputs. Nothing of an attempt travels through a container's
//! environment or labels, so a warm container, made before the request, knows nothing of it
//! until it is taken. `sandbox-image/runner.py` reads this; the two change together.

use std::time::Duration;

use serde::Serialize;

use super::{Job, SandboxError, archive};

/// The header line's fields, as the runner reads them.
#[derive(Debug, Serialize)]
struct Header<'a> {
    /// The runner writes the SHA-256 of this between the script's stdout and the outputs.
    seed: &'a str,
    /// Bytes of tar after the header.
    upload_bytes: u64,
    /// The script's time limit; the runner stops it on its own a little after.
    timeout_s: f64,
    /// What the runner presets as `file_path`.
    file_path: Option<&'a str>,
    /// What the runner presets as `input_file_path` (by default the only input, if one).
    input_file_path: Option<&'a str>,
}

/// One attempt's stdin, ready to send.
#[derive(Debug)]
pub struct Request {
    /// The header line, newline included.
    pub header: Vec<u8>,
    /// The tar of `script.py` and `in/<name>`.
    pub upload: Vec<u8>,
    /// The marker the runner writes between the script's stdout and the output archive.
    pub boundary: String,
    /// The marker before the runner's closing line on stderr (see [`super::stream::Trailer`]).
    pub exit_marker: String,
}

impl Request {
    /// Packs `job` (reading input files from disk: call it off the async threads) for a script
    /// limited to `timeout`.
    pub fn build(job: &Job, timeout: Duration) -> Result<Self, SandboxError> {
        let upload = archive::pack(job.script.as_bytes(), &job.inputs)?;
        let seed = uuid::Uuid::new_v4().simple().to_string();
        let header = Header {
            seed: &seed,
            upload_bytes: upload.len() as u64,
            timeout_s: timeout.as_secs_f64(),
            file_path: job.file_path.as_deref(),
            input_file_path: job.input_file_path.as_deref(),
        };
        let mut header = serde_json::to_vec(&header).map_err(|e| SandboxError::Io {
            action: "writing the request header".into(),
            source: e.into(),
        })?;
        header.push(b'\n');
        let digest = digest_of(&seed);
        Ok(Self {
            header,
            upload,
            boundary: format!("\n--file-agent-outputs-{digest}--\n"),
            exit_marker: format!("\n--file-agent-exit-{digest}--\n"),
        })
    }

    /// Everything the runner reads, in one buffer (for the docker CLI baseline of `bench`).
    pub fn to_bytes(&self) -> Vec<u8> {
        [self.header.as_slice(), &self.upload].concat()
    }
}

/// What the runner derives its markers from: the seed's SHA-256, never the seed itself, so that
/// a script that prints whatever it can find does not cut its own output by accident.
fn digest_of(seed: &str) -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_one_json_line_that_names_the_upload_and_hides_the_boundary() {
        let job = Job {
            script: "print(1)".into(),
            file_path: Some("/work/out/a.xlsx".into()),
            ..Job::default()
        };
        let request = Request::build(&job, Duration::from_millis(1500)).unwrap();
        let (line, rest) = request.header.split_at(request.header.len() - 1);
        assert_eq!(rest, b"\n");
        assert!(!line.contains(&b'\n'));
        let header: serde_json::Value = serde_json::from_slice(line).unwrap();
        assert_eq!(header["upload_bytes"], request.upload.len() as u64);
        assert_eq!(header["timeout_s"], 1.5);
        assert_eq!(header["file_path"], "/work/out/a.xlsx");
        assert_eq!(header["input_file_path"], serde_json::Value::Null);
        let seed = header["seed"].as_str().unwrap();
        let digest = digest_of(seed);
        assert_eq!(
            request.boundary,
            format!("\n--file-agent-outputs-{digest}--\n")
        );
        assert_eq!(
            request.exit_marker,
            format!("\n--file-agent-exit-{digest}--\n")
        );
        assert!(!request.boundary.contains(seed));
        assert_eq!(
            request.to_bytes().len(),
            request.header.len() + request.upload.len()
        );
    }
}
