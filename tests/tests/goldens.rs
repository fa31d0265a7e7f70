//! Golden files of everything Kiln generates, so that any change to generated
//! code shows up as a readable diff in review: every example graph compiled
//! for every bundled device by the real `host` binary (`output_code.py` or
//! `wrapper.cpp`, and the post-fusion IR), and every example after each pass.
//!
//! `UPDATE_SNAPSHOTS=1` re-blesses; `SNAPSHOT_FILTER=small_mlp/cpu` runs one
//! case (see `kiln_tests::Goldens`).

use std::path::Path;

use kiln_tests::*;

/// Every bundled device.
const DEVICES: [&str; 4] = ["cuda", "gxu", "xpu", "cpu"];

/// The environment that makes the bundled plugins describe the same device
/// on every machine: no visible GPU (the cuda plugin answers its H100
/// defaults), and a fixed CPU target (cores, SIMD width and caches decide
/// the cpu plugin's chunks and matrix tiles).
const DETERMINISTIC_ENV: [(&str, &str); 5] = [
    ("CUDA_VISIBLE_DEVICES", ""),
    ("KILN_CPU_CORES", "8"),
    ("KILN_CPU_SIMD_BYTES", "32"),
    ("KILN_CPU_L1D_BYTES", "32768"),
    ("KILN_CPU_L2_BYTES", "1048576"),
];

fn stem(path: &Path) -> String {
    path.file_stem()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn generated_code_for_every_example_on_every_device() {
    let mut goldens = Goldens::new("examples");
    let tmp = TempDir::new("goldens");
    for graph in examples() {
        for device in DEVICES {
            let case = format!("{}/{device}", stem(&graph));
            if !goldens.selected(&case) {
                continue;
            }
            let out = tmp.path().join(&case);
            let mut cmd = host(&host_bin());
            cmd.arg("compile")
                .arg(&graph)
                .args(["--device", device, "--debug", "-o"])
                .arg(&out)
                .envs(DETERMINISTIC_ENV);
            let (output, _, stderr) = run(&mut cmd);
            assert!(output.status.success(), "{case}: {stderr}");
            let file = if device == "cpu" {
                "wrapper.cpp"
            } else {
                "output_code.py"
            };
            for name in [file, "ir_post_fusion.txt"] {
                let text = std::fs::read_to_string(out.join(name))
                    .unwrap_or_else(|e| panic!("{case}/{name}: {e}"));
                goldens.check(&format!("{case}/{name}"), &text);
            }
        }
    }
    goldens.finish();
}

#[test]
fn every_example_after_each_pass() {
    use kiln::graph::{load_toml, print, validate};
    let mut goldens = Goldens::new("passes");
    for path in examples() {
        let name = stem(&path);
        if !goldens.selected(&name) {
            continue;
        }
        let mut g = load_toml(&path).expect("the example loads");
        let mut text = format!("== import\n{}", print::to_text(&g));
        for (pass, run) in kiln::passes::PIPELINE {
            run(&mut g, &kiln::passes::Options::default()).expect("the pass runs");
            validate(&mut g).expect("the graph still validates");
            kiln::graph::verify(&g).expect("the graph still verifies");
            text += &format!("== {pass}\n{}", print::to_text(&g));
        }
        goldens.check(&format!("{name}.txt"), &text);
    }
    if goldens.selected("small_layernorm.dot") {
        let g = load_toml(repo_root().join("examples/small_layernorm.toml")).expect("loads");
        goldens.check("small_layernorm.dot", &print::to_dot(&g));
    }
    goldens.finish();
}

#[test]
fn a_differing_or_missing_golden_fails_and_names_the_file() {
    // While blessing, every golden given is written: there is nothing to check.
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        return;
    }
    let failure = std::panic::catch_unwind(|| {
        let mut goldens = Goldens::new("passes");
        goldens.check("add.txt", "not what the passes print\n");
        goldens.check("no-such-example.txt", "anything");
        goldens.finish();
    })
    .expect_err("a differing golden must fail the test");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("add.txt: differs from line 1"),
        "{message}"
    );
    assert!(
        message.contains("no-such-example.txt: missing"),
        "{message}"
    );
    assert!(message.contains("UPDATE_SNAPSHOTS=1"), "{message}");
    assert!(
        !repo_root()
            .join("tests/snapshots/passes/no-such-example.txt")
            .exists(),
        "a missing golden was written"
    );
}
