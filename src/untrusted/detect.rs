//! Recognising a file by its bytes (never by its name alone), and checking that an output
//! really opens, the way Excel or Word would find its way into it.
//!
//! Both read untrusted bytes inside the server, so both go through bounded readers: Office
//! packages through the zip reader ([`zip`](super::zip)) and a structure check
//! ([`ooxml`](super::ooxml)); none loads a sheet's cells or a document's text into memory. A
//! PDF's parse, whose memory no cap of lopdf bounds, is not done here but in a memory-capped
//! child process ([`Checker`](super::pdf::Checker)).

use super::filetype::FileType;
use super::ooxml;
use super::zip::{Archive, ZipLimits};

/// What `modify_file` was given, by its bytes (the name and content type only break ties).
pub fn detect(bytes: &[u8], name: &str, content_type: Option<&str>) -> Result<FileType, String> {
    let lower_name = name.to_ascii_lowercase();
    let hint = content_type.unwrap_or("unknown type");
    if bytes.is_empty() {
        return Err(format!("{name:?} is empty"));
    }
    if bytes.starts_with(b"%PDF-") {
        return Err(format!(
            "{name:?} is a PDF, which modify_file cannot change (a PDF's text is placed glyph by glyph, so an edit cannot keep its layout); ask generate_file for a new PDF with the changed content instead"
        ));
    }
    if bytes.starts_with(&[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1]) {
        let legacy = if lower_name.ends_with(".doc") || hint.contains("msword") {
            "a legacy Word .doc"
        } else {
            "a legacy Excel .xls (or another old Office file)"
        };
        return Err(format!(
            "{name:?} is {legacy}; save it as .xlsx, .docx or .pptx and try again"
        ));
    }
    if bytes.starts_with(b"PK\x03\x04") {
        let archive = Archive::open(bytes, ZipLimits::OFFICE)
            .map_err(|e| format!("{name:?} looks like a zip file but cannot be read: it {e}"))?;
        let has = |entry: &str| archive.find(entry).is_some();
        if has("xl/workbook.xml") {
            return Ok(FileType::Excel);
        }
        if has("word/document.xml") {
            return Ok(FileType::Docx);
        }
        if has("ppt/presentation.xml") {
            return Ok(FileType::Pptx);
        }
        return Err(format!(
            "{name:?} is a zip archive, not an .xlsx, .docx or .pptx file"
        ));
    }
    Err(format!(
        "{name:?} ({hint}) is not an .xlsx, .docx or .pptx file; modify_file changes only those"
    ))
}

/// Checks that `bytes` is a valid file of type `file_type` by its structure, the way Excel or
/// Word finds its way into it, within the caps of [`zip`](super::zip).
/// The error says what is wrong and, when a cap refused it, what to do.
pub fn validate(file_type: FileType, bytes: &[u8]) -> Result<(), String> {
    if bytes.is_empty() {
        return Err("the file is empty".into());
    }
    if file_type == FileType::Pdf {
        // Parsing a PDF in this process could take gigabytes (see `pdf`).
        return Err("a PDF is checked by pdf::Checker, in a memory-capped child process".into());
    }
    ooxml::check(bytes, file_type).map_err(|error| {
        if error.is_limit() {
            format!(
                "{error}. Make the file smaller: fewer rows and cells, no repeated filler, or split the data over several files"
            )
        } else {
            error.to_string()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::untrusted::zip::zip_with;

    #[test]
    fn detects_by_content_not_name() {
        let docx = zip_with(&[
            ("[Content_Types].xml", "<Types/>"),
            ("word/document.xml", "<w:document><w:body/></w:document>"),
        ]);
        assert_eq!(detect(&docx, "renamed.xlsx", None), Ok(FileType::Docx));
        assert!(
            detect(b"%PDF-1.7 ...", "a.xlsx", None)
                .unwrap_err()
                .contains("PDF")
        );
        let ole = [0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1, 0, 0];
        assert!(detect(&ole, "old.xls", None).unwrap_err().contains(".xls"));
        assert!(detect(&ole, "old.doc", None).unwrap_err().contains(".doc"));
        assert!(detect(b"a,b\n1,2\n", "t.csv", Some("text/csv")).is_err());
        assert!(detect(&zip_with(&[("x.txt", "x")]), "z.zip", None).is_err());
    }

    #[test]
    fn validation_refuses_empty_truncated_and_wrong_files() {
        let docx = zip_with(&[
            (
                "[Content_Types].xml",
                r#"<Types><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#,
            ),
            (
                "_rels/.rels",
                r#"<Relationships><Relationship Id="r1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#,
            ),
            ("word/document.xml", "<w:document><w:body/></w:document>"),
        ]);
        assert_eq!(validate(FileType::Docx, &docx), Ok(()));
        // Parts a Word file needs are there, but the declared type is not Word's.
        let wrong = zip_with(&[
            ("[Content_Types].xml", "<Types/>"),
            ("word/document.xml", "<w:document><w:body/></w:document>"),
        ]);
        assert!(validate(FileType::Docx, &wrong).is_err());
        assert!(validate(FileType::Docx, &docx[..docx.len() / 2]).is_err());
        assert!(validate(FileType::Docx, b"").is_err());
        assert!(validate(FileType::Excel, &docx).is_err());
        assert!(validate(FileType::Excel, b"not a workbook").is_err());
        assert_eq!(FileType::parse(" Excel "), Some(FileType::Excel));
        assert_eq!(FileType::parse("pdf"), Some(FileType::Pdf));
        assert_eq!(FileType::parse("odt"), None);
    }
}
