//! What the runner receives on stdin for one attempt: one line of JSON (the header), then the
//! tar of the script and the inputs. Nothing of an attempt travels through a container's
//! environment or labels, so a warm container, made before the request, knows nothing of it
//! until it is taken. `sandbox-image/runner.py` reads this; the two change together. What comes
//! back is read by [`super::stream`], with the request's [`Request::key`].

use serde::Serialize;

use super::{Job, SandboxError, archive};
use crate::config::Limits;

/// The header line's fields, as the runner reads them.
#[derive(Debug, Serialize)]
struct Header<'a> {
    /// The key of the MACs that close the runner's frames ([`super::stream`]).
    key: &'a str,
    /// Bytes of tar after the header.
    upload_bytes: u64,
    /// The script's time limit; the runner stops it on its own a little after.
    timeout_s: f64,
    /// Bytes of the script's stdout, and of its stderr, the runner relays; it counts the rest.
    stdio_max_bytes: usize,
    /// What the runner presets as `file_path`.
    file_path: Option<&'a str>,
    /// What the runner presets as `input_file_path` (by default the only input, if one).
    input_file_path: Option<&'a str>,
    /// The session's part, when the attempt belongs to one (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<SessionHeader>,
}

/// The header's `session`: whether a state came in the upload (`session/state`), and the most
/// the state the attempt leaves may be.
#[derive(Debug, Serialize)]
struct SessionHeader {
    restore: bool,
    max_bytes: u64,
}

/// One attempt's stdin, ready to send.
#[derive(Debug)]
pub struct Request {
    /// The header line, newline included.
    pub header: Vec<u8>,
    /// The tar of `script.py` and `in/<name>`.
    pub upload: Vec<u8>,
    /// The key the runner's frames are authenticated with: fresh for each attempt, sent only
    /// in the header, so it exists only in the runner's memory (never the script's) and here.
    pub key: String,
}

impl Request {
    /// Packs `job` (reading input files from disk: call it off the async threads) for a script
    /// run under `limits` (its time limit and the cap on stdout and stderr).
    pub fn build(job: &Job, limits: &Limits) -> Result<Self, SandboxError> {
        let state = job.session.as_ref().and_then(|s| s.state.as_deref());
        let upload = archive::pack(job.script.as_bytes(), &job.inputs, state)?;
        // Two random UUIDs: 244 random bits.
        let key = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let header = Header {
            key: &key,
            upload_bytes: upload.len() as u64,
            timeout_s: limits.timeout.as_secs_f64(),
            stdio_max_bytes: limits.stdio_max_bytes,
            file_path: job.file_path.as_deref(),
            input_file_path: job.input_file_path.as_deref(),
            session: job.session.as_ref().map(|session| SessionHeader {
                restore: session.state.is_some(),
                max_bytes: session.max_bytes,
            }),
        };
        let mut header = serde_json::to_vec(&header).map_err(|e| SandboxError::Io {
            action: "writing the request header".into(),
            source: e.into(),
        })?;
        header.push(b'\n');
        Ok(Self {
            header,
            upload,
            key,
        })
    }

    /// Everything the runner reads, in one buffer (for the docker CLI baseline of `bench`).
    pub fn to_bytes(&self) -> Vec<u8> {
        [self.header.as_slice(), &self.upload].concat()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_header_is_one_json_line_that_names_the_upload_and_the_limits() {
        let job = Job {
            script: "print(1)".into(),
            file_path: Some("/work/out/a.xlsx".into()),
            ..Job::default()
        };
        let limits = Limits {
            timeout: Duration::from_millis(1500),
            stdio_max_bytes: 4096,
            ..crate::config::SandboxConfig::from_lookup(|_| None)
                .unwrap()
                .limits
        };
        let request = Request::build(&job, &limits).unwrap();
        let (line, rest) = request.header.split_at(request.header.len() - 1);
        assert_eq!(rest, b"\n");
        assert!(!line.contains(&b'\n'));
        let header: serde_json::Value = serde_json::from_slice(line).unwrap();
        assert_eq!(header["upload_bytes"], request.upload.len() as u64);
        assert_eq!(header["timeout_s"], 1.5);
        assert_eq!(header["stdio_max_bytes"], 4096);
        assert_eq!(header["file_path"], "/work/out/a.xlsx");
        assert_eq!(header["input_file_path"], serde_json::Value::Null);
        assert_eq!(header["key"], request.key.as_str());
        assert!(header.get("session").is_none(), "no session, no field");
        assert_eq!(request.key.len(), 64);
        let again = Request::build(&job, &limits).unwrap();
        assert_ne!(again.key, request.key, "a fresh key for each attempt");
        assert_eq!(
            request.to_bytes().len(),
            request.header.len() + request.upload.len()
        );
    }

    #[test]
    fn a_session_sends_its_state_in_the_upload_and_its_bound_in_the_header() {
        let limits = crate::config::SandboxConfig::from_lookup(|_| None)
            .unwrap()
            .limits;
        let job = Job {
            script: "print(1)".into(),
            session: Some(super::super::SessionJob {
                state: Some(b"opaque".to_vec()),
                max_bytes: 1024,
            }),
            ..Job::default()
        };
        let request = Request::build(&job, &limits).unwrap();
        let line = &request.header[..request.header.len() - 1];
        let header: serde_json::Value = serde_json::from_slice(line).unwrap();
        assert_eq!(header["session"]["restore"], true);
        assert_eq!(header["session"]["max_bytes"], 1024);
        let mut archive = tar::Archive::new(request.upload.as_slice());
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|entry| entry.unwrap().path().unwrap().display().to_string())
            .collect();
        assert!(names.contains(&"session/state".to_string()), "{names:?}");
    }
}
