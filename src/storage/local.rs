//! The built-in store: each file at `<data dir>/files/<id>/<name>`, with a random 128-bit id
//! (unguessable, so a link is the capability to read it), served by this server at
//! `<FILE_AGENT_PUBLIC_URL>/files/<id>/<name>`. A new file always gets a new folder, so nothing
//! is ever replaced. A file a known caller made has its owner beside it (`<id>/.owner`, hidden,
//! so never served): MCP's `resources/read` and `resources/list` go by it.
//!
//! With no URL at all (`serve --stdio` without `FILE_AGENT_PUBLIC_URL`, where no server answers
//! a link), a file's link is its `file://` path on this machine.
//!
//! The HTTP routes live in `server::files`; this module only reads and writes the folder.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Download, StorageError, Stored, encode_path_segment};
use crate::config::{LocalStoreConfig, TransferLimits};
use crate::owner::Owner;

/// Characters in an id: 32 lowercase hex digits.
const ID_LEN: usize = 32;

/// The local file store.
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
    public_url: String,
    limits: TransferLimits,
}

fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> StorageError {
    let action = action.into();
    move |source| StorageError::Io { action, source }
}

impl LocalStore {
    /// Opens (creating) `<data dir>/files`.
    pub fn open(config: &LocalStoreConfig, limits: TransferLimits) -> Result<Self, StorageError> {
        let root = config.data_dir.join("files");
        std::fs::create_dir_all(&root).map_err(io(format!(
            "cannot create the local store at {} (set FILE_AGENT_DATA_DIR to a writable folder)",
            root.display()
        )))?;
        // Absolute, so that a `file://` link names the file wherever the client runs from.
        let root = std::path::absolute(&root).unwrap_or(root);
        Ok(Self {
            root,
            public_url: config.public_url.clone(),
            limits,
        })
    }

    /// Where a user gets file `id` called `name`: its download link, or with no URL to serve
    /// it at, its `file://` path on this machine.
    fn link(&self, id: &str, name: &str) -> String {
        if self.public_url.is_empty() {
            let path = self.root.join(id).join(name);
            let encoded: Vec<String> = path
                .to_string_lossy()
                .split('/')
                .map(encode_path_segment)
                .collect();
            format!("file://{}", encoded.join("/"))
        } else {
            format!(
                "{}/files/{id}/{}",
                self.public_url,
                encode_path_segment(name)
            )
        }
    }

    /// Who made file `id`, as recorded beside it (an [`Owner`]'s key, or an owner from before
    /// owner keys): `None` when nobody known did (no record, or `id` is no id). A record that
    /// cannot be read, or is longer than any key, is an error: the file is then nobody's to
    /// read, rather than everybody's.
    pub fn owner_of(&self, id: &str) -> Result<Option<String>, StorageError> {
        if !is_id(id) {
            return Ok(None);
        }
        super::read_owner_record(&self.root.join(id).join(OWNER_NAME), id)
    }

