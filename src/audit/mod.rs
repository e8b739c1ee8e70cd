//! The audit trail for security reviews: one JSON line per attempt, appended to a file (and to
//! stdout if asked): when, which call and caller, which model, the code's SHA-256 (and the
//! code, unless turned off), inputs and outputs with their SHA-256, the image, runtime and
//! limits, the container, how it ended and how long it took.
//!
//! Each line carries `prev`, the SHA-256 of the line before it (64 zeros for the first line
//! ever), so that a line changed, removed or inserted breaks the chain at that point:
//! [`verify()`] proves a file untouched or names the first broken line. Rotation renames the
//! full file and goes on in a new one whose first line points at the old file's last line, so
//! the chain runs on across files (verify them in order). The chain shows tampering with the
//! file's contents; it cannot stop someone who can rewrite the whole file from rewriting it
//! whole, so ship the file (or stdout) to storage the server cannot modify.
//!
//! Servers that share a data folder (replicas) each write a chain of their own in the audit
//! folder, `<instance>.jsonl` and its rotated files ([`chain`]): one chain has one writer, so
//! its `prev` links stay true. A lock file beside the chain makes that a fact, not a hope.
//! [`report`] reads every chain for a reviewer; [`sessions`] reads them all at start-up, and
//! the others' new lines before each session call, for the last state of each session.
//!
//! A line is in the trail whole or not at all: each is written with its newline in one append
//! and synced before the call's answer goes out; a write that fails part-way is cut back off,
//! and an unfinished line a crash left is cut at the next start-up and recorded by a line of
//! its own ([`recovery`]). Creating and rotating a chain file syncs the folder too.
//!
//! No attempt need run unless its line can be written: [`AuditLog::reserve`] sets aside the
//! room for a line before its attempt starts, and while it cannot, the trail is unavailable
//! ([`availability`]); the first line written once it works again says for how long it was,
//! and what that cost.
//!
//! The trail itself lives in five private files, whose items this module re-exports (every
//! path is `audit::<item>`):
//! - `record.rs`: the line's format ([`Record`], [`CallInfo`], [`FileDigest`], [`ToolMark`])
//!   and the hashing all the others share ([`hash_line`], [`sha256_hex`], [`sha256_file`]). It
//!   neither writes nor reads a file.
//! - `store.rs`: the names of a chain's files (live, lock, rotated, the files beside it),
//!   taking the lock, cutting a file back, and finding the chain's head at start-up. No state,
//!   no line written.
//! - `writer.rs`: [`AuditLog`], the one writer of a chain, with its in-memory state (the head,
//!   the tree and its frontier), the start-up check of a signed chain, rotation, and
//!   [`AuditError`]. It does not read a trail back for a reviewer.
//! - `verify.rs`: [`verify()`] and its variants, the one verifier of a chain's lines, its crash
//!   traces and the roots it gives. It writes nothing, repairs nothing and checks no signature
//!   ([`proof`] does).
//! - `describe.rs`: [`describe()`], a record as a few lines for a terminal, every chosen value
//!   made printable. It reads no file and checks nothing.
//!
//! The other parts are public modules of their own, and name the trail's items through this
//! module, never through the five files. Every one of them opens a file of the audit folder
//! only through [`crate::untrusted::door`] (a regular file, no link, never blocking, lines
//! read within a bound): the folder's bytes are as untrusted as an upload's.

pub mod availability;
pub mod chain;
pub mod checkpoints;
pub mod merkle;
pub mod note;
pub mod proof;
pub mod pruned;
pub mod receipt;
pub mod recovery;
pub mod retention;
pub mod sessions;
pub mod tree;
pub mod witness;

mod describe;
mod record;
mod store;
mod verify;
mod writer;

