//! `host conformance`: the harness a vendor runs on a plugin before shipping it.
//!
//! Every check that calls into the plugin runs in a child process (the host
//! re-executing itself, see [`isolate`]), so a plugin that segfaults, aborts,
//! loops forever or scribbles on stdout fails that one check and never takes
//! the harness down. The parent only orchestrates: it runs the checks in
//! catalogue order, skips those whose prerequisites did not pass, and builds a
//! [`Report`]. This module must never call into the plugin itself.
//!
//! The checks and what each guarantees are listed in [`checks::catalogue`];
//! `docs/writing-a-plugin.md` has the same list for vendors.

pub mod checks;
mod driver_text;
mod e2e;
mod heuristics;
pub mod isolate;
mod overrides;
pub mod report;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use checks::{catalogue, Check};
pub use driver_text::{INCLUDE_ENV, STUBS};
pub use report::{to_json, to_junit, to_table};

/// The result of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The plugin meets the guarantee.
    Pass,
    /// The plugin breaks the guarantee (or crashed, hung, or wrote garbage).
    Fail,
    /// The check does not apply (the plugin does not provide the feature) or
    /// a prerequisite did not pass.
    Skip,
}

impl Status {
    /// `pass`, `fail` or `skip`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

/// What one child process reports for one check: the one line of JSON it
/// prints on stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Pass, fail or skip.
    pub status: Status,
    /// Why it failed or was skipped; for a pass, an optional summary.
    #[serde(default)]
    pub reason: String,
    /// Facts the parent needs from the check (the manifest, the overrides a
    /// wrapper requires).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
}

impl Outcome {
    /// A pass with an optional summary.
    pub fn pass(summary: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Pass,
            reason: summary.into(),
            data: serde_json::Value::Null,
        }
    }

    /// A failure with its reason.
    pub fn fail(reason: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Fail,
            reason: reason.into(),
            data: serde_json::Value::Null,
        }
    }

    /// A skip with its reason.
    pub fn skip(reason: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Skip,
            reason: reason.into(),
            data: serde_json::Value::Null,
        }
    }

    /// A pass when `problems` is empty, else a failure listing them.
    pub fn from_problems(problems: Vec<String>, summary: impl Into<String>) -> Outcome {
        match problems.len() {
            0 => Outcome::pass(summary),
            1 => Outcome::fail(problems.concat()),
            n => {
                let shown: Vec<&str> = problems.iter().take(3).map(String::as_str).collect();
                let more = if n > 3 {
                    format!(" (and {} more)", n - 3)
                } else {
                    String::new()
                };
                Outcome::fail(format!("{n} problems: {}{more}", shown.join("; ")))
            }
        }
    }

    /// The same outcome carrying `data` for the parent.
    pub fn with_data(mut self, data: serde_json::Value) -> Outcome {
        self.data = data;
        self
    }
}

/// `device_properties(0)`, with "not provided" as a skip.
fn device_properties(
    plugin: &crate::plugins::Plugin,
) -> Result<kiln_plugin_api::DeviceProperties, Outcome> {
    match plugin.device_properties(0) {
        Ok(Some(props)) => Ok(props),
        Ok(None) => Err(Outcome::skip(
            "not supported: the plugin has no device module",
        )),
        Err(e) => Err(Outcome::fail(e.to_string())),
    }
}

/// One check's line in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckResult {
    /// The check's name, `area.check`.
    pub name: String,
    /// The area, the part of the name before the first dot.
    pub area: String,
    /// What the check guarantees.
    pub description: String,
    /// Pass, fail or skip.
    pub status: Status,
    /// Why it failed or was skipped, or a summary of what passed.
    pub reason: String,
    /// Wall-clock seconds the check took, its child process included.
    pub seconds: f64,
}

/// How to run the harness.
#[derive(Debug, Clone)]
pub struct Options {
    /// The executable that runs one check in a child: the `host` binary.
    pub exe: PathBuf,
    /// How long one check may run before its child is killed.
    pub timeout: Duration,
    /// Only report the checks whose names match this glob (`*`, `?`);
    /// their prerequisites still run, unreported.
    pub only: Option<String>,
    /// Folders of C++ headers the driver-text checks compile with, before
    /// Kiln's stub headers (a vendor's driver API header).
    pub include: Vec<PathBuf>,
}

