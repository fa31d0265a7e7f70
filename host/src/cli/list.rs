//! `host list`: every device found, and every library that was not usable.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::{Cli, CliError};
use crate::plugins::{Registry, WrapperKind};

/// Arguments of `host list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `host list`.
pub fn run(cli: &Cli, args: &ListArgs) -> Result<ExitCode, CliError> {
    // The search-path problems are part of the listing, so they are not
    // also warned about.
    let registry = crate::plugins::discover_default(&cli.plugins);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&registry))?);
    } else {
        print!("{}", to_table(&registry));
    }
    Ok(ExitCode::SUCCESS)
}

/// What a plugin can compile: the wrappers that work, and for a plugin
/// with none, why its own wrapper does not.
struct Compiles {
    wrappers: Vec<&'static str>,
    problem: Option<String>,
}

fn compiles(plugin: &crate::plugins::Plugin) -> Compiles {
    let caps = crate::driver::capabilities(plugin);
    let wrappers = caps
        .iter()
        .filter(|(_, ok)| ok.is_ok())
        .map(|(kind, _)| wrapper_name(*kind))
        .collect::<Vec<_>>();
    // The reason given is the device's own wrapper's (the one its kernels
    // call for), not the other's "not supported".
    let own = match plugin.backend_spec() {
        Ok(Some(spec)) if spec.scheduling == kiln_plugin_api::SchedulingKind::Cpp => {
            WrapperKind::Cpp
        }
        _ => WrapperKind::Python,
    };
    let problem = if wrappers.is_empty() {
        caps.into_iter()
            .find(|(kind, _)| *kind == own)
            .and_then(|(_, r)| r.err())
            .map(|e| crate::diag::report(&e))
    } else {
        None
    };
    Compiles { wrappers, problem }
}

fn wrapper_name(kind: WrapperKind) -> &'static str {
    match kind {
        WrapperKind::Python => "python",
        WrapperKind::Cpp => "cpp",
    }
}

fn status(plugin: &crate::plugins::Plugin, compiles: &Compiles) -> String {
    let verdict = if compiles.wrappers.is_empty() {
        "cannot compile (see below)"
    } else {
        "ok"
    };
    match (plugin.is_available(), plugin.device_count()) {
        (Ok(Some(true)), Ok(Some(n))) if n > 0 => {
            format!(
                "{verdict}, {n} device{} present",
                if n == 1 { "" } else { "s" }
            )
        }
        (Ok(Some(_)), Ok(Some(_))) => format!("{verdict}, no device present"),
        (Ok(None), _) | (_, Ok(None)) => format!("{verdict}, no device module"),
        (Err(e), _) | (_, Err(e)) => format!("error: {e}"),
    }
}

fn scheduling(plugin: &crate::plugins::Plugin) -> String {
    match plugin.backend_spec() {
        Ok(Some(spec)) => spec.scheduling.name().to_string(),
        Ok(None) => "-".to_string(),
        Err(_) => "error".to_string(),
    }
}

/// The registry as the JSON `host list --json` prints.
pub fn to_json(registry: &Registry) -> serde_json::Value {
    let devices: Vec<_> = registry
        .devices()
        .map(|p| {
            let c = compiles(p);
            json!({
                "name": p.name(),
                "version": p.version().to_string(),
                "api_version": p.manifest().api_version.to_string(),
                "vendor": p.manifest().vendor.as_str(),
                "description": p.manifest().description.as_str(),
                "scheduling": scheduling(p),
                "path": p.path(),
                "status": status(p, &c),
                "wrappers": c.wrappers,
                "cannot_compile": c.problem,
            })
        })
        .collect();
    json!({
        "host_api_version": crate::plugins::host_api_version().to_string(),
        "devices": devices,
        "shadowed": registry.shadowed,
        "rejected": registry.rejected,
        "skipped": registry.skipped,
        "searched": registry.searched,
        "search_problems": registry.search_problems,
    })
}

fn to_table(registry: &Registry) -> String {
    let mut rows: Vec<[String; 7]> = vec![[
        "DEVICE".to_string(),
        "VERSION".to_string(),
        "API".to_string(),
        "KERNELS".to_string(),
        "WRAPPERS".to_string(),
        "STATUS".to_string(),
        "PATH".to_string(),
    ]];
    let mut cannot = vec![];
    for p in registry.devices() {
        let c = compiles(p);
        rows.push([
            p.name().to_string(),
            p.version().to_string(),
            p.manifest().api_version.to_string(),
            scheduling(p),
            if c.wrappers.is_empty() {
                "none".to_string()
            } else {
                c.wrappers.join(",")
            },
            status(p, &c),
            p.path().display().to_string(),
        ]);
        if let Some(problem) = c.problem {
            cannot.push((p.name().to_string(), problem));
        }
    }
    let mut out = String::new();
    if rows.len() == 1 {
        out.push_str("No device plugins found.\n");
    } else {
        let widths: Vec<usize> = (0..7)
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
    }
    if !cannot.is_empty() {
        out.push_str("\nCannot compile (found, but a compile would stop at this):\n");
        for (name, problem) in &cannot {
            out.push_str(&format!("  {name}: {problem}\n"));
        }
    }
    if !registry.shadowed.is_empty() {
        out.push_str("\nShadowed (the device name was claimed earlier in the search order):\n");
        for s in &registry.shadowed {
            out.push_str(&format!(
                "  {}  {}  (shadowed by {})\n",
                s.name,
                s.path.display(),
                s.by.display()
            ));
        }
    }
    if !registry.rejected.is_empty() {
        out.push_str("\nRejected:\n");
        for r in &registry.rejected {
            out.push_str(&format!("  {}: {}\n", r.path.display(), r.reason));
        }
    }
    if !registry.search_problems.is_empty() {
        out.push_str("\nSearch path problems:\n");
        for p in &registry.search_problems {
            out.push_str(&format!("  {p}\n"));
        }
    }
    out.push_str("\nSearched:\n");
    for e in &registry.searched {
        out.push_str(&format!(
            "  {} ({})\n",
            e.path.display(),
            e.origin.describe()
        ));
    }
    out
}
