//! `run_python`'s sessions: the state a conversation keeps between calls, kept as data. Each
//! attempt still runs in a fresh container; the runner inside it writes what the script's
//! top-level names held as one archive, which comes back with the outputs, is kept here, and
//! goes in with the session's next attempt. The server never opens it: it is opaque bytes of
//! at most `FILE_AGENT_SESSION_MAX_MIB`, named by their SHA-256.
//!
//! Where: `<data_dir>/sessions/<space>/<id>/`, where `<space>` is the SHA-256 (cut to 32 hex
//! digits) of the owner key and `<id>` the SHA-256 of the owner key and the session's name
//! (the id the audit trail writes, never the name). In it, `record.json`, the server's own
//! record of the state it kept last (its SHA-256 and size), that state as `<sha256>.state`,
//! and `lock`, the session's lock across processes. A new state is written under its own name
//! first, its audit line is written, the record is switched to it by a rename, then the old
//! one is deleted: a crash leaves the old record and its state, or the new ones, never a
//! record without its state. A crash between the line and the switch leaves the record behind
//! the trail with the trail's state staged beside it: the next call moves the record forward
//! (the state's hash is the trail's, so nothing is taken from the folder's word).
//!
//! The folder is untrusted like an upload (its files are opened through `untrusted::door`, never
//! through a link, each read within a bound), and so is the record: whoever can write the
//! folder can rewrite both. So the truth is the audit trail: before a state goes into an
//! attempt, its SHA-256 must be the `state_after` of the session's last line in the trail
//! (`audit::sessions`, read from every replica's chain), and the record must say the same. A
//! state or a record changed in the folder is refused until the caller starts the session
//! over. With the trail off, only the record is there to check against.
//!
//! One call of a session at a time: in this process a mutex per session ([`Sessions::hold`]),
//! across the processes that share the folder (replicas) an exclusive `flock` of the
//! session's `lock` file ([`Sessions::lock`]), each held from before the state is read until
//! the state the call left is kept, so that each call starts from the state the one before
//! left, whichever server ran it.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::audit::sessions::{SessionStates, TrailState};
use crate::config::SessionsConfig;
use crate::owner::Owner;
use crate::sandbox::StateFile;
use crate::untrusted::door;

/// The sessions' folder in `FILE_AGENT_DATA_DIR`.
pub const SESSIONS_FOLDER: &str = "sessions";
/// The longest session name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// What the door's refusals call a file of a session's folder.
const SESSION_FILE: &str = "a file of a session's folder";
/// The server's record of a session, in its folder.
const RECORD_FILE: &str = "record.json";
/// The end of a kept state's file name (after its SHA-256).
const STATE_SUFFIX: &str = ".state";
/// The most bytes of a record read back (it holds a hash and two numbers).
const RECORD_MAX_BYTES: u64 = 4096;
/// The session's lock across processes, in its folder: only ever locked, never written.
const LOCK_FILE: &str = "lock";
/// How often a call waiting for a session another process holds tries its lock again.
const LOCK_RETRY: Duration = Duration::from_millis(50);
/// What a call waits for a session held by another server's call, beyond an attempt's time
/// limit (`SANDBOX_TIMEOUT`): that call's wait for a slot, its inputs and storing its outputs.
pub const BUSY_SLACK: Duration = Duration::from_secs(120);

