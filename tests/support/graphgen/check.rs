//! Runs one generated graph through everything Kiln does without a GPU and compares
//! each result with the reference interpreter: the passes, the program scheduled for
//! every device (evaluated on the host), and the cpu device's real C++ library.
//! Triton devices' `output_code.py` texts are handed back for `tools/check_triton.py`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use kiln::graph::Graph;
use kiln::plugins::Plugin;
use kiln::tensor::Tensor;

use super::GraphSpec;

/// The devices a graph is checked on, and how.
pub struct Checker {
    plugins: Vec<(String, Arc<Plugin>)>,
    /// Whether to build and run the cpu device's `wrapper.cpp`.
    pub build_cpu: bool,
}

/// Something wrong with a graph: where it went wrong and what happened.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The stage: `parse`, `interpreter`, `passes`, `compile:DEV`, `schedule:DEV`,
    /// `cpu-library`.
    pub stage: String,
    /// What happened.
    pub detail: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.stage, self.detail)
    }
}

/// What a passing graph produced.
#[derive(Default)]
pub struct Passed {
    /// Each Triton device's `output_code.py`.
    pub triton_code: BTreeMap<String, String>,
    /// Devices that refused the graph with a clear "not supported" error, and why.
    pub unsupported: Vec<String>,
}

fn finding(stage: impl Into<String>, detail: impl std::fmt::Display) -> Finding {
    Finding {
        stage: stage.into(),
        detail: detail.to_string(),
    }
}

/// An error with its causes, one per line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

impl Checker {
    /// Loads `devices` from the plugins in `plugin_dir`.
    pub fn new(plugin_dir: &Path, devices: &[&str], build_cpu: bool) -> Result<Checker, String> {
        let registry =
            kiln::plugins::discover(&kiln::plugins::search_path(&[plugin_dir.to_path_buf()]));
        let plugins = devices
            .iter()
            .map(|d| {
                registry
                    .get(d)
                    .cloned()
                    .map(|p| (d.to_string(), p))
                    .ok_or_else(|| format!("no `{d}` plugin in {}", plugin_dir.display()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Checker { plugins, build_cpu })
    }

    /// Checks one graph; a panic anywhere in Kiln is a finding too.
    pub fn check(&self, spec: &GraphSpec, seed: u64) -> Result<Passed, Finding> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.check_inner(spec, seed)
        }))
        .unwrap_or_else(|p| {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(finding("panic", what))
        })
    }

    fn check_inner(&self, spec: &GraphSpec, seed: u64) -> Result<Passed, Finding> {
        let text = spec.to_toml();
        let graph = kiln::graph::parse_toml(&text).map_err(|e| finding("parse", chain(&e)))?;
        let metas: Vec<_> = graph
            .inputs()
            .iter()
            .map(|&i| graph.node(i).expect("an input").outputs[0].clone())
            .collect();
        let inputs = kiln::tensor_io::random_inputs(&metas, seed);
        let want = kiln::interp::evaluate(&graph, &inputs)
            .map_err(|e| finding("interpreter", chain(&e)))?;

        let mut passed = graph.clone();
        kiln::passes::run_pipeline(&mut passed).map_err(|e| finding("passes", chain(&e)))?;
        let got =
            kiln::interp::evaluate(&passed, &inputs).map_err(|e| finding("passes", chain(&e)))?;
        compare("passes", &got, &want, &graph)?;

        let mut out = Passed::default();
        for (device, plugin) in &self.plugins {
            let artifacts = match kiln::driver::compile(graph.clone(), plugin, &Default::default())
            {
                Ok(a) => a,
                // A documented limit of a device (a clear error naming what is not
                // supported) is counted, not failed.
                Err(
                    e @ (kiln::driver::Error::CppWrapper(
                        kiln::codegen::wrapper::cpp::Error::Unsupported(_),
                    )
                    | kiln::driver::Error::Schedule(kiln::schedule::Error::Unsupported {
                        ..
                    })),
                ) => {
                    out.unsupported.push(format!("{device}: {}", chain(&e)));
                    continue;
                }
                Err(e) => return Err(finding(format!("compile:{device}"), chain(&e))),
            };
            let got = kiln::schedule::eval::run(&artifacts.scheduled, &inputs)
                .map_err(|e| finding(format!("schedule:{device}"), chain(&e)))?;
            compare(&format!("schedule:{device}"), &got, &want, &graph)?;
            if artifacts.file_name == "output_code.py" {
                out.triton_code.insert(device.clone(), artifacts.code);
            } else if self.build_cpu {
                let (module, _) = kiln::runtime::build_and_load(
                    &artifacts.code,
                    &artifacts.scheduled,
                    &artifacts.weights,
                )
                .map_err(|e| finding(format!("{device}-library"), chain(&e)))?;
                let got = module
                    .run(&inputs)
                    .map_err(|e| finding(format!("{device}-library"), chain(&e)))?;
                compare(&format!("{device}-library"), &got, &want, &graph)?;
            }
        }
        Ok(out)
    }
}

/// Every output has the reference's shape and dtype and its values within the
/// dtype's tolerance.
fn compare(stage: &str, got: &[Tensor], want: &[Tensor], graph: &Graph) -> Result<(), Finding> {
    if got.len() != want.len() {
        return Err(finding(
            stage,
            format!(
                "{} outputs, the interpreter gives {}",
                got.len(),
                want.len()
            ),
        ));
    }
    for ((g, w), name) in got.iter().zip(want).zip(graph.output_names()) {
        if g.shape != w.shape || g.dtype != w.dtype {
            return Err(finding(
                stage,
                format!(
                    "output `{name}` is {}{:?}, the interpreter's is {}{:?}",
                    g.dtype, g.shape, w.dtype, w.shape
                ),
            ));
        }
        let (abs, rel) = kiln::tensor::errors(g, w);
        // An output is only as precise as the least precise float the graph computes
        // in (a float64 sum of float32 values carries float32 rounding).
        let tol = graph
            .node_ids()
            .filter_map(|id| graph.node(id))
            .flat_map(|n| n.outputs.iter().map(|m| m.dtype))
            .filter(|d| d.is_float())
            .map(kiln::tensor::tolerance)
            .fold(kiln::tensor::tolerance(w.dtype), f64::max)
            .min(if w.dtype.is_float() {
                f64::INFINITY
            } else {
                0.0
            });
        if rel > tol {
            return Err(finding(
                stage,
                format!(
                    "output `{name}` ({}{:?}) differs: relative error {rel:.3e} > {tol:.0e}, max abs error {abs:.3e}",
                    w.dtype, w.shape
                ),
            ));
        }
    }
    Ok(())
}
