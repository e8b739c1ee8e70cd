//! Files the MCP way, for clients other than Open WebUI: every output is also a resource
//! (`file-agent://files/<id>/<name>`) that `resources/read` returns whole and `resources/list`
//! lists for its owner; over stdio a PNG also comes inline as image content; and a stdio client may name
//! an input by its path, or `file://` URI, under the roots it declares.
//!
//! Who may read what: a resource's id is the capability, as for a download link; a caller
//! the server knows (a proven or trusted user over HTTP, the one user over stdio) reads only
//! its own files. A path is read from this machine only over stdio, where the client and the
//! server are the same user on the same machine; over HTTP the server's disk is not the
//! caller's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use rmcp::ErrorData;
use rmcp::model::{
    ContentBlock, ListResourcesResult, ReadResourceResult, Resource, ResourceContents,
};
use rmcp::service::{RequestContext, RoleServer};

use crate::storage::{
    Caller, LocalInput, RESOURCE_URI_PREFIX as URI_PREFIX, Storage, StorageError, decode_percent,
    resource_uri,
};
use crate::tools::progress::Made;

/// The files `resources/list` shows: the caller's newest.
const LISTED: usize = 100;

/// The longest the server waits for a client's `roots/list` answer.
const ROOTS_WAIT: Duration = Duration::from_secs(5);

/// The id and name in a resource URI of ours.
fn parse_uri(uri: &str) -> Option<(&str, String)> {
    let (id, name) = uri.strip_prefix(URI_PREFIX)?.split_once('/')?;
    let name = decode_percent(name)?;
    (!id.is_empty() && !name.is_empty()).then_some((id, name))
}

/// The content a successful call returns: its text, then a resource link for each file it
/// made and image content for each picture the call kept (`tools::progress::Outputs`).
///
/// Pictures are kept over stdio only, where the clients are desktop and editor apps that
/// draw them. Over HTTP the main client is Open WebUI, which (0.12, seen with a real one) gives
/// the model the text unchanged and skips resource links, but turns an image item into a second
/// stored copy and an extra user turn with the picture for the model, which a text-only model
/// may refuse; an HTTP client reads a picture through its resource link.
pub fn content(text: String, made: Vec<Made>) -> Vec<ContentBlock> {
    let base64 = base64::engine::general_purpose::STANDARD;
    let mut content = vec![ContentBlock::text(text)];
    for made in made {
        match made {
            Made::File { file, image } => {
                content.push(ContentBlock::resource_link(
                    Resource::new(resource_uri(&file.id, &file.name), file.name.clone())
                        .with_mime_type(file.content_type.clone())
                        .with_size(file.bytes),
                ));
                if let Some(bytes) = image {
                    content.push(ContentBlock::image(base64.encode(bytes), "image/png"));
                }
            }
            Made::Image(bytes) => {
                content.push(ContentBlock::image(base64.encode(bytes), "image/png"));
            }
        }
    }
    content
}

/// `resources/read`: the exact bytes of one of our outputs, base64, within the store's size
/// bound (`FILE_AGENT_INPUT_MAX_MIB`).
pub async fn read(
    storage: &Storage,
    uri: &str,
    caller: &Caller,
) -> Result<ReadResourceResult, ErrorData> {
    let not_ours = || {
        ErrorData::resource_not_found(
            format!(
                "{uri:?} is not a file-agent resource: its URIs are {URI_PREFIX}<id>/<name>, as a tool's result links them"
            ),
            None,
        )
    };
    let (id, name) = parse_uri(uri).ok_or_else(not_ours)?;
    let download = match storage.fetch(id, caller).await {
        Ok(download) => download,
        Err(StorageError::NotFound { .. } | StorageError::BadId { .. }) => {
            return Err(ErrorData::resource_not_found(
                format!("no file at {uri}, or it is not yours to read"),
                None,
            ));
        }
        Err(error) => return Err(ErrorData::invalid_params(error.to_string(), None)),
    };
    // A store that names the file differently (Open WebUI may) is not this resource.
    if download.name != name && storage.local().is_some() {
        return Err(not_ours());
    }
    let mime = download
        .content_type
        .unwrap_or_else(|| crate::storage::content_type_for(&name).to_string());
    let blob = base64::engine::general_purpose::STANDARD.encode(&download.bytes);
    Ok(ReadResourceResult::new(vec![
        ResourceContents::blob(blob, uri).with_mime_type(mime),
    ]))
}

/// `resources/list`: the caller's own newest outputs, nothing of anyone else's.
pub fn list(storage: &Storage, caller: &Caller) -> ListResourcesResult {
    let resources = storage
        .made_by(caller, LISTED)
        .into_iter()
        .map(|stored| {
            Resource::new(resource_uri(&stored.id, &stored.name), stored.name.clone())
                .with_mime_type(crate::storage::content_type_for(&stored.name))
                .with_size(stored.bytes)
        })
        .collect();
    ListResourcesResult {
        resources,
        ..ListResourcesResult::default()
    }
}

