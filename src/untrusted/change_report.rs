//! The change report of a `modify_file` as the comparison script prints it: one JSON object
//! (`sandbox-image/change_report/`, run in the sandbox on the two untrusted files), read into
//! [`ChangeReport`] and rendered as a short Markdown list for the tool's answer.
//!
//! The JSON is written inside the sandbox, so it is hostile: at most the sandbox's stdout cap
//! reaches [`ChangeReport::parse`] (serde_json, with its recursion limit of 128), a shape other
//! than the report's is an unusable report, and every string in it, which comes from a file, is
//! cut to [`MAX_VALUE_CHARS`] and shown only as inline code, so a cell value cannot turn into a
//! link or a heading in the chat; at most [`MAX_LISTED`] items of a list and
//! [`MAX_RENDERED_CHARS`] characters in all are rendered. As data (the `changes` of a
//! `modify_file` result, serialised by the same types), the report is what was parsed, whole
//! within the sandbox's stdout cap: a program reads it as JSON, never as Markdown.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::text::excerpt;

/// Characters of the rendered report in a tool answer.
pub const MAX_RENDERED_CHARS: usize = 3000;
/// Characters of one value taken from a file.
const MAX_VALUE_CHARS: usize = 80;
/// Items of one list shown (the script caps them too).
const MAX_LISTED: usize = 5;

/// The report, by kind of file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ChangeReport {
    /// A workbook.
    Xlsx(WorkbookChanges),
    /// A Word document.
    Docx(DocumentChanges),
    /// A presentation.
    Pptx(DeckChanges),
}

/// What changed in a workbook.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct WorkbookChanges {
    /// Whether anything differs, formatting included.
    pub changed: bool,
    /// Sheets only in the result.
    pub sheets_added: Vec<String>,
    /// Sheets only in the original.
    pub sheets_removed: Vec<String>,
    /// Sheets at the same position under a new name.
    pub sheets_renamed: Vec<Renamed>,
    /// Sheets in both files that changed.
    pub sheets: Vec<SheetChanges>,
    /// Workbook-level changes (defined names, ...).
    pub other: Vec<String>,
}

/// A sheet's new name.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct Renamed {
    /// The name in the original.
    pub before: String,
    /// The name in the result.
    pub after: String,
}

/// What changed in one sheet.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct SheetChanges {
    /// Its name in the result.
    pub name: String,
    /// Cells whose value or formula differs.
    pub cells_changed: u64,
    /// The first few of them.
    pub examples: Vec<CellChange>,
    /// Cells with the same value and another style.
    pub formatting_changed: u64,
    /// The first few of them.
    pub formatting_examples: Vec<String>,
    /// Used rows and columns before and after.
    pub rows_before: u64,
    /// Used rows in the result.
    pub rows_after: u64,
    /// Used columns in the original.
    pub columns_before: u64,
    /// Used columns in the result.
    pub columns_after: u64,
    /// Sheet settings that differ (column widths, merged cells, ...).
    pub other: Vec<String>,
}

/// One changed cell.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct CellChange {
    /// Its reference, e.g. `B7`.
    pub cell: String,
    /// The value or formula in the original.
    pub before: String,
    /// The value or formula in the result.
    pub after: String,
}

/// What changed in a Word document.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct DocumentChanges {
    /// Whether anything differs, formatting included.
    pub changed: bool,
    /// Body paragraphs.
    pub paragraphs: Counts,
    /// Tables.
    pub tables: Counts,
    /// Headings only in the result.
    pub headings_added: Vec<String>,
    /// Headings only in the original.
    pub headings_removed: Vec<String>,
    /// The first few paragraph changes, in document order.
    pub examples: Vec<ParagraphChange>,
    /// Paragraphs with the same text and other formatting.
    pub formatting_changed: u64,
    /// Other parts that differ (headers or footers, images, ...).
    pub other: Vec<String>,
}

