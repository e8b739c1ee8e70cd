//! `file-agent audit report`: a security review of the whole audit folder in one page. This
//! module gathers the data ([`gather`]): every chain verified, the attempts counted by day or
//! hour and by ending, what needs attention, per user and per tool, each saved tool's
//! history with the code of every version, and the detail of the attempts the page links to.
//! [`html`] renders it as one self-contained page; `--json` prints [`Report`] as it is.
//!
//! Bounded by design: a trail of any length gives a report of bounded size. Counts cover every
//! line; lists keep the newest rows up to the `*_MAX` constants below and say how many they
//! left out. The trail is read twice (counting, then the details chosen), line by line, so
//! memory holds one small row per attempt, never the trail.
//!
//! Everything read from the trail is data, never markup: [`html`] escapes it all.

pub mod diff;
pub mod html;
pub mod sessions;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::audit::chain::{self, Chain};
use crate::audit::{Record, ToolMark};

/// Rows of "needs attention" kept (the newest).
pub const ATTENTION_MAX: usize = 1000;
/// Attempts needing attention whose full detail the page carries (the newest).
pub const DETAILS_ATTENTION_MAX: usize = 200;
/// Other attempts whose full detail the page carries (the newest).
pub const DETAILS_RECENT_MAX: usize = 100;
/// Users and tools listed in the per-user and per-tool tables (the busiest).
pub const TALLY_MAX: usize = 200;
/// Saved tools described.
pub const SAVED_TOOLS_MAX: usize = 200;
/// Calls of one saved tool shown in its timeline (the newest; every change is shown).
pub const TIMELINE_CALLS_MAX: usize = 20;
/// Code and error text kept per detail or version, in bytes.
pub const TEXT_MAX: usize = 16 * 1024;
/// Above this span the chart counts days; at or below, hours.
const HOURLY_SPAN_HOURS: usize = 72;

/// Which lines the report covers. Times are UTC RFC 3339 as the trail writes them, compared
/// as text (the trail's format sorts in time order).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Filter {
    /// Lines at or after this instant.
    pub since: Option<String>,
    /// Lines before this instant.
    pub until: Option<String>,
    /// Only this Open WebUI user id.
    pub user: Option<String>,
    /// Only this tool: a built-in (`run_python`) or a saved tool (`my_sum` or `sum`).
    pub tool: Option<String>,
}

impl Filter {
    /// Whether `record` passes.
    pub fn admits(&self, record: &Record) -> bool {
        let after = self
            .since
            .as_deref()
            .is_none_or(|s| record.time.as_str() >= s);
        let before = self
            .until
            .as_deref()
            .is_none_or(|u| record.time.as_str() < u);
        let user = self
            .user
            .as_deref()
            .is_none_or(|u| record.caller.user.as_deref() == Some(u));
        let tool = self.tool.as_deref().is_none_or(|wanted| {
            let bare = wanted
                .strip_prefix(crate::tools::catalog::SAVED_TOOL_PREFIX)
                .unwrap_or(wanted);
            record.caller.tool == wanted
                || record
                    .saved_tool
                    .as_ref()
                    .is_some_and(|mark| mark.name == bare)
        });
        after && before && user && tool
    }
}

/// A `--since`/`--until` value that is not a time.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a time: give a date (2026-03-01), a UTC time (2026-03-01T12:00:00Z), or an age (90m, 36h, 7d)"
)]
pub struct BadTime(pub String);

/// `2026-03-01`, `2026-03-01T12:00:00Z` or an age before now (`90m`, `36h`, `7d`) as the
/// trail's format. A date alone means its start, or with `end_of_day` the start of the next
/// day (so `--until 2026-03-31` includes the 31st).
pub fn parse_time(text: &str, end_of_day: bool) -> Result<String, BadTime> {
    let text = text.trim();
    let bad = || BadTime(text.to_string());
    let age = |unit: char, seconds: u64| {
        text.strip_suffix(unit)
            .and_then(|n| n.parse::<u64>().ok())
            .map(|n| n.saturating_mul(seconds))
    };
    if let Some(seconds) = age('m', 60)
        .or_else(|| age('h', 3600))
        .or_else(|| age('d', 86_400))
    {
        let at = std::time::SystemTime::now()
            .checked_sub(std::time::Duration::from_secs(seconds))
            .ok_or_else(bad)?;
        return Ok(crate::time::format_rfc3339(at));
    }
    let (full, whole_day) = if text.len() == 10 {
        (format!("{text}T00:00:00Z"), true)
    } else {
        (text.to_string(), false)
    };
    let mut at = crate::time::parse_rfc3339(&full).ok_or_else(bad)?;
    if whole_day && end_of_day {
        at += std::time::Duration::from_secs(86_400);
    }
    Ok(crate::time::format_rfc3339(at))
}

/// How an attempt ended, as the report groups it. A status the report does not know counts
/// as [`Ending::Failed`] (and is shown as written).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// It succeeded.
    Ok,
    /// It failed: an error of the script, of the sandbox, a cancelled call, or a status this
    /// report does not know.
    Failed,
    /// The time limit.
    Timeout,
    /// The memory limit.
    OutOfMemory,
    /// The process limit.
    ProcessLimit,
    /// The output size or count limit.
    OutputLimit,
    /// No slot was free.
    Busy,
    /// Refused before or after running: a saved tool's arguments, or its output.
    Refused,
}

impl Ending {
    /// Every ending, in the chart's order.
    pub const ALL: [Ending; 8] = [
        Ending::Ok,
        Ending::Failed,
        Ending::Timeout,
        Ending::OutOfMemory,
        Ending::ProcessLimit,
        Ending::OutputLimit,
        Ending::Busy,
        Ending::Refused,
    ];

    /// The ending of a line's `status` (and `error`: a sandbox stopped by the process limit
    /// is `failed` with an error that names `SANDBOX_PIDS`).
    pub fn of(status: &str, error: &str) -> Self {
        let status = status.to_ascii_lowercase();
        match status.as_str() {
            "failed" if error.contains("SANDBOX_PIDS") => Self::ProcessLimit,
            "ok" => Self::Ok,
            "timeout" => Self::Timeout,
            "out_of_memory" | "oom" => Self::OutOfMemory,
            "output_limit" => Self::OutputLimit,
            "busy" => Self::Busy,
            _ if status.contains("pids") || status.contains("process") => Self::ProcessLimit,
            _ if status.starts_with("refused") => Self::Refused,
            _ => Self::Failed,
        }
    }

