//! `host inspect DEVICE|PATH`: everything one plugin provides, as the host
//! will see it when it generates code.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use kiln_plugin_api::{
    DeviceProperties, Grid, LaunchConfig, PointwiseQuery, ReductionQuery, ScratchWorkspace,
    BACKEND_FEATURE_NAMES,
};
use serde_json::{json, Value};

use super::{Cli, CliError};
use crate::plugins::defaults::{self, Stated};
use crate::plugins::{load_library, CallError, LoadOutcome, Override, OverrideArgs, Plugin};

/// Arguments of `host inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A device name found on the search path, or the path of a plugin library.
    #[arg(value_name = "DEVICE|PATH")]
    pub target: String,

    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The pointwise query shown: 1,048,576 float32 elements.
const POINTWISE_QUERY: PointwiseQuery = PointwiseQuery {
    numel: 1 << 20,
    element_bytes: 4,
};
/// The reduction query shown: 8192 rows of 8192 float32 elements.
const REDUCTION_QUERY: ReductionQuery = ReductionQuery {
    rows: 8192,
    row_len: 8192,
    element_bytes: 4,
};

/// Runs `host inspect`.
pub fn run(cli: &Cli, args: &InspectArgs) -> Result<ExitCode, CliError> {
    let plugin = resolve(cli, &args.target)?;
    let mut errors = Vec::new();
    let report = report(&plugin, &mut errors);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_text(&report));
    }
    for e in &errors {
        eprintln!("error: {e}");
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn looks_like_path(target: &str) -> bool {
    target.contains(std::path::MAIN_SEPARATOR)
        || target.ends_with(std::env::consts::DLL_SUFFIX)
        || Path::new(target).is_file()
}

fn resolve(cli: &Cli, target: &str) -> Result<Arc<Plugin>, CliError> {
    if looks_like_path(target) {
        return match load_library(Path::new(target)) {
            LoadOutcome::Loaded(plugin) => Ok(Arc::new(*plugin)),
            LoadOutcome::NotAPlugin(reason) => Err(format!(
                "{target} is not a Kiln plugin ({reason}): a plugin exports its root module with \
                 kiln_plugin_api::export_plugin!"
            )
            .into()),
            LoadOutcome::Failed(e) => Err(format!("{target}: {e}").into()),
            LoadOutcome::Shadowed { .. } => Err(format!("{target}: shadowed").into()),
        };
    }
    let registry = super::discover(cli)?;
    match registry.get(target) {
        Some(plugin) => Ok(Arc::clone(plugin)),
        None => Err(registry.explain_missing(target).into()),
    }
}

fn or_error<T>(
    result: Result<Option<T>, CallError>,
    errors: &mut Vec<String>,
    f: impl FnOnce(T) -> Value,
) -> Value {
    match result {
        Ok(Some(v)) => f(v),
        Ok(None) => Value::Null,
        Err(e) => {
            let text = e.to_string();
            errors.push(text.clone());
            json!({ "error": text })
        }
    }
}

/// The JSON form of device properties.
pub fn properties_json(p: &DeviceProperties) -> Value {
    json!({
        "type": p.device_type.as_str(),
        "index": p.index,
        "multi_processor_count": p.multi_processor_count,
        "cc": p.cc,
        "major": p.major.into_option(),
        "regs_per_multiprocessor": p.regs_per_multiprocessor.into_option(),
        "max_threads_per_multi_processor": p.max_threads_per_multi_processor.into_option(),
        "max_threads_per_block": p.max_threads_per_block.into_option(),
        "warp_size": p.warp_size.into_option(),
        "max_grid": p.max_grid,
        "source": match p.source {
            kiln_plugin_api::PropertiesSource::Queried => "queried",
            kiln_plugin_api::PropertiesSource::StaticDefaults => "static_defaults",
        },
    })
}

fn configs_json(configs: Vec<LaunchConfig>) -> Value {
    configs
        .iter()
        .map(|c| {
            json!({
                "x_block": c.x_block,
                "r_block": c.r_block,
                "num_warps": c.num_warps,
                "num_stages": c.num_stages,
            })
        })
        .collect()
}

/// Everything `inspect` shows, as JSON; failures of individual calls are
/// shown in place and collected in `errors`.
pub fn report(plugin: &Plugin, errors: &mut Vec<String>) -> Value {
    let args = OverrideArgs::default();
    let mut overrides = serde_json::Map::new();
    for which in Override::ALL {
        let value = if which == Override::CppScratch {
            let workspace = ScratchWorkspace {
                size: 1024,
                dtype: "cached_torch_dtype_uint8".into(),
            };
            or_error(plugin.cpp_scratch(0, &workspace, None), errors, |code| {
                json!(code)
            })
        } else {
            or_error(plugin.override_text(which, &args), errors, Value::String)
        };
        overrides.insert(which.name().to_string(), value);
    }
    let backend = or_error(plugin.backend_spec(), errors, |spec| {
        let mut wrappers = Vec::new();
        if spec.wrappers.contains(kiln_plugin_api::Wrappers::PYTHON) {
            wrappers.push("python");
        }
        if spec.wrappers.contains(kiln_plugin_api::Wrappers::CPP) {
            wrappers.push("cpp");
        }
        let features: Vec<&str> = BACKEND_FEATURE_NAMES
            .iter()
            .filter(|(_, f)| spec.features.contains(*f))
            .map(|(n, _)| *n)
            .collect();
        json!({ "scheduling": spec.scheduling.name(), "wrappers": wrappers, "features": features })
    });
    // Only Triton kernels ask these; a device of C++ kernels need not say.
    let triton = !matches!(
        plugin.backend_spec(),
        Ok(Some(spec)) if spec.scheduling == kiln_plugin_api::SchedulingKind::Cpp
    );
    // Grids around the device's own width (its processor count), when it says.
    let probes = match plugin.device_properties(0) {
        Ok(Some(props)) => crate::plugins::validate::grid_probes(&props),
        _ => vec![1],
    };
    let grids: Vec<Value> = probes
        .iter()
        .map(|&x| {
            let wanted = Grid::new(x, 1, 1);
            json!({
                "grid": wanted.to_array(),
                "adjusted": or_error(plugin.adjust_grid(wanted), errors, |g| json!(g.to_array())),
            })
        })
        .collect();
    json!({
        "name": plugin.name(),
        "version": plugin.version().to_string(),
        "api_version": plugin.manifest().api_version.to_string(),
        "vendor": plugin.manifest().vendor.as_str(),
        "description": plugin.manifest().description.as_str(),
        "path": plugin.path(),
        "overrides": overrides,
        "device": {
            "is_available": or_error(plugin.is_available(), errors, Value::Bool),
            "device_count": or_error(plugin.device_count(), errors, |n| json!(n)),
            "properties": or_error(plugin.device_properties(0), errors, |p| properties_json(&p)),
            "shared_memory_per_block": stated_json(
                defaults::shared_memory_per_block(plugin, 0),
                triton,
                errors,
            ),
            "l2_cache_bytes": stated_json(defaults::l2_cache_bytes(plugin, 0), triton, errors),
        },
        "backend": backend,
        // What a compile with each wrapper would get: "ok", or why not.
        "compiles": crate::driver::capabilities(plugin)
            .into_iter()
            .map(|(kind, result)| {
                let name = match kind {
                    crate::plugins::WrapperKind::Python => "python",
                    crate::plugins::WrapperKind::Cpp => "cpp",
                };
                let verdict = match result {
                    Ok(()) => "ok".to_string(),
                    Err(e) => crate::diag::report(&e),
                };
                (name.to_string(), Value::String(verdict))
            })
            .collect::<serde_json::Map<String, Value>>(),
        "heuristics": {
            "pointwise": {
                "query": { "numel": POINTWISE_QUERY.numel, "element_bytes": POINTWISE_QUERY.element_bytes },
                "configs": or_error(plugin.pointwise_configs(POINTWISE_QUERY), errors, configs_json),
            },
            "reduction": {
                "query": {
                    "rows": REDUCTION_QUERY.rows,
                    "row_len": REDUCTION_QUERY.row_len,
                    "element_bytes": REDUCTION_QUERY.element_bytes,
                },
                "configs": or_error(plugin.reduction_configs(REDUCTION_QUERY), errors, configs_json),
            },
            "adjust_grid": grids,
            "triton_target": or_error(plugin.triton_target(), errors, |t| json!(t)),
            "tf32_dot": stated_json(defaults::tf32_dot(plugin), triton, errors),
            "matmul_alignment": stated_json(defaults::matmul_alignment(plugin), triton, errors),
            "conv_channels_last": stated_json(defaults::conv_channels_last(plugin), triton, errors),
        },
    })
}

/// A value a Triton compile uses and who stated it, the plugin or the host's
/// default ([`defaults`]); `null` for a device of C++ kernels whose plugin
/// does not say, which no compile asks.
fn stated_json<T: serde::Serialize>(
    stated: Result<Stated<T>, CallError>,
    triton: bool,
    errors: &mut Vec<String>,
) -> Value {
    match stated {
        Ok(s) if s.from_plugin => json!({ "value": s.value, "stated_by": "plugin" }),
        Ok(s) if triton => json!({ "value": s.value, "stated_by": "host default" }),
        Ok(_) => Value::Null,
        Err(e) => {
            let text = e.to_string();
            errors.push(text.clone());
            json!({ "error": text })
        }
    }
}

/// A [`stated_json`] value as one line of text.
fn stated_text(value: &Value) -> String {
    match value.get("stated_by").and_then(Value::as_str) {
        Some("plugin") => format!("{} (from the plugin)", text_of(&value["value"])),
        Some(_) => format!(
            "{} (the host's default: the plugin does not say)",
            text_of(&value["value"])
        ),
        None => match value.get("error") {
            Some(e) => format!("error: {}", text_of(e)),
            None => "not applicable (C++ kernels)".to_string(),
        },
    }
}

/// A [`stated_json`] value whose value is a list of names, with the list as
/// one string (`none` when empty).
fn names_joined(stated: &Value) -> Value {
    let mut out = stated.clone();
    if let Some(Value::Array(items)) = stated.get("value") {
        let names: Vec<String> = items.iter().map(text_of).collect();
        let text = if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        };
        out["value"] = Value::String(text);
    }
    out
}

