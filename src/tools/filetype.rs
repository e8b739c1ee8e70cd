//! The office formats the file tools produce and accept: naming them, recognising them by
//! their bytes (never by name alone), and checking that an output really opens.

use std::io::{Cursor, Read};

/// A file type `generate_file` makes and `modify_file` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    /// An Excel workbook (.xlsx).
    Excel,
    /// A Word document (.docx).
    Docx,
}

impl FileType {
    /// The `file_type` argument: `excel` or `docx` (also `xlsx`, `word`).
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "excel" | "xlsx" => Some(Self::Excel),
            "docx" | "word" => Some(Self::Docx),
            _ => None,
        }
    }

    /// The file extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Excel => "xlsx",
            Self::Docx => "docx",
        }
    }

    /// Words for a person.
    pub fn label(self) -> &'static str {
        match self {
            Self::Excel => "Excel workbook",
            Self::Docx => "Word document",
        }
    }
}

/// What `modify_file` was given, by its bytes (the name and content type only break ties).
pub fn detect(bytes: &[u8], name: &str, content_type: Option<&str>) -> Result<FileType, String> {
    let lower_name = name.to_ascii_lowercase();
    let hint = content_type.unwrap_or("unknown type");
    if bytes.is_empty() {
        return Err(format!("{name:?} is empty"));
    }
    if bytes.starts_with(b"%PDF-") {
        return Err(format!(
            "{name:?} is a PDF; modify_file changes .xlsx and .docx files only (run_python can read PDFs' text only with the libraries it has, which do not include a PDF reader)"
        ));
    }
    if bytes.starts_with(&[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1]) {
        let legacy = if lower_name.ends_with(".doc") || hint.contains("msword") {
            "a legacy Word .doc"
        } else {
            "a legacy Excel .xls (or another old Office file)"
        };
        return Err(format!(
            "{name:?} is {legacy}; save it as .xlsx or .docx and try again"
        ));
    }
    if bytes.starts_with(b"PK\x03\x04") {
        let archive = zip::ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| format!("{name:?} looks like a zip file but cannot be opened: {e}"))?;
        let has = |entry: &str| archive.index_for_name(entry).is_some();
        if has("xl/workbook.xml") {
            return Ok(FileType::Excel);
        }
        if has("word/document.xml") {
            return Ok(FileType::Docx);
        }
        if has("ppt/presentation.xml") {
            return Err(format!(
                "{name:?} is a PowerPoint file; modify_file changes .xlsx and .docx files only"
            ));
        }
        return Err(format!(
            "{name:?} is a zip archive, not an .xlsx or .docx file"
        ));
    }
    Err(format!(
        "{name:?} ({hint}) is not an .xlsx or .docx file; modify_file changes only those"
    ))
}

/// Checks that `bytes` is a valid file of type `file_type`, the way a reader would open it.
pub fn validate(file_type: FileType, bytes: &[u8]) -> Result<(), String> {
    if bytes.is_empty() {
        return Err("the file is empty".into());
    }
    match file_type {
        FileType::Excel => {
            use calamine::Reader;
            let mut workbook = calamine::Xlsx::new(Cursor::new(bytes))
                .map_err(|e| format!("it does not open as an .xlsx workbook: {e}"))?;
            let sheets = workbook.sheet_names();
            if sheets.is_empty() {
                return Err("the workbook has no sheets".into());
            }
            for sheet in sheets {
                workbook
                    .worksheet_range(&sheet)
                    .map_err(|e| format!("sheet {sheet:?} cannot be read: {e}"))?;
            }
            Ok(())
        }
        FileType::Docx => {
            let mut archive = zip::ZipArchive::new(Cursor::new(bytes))
                .map_err(|e| format!("it does not open as a .docx (zip) file: {e}"))?;
            // Reading every entry checks each one's CRC: a truncated file fails here.
            let mut document = String::new();
            for index in 0..archive.len() {
                let mut entry = archive
                    .by_index(index)
                    .map_err(|e| format!("a part of the .docx cannot be read: {e}"))?;
                let name = entry.name().map(|n| n.to_string()).unwrap_or_default();
                let mut content = Vec::new();
                entry
                    .read_to_end(&mut content)
                    .map_err(|e| format!("part {name} of the .docx is damaged: {e}"))?;
                if name == "word/document.xml" {
                    document = String::from_utf8_lossy(&content).into_owned();
                }
            }
            if archive.index_for_name("[Content_Types].xml").is_none() {
                return Err("it has no [Content_Types].xml, so Word cannot open it".into());
            }
            if !document.contains("<w:body") {
                return Err("it has no word/document.xml with a body".into());
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zip_with(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut buffer = Cursor::new(Vec::new());
        let mut writer = zip::ZipWriter::new(&mut buffer);
        for (name, content) in entries {
            writer
                .start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            std::io::Write::write_all(&mut writer, content.as_bytes()).unwrap();
        }
        writer.finish().unwrap();
        buffer.into_inner()
    }

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
            ("[Content_Types].xml", "<Types/>"),
            ("word/document.xml", "<w:document><w:body/></w:document>"),
        ]);
        assert_eq!(validate(FileType::Docx, &docx), Ok(()));
        assert!(validate(FileType::Docx, &docx[..docx.len() / 2]).is_err());
        assert!(validate(FileType::Docx, b"").is_err());
        assert!(validate(FileType::Excel, &docx).is_err());
        assert!(validate(FileType::Excel, b"not a workbook").is_err());
        assert_eq!(FileType::parse(" Excel "), Some(FileType::Excel));
        assert_eq!(FileType::parse("pdf"), None);
    }
}