/// Why a session cannot be used; each message says what to do.
#[derive(Debug, Error)]
pub enum SessionError {
    /// The name is empty, too long, or has characters outside the allowed ones.
    #[error(
        "session {0:?} is not a usable name: use 1 to {MAX_NAME_CHARS} letters, digits, '-', '_', '.' or ':'"
    )]
    BadName(String),
    /// Sessions are off (`FILE_AGENT_SESSIONS=off`).
    #[error(
        "sessions are off on this server (FILE_AGENT_SESSIONS=off); call run_python without `session`, each call then starts from nothing"
    )]
    Off,
    /// The owner keeps as many sessions as allowed.
    #[error(
        "you keep {0} sessions already (FILE_AGENT_SESSIONS_PER_OWNER); start one of them over with `reset_session: true`, reuse its name, or wait until an idle one expires"
    )]
    TooMany(usize),
    /// The kept state, or the record, is not what the audit trail recorded last for the
    /// session: changed in the folder.
    #[error(
        "the kept state of this session was changed outside file-agent ({side} says {found}, the audit trail recorded {recorded} last), so it is not restored; call run_python with `reset_session: true` to start the session over from nothing"
    )]
    Changed {
        /// What disagreed with the trail: the state file, or the record.
        side: &'static str,
        /// What the trail recorded last (`no state` when none).
        recorded: String,
        /// What the folder holds now (`missing` when nothing).
        found: String,
    },
    /// Another call (of another server sharing the folder) held the session past the bound.
    #[error(
        "this session is busy in another call (of another server sharing the data folder) and was not free after {waited_secs} s; call again once that call has ended, or use another session"
    )]
    Busy {
        /// How long this call waited.
        waited_secs: u64,
    },
    /// The audit trail could not be read, so no state can be checked against it.
    #[error("{0}")]
    Trail(String),
    /// The session's folder could not be read or written.
    #[error("the session's folder could not be {action}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// The server's record of a session: what it kept last.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SessionRecord {
    /// The hex SHA-256 of the state kept last; `None` before the first.
    state_sha256: Option<String>,
    /// Its size in bytes.
    bytes: u64,
}

/// A session opened for one attempt: its id, its folder, and the state it starts from.
#[derive(Debug, Clone)]
pub struct OpenSession {
    /// The hex SHA-256 of the owner key and the name: the id the audit trail writes.
    pub id: String,
    /// The state to restore, when there is one: its file, checked against the record (taken
    /// into the attempt's job, which streams it).
    pub state: Option<StateFile>,
    /// The hex SHA-256 of that state, checked against the record.
    pub state_sha256: Option<String>,
    /// Its size in bytes.
    pub state_bytes: Option<u64>,
    /// Whether the caller asked to start over.
    pub reset: bool,
    /// The `step` of the attempt's line: one more than the session's last line in the trail
    /// (0 without a trail).
    pub step: u64,
    dir: PathBuf,
}

impl OpenSession {
    /// Moves `state` (a file the attempt left, `sha256` its hash, computed as it was copied
    /// out; renamed when it is on the same file system, else copied) into the session's folder
    /// under its hash, beside the current one: nothing uses it until [`Self::switch`].
    pub fn stage(&self, state: &Path, sha256: &str) -> Result<(), SessionError> {
        let target = self.dir.join(format!("{sha256}{STATE_SUFFIX}"));
        let partial = self.dir.join(format!("{sha256}{STATE_SUFFIX}.partial"));
        // A rename replaces whatever is at `partial` (a link itself, never what it names);
        // across file systems the copy goes into a file created new through the door.
        if fs::rename(state, &partial).is_err() {
            let copied =
                File::open(state).and_then(|mut from| io::copy(&mut from, &mut fresh(&partial)?));
            copied.map_err(io_error("written"))?;
        }
        door::open_read_as(&partial, SESSION_FILE)
            .and_then(|file| file.sync_all())
            .and_then(|()| fs::rename(&partial, &target))
            .map_err(io_error("written"))
    }

    /// Makes the staged state `sha256` the session's: the record switched to it, then the
    /// previous state deleted.
    pub fn switch(&self, sha256: &str, bytes: u64) -> Result<(), SessionError> {
        let record = SessionRecord {
            state_sha256: Some(sha256.to_string()),
            bytes,
        };
        write_record(&self.dir, &record)?;
        remove_states(&self.dir, Some(sha256));
        Ok(())
    }

    /// Empties the session (its line, a reset, is in the trail): the record switched to no
    /// state, then the states deleted.
    pub fn clear(&self) -> Result<(), SessionError> {
        write_record(&self.dir, &SessionRecord::default())?;
        remove_states(&self.dir, None);
        Ok(())
    }
}

/// A session's lock across processes, held: the `flock` of its `lock` file, released when
/// dropped (the descriptor closed), by a crash too.
#[derive(Debug)]
pub struct SessionLockGuard {
    _file: File,
    /// Whether the session's folder was created for this call: a new session, or one whose
    /// folder expired (or was deleted).
    created: bool,
}

