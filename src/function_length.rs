//! The function length STYLE.md asks for, checked on the source: no function in `src/` is
//! longer than [`LONGEST`] lines, and nine in ten are at most [`P90`]. A test only: it reads
//! `src/` as text, with comments, strings and `mod tests` left out, and measures each `fn`
//! from its signature's first line to its closing brace. `cargo nextest run function_length
//! --no-capture` prints the figures and the longest functions.

use std::path::Path;

use crate::layering::rust_files;

/// The longest a function may be: about one screen.
const LONGEST: usize = 80;
/// What nine functions in ten stay within.
const P90: usize = 35;

/// `text` with every comment, string and character literal turned into spaces (line breaks
/// kept), so that braces and `fn` inside them do not count.
fn code_only(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to.min(bytes.len())] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let end = if rest.starts_with(b"//") {
            at + rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            at + find(rest, b"*/").map_or(rest.len(), |i| i + 2)
        } else if let Some(hashes) = raw_string_start(bytes, at) {
            let close = [b"\"".as_slice(), &vec![b'#'; hashes]].concat();
            let open = 2 + hashes;
            at + open + find(&rest[open..], &close).map_or(rest.len() - open, |i| i + close.len())
        } else if rest[0] == b'"' {
            let mut i = 1;
            while i < rest.len() && rest[i] != b'"' {
                i += if rest[i] == b'\\' { 2 } else { 1 };
            }
            at + (i + 1).min(rest.len())
        } else if let Some(length) = char_literal(rest) {
            at + length
        } else {
            at += 1;
            continue;
        };
        blank(&mut out, at, end);
        at = end;
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The number of `#` of a raw string starting at `at` (`r"`, `r#"`, `br"`...), if one does.
fn raw_string_start(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes[at] != b'r'
        || (at > 0
            && (bytes[at - 1].is_ascii_alphanumeric() && bytes[at - 1] != b'b'
                || bytes[at - 1] == b'_'))
    {
        return None;
    }
    let hashes = bytes[at + 1..].iter().take_while(|&&b| b == b'#').count();
    (bytes.get(at + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

/// The length of a character literal at the start of `rest` (`'a'`, `'\n'`, `'\u{1F600}'`),
/// if one is there (a lifetime is not).
fn char_literal(rest: &[u8]) -> Option<usize> {
    if rest.first() != Some(&b'\'') {
        return None;
    }
    if rest.get(1) == Some(&b'\\') {
        let close = rest[2..].iter().take(10).position(|&b| b == b'\'')?;
        return Some(close + 3);
    }
    let width = std::str::from_utf8(&rest[1..rest.len().min(5)])
        .or_else(|e| std::str::from_utf8(&rest[1..1 + e.valid_up_to()]))
        .ok()?
        .chars()
        .next()?
        .len_utf8();
    (rest.get(1 + width) == Some(&b'\'')).then_some(width + 2)
}

/// The name of the function a line declares, if it does (`pub(crate) async fn name(`...).
fn declared(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for qualifier in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let name = rest.strip_prefix("fn ")?;
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    (end > 0).then(|| &name[..end])
}

/// (lines, `file::name`) of every function with a body in `text`.
fn functions(file: &str, text: &str) -> Vec<(usize, String)> {
    let text = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    let code = code_only(text);
    let code = String::from_utf8_lossy(&code);
    let mut starts = Vec::new();
    let mut offset = 0;
    for line in code.split('\n') {
        starts.push(offset);
        offset += line.len() + 1;
    }
    let line_of = |at: usize| starts.partition_point(|&start| start <= at) - 1;
    let mut found = Vec::new();
    for (number, line) in code.split('\n').enumerate() {
        let Some(name) = declared(line) else { continue };
        let from = starts[number] + line.find("fn ").unwrap_or(0);
        let mut depth = 0i32;
        let Some(open) = code[from..].find(|c: char| {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                _ => {}
            }
            depth == 0 && (c == '{' || c == ';')
        }) else {
            continue;
        };
        if code.as_bytes()[from + open] == b';' {
            continue;
        }
        let mut braces = 0i32;
        let Some(close) = code[from + open..].find(|c: char| {
            match c {
                '{' => braces += 1,
                '}' => braces -= 1,
                _ => {}
            }
            braces == 0
        }) else {
            continue;
        };
        let length = line_of(from + open + close) - number + 1;
        found.push((length, format!("{file}::{name}")));
    }
    found
}

#[test]
fn no_function_is_longer_than_a_screen_and_nine_in_ten_are_short() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut all = Vec::new();
    for file in files {
        // The test-only readers of the source.
        if file.ends_with("layering.rs") || file.ends_with("function_length.rs") {
            continue;
        }
        let name = file.strip_prefix(&src).unwrap().display().to_string();
        all.extend(functions(&name, &std::fs::read_to_string(&file).unwrap()));
    }
    all.sort_by(|a, b| b.cmp(a));
    let mut lengths: Vec<usize> = all.iter().map(|(length, _)| *length).collect();
    lengths.sort_unstable();
    let p90 = lengths[(lengths.len() - 1) * 9 / 10];
    println!(
        "{} functions in src/, p90 {p90} lines, longest {}, over {LONGEST}: {}",
        lengths.len(),
        all[0].0,
        all.iter().filter(|(length, _)| *length > LONGEST).count()
    );
    for (length, name) in all.iter().take(10) {
        println!("{length:>5} {name}");
    }
    let too_long: Vec<_> = all.iter().filter(|(length, _)| *length > LONGEST).collect();
    assert!(
        too_long.is_empty(),
        "functions longer than {LONGEST} lines (cut them along their seams): {too_long:?}"
    );
    assert!(p90 <= P90, "p90 is {p90} lines, more than {P90}");
}

#[test]
fn the_measure_skips_comments_strings_and_bodiless_declarations() {
    let text = "/// fn not_this() {\nfn one() {\n    let s = \"}\";\n    let c = '}';\n    // }\n}\ntrait T {\n    fn declared(&self);\n}\npub(crate) async fn two<'a>(x: &'a str) -> [u8; 2] {\n    let r = r#\"{\"#;\n    [0, 1]\n}\n";
    let found = functions("f.rs", text);
    assert_eq!(
        found,
        [(5, "f.rs::one".to_string()), (4, "f.rs::two".to_string())]
    );
}
