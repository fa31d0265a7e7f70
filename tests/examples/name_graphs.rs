//! Writes the two graphs of `tests/names.rs` (every name generated code binds,
//! as input names and as node and output names) into a folder, one
//! `<name>/graph.toml` each, for `bench/gpu/prepare.sh`:
//! `cargo run -p kiln-tests --example name_graphs -- DIR`.

use kiln_tests::names::{hostile_names, names_as_inputs, names_as_nodes};

fn main() -> std::process::ExitCode {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: name_graphs DIR");
        return std::process::ExitCode::FAILURE;
    };
    let names = hostile_names();
    for (name, text) in [
        ("names_as_inputs", names_as_inputs(&names)),
        ("names_as_nodes", names_as_nodes(&names)),
    ] {
        let folder = std::path::Path::new(&dir).join(name);
        let path = folder.join("graph.toml");
        if let Err(e) = std::fs::create_dir_all(&folder).and_then(|()| std::fs::write(&path, text))
        {
            eprintln!("cannot write {}: {e}", path.display());
            return std::process::ExitCode::FAILURE;
        }
        println!("wrote {} ({} names)", path.display(), names.len());
    }
    std::process::ExitCode::SUCCESS
}
