//! Where saved tools live: one JSON file per tool, `<data_dir>/tools/<space>/<name>.json`, where
//! `<space>` is the SHA-256 (cut to 32 hex digits) of the space's name: the owner's identity
//! in `per-user` mode, `shared` in `shared` mode. Plain files rather than an embedded database:
//! a reviewer reads, diffs and backs them up with the tools they already have, the writes are
//! rare (a create or a delete), and a rename makes each one atomic. A write goes to a temporary
//! file in the same folder, then replaces the tool's file; a crash leaves the old version or
//! the new one, never half of one.
//!
//! Every version ever saved is also kept, for reviewers: `<data_dir>/tools/versions/<version>.json`
//! (code, schema, description, who saved it and when), named by the version hash, written
//! once (a temporary file, then a rename that never replaces) and never rewritten or
//! removed: deleting a tool takes it out of listings and calls, not out of this history. An
//! audit line's `saved_tool.version` leads to exactly the code that ran.
//!
//! It does not check code or schemas (`super` does, before saving) and trusts no file it
//! reads: a file that does not parse is skipped with a warning, never served.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Tools one space may hold.
pub const MAX_TOOLS_PER_SPACE: usize = 100;
/// The registry's folder in `FILE_AGENT_DATA_DIR`.
pub const TOOLS_FOLDER: &str = "tools";
/// The folder of kept versions, in the registry's folder.
pub const VERSIONS_FOLDER: &str = "versions";

/// One version of a saved tool as kept for reviewers: what ran, whatever happened to the
/// tool since.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// Its hash ([`version_of`] its code and schema), also its file's name.
    pub version: String,
    /// The tool's name.
    pub name: String,
    /// Its description when first saved.
    pub description: String,
    /// The code.
    pub code: String,
    /// The schema of its arguments.
    pub input_schema: Map<String, Value>,
    /// The schema of its return value, when its author declared one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Map<String, Value>>,
    /// Who first saved this version.
    pub owner: String,
    /// `model` or `caller`.
    pub author: String,
    /// The model that wrote it, when a model did.
    pub model: Option<String>,
    /// When it was first saved (UTC, RFC 3339).
    pub saved: String,
}

/// Whether `version` is a version hash (64 lowercase hex digits), so that it can name a file.
fn is_version(version: &str) -> bool {
    version.len() == 64
        && version
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The kept version `version` from the versions folder `store`, checked: its content must
/// hash to its name. The error says why it cannot be shown.
pub fn read_version(store: &Path, version: &str) -> Result<VersionRecord, String> {
    if !is_version(version) {
        return Err("not a version hash".into());
    }
    let path = store.join(format!("{version}.json"));
    let bytes = std::fs::read(&path).map_err(|e| format!("not kept ({e})"))?;
    let kept: VersionRecord =
        serde_json::from_slice(&bytes).map_err(|e| format!("its file does not parse ({e})"))?;
    let hashed = version_of(&kept.code, &kept.input_schema, kept.output_schema.as_ref());
    if hashed != version || kept.version != version {
        return Err(format!(
            "{} was changed: its code and schema do not hash to its name",
            path.display()
        ));
    }
    Ok(kept)
}

/// One saved tool, as stored and as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedTool {
    /// Its name (`[a-z][a-z0-9_]{0,47}`); MCP lists it as `my_<name>`.
    pub name: String,
    /// What it does, for the model that decides to call it.
    pub description: String,
    /// The Python source, defining `run(**arguments)`.
    pub code: String,
    /// The JSON Schema of its arguments (an object schema).
    pub input_schema: Map<String, Value>,
    /// The JSON Schema of its return value (an object schema), when its author declared one:
    /// MCP lists it as the tool's `outputSchema`, and every call's result is checked against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Map<String, Value>>,
    /// The space it belongs to (its owner's identity, or `shared`).
    pub space: String,
    /// Who saved this version: the caller's identity.
    pub owner: String,
    /// Who wrote the code: `model` (`generate_tool`) or `caller` (`create_tool`).
    pub author: String,
    /// The model that wrote it, when a model did.
    pub model: Option<String>,
    /// The hex SHA-256 of the code and the schema ([`version_of`]).
    pub version: String,
    /// When the first version was saved (UTC, RFC 3339).
    pub created: String,
    /// When this version was saved.
    pub updated: String,
    /// 1 for the first version, then one more for each update.
    pub revision: u32,
}

impl SavedTool {
    /// The name MCP lists and calls it by: `my_<name>`.
    pub fn listed_name(&self) -> String {
        format!("{}{}", crate::tools::catalog::SAVED_TOOL_PREFIX, self.name)
    }