/// Checks a session name: 1 to [`MAX_NAME_CHARS`] ASCII letters, digits, `-`, `_`, `.`, `:`.
pub fn check_name(name: &str) -> Result<(), SessionError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':');
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || !name.chars().all(allowed) {
        return Err(SessionError::BadName(crate::text::excerpt(name, 80)));
    }
    Ok(())
}

/// The sessions of every owner, in their folder.
#[derive(Debug)]
pub struct Sessions {
    root: PathBuf,
    config: SessionsConfig,
    /// Held while a session is opened or created, so that one process counts an owner's
    /// sessions and creates one at a time.
    opening: Mutex<()>,
    /// One lock per session in use, by id: a call holds its session's from before it reads
    /// the state until the state it left is kept, so that two calls of one session run one
    /// after the other and each starts from the state the other left.
    in_use: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    /// The sessions' last states as the audit trail holds them; `None` with the trail off.
    trail: Option<Arc<SessionStates>>,
}

/// A session held by one call ([`Sessions::hold`]).
pub type SessionHold = tokio::sync::OwnedMutexGuard<()>;

impl Sessions {
    /// The sessions under `root` (created when needed), bounded by `config`; those idle past
    /// the expiry are deleted now.
    pub fn open(root: PathBuf, config: SessionsConfig) -> Self {
        let sessions = Self {
            root,
            config,
            opening: Mutex::new(()),
            in_use: Mutex::new(HashMap::new()),
            trail: None,
        };
        if let Ok(spaces) = fs::read_dir(&sessions.root) {
            for space in spaces.flatten() {
                sessions.expire(&space.path());
            }
        }
        sessions
    }

    /// Checks each state against `trail`, the sessions' last states as the audit trail holds
    /// them (`None`: the trail is off, only the record is checked).
    pub fn with_trail(mut self, trail: Option<Arc<SessionStates>>) -> Self {
        self.trail = trail;
        self
    }

    /// Waits until the trail's start-up read has ended (at once without a trail).
    pub async fn ready(&self) -> Result<(), SessionError> {
        match &self.trail {
            Some(trail) => trail.ready().await.map_err(SessionError::Trail),
            None => Ok(()),
        }
    }

    /// Whether the trail's last line of the session `open` is the one its attempt wrote,
    /// leaving `state`: only then is that state made the session's (a line that could not be
    /// written under `FILE_AGENT_AUDIT_ON_FAILURE=continue` leaves it as it was). Always
    /// without a trail.
    pub fn recorded(&self, open: &OpenSession, state: Option<&str>) -> bool {
        let Some(trail) = &self.trail else {
            return true;
        };
        trail.last(&open.id)
            == Some(TrailState {
                step: open.step,
                state: state.map(str::to_string),
            })
    }

    /// The settings in force.
    pub fn config(&self) -> &SessionsConfig {
        &self.config
    }

    /// The id of `owner`'s session `name`: the hex SHA-256 of the owner key and the name.
    pub fn id_of(owner: &Owner, name: &str) -> String {
        crate::audit::sha256_hex(format!("{}\n{name}", owner.as_str()).as_bytes())
    }

