//! The named checks, grouped by area, and the child-side code that runs one.
//!
//! A check's name is `area.what`. The areas, in the order they run: `load`
//! (opening the library and the version handshake), `manifest`, `device`,
//! `overrides` (one check per `DeviceOpOverrides` method), `properties`,
//! `heuristics` and `backend`. Each [`Check`] carries the one-line guarantee
//! that the report and `docs/writing-a-plugin.md` show.
//!
//! Everything below [`run_one`] runs inside the child process: it is the only
//! part of the harness that calls into the plugin.

use std::path::Path;

use kiln_plugin_api::{is_valid_device_name, SchedulingKind, Wrappers};
use serde_json::json;

use super::{device_properties, driver_text, e2e, heuristics, overrides, Outcome};
use crate::plugins::load::{self, LoadOutcome};
use crate::plugins::validate;
use crate::plugins::{required_overrides, Override, Plugin, WrapperKind};

/// One named check and what it guarantees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// `area.what`, e.g. `overrides.set_device`.
    pub name: String,
    /// One line: what a plugin that passes is guaranteed to do.
    pub description: String,
}

impl Check {
    fn new(name: impl Into<String>, description: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            description: description.into(),
        }
    }

    /// The part of the name before the first dot.
    pub fn area(&self) -> &str {
        self.name.split('.').next().unwrap_or(&self.name)
    }
}

/// The check that finds the root-module symbol.
pub const ROOT_SYMBOL: &str = "load.root_symbol";
/// The check that reads the manifest's API version (its data carries the manifest).
pub const API_VERSION: &str = "load.api_version";
/// The check that reads the backend spec (its data carries the scheduling kind).
pub const BACKEND_SPEC: &str = "backend.spec";
pub const ABI_LAYOUT: &str = "load.abi_layout";
const INIT: &str = "load.init";
const PROPERTIES_QUERY: &str = "properties.query";
const SHARED_MEMORY: &str = "properties.shared_memory";
const L2_CACHE: &str = "properties.l2_cache";
/// The check of `matmul_alignment`, which the checks that compile a graph
/// need: a compile refuses an alignment it cannot pad to.
const MATMUL_ALIGNMENT: &str = "heuristics.matmul_alignment";
/// The check of `conv_channels_last`, which the checks that compile a graph
/// need too: a compile refuses a name that is no floating dtype.
const CONV_CHANNELS_LAST: &str = "heuristics.conv_channels_last";
const PYTHON_WRAPPER: &str = "backend.python_wrapper";
const CPP_WRAPPER: &str = "backend.cpp_wrapper";

