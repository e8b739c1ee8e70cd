//! The operator's extra packages, downloaded on the build host: pip fetches the wheel of each
//! line of `SANDBOX_EXTRA_PACKAGES` for the image's interpreter (CPython 3.11, manylinux up to
//! glibc 2.36, x86_64), refuses any whose hash is not listed, and leaves them in the build
//! context, from which both builds install them with no index. Nothing is ever downloaded in
//! the image, and never while an attempt runs.
//!
//! When pip fails, its log (`-vv`) tells why, line by line of the list: a version that only
//! has a source package, wheels only for other Pythons or platforms, a file whose hash is not
//! listed, or nothing found. [`explain`] turns that into one message naming the line and what
//! to do. The host's pip configuration (pip.conf, `PIP_INDEX_URL`, `PIP_FIND_LINKS`) chooses
//! where the wheels come from.

use std::path::Path;

use crate::config::packages::{EXTRA_WHEELS_MAX_MIB, ExtraPackages, Pin, normalise};

/// The image's interpreter, as pip's `--python-version` takes it.
pub const PYTHON_VERSION: &str = "3.11";
/// The newest glibc of the image (Debian bookworm's 2.36): manylinux wheels up to `2_36`.
pub const GLIBC_MINOR_MAX: u32 = 36;
/// The most of pip's log read to explain a failure.
const LOG_MAX_BYTES: u64 = 32 << 20;

/// What the image can install, in words for messages.
pub fn target_words() -> String {
    format!(
        "CPython {PYTHON_VERSION} on Linux x86_64 with glibc 2.{GLIBC_MINOR_MAX} (manylinux up to manylinux_2_{GLIBC_MINOR_MAX}_x86_64, or a pure-Python py3-none-any wheel)"
    )
}

/// pip's flags for the image's interpreter and platform.
pub fn target_flags() -> Vec<String> {
    let abi = format!("cp{}", PYTHON_VERSION.replace('.', ""));
    let mut flags: Vec<String> = [
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--abi",
        &abi,
        "--platform",
        "manylinux2014_x86_64",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for minor in 17..=GLIBC_MINOR_MAX {
        flags.push("--platform".into());
        flags.push(format!("manylinux_2_{minor}_x86_64"));
    }
    flags
}

/// Downloads the wheels of `list` into `folder` with the host's pip; `Err` is a message that
/// names the list's line and what to do. The wheels together must stay within
/// [`EXTRA_WHEELS_MAX_MIB`].
pub async fn download(list: &ExtraPackages, folder: &Path) -> Result<u64, String> {
    let scratch = tempfile::Builder::new()
        .prefix("file-agent-wheels-")
        .tempdir()
        .map_err(|e| format!("cannot make a folder for pip's log: {e}"))?;
    let requirements = scratch.path().join("extra-packages.txt");
    std::fs::write(&requirements, &list.content)
        .map_err(|e| format!("cannot write the list for pip: {e}"))?;
    let log_path = scratch.path().join("pip.log");
    let log =
        std::fs::File::create(&log_path).map_err(|e| format!("cannot write pip's log: {e}"))?;
    let status = tokio::process::Command::new("python3")
        .args(["-m", "pip", "download", "-vv", "--disable-pip-version-check"])
        .args(["--no-deps", "--require-hashes", "--only-binary=:all:"])
        .args(target_flags())
        .arg("-d")
        .arg(folder)
        .arg("-r")
        .arg(&requirements)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|e| {
            format!("cannot run `python3 -m pip` on this host ({e}); install python3 with pip (apt-get install python3-pip), which downloads the extra list's wheels")
        })?;
    if !status.success() {
        let text = read_bounded(&log_path);
        return Err(explain(list, &text));
    }
    let total = wheels_size(folder)?;
    if total > EXTRA_WHEELS_MAX_MIB << 20 {
        return Err(format!(
            "{}: its wheels weigh {} MiB together, over the stated {EXTRA_WHEELS_MAX_MIB} MiB an extra list may add to the image; every attempt's container starts from the image, so keep to what the sandbox's code needs",
            list.path.display(),
            total >> 20
        ));
    }
    Ok(total)
}

