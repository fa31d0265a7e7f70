//! Which Python the host runs Triton with when `KILN_PYTHON` is not set: the
//! `target/test-python` that README's test command (`tools/test.sh`) installs
//! Triton into, found beside the host's build folder; and what a Python
//! without Triton is told.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_tests::*;

/// The Python these tests run with (`tools/test.sh` sets it).
fn test_python() -> String {
    std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// The folder `python` was installed in (`sys.prefix`: its virtual
/// environment, if it is one), which holds `bin/python3`.
fn prefix_of(python: &str) -> PathBuf {
    let (output, stdout, stderr) =
        run(Command::new(python).args(["-c", "import triton, sys; print(sys.prefix)"]));
    assert!(
        output.status.success(),
        "these tests need the Python they run with to have Triton: `pip install triton` \
         (or set KILN_PYTHON; tools/test.sh does): {stderr}"
    );
    PathBuf::from(stdout.trim())
}

/// A fake repository `X` whose `X/target/debug` holds a copy of `host` and
/// the gxu plugin beside it, as a fresh build does; returns the host.
fn fake_repo(root: &Path) -> PathBuf {
    let debug = root.join("target").join("debug");
    std::fs::create_dir_all(&debug).expect("create target/debug");
    let host = debug.join(host_bin().file_name().expect("file name"));
    std::fs::copy(host_bin(), &host).expect("copy host");
    let plugin = bundled_plugin("gxu");
    std::fs::copy(&plugin, debug.join(plugin.file_name().expect("file name")))
        .expect("copy the gxu plugin");
    host
}

fn precompile(host_exe: &Path, out: &Path) -> Command {
    let mut cmd = host(host_exe);
    cmd.env_remove("KILN_PYTHON")
        .arg("compile")
        .arg(repo_root().join("examples/add.toml"))
        .args(["--device", "gxu", "--precompile", "-o"])
        .arg(out);
    cmd
}

#[test]
fn without_kiln_python_the_host_uses_the_test_python_beside_its_build_folder() {
    let tmp = TempDir::new("python-lookup");
    let host_exe = fake_repo(tmp.path());
    let out = tmp.path().join("out");
    // No target/test-python yet, and PATH holds no Python: nothing to run.
    let (output, _, stderr) = run(precompile(&host_exe, &out).env("PATH", tmp.path()));
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("KILN_PYTHON"), "{stderr}");
    // The virtual environment tools/test.sh makes, at X/target/test-python
    // (here a link to the installation of the Python these tests run with).
    let venv = tmp.path().join("target").join("test-python");
    std::os::unix::fs::symlink(prefix_of(&test_python()), &venv).expect("link test-python");
    assert!(venv.join("bin/python3").exists(), "{}", venv.display());
    let (output, _, stderr) = run(&mut precompile(&host_exe, &out));
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("precompiled:"), "{stderr}");
    assert!(out.join("kernels").is_dir(), "{stderr}");
}

/// `/usr/bin/python3`, if it exists and has no Triton.
fn python_without_triton() -> Option<&'static str> {
    let python = "/usr/bin/python3";
    let probe = Command::new(python)
        .args(["-c", "import triton"])
        .output()
        .ok()?;
    (!probe.status.success()).then_some(python)
}

#[test]
fn a_python_without_triton_is_named_with_kiln_python_and_how_to_install() {
    let Some(python) = python_without_triton() else {
        eprintln!("skipped: /usr/bin/python3 is missing or has Triton");
        return;
    };
    let tmp = TempDir::new("no-triton");
    let cache = tmp.subdir("cache");
    let graph = repo_root().join("examples/small_softmax.toml");
    let commands: [(&str, Vec<&str>); 3] = [
        (
            "compile --precompile",
            vec!["compile", "--device", "gxu", "--precompile", "-o"],
        ),
        (
            "compile --wrapper cpp",
            vec!["compile", "--device", "gxu", "--wrapper", "cpp", "-o"],
        ),
        ("run", vec!["run", "--device", "gxu", "--out"]),
    ];
    for (name, args) in commands {
        let out = tmp.path().join(name.replace(' ', "_"));
        let (output, _, stderr) = run(host(&host_bin())
            .env("KILN_PYTHON", python)
            .env("KILN_CACHE_DIR", &cache)
            .arg(args[0])
            .arg(&graph)
            .args(&args[1..])
            .arg(&out));
        assert!(!output.status.success(), "{name}: {stderr}");
        for part in [python, "KILN_PYTHON", "pip install triton", "tools/test.sh"] {
            assert!(
                stderr.contains(part),
                "{name}: `{part}` missing from: {stderr}"
            );
        }
        // A run's kernels.py was in a scratch folder of the cache, gone by now.
        assert!(
            !stderr.contains(&*cache.to_string_lossy()),
            "{name}: {stderr}"
        );
        assert!(
            !stderr.contains("use the Python wrapper"),
            "{name}: {stderr}"
        );
    }
}
