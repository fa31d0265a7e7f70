//! Unit tests of the `cpu` plugin, on the Rust trait directly.

use kiln_plugin_api::{
    BackendFeatures, DevicePlugin, Grid, LoadContext, PointwiseQuery, PropertiesSource,
    ReductionQuery, SchedulingKind, ScratchWorkspace, Wrappers,
};

use super::*;

use kiln_plugin_kit::checks;

fn plugin() -> Cpu {
    Cpu::load(&LoadContext {
        library_path: "libcpu.so".into(),
        host_version: "0.0.0".into(),
    })
    .expect("the cpu plugin always loads")
}

#[test]
fn manifest_names_the_device() {
    let m = Cpu::manifest();
    assert_eq!(m.name.as_str(), "cpu");
    checks::assert_one_line("vendor", &m.vendor);
    checks::assert_one_line("description", &m.description);
}

#[test]
fn overrides_mirror_pytorchs_cpu() {
    let p = plugin();
    assert_eq!(
        p.import_get_raw_stream_as("get_raw_stream").as_deref(),
        Some("get_raw_stream = lambda _device_idx: 0")
    );
    assert_eq!(p.synchronize().as_deref(), Some("pass"));
    assert_eq!(p.cpp_kernel_type().as_deref(), Some("void*"));
    let ws = ScratchWorkspace {
        size: 1,
        dtype: "cached_torch_dtype_uint8".into(),
    };
    for (what, value) in [
        ("set_device", p.set_device(0)),
        ("device_guard", p.device_guard(0)),
        ("cpp_device_guard", p.cpp_device_guard()),
        ("cpp_aoti_device_guard", p.cpp_aoti_device_guard()),
        ("cpp_stream_guard", p.cpp_stream_guard()),
        ("cpp_aoti_stream_guard", p.cpp_aoti_stream_guard()),
        (
            "cpp_getStreamFromExternal",
            p.cpp_get_stream_from_external(),
        ),
        ("kernel_driver", p.kernel_driver()),
        ("cpp_stream_type", p.cpp_stream_type()),
        ("aoti_get_stream", p.aoti_get_stream()),
        ("cpp_device_ptr", p.cpp_device_ptr()),
        ("tma_descriptor_helpers", p.tma_descriptor_helpers()),
    ] {
        assert_eq!(value, None, "{what}");
    }
    assert_eq!(p.cpp_scratch(0, &ws, None), None);
    checks::assert_one_line_overrides(&p);
}

#[test]
fn kernel_header_has_the_kernel_includes() {
    let header = plugin().kernel_header().expect("provided");
    for include in [
        "<cstdint>",
        "<cmath>",
        "<cstddef>",
        "<algorithm>",
        "<limits>",
    ] {
        assert!(header.contains(&format!("#include {include}")), "{include}");
    }
    assert!(header.contains("#ifdef _OPENMP\n#include <omp.h>\n#endif\n"));
    for tile in ["VBYTES", "VREGS", "MR", "NR", "MC", "KC", "NC"] {
        let line = header
            .lines()
            .find(|l| l.starts_with(&format!("#define KILN_MM_{tile} ")))
            .unwrap_or_else(|| panic!("KILN_MM_{tile} is defined"));
        let value: u32 = line
            .rsplit(' ')
            .next()
            .unwrap_or("")
            .parse()
            .expect("a number");
        assert!(value > 0, "{line}");
    }
    checks::assert_balanced("kernel_header", &header);
}

#[test]
fn the_host_is_one_available_device() {
    let p = plugin();
    assert!(p.is_available());
    assert_eq!(p.device_count(), 1);
    let props = p.device_properties(0).expect("cpu 0");
    assert_eq!(props.device_type.as_str(), "cpu");
    assert_eq!(props.source, PropertiesSource::Queried);
    assert_eq!(
        props.warp_size,
        abi_stable::std_types::ROption::RSome(properties::simd_bytes() / 4)
    );
    let spec = p.backend_spec();
    assert_eq!(spec.scheduling, SchedulingKind::Cpp);
    assert_eq!(spec.wrappers, Wrappers::PYTHON | Wrappers::CPP);
    assert!(!spec.features.contains(BackendFeatures::TRITON_TEMPLATES));
    // The Triton targets' questions: no C++ kernel asks them.
    assert_eq!(p.shared_memory_per_block(0), None);
    assert_eq!(p.tf32_dot(), None);
    assert_eq!(p.matmul_alignment(), None);
    assert_eq!(p.conv_channels_last(), None);
}

