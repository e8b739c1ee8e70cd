//! The sandbox image's Python packages as lists: the base set (`sandbox-image/wheels.txt`,
//! compiled in) and the operator's own list, named by `SANDBOX_EXTRA_PACKAGES`. Both are
//! requirements files in the shape `pip-compile --generate-hashes` writes: one `name==version`
//! per requirement, each with `--hash=sha256:` of the one file to install.
//!
//! Everything here is checked without a download: a line without a hash, a loose pin, an
//! option line, a package the base set already pins (both lines named), pip itself, a list
//! over [`EXTRA_LIST_MAX_BYTES`] or [`EXTRA_PACKAGES_MAX`]. What only a download can tell (a
//! source-only package, a wheel for another Python or platform, a file that is not there) is
//! `sandbox::wheels`'s. This module reads the one file it is named and talks to nothing.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// The largest extra list read, in bytes.
pub const EXTRA_LIST_MAX_BYTES: usize = 64 * 1024;
/// The most packages an extra list may name.
pub const EXTRA_PACKAGES_MAX: usize = 200;
/// The most the extra list's wheels may weigh together, as downloaded (MiB).
pub const EXTRA_WHEELS_MAX_MIB: u64 = 1024;
/// Where the operator's packages are documented (every refusal points there).
pub const ADDING_PACKAGES_DOCS: &str = "docs/SANDBOX.md, \"Adding packages\"";

/// The base set, as the repository has it.
const BASE_LIST: &str = include_str!("../../sandbox-image/wheels.txt");
/// The base set's file, as messages name it.
pub const BASE_LIST_NAME: &str = "sandbox-image/wheels.txt";

/// One requirement of a list: a pinned package and the hashes of the files it may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// The name as written.
    pub name: String,
    /// The exact version (`==`).
    pub version: String,
    /// The hex SHA-256 digests given with `--hash=sha256:`.
    pub hashes: Vec<String>,
    /// The line the requirement starts on (1-based).
    pub line: usize,
}

impl Pin {
    /// `name==version`.
    pub fn spec(&self) -> String {
        format!("{}=={}", self.name, self.version)
    }

    /// The name compared across lists: lower case, runs of `-`, `_`, `.` as one `-` (PEP 503).
    pub fn key(&self) -> String {
        normalise(&self.name)
    }
}

/// The operator's list, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraPackages {
    /// The file, as `SANDBOX_EXTRA_PACKAGES` names it.
    pub path: PathBuf,
    /// Its bytes: the image's tag covers them.
    pub content: Vec<u8>,
    /// Its requirements, in order.
    pub pins: Vec<Pin>,
}

impl ExtraPackages {
    /// `name==version` of every package, in the list's order, joined by `sep`.
    pub fn specs(&self, sep: &str) -> String {
        self.pins
            .iter()
            .map(Pin::spec)
            .collect::<Vec<_>>()
            .join(sep)
    }
}

/// What the image holds, as its manifest says (`sandbox-image/manifest.py`, made at build time
/// by the image's own interpreter), or as the lists say where the image's cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct Manifest {
    /// The interpreter's version (empty when taken from the lists).
    pub python: String,
    /// The extra list the image was built with.
    pub extra_list: Option<ListedFile>,
    /// Every distribution an attempt can import.
    pub packages: Vec<Package>,
}

/// The extra list a build used.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct ListedFile {
    /// Its path, as the build was given it.
    pub name: String,
    /// The hex SHA-256 of its bytes.
    pub sha256: String,
}

/// One installed distribution.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct Package {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The top-level modules it provides (empty when taken from the lists).
    #[serde(default)]
    pub import: Vec<String>,
    /// Whether it came from the operator's list.
    #[serde(default)]
    pub extra: bool,
}

