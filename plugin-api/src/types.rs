//! Plain `#[repr(C)]` data that crosses the plugin boundary.
//!
//! Everything here derives `StableAbi`, so `abi_stable` checks its layout when a
//! plugin is loaded. Structs passed *by value* are frozen for the whole 1.x
//! series: growing data goes into the prefix-type tables of `root.rs` instead.

use abi_stable::std_types::{ROption, RString, RVec};
use abi_stable::StableAbi;

/// The `plugin-api` version a plugin was built against, as three numbers.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiVersion {
    /// Incompatible layout changes bump this.
    pub major: u32,
    /// Fields appended to the prefix types bump this.
    pub minor: u32,
    /// Fixes that do not touch the layout.
    pub patch: u32,
}

impl ApiVersion {
    /// The version of the `plugin-api` crate being compiled.
    pub const CURRENT: ApiVersion = ApiVersion {
        major: crate::API_VERSION_MAJOR,
        minor: crate::API_VERSION_MINOR,
        patch: crate::API_VERSION_PATCH,
    };
}

impl std::fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Who the plugin is: read first, before anything else is called.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The device name, the PrivateUse1 backend name: `^[a-z][a-z0-9_]{0,31}$`.
    pub name: RString,
    /// The plugin's own version, semver (`1.2.0`).
    pub version: RString,
    /// The `plugin-api` version the plugin was compiled against.
    pub api_version: ApiVersion,
    /// Who ships the plugin (one line).
    pub vendor: RString,
    /// What the plugin drives (one line).
    pub description: RString,
}

impl Manifest {
    /// A manifest stamped with the `plugin-api` version being compiled.
    pub fn new(name: &str, version: &str, vendor: &str, description: &str) -> Manifest {
        Manifest {
            name: name.into(),
            version: version.into(),
            api_version: ApiVersion::CURRENT,
            vendor: vendor.into(),
            description: description.into(),
        }
    }
}

/// An error returned across the boundary: a plugin's own failure, or a panic
/// caught by the export shims before it could unwind into the host.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct PluginError {
    /// What went wrong, in the plugin's words.
    pub message: RString,
}

impl PluginError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> PluginError {
        PluginError {
            message: RString::from(message.into()),
        }
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What the host passes to the plugin's `init` once, right after loading.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct LoadContext {
    /// The path the shared library was loaded from, so that a plugin can read
    /// configuration kept beside it (the `gxu` plugin reads `gxu.toml`).
    pub library_path: RString,
    /// The host's own version (semver text), for diagnostics.
    pub host_version: RString,
    /// Only in the test build that changes this type's layout.
    #[cfg(feature = "__changed_layout_for_compat_test")]
    pub changed_for_test: u32,
}

/// Where a device's properties came from.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropertiesSource {
    /// Queried from a live device through the vendor's runtime.
    Queried = 0,
    /// The plugin's documented defaults: no device was reachable.
    StaticDefaults = 1,
}

/// PyTorch's `torch._inductor.runtime.hints.DeviceProperties`, plus the grid
/// limit and where the values came from.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct DeviceProperties {
    /// PyTorch's `type`: the device name (`cuda`, `gxu`, ...).
    pub device_type: RString,
    /// PyTorch's `index`.
    pub index: u32,
    /// Streaming multiprocessors, Xe cores, CPU cores: the units that run programs in parallel.
    pub multi_processor_count: u32,
    /// Compute capability as PyTorch encodes it (90 for sm_90); 0 where it has no meaning.
    pub cc: u32,
    /// The major architecture version.
    pub major: ROption<u32>,
    /// 32-bit registers per multiprocessor.
    pub regs_per_multiprocessor: ROption<u32>,
    /// Resident threads per multiprocessor.
    pub max_threads_per_multi_processor: ROption<u32>,
    /// Threads in one block (work-group).
    pub max_threads_per_block: ROption<u32>,
    /// Threads in one warp (sub-group, SIMD lane count).
    pub warp_size: ROption<u32>,
    /// The largest launch grid in x, y and z.
    pub max_grid: [u64; 3],
    /// Queried from a device, or static defaults.
    pub source: PropertiesSource,
}

/// How the device's kernels are generated.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulingKind {
    /// Triton kernels (Inductor's `TritonScheduling`).
    Triton = 0,
    /// C++/OpenMP kernels (Inductor's `CppScheduling`).
    Cpp = 1,
}

