//! A record as a few readable lines for a terminal ([`describe`]), every value a caller, a
//! script or a model could have chosen passed through [`printable`], so a line can neither
//! carry terminal escape sequences nor forge a line of its own. It reads no file and checks
//! nothing: it renders what it is given.

use super::{CallInfo, FileDigest, Record, ToolMark, retention};

/// One record in a few readable lines, for a terminal. Every value that a caller, a script
/// or a model could have chosen goes through [`printable`], so a line can neither carry
/// terminal escape sequences nor forge a line of its own.
pub fn describe(record: &Record) -> String {
    let mut text = headline(record);
    describe_container(&mut text, record);
    if let Some(tool) = &record.saved_tool {
        describe_saved_tool(&mut text, tool);
    }
    if let Some(pruned) = &record.pruned {
        describe_pruned(&mut text, pruned);
    }
    if let Some(cut) = &record.recovered {
        text.push_str(&format!("\n  recovered at start-up: {cut}"));
    }
    if let Some(outage) = &record.unavailable {
        text.push_str(&format!("\n  {}", printable(&outage.to_string())));
    }
    if !record.inputs.is_empty() {
        text.push_str(&format!("\n  in: {}", describe_files(&record.inputs)));
    }
    if !record.outputs.is_empty() {
        text.push_str(&format!("\n  out: {}", describe_files(&record.outputs)));
    }
    if let Some(error) = &record.error {
        text.push_str(&format!(
            "\n  error: {}",
            printable(&crate::text::excerpt(error, 300))
        ));
    }
    text
}

/// A record's first two lines: what ended how and when, then the call and who made it.
fn headline(record: &Record) -> String {
    let caller = &record.caller;
    let who = who(caller);
    format!(
        "#{} {} {} {} in {} ms{}\n  call {} request {}{}",
        record.seq,
        printable(&record.time),
        printable(&caller.tool),
        printable(&record.status),
        record.duration_ms,
        record
            .exit_code
            .map(|c| format!(", exit {c}"))
            .unwrap_or_default(),
        printable(&caller.call),
        printable(&caller.request.to_string()),
        if who.is_empty() {
            String::new()
        } else {
            format!(", {who}")
        },
    )
}

/// "client .., user .., chat ..", as far as the call says.
fn who(caller: &CallInfo) -> String {
    [
        caller
            .client
            .as_deref()
            .map(|c| format!("client {}", printable(c))),
        caller
            .user
            .as_deref()
            .map(|u| format!("user {}", printable(u))),
        caller
            .chat
            .as_deref()
            .map(|c| format!("chat {}", printable(c))),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ")
}

/// Which code a record ran, and where: its hash and author, its image, runtime and container,
/// and the container's kind.
fn describe_container(text: &mut String, record: &Record) {
    // A saved tool's creation or deletion ran no code in no container: such a line holds
    // neither, and shows neither.
    if !record.code_sha256.is_empty() {
        text.push_str(&format!(
            "\n  code sha256 {}{}",
            printable(&record.code_sha256),
            record
                .model
                .as_deref()
                .map(|m| format!(" written by {}", printable(m)))
                .unwrap_or_default(),
        ));
    }
    if !record.image.is_empty() {
        text.push_str(&format!(
            "\n  image {} on {}, container {}",
            printable(&record.image),
            printable(&record.runtime),
            printable(
                record
                    .container
                    .as_deref()
                    .map_or("none", |c| c.get(..12).unwrap_or(c))
            ),
        ));
    }
    if let Some(kind) = &record.container_kind {
        text.push_str(&format!(
            " ({kind}, created {})",
            record.container_created.as_deref().unwrap_or("?")
        ));
    }
}

/// The saved tool a record concerns, what was done to it and which version.
fn describe_saved_tool(text: &mut String, tool: &ToolMark) {
    text.push_str(&format!(
        "\n  saved tool {} {}, version {}…{}",
        printable(&tool.name),
        printable(&tool.action),
        printable(tool.version.get(..12).unwrap_or(&tool.version)),
        tool.owner
            .as_deref()
            .map(|owner| format!(", saved by {}", printable(owner)))
            .unwrap_or_default()
    ));
}

/// What a retention line deleted: stored files, audit files, and each audit file's last line.
fn describe_pruned(text: &mut String, pruned: &retention::Pruned) {
    if let Some(before) = &pruned.files_before {
        text.push_str(&format!(
            "\n  retention: {} stored file(s) written before {} deleted",
            pruned.stored_files,
            printable(before)
        ));
    }
    if let Some(before) = &pruned.audit_before {
        text.push_str(&format!(
            "\n  retention: audit files whose last line is before {} deleted: {}",
            printable(before),
            pruned.audit_files.len()
        ));
    }
    for dropped in &pruned.audit_files {
        text.push_str(&format!(
            "\n  audit file {} deleted whole (last line #{} of {}, sha256 {}…)",
            printable(&dropped.file),
            dropped.last_seq,
            printable(&dropped.last_time),
            printable(dropped.last_hash.get(..12).unwrap_or(&dropped.last_hash))
        ));
    }
}

/// Files in one line: name, size and the start of the hash of each.
fn describe_files(list: &[FileDigest]) -> String {
    list.iter()
        .map(|f| {
            format!(
                "{} ({} bytes, sha256 {}…)",
                printable(&f.name),
                f.bytes,
                printable(f.sha256.get(..12).unwrap_or(&f.sha256))
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `text` with every control character (C0, DEL, C1: terminal escapes, line breaks) and every
/// bidirectional formatting character (which can reorder what a reader sees) written as a
/// `\u{..}` escape.
pub(crate) fn printable(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            shown.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            shown.push(c);
        }
    }
    shown
}
