//! The `host` binary: everything lives in the library; see `kiln::cli`.

/// The graph IR allocates many small vectors (shapes, strides, operands) and
/// glibc's malloc/free took a third of a 100,000-node compile; mimalloc cuts
/// the whole pipeline by about 30% (`cargo bench --bench graph_100k`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    kiln::cli::main()
}
