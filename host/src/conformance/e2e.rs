//! End-to-end checks: the bundled example graphs compile for the device
//! through the same driver as `host compile`; for a Triton device every
//! generated kernel compiles with the real Triton compiler, and for a C++
//! device every example builds, runs and matches the reference interpreter.
//! They run in the child like every other check.

use std::path::Path;
use std::process::Command;

use kiln_plugin_api::SchedulingKind;

use super::Outcome;
use crate::diag::report;
use crate::driver;
use crate::plugins::Plugin;

/// The small bundled examples every device must compile (embedded, so the
/// harness works from an installed binary too).
pub const EXAMPLES: [(&str, &str); 6] = [
    ("add", include_str!("../../../examples/add.toml")),
    (
        "small_softmax",
        include_str!("../../../examples/small_softmax.toml"),
    ),
    (
        "small_layernorm",
        include_str!("../../../examples/small_layernorm.toml"),
    ),
    (
        "small_mlp",
        include_str!("../../../examples/small_mlp.toml"),
    ),
    (
        "small_views",
        include_str!("../../../examples/small_views.toml"),
    ),
    (
        "small_gpt2_block",
        include_str!("../../../examples/small_gpt2_block.toml"),
    ),
];

/// The script that compiles generated kernels with Triton.
const CHECK_TRITON: &str = include_str!("../../../tools/check_triton.py");

/// The check that compiles the examples.
pub const COMPILE_EXAMPLES: &str = "e2e.compile_examples";
/// The check that compiles their kernels with Triton.
pub const TRITON_COMPILE: &str = "e2e.triton_compile";

/// How much longer than the per-check timeout the Triton check may take:
/// Triton needs about a second per kernel.
pub const TRITON_TIMEOUT_FACTOR: u32 = 12;

/// The check that builds and runs a C++ device's examples.
pub const CPP_RUN: &str = "e2e.cpp_run";

/// One bundled example compiled for the device.
struct Compiled {
    /// The example's name.
    name: &'static str,
    /// The example as written (the reference interpreter's input).
    graph: crate::graph::Graph,
    /// What the driver made of it.
    artifacts: driver::Artifacts,
}

/// Every example's generated file (`output_code.py` or `wrapper.cpp`), or
/// the first failure, through the same driver as `host compile`.
fn compile_all(plugin: &Plugin) -> Result<Vec<Compiled>, String> {
    let options = driver::Options::default();
    let target = driver::Target::query(plugin, &options).map_err(|e| report(&e))?;
    EXAMPLES
        .iter()
        .map(|&(name, text)| {
            let graph = crate::graph::parse_toml(text).map_err(|e| format!("{name}: {e}"))?;
            let artifacts = driver::compile_for(graph.clone(), plugin, target.clone(), &options)
                .map_err(|e| format!("{name}: {}", report(&e)))?;
            Ok(Compiled {
                name,
                graph,
                artifacts,
            })
        })
        .collect()
}

