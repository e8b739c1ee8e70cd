//! What kind of table a file holds, told from its bytes (the name only breaks ties and earns a
//! note when it disagrees). Only the zip's central directory is read (bounded in entries and
//! name lengths, by [`zip`](super::zip)) and at most the first 64 KiB scanned for NUL bytes; the
//! table itself is opened by the inspection script, inside the sandbox.

use super::zip::{Archive, ZipLimits};

/// The kinds of table the analysis tools read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    /// Delimited text: CSV, TSV, semicolon-separated, any encoding.
    Csv,
    /// An Excel workbook (.xlsx, .xlsm).
    Xlsx,
    /// A legacy Excel workbook (.xls, BIFF in an OLE container).
    Xls,
}

impl TableKind {
    /// The name the inspection script takes.
    pub fn code(self) -> &'static str {
        match self {
            Self::Csv => "csv",
            Self::Xlsx => "xlsx",
            Self::Xls => "xls",
        }
    }

    /// Words for a person.
    pub fn label(self) -> &'static str {
        match self {
            Self::Csv => "delimited text (CSV)",
            Self::Xlsx => "Excel workbook (.xlsx)",
            Self::Xls => "legacy Excel workbook (.xls)",
        }
    }

    fn extensions(self) -> &'static [&'static str] {
        match self {
            Self::Csv => &["csv", "tsv", "txt", "tab", "dat", "psv"],
            Self::Xlsx => &["xlsx", "xlsm"],
            Self::Xls => &["xls"],
        }
    }
}

/// A table to analyse: its kind, and a note when its name says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    /// What the bytes are.
    pub kind: TableKind,
    /// Set when the file's extension names another kind.
    pub note: Option<String>,
}

/// What the analysis tools were given, by its bytes. The error says what to do instead.
pub fn detect(bytes: &[u8], name: &str) -> Result<Detected, String> {
    const OLE: [u8; 8] = [0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];
    if bytes.is_empty() {
        return Err(format!(
            "{name:?} is empty (0 bytes); upload the file again, with its data"
        ));
    }
    let kind = if bytes.starts_with(b"%PDF-") {
        return Err(format!(
            "{name:?} is a PDF, not a table; export the table as CSV or Excel and try again"
        ));
    } else if bytes.starts_with(&OLE) {
        ole_kind(bytes, name)?
    } else if bytes.starts_with(b"PK\x03\x04") {
        zip_kind(bytes, name)?
    } else if looks_like_text(bytes) {
        TableKind::Csv
    } else {
        return Err(format!(
            "{name:?} is binary data that is not an Excel workbook; analysis reads CSV, .xlsx and .xls files"
        ));
    };
    Ok(Detected {
        kind,
        note: name_disagrees(name, kind),
    })
}

/// An OLE compound file: a legacy workbook (.xls), unless its streams say it is a legacy Word
/// or PowerPoint file.
fn ole_kind(bytes: &[u8], name: &str) -> Result<TableKind, String> {
    if contains_utf16(bytes, "WordDocument") {
        return Err(format!(
            "{name:?} is a legacy Word document (.doc), not a table; export the table as CSV or Excel"
        ));
    }
    if contains_utf16(bytes, "PowerPoint Document") {
        return Err(format!(
            "{name:?} is a legacy PowerPoint file, not a table; export the table as CSV or Excel"
        ));
    }
    Ok(TableKind::Xls)
}

/// A zip: a workbook (.xlsx) when it has `xl/workbook.xml`; a Word or PowerPoint file, or any
/// other archive, is no table. Only the directory is read here (bounded in entries and name
/// lengths); the file itself is opened by the inspection, inside the sandbox.
fn zip_kind(bytes: &[u8], name: &str) -> Result<TableKind, String> {
    let archive = Archive::open(bytes, ZipLimits::OFFICE).map_err(|e| {
        format!("{name:?} looks like a zip file but cannot be read (it {e}); upload it again")
    })?;
    if archive.find("xl/workbook.xml").is_some() {
        Ok(TableKind::Xlsx)
    } else if archive.find("word/document.xml").is_some() {
        Err(format!(
            "{name:?} is a Word document, not a table; put the table in a CSV or Excel file"
        ))
    } else if archive.find("ppt/presentation.xml").is_some() {
        Err(format!(
            "{name:?} is a PowerPoint file, not a table; put the table in a CSV or Excel file"
        ))
    } else {
        Err(format!(
            "{name:?} is a zip archive, not a table; unpack it and analyse the CSV or Excel file inside"
        ))
    }
}

fn name_disagrees(name: &str, kind: TableKind) -> Option<String> {
    let extension = name.rsplit_once('.')?.1.to_ascii_lowercase();
    let named = [TableKind::Csv, TableKind::Xlsx, TableKind::Xls]
        .into_iter()
        .find(|candidate| candidate.extensions().contains(&extension.as_str()))?;
    (named != kind).then(|| {
        format!(
            "Note: the file is named {name:?}, but its content is a {}; it is read as one.",
            kind.label()
        )
    })
}

/// No NUL bytes in the first 64 KiB (UTF-16 text is not supported by the inspection either).
fn looks_like_text(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(64 * 1024)];
    !head.contains(&0)
}

fn contains_utf16(bytes: &[u8], word: &str) -> bool {
    let needle: Vec<u8> = word.encode_utf16().flat_map(u16::to_le_bytes).collect();
    bytes.windows(needle.len()).any(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zip whose one entry, `entry`, holds `<x/>`.
    fn zip_with(entry: &str) -> Vec<u8> {
        crate::untrusted::zip::zip_with(&[(entry, "<x/>")])
    }

    #[test]
    fn kinds_come_from_the_bytes_and_a_misleading_name_earns_a_note() {
        let csv = detect(b"a;b\n1;2\n", "data.csv").unwrap();
        assert_eq!(
            csv,
            Detected {
                kind: TableKind::Csv,
                note: None
            }
        );
        let xlsx = detect(&zip_with("xl/workbook.xml"), "data.csv").unwrap();
        assert_eq!(xlsx.kind, TableKind::Xlsx);
        assert!(xlsx.note.unwrap().contains("data.csv"));
        let mut ole = vec![0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];
        ole.extend("Workbook".encode_utf16().flat_map(u16::to_le_bytes));
        assert_eq!(detect(&ole, "old.xls").unwrap().kind, TableKind::Xls);
        assert_eq!(detect(b"x,y\n", "notes").unwrap().note, None);
    }

    #[test]
    fn what_is_not_a_table_is_refused_with_what_to_do() {
        for (bytes, name, words) in [
            (Vec::new(), "empty.csv", "empty"),
            (b"%PDF-1.7 ...".to_vec(), "report.csv", "PDF"),
            (zip_with("word/document.xml"), "table.xlsx", "Word"),
            (zip_with("other.txt"), "a.zip", "zip archive"),
            (vec![0x89, b'P', b'N', b'G', 0, 0, 0], "chart.csv", "binary"),
        ] {
            let error = detect(&bytes, name).unwrap_err();
            assert!(error.contains(words), "{name}: {error}");
        }
    }
}
