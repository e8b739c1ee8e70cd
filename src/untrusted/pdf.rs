//! PDF outputs checked from untrusted bytes: the file must parse and have at least one page.
//!
//! The bytes come from a sandboxed script, so they are treated as hostile. The parse is done by
//! lopdf, whose memory is not bounded by the file's size: a 2.4 KB file whose object stream
//! lists many ids at one offset, where an array of a million empty arrays sits, makes it build
//! that array once per id (gigabytes). So the server never parses a PDF itself: [`Checker`]
//! runs the check in a child process (this same executable, `file-agent check-pdf`) that first
//! caps its own address space at [`CHECK_MEMORY`] plus the file's size, and its CPU time at
//! [`CHECK_CPU`], with the kernel's resource limits, and is killed after [`CHECK_TIMEOUT`].
//! Whatever the file, the server's own memory holds only the file and the child's one-line
//! answer; a child that runs out of memory or time is a refusal of the file, not a fault of
//! the server.
//!
//! Inside the child, [`check`]:
//! 1. at most [`MAX_OBJECT_STREAMS`] compressed object streams (found by their `/ObjStm` name,
//!    compared after `#xx` escapes are decoded, before parsing), each inflated to at most
//!    [`MAX_INFLATED_STREAM_BYTES`] by lopdf's own bound;
//! 2. lopdf parses the objects (leniently, as readers do: a damaged cross-reference table is
//!    rebuilt) but decodes no page content, font or image;
//! 3. the page tree is walked here, not by lopdf's iterator, with a set of visited nodes and at
//!    most [`MAX_PAGE_TREE_NODES`] of them, so a tree whose kids point back at their parents
//!    ends instead of looping.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use lopdf::{DecompressError, Document, LoadOptions, Object, ObjectId};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use crate::config::MIB;

/// Compressed object streams a PDF may have.
pub const MAX_OBJECT_STREAMS: usize = 64;
/// The most one stream may inflate to while the file is parsed.
pub const MAX_INFLATED_STREAM_BYTES: usize = 8 * MIB as usize;
/// Nodes of the page tree visited before the file is refused.
pub const MAX_PAGE_TREE_NODES: usize = 100_000;

/// The address space the checking child may use on top of the file's size. Its own code and
/// libraries are mapped inside it (about 20 MiB), so the parse itself gets a little less.
pub const CHECK_MEMORY: u64 = 512 * MIB;
/// The CPU time the checking child may use.
pub const CHECK_CPU: Duration = Duration::from_secs(20);
/// How long the server waits for the checking child before killing it.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(30);
/// The hidden subcommand that runs [`child_main`].
pub const CHILD_COMMAND: &str = "check-pdf";
/// The exit code of a Rust program that panicked.
const PANIC_EXIT_CODE: i32 = 101;
/// The most the child's answer may be: one line of JSON.
const MAX_ANSWER_BYTES: u64 = 64 * 1024;

/// Why a file is not a usable PDF. The messages start with "it".
#[derive(Debug, Error, PartialEq, Eq, Serialize, Deserialize)]
pub enum PdfError {
    /// Not a PDF at all.
    #[error("it does not start with %PDF- (it is not a PDF)")]
    NotPdf,
    /// Over a cap.
    #[error("it {0}; make the file simpler: fewer, plainer objects")]
    Limit(String),
    /// lopdf cannot read it.
    #[error("it cannot be read as a PDF ({0})")]
    Unreadable(String),
    /// Encrypted: nobody could open it without a password.
    #[error("it is encrypted; write it without a password")]
    Encrypted,
    /// It parses but shows nothing.
    #[error("it has no pages")]
    NoPages,
    /// Its page tree is broken.
    #[error("its page tree is broken: {0}")]
    PageTree(String),
    /// lopdf panicked on it (in the checking child): a bug of the reader, shown to the model
    /// as an unreadable file.
    #[error("it cannot be read as a PDF (the reader failed on it); write it again, plainer")]
    ReaderFailed,
    /// Reading it took more memory or time than the checking child has (see [`Checker`]).
    #[error(
        "it needs more than {memory_mib} MiB of memory or {seconds} s to read (a reader would stall on it); write a plainer file: fewer, simpler objects"
    )]
    TooCostly {
        /// The child's memory cap, in MiB.
        memory_mib: u64,
        /// Its time cap, in seconds.
        seconds: u64,
    },
}