    /// Its name in the page.
    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::OutOfMemory => "OOM",
            Self::ProcessLimit => "process limit",
            Self::OutputLimit => "output limit",
            Self::Busy => "busy",
            Self::Refused => "refused",
        }
    }

    /// The ending of `record`.
    pub fn of_record(record: &Record) -> Self {
        Self::of(&record.status, record.error.as_deref().unwrap_or_default())
    }

    /// What "needs attention" calls it.
    fn attention_label(self) -> &'static str {
        match self {
            Self::Timeout => "time limit",
            Self::OutOfMemory => "memory limit",
            Self::ProcessLimit => "process limit",
            Self::OutputLimit => "output size limit",
            other => other.label(),
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|e| *e == self).unwrap_or(1)
    }

    /// Whether it hit a limit, or was refused: a reviewer looks at each.
    fn needs_attention(self) -> bool {
        !matches!(self, Self::Ok | Self::Failed | Self::Busy)
    }
}

/// A count per ending, in [`Ending::ALL`]'s order.
pub type Counts = [u64; Ending::ALL.len()];

/// Statuses counted as failed that are known: the script's error, a call that went away.
const KNOWN_FAILURES: [&str; 3] = ["failed", "cancelled", "sandbox_error"];

/// Saved-tool actions that are changes, not attempts (no container ran).
const TOOL_CHANGES: [&str; 4] = ["created", "updated", "saved again", "deleted"];

/// Whether a line is a change of a saved tool rather than an attempt.
fn is_change(record: &Record) -> bool {
    record
        .saved_tool
        .as_ref()
        .is_some_and(|mark| TOOL_CHANGES.contains(&mark.action.as_str()))
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// When it was made.
    pub generated: String,
    /// The folder or file read.
    pub source: String,
    /// The filter applied (integrity always covers every line).
    pub filter: Filter,
    /// Each chain verified.
    pub integrity: Integrity,
    /// The totals and the chart.
    pub summary: Summary,
    /// What a reviewer must look at.
    pub attention: Attention,
    /// Per user, the busiest first.
    pub users: Tallies,
    /// Per tool, the busiest first.
    pub tools: Tallies,
    /// Each saved tool's history.
    pub saved_tools: Vec<SavedToolHistory>,
    /// Saved tools left out past [`SAVED_TOOLS_MAX`].
    pub saved_tools_omitted: usize,
    /// Each `run_python` session followed from state to state.
    pub sessions: sessions::SessionsSection,
    /// The attempts shown in full.
    pub details: Vec<Detail>,
    /// Attempts (within the filter) not shown in full.
    pub details_omitted: u64,
}

/// The verdict on every chain.
#[derive(Debug, Serialize)]
pub struct Integrity {
    /// Whether every chain verified and every line parsed.
    pub intact: bool,
    /// Each chain.
    pub chains: Vec<ChainIntegrity>,
    /// When the folder could not be read at all.
    pub unreadable: Option<String>,
}

/// One chain's verdict.
#[derive(Debug, Serialize)]
pub struct ChainIntegrity {
    /// The chain's name (its live file, relative to the folder).
    pub name: String,
    /// Its files, in order.
    pub files: Vec<String>,
    /// Lines checked (up to the break, when broken).
    pub lines: u64,
    /// The hash of its last line (the value the next line will carry).
    pub head: Option<String>,
    /// `prev` of its first line when its earlier files are gone (rotated away).
    pub continues_from: Option<String>,
    /// When a retention line in the trail names the file that `continues_from` points at:
    /// that file, and when retention deleted it. A chain whose first lines are gone with no
    /// such line is broken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted_by_retention: Option<String>,
    /// Where it breaks: file, line, problem.
    pub broken: Option<String>,
    /// What crashes left in it (`audit::CrashTrace`, in words): unfinished lines cut at
    /// start-up and recorded, or not cut yet. Never a break.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub crash_traces: Vec<String>,
    /// The signed checkpoints kept beside it, held against its lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointMatch>,
}

/// Which kept checkpoint a chain's lines match, and whose cosignature lines its note carries.
/// The origin, size and root are the notes' (never the JSON beside them) and the roots are
/// recomputed from the lines; the signatures are `audit verify --key`'s to check, and the
/// time a record was kept is not signed.
#[derive(Debug, Serialize)]
pub struct CheckpointMatch {
    /// The chain's origin, as the first note says.
    pub origin: String,
    /// Checkpoints kept.
    pub kept: usize,
    /// The largest checkpoint the lines match: its size and when its record says it was kept
    /// (an unsigned time).
    pub matches: Option<(u64, String)>,
    /// The names on that note's signature lines after the log's own: the witnesses that
    /// cosigned it, unverified here (`audit verify --witness-key` checks them).
    pub witnessed_by: Vec<String>,
    /// The first kept checkpoint the lines do not match, or a record edited beside its note,
    /// in words (the trail was changed).
    pub contradicted: Option<String>,
}

/// Totals and the chart.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// Attempts (container runs, and attempts refused before running).
    pub attempts: u64,
    /// Tool calls (distinct call ids) that made attempts.
    pub calls: u64,
    /// Distinct users.
    pub users: u64,
    /// Distinct tools called.
    pub tools: u64,
    /// Saved-tool changes (created, updated, saved again, deleted).
    pub tool_changes: u64,
    /// Retention lines (each a pruning that deleted files; no container ran).
    pub retention_lines: u64,
    /// Attempts per ending.
    pub endings: Counts,
    /// Attempts per status, as written (shows statuses this report does not know).
    pub statuses: BTreeMap<String, u64>,
    /// The first and last line's time within the filter.
    pub first: Option<String>,
    /// See `first`.
    pub last: Option<String>,
    /// `hour` or `day`.
    pub bucket: String,
    /// Attempts per bucket and ending, in time order: (bucket start, counts).
    pub chart: Vec<(String, Counts)>,
}

/// "Needs attention".
#[derive(Debug, Default, Serialize)]
pub struct Attention {
    /// The newest rows, newest first, at most [`ATTENTION_MAX`].
    pub rows: Vec<AttentionRow>,
    /// All rows, shown or not.
    pub total: u64,
}