/// Every check, in the order the harness runs and reports them.
pub fn catalogue() -> Vec<Check> {
    let mut checks = vec![
        Check::new(ROOT_SYMBOL, "the file is a shared library exporting Kiln's abi_stable root-module symbol"),
        Check::new(ABI_LAYOUT, "abi_stable's version and type-layout check of the root module against this host's kiln-plugin-api passes"),
        Check::new(API_VERSION, "the manifest's kiln-plugin-api version has the host's major and a minor no newer than the host's"),
        Check::new(INIT, "init, given the library's path, succeeds (configuration kept beside the library is valid)"),
        Check::new("manifest.name", "the device name matches ^[a-z][a-z0-9_]{0,31}$, PyTorch's PrivateUse1 rule"),
        Check::new("manifest.version", "the plugin version is semver (e.g. 1.2.0)"),
        Check::new("manifest.text", "vendor and description are each one non-empty line"),
        Check::new("device.module", "is_available() and device_count() answer, and an available device has a count of at least 1"),
    ];
    checks.extend(
        Override::ALL
            .into_iter()
            .map(|o| Check::new(format!("overrides.{}", o.name()), overrides::description(o))),
    );
    checks.extend([
        Check::new(PROPERTIES_QUERY, "device_properties(0) answers without an error"),
        Check::new("properties.identity", "the properties name the device (type = device name) and the index asked for"),
        Check::new("properties.ranges", "multi_processor_count, max_threads_per_block and max_grid are positive, and a multiprocessor holds at least one block"),
        Check::new("properties.warp_size", "warp_size, when given, is a power of two"),
        Check::new("properties.threads_per_block", "max_threads_per_block is a whole number of warps"),
        Check::new(SHARED_MEMORY, "shared_memory_per_block(0), where given (API 1.5), is 16 KiB to 4 MiB in bytes, and the flash-attention tiles the host fits in it hold heads of 128 elements (language models' usual) of float16, bfloat16 and float32"),
        Check::new(L2_CACHE, "l2_cache_bytes(0), where given (API 1.8), is 256 KiB to 4 GiB in bytes (split attention's prefetch into L2 takes at most a share of it)"),
        Check::new("heuristics.pointwise_sweep", "pointwise_configs for 1 to 2^31 elements (powers of two and odd sizes) gives at least one config, block sizes powers of two (x_block, for a C++ device a parallel chunk: at least 1), num_warps and num_stages at least 1"),
        Check::new("heuristics.reduction_sweep", "reduction_configs (and hinted_reduction_configs for each hint, and reduction_pass_configs for each hint and 1 to 3 passes, where provided) for 1 to 2^20 rows of 1 to 2^20 elements gives at least one config, block sizes powers of two (x_block, for a C++ device a parallel chunk: at least 1), num_warps and num_stages at least 1"),
        Check::new("heuristics.thread_limit", "no config of either sweep needs more than max_threads_per_block threads (num_warps x warp_size)"),
        Check::new("heuristics.grid", "adjust_grid never shrinks a grid along any axis, never exceeds max_grid, and caps an axis above max_grid at exactly max_grid"),
        Check::new("heuristics.deterministic", "the same query always gives the same configs and the same grid"),
        Check::new("heuristics.triton_target", "the Triton target, when given, names a backend (^[a-z][a-z0-9_]{0,31}$), an arch on one line and a power-of-two warp size"),
        Check::new(MATMUL_ALIGNMENT, "matmul_alignment(), where given (API 1.6), is 0 (no padding) or a power of two from 2 to 256 bytes: the multiple the host pads a 16-bit matrix product's K and N to"),
        Check::new(CONV_CHANNELS_LAST, "conv_channels_last(), where given (API 1.7), names only floating dtypes (float16, bfloat16, float32, float64): those whose 2-D convolutions the host carries channels-last"),
        Check::new(BACKEND_SPEC, "backend_spec answers and the device claims at least one wrapper"),
        Check::new(PYTHON_WRAPPER, "a device claiming the Python wrapper provides every override that wrapper needs (a Triton device: import_get_raw_stream_as, set_device, synchronize, device_guard)"),
        Check::new(CPP_WRAPPER, "a device claiming the C++ wrapper provides kernel_header and, for a Triton device, the device and stream guards, kernel_driver and the stream, kernel and pointer types"),
        Check::new(driver_text::COMPILES, "for a Triton device claiming the C++ wrapper, kernel_header followed by kernel_driver compiles as C++17 against Kiln's stub headers (CUDA, cuBLAS, GXU, SYCL, Level Zero) and the --include folders (skipped without a C++ compiler)"),
        Check::new(driver_text::SIGNATURES, "the wrapper.cpp Kiln generates around that text (for a graph with matrix products where kernel_driver defines kilnGemm) compiles: loadKernel, launchKernel, launchKernelDependent where defined, the kiln* device-memory functions and kilnGemm have the signatures the wrapper calls"),
        Check::new(e2e::COMPILE_EXAMPLES, "every bundled example graph compiles for the device: passes, fusion and code generation with the plugin's strings and heuristics"),
        Check::new(e2e::CPP_RUN, "for a C++ device, every example's wrapper.cpp builds with the system C++ compiler, runs, and matches the reference interpreter (skipped without a C++ compiler; allowed 12 times the per-check timeout)"),
        Check::new(e2e::TRITON_COMPILE, "for a Triton device, every kernel of those examples compiles with the real Triton compiler for the plugin's Triton target (skipped without Python and Triton, or without a Triton backend for that target; allowed 12 times the per-check timeout)"),
    ]);
    checks
}

