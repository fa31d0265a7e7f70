//! The `kiln` Python package under PyTorch on the cpu (`tests/support/torch_backend.py`):
//! `kiln.compile`, `torch.compile(backend="kiln")` through the package's entry point with
//! graph breaks, the fallback to eager on an op Kiln lacks, the ops a sweep of model
//! families found lacking, the compile cache across processes, and every model of the zoo.
//! tools/test.sh installs PyTorch, torchvision and transformers into target/torch-python and
//! the package into it ($KILN_TORCH_PYTHON).

use std::process::Command;

use kiln_tests::*;

#[test]
fn the_python_package_compiles_from_pytorch_falls_back_on_unknown_ops_and_caches() {
    let python = torch_python();
    let tmp = TempDir::new("torch-backend");
    let (output, stdout, stderr) = run(Command::new(&python)
        .env("KILN_CACHE_DIR", tmp.subdir("cache"))
        .env_remove("KILN_HOST")
        .env_remove("KILN_PLUGIN_PATH")
        .arg(repo_root().join("tests/support/torch_backend.py"))
        .arg(repo_root()));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let checks = stdout.lines().filter(|l| l.starts_with("ok: ")).count();
    assert_eq!(checks, 59, "{stdout}");
}