/// The whole conformance run of one plugin.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The library checked.
    pub plugin: PathBuf,
    /// The device name from the manifest, when it could be read.
    pub device: Option<String>,
    /// The plugin's own version, when it could be read.
    pub plugin_version: Option<String>,
    /// The plugin-api version the plugin was built against, when it could be read.
    pub api_version: Option<String>,
    /// This host's plugin-api version.
    pub host_api_version: String,
    /// The per-check timeout, in seconds.
    pub timeout_seconds: f64,
    /// Why the library is not a Kiln plugin at all (no root module, or not a
    /// shared library), when that is the case.
    pub refused: Option<String>,
    /// One entry per reported check, in catalogue order.
    pub checks: Vec<CheckResult>,
    /// Prerequisites left out by `--only` that ran and failed: the run fails
    /// on them too, so that `--only` never turns a broken plugin green.
    pub unreported_failures: Vec<String>,
}

impl Report {
    /// How many checks ended with `status`.
    pub fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    /// Whether every check that ran passed or was skipped.
    pub fn passed(&self) -> bool {
        self.count(Status::Fail) == 0 && self.unreported_failures.is_empty()
    }
}

/// Why the harness could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConformanceError {
    /// The plugin path does not name a file.
    #[error("{path}: {problem}; give the path of the plugin's shared library (e.g. target/debug/libkiln_gxu.so)")]
    BadPath {
        /// The path given.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `--only` matched no check.
    #[error("--only {glob:?} matches no check; the checks are: {known}")]
    NoMatch {
        /// The glob given.
        glob: String,
        /// Every check name, comma-separated.
        known: String,
    },
}

/// Runs every check (or those matching `options.only`) on the plugin at
/// `path`, each in its own child process, and returns the report. Only a bad
/// path or an empty selection is an error: everything the plugin does wrong
/// is in the report.
pub fn run(path: &Path, options: &Options) -> Result<Report, ConformanceError> {
    let bad = |problem: &str| ConformanceError::BadPath {
        path: path.display().to_string(),
        problem: problem.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => bad("no such file"),
        _ => bad(&format!("cannot be read: {e}")),
    })?;
    if !meta.is_file() {
        return Err(bad("is not a file"));
    }
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let all = catalogue();
    let selected: Vec<&Check> = all
        .iter()
        .filter(|c| {
            options
                .only
                .as_deref()
                .is_none_or(|g| glob_match(g, &c.name))
        })
        .collect();
    if selected.is_empty() {
        let known: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        return Err(ConformanceError::NoMatch {
            glob: options.only.clone().unwrap_or_default(),
            known: known.join(", "),
        });
    }
    let mut runner = Runner {
        path: &path,
        options,
        catalogue: &all,
        done: HashMap::new(),
    };
    for check in &selected {
        runner.ensure(&check.name);
    }
    let mut report = Report {
        plugin: path.clone(),
        device: None,
        plugin_version: None,
        api_version: None,
        host_api_version: crate::plugins::host_api_version().to_string(),
        timeout_seconds: options.timeout.as_secs_f64(),
        refused: None,
        checks: Vec::new(),
        unreported_failures: Vec::new(),
    };
    if let Some((_, data)) = runner.done.get(checks::API_VERSION) {
        let text = |key: &str| data[key].as_str().map(str::to_string);
        report.device = text("name");
        report.plugin_version = text("version");
        report.api_version = text("api_version");
    }
    if let Some((_, data)) = runner.done.get(checks::ROOT_SYMBOL) {
        report.refused = data["refused"].as_str().map(str::to_string);
    }
    for check in selected {
        if let Some((result, _)) = runner.done.remove(&check.name) {
            report.checks.push(result);
        }
    }
    report.unreported_failures = all
        .iter()
        .filter(|c| {
            runner
                .done
                .get(&c.name)
                .is_some_and(|(r, _)| r.status == Status::Fail)
        })
        .map(|c| c.name.clone())
        .collect();
    Ok(report)
}

/// Runs checks on demand, each once, prerequisites first.
struct Runner<'a> {
    path: &'a Path,
    options: &'a Options,
    catalogue: &'a [Check],
    done: HashMap<String, (CheckResult, serde_json::Value)>,
}

