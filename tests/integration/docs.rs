//! The docs hold together. Every relative link in `README.md`, `ARCHITECTURE.md`, `CHANGELOG.md`
//! and `docs/*.md` reaches a file that exists, and where it has a `#fragment`, a heading of that
//! file whose GitHub anchor is the fragment. The settings table of `docs/OPERATING.md` lists
//! exactly the variables the code knows (`config::names::KNOWN`, which `serve` and `doctor`
//! check the environment against), so a new setting cannot go undocumented nor a removed one
//! stay. `CHANGELOG.md`'s newest release is `Cargo.toml`'s version, so a bump cannot go out
//! without its section. CI (`.ci/run`) runs the README's test command word for word. Plain file
//! reads: no Docker, no server.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use file_agent::config::names::KNOWN;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The doc that holds the settings table, and the heading the table is under.
const SETTINGS_DOC: &str = "docs/OPERATING.md";
const SETTINGS_HEADING: &str = "## Settings";

/// Known names that are the tests' own, not the server's settings: they are documented in
/// `docs/DEVELOPMENT.md` instead of the settings table.
const TEST_ONLY_PREFIX: &str = "FILE_AGENT_TEST_";
const DEVELOPMENT_DOC: &str = "docs/DEVELOPMENT.md";

/// The markdown files whose links are checked: the top-level docs and every `docs/*.md`.
fn markdown_files() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut files: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"]
        .iter()
        .map(|name| root.join(name))
        .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// `text` with fenced code blocks and inline code spans blanked out (newlines kept, so line
/// numbers stay), since a `](` in code is no link.
fn prose(text: &str) -> String {
    without_code_spans(&unfenced(text))
}

/// `text` with its fenced code blocks blanked out (newlines kept), since a `#` line in a shell
/// block is no heading.
fn unfenced(text: &str) -> String {
    let mut unfenced = String::with_capacity(text.len());
    let mut in_fence = false;
    for line in text.split_inclusive('\n') {
        let fence = line.trim_start().starts_with("```");
        if fence {
            in_fence = !in_fence;
        }
        if fence || in_fence {
            unfenced.push_str(if line.ends_with('\n') { "\n" } else { "" });
        } else {
            unfenced.push_str(line);
        }
    }
    unfenced
}

/// `text` with every inline code span (a run of n backticks up to the next run of exactly n,
/// within one paragraph) replaced by spaces, newlines kept.
fn without_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        match closing_run(&chars, i + run, run) {
            Some(end) => {
                for c in &chars[i..end + run] {
                    out.push(if *c == '\n' { '\n' } else { ' ' });
                }
                i = end + run;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// Where a run of exactly `run` backticks starts at or after `from`, before a blank line.
fn closing_run(chars: &[char], from: usize, run: usize) -> Option<usize> {
    let mut j = from;
    while j < chars.len() {
        if chars[j] == '\n' && chars.get(j + 1) == Some(&'\n') {
            return None;
        }
        if chars[j] == '`' {
            let length = chars[j..].iter().take_while(|c| **c == '`').count();
            if length == run {
                return Some(j);
            }
            j += length;
        } else {
            j += 1;
        }
    }
    None
}

/// The targets of the inline links (`[text](target)`, images too) in `prose`, each with its
/// line number.
fn links(prose: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut rest = prose;
    let mut offset = 0;
    while let Some(at) = rest.find("](") {
        let start = at + 2;
        let mut depth = 1;
        let mut end = None;
        for (k, c) in rest[start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(start + k);
                        break;
                    }
                }
                // A link's target never spans lines.
                '\n' => break,
                _ => {}
            }
        }
        let Some(end) = end else {
            offset += start;
            rest = &rest[start..];
            continue;
        };
        let raw = rest[start..end].trim();
        // `<target>` and `target "title"`: the target alone.
        let target = raw
            .strip_prefix('<')
            .and_then(|inner| inner.split('>').next())
            .unwrap_or_else(|| raw.split_whitespace().next().unwrap_or(""));
        let line = prose[..offset + start].matches('\n').count() + 1;
        found.push((line, target.to_string()));
        offset += end;
        rest = &rest[end..];
    }
    found
}

