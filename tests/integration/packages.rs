//! The operator's extra packages (`SANDBOX_EXTRA_PACKAGES`) through the real CLI, engine and
//! server: each kind of bad list stops `image build` with a message naming its line, and no
//! image gets the list's tag; one real build of an image with a pure-Python wheel (tabulate)
//! and a compiled manylinux one (scipy, built against the base set's numpy 2.3) is imported
//! by an attempt, named by `--version`, `doctor`, `/health` and the model's prompt. A script
//! that installs or imports what the image lacks gets the one-sentence answer.
//!
//! The bad lists' wheels are small files this test makes and serves to pip from a local
//! folder (`PIP_NO_INDEX`, `PIP_FIND_LINKS`), so only the real build needs PyPI.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::common::{CliResult, run_cli, with_timeout};
use crate::fakes::openai::{FakeOpenAi, Reply};
use crate::mcp_server::TestServer;

/// The real build's wheels, as PyPI serves them for CPython 3.11 on manylinux x86_64.
const REAL_LIST: &str = "\
# A pure-Python wheel and a compiled one (scipy 1.16 supports numpy >= 1.25.2, < 2.6).
tabulate==0.9.0 \\
    --hash=sha256:024ca478df22e9340661486f85298cff5f6dcdba14f3813e8830015b9ed1948f
scipy==1.16.3 \\
    --hash=sha256:0151a0749efeaaab78711c78422d413c583b8cdd2011a3c1d6c794938ee9fdb2
";

/// A real image build can take minutes on a busy machine.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1200);

/// Writes, into `folder`, a pure-Python wheel of `tinypkg` 1.0, a CPython 3.12 wheel of
/// `cpkg` 1.0 and a source package of `srcpkg` 1.0; returns each file's SHA-256 by package.
fn local_index(folder: &Path) -> std::collections::HashMap<String, String> {
    let script = r#"
import base64, hashlib, io, sys, tarfile, zipfile
folder = sys.argv[1]
def wheel(name, tag):
    info = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 1\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    record = []
    path = f"{folder}/{name}-1.0-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{member},sha256={digest},{len(text)}")
        record.append(f"{info}/RECORD,,")
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path
paths = {"tinypkg": wheel("tinypkg", "py3-none-any"),
         "cpkg": wheel("cpkg", "cp312-cp312-manylinux_2_17_x86_64")}
paths["srcpkg"] = f"{folder}/srcpkg-1.0.tar.gz"
with tarfile.open(paths["srcpkg"], "w:gz") as archive:
    data = b"from setuptools import setup\nsetup(name='srcpkg', version='1.0')\n"
    member = tarfile.TarInfo("srcpkg-1.0/setup.py")
    member.size = len(data)
    archive.addfile(member, io.BytesIO(data))
for name, path in paths.items():
    print(name, hashlib.sha256(open(path, "rb").read()).hexdigest())
"#;
    let output = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(folder)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(name, hash)| (name.to_string(), hash.to_string()))
        .collect()
}

/// `file-agent` with `args` and the extra list at `list`, pip looking only in `index`.
async fn with_list(args: &[&str], list: &Path, index: &Path) -> CliResult {
    run_cli(
        args,
        &[
            ("SANDBOX_EXTRA_PACKAGES", list.to_str().unwrap()),
            ("PIP_NO_INDEX", "1"),
            ("PIP_FIND_LINKS", index.to_str().unwrap()),
        ],
    )
    .await
}

/// Whether the engine has an image tagged `tag`.
async fn image_exists(tag: &str) -> bool {
    crate::common::docker()
        .await
        .inspect_image(tag)
        .await
        .is_ok()
}