/// One thing to look at.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionRow {
    /// What happened, in words.
    pub what: String,
    /// The attempt's time.
    pub time: String,
    /// Its user, chat, tool and call.
    pub user: Option<String>,
    /// See `user`.
    pub chat: Option<String>,
    /// See `user`.
    pub tool: String,
    /// See `user`.
    pub call: String,
    /// The detail's anchor (`a<chain>-<seq>`).
    pub anchor: String,
}

/// What named the user of a line, for the per-user table: its source, with an OAuth user's
/// issuer or the access token the line came with; `-` when the line says nothing.
fn proof_of(caller: &crate::audit::CallInfo) -> String {
    match (&caller.identity, &caller.issuer, &caller.token_id) {
        (Some(source), Some(issuer), _) => format!("{source} ({issuer})"),
        (Some(source), None, Some(token)) if source == "access-token" => {
            format!("{source} {token}")
        }
        (Some(source), None, Some(token)) => format!("{source} (token {token})"),
        (Some(source), _, _) => source.clone(),
        (None, _, _) => "-".into(),
    }
}

/// A per-user or per-tool table.
#[derive(Debug, Default, Serialize)]
pub struct Tallies {
    /// The busiest rows, at most [`TALLY_MAX`].
    pub rows: Vec<Tally>,
    /// Rows left out.
    pub omitted: usize,
}

/// One user's or tool's counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    /// The user id or tool name (`(none)` for a line without a user).
    pub name: String,
    /// For a user: what named them (the audit line's `identity`, with the issuer of an OAuth
    /// user, the token of a line with no user), or `-` for lines from before identities were
    /// recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// Attempts.
    pub attempts: u64,
    /// Distinct calls.
    pub calls: u64,
    /// CPU seconds (user and system) of its attempts, as their runners measured them (lines
    /// from before the figures were recorded add nothing).
    pub cpu_s: f64,
    /// Attempts per ending.
    pub endings: Counts,
    /// Its first and last attempt.
    pub first: String,
    /// See `first`.
    pub last: String,
    #[serde(skip)]
    call_ids: HashSet<String>,
}

/// One saved tool's life.
#[derive(Debug, Serialize)]
pub struct SavedToolHistory {
    /// Its name (listed as `my_<name>`).
    pub name: String,
    /// Who saved its versions (in per-user mode, owners' tools of the same name share one
    /// history; each line names its user).
    pub owners: Vec<String>,
    /// Changes (all) and calls (the newest [`TIMELINE_CALLS_MAX`]), in time order.
    pub timeline: Vec<ToolEvent>,
    /// Calls, checks and refused calls in all.
    pub calls: u64,
    /// Its versions, in the order first seen.
    pub versions: Vec<ToolVersion>,
}

/// One line of a saved tool's timeline.
#[derive(Debug, Clone, Serialize)]
pub struct ToolEvent {
    /// When.
    pub time: String,
    /// `created`, `updated`, `saved again`, `deleted`, `check`, `call`, `refused call`.
    pub action: String,
    /// The version it concerns.
    pub version: String,
    /// Who (the caller's user id).
    pub user: Option<String>,
    /// The ending, for an attempt.
    pub ending: Option<Ending>,
    /// The detail's anchor, for an attempt shown in full.
    pub anchor: Option<String>,
}

/// One version of a saved tool, from the version store.
#[derive(Debug, Clone, Serialize)]
pub struct ToolVersion {
    /// Its hash.
    pub version: String,
    /// When a line first named it.
    pub first_seen: String,
    /// The stored version, when found.
    pub stored: Option<StoredVersion>,
    /// Why it is not shown: missing, or its content does not hash to its name.
    pub problem: Option<String>,
    /// Its code's diff from the version before, when both are stored.
    pub diff_from_previous: Option<Vec<diff::Line>>,
}

/// A version as the registry keeps it ([`crate::tools::dynamic::registry::VersionRecord`]).
#[derive(Debug, Clone, Serialize)]
pub struct StoredVersion {
    /// The code (cut at [`TEXT_MAX`]).
    pub code: String,
    /// The schema, pretty-printed.
    pub schema: String,
    /// Its description when saved.
    pub description: String,
    /// Who saved it first, and when.
    pub saved_by: String,
    /// See `saved_by`.
    pub saved: String,
}

/// One attempt shown in full.
#[derive(Debug, Serialize)]
pub struct Detail {
    /// Its anchor (`a<chain>-<seq>`).
    pub anchor: String,
    /// Its chain's name.
    pub chain: String,
    /// Its ending.
    pub ending: Ending,
    /// The line (code and error cut at [`TEXT_MAX`]).
    pub record: Record,
    /// Its receipt: its leaf index in the chain's tree (`seq` − 1) and its leaf hash (base64
    /// of SHA-256(0x00 ‖ the line)), what `audit prove --index` proves.
    pub leaf_index: u64,
    /// See `leaf_index`.
    pub leaf_hash: String,
    /// For an attempt of a session that does not start from the state the session's attempt
    /// before it left: what that means ([`sessions::ChainMark`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_mark: Option<sessions::MarkNote>,
}

/// One attempt as the first pass keeps it.
#[derive(Debug, Clone)]
struct Row {
    time: String,
    chain: usize,
    seq: u64,
    attention: Option<String>,
}

fn anchor(chain: usize, seq: u64) -> String {
    format!("a{chain}-{seq}")
}

/// Where the saved tools' versions are kept, next to an audit folder or a data folder.
fn versions_folder(source: &Path) -> Option<PathBuf> {
    let folder = if source.is_dir() {
        source
    } else {
        source.parent()?
    };
    [folder.to_path_buf(), folder.parent()?.to_path_buf()]
        .into_iter()
        .map(|f| {
            use crate::tools::dynamic::registry::{TOOLS_FOLDER, VERSIONS_FOLDER};
            f.join(TOOLS_FOLDER).join(VERSIONS_FOLDER)
        })
        .find(|f| f.is_dir())
}

