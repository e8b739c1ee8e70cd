//! Whether the trail can take lines. "No attempt without its line" needs more than noticing a
//! failed write afterwards: by then the attempt has run. So before an attempt starts, its line's
//! room is set aside in the chain file ([`AuditLog::reserve`]): `fallocate` with
//! `FALLOC_FL_KEEP_SIZE` allocates the blocks past the end of the file without changing its
//! size, so the append that follows the attempt writes into blocks it already owns and cannot
//! meet a full disk. That is a reservation, not an estimate (a free-space check could be
//! overtaken by any other writer between the check and the line), and it costs one system call
//! of microseconds. Where the filesystem has no `fallocate` (`EOPNOTSUPP`: some network
//! filesystems), the free space the filesystem reports must cover the room instead.
//!
//! A reservation or a write that fails makes the trail unwritable (for `/health` and
//! `/metrics`) until one succeeds. A call refused or a line lost meanwhile opens an [`Outage`];
//! the first line written after it (a reservation that succeeds writes it at once) is an
//! `audit_restored` line with an [`Unavailable`]: since when, for how long, how many calls were
//! refused and how many lines were lost. A line written into room set aside before the disk
//! filled is not lost, so it opens no outage. What the tools do while the trail is unwritable
//! (refuse, or go on unaudited) is their choice, by `FILE_AGENT_AUDIT_ON_FAILURE`; this module
//! only keeps the facts.
//!
//! What a reservation does not cover: a file that must be rotated while other attempts hold
//! room in the old one (their lines need a new file), and faults other than room (an I/O
//! error, a filesystem remounted read-only between the reservation and the line). Those show
//! as a failed write after the attempt, which the tools answer as a failed attempt, its output
//! withheld.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{AuditError, AuditLog, Record, Writer};

/// `status` of the line that ends an outage of the trail.
pub const RESTORED_STATUS: &str = "audit_restored";

/// Room set aside besides each reservation for the line that ends an outage.
const RESTORED_LINE_BYTES: u64 = 4096;

/// A stretch of time in which the trail could not be written: while it lasts
/// (`Writer::unwritable`), and once a call was refused or a line lost in it (`Writer::outage`).
#[derive(Debug, Clone)]
pub(super) struct Outage {
    since: Instant,
    since_time: String,
    /// The first error, which says why.
    error: String,
    refused_calls: u64,
    pub(super) lines_lost: u64,
}

/// What the `audit_restored` line says about the outage it ends.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Unavailable {
    /// When the first write or reservation failed (UTC, RFC 3339).
    pub since: String,
    /// Milliseconds from then to this line.
    pub duration_ms: u64,
    /// Tool calls refused meanwhile (`FILE_AGENT_AUDIT_ON_FAILURE=refuse`).
    pub refused_calls: u64,
    /// Lines that could not be written meanwhile: attempts answered as failed (under
    /// `refuse`) or run unaudited (under `continue`), and lines for which nothing ran.
    pub lines_lost: u64,
    /// The error that began it.
    pub error: String,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the trail could not be written from {} for {} ms: {} call(s) refused, {} line(s) lost; {}",
            self.since, self.duration_ms, self.refused_calls, self.lines_lost, self.error
        )
    }
}

/// The trail's state for `/health`.
#[derive(Debug, Clone, PartialEq)]
pub struct Availability {
    /// Whether the last write or reservation succeeded.
    pub writable: bool,
    /// Since when it has not (UTC, RFC 3339), and why.
    pub since: Option<String>,
    /// Why not.
    pub error: Option<String>,
    /// Calls refused since then.
    pub refused_calls: u64,
}

/// Room for one line, set aside in the chain file until dropped (its line written, or its
/// attempt over).
#[derive(Debug)]
#[must_use = "the room is given back when this is dropped"]
pub struct Reservation {
    log: Arc<AuditLog>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut writer = self.log.lock_writer();
        writer.reserved = writer.reserved.saturating_sub(self.bytes);
    }
}

