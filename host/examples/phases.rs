//! Times import and each pass on the benchmark's generated graph (a quick profile).
#[path = "../benches/graph_100k.rs"]
#[allow(dead_code)]
mod bench;
fn main() {
    let text = bench::generate(100_000);
    let t = std::time::Instant::now();
    let mut g = kiln::graph::parse_toml(&text).unwrap();
    eprintln!("import {:?}", t.elapsed());
    let r = kiln::passes::run_pipeline(&mut g).unwrap();
    eprintln!("{r}");
}