/// The checks that must pass before `name` runs; a check whose prerequisite
/// did not pass is skipped. The wrapper checks also need the override checks
/// their wrapper requires, which the parent learns from the child.
pub fn prerequisites(name: &str) -> Vec<String> {
    let list: &[&str] = match name {
        ROOT_SYMBOL => &[],
        ABI_LAYOUT => &[ROOT_SYMBOL],
        API_VERSION => &[ABI_LAYOUT],
        INIT => &[API_VERSION],
        PROPERTIES_QUERY => &[INIT],
        PYTHON_WRAPPER | CPP_WRAPPER => &[INIT, BACKEND_SPEC],
        // And the wrapper check of the device's own wrapper: see
        // [`wrapper_prerequisite`].
        e2e::COMPILE_EXAMPLES => &[
            INIT,
            BACKEND_SPEC,
            PROPERTIES_QUERY,
            MATMUL_ALIGNMENT,
            CONV_CHANNELS_LAST,
        ],
        e2e::TRITON_COMPILE | e2e::CPP_RUN => &[e2e::COMPILE_EXAMPLES],
        driver_text::COMPILES => &[INIT, BACKEND_SPEC, CPP_WRAPPER],
        driver_text::SIGNATURES => &[
            driver_text::COMPILES,
            PROPERTIES_QUERY,
            MATMUL_ALIGNMENT,
            CONV_CHANNELS_LAST,
        ],
        n if n.starts_with("properties.") || n.starts_with("heuristics.") => {
            &[INIT, PROPERTIES_QUERY]
        }
        _ => &[INIT],
    };
    list.iter().map(|s| s.to_string()).collect()
}

/// The wrapper check that must pass before `name` runs, when that depends on
/// the device: the examples compile with the device's own wrapper (Python for
/// Triton kernels, C++ for C++ kernels), so the check of that wrapper's
/// overrides comes first. `spec` is the data `backend.spec` reported.
pub fn wrapper_prerequisite(name: &str, spec: &serde_json::Value) -> Option<&'static str> {
    if name != e2e::COMPILE_EXAMPLES {
        return None;
    }
    match spec["scheduling"].as_str() {
        Some("cpp") => Some(CPP_WRAPPER),
        _ => Some(PYTHON_WRAPPER),
    }
}

/// How long `name` may run, given the per-check timeout.
pub fn timeout_for(name: &str, timeout: std::time::Duration) -> std::time::Duration {
    if name == e2e::TRITON_COMPILE || name == e2e::CPP_RUN {
        timeout * e2e::TRITON_TIMEOUT_FACTOR
    } else {
        timeout
    }
}

/// Whether the parent must finish `name` by comparing the overrides a wrapper
/// needs with the override checks' results.
pub fn is_wrapper_check(name: &str) -> bool {
    name == PYTHON_WRAPPER || name == CPP_WRAPPER
}

/// Runs the check `name` on the library at `path` in this process.
pub fn run_one(path: &Path, name: &str) -> Outcome {
    match name {
        ROOT_SYMBOL => root_symbol(path),
        ABI_LAYOUT => abi_layout(path),
        API_VERSION => api_version(path),
        INIT => init(path),
        _ => {
            if !catalogue().iter().any(|c| c.name == name) {
                return Outcome::fail(format!("there is no check named {name:?}"));
            }
            match loaded(path) {
                Ok(plugin) => run_loaded(&plugin, name),
                Err(e) => Outcome::fail(format!("plugin did not load: {e}")),
            }
        }
    }
}

fn run_loaded(plugin: &Plugin, name: &str) -> Outcome {
    if let Some(method) = name.strip_prefix("overrides.") {
        return match Override::from_name(method) {
            Some(which) => overrides::check(plugin, which),
            None => Outcome::fail(format!("there is no override named {method:?}")),
        };
    }
    if let Some(what) = name.strip_prefix("heuristics.") {
        return heuristics::check(plugin, what);
    }
    match name {
        "manifest.name" => manifest_name(plugin),
        "manifest.version" => manifest_version(plugin),
        "manifest.text" => manifest_text(plugin),
        "device.module" => device_module(plugin),
        PROPERTIES_QUERY => properties_query(plugin),
        SHARED_MEMORY => shared_memory(plugin),
        L2_CACHE => l2_cache(plugin),
        BACKEND_SPEC => backend_spec(plugin),
        PYTHON_WRAPPER => wrapper(plugin, WrapperKind::Python),
        CPP_WRAPPER => wrapper(plugin, WrapperKind::Cpp),
        e2e::COMPILE_EXAMPLES => e2e::compile_examples(plugin),
        e2e::TRITON_COMPILE => e2e::triton_compile(plugin),
        e2e::CPP_RUN => e2e::cpp_run(plugin),
        driver_text::COMPILES => driver_text::compiles(plugin),
        driver_text::SIGNATURES => driver_text::signatures(plugin),
        other => properties_check(plugin, other),
    }
}