/// What one entry of `file_ids` names.
#[derive(Debug, PartialEq)]
enum Named {
    /// A store's id (Open WebUI's or ours), or the id in one of our resource URIs.
    Id(String),
    /// A path on the client's machine: absolute, `~/...`, or a `file://` URI.
    Path(PathBuf),
}

fn named(value: &str) -> Named {
    let value = value.trim();
    if let Some((id, _)) = parse_uri(value) {
        return Named::Id(id.to_string());
    }
    if let Some(rest) = value.strip_prefix("file://") {
        // file:///path, or file://localhost/path.
        let path = rest.strip_prefix("localhost").unwrap_or(rest);
        return Named::Path(PathBuf::from(decode_percent(path).unwrap_or_default()));
    }
    if let Some(rest) = value.strip_prefix("~/") {
        let home = std::env::var_os("HOME").unwrap_or_default();
        return Named::Path(Path::new(&home).join(rest));
    }
    if value.starts_with('/') {
        return Named::Path(PathBuf::from(value));
    }
    Named::Id(value.to_string())
}

/// The file ids a tool gets for `values`: our resource URIs become their ids, and a path is
/// opened below the client's roots and kept open in `caller` (read when the tool fetches
/// it). `Err` says why a path may not be read; nothing has run then.
pub async fn resolve(
    values: &[String],
    context: &RequestContext<RoleServer>,
    configured_roots: &[PathBuf],
    caller: &mut Caller,
) -> Result<Vec<String>, String> {
    let over_http = context.extensions.get::<http::request::Parts>().is_some();
    let mut ids = Vec::with_capacity(values.len());
    let mut roots: Option<Vec<PathBuf>> = None;
    for value in values {
        match named(value) {
            Named::Id(id) => ids.push(id),
            Named::Path(_) if over_http => {
                return Err(format!(
                    "{value:?} is a path, and over HTTP file-agent cannot read your disk (only its own): attach the file, or upload it (POST /files) and pass the id it gets"
                ));
            }
            Named::Path(path) => {
                if roots.is_none() {
                    roots = Some(client_roots(context, configured_roots).await?);
                }
                let input = within(&path, roots.as_deref().unwrap_or_default())?;
                let key = value.trim().to_string();
                caller.local_files.push((key.clone(), input));
                ids.push(key);
            }
        }
    }
    Ok(ids)
}

/// The folders a stdio client lets file-agent read: the roots it declares (asked again on
/// every call, so a change is seen at once), else `FILE_AGENT_LOCAL_ROOTS`.
///
/// Roots are deprecated by the 2026-07-28 revision (SEP-2577) but are what today's desktop
/// and editor clients declare; `FILE_AGENT_LOCAL_ROOTS` stays when they go.
#[allow(deprecated)]
async fn client_roots(
    context: &RequestContext<RoleServer>,
    configured: &[PathBuf],
) -> Result<Vec<PathBuf>, String> {
    let declares = context
        .peer
        .peer_info()
        .is_some_and(|info| info.capabilities.roots.is_some());
    if declares {
        let listed = tokio::time::timeout(ROOTS_WAIT, context.peer.list_roots())
            .await
            .map_err(|_| "your client did not answer roots/list within 5 s".to_string())?
            .map_err(|error| format!("your client's roots/list failed: {error}"))?;
        let roots: Vec<PathBuf> = listed
            .roots
            .iter()
            .filter_map(|root| match named(&root.uri) {
                Named::Path(path) if root.uri.starts_with("file://") => Some(path),
                _ => None,
            })
            .collect();
        if roots.is_empty() {
            return Err(
                "your client declares no folder (no file:// root): open a folder in it for file-agent to read from".into(),
            );
        }
        return Ok(roots);
    }
    if configured.is_empty() {
        return Err(
            "no folder is open to file-agent: your client declares no roots, and FILE_AGENT_LOCAL_ROOTS is not set; set it to the folders file-agent may read (comma-separated)".into(),
        );
    }
    Ok(configured.to_vec())
}

