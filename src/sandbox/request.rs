//! What the runner receives on stdin for one attempt: one line of JSON (the header), then the
//! tar of the script and the inputs. Nothing of an attempt travels through a container's
//! environment or labels, so a warm container, made before the request, knows nothing of it
//! until it is taken. `sandbox-image/runner.py` reads this; the two change together. What comes
//! back is read by [`super::stream`], with the request's [`Request::key`].

use std::io;

use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Job, SandboxError, StateFile, archive};
use crate::config::Limits;
use crate::untrusted::door;

/// Bytes of a session's state read and sent at a time.
const STATE_CHUNK_BYTES: usize = 1 << 20;
/// What the door's refusals call the state's file.
const STATE_FILE: &str = "a session's state file";

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
    session: Option<SessionHeader<'a>>,
}

/// The header's `session`: whether a state came in the upload (`session/state`) and its
/// SHA-256 (the runner compares the state it would leave with it, and leaves a marker instead
/// of the same bytes), and the most the state the attempt leaves may be.
#[derive(Debug, Serialize)]
struct SessionHeader<'a> {
    restore: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    state_sha256: Option<&'a str>,
    max_bytes: u64,
}

/// One attempt's stdin, ready to send.
#[derive(Debug)]
pub struct Request {
    /// The header line, newline included.
    pub header: Vec<u8>,
    /// The tar of `script.py`, `in/<name>` and a session's `session/state`.
    pub upload: Upload,
    /// The key the runner's frames are authenticated with: fresh for each attempt, sent only
    /// in the header, so it exists only in the runner's memory (never the script's) and here.
    pub key: String,
}

/// The upload archive: its part in memory (the script and the inputs) and, for a session with
/// a state, the state's file, streamed after it when sent ([`Upload::send`]). A state may be as
/// large as `FILE_AGENT_SESSION_MAX_MIB`: it is never held in memory, by any number of calls at
/// once.
#[derive(Debug)]
pub struct Upload {
    /// The archive up to the state's body (the whole archive without a state).
    pub head: Vec<u8>,
    /// The session's state, streamed after `head`, then its padding and the archive's end.
    pub state: Option<StateFile>,
}

impl Upload {
    /// The archive's size in bytes, as the header names it.
    pub fn len(&self) -> u64 {
        let state = self.state.as_ref().map_or(0, |state| {
            state.bytes + archive::state_tail(state.bytes).len() as u64
        });
        self.head.len() as u64 + state
    }

    /// Whether the archive is empty (it never is: it always holds the script).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the archive to `writer`: its head, then the state's file read as it goes and
    /// hashed on the way. A state that is not the bytes checked before (changed in the folder
    /// since) is not sent whole: its archive's end is withheld, so the runner refuses the
    /// upload and the script never runs on it.
    pub async fn send<W: AsyncWrite + Unpin + ?Sized>(&self, writer: &mut W) -> io::Result<()> {
        writer.write_all(&self.head).await?;
        if let Some(state) = &self.state {
            send_state(state, writer).await?;
            writer.write_all(&archive::state_tail(state.bytes)).await?;
        }
        writer.flush().await
    }
}

/// Streams the state's file, exactly `state.bytes` of it, checking its SHA-256 on the way.
/// The file is in a session's folder, which whoever holds the data folder can change between
/// the check and the send: it is opened through the door, so a link, a FIFO or a device put
/// in its place is refused by name at once, never waited on or read as a state.
async fn send_state<W: AsyncWrite + Unpin + ?Sized>(
    state: &StateFile,
    writer: &mut W,
) -> io::Result<()> {
    let mut file = tokio::fs::File::from_std(door::open_read_as(&state.path, STATE_FILE)?);
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; STATE_CHUNK_BYTES];
    let mut left = state.bytes;
    while left > 0 {
        let want = usize::try_from(left).map_or(buffer.len(), |left| left.min(buffer.len()));
        let read = file.read(&mut buffer[..want]).await?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        writer.write_all(&buffer[..read]).await?;
        left -= read as u64;
    }
    if left > 0 || hex::encode(hasher.finalize()) != state.sha256 {
        return Err(io::Error::other(format!(
            "the session's state {} changed while it was being sent; it was not sent whole",
            state.path.display()
        )));
    }
    Ok(())
}

