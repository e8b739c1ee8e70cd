//! Research runs whose caller went away, and the reports kept for that caller.
//!
//! A deep research run is paid work that takes minutes. When the client of a
//! `conduct_deep_research` call stops waiting (its own timeout, a closed tab, a proxy that gave
//! up: over HTTP, a closed stream), the run is not cancelled at the provider: it goes on in
//! the background, still within `FILE_AGENT_RESEARCH_TIMEOUT` of its start, and its report is
//! kept for `FILE_AGENT_RESEARCH_KEEP` under its caller's owner key and a hash of its
//! instructions. The next call of the same caller with the same instructions joins the run
//! still going, or gets the kept report (once: it is then taken). No other caller reaches it,
//! and a caller whose user was required but not proven (an `unproven` owner, shared by
//! everyone refused) gets nothing kept.
//!
//! Bounded: at most `FILE_AGENT_RESEARCH_KEPT_MAX` runs going on without their caller and
//! reports kept, together; past it (or with 0) a run whose caller leaves is cancelled at the
//! provider, as an explicit cancel (`notifications/cancelled`, `tasks/cancel`) and a shutdown
//! always are. Kept in memory only: a restart loses them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::ToolOutput;
use crate::owner::Owner;

/// How a run that went on without its caller ended: its answer, or the error's message.
pub type Ended = Result<ToolOutput, String>;

/// A caller's run: its owner key and the SHA-256 of its instructions (trimmed).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunKey {
    owner: String,
    instructions: String,
}

impl RunKey {
    /// The key of `owner`'s run of `instructions`; `None` for an owner that is no one's space
    /// (an unproven caller: [`Owner::lists`] shows it nothing of its own).
    pub fn new(owner: &Owner, instructions: &str) -> Option<Self> {
        owner.lists(owner.as_str()).then(|| Self {
            owner: owner.as_str().to_string(),
            instructions: crate::audit::sha256_hex(instructions.trim().as_bytes()),
        })
    }
}

/// A run kept for its caller.
#[derive(Debug)]
enum Entry {
    /// Going on without its caller; its end comes on the channel.
    Running {
        ended: watch::Receiver<Option<Ended>>,
        started: Instant,
    },
    /// Ended; kept until `until`.
    Kept { ended: Box<Ended>, until: Instant },
}

/// What a caller's next call finds of its earlier run.
#[derive(Debug)]
pub enum Found {
    /// The run ended; its answer (now taken).
    Kept(Box<Ended>),
    /// The run is still going: its end comes on the channel; it started at the instant.
    Running(watch::Receiver<Option<Ended>>, Instant),
}

/// The runs going on without their caller, and the reports kept: see the module.
#[derive(Debug)]
pub struct ResearchRuns {
    entries: Mutex<HashMap<RunKey, Entry>>,
    keep_for: Duration,
    max: usize,
}

impl ResearchRuns {
    /// At most `max` runs and reports, each report kept for `keep_for`.
    pub fn new(keep_for: Duration, max: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            keep_for,
            max,
        }
    }

    /// The entries, with the reports past their time dropped.
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<RunKey, Entry>> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        entries.retain(|_, entry| match entry {
            Entry::Kept { until, .. } => *until > now,
            Entry::Running { .. } => true,
        });
        entries
    }

    /// What is there of `key`'s earlier run: its report (taken), or the run still going.
    pub fn find(&self, key: &RunKey) -> Option<Found> {
        let mut entries = self.entries();
        match entries.get(key)? {
            Entry::Running { ended, started } => Some(Found::Running(ended.clone(), *started)),
            Entry::Kept { .. } => match entries.remove(key) {
                Some(Entry::Kept { ended, .. }) => Some(Found::Kept(ended)),
                _ => None,
            },
        }
    }

    /// Takes the run of `key` that a joining call saw end (so that no later call gets the
    /// same report again).
    pub fn take(&self, key: &RunKey) {
        let mut entries = self.entries();
        if matches!(entries.get(key), Some(Entry::Kept { .. })) {
            entries.remove(key);
        }
    }

    /// Registers `key`'s run, started at `started`, as going on without its caller; `None`
    /// when there is no room (the run must then be cancelled) or the key has one already.
    pub fn adopt(&self, key: &RunKey, started: Instant) -> Option<watch::Sender<Option<Ended>>> {
        let mut entries = self.entries();
        if entries.len() >= self.max || entries.contains_key(key) {
            return None;
        }
        let (sender, ended) = watch::channel(None);
        entries.insert(key.clone(), Entry::Running { ended, started });
        Some(sender)
    }

    /// `key`'s run ended with `ended`: kept for [`Self::new`]'s time, and sent to the calls
    /// that joined it.
    pub fn finish(&self, key: &RunKey, ended: Ended, sender: &watch::Sender<Option<Ended>>) {
        let until = Instant::now() + self.keep_for;
        self.entries().insert(
            key.clone(),
            Entry::Kept {
                ended: Box::new(ended.clone()),
                until,
            },
        );
        sender.send_replace(Some(ended));
    }

    /// Forgets `key`'s run (it was cancelled: shutdown).
    pub fn forget(&self, key: &RunKey) {
        self.entries().remove(key);
    }

    /// Runs going on without their caller, and reports kept.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(text: &str) -> Ended {
        Ok(ToolOutput {
            text: text.into(),
            attempts: 0,
            data: None,
        })
    }

    #[test]
    fn a_report_is_its_callers_once_and_the_count_is_bounded() {
        let runs = ResearchRuns::new(Duration::from_secs(60), 2);
        let (alice, bob) = (Owner::token("aaaa"), Owner::token("bbbb"));
        let key = RunKey::new(&alice, "What is Rust?").unwrap();
        assert_eq!(
            RunKey::new(&alice, "  What is Rust?\n"),
            Some(key.clone()),
            "trimmed"
        );
        let sender = runs.adopt(&key, Instant::now()).unwrap();
        assert!(runs.adopt(&key, Instant::now()).is_none(), "one per key");
        assert!(matches!(runs.find(&key), Some(Found::Running(..))));
        let bobs = RunKey::new(&bob, "What is Rust?").unwrap();
        assert!(runs.find(&bobs).is_none(), "another caller reaches nothing");
        let other = RunKey::new(&alice, "Another question").unwrap();
        let _other = runs.adopt(&other, Instant::now()).unwrap();
        let third = RunKey::new(&bob, "A third").unwrap();
        assert!(runs.adopt(&third, Instant::now()).is_none(), "bounded");

        runs.finish(&key, output("report"), &sender);
        assert_eq!(sender.borrow().clone().unwrap().unwrap().text, "report");
        match runs.find(&key) {
            Some(Found::Kept(kept)) => assert_eq!(kept.as_ref().as_ref().unwrap().text, "report"),
            found => panic!("{found:?}"),
        }
        assert!(runs.find(&key).is_none(), "taken once");
        assert_eq!(runs.len(), 1);
    }

    #[test]
    fn a_report_past_its_time_is_gone_and_an_unproven_caller_keeps_nothing() {
        let runs = ResearchRuns::new(Duration::ZERO, 4);
        let key = RunKey::new(&Owner::token("aaaa"), "q").unwrap();
        let sender = runs.adopt(&key, Instant::now()).unwrap();
        runs.finish(&key, output("report"), &sender);
        assert!(runs.find(&key).is_none());
        assert!(runs.is_empty());
        assert!(RunKey::new(&Owner::unproven(Some("aaaa")), "q").is_none());
    }
}