fn text_of(value: &Value) -> String {
    match value {
        Value::Null => "(not provided)".to_string(),
        Value::String(s) => s.clone(),

        other => other.to_string(),
    }
}

fn render_text(report: &Value) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{} {} (kiln-plugin-api {}) from {}\n  {} — {}\n",
        text_of(&report["name"]),
        text_of(&report["version"]),
        text_of(&report["api_version"]),
        text_of(&report["path"]),
        text_of(&report["vendor"]),
        text_of(&report["description"]),
    ));
    out.push_str("\nDeviceOpOverrides (index 0, stream name get_raw_stream):\n");
    if let Some(map) = report["overrides"].as_object() {
        for (name, value) in map {
            let text = match value {
                Value::Object(o) if o.contains_key("lines") => o["lines"]
                    .as_array()
                    .map(|l| l.iter().map(text_of).collect::<Vec<_>>().join("\n"))
                    .unwrap_or_default(),
                other => text_of(other),
            };
            if text.contains('\n') {
                out.push_str(&format!("  {name}:\n"));
                for line in text.lines() {
                    out.push_str(&format!("      {line}\n"));
                }
            } else {
                out.push_str(&format!("  {name}: {text}\n"));
            }
        }
    }
    let device = &report["device"];
    out.push_str(&format!(
        "\nDevice module: is_available {}, device_count {}\n",
        text_of(&device["is_available"]),
        text_of(&device["device_count"])
    ));
    if let Some(props) = device["properties"].as_object() {
        out.push_str("Properties of device 0:\n");
        for (k, v) in props {
            out.push_str(&format!("  {k}: {}\n", text_of(v)));
        }
    }
    out.push_str(&format!(
        "Shared memory per block of device 0, bytes: {}\n",
        stated_text(&device["shared_memory_per_block"])
    ));
    out.push_str(&format!(
        "L2 cache of device 0, bytes: {}\n",
        stated_text(&device["l2_cache_bytes"])
    ));
    let backend = &report["backend"];
    out.push_str(&format!(
        "\nBackend: scheduling {}, wrappers {}, features {}\n",
        text_of(&backend["scheduling"]),
        text_of(&backend["wrappers"]),
        text_of(&backend["features"])
    ));
    if let Some(compiles) = report["compiles"].as_object() {
        for (wrapper, verdict) in compiles {
            out.push_str(&format!(
                "  compiles with the {wrapper} wrapper: {}\n",
                text_of(verdict)
            ));
        }
    }
    let h = &report["heuristics"];
    out.push_str(&format!(
        "\nHeuristics:\n  pointwise numel {}: {}\n  reduction {}x{}: {}\n",
        text_of(&h["pointwise"]["query"]["numel"]),
        text_of(&h["pointwise"]["configs"]),
        text_of(&h["reduction"]["query"]["rows"]),
        text_of(&h["reduction"]["query"]["row_len"]),
        text_of(&h["reduction"]["configs"]),
    ));
    if let Some(grids) = h["adjust_grid"].as_array() {
        for g in grids {
            out.push_str(&format!(
                "  adjust_grid {} -> {}\n",
                text_of(&g["grid"]),
                text_of(&g["adjusted"])
            ));
        }
    }
    let target = &h["triton_target"];
    let target = if target.is_object() {
        format!(
            "{} (arch {}, warp size {})",
            text_of(&target["backend"]),
            text_of(&target["arch"]),
            text_of(&target["warp_size"])
        )
    } else {
        format!(
            "{}: a Triton device's is derived from its properties",
            text_of(target)
        )
    };
    out.push_str(&format!("  triton_target {target}\n"));
    out.push_str(&format!(
        "  tf32_dot (float32 tl.dot as three TF32 products): {}\n",
        stated_text(&h["tf32_dot"])
    ));
    out.push_str(&format!(
        "  matmul_alignment (bytes a 16-bit product's K and N are padded to; 0: none): {}\n",
        stated_text(&h["matmul_alignment"])
    ));
    out.push_str(&format!(
        "  conv_channels_last (dtypes whose convolutions run channels-last): {}\n",
        stated_text(&names_joined(&h["conv_channels_last"]))
    ));
    out
}
