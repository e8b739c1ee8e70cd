//! The deploy files as a host with a registry uses them, checked here where nothing can be
//! pulled: the server's `Dockerfile` compiles from exactly what its build stage copies (a file
//! the crate reads at compile time and the stage does not copy fails here, not in an
//! operator's `docker compose up`); `sandbox-image/Dockerfile` copies only files of the build
//! context the binary writes and installs what `build-rootfs.sh` installs; and `compose.yaml`
//! takes the operator's settings from `.env` (`docker compose config`).
//!
//! Running the images themselves under compose is `deploy/check.sh`'s (the "Docker Compose"
//! part of `docs/DEPLOYING.md`), which needs a release build and root.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One `COPY` instruction: its flags (`--from=...`), sources and destination.
#[derive(Debug)]
struct Copy {
    flags: Vec<String>,
    sources: Vec<String>,
    destination: String,
}

/// The instructions of a Dockerfile, continuation lines joined and comments dropped, each as
/// (keyword in upper case, the rest), grouped by stage (`FROM` starts one).
fn stages(dockerfile: &str) -> Vec<Vec<(String, String)>> {
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                joined.push(std::mem::take(&mut current));
            }
        }
    }
    let mut stages: Vec<Vec<(String, String)>> = Vec::new();
    for instruction in joined {
        let (keyword, rest) = instruction
            .split_once(char::is_whitespace)
            .unwrap_or((&instruction, ""));
        let keyword = keyword.to_ascii_uppercase();
        if keyword == "FROM" {
            stages.push(Vec::new());
        }
        if let Some(stage) = stages.last_mut() {
            stage.push((keyword, rest.trim().to_string()));
        }
    }
    stages
}

/// The `COPY` instructions of a stage (the JSON form is refused: this test reads only the
/// shell form the Dockerfiles use).
fn copies(stage: &[(String, String)]) -> Vec<Copy> {
    stage
        .iter()
        .filter(|(keyword, _)| keyword == "COPY" || keyword == "ADD")
        .map(|(keyword, rest)| {
            assert_eq!(keyword, "COPY", "ADD fetches and unpacks; use COPY: {rest}");
            assert!(!rest.starts_with('['), "the JSON form of COPY: {rest}");
            let (flags, mut paths): (Vec<String>, Vec<String>) = rest
                .split_whitespace()
                .map(str::to_string)
                .partition(|word| word.starts_with("--"));
            let destination = paths.pop().expect("COPY without a destination");
            assert!(!paths.is_empty(), "COPY without a source: {rest}");
            Copy {
                flags,
                sources: paths,
                destination,
            }
        })
        .collect()
}

/// The stage `FROM ... AS name`.
fn stage<'a>(stages: &'a [Vec<(String, String)>], name: &str) -> &'a [(String, String)] {
    stages
        .iter()
        .find(|stage| {
            let from = &stage[0].1;
            from.split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|pair| pair[0].eq_ignore_ascii_case("as") && pair[1] == name)
        })
        .unwrap_or_else(|| panic!("no stage named {name}"))
}

/// Copies a file or a folder (recursively, files only) from `from` to `to`.
pub(crate) fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
}

