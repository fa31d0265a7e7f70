//! What a compile needs from a device's plugin ([`Target`]), asked once: the
//! backend spec, the override strings its wrapper needs, its limits and the
//! host's stated defaults for what an older plugin cannot say.

use std::collections::HashMap;

use kiln_plugin_api::{BackendSpec, SchedulingKind, Wrappers};

use super::{Error, Options};
use crate::codegen::wrapper::python;
use crate::plugins::validate::{
    conv_channels_last_problem, matmul_alignment_problem, override_text_problem,
    triton_target_problem,
};
use crate::plugins::{
    required_overrides, Override, OverrideArgs, Plugin, TritonTargetOwned, WrapperKind,
};

/// What a compile needs from a device's plugin, asked once.
#[derive(Clone, Debug)]
pub struct Target {
    /// The device name.
    pub device: String,
    /// Who generates the code, for the generated file's first comment (`gxu 0.1.0`).
    pub origin: String,
    /// The plugin's backend spec.
    pub spec: BackendSpec,
    /// The wrapper this compile writes.
    pub wrapper: WrapperKind,
    /// For Triton kernels: the Triton target they are generated for (the
    /// plugin's `triton_target`, or, as Inductor derives it, the device
    /// properties' type, `cc` and warp size); `None` when neither says.
    pub triton_target: Option<TritonTargetOwned>,
    /// For Triton kernels: the device's multiprocessors, which split
    /// reductions aim to keep busy (0: reductions are not split).
    pub parallel_units: u32,
    /// For Triton kernels: the warps of one program of a long outer reduction
    /// as the plugin's heuristics launch it (0: not asked, or no answer).
    pub reduction_program_warps: u32,
    /// For Triton kernels: the byte multiple `pad_mm` pads a 16-bit matrix
    /// product's K and N to, so that the device's matrix-product library runs
    /// its fast kernels (the plugin's `matmul_alignment`, or the host's
    /// default: 0, no padding). C++ kernels: 0.
    pub matmul_alignment: u32,
    /// For Triton kernels: the dtypes whose 2-D convolutions run channels-last
    /// (the plugin's `conv_channels_last`, or the host's default: none). C++
    /// kernels: none (the cpu's convolution takes contiguous operands).
    pub conv_channels_last: crate::passes::channels_last::DTypes,
    /// The overrides that wrapper needs, rendered for the device index.
    strings: HashMap<Override, String>,
}

/// The warps the plugin gives the first program of a long outer reduction
/// (a million results of 4096 float32 elements each), the split pass's
/// measure of a program's loads in flight; 0 when the plugin gives no config
/// (its heuristics are asked again, and refused by name, per kernel).
fn reduction_program_warps(plugin: &Plugin) -> u32 {
    use crate::codegen::heuristics::LaunchHeuristics;
    let query = kiln_plugin_api::ReductionQuery {
        rows: 1 << 20,
        row_len: 1 << 12,
        element_bytes: 4,
    };
    let hint = kiln_plugin_api::ReductionHint::Outer;
    let configs = match LaunchHeuristics::hinted_reduction_configs(plugin, query, hint) {
        Ok(Some(configs)) => Ok(configs),
        Ok(None) => LaunchHeuristics::reduction_configs(plugin, query),
        Err(e) => Err(e),
    };
    configs
        .ok()
        .and_then(|c| c.first().map(|c| c.num_warps))
        .unwrap_or(0)
}

pub(super) fn wrapper_label(kind: WrapperKind) -> &'static str {
    match kind {
        WrapperKind::Python => "Python",
        WrapperKind::Cpp => "C++",
    }
}

/// Every wrapper kind, in the order a device's default is preferred.
const WRAPPERS: [WrapperKind; 2] = [WrapperKind::Python, WrapperKind::Cpp];

/// The `--wrapper` value that picks `kind`.
fn wrapper_flag(kind: WrapperKind) -> &'static str {
    match kind {
        WrapperKind::Python => "--wrapper python",
        WrapperKind::Cpp => "--wrapper cpp",
    }
}

/// What `plugin` can compile: each wrapper this host writes, with whether a
/// compile with it gets everything it needs from the plugin (exactly the
/// questions [`Target::query`] asks) or why not.
pub fn capabilities(plugin: &Plugin) -> Vec<(WrapperKind, Result<(), Error>)> {
    WRAPPERS
        .iter()
        .map(|&kind| {
            let options = Options {
                wrapper: Some(kind),
                ..Options::default()
            };
            (kind, Target::query_one(plugin, &options).map(|_| ()))
        })
        .collect()
}

impl Target {
    /// Asks `plugin` for everything a compile with `options` needs, and
    /// refuses a device that cannot give it, naming what is missing (and the
    /// other wrapper, when the plugin supports that one).
    pub fn query(plugin: &Plugin, options: &Options) -> Result<Target, Error> {
        match Target::query_one(plugin, options) {
            Err(Error::MissingOverride {
                plugin: name,
                path,
                method,
                wrapper,
                alternative: None,
            }) => {
                let alternative = capabilities(plugin)
                    .into_iter()
                    .find(|(kind, ok)| wrapper_label(*kind) != wrapper && ok.is_ok())
                    .map(|(kind, _)| wrapper_flag(kind));
                Err(Error::MissingOverride {
                    plugin: name,
                    path,
                    method,
                    wrapper,
                    alternative,
                })
            }
            other => other,
        }
    }

