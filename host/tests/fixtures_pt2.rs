//! The interpreter agrees with PyTorch on the real fixtures written as TOML by hand
//! (`tools/pt2_to_toml.py` reads their weights), before and after the passes.

mod common;
use common::{max_rel_err, pt2_fixtures, read_f32};
use kiln::graph::load_toml;
use kiln::tensor_io::read_inputs;

fn check(name: &str) {
    let fx = pt2_fixtures();
    let mut g = load_toml(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/{name}.toml")),
    )
    .expect("fixture graph");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-fixture-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        fx.join(format!("{name}.input0.bin")),
        dir.join("input0.bin"),
    )
    .unwrap();
    let decls: Vec<_> = g
        .inputs()
        .iter()
        .map(|&i| {
            let n = g.node(i).unwrap();
            (n.name.clone(), n.outputs[0].clone())
        })
        .collect();
    let inputs = read_inputs(&dir, &decls).unwrap();
    let expected = read_f32(&fx.join(format!("{name}.expected0.bin")));
    let out = kiln::interp::evaluate(&g, &inputs).unwrap();
    let err = max_rel_err(&out[0].to_vec(), &expected, 1e-3);
    assert!(err <= 1e-4, "{name}: relative error {err}");
    kiln::passes::run_pipeline(&mut g).unwrap();
    let out = kiln::interp::evaluate(&g, &inputs).unwrap();
    let err = max_rel_err(&out[0].to_vec(), &expected, 1e-3);
    assert!(err <= 1e-4, "{name} after passes: relative error {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mlp_matches_pytorch() {
    check("mlp");
}

#[test]
fn ln_softmax_matches_pytorch() {
    check("ln_softmax");
}