impl SchedulingKind {
    /// The lower-case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            SchedulingKind::Triton => "triton",
            SchedulingKind::Cpp => "cpp",
        }
    }
}

/// Which wrapper code generators the device supports.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Wrappers(u32);

bitflags::bitflags! {
    impl Wrappers: u32 {
        /// Inductor's `PythonWrapperCodegen`: `output_code.py`.
        const PYTHON = 1 << 0;
        /// Inductor's C++ wrapper (`CppWrapperGpu` / `CppWrapperCpu`): `wrapper.cpp`.
        const CPP = 1 << 1;
    }
}

/// PyTorch's `BackendFeature` enum, as bit flags (all ten names of 2.11).
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct BackendFeatures(u32);

bitflags::bitflags! {
    impl BackendFeatures: u32 {
        /// Horizontal fusion of independent pointwise ops into one launch.
        const FOREACH = 1 << 0;
        /// `bucketize` in generated kernels.
        const BUCKETIZE = 1 << 1;
        /// A kernel may write its output over a dead input's buffer.
        const INPLACE_BUFFERS = 1 << 2;
        /// Masked scatter with an index.
        const MASKED_SCATTER_WITH_INDEX = 1 << 3;
        /// Prefix scans in generated kernels.
        const SCAN = 1 << 4;
        /// Sorts in generated kernels.
        const SORT = 1 << 5;
        /// Reductions carrying several values at once (Welford, argmax).
        const TUPLE_REDUCTION = 1 << 6;
        /// Loop order chosen from the store rather than the loads.
        const PREFER_STORE_LOOP_ORDER = 1 << 7;
        /// Template kernels (matmul templates) as well as generated ones.
        const TRITON_TEMPLATES = 1 << 8;
        /// A reduction down to a single element in one kernel.
        const REDUCE_TO_SINGLE_ELEMENT = 1 << 9;
    }
}

/// The names of the `BackendFeature`s, in PyTorch's order.
pub const BACKEND_FEATURE_NAMES: [(&str, BackendFeatures); 10] = [
    ("FOREACH", BackendFeatures::FOREACH),
    ("BUCKETIZE", BackendFeatures::BUCKETIZE),
    ("INPLACE_BUFFERS", BackendFeatures::INPLACE_BUFFERS),
    (
        "MASKED_SCATTER_WITH_INDEX",
        BackendFeatures::MASKED_SCATTER_WITH_INDEX,
    ),
    ("SCAN", BackendFeatures::SCAN),
    ("SORT", BackendFeatures::SORT),
    ("TUPLE_REDUCTION", BackendFeatures::TUPLE_REDUCTION),
    (
        "PREFER_STORE_LOOP_ORDER",
        BackendFeatures::PREFER_STORE_LOOP_ORDER,
    ),
    ("TRITON_TEMPLATES", BackendFeatures::TRITON_TEMPLATES),
    (
        "REDUCE_TO_SINGLE_ELEMENT",
        BackendFeatures::REDUCE_TO_SINGLE_ELEMENT,
    ),
];

/// How the host must generate code for the device.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendSpec {
    /// Triton or C++ kernels.
    pub scheduling: SchedulingKind,
    /// The wrappers the device supports.
    pub wrappers: Wrappers,
    /// The `BackendFeature`s the device supports.
    pub features: BackendFeatures,
}

/// A pointwise kernel the host is about to launch, for `pointwise_configs`.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PointwiseQuery {
    /// Elements the kernel writes.
    pub numel: u64,
    /// Bytes of the widest element type the kernel touches.
    pub element_bytes: u32,
}

/// A reduction kernel the host is about to launch, for `reduction_configs`.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReductionQuery {
    /// Independent rows (Inductor's `xnumel`).
    pub rows: u64,
    /// Elements reduced per row (Inductor's `r0_numel`).
    pub row_len: u64,
    /// Bytes of the widest element type the kernel touches.
    pub element_bytes: u32,
}

/// How a kernel of rows and row elements walks memory (API 1.2), Inductor's
/// `ReductionHint` with one more case for tiled pointwise kernels. The host
/// derives it from the kernel's loads and stores, weighted by bytes.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReductionHint {
    /// Most bytes are contiguous along the row (`x.sum(-1)`, a softmax): few
    /// rows per program, long steps along the row.
    Inner = 0,
    /// Most bytes are contiguous across rows (`x.sum(0)`, the mean of a middle
    /// dim): many rows per program so that loads coalesce across them, short
    /// steps along the row.
    Outer = 1,
    /// No reduction: a pointwise kernel tiled in two dims because it reads
    /// memory contiguous along the rows and writes memory contiguous along the
    /// row elements, or the other way round (a transpose). A square-ish tile.
    Tile = 2,
}

