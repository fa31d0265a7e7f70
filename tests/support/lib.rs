//! Shared helpers for the workspace-level integration tests: where the built
//! `host` binary and plugin libraries are, and how to build the test-only
//! plugin workspaces (`tests/compat`, `tests/broken`) on demand.
//!
//! The tests drive the real `host` executable and load the real `.so` files,
//! never the plugins' rlibs: that is what a user and a vendor do.

pub mod broken;
mod goldens;
pub mod graphgen;
pub mod importers;
pub mod names;

pub use goldens::Goldens;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The TOML graphs in `folder` (relative to the repository), sorted by name.
pub fn graphs_in(folder: &str) -> Vec<PathBuf> {
    let dir = repo_root().join(folder);
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    all.sort();
    assert!(!all.is_empty(), "no graphs in {}", dir.display());
    all
}

/// The bundled example graphs (`examples/*.toml`).
pub fn examples() -> Vec<PathBuf> {
    graphs_in("examples")
}

/// The profile folder the test binary was built into (`target/debug`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/debug/deps/<test binary>
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf()
}

fn built(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace`), as README.md's test command does",
        path.display()
    );
    path
}

/// The built `host` binary.
pub fn host_bin() -> PathBuf {
    built(profile_dir().join(format!("host{}", std::env::consts::EXE_SUFFIX)))
}

/// The file name of a library called `stem` on this platform.
pub fn dll_name(stem: &str) -> String {
    format!(
        "{}{stem}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

/// The built bundled plugin for `device` (`cuda`, `xpu`, `gxu`, `cpu`).
pub fn bundled_plugin(device: &str) -> PathBuf {
    built(profile_dir().join(dll_name(&format!("kiln_{device}"))))
}

/// A `host` command with a clean plugin environment.
pub fn host(bin: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_remove("KILN_PLUGIN_PATH").env_remove("RUST_LOG");
    cmd
}

/// The Python with PyTorch (and Triton) that tools/test.sh installs into
/// target/torch-python, or `KILN_TORCH_PYTHON`.
pub fn torch_python() -> String {
    let python = std::env::var("KILN_TORCH_PYTHON").unwrap_or_else(|_| {
        repo_root()
            .join("target/torch-python/bin/python3")
            .display()
            .to_string()
    });
    assert!(
        Path::new(&python).exists() || std::env::var("KILN_TORCH_PYTHON").is_ok(),
        "{python} is missing: run tools/test.sh, which installs PyTorch and the kiln package there"
    );
    python
}

/// Runs a command and returns its output, with stdout and stderr as text.
pub fn run(cmd: &mut Command) -> (Output, String, String) {
    let output = output_of(cmd).unwrap_or_else(|e| {
        let program = cmd.get_program().to_string_lossy().into_owned();
        let name = Path::new(&program)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let hint = if name.is_some_and(|n| n.contains("python")) {
            " (KILN_PYTHON must be an absolute path, or a program on PATH; tools/test.sh sets it)"
        } else {
            ""
        };
        panic!("cannot start `{program}`: {e}{hint}")
    });
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stdout, stderr)
}

/// `cmd`'s output. A program a test has just copied can be "busy" (ETXTBSY) for a moment:
/// a child another test thread forks meanwhile holds the copy's write descriptor until it
/// execs. The start is tried again then, as build tools do.
fn output_of(cmd: &mut Command) -> std::io::Result<Output> {
    const TEXT_FILE_BUSY: i32 = 26;
    let mut tries = 0;
    loop {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(TEXT_FILE_BUSY) && tries < 20 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            result => return result,
        }
    }
}

/// A temporary folder removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh empty folder under the system temp dir.
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("kiln-test-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A subfolder, created.
    pub fn subdir(&self, name: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::create_dir_all(&p).expect("create subdir");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A copy of the `host` binary alone in a fresh folder, so that discovery
/// beside the executable finds nothing unless a test puts it there.
pub fn isolated_host(dir: &TempDir) -> PathBuf {
    let bin_dir = dir.subdir("bin");
    let copy = bin_dir.join(host_bin().file_name().expect("file name"));
    std::fs::copy(host_bin(), &copy).expect("copy host");
    copy
}

/// Builds a test-only plugin workspace (its own target dir) once per process.
fn build_workspace(
    manifest: &Path,
    package: Option<&str>,
    done: &'static OnceLock<Result<(), String>>,
) {
    let result = done.get_or_init(|| {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.arg("build")
            .arg("--quiet")
            .arg("--manifest-path")
            .arg(manifest);
        if let Some(package) = package {
            cmd.args(["-p", package]);
        }
        let output = cmd
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    });
    if let Err(e) = result {
        panic!("building {} failed:\n{e}", manifest.display());
    }
}

/// The plugin built against a shorter, older root module (`tests/compat`).
pub fn compat_plugin() -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    compat_member("old_api_plugin", &BUILT)
}

/// The plugin built against a modified kiln-plugin-api whose `LoadContext`
/// has another layout at the same version (`tests/compat`).
pub fn changed_layout_plugin() -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    compat_member("changed_layout_plugin", &BUILT)
}

/// The plugin built against the tables of plugin API 1.4, without the fields
/// 1.5 appended (`tests/compat`).
pub fn api_1_4_plugin() -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    compat_member("api_1_4_plugin", &BUILT)
}

/// One member of `tests/compat`, built on its own so that the test features
/// of plugin-api that the members enable never unify.
fn compat_member(name: &str, built_once: &'static OnceLock<Result<(), String>>) -> PathBuf {
    let manifest = repo_root().join("tests/compat/Cargo.toml");
    build_workspace(&manifest, Some(name), built_once);
    built(
        repo_root()
            .join("tests/compat/target/debug")
            .join(dll_name(name)),
    )
}

/// Parses stdout as JSON, with the output in the panic message if it is not.
pub fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}