    /// The first 12 hex digits of its version, as answers show it.
    pub fn short_version(&self) -> &str {
        short_version(&self.version)
    }
}

/// The first 12 characters of `version`, as answers show it: a stored version is read back from
/// disk, so it may be shorter or not hex, and is cut on a character, never mid-byte.
pub fn short_version(version: &str) -> &str {
    match version.char_indices().nth(12) {
        Some((cut, _)) => &version[..cut],
        None => version,
    }
}

/// The version of a tool: the SHA-256 of its code, a newline, and its schema as compact JSON;
/// for a tool with an output schema, then a newline and that schema (so a tool without one
/// keeps the version it had before output schemas).
pub fn version_of(
    code: &str,
    input_schema: &Map<String, Value>,
    output_schema: Option<&Map<String, Value>>,
) -> String {
    let schema = serde_json::to_string(input_schema).unwrap_or_default();
    let hashed = match output_schema {
        None => format!("{code}\n{schema}"),
        Some(output) => format!(
            "{code}\n{schema}\n{}",
            serde_json::to_string(output).unwrap_or_default()
        ),
    };
    crate::audit::sha256_hex(hashed.as_bytes())
}

/// Why the registry could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The space holds [`MAX_TOOLS_PER_SPACE`] tools already.
    #[error(
        "you have {MAX_TOOLS_PER_SPACE} tools already, the most one owner may keep; delete one with delete_tool first"
    )]
    Full,
    /// The folder or a file could not be written or read.
    #[error("the tool registry at {path} cannot be {action}: {source}")]
    Io {
        /// The file or folder.
        path: String,
        /// What was being done.
        action: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The saved tools of every space, under one folder.
#[derive(Debug)]
pub struct Registry {
    root: PathBuf,
    /// Serialises writes, so that the count checked before a save is still true at the rename.
    writes: Mutex<()>,
}

/// What [`Registry::save`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Saved {
    /// A new tool.
    Created,
    /// A new version of a tool of the same name, which it replaced.
    Updated {
        /// The version it replaced.
        previous: String,
    },
    /// The same code and schema as the saved version: nothing changed but the description.
    Unchanged,
}

impl Registry {
    /// The registry under `root` (created if missing).
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, RegistryError> {
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(io_error(&root, "created"))?;
        Ok(Self {
            root,
            writes: Mutex::new(()),
        })
    }

    /// The folder of `space`.
    fn folder(&self, space: &str) -> PathBuf {
        let digest = crate::audit::sha256_hex(space.as_bytes());
        self.root.join(&digest[..32])
    }

    fn path(&self, space: &str, name: &str) -> PathBuf {
        self.folder(space).join(format!("{name}.json"))
    }

    /// The tools of `space`, by name.
    pub fn list(&self, space: &str) -> Vec<SavedTool> {
        let Ok(entries) = std::fs::read_dir(self.folder(space)) else {
            return Vec::new();
        };
        let mut tools: Vec<SavedTool> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.path().extension().is_some_and(|e| e == "json"))
            .filter_map(|entry| read(&entry.path()))
            .filter(|tool| tool.space == space)
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// The tool `name` of `space`, if saved.
    pub fn get(&self, space: &str, name: &str) -> Option<SavedTool> {
        read(&self.path(space, name)).filter(|tool| tool.space == space && tool.name == name)
    }

    /// Saves `tool` in its space, replacing a tool of the same name (`revision` and `created`
    /// follow the replaced one).
    pub fn save(&self, mut tool: SavedTool) -> Result<(Saved, SavedTool), RegistryError> {
        let _write = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        let previous = self.get(&tool.space, &tool.name);
        let saved = match &previous {
            None if self.list(&tool.space).len() >= MAX_TOOLS_PER_SPACE => {
                return Err(RegistryError::Full);
            }
            None => Saved::Created,
            Some(old) => {
                tool.created = old.created.clone();
                if old.version == tool.version {
                    tool.revision = old.revision;
                    Saved::Unchanged
                } else {
                    tool.revision = old.revision + 1;
                    Saved::Updated {
                        previous: old.version.clone(),
                    }
                }
            }
        };
        self.keep_version(&tool)?;
        let folder = self.folder(&tool.space);
        std::fs::create_dir_all(&folder).map_err(io_error(&folder, "created"))?;
        write_atomically(&tool, &self.path(&tool.space, &tool.name), true)?;
        Ok((saved, tool))
    }

