//! The `overrides.*` checks, one per `DeviceOpOverrides` method, and the
//! small C++ scanner they use to check that braces and parentheses balance.
//!
//! Runs in the child process only. The single-value rules (non-empty, one
//! line) come from `plugins::validate`; this adds what needs the parameters
//! (`set_device(3)` mentions 3) and the shape of C++ text.

use kiln_plugin_api::ScratchWorkspace;

use super::Outcome;
use crate::plugins::cpp_text::{balance_problem, defines_function};
use crate::plugins::validate::override_text_problem;
use crate::plugins::{Override, OverrideArgs, Plugin};

/// The device index the parameterised overrides are called with.
const INDEX: u32 = 3;
/// The name `import_get_raw_stream_as` is asked to bind.
const STREAM_NAME: &str = "s7";
/// The index and prefix `cpp_scratch` is called with.
const SCRATCH_INDEX: u32 = 5;
const SCRATCH_PREFIX: &str = "pfx";

/// The one-line guarantee of `overrides.<method>`.
pub fn description(which: Override) -> String {
    let shape = if which.is_one_line() {
        "one non-empty line"
    } else {
        "non-empty text without control characters but newlines and tabs"
    };
    let extra = match which {
        Override::ImportGetRawStreamAs => {
            "; import_get_raw_stream_as(\"s7\") binds s7".to_string()
        }
        Override::SetDevice | Override::DeviceGuard => {
            format!("; {}(3) mentions 3", which.name())
        }
        Override::KernelDriver => {
            "; balanced C++ defining loadKernel and launchKernel".to_string()
        }
        Override::CppScratch => "; cpp_scratch(5, ws, \"pfx\") gives one-line balanced C++ statements declaring a variable named with 5 and pfx".to_string(),
        o if o.is_cpp() => "; braces and parentheses balance".to_string(),
        _ => String::new(),
    };
    format!("gives {shape}{extra}")
}

/// Runs `overrides.<which>`.
pub fn check(plugin: &Plugin, which: Override) -> Outcome {
    if which == Override::CppScratch {
        return scratch(plugin);
    }
    let args = OverrideArgs {
        device_index: INDEX,
        stream_name: STREAM_NAME.to_string(),
    };
    let text = match plugin.override_text(which, &args) {
        Ok(Some(text)) => text,
        Ok(None) => return Outcome::skip("not supported (returns None)"),
        Err(e) => return Outcome::fail(e.to_string()),
    };
    let mut problems: Vec<String> = override_text_problem(which, &text).into_iter().collect();
    match which {
        Override::SetDevice | Override::DeviceGuard if !mentions_number(&text, INDEX) => {
            problems.push(format!(
                "`{}({INDEX})` gave {text:?}, which does not mention the index {INDEX}",
                which.name()
            ));
        }
        Override::ImportGetRawStreamAs if !binds(&text, STREAM_NAME) => {
            problems.push(format!(
                "`import_get_raw_stream_as({STREAM_NAME:?})` gave {text:?}, which does not bind \
                 {STREAM_NAME} (expected e.g. `from m import f as {STREAM_NAME}`)"
            ));
        }
        _ => {}
    }
    if which.is_cpp() {
        problems.extend(balance_problem(&text).map(|p| format!("`{}`: {p}", which.name())));
    }
    if which == Override::KernelDriver {
        for function in ["loadKernel", "launchKernel"] {
            if !defines_function(&text, function) {
                problems.push(format!(
                    "`kernel_driver` does not define `{function}(...) {{ ... }}`"
                ));
            }
        }
    }
    let summary = first_line(&text);
    Outcome::from_problems(problems, summary)
}

fn first_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let short: String = line.trim().chars().take(60).collect();
    if text.trim().lines().count() > 1 || short.len() < line.trim().len() {
        format!("{short} ...")
    } else {
        short
    }
}

/// Whether a maximal run of digits in `text` equals `n`.
fn mentions_number(text: &str, n: u32) -> bool {
    let wanted = n.to_string();
    text.split(|c: char| !c.is_ascii_digit())
        .any(|run| run == wanted)
}

/// Whether the Python text binds `name`: `... import x as name`, `name = ...`
/// or `def name(`.
fn binds(text: &str, name: &str) -> bool {
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let as_binding = words.windows(2).any(|w| w[0] == "as" && w[1] == name);
    let trimmed = text.trim_start();
    let assignment = trimmed.strip_prefix(name).is_some_and(|rest| {
        rest.trim_start().starts_with('=') && !rest.trim_start().starts_with("==")
    });
    let definition = words.windows(2).any(|w| w[0] == "def" && w[1] == name);
    as_binding || assignment || definition
}

