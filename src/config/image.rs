//! The default of `SANDBOX_IMAGE`: the image built from this binary's own `sandbox-image/`
//! folder and the operator's extra package list (`SANDBOX_EXTRA_PACKAGES`), if any. The folder
//! is compiled in and the tag is a hash of it and of the list's bytes, so a binary always asks
//! for the image built from its own source and the list it is given, and an unchanged image is
//! never rebuilt. Building it is `sandbox::image`'s.

use sha2::{Digest, Sha256};

/// The repository part of every sandbox image tag.
pub const IMAGE_REPOSITORY: &str = "file-agent-sandbox";

/// `(name, bytes)` of files of `sandbox-image/`, each named by its path in the folder.
macro_rules! context {
    ($($name:literal),* $(,)?) => {
        [$(($name, include_bytes!(concat!("../../sandbox-image/", $name)) as &[u8])),*]
    };
}

/// The files of `sandbox-image/`, compiled in, by their path in the folder (`/` between
/// folder and file), sorted. A unit test checks that none is missing.
pub const CONTEXT: [(&str, &[u8]); 21] = context![
    "Dockerfile",
    "build-rootfs.sh",
    "change_report/__init__.py",
    "change_report/__main__.py",
    "change_report/core.py",
    "change_report/deck.py",
    "change_report/document.py",
    "change_report/sequences.py",
    "change_report/workbook.py",
    "inspect_table/__init__.py",
    "inspect_table/__main__.py",
    "inspect_table/core.py",
    "inspect_table/delimited.py",
    "inspect_table/describe.py",
    "inspect_table/excel.py",
    "inspect_table/header.py",
    "manifest.py",
    "model_tool.py",
    "packages.txt",
    "runner.py",
    "wheels.txt",
];

/// The name the extra list has in the build context and in the tag's hash.
pub const EXTRA_LIST_FILE: &str = "extra-packages.txt";

/// The hex SHA-256 of the build context (names and contents, in order), then of the extra
/// list as [`EXTRA_LIST_FILE`] when there is one.
pub fn context_hash(extra: Option<&[u8]>) -> String {
    let mut hasher = Sha256::new();
    let extra = extra.map(|content| (EXTRA_LIST_FILE, content));
    for (name, content) in CONTEXT.into_iter().chain(extra) {
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update((content.len() as u64).to_le_bytes());
        hasher.update(content);
    }
    hex::encode(hasher.finalize())
}

/// `file-agent-sandbox:<first 12 hex digits of the context hash>`, for the base set and the
/// extra list's bytes (`None`: no extra list).
pub fn tag(extra: Option<&[u8]>) -> String {
    format!("{IMAGE_REPOSITORY}:{}", &context_hash(extra)[..12])
}

/// The tag of the image without extra packages.
pub fn default_tag() -> String {
    tag(None)
}
