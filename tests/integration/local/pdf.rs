//! The PDF check's child process, run as the server runs it: a 2.4 KB file that took lopdf,
//! in the server's own process, to 6 GB is refused by a child that cannot take more than
//! `pdf::CHECK_MEMORY`, while this process's memory stays flat; a real PDF passes the same way.

use std::io::Write;

use file_agent::untrusted::pdf::{self, Checker, PdfError};

use crate::common::{memory, with_timeout};

/// The PDF builder of `untrusted::pdf`'s unit tests, shared by its path.
#[path = "../../../src/untrusted/pdf/fixture.rs"]
mod fixture;
use fixture::pdf_of;

/// How much this process's peak memory may grow while the child checks a file.
const GROWTH_LIMIT: u64 = 64 * 1024 * 1024;

/// A PDF of one page whose object stream lists `ids` object ids, all at offset 0, where an
/// array of `arrays` empty arrays sits: lopdf parses that array once per id.
pub fn repeated_offset_pdf(ids: usize, arrays: usize) -> Vec<u8> {
    let mut content: Vec<u8> = (0..ids)
        .flat_map(|index| format!("{} 0 ", 100 + index).into_bytes())
        .collect();
    let first = content.len();
    content.push(b'[');
    content.extend(b"[]".repeat(arrays));
    content.push(b']');
    let mut deflater = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    deflater.write_all(&content).unwrap();
    let packed = deflater.finish().unwrap();
    let mut stream = format!(
        "<< /Type /ObjStm /N {ids} /First {first} /Filter /FlateDecode /Length {} >>\nstream\n",
        packed.len()
    )
    .into_bytes();
    stream.extend(&packed);
    stream.extend(b"\nendstream");
    pdf_of(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>".to_vec(),
        stream,
    ])
}

fn checker() -> Checker {
    Checker::new(env!("CARGO_BIN_EXE_file-agent").into(), 2)
}

#[tokio::test]
async fn a_tiny_pdf_that_takes_lopdf_to_gigabytes_is_refused_by_the_capped_child() {
    let bomb = repeated_offset_pdf(10, 1_000_000);
    assert!(bomb.len() < 4 * 1024, "{} bytes", bomb.len());
    // Peak memory from here on (nextest runs each test in its own process; writing 5 to
    // clear_refs resets the high-water mark).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = memory("VmRSS:");
    let started = std::time::Instant::now();
    let verdict = with_timeout(checker().check(&bomb)).await.unwrap();
    let growth = memory("VmHWM:").saturating_sub(before);
    eprintln!(
        "checked in {:?}; this process grew by {} MiB: {verdict:?}",
        started.elapsed(),
        growth >> 20
    );
    assert!(
        matches!(verdict, Err(PdfError::TooCostly { .. })),
        "{verdict:?}"
    );
    let message = verdict.unwrap_err().to_string();
    assert!(message.contains("MiB of memory"), "{message}");
    assert!(growth < GROWTH_LIMIT, "grew by {} MiB", growth >> 20);
}

#[tokio::test]
async fn real_and_broken_pdfs_get_the_in_process_verdict_from_the_child() {
    // The same object stream with its ids at distinct offsets is an ordinary file.
    let ordinary = repeated_offset_pdf(1, 10);
    assert_eq!(
        with_timeout(checker().check(&ordinary)).await.unwrap(),
        Ok(1)
    );
    assert_eq!(pdf::check(&ordinary), Ok(1));
    let no_pages = pdf_of(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [] /Count 0 >>".to_vec(),
    ]);
    assert_eq!(
        with_timeout(checker().check(&no_pages)).await.unwrap(),
        Err(PdfError::NoPages)
    );
    assert_eq!(
        with_timeout(checker().check(b"PK\x03\x04")).await.unwrap(),
        Err(PdfError::NotPdf)
    );
    // A program that is not there is a fault of the server, not a verdict on the file.
    let missing = Checker::new("/nonexistent/file-agent".into(), 1);
    assert!(with_timeout(missing.check(&ordinary)).await.is_err());
}