impl AuditLog {
    /// Sets aside room for a line of up to `bytes` before the attempt it records runs; an
    /// error means the line could not be written (the trail is then unavailable). Ends an
    /// outage by writing its line when the room is there again.
    pub fn reserve(self: &Arc<Self>, bytes: u64) -> Result<Reservation, AuditError> {
        let mut writer = self.lock_writer();
        if let Err(error) = self.set_aside(&mut writer, bytes) {
            self.note_failure(&mut writer, &error);
            return Err(error);
        }
        self.close_outage(&mut writer)?;
        self.note_success(&mut writer);
        writer.reserved += bytes;
        Ok(Reservation {
            log: self.clone(),
            bytes,
        })
    }

    /// Whether the trail can take a line of `bytes` now: a reservation given back at once.
    /// Ends an outage (with its line) when it can.
    pub fn probe(self: &Arc<Self>, bytes: u64) -> Result<(), AuditError> {
        self.reserve(bytes).map(drop)
    }

    /// Whether the last write or reservation succeeded (no lock taken).
    pub fn is_writable(&self) -> bool {
        self.writable.load(Ordering::SeqCst)
    }

    /// What `FILE_AGENT_AUDIT_ON_FAILURE` chose.
    pub fn on_failure(&self) -> crate::config::AuditOnFailure {
        self.config.on_failure
    }

    /// Tool calls refused because the trail could not be written, and lines that could not
    /// be written, since start-up (for `/metrics`).
    pub fn failure_counts(&self) -> (u64, u64) {
        (
            self.refused_total.load(Ordering::Relaxed),
            self.lost_total.load(Ordering::Relaxed),
        )
    }

    /// The trail's state, for `/health`.
    pub fn availability(&self) -> Availability {
        let writer = self.lock_writer();
        Availability {
            writable: self.is_writable(),
            since: writer.unwritable.as_ref().map(|o| o.since_time.clone()),
            error: writer.unwritable.as_ref().map(|o| o.error.clone()),
            refused_calls: writer.outage.as_ref().map_or(0, |o| o.refused_calls),
        }
    }

    /// Counts a tool call refused because the trail could not be written.
    pub fn count_refused(&self) {
        self.refused_total.fetch_add(1, Ordering::Relaxed);
        let mut writer = self.lock_writer();
        self.outage(&mut writer).refused_calls += 1;
    }

    /// Counts a line that could not be written (for `error`).
    pub(super) fn count_lost(&self, writer: &mut Writer, error: &AuditError) {
        self.lost_total.fetch_add(1, Ordering::Relaxed);
        self.note_failure(writer, error);
        self.outage(writer).lines_lost += 1;
    }

    /// The outage in progress, opened now (from when the trail became unwritable) if none is.
    fn outage<'w>(&self, writer: &'w mut Writer) -> &'w mut Outage {
        let began = writer.unwritable.clone().unwrap_or_else(|| Outage {
            since: Instant::now(),
            since_time: crate::time::rfc3339_now(),
            error: "the audit trail could not be written".into(),
            refused_calls: 0,
            lines_lost: 0,
        });
        writer.outage.get_or_insert(began)
    }

    /// Allocates `bytes` more past the end of the file, beyond what is already set aside
    /// (and the room of an outage's line), rotating first when no other attempt holds room in
    /// a file that the line would fill past its limit.
    fn set_aside(&self, writer: &mut Writer, bytes: u64) -> Result<(), AuditError> {
        let error = |source| AuditError {
            path: self.path.display().to_string(),
            action: "written",
            source,
        };
        if writer.unclean {
            super::cut_back(&writer.file, writer.size).map_err(error)?;
            writer.unclean = false;
        }
        if writer.reserved == 0
            && writer.size > 0
            && writer.size + bytes + RESTORED_LINE_BYTES > self.config.max_bytes
        {
            self.rotate_full(writer)?;
        }
        let room = writer.reserved + bytes + RESTORED_LINE_BYTES;
        let (Ok(offset), Ok(length)) = (i64::try_from(writer.size), i64::try_from(room)) else {
            return Err(error(std::io::Error::other("the file is too large")));
        };
        reserve_room(&writer.file, offset, length, room).map_err(error)
    }

    /// Marks the trail unwritable from now, for `error` (if it was not already).
    pub(super) fn note_failure(&self, writer: &mut Writer, error: &AuditError) {
        self.writable.store(false, Ordering::SeqCst);
        if writer.unwritable.is_none() {
            tracing::error!(%error, "the audit trail cannot be written");
            writer.unwritable = Some(Outage {
                since: Instant::now(),
                since_time: crate::time::rfc3339_now(),
                error: error.to_string(),
                refused_calls: 0,
                lines_lost: 0,
            });
        }
    }

    /// Marks the trail writable: a line was written, or room set aside.
    pub(super) fn note_success(&self, writer: &mut Writer) {
        self.writable.store(true, Ordering::SeqCst);
        writer.unwritable = None;
    }

    /// Writes the line that ends an open outage (nothing when none is open).
    pub(super) fn close_outage(&self, writer: &mut Writer) -> Result<(), AuditError> {
        let Some(outage) = writer.outage.clone() else {
            return Ok(());
        };
        let unavailable = Unavailable {
            since: outage.since_time,
            duration_ms: u64::try_from(outage.since.elapsed().as_millis()).unwrap_or(u64::MAX),
            refused_calls: outage.refused_calls,
            lines_lost: outage.lines_lost,
            error: crate::text::excerpt(&outage.error, 500),
        };
        let record = Record {
            time: crate::time::rfc3339_now(),
            author: "file-agent".into(),
            status: RESTORED_STATUS.into(),
            duration_ms: unavailable.duration_ms,
            unavailable: Some(unavailable.clone()),
            ..Record::default()
        };
        self.write_line(writer, record)?;
        writer.outage = None;
        tracing::warn!(%unavailable, "the audit trail can be written again");
        Ok(())
    }
}