/// GitHub's anchor for a heading's text: links reduced to their text, lower case, every
/// character other than a letter, a digit, a space, `-` or `_` dropped, spaces made `-`.
fn anchor(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](target)` counts as its text.
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|k| open + k) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|k| close + k) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown text's ATX headings (`#` to `######`), repeats numbered `-1`,
/// `-2`, ... as GitHub numbers them.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    // Code in a heading counts: only fences are blanked.
    for line in unfenced(text).lines() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let heading = line[hashes..].trim().trim_end_matches('#').trim();
        let base = anchor(heading);
        let mut candidate = base.clone();
        let mut n = 0;
        while seen.contains(&candidate) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
        seen.insert(candidate);
    }
    seen
}

/// Whether a link target names a scheme (`https:`, `mailto:`, `file:`): not a file of ours.
fn has_scheme(target: &str) -> bool {
    let Some(colon) = target.find(':') else {
        return false;
    };
    let scheme = &target[..colon];
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Every relative link of the markdown file `file` that does not resolve, as
/// `file:line: target: why`.
fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut broken = Vec::new();
    for (line, target) in links(&prose(&text)) {
        if target.is_empty() || has_scheme(&target) {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            file.parent().unwrap().join(path)
        };
        let mut why = None;
        if !resolved.exists() {
            why = Some(format!("{} does not exist", resolved.display()));
        } else if let Some(fragment) = fragment {
            if resolved.extension().is_none_or(|ext| ext != "md") {
                why = Some(format!(
                    "a fragment on {}, not a markdown file",
                    resolved.display()
                ));
            } else {
                let target_text = std::fs::read_to_string(&resolved).unwrap();
                if !anchors(&target_text).contains(fragment) {
                    why = Some(format!(
                        "{} has no heading whose anchor is #{fragment}",
                        resolved.display()
                    ));
                }
            }
        }
        if let Some(why) = why {
            broken.push(format!("{}:{line}: ({target}): {why}", file.display()));
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let files = markdown_files();
    assert!(files.len() >= 9, "{files:?}");
    let broken: Vec<String> = files.iter().flat_map(|file| broken_links(file)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The link check finds a missing file and a missing heading, and takes GitHub's anchors,
/// repeats, code and absolute URLs as GitHub does.
#[test]
fn the_link_check_finds_a_missing_file_and_a_missing_heading() {
    let dir = std::env::temp_dir().join(format!("file-agent-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("target.md"),
        "# Title\n\n## gVisor (`SANDBOX_RUNTIME=runsc`)\n\n## Notes\n\n## Notes\n\n\
         ```sh\n# not a heading\n```\n",
    )
    .unwrap();
    let source = dir.join("source.md");
    std::fs::write(
        &source,
        "# Source\n\n\
         [ok](target.md) [ok](target.md#gvisor-sandbox_runtimerunsc) [ok](target.md#notes-1)\n\
         [ok](#source) [ok](https://example.com/missing.md) `[code](missing.md)`\n\
         [missing file](missing.md)\n\
         [missing heading](target.md#not-a-heading)\n\
         [third notes](target.md#notes-2)\n\n\
         ```\n[fenced](missing.md)\n```\n",
    )
    .unwrap();
    let broken = broken_links(&source);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(broken[0].contains(":5: (missing.md)"), "{broken:#?}");
    assert!(
        broken[1].contains(":6: (target.md#not-a-heading)"),
        "{broken:#?}"
    );
    assert!(broken[2].contains(":7: (target.md#notes-2)"), "{broken:#?}");
}

/// The variable names in the first column of the settings table.
fn settings_in_table() -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(SETTINGS_DOC)).unwrap();
    let section = text
        .split_once(&format!("\n{SETTINGS_HEADING}\n"))
        .unwrap_or_else(|| panic!("{SETTINGS_DOC} has no {SETTINGS_HEADING:?} heading"))
        .1;
    let section = section.split("\n## ").next().unwrap();
    let mut names = Vec::new();
    for row in section.lines().filter(|line| line.starts_with("| `")) {
        let first = row.split('|').nth(1).unwrap();
        let cell_names: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
        for name in cell_names {
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
                "the settings table's first column holds variable names only: {row}"
            );
            names.push(name.to_string());
        }
    }
    names
}

#[test]
fn the_settings_table_lists_exactly_the_variables_the_code_knows() {
    let table: BTreeSet<String> = settings_in_table().into_iter().collect();
    assert!(table.len() > 60, "{table:?}");
    let (test_only, settings): (Vec<&str>, Vec<&str>) = KNOWN
        .iter()
        .partition(|name| name.starts_with(TEST_ONLY_PREFIX));
    let missing: Vec<&&str> = settings
        .iter()
        .filter(|name| !table.contains(**name))
        .collect();
    let unknown: Vec<&String> = table
        .iter()
        .filter(|name| !KNOWN.contains(&name.as_str()))
        .collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "the settings table of {SETTINGS_DOC} and config::names::KNOWN differ: \
         known but not in the table: {missing:?}; in the table but not known: {unknown:?}"
    );
    let development = std::fs::read_to_string(Path::new(ROOT).join(DEVELOPMENT_DOC)).unwrap();
    for name in test_only {
        assert!(
            !table.contains(name) && development.contains(&format!("`{name}`")),
            "{name} is the tests' own: {DEVELOPMENT_DOC} documents it, the settings table does not"
        );
    }
}

/// The rows of the settings table whose default is one literal value in backticks: the
/// variable and that value.
fn literal_defaults() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(SETTINGS_DOC)).unwrap();
    let section = text
        .split_once(&format!("\n{SETTINGS_HEADING}\n"))
        .unwrap()
        .1
        .split("\n## ")
        .next()
        .unwrap();
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').collect();
            let name = cells.get(1)?.trim().strip_prefix('`')?.strip_suffix('`')?;
            let default = cells.get(2)?.trim().strip_prefix('`')?.strip_suffix('`')?;
            (!default.contains('`') && !default.contains('<'))
                .then(|| (name.to_string(), default.to_string()))
        })
        .collect()
}

