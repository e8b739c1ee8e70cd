//! The default of `SANDBOX_IMAGE`: the image built from this binary's own `sandbox-image/`
//! folder. The folder is compiled in and the tag is a hash of it, so a binary always asks for
//! the image built from its own source and an unchanged image is never rebuilt. Building it is
//! `sandbox::image`'s.

use sha2::{Digest, Sha256};

/// The repository part of every sandbox image tag.
pub const IMAGE_REPOSITORY: &str = "file-agent-sandbox";

/// The files of `sandbox-image/`, compiled in. A unit test checks that none is missing.
pub const CONTEXT: [(&str, &[u8]); 8] = [
    (
        "Dockerfile",
        include_bytes!("../../sandbox-image/Dockerfile"),
    ),
    (
        "build-rootfs.sh",
        include_bytes!("../../sandbox-image/build-rootfs.sh"),
    ),
    (
        "change_report.py",
        include_bytes!("../../sandbox-image/change_report.py"),
    ),
    (
        "inspect_table.py",
        include_bytes!("../../sandbox-image/inspect_table.py"),
    ),
    (
        "model_tool.py",
        include_bytes!("../../sandbox-image/model_tool.py"),
    ),
    (
        "packages.txt",
        include_bytes!("../../sandbox-image/packages.txt"),
    ),
    ("runner.py", include_bytes!("../../sandbox-image/runner.py")),
    (
        "wheels.txt",
        include_bytes!("../../sandbox-image/wheels.txt"),
    ),
];

/// The hex SHA-256 of the build context (names and contents, in order).
pub fn context_hash() -> String {
    let mut hasher = Sha256::new();
    for (name, content) in CONTEXT {
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update((content.len() as u64).to_le_bytes());
        hasher.update(content);
    }
    hex::encode(hasher.finalize())
}

/// `file-agent-sandbox:<first 12 hex digits of the context hash>`.
pub fn default_tag() -> String {
    format!("{IMAGE_REPOSITORY}:{}", &context_hash()[..12])
}
