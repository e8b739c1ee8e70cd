//! The last state the trail holds for each session: what `tools::session` checks a kept state
//! against before it goes into an attempt, so that a state rewritten in the sessions' folder
//! (with the server's record beside it) is refused instead of restored.
//!
//! The map lives in memory, one entry per session id: the `state_after` and the `step` of the
//! session's last line ([`super::SessionMark`]). It is filled at start-up by reading every
//! chain of the audit folder (each replica writes its own) through the one verifier
//! ([`super::Follower`]), which hands on only lines whose links hold: a chain that breaks is
//! named in a warning and not believed past the break. Then each line this server writes is
//! noted as it is written ([`SessionStates::note`]), and before each session call the lines the
//! other chains gained since they were last read are read ([`SessionStates::catch_up`]): the
//! call holds the session's lock by then, so no other server is writing its lines meanwhile.
//! A session's lines are ordered by their `step`, never by their time or their chain.
//!
//! Reading the whole trail takes a while on a long one, so it runs in the background from
//! start-up, and session calls wait for it ([`SessionStates::ready`]): none is answered from a
//! map half read. It decides nothing about a session's folder (`tools::session` does) and
//! writes nothing.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use super::{Follower, Record, SessionMark, chain};

/// What the trail says last of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrailState {
    /// The `step` of the session's last line (0 for lines written before steps).
    pub step: u64,
    /// Its `state_after`, hex: the state the session holds now; `None` when it holds none
    /// (started over, or never kept one).
    pub state: Option<String>,
}

/// One session's entry, in 32-byte hashes rather than hex, to keep the map small.
#[derive(Debug, Clone, Copy)]
struct Last {
    step: u64,
    state: Option<[u8; 32]>,
}

/// What the start-up read found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The chains read.
    pub chains: usize,
    /// Their lines accepted.
    pub lines: u64,
    /// The sessions found.
    pub sessions: usize,
    /// The chains that broke, with where.
    pub broken: Vec<String>,
}

/// The last state of every session, as the trail holds it.
#[derive(Debug)]
pub struct SessionStates {
    /// The audit folder: every chain in it is read.
    folder: PathBuf,
    /// This server's own chain (its live file): after start-up, its lines are noted as they
    /// are written, never read back.
    own: PathBuf,
    /// The map, by session id. Locked only to look up or to apply marks already read.
    last: Mutex<HashMap<[u8; 32], Last>>,
    /// Each chain's reader, by chain name, with where it stopped. Locked while chains are read
    /// (one reader at a time; the writer never waits on it).
    followers: Mutex<BTreeMap<String, Follower>>,
    /// `None` until the start-up read ends; then whether it could list the folder.
    ready: tokio::sync::watch::Sender<Option<Result<(), String>>>,
}

impl SessionStates {
    /// The states of the chains in `folder`, this server's being the one whose live file is
    /// `own`; nothing is read until [`Self::load`].
    pub fn new(folder: &Path, own: &Path) -> Self {
        Self {
            folder: folder.to_path_buf(),
            own: own.to_path_buf(),
            last: Mutex::new(HashMap::new()),
            followers: Mutex::new(BTreeMap::new()),
            ready: tokio::sync::watch::channel(None).0,
        }
    }

    /// Reads every chain of the folder, this server's included, and opens the map to the
    /// session calls (blocking: run it on a thread of its own). A chain that breaks is warned
    /// of and believed up to its break.
    pub fn load(&self) -> Loaded {
        let started = Instant::now();
        let read = self.read_chains(true);
        let loaded = match &read {
            Ok(loaded) => loaded.clone(),
            Err(_) => Loaded::default(),
        };
        let cpu = thread_cpu_seconds();
        tracing::info!(
            chains = loaded.chains,
            lines = loaded.lines,
            sessions = loaded.sessions,
            ms = started.elapsed().as_millis() as u64,
            cpu_seconds = cpu,
            "audit trail read for the sessions' last states"
        );
        self.ready.send_replace(Some(read.map(drop)));
        loaded
    }

    /// Waits until the start-up read has ended: `Err` (with what to do) when the audit folder
    /// could not be listed.
    pub async fn ready(&self) -> Result<(), String> {
        let mut ready = self.ready.subscribe();
        let outcome = ready
            .wait_for(Option::is_some)
            .await
            .map(|outcome| outcome.clone());
        match outcome {
            Ok(Some(result)) => result,
            _ => Err("the audit trail was not read".into()),
        }
    }

    /// Reads the lines the other servers' chains gained since they were last read (blocking).
    pub fn catch_up(&self) -> Result<(), String> {
        self.read_chains(false).map(drop)
    }

