//! The driver-text checks: for a Triton device that claims the C++ wrapper,
//! its `kernel_header` and `kernel_driver` compile as C++17, and the
//! `wrapper.cpp` Kiln generates around them compiles too, so that
//! `loadKernel`, `launchKernel`, the device-memory functions (and `kilnGemm`
//! where defined) have the signatures the wrapper calls.
//!
//! No device and no toolkit is needed: the text is compiled with
//! `-fsyntax-only` against Kiln's stub headers ([`STUBS`], declarations of the
//! CUDA, cuBLAS, GXU, SYCL and Level Zero APIs the bundled plugins use) and
//! every folder of `--include` (a vendor's own driver API header, or a stub of
//! it). They run in the child like every other check.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_plugin_api::{SchedulingKind, Wrappers};

use super::Outcome;
use crate::diag::report;
use crate::driver::{self, triton_cpp};
use crate::plugins::cpp_text::defines_function;
use crate::plugins::{Override, Plugin, WrapperKind};

/// The check that compiles `kernel_header` and `kernel_driver`.
pub const COMPILES: &str = "driver.compiles";
/// The check that compiles a generated wrapper around them.
pub const SIGNATURES: &str = "driver.signatures";

/// The environment variable carrying `--include` folders to the check's
/// child (`:`-separated, as `PATH`); a vendor may also set it directly.
pub const INCLUDE_ENV: &str = "KILN_DRIVER_INCLUDE";

/// Kiln's stub headers (`host/stubs`), by path below the include folder.
pub const STUBS: [(&str, &str); 7] = [
    ("cuda.h", include_str!("../../stubs/cuda.h")),
    (
        "cuda_runtime_api.h",
        include_str!("../../stubs/cuda_runtime_api.h"),
    ),
    ("cublas_v2.h", include_str!("../../stubs/cublas_v2.h")),
    ("gxu.h", include_str!("../../stubs/gxu.h")),
    ("sycl/sycl.hpp", include_str!("../../stubs/sycl/sycl.hpp")),
    (
        "sycl/ext/oneapi/backend/level_zero.hpp",
        include_str!("../../stubs/sycl/ext/oneapi/backend/level_zero.hpp"),
    ),
    (
        "level_zero/ze_api.h",
        include_str!("../../stubs/level_zero/ze_api.h"),
    ),
];

/// The graphs the wrapper is generated for: one with matrix products (used
/// where the driver defines `kilnGemm`), and one of kernels only.
const GEMM_GRAPH: &str = include_str!("../../../examples/small_gpt2_block.toml");
const KERNEL_GRAPH: &str = include_str!("../../../examples/small_layernorm.toml");

/// Whether the checks apply: a Triton device claiming the C++ wrapper.
fn applies(plugin: &Plugin) -> Result<(), Outcome> {
    match plugin.backend_spec() {
        Ok(Some(spec)) if spec.scheduling != SchedulingKind::Triton => Err(Outcome::skip(
            "the device uses C++ kernels: its wrapper has no kernel_driver",
        )),
        Ok(Some(spec)) if !spec.wrappers.contains(Wrappers::CPP) => {
            Err(Outcome::skip("the device does not claim the C++ wrapper"))
        }
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Outcome::fail("the plugin provides no backend spec")),
        Err(e) => Err(Outcome::fail(e.to_string())),
    }
}