/// Issue 48: each default the settings table states is the code's. Setting a variable to its
/// documented default must leave the whole configuration as it is with nothing set, so a row
/// that says 30 where the code takes 60 fails here.
#[test]
fn the_settings_tables_defaults_are_the_codes() {
    use file_agent::config::Config;
    // Read by something other than `Config`: the logger, compose, the Docker client.
    const ELSEWHERE: [&str; 4] = [
        "FILE_AGENT_LOG",
        "FILE_AGENT_LOG_FORMAT",
        "FILE_AGENT_PUBLISH",
        "DOCKER_HOST",
    ];
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap().to_string();
    let configure = |extra: Option<(&str, &str)>| {
        let data_dir = data_dir.clone();
        let extra = extra.map(|(name, value)| (name.to_string(), value.to_string()));
        let config = Config::from_lookup(move |name| {
            if name == "FILE_AGENT_DATA_DIR" {
                return Some(data_dir.clone());
            }
            extra
                .as_ref()
                .filter(|(set, _)| set == name)
                .map(|(_, value)| value.clone())
        });
        format!("{:?}", config.unwrap())
    };
    let unset = configure(None);
    let defaults = literal_defaults();
    assert!(defaults.len() > 40, "{defaults:?}");
    let differing: Vec<String> = defaults
        .iter()
        .filter(|(name, _)| !ELSEWHERE.contains(&name.as_str()))
        .filter(|(name, default)| configure(Some((name, default))) != unset)
        .map(|(name, default)| format!("{name}={default}"))
        .collect();
    assert!(
        differing.is_empty(),
        "set to the default {SETTINGS_DOC} states, these change the configuration: {differing:?}"
    );
}