    /// The newest files (at most `limit`) that `owner` made, newest first.
    pub fn made_by(&self, owner: &Owner, limit: usize) -> Vec<Stored> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            if !matches!(self.owner_of(&id), Ok(Some(made)) if owner.lists(&made)) {
                continue;
            }
            let Ok((name, path)) = self.only_file(&id) else {
                continue;
            };
            let Ok(metadata) = std::fs::metadata(&path) else {
                continue;
            };
            let written = metadata.modified().unwrap_or(std::time::UNIX_EPOCH);
            found.push((
                written,
                Stored {
                    url: self.link(&id, &name),
                    id,
                    name,
                    bytes: metadata.len(),
                },
            ));
        }
        found.sort_by_key(|(written, _)| std::cmp::Reverse(*written));
        found.into_iter().take(limit).map(|(_, s)| s).collect()
    }

    /// The largest file accepted.
    pub fn max_bytes(&self) -> u64 {
        self.limits.max_bytes
    }

    /// Where a stored file is, if `id` and `name` name one.
    pub fn locate(&self, id: &str, name: &str) -> Option<PathBuf> {
        if !is_id(id) || !is_plain_name(name) {
            return None;
        }
        let path = self.root.join(id).join(name);
        path.is_file().then_some(path)
    }

    /// The one file in folder `id`.
    fn only_file(&self, id: &str) -> Result<(String, PathBuf), StorageError> {
        let not_found = || StorageError::NotFound { id: id.to_string() };
        if !is_id(id) {
            return Err(StorageError::BadId {
                id: id.to_string(),
                expected: "a local file id: 32 hexadecimal digits, as in /files/<id>/<name>",
            });
        }
        let dir = self.root.join(id);
        let entries = std::fs::read_dir(&dir).map_err(|_| not_found())?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_plain_name(&name) && entry.file_type().is_ok_and(|t| t.is_file()) {
                return Ok((name, entry.path()));
            }
        }
        Err(not_found())
    }

    /// Reads file `id`, refusing one over the cap.
    pub async fn fetch(&self, id: &str) -> Result<Download, StorageError> {
        let (name, path) = self.only_file(id)?;
        let size = tokio::fs::metadata(&path)
            .await
            .map_err(io(format!("cannot read {}", path.display())))?
            .len();
        if size > self.limits.max_bytes {
            return Err(StorageError::TooLarge {
                what: id.to_string(),
                limit_mib: self.limits.max_bytes / (1024 * 1024),
            });
        }
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(io(format!("cannot read {}", path.display())))?;
        Ok(Download {
            content_type: Some(super::content_type_for(&name).to_string()),
            name,
            bytes,
        })
    }

    /// Stores `bytes` as `name` under a new id, made by `owner`.
    pub async fn store(
        &self,
        name: &str,
        bytes: Vec<u8>,
        owner: &Owner,
    ) -> Result<Stored, StorageError> {
        let store = self.clone();
        let name = name.to_string();
        let owner = owner.clone();
        tokio::task::spawn_blocking(move || store.store_blocking(&name, &bytes, &owner))
            .await
            .map_err(|e| StorageError::Io {
                action: "storing a file".into(),
                source: std::io::Error::other(e.to_string()),
            })?
    }

    fn store_blocking(
        &self,
        name: &str,
        bytes: &[u8],
        owner: &Owner,
    ) -> Result<Stored, StorageError> {
        if !is_plain_name(name) {
            return Err(StorageError::BadId {
                id: name.to_string(),
                expected: "a plain file name (no folders, no control characters)",
            });
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = self.root.join(&id);
        // create_dir (not _all) fails if the folder exists: a fresh id, never a reused one.
        std::fs::create_dir(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
        // The owner first: a file is never readable without the owner it has.
        let result = write_new(&dir, OWNER_NAME, owner.as_str().as_bytes())
            .and_then(|()| write_new(&dir, name, bytes));
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        result?;
        Ok(Stored {
            url: self.link(&id, name),
            id,
            name: name.to_string(),
            bytes: bytes.len() as u64,
        })
    }

    /// Starts storing an upload named `name` under a new id, made by `owner`: its bytes go to
    /// disk as they arrive ([`Upload::write`]), never whole into memory, and nothing of it
    /// stays unless [`Upload::finish`] is reached.
    pub async fn begin(&self, name: &str, owner: &Owner) -> Result<Upload, StorageError> {
        if !is_plain_name(name) {
            return Err(StorageError::BadId {
                id: name.to_string(),
                expected: "a plain file name (no folders, no control characters)",
            });
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = self.root.join(&id);
        // create_dir (not _all) fails if the folder exists: a fresh id, never a reused one.
        tokio::fs::create_dir(&dir)
            .await
            .map_err(io(format!("cannot create {}", dir.display())))?;
        let mut upload = Upload {
            dir: dir.clone(),
            file: None,
            written: 0,
            max: self.limits.max_bytes,
            stored: Stored {
                url: self.link(&id, name),
                id,
                name: name.to_string(),
                bytes: 0,
            },
        };
        // The owner first, as for any stored file (the upload's drop removes the folder).
        let folder = dir.clone();
        let key = owner.as_str().as_bytes().to_vec();
        tokio::task::spawn_blocking(move || write_new(&folder, OWNER_NAME, &key))
            .await
            .map_err(|e| StorageError::Io {
                action: "storing an upload".into(),
                source: std::io::Error::other(e.to_string()),
            })??;
        // A temporary name in the new folder; the file gets its own name only when complete.
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(PARTIAL_NAME))
            .await
            .map_err(io(format!("cannot write in {}", dir.display())))?;
        upload.file = Some(file);
        Ok(upload)
    }

    /// Retention: deletes every stored file last written before `cutoff`, its whole folder,
    /// and returns their ids. The age is the file's modification time (a stored file is written
    /// once and never again); a folder with no file in it goes by its own. Folders whose name
    /// is not an id are left alone, and one already gone (another server pruning the same
    /// folder) is skipped.
    pub fn prune(&self, cutoff: std::time::SystemTime) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            if !is_id(&id) {
                continue;
            }
            let written = match self.only_file(&id) {
                Ok((_, path)) => std::fs::metadata(path).and_then(|m| m.modified()),
                Err(_) => entry.metadata().and_then(|m| m.modified()),
            };
            if !written.is_ok_and(|written| written < cutoff) {
                continue;
            }
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => removed.push(id),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::error!(id, %error, "retention: cannot delete a stored file");
                }
            }
        }
        removed
    }
}