/// Calls every record of `chain`, with its line number; a line that does not parse is
/// skipped (the integrity section already names it).
fn each_record(chain: &Chain, mut visit: impl FnMut(Record, &str)) {
    use crate::untrusted::door::{Line, Lines};
    for path in &chain.files {
        let Ok(mut lines) = Lines::open(path) else {
            continue;
        };
        while let Some(Ok(Line::Whole(line))) = lines.next_line() {
            let Ok(line) = std::str::from_utf8(line) else {
                break;
            };
            if let Ok(record) = serde_json::from_str::<Record>(line) {
                visit(record, line);
            }
        }
    }
}

/// What the "needs attention" section says of an attempt, if anything.
fn attention_of(record: &Record, ending: Ending) -> Option<String> {
    let mark = record.saved_tool.as_ref();
    if mark.is_some_and(|m| m.action == "check") && ending != Ending::Ok {
        return Some(format!(
            "saved tool refused: its check ended {}",
            ending.label()
        ));
    }
    if mark.is_some_and(|m| m.action == "refused call") {
        return Some("saved tool call refused: arguments that do not fit its schema".into());
    }
    if record.status == "sandbox_error" {
        return Some("sandbox error (a result stream that did not parse, or the engine)".into());
    }
    if ending == Ending::Failed && !KNOWN_FAILURES.contains(&record.status.as_str()) {
        return Some(format!(
            "status {:?}, unknown to this report",
            record.status
        ));
    }
    ending.needs_attention().then(|| match ending {
        Ending::Refused => format!("refused: {}", record.status),
        limit => limit.attention_label().to_string(),
    })
}

/// Reads and verifies every chain under `source` and gathers what passes `filter`.
pub fn gather(source: &Path, filter: &Filter) -> Report {
    let (chains, unreadable) = find_chains(source);
    // First pass: counts, and one small row per attempt.
    let mut first = FirstPass::default();
    let verdicts: Vec<_> = chains
        .iter()
        .enumerate()
        .map(|(index, chain)| {
            let live = chain.files.last().cloned().unwrap_or_default();
            let kept = crate::audit::checkpoints::read(&crate::audit::checkpoints::path_of(&live))
                .unwrap_or_default();
            let tree =
                crate::audit::tree::TreeFile::open_existing(&crate::audit::tree::path_of(&live))
                    .ok();
            let sizes = kept.iter().map(|c| c.size).collect();
            let verdict = crate::audit::verify_with_roots(
                &chain.files,
                sizes,
                tree.as_ref(),
                |record, position| {
                    first.add(index, chain, filter, record, position);
                },
            );
            (verdict, kept)
        })
        .collect();
    // A chain whose first lines are gone is intact only where a retention line, in any
    // chain, records deleting them.
    let verdicts: Vec<ChainVerdict> = chains
        .iter()
        .zip(verdicts)
        .map(|(chain, (verdict, kept))| {
            let (verdict, retention) = chain::accounted(chain, verdict, &first.retired);
            (verdict, retention, kept)
        })
        .collect();
    let integrity = integrity(&chains, &verdicts, unreadable);
    first.complete_summary();
    let mut followed = sessions::follow(std::mem::take(&mut first.session_steps));
    mark_breaks(&mut first.rows, &followed.marks);
    let choice = Choice::of(std::mem::take(&mut first.rows));
    choice.unlink_timelines(&mut first.histories);
    choice.unlink_sessions(&mut followed.section);
    let (attention, details) =
        choice.second_pass(&chains, filter, gave_up(&first.calls), &followed.marks);
    let details_omitted = first.summary.attempts.saturating_sub(details.len() as u64);
    let (saved_tools, saved_tools_omitted) = saved_tools(first.histories, source);

    Report {
        generated: crate::time::rfc3339_now(),
        source: source.display().to_string(),
        filter: filter.clone(),
        integrity,
        summary: first.summary,
        attention,
        users: tallies(first.users),
        tools: tallies(first.tools),
        saved_tools,
        saved_tools_omitted,
        sessions: followed.section,
        details,
        details_omitted,
    }
}

/// Adds each break of a session's chain (`marks`, by chain and line) to its attempt's
/// "needs attention".
fn mark_breaks(rows: &mut [Row], marks: &HashMap<(usize, u64), sessions::MarkNote>) {
    for row in rows {
        if let Some(note) = marks.get(&(row.chain, row.seq)).filter(|note| note.broken) {
            row.attention = Some(match row.attention.take() {
                Some(already) => format!("{already}; {}", note.words),
                None => note.words.clone(),
            });
        }
    }
}

/// The chains under `source`, and why none could be read when that is so.
fn find_chains(source: &Path) -> (Vec<Chain>, Option<String>) {
    match chain::chains(source) {
        Ok(chains) if chains.is_empty() => (
            chains,
            Some(format!(
                "{}: no audit chain (<name>.jsonl) was found here or in its audit/ folder; the trail is missing, or was written elsewhere (FILE_AGENT_AUDIT_DIR)",
                source.display()
            )),
        ),
        Ok(chains) => (chains, None),
        Err(error) => (Vec::new(), Some(format!("{}: {error}", source.display()))),
    }
}

/// What the first pass over the trail collects: the counts of every section, and one small
/// row per attempt for choosing what the second pass reads in full.
#[derive(Debug, Default)]
struct FirstPass {
    summary: Summary,
    rows: Vec<Row>,
    users: HashMap<String, Tally>,
    tools: HashMap<String, Tally>,
    /// Keyed by chain and call id.
    calls: HashMap<String, CallState>,
    histories: BTreeMap<String, History>,
    hourly: BTreeMap<String, Counts>,
    /// What the retention lines of every chain record deleting.
    retired: chain::Retired,
    /// One row per attempt of a session, for following each from state to state.
    session_steps: Vec<sessions::StepRow>,
}

impl FirstPass {
    /// Fills in the summary's distinct counts and its chart.
    fn complete_summary(&mut self) {
        self.summary.calls = self.calls.len() as u64;
        self.summary.users = self
            .users
            .values()
            .map(|tally| &tally.name)
            .collect::<HashSet<_>>()
            .len() as u64;
        self.summary.tools = self.tools.len() as u64;
        (self.summary.bucket, self.summary.chart) = chart(std::mem::take(&mut self.hourly));
    }

