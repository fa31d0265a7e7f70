//! The passes keep values: the small examples evaluate the same before and after
//! them. (Their goldens after each pass are `tests/tests/goldens.rs`'s.)

mod common;
use common::{max_rel_err, repo_root};
use kiln::graph::{load_toml, print};

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
fn json_renders_every_node() {
    let g = load_toml(repo_root().join("examples/small_layernorm.toml")).unwrap();
    let j: serde_json::Value = serde_json::from_str(&print::to_json(&g)).unwrap();
    assert_eq!(j["nodes"].as_array().unwrap().len(), 6);
}
