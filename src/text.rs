//! Cutting and fencing text for messages, logs and the audit trail: every helper counts
//! characters, never bytes, so a cut never splits one.

/// Whether `c` changes how text around it looks without being seen: a control character, or a
/// bidirectional formatting character (which can reorder what a reader sees).
pub fn is_hidden_control(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` on one line with every hidden character visible: `\n`, `\r`, `\t`, and `\u{..}` for
/// the other [`is_hidden_control`] characters. For log lines: a newline in a script's stderr
/// cannot start a forged record, and an escape sequence cannot reach a terminal.
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_hidden_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_hidden_control(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The first `max` characters of `text`.
pub fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// The first `max` characters of `text`, marked when cut.
pub fn head(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!(
            "{}\n[… {} more characters cut]",
            &text[..cut],
            text[cut..].chars().count()
        ),
        None => text.to_string(),
    }
}

/// The last `max` characters of `text`, marked when cut.
pub fn tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let cut: String = text.chars().skip(count - max).collect();
    format!("[… {} characters cut]\n{cut}", count - max)
}

/// `body` in a code fence longer than any run of backticks inside it (inspections and
/// outputs carry fences of their own).
pub fn fenced(language: &str, body: &str) -> String {
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}{language}\n{body}\n{fence}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_keeps_the_beginning_and_says_how_much_was_cut() {
        assert_eq!(head("abc", 5), "abc");
        let cut = head("äbcdef", 3);
        assert!(cut.starts_with("äbc\n"), "{cut}");
        assert!(cut.contains("3 more characters"), "{cut}");
    }

    #[test]
    fn fences_outgrow_the_backticks_inside() {
        let fence = fenced("text", "a ```python``` b");
        assert!(fence.starts_with("````text\n"), "{fence}");
    }

    #[test]
    fn tail_keeps_the_end_and_excerpt_the_beginning() {
        assert_eq!(tail("abcdef", 2), "[… 4 characters cut]\nef");
        assert_eq!(tail("ab", 2), "ab");
        assert_eq!(excerpt("äbcdef", 2), "äb…");
    }
}