/// The bytes of the wheels in `folder`.
fn wheels_size(folder: &Path) -> Result<u64, String> {
    let mut total = 0;
    let entries = std::fs::read_dir(folder).map_err(|e| e.to_string())?;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().ends_with(".whl") {
            total += entry.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    Ok(total)
}

/// The first [`LOG_MAX_BYTES`] of pip's log, as text.
fn read_bounded(path: &Path) -> String {
    use std::io::Read;
    let mut bytes = Vec::new();
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.take(LOG_MAX_BYTES).read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Why pip failed, from its `-vv` log, as one message naming the list's line.
pub fn explain(list: &ExtraPackages, log: &str) -> String {
    let path = list.path.display();
    let at = |pin: &Pin| format!("{path} line {} (`{}`)", pin.line, pin.spec());
    if let Some((pin, file, got)) = hash_mismatch(list, log) {
        return format!(
            "{}: the wheel pip chose for the sandbox, {file}, has sha256 {got}, which the line does not list; the listed hash is of another file (a wheel for another Python or platform, or the source package): list the hash of {file} (`pip hash {file}`)",
            at(pin)
        );
    }
    let Some(pin) = not_found(list, log) else {
        return format!(
            "pip could not download the wheels of {path}; its last words: {}. Check that this host reaches the index pip is configured for (pip.conf, PIP_INDEX_URL)",
            last_errors(log)
        );
    };
    let (wheels, sources) = skipped_files(log, pin);
    if !wheels.is_empty() {
        format!(
            "{}: no wheel of this version is for the sandbox's Python and platform, {}; pip found only {}. Pick a version that publishes a wheel for CPython {PYTHON_VERSION} (cp311, abi3 or py3) on manylinux x86_64",
            at(pin),
            target_words(),
            wheels.join(", ")
        )
    } else if !sources.is_empty() {
        format!(
            "{}: only a source package is published ({}), and the sandbox image has no compiler and installs wheels only; pick a version that publishes a wheel, or build one and serve it from the index pip uses",
            at(pin),
            sources.join(", ")
        )
    } else {
        format!(
            "{}: the download failed: pip found no file of this version ({}). Check the name and version, and that this host reaches the index pip is configured for (pip.conf, PIP_INDEX_URL)",
            at(pin),
            last_errors(log)
        )
    }
}

/// The pin pip named in "No matching distribution found for NAME==VERSION".
fn not_found<'a>(list: &'a ExtraPackages, log: &str) -> Option<&'a Pin> {
    log.lines().rev().find_map(|line| {
        let rest = line.split("No matching distribution found for ").nth(1)?;
        let name = rest.split(['=', '<', '>', '!', '~', ' ']).next()?;
        list.pins.iter().find(|pin| pin.key() == normalise(name))
    })
}

/// The pin, file and digest of pip's "THESE PACKAGES DO NOT MATCH THE HASHES" report.
fn hash_mismatch<'a>(list: &'a ExtraPackages, log: &str) -> Option<(&'a Pin, String, String)> {
    let start = log.find("DO NOT MATCH THE HASHES")?;
    let report = &log[start..];
    let mut lines = report.lines().skip(1);
    let header = lines.find(|line| line.contains(" from "))?;
    let spec = header.split_whitespace().next()?;
    let name = spec.split("==").next()?;
    let pin = list.pins.iter().find(|pin| pin.key() == normalise(name))?;
    let url = header.split(" from ").nth(1)?.split_whitespace().next()?;
    let file = file_name(url).to_string();
    let got = report
        .lines()
        .find_map(|line| line.trim().strip_prefix("Got"))
        .map(|digest| digest.trim().to_string())
        .unwrap_or_default();
    Some((pin, file, got))
}

