//! Weights beside the code: a `.pt2`'s weights go to `weights.safetensors`, never into
//! `output_code.py` or `wrapper.cpp` as literals; the cpu device's library reads the file
//! with `kiln_load_weights` and computes what it computes with the weights handed over in
//! memory; a missing, truncated or foreign file is an error that says what and where,
//! never a crash or a silent wrong answer; the Python wrapper's loader (the runtime's
//! `load_weights`, which `output_code.py` calls) checks the same.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln::codegen::weights::{Weights, FILE_NAME};
use kiln::driver::{self, Artifacts};
use kiln::plugins::load::{load_library, LoadOutcome};
use kiln::runtime::{compile, Error, Module};
use kiln_tests::*;

fn zoo(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/models").join(name)
}

fn compile_for(device: &str, archive: &Path) -> Artifacts {
    let plugin = match load_library(&bundled_plugin(device)) {
        LoadOutcome::Loaded(p) => p,
        _ => panic!("the bundled {device} plugin loads"),
    };
    let graph = kiln::graph::front::load(archive).expect("the archive imports");
    driver::compile(graph, &plugin, &driver::Options::default()).expect("it compiles")
}

/// The library of `artifacts` (cpu), built in `dir` and loaded without weights. A
/// library's weights are its globals, so each test builds its own file: two tests
/// opening one path would share them.
fn library(artifacts: &Artifacts, dir: &Path) -> Module {
    let compiler = compile::Compiler::from_env().expect("a C++ compiler");
    let built = compile::build(&artifacts.code, &compiler, dir).expect("builds");
    Module::load(&built.library, &artifacts.scheduled, &Weights::default()).expect("loads")
}

fn inputs(artifacts: &Artifacts) -> Vec<kiln::tensor::Tensor> {
    let metas: Vec<_> = artifacts
        .scheduled
        .program
        .inputs
        .iter()
        .map(|b| {
            let buf = artifacts.scheduled.program.buffer(*b);
            kiln::graph::TensorMeta::contiguous(buf.shape_hint(), buf.dtype)
        })
        .collect();
    kiln::tensor_io::random_inputs(&metas, 7)
}

#[test]
fn a_models_weights_live_in_the_safetensors_file_not_in_the_code() {
    let tmp = TempDir::new("weights-files");
    for device in ["cpu", "cuda"] {
        let artifacts = compile_for(device, &zoo("resnet.pt2"));
        let dir = tmp.subdir(device);
        let paths = artifacts.write_to(&dir).expect("written");
        let file = dir.join(FILE_NAME);
        assert!(paths.contains(&file), "{paths:?}");
        let weights = std::fs::metadata(&file).unwrap().len();
        // Every weight of the model is in the file, in its dtype (float32: 4 bytes each).
        assert!(artifacts.weights.data_bytes() > 100_000);
        assert!(weights >= artifacts.weights.data_bytes());
        let code = std::fs::read_to_string(&paths[0]).unwrap();
        assert!(
            (code.len() as u64) < artifacts.weights.data_bytes(),
            "{device}: the code ({} bytes) is as large as the weights",
            code.len()
        );
        for entry in &artifacts.weights.entries {
            assert!(code.contains(&entry.key), "{device}: {} unused", entry.key);
        }
    }
    // A graph without large constants writes no weights file (and removes a stale one).
    let dir = tmp.subdir("cpu");
    let small = compile_for("cpu", &repo_root().join("examples/small_layernorm.toml"));
    assert!(small.weights.is_empty());
    small.write_to(&dir).unwrap();
    assert!(!dir.join(FILE_NAME).exists());
}

