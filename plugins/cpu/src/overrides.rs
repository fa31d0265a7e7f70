//! What PyTorch 2.11's `CpuDeviceOpOverrides`
//! (`torch/_inductor/codegen/cpu_device_op_overrides.py`) provides, plus the
//! `kernel_header` Kiln's C++ kernels need.
//!
//! A host CPU has no streams, no device switching and no separately loaded
//! kernels, so every stream, guard and driver override is `None`. This module
//! only produces text.

use kiln_plugin_api::FixedOverrides;

use crate::heuristics::MatmulTiles;

/// `import_get_raw_stream_as(name)`: PyTorch defines a Python function that
/// returns stream 0; this binds the same function to the requested name, on
/// one line.
pub fn import_get_raw_stream_as(name: &str) -> String {
    format!("{name} = lambda _device_idx: 0")
}

/// `synchronize()`: CPU kernels finish before the call that ran them
/// returns, so there is nothing to wait for (PyTorch's `pass`).
pub const SYNCHRONIZE: &str = "pass";

/// `cpp_kernel_type()`: PyTorch's `void*`, a pointer to the compiled function.
pub const CPP_KERNEL_TYPE: &str = "void*";

/// The standard headers Kiln's generated C++/OpenMP kernels use; `<omp.h>`
/// only when the compiler runs with OpenMP.
const INCLUDES: &str = "\
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#ifdef _OPENMP
#include <omp.h>
#endif
";

/// GCC tunes Intel's AVX-512 parts (Skylake-SP to Sapphire Rapids) for
/// 256-bit vectors, so `-march=native` vectorises Kiln's loops at half the
/// width the part has, and PyTorch's own (`at::vec`, AVX-512) kernels run
/// twice as many lanes: on two Sapphire Rapids cores, softmax 2048^2 took
/// 2.50 ms with 256-bit loops and 1.94 ms with 512-bit ones, an RMS-norm gate
/// 2.83 against 2.10, gelu 1.45 against 1.28. After the includes, so that
/// the standard library's inline functions keep their own target.
/// `-DKILN_KEEP_VECTOR_WIDTH` leaves the compiler's choice (or
/// `-mprefer-vector-width`) alone.
pub const PREFER_512: &str = "\
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__) && !defined(KILN_KEEP_VECTOR_WIDTH)
// This host's vectors are 64 bytes: GCC's loops use all of them.
#pragma GCC target(\"prefer-vector-width=512\")
#endif
";

/// `kernel_header()`: the includes, then this host's tiles for the blocked
/// matrix product (the prelude's `KILN_MM_*` macros). Each is guarded, so
/// that `-DKILN_MM_KC=...` in `KILN_CXXFLAGS` still wins. `narrower` are the
/// tiles for 32-byte vectors, used when the host has AVX-512 but the compiler
/// does not target it (an older compiler that does not know the CPU, or
/// flags without `-march=native`): 64-byte tiles would then spill.
///
/// On a host with 64-byte vectors the header also asks GCC for 512-bit vectors
/// in the loops it vectorises itself (see [`PREFER_512`]).
pub fn kernel_header(tiles: &MatmulTiles, narrower: Option<&MatmulTiles>) -> String {
    let mut text = INCLUDES.to_string();
    if tiles.vbytes >= 64 {
        text += PREFER_512;
    }
    text += "// Matrix-product tiles for this host's vector width and caches.\n";
    if let Some(narrower) = narrower {
        text += "#if defined(__x86_64__) && !defined(__AVX512F__)\n";
        text += "// The compiler does not target AVX-512 here: the tiles of 32-byte vectors.\n";
        text += &tile_defines(narrower);
        text += "#endif\n";
    }
    text += &tile_defines(tiles);
    if tiles.vbytes >= 64 {
        text += BLAS_64;
    }
    text + BLAS
}

/// Where the compiler targets the host's 64-byte vectors, only MKL (torch's
/// own kernel) is preferred to Kiln's: on two Sapphire Rapids cores Kiln's
/// kernel ran 2048^2 at 0.82-1.02 of `torch.mm`'s speed (mean 0.94) against
/// the system's OpenBLAS at 0.85-1.01 (mean 0.92), at least as fast in 7 of 8
/// pairs over four machine instances (over four shapes, 0.89 against 0.88;
/// `bench/cpu/results/2026-11-25-mm-packing-xeon.txt`), and on Zen 4 at
/// 0.93-1.02 of numpy's OpenBLAS. `KILN_BLAS=libopenblas.so.0` still calls
/// OpenBLAS.
pub const BLAS_64: &str = "\
#if defined(__AVX512F__) && !defined(KILN_MM_BLAS_LIBRARIES)
// 64-byte vectors: Kiln's own product unless MKL is installed.
#define KILN_MM_BLAS_LIBRARIES \"libmkl_rt.so.2:libmkl_rt.so\"
#endif
";

/// The prelude's matrix product calls a BLAS library's `cblas_sgemm` /
/// `cblas_dgemm` for large float32 and float64 products where one is found
/// at run time (MKL, then — except where [`BLAS_64`] applies — OpenBLAS,
/// BLIS, FlexiBLAS; or `$KILN_BLAS`), and runs its own blocked kernel
/// otherwise. MKL, where installed, is torch.mm's own kernel.
/// `-DKILN_MM_BLAS=0` (or `KILN_BLAS=off` at run time) keeps Kiln's own.
pub const BLAS: &str = "\
// Large float32/float64 products call a BLAS library found at run time ($KILN_BLAS; off keeps Kiln's own).
#ifndef KILN_MM_BLAS
#define KILN_MM_BLAS 1
#endif
";

fn tile_defines(tiles: &MatmulTiles) -> String {
    let MatmulTiles {
        vbytes,
        vregs,
        mr,
        nr,
        mc,
        kc,
        nc,
    } = *tiles;
    let mut text = String::new();
    for (name, value) in [
        ("VBYTES", vbytes),
        ("VREGS", vregs),
        ("MR", mr),
        ("NR", nr),
        ("MC", mc),
        ("KC", kc),
        ("NC", nc),
    ] {
        text += &format!("#ifndef KILN_MM_{name}\n#define KILN_MM_{name} {value}\n#endif\n");
    }
    text
}

/// Every override that takes no arguments, as the one value the plugin
/// returns from `DevicePlugin::overrides`: `synchronize`, `cpp_kernel_type`
/// and the `kernel_header` with this host's tiles.
pub fn fixed(tiles: &MatmulTiles, narrower: Option<&MatmulTiles>) -> FixedOverrides {
    FixedOverrides {
        synchronize: Some(SYNCHRONIZE.into()),
        kernel_header: Some(kernel_header(tiles, narrower)),
        cpp_kernel_type: Some(CPP_KERNEL_TYPE.into()),
        ..FixedOverrides::NONE
    }
}
