//! The formats the file tools produce and accept, and their names. Recognising a file by its
//! bytes is [`detect`](super::detect)'s; this module only names the formats, so the parsers
//! that need to know which one they check ([`ooxml`](super::ooxml)) depend on nothing else.

/// A file type `generate_file` makes and `modify_file` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    /// An Excel workbook (.xlsx).
    Excel,
    /// A Word document (.docx).
    Docx,
    /// A PowerPoint presentation (.pptx).
    Pptx,
    /// A PDF document (made, never modified).
    Pdf,
}

impl FileType {
    /// The `file_type` argument: `excel`, `docx`, `pptx` or `pdf` (also `xlsx`, `word`,
    /// `powerpoint`).
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "excel" | "xlsx" => Some(Self::Excel),
            "docx" | "word" => Some(Self::Docx),
            "pptx" | "powerpoint" => Some(Self::Pptx),
            "pdf" => Some(Self::Pdf),
            _ => None,
        }
    }

    /// The file extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Excel => "xlsx",
            Self::Docx => "docx",
            Self::Pptx => "pptx",
            Self::Pdf => "pdf",
        }
    }

    /// Words for a person.
    pub fn label(self) -> &'static str {
        match self {
            Self::Excel => "Excel workbook",
            Self::Docx => "Word document",
            Self::Pptx => "PowerPoint presentation",
            Self::Pdf => "PDF document",
        }
    }
}