/// The name of an upload's file while it arrives: hidden, so never served or fetched.
const PARTIAL_NAME: &str = ".partial";

/// The file beside a stored file that names who made it: hidden, so never served or fetched.
const OWNER_NAME: &str = ".owner";

/// An upload being written to its new folder ([`LocalStore::begin`]); dropped before
/// [`Upload::finish`], its folder is removed.
#[derive(Debug)]
pub struct Upload {
    dir: PathBuf,
    file: Option<tokio::fs::File>,
    written: u64,
    max: u64,
    stored: Stored,
}

/// Why an upload could not be written.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// More bytes than `FILE_AGENT_INPUT_MAX_MIB`.
    #[error("the file is larger than {} MiB (FILE_AGENT_INPUT_MAX_MIB)", .0 / (1024 * 1024))]
    TooLarge(u64),
    /// The disk refused.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl Upload {
    /// Appends `chunk`, refusing the upload once it passes the cap.
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), UploadError> {
        use tokio::io::AsyncWriteExt;
        self.written += chunk.len() as u64;
        if self.written > self.max {
            return Err(UploadError::TooLarge(self.max));
        }
        let dir = self.dir.display().to_string();
        match self.file.as_mut() {
            Some(file) => file
                .write_all(chunk)
                .await
                .map_err(|source| StorageError::Io {
                    action: format!("cannot write in {dir}"),
                    source,
                })
                .map_err(UploadError::from),
            None => Ok(()),
        }
    }

    /// Syncs the file and gives it its name: the upload is stored.
    pub async fn finish(mut self) -> Result<Stored, StorageError> {
        let dir = self.dir.display().to_string();
        let failed = |source| StorageError::Io {
            action: format!("cannot store a file in {dir}"),
            source,
        };
        if let Some(file) = self.file.take() {
            file.sync_all().await.map_err(failed)?;
        }
        let final_path = self.dir.join(&self.stored.name);
        tokio::fs::rename(self.dir.join(PARTIAL_NAME), &final_path)
            .await
            .map_err(failed)?;
        let mut stored = self.stored.clone();
        stored.bytes = self.written;
        // Kept: nothing to remove on drop.
        self.dir = PathBuf::new();
        Ok(stored)
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Writes through a temporary file in the same folder, then links it in place without ever
/// replacing an existing file.
fn write_new(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
    let mut temp = tempfile::NamedTempFile::new_in(dir)
        .map_err(io(format!("cannot write in {}", dir.display())))?;
    temp.write_all(bytes)
        .and_then(|()| temp.as_file().sync_all())
        .map_err(io(format!("cannot write in {}", dir.display())))?;
    temp.persist_noclobber(dir.join(name))
        .map_err(|e| StorageError::Io {
            action: format!("cannot store {name}"),
            source: e.error,
        })?;
    Ok(())
}

fn is_id(id: &str) -> bool {
    id.len() == ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A single path component with no control characters, not `.` or `..`, not hidden.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name.contains(['/', '\\'])
        && !name.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn store(dir: &Path) -> LocalStore {
        LocalStore::open(
            &LocalStoreConfig {
                data_dir: dir.to_path_buf(),
                public_url: "http://files.test".into(),
            },
            TransferLimits {
                max_bytes: 10,
                timeout: Duration::from_secs(1),
            },
        )
        .unwrap()
    }

    #[tokio::test]
    async fn stores_under_fresh_ids_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let (alice, bob) = (
            Owner::user("header", Some("aaaa"), "alice"),
            Owner::user("header", Some("bbbb"), "alice"),
        );
        let a = store
            .store("a b.txt", b"one".to_vec(), &Owner::local())
            .await
            .unwrap();
        let b = store
            .store("a b.txt", b"two".to_vec(), &alice)
            .await
            .unwrap();
        assert_ne!(a.id, b.id);
        assert_eq!(a.url, format!("http://files.test/files/{}/a%20b.txt", a.id));
        assert_eq!(store.fetch(&a.id).await.unwrap().bytes, b"one");
        assert_eq!(store.fetch(&b.id).await.unwrap().name, "a b.txt");
        assert!(store.locate(&a.id, "a b.txt").is_some());
        assert!(store.locate(&a.id, "../a b.txt").is_none());
        // The owner is kept beside the file, never served, and lists the owner's files only.
        assert_eq!(store.owner_of(&a.id).unwrap().as_deref(), Some("local"));
        assert_eq!(
            store.owner_of(&b.id).unwrap().as_deref(),
            Some("token:aaaa/header:alice")
        );
        assert!(store.locate(&b.id, ".owner").is_none());
        assert_eq!(store.fetch(&b.id).await.unwrap().name, "a b.txt");
        let listed = store.made_by(&alice, 10);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, b.id);
        assert!(store.made_by(&bob, 10).is_empty(), "another token's alice");
    }

    #[tokio::test]
    async fn an_owner_record_that_cannot_be_read_makes_the_file_nobodys() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let stored = store
            .store("a.txt", b"x".to_vec(), &Owner::local())
            .await
            .unwrap();
        let record = dir.path().join("files").join(&stored.id).join(OWNER_NAME);
        std::fs::remove_file(&record).unwrap();
        assert_eq!(store.owner_of(&stored.id).unwrap(), None, "no record");
        std::fs::write(&record, "x".repeat(4097)).unwrap();
        assert!(store.owner_of(&stored.id).is_err(), "longer than any key");
        std::fs::remove_file(&record).unwrap();
        std::fs::create_dir(&record).unwrap();
        assert!(store.owner_of(&stored.id).is_err(), "unreadable");
        assert!(store.made_by(&Owner::local(), 10).is_empty());
    }

    #[tokio::test]
    async fn without_a_url_a_link_is_the_files_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(
            &LocalStoreConfig {
                data_dir: dir.path().to_path_buf(),
                public_url: String::new(),
            },
            TransferLimits {
                max_bytes: 10,
                timeout: Duration::from_secs(1),
            },
        )
        .unwrap();
        let stored = store
            .store("a b.txt", b"one".to_vec(), &Owner::local())
            .await
            .unwrap();
        let path = dir.path().join("files").join(&stored.id).join("a b.txt");
        let expected = format!("file://{}", path.display()).replace(' ', "%20");
        assert_eq!(stored.url, expected);
    }

    #[tokio::test]
    async fn refuses_bad_ids_unknown_ids_bad_names_and_big_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        assert!(matches!(
            store.fetch("../../etc").await,
            Err(StorageError::BadId { .. })
        ));
        assert!(matches!(
            store.fetch(&"0".repeat(32)).await,
            Err(StorageError::NotFound { .. })
        ));
        let local = Owner::local();
        assert!(store.store("../x", b"1".to_vec(), &local).await.is_err());
        let big = store.store("big.bin", vec![0; 11], &local).await.unwrap();
        assert!(matches!(
            store.fetch(&big.id).await,
            Err(StorageError::TooLarge { .. })
        ));
    }
}