/// The checking child could not be run or answered nonsense: a fault of the server, not of the
/// file.
#[derive(Debug, Error)]
pub enum CheckerError {
    /// Spawning it, or talking to it, failed.
    #[error("cannot run the PDF check ({program}): {source}")]
    Spawn {
        /// The program run.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// It exited normally but its answer was not one.
    #[error("the PDF check ({program}) gave no answer: {detail}")]
    NoAnswer {
        /// The program run.
        program: String,
        /// What it printed or how it ended.
        detail: String,
    },
}

/// Runs [`check`] in a memory- and time-capped child process, a few at a time.
#[derive(Debug)]
pub struct Checker {
    /// The `file-agent` executable (the server's own, normally).
    program: PathBuf,
    /// Bounds the children alive at once, and so the memory they can take together.
    running: Semaphore,
}

impl Checker {
    /// Checks with `program` (a `file-agent` executable), at most `parallel` files at once.
    pub fn new(program: PathBuf, parallel: usize) -> Self {
        Self {
            program,
            running: Semaphore::new(parallel.max(1)),
        }
    }

    /// Checks with this process's own executable.
    pub fn this_program(parallel: usize) -> Self {
        let program = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("file-agent"));
        Self::new(program, parallel)
    }

    /// The pages of `bytes`, or why it is not a usable PDF (`Ok(Err(..))`), checked in a child
    /// that cannot take more than [`CHECK_MEMORY`] plus the file's size, nor run past
    /// [`CHECK_CPU`] or [`CHECK_TIMEOUT`].
    pub async fn check(&self, bytes: &[u8]) -> Result<Result<usize, PdfError>, CheckerError> {
        if !bytes.starts_with(b"%PDF-") {
            return Ok(Err(PdfError::NotPdf));
        }
        let program = self.program.display().to_string();
        let spawn_error = |source| CheckerError::Spawn {
            program: program.clone(),
            source,
        };
        let _permit = self
            .running
            .acquire()
            .await
            .map_err(|error| spawn_error(std::io::Error::other(error)))?;
        let memory = CHECK_MEMORY + bytes.len() as u64;
        let mut child = self.spawn(memory).map_err(spawn_error)?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(spawn_error(std::io::Error::other("no pipes to the child")));
        };
        let too_costly = PdfError::TooCostly {
            memory_mib: memory / MIB,
            seconds: CHECK_CPU.as_secs(),
        };
        let talk = async {
            // A child that dies while reading closes its stdin: its exit status says why.
            let _ = stdin.write_all(bytes).await;
            drop(stdin);
            let mut answer = Vec::new();
            stdout
                .take(MAX_ANSWER_BYTES)
                .read_to_end(&mut answer)
                .await?;
            let status = child.wait().await?;
            Ok::<_, std::io::Error>((status, answer))
        };
        let (status, answer) = match tokio::time::timeout(CHECK_TIMEOUT, talk).await {
            Err(_elapsed) => return Ok(Err(too_costly)),
            Ok(ended) => ended.map_err(spawn_error)?,
        };
        verdict(status, &answer, too_costly, &program)
    }

    /// Starts the checking child with an address space of `memory` bytes, its stdin and
    /// stdout piped, nothing of this process's environment, killed if dropped.
    fn spawn(&self, memory: u64) -> std::io::Result<tokio::process::Child> {
        tokio::process::Command::new(&self.program)
            .arg(CHILD_COMMAND)
            .arg(memory.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .env_clear()
            .kill_on_drop(true)
            .spawn()
    }
}

/// The child's verdict from how it exited and what it printed: a panic is the reader's
/// failure; any other failed exit is a file that asked for more than the child may have
/// (`too_costly`); a clean exit must have printed its verdict.
fn verdict(
    status: std::process::ExitStatus,
    answer: &[u8],
    too_costly: PdfError,
    program: &str,
) -> Result<Result<usize, PdfError>, CheckerError> {
    if status.code() == Some(PANIC_EXIT_CODE) {
        return Ok(Err(PdfError::ReaderFailed));
    }
    if !status.success() {
        // Out of memory (an abort), out of CPU time (SIGXCPU/SIGKILL), or a stack
        // overflow: the file asked for more than the child may have.
        return Ok(Err(too_costly));
    }
    serde_json::from_slice::<Result<usize, PdfError>>(answer).map_err(|error| {
        CheckerError::NoAnswer {
            program: program.to_string(),
            detail: format!("{error}: {}", String::from_utf8_lossy(answer)),
        }
    })
}

