//! Reading what a sandbox's runner sends back, over plain byte streams, so that every backend
//! (Docker's attach, the tests' local process, a Kubernetes attach) goes through this one
//! parser: [`read_attempt`] takes the container's stdout and stderr as [`AsyncRead`]s.
//!
//! After the request, everything the runner (PID 1) writes on stdout is a frame: one byte of
//! kind, four bytes of length (big-endian, at most [`FRAME_MAX_BYTES`]), the payload, then
//! [`MAC_BYTES`] of HMAC-SHA256 under the request's key over the frame's sequence number (eight
//! bytes, big-endian, from 0), kind, length and payload. The payload is encrypted ([`seal`]:
//! XORed with SHAKE256 over a fixed context, the key and the sequence number), so a copy of the
//! container's stdout (every byte of which a Kubernetes node writes to its log, for log agents
//! to ship) holds only kinds and lengths, never the script's output or files; the key travels
//! on stdin, which nothing logs. Only PID 1 writes the container's
//! streams; the script's stdout and stderr reach it through pipes and travel only inside
//! payloads, so no byte of the script can end a frame or add one. The MAC covers what the pipes
//! cannot: under gVisor a script can open `/proc/1/fd/1` and write to PID 1's stdout itself,
//! but without the key (only in PID 1's memory and here) it cannot write a frame that passes,
//! nor drop, replay or reorder one.
//! The kinds: `o` and `e` (the script's stdout and stderr, already cut at the cap by the
//! runner; kept here up to the cap again, the rest counted), `x` (the runner's [`Report`] of
//! how the script ended), `a` (the tar of `/work/out`, fed to the unpacker), `z` (the end).
//!
//! A stream that does not parse (an unknown kind, an oversized frame, a report that is not
//! one, frames out of order, an end mid-frame) is recorded as [`Relayed::error`]: the attempt
//! then fails, it never succeeds. The container's stderr carries only the runner's own words
//! (a runner that could not start); it is appended to the script's stderr, capped. Nothing here
//! blocks the container: what comes past a cap is read and dropped.

use std::io::Read;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Instant;

use bytes::Bytes;
use futures_util::FutureExt;
use serde::Deserialize;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Captured, Resources, archive};

/// The largest payload of one frame (`FRAME_MAX_BYTES` in runner.py).
pub const FRAME_MAX_BYTES: usize = 64 * 1024;
/// One byte of kind, four of length.
const FRAME_HEADER_BYTES: usize = 5;
/// Bytes of HMAC-SHA256 that close every frame (`MAC_BYTES` in runner.py).
pub const MAC_BYTES: usize = 16;
/// SHA-256's block size, for HMAC.
const SHA256_BLOCK: usize = 64;
/// What the payload cipher's SHAKE256 starts with (`CIPHER_CONTEXT` in runner.py).
const CIPHER_CONTEXT: &[u8] = b"file-agent frame payload\0";

/// Encrypts or decrypts (the same XOR) frame `sequence`'s `payload` under `key`, in place.
fn seal(key: &[u8], sequence: u64, payload: &mut [u8]) {
    use sha3::digest::{ExtendableOutput, Update, XofReader};
    if payload.is_empty() {
        return;
    }
    let mut shake = sha3::Shake256::default();
    shake.update(CIPHER_CONTEXT);
    shake.update(key);
    shake.update(&sequence.to_be_bytes());
    let mut mask = shake.finalize_xof();
    let mut block = [0u8; 168];
    for chunk in payload.chunks_mut(block.len()) {
        XofReader::read(&mut mask, &mut block[..chunk.len()]);
        for (byte, m) in chunk.iter_mut().zip(&block) {
            *byte ^= m;
        }
    }
}
/// The longest report the runner writes; anything longer is not one.
const REPORT_MAX_BYTES: usize = 4096;
/// Archive chunks waiting for the unpacker.
const ARCHIVE_QUEUE: usize = 16;
/// Bytes read from the container's stderr at a time.
const STDERR_CHUNK: usize = 8192;

