//! The `host` binary: a thin shell over the `kiln` library.

fn main() -> std::process::ExitCode {
    kiln::cli::main()
}
