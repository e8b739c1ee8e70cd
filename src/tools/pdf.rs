//! PDF outputs checked from untrusted bytes: the file must parse and have at least one page.
//!
//! The bytes come from a sandboxed script, so they are treated as hostile:
//!
//! 1. at most [`MAX_OBJECT_STREAMS`] compressed object streams (found by their `/ObjStm` name
//!    before parsing), each inflated to at most [`MAX_INFLATED_STREAM_BYTES`] by lopdf's own
//!    bound: together at most 512 MiB more than the file, in the worst case a crafted file can
//!    reach, and far less for real ones (reportlab writes none);
//! 2. lopdf parses the objects (leniently, as readers do: a damaged cross-reference table is
//!    rebuilt) but decodes no page content, font or image;
//! 3. the page tree is walked here, not by lopdf's iterator, with a set of visited nodes and at
//!    most [`MAX_PAGE_TREE_NODES`] of them, so a tree whose kids point back at their parents
//!    ends instead of looping.

use std::collections::HashSet;

use lopdf::{DecompressError, Document, LoadOptions, Object, ObjectId};
use thiserror::Error;

use crate::config::MIB;

/// Compressed object streams a PDF may have.
pub const MAX_OBJECT_STREAMS: usize = 64;
/// The most one stream may inflate to while the file is parsed.
pub const MAX_INFLATED_STREAM_BYTES: usize = 8 * MIB as usize;
/// Nodes of the page tree visited before the file is refused.
pub const MAX_PAGE_TREE_NODES: usize = 100_000;

/// Why a file is not a usable PDF. The messages start with "it".
#[derive(Debug, Error, PartialEq, Eq)]
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
}

/// Checks that `bytes` is a PDF that a reader can open, and returns its number of pages.
pub fn check(bytes: &[u8]) -> Result<usize, PdfError> {
    if !bytes.starts_with(b"%PDF-") {
        return Err(PdfError::NotPdf);
    }
    let object_streams = count(bytes, b"/ObjStm");
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

/// Occurrences of `needle` in `haystack`.
fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|window| *window == needle)
        .count()
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
mod tests {
    use super::*;

    /// A PDF whose objects are `objects` (numbered from 1, object 1 the catalog), with a
    /// correct cross-reference table.
    fn pdf_with(objects: &[&str]) -> Vec<u8> {
        let mut out = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (index, body) in objects.iter().enumerate() {
            offsets.push(out.len());
            out.extend(format!("{} 0 obj\n{body}\nendobj\n", index + 1).as_bytes());
        }
        let xref = out.len();
        out.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
        for offset in offsets {
            out.extend(format!("{offset:010} 00000 n \n").as_bytes());
        }
        out.extend(
            format!(
                "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
                objects.len() + 1
            )
            .as_bytes(),
        );
        out
    }

    #[test]
    fn a_pdf_with_pages_passes_and_counts_them() {
        let two = pdf_with(&[
            "<< /Type /Catalog /Pages 2 0 R >>",
            "<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>",
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        ]);
        assert_eq!(check(&two), Ok(2));
    }

    #[test]
    fn empty_cyclic_and_foreign_files_are_refused() {
        let none = pdf_with(&[
            "<< /Type /Catalog /Pages 2 0 R >>",
            "<< /Type /Pages /Kids [] /Count 0 >>",
        ]);
        assert_eq!(check(&none), Err(PdfError::NoPages));
        // Kids that point back at their parent: visited once, so the walk ends.
        let cycle = pdf_with(&[
            "<< /Type /Catalog /Pages 2 0 R >>",
            "<< /Type /Pages /Kids [2 0 R 3 0 R 3 0 R] /Count 1 >>",
            "<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 1 >>",
        ]);
        assert_eq!(check(&cycle), Err(PdfError::NoPages));
        let no_pages = pdf_with(&["<< /Type /Catalog >>"]);
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
        let mut bomb = pdf_with(&[
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
}
