//! The review page's sessions: each `run_python` session's attempts, followed from state to
//! state. Every audit line of a session's attempt carries the session's id (a hash, never its
//! name) and the SHA-256 of the state it started from and of the state it left; across the
//! report's lines, in time order, each attempt of a session should start from the state the
//! session's attempt before it left. An attempt that starts from another state breaks the
//! session's chain: the state was changed outside file-agent (its folder rewritten, record
//! and all), or two replicas ran the session at once. Such an attempt needs attention.
//!
//! An attempt that starts from no state without asking to start over is no break but is
//! marked: the session expired while idle, or its folder was removed, and it began again
//! from nothing (a loss the user sees, not a forgery).
//!
//! This module never reads a state: it compares the hashes the trail wrote.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::Ending;
use crate::audit::Record;

/// Sessions described (the most recently active).
pub const SESSIONS_MAX: usize = 200;
/// Attempts of one session listed (the newest; every break and gap is listed too).
pub const SESSION_STEPS_MAX: usize = 20;

/// The sessions section.
#[derive(Debug, Default, Serialize)]
pub struct SessionsSection {
    /// The most recently active sessions, at most [`SESSIONS_MAX`], those with a break first.
    pub rows: Vec<SessionHistory>,
    /// Sessions seen in the report's lines, shown or not.
    pub total: usize,
    /// Attempts whose state is not the one the session's attempt before left, in all.
    pub breaks: u64,
}

/// One session's attempts.
#[derive(Debug, Clone, Serialize)]
pub struct SessionHistory {
    /// The session's id as the trail writes it: the SHA-256 of its owner key and its name.
    pub id: String,
    /// The users its lines name (one, unless lines disagree).
    pub users: Vec<String>,
    /// Its attempts in the report's lines.
    pub attempts: u64,
    /// Its attempts that break its chain.
    pub breaks: u64,
    /// The state its newest attempt left (`None`: no state).
    pub state: Option<String>,
    /// Its first and last attempt.
    pub first: String,
    /// See `first`.
    pub last: String,
    /// Its attempts in time order: the newest [`SESSION_STEPS_MAX`] and every one marked.
    pub steps: Vec<SessionStep>,
    /// Attempts not listed in `steps`.
    pub steps_omitted: u64,
}

/// One attempt of a session.
#[derive(Debug, Clone, Serialize)]
pub struct SessionStep {
    /// When.
    pub time: String,
    /// How it ended.
    pub ending: Ending,
    /// The SHA-256 of the state it started from (`None`: none).
    pub state_before: Option<String>,
    /// The SHA-256 of the session's state after it.
    pub state_after: Option<String>,
    /// Whether its caller started the session over.
    pub reset: bool,
    /// How it follows the attempt before: `None` when it starts from the state that one left.
    pub mark: Option<ChainMark>,
    /// The detail's anchor (`a<chain>-<seq>`); empty when the attempt is not shown in full.
    pub anchor: String,
}

/// How an attempt of a session fails to follow the one before it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ChainMark {
    /// It started from another state than the one the session's attempt before left.
    Break {
        /// The state the attempt before left.
        expected: Option<String>,
        /// When that attempt ran.
        after: String,
    },
    /// It started from no state without asking to start over, where the attempt before left
    /// one: the session expired, or its folder was removed.
    StartedEmpty {
        /// The state the attempt before left.
        expected: String,
    },
}

impl ChainMark {
    /// What it means, in words, naming the hashes by their first 12 digits.
    pub fn words(&self, state_before: Option<&str>) -> String {
        match self {
            Self::Break { expected, after } => format!(
                "BROKEN session chain: this attempt started from state {}, but the session's attempt before it ({after}) left {}; the state was changed outside file-agent, or two replicas ran the session at once",
                short_state(state_before),
                short_state(expected.as_deref())
            ),
            Self::StartedEmpty { expected } => format!(
                "started from no state without a reset where the attempt before left {}: the session expired while idle (FILE_AGENT_SESSION_IDLE_EXPIRY) or its folder was removed",
                short_state(Some(expected))
            ),
        }
    }

    /// Whether it breaks the chain (needs attention).
    pub fn is_break(&self) -> bool {
        matches!(self, Self::Break { .. })
    }
}

/// How an attempt follows its session's attempt before, on its detail and in "needs
/// attention": [`ChainMark::words`], and whether it breaks the chain.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarkNote {
    /// What it means, in words.
    pub words: String,
    /// Whether it breaks the session's chain.
    pub broken: bool,
}

/// A state's hash by its first 12 digits, or `none`.
fn short_state(state: Option<&str>) -> String {
    state.map_or_else(|| "none".into(), |s| s.get(..12).unwrap_or(s).to_string())
}

/// One attempt of a session as the first pass keeps it.
#[derive(Debug, Clone)]
pub(super) struct StepRow {
    session: String,
    user: Option<String>,
    chain: usize,
    seq: u64,
    /// The line's `step` among its session's lines (0 in lines written before steps).
    order: u64,
    step: SessionStep,
}

impl StepRow {
    /// The row of `record` (chain number `chain`), when it belongs to a session.
    pub(super) fn of(record: &Record, chain: usize, ending: Ending) -> Option<Self> {
        let mark = record.session.as_ref()?;
        Some(Self {
            session: mark.id.clone(),
            user: record.caller.user.clone(),
            chain,
            seq: record.seq,
            order: mark.step,
            step: SessionStep {
                time: record.time.clone(),
                ending,
                state_before: mark.state_before.clone(),
                state_after: mark.state_after.clone(),
                reset: mark.reset,
                mark: None,
                anchor: super::anchor(chain, record.seq),
            },
        })
    }
}