/// A CHANGELOG release heading, `## X.Y.Z — YYYY-MM-DD`: its version, or `None` for any other
/// line (`## Unreleased`, a version without its date, a date that is not one).
fn release_heading(line: &str) -> Option<&str> {
    let (version, date) = line.strip_prefix("## ")?.split_once(" — ")?;
    let numbers: Vec<&str> = version.split('.').collect();
    let is_number = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    let date_parts: Vec<&str> = date.split('-').collect();
    let date_ok = date_parts.len() == 3
        && date_parts.iter().all(|part| is_number(part))
        && [4, 2, 2]
            == [
                date_parts[0].len(),
                date_parts[1].len(),
                date_parts[2].len(),
            ];
    (numbers.len() == 3 && numbers.iter().all(|part| is_number(part)) && date_ok).then_some(version)
}

/// The changelog opens with "Unreleased" (what comes next), then the releases, the newest
/// first, whose version is the one `Cargo.toml` (and `file-agent --version`) says.
#[test]
fn the_changelogs_newest_release_is_cargos_version() {
    let text = std::fs::read_to_string(Path::new(ROOT).join("CHANGELOG.md")).unwrap();
    let headings: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("## "))
        .collect();
    assert_eq!(headings.first(), Some(&"## Unreleased"), "{headings:?}");
    let releases: Vec<&str> = headings[1..]
        .iter()
        .map(|heading| {
            release_heading(heading).unwrap_or_else(|| {
                panic!("{heading:?} is not a release heading, `## X.Y.Z — YYYY-MM-DD`")
            })
        })
        .collect();
    assert_eq!(
        releases.first(),
        Some(&env!("CARGO_PKG_VERSION")),
        "Cargo.toml's version has no CHANGELOG section of its own (docs/DEVELOPMENT.md, Releases)"
    );
    let version = |v: &str| -> Vec<u64> { v.split('.').map(|n| n.parse().unwrap()).collect() };
    assert!(
        releases
            .windows(2)
            .all(|pair| version(pair[0]) > version(pair[1])),
        "newest first: {releases:?}"
    );
}

#[test]
fn a_release_heading_needs_its_version_and_date() {
    assert_eq!(release_heading("## 0.2.0 — 2027-01-31"), Some("0.2.0"));
    for line in [
        "## Unreleased",
        "## 0.2.0",
        "## 0.2 — 2027-01-31",
        "## v0.2.0 — 2027-01-31",
        "## 0.2.0 — January 2027",
        "### 0.2.0 — 2027-01-31",
    ] {
        assert_eq!(release_heading(line), None, "{line}");
    }
}

/// The README's command for the tests, the line under `# the tests` in its first code block.
fn readme_test_command(readme: &str) -> Option<String> {
    let mut lines = readme
        .lines()
        .skip_while(|line| !line.starts_with("# the tests"));
    lines.next()?;
    lines.next().map(|line| line.trim().to_string())
}

/// Issue 56: CI runs the README's test command, word for word, so a newcomer's run and CI's
/// build and run the same tests in the same profile (the README's command is what CI proves).
#[test]
fn ci_runs_the_readmes_test_command() {
    let root = Path::new(ROOT);
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let command = readme_test_command(&readme).expect("a `# the tests` line and a command");
    assert!(command.contains("cargo nextest run"), "{command}");
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(
        ci.lines()
            .any(|line| line.starts_with(&format!("{command} ||"))),
        "`.ci/run` does not run the README's test command `{command}`"
    );
    // The check can fail: a command CI does not run is refused.
    let other = readme.replace(&command, "cargo nextest run --release");
    let other = readme_test_command(&other).unwrap();
    assert!(
        !ci.lines()
            .any(|line| line.starts_with(&format!("{other} ||")))
    );
}
