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

/// `kernel_header()`: the includes, then this host's tiles for the blocked
/// matrix product (the prelude's `KILN_MM_*` macros). Each is guarded, so
/// that `-DKILN_MM_KC=...` in `KILN_CXXFLAGS` still wins. `narrower` are the
/// tiles for 32-byte vectors, used when the host has AVX-512 but the compiler
/// does not target it (an older compiler that does not know the CPU, or
/// flags without `-march=native`): 64-byte tiles would then spill.
pub fn kernel_header(tiles: &MatmulTiles, narrower: Option<&MatmulTiles>) -> String {
    let mut text =
        format!("{INCLUDES}// Matrix-product tiles for this host's vector width and caches.\n");
    if let Some(narrower) = narrower {
        text += "#if defined(__x86_64__) && !defined(__AVX512F__)\n";
        text += "// The compiler does not target AVX-512 here: the tiles of 32-byte vectors.\n";
        text += &tile_defines(narrower);
        text += "#endif\n";
    }
    text + &tile_defines(tiles)
}

fn tile_defines(tiles: &MatmulTiles) -> String {
    let MatmulTiles {
        vbytes,
        mr,
        nr,
        mc,
        kc,
        nc,
    } = *tiles;
    let mut text = String::new();
    for (name, value) in [
        ("VBYTES", vbytes),
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