    /// Writes `tool`'s version to the versions folder unless it is there: once, atomically,
    /// never replacing a file (the same name means the same code and schema).
    fn keep_version(&self, tool: &SavedTool) -> Result<(), RegistryError> {
        let folder = self.root.join(VERSIONS_FOLDER);
        let path = folder.join(format!("{}.json", tool.version));
        if !is_version(&tool.version) || path.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&folder).map_err(io_error(&folder, "created"))?;
        let kept = VersionRecord {
            version: tool.version.clone(),
            name: tool.name.clone(),
            description: tool.description.clone(),
            code: tool.code.clone(),
            input_schema: tool.input_schema.clone(),
            output_schema: tool.output_schema.clone(),
            owner: tool.owner.clone(),
            author: tool.author.clone(),
            model: tool.model.clone(),
            saved: tool.updated.clone(),
        };
        write_atomically(&kept, &path, false)
    }

    /// Moves the tools of space `from`, a space from before owner keys, into space `to` (its
    /// owner's key today; `crate::owner::Owner::tools_before` says which): each is written
    /// into `to` with `to` as its space (and its owner, where `from` was) and then removed from
    /// `from`. A tool whose name `to` already holds stays where it is rather than replace the
    /// newer one, as do tools past [`MAX_TOOLS_PER_SPACE`]; its versions stay kept either way.
    /// Returns how many moved. With nothing to adopt it costs one look at a folder.
    pub fn adopt(&self, from: &str, to: &str) -> usize {
        if !self.folder(from).is_dir() {
            return 0;
        }
        let _write = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        let mut moved = 0;
        let mut held = self.list(to).len();
        for tool in self.list(from) {
            if held >= MAX_TOOLS_PER_SPACE || self.get(to, &tool.name).is_some() {
                continue;
            }
            let owner = if tool.owner == from {
                to.to_string()
            } else {
                tool.owner.clone()
            };
            let adopted = SavedTool {
                space: to.to_string(),
                owner,
                ..tool.clone()
            };
            let folder = self.folder(to);
            let written = std::fs::create_dir_all(&folder)
                .map_err(io_error(&folder, "created"))
                .and_then(|()| write_atomically(&adopted, &self.path(to, &tool.name), false))
                .and_then(|()| {
                    let old = self.path(from, &tool.name);
                    std::fs::remove_file(&old).map_err(io_error(&old, "removed"))
                });
            match written {
                Ok(()) => {
                    moved += 1;
                    held += 1;
                }
                Err(error) => tracing::error!(%error, "a saved tool could not be adopted"),
            }
        }
        // Empty now (or holding only what stays): gone when empty, kept otherwise.
        let _ = std::fs::remove_dir(self.folder(from));
        if moved > 0 {
            tracing::info!(
                moved,
                "saved tools from before owner keys moved into their owner's space"
            );
        }
        moved
    }

    /// Removes the tool `name` of `space`; the removed tool, or `None` when there was none.
    pub fn delete(&self, space: &str, name: &str) -> Result<Option<SavedTool>, RegistryError> {
        let _write = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tool) = self.get(space, name) else {
            return Ok(None);
        };
        let path = self.path(space, name);
        std::fs::remove_file(&path).map_err(io_error(&path, "removed"))?;
        Ok(Some(tool))
    }
}

/// Writes `value` as JSON to `path` through a synced temporary file in the same folder and a
/// rename: the file is whole or absent, never half written. With `replace` false an existing
/// file is kept (the versions: the same name holds the same content).
fn write_atomically(
    value: &impl Serialize,
    path: &Path,
    replace: bool,
) -> Result<(), RegistryError> {
    let folder = path.parent().unwrap_or(Path::new("."));
    let json = serde_json::to_vec_pretty(value).map_err(|e| RegistryError::Io {
        path: path.display().to_string(),
        action: "written",
        source: e.into(),
    })?;
    let mut file = tempfile::NamedTempFile::new_in(folder).map_err(io_error(folder, "written"))?;
    file.write_all(&json)
        .and_then(|()| file.as_file().sync_all())
        .map_err(io_error(file.path(), "written"))?;
    let persisted = if replace {
        file.persist(path).map(drop)
    } else {
        file.persist_noclobber(path).map(drop)
    };
    match persisted {
        Ok(()) => Ok(()),
        // Another server (a replica) kept this version first: the same hash, the same content.
        Err(e) if !replace && e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_error(path, "written")(e.error)),
    }
}

/// A saved tool's file, unless it cannot be read or parsed (then a warning).
fn read(path: &Path) -> Option<SavedTool> {
    let bytes = std::fs::read(path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(tool) => Some(tool),
        Err(error) => {
            tracing::warn!(file = %path.display(), %error, "skipping a saved tool that does not parse");
            None
        }
    }
}

