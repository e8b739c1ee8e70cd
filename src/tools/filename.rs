//! Names for stored files: what a model or user offers as `filename_hint` is cut down to a
//! safe, readable name (no path separators, no control characters, at most
//! [`MAX_STEM_CHARS`] characters) and given a short random suffix, so two results never share
//! a name.

/// Characters kept of the hint, before the suffix and extension.
pub const MAX_STEM_CHARS: usize = 60;

/// `<sanitised hint>_<6 hex>.<extension>`; `fallback` when nothing usable is left of the hint.
pub fn output_name(hint: Option<&str>, fallback: &str, extension: &str) -> String {
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..6];
    let hint = hint.unwrap_or(fallback);
    // A hint that already ends in the extension should not get it twice.
    let hint = strip_extension(hint, extension);
    let stem = sanitise_stem(hint);
    let stem = if stem.is_empty() {
        sanitise_stem(fallback)
    } else {
        stem
    };
    format!("{stem}_{suffix}.{extension}")
}

/// A safe version of a whole file name (keeps its extension), for inputs and `run_python`
/// outputs; `fallback` when nothing is left.
pub fn safe_name(name: &str, fallback: &str) -> String {
    let (stem, extension) = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && ext.len() <= 10 => (stem, Some(ext)),
        _ => (name, None),
    };
    let stem = sanitise_stem(stem);
    let extension: String = extension
        .map(|ext| ext.chars().filter(char::is_ascii_alphanumeric).collect())
        .unwrap_or_default();
    match (stem.is_empty(), extension.is_empty()) {
        (true, _) => fallback.to_string(),
        (false, true) => stem,
        (false, false) => format!("{stem}.{extension}"),
    }
}

fn strip_extension<'a>(hint: &'a str, extension: &str) -> &'a str {
    match hint.rsplit_once('.') {
        Some((stem, ext)) if ext.eq_ignore_ascii_case(extension) => stem,
        _ => hint,
    }
}

/// Letters and digits (any script), `-`, `_`, and `.` inside; every other run of characters
/// becomes one `_`.
fn sanitise_stem(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() || c == '-' || c == '.' {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    let trimmed = out.trim_matches(['_', '.', '-']);
    trimmed
        .chars()
        .take(MAX_STEM_CHARS)
        .collect::<String>()
        .trim_end_matches(['_', '.', '-'])
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_hints_become_plain_names() {
        for hint in [
            "../../etc/passwd",
            "a\\b\\c",
            "evil\u{0}name\r\n",
            "..",
            "/",
            "\u{202e}gpj.xlsx",
        ] {
            let name = output_name(Some(hint), "output", "xlsx");
            assert!(
                crate::storage::local::is_plain_name(&name),
                "{hint:?} -> {name:?}"
            );
            assert!(!name.contains(".."), "{name}");
            assert!(name.ends_with(".xlsx"), "{name}");
        }
        assert!(output_name(Some("/"), "output", "xlsx").starts_with("output_"));
    }

    #[test]
    fn readable_hints_survive_and_are_capped_and_unique() {
        let name = output_name(Some("Q3 Sales Report.xlsx"), "output", "xlsx");
        assert!(name.starts_with("Q3_Sales_Report_"), "{name}");
        assert_eq!(name.matches(".xlsx").count(), 1, "{name}");
        let long = output_name(Some(&"x".repeat(500)), "output", "docx");
        assert!(long.chars().count() <= MAX_STEM_CHARS + 12, "{long}");
        assert_ne!(
            output_name(Some("same"), "o", "docx"),
            output_name(Some("same"), "o", "docx")
        );
        assert_eq!(
            output_name(Some("Bericht März"), "o", "docx")
                .split('_')
                .next(),
            Some("Bericht")
        );
        assert_eq!(safe_name("../data 2026.csv", "input"), "data_2026.csv");
        assert_eq!(safe_name("...", "input"), "input");
    }
}