impl Manifest {
    /// What the lists say the image holds: the base set and `extra`'s packages (what the
    /// image's tag covers, when the image's own manifest cannot be read).
    pub fn from_lists(extra: Option<&ExtraPackages>) -> Self {
        let package = |pin: &Pin, extra: bool| Package {
            name: pin.name.clone(),
            version: pin.version.clone(),
            import: Vec::new(),
            extra,
        };
        let mut packages: Vec<Package> = base().iter().map(|pin| package(pin, false)).collect();
        packages.extend(
            extra
                .iter()
                .flat_map(|list| list.pins.iter().map(|p| package(p, true))),
        );
        packages.sort_by_key(|p| normalise(&p.name));
        Self {
            python: String::new(),
            extra_list: extra.map(|list| ListedFile {
                name: list.path.display().to_string(),
                sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&list.content)),
            }),
            packages,
        }
    }

    /// `name==version` of the extra packages.
    pub fn extras(&self) -> Vec<String> {
        self.packages
            .iter()
            .filter(|p| p.extra)
            .map(|p| format!("{}=={}", p.name, p.version))
            .collect()
    }

    /// The packages for a prompt: `name version`, with the module to import where its name
    /// differs, the operator's marked as added.
    pub fn prompt_text(&self) -> String {
        let words = |extra: bool| {
            self.packages
                .iter()
                .filter(|p| p.extra == extra)
                .map(|p| {
                    let imports: Vec<&String> = p
                        .import
                        .iter()
                        .filter(|module| normalise(module) != normalise(&p.name))
                        .collect();
                    if imports.is_empty()
                        || p.import.iter().any(|m| normalise(m) == normalise(&p.name))
                    {
                        format!("{} {}", p.name, p.version)
                    } else {
                        let modules: Vec<&str> = imports.iter().map(|m| m.as_str()).collect();
                        format!("{} {} (import {})", p.name, p.version, modules.join(", "))
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let base = words(false);
        let extra = words(true);
        if extra.is_empty() {
            base
        } else {
            format!("{base}; added by this server's operator: {extra}")
        }
    }
}

/// Why a list cannot be used. Each message names the file, the line and what to do.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PackageListError {
    /// The file could not be read.
    #[error("cannot read {path}: {reason}; point SANDBOX_EXTRA_PACKAGES at a readable file")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The file is larger than [`EXTRA_LIST_MAX_BYTES`] or names more than
    /// [`EXTRA_PACKAGES_MAX`] packages.
    #[error("{path} is over the stated size: {what}; split off what the sandbox does not need")]
    TooLarge {
        /// The file.
        path: String,
        /// Which bound, and by how much.
        what: String,
    },
    /// A line that is not a hash-pinned requirement.
    #[error("{path} line {line} (`{text}`): {problem}")]
    Line {
        /// The file.
        path: String,
        /// The line (1-based).
        line: usize,
        /// The line as written (cut).
        text: String,
        /// What is wrong and what to do.
        problem: String,
    },
}

/// PEP 503's normalised name.
pub fn normalise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The base set's pins (`sandbox-image/wheels.txt`, compiled in).
pub fn base() -> Vec<Pin> {
    parse(BASE_LIST_NAME, BASE_LIST).unwrap_or_default()
}

/// Reads and checks the list at `path`: its size, every line, and every package against the
/// base set.
pub fn read_extra(path: &Path) -> Result<ExtraPackages, PackageListError> {
    let shown = path.display().to_string();
    let read_error = |reason: String| PackageListError::Read {
        path: shown.clone(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| read_error(e.to_string()))?;
    if !meta.is_file() {
        return Err(read_error("it is not a regular file".into()));
    }
    if meta.len() > EXTRA_LIST_MAX_BYTES as u64 {
        return Err(PackageListError::TooLarge {
            path: shown,
            what: format!(
                "{} bytes, more than the {EXTRA_LIST_MAX_BYTES} bytes a list may have",
                meta.len()
            ),
        });
    }
    let content = std::fs::read(path).map_err(|e| read_error(e.to_string()))?;
    let text = String::from_utf8(content.clone())
        .map_err(|_| read_error("it is not UTF-8 text".into()))?;
    let pins = parse(&shown, &text)?;
    if pins.len() > EXTRA_PACKAGES_MAX {
        return Err(PackageListError::TooLarge {
            path: shown,
            what: format!(
                "{} packages, more than the {EXTRA_PACKAGES_MAX} a list may name",
                pins.len()
            ),
        });
    }
    check_against_base(&shown, &pins, &base())?;
    Ok(ExtraPackages {
        path: path.to_path_buf(),
        content,
        pins,
    })
}

/// Refuses a package the base set pins already (naming both lines), and pip.
fn check_against_base(path: &str, pins: &[Pin], base: &[Pin]) -> Result<(), PackageListError> {
    for pin in pins {
        let refuse = |problem: String| PackageListError::Line {
            path: path.to_string(),
            line: pin.line,
            text: pin.spec(),
            problem,
        };
        if pin.key() == "pip" {
            return Err(refuse(
                "pip never enters the sandbox image (attempts install nothing); remove the line"
                    .into(),
            ));
        }
        if let Some(theirs) = base.iter().find(|b| b.key() == pin.key()) {
            let what = if theirs.version == pin.version {
                "is already in the base set"
            } else {
                "conflicts with the base set's pin"
            };
            return Err(refuse(format!(
                "{what}: `{}` ({BASE_LIST_NAME} line {}); the base set's version stays, so remove this line (and pick versions of your packages that work with it)",
                theirs.spec(),
                theirs.line
            )));
        }
    }
    Ok(())
}

/// The requirements of a list named `path` (for messages): comments and blank lines skipped,
/// `\` continuations joined.
pub fn parse(path: &str, text: &str) -> Result<Vec<Pin>, PackageListError> {
    let mut pins: Vec<Pin> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = strip_comment(raw);
        let (start, mut joined) = pending.take().unwrap_or((index + 1, String::new()));
        let continued = line.trim_end().ends_with('\\');
        joined.push(' ');
        joined.push_str(line.trim_end().trim_end_matches('\\'));
        if continued {
            pending = Some((start, joined));
            continue;
        }
        if joined.trim().is_empty() {
            continue;
        }
        let pin = requirement(start, joined.trim()).map_err(|problem| PackageListError::Line {
            path: path.to_string(),
            line: start,
            text: cut(joined.trim()),
            problem,
        })?;
        if let Some(earlier) = pins.iter().find(|p| p.key() == pin.key()) {
            return Err(PackageListError::Line {
                path: path.to_string(),
                line: start,
                text: pin.spec(),
                problem: format!(
                    "{} is already pinned on line {}; keep one of the two",
                    earlier.name, earlier.line
                ),
            });
        }
        pins.push(pin);
    }
    if let Some((start, joined)) = pending {
        return Err(PackageListError::Line {
            path: path.to_string(),
            line: start,
            text: cut(joined.trim()),
            problem: "the file ends after a `\\` continuation; finish the requirement".into(),
        });
    }
    Ok(pins)
}

/// `text` without a comment (`#` at the start or after white space).
fn strip_comment(text: &str) -> &str {
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            return &text[..i];
        }
    }
    text
}