    /// [`Target::query`] without looking for another wrapper.
    fn query_one(plugin: &Plugin, options: &Options) -> Result<Target, Error> {
        let unsupported = |what: String| Error::Unsupported {
            plugin: plugin.name().to_string(),
            path: plugin.path().display().to_string(),
            what,
        };
        let spec = plugin.backend_spec()?.ok_or_else(|| {
            unsupported("it provides no backend spec (scheduling kind and wrappers)".into())
        })?;
        let wrapper = options.wrapper.unwrap_or(match spec.scheduling {
            SchedulingKind::Triton => WrapperKind::Python,
            SchedulingKind::Cpp => WrapperKind::Cpp,
        });
        match (spec.scheduling, wrapper) {
            (SchedulingKind::Triton, _) | (SchedulingKind::Cpp, WrapperKind::Cpp) => {}
            (SchedulingKind::Cpp, WrapperKind::Python) => {
                return Err(unsupported(
                    "the Python wrapper for C++ kernels is not implemented in this host; \
                     use the C++ wrapper (wrapper.cpp)"
                        .into(),
                ))
            }
        }
        let flag = match wrapper {
            WrapperKind::Python => Wrappers::PYTHON,
            WrapperKind::Cpp => Wrappers::CPP,
        };
        if !spec.wrappers.contains(flag) {
            return Err(unsupported(format!(
                "it does not support the {} wrapper",
                wrapper_label(wrapper)
            )));
        }
        let args = OverrideArgs {
            device_index: options.device_index,
            ..OverrideArgs::default()
        };
        let mut strings = HashMap::new();
        for which in required_overrides(&spec, wrapper) {
            let text =
                plugin
                    .override_text(which, &args)?
                    .ok_or_else(|| Error::MissingOverride {
                        plugin: plugin.name().to_string(),
                        path: plugin.path().display().to_string(),
                        method: which.name(),
                        wrapper: wrapper_label(wrapper),
                        alternative: None,
                    })?;
            if let Some(problem) = override_text_problem(which, &text) {
                return Err(Error::BadOverride {
                    plugin: plugin.name().to_string(),
                    path: plugin.path().display().to_string(),
                    problem,
                });
            }
            strings.insert(which, text);
        }
        let triton_target = match spec.scheduling {
            SchedulingKind::Triton => triton_target(plugin, options.device_index)?,
            SchedulingKind::Cpp => None,
        };
        let parallel_units = match spec.scheduling {
            SchedulingKind::Triton => plugin
                .device_properties(options.device_index)?
                .map_or(0, |p| p.multi_processor_count),
            SchedulingKind::Cpp => 0,
        };
        if let Some(problem) = triton_target.as_ref().and_then(triton_target_problem) {
            return Err(unsupported(problem));
        }
        let reduction_program_warps = match spec.scheduling {
            SchedulingKind::Triton => reduction_program_warps(plugin),
            SchedulingKind::Cpp => 0,
        };
        let matmul_alignment = match spec.scheduling {
            SchedulingKind::Triton => crate::plugins::defaults::matmul_alignment(plugin)?.value,
            SchedulingKind::Cpp => 0,
        };
        // Load-time validation refuses such a plugin; one opened without it
        // (the conformance harness's) is refused here.
        if let Some(problem) = matmul_alignment_problem(matmul_alignment) {
            return Err(unsupported(problem));
        }
        let conv_channels_last = match spec.scheduling {
            SchedulingKind::Triton => {
                let names = crate::plugins::defaults::conv_channels_last(plugin)?.value;
                // As for matmul_alignment: load-time validation refuses these.
                if let Some(problem) = conv_channels_last_problem(&names) {
                    return Err(unsupported(problem));
                }
                names
                    .iter()
                    .filter_map(|n| crate::graph::DType::parse(n))
                    .collect()
            }
            SchedulingKind::Cpp => Default::default(),
        };
        Ok(Target {
            device: plugin.name().to_string(),
            origin: format!("{} {}", plugin.name(), plugin.version()),
            spec,
            wrapper,
            triton_target,
            parallel_units,
            reduction_program_warps,
            matmul_alignment,
            conv_channels_last,
            strings,
        })
    }

    /// An override the wrapper needs ([`Target::query`] checked it is there).
    pub(super) fn string(&self, which: Override) -> String {
        self.strings.get(&which).cloned().unwrap_or_default()
    }

    /// The strings of the Python wrapper.
    pub(super) fn python_strings(&self) -> python::DeviceStrings {
        python::DeviceStrings {
            device: self.device.clone(),
            import_raw_stream: self.string(Override::ImportGetRawStreamAs),
            set_device: self.string(Override::SetDevice),
            synchronize: self.string(Override::Synchronize),
            device_guard: self.string(Override::DeviceGuard),
            origin: self.origin.clone(),
            triton_target: self.triton_target.clone(),
        }
    }
}

/// The plugin's Triton target, or, for a plugin that does not say, the one
/// Inductor builds from the device's properties: `GPUTarget(type, cc,
/// warp_size)`.
fn triton_target(plugin: &Plugin, index: u32) -> Result<Option<TritonTargetOwned>, Error> {
    if let Some(target) = plugin.triton_target()? {
        return Ok(Some(target));
    }
    Ok(plugin.device_properties(index)?.and_then(|props| {
        Some(TritonTargetOwned {
            backend: props.device_type.to_string(),
            arch: props.cc.to_string(),
            warp_size: props.warp_size.into_option()?,
        })
    }))
}
