//! `run_python`'s sessions: the state a conversation keeps between calls, kept as data. Each
//! attempt still runs in a fresh container; the runner inside it writes what the script's
//! top-level names held as one archive, which comes back with the outputs, is kept here, and
//! goes in with the session's next attempt. The server never opens it: it is opaque bytes of
//! at most `FILE_AGENT_SESSION_MAX_MIB`, named by their SHA-256.
//!
//! Where: `<data_dir>/sessions/<space>/<id>/`, where `<space>` is the SHA-256 (cut to 32 hex
//! digits) of the owner key and `<id>` the SHA-256 of the owner key and the session's name
//! (the id the audit trail writes, never the name). In it, `record.json`, the server's own
//! record of the state it kept last (its SHA-256 and size), and that state as
//! `<sha256>.state`. A new state is written under its own name first, the record is switched
//! to it by a rename, then the old one is deleted: a crash leaves the old record and its
//! state, or the new ones, never a record without its state.
//!
//! The folder is untrusted like an upload: before a state goes into an attempt its SHA-256 is
//! computed again and compared with the record, and a state changed in the folder is refused
//! until the caller starts the session over. Whoever rewrites the record too is still seen by
//! a reviewer: the session's audit lines chain from state to state (`state_before` of each is
//! `state_after` of the one before), and the forged state breaks that chain.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use nix::fcntl::OFlag;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::config::SessionsConfig;
use crate::owner::Owner;
use crate::sandbox::StateFile;

/// The sessions' folder in `FILE_AGENT_DATA_DIR`.
pub const SESSIONS_FOLDER: &str = "sessions";
/// The longest session name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// The server's record of a session, in its folder.
const RECORD_FILE: &str = "record.json";
/// The end of a kept state's file name (after its SHA-256).
const STATE_SUFFIX: &str = ".state";
/// The most bytes of a record read back (it holds a hash and two numbers).
const RECORD_MAX_BYTES: u64 = 4096;

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
    /// The kept state is not the one the server recorded: changed in the folder.
    #[error(
        "the kept state of this session was changed outside file-agent (its SHA-256 is {found}, file-agent recorded {recorded}), so it is not restored; call run_python with `reset_session: true` to start the session over from nothing"
    )]
    Changed {
        /// What the server recorded last.
        recorded: String,
        /// What the folder holds now (`missing` when nothing).
        found: String,
    },
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
    dir: PathBuf,
}

impl OpenSession {
    /// Moves `state` (a file the attempt left, `sha256` its hash, computed as it was copied
    /// out; renamed when it is on the same file system, else copied) into the session's folder
    /// under its hash, beside the current one: nothing uses it until [`Self::switch`].
    pub fn stage(&self, state: &Path, sha256: &str) -> Result<(), SessionError> {
        let target = self.dir.join(format!("{sha256}{STATE_SUFFIX}"));
        let partial = self.dir.join(format!("{sha256}{STATE_SUFFIX}.partial"));
        if fs::rename(state, &partial).is_err() {
            fs::copy(state, &partial).map_err(io_error("written"))?;
        }
        File::open(&partial)
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
        };
        if let Ok(spaces) = fs::read_dir(&sessions.root) {
            for space in spaces.flatten() {
                sessions.expire(&space.path());
            }
        }
        sessions
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