/// A reduction (or tiled pointwise) kernel with its [`ReductionHint`], for
/// `hinted_reduction_configs` (API 1.2).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HintedReductionQuery {
    /// The kernel's shape, as `reduction_configs` gets it.
    pub query: ReductionQuery,
    /// How it walks memory.
    pub hint: ReductionHint,
}

/// A reduction kernel with its [`ReductionHint`] and the passes it makes over
/// each row, for `reduction_pass_configs` (API 1.4). A persistent tile holds
/// its row in registers and reads it once whatever the passes; a looped kernel
/// reads it once per pass, so a kernel of one pass gains nothing from holding
/// the row, and one of several gains the most.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReductionPassQuery {
    /// The kernel's shape, as `reduction_configs` gets it.
    pub query: ReductionQuery,
    /// How it walks memory.
    pub hint: ReductionHint,
    /// Passes over each row when the kernel loops along it: 1 when it reduces
    /// as it reads (a sum, a max, a mean and variance); more when it reads the
    /// row again after reducing it (a softmax writes its output in a second
    /// pass, a layer norm its normalised row). At least 1.
    pub passes: u32,
}

/// One candidate launch configuration, as Inductor's `triton.Config` holds it.
///
/// Pointwise configs leave `r_block` at 1; a reduction whose `r_block` covers
/// the whole row is a persistent (single-pass) reduction. For the `cpp`
/// scheduling kind `x_block` is the parallel chunk and `r_block` the vector width.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Elements (or rows) one program handles along x.
    pub x_block: u32,
    /// Reduction elements one program handles per step.
    pub r_block: u32,
    /// Warps per program.
    pub num_warps: u32,
    /// Software-pipelining stages.
    pub num_stages: u32,
}

/// A launch grid: programs along x, y and z.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid {
    /// Programs along x.
    pub x: u64,
    /// Programs along y.
    pub y: u64,
    /// Programs along z.
    pub z: u64,
}

impl Grid {
    /// A grid of `x` × `y` × `z` programs.
    pub const fn new(x: u64, y: u64, z: u64) -> Grid {
        Grid { x, y, z }
    }

    /// The three extents in order.
    pub const fn to_array(self) -> [u64; 3] {
        [self.x, self.y, self.z]
    }

    /// A grid from three extents in order.
    pub const fn from_array(dims: [u64; 3]) -> Grid {
        Grid::new(dims[0], dims[1], dims[2])
    }
}

/// The Triton target a device's kernels compile for: Triton's
/// `GPUTarget(backend, arch, warp_size)`, which the host writes into
/// `output_code.py` (`TRITON_TARGET`) and checks kernels against.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct TritonTarget {
    /// The Triton backend (`cuda`, `hip`, `xpu`, or a vendor's own):
    /// `^[a-z][a-z0-9_]{0,31}$`.
    pub backend: RString,
    /// `GPUTarget.arch` as one line of text: an integer (`90`), a name
    /// (`gfx942`), or a JSON object (the device-property dict Intel's
    /// backend takes).
    pub arch: RString,
    /// Threads per warp (sub-group) the kernels are compiled for.
    pub warp_size: u32,
}

impl TritonTarget {
    /// A target of `backend`, `arch` and `warp_size`.
    pub fn new(backend: &str, arch: &str, warp_size: u32) -> TritonTarget {
        TritonTarget {
            backend: backend.into(),
            arch: arch.into(),
            warp_size,
        }
    }
}

/// Triton's scratch workspace, as passed to `cpp_scratch`.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct ScratchWorkspace {
    /// Size of the workspace in elements.
    pub size: u64,
    /// The C++ dtype expression Inductor's `generate_dtype_str()` would give
    /// (e.g. `cached_torch_dtype_uint8`).
    pub dtype: RString,
}

/// What `cpp_scratch` returns: the lines that allocate the scratch buffer and
/// the name of the variable that points at it.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct ScratchCode {
    /// C++ statements, one per entry.
    pub lines: RVec<RString>,
    /// The variable holding the device pointer.
    pub var_name: RString,
}