    /// Counts one line of chain number `index`; only a line the verifier accepted (at
    /// `position`) may account for lines retention deleted.
    fn add(
        &mut self,
        index: usize,
        chain: &Chain,
        filter: &Filter,
        record: Record,
        position: Option<u64>,
    ) {
        if let Some(position) = position {
            self.retired.note(chain, &record, position);
        }
        if !filter.admits(&record) {
            return;
        }
        self.summary.widen_span(&record.time);
        let change = is_change(&record);
        let ending = Ending::of_record(&record);
        if let Some(mark) = &record.saved_tool {
            self.histories.entry(mark.name.clone()).or_default().add(
                mark,
                &record,
                (!change).then_some(ending),
                anchor(index, record.seq),
            );
        }
        if change {
            self.summary.tool_changes += 1;
            return;
        }
        if record.pruned.is_some() {
            self.summary.retention_lines += 1;
            return;
        }
        // A crash's recovery ran nothing; the integrity section shows it.
        if record.recovered.is_some() {
            return;
        }
        self.add_attempt(index, &record, ending);
    }

    /// Counts one attempt: the summary, the chart, the per-user and per-tool tables, its call.
    fn add_attempt(&mut self, index: usize, record: &Record, ending: Ending) {
        self.summary.attempts += 1;
        self.summary.endings[ending.index()] += 1;
        *self
            .summary
            .statuses
            .entry(record.status.clone())
            .or_default() += 1;
        let hour = record.time.get(..13).unwrap_or("?").to_string();
        self.hourly.entry(hour).or_insert([0; 8])[ending.index()] += 1;
        let user = record
            .caller
            .user
            .clone()
            .unwrap_or_else(|| "(none)".into());
        // One row per owner (`owner::Owner`), the key each caller's data is kept under: a user
        // named by a plain header and one proven by a signature, or two access tokens' users of
        // one name, are rows of their own. Lines from before owner keys go by user and proof.
        let proof = proof_of(&record.caller);
        let key = match &record.caller.owner {
            Some(owner) => format!("owner\u{0}{owner}"),
            None => format!("{user}\u{0}{proof}"),
        };
        Tally::count(&mut self.users, key, user, Some(proof), record, ending);
        let tool = record.caller.tool.clone();
        Tally::count(&mut self.tools, tool.clone(), tool, None, record, ending);
        let row = Row {
            time: record.time.clone(),
            chain: index,
            seq: record.seq,
            attention: attention_of(record, ending),
        };
        self.add_to_call(record, ending, &row);
        self.rows.push(row);
        self.session_steps
            .extend(sessions::StepRow::of(record, index, ending));
    }

    /// Counts an attempt in its call's state, whose `last` row is the newest.
    fn add_to_call(&mut self, record: &Record, ending: Ending, row: &Row) {
        let call = self
            .calls
            .entry(format!("{}\u{0}{}", row.chain, record.caller.call))
            .or_insert_with(|| CallState {
                attempts: 0,
                any_ok: false,
                last: row.clone(),
                who: Who::of(record),
                by_model: record.author == "model",
            });
        call.attempts += 1;
        call.any_ok |= ending == Ending::Ok;
        if row.time >= call.last.time {
            call.last = row.clone();
        }
    }
}

impl Summary {
    /// Moves `first` and `last` out to include `time`.
    fn widen_span(&mut self, time: &str) {
        if self.first.as_deref().is_none_or(|f| time < f) {
            self.first = Some(time.to_string());
        }
        if self.last.as_deref().is_none_or(|l| time > l) {
            self.last = Some(time.to_string());
        }
    }
}

impl Tally {
    /// Counts an attempt in `table`'s row `key`, made on first sight with `name` and `proof`.
    fn count(
        table: &mut HashMap<String, Tally>,
        key: String,
        name: String,
        proof: Option<String>,
        record: &Record,
        ending: Ending,
    ) {
        let tally = table.entry(key).or_insert_with(|| Tally {
            name,
            proof,
            first: record.time.clone(),
            last: record.time.clone(),
            ..Tally::default()
        });
        tally.attempts += 1;
        tally.cpu_s += record
            .resources
            .and_then(|used| used.cpu_s())
            .unwrap_or(0.0);
        tally.endings[ending.index()] += 1;
        tally.call_ids.insert(record.caller.call.clone());
        tally.first = tally.first.clone().min(record.time.clone());
        tally.last = tally.last.clone().max(record.time.clone());
    }
}

/// The integrity section: each chain's verdict, and whether all is intact.
fn integrity(chains: &[Chain], verdicts: &[ChainVerdict], unreadable: Option<String>) -> Integrity {
    let chains: Vec<ChainIntegrity> = chains
        .iter()
        .zip(verdicts)
        .map(|(chain, (verdict, retention, kept))| {
            let mut integrity = chain_integrity(chain, verdict, retention.clone());
            integrity.checkpoint = checkpoint_match(verdict, kept);
            integrity
        })
        .collect();
    Integrity {
        intact: unreadable.is_none()
            && chains.iter().all(|c| {
                c.broken.is_none()
                    && c.checkpoint
                        .as_ref()
                        .is_none_or(|m| m.contradicted.is_none())
            }),
        unreadable,
        chains,
    }
}

/// A chain's verdict, the retention line that accounts for its missing first lines, and the
/// checkpoints kept beside it.
type ChainVerdict = (
    Result<crate::audit::Verified, crate::audit::Broken>,
    Option<String>,
    Vec<crate::audit::checkpoints::StoredCheckpoint>,
);