    /// Opens `owner`'s session `name` for an attempt (creating it when new, emptied when
    /// `reset`), with its state checked against the record.
    pub fn begin(
        &self,
        owner: &Owner,
        name: &str,
        reset: bool,
    ) -> Result<OpenSession, SessionError> {
        if !self.config.enabled {
            return Err(SessionError::Off);
        }
        check_name(name)?;
        let key = owner.as_str();
        let space = self
            .root
            .join(&crate::audit::sha256_hex(key.as_bytes())[..32]);
        let id = Self::id_of(owner, name);
        let dir = space.join(&id);
        let _opening = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        self.expire(&space);
        if !dir.is_dir() {
            self.create(&space, &dir)?;
        } else if reset {
            write_record(&dir, &SessionRecord::default())?;
            remove_states(&dir, None);
        }
        touch(&dir);
        let record = read_record(&dir)?;
        let state = match &record.state_sha256 {
            Some(sha) => Some(check_state(&dir, sha, self.config.max_bytes)?),
            None => None,
        };
        Ok(OpenSession {
            id,
            state,
            state_bytes: record.state_sha256.as_ref().map(|_| record.bytes),
            state_sha256: record.state_sha256,
            reset,
            dir,
        })
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
    let now = fs::FileTimes::new().set_modified(SystemTime::now());
    if let Err(error) = File::open(dir).and_then(|folder| folder.set_times(now)) {
        tracing::warn!(%error, "could not mark a session used");
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
        let mut file = File::create(&partial)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        fs::rename(&partial, dir.join(RECORD_FILE))
    };
    write().map_err(io_error("written"))
}

/// The record, read within [`RECORD_MAX_BYTES`]: one that does not parse is a changed state.
fn read_record(dir: &Path) -> Result<SessionRecord, SessionError> {
    let bytes = read_bounded(&dir.join(RECORD_FILE), RECORD_MAX_BYTES).map_err(io_error("read"))?;
    serde_json::from_slice(&bytes).map_err(|_| SessionError::Changed {
        recorded: "(its record no longer parses)".into(),
        found: "unknown".into(),
    })
}

/// The state `sha256` of the session in `dir`, hashed as it is read (within `max_bytes`, never
/// held whole in memory) and checked against its name: the file the attempt streams.
fn check_state(dir: &Path, sha256: &str, max_bytes: u64) -> Result<StateFile, SessionError> {
    let changed = |found: String| SessionError::Changed {
        recorded: sha256.to_string(),
        found,
    };
    let path = dir.join(format!("{sha256}{STATE_SUFFIX}"));
    let (found, bytes) = match hash_bounded(&path, max_bytes) {
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

/// A regular file opened without following a link and without blocking.
fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// A regular file's bytes, at most `max_bytes` (a longer one is an error).
fn read_bounded(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_regular(path)?
        .take(max_bytes + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(io::Error::other(format!("larger than {max_bytes} bytes")));
    }
    Ok(bytes)
}

/// A regular file's hex SHA-256 and size, read a block at a time, at most `max_bytes` (a longer
/// one is an error).
fn hash_bounded(path: &Path, max_bytes: u64) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let bytes = io::copy(&mut open_regular(path)?.take(max_bytes + 1), &mut hasher)?;
    if bytes > max_bytes {
        return Err(io::Error::other(format!("larger than {max_bytes} bytes")));
    }
    Ok((hex::encode(hasher.finalize()), bytes))
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

    #[test]
    fn a_state_kept_comes_back_and_one_changed_in_the_folder_is_refused_until_reset() {
        let root = tempfile::tempdir().unwrap();
        let store = sessions(root.path(), 5);
        let alice = Owner::user("header", None, "alice");
        let first = store.begin(&alice, "s", false).unwrap();
        assert!(first.state.is_none());
        let left = root.path().join("left");
        fs::write(&left, b"state one").unwrap();
        let sha = crate::audit::sha256_hex(b"state one");
        first.stage(&left, &sha).unwrap();
        assert!(
            store.begin(&alice, "s", false).unwrap().state.is_none(),
            "staged, not yet switched"
        );
        first.switch(&sha, 9).unwrap();
        let second = store.begin(&alice, "s", false).unwrap();
        let kept = second.state.clone().unwrap();
        assert_eq!(fs::read(&kept.path).unwrap(), b"state one");
        assert_eq!((kept.sha256.as_str(), kept.bytes), (sha.as_str(), 9));
        assert_eq!(second.state_sha256.as_deref(), Some(sha.as_str()));
        assert_eq!(second.id, first.id);
        // Another owner naming the same session has another one, empty.
        let bob = store
            .begin(&Owner::user("header", None, "bob"), "s", false)
            .unwrap();
        assert!(bob.state.is_none());
        assert_ne!(bob.id, first.id);
        // Changed in the folder: refused, with the hashes; a reset starts over.
        fs::write(second.dir.join(format!("{sha}.state")), b"state two").unwrap();
        let error = store.begin(&alice, "s", false).unwrap_err();
        assert!(matches!(error, SessionError::Changed { .. }), "{error}");
        assert!(error.to_string().contains("reset_session"), "{error}");
        let reset = store.begin(&alice, "s", true).unwrap();
        assert!(reset.state.is_none());
        assert!(store.begin(&alice, "s", false).unwrap().state.is_none());
    }

    #[test]
    fn an_owner_keeps_at_most_its_bound_of_sessions() {
        let root = tempfile::tempdir().unwrap();
        let store = sessions(root.path(), 2);
        let alice = Owner::user("header", None, "alice");
        store.begin(&alice, "a", false).unwrap();
        store.begin(&alice, "b", false).unwrap();
        store.begin(&alice, "a", false).unwrap();
        let error = store.begin(&alice, "c", false).unwrap_err();
        assert!(matches!(error, SessionError::TooMany(2)), "{error}");
        store.begin(&Owner::anonymous(), "c", false).unwrap();
    }
}
