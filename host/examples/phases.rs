//! Times import and each pass on the benchmark's generated graph (a quick profile):
//! `cargo run --release --example phases [NODES]`, 100,000 nodes by default.
#[path = "../benches/graph_100k.rs"]
#[allow(dead_code)]
mod bench;
fn main() {
    let n = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let text = bench::generate(n);
    let t = std::time::Instant::now();
    let mut g = kiln::graph::parse_toml(&text).unwrap();
    eprintln!("import {:?}", t.elapsed());
    let r = kiln::passes::run_pipeline(&mut g).unwrap();
    eprintln!("{r}");
    let t = std::time::Instant::now();
    drop(g);
    eprintln!("drop {:?}", t.elapsed());
}