    /// Waits until no other call of this process holds session `id`, and holds it.
    pub async fn hold(&self, id: &str) -> SessionHold {
        let lock = {
            let mut in_use = self.in_use.lock().unwrap_or_else(|p| p.into_inner());
            in_use.retain(|_, lock| lock.strong_count() > 0);
            match in_use.get(id).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    in_use.insert(id.to_string(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }

    /// The folders of `owner`'s sessions, and of its session `name` with its id.
    fn place(&self, owner: &Owner, name: &str) -> (PathBuf, PathBuf, String) {
        let space = self
            .root
            .join(&crate::audit::sha256_hex(owner.as_str().as_bytes())[..32]);
        let id = Self::id_of(owner, name);
        (space.join(&id), space, id)
    }

    /// Takes `owner`'s session `name` across processes, creating its folder when new (unless
    /// the owner keeps as many as allowed), waiting at most `wait` while another server's call
    /// holds it. Take [`Self::hold`] first: this process's calls wait there, not here.
    pub async fn lock(
        &self,
        owner: &Owner,
        name: &str,
        wait: Duration,
    ) -> Result<SessionLockGuard, SessionError> {
        if !self.config.enabled {
            return Err(SessionError::Off);
        }
        check_name(name)?;
        let (dir, space, id) = self.place(owner, name);
        let (file, created) = {
            let _opening = self.opening.lock().unwrap_or_else(|p| p.into_inner());
            real_folder(&space)?;
            self.expire(&space);
            let created = !real_folder(&dir)?;
            if created {
                self.create(&space, &dir)?;
            }
            let file = door::open_lock_as(&dir.join(LOCK_FILE), true, SESSION_FILE)
                .map_err(io_error("locked"))?;
            (file, created)
        };
        let started = Instant::now();
        let mut said = false;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    return Ok(SessionLockGuard {
                        _file: file,
                        created,
                    });
                }
                Err(fs::TryLockError::WouldBlock) => {}
                Err(fs::TryLockError::Error(source)) => return Err(io_error("locked")(source)),
            }
            if started.elapsed() >= wait {
                return Err(SessionError::Busy {
                    waited_secs: started.elapsed().as_secs(),
                });
            }
            if !std::mem::replace(&mut said, true) {
                tracing::info!(session = %id, "the session is busy in a call of another server sharing the data folder; waiting for it");
            }
            tokio::time::sleep(LOCK_RETRY).await;
        }
    }

    /// Opens `owner`'s session `name`, held by `lock`, for an attempt (from nothing when
    /// `reset`): its state, checked against the trail's last line of the session and the
    /// record. Blocking: it reads the other servers' new lines and the state.
    pub fn begin(
        &self,
        owner: &Owner,
        name: &str,
        reset: bool,
        lock: &SessionLockGuard,
    ) -> Result<OpenSession, SessionError> {
        let (dir, _, id) = self.place(owner, name);
        touch(&dir);
        let trail = self.trail_last(&id)?;
        let mut open = OpenSession {
            step: match &self.trail {
                Some(_) => trail.as_ref().map_or(0, |last| last.step) + 1,
                None => 0,
            },
            id,
            state: None,
            state_sha256: None,
            state_bytes: None,
            reset,
            dir,
        };
        if reset {
            return Ok(open);
        }
        let record = read_record(&open.dir)?;
        let expected = match (&self.trail, trail) {
            (None, _) => record.state_sha256.clone(),
            (Some(_), last) => last.and_then(|last| last.state),
        };
        if lock.created && record.state_sha256.is_none() && expected.is_some() {
            tracing::warn!(session = %open.id, "the session's folder was gone (expired, or deleted by hand): it starts from nothing");
            return Ok(open);
        }
        // The state the trail names, once hashed: by the roll-forward below, else after it.
        let mut checked = None;
        if record.state_sha256 != expected {
            let refused = SessionError::Changed {
                side: "its record.json",
                recorded: shown(expected.as_deref()),
                found: shown(record.state_sha256.as_deref()),
            };
            // A server that stopped between an attempt's line and the record's switch left
            // the trail's state staged under its own name: the record is only behind, and the
            // state the trail names is there, checked by its hash. Roll the record forward.
            let (Some(_), Some(sha)) = (&self.trail, &expected) else {
                return Err(refused);
            };
            let Ok(state) = check_state(&open.dir, sha, self.config.max_bytes) else {
                return Err(refused);
            };
            tracing::warn!(session = %open.id, state = %sha, "the session's record was behind the audit trail (a server stopped between an attempt's line and the record's switch): moved forward to the trail's state, which is in the folder");
            open.switch(sha, state.bytes)?;
            checked = Some(state);
        }
        if let Some(sha) = expected {
            let state = match checked {
                Some(state) => state,
                None => check_state(&open.dir, &sha, self.config.max_bytes)?,
            };
            open.state_bytes = Some(state.bytes);
            open.state = Some(state);
            open.state_sha256 = Some(sha);
        }
        Ok(open)
    }

