//! The data folder is the server's own: users' files, the code they ran and who they are (the
//! local store, saved tools, the audit trail). Nothing the server creates is readable by other
//! local users: [`restrict_new_files`] sets the process's umask to `077` (folders `0700`, files
//! `0600`) before anything is created, and [`secure`] checks what is already there at start-up,
//! as PostgreSQL refuses a data directory more open than `0750`:
//! - a folder or file that other users can **write** stops the start (they could replace the
//!   audit trail or a stored file): the error says which `chmod` fixes it;
//! - one they can **read** is tightened (`chmod o-rwx`) with a warning when the server owns it;
//!   when it does not (a volume's root owned by root, as a Kubernetes `fsGroup` or a named
//!   volume makes it), a warning says so: what the server creates inside stays private anyway.
//!
//! Group bits are left as they are: a deployment that gives the data to a group (Kubernetes'
//! `fsGroup`) keeps working.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::config::{AuditPlace, Config};

/// The umask the server runs with: nothing for the group or others.
pub const UMASK: u32 = 0o077;

/// Makes everything this process creates from now on private to its user.
pub fn restrict_new_files() {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(UMASK));
}

/// A place too open to start with.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} is writable by every local user (mode {mode:04o}), who could change stored files and the audit trail; run `chmod o-w {}` (or `chmod 700`), or point {setting} elsewhere",
    path.display(),
    path.display()
)]
pub struct OpenToOthers {
    /// The folder or file.
    pub path: PathBuf,
    /// Its mode bits.
    pub mode: u32,
    /// The setting that names it.
    pub setting: &'static str,
}

/// What [`secure`] found at one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The folder or file.
    pub path: PathBuf,
    /// Its mode bits, after any tightening.
    pub mode: u32,
    /// What was done or found, for the log and `doctor`: `private`, `tightened`, or a warning.
    pub verdict: String,
}

/// The places to check: the data folder, its folders, the audit folder, and the files directly
/// in them (the chain files, the instance lock). Those that do not exist yet are skipped: they
/// are created under the private umask.
fn places(config: &Config) -> Vec<(PathBuf, &'static str)> {
    let data = config.data_dir.clone();
    let mut folders = vec![
        (data.clone(), "FILE_AGENT_DATA_DIR"),
        (data.join("files"), "FILE_AGENT_DATA_DIR"),
        (
            data.join(crate::tools::dynamic::registry::TOOLS_FOLDER),
            "FILE_AGENT_DATA_DIR",
        ),
    ];
    match &config.audit.place {
        AuditPlace::Folder(folder) => folders.push((folder.clone(), "FILE_AGENT_AUDIT_DIR")),
        AuditPlace::File(file) => {
            if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
                folders.push((parent.to_path_buf(), "FILE_AGENT_AUDIT_FILE"));
            }
        }
        AuditPlace::Off => {}
    }
    let mut places = Vec::new();
    for (folder, setting) in folders {
        if let Ok(entries) = std::fs::read_dir(&folder) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_file()) {
                    places.push((entry.path(), setting));
                }
            }
        }
        places.push((folder, setting));
    }
    places
}

/// Checks (and tightens) every place of [`places`]; the first one others can write is an
/// error. Returns what was found, for the log.
pub fn secure(config: &Config) -> Result<Vec<Checked>, OpenToOthers> {
    check_all(config, true)
}

/// What [`secure`] would find, changing nothing (for `doctor`).
pub fn inspect(config: &Config) -> Result<Vec<Checked>, OpenToOthers> {
    check_all(config, false)
}

fn check_all(config: &Config, tighten: bool) -> Result<Vec<Checked>, OpenToOthers> {
    let me = nix::unistd::geteuid().as_raw();
    let mut found = Vec::new();
    for (path, setting) in places(config) {
        if let Some(checked) = check_one(&path, setting, me, tighten)? {
            found.push(checked);
        }
    }
    Ok(found)
}

/// One place: `None` when it does not exist.
fn check_one(
    path: &Path,
    setting: &'static str,
    me: u32,
    tighten: bool,
) -> Result<Option<Checked>, OpenToOthers> {
    let Ok(metadata) = std::fs::metadata(path) else {
        return Ok(None);
    };
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o002 != 0 {
        return Err(OpenToOthers {
            path: path.to_path_buf(),
            mode,
            setting,
        });
    }
    let (mode, verdict) = if mode & 0o007 == 0 {
        (mode, "private".to_string())
    } else {
        readable_by_others(path, mode, metadata.uid() == me, tighten)
    };
    Ok(Some(Checked {
        path: path.to_path_buf(),
        mode,
        verdict,
    }))
}

/// A path other users can read: tightened when it is `ours` and `tighten` says so, else left
/// as it is; its mode now, and the verdict in words.
fn readable_by_others(path: &Path, mode: u32, ours: bool, tighten: bool) -> (u32, String) {
    if !ours {
        return (
            mode,
            "readable by other users and owned by another, so left as it is; what file-agent creates inside is private".into(),
        );
    }
    if !tighten {
        return (
            mode,
            "readable by other users: serve will tighten it".into(),
        );
    }
    let tightened = mode & !0o007;
    match std::fs::set_permissions(path, std::fs::Permissions::from_mode(tightened)) {
        Ok(()) => (tightened, "tightened: other users could read it".into()),
        Err(error) => (
            mode,
            format!("readable by other users, and could not be tightened ({error})"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(data: &Path) -> Config {
        let data = data.display().to_string();
        Config::from_lookup(|name| (name == "FILE_AGENT_DATA_DIR").then(|| data.clone())).unwrap()
    }

    #[test]
    fn readable_places_are_tightened_and_writable_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let audit = data.join("audit");
        std::fs::create_dir_all(&audit).unwrap();
        std::fs::write(audit.join("chain.jsonl"), "").unwrap();
        for (path, mode) in [
            (&data, 0o755),
            (&audit, 0o750),
            (&audit.join("chain.jsonl"), 0o644),
        ] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let found = secure(&config(&data)).unwrap();
        let mode_of = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode_of(&data), 0o750, "{found:?}");
        assert_eq!(mode_of(&audit), 0o750, "group bits are kept");
        assert_eq!(mode_of(&audit.join("chain.jsonl")), 0o640);
        assert!(found.iter().any(|c| c.verdict.starts_with("tightened")));

        std::fs::set_permissions(&audit, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = secure(&config(&data)).unwrap_err().to_string();
        assert!(
            error.contains("writable by every local user") && error.contains("chmod o-w"),
            "{error}"
        );
    }
}