/// The checking child (`file-agent check-pdf <address-space-bytes>`): caps its own address
/// space and CPU time, reads a PDF from stdin, and prints [`check`]'s verdict as one line of
/// JSON. Running out of memory aborts it, which the server reads as [`PdfError::TooCostly`].
pub fn child_main(memory: &str) -> ExitCode {
    use nix::sys::resource::{Resource, setrlimit};
    let Ok(memory) = memory.parse::<u64>() else {
        eprintln!("file-agent {CHILD_COMMAND}: the memory cap must be a number of bytes");
        return ExitCode::from(2);
    };
    let cpu = CHECK_CPU.as_secs();
    // Hard limits too: nothing in this process may raise them again.
    if let Err(error) = setrlimit(Resource::RLIMIT_AS, memory, memory)
        .and_then(|()| setrlimit(Resource::RLIMIT_CPU, cpu, cpu))
    {
        eprintln!("file-agent {CHILD_COMMAND}: cannot set resource limits: {error}");
        return ExitCode::from(2);
    }
    let mut bytes = Vec::new();
    if let Err(error) = std::io::stdin().lock().take(memory).read_to_end(&mut bytes) {
        eprintln!("file-agent {CHILD_COMMAND}: cannot read the file: {error}");
        return ExitCode::from(2);
    }
    let verdict = check(&bytes);
    drop(bytes);
    let line = serde_json::to_string(&verdict).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}

/// Checks that `bytes` is a PDF that a reader can open, and returns its number of pages.
pub fn check(bytes: &[u8]) -> Result<usize, PdfError> {
    if !bytes.starts_with(b"%PDF-") {
        return Err(PdfError::NotPdf);
    }
    let object_streams = count_names(bytes, b"ObjStm");
    if object_streams > MAX_OBJECT_STREAMS {
        return Err(PdfError::Limit(format!(
            "has {object_streams} compressed object streams (at most {MAX_OBJECT_STREAMS})"
        )));
    }
    let options = LoadOptions {
        max_decompressed_size: Some(MAX_INFLATED_STREAM_BYTES),
        ..LoadOptions::default()
    };
    let document =
        Document::load_mem_with_options(bytes, options).map_err(|error| match error {
            lopdf::Error::Decompress(DecompressError::MemoryLimitExceeded { .. }) => {
                PdfError::Limit(format!(
                    "has a stream that inflates to more than {} MiB",
                    MAX_INFLATED_STREAM_BYTES / MIB as usize
                ))
            }
            other => PdfError::Unreadable(other.to_string()),
        })?;
    if document.is_encrypted() || document.trailer.get(b"Encrypt").is_ok() {
        return Err(PdfError::Encrypted);
    }
    match count_pages(&document)? {
        0 => Err(PdfError::NoPages),
        pages => Ok(pages),
    }
}

/// Occurrences of the name `/wanted` in `bytes`, compared as a reader compares names: after
/// `#xx` escapes are decoded (`/ObjSt#6D` is `/ObjStm`). Anything that looks like a name
/// counts, also inside strings and streams: that errs on the side of refusing.
fn count_names(bytes: &[u8], wanted: &[u8]) -> usize {
    let is_end =
        |byte: u8| byte.is_ascii_whitespace() || b"\0()<>[]{}/%".contains(&byte) || byte == 0x0c;
    let mut found = 0;
    let mut at = 0;
    while let Some(slash) = bytes[at..].iter().position(|&byte| byte == b'/') {
        let start = at + slash + 1;
        let end = bytes[start..]
            .iter()
            .position(|&byte| is_end(byte))
            .map_or(bytes.len(), |length| start + length);
        if decoded_name_is(&bytes[start..end], wanted) {
            found += 1;
        }
        at = end;
    }
    found
}

