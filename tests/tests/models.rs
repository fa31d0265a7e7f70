//! The model zoo (`tests/fixtures/models`, written by `tools/model_zoo.py`): tiny
//! `transformers` GPT-2, BERT, Llama, T5 encoder and ViT, and torchvision ResNet and
//! MobileNetV2, each exported as is and after `run_decompositions()`. Every archive runs
//! on the cpu device and matches PyTorch's float64 outputs; every archive compiles for
//! cuda, gxu and xpu, and Triton accepts every kernel; a token id out of range is a clear
//! error, never a read outside the embedding.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_tests::*;

fn zoo() -> PathBuf {
    repo_root().join("tests/fixtures/models")
}

/// Every archive of the zoo with its model name (`bert_core.pt2` is model `bert`).
fn archives() -> Vec<(String, PathBuf)> {
    let mut all: Vec<(String, PathBuf)> = std::fs::read_dir(zoo())
        .expect("tests/fixtures/models")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "pt2") && !p.to_string_lossy().contains("skeleton")
        })
        .map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().to_string();
            (stem.trim_end_matches("_core").to_string(), p)
        })
        .collect();
    all.sort();
    all
}

fn meta(model: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(zoo().join(format!("{model}.json"))).expect("model json");
    serde_json::from_str(&text).expect("model json parses")
}

/// A folder with the model's inputs as `inputN.bin`.
fn inputs(model: &str, dir: &Path) -> PathBuf {
    let d = dir.join(format!("{model}-inputs"));
    std::fs::create_dir_all(&d).unwrap();
    let n = meta(model)["inputs"].as_array().map_or(0, Vec::len);
    for i in 0..n {
        std::fs::copy(
            zoo().join(format!("{model}.input{i}.bin")),
            d.join(format!("input{i}.bin")),
        )
        .unwrap();
    }
    d
}

fn f32s(path: &Path) -> Vec<f64> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect()
}

#[test]
fn the_zoo_has_every_family_in_both_forms() {
    let names: Vec<String> = archives()
        .iter()
        .map(|(_, p)| p.file_stem().unwrap().to_string_lossy().to_string())
        .collect();
    for family in [
        "gpt2",
        "bert",
        "llama",
        "t5_encoder",
        "vit",
        "resnet",
        "mobilenet_v2",
    ] {
        for form in ["", "_core"] {
            let name = format!("{family}{form}");
            assert!(names.contains(&name), "{name}.pt2 is missing from the zoo");
        }
    }
}

#[test]
fn every_zoo_model_runs_on_cpu_and_matches_pytorch() {
    let tmp = TempDir::new("zoo-cpu");
    let mut failures = vec![];
    for (model, archive) in archives() {
        let stem = archive.file_stem().unwrap().to_string_lossy().to_string();
        let out = tmp.path().join(&stem);
        let (output, _, stderr) = run(host(&host_bin())
            .arg("run")
            .arg(&archive)
            .arg("--inputs")
            .arg(inputs(&model, tmp.path()))
            .arg("--out")
            .arg(&out));
        if !output.status.success() {
            failures.push(format!("{stem}: {stderr}"));
            continue;
        }
        let outputs = meta(&model)["outputs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!outputs.is_empty());
        for (i, o) in outputs.iter().enumerate() {
            let want = f32s(&zoo().join(o["file"].as_str().unwrap()));
            let got = f32s(&out.join(format!("output{i}.bin")));
            assert_eq!(got.len(), want.len(), "{stem} output {i}");
            let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let err = got
                .iter()
                .zip(&want)
                .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
            if err.is_nan() || err > 1e-4 * scale {
                failures.push(format!(
                    "{stem} output {i}: max error {err} against max {scale}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_zoo_model_compiles_for_every_triton_device_and_triton_accepts_every_kernel() {
    let tmp = TempDir::new("zoo-triton");
    let all = archives();
    for device in ["cuda", "gxu", "xpu"] {
        for (_, archive) in &all {
            let stem = archive.file_stem().unwrap().to_string_lossy().to_string();
            let out = tmp.path().join(device).join(&stem);
            let (output, _, stderr) = run(host(&host_bin())
                .arg("compile")
                .arg(archive)
                .args(["--device", device, "-o"])
                .arg(&out));
            assert!(output.status.success(), "{stem} for {device}: {stderr}");
            let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
            // Convolutions are calls into ATen (cuDNN), as Inductor makes them.
            if stem.starts_with("resnet") || stem.starts_with("mobilenet") {
                assert!(code.contains("torch.convolution("), "{stem}");
            }
        }
    }
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let (output, stdout, stderr) = run(Command::new(&python)
        .arg(repo_root().join("tools/check_triton.py"))
        .arg(tmp.path()));
    assert!(
        output.status.success(),
        "Triton rejected a kernel:\n{stderr}\n{stdout}"
    );
    for device in ["cuda", "gxu"] {
        let compiled = stdout
            .lines()
            .filter(|l| l.contains(&format!("/{device}/")) && l.contains("kernel(s) compiled"))
            .count();
        assert_eq!(compiled, all.len(), "{device}: {stdout}");
    }
}

#[test]
fn a_token_id_out_of_range_is_an_error_on_cpu_never_a_stray_read() {
    let tmp = TempDir::new("zoo-oob");
    let dir = inputs("gpt2", tmp.path());
    // GPT-2's vocabulary has 96 entries: id 1000 is out of range.
    let mut ids = std::fs::read(dir.join("input0.bin")).unwrap();
    ids[..8].copy_from_slice(&1000i64.to_le_bytes());
    std::fs::write(dir.join("input0.bin"), ids).unwrap();
    let (output, _, stderr) = run(host(&host_bin())
        .arg("run")
        .arg(zoo().join("gpt2.pt2"))
        .arg("--inputs")
        .arg(&dir));
    assert!(!output.status.success());
    assert!(stderr.contains("index out of range"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The reference interpreter names the value and the dim's size.
    let (output, _, stderr) = run(host(&host_bin())
        .arg("eval")
        .arg(zoo().join("gpt2.pt2"))
        .arg("--inputs")
        .arg(&dir));
    assert!(!output.status.success());
    assert!(
        stderr.contains("index 1000 is out of range for a dim of size 96"),
        "{stderr}"
    );
}

#[test]
fn a_negative_token_id_is_refused_by_the_reference_as_pytorch_s_embedding_refuses_it() {
    let tmp = TempDir::new("zoo-negative");
    let dir = inputs("gpt2", tmp.path());
    let mut ids = std::fs::read(dir.join("input0.bin")).unwrap();
    ids[..8].copy_from_slice(&(-1i64).to_le_bytes());
    std::fs::write(dir.join("input0.bin"), ids).unwrap();
    let want =
        "index -1 is out of range for a dim of size 96 (embedding takes no negative indices)";
    for command in [&["eval"][..], &["run", "--check"]] {
        let (output, _, stderr) = run(host(&host_bin())
            .args(command)
            .arg(zoo().join("gpt2.pt2"))
            .arg("--inputs")
            .arg(&dir));
        assert!(!output.status.success(), "{command:?}: {stderr}");
        assert!(stderr.contains(want), "{command:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