    /// The trail's last line of session `id`, once the other servers' new lines are read;
    /// `None` when it holds none, or without a trail.
    fn trail_last(&self, id: &str) -> Result<Option<TrailState>, SessionError> {
        let Some(trail) = &self.trail else {
            return Ok(None);
        };
        trail.catch_up().map_err(SessionError::Trail)?;
        Ok(trail.last(id))
    }

    /// Creates the folder of a new session, unless its owner keeps as many as allowed.
    fn create(&self, space: &Path, dir: &Path) -> Result<(), SessionError> {
        let kept = fs::read_dir(space).map_or(0, |entries| entries.flatten().count());
        if kept >= self.config.per_owner {
            return Err(SessionError::TooMany(kept));
        }
        fs::create_dir_all(dir).map_err(io_error("created"))?;
        write_record(dir, &SessionRecord::default())
    }

    /// Deletes the sessions in `space` unused for longer than the idle expiry.
    fn expire(&self, space: &Path) {
        let Ok(entries) = fs::read_dir(space) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let idle = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| now.duration_since(modified).ok());
            if idle.is_some_and(|idle| idle > self.config.idle_expiry)
                && let Err(error) = fs::remove_dir_all(entry.path())
            {
                tracing::warn!(%error, folder = %entry.path().display(), "could not delete an expired session");
            }
        }
    }
}

fn io_error(action: &'static str) -> impl FnOnce(io::Error) -> SessionError {
    move |source| SessionError::Io { action, source }
}

/// Marks the session used now (its folder's time is what the idle expiry reads).
fn touch(dir: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let now = fs::FileTimes::new().set_modified(SystemTime::now());
    let folder = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_DIRECTORY)
        .open(dir);
    if let Err(error) = folder.and_then(|folder| folder.set_times(now)) {
        tracing::warn!(%error, "could not mark a session used");
    }
}

/// A file of the session's folder created new at `path` through the door, whatever was there
/// removed first (a link is removed itself, never followed: `File::create` would have followed
/// one planted there and truncated the file it names).
fn fresh(path: &Path) -> io::Result<File> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    door::create_new_as(path, SESSION_FILE)
}

/// Whether `path` is a folder of the sessions' tree: `false` when there is nothing there yet,
/// an error that says what to do when it is anything but a folder (a symbolic link above all:
/// every file of a session is named through its folder, so a folder replaced by a link would
/// have the server write, and delete `*.state` files, wherever the link points).
fn real_folder(path: &Path) -> Result<bool, SessionError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(true),
        Ok(meta) => Err(SessionError::Io {
            action: "used",
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is {}, not a folder: a session's folder is never used through a link or in place of another file; remove it (that session then starts from nothing)",
                    path.display(),
                    if meta.is_symlink() {
                        "a symbolic link"
                    } else {
                        "a file"
                    }
                ),
            ),
        }),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(SessionError::Io {
            action: "used",
            source,
        }),
    }
}

/// The record, written to a temporary file and renamed over the old one.
fn write_record(dir: &Path, record: &SessionRecord) -> Result<(), SessionError> {
    let bytes = serde_json::to_vec(record).map_err(|e| SessionError::Io {
        action: "written",
        source: e.into(),
    })?;
    let partial = dir.join(format!("{RECORD_FILE}.partial"));
    let write = || -> io::Result<()> {
        let mut file = fresh(&partial)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        fs::rename(&partial, dir.join(RECORD_FILE))
    };
    write().map_err(io_error("written"))
}

/// A hash as the refusal shows it; `no state` for none.
fn shown(sha256: Option<&str>) -> String {
    sha256.map_or_else(|| "no state".into(), str::to_string)
}

/// The record, read within [`RECORD_MAX_BYTES`]: one that does not parse is a changed state.
fn read_record(dir: &Path) -> Result<SessionRecord, SessionError> {
    let bytes = door::read_within(&dir.join(RECORD_FILE), SESSION_FILE, RECORD_MAX_BYTES)
        .map_err(io_error("read"))?;
    serde_json::from_slice(&bytes).map_err(|_| SessionError::Changed {
        side: "its record.json",
        recorded: "a record file-agent wrote".into(),
        found: "bytes that do not parse".into(),
    })
}

