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

use crate::config::image::EXTRA_LIST_FILE;
pub use crate::config::image::{CONTEXT, IMAGE_REPOSITORY, context_hash, default_tag};
use crate::config::packages::ExtraPackages;

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
    /// The extra list's wheels could not be had: the message names the line and what to do.
    #[error("the extra packages cannot go into the image: {0}")]
    Packages(String),
    /// The built image's manifest could not be read or labelled.
    #[error("the image's manifest ({MANIFEST_PATH}): {0}")]
    Manifest(String),
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

/// Builds the image of this binary's context, and of `extra` when given, for `tag`, showing
/// the builder's output on stderr. The extra list's wheels are downloaded first, on this host:
/// a list that cannot be had stops here, before any build. The image is tagged
/// [`unlabelled_tag`] (its stamp says `tag`): [`super::Sandbox::label_manifest`] gives it
/// `tag` once finished. Checking whether the image already exists is the caller's job (it
/// needs the Docker API).
pub async fn build(
    method: BuildMethod,
    tag: &str,
    extra: Option<&ExtraPackages>,
) -> Result<Built, ImageBuildError> {
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
    let list_name = extra.map(|list| list.path.display().to_string());
    if let Some(list) = extra {
        eprintln!(
            "file-agent: downloading the wheels of {} ({}) for {}",
            list.path.display(),
            list.specs(", "),
            super::wheels::target_words()
        );
        let bytes = super::wheels::download(list, context.path())
            .await
            .map_err(ImageBuildError::Packages)?;
        eprintln!(
            "file-agent: {:.1} MB of extra wheels, hashes checked",
            bytes as f64 / 1e6
        );
        std::fs::write(context.path().join(EXTRA_LIST_FILE), &list.content)?;
    }
    let unlabelled = unlabelled_tag(tag);
    let (command, hint, mut process) = builder(
        method,
        context.path(),
        (tag, &unlabelled),
        list_name.as_deref(),
    );
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
        tag: unlabelled,
        elapsed: started.elapsed(),
    })
}

/// The build command for `method` in `context`: its name, what to install when it is missing,
/// and the command, which tags its image `unlabelled` and stamps it `tag`. `list_name` is the
/// extra list's path, for the image's manifest.
fn builder(
    method: BuildMethod,
    context: &Path,
    (tag, unlabelled): (&str, &str),
    list_name: Option<&str>,
) -> (&'static str, &'static str, tokio::process::Command) {
    match method {
        BuildMethod::Rootfs => {
            let mut process = tokio::process::Command::new("sh");
            process
                .arg(context.join("build-rootfs.sh"))
                .arg(context)
                .arg(unlabelled)
                .env("IMAGE_STAMP", tag)
                .env("EXTRA_LIST_NAME", list_name.unwrap_or_default());
            (
                "build-rootfs.sh",
                "it needs sh, debootstrap, python3 with pip and docker",
                process,
            )
        }
        BuildMethod::Dockerfile => {
            let mut process = tokio::process::Command::new("docker");
            process
                .args(["build", "--tag", unlabelled, "--build-arg"])
                .arg(format!("IMAGE_TAG={tag}"))
                .arg("--build-arg")
                .arg(format!("EXTRA_LIST_NAME={}", list_name.unwrap_or_default()))
                .arg(context);
            ("docker build", "install the docker CLI", process)
        }
    }
}

/// The label that carries the image's manifest (the JSON of `sandbox-image/manifest.py`),
/// readable with an image inspect, as `doctor` and the server read it.
pub const MANIFEST_LABEL: &str = "io.file-agent.manifest";
/// Where each build writes the manifest inside the image.
pub const MANIFEST_PATH: &str = "/opt/file-agent/packages.json";
/// The largest manifest read.
const MANIFEST_MAX_BYTES: usize = 1 << 20;

/// The tag a build gives its image before the manifest label is added: the final tag is only
/// given to a finished image.
pub fn unlabelled_tag(tag: &str) -> String {
    format!("{tag}-unlabelled")
}

impl super::Sandbox {
    /// The manifest of `image`, from its label: `None` under Kubernetes (the cluster has the
    /// image) or when the image has no label (built before manifests, or by another tool).
    pub async fn image_manifest(
        &self,
        image: &str,
    ) -> Result<Option<crate::config::packages::Manifest>, super::SandboxError> {
        let super::engine::Engine::Docker(docker) = self.engine() else {
            return Ok(None);
        };
        let inspected = match docker.inspect_image(image).await {
            Ok(inspected) => inspected,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(None),
            Err(e) => return Err(super::SandboxError::docker("inspecting the image", e)),
        };
        let label = inspected
            .config
            .and_then(|config| config.labels)
            .and_then(|mut labels| labels.remove(MANIFEST_LABEL));
        Ok(label.and_then(|text| serde_json::from_str(&text).ok()))
    }