#[tokio::test]
async fn each_kind_of_bad_list_fails_the_build_naming_its_line() {
    let folder = tempfile::tempdir().unwrap();
    let index = folder.path().join("index");
    std::fs::create_dir(&index).unwrap();
    let hashes = local_index(&index);
    let zeros = "0".repeat(64);
    let list = folder.path().join("extra-packages.txt");
    // Refused before any download, by every command that reads the configuration.
    let before_download = [
        (
            "tinypkg==1.0\n".to_string(),
            "line 1 (`tinypkg==1.0`): it has no `--hash=sha256:`",
        ),
        (
            format!("# mine\nnumpy==2.4.0 --hash=sha256:{zeros}\n"),
            "line 2 (`numpy==2.4.0`): conflicts with the base set's pin: `numpy==2.3.5` (sandbox-image/wheels.txt line ",
        ),
        (
            format!("#{}\n", "x".repeat(70_000)),
            "is over the stated size: 70002 bytes",
        ),
    ];
    for (text, expected) in &before_download {
        std::fs::write(&list, text).unwrap();
        let result = with_list(&["image", "build"], &list, &index).await;
        assert_ne!(result.code, Some(0), "{}", result.stdout);
        assert!(
            result.stderr.contains("SANDBOX_EXTRA_PACKAGES"),
            "{}",
            result.stderr
        );
        assert!(
            result.stderr.contains(expected),
            "{expected}: {}",
            result.stderr
        );
    }
    // Refused once pip has looked: no image gets the list's tag.
    let after_download = [
        (
            format!("srcpkg==1.0 --hash=sha256:{}\n", hashes["srcpkg"]),
            "line 1 (`srcpkg==1.0`): only a source package is published (srcpkg-1.0.tar.gz)",
        ),
        (
            format!(
                "tinypkg==1.0 --hash=sha256:{}\ncpkg==1.0 --hash=sha256:{}\n",
                hashes["tinypkg"], hashes["cpkg"]
            ),
            "line 2 (`cpkg==1.0`): no wheel of this version is for the sandbox's Python and platform",
        ),
        (
            format!("nosuch==1.0 --hash=sha256:{zeros}\n"),
            "line 1 (`nosuch==1.0`): the download failed",
        ),
        (
            format!("tinypkg==1.0 --hash=sha256:{zeros}\n"),
            "line 1 (`tinypkg==1.0`): the wheel pip chose for the sandbox, tinypkg-1.0-py3-none-any.whl",
        ),
    ];
    for (text, expected) in &after_download {
        std::fs::write(&list, text).unwrap();
        let tag = with_list(&["image", "tag"], &list, &index).await;
        let tag = tag.stdout.trim().to_string();
        assert!(tag.starts_with("file-agent-sandbox:"), "{tag}");
        let result = with_list(&["image", "build"], &list, &index).await;
        assert_ne!(result.code, Some(0), "{}", result.stdout);
        assert!(
            result.stderr.contains(expected),
            "{expected}: {}",
            result.stderr
        );
        assert!(
            !image_exists(&tag).await,
            "{tag} was tagged after a failed build"
        );
    }
    // The one wheel that is right for the image downloads (then the build would start).
    assert!(hashes["cpkg"].len() == 64 && hashes["tinypkg"].len() == 64);
}

/// One real build: tabulate and scipy on top of the base set. Built once, then every claim
/// about it checked: the tag, an attempt importing both, `--version`, `doctor`, `/health`, the
/// prompt the model gets. The image is removed at the end.
#[tokio::test]
async fn an_image_with_extra_packages_runs_them_and_says_so() {
    let folder = tempfile::tempdir().unwrap();
    let list = folder.path().join("extra-packages.txt");
    std::fs::write(&list, REAL_LIST).unwrap();
    let list_str = list.to_str().unwrap();
    let env = [("SANDBOX_EXTRA_PACKAGES", list_str)];
    let tag = run_cli(&["image", "tag"], &env)
        .await
        .stdout
        .trim()
        .to_string();
    let base = run_cli(&["image", "tag"], &[])
        .await
        .stdout
        .trim()
        .to_string();
    assert_ne!(tag, base);
    let build = tokio::time::timeout(
        BUILD_TIMEOUT,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_file-agent"))
            .args(["image", "build", "--force"])
            .envs(env)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the build took longer than 20 minutes")
    .unwrap();
    let stdout = String::from_utf8_lossy(&build.stdout);
    assert!(
        build.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "extra packages from {list_str}: scipy==1.16.3, tabulate==0.9.0"
        )),
        "{stdout}"
    );
    let checks = ExtendedImage {
        tag: &tag,
        list: list_str,
    };
    checks.version_and_doctor_name_the_packages().await;
    checks.an_attempt_imports_both().await;
    checks.the_server_tells_the_model_and_health().await;
    let _ = crate::common::docker()
        .await
        .remove_image(
            &tag,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
}

/// The claims checked against the one extended image.
struct ExtendedImage<'a> {
    tag: &'a str,
    list: &'a str,
}

