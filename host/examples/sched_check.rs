//! Compares a graph's scheduled program with the reference interpreter
//! (development aid): prints the relative error of each output.
fn main() {
    let path = std::env::args().nth(1).expect("graph file");
    let g = kiln::graph::load_toml(std::path::Path::new(&path)).expect("load");
    let metas: Vec<_> = g
        .inputs()
        .iter()
        .map(|n| g.node(*n).unwrap().outputs[0].clone())
        .collect();
    let inputs = kiln::tensor_io::random_inputs(&metas, 7);
    let want = kiln::interp::evaluate(&g, &inputs).expect("reference");
    let mut lowered = g.clone();
    kiln::passes::run_pipeline(&mut lowered).expect("passes");
    let s = kiln::schedule::schedule(&lowered).expect("schedule");
    let got = kiln::schedule::eval::run(&s, &inputs).expect("eval");
    for (a, b) in got.iter().zip(&want) {
        let (av, bv) = (a.to_vec(), b.to_vec());
        let scale = bv.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
        let err = av
            .iter()
            .zip(&bv)
            .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
        println!("{:e}", err / scale);
    }
    if std::env::args().nth(2).is_some() {
        print!("{}", kiln::schedule::print::program_text(&s));
    }
}