#[test]
fn the_cpu_library_reads_its_weights_file_and_computes_the_same() {
    let tmp = TempDir::new("weights-cpu");
    let artifacts = compile_for("cpu", &zoo("resnet.pt2"));
    let dir = tmp.subdir("out");
    artifacts.write_to(&dir).unwrap();
    let inputs = inputs(&artifacts);

    let compiler = compile::Compiler::from_env().expect("a C++ compiler");
    let built = compile::build(&artifacts.code, &compiler, &tmp.subdir("memory")).unwrap();
    let in_memory = Module::load(&built.library, &artifacts.scheduled, &artifacts.weights)
        .unwrap()
        .run(&inputs)
        .unwrap();

    let mut module = library(&artifacts, &tmp.subdir("file"));
    module
        .load_weights_file(&dir.join(FILE_NAME))
        .expect("the file loads");
    let from_file = module.run(&inputs).unwrap();
    assert_eq!(from_file.len(), in_memory.len());
    for (a, b) in from_file.iter().zip(&in_memory) {
        assert_eq!(
            a.to_vec(),
            b.to_vec(),
            "the file's weights compute what memory's do"
        );
    }
}

#[test]
fn a_missing_truncated_or_foreign_weights_file_is_a_clear_error() {
    let tmp = TempDir::new("weights-bad");
    let artifacts = compile_for("cpu", &zoo("resnet.pt2"));
    let dir = tmp.subdir("out");
    artifacts.write_to(&dir).unwrap();
    let file = dir.join(FILE_NAME);
    let inputs = inputs(&artifacts);
    let mut module = library(&artifacts, &tmp.subdir("lib"));

    // Called before any weights: status 3, not a read through a null pointer.
    assert!(matches!(module.run(&inputs), Err(Error::NoWeights)));

    let message = |r: Result<(), Error>| match r {
        Err(Error::Weights(m)) => m,
        other => panic!("expected a weights error, got {other:?}"),
    };
    let missing = message(module.load_weights_file(&dir.join("nowhere.safetensors")));
    assert!(missing.contains("nowhere.safetensors"), "{missing}");
    assert!(missing.contains("No such file"), "{missing}");
    assert!(missing.contains("compile again"), "{missing}");

    let bytes = std::fs::read(&file).unwrap();
    let cut = dir.join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let truncated = message(module.load_weights_file(&cut));
    assert!(truncated.contains("truncated"), "{truncated}");
    std::fs::write(&cut, &bytes[..4]).unwrap();
    let stub = message(module.load_weights_file(&cut));
    assert!(
        stub.contains("truncated or not a safetensors file"),
        "{stub}"
    );

    // Another model's weights: a tensor is missing.
    let other = compile_for("cpu", &zoo("gpt2.pt2"));
    let other_dir = tmp.subdir("other");
    other.write_to(&other_dir).unwrap();
    let foreign = message(module.load_weights_file(&other_dir.join(FILE_NAME)));
    assert!(foreign.contains("has no tensor"), "{foreign}");

    // A failed load sets nothing (no weight points into a rejected file), and a good
    // file still loads after it.
    assert!(matches!(module.run(&inputs), Err(Error::NoWeights)));
    module.load_weights_file(&file).unwrap();
    module.run(&inputs).unwrap();
}

#[test]
fn the_python_loader_checks_the_file_and_reads_every_tensor_at_its_offset() {
    let tmp = TempDir::new("weights-py");
    let artifacts = compile_for("cuda", &zoo("bert.pt2"));
    let dir = tmp.subdir("out");
    artifacts.write_to(&dir).unwrap();
    // The expected first values of each tensor, as float32.
    let mut expected = serde_json::Map::new();
    for e in &artifacts.weights.entries {
        let first: Vec<f64> = (0..4).map(|i| e.data.get(i)).collect();
        expected.insert(e.key.clone(), serde_json::json!(first));
    }
    let expected_path = tmp.path().join("expected.json");
    std::fs::write(
        &expected_path,
        serde_json::Value::Object(expected).to_string(),
    )
    .unwrap();
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let (output, stdout, stderr) = run(Command::new(&python)
        .arg(repo_root().join("tests/support/weights_loader.py"))
        .arg(dir.join("output_code.py"))
        .arg(&expected_path));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for line in [
        "read: every tensor at its offset, on DEVICE",
        "missing: cannot open the weights file",
        "truncated: is truncated",
        "stub: is truncated or not a safetensors file",
        "offsets past the end: tensor `",
        "foreign dtype: the code expects",
        "foreign shape: the code expects",
        "missing tensor: has no tensor `kiln_nowhere`",
    ] {
        assert!(stdout.contains(line), "`{line}` not in:\n{stdout}");
    }
}