/// The kept checkpoints held against the roots of the chain's lines: the largest it matches,
/// and the first it does not (or the first record whose JSON disagrees with its note).
fn checkpoint_match(
    verdict: &Result<crate::audit::Verified, crate::audit::Broken>,
    kept: &[crate::audit::checkpoints::StoredCheckpoint],
) -> Option<CheckpointMatch> {
    let verified = verdict.as_ref().ok()?;
    let lines = verified.first_seq.saturating_sub(1) + verified.lines;
    let mut found = CheckpointMatch {
        origin: String::new(),
        kept: kept.len(),
        matches: None,
        witnessed_by: Vec::new(),
        contradicted: None,
    };
    let mut notes = Vec::new();
    for record in kept {
        let read = crate::audit::note::Note::parse(&record.checkpoint)
            .map_err(|e| e.to_string())
            .and_then(|note| {
                crate::audit::checkpoints::note_body(record, &note).map(|body| (note, body))
            });
        match read {
            Ok((note, (body, edited))) => {
                if let Some(edited) = edited
                    && found.contradicted.is_none()
                {
                    found.contradicted = Some(format!(
                        "the checkpoint record kept at {} (an unsigned time): {edited}",
                        record.time
                    ));
                }
                notes.push((body, note, record.time.clone()));
            }
            Err(problem) if found.contradicted.is_none() => {
                found.contradicted = Some(format!(
                    "the checkpoint record kept at {} (an unsigned time) holds no checkpoint note: {problem}",
                    record.time
                ));
            }
            Err(_) => {}
        }
    }
    found.origin = notes.first()?.0.origin.clone();
    notes.sort_by_key(|(body, _, _)| body.size);
    for (body, note, time) in notes {
        let root = verified.roots.get(&body.size);
        if body.size <= lines && root == Some(&body.root) {
            found.matches = Some((body.size, time));
            found.witnessed_by = note
                .signatures
                .iter()
                .skip(1)
                .map(|signature| signature.name.clone())
                .collect();
        } else if found.contradicted.is_none() && body.size >= verified.first_seq {
            found.contradicted = Some(format!(
                "the checkpoint of {} lines kept at {} (an unsigned time) does not match the trail's lines: they were changed, removed or inserted since (audit verify --key names which)",
                body.size, time
            ));
        }
    }
    Some(found)
}

/// One chain's verdict in words; `retention` says which retention line deleted its first
/// lines, when they are gone.
fn chain_integrity(
    chain: &Chain,
    verdict: &Result<crate::audit::Verified, crate::audit::Broken>,
    retention: Option<String>,
) -> ChainIntegrity {
    let (lines, head, continues_from, broken) = match verdict {
        Ok(v) => (
            v.lines,
            Some(v.head.clone()),
            v.continues_from.clone(),
            None,
        ),
        Err(b) => (b.line.saturating_sub(1), None, None, Some(b.to_string())),
    };
    let crash_traces = verdict.as_ref().map_or_else(
        |_| Vec::new(),
        |v| v.crash_traces.iter().map(ToString::to_string).collect(),
    );
    ChainIntegrity {
        deleted_by_retention: retention,
        name: chain.name.clone(),
        files: chain
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect(),
        lines,
        head,
        continues_from,
        broken,
        crash_traces,
        checkpoint: None,
    }
}

/// The rows of "needs attention" for each retry loop that gave up.
fn gave_up(calls: &HashMap<String, CallState>) -> Vec<AttentionRow> {
    calls
        .values()
        .filter(|call| call.attempts > 1 && !call.any_ok && call.by_model)
        .map(|call| {
            attention_row(
                format!("retry loop gave up after {} attempts", call.attempts),
                &call.who,
                &call.last,
            )
        })
        .collect()
}

/// What the second pass reads: the attempts shown in full and the rows of "needs attention"
/// listed, by (chain, seq).
#[derive(Debug)]
struct Choice {
    /// Each attempt needing attention, with what it needs.
    marked: HashMap<(usize, u64), String>,
    /// The newest [`ATTENTION_MAX`] of `marked`.
    shown_marked: HashSet<(usize, u64)>,
    /// The attempts shown in full.
    chosen: HashSet<(usize, u64)>,
}

impl Choice {
    /// Chooses from the first pass's rows: in full, those needing attention, newest first,
    /// then the newest of the rest.
    fn of(mut rows: Vec<Row>) -> Self {
        let marked = rows
            .iter()
            .filter_map(|row| Some(((row.chain, row.seq), row.attention.clone()?)))
            .collect();
        rows.sort_by(|a, b| b.time.cmp(&a.time));
        let marked_rows = rows.iter().filter(|r| r.attention.is_some());
        let other_rows = rows.iter().filter(|r| r.attention.is_none());
        let chosen = marked_rows
            .clone()
            .take(DETAILS_ATTENTION_MAX)
            .chain(other_rows.take(DETAILS_RECENT_MAX))
            .map(|row| (row.chain, row.seq))
            .collect();
        let shown_marked = marked_rows
            .take(ATTENTION_MAX)
            .map(|r| (r.chain, r.seq))
            .collect();
        Self {
            marked,
            shown_marked,
            chosen,
        }
    }

    /// Keeps each history's newest calls, and their links only to attempts shown in full.
    fn unlink_timelines(&self, histories: &mut BTreeMap<String, History>) {
        let chosen_anchors: HashSet<String> =
            self.chosen.iter().map(|(c, s)| anchor(*c, *s)).collect();
        for history in histories.values_mut() {
            history.keep_newest_calls();
            for event in &mut history.timeline {
                if event
                    .anchor
                    .as_ref()
                    .is_some_and(|a| !chosen_anchors.contains(a))
                {
                    event.anchor = None;
                }
            }
        }
    }

    /// Keeps the sessions' links only to attempts shown in full.
    fn unlink_sessions(&self, section: &mut sessions::SessionsSection) {
        let chosen_anchors: HashSet<String> =
            self.chosen.iter().map(|(c, s)| anchor(*c, *s)).collect();
        let steps = section.rows.iter_mut().flat_map(|s| s.steps.iter_mut());
        for step in steps.filter(|step| !chosen_anchors.contains(&step.anchor)) {
            step.anchor.clear();
        }
    }

    /// Second pass: the chosen attempts' lines, newest first, and "needs attention": the rows
    /// of `gave_up` and of the marked attempts, the newest [`ATTENTION_MAX`]. `marks` says how
    /// an attempt of a session follows the one before, when it does not.
    fn second_pass(
        &self,
        chains: &[Chain],
        filter: &Filter,
        gave_up: Vec<AttentionRow>,
        marks: &HashMap<(usize, u64), sessions::MarkNote>,
    ) -> (Attention, Vec<Detail>) {
        let total = self.marked.len() as u64 + gave_up.len() as u64;
        let mut attention = gave_up;
        let mut details: Vec<Detail> = Vec::new();
        for (index, chain) in chains.iter().enumerate() {
            each_record(chain, |record, line| {
                let key = (index, record.seq);
                if is_change(&record) || !filter.admits(&record) {
                    return;
                }
                if self.shown_marked.contains(&key)
                    && let Some(what) = self.marked.get(&key)
                {
                    attention.push(self.attention_row(what, index, &record));
                }
                if self.chosen.contains(&key) {
                    let mut detail = detail(index, chain, record, line);
                    detail.session_mark = marks.get(&key).cloned();
                    details.push(detail);
                }
            });
        }
        attention.sort_by(|a, b| b.time.cmp(&a.time));
        attention.truncate(ATTENTION_MAX);
        details.sort_by(|a, b| b.record.time.cmp(&a.record.time));
        let attention = Attention {
            rows: attention,
            total,
        };
        (attention, details)
    }