fn io_error(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> RegistryError {
    let path = path.display().to_string();
    move |source| RegistryError::Io {
        path,
        action,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(space: &str, name: &str, code: &str) -> SavedTool {
        let schema = Map::new();
        SavedTool {
            name: name.into(),
            description: "d".into(),
            code: code.into(),
            version: version_of(code, &schema, None),
            input_schema: schema,
            output_schema: None,
            space: space.into(),
            owner: space.into(),
            author: "caller".into(),
            model: None,
            created: "t1".into(),
            updated: "t1".into(),
            revision: 1,
        }
    }

    #[test]
    fn an_old_space_is_adopted_once_whole_and_never_over_a_newer_tool() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path()).unwrap();
        let (old, new) = ("token:aa/user:alice", "token:aa/header:alice");
        for name in ["sum", "mean"] {
            registry
                .save(tool(old, name, &format!("def run(): return '{name}'")))
                .unwrap();
        }
        registry
            .save(tool(new, "mean", "def run(): return 'newer'"))
            .unwrap();
        assert_eq!(registry.adopt(old, new), 1);
        let sum = registry.get(new, "sum").unwrap();
        assert_eq!((sum.space.as_str(), sum.owner.as_str()), (new, new));
        assert_eq!(
            registry.get(new, "mean").unwrap().code,
            "def run(): return 'newer'"
        );
        // The tool that could not move stays in the old space, out of every listing of `new`'s
        // and of any other key's.
        assert_eq!(registry.list(old).len(), 1);
        assert_eq!(registry.adopt(old, new), 0);
        assert_eq!(registry.adopt("nothing/here", new), 0);
        assert_eq!(registry.list(new).len(), 2);
    }

    #[test]
    fn tools_are_saved_per_space_updated_as_new_versions_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path()).unwrap();
        let (saved, _) = registry
            .save(tool("alice", "sum", "def run(): return 1"))
            .unwrap();
        assert_eq!(saved, Saved::Created);
        assert!(registry.list("bob").is_empty());
        assert!(registry.get("bob", "sum").is_none());

        let mut update = tool("alice", "sum", "def run(): return 2");
        update.created = "t2".into();
        let (saved, stored) = registry.save(update).unwrap();
        let first: String = version_of("def run(): return 1", &Map::new(), None);
        assert_eq!(
            saved,
            Saved::Updated {
                previous: first.clone()
            }
        );
        assert_eq!((stored.revision, stored.created.as_str()), (2, "t1"));
        let (saved, _) = registry
            .save(tool("alice", "sum", "def run(): return 2"))
            .unwrap();
        assert_eq!(saved, Saved::Unchanged);

        // A second registry over the same folder (a restart) sees the same tools.
        let reopened = Registry::open(dir.path()).unwrap();
        assert_eq!(reopened.list("alice").len(), 1);
        assert_eq!(reopened.get("alice", "sum").unwrap().revision, 2);
        assert_eq!(
            reopened.delete("alice", "sum").unwrap().unwrap().name,
            "sum"
        );
        assert!(reopened.delete("alice", "sum").unwrap().is_none());
        assert!(reopened.list("alice").is_empty());

        // Both versions outlive the tool, each readable by its hash; an edited one is not
        // served as what ran.
        let store = dir.path().join(VERSIONS_FOLDER);
        let second = version_of("def run(): return 2", &Map::new(), None);
        let kept = read_version(&store, &first).unwrap();
        assert_eq!(kept.code, "def run(): return 1");
        assert_eq!(
            read_version(&store, &second).unwrap().code,
            "def run(): return 2"
        );
        let path = store.join(format!("{second}.json"));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("return 2", "return 3")).unwrap();
        assert!(
            read_version(&store, &second)
                .unwrap_err()
                .contains("changed")
        );
        assert!(read_version(&store, "../../etc/passwd").is_err());
    }

    #[test]
    fn a_space_holds_a_bounded_number_of_tools_and_a_broken_file_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path()).unwrap();
        for n in 0..MAX_TOOLS_PER_SPACE {
            registry
                .save(tool("alice", &format!("t{n}"), "def run(): pass"))
                .unwrap();
        }
        assert!(matches!(
            registry.save(tool("alice", "one_more", "def run(): pass")),
            Err(RegistryError::Full)
        ));
        // Replacing one is still allowed.
        registry
            .save(tool("alice", "t0", "def run(): return 0"))
            .unwrap();
        std::fs::write(registry.path("alice", "t1"), b"{ not json").unwrap();
        assert!(registry.get("alice", "t1").is_none());
        assert_eq!(registry.list("alice").len(), MAX_TOOLS_PER_SPACE - 1);
    }
}