/// Counts of items before and after, and how they moved.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct Counts {
    /// In the original.
    pub before: u64,
    /// In the result.
    pub after: u64,
    /// New.
    pub added: u64,
    /// Gone.
    pub removed: u64,
    /// In both, different.
    pub changed: u64,
}

/// One paragraph change.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct ParagraphChange {
    /// `changed`, `added` or `removed`.
    pub change: String,
    /// The text of an added or removed paragraph.
    pub text: String,
    /// A changed paragraph before.
    pub before: String,
    /// A changed paragraph after.
    pub after: String,
    /// Word-level: removals as `[-...-]`, insertions as `{+...+}`.
    pub diff: String,
}

/// What changed in a presentation.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct DeckChanges {
    /// Whether anything differs, formatting included.
    pub changed: bool,
    /// Slides in the original.
    pub slides_before: u64,
    /// Slides in the result.
    pub slides_after: u64,
    /// New slides (numbered as in the result).
    pub added: Vec<SlideChange>,
    /// Slides gone (numbered as in the original).
    pub removed: Vec<SlideChange>,
    /// Slides in both that differ (numbered as in the result).
    pub changed_slides: Vec<SlideChange>,
}

/// One slide of the report.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct SlideChange {
    /// 1-based position.
    pub number: u64,
    /// Its title.
    pub title: String,
    /// For a changed slide: what kinds of change (text, pictures, ...).
    pub what: Vec<String>,
}

impl ChangeReport {
    /// Reads the script's stdout.
    pub fn parse(stdout: &str) -> Result<Self, String> {
        serde_json::from_str(stdout.trim())
            .map_err(|error| format!("the change report is unusable ({error})"))
    }

    /// Whether the result differs from the original at all.
    pub fn changed(&self) -> bool {
        match self {
            Self::Xlsx(report) => report.changed,
            Self::Docx(report) => report.changed,
            Self::Pptx(report) => report.changed,
        }
    }

    /// A Markdown list, at most [`MAX_RENDERED_CHARS`] characters.
    pub fn render(&self) -> String {
        let lines = match self {
            Self::Xlsx(report) => workbook_lines(report),
            Self::Docx(report) => document_lines(report),
            Self::Pptx(report) => deck_lines(report),
        };
        let mut text = String::new();
        for line in lines {
            if text.chars().count() + line.chars().count() + 3 > MAX_RENDERED_CHARS {
                text.push_str("- … (more changes not shown)\n");
                break;
            }
            text.push_str("- ");
            text.push_str(&line);
            text.push('\n');
        }
        if text.is_empty() {
            text.push_str("- the content is the same; only the file's packaging differs\n");
        }
        text
    }
}

