//! Kiln's cpu runtime: the C++ that every generated `wrapper.cpp` includes
//! rather than carries. The headers are real files in `kiln/` beside this
//! module (a C++ compiler, formatter and reader see them as C++), embedded in
//! the `host` binary with `include_str!` so that it stays one file, and
//! written beside the generated code as `kiln/*.h`: `host compile -o out`
//! writes `out/kiln/`, and the in-process build (`runtime::compile`) hands
//! them to the compiler. `wrapper.cpp` includes them by the relative path
//! `"kiln/<name>"`, which a C++ compiler looks up beside the including file
//! first, so the output folder builds on its own.
//!
//! Each header is self-contained (it includes what it uses and compiles as a
//! translation unit of its own, warning-free under `-Wall -Wextra`: the test
//! below checks it) and has internal linkage only (`static`), so that two
//! Kiln libraries loaded into one process never interpose each other's
//! helpers. The one exception is `kiln_mm` under `KILN_MM_LINKED` ([`Linked`]):
//! then it has external linkage but hidden visibility, which a library never
//! exports either. The runtime holds no device's numbers: `matmul.h` refuses to
//! build unless the plugin's `kernel_header` defines the `KILN_MM_*` tiles.
//!
//! Plain text: no names from input files ever reach it. Its identifiers are
//! reserved by the wrapper's [`Namer`](crate::codegen::namer::Namer) before
//! any graph name is given out.

/// One header of the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Its path relative to the folder of `wrapper.cpp`, as `#include`d.
    pub path: &'static str,
    /// Its text.
    pub text: &'static str,
}

macro_rules! header {
    ($name:literal) => {
        Header {
            path: concat!("kiln/", $name),
            text: include_str!(concat!("kiln/", $name)),
        }
    };
}

/// float16/bfloat16 conversions, NaN-propagating maximum and minimum, float
/// `exp`/`tanh`/`erf`/`sigmoid`, index wrapping, division and integer powers:
/// what every kernel may call.
pub const SCALAR: Header = header!("scalar.h");
/// `KilnArena`: 64-byte-aligned scratch grown on demand (huge pages for
/// large blocks on Linux).
pub const ARENA: Header = header!("arena.h");
/// `kiln_tile_transpose` and the instruction sets' block transposes.
pub const TRANSPOSE: Header = header!("transpose.h");
/// `KilnLanes`/`KilnNans`: the vector accumulators of row reductions.
pub const LANES: Header = header!("lanes.h");
/// The BLAS library a float32/float64 product may call (`KILN_MM_BLAS`).
pub const BLAS: Header = header!("blas.h");
/// The blocked matrix product `kiln_mm` (extern `mm`/`bmm`).
pub const MATMUL: Header = header!("matmul.h");
/// The 2-D convolution `kiln_conv2d` (extern convolutions).
pub const CONV: Header = header!("conv.h");
/// `kiln_copy_out`: a strided output gathered into dense memory.
pub const COPY_OUT: Header = header!("copy_out.h");
/// `kiln_read_weights`: the weights file read and checked.
pub const WEIGHTS: Header = header!("weights.h");
/// The checks of a call's sizes in a library compiled for a range of them.
pub const SIZES: Header = header!("sizes.h");

/// Every header, in dependency order (one includes only headers before it).
pub const HEADERS: [Header; 10] = [
    SCALAR, ARENA, TRANSPOSE, LANES, BLAS, MATMUL, CONV, COPY_OUT, WEIGHTS, SIZES,
];

/// A part of the runtime that `host run` compiles once into an object file
/// of its cache and links into every library that uses it, instead of
/// compiling it into each generated file (`runtime::compile`): the products
/// of one dtype (`matmul.h`'s `KILN_MM_LINKED`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Linked {
    /// A short name for the object's file (`mm_f32`).
    pub name: &'static str,
    /// The object's translation unit: the plugin's `kernel_header`, the
    /// runtime headers it needs, and the explicit instantiations.
    pub source: String,
    /// The flags the object is compiled with, besides the library's.
    pub object_flags: Vec<String>,
    /// The flags the generated file is compiled with when the object is
    /// linked in: they declare what the object holds.
    pub library_flags: Vec<String>,
}