/// The server's build stage, given exactly the paths its `COPY` lines name (none of them left
/// out of the context by `.dockerignore`), compiles. Proven from what this very build read,
/// without compiling again (which checked every dependency: 111 s on both cores of a fresh
/// machine): in a folder holding those paths and nothing else, Cargo reads the manifest and
/// `Cargo.lock` (`cargo metadata --locked --offline`) and finds the source of each of the
/// package's library and binaries; and every file of this checkout that rustc read to compile
/// the library and the binary this test runs on, as their dep-info (`.d`) files list them (the
/// modules, and what `include_str!`/`include_bytes!` take), is in that folder.
#[test]
fn the_server_image_build_stage_compiles_from_what_it_copies() {
    let dockerfile = std::fs::read_to_string(Path::new(ROOT).join("Dockerfile")).unwrap();
    let stages = stages(&dockerfile);
    let build = stage(&stages, "build");
    let workdir = build
        .iter()
        .rev()
        .find(|(keyword, _)| keyword == "WORKDIR")
        .map(|(_, dir)| dir.clone())
        .expect("the build stage has a WORKDIR");
    let build_command = build
        .iter()
        .find(|(keyword, _)| keyword == "RUN")
        .map(|(_, command)| command.clone())
        .unwrap();
    assert!(
        build_command.starts_with("cargo build --release --locked"),
        "the build stage runs {build_command:?}: make this test check what it runs"
    );

    // What `.dockerignore` keeps out of the build context a COPY cannot copy.
    let ignored: Vec<String> = std::fs::read_to_string(Path::new(ROOT).join(".dockerignore"))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            assert!(
                !line.contains(['*', '?', '[', '!']),
                ".dockerignore pattern {line:?}: teach this test to match it"
            );
            line.trim_start_matches('/')
                .trim_end_matches('/')
                .to_string()
        })
        .collect();

    let target_tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let folder = target_tmp.join("deploy-build-stage");
    if folder.exists() {
        std::fs::remove_dir_all(&folder).unwrap();
    }
    std::fs::create_dir_all(&folder).unwrap();
    let mut copied = Vec::new();
    for copy in copies(build) {
        assert!(
            copy.flags.is_empty(),
            "COPY {:?} in the build stage",
            copy.flags
        );
        for source in &copy.sources {
            // `COPY a b ./` and `COPY src src`: each source lands under its own name in the
            // WORKDIR, the only shapes this test maps to a folder.
            let lands_as_itself = copy.destination == "./"
                || copy.destination == "."
                || copy.destination == *source
                || copy.destination == format!("{workdir}/{source}");
            assert!(
                lands_as_itself,
                "COPY {source} {}: teach this test where that lands",
                copy.destination
            );
            for pattern in &ignored {
                assert!(
                    source != pattern && !source.starts_with(&format!("{pattern}/")),
                    "the build stage copies {source}, which .dockerignore leaves out"
                );
            }
            copy_tree(&Path::new(ROOT).join(source), &folder.join(source));
            copied.push(source.clone());
        }
    }
    assert!(
        copied.contains(&"Cargo.lock".to_string()),
        "--locked needs Cargo.lock"
    );

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let started = Instant::now();
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--locked",
            "--offline",
            "--format-version",
            "1",
            "--no-deps",
        ])
        .current_dir(&folder)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "from only {copied:?} (the Dockerfile's build stage), Cargo cannot read the package \
         with --locked:\n{stderr}"
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    let targets = metadata["packages"][0]["targets"].as_array().unwrap();
    for target in targets {
        let kinds = target["kind"].as_array().unwrap();
        if kinds.iter().any(|kind| kind == "lib" || kind == "bin") {
            let source = Path::new(target["src_path"].as_str().unwrap());
            assert!(
                source.starts_with(&folder) && source.is_file(),
                "the build stage builds {source:?}, which it does not copy"
            );
        }
    }
    let read = files_the_build_read();
    assert!(
        read.iter().any(|file| file == Path::new("src/lib.rs"))
            && read.iter().any(|file| file == Path::new("src/main.rs")),
        "no dep-info of the library and the binary next to this test: {read:?}"
    );
    for file in &read {
        assert!(
            folder.join(file).is_file(),
            "the crate reads {} when it compiles, and the build stage does not copy it \
             (it copies only {copied:?}): copy it in the stage, or move it under a copied folder",
            file.display()
        );
    }
    eprintln!(
        "the build stage's {copied:?} hold the {} files the build read ({:.1} s)",
        read.len(),
        started.elapsed().as_secs_f64()
    );
    std::fs::remove_dir_all(&folder).unwrap();
}

/// The files of this checkout (relative to it) that rustc read to compile file-agent's library
/// and binary in this test's build: the inputs their newest dep-info files in the build's
/// `deps` folder (this test binary's own) list, as far as they exist. Only the newest of each,
/// no newer than this binary, so that another checkout's or an older build's count for nothing.
fn files_the_build_read() -> Vec<PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let built = std::fs::metadata(&exe).unwrap().modified().unwrap();
    // The newest dep-info of the library (first input `src/lib.rs`) and of the binary.
    let mut newest: [Option<(std::time::SystemTime, String)>; 2] = [None, None];
    for entry in std::fs::read_dir(deps).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !(name.starts_with("file_agent-") && name.ends_with(".d")) {
            continue;
        }
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let Some(first) = text
            .lines()
            .next()
            .and_then(|line| line.split_once(": "))
            .and_then(|(_, inputs)| inputs.split_whitespace().next())
        else {
            continue;
        };
        // The library's (whose rules name its `.rlib`), not its unit tests' (an executable).
        let slot = match first {
            "src/lib.rs" if text.contains(".rlib: ") => 0,
            "src/main.rs" => 1,
            _ => continue,
        };
        if modified <= built
            && newest[slot]
                .as_ref()
                .is_none_or(|(time, _)| modified > *time)
        {
            newest[slot] = Some((modified, text));
        }
    }
    let mut files: Vec<PathBuf> = newest
        .into_iter()
        .flatten()
        .flat_map(|(_, text)| {
            // Each input also stands alone as `input:`, the output file as `output: inputs`.
            text.lines()
                .filter_map(|line| line.strip_suffix(':'))
                .map(|input| input.replace("\\ ", " "))
                .collect::<Vec<_>>()
        })
        .map(|input| {
            let input = PathBuf::from(input);
            input
                .strip_prefix(ROOT)
                .map(Path::to_path_buf)
                .unwrap_or(input)
        })
        .filter(|input| input.is_relative() && Path::new(ROOT).join(input).is_file())
        .collect();
    files.sort();
    files.dedup();
    files
}