/// Appends to a [`Captured`] up to `cap` bytes, counting the rest as dropped.
pub fn capture(into: &mut Captured, cap: usize, bytes: &[u8]) {
    let room = cap.saturating_sub(into.bytes.len());
    let kept = room.min(bytes.len());
    into.bytes.extend_from_slice(&bytes[..kept]);
    into.dropped += (bytes.len() - kept) as u64;
}

/// How the runner's wait for the script ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerEnd {
    /// The script's process exited (or a signal ended it).
    Exited,
    /// The runner's own deadline passed (file-agent's normally acts first) and it killed the
    /// script.
    Deadline,
    /// The runner could not read the request (the script never ran).
    BadRequest,
}

/// How the script ended, as the runner (PID 1) saw it: from its `waitpid`, its clock and the
/// cgroup's counter, none of which the script can write.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Report {
    /// How the wait ended.
    pub ended: RunnerEnd,
    /// The script's exit code (128 + the signal when a signal ended it); `None` when it did
    /// not exit.
    pub exit_code: Option<i64>,
    /// The signal that ended the script, if one did.
    pub signal: Option<i32>,
    /// Whether the cgroup counted an out-of-memory kill while the script ran; `None` when the
    /// runner could not read the counter (then Docker's flag is asked instead).
    pub oom_killed: Option<bool>,
    /// From handing the script over to its end, by the runner's clock.
    pub duration_s: f64,
    /// Bytes of stdout the runner read past the cap and dropped.
    pub stdout_dropped: u64,
    /// Bytes of stderr the runner read past the cap and dropped.
    pub stderr_dropped: u64,
    /// What the attempt used; a figure that is missing or malformed is left out (an older
    /// runner sends none).
    #[serde(default, deserialize_with = "Resources::lenient")]
    pub resources: Resources,
}

