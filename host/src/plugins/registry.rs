//! The device registry, mirroring Inductor's `torch/_inductor/codegen/common.py`
//! so that readers who know Inductor find their way:
//! `register_backend_for_device`, `get_scheduling_for_device`,
//! `get_wrapper_codegen_for_device`, `get_device_op_overrides`.
//!
//! In Inductor those are separate dictionaries filled by separate calls; in
//! Kiln one plugin supplies all of them, so one entry holds everything.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use kiln_plugin_api::{SchedulingKind, Wrappers};
use serde::Serialize;

use super::library::{CallError, Plugin};
use super::search::{SearchEntry, SearchProblem};

/// A library that looked like a plugin and failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejected {
    /// The library.
    pub path: PathBuf,
    /// Why, in full.
    pub reason: String,
}

/// A plugin that lost its device name to one found earlier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shadowed {
    /// The library that lost.
    pub path: PathBuf,
    /// The device name both claim.
    pub name: String,
    /// The library that won.
    pub by: PathBuf,
}

/// Which wrapper generator to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WrapperKind {
    /// `output_code.py` (Inductor's `PythonWrapperCodegen`).
    Python,
    /// `wrapper.cpp` (Inductor's `CppWrapperGpu` / `CppWrapperCpu`).
    Cpp,
}

/// Every plugin found, and every library that was not one.
#[derive(Debug, Default)]
pub struct Registry {
    devices: BTreeMap<String, Arc<Plugin>>,
    /// Libraries that failed, with their reasons.
    pub rejected: Vec<Rejected>,
    /// Plugins that lost their device name to an earlier one.
    pub shadowed: Vec<Shadowed>,
    /// Shared libraries without Kiln's root module.
    pub skipped: Vec<PathBuf>,
    /// The search-path entries that were read.
    pub searched: Vec<SearchEntry>,
    /// Search-path entries that could not be read.
    pub search_problems: Vec<SearchProblem>,
}

impl Registry {
    /// Registers a loaded plugin for its device; the first registration of a
    /// name wins and a later one is returned as the loser.
    pub fn register_backend_for_device(&mut self, plugin: Plugin) -> Option<Plugin> {
        if self.devices.contains_key(plugin.name()) {
            return Some(plugin);
        }
        self.devices
            .insert(plugin.name().to_string(), Arc::new(plugin));
        None
    }

    /// The plugin registered for `device`.
    pub fn get(&self, device: &str) -> Option<&Arc<Plugin>> {
        self.devices.get(device)
    }

    /// Every registered plugin, by device name.
    pub fn devices(&self) -> impl Iterator<Item = &Arc<Plugin>> {
        self.devices.values()
    }

    /// Inductor's `get_device_op_overrides(device)`: the plugin whose
    /// overrides the wrapper uses.
    pub fn get_device_op_overrides(&self, device: &str) -> Option<&Arc<Plugin>> {
        self.get(device)
    }

    /// Inductor's `get_scheduling_for_device(device)`: how kernels are generated.
    /// `Ok(None)`: the device is unknown or its plugin gives no backend spec.
    pub fn get_scheduling_for_device(
        &self,
        device: &str,
    ) -> Result<Option<SchedulingKind>, CallError> {
        match self.get(device) {
            None => Ok(None),
            Some(p) => Ok(p.backend_spec()?.map(|s| s.scheduling)),
        }
    }

    /// Inductor's `get_wrapper_codegen_for_device(device, cpp_wrapper)`.
    pub fn get_wrapper_codegen_for_device(
        &self,
        device: &str,
        cpp_wrapper: bool,
    ) -> Result<Option<WrapperKind>, CallError> {
        let Some(plugin) = self.get(device) else {
            return Ok(None);
        };
        let Some(spec) = plugin.backend_spec()? else {
            return Ok(None);
        };
        let (flag, kind) = if cpp_wrapper {
            (Wrappers::CPP, WrapperKind::Cpp)
        } else {
            (Wrappers::PYTHON, WrapperKind::Python)
        };
        Ok(spec.wrappers.contains(flag).then_some(kind))
    }

    /// A one-line explanation for a device that is not registered: what was
    /// searched, and whether a library for it was rejected or shadowed.
    pub fn explain_missing(&self, device: &str) -> String {
        let known: Vec<&str> = self.devices.keys().map(String::as_str).collect();
        let mut text = format!("no plugin provides the device `{device}`");
        if known.is_empty() {
            text.push_str("; no plugin was found at all");
        } else {
            text.push_str(&format!("; available devices: {}", known.join(", ")));
        }
        if !self.rejected.is_empty() {
            let paths: Vec<String> = self
                .rejected
                .iter()
                .map(|r| r.path.display().to_string())
                .collect();
            text.push_str(&format!(
                "; rejected: {} (run `host list` for the reasons)",
                paths.join(", ")
            ));
        }
        if !self.search_problems.is_empty() {
            let problems: Vec<String> = self
                .search_problems
                .iter()
                .map(ToString::to_string)
                .collect();
            text.push_str(&format!("; not searched: {}", problems.join(", ")));
        }
        let searched: Vec<String> = self
            .searched
            .iter()
            .map(|e| e.path.display().to_string())
            .collect();
        text.push_str(&format!(
            "; searched: {} (add a folder with --plugins DIR or {})",
            if searched.is_empty() {
                "nothing".to_string()
            } else {
                searched.join(", ")
            },
            super::search::PLUGIN_PATH_VAR
        ));
        text
    }
}