fn scheduling(plugin: &Plugin) -> Result<SchedulingKind, String> {
    match plugin.backend_spec() {
        Ok(Some(spec)) => Ok(spec.scheduling),
        Ok(None) => Err("the plugin provides no backend spec".to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// `e2e.compile_examples`.
pub fn compile_examples(plugin: &Plugin) -> Outcome {
    match compile_all(plugin) {
        Ok(all) => {
            let file = all.first().map_or("code", |c| c.artifacts.file_name);
            Outcome::pass(format!("{} example graphs compiled to {file}", all.len()))
        }
        Err(e) => Outcome::fail(e),
    }
}

/// `e2e.cpp_run`: for a C++ device, every example's `wrapper.cpp` builds with
/// the system C++ compiler, runs in this (child) process on random inputs,
/// and matches the reference interpreter.
pub fn cpp_run(plugin: &Plugin) -> Outcome {
    match scheduling(plugin) {
        Err(e) => return Outcome::fail(e),
        Ok(SchedulingKind::Triton) => return Outcome::skip("the device does not use C++ kernels"),
        Ok(SchedulingKind::Cpp) => {}
    }
    if let Err(e) = crate::runtime::compile::Compiler::from_env() {
        return Outcome::skip(e.to_string());
    }
    let all = match compile_all(plugin) {
        Ok(all) => all,
        Err(e) => return Outcome::fail(format!("an example did not compile: {e}")),
    };
    let problems = all
        .iter()
        .filter_map(|c| run_against_reference(c).err())
        .collect();
    Outcome::from_problems(
        problems,
        format!(
            "{} examples built, ran and matched the reference interpreter",
            all.len()
        ),
    )
}

fn run_against_reference(compiled: &Compiled) -> Result<(), String> {
    let Compiled {
        name,
        graph,
        artifacts,
    } = compiled;
    let (module, _) =
        crate::runtime::build_and_load(&artifacts.code, &artifacts.scheduled, &artifacts.weights)
            .map_err(|e| format!("{name}: {}", report(&e)))?;
    let metas: Vec<_> = graph
        .inputs()
        .iter()
        .filter_map(|&id| graph.node(id)?.outputs.first().cloned())
        .collect();
    let inputs = crate::tensor_io::random_inputs(&metas, 0);
    let want = crate::interp::evaluate(graph, &inputs).map_err(|e| format!("{name}: {e}"))?;
    let got = module
        .run(&inputs)
        .map_err(|e| format!("{name}: {}", report(&e)))?;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let (_, rel) = crate::tensor::errors(g, w);
        let tolerance = crate::tensor::tolerance(w.dtype);
        if g.shape != w.shape || rel > tolerance {
            return Err(format!(
                "{name}: output {i} differs from the reference interpreter \
                 (relative error {rel:.3e}, tolerance {tolerance:.0e})"
            ));
        }
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The kernels `check_triton.py` reports compiled, and the target, from
/// lines `PATH: N of M kernel(s) compiled for BACKEND ARCH, warp size W`.
fn compiled_kernels(stdout: &str) -> (usize, Option<String>) {
    let mut total = 0;
    let mut target = None;
    for line in stdout.lines().filter(|l| !l.starts_with("SKIPPED")) {
        let Some((_, rest)) = line.rsplit_once(".py: ") else {
            continue;
        };
        if let Some(n) = rest.split(' ').next().and_then(|n| n.parse::<usize>().ok()) {
            total += n;
        }
        if let Some((_, t)) = rest.split_once(" compiled for ") {
            target = Some(t.to_string());
        }
    }
    (total, target)
}

/// `e2e.triton_compile`.
pub fn triton_compile(plugin: &Plugin) -> Outcome {
    match scheduling(plugin) {
        Err(e) => return Outcome::fail(e),
        Ok(SchedulingKind::Cpp) => return Outcome::skip("the device does not use Triton kernels"),
        Ok(SchedulingKind::Triton) => {}
    }
    let python = crate::runtime::python::find();
    let probe = Command::new(&python.program)
        .args(["-c", "import triton"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        return Outcome::skip(format!(
            "`import triton` failed in {python}: {}",
            crate::runtime::python::INSTALL_HINT
        ));
    }
    let all = match compile_all(plugin) {
        Ok(all) => all,
        Err(e) => return Outcome::fail(format!("an example did not compile: {e}")),
    };
    let dir = match tempfile::Builder::new()
        .prefix("kiln-conformance-")
        .tempdir()
    {
        Ok(dir) => dir,
        Err(e) => return Outcome::fail(format!("cannot create a scratch folder: {e}")),
    };
    let script = dir.path().join("check_triton.py");
    let files = all
        .iter()
        .try_for_each(|c| {
            let file = dir.path().join(c.name).join(c.artifacts.file_name);
            write(&file, &c.artifacts.code)
        })
        .and_then(|()| write(&script, CHECK_TRITON));
    if let Err(e) = files {
        return Outcome::fail(format!("cannot write the generated files: {e}"));
    }
    match Command::new(&python.program)
        .arg(&script)
        .arg(dir.path())
        .output()
    {
        Err(e) => Outcome::fail(format!("cannot run {python}: {e}")),
        Ok(out) if out.status.success() => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let (compiled, target) = compiled_kernels(&stdout);
            let skipped: Vec<&str> = stdout
                .lines()
                .filter_map(|l| l.strip_prefix("SKIPPED "))
                .filter_map(|l| l.split_once(": ").map(|(_, why)| why))
                .collect();
            match (compiled, skipped.first()) {
                (0, Some(why)) => Outcome::skip((*why).to_string()),
                _ => Outcome::pass(format!(
                    "{compiled} kernels compiled with Triton for {}",
                    target.unwrap_or_else(|| "the plugin's target".into())
                )),
            }
        }
        Ok(out) => {
            let failures: Vec<String> = String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| l.starts_with("FAILED"))
                .map(|l| l.replace(&dir.path().display().to_string(), ""))
                .collect();
            Outcome::fail(if failures.is_empty() {
                format!("check_triton.py exited with {}", out.status)
            } else {
                failures.join("; ")
            })
        }
    }
}