pub use describe::describe;
pub(crate) use describe::printable;
pub use record::{
    CallInfo, FileDigest, GENESIS, Record, SessionMark, ToolMark, hash_line, sha256_file,
    sha256_hex,
};
pub(crate) use store::beside;
pub use store::{CHAIN_SUFFIX, chain_name};
use store::{chain_head, cut_back, file_name, lock_chain, lock_path, rotated_name};
pub use verify::{Broken, CrashTrace, Follower, Verified, verify, verify_each, verify_with_roots};
use writer::Writer;
pub use writer::{AuditError, AuditLog, DEFAULT_ORIGIN, Receipt};

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;
    use std::path::PathBuf;

    use super::store::rotated_name;
    use super::*;
    use crate::config::AuditConfig;

    /// A trail's settings for unit tests: no folder of its own, lines up to `max_bytes`.
    pub(crate) fn config(max_bytes: u64) -> AuditConfig {
        AuditConfig {
            place: crate::config::AuditPlace::Off,
            chain: None,
            stdout: false,
            include_code: true,
            max_bytes,
            on_failure: crate::config::AuditOnFailure::Refuse,
            origin: None,
            signing_key_file: None,
            checkpoint_interval: std::time::Duration::from_secs(60),
            witnesses: Vec::new(),
        }
    }

    fn record(tool: &str) -> Record {
        Record {
            time: crate::time::rfc3339_now(),
            caller: CallInfo {
                tool: tool.into(),
                ..CallInfo::default()
            },
            status: "ok".into(),
            ..Record::default()
        }
    }

    #[test]
    fn a_chain_verifies_survives_reopening_and_catches_a_changed_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, config(1 << 30)).unwrap();
        log.append(record("a")).unwrap();
        log.append(record("b")).unwrap();
        drop(log);
        let log = AuditLog::open(&path, config(1 << 30)).unwrap();
        log.append(record("c")).unwrap();
        let verified = verify(std::slice::from_ref(&path)).unwrap();
        assert_eq!(verified.lines, 3);
        assert_eq!(verified.continues_from, None);

        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("\"tool\":\"b\"", "\"tool\":\"x\"", 1)).unwrap();
        let broken = verify(std::slice::from_ref(&path)).unwrap_err();
        assert_eq!(broken.line, 3, "{broken}");

        let lines: Vec<&str> = text.lines().collect();
        std::fs::write(&path, format!("{}\n{}\n", lines[0], lines[2])).unwrap();
        assert_eq!(verify(std::slice::from_ref(&path)).unwrap_err().line, 2);
    }

    #[test]
    fn a_chain_has_one_writer_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::open_chain(dir.path(), "replica-a", config(1 << 30)).unwrap();
        let second = AuditLog::open_chain(dir.path(), "replica-a", config(1 << 30)).unwrap_err();
        assert!(second.to_string().contains("SANDBOX_INSTANCE"), "{second}");
        let other = AuditLog::open_chain(dir.path(), "replica-b", config(1 << 30)).unwrap();
        log.append(record("a")).unwrap();
        other.append(record("b")).unwrap();
        drop(log);
        AuditLog::open_chain(dir.path(), "replica-a", config(1 << 30)).unwrap();
        let chains = chain::chains(dir.path()).unwrap();
        assert_eq!(chains.len(), 2);
        assert!(chain::verify_all(chains).iter().all(|c| c.result.is_ok()));
    }

    #[test]
    fn described_records_carry_no_control_or_bidi_characters() {
        let mut hostile = record("run\u{1b}[2J");
        hostile.code_sha256 = "ab".repeat(32);
        hostile.image = "file-agent-sandbox:x".into();
        hostile.caller.client = Some("\u{1b}]0;title\u{7}evil\r\n#2 forged".into());
        hostile.error = Some("\u{9b}31m\u{202e}txt.exe".into());
        let text = describe(&hostile);
        assert!(
            !text
                .chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{text:?}"
        );
        assert!(text.contains("evil\\u{d}\\u{a}#2 forged"), "{text}");
        assert_eq!(text.lines().count(), 5, "{text}");
    }

    #[test]
    fn a_saved_tool_event_shows_no_empty_code_or_container() {
        let mut event = record("create_tool");
        event.status = "created".into();
        event.saved_tool = Some(ToolMark::new("created", "double", &"c".repeat(64), None));
        let text = describe(&event);
        assert!(
            !text.contains("code sha256") && !text.contains("image"),
            "{text}"
        );
        assert!(text.contains("saved tool double created"), "{text}");
    }

    #[test]
    fn an_unfinished_line_is_cut_at_start_up_and_recorded_and_verify_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, config(1 << 30)).unwrap();
        log.append(record("a")).unwrap();
        // A line longer than any block read backwards, so that its hash is only right if it
        // is read whole.
        let mut long = record("b");
        long.code = Some("#".repeat(1_300_000));
        log.append(long).unwrap();
        drop(log);
        let whole = std::fs::read(&path).unwrap();
        let fragment = br#"{"time":"2026-01-01T00:00:00.000Z","seq":3,"tool":"c","code":"pri"#;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(fragment)
            .unwrap();
        let before = verify(std::slice::from_ref(&path)).unwrap();
        assert_eq!(before.lines, 2);
        assert!(
            matches!(&before.crash_traces[..], [CrashTrace::Unfinished { line: 3, bytes, .. }] if *bytes == fragment.len() as u64),
            "{:?}",
            before.crash_traces
        );

        let log = AuditLog::open(&path, config(1 << 30)).unwrap();
        log.append(record("d")).unwrap();
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(std::str::from_utf8(&whole).unwrap()));
        let side = dir.path().join("audit.jsonl.torn-000000000003");
        assert_eq!(std::fs::read(&side).unwrap(), fragment);
        let lines: Vec<Record> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4);
        let recovered = &lines[2];
        assert_eq!(recovered.status, recovery::RECOVERED_STATUS);
        assert_eq!(recovered.seq, 3);
        let cut = recovered.recovered.as_ref().unwrap();
        assert_eq!(cut.offset, whole.len() as u64);
        assert_eq!(cut.bytes, fragment.len() as u64);
        assert_eq!(cut.sha256, sha256_hex(fragment));
        assert_eq!(cut.kept.as_deref(), Some("audit.jsonl.torn-000000000003"));
        assert!(describe(recovered).contains("recovered at start-up: an unfinished line of"));

        let after = verify(std::slice::from_ref(&path)).unwrap();
        assert_eq!(after.lines, 4);
        assert!(
            matches!(
                &after.crash_traces[..],
                [CrashTrace::Recovered { line: 3, .. }]
            ),
            "{:?}",
            after.crash_traces
        );
        assert!(
            after.crash_traces[0]
                .to_string()
                .contains("kept in audit.jsonl.torn-000000000003")
        );
        // A whole line that does not parse is still a break.
        std::fs::write(&path, format!("{text}{{\"half\n")).unwrap();
        assert_eq!(verify(std::slice::from_ref(&path)).unwrap_err().line, 5);
    }

    #[test]
    fn a_live_file_left_without_lines_by_a_crash_after_rotation_continues_the_rotated_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, config(600)).unwrap();
        for tool in ["a", "b", "c"] {
            log.append(record(tool)).unwrap();
        }
        drop(log);
        // A crash right after the next rotation: the full file renamed, the new one holding
        // only an unfinished first line (or nothing, or not there yet: the same path).
        std::fs::rename(&path, rotated_name(&path, 3)).unwrap();
        std::fs::write(&path, b"{\"time\":").unwrap();

        let log = AuditLog::open(&path, config(600)).unwrap();
        log.append(record("d")).unwrap();
        let chains = chain::chains(dir.path()).unwrap();
        assert_eq!(chains.len(), 1, "{chains:?}");
        let verified = verify(&chains[0].files).unwrap();
        assert_eq!(verified.lines, 5, "a, b, c, the recovery, d");
        assert_eq!(verified.continues_from, None);
        assert_eq!(verified.crash_traces.len(), 1);
    }

    #[test]
    fn rotation_starts_a_new_file_that_continues_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, config(600)).unwrap();
        for tool in ["a", "b", "c", "d", "e", "f"] {
            log.append(record(tool)).unwrap();
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|p| p != &path && !p.to_string_lossy().ends_with(".tree"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "nothing was rotated");
        let alone = verify(std::slice::from_ref(&path)).unwrap();
        assert!(alone.continues_from.is_some());
        files.push(path);
        let all = verify(&files).unwrap();
        assert_eq!(all.lines, 6);
        assert_eq!(all.continues_from, None);
    }
}