/// Every header's text, for the [`Namer`](crate::codegen::namer::Namer) to
/// reserve their identifiers.
pub fn texts() -> [&'static str; 10] {
    HEADERS.map(|h| h.text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    /// The tiles a plugin's `kernel_header` defines for 32-byte vectors (the
    /// cpu plugin's on an AVX2 host); `matmul.h` and `conv.h` need them.
    const TILES: &[&str] = &[
        "-DKILN_MM_VBYTES=32",
        "-DKILN_MM_VREGS=16",
        "-DKILN_MM_MR=6",
        "-DKILN_MM_NR=16",
        "-DKILN_MM_MC=120",
        "-DKILN_MM_KC=256",
        "-DKILN_MM_NC=256",
    ];

    fn compile(dir: &Path, header: &Header, extra: &[&str]) -> Result<(), String> {
        let tu = dir.join(format!("{}.cpp", header.path.replace('/', "_")));
        std::fs::write(&tu, format!("#include \"{}\"\n", header.path))
            .map_err(|e| format!("{}: {e}", tu.display()))?;
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let out = Command::new(&cxx)
            .args(["-O2", "-fopenmp", "-Wall", "-Wextra", "-Werror"])
            .args(
                crate::codegen::cpp::REQUIRED_FLAGS
                    .iter()
                    .filter(|f| **f != "-shared"),
            )
            .args(["-fno-math-errno", "-fno-trapping-math", "-c", "-o"])
            .arg(tu.with_extension("o"))
            .args(extra)
            .args(TILES)
            .arg("-I")
            .arg(dir)
            .arg(&tu)
            .output()
            .map_err(|e| format!("cannot run {cxx}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} with {extra:?}:\n{}",
                header.path,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    #[test]
    fn every_header_compiles_alone_without_warnings_on_every_instruction_set() {
        // The headers as they are written beside wrapper.cpp.
        let dir = std::env::temp_dir().join(format!("kiln-runtime-headers-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("kiln")).expect("scratch folder");
        for h in HEADERS {
            std::fs::write(dir.join(h.path), h.text).expect("header written");
        }
        // The block transposes of AVX-512, of AVX/AVX2, and none; with and
        // without a BLAS library to call.
        let mut variants: Vec<Vec<&str>> = vec![
            vec![],
            vec!["-DKILN_MM_BLAS=1"],
            // Products declared as linked from a runtime object, of every dtype.
            vec![
                "-DKILN_MM_LINKED",
                "-DKILN_MM_LINKED_F32",
                "-DKILN_MM_LINKED_F64",
                "-DKILN_MM_LINKED_F16",
                "-DKILN_MM_LINKED_BF16",
            ],
        ];
        if cfg!(target_arch = "x86_64") {
            for isa in [
                "-march=native",
                "-march=native -mno-avx512f",
                "-march=x86-64",
                "-mavx512f -mavx2",
            ] {
                variants.push(isa.split(' ').chain(["-DKILN_MM_BLAS=1"]).collect());
            }
        }
        let failures: Vec<String> = std::thread::scope(|s| {
            let jobs: Vec<_> = HEADERS
                .iter()
                .map(|h| {
                    let (dir, variants) = (&dir, &variants);
                    s.spawn(move || {
                        variants
                            .iter()
                            .filter_map(|v| compile(dir, h, v).err())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            jobs.into_iter()
                .flat_map(|j| {
                    j.join()
                        .unwrap_or_else(|_| vec!["a compile thread panicked".into()])
                })
                .collect()
        });
        let _ = std::fs::remove_dir_all(&dir);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn headers_include_only_headers_listed_before_them() {
        for (i, h) in HEADERS.iter().enumerate() {
            for line in h.text.lines() {
                let Some(name) = line
                    .strip_prefix("#include \"")
                    .and_then(|r| r.strip_suffix('"'))
                else {
                    continue;
                };
                let at = HEADERS
                    .iter()
                    .position(|o| o.path == format!("kiln/{name}"));
                assert!(
                    at.is_some_and(|at| at < i),
                    "{} includes \"{name}\", which is not a runtime header before it",
                    h.path
                );
            }
        }
    }
}