impl Request {
    /// Packs `job` (reading input files from disk: call it off the async threads) for a script
    /// run under `limits` (its time limit and the cap on stdout and stderr).
    pub fn build(job: &Job, limits: &Limits) -> Result<Self, SandboxError> {
        let state = job.session.as_ref().and_then(|s| s.state.clone());
        let head = archive::pack(
            job.script.as_bytes(),
            &job.inputs,
            state.as_ref().map(|state| state.bytes),
        )?;
        let upload = Upload { head, state };
        // Two random UUIDs: 244 random bits.
        let key = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let header = Header {
            key: &key,
            upload_bytes: upload.len(),
            timeout_s: limits.timeout.as_secs_f64(),
            stdio_max_bytes: limits.stdio_max_bytes,
            file_path: job.file_path.as_deref(),
            input_file_path: job.input_file_path.as_deref(),
            session: job.session.as_ref().map(|session| SessionHeader {
                restore: upload.state.is_some(),
                state_sha256: upload.state.as_ref().map(|state| state.sha256.as_str()),
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

    /// Writes everything the runner reads: the header, then the upload ([`Upload::send`]).
    pub async fn send<W: AsyncWrite + Unpin + ?Sized>(&self, writer: &mut W) -> io::Result<()> {
        writer.write_all(&self.header).await?;
        self.upload.send(writer).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn limits() -> Limits {
        crate::config::SandboxConfig::from_lookup(|_| None)
            .unwrap()
            .limits
    }

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
            ..limits()
        };
        let request = Request::build(&job, &limits).unwrap();
        let (line, rest) = request.header.split_at(request.header.len() - 1);
        assert_eq!(rest, b"\n");
        assert!(!line.contains(&b'\n'));
        let header: serde_json::Value = serde_json::from_slice(line).unwrap();
        assert_eq!(header["upload_bytes"], request.upload.len());
        assert_eq!(request.upload.len(), request.upload.head.len() as u64);
        assert_eq!(header["timeout_s"], 1.5);
        assert_eq!(header["stdio_max_bytes"], 4096);
        assert_eq!(header["file_path"], "/work/out/a.xlsx");
        assert_eq!(header["input_file_path"], serde_json::Value::Null);
        assert_eq!(header["key"], request.key.as_str());
        assert!(header.get("session").is_none(), "no session, no field");
        assert_eq!(request.key.len(), 64);
        let again = Request::build(&job, &limits).unwrap();
        assert_ne!(again.key, request.key, "a fresh key for each attempt");
    }

    /// A job of a session whose state is the file `path`, holding `bytes`.
    fn session_job(path: &std::path::Path, bytes: &[u8]) -> Job {
        std::fs::write(path, bytes).unwrap();
        Job {
            script: "print(1)".into(),
            session: Some(super::super::SessionJob {
                state: Some(StateFile {
                    path: path.to_path_buf(),
                    sha256: crate::audit::sha256_hex(bytes),
                    bytes: bytes.len() as u64,
                }),
                max_bytes: 1024,
            }),
            ..Job::default()
        }
    }

    #[tokio::test]
    async fn a_session_streams_its_state_from_its_file_into_the_upload() {
        let folder = tempfile::tempdir().unwrap();
        let state = b"opaque state, not a multiple of 512 bytes".repeat(100);
        let job = session_job(&folder.path().join("s.state"), &state);
        let request = Request::build(&job, &limits()).unwrap();
        assert!(
            request.upload.head.len() < state.len(),
            "the state is not in memory"
        );
        let line = &request.header[..request.header.len() - 1];
        let header: serde_json::Value = serde_json::from_slice(line).unwrap();
        assert_eq!(header["session"]["restore"], true);
        assert_eq!(header["session"]["max_bytes"], 1024);
        assert_eq!(
            header["session"]["state_sha256"],
            crate::audit::sha256_hex(&state)
        );
        let mut sent = Vec::new();
        request.send(&mut sent).await.unwrap();
        let upload = &sent[request.header.len()..];
        assert_eq!(upload.len() as u64, request.upload.len());
        assert_eq!(header["upload_bytes"], request.upload.len());
        let mut archive = tar::Archive::new(upload);
        let mut found = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            if name == "session/state" {
                std::io::Read::read_to_end(&mut entry, &mut found).unwrap();
            }
        }
        assert_eq!(found, state);
    }

    #[tokio::test]
    async fn a_state_changed_after_its_check_is_not_sent_whole() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("s.state");
        let job = session_job(&path, &[7; 3000]);
        let request = Request::build(&job, &limits()).unwrap();
        std::fs::write(&path, [8; 3000]).unwrap();
        let mut sent = Vec::new();
        let error = request.upload.send(&mut sent).await.unwrap_err();
        assert!(error.to_string().contains("changed"), "{error}");
        assert!(
            (sent.len() as u64) < request.upload.len(),
            "the end is withheld"
        );
    }

    #[tokio::test]
    async fn a_fifo_put_where_the_state_was_is_refused_by_name_at_once() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("s.state");
        let job = session_job(&path, &[7; 3000]);
        let request = Request::build(&job, &limits()).unwrap();
        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut sent = Vec::new();
        let error = tokio::time::timeout(Duration::from_secs(5), request.upload.send(&mut sent))
            .await
            .expect("a FIFO with no writer answers at once")
            .unwrap_err();
        assert!(error.to_string().contains("is a FIFO"), "{error}");
        assert!(
            error.to_string().contains("a session's state file"),
            "{error}"
        );
        assert_eq!(sent, request.upload.head, "nothing of the state is sent");
    }
}