/// The first 80 characters of `text`, for a message.
fn cut(text: &str) -> String {
    let mut out: String = text.chars().take(80).collect();
    if out.len() < text.len() {
        out.push_str("...");
    }
    out
}

/// One requirement, `name==version --hash=sha256:HEX ...`, or what is wrong with it.
fn requirement(line: usize, text: &str) -> Result<Pin, String> {
    let mut words = text.split_whitespace();
    let first = words.next().unwrap_or_default();
    if first.starts_with('-') {
        return Err(format!(
            "options such as `{first}` are not taken here: the host's pip configuration (pip.conf, PIP_INDEX_URL) chooses where wheels come from; list only `name==version --hash=sha256:...` lines"
        ));
    }
    let spec = first.trim_end_matches(';');
    let (name, version) = spec.split_once("==").ok_or_else(|| {
        "pin the package to one version with `==` (e.g. `tabulate==0.9.0`): only an exact pin names one file".to_string()
    })?;
    if name.contains('[') {
        return Err("extras (`name[extra]`) are not installed: packages go in with --no-deps, so list each package the extra needs on a line of its own".into());
    }
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    if !valid_name {
        return Err("a package name takes letters, digits, `-`, `_` and `.`".into());
    }
    let valid_version = !version.is_empty()
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._+!-".contains(c));
    if !valid_version {
        return Err(
            "pin the package to one version with `==` (e.g. `tabulate==0.9.0`): only an exact pin names one file".into(),
        );
    }
    let mut hashes = Vec::new();
    for word in words {
        let Some(digest) = word.strip_prefix("--hash=sha256:") else {
            return Err(format!(
                "`{word}` is not taken: after the pin only `--hash=sha256:<64 hex digits>` may follow (environment markers and other options are not)"
            ));
        };
        if digest.len() != 64 || !digest.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!("`{word}` is not a SHA-256 digest (64 hex digits)"));
        }
        hashes.push(digest.to_ascii_lowercase());
    }
    if hashes.is_empty() {
        return Err("it has no `--hash=sha256:`; add the hash of the wheel to install (`pip download --no-deps --only-binary=:all: ...` then `pip hash FILE`, or `pip-compile --generate-hashes`), see docs/SANDBOX.md, \"Adding packages\"".into());
    }
    Ok(Pin {
        name: name.to_string(),
        version: version.to_string(),
        hashes,
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "1747a6cbee6a17f41a50616d7572c893e516186ede12a76b2eeb6420af298487";

    #[test]
    fn the_base_set_parses_and_pins_numpy() {
        let base = base();
        assert!(base.len() > 20, "{base:?}");
        let numpy = base.iter().find(|p| p.key() == "numpy").unwrap();
        assert!(numpy.line > 1);
        assert_eq!(numpy.hashes.len(), 1);
    }

    #[test]
    fn a_hashed_list_with_comments_and_continuations_parses() {
        let text = format!(
            "# mine\ntabulate==0.9.0 \\\n    --hash=sha256:{HASH}  # via me\n\nPy_Foo.bar==1.0 --hash=sha256:{HASH}\n"
        );
        let pins = parse("x.txt", &text).unwrap();
        assert_eq!(pins.len(), 2);
        assert_eq!(pins[0].spec(), "tabulate==0.9.0");
        assert_eq!(pins[0].line, 2);
        assert_eq!(pins[1].key(), "py-foo-bar");
        assert_eq!(pins[1].line, 5);
    }

    #[test]
    fn each_bad_line_is_named_with_what_to_do() {
        let cases = [
            ("tabulate==0.9.0\n", "no `--hash=sha256:`"),
            (
                &*format!("tabulate>=0.9 --hash=sha256:{HASH}\n"),
                "with `==`",
            ),
            ("--index-url https://x\n", "host's pip configuration"),
            (&*format!("a[b]==1 --hash=sha256:{HASH}\n"), "extras"),
            ("a==1 --hash=sha256:abc\n", "not a SHA-256"),
            (
                &*format!("a==1 --hash=sha256:{HASH} ; python_version>'3'\n"),
                "markers",
            ),
            (
                &*format!("a==1 --hash=sha256:{HASH}\nA==2 --hash=sha256:{HASH}\n"),
                "line 1",
            ),
        ];
        for (text, expected) in cases {
            let error = parse("x.txt", text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
            assert!(error.starts_with("x.txt line "), "{error}");
        }
    }

    #[test]
    fn a_package_of_the_base_set_is_refused_naming_both_lines() {
        let base = base();
        let numpy = base.iter().find(|p| p.key() == "numpy").unwrap();
        let pins = parse("x.txt", &format!("\nNumPy==2.4.0 --hash=sha256:{HASH}\n")).unwrap();
        let error = check_against_base("x.txt", &pins, &base)
            .unwrap_err()
            .to_string();
        assert!(error.contains("x.txt line 2 (`NumPy==2.4.0`)"), "{error}");
        assert!(
            error.contains(&format!(
                "`{}` ({BASE_LIST_NAME} line {})",
                numpy.spec(),
                numpy.line
            )),
            "{error}"
        );
        let pins = parse("x.txt", &format!("pip==24.0 --hash=sha256:{HASH}\n")).unwrap();
        assert!(check_against_base("x.txt", &pins, &base).is_err());
    }

    #[test]
    fn a_list_over_the_size_is_refused_before_it_is_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.txt");
        std::fs::write(&path, "#".repeat(EXTRA_LIST_MAX_BYTES + 1)).unwrap();
        let error = read_extra(&path).unwrap_err();
        assert!(
            matches!(error, PackageListError::TooLarge { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("stated size"), "{error}");
    }
}