impl ExtendedImage<'_> {
    fn env(&self) -> [(&str, &str); 1] {
        [("SANDBOX_EXTRA_PACKAGES", self.list)]
    }

    async fn version_and_doctor_name_the_packages(&self) {
        let version = run_cli(&["--version"], &self.env()).await;
        assert!(version.stdout.contains(self.tag), "{}", version.stdout);
        assert!(
            version.stdout.contains(&format!(
                "extra packages from {}: tabulate==0.9.0, scipy==1.16.3",
                self.list
            )),
            "{}",
            version.stdout
        );
        let doctor = run_cli(&["doctor"], &self.env()).await;
        let line = doctor
            .stdout
            .lines()
            .find(|line| line.starts_with("packages"))
            .unwrap_or_else(|| panic!("no packages line: {}", doctor.stdout));
        assert!(line.starts_with("packages ok"), "{line}");
        assert!(line.contains("for Python 3.11."), "{line}");
        assert!(
            line.contains(&format!(
                "extra packages from {}: scipy==1.16.3, tabulate==0.9.0 (from the image's manifest)",
                self.list
            )),
            "{line}"
        );
    }

    async fn an_attempt_imports_both(&self) {
        let folder = tempfile::tempdir().unwrap();
        let script = folder.path().join("script.py");
        std::fs::write(
            &script,
            "import json, numpy, scipy, scipy.stats, tabulate\n\
             t = scipy.stats.ttest_ind([1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.5])\n\
             print(tabulate.tabulate([[scipy.__version__, numpy.__version__, round(float(t.pvalue), 3)]]))\n\
             manifest = json.load(open('/opt/file-agent/packages.json'))\n\
             print(sorted(p['name'] for p in manifest['packages'] if p['extra']))\n",
        )
        .unwrap();
        let result = run_cli(&["run", script.to_str().unwrap()], &self.env()).await;
        assert_eq!(result.code, Some(0), "{} {}", result.json, result.stderr);
        let stdout = result.json["stdout"].as_str().unwrap();
        assert!(stdout.contains("1.16.3  2.3.5"), "{stdout}");
        assert!(stdout.contains("['scipy', 'tabulate']"), "{stdout}");
    }

    async fn the_server_tells_the_model_and_health(&self) {
        let llm = FakeOpenAi::start(vec![Reply::Code(crate::mcp_server::llm_script(
            "excel_sales.py",
        ))])
        .await;
        let mut env = llm.env();
        env.push(("SANDBOX_EXTRA_PACKAGES".into(), self.list.into()));
        let server = TestServer::start(&env).await;
        let health: serde_json::Value =
            with_timeout(reqwest::get(format!("{}/health", server.url)))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
        assert_eq!(health["image"]["tag"], self.tag);
        assert_eq!(
            health["image"]["extra_packages"],
            json!({"list": self.list, "packages": ["tabulate==0.9.0", "scipy==1.16.3"]})
        );
        let (is_error, text) = server
            .call(
                None,
                "generate_file",
                json!({"instructions": "sales", "file_type": "excel", "filename_hint": "s"}),
            )
            .await;
        assert!(!is_error, "{text}");
        let system = llm.message(0, 0);
        assert!(
            system.contains("added by this server's operator: scipy 1.16.3, tabulate 0.9.0"),
            "{system}"
        );
        assert!(system.contains("numpy 2.3.5"), "{system}");
        assert!(system.contains("never run `pip`"), "{system}");
        server.assert_nothing_left().await;
    }
}

/// The checkout's image (no extra list): a script that installs with pip, or imports what the
/// image lacks, gets the one sentence; a model whose script installs gets no second attempt.
#[tokio::test]
async fn installs_and_missing_modules_get_one_sentence_and_no_retry() {
    let install =
        "import subprocess\nsubprocess.run(['pip', 'install', 'requests'])\nprint('went on')\n";
    let llm = FakeOpenAi::start(vec![
        Reply::Code(install.to_string()),
        Reply::Code(crate::mcp_server::llm_script("excel_sales.py")),
    ])
    .await;
    let server = TestServer::start(&llm.env()).await;
    let sentence = "the package is not in the sandbox image, attempts have no network, and the operator adds packages to the image with a hash-pinned list (SANDBOX_EXTRA_PACKAGES; see docs/SANDBOX.md, \"Adding packages\").";
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": install}))
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains(&format!("installing requests failed: {sentence}")),
        "{text}"
    );
    assert!(!text.contains("went on"), "{text}");
    let (is_error, text) = server
        .call(None, "run_python", json!({"code": "import seaborn\n"}))
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains(&format!("importing seaborn failed: {sentence}")),
        "{text}"
    );
    // The model's script installs: the call ends after that one attempt, with the sentence.
    let (is_error, text) = server
        .call(
            None,
            "generate_file",
            json!({"instructions": "sales", "file_type": "excel", "filename_hint": "s"}),
        )
        .await;
    assert!(is_error, "{text}");
    assert!(
        text.contains(&format!("installing requests failed: {sentence}")),
        "{text}"
    );
    assert_eq!(llm.requests().len(), 1, "a retry was spent on an install");
    assert_eq!(server.audit_lines().len(), 3, "one line per attempt");
    server.assert_nothing_left().await;
}
