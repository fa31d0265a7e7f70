//! The kernels' Python runtime (`kiln_runtime.py`, which `host compile`
//! writes beside every `output_code.py`) on its own, under `$KILN_PYTHON`
//! with Triton and without torch or a GPU: `tests/support/runtime_module.py`
//! drives its public functions on a tiny file laid out as Kiln generates one
//! (kernels, `TRITON_TARGET`, `KERNEL_META`, the loader), compiling for the
//! cuda target as the other tests compile kernels without a GPU.

use std::process::Command;

use kiln::codegen::wrapper::python::{RUNTIME, RUNTIME_FILE, RUNTIME_LOADER};
use kiln_tests::*;

/// A kernel that calls a helper, as generated files hold them; `scale` is
/// the helper's factor (an edit of the helper alone).
fn tiny(scale: &str) -> String {
    format!(
        r#"import triton
import triton.language as tl


@triton.jit
def kiln_twice(v):
    return v * {scale}


@triton.jit
def kiln_add_one(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tl.store(out_ptr0 + xindex, kiln_twice(tl.load(in_ptr0 + xindex, xmask)) + 1.0, xmask)


TRITON_TARGET = {{"backend": "cuda", "arch": "90", "warp_size": 32}}
KERNEL_META = {{
    "kiln_add_one": {{"signature": {{"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32"}}, "constants": {{"XBLOCK": 64}}, "aligned": ["in_ptr0", "out_ptr0"], "num_warps": 1, "num_stages": 1, "autotuned": False}},
    "kiln_add_one_v1": {{"function": "kiln_add_one", "signature": {{"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32"}}, "constants": {{"XBLOCK": 256}}, "aligned": ["in_ptr0", "out_ptr0"], "num_warps": 2, "num_stages": 1, "autotuned": False}},
}}


{RUNTIME_LOADER}"#
    )
}

#[test]
fn the_runtime_compiles_keeps_finds_and_precompiles_kernels_and_says_what_is_missing() {
    let tmp = TempDir::new("runtime-py");
    let folder = tmp.subdir("out");
    for (dir, scale) in [(folder.clone(), "2.0"), (folder.join("edited"), "3.0")] {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(RUNTIME_FILE), RUNTIME).unwrap();
        std::fs::write(dir.join("tiny.py"), tiny(scale)).unwrap();
    }
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let (output, stdout, stderr) = run(Command::new(&python)
        .env("KILN_CACHE_DIR", tmp.subdir("cache"))
        .env("TRITON_DEFAULT_FP_FUSION", "1")
        .env_remove("KILN_COMPILE_WORKERS")
        .arg(repo_root().join("tests/support/runtime_module.py"))
        .arg(&folder));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let checks = stdout.lines().filter(|l| l.starts_with("ok: ")).count();
    assert_eq!(checks, 43, "{stdout}");
}

#[test]
fn the_runtime_chooses_the_faster_attention_once_per_signature_and_falls_back_to_kiln_s_kernel() {
    let tmp = TempDir::new("runtime-attention");
    let runtime = tmp.path().join(RUNTIME_FILE);
    std::fs::write(&runtime, RUNTIME).unwrap();
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let (output, stdout, stderr) = run(Command::new(&python)
        .env_remove("KILN_ATTENTION")
        .arg(repo_root().join("tests/support/runtime_attention.py"))
        .arg(&runtime));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let checks = stdout.lines().filter(|l| l.starts_with("ok: ")).count();
    assert_eq!(checks, 30, "{stdout}");
}

#[test]
fn the_runtime_chooses_the_faster_float32_bias_once_per_signature_and_bucket_of_sizes() {
    let tmp = TempDir::new("runtime-bias");
    let runtime = tmp.path().join(RUNTIME_FILE);
    std::fs::write(&runtime, RUNTIME).unwrap();
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let (output, stdout, stderr) = run(Command::new(&python)
        .env_remove("KILN_BIAS")
        .arg(repo_root().join("tests/support/runtime_bias.py"))
        .arg(&runtime));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let checks = stdout.lines().filter(|l| l.starts_with("ok: ")).count();
    assert_eq!(checks, 10, "{stdout}");
}

#[test]
fn the_runtime_checks_dynamic_sizes_against_their_ranges_and_picks_launches_by_bucket() {
    let tmp = TempDir::new("runtime-dynamic");
    let runtime = tmp.path().join(RUNTIME_FILE);
    std::fs::write(&runtime, RUNTIME).unwrap();
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let (output, stdout, stderr) = run(Command::new(&python)
        .arg(repo_root().join("tests/support/runtime_dynamic.py"))
        .arg(&runtime));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let checks = stdout.lines().filter(|l| l.starts_with("ok: ")).count();
    assert_eq!(checks, 19, "{stdout}");
}