#[test]
fn heuristics_are_chunks_and_lanes() {
    let p = plugin();
    let configs = p.pointwise_configs(&PointwiseQuery {
        numel: 1 << 20,
        element_bytes: 4,
    });
    assert_eq!(configs[0].r_block, (properties::simd_bytes() / 4));
    assert!(u64::from(configs[0].x_block) >= heuristics::MIN_CHUNK_ELEMENTS);
    let configs = p.reduction_configs(&ReductionQuery {
        rows: 8192,
        row_len: 8192,
        element_bytes: 4,
    });
    assert!(configs
        .iter()
        .all(|c| c.num_warps == 1 && c.num_stages == 1));
    checks::assert_heuristics_sweep(&p);
}

#[test]
fn grid_is_identity_within_int64() {
    let p = plugin();
    for n in [1, 47, 48, 50, 1000] {
        assert_eq!(p.adjust_grid(Grid::new(n, 1, 1)), Grid::new(n, 1, 1));
    }
    assert_eq!(
        p.adjust_grid(Grid::new(u64::MAX, 2, 3)),
        Grid::new(i64::MAX as u64, 2, 3)
    );
    checks::assert_grid_never_shrinks(&p);
}

/// The tiles of a host like a Sapphire Rapids core (48 KiB L1, 2 MiB L2) for
/// its 64-byte vectors, and for 32-byte ones.
fn sapphire_rapids_tiles() -> (heuristics::MatmulTiles, heuristics::MatmulTiles) {
    let limits = |simd_bytes| heuristics::CpuLimits {
        cores: 2,
        simd_bytes,
        l1d_bytes: 48 << 10,
        l2_bytes: 2 << 20,
    };
    (
        heuristics::matmul_tiles(&limits(64)),
        heuristics::matmul_tiles(&limits(32)),
    )
}

#[test]
fn a_host_with_64_byte_vectors_asks_gcc_for_them_after_the_includes() {
    let (wide, narrow) = sapphire_rapids_tiles();
    let header = overrides::kernel_header(&wide, Some(&narrow));
    let pragma = header
        .find("#pragma GCC target(\"prefer-vector-width=512\")")
        .expect("the pragma");
    assert!(header.rfind("#include").expect("includes") < pragma);
    // Only where the compiler targets AVX-512, only GCC, and not when the user keeps the width.
    let guard = header[..pragma].rfind("#if ").expect("guarded");
    for condition in [
        "__AVX512F__",
        "!defined(__clang__)",
        "!defined(KILN_KEEP_VECTOR_WIDTH)",
    ] {
        assert!(header[guard..pragma].contains(condition), "{condition}");
    }
    checks::assert_balanced("kernel_header", &header);
    let header = overrides::kernel_header(&narrow, None);
    assert!(!header.contains("prefer-vector-width"));
}

#[test]
fn with_64_byte_vectors_only_mkl_is_preferred_to_kilns_own_product() {
    let (wide, narrow) = sapphire_rapids_tiles();
    let header = overrides::kernel_header(&wide, Some(&narrow));
    let define = header
        .find("#define KILN_MM_BLAS_LIBRARIES \"libmkl_rt.so.2:libmkl_rt.so\"")
        .expect("the library list");
    // Only where the compiler targets AVX-512 (else the 32-byte tiles run, and
    // OpenBLAS's own dispatch is faster), and a list given in the flags wins.
    let guard = header[..define].rfind("#if ").expect("guarded");
    for condition in ["__AVX512F__", "!defined(KILN_MM_BLAS_LIBRARIES)"] {
        assert!(header[guard..define].contains(condition), "{condition}");
    }
    assert!(!header.contains("openblas"));
    checks::assert_balanced("kernel_header", &header);
    // A host without 64-byte vectors keeps the whole list of the runtime's kiln/blas.h.
    let header = overrides::kernel_header(&narrow, None);
    assert!(!header.contains("KILN_MM_BLAS_LIBRARIES"));
}
