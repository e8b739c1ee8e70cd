//! The sandbox image: its build context is compiled into the binary, and its tag is a hash of
//! that context, so a binary always asks for the image built from its own `sandbox-image/`
//! folder and an unchanged image is never rebuilt.
//!
//! Two ways to build the same image: `build-rootfs.sh` (debootstrap + `docker import`, no
//! registry needed) and `Dockerfile` (for hosts that reach a registry). This module writes the
//! context to a temporary folder and runs one of them; it does not pull anything itself.

use std::path::Path;
use std::time::{Duration, Instant};

use thiserror::Error;

pub use crate::config::image::{CONTEXT, IMAGE_REPOSITORY, context_hash, default_tag};

/// How to build the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BuildMethod {
    /// debootstrap of Debian bookworm and `docker import`: needs root and debootstrap, no registry.
    Rootfs,
    /// `docker build` of `sandbox-image/Dockerfile`: needs a registry to pull `debian:bookworm-slim`.
    Dockerfile,
}

impl BuildMethod {
    /// The method that can work on this host: rootfs where debootstrap is installed and we are
    /// root, else the Dockerfile.
    pub fn detect() -> Self {
        let has_debootstrap = ["/usr/sbin/debootstrap", "/usr/bin/debootstrap"]
            .iter()
            .any(|p| Path::new(p).exists());
        let is_root = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
            .unwrap_or(false);
        if has_debootstrap && is_root {
            Self::Rootfs
        } else {
            Self::Dockerfile
        }
    }
}

/// Why an image build failed.
#[derive(Debug, Error)]
pub enum ImageBuildError {
    /// Writing the build context failed.
    #[error("could not write the build context: {0}")]
    Context(#[from] std::io::Error),
    /// The build command could not be started.
    #[error("could not run {command}: {source}; {hint}")]
    Spawn {
        /// The command.
        command: &'static str,
        /// The error.
        source: std::io::Error,
        /// What to install.
        hint: &'static str,
    },
    /// The build command ran and failed; its output was shown.
    #[error("{command} failed with {status}; its output is above")]
    Failed {
        /// The command.
        command: &'static str,
        /// Its exit status.
        status: std::process::ExitStatus,
    },
}

/// A finished build.
#[derive(Debug)]
pub struct Built {
    /// The tag given to the image.
    pub tag: String,
    /// How long it took.
    pub elapsed: Duration,
}

/// Builds the image of this binary's context under `tag`, showing the builder's output on
/// stderr. Checking whether it already exists is the caller's job (it needs the Docker API).
pub async fn build(method: BuildMethod, tag: &str) -> Result<Built, ImageBuildError> {
    let started = Instant::now();
    let context = tempfile::Builder::new()
        .prefix("file-agent-image-")
        .tempdir()?;
    for (name, content) in CONTEXT {
        let path = context.path().join(name);
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder)?;
        }
        std::fs::write(path, content)?;
    }
    let (command, hint, mut process) = match method {
        BuildMethod::Rootfs => {
            let mut process = tokio::process::Command::new("sh");
            process
                .arg(context.path().join("build-rootfs.sh"))
                .arg(context.path())
                .arg(tag);
            (
                "build-rootfs.sh",
                "it needs sh, debootstrap, python3 with pip and docker",
                process,
            )
        }
        BuildMethod::Dockerfile => {
            let mut process = tokio::process::Command::new("docker");
            process
                .args(["build", "--tag", tag, "--build-arg"])
                .arg(format!("IMAGE_TAG={tag}"))
                .arg(context.path());
            ("docker build", "install the docker CLI", process)
        }
    };
    // The builder's progress goes to our stderr; stdout stays free for machine-readable output.
    let status = process
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|source| ImageBuildError::Spawn {
            command,
            source,
            hint,
        })?;
    if !status.success() {
        return Err(ImageBuildError::Failed { command, status });
    }
    Ok(Built {
        tag: tag.to_string(),
        elapsed: started.elapsed(),
    })
}

/// What [`super::Sandbox::prune_images`] did.
#[derive(Debug, Default)]
pub struct Pruned {
    /// The tags removed.
    pub removed: Vec<String>,
    /// The tags kept because a container (running or stopped) uses their image.
    pub in_use: Vec<String>,
}