/// Whether the raw name `raw` (without its slash) decodes to `wanted`.
fn decoded_name_is(raw: &[u8], wanted: &[u8]) -> bool {
    // A name never decodes to more bytes than it has, nor to fewer than a third.
    if raw.len() < wanted.len() || raw.len() > wanted.len() * 3 {
        return false;
    }
    let mut decoded = Vec::with_capacity(raw.len());
    let mut index = 0;
    while index < raw.len() {
        let hex = raw
            .get(index + 1..index + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (raw[index], hex) {
            (b'#', Some(byte)) => {
                decoded.push(byte);
                index += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    decoded == wanted
}

/// The leaves (`/Type /Page`) of the page tree that the catalog's `/Pages` starts, each node
/// visited once.
fn count_pages(document: &Document) -> Result<usize, PdfError> {
    let broken = |what: &str| PdfError::PageTree(what.to_string());
    let catalog = document
        .catalog()
        .map_err(|_| broken("the trailer names no catalog (/Root)"))?;
    let root = catalog
        .get(b"Pages")
        .and_then(Object::as_reference)
        .map_err(|_| broken("the catalog has no /Pages reference"))?;
    let mut visited: HashSet<ObjectId> = HashSet::new();
    let mut stack = vec![root];
    let mut pages = 0;
    while let Some(id) = stack.pop() {
        if !visited.insert(id) {
            continue;
        }
        if visited.len() > MAX_PAGE_TREE_NODES {
            return Err(PdfError::Limit(format!(
                "has more than {MAX_PAGE_TREE_NODES} page tree nodes"
            )));
        }
        let Ok(node) = document.get_dictionary(id) else {
            return Err(broken(&format!(
                "node {} {} is not a dictionary",
                id.0, id.1
            )));
        };
        match node.get(b"Type").and_then(Object::as_name) {
            Ok(b"Page") => pages += 1,
            Ok(b"Pages") => {
                let kids = node
                    .get(b"Kids")
                    .and_then(Object::as_array)
                    .map_err(|_| broken("a /Pages node has no /Kids"))?;
                stack.extend(kids.iter().filter_map(|kid| kid.as_reference().ok()));
            }
            _ => {
                return Err(broken(&format!(
                    "node {} {} is neither /Page nor /Pages",
                    id.0, id.1
                )));
            }
        }
    }
    Ok(pages)
}

#[cfg(test)]
mod fixture;

#[cfg(test)]
mod tests {
    use super::fixture::pdf_of;
    use super::*;

    #[test]
    fn a_pdf_with_pages_passes_and_counts_them() {
        let two = pdf_of(&[
            "<< /Type /Catalog /Pages 2 0 R >>",
            "<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>",
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        ]);
        assert_eq!(check(&two), Ok(2));
    }

    #[test]
    fn empty_cyclic_and_foreign_files_are_refused() {
        let none = pdf_of(&[
            "<< /Type /Catalog /Pages 2 0 R >>",
            "<< /Type /Pages /Kids [] /Count 0 >>",
        ]);
        assert_eq!(check(&none), Err(PdfError::NoPages));
        // Kids that point back at their parent: visited once, so the walk ends.
        let cycle = pdf_of(&[
            "<< /Type /Catalog /Pages 2 0 R >>",
            "<< /Type /Pages /Kids [2 0 R 3 0 R 3 0 R] /Count 1 >>",
            "<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 1 >>",
        ]);
        assert_eq!(check(&cycle), Err(PdfError::NoPages));
        let no_pages = pdf_of(&["<< /Type /Catalog >>"]);
        assert!(matches!(check(&no_pages), Err(PdfError::PageTree(_))));
        assert_eq!(check(b"PK\x03\x04 not a pdf"), Err(PdfError::NotPdf));
        assert!(matches!(
            check(b"%PDF-1.4\ngarbage"),
            Err(PdfError::Unreadable(_) | PdfError::PageTree(_))
        ));
        // An object stream that inflates past the cap: refused as a limit, never inflated whole.
        let mut deflater = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut deflater, &vec![b' '; MAX_INFLATED_STREAM_BYTES + 1])
            .unwrap();
        let packed = deflater.finish().unwrap();
        let mut bomb = pdf_of(&[
            "<< /Type /Catalog /Pages 2 0 R >>",
            "<< /Type /Pages /Kids [] /Count 0 >>",
        ]);
        bomb.extend(
            format!(
                "3 0 obj\n<< /Type /ObjStm /N 1 /First 4 /Filter /FlateDecode /Length {} >>\nstream\n",
                packed.len()
            )
            .as_bytes(),
        );
        bomb.extend(&packed);
        bomb.extend(b"\nendstream\nendobj\n");
        let checked = check(&bomb);
        assert!(matches!(checked, Err(PdfError::Limit(_))), "{checked:?}");
        let mut many = b"%PDF-1.5\n".to_vec();
        for _ in 0..=MAX_OBJECT_STREAMS {
            many.extend(b"<< /Type /ObjStm >>\n");
        }
        assert!(matches!(check(&many), Err(PdfError::Limit(_))));
    }

    #[test]
    fn object_streams_are_counted_by_their_decoded_name() {
        assert_eq!(count_names(b"/Type /ObjSt#6D /N 1", b"ObjStm"), 1);
        assert_eq!(count_names(b"/Type/#4FbjStm/N 1", b"ObjStm"), 1);
        assert_eq!(
            count_names(b"/ObjStm/ObjStm2 /ObjStmX (/ObjStm)", b"ObjStm"),
            2
        );
        assert_eq!(count_names(b"/ObjSt#6 /ObjSt#6Dm /ObjS", b"ObjStm"), 0);
        // Escaped names count towards the cap like plain ones.
        let mut many = b"%PDF-1.5\n".to_vec();
        for _ in 0..=MAX_OBJECT_STREAMS {
            many.extend(b"<< /Type /ObjSt#6D >>\n");
        }
        assert!(matches!(check(&many), Err(PdfError::Limit(_))));
    }
}