/// Why the runner's stream could not be read.
#[derive(Debug, Error)]
pub enum StreamError {
    /// A frame of a kind the runner never writes.
    #[error("a frame of unknown kind {0:#04x}")]
    UnknownKind(u8),
    /// A frame longer than the runner ever writes.
    #[error("a frame of {0} bytes (at most {FRAME_MAX_BYTES})")]
    TooLong(usize),
    /// The stream ended inside a frame.
    #[error("the stream ended inside a frame")]
    Truncated,
    /// The `x` frame is not the runner's report.
    #[error("the runner's report could not be read: {0}")]
    BadReport(String),
    /// A frame where it cannot be.
    #[error("{0}")]
    OutOfOrder(&'static str),
    /// A frame whose MAC is not the runner's: bytes the runner did not write.
    #[error("frame {0} does not carry the runner's MAC")]
    Forged(u64),
    /// Reading failed.
    #[error("reading the stream failed: {0}")]
    Read(#[from] std::io::Error),
}

/// One frame.
enum Frame {
    Stdout(Bytes),
    Stderr(Bytes),
    Exit(Report),
    Archive(Bytes),
    End,
}

/// HMAC-SHA256 (RFC 2104) under one key, ready for many messages.
#[derive(Clone)]
struct Mac {
    inner: sha2::Sha256,
    outer: sha2::Sha256,
}

impl Mac {
    fn new(key: &[u8]) -> Self {
        use sha2::Digest;
        let mut block = [0u8; SHA256_BLOCK];
        if key.len() > SHA256_BLOCK {
            block[..32].copy_from_slice(&sha2::Sha256::digest(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let pad = |byte: u8| {
            let mut hasher = sha2::Sha256::new();
            hasher.update(block.map(|b| b ^ byte));
            hasher
        };
        Self {
            inner: pad(0x36),
            outer: pad(0x5c),
        }
    }

    /// The MAC of the concatenated `parts`.
    fn of(&self, parts: &[&[u8]]) -> [u8; 32] {
        use sha2::Digest;
        let mut inner = self.inner.clone();
        for part in parts {
            inner.update(part);
        }
        let mut outer = self.outer.clone();
        outer.update(inner.finalize());
        outer.finalize().into()
    }
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The next frame, its MAC checked as frame number `sequence`; `None` at the end of the
/// stream, between frames.
async fn next_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    key: &[u8],
    mac: &Mac,
    sequence: u64,
) -> Result<Option<Frame>, StreamError> {
    let Some(head) = read_head(reader).await? else {
        return Ok(None);
    };
    let length = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if length > FRAME_MAX_BYTES {
        return Err(StreamError::TooLong(length));
    }
    let mut payload = vec![0; length + MAC_BYTES];
    reader
        .read_exact(&mut payload)
        .await
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::UnexpectedEof => StreamError::Truncated,
            _ => StreamError::Read(error),
        })?;
    let tag = payload.split_off(length);
    let expected = mac.of(&[&sequence.to_be_bytes(), &head, &payload]);
    if !same(&tag, &expected[..MAC_BYTES]) {
        return Err(StreamError::Forged(sequence));
    }
    seal(key, sequence, &mut payload);
    decode(head[0], payload).map(Some)
}

/// A frame's header (its kind and length); `None` when the stream ends before it begins.
async fn read_head<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<Option<[u8; FRAME_HEADER_BYTES]>, StreamError> {
    let mut head = [0u8; FRAME_HEADER_BYTES];
    let mut got = 0;
    while got < head.len() {
        let n = reader.read(&mut head[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(StreamError::Truncated)
            };
        }
        got += n;
    }
    Ok(Some(head))
}

/// The frame of `kind` with its authenticated, decrypted `payload` (a report is bounded to
/// [`REPORT_MAX_BYTES`] before it is parsed).
fn decode(kind: u8, payload: Vec<u8>) -> Result<Frame, StreamError> {
    Ok(match kind {
        b'o' => Frame::Stdout(payload.into()),
        b'e' => Frame::Stderr(payload.into()),
        b'x' if payload.len() > REPORT_MAX_BYTES => {
            return Err(StreamError::TooLong(payload.len()));
        }
        b'x' => Frame::Exit(
            serde_json::from_slice(&payload)
                .map_err(|error| StreamError::BadReport(error.to_string()))?,
        ),
        b'a' => Frame::Archive(payload.into()),
        b'z' => Frame::End,
        kind => return Err(StreamError::UnknownKind(kind)),
    })
}

/// What the runner's streams carried.
#[derive(Debug)]
pub struct Relayed {
    /// The script's stdout, capped (with what the runner dropped counted).
    pub stdout: Captured,
    /// The script's stderr and the runner's own words, capped.
    pub stderr: Captured,
    /// The runner's report, when it came.
    pub report: Option<Report>,
    /// When the report came (the script had ended).
    pub finished_at: Option<Instant>,
    /// Whether the end frame came: everything the runner had to send has come.
    pub complete: bool,
    /// What was wrong with the stream, if anything.
    pub error: Option<String>,
    /// When reading ended.
    pub ended: Instant,
}

/// The frames as they are read, before the runner's own stderr is added.
#[derive(Default)]
struct Frames {
    stdout: Captured,
    stderr: Captured,
    report: Option<Report>,
    finished_at: Option<Instant>,
    complete: bool,
    error: Option<StreamError>,
}

impl Frames {
    /// Takes one frame, in the order the runner writes them: stdout and stderr (capped) at
    /// any time, then one report (which fires `finished`), then the archive (sent on to the
    /// unpacker while it takes it), then the end. Reading stops at the end frame or at a
    /// frame out of order, which is the stream's error.
    async fn take(
        &mut self,
        frame: Frame,
        cap: usize,
        archive: &mut Option<mpsc::Sender<Bytes>>,
        finished: &mut Option<oneshot::Sender<()>>,
    ) -> ControlFlow<()> {
        match frame {
            Frame::Stdout(bytes) => capture(&mut self.stdout, cap, &bytes),
            Frame::Stderr(bytes) => capture(&mut self.stderr, cap, &bytes),
            Frame::Exit(_) if self.report.is_some() => return self.out_of_order("a second report"),
            Frame::Exit(report) => {
                self.stdout.dropped += report.stdout_dropped;
                self.stderr.dropped += report.stderr_dropped;
                self.report = Some(report);
                self.finished_at = Some(Instant::now());
                if let Some(finished) = finished.take() {
                    let _ = finished.send(());
                }
            }
            Frame::Archive(_) if self.report.is_none() => {
                return self.out_of_order("outputs before the report");
            }
            Frame::Archive(bytes) => {
                if let Some(sender) = archive
                    && sender.send(bytes).await.is_err()
                {
                    // The unpacker is done (a limit); the rest is read and dropped.
                    *archive = None;
                }
            }
            Frame::End if self.report.is_none() => {
                return self.out_of_order("the end before the report");
            }
            Frame::End => {
                self.complete = true;
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    /// A frame where it cannot be: the stream's error, and reading stops.
    fn out_of_order(&mut self, what: &'static str) -> ControlFlow<()> {
        self.error = Some(StreamError::OutOfOrder(what));
        ControlFlow::Break(())
    }
}

/// Reads frames until the end frame, the end of the stream or an error. After an error the
/// rest of the stream is read and dropped, so that the container never blocks on a full pipe.
async fn read_frames<R: AsyncRead + Unpin>(
    reader: R,
    key: &str,
    cap: usize,
    archive: mpsc::Sender<Bytes>,
    finished: oneshot::Sender<()>,
) -> Frames {
    let mut reader = BufReader::with_capacity(FRAME_MAX_BYTES + FRAME_HEADER_BYTES, reader);
    let mut frames = Frames::default();
    let mut archive = Some(archive);
    let mut finished = Some(finished);
    let mac = Mac::new(key.as_bytes());
    for sequence in 0.. {
        let frame = match next_frame(&mut reader, key.as_bytes(), &mac, sequence).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(error) => {
                frames.error = Some(error);
                break;
            }
        };
        if frames
            .take(frame, cap, &mut archive, &mut finished)
            .await
            .is_break()
        {
            break;
        }
    }
    // Unless the end frame came, the outputs are cut short: the unpacker must not take them for
    // whole.
    drop(archive);
    if frames.error.is_some() {
        let _ = tokio::io::copy(&mut reader, &mut tokio::io::sink()).await;
    }
    frames
}

/// Reads the runner's `stdout` (frames, authenticated under `key`) and `stderr` (its own words)
/// until the end frame, or until stdout ends. The archive goes to `archive` as it comes (the
/// sender is dropped when it has ended); `finished` fires when the report comes.
pub async fn relay<O, E>(
    stdout: O,
    mut stderr: E,
    key: &str,
    cap: usize,
    archive: mpsc::Sender<Bytes>,
    finished: oneshot::Sender<()>,
) -> Relayed
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let reading = read_frames(stdout, key, cap, archive, finished);
    tokio::pin!(reading);
    let mut runner_stderr = Captured::default();
    let mut chunk = vec![0u8; STDERR_CHUNK];
    let mut stderr_open = true;
    let frames = loop {
        tokio::select! {
            frames = &mut reading => break frames,
            read = stderr.read(&mut chunk), if stderr_open => match read {
                Ok(0) | Err(_) => stderr_open = false,
                Ok(n) => capture(&mut runner_stderr, cap, &chunk[..n]),
            },
        }
    };
    // What the runner wrote on stderr and is there already (it wrote it before its end frame).
    while stderr_open {
        match stderr.read(&mut chunk).now_or_never() {
            Some(Ok(n)) if n > 0 => capture(&mut runner_stderr, cap, &chunk[..n]),
            _ => stderr_open = false,
        }
    }
    let mut stderr = frames.stderr;
    capture(&mut stderr, cap, &runner_stderr.bytes);
    stderr.dropped += runner_stderr.dropped;
    Relayed {
        stdout: frames.stdout,
        stderr,
        report: frames.report,
        finished_at: frames.finished_at,
        complete: frames.complete,
        error: frames.error.map(|error| error.to_string()),
        ended: Instant::now(),
    }
}

/// The tasks reading one attempt's result: the relay, its "the script has ended" signal, and
/// the unpacker writing the outputs as hostile input.
pub struct Reading {
    /// Reads the streams (see [`relay`]).
    pub relay: JoinHandle<Relayed>,
    /// Fires when the runner's report came: the script has ended.
    pub finished: oneshot::Receiver<()>,
    /// Unpacks the output archive into the destination folder.
    pub unpacker: JoinHandle<std::io::Result<archive::Unpacked>>,
}

/// Starts reading an attempt's `stdout` and `stderr` (its frames authenticated under `key`, the
/// request's [`super::request::Request::key`]), unpacking the outputs into `out_dir` under
/// `limits`, with stdout and stderr each kept up to `cap` bytes. Every backend calls this on
/// the streams of its container.
pub fn read_attempt<O, E>(
    stdout: O,
    stderr: E,
    key: String,
    cap: usize,
    out_dir: PathBuf,
    limits: archive::UnpackLimits,
) -> Reading
where
    O: AsyncRead + Unpin + Send + 'static,
    E: AsyncRead + Unpin + Send + 'static,
{
    let (archive_tx, archive_rx) = mpsc::channel::<Bytes>(ARCHIVE_QUEUE);
    let (finished_tx, finished) = oneshot::channel();
    let unpacker = tokio::task::spawn_blocking(move || {
        archive::unpack(ChannelReader::new(archive_rx), &out_dir, limits)
    });
    let relay =
        tokio::spawn(
            async move { relay(stdout, stderr, &key, cap, archive_tx, finished_tx).await },
        );
    Reading {
        relay,
        finished,
        unpacker,
    }
}

/// A blocking reader over the chunks the relay sends; EOF when the relay is done with them.
struct ChannelReader {
    chunks: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl ChannelReader {
    fn new(chunks: mpsc::Receiver<Bytes>) -> Self {
        Self {
            chunks,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "test-key";

    /// Frames as the runner writes them, numbered from 0.
    struct Runner {
        key: String,
        mac: Mac,
        sequence: u64,
    }

    impl Runner {
        fn with_key(key: &str) -> Self {
            Self {
                key: key.to_string(),
                mac: Mac::new(key.as_bytes()),
                sequence: 0,
            }
        }

        fn frame(&mut self, kind: u8, payload: &[u8]) -> Vec<u8> {
            let mut bytes = vec![kind];
            bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            let mut sealed = payload.to_vec();
            seal(self.key.as_bytes(), self.sequence, &mut sealed);
            let tag = self
                .mac
                .of(&[&self.sequence.to_be_bytes(), &bytes, &sealed]);
            bytes.extend_from_slice(&sealed);
            bytes.extend_from_slice(&tag[..MAC_BYTES]);
            self.sequence += 1;
            bytes
        }
    }

    fn runner() -> Runner {
        Runner::with_key(KEY)
    }

    const REPORT: &[u8] = br#"{"ended": "exited", "exit_code": 0, "signal": null, "oom_killed": false, "duration_s": 0.1, "stdout_dropped": 5, "stderr_dropped": 0}"#;

    /// Relays `stdout` (and `stderr`) with a cap of `cap`; the archive's bytes as they came.
    async fn run(stdout: Vec<u8>, stderr: &[u8], cap: usize) -> (Relayed, Vec<u8>, bool) {
        let (archive_tx, mut archive_rx) = mpsc::channel(64);
        let (finished_tx, finished_rx) = oneshot::channel();
        let relayed = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            relay(&stdout[..], stderr, KEY, cap, archive_tx, finished_tx),
        )
        .await
        .unwrap();
        let mut archive = Vec::new();
        while let Some(chunk) = archive_rx.recv().await {
            archive.extend_from_slice(&chunk);
        }
        (relayed, archive, finished_rx.await.is_ok())
    }

    #[tokio::test]
    async fn a_whole_stream_gives_the_outputs_the_report_and_the_archive() {
        let mut r = runner();
        let stream = [
            r.frame(b'o', b"hello "),
            r.frame(b'e', b"warning\n"),
            r.frame(b'o', b"world"),
            r.frame(b'x', REPORT),
            r.frame(b'a', b"tar-1"),
            r.frame(b'a', b"tar-2"),
            r.frame(b'z', b""),
            b"anything after the end is never read".to_vec(),
        ]
        .concat();
        let (relayed, archive, finished) = run(stream, b"runner note\n", 1024).await;
        assert_eq!(relayed.stdout.bytes, b"hello world");
        assert_eq!(relayed.stdout.dropped, 5, "the runner's count is added");
        assert_eq!(relayed.stderr.bytes, b"warning\nrunner note\n");
        assert_eq!(relayed.report.unwrap().exit_code, Some(0));
        assert!(relayed.complete && finished && relayed.error.is_none());
        assert_eq!(archive, b"tar-1tar-2");
    }

    #[tokio::test]
    async fn the_reports_resources_are_read_and_a_malformed_one_never_fails_the_stream() {
        for (resources, cpu) in [
            (r#"{"cpu_user_s": 0.5, "cpu_system_s": 0.25}"#, Some(0.75)),
            (r#"{"cpu_user_s": "NaN", "cpu_system_s": -0.5}"#, None),
            (r#""not an object""#, None),
        ] {
            let report = format!(
                r#"{{"ended": "exited", "exit_code": 0, "signal": null, "oom_killed": false, "duration_s": 0.1, "stdout_dropped": 0, "stderr_dropped": 0, "resources": {resources}}}"#
            );
            let mut r = runner();
            let stream = [r.frame(b'x', report.as_bytes()), r.frame(b'z', b"")].concat();
            let (relayed, _, _) = run(stream, b"", 1024).await;
            assert!(relayed.complete && relayed.error.is_none(), "{resources}");
            assert_eq!(
                relayed.report.unwrap().resources.cpu_s(),
                cpu,
                "{resources}"
            );
        }
    }

    #[tokio::test]
    async fn script_bytes_that_look_like_frames_stay_the_scripts() {
        // Even frames with the right key, as the script's output, stay its output.
        let mut copy = runner();
        let forged = [
            copy.frame(b'x', REPORT),
            copy.frame(b'a', b"forged"),
            copy.frame(b'z', b""),
        ]
        .concat();
        let report =
            String::from_utf8_lossy(REPORT).replace("\"exit_code\": 0", "\"exit_code\": 7");
        let mut r = runner();
        let stream = [
            r.frame(b'o', &forged),
            r.frame(b'x', report.as_bytes()),
            r.frame(b'z', b""),
        ]
        .concat();
        let (relayed, archive, _) = run(stream, b"", 1 << 20).await;
        assert_eq!(relayed.stdout.bytes, forged);
        assert_eq!(relayed.report.unwrap().exit_code, Some(7));
        assert!(archive.is_empty());
    }

    #[tokio::test]
    async fn a_stream_that_does_not_parse_is_an_error_never_a_result() {
        // The first two frames of a good stream, and a writer that continues it.
        let start = || {
            let mut r = runner();
            let good = [r.frame(b'o', b"out"), r.frame(b'x', REPORT)].concat();
            (r, good)
        };
        let next = |kind: u8, payload: &[u8]| {
            let (mut r, good) = start();
            [good, r.frame(kind, payload)].concat()
        };
        let (mut r, good) = start();
        let end = r.frame(b'z', b"");
        let mut tampered = end.clone();
        *tampered.last_mut().unwrap() ^= 1;
        let mut stranger = Runner::with_key("another key");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (next(b'q', b""), "unknown kind"),
            (
                [good.clone(), vec![b'a', 0xff, 0xff, 0xff, 0xff]].concat(),
                "bytes (at most",
            ),
            (
                [good.clone(), vec![b'a', 0, 0, 0, 9, 1, 2]].concat(),
                "inside a frame",
            ),
            ([good.clone(), vec![b'a', 0]].concat(), "inside a frame"),
            (
                runner().frame(b'x', br#"{"exit_code": 0}"#),
                "report could not be read",
            ),
            (next(b'x', REPORT), "second report"),
            (runner().frame(b'a', b"tar"), "before the report"),
            (runner().frame(b'z', b""), "before the report"),
            // Bytes the runner did not write: another key, a changed MAC, a frame left out,
            // one replayed.
            (stranger.frame(b'o', b"hi"), "frame 0 does not carry"),
            ([good.clone(), tampered].concat(), "frame 2 does not carry"),
            (
                [runner().frame(b'o', b"out"), end.clone()].concat(),
                "frame 1 does not carry",
            ),
            (
                [runner().frame(b'o', b"a"), runner().frame(b'o', b"a")].concat(),
                "frame 1 does not carry",
            ),
        ];
        for (stream, expected) in cases {
            let (relayed, _, _) = run(stream, b"", 1024).await;
            let error = relayed.error.unwrap_or_default();
            assert!(error.contains(expected), "{expected}: {error}");
            assert!(!relayed.complete);
        }
        // Ending between frames is no error, but not complete either.
        let (relayed, _, finished) = run(good, b"", 1024).await;
        assert!(relayed.error.is_none() && !relayed.complete && finished);
    }

    #[tokio::test]
    async fn the_cap_holds_over_frames_and_the_runners_stderr() {
        let mut r = runner();
        let stream = [
            r.frame(b'o', &[b'x'; 3000]),
            r.frame(b'o', &[b'y'; 3000]),
            r.frame(b'e', &[b'e'; 10]),
        ]
        .concat();
        let (relayed, _, _) = run(stream, &[b'r'; 10], 4096).await;
        assert_eq!(relayed.stdout.bytes.len(), 4096);
        assert_eq!(relayed.stdout.dropped, 6000 - 4096);
        assert_eq!(relayed.stderr.bytes.len(), 20);
    }

    #[test]
    fn the_payload_cipher_is_runner_pys_and_no_plaintext_reaches_the_wire() {
        // Values from runner.py's _sealed (Python's hashlib.shake_256), for key "test-key".
        let mut payload = b"hello, secret world".to_vec();
        seal(b"test-key", 3, &mut payload);
        assert_eq!(
            hex::encode(&payload),
            "a5fb01e8080d6d34d81916feda30a703b3c844"
        );
        // Longer than one SHAKE256 block (168 bytes).
        let mut long = vec![b'x'; 400];
        seal(b"test-key", 0, &mut long);
        use sha2::Digest;
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&long)),
            "8edf7455057aaa6b6ff187163904d514f4150f4a14f8743d19f366fb8b865ab5"
        );
        seal(b"test-key", 0, &mut long);
        assert_eq!(long, vec![b'x'; 400]);
        // On the wire a frame shows its kind and length, not its payload.
        let wire = runner().frame(b'o', b"the script's secret output");
        assert!(!wire.windows(6).any(|w| w == b"secret"));
    }

    #[test]
    fn the_mac_is_hmac_sha256() {
        // RFC 4231, test case 2, and a key longer than a block (test case 6).
        assert_eq!(
            hex::encode(Mac::new(b"Jefe").of(&[b"what do ya want ", b"for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex::encode(
                Mac::new(&[0xaa; 131])
                    .of(&[b"Test Using Larger Than Block-Size Key - Hash Key First"])
            ),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn capture_keeps_the_cap_and_counts_the_rest() {
        let mut captured = Captured::default();
        capture(&mut captured, 4, b"abc");
        capture(&mut captured, 4, b"defgh");
        assert_eq!(captured.bytes, b"abcd");
        assert_eq!(captured.dropped, 4);
        assert!(captured.text().contains("4 more bytes were dropped"));
    }
}