/// A value from a file as inline code: cut, one line, no backtick to break out of the span.
fn code(value: &str) -> String {
    let flat: String = value
        .chars()
        .map(|c| match c {
            '`' => '\'',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    let cut = excerpt(flat.trim(), MAX_VALUE_CHARS);
    if cut.is_empty() {
        "(empty)".into()
    } else {
        format!("`{cut}`")
    }
}

/// A cell reference such as `B7`, which the script wrote from coordinates (not file text):
/// cut all the same.
fn cell_ref(cell: &str) -> String {
    cell.chars().take(12).collect()
}

/// `first 5: ` when a list shows `listed` of `total` items, else nothing: "6 cells changed"
/// followed by five must not read as if those were all.
fn first_of(total: u64, listed: usize) -> String {
    if (listed as u64) < total {
        format!("first {listed}: ")
    } else {
        String::new()
    }
}

/// `a`, `b`, `c` for the first [`MAX_LISTED`] values.
fn code_list<'a>(values: impl IntoIterator<Item = &'a String>) -> String {
    values
        .into_iter()
        .take(MAX_LISTED)
        .map(|value| code(value))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "3 things" / "1 thing".
fn plural(count: u64, one: &str, many: &str) -> String {
    format!(
        "{} {}",
        thousands(count),
        if count == 1 { one } else { many }
    )
}

/// `1234567` as `1,234,567`.
fn thousands(count: u64) -> String {
    let digits = count.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The workbook's lines: sheets added, removed and renamed, one line per changed sheet, and the
/// workbook-level changes.
fn workbook_lines(report: &WorkbookChanges) -> Vec<String> {
    let mut lines = Vec::new();
    if !report.sheets_added.is_empty() {
        lines.push(format!("sheets added: {}", code_list(&report.sheets_added)));
    }
    if !report.sheets_removed.is_empty() {
        lines.push(format!(
            "sheets removed: {}",
            code_list(&report.sheets_removed)
        ));
    }
    for renamed in report.sheets_renamed.iter().take(MAX_LISTED) {
        lines.push(format!(
            "sheet {} renamed to {}",
            code(&renamed.before),
            code(&renamed.after)
        ));
    }
    for sheet in &report.sheets {
        let parts = sheet_parts(sheet);
        if !parts.is_empty() {
            lines.push(format!("sheet {}: {}", code(&sheet.name), parts.join("; ")));
        }
    }
    if !report.other.is_empty() {
        lines.push(format!("workbook: {}", plain_list(&report.other)));
    }
    lines
}

/// What changed in one sheet: its cells (with examples), their formatting, its row and column
/// counts, and whatever else the script noted.
fn sheet_parts(sheet: &SheetChanges) -> Vec<String> {
    let mut parts = Vec::new();
    if sheet.cells_changed > 0 {
        parts.push(cell_changes(sheet));
    }
    if sheet.formatting_changed > 0 {
        parts.push(format!(
            "{} reformatted ({}{})",
            plural(sheet.formatting_changed, "cell", "cells"),
            first_of(
                sheet.formatting_changed,
                sheet.formatting_examples.len().min(MAX_LISTED)
            ),
            sheet
                .formatting_examples
                .iter()
                .take(MAX_LISTED)
                .map(|cell| cell_ref(cell))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if sheet.rows_before != sheet.rows_after {
        parts.push(format!(
            "rows {} -> {}",
            thousands(sheet.rows_before),
            thousands(sheet.rows_after)
        ));
    }
    if sheet.columns_before != sheet.columns_after {
        parts.push(format!(
            "columns {} -> {}",
            thousands(sheet.columns_before),
            thousands(sheet.columns_after)
        ));
    }
    if !sheet.other.is_empty() {
        parts.push(format!("also changed: {}", plain_list(&sheet.other)));
    }
    parts
}

/// The sheet's changed cells: how many, and the first few with their old and new values.
fn cell_changes(sheet: &SheetChanges) -> String {
    let examples: Vec<String> = sheet
        .examples
        .iter()
        .take(MAX_LISTED)
        .map(|change| {
            format!(
                "{}!{}: {} -> {}",
                code(&sheet.name),
                cell_ref(&change.cell),
                code(&change.before),
                code(&change.after)
            )
        })
        .collect();
    format!(
        "{} changed ({}{})",
        plural(sheet.cells_changed, "cell", "cells"),
        first_of(sheet.cells_changed, examples.len()),
        examples.join("; ")
    )
}

/// Words the script chose (never values from a file), cut all the same.
fn plain_list(items: &[String]) -> String {
    items
        .iter()
        .take(8)
        .map(|item| excerpt(item, 60))
        .collect::<Vec<_>>()
        .join(", ")
}

fn counts_line(name: &str, counts: &Counts) -> Option<String> {
    let mut moves = Vec::new();
    for (count, word) in [
        (counts.added, "added"),
        (counts.removed, "removed"),
        (counts.changed, "changed"),
    ] {
        if count > 0 {
            moves.push(format!("{} {word}", thousands(count)));
        }
    }
    (!moves.is_empty() || counts.before != counts.after).then(|| {
        format!(
            "{name}: {} -> {} ({})",
            thousands(counts.before),
            thousands(counts.after),
            if moves.is_empty() {
                "moved".to_string()
            } else {
                moves.join(", ")
            }
        )
    })
}

fn document_lines(report: &DocumentChanges) -> Vec<String> {
    let mut lines = Vec::new();
    lines.extend(counts_line("paragraphs", &report.paragraphs));
    lines.extend(counts_line("tables", &report.tables));
    if !report.headings_added.is_empty() {
        lines.push(format!(
            "headings added: {}",
            code_list(&report.headings_added)
        ));
    }
    if !report.headings_removed.is_empty() {
        lines.push(format!(
            "headings removed: {}",
            code_list(&report.headings_removed)
        ));
    }
    for example in report.examples.iter().take(MAX_LISTED) {
        lines.push(match example.change.as_str() {
            "changed" if !example.diff.is_empty() => format!("changed: {}", code(&example.diff)),
            "changed" => format!(
                "changed: {} -> {}",
                code(&example.before),
                code(&example.after)
            ),
            "added" => format!("added: {}", code(&example.text)),
            _ => format!("removed: {}", code(&example.text)),
        });
    }
    if report.formatting_changed > 0 {
        lines.push(format!(
            "{} with the same text reformatted",
            plural(report.formatting_changed, "paragraph", "paragraphs")
        ));
    }
    if !report.other.is_empty() {
        lines.push(format!("also changed: {}", plain_list(&report.other)));
    }
    lines
}

fn deck_lines(report: &DeckChanges) -> Vec<String> {
    let mut lines = Vec::new();
    if report.slides_before != report.slides_after {
        lines.push(format!(
            "slides: {} -> {}",
            report.slides_before, report.slides_after
        ));
    }
    let slide = |change: &SlideChange| format!("slide {} {}", change.number, code(&change.title));
    for added in report.added.iter().take(MAX_LISTED) {
        lines.push(format!("added: {}", slide(added)));
    }
    for removed in report.removed.iter().take(MAX_LISTED) {
        lines.push(format!(
            "removed: {} (numbered as in the original)",
            slide(removed)
        ));
    }
    for changed in report.changed_slides.iter().take(MAX_LISTED) {
        lines.push(format!(
            "changed: {} ({})",
            slide(changed),
            plain_list(&changed.what)
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workbook_report_renders_cells_as_code_and_hostile_values_stay_inert() {
        let report = ChangeReport::parse(
            r#"{"kind":"xlsx","changed":true,"sheets_added":["New"],"sheets_removed":[],
                "sheets_renamed":[{"before":"Data","after":"Sales"}],
                "sheets":[{"name":"Sales","cells_changed":2,
                  "examples":[{"cell":"B7","before":"12","after":"15"},
                              {"cell":"C1","before":"","after":"[click](http://evil)`\n# x"}],
                  "formatting_changed":1,"formatting_examples":["A1"],
                  "rows_before":10,"rows_after":12,"columns_before":4,"columns_after":4,"other":["column widths"]}],
                "other":[]}"#,
        )
        .unwrap();
        assert!(report.changed());
        let text = report.render();
        assert!(text.contains("- sheets added: `New`\n"), "{text}");
        assert!(
            text.contains("- sheet `Data` renamed to `Sales`\n"),
            "{text}"
        );
        assert!(
            text.contains("2 cells changed (`Sales`!B7: `12` -> `15`; `Sales`!C1: (empty) -> `[click](http://evil)' # x`)"),
            "{text}"
        );
        assert!(
            text.contains("1 cell reformatted (A1); rows 10 -> 12; also changed: column widths"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    #[test]
    fn a_list_cut_to_the_first_five_says_so() {
        let cells: Vec<String> = (1..=6)
            .map(|row| format!(r#"{{"cell":"A{row}","before":"{row}","after":"x"}}"#))
            .collect();
        let report = ChangeReport::parse(&format!(
            r#"{{"kind":"xlsx","changed":true,"sheets_added":[],"sheets_removed":[],"sheets_renamed":[],
                "sheets":[{{"name":"S","cells_changed":6,"examples":[{}],
                  "formatting_changed":7,"formatting_examples":["A1","A2","A3","A4","A5","A6","A7"],
                  "rows_before":6,"rows_after":6,"columns_before":1,"columns_after":1,"other":[]}}],
                "other":[]}}"#,
            cells.join(",")
        ))
        .unwrap();
        let text = report.render();
        assert!(
            text.contains("6 cells changed (first 5: `S`!A1: `1` -> `x`;"),
            "{text}"
        );
        assert!(!text.contains("A6: `6`"), "{text}");
        assert!(
            text.contains("7 cells reformatted (first 5: A1, A2, A3, A4, A5)"),
            "{text}"
        );
    }

    #[test]
    fn document_and_deck_reports_render_and_the_unchanged_flag_is_read() {
        let document = ChangeReport::parse(
            r#"{"kind":"docx","changed":true,"paragraphs":{"before":12,"after":13,"added":1,"removed":0,"changed":1},
                "tables":{"before":1,"after":1,"added":0,"removed":0,"changed":0},
                "headings_added":["Risks"],"headings_removed":[],
                "examples":[{"change":"changed","before":"a 12","after":"a 15","diff":"a [-12-] {+15+}"},{"change":"added","text":"Bye."}],
                "formatting_changed":0,"other":[]}"#,
        )
        .unwrap();
        assert_eq!(
            document.render(),
            "- paragraphs: 12 -> 13 (1 added, 1 changed)\n- headings added: `Risks`\n- changed: `a [-12-] {+15+}`\n- added: `Bye.`\n"
        );
        let deck = ChangeReport::parse(
            r#"{"kind":"pptx","changed":true,"slides_before":3,"slides_after":3,
                "added":[{"number":3,"title":"Next steps"}],"removed":[{"number":2,"title":"Old"}],
                "changed_slides":[{"number":1,"title":"Q3","what":["text","pictures"]}]}"#,
        )
        .unwrap();
        assert_eq!(
            deck.render(),
            "- added: slide 3 `Next steps`\n- removed: slide 2 `Old` (numbered as in the original)\n- changed: slide 1 `Q3` (text, pictures)\n"
        );
        let same = ChangeReport::parse(r#"{"kind":"pptx","changed":false,"slides_before":2,"slides_after":2,"added":[],"removed":[],"changed_slides":[]}"#).unwrap();
        assert!(!same.changed());
        assert!(ChangeReport::parse("Traceback").is_err());
        assert!(ChangeReport::parse(r#"{"kind":"odt"}"#).is_err());
    }

    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(plural(1, "cell", "cells"), "1 cell");
        assert_eq!(plural(999, "cell", "cells"), "999 cells");
        assert_eq!(plural(1000, "cell", "cells"), "1,000 cells");
        assert_eq!(plural(1_000_000, "cell", "cells"), "1,000,000 cells");
    }

    #[test]
    fn a_long_report_is_capped() {
        let sheets: Vec<String> = (0..400)
            .map(|i| format!(r#"{{"name":"S{i}","cells_changed":1,"examples":[{{"cell":"A1","before":"{x}","after":"{x}"}}]}}"#, x = "y".repeat(80)))
            .collect();
        let report = ChangeReport::parse(&format!(
            r#"{{"kind":"xlsx","changed":true,"sheets":[{}]}}"#,
            sheets.join(",")
        ))
        .unwrap();
        let text = report.render();
        assert!(
            text.chars().count() <= MAX_RENDERED_CHARS + 40,
            "{}",
            text.len()
        );
        assert!(text.ends_with("- … (more changes not shown)\n"));
    }
}