/// The files of `pin`'s version that pip skipped: wheels (with their tags) and source
/// packages.
fn skipped_files(log: &str, pin: &Pin) -> (Vec<String>, Vec<String>) {
    let (mut wheels, mut sources) = (Vec::new(), Vec::new());
    for line in log.lines() {
        let Some(rest) = line.trim().strip_prefix("Skipping link: ") else {
            continue;
        };
        let Some(url) = rest.rsplit(": ").next() else {
            continue;
        };
        let file = file_name(url);
        let Some((name, version, wheel)) = parse_file_name(file) else {
            continue;
        };
        if normalise(name) != pin.key() || version != pin.version {
            continue;
        }
        let list = if wheel { &mut wheels } else { &mut sources };
        if !list.iter().any(|known| known == file) && list.len() < 8 {
            list.push(file.to_string());
        }
    }
    (wheels, sources)
}

/// The last path part of `url`, without a fragment.
fn file_name(url: &str) -> &str {
    let url = url.split('#').next().unwrap_or(url);
    url.rsplit('/').next().unwrap_or(url)
}

/// `(name, version, is_wheel)` of a distribution's file name.
fn parse_file_name(file: &str) -> Option<(&str, &str, bool)> {
    if let Some(stem) = file.strip_suffix(".whl") {
        let mut parts = stem.split('-');
        return Some((parts.next()?, parts.next()?, true));
    }
    let stem = [".tar.gz", ".zip", ".tar.bz2", ".tgz"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))?;
    let (name, version) = stem.rsplit_once('-')?;
    Some((name, version, false))
}

/// pip's `ERROR:` lines, the last two, joined.
fn last_errors(log: &str) -> String {
    let errors: Vec<&str> = log
        .lines()
        .filter(|line| line.starts_with("ERROR:"))
        .collect();
    let tail = &errors[errors.len().saturating_sub(2)..];
    if tail.is_empty() {
        "no error line".into()
    } else {
        tail.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> ExtraPackages {
        let text = "tabulate==0.9.0 --hash=sha256:1747a6cbee6a17f41a50616d7572c893e516186ede12a76b2eeb6420af298487\ncpkg==1.0 --hash=sha256:1747a6cbee6a17f41a50616d7572c893e516186ede12a76b2eeb6420af298487\n";
        ExtraPackages {
            path: "extra.txt".into(),
            content: text.as_bytes().to_vec(),
            pins: crate::config::packages::parse("extra.txt", text).unwrap(),
        }
    }

    #[test]
    fn a_wheel_for_another_python_is_named_with_its_tags() {
        let log = "Skipping link: No sources permitted for cpkg: file:///i/srcpkg-1.0.tar.gz\nSkipping link: none of the wheel's tags (cp312-cp312-manylinux_2_17_x86_64) are compatible (run pip debug --verbose to show compatible tags): file:///i/cpkg-1.0-cp312-cp312-manylinux_2_17_x86_64.whl\nERROR: No matching distribution found for cpkg==1.0\n";
        let message = explain(&list(), log);
        assert!(
            message.starts_with("extra.txt line 2 (`cpkg==1.0`)"),
            "{message}"
        );
        assert!(
            message.contains("cpkg-1.0-cp312-cp312-manylinux_2_17_x86_64.whl"),
            "{message}"
        );
        assert!(!message.contains("srcpkg"), "{message}");
    }

    #[test]
    fn a_hash_mismatch_names_the_file_and_its_digest() {
        let log = "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n    tabulate==0.9.0 from https://x/tabulate-0.9.0-py3-none-any.whl#sha256=ab (from -r r.txt (line 1)):\n        Expected sha256 00\n             Got        abcd\n";
        let message = explain(&list(), log);
        assert!(message.starts_with("extra.txt line 1"), "{message}");
        assert!(
            message.contains("tabulate-0.9.0-py3-none-any.whl, has sha256 abcd"),
            "{message}"
        );
    }

    #[test]
    fn the_target_flags_name_every_manylinux_up_to_the_images_glibc() {
        let flags = target_flags();
        assert!(flags.contains(&"manylinux_2_36_x86_64".to_string()));
        assert!(!flags.contains(&"manylinux_2_37_x86_64".to_string()));
        assert!(flags.contains(&"cp311".to_string()));
    }
}