fn scratch(plugin: &Plugin) -> Outcome {
    let mut problems = Vec::new();
    let mut summary = String::new();
    for (size, prefix) in [(1024, Some(SCRATCH_PREFIX)), (0, None)] {
        let workspace = ScratchWorkspace {
            size,
            dtype: "cached_torch_dtype_uint8".into(),
        };
        let code = match plugin.cpp_scratch(SCRATCH_INDEX, &workspace, prefix) {
            Ok(Some(code)) => code,
            Ok(None) if problems.is_empty() && size == 1024 => {
                return Outcome::skip("not supported (returns None)")
            }
            Ok(None) => {
                problems.push(format!(
                    "`cpp_scratch` returns None for a workspace of {size} elements but not for others"
                ));
                continue;
            }
            Err(e) => return Outcome::fail(e.to_string()),
        };
        let call = format!("cpp_scratch({SCRATCH_INDEX}, size {size}, prefix {prefix:?})");
        let var = code.var_name.as_str();
        if !is_identifier(var) {
            problems.push(format!(
                "{call}: variable name {var:?} is not a C++ identifier"
            ));
        }
        if !mentions_number(var, SCRATCH_INDEX) {
            problems.push(format!(
                "{call}: variable name {var:?} does not use the index {SCRATCH_INDEX}"
            ));
        }
        if let Some(p) = prefix {
            if !var.contains(p) {
                problems.push(format!(
                    "{call}: variable name {var:?} does not use the prefix {p:?}"
                ));
            }
        }
        if code.lines.is_empty() {
            problems.push(format!("{call}: returned no statement"));
        }
        for line in &code.lines {
            if let Some(p) = override_text_problem(Override::SetDevice, line) {
                let p = p.replacen("`set_device`", "a statement", 1);
                problems.push(format!("{call}: {p}"));
            }
        }
        let joined = code.lines.join("\n");
        if !code.lines.is_empty() && !joined.contains(var) {
            problems.push(format!(
                "{call}: no statement mentions the variable {var:?}"
            ));
        }
        problems.extend(balance_problem(&joined).map(|p| format!("{call}: {p}")));
        if summary.is_empty() {
            summary = format!("declares {var}");
        }
    }
    Outcome::from_problems(problems, summary)
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balance_ignores_literals_and_comments() {
        assert_eq!(balance_problem("void f() { g(\"}\", ')'); } // {"), None);
        assert_eq!(balance_problem("/* ( */ int a[2] = {1, 2};"), None);
        assert_eq!(balance_problem("auto s = R\"x(unbalanced ( { )x\";"), None);
        assert_eq!(balance_problem("int n = 1'000'000;"), None);
        assert_eq!(
            balance_problem("void f() {\n  g(;\n}").unwrap(),
            "unbalanced: `}` on line 3 closes the `(` opened on line 2"
        );
        assert!(balance_problem("f(")
            .unwrap()
            .contains("`(` opened on line 1 is never closed"));
        assert!(balance_problem("\"abc").unwrap().contains("never closed"));
        assert!(balance_problem("x)").unwrap().contains("closes nothing"));
    }

    #[test]
    fn function_definitions_are_told_from_calls() {
        let driver = "static inline gxuFunction loadKernel(std::string path) {\n  return f;\n}\n\
                      static inline void launchKernel(int a) noexcept { g(a); }";
        assert!(defines_function(driver, "loadKernel"));
        assert!(defines_function(driver, "launchKernel"));
        assert!(!defines_function("loadKernel(a, b);", "loadKernel"));
        assert!(!defines_function("// loadKernel(a) {}", "loadKernel"));
        assert!(!defines_function("void myloadKernel() {}", "loadKernel"));
    }

    #[test]
    fn parameters_must_be_used() {
        assert!(mentions_number("torch.gxu.set_device(3)", 3));
        assert!(!mentions_number("torch.gxu.set_device(32)", 3));
        assert!(binds(
            "from torch._C import _gxu_getCurrentRawStream as s7",
            "s7"
        ));
        assert!(binds("s7 = torch.gxu.current_stream", "s7"));
        assert!(!binds(
            "from torch._C import _gxu_getCurrentRawStream as get_raw_stream",
            "s7"
        ));
        assert!(!binds("s7 == 1", "s7"));
    }

    #[test]
    fn descriptions_are_one_line() {
        for o in Override::ALL {
            let d = description(o);
            assert!(!d.contains('\n') && d.starts_with("gives "), "{d}");
        }
    }
}