/// Opens, handshakes and initialises the plugin, without the manifest's
/// grammar checks (those are checks of their own).
fn loaded(path: &Path) -> Result<Plugin, String> {
    let root = load::open_root(path).map_err(|o| describe(&o))?;
    let manifest = load::raw_manifest(root).map_err(|e| e.to_string())?;
    load::check_api_version(manifest.api_version).map_err(|e| e.to_string())?;
    load::init(root, path).map_err(|e| format!("`init` failed: {e}"))?;
    let version =
        semver::Version::parse(&manifest.version).unwrap_or_else(|_| semver::Version::new(0, 0, 0));
    Ok(Plugin::new(path.to_path_buf(), manifest, version, root))
}

fn describe(outcome: &LoadOutcome) -> String {
    match outcome {
        LoadOutcome::Loaded(p) => format!("loaded {}", p.name()),
        LoadOutcome::NotAPlugin(reason) => format!("not a Kiln plugin: {reason}"),
        LoadOutcome::Failed(e) => e.to_string(),
        LoadOutcome::Shadowed { name, .. } => format!("device name {name} is shadowed"),
    }
}

fn root_symbol(path: &Path) -> Outcome {
    match load::open_header(path) {
        Ok(_) => Outcome::pass("found the root-module symbol"),
        Err(outcome) => {
            let reason = match &outcome {
                LoadOutcome::NotAPlugin(_) => {
                    "it exports no Kiln root module (a plugin declares one with \
                     kiln_plugin_api::export_plugin!)"
                        .to_string()
                }
                other => describe(other),
            };
            Outcome::fail(format!("not a Kiln plugin: {reason}"))
                .with_data(json!({ "refused": reason }))
        }
    }
}

fn abi_layout(path: &Path) -> Outcome {
    match load::open_root(path) {
        Ok(_) => Outcome::pass(format!(
            "layout matches kiln-plugin-api {}",
            load::host_api_version()
        )),
        Err(outcome) => Outcome::fail(describe(&outcome)),
    }
}

fn api_version(path: &Path) -> Outcome {
    let root = match load::open_root(path) {
        Ok(root) => root,
        Err(outcome) => return Outcome::fail(describe(&outcome)),
    };
    let manifest = match load::raw_manifest(root) {
        Ok(m) => m,
        Err(e) => return Outcome::fail(e.to_string()),
    };
    let data = json!({
        "name": manifest.name.as_str(),
        "version": manifest.version.as_str(),
        "api_version": manifest.api_version.to_string(),
    });
    match load::check_api_version(manifest.api_version) {
        Ok(()) => Outcome::pass(format!(
            "built against kiln-plugin-api {}, host speaks {}",
            manifest.api_version,
            load::host_api_version()
        )),
        Err(e) => Outcome::fail(e.to_string()),
    }
    .with_data(data)
}

fn init(path: &Path) -> Outcome {
    let root = match load::open_root(path) {
        Ok(root) => root,
        Err(outcome) => return Outcome::fail(describe(&outcome)),
    };
    match load::init(root, path) {
        Ok(()) => Outcome::pass(""),
        Err(e) => Outcome::fail(format!("`init` failed: {e}")),
    }
}

fn manifest_name(plugin: &Plugin) -> Outcome {
    let name = plugin.manifest().name.as_str();
    if is_valid_device_name(name) {
        Outcome::pass(format!("device `{name}`"))
    } else {
        Outcome::fail(format!(
            "device name {name:?} does not match ^[a-z][a-z0-9_]{{0,31}}$ (PyTorch's PrivateUse1 rule)"
        ))
    }
}

fn manifest_version(plugin: &Plugin) -> Outcome {
    let version = plugin.manifest().version.as_str();
    match semver::Version::parse(version) {
        Ok(v) => Outcome::pass(format!("version {v}")),
        Err(e) => Outcome::fail(format!("plugin version {version:?} is not semver: {e}")),
    }
}

