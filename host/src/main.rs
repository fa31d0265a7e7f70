//! The `host` binary: everything lives in the library; see `kiln::cli`.

fn main() -> std::process::ExitCode {
    kiln::cli::main()
}