impl Runner<'_> {
    /// Runs `name` (after its prerequisites) unless it already ran, and
    /// returns its status and reason.
    fn ensure(&mut self, name: &str) -> (Status, String) {
        if let Some((result, _)) = self.done.get(name) {
            return (result.status, result.reason.clone());
        }
        let description = self
            .catalogue
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.description.clone())
            .unwrap_or_default();
        let start = Instant::now();
        let mut outcome = None;
        let mut prerequisites = checks::prerequisites(name);
        let mut i = 0;
        while let Some(prerequisite) = prerequisites.get(i).cloned() {
            let (status, reason) = self.ensure(&prerequisite);
            if status != Status::Pass {
                outcome = Some(Outcome::skip(skip_reason(&prerequisite, status, &reason)));
                break;
            }
            // Once the backend spec is known, the device's own wrapper check joins.
            if prerequisite == checks::BACKEND_SPEC {
                let spec = self.done.get(checks::BACKEND_SPEC).map(|(_, d)| d.clone());
                if let Some(wrapper) = spec.and_then(|s| checks::wrapper_prerequisite(name, &s)) {
                    prerequisites.push(wrapper.to_string());
                }
            }
            i += 1;
        }
        let outcome = match outcome {
            Some(skip) => skip,
            None => {
                let child = isolate::run_isolated(
                    &self.options.exe,
                    self.path,
                    name,
                    checks::timeout_for(name, self.options.timeout),
                    &self.options.include,
                );
                self.finish(name, child)
            }
        };
        let result = CheckResult {
            name: name.to_string(),
            area: name.split('.').next().unwrap_or(name).to_string(),
            description,
            status: outcome.status,
            reason: outcome.reason.clone(),
            seconds: start.elapsed().as_secs_f64(),
        };
        self.done
            .insert(name.to_string(), (result, outcome.data.clone()));
        (outcome.status, outcome.reason)
    }

    /// The parent's half of a check: the wrapper checks compare the overrides
    /// a wrapper needs (reported by the child) with the override checks' results.
    fn finish(&mut self, name: &str, outcome: Outcome) -> Outcome {
        if outcome.status != Status::Pass || !checks::is_wrapper_check(name) {
            return outcome;
        }
        let required: Vec<String> = outcome.data["required"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let wrapper = outcome.data["wrapper"]
            .as_str()
            .unwrap_or("the")
            .to_string();
        let mut missing = Vec::new();
        let mut broken = Vec::new();
        for method in &required {
            match self.ensure(&format!("overrides.{method}")).0 {
                Status::Pass => {}
                Status::Skip => missing.push(method.as_str()),
                Status::Fail => broken.push(format!("overrides.{method}")),
            }
        }
        if !missing.is_empty() {
            Outcome::fail(format!(
                "the device claims the {wrapper} wrapper, which needs {}, but the plugin returns None for: {}",
                required.join(", "),
                missing.join(", ")
            ))
        } else if !broken.is_empty() {
            Outcome::skip(format!(
                "needs {}, which failed (see there)",
                broken.join(", ")
            ))
        } else if required.is_empty() {
            Outcome::pass(format!("the {wrapper} wrapper needs no override here"))
        } else {
            Outcome::pass(format!("provides {}", required.join(", ")))
        }
    }
}

fn skip_reason(prerequisite: &str, status: Status, reason: &str) -> String {
    if reason.starts_with("plugin did not load") {
        reason.to_string()
    } else if prerequisite.starts_with("load.") {
        format!("plugin did not load (see {prerequisite})")
    } else {
        format!(
            "needs {prerequisite}, which did not pass ({}: {reason})",
            status.name()
        )
    }
}

/// Shell-style matching of `*` (any run) and `?` (one character).
pub fn glob_match(glob: &str, name: &str) -> bool {
    let (g, n): (Vec<char>, Vec<char>) = (glob.chars().collect(), name.chars().collect());
    let (mut gi, mut ni) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while ni < n.len() {
        match g.get(gi) {
            Some('*') => {
                backtrack = Some((gi, ni));
                gi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                gi += 1;
                ni += 1;
            }
            _ => match backtrack {
                Some((star, matched)) => {
                    gi = star + 1;
                    ni = matched + 1;
                    backtrack = Some((star, matched + 1));
                }
                None => return false,
            },
        }
    }
    g[gi..].iter().all(|c| *c == '*')
}

/// The child's side: runs one check on the plugin at `path` in this process
/// and returns its outcome. `host conformance --child-check` prints it.
pub fn run_child(path: &Path, check: &str) -> Outcome {
    isolate::limit_core_dumps();
    checks::run_one(path, check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("overrides.*", "overrides.set_device"));
        assert!(glob_match("*", "load.init"));
        assert!(glob_match("load.?nit", "load.init"));
        assert!(glob_match("*.warp_size", "properties.warp_size"));
        assert!(glob_match(
            "heuristics.*_sweep",
            "heuristics.reduction_sweep"
        ));
        assert!(!glob_match("load.*", "manifest.name"));
        assert!(!glob_match("load.init", "load.init2"));
    }

    #[test]
    fn problems_become_one_failure() {
        assert_eq!(Outcome::from_problems(vec![], "ok").status, Status::Pass);
        let many = Outcome::from_problems((0..5).map(|i| format!("p{i}")).collect(), "");
        assert_eq!(many.status, Status::Fail);
        assert_eq!(many.reason, "5 problems: p0; p1; p2 (and 2 more)");
    }
}