/// A scratch folder holding the stub headers, removed when dropped.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new(what: &str) -> Result<Scratch, Outcome> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("kiln-conformance-{what}-"))
            .tempdir()
            .map_err(|e| Outcome::fail(format!("cannot create a scratch folder: {e}")))?;
        let stubs = dir.path().join("stubs");
        for (name, text) in STUBS {
            let path = stubs.join(name);
            let written = path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&path, text));
            if let Err(e) = written {
                return Err(Outcome::fail(format!(
                    "cannot write {}: {e}",
                    path.display()
                )));
            }
        }
        Ok(Scratch(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// The `--include` folders, from [`INCLUDE_ENV`].
fn include_folders() -> Vec<PathBuf> {
    std::env::var_os(INCLUDE_ENV)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Compiles `source` with `-fsyntax-only` against the stubs and the
/// `--include` folders; `Err` carries the compiler's diagnosis, with the
/// scratch folder's path taken out.
fn syntax_check(scratch: &Scratch, source: &Path) -> Result<(), Outcome> {
    let compiler =
        crate::runtime::compile::Compiler::from_env().map_err(|e| Outcome::skip(e.to_string()))?;
    let mut command = Command::new(&compiler.program);
    command.args(["-std=c++17", "-fsyntax-only", "-Wall"]);
    for folder in include_folders() {
        command.arg("-I").arg(folder);
    }
    command
        .arg("-I")
        .arg(scratch.path().join("stubs"))
        .arg(source);
    let output = command.output().map_err(|e| {
        Outcome::skip(format!(
            "cannot run the C++ compiler `{}`: {e}",
            compiler.program
        ))
    })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(Outcome::fail(diagnose(&stderr, scratch.path())))
}

/// The compiler's first errors as one line each, or, for a header that was
/// not found, what to do about it.
fn diagnose(stderr: &str, scratch: &Path) -> String {
    let scratch = format!("{}/", scratch.display());
    let errors: Vec<String> = stderr
        .lines()
        .filter(|l| l.contains("error:"))
        .map(|l| l.replace(&scratch, "").trim().to_string())
        .collect();
    if let Some(missing) = errors.iter().find_map(|l| {
        let (_, rest) = l.split_once("fatal error: ")?;
        rest.strip_suffix(": No such file or directory")
            .or_else(|| rest.strip_suffix("' file not found"))
            .map(|h| h.trim_start_matches('\'').to_string())
    }) {
        let stubs: Vec<&str> = STUBS.iter().map(|(n, _)| *n).collect();
        return format!(
            "the text includes <{missing}>, which is neither one of Kiln's stub headers ({}) nor in \
             an --include folder: pass `--include DIR` with your driver API's header (declarations \
             suffice)",
            stubs.join(", ")
        );
    }
    if errors.is_empty() {
        return format!(
            "the C++ compiler failed: {}",
            stderr.lines().take(3).collect::<Vec<_>>().join(" / ")
        );
    }
    let more = if errors.len() > 3 {
        format!(" (and {} more errors)", errors.len() - 3)
    } else {
        String::new()
    };
    format!("{}{more}", errors[..errors.len().min(3)].join(" / "))
}

fn text(plugin: &Plugin, which: Override) -> Result<String, Outcome> {
    match plugin.override_text(which, &crate::plugins::OverrideArgs::default()) {
        Ok(Some(text)) => Ok(text),
        Ok(None) => Err(Outcome::fail(format!(
            "the plugin provides no {}, which the C++ wrapper of a Triton device pastes in",
            which.name()
        ))),
        Err(e) => Err(Outcome::fail(e.to_string())),
    }
}

/// `driver.compiles`.
pub fn compiles(plugin: &Plugin) -> Outcome {
    let run = || -> Result<Outcome, Outcome> {
        applies(plugin)?;
        let header = text(plugin, Override::KernelHeader)?;
        let driver_text = text(plugin, Override::KernelDriver)?;
        let scratch = Scratch::new("driver")?;
        let source = scratch.path().join("driver.cpp");
        let code = format!("{}{header}\n{driver_text}\n", triton_cpp::STD_HEADERS);
        std::fs::write(&source, code)
            .map_err(|e| Outcome::fail(format!("cannot write {}: {e}", source.display())))?;
        syntax_check(&scratch, &source)?;
        Ok(Outcome::pass(
            "kernel_header and kernel_driver compile as C++17 against the stub headers",
        ))
    };
    run().unwrap_or_else(|o| o)
}

/// `driver.signatures`.
pub fn signatures(plugin: &Plugin) -> Outcome {
    wrapper_compiles(plugin).unwrap_or_else(|o| o)
}

/// The wrapper.cpp Kiln writes around the plugin's driver text, checked by the C++
/// compiler: with the optional functions the text defines (`kilnGemm` picks a graph
/// with matrix products; `launchKernelDependent` launches the kernels that wait).
fn wrapper_compiles(plugin: &Plugin) -> Result<Outcome, Outcome> {
    applies(plugin)?;
    let options = driver::Options {
        wrapper: Some(WrapperKind::Cpp),
        ..driver::Options::default()
    };
    let target = driver::Target::query(plugin, &options).map_err(|e| Outcome::fail(report(&e)))?;
    let driver = text(plugin, Override::KernelDriver)?;
    let optional: Vec<&str> = [
        triton_cpp::DEPENDENT_LAUNCH_FUNCTION,
        triton_cpp::GEMM_FUNCTION,
    ]
    .into_iter()
    .filter(|f| defines_function(&driver, f))
    .collect();
    let (name, graph_text) = if optional.contains(&triton_cpp::GEMM_FUNCTION) {
        ("small_gpt2_block", GEMM_GRAPH)
    } else {
        ("small_layernorm", KERNEL_GRAPH)
    };
    let graph =
        crate::graph::parse_toml(graph_text).map_err(|e| Outcome::fail(format!("{name}: {e}")))?;
    let artifacts = driver::compile_for(graph, plugin, target, &options)
        .map_err(|e| Outcome::fail(format!("the C++ wrapper refuses {name}: {}", report(&e))))?;
    let scratch = Scratch::new("signatures")?;
    // Stand-in binaries: only their names, and which kernels wait, reach the text.
    let binaries = crate::runtime::ahead::Binaries::StandIn {
        extension: "bin".into(),
    };
    let wrapper = crate::runtime::ahead::write_wrapper(&artifacts, scratch.path(), &binaries)
        .map_err(|e| {
            Outcome::fail(format!(
                "the C++ wrapper of {name} was refused: {}",
                report(&e)
            ))
        })?;
    let also: String = optional.iter().map(|f| format!(", {f}")).collect();
    syntax_check(&scratch, &wrapper.path).map_err(|o| {
        if o.status != super::Status::Fail {
            return o;
        }
        Outcome::fail(format!(
            "the wrapper.cpp Kiln generates for {name} does not compile with this driver text \
             (loadKernel, launchKernel, the kiln* device-memory functions{also} must have the \
             signatures docs/writing-a-plugin.md gives): {}",
            o.reason
        ))
    })?;
    Ok(Outcome::pass(format!(
        "the wrapper.cpp of {name} ({} launches, calling loadKernel, launchKernel{also}) compiles \
         against the driver text",
        wrapper.info.kernels
    )))
}