/// The `install`/`cp` targets under /opt/file-agent in `build-rootfs.sh`, by file or folder
/// name (`install -d` only makes the folders that others fill).
fn rootfs_opt_files(script: &str) -> Vec<String> {
    let mut files: Vec<String> = script
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("install ") || line.starts_with("cp "))
        .filter(|line| !line.starts_with("install -d "))
        .filter_map(|line| line.split_whitespace().last())
        .filter_map(|target| target.strip_prefix("\"$root/opt/file-agent/"))
        .map(|name| name.trim_end_matches('"').trim_end_matches('/').to_string())
        // The operator's extra list, not a script: the Dockerfile copies it from its wheels stage.
        .filter(|name| name != "extra-packages.txt")
        .collect();
    files.sort();
    files
}

/// `sandbox-image/Dockerfile` is not built here (it pulls `debian:bookworm-slim`), so what can
/// be checked without a registry is: every file it copies from its context is in the context
/// `file-agent image build --method dockerfile` writes (the files compiled into the binary),
/// and it puts in /opt/file-agent the same scripts `build-rootfs.sh` (the build used here)
/// installs, and starts the same command.
#[test]
fn the_sandbox_image_dockerfile_copies_what_its_context_and_the_rootfs_build_hold() {
    let folder = Path::new(ROOT).join("sandbox-image");
    let dockerfile = std::fs::read_to_string(folder.join("Dockerfile")).unwrap();
    let context: Vec<&str> = file_agent::sandbox::image::CONTEXT
        .iter()
        .map(|(name, _)| *name)
        .collect();
    let mut to_opt = Vec::new();
    for stage in stages(&dockerfile) {
        for copy in copies(&stage) {
            if copy.flags.iter().any(|flag| flag.starts_with("--from=")) {
                continue;
            }
            // Patterns (the extra list and its wheels) match what `image build` adds, or nothing.
            for source in copy.sources.iter().filter(|s| !s.contains('*')) {
                // A file of the context, or a folder of them.
                let folder = format!("{}/", source.trim_end_matches('/'));
                assert!(
                    context.contains(&source.as_str())
                        || context.iter().any(|name| name.starts_with(&folder)),
                    "sandbox-image/Dockerfile copies {source}, which the build context \
                     (config::image::CONTEXT) does not hold"
                );
                if copy.destination.starts_with("/opt/file-agent/") {
                    to_opt.push(source.trim_end_matches('/').to_string());
                }
            }
        }
    }
    to_opt.sort();
    let script = std::fs::read_to_string(folder.join("build-rootfs.sh")).unwrap();
    assert_eq!(
        to_opt,
        rootfs_opt_files(&script),
        "the Dockerfile and build-rootfs.sh put different scripts in /opt/file-agent"
    );
    let cmd = stages(&dockerfile)
        .last()
        .unwrap()
        .iter()
        .rev()
        .find(|(keyword, _)| keyword == "CMD")
        .map(|(_, cmd)| cmd.clone())
        .unwrap();
    assert!(
        script.contains(&format!("--change 'CMD {cmd}'")),
        "build-rootfs.sh does not start {cmd} as the Dockerfile does"
    );
}

/// `docker compose` (v2) where installed, else `docker-compose` (v1, Debian's package, which
/// scripts/test-setup.sh installs).
pub(crate) fn compose() -> Command {
    let v2 = Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|output| output.status.success());
    if v2 {
        let mut command = Command::new("docker");
        command.arg("compose");
        command
    } else {
        Command::new("docker-compose")
    }
}

/// What `docker compose config` makes of `compose.yaml` with this `.env`, as JSON.
fn compose_config(env: &str) -> Value {
    let project = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(ROOT).join("compose.yaml"),
        project.path().join("compose.yaml"),
    )
    .unwrap();
    // The build contexts must exist for compose to accept the file.
    std::fs::write(project.path().join("Dockerfile"), "FROM scratch\n").unwrap();
    std::fs::create_dir(project.path().join("sandbox-image")).unwrap();
    std::fs::write(project.path().join(".env"), env).unwrap();
    let mut command = compose();
    command.arg("config").current_dir(project.path());
    // The shell's environment wins over `.env`: keep the test's own out of it.
    for (name, _) in std::env::vars() {
        if name.starts_with("FILE_AGENT_") || name.starts_with("SANDBOX_") {
            command.env_remove(name);
        }
    }
    let output = command
        .output()
        .expect("docker compose or docker-compose (scripts/test-setup.sh installs it)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "compose config: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_saphyr::from_str(&stdout).unwrap_or_else(|e| panic!("{e}:\n{stdout}"))
}