    /// What the trail says last of session `id` (hex); `None` when it holds no line of it.
    pub fn last(&self, id: &str) -> Option<TrailState> {
        let key = decode(id)?;
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.get(&key).map(|last| TrailState {
            step: last.step,
            state: last.state.map(hex::encode),
        })
    }

    /// Notes `mark`, of a line just written (or read): it becomes the session's last unless
    /// the map holds a later step.
    pub fn note(&self, mark: &SessionMark) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        apply(&mut last, mark);
    }

    /// Reads the chains (`own` too at start-up, else only the others'): what was read, or why
    /// the folder could not be listed.
    fn read_chains(&self, with_own: bool) -> Result<Loaded, String> {
        let chains = chain::chains(&self.folder).map_err(|e| {
            format!(
                "the audit folder {} cannot be listed ({e}), so no session's state can be checked against the trail; check FILE_AGENT_AUDIT_DIR and its permissions",
                self.folder.display()
            )
        })?;
        let mut followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
        let mut loaded = Loaded::default();
        for chain in chains {
            let live = chain.files.last().cloned().unwrap_or_default();
            if !with_own && live == self.own {
                continue;
            }
            let follower = followers.entry(chain.name.clone()).or_default();
            let marks = follow(follower, &chain, &live);
            loaded.chains += 1;
            loaded.lines += follower.lines();
            if let Some(broken) = follower.broken() {
                loaded.broken.push(format!("{}: {broken}", chain.name));
            }
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            for mark in &marks {
                apply(&mut last, mark);
            }
        }
        loaded.sessions = self.last.lock().map_or(0, |last| last.len());
        Ok(loaded)
    }
}

/// The session marks of `chain`'s lines not read yet by `follower`; a break found now is
/// warned of (once: nothing is read past it later).
fn follow(follower: &mut Follower, chain: &chain::Chain, live: &Path) -> Vec<SessionMark> {
    let was_broken = follower.broken().is_some();
    let mut marks = Vec::new();
    let listed = follower.follow(
        || chain::files_of(live),
        |record: Record| marks.extend(record.session),
    );
    if let Err(error) = listed {
        tracing::warn!(chain = %chain.name, %error, "the sessions' last states: the chain's files cannot be listed; its new lines are read at the next session call");
    }
    if let (false, Some(broken)) = (was_broken, follower.broken()) {
        tracing::warn!(chain = %chain.name, %broken, "the sessions' last states: this chain breaks here, so its lines from there on are not believed: a session whose last line is past the break is refused until it starts over (run `file-agent audit verify`)");
    }
    marks
}

/// Makes `mark` its session's last in `last`, unless a later step is there already (equal
/// steps: the one read last, as lines without steps are ordered by reading).
fn apply(last: &mut HashMap<[u8; 32], Last>, mark: &SessionMark) {
    let Some(id) = decode(&mark.id) else {
        return;
    };
    let state = match &mark.state_after {
        Some(hash) => match decode(hash) {
            Some(hash) => Some(hash),
            None => return,
        },
        None => None,
    };
    let entry = last.entry(id).or_insert(Last { step: 0, state });
    if mark.step >= entry.step {
        *entry = Last {
            step: mark.step,
            state,
        };
    }
}

/// The CPU time of the calling thread so far, in seconds (0 when it cannot be read): the
/// start-up read's cost, whatever else the machine does meanwhile.
fn thread_cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_THREAD).map_or(0.0, |usage| {
        let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        seconds(usage.user_time()) + seconds(usage.system_time())
    })
}