    /// The row of "needs attention" for `record`, linked when its detail is shown.
    fn attention_row(&self, what: &str, index: usize, record: &Record) -> AttentionRow {
        let row = Row {
            time: record.time.clone(),
            chain: index,
            seq: record.seq,
            attention: None,
        };
        let mut row = attention_row(what.to_string(), &Who::of(record), &row);
        if !self.chosen.contains(&(index, record.seq)) {
            row.anchor.clear();
        }
        row
    }
}

/// An attempt shown in full, its code and error cut at [`TEXT_MAX`].
fn detail(index: usize, chain: &Chain, record: Record, line: &str) -> Detail {
    use base64::Engine;
    let cut = |text: String| crate::text::excerpt(&text, TEXT_MAX);
    Detail {
        anchor: anchor(index, record.seq),
        chain: chain.name.clone(),
        ending: Ending::of_record(&record),
        leaf_index: record.seq.saturating_sub(1),
        leaf_hash: base64::engine::general_purpose::STANDARD
            .encode(crate::audit::merkle::leaf_hash(line.as_bytes())),
        record: Record {
            code: record.code.clone().map(cut),
            error: record.error.clone().map(cut),
            ..record
        },
        session_mark: None,
    }
}

/// Each saved tool's history, the most recently active first, at most [`SAVED_TOOLS_MAX`],
/// and how many were left out.
fn saved_tools(
    histories: BTreeMap<String, History>,
    source: &Path,
) -> (Vec<SavedToolHistory>, usize) {
    let versions = versions_folder(source);
    let mut saved_tools: Vec<SavedToolHistory> = histories
        .into_iter()
        .map(|(name, history)| history.finish(name, versions.as_deref()))
        .collect();
    saved_tools.sort_by(|a, b| {
        let last = |h: &SavedToolHistory| h.timeline.last().map(|e| e.time.clone());
        last(b).cmp(&last(a))
    });
    let omitted = saved_tools.len().saturating_sub(SAVED_TOOLS_MAX);
    saved_tools.truncate(SAVED_TOOLS_MAX);
    (saved_tools, omitted)
}

/// Who made an attempt: what a row of "needs attention" names.
#[derive(Debug, Clone)]
struct Who {
    user: Option<String>,
    chat: Option<String>,
    tool: String,
    call: String,
}

impl Who {
    fn of(record: &Record) -> Self {
        Self {
            user: record.caller.user.clone(),
            chat: record.caller.chat.clone(),
            tool: record.caller.tool.clone(),
            call: record.caller.call.clone(),
        }
    }
}

/// One tool call's attempts, as the first pass counts them.
#[derive(Debug)]
struct CallState {
    attempts: u64,
    any_ok: bool,
    last: Row,
    who: Who,
    by_model: bool,
}

fn attention_row(what: String, who: &Who, row: &Row) -> AttentionRow {
    AttentionRow {
        what,
        time: row.time.clone(),
        user: who.user.clone(),
        chat: who.chat.clone(),
        tool: who.tool.clone(),
        call: who.call.clone(),
        anchor: anchor(row.chain, row.seq),
    }
}

/// The busiest [`TALLY_MAX`] of `table`.
fn tallies(table: HashMap<String, Tally>) -> Tallies {
    let mut rows: Vec<Tally> = table
        .into_values()
        .map(|mut tally| {
            tally.calls = tally.call_ids.len() as u64;
            tally.call_ids = HashSet::new();
            tally
        })
        .collect();
    rows.sort_by(|a, b| b.attempts.cmp(&a.attempts).then(a.name.cmp(&b.name)));
    let omitted = rows.len().saturating_sub(TALLY_MAX);
    rows.truncate(TALLY_MAX);
    Tallies { rows, omitted }
}

/// The hourly counts as they are for a short span, else summed by day; every bucket between
/// the first and the last is present (empty ones too), so the chart's x axis is time.
fn chart(hourly: BTreeMap<String, Counts>) -> (String, Vec<(String, Counts)>) {
    let parse = |hour: &str| crate::time::parse_rfc3339(&format!("{hour}:00:00Z"));
    let (Some(first), Some(last)) = (
        hourly.keys().next().and_then(|h| parse(h)),
        hourly.keys().next_back().and_then(|h| parse(h)),
    ) else {
        return ("day".into(), Vec::new());
    };
    let span_hours = last.duration_since(first).unwrap_or_default().as_secs() / 3600;
    let daily = span_hours as usize > HOURLY_SPAN_HOURS;
    let (step, width) = if daily { (86_400, 10) } else { (3600, 13) };
    let mut buckets: BTreeMap<String, Counts> = BTreeMap::new();
    let mut at = first;
    while at <= last {
        let key = crate::time::format_rfc3339(at)[..width].to_string();
        buckets.entry(key).or_insert([0; 8]);
        at += std::time::Duration::from_secs(step);
    }
    for (hour, counts) in hourly {
        let slot = buckets
            .entry(hour[..width.min(hour.len())].to_string())
            .or_insert([0; 8]);
        for (total, n) in slot.iter_mut().zip(counts) {
            *total += n;
        }
    }
    let unit = if daily { "day" } else { "hour" };
    (unit.into(), buckets.into_iter().collect())
}

/// A saved tool's lines, as the first pass collects them.
#[derive(Debug, Default)]
struct History {
    timeline: Vec<ToolEvent>,
    calls: u64,
    /// Versions in the order first seen, with when.
    versions: Vec<(String, String)>,
    owners: std::collections::BTreeSet<String>,
}

impl History {
    fn add(&mut self, mark: &ToolMark, record: &Record, ending: Option<Ending>, anchor: String) {
        if !self.versions.iter().any(|(v, _)| v == &mark.version) && !mark.version.is_empty() {
            self.versions
                .push((mark.version.clone(), record.time.clone()));
        }
        if ending.is_some() {
            self.calls += 1;
        }
        if let Some(owner) = &mark.owner {
            self.owners.insert(owner.clone());
        }
        self.timeline.push(ToolEvent {
            time: record.time.clone(),
            action: mark.action.clone(),
            version: mark.version.clone(),
            user: record.caller.user.clone(),
            ending,
            anchor: ending.map(|_| anchor),
        });
    }