fn manifest_text(plugin: &Plugin) -> Outcome {
    let m = plugin.manifest();
    let problems = [("vendor", &m.vendor), ("description", &m.description)]
        .into_iter()
        .filter_map(|(field, value)| {
            validate::one_line_problem(value).map(|p| format!("{field} {p}"))
        })
        .collect();
    Outcome::from_problems(problems, "")
}

fn device_module(plugin: &Plugin) -> Outcome {
    let available = match plugin.is_available() {
        Ok(Some(a)) => a,
        Ok(None) => return Outcome::skip("not supported: the plugin has no device module"),
        Err(e) => return Outcome::fail(e.to_string()),
    };
    let count = match plugin.device_count() {
        Ok(Some(c)) => c,
        Ok(None) => return Outcome::fail("is_available answers but device_count is missing"),
        Err(e) => return Outcome::fail(e.to_string()),
    };
    if available && count == 0 {
        Outcome::fail("is_available() is true but device_count() is 0")
    } else {
        Outcome::pass(format!("available: {available}, {count} device(s)"))
    }
}

fn properties_query(plugin: &Plugin) -> Outcome {
    match device_properties(plugin) {
        Ok(p) => Outcome::pass(format!(
            "warp_size {}, max_threads_per_block {}, max_grid {:?}",
            p.warp_size
                .into_option()
                .map_or("-".to_string(), |w| w.to_string()),
            p.max_threads_per_block
                .into_option()
                .map_or("-".to_string(), |t| t.to_string()),
            p.max_grid
        )),
        Err(outcome) => outcome,
    }
}

fn properties_check(plugin: &Plugin, name: &str) -> Outcome {
    let props = match device_properties(plugin) {
        Ok(p) => p,
        Err(outcome) => return outcome,
    };
    let problems = match name {
        "properties.identity" => validate::properties_identity_problems(&props, plugin.name(), 0),
        "properties.ranges" => validate::properties_range_problems(&props),
        "properties.warp_size" => validate::warp_size_problems(&props),
        "properties.threads_per_block" => validate::threads_per_block_problems(&props),
        other => return Outcome::fail(format!("there is no check named {other:?}")),
    };
    Outcome::from_problems(problems, "")
}

/// The range of `shared_memory_per_block` a device may plausibly report, in
/// bytes: below it is more likely kibibytes than bytes, above it more likely a
/// whole memory than one program's share.
const SHARED_MEMORY_RANGE: std::ops::RangeInclusive<u64> = 16 * 1024..=4 * 1024 * 1024;
/// The head size whose flash-attention tiles must fit, in every dtype: that
/// of most language models (float32 heads of 128 need 24 KiB at the smallest
/// tiles).
const SHARED_MEMORY_HEADS: i64 = 128;

fn shared_memory(plugin: &Plugin) -> Outcome {
    let bytes = match plugin.shared_memory_per_block(0) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            let cpp = matches!(
                plugin.backend_spec(),
                Ok(Some(spec)) if spec.scheduling == SchedulingKind::Cpp
            );
            return Outcome::skip(if cpp {
                "not stated, and not needed: C++ kernels do not ask".to_string()
            } else {
                format!(
                    "not stated: Triton kernels assume the host's default of {} bytes",
                    crate::plugins::defaults::SHARED_MEMORY_PER_BLOCK
                )
            });
        }
        Err(e) => return Outcome::fail(e.to_string()),
    };
    if !SHARED_MEMORY_RANGE.contains(&bytes) {
        return Outcome::fail(format!(
            "shared_memory_per_block(0) is {bytes}, outside {} to {} bytes: it is in bytes, \
             and one program's share, not the device's",
            SHARED_MEMORY_RANGE.start(),
            SHARED_MEMORY_RANGE.end()
        ));
    }
    let tf32 = match crate::plugins::defaults::tf32_dot(plugin) {
        Ok(stated) => stated.value,
        Err(e) => return Outcome::fail(e.to_string()),
    };
    let widest = crate::driver::widest_heads(bytes, tf32);
    let mut problems = Vec::new();
    let mut fits = Vec::new();
    for (dtype, widest) in widest {
        match widest {
            Some((heads, used)) if heads >= SHARED_MEMORY_HEADS => {
                fits.push(format!("{dtype} heads up to {heads} ({used} bytes)"));
            }
            _ => problems.push(format!(
                "flash attention's tiles for {dtype} heads of {SHARED_MEMORY_HEADS} do not fit \
                 the {bytes} bytes of shared_memory_per_block(0)"
            )),
        }
    }
    Outcome::from_problems(problems, format!("{bytes} bytes: {}", fits.join(", ")))
}