/// Sets `length` bytes aside at `offset` of `file` without changing its size; on a file
/// system that cannot, checks that `room` bytes are free at least.
fn reserve_room(file: &std::fs::File, offset: i64, length: i64, room: u64) -> std::io::Result<()> {
    use nix::fcntl::{FallocateFlags, fallocate};
    match fallocate(file, FallocateFlags::FALLOC_FL_KEEP_SIZE, offset, length) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EOPNOTSUPP) => {
            let stat = nix::sys::statvfs::fstatvfs(file)?;
            let free = stat.blocks_available().saturating_mul(stat.fragment_size());
            if free >= room {
                Ok(())
            } else {
                Err(std::io::Error::from_raw_os_error(
                    nix::errno::Errno::ENOSPC as i32,
                ))
            }
        }
        Err(errno) => Err(errno.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::config::{AuditConfig, AuditOnFailure, AuditPlace};

    fn open(dir: &std::path::Path) -> Arc<AuditLog> {
        open_rotating_at(dir, 1 << 30)
    }

    fn open_rotating_at(dir: &std::path::Path, max_bytes: u64) -> Arc<AuditLog> {
        let config = AuditConfig {
            place: AuditPlace::Off,
            chain: None,
            stdout: false,
            include_code: true,
            max_bytes,
            on_failure: AuditOnFailure::Refuse,
            origin: None,
            signing_key_file: None,
            checkpoint_interval: std::time::Duration::from_secs(60),
            witnesses: Vec::new(),
        };
        Arc::new(AuditLog::open(&dir.join("audit.jsonl"), config).unwrap())
    }

    fn record() -> Record {
        Record {
            time: crate::time::rfc3339_now(),
            status: "ok".into(),
            ..Record::default()
        }
    }

    #[test]
    fn reserved_room_is_allocated_past_the_end_and_given_back_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        let first = log.reserve(100_000).unwrap();
        let second = log.reserve(200_000).unwrap();
        assert_eq!(log.lock_writer().reserved, 300_000);
        let metadata = std::fs::metadata(log.path()).unwrap();
        assert_eq!(metadata.len(), 0, "the file's size is unchanged");
        assert!(
            metadata.blocks() * 512 >= 300_000,
            "the blocks are the file's: {} bytes",
            metadata.blocks() * 512
        );
        drop(first);
        assert_eq!(log.lock_writer().reserved, 200_000);
        log.append(record()).unwrap();
        drop(second);
        assert_eq!(log.lock_writer().reserved, 0);
        assert!(log.is_writable());
        assert_eq!(log.failure_counts(), (0, 0));
    }

    #[test]
    fn refused_calls_open_an_outage_that_the_next_line_reports_first() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        log.append(record()).unwrap();
        log.count_refused();
        log.count_refused();
        assert_eq!(log.availability().refused_calls, 2);
        std::thread::sleep(std::time::Duration::from_millis(5));
        log.append(record()).unwrap();
        let text = std::fs::read_to_string(log.path()).unwrap();
        let lines: Vec<Record> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let statuses: Vec<&str> = lines.iter().map(|l| l.status.as_str()).collect();
        assert_eq!(statuses, ["ok", RESTORED_STATUS, "ok"]);
        let outage = lines[1].unavailable.as_ref().unwrap();
        assert_eq!((outage.refused_calls, outage.lines_lost), (2, 0));
        assert!(outage.duration_ms >= 5, "{outage}");
        assert!(super::super::describe(&lines[1]).contains("2 call(s) refused"));
        assert_eq!(log.availability().refused_calls, 0, "the outage is over");
        assert_eq!(log.failure_counts(), (2, 0), "the totals are not");
        assert_eq!(
            super::super::verify(std::slice::from_ref(&log.path().to_path_buf()))
                .unwrap()
                .lines,
            3
        );
    }

    /// A tmpfs of its own, with room for `inodes` inodes; unmounted when dropped.
    struct SmallFolder(tempfile::TempDir);

    impl SmallFolder {
        /// The folder; `None`, with the reason printed (`.config/nextest.toml` shows this
        /// test's output even when it passes), when this process is not root and so cannot
        /// mount one: the fast tier a newcomer runs without root. CI runs as root.
        fn mount(inodes: u32) -> Option<Self> {
            if !nix::unistd::geteuid().is_root() {
                println!(
                    "SKIPPED: mounting a tmpfs needs root, and this test runs as uid {}; CI runs it as root (to run it here: sudo, or as root)",
                    nix::unistd::geteuid()
                );
                return None;
            }
            let dir = tempfile::tempdir().unwrap();
            let options = format!("size=4m,nr_inodes={inodes},mode=0700");
            let status = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(
                status.success(),
                "mounting a tmpfs as root failed: the test needs CAP_SYS_ADMIN (a container run without it cannot)"
            );
            Some(Self(dir))
        }
    }

    impl Drop for SmallFolder {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg(self.0.path())
                .status();
        }
    }

    /// Issue 46: rotation renamed the full file, then failed to create the new one (no inode
    /// left), and from then on every rotation renamed a path that no longer existed: with
    /// `refuse`, every call was refused until a restart. Now the full file stays, the trail
    /// goes on in it, and the first line after inodes are freed rotates.
    #[test]
    fn a_rotation_that_finds_no_inode_costs_no_line_and_heals_once_there_is_room() {
        let Some(folder) = SmallFolder::mount(16) else {
            return;
        };
        let dir = folder.0.path();
        let log = open_rotating_at(dir, 600);
        let path = dir.join("audit.jsonl");
        for _ in 0..3 {
            log.append(record()).unwrap();
        }
        let files = || super::super::chain::files_of(&path).unwrap();
        let rotated_before = files().len();
        // Take every inode left.
        let fillers: Vec<_> = (0..64)
            .map(|i| dir.join(format!("filler-{i}")))
            .take_while(|filler| std::fs::write(filler, b"").is_ok())
            .collect();
        assert!(std::fs::write(dir.join("one-more"), b"").is_err());

        for _ in 0..6 {
            log.append(record())
                .expect("a line while no file can be created");
            log.probe(1000)
                .expect("a call may run while no file can be created");
        }
        assert!(log.is_writable());
        assert_eq!(
            files().len(),
            rotated_before,
            "no rotation without an inode"
        );
        assert!(
            std::fs::metadata(&path).unwrap().len() > 600,
            "past its limit"
        );

        for filler in fillers {
            std::fs::remove_file(filler).unwrap();
        }
        log.append(record()).unwrap();
        assert_eq!(
            files().len(),
            rotated_before + 1,
            "rotated once there is room"
        );
        log.probe(1000).unwrap();
        let files = files();
        let verified = crate::audit::verify(&files).unwrap();
        assert_eq!(verified.lines, 10);
        assert_eq!(verified.continues_from, None);
        assert_eq!(log.lost_total.load(Ordering::Relaxed), 0);
        drop(log);
    }
}
