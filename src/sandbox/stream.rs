//! Splitting a container's attached output into capped stdout, capped stderr, the output
//! archive and the runner's closing line.
//!
//! The runner writes a per-attempt boundary on stdout after the script, then the tar of
//! `/work/out`. [`StdoutSplitter`] finds the boundary across chunk edges; bytes before it are the
//! script's stdout (kept up to the cap, the rest counted and dropped), bytes after it go to the
//! unpacker. Then the runner ends stderr with an exit marker and one line of JSON, the
//! [`Trailer`]; [`StderrSplitter`] takes it off the script's stderr. Nothing here blocks the
//! container: output past a cap is read and discarded, so a script that floods stdout still runs
//! to its end (or its timeout).

use bytes::Bytes;
use serde::Deserialize;

use super::Captured;

/// Appends to a [`Captured`] up to `cap` bytes, counting the rest as dropped.
pub fn capture(into: &mut Captured, cap: usize, bytes: &[u8]) {
    let room = cap.saturating_sub(into.bytes.len());
    let kept = room.min(bytes.len());
    into.bytes.extend_from_slice(&bytes[..kept]);
    into.dropped += (bytes.len() - kept) as u64;
}

/// Where a piece of stdout belongs.
#[derive(Debug, PartialEq)]
pub enum Piece {
    /// The script's own output.
    Stdout(Bytes),
    /// Part of the output archive.
    Archive(Bytes),
    /// The boundary was just found (the script has finished).
    Boundary,
}

/// Finds the boundary in a stream of stdout chunks.
#[derive(Debug)]
pub struct StdoutSplitter {
    boundary: Vec<u8>,
    /// Stdout bytes held back because they could be the start of the boundary.
    pending: Vec<u8>,
    found: bool,
}

impl StdoutSplitter {
    /// A splitter looking for `boundary` (non-empty).
    pub fn new(boundary: impl Into<Vec<u8>>) -> Self {
        Self {
            boundary: boundary.into(),
            pending: Vec::new(),
            found: false,
        }
    }

    /// Whether the boundary has been seen.
    pub fn found(&self) -> bool {
        self.found
    }

    /// Feeds a chunk; returns its pieces in order.
    pub fn push(&mut self, chunk: Bytes) -> Vec<Piece> {
        if self.found {
            return vec![Piece::Archive(chunk)];
        }
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(&chunk);
        if let Some(at) = find(&data, &self.boundary) {
            self.found = true;
            let data = Bytes::from(data);
            let mut pieces = Vec::with_capacity(3);
            if at > 0 {
                pieces.push(Piece::Stdout(data.slice(..at)));
            }
            pieces.push(Piece::Boundary);
            let rest = data.slice(at + self.boundary.len()..);
            if !rest.is_empty() {
                pieces.push(Piece::Archive(rest));
            }
            return pieces;
        }
        // Hold back the longest tail that is a prefix of the boundary.
        let keep = (1..self.boundary.len().min(data.len() + 1))
            .rev()
            .find(|&n| data.ends_with(&self.boundary[..n]))
            .unwrap_or(0);
        self.pending = data.split_off(data.len() - keep);
        if data.is_empty() {
            Vec::new()
        } else {
            vec![Piece::Stdout(Bytes::from(data))]
        }
    }

    /// The stream ended: whatever was held back is stdout after all.
    pub fn finish(&mut self) -> Option<Bytes> {
        let pending = std::mem::take(&mut self.pending);
        (!pending.is_empty()).then(|| Bytes::from(pending))
    }
}

/// Longest closing line the runner writes; anything longer is not one.
const TRAILER_MAX_BYTES: usize = 4096;

/// How the script ended, as the runner reports it after the outputs. Both streams are then
/// complete: stdout ended with the archive, stderr with this line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Trailer {
    /// The script's exit code (128 + the signal when a signal killed it).
    pub exit_code: i64,
    /// Whether the cgroup counted an out-of-memory kill while the script ran; `None` when the
    /// runner could not read the counter (then Docker's flag is asked instead).
    pub oom_killed: Option<bool>,
}

/// Takes the runner's [`Trailer`] off the end of stderr.
#[derive(Debug)]
pub struct StderrSplitter {
    marker: StdoutSplitter,
    line: Vec<u8>,
    trailer: Option<Trailer>,
}

