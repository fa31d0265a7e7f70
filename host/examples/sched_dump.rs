//! Prints the scheduled program of a graph file (development aid).
fn main() {
    let path = std::env::args().nth(1).expect("graph file");
    let mut g = kiln::graph::load_toml(std::path::Path::new(&path)).expect("load");
    kiln::passes::run_pipeline(&mut g).expect("passes");
    match kiln::schedule::schedule(&g) {
        Ok(s) => print!("{}", kiln::schedule::print::program_text(&s)),
        Err(e) => eprintln!("error: {e}"),
    }
}