/// The published ports of a service as `host_ip:published:target` strings, whichever syntax
/// compose prints.
fn published(service: &Value) -> Vec<String> {
    service["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|port| match port {
            Value::String(short) => short.trim_end_matches("/tcp").to_string(),
            long => format!(
                "{}:{}:{}",
                long["host_ip"].as_str().unwrap_or(""),
                long["published"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| long["published"].to_string()),
                long["target"]
            ),
        })
        .collect()
}

/// A setting in `.env` reaches the server's container even where `compose.yaml` has a value of
/// its own (compose's `environment:` wins over `env_file:`, so those read `.env` through
/// interpolation), and without one the compose file's defaults hold.
#[test]
fn compose_takes_the_operators_settings_from_dot_env() {
    let config = compose_config(
        "FILE_AGENT_ACCESS_TOKENS=token-from-env\n\
         FILE_AGENT_ALLOWED_HOSTS=file-agent,chat.example.org\n\
         FILE_AGENT_PUBLISH=127.0.0.1:18000\n\
         FILE_AGENT_PUBLIC_URL=http://localhost:18000\n\
         SANDBOX_IMAGE=file-agent-sandbox:operator\n\
         SANDBOX_INSTANCE=replica-7\n\
         SCRIPT_TIMEOUT=45\n",
    );
    let server = &config["services"]["file-agent"];
    let environment = &server["environment"];
    for (name, value) in [
        ("FILE_AGENT_ACCESS_TOKENS", "token-from-env"),
        ("FILE_AGENT_ALLOWED_HOSTS", "file-agent,chat.example.org"),
        ("FILE_AGENT_PUBLIC_URL", "http://localhost:18000"),
        ("SANDBOX_IMAGE", "file-agent-sandbox:operator"),
        ("SANDBOX_INSTANCE", "replica-7"),
        ("SCRIPT_TIMEOUT", "45"),
        // What the compose file fixes: the engine behind the proxy, the data in the volume,
        // the port published.
        ("DOCKER_HOST", "tcp://docker-proxy:2375"),
        ("FILE_AGENT_DATA_DIR", "/data"),
        ("FILE_AGENT_LISTEN", "0.0.0.0:8000"),
    ] {
        assert_eq!(environment[name], value, "{name} in {environment}");
    }
    assert_eq!(published(server), ["127.0.0.1:18000:8000"]);
    // The image the sandbox-image service builds is the one the server asks for.
    assert_eq!(
        config["services"]["sandbox-image"]["image"],
        "file-agent-sandbox:operator"
    );

    let defaults = compose_config("FILE_AGENT_ACCESS_TOKENS=token-from-env\n");
    let server = &defaults["services"]["file-agent"];
    assert_eq!(
        server["environment"]["FILE_AGENT_ALLOWED_HOSTS"],
        "localhost,127.0.0.1,file-agent"
    );
    assert_eq!(
        server["environment"]["SANDBOX_IMAGE"],
        "file-agent-sandbox:compose"
    );
    assert_eq!(server["environment"]["SANDBOX_INSTANCE"], "compose-1");
    assert_eq!(published(server), ["127.0.0.1:8000:8000"]);
    assert_eq!(
        defaults["services"]["sandbox-image"]["image"],
        "file-agent-sandbox:compose"
    );
}

/// `.env.example` names every variable `compose.yaml` reads from `.env`, so an operator who
/// copies it sees each one.
#[test]
fn dot_env_example_lists_every_variable_compose_reads() {
    let compose = std::fs::read_to_string(Path::new(ROOT).join("compose.yaml")).unwrap();
    let example = std::fs::read_to_string(Path::new(ROOT).join(".env.example")).unwrap();
    let mut read = Vec::new();
    let uncommented: String = compose
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    for piece in uncommented.split("${").skip(1) {
        let name: String = piece
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        read.push(name);
    }
    assert!(!read.is_empty(), "compose.yaml reads nothing from .env");
    for name in read {
        let listed = example.lines().any(|line| {
            let line = line.trim_start_matches('#').trim_start();
            line.starts_with(&format!("{name}="))
        });
        assert!(
            listed,
            ".env.example does not list {name}, which compose.yaml reads"
        );
    }
}