    /// Every change, and the newest [`TIMELINE_CALLS_MAX`] attempts, in time order.
    fn keep_newest_calls(&mut self) {
        self.timeline.sort_by(|a, b| a.time.cmp(&b.time));
        let attempts = self.timeline.iter().filter(|e| e.ending.is_some()).count();
        let mut skip = attempts.saturating_sub(TIMELINE_CALLS_MAX);
        self.timeline.retain(|event| {
            if event.ending.is_some() && skip > 0 {
                skip -= 1;
                return false;
            }
            true
        });
        self.versions.sort_by(|a, b| a.1.cmp(&b.1));
    }

    /// Whether `version` appears only in checks that did not pass.
    fn refused_only(&self, version: &str) -> bool {
        self.timeline
            .iter()
            .filter(|e| e.version == version)
            .all(|e| e.action == "check" && e.ending != Some(Ending::Ok))
    }

    /// `version` as `store` keeps it, or why it is not shown.
    fn stored_version(
        &self,
        store: Option<&Path>,
        version: &str,
    ) -> (Option<StoredVersion>, Option<String>) {
        let Some(store) = store else {
            return (
                None,
                Some("no version store was found beside the audit folder".into()),
            );
        };
        match crate::tools::dynamic::registry::read_version(store, version) {
            Ok(kept) => (
                Some(StoredVersion {
                    code: crate::text::excerpt(&kept.code, TEXT_MAX),
                    schema: serde_json::to_string_pretty(&kept.input_schema).unwrap_or_default(),
                    description: kept.description,
                    saved_by: kept.owner,
                    saved: kept.saved,
                }),
                None,
            ),
            Err(problem) if self.refused_only(version) => (
                None,
                Some(format!(
                    "refused at its check and never saved, so not kept ({problem})"
                )),
            ),
            Err(problem) => (None, Some(problem)),
        }
    }

    /// The history as the report shows it, with each version read from `store`.
    fn finish(self, name: String, store: Option<&Path>) -> SavedToolHistory {
        let mut versions: Vec<ToolVersion> = Vec::new();
        for (version, first_seen) in self.versions.clone() {
            let (stored, problem) = self.stored_version(store, &version);
            let diff_from_previous =
                match (versions.last().and_then(|v| v.stored.as_ref()), &stored) {
                    (Some(before), Some(now)) => Some(diff::lines(&before.code, &now.code)),
                    _ => None,
                };
            versions.push(ToolVersion {
                version,
                first_seen,
                stored,
                problem,
                diff_from_previous,
            });
        }
        SavedToolHistory {
            name,
            owners: self.owners.into_iter().collect(),
            timeline: self.timeline,
            calls: self.calls,
            versions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endings_known_and_unknown() {
        assert_eq!(Ending::of("ok", ""), Ending::Ok);
        assert_eq!(Ending::of("out_of_memory", ""), Ending::OutOfMemory);
        assert_eq!(Ending::of("refused call", ""), Ending::Refused);
        assert_eq!(Ending::of("refused_output", ""), Ending::Refused);
        assert_eq!(Ending::of("pids_limit", ""), Ending::ProcessLimit);
        assert_eq!(
            Ending::of("failed", "SANDBOX_PIDS=64"),
            Ending::ProcessLimit
        );
        assert_eq!(Ending::of("sandbox_error", ""), Ending::Failed);
        assert_eq!(Ending::of("something new", ""), Ending::Failed);
        let unknown = Record {
            status: "something new".into(),
            ..Record::default()
        };
        assert!(attention_of(&unknown, Ending::of_record(&unknown)).is_some());
        let failed = Record {
            status: "failed".into(),
            ..Record::default()
        };
        assert!(attention_of(&failed, Ending::Failed).is_none());
    }

    #[test]
    fn a_tally_sums_its_attempts_cpu_seconds() {
        let mut table = HashMap::new();
        let used = |cpu_user_s, cpu_system_s| Record {
            resources: Some(crate::sandbox::Resources {
                cpu_user_s,
                cpu_system_s,
                ..Default::default()
            }),
            ..Record::default()
        };
        for record in [
            used(Some(1.0), Some(0.25)),
            used(Some(0.5), Some(0.0)),
            used(None, Some(9.0)),
            Record::default(),
        ] {
            Tally::count(
                &mut table,
                "t".into(),
                "t".into(),
                None,
                &record,
                Ending::Ok,
            );
        }
        assert_eq!(table["t"].attempts, 4);
        assert_eq!(table["t"].cpu_s, 1.75);
    }

    #[test]
    fn times_parse_as_dates_instants_and_ages() {
        assert_eq!(
            parse_time("2026-03-01", false).unwrap(),
            "2026-03-01T00:00:00.000Z"
        );
        assert_eq!(
            parse_time("2026-03-31", true).unwrap(),
            "2026-04-01T00:00:00.000Z"
        );
        assert_eq!(
            parse_time("2026-03-01T12:30:00Z", true).unwrap(),
            "2026-03-01T12:30:00.000Z"
        );
        assert!(parse_time("7d", false).unwrap() < crate::time::rfc3339_now());
        assert!(parse_time("last week", false).is_err());
    }

    #[test]
    fn the_chart_fills_empty_buckets_and_switches_to_days() {
        let mut hourly = BTreeMap::new();
        hourly.insert("2026-03-01T10".to_string(), [1, 0, 0, 0, 0, 0, 0, 0]);
        hourly.insert("2026-03-01T13".to_string(), [0, 2, 0, 0, 0, 0, 0, 0]);
        let (unit, rows) = chart(hourly.clone());
        assert_eq!((unit.as_str(), rows.len()), ("hour", 4));
        hourly.insert("2026-03-09T01".to_string(), [3, 0, 0, 0, 0, 0, 0, 0]);
        let (unit, rows) = chart(hourly);
        assert_eq!((unit.as_str(), rows.len()), ("day", 9));
        assert_eq!(rows[0].1[..2], [1, 2]);
    }
}
