//! `host list`: every device found, and every library that was not usable.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::{Cli, CliError};
use crate::plugins::Registry;

/// Arguments of `host list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `host list`.
pub fn run(cli: &Cli, args: &ListArgs) -> Result<ExitCode, CliError> {
    let registry = super::discover(cli)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&registry))?);
    } else {
        print!("{}", to_table(&registry));
    }
    Ok(ExitCode::SUCCESS)
}

fn status(plugin: &crate::plugins::Plugin) -> String {
    match (plugin.is_available(), plugin.device_count()) {
        (Ok(Some(true)), Ok(Some(n))) if n > 0 => {
            format!("ok, {n} device{} present", if n == 1 { "" } else { "s" })
        }
        (Ok(Some(_)), Ok(Some(_))) => "ok, no device present".to_string(),
        (Ok(None), _) | (_, Ok(None)) => "ok, no device module".to_string(),
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
            json!({
                "name": p.name(),
                "version": p.version().to_string(),
                "api_version": p.manifest().api_version.to_string(),
                "vendor": p.manifest().vendor.as_str(),
                "description": p.manifest().description.as_str(),
                "scheduling": scheduling(p),
                "path": p.path(),
                "status": status(p),
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
    let mut rows = vec![[
        "DEVICE".to_string(),
        "VERSION".to_string(),
        "API".to_string(),
        "KERNELS".to_string(),
        "STATUS".to_string(),
        "PATH".to_string(),
    ]];
    for p in registry.devices() {
        rows.push([
            p.name().to_string(),
            p.version().to_string(),
            p.manifest().api_version.to_string(),
            scheduling(p),
            status(p),
            p.path().display().to_string(),
        ]);
    }
    let mut out = String::new();
    if rows.len() == 1 {
        out.push_str("No device plugins found.\n");
    } else {
        let widths: Vec<usize> = (0..6)
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