    /// The last step of a build: reads the manifest the build wrote into `unlabelled` (from a
    /// container created and never started), and tags `tag` an image that is `unlabelled` with
    /// the manifest as [`MANIFEST_LABEL`]; the unlabelled tag is removed, whatever happens.
    pub async fn label_manifest(
        &self,
        unlabelled: &str,
        tag: &str,
    ) -> Result<crate::config::packages::Manifest, ImageBuildError> {
        let read = self.read_manifest_file(unlabelled).await;
        let labelled = match read {
            Ok(manifest) => add_label(unlabelled, tag, &manifest)
                .await
                .map(|()| manifest),
            Err(error) => Err(error),
        };
        if let super::engine::Engine::Docker(docker) = self.engine() {
            let options = bollard::query_parameters::RemoveImageOptionsBuilder::new().build();
            let _ = docker.remove_image(unlabelled, Some(options), None).await;
        }
        labelled
    }

    /// [`MANIFEST_PATH`] of `image`, copied out of a container that is never started.
    async fn read_manifest_file(
        &self,
        image: &str,
    ) -> Result<crate::config::packages::Manifest, ImageBuildError> {
        use futures_util::StreamExt as _;
        let failed = |what: String| ImageBuildError::Manifest(what);
        let super::engine::Engine::Docker(docker) = self.engine() else {
            return Err(failed("images are built on a Docker engine".into()));
        };
        let body = bollard::models::ContainerCreateBody {
            image: Some(image.to_string()),
            labels: Some(std::collections::HashMap::from([(
                super::policy::MANAGED_LABEL.to_string(),
                "true".to_string(),
            )])),
            network_disabled: Some(true),
            ..Default::default()
        };
        let created = docker
            .create_container(None, body)
            .await
            .map_err(|e| failed(format!("creating a container of {image}: {e}")))?;
        let options = bollard::query_parameters::DownloadFromContainerOptionsBuilder::default()
            .path(MANIFEST_PATH)
            .build();
        let mut stream = docker.download_from_container(&created.id, Some(options));
        let mut tar = Vec::new();
        let mut outcome = Ok(());
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) if tar.len() + bytes.len() <= MANIFEST_MAX_BYTES + 4096 => {
                    tar.extend_from_slice(&bytes)
                }
                Ok(_) => {
                    outcome = Err(failed(format!(
                        "{MANIFEST_PATH} is over {MANIFEST_MAX_BYTES} bytes"
                    )))
                }
                Err(e) => outcome = Err(failed(format!("copying {MANIFEST_PATH}: {e}"))),
            }
            if outcome.is_err() {
                break;
            }
        }
        drop(stream);
        let _ = super::engine::remove_container(docker, &created.id).await;
        outcome?;
        manifest_from_tar(&tar).map_err(failed)
    }
}

/// The one file of a `docker cp` tar, parsed as a manifest.
fn manifest_from_tar(tar: &[u8]) -> Result<crate::config::packages::Manifest, String> {
    use std::io::Read as _;
    let mut archive = tar::Archive::new(tar);
    let mut entries = archive.entries().map_err(|e| e.to_string())?;
    let mut entry = entries
        .next()
        .ok_or_else(|| format!("{MANIFEST_PATH} is missing"))?
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    (&mut entry)
        .take(MANIFEST_MAX_BYTES as u64)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("{MANIFEST_PATH} is not a manifest: {e}"))
}

/// Tags `tag` an image made `FROM unlabelled` with the manifest as its label (`docker build`
/// of a two-line Dockerfile, no context: nothing is pulled or run).
async fn add_label(
    unlabelled: &str,
    tag: &str,
    manifest: &crate::config::packages::Manifest,
) -> Result<(), ImageBuildError> {
    use tokio::io::AsyncWriteExt as _;
    let json =
        serde_json::to_string(manifest).map_err(|e| ImageBuildError::Manifest(e.to_string()))?;
    let quoted = json.replace('\\', "\\\\").replace('"', "\\\"");
    let dockerfile = format!("FROM {unlabelled}\nLABEL {MANIFEST_LABEL}=\"{quoted}\"\n");
    let mut process = tokio::process::Command::new("docker")
        .args(["build", "--quiet", "--tag", tag, "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ImageBuildError::Spawn {
            command: "docker build",
            source,
            hint: "install the docker CLI",
        })?;
    if let Some(mut stdin) = process.stdin.take() {
        stdin.write_all(dockerfile.as_bytes()).await?;
    }
    let status = process.wait().await?;
    if !status.success() {
        return Err(ImageBuildError::Failed {
            command: "docker build (the manifest label)",
            status,
        });
    }
    Ok(())
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
    /// `scripts/image_tag.py` computes: it must be the binary's, or the build is wasted; with
    /// an extra list too, whose bytes change the tag.
    #[test]
    fn the_tag_script_names_the_binarys_tag() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let list = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(list.path(), b"tabulate==0.9.0 --hash=sha256:00\n").unwrap();
        let script = |extra: Option<&Path>| {
            let mut command = std::process::Command::new("python3");
            command
                .arg(root.join("scripts/image_tag.py"))
                .env_remove("SANDBOX_EXTRA_PACKAGES");
            if let Some(extra) = extra {
                command.env("SANDBOX_EXTRA_PACKAGES", extra);
            }
            let output = command.output().expect("python3 runs scripts/image_tag.py");
            assert!(output.status.success(), "{output:?}");
            String::from_utf8_lossy(&output.stdout).trim().to_string()
        };
        assert_eq!(script(None), default_tag());
        let extended = crate::config::image::tag(Some(&std::fs::read(list.path()).unwrap()));
        assert_ne!(extended, default_tag());
        assert_eq!(script(Some(list.path())), extended);
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