impl StderrSplitter {
    /// A splitter looking for the exit `marker` (non-empty).
    pub fn new(marker: impl Into<Vec<u8>>) -> Self {
        Self {
            marker: StdoutSplitter::new(marker),
            line: Vec::new(),
            trailer: None,
        }
    }

    /// Feeds a chunk of stderr; returns what of it is the script's.
    pub fn push(&mut self, chunk: Bytes) -> Vec<Bytes> {
        let mut stderr = Vec::new();
        for piece in self.marker.push(chunk) {
            match piece {
                Piece::Stdout(bytes) => stderr.push(bytes),
                Piece::Boundary => {}
                Piece::Archive(bytes) if self.trailer.is_none() => {
                    self.line.extend_from_slice(&bytes);
                    if let Some(end) = self.line.iter().position(|b| *b == b'\n') {
                        self.trailer = serde_json::from_slice(&self.line[..end]).ok();
                        self.line.clear();
                    } else if self.line.len() > TRAILER_MAX_BYTES {
                        self.line.clear();
                    }
                }
                Piece::Archive(_) => {}
            }
        }
        stderr
    }

    /// The runner's closing line, once it has come whole.
    pub fn trailer(&self) -> Option<Trailer> {
        self.trailer
    }

    /// The stream ended: whatever was held back is the script's after all.
    pub fn finish(&mut self) -> Option<Bytes> {
        self.marker.finish()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(boundary: &str, chunks: &[&str]) -> (String, String, bool) {
        let mut splitter = StdoutSplitter::new(boundary.as_bytes());
        let (mut stdout, mut archive) = (Vec::new(), Vec::new());
        let mut pieces = Vec::new();
        for chunk in chunks {
            pieces.extend(splitter.push(Bytes::copy_from_slice(chunk.as_bytes())));
        }
        pieces.extend(splitter.finish().map(Piece::Stdout));
        for piece in pieces {
            match piece {
                Piece::Stdout(b) => stdout.extend_from_slice(&b),
                Piece::Archive(b) => archive.extend_from_slice(&b),
                Piece::Boundary => {}
            }
        }
        (
            String::from_utf8(stdout).unwrap(),
            String::from_utf8(archive).unwrap(),
            splitter.found(),
        )
    }

    #[test]
    fn splits_at_a_boundary_inside_one_chunk() {
        assert_eq!(
            run("@@B@@", &["hello\n@@B@@tar"]),
            ("hello\n".into(), "tar".into(), true)
        );
    }

    #[test]
    fn finds_a_boundary_cut_across_chunks() {
        assert_eq!(
            run("@@B@@", &["hel", "lo@", "@B", "@", "@t", "ar"]),
            ("hello".into(), "tar".into(), true)
        );
    }

    #[test]
    fn a_near_miss_is_stdout() {
        assert_eq!(
            run("@@B@@", &["a@@B", "x@@"]),
            ("a@@Bx@@".into(), String::new(), false)
        );
    }

    #[test]
    fn only_the_first_boundary_counts() {
        assert_eq!(
            run("@@B@@", &["@@B@@x@@B@@y"]),
            (String::new(), "x@@B@@y".into(), true)
        );
    }

    #[test]
    fn the_trailer_comes_off_stderr_even_when_cut_across_chunks() {
        let mut splitter = StderrSplitter::new(&b"\n--X--\n"[..]);
        let mut stderr = Vec::new();
        for chunk in [
            "Traceback: boom",
            "\n--X",
            "--\n{\"exit_code\": 1,",
            " \"oom_killed\": false}",
            "\n",
        ] {
            assert_eq!(splitter.trailer(), None, "not before the line is whole");
            for bytes in splitter.push(Bytes::copy_from_slice(chunk.as_bytes())) {
                stderr.extend_from_slice(&bytes);
            }
        }
        assert_eq!(stderr, b"Traceback: boom");
        assert_eq!(
            splitter.trailer(),
            Some(Trailer {
                exit_code: 1,
                oom_killed: Some(false)
            })
        );
        let mut unknown = StderrSplitter::new(&b"@@"[..]);
        unknown.push(Bytes::from_static(
            b"@@{\"exit_code\": 137, \"oom_killed\": null}\n",
        ));
        assert_eq!(unknown.trailer().unwrap().oom_killed, None);
        let mut garbled = StderrSplitter::new(&b"@@"[..]);
        garbled.push(Bytes::from_static(b"@@not json\n"));
        assert_eq!(
            garbled.trailer(),
            None,
            "a line that is not the runner's is no trailer"
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
