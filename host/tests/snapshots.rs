//! Golden snapshots of every example graph after each pass (`UPDATE_SNAPSHOTS=1`
//! re-blesses), and the small examples evaluate the same before and after the passes.

mod common;
use common::{max_rel_err, repo_root, snapshot};
use kiln::graph::{load_toml, print, validate};
use kiln::passes::PIPELINE;

fn examples() -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(repo_root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

#[test]
fn graph_after_each_pass() {
    for path in examples() {
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let mut g = load_toml(&path).unwrap();
        let mut text = format!("== import\n{}", print::to_text(&g));
        for (name, pass) in PIPELINE {
            pass(&mut g).unwrap();
            validate(&mut g).unwrap();
            kiln::graph::verify(&g).unwrap();
            text += &format!("== {name}\n{}", print::to_text(&g));
        }
        snapshot(&format!("{stem}.passes.txt"), &text);
    }
}

#[test]
fn small_examples_keep_their_values() {
    for path in examples()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("small") || p.ends_with("add.toml"))
    {
        let mut g = load_toml(&path).unwrap();
        let metas: Vec<_> = g
            .inputs()
            .iter()
            .map(|&i| g.node(i).unwrap().outputs[0].clone())
            .collect();
        let inputs = kiln::tensor_io::random_inputs(&metas, 7);
        let before = kiln::interp::evaluate(&g, &inputs).unwrap();
        kiln::passes::run_pipeline(&mut g).unwrap();
        let after = kiln::interp::evaluate(&g, &inputs).unwrap();
        for (a, b) in after.iter().zip(&before) {
            assert_eq!(a.shape, b.shape);
            // Relative to the output's magnitude: float32 cancellation (a
            // residual add of nearly opposite values) makes single small
            // elements' own relative error meaningless.
            let want = b.to_vec();
            let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-3);
            let e = max_rel_err(&a.to_vec(), &want, scale);
            assert!(e < 1e-5, "{}: {e}", path.display());
        }
    }
}

#[test]
fn dot_and_json_render() {
    let g = load_toml(repo_root().join("examples/small_layernorm.toml")).unwrap();
    snapshot("small_layernorm.dot", &print::to_dot(&g));
    let j: serde_json::Value = serde_json::from_str(&print::to_json(&g)).unwrap();
    assert_eq!(j["nodes"].as_array().unwrap().len(), 6);
}

#[test]
fn a_missing_snapshot_fails_instead_of_being_written() {
    // While blessing, every snapshot given is written, so there is nothing to check.
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        return;
    }
    let name = "no-such-snapshot.txt";
    let failure = std::panic::catch_unwind(|| snapshot(name, "anything"))
        .expect_err("a missing snapshot must fail the test");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("UPDATE_SNAPSHOTS=1"), "{message}");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    assert!(!path.exists(), "the missing snapshot was written");
}