/// The range of `l2_cache_bytes` a device may plausibly report, in bytes: below it
/// is more likely kibibytes than bytes (an H100's 50 MiB given as 51200), above it
/// more likely the device's whole memory than its cache.
const L2_CACHE_RANGE: std::ops::RangeInclusive<u64> = 256 * 1024..=4 * 1024 * 1024 * 1024;

fn l2_cache(plugin: &Plugin) -> Outcome {
    let bytes = match plugin.l2_cache_bytes(0) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Outcome::skip(format!(
                "not stated: the host takes {} bytes, and split attention prefetches nothing",
                crate::plugins::defaults::L2_CACHE_BYTES
            ))
        }
        Err(e) => return Outcome::fail(e.to_string()),
    };
    if !L2_CACHE_RANGE.contains(&bytes) {
        return Outcome::fail(format!(
            "l2_cache_bytes(0) is {bytes}, outside {} to {} bytes: it is in bytes, and the \
             cache's size, not the device memory's",
            L2_CACHE_RANGE.start(),
            L2_CACHE_RANGE.end()
        ));
    }
    Outcome::pass(format!(
        "{bytes} bytes ({:.1} MiB)",
        bytes as f64 / 1048576.0
    ))
}

fn backend_spec(plugin: &Plugin) -> Outcome {
    match plugin.backend_spec() {
        Ok(Some(spec)) if spec.wrappers.is_empty() => Outcome::fail(
            "backend_spec claims no wrapper: claim Wrappers::PYTHON, Wrappers::CPP or both",
        ),
        Ok(Some(spec)) => Outcome::pass(format!(
            "{} kernels, wrappers: {}",
            spec.scheduling.name(),
            wrapper_names(spec.wrappers)
        ))
        .with_data(json!({ "scheduling": spec.scheduling.name() })),
        Ok(None) => Outcome::fail(
            "the plugin provides no backend_spec, so the host cannot generate code for it",
        ),
        Err(e) => Outcome::fail(e.to_string()),
    }
}

fn wrapper_names(wrappers: Wrappers) -> String {
    let mut names = Vec::new();
    if wrappers.contains(Wrappers::PYTHON) {
        names.push("python");
    }
    if wrappers.contains(Wrappers::CPP) {
        names.push("cpp");
    }
    names.join(", ")
}

/// The child's half of a wrapper check: whether the device claims the wrapper
/// and which overrides it then needs. The parent checks those overrides.
fn wrapper(plugin: &Plugin, kind: WrapperKind) -> Outcome {
    let spec = match plugin.backend_spec() {
        Ok(Some(spec)) => spec,
        Ok(None) => return Outcome::skip("the plugin provides no backend_spec"),
        Err(e) => return Outcome::fail(e.to_string()),
    };
    let (flag, label) = match kind {
        WrapperKind::Python => (Wrappers::PYTHON, "Python"),
        WrapperKind::Cpp => (Wrappers::CPP, "C++"),
    };
    if !spec.wrappers.contains(flag) {
        return Outcome::skip(format!("the device does not claim the {label} wrapper"));
    }
    let required: Vec<&str> = required_overrides(&spec, kind)
        .into_iter()
        .map(Override::name)
        .collect();
    let scheduling = match spec.scheduling {
        SchedulingKind::Triton => "Triton",
        SchedulingKind::Cpp => "C++",
    };
    Outcome::pass("").with_data(json!({
        "wrapper": format!("{label} (for {scheduling} kernels)"),
        "required": required,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let checks = catalogue();
        let mut names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), checks.len());
        for c in &checks {
            assert!(c.name.contains('.'), "{}", c.name);
            assert!(!c.description.is_empty() && !c.description.contains('\n'));
        }
    }

    #[test]
    fn prerequisites_come_earlier_in_the_catalogue() {
        let checks = catalogue();
        let position = |n: &str| checks.iter().position(|c| c.name == n).unwrap();
        for c in &checks {
            for p in prerequisites(&c.name) {
                assert!(position(&p) < position(&c.name), "{} needs {p}", c.name);
            }
        }
    }
}