/// `path` opened, when it is a regular file below one of `roots` reached through no link
/// there ([`LocalInput::open`]): the check is the open, and the tool reads what was checked.
fn within(path: &Path, roots: &[PathBuf]) -> Result<LocalInput, String> {
    LocalInput::open(path, roots).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_paths_and_ids_are_told_apart() {
        let id = "0123456789abcdef0123456789abcdef";
        let uri = resource_uri(id, "Q3 report.xlsx");
        assert_eq!(uri, format!("{URI_PREFIX}{id}/Q3%20report.xlsx"));
        assert_eq!(parse_uri(&uri), Some((id, "Q3 report.xlsx".to_string())));
        assert_eq!(named(&uri), Named::Id(id.into()));
        assert_eq!(named(" abc-123 "), Named::Id("abc-123".into()));
        assert_eq!(named("/tmp/a b.csv"), Named::Path("/tmp/a b.csv".into()));
        assert_eq!(
            named("file:///tmp/a%20b.csv"),
            Named::Path("/tmp/a b.csv".into())
        );
        assert_eq!(
            named("file://localhost/tmp/x.csv"),
            Named::Path("/tmp/x.csv".into())
        );
        assert_eq!(parse_uri("file-agent://files/x"), None);
    }

    /// A local store holding at most 1 MiB per input.
    fn local_storage(data: &Path) -> Storage {
        let config = crate::config::StorageConfig::Local(crate::config::LocalStoreConfig {
            data_dir: data.to_path_buf(),
            public_url: String::new(),
        });
        let limits = crate::config::TransferLimits {
            max_bytes: 1 << 20,
            timeout: Duration::from_secs(5),
        };
        Storage::new(&config, limits).unwrap()
    }

    /// What a stdio call does with a path: `resolve`'s check, then the tool's fetch.
    async fn read_by_path(
        storage: &Storage,
        path: &Path,
        roots: &[PathBuf],
    ) -> Result<Vec<u8>, String> {
        let mut caller = Caller::new(crate::owner::Owner::local());
        let key = path.display().to_string();
        caller.local_files.push((key.clone(), within(path, roots)?));
        let download = storage.fetch(&key, &caller).await;
        download.map(|d| d.bytes).map_err(|error| error.to_string())
    }

    #[tokio::test]
    async fn a_file_below_a_root_is_read_and_links_below_it_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let storage = local_storage(&dir.path().join("data"));
        let (root, elsewhere) = (dir.path().join("root"), dir.path().join("elsewhere"));
        for folder in [root.join("sub"), elsewhere.clone()] {
            std::fs::create_dir_all(folder).unwrap();
        }
        std::fs::write(root.join("sub/in.csv"), "a\n1\n").unwrap();
        std::fs::write(elsewhere.join("secret.txt"), "TOP-SECRET").unwrap();
        let link = |target: &Path, at: &str| std::os::unix::fs::symlink(target, root.join(at));
        link(&elsewhere.join("secret.txt"), "file-link.txt").unwrap();
        link(&elsewhere, "folder-link").unwrap();
        link(&root.join("sub"), "inner-link").unwrap();
        let roots = [root.clone()];
        let read = |path: PathBuf| {
            let (storage, roots) = (&storage, &roots);
            async move { read_by_path(storage, &path, roots).await }
        };
        assert_eq!(read(root.join("sub/in.csv")).await.unwrap(), b"a\n1\n");
        // `.` and `..` are taken by name below the root, and none may climb out of it.
        assert_eq!(
            read(root.join("sub/./x/../in.csv")).await.unwrap(),
            b"a\n1\n"
        );
        let error = read(root.join("sub/none.csv")).await.unwrap_err();
        assert!(error.contains("No such file"), "{error}");
        // A link below the root is refused wherever it points, the file or a folder on the way.
        for (named, link) in [
            ("file-link.txt", "file-link.txt"),
            ("folder-link/secret.txt", "folder-link"),
            ("inner-link/in.csv", "inner-link"),
        ] {
            let error = read(root.join(named)).await.unwrap_err();
            let expected = format!(
                "{} is a symbolic link below the root",
                root.canonicalize().unwrap().join(link).display()
            );
            assert!(error.contains(&expected), "{error}");
            assert!(error.contains("name the file itself"), "{error}");
        }
        for outside in [
            elsewhere.join("secret.txt"),
            root.join("../elsewhere/secret.txt"),
        ] {
            let error = read(outside).await.unwrap_err();
            assert!(error.contains("outside the folders"), "{error}");
            assert!(error.contains(&root.display().to_string()), "{error}");
        }
        let error = read(root.join("sub")).await.unwrap_err();
        assert!(
            error.contains("is not a regular file (a folder)"),
            "{error}"
        );
        // The size bound holds for what is read from the descriptor.
        std::fs::write(root.join("big.bin"), vec![0; (1 << 20) + 1]).unwrap();
        let error = read(root.join("big.bin")).await.unwrap_err();
        assert!(error.contains("larger than the 1 MiB"), "{error}");
    }

    #[tokio::test]
    async fn a_root_declared_through_a_link_is_resolved_once() {
        let dir = tempfile::tempdir().unwrap();
        let storage = local_storage(&dir.path().join("data"));
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("in.csv"), "a\n1\n").unwrap();
        let declared = dir.path().join("declared");
        std::os::unix::fs::symlink(&real, &declared).unwrap();
        let roots = [declared.clone()];
        for named in [declared.join("in.csv"), real.join("in.csv")] {
            let read = read_by_path(&storage, &named, &roots).await;
            assert_eq!(read.unwrap(), b"a\n1\n", "{}", named.display());
        }
    }

    /// Opening a FIFO for writing without blocking fails with ENXIO exactly when nobody has it
    /// open for reading: no descriptor and no thread blocked in `open` is left on it.
    fn nobody_reads(fifo: &Path) -> bool {
        use std::os::unix::fs::OpenOptionsExt;
        let writer = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(fifo);
        writer.is_err_and(|error| error.raw_os_error() == Some(nix::libc::ENXIO))
    }

    #[tokio::test]
    async fn a_fifo_is_refused_at_once_even_when_it_replaces_a_checked_file() {
        let dir = tempfile::tempdir().unwrap();
        let storage = local_storage(&dir.path().join("data"));
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let roots = [root.clone()];
        let fifo = root.join("pipe.csv");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let soon = Duration::from_millis(300);
        let read = tokio::time::timeout(soon, read_by_path(&storage, &fifo, &roots)).await;
        let left = !nobody_reads(&fifo);
        let error = read.expect("reading a FIFO blocked").unwrap_err();
        assert!(error.contains("is not a regular file (a FIFO)"), "{error}");
        assert!(!left, "a reader was left on the FIFO");

        // Checked as a regular file, then replaced by a FIFO before the tool reads it: what
        // is read is the file that was checked.
        let late = root.join("late.csv");
        std::fs::write(&late, "checked").unwrap();
        let mut caller = Caller::new(crate::owner::Owner::local());
        let key = late.display().to_string();
        caller
            .local_files
            .push((key.clone(), within(&late, &roots).unwrap()));
        std::fs::remove_file(&late).unwrap();
        nix::unistd::mkfifo(&late, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let read = tokio::time::timeout(soon, storage.fetch(&key, &caller)).await;
        let left = !nobody_reads(&late);
        assert!(read.is_ok(), "reading a FIFO blocked");
        assert!(!left, "a reader was left on the FIFO");
        assert_eq!(read.unwrap().unwrap().bytes, b"checked");
    }

    /// Reads `root/sub/data.txt` through the real path `rounds` times while another thread
    /// keeps swapping `root/sub` (a folder) with a link to a folder outside holding a secret
    /// file of the same name. Returns (reads of the harmless file, refusals); panics on any
    /// byte of the secret.
    async fn race_a_swapped_folder(rounds: usize) -> (usize, usize) {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let storage = local_storage(&dir.path().join("data"));
        let (root, outside) = (dir.path().join("root"), dir.path().join("outside"));
        for folder in [root.join("sub"), outside.clone()] {
            std::fs::create_dir_all(folder).unwrap();
        }
        std::fs::write(root.join("sub/data.txt"), "harmless").unwrap();
        std::fs::write(outside.join("data.txt"), "TOP-SECRET").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("swap")).unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = std::thread::spawn({
            let (stop, root) = (stop.clone(), root.clone());
            move || {
                let at = nix::fcntl::AT_FDCWD;
                let exchange = nix::fcntl::RenameFlags::RENAME_EXCHANGE;
                let (sub, swap) = (root.join("sub"), root.join("swap"));
                while !stop.load(Ordering::Relaxed) {
                    nix::fcntl::renameat2(at, &sub, at, &swap, exchange).unwrap();
                    std::thread::sleep(Duration::from_micros(10));
                }
            }
        });
        let (mut harmless, mut refused, mut secret) = (0, 0, 0);
        let roots = [root.clone()];
        for _ in 0..rounds {
            match read_by_path(&storage, &root.join("sub/data.txt"), &roots).await {
                Ok(bytes) if bytes == b"harmless" => harmless += 1,
                Ok(bytes) => secret += bytes.len(),
                Err(error) if error.contains("TOP-SECRET") => secret += 1,
                Err(_) => refused += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert_eq!(secret, 0, "secret bytes read in {rounds} rounds");
        (harmless, refused)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_swapped_for_a_link_between_check_and_read_never_leaks_a_byte() {
        let (harmless, refused) = race_a_swapped_folder(3000).await;
        // Both sides of the swap were seen: the race ran.
        assert!(
            harmless > 0 && refused > 0,
            "{harmless} read, {refused} refused"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_openat2_the_walk_never_leaks_a_byte_of_a_swapped_folder_either() {
        crate::storage::local_input::without_openat2();
        let (harmless, refused) = race_a_swapped_folder(3000).await;
        assert!(
            harmless > 0 && refused > 0,
            "{harmless} read, {refused} refused"
        );
    }
}