/// What follows the sessions through: the section, and each marked attempt's words by
/// (chain, seq), for "needs attention" (breaks) and the attempts' details (all marks).
pub(super) struct Followed {
    pub section: SessionsSection,
    pub marks: HashMap<(usize, u64), MarkNote>,
}

/// Follows each session's attempts in the order of their lines' `step` (what orders a
/// session's lines across replicas' chains, whose clocks may differ), then time, chain and
/// line (lines written before steps have none), marking each that does not start from the
/// state the one before left.
pub(super) fn follow(mut rows: Vec<StepRow>) -> Followed {
    rows.sort_by(|a, b| {
        (a.order, a.step.time.as_str(), a.chain, a.seq).cmp(&(
            b.order,
            b.step.time.as_str(),
            b.chain,
            b.seq,
        ))
    });
    let mut by_session: BTreeMap<String, Vec<StepRow>> = BTreeMap::new();
    for row in rows {
        by_session.entry(row.session.clone()).or_default().push(row);
    }
    let mut marks = HashMap::new();
    let mut histories: Vec<SessionHistory> = by_session
        .into_iter()
        .map(|(id, mut steps)| {
            mark_steps(&mut steps);
            for row in &steps {
                if let Some(mark) = &row.step.mark {
                    let note = MarkNote {
                        words: mark.words(row.step.state_before.as_deref()),
                        broken: mark.is_break(),
                    };
                    marks.insert((row.chain, row.seq), note);
                }
            }
            history(id, steps)
        })
        .collect();
    let total = histories.len();
    let breaks = histories.iter().map(|h| h.breaks).sum();
    histories.sort_by(|a, b| (b.breaks > 0, &b.last).cmp(&(a.breaks > 0, &a.last)));
    histories.truncate(SESSIONS_MAX);
    Followed {
        section: SessionsSection {
            rows: histories,
            total,
            breaks,
        },
        marks,
    }
}

/// Marks each step of one session (in time order) that does not follow the one before.
fn mark_steps(steps: &mut [StepRow]) {
    for at in 1..steps.len() {
        let before = &steps[at - 1].step;
        let now = &steps[at].step;
        steps[at].step.mark = match (&now.state_before, &before.state_after) {
            (now_state, left) if now_state == left => None,
            (None, _) if now.reset => None,
            (None, Some(left)) => Some(ChainMark::StartedEmpty {
                expected: left.clone(),
            }),
            (Some(_), left) => Some(ChainMark::Break {
                expected: left.clone(),
                after: before.time.clone(),
            }),
            (None, None) => None,
        };
    }
}

/// One session's history from its steps in time order.
fn history(id: String, steps: Vec<StepRow>) -> SessionHistory {
    let mut users: Vec<String> = steps.iter().filter_map(|s| s.user.clone()).collect();
    users.sort();
    users.dedup();
    let attempts = steps.len() as u64;
    let breaks = steps
        .iter()
        .filter(|s| s.step.mark.as_ref().is_some_and(ChainMark::is_break))
        .count() as u64;
    let first = steps
        .first()
        .map(|s| s.step.time.clone())
        .unwrap_or_default();
    let last = steps
        .last()
        .map(|s| s.step.time.clone())
        .unwrap_or_default();
    let state = steps.last().and_then(|s| s.step.state_after.clone());
    let newest_from = steps.len().saturating_sub(SESSION_STEPS_MAX);
    let shown: Vec<SessionStep> = steps
        .into_iter()
        .enumerate()
        .filter(|(n, s)| *n >= newest_from || s.step.mark.is_some())
        .map(|(_, s)| s.step)
        .collect();
    SessionHistory {
        id,
        users,
        attempts,
        breaks,
        state,
        first,
        last,
        steps_omitted: attempts - shown.len() as u64,
        steps: shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::SessionMark;

    fn line(seq: u64, before: Option<&str>, after: Option<&str>, reset: bool) -> Record {
        Record {
            time: format!("2026-03-01T12:00:{seq:02}.000Z"),
            seq,
            session: Some(SessionMark {
                id: "5e55".into(),
                state_before: before.map(str::to_string),
                state_after: after.map(str::to_string),
                reset,
                step: 0,
            }),
            ..Record::default()
        }
    }

    fn followed(lines: &[Record]) -> Followed {
        let rows = lines
            .iter()
            .rev()
            .filter_map(|r| StepRow::of(r, 0, Ending::Ok))
            .collect();
        follow(rows)
    }

    #[test]
    fn a_chain_of_states_is_intact_and_a_state_from_elsewhere_breaks_it() {
        let chained = [
            line(1, None, Some("aa"), false),
            line(2, Some("aa"), Some("bb"), false),
            line(3, Some("bb"), Some("bb"), false),
            line(4, None, Some("cc"), true),
        ];
        let intact = followed(&chained);
        assert_eq!(intact.section.breaks, 0);
        assert!(intact.marks.is_empty());
        let session = &intact.section.rows[0];
        assert_eq!(
            (session.attempts, session.state.as_deref()),
            (4, Some("cc"))
        );

        let mut edited = chained.clone();
        edited[2].session.as_mut().unwrap().state_before = Some("ff".into());
        let broken = followed(&edited);
        assert_eq!(broken.section.breaks, 1);
        let note = &broken.marks[&(0, 3)];
        assert!(note.broken && note.words.contains("state ff") && note.words.contains("left bb"));

        let mut emptied = chained.clone();
        emptied[2].session.as_mut().unwrap().state_before = None;
        let gap = followed(&emptied);
        assert_eq!(gap.section.breaks, 0);
        assert!(
            !gap.marks[&(0, 3)].broken,
            "a session that began again is no break"
        );
    }
}