/// 64 hex digits as 32 bytes; `None` for anything else.
fn decode(hex_text: &str) -> Option<[u8; 32]> {
    let mut bytes = [0; 32];
    hex::decode_to_slice(hex_text, &mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditLog, sha256_hex};
    use crate::config::AuditConfig;

    fn config() -> AuditConfig {
        crate::audit::tests::config(1 << 20)
    }

    fn line(id: &str, after: Option<&str>, step: u64) -> Record {
        Record {
            time: crate::time::rfc3339_now(),
            status: "ok".into(),
            session: Some(SessionMark {
                id: sha256_hex(id.as_bytes()),
                state_before: None,
                state_after: after.map(|s| sha256_hex(s.as_bytes())),
                reset: false,
                step,
            }),
            ..Record::default()
        }
    }

    fn state(states: &SessionStates, id: &str) -> Option<Option<String>> {
        states.last(&sha256_hex(id.as_bytes())).map(|t| t.state)
    }

    fn hashed(text: &str) -> Option<Option<String>> {
        Some(Some(sha256_hex(text.as_bytes())))
    }

    #[test]
    fn the_last_step_wins_across_chains_and_a_broken_chain_is_believed_up_to_its_break() {
        let folder = tempfile::tempdir().unwrap();
        let a = AuditLog::open_chain(folder.path(), "a", config()).unwrap();
        let b = AuditLog::open_chain(folder.path(), "b", config()).unwrap();
        a.append(line("s", Some("one"), 1)).unwrap();
        b.append(line("s", Some("two"), 2)).unwrap();
        a.append(line("t", Some("t1"), 1)).unwrap();
        a.append(line("t", Some("t2"), 2)).unwrap();
        a.append(line("t", Some("t3"), 3)).unwrap();
        let states = SessionStates::new(folder.path(), a.path());
        let loaded = states.load();
        assert_eq!((loaded.chains, loaded.lines, loaded.sessions), (2, 5, 2));
        assert_eq!(state(&states, "s"), hashed("two"), "step 2, in chain b");
        assert_eq!(state(&states, "t"), hashed("t3"));
        assert_eq!(state(&states, "u"), None);

        // Line 3 of chain a (t2) is changed: a's lines from there on are not believed.
        let text = std::fs::read_to_string(a.path()).unwrap();
        let forged = sha256_hex(b"forged");
        let changed = text.replacen(&sha256_hex(b"t2"), &forged, 1);
        std::fs::write(a.path(), changed).unwrap();
        let states = SessionStates::new(folder.path(), a.path());
        let loaded = states.load();
        assert_eq!(loaded.broken.len(), 1, "{loaded:?}");
        assert!(loaded.broken[0].contains("line 4"), "{loaded:?}");
        assert_eq!(state(&states, "t"), hashed("t1"), "{loaded:?}");
        assert_eq!(state(&states, "s"), hashed("two"));
    }

    #[test]
    fn the_others_new_lines_are_read_from_where_the_reading_stopped_across_a_rotation() {
        let folder = tempfile::tempdir().unwrap();
        let own = AuditLog::open_chain(folder.path(), "own", config()).unwrap();
        let small = AuditConfig {
            max_bytes: 700,
            ..config()
        };
        let other = AuditLog::open_chain(folder.path(), "other", small).unwrap();
        other.append(line("s", Some("one"), 1)).unwrap();
        let states = SessionStates::new(folder.path(), own.path());
        states.load();
        assert_eq!(state(&states, "s"), hashed("one"));
        // Its own lines are noted as written, never read back after start-up.
        own.append(line("own", Some("x"), 1)).unwrap();
        states.catch_up().unwrap();
        assert_eq!(state(&states, "own"), None);
        for step in 2..=6 {
            other
                .append(line("s", Some(&format!("v{step}")), step))
                .unwrap();
        }
        let rotated = std::fs::read_dir(folder.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("other.jsonl.0"))
            .count();
        assert!(rotated >= 2, "the chain rotated");
        states.catch_up().unwrap();
        assert_eq!(state(&states, "s"), hashed("v6"));
        let followers = states.followers.lock().unwrap();
        let follower = &followers["other.jsonl"];
        assert_eq!(follower.lines(), 6, "every line read once");
        assert!(follower.broken().is_none());
    }

    /// This process's resident memory now, in KiB (`VmRSS`).
    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// The start-up read of a trail of `FILE_AGENT_BENCH_LINES` lines (default 100 000), one
    /// session mark in four: its CPU time and the memory the map keeps. `cargo nextest run
    /// --run-ignored only start_up_read --no-capture`.
    #[test]
    #[ignore = "a measure, not a check"]
    fn start_up_read_costs() {
        let n: u64 = std::env::var("FILE_AGENT_BENCH_LINES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(100_000);
        let folder = tempfile::tempdir().unwrap();
        let log = AuditLog::open_chain(folder.path(), "a", config()).unwrap();
        for i in 0..n {
            let mut record = line(&format!("s{}", i % (n / 4).max(1)), Some(&i.to_string()), i);
            record.code = Some("import pandas as pd\nprint(pd.__version__)\n".repeat(4));
            if i % 4 != 0 {
                record.session = None;
            }
            log.append(record).unwrap();
        }
        let bytes = std::fs::metadata(log.path()).unwrap().len();
        let rss_before = resident_kib();
        let states = SessionStates::new(folder.path(), Path::new("/none"));
        let (loaded, cpu) = std::thread::scope(|scope| {
            scope
                .spawn(|| (states.load(), thread_cpu_seconds()))
                .join()
                .unwrap()
        });
        let rss_after = resident_kib();
        println!(
            "{n} lines ({} MiB), {} sessions: {cpu:?} CPU-seconds; resident {} -> {} KiB",
            bytes >> 20,
            loaded.sessions,
            rss_before,
            rss_after
        );
    }
}