impl super::Sandbox {
    /// Removes the tags of `repository` other than `keep` whose image no container uses: the
    /// images of earlier `sandbox-image/` versions. Never forced: an image that a container
    /// uses (or comes to use before the removal) is kept and listed.
    pub async fn prune_images(
        &self,
        repository: &str,
        keep: &str,
    ) -> Result<Pruned, super::SandboxError> {
        use bollard::query_parameters::{ListImagesOptionsBuilder, RemoveImageOptionsBuilder};
        let docker_error = super::SandboxError::docker;
        // The images live on the local engine whatever the backend (the CLI prunes there).
        let super::engine::Engine::Docker(docker) = self.engine() else {
            return Ok(Pruned::default());
        };
        let filters = std::collections::HashMap::from([("reference", vec![repository])]);
        let images = docker
            .list_images(Some(
                ListImagesOptionsBuilder::new().filters(&filters).build(),
            ))
            .await
            .map_err(|e| docker_error("listing the sandbox images", e))?;
        let used = images_in_use(docker).await?;
        let mut pruned = Pruned::default();
        for image in images {
            let tags = image.repo_tags.iter().filter(|tag| {
                tag.rsplit_once(':')
                    .is_some_and(|(repo, _)| repo == repository)
                    && tag.as_str() != keep
            });
            for tag in tags {
                if used.contains(&image.id) {
                    pruned.in_use.push(tag.clone());
                    continue;
                }
                let options = RemoveImageOptionsBuilder::new().force(false).build();
                match docker.remove_image(tag, Some(options), None).await {
                    Ok(_) => pruned.removed.push(tag.clone()),
                    Err(bollard::errors::Error::DockerResponseServerError {
                        status_code: 409,
                        ..
                    }) => pruned.in_use.push(tag.clone()),
                    Err(e) => return Err(docker_error("removing an old sandbox image", e)),
                }
            }
        }
        Ok(pruned)
    }
}

/// The ids of the images any container uses, running or not: those are never removed.
async fn images_in_use(
    docker: &bollard::Docker,
) -> Result<std::collections::HashSet<String>, super::SandboxError> {
    use bollard::query_parameters::ListContainersOptionsBuilder;
    let containers = docker
        .list_containers(Some(ListContainersOptionsBuilder::new().all(true).build()))
        .await
        .map_err(|e| super::SandboxError::docker("listing the containers", e))?;
    Ok(containers
        .into_iter()
        .filter_map(|container| container.image_id)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files under `folder`, by their path from it (`/` between the parts), leaving out
    /// hidden ones and Python's byte-code caches (a manual run writes them).
    fn files_under(folder: &Path, prefix: &str, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(folder).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "__pycache__" {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                files_under(&entry.path(), &format!("{prefix}{name}/"), found);
            } else {
                found.push(format!("{prefix}{name}"));
            }
        }
    }

    #[test]
    fn every_file_of_the_folder_is_compiled_in() {
        let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("sandbox-image");
        let mut on_disk = Vec::new();
        files_under(&folder, "", &mut on_disk);
        on_disk.sort();
        let compiled: Vec<String> = CONTEXT.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(on_disk, compiled, "add new files to image::CONTEXT, sorted");
    }

    /// The set-up scripts start the image build before the binary exists, under the tag
    /// `scripts/image_tag.py` computes: it must be the binary's, or the build is wasted.
    #[test]
    fn the_tag_script_names_the_binarys_tag() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let output = std::process::Command::new("python3")
            .arg(root.join("scripts/image_tag.py"))
            .output()
            .expect("python3 runs scripts/image_tag.py");
        assert!(output.status.success(), "{output:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            default_tag()
        );
    }

    #[test]
    fn the_tag_is_a_stable_hash_of_the_context() {
        let tag = default_tag();
        assert_eq!(tag, default_tag());
        let (repository, hash) = tag.split_once(':').unwrap();
        assert_eq!(repository, IMAGE_REPOSITORY);
        assert_eq!(hash.len(), 12);
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
