//! Where saved tools live: one JSON file per tool, `<data_dir>/tools/<space>/<name>.json`, where
//! `<space>` is the SHA-256 (cut to 32 hex digits) of the space's name: the owner's identity
//! in `per-user` mode, `shared` in `shared` mode. Plain files rather than an embedded database:
//! a reviewer reads, diffs and backs them up with the tools they already have, the writes are
//! rare (a create or a delete), and a rename makes each one atomic. A write goes to a temporary
//! file in the same folder, then replaces the tool's file; a crash leaves the old version or
//! the new one, never half of one.
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
        self.version.get(..12).unwrap_or(&self.version)
    }
}

/// The version of a tool: the SHA-256 of its code, a newline, and its schema as compact JSON.
pub fn version_of(code: &str, input_schema: &Map<String, Value>) -> String {
    let schema = serde_json::to_string(input_schema).unwrap_or_default();
    crate::audit::sha256_hex(format!("{code}\n{schema}").as_bytes())
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
        let folder = self.folder(&tool.space);
        std::fs::create_dir_all(&folder).map_err(io_error(&folder, "created"))?;
        let json = serde_json::to_vec_pretty(&tool).map_err(|e| RegistryError::Io {
            path: folder.display().to_string(),
            action: "written",
            source: e.into(),
        })?;
        let mut file =
            tempfile::NamedTempFile::new_in(&folder).map_err(io_error(&folder, "written"))?;
        file.write_all(&json)
            .and_then(|()| file.as_file().sync_all())
            .map_err(io_error(file.path(), "written"))?;
        let path = self.path(&tool.space, &tool.name);
        file.persist(&path)
            .map_err(|e| io_error(&path, "written")(e.error))?;
        Ok((saved, tool))
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
            version: version_of(code, &schema),
            input_schema: schema,
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
        let first = version_of("def run(): return 1", &Map::new());
        assert_eq!(saved, Saved::Updated { previous: first });
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