/// The state `sha256` of the session in `dir`, hashed as it is read (within `max_bytes`, never
/// held whole in memory) and checked against its name: the file the attempt streams.
fn check_state(dir: &Path, sha256: &str, max_bytes: u64) -> Result<StateFile, SessionError> {
    let changed = |found: String| SessionError::Changed {
        side: "its state file",
        recorded: sha256.to_string(),
        found,
    };
    let path = dir.join(format!("{sha256}{STATE_SUFFIX}"));
    let (found, bytes) = match door::sha256_within(&path, SESSION_FILE, max_bytes) {
        Ok(hashed) => hashed,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(changed("missing".into()));
        }
        Err(error) => return Err(changed(format!("unreadable ({error})"))),
    };
    if found != sha256 {
        return Err(changed(found));
    }
    Ok(StateFile {
        path,
        sha256: found,
        bytes,
    })
}

/// Deletes the session's state files but `keep`'s.
fn remove_states(dir: &Path, keep: Option<&str>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let kept = keep.map(|sha| format!("{sha}{STATE_SUFFIX}"));
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.contains(STATE_SUFFIX) && Some(&name) != kept.as_ref() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditLog, Record, SessionMark, sha256_hex};

    fn sessions(root: &Path, per_owner: usize) -> Sessions {
        Sessions::open(
            root.to_path_buf(),
            SessionsConfig {
                per_owner,
                max_bytes: 1024,
                ..SessionsConfig::default()
            },
        )
    }

    const WAIT: Duration = Duration::from_secs(5);

    /// Locks and opens `owner`'s session `name`.
    async fn begin(
        store: &Sessions,
        owner: &Owner,
        name: &str,
        reset: bool,
    ) -> Result<(OpenSession, SessionLockGuard), SessionError> {
        let lock = store.lock(owner, name, WAIT).await?;
        Ok((store.begin(owner, name, reset, &lock)?, lock))
    }

    /// A folder with an audit chain, and sessions checked against it (read at start).
    async fn with_trail() -> (tempfile::TempDir, AuditLog, Sessions) {
        let root = tempfile::tempdir().unwrap();
        let audit_config = crate::audit::tests::config(1 << 20);
        let log = AuditLog::open_chain(&root.path().join("audit"), "a", audit_config)
            .unwrap()
            .follow_sessions(&root.path().join("audit"));
        let store =
            sessions(&root.path().join("sessions"), 5).with_trail(log.session_states().cloned());
        store.ready().await.unwrap();
        (root, log, store)
    }

    /// Keeps `bytes` as the state `open` left.
    fn keep(root: &Path, open: &OpenSession, bytes: &[u8]) -> String {
        let left = root.join("left");
        fs::write(&left, bytes).unwrap();
        let sha = sha256_hex(bytes);
        open.stage(&left, &sha).unwrap();
        open.switch(&sha, bytes.len() as u64).unwrap();
        sha
    }

    /// A server stopped after the attempt's line and before the record's switch: the trail
    /// names the staged state, the record the one before. The next call starts from the
    /// trail's state (it is in the folder, and its hash is the trail's) and the record follows.
    #[tokio::test]
    async fn a_record_left_behind_the_trail_by_a_stop_rolls_forward() {
        let (root, log, store) = with_trail().await;
        let alice = Owner::user("header", None, "alice");
        let (first, lock) = begin(&store, &alice, "s", false).await.unwrap();
        let one = keep(root.path(), &first, b"one");
        log.append(line(&first, Some(&one))).unwrap();
        drop(lock);
        let (second, lock) = begin(&store, &alice, "s", false).await.unwrap();
        let left = root.path().join("left");
        fs::write(&left, b"two").unwrap();
        let two = sha256_hex(b"two");
        second.stage(&left, &two).unwrap();
        log.append(line(&second, Some(&two))).unwrap();
        drop(lock); // the stop: no switch

        let (third, _lock) = begin(&store, &alice, "s", false).await.unwrap();
        assert_eq!(third.state_sha256.as_deref(), Some(two.as_str()));
        assert_eq!(
            fs::read(&third.state.as_ref().unwrap().path).unwrap(),
            b"two"
        );
        assert_eq!(read_record(&third.dir).unwrap().state_sha256, Some(two));
        assert!(!third.dir.join(format!("{one}{STATE_SUFFIX}")).exists());
    }

    /// Whoever holds the folder plants links where the server writes: a link at the record's
    /// temporary name is replaced, never followed (the file it names is not truncated), and a
    /// session's folder replaced by a link to another folder is refused by name.
    #[tokio::test]
    async fn links_planted_in_a_session_s_folder_are_never_followed() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let store = sessions(&root.path().join("sessions"), 5);
        let alice = Owner::user("header", None, "alice");
        let (first, lock) = begin(&store, &alice, "s", false).await.unwrap();
        let victim = root.path().join("victim");
        fs::write(&victim, b"not the server's").unwrap();
        symlink(&victim, first.dir.join(format!("{RECORD_FILE}.partial"))).unwrap();
        symlink(
            &victim,
            first
                .dir
                .join(format!("{}{STATE_SUFFIX}.partial", sha256_hex(b"one"))),
        )
        .unwrap();
        keep(root.path(), &first, b"one");
        assert_eq!(fs::read(&victim).unwrap(), b"not the server's");
        assert_eq!(
            read_record(&first.dir).unwrap().state_sha256,
            Some(sha256_hex(b"one"))
        );
        drop(lock);

        let elsewhere = root.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::write(elsewhere.join("kept.state"), b"someone's").unwrap();
        fs::remove_dir_all(&first.dir).unwrap();
        symlink(&elsewhere, &first.dir).unwrap();
        let error = begin(&store, &alice, "s", false)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("is a symbolic link, not a folder") && error.contains("remove it"),
            "{error}"
        );
        let left: Vec<_> = fs::read_dir(&elsewhere)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, ["kept.state"]);
    }

    #[test]
    fn names_are_short_and_plain() {
        for good in ["a", "chat-1", "3f2a_b.c:d", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "../x", "a/b", "é", &"x".repeat(65)] {
            let error = check_name(bad).unwrap_err().to_string();
            assert!(error.contains("1 to 64 letters"), "{error}");
        }
    }

    #[tokio::test]
    async fn without_a_trail_a_state_is_checked_against_its_record() {
        let root = tempfile::tempdir().unwrap();
        let store = sessions(root.path(), 5);
        let alice = Owner::user("header", None, "alice");
        let (first, lock) = begin(&store, &alice, "s", false).await.unwrap();
        assert!(first.state.is_none());
        let left = root.path().join("left");
        fs::write(&left, b"state one").unwrap();
        let sha = sha256_hex(b"state one");
        first.stage(&left, &sha).unwrap();
        drop(lock);
        let (staged, lock) = begin(&store, &alice, "s", false).await.unwrap();
        assert!(staged.state.is_none(), "staged, not yet switched");
        drop(lock);
        first.switch(&sha, 9).unwrap();
        let (second, _lock) = begin(&store, &alice, "s", false).await.unwrap();
        let kept = second.state.clone().unwrap();
        assert_eq!(fs::read(&kept.path).unwrap(), b"state one");
        assert_eq!((kept.sha256.as_str(), kept.bytes), (sha.as_str(), 9));
        assert_eq!(second.state_sha256.as_deref(), Some(sha.as_str()));
        assert_eq!(second.id, first.id);
        // Another owner naming the same session has another one, empty.
        let (bob, _bob_lock) = begin(&store, &Owner::user("header", None, "bob"), "s", false)
            .await
            .unwrap();
        assert!(bob.state.is_none());
        assert_ne!(bob.id, first.id);
        drop(_lock);
        // Changed in the folder: refused, with the hashes; a reset starts over.
        fs::write(second.dir.join(format!("{sha}.state")), b"state two").unwrap();
        let error = begin(&store, &alice, "s", false).await.unwrap_err();
        assert!(matches!(error, SessionError::Changed { .. }), "{error}");
        assert!(error.to_string().contains("reset_session"), "{error}");
        let (reset, lock) = begin(&store, &alice, "s", true).await.unwrap();
        assert!(reset.state.is_none());
        reset.clear().unwrap();
        drop(lock);
        assert!(
            begin(&store, &alice, "s", false)
                .await
                .unwrap()
                .0
                .state
                .is_none()
        );
    }

    /// The trail's line of an attempt of `open` that left `after`.
    fn line(open: &OpenSession, after: Option<&str>) -> Record {
        Record {
            time: crate::time::rfc3339_now(),
            status: "ok".into(),
            session: Some(SessionMark {
                id: open.id.clone(),
                state_before: open.state_sha256.clone(),
                state_after: after.map(str::to_string),
                reset: open.reset,
                step: open.step,
            }),
            ..Record::default()
        }
    }

    #[tokio::test]
    async fn with_a_trail_a_state_and_record_rewritten_together_are_refused() {
        let (root, log, store) = with_trail().await;
        let alice = Owner::user("header", None, "alice");
        let (first, lock) = begin(&store, &alice, "s", false).await.unwrap();
        assert_eq!(first.step, 1);
        let sha = keep(root.path(), &first, b"one");
        // Kept in the folder but not in the trail (its line was never written): not restored.
        drop(lock);
        let error = begin(&store, &alice, "s", false).await.unwrap_err();
        assert!(error.to_string().contains("record.json says"), "{error}");
        log.append(line(&first, Some(&sha))).unwrap();
        let (second, lock) = begin(&store, &alice, "s", false).await.unwrap();
        let kept = second.state.clone().unwrap();
        assert_eq!(fs::read(&kept.path).unwrap(), b"one");
        assert_eq!(second.step, 2);

        // Whoever holds the folder writes another state and a record that names it.
        let forged = keep(root.path(), &second, b"forged");
        drop(lock);
        let error = begin(&store, &alice, "s", false)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("its record.json says {forged}"))
                && error.contains(&format!("recorded {sha} last")),
            "{error}"
        );
        // The state alone, changed under its own name: refused too.
        fs::write(second.dir.join(format!("{forged}.state")), b"x").unwrap();
        second.switch(&sha, 3).unwrap();
        fs::write(second.dir.join(format!("{sha}.state")), b"two").unwrap();
        let error = begin(&store, &alice, "s", false)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("its state file says"), "{error}");

        // Started over: the trail's reset line says "from nothing".
        let (reset, lock) = begin(&store, &alice, "s", true).await.unwrap();
        log.append(line(&reset, None)).unwrap();
        assert!(store.recorded(&reset, None));
        reset.clear().unwrap();
        drop(lock);
        let (after, _lock) = begin(&store, &alice, "s", false).await.unwrap();
        assert!(after.state.is_none());
        assert_eq!(after.step, 3);
    }

    #[tokio::test]
    async fn a_session_held_by_another_process_is_busy_past_the_bound() {
        let root = tempfile::tempdir().unwrap();
        let store = sessions(root.path(), 5);
        let other = sessions(root.path(), 5);
        let alice = Owner::user("header", None, "alice");
        let _held = other.lock(&alice, "s", WAIT).await.unwrap();
        let error = store
            .lock(&alice, "s", Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(error, SessionError::Busy { .. }), "{error}");
        assert!(
            error.to_string().contains("busy in another call"),
            "{error}"
        );
        drop(_held);
        store.lock(&alice, "s", WAIT).await.unwrap();
    }

    #[tokio::test]
    async fn an_owner_keeps_at_most_its_bound_of_sessions() {
        let root = tempfile::tempdir().unwrap();
        let store = sessions(root.path(), 2);
        let alice = Owner::user("header", None, "alice");
        begin(&store, &alice, "a", false).await.unwrap();
        begin(&store, &alice, "b", false).await.unwrap();
        begin(&store, &alice, "a", false).await.unwrap();
        let error = begin(&store, &alice, "c", false).await.unwrap_err();
        assert!(matches!(error, SessionError::TooMany(2)), "{error}");
        begin(&store, &Owner::anonymous(), "c", false)
            .await
            .unwrap();
    }
}
