//! `host conformance` driven through the real `host` binary: a valid plugin
//! passes, each deliberately broken plugin fails exactly the check named for
//! its fault with the right reason, crashes and hangs never take the harness
//! down, and the JUnit report parses with a real XML parser.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln_tests::broken::fixture;
use kiln_tests::{dll_name, host_bin, profile_dir, repo_root};
use serde_json::Value;

/// One check's line, as read back from the JUnit report.
#[derive(Debug, Clone, PartialEq)]
struct Case {
    status: &'static str,
    message: String,
}

/// What one harness run printed and wrote.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    cases: BTreeMap<String, Case>,
}

fn host(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(host_bin())
        .args(args)
        .output()
        .expect("the host binary runs")
}

/// The stub header of the broken plugins' baseline driver API (`base.h`).
fn baseline_include() -> PathBuf {
    repo_root().join("tests/broken/baseline/include")
}

/// Runs `host conformance PATH --junit FILE --include BASELINE [extra]` and
/// parses the JUnit file.
fn conformance(path: &Path, extra: &[&str]) -> Run {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let junit = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "kiln-conformance-{}-{}-{}.xml",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed),
        path.file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("plugin")
    ));
    // The baseline devices' driver API header, for the driver-text checks.
    let include = baseline_include();
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "conformance".as_ref(),
        path.as_os_str(),
        "--junit".as_ref(),
        junit.as_os_str(),
        "--include".as_ref(),
        include.as_os_str(),
    ];
    args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
    let output = host(&args);
    let xml = std::fs::read_to_string(&junit).unwrap_or_else(|e| {
        panic!(
            "no JUnit report at {} ({e}); stderr: {}",
            junit.display(),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let _ = std::fs::remove_file(&junit);
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        cases: parse_junit(&xml),
    }
}

/// Parses a JUnit report with roxmltree, checking the suite's counts against
/// its test cases.
fn parse_junit(xml: &str) -> BTreeMap<String, Case> {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("bad XML ({e}):\n{xml}"));
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .expect("a <testsuite>");
    let mut cases = BTreeMap::new();
    for case in suite.children().filter(|n| n.has_tag_name("testcase")) {
        let name = case.attribute("name").expect("testcase name").to_string();
        let classname = case.attribute("classname").expect("testcase classname");
        assert_eq!(name.split('.').next(), Some(classname), "{name}");
        let child = |tag: &str| case.children().find(|n| n.has_tag_name(tag));
        let (status, message) = match (child("failure"), child("skipped")) {
            (Some(f), _) => ("fail", f.attribute("message").unwrap_or("").to_string()),
            (None, Some(s)) => ("skip", s.attribute("message").unwrap_or("").to_string()),
            (None, None) => ("pass", String::new()),
        };
        cases.insert(name, Case { status, message });
    }
    let count = |status: &str| cases.values().filter(|c| c.status == status).count();
    let attr = |name: &str| -> usize {
        suite
            .attribute(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("testsuite attribute {name}"))
    };
    assert_eq!(attr("tests"), cases.len());
    assert_eq!(attr("failures"), count("fail"));
    assert_eq!(attr("skipped"), count("skip"));
    cases
}

fn check_names() -> Vec<String> {
    kiln::conformance::catalogue()
        .into_iter()
        .map(|c| c.name)
        .collect()
}

/// Every check ran and was reported, in the table as well as in the JUnit file.
fn assert_full_report(run: &Run) {
    let names = check_names();
    assert_eq!(
        run.cases.keys().cloned().collect::<Vec<_>>(),
        {
            let mut sorted = names.clone();
            sorted.sort();
            sorted
        },
        "the JUnit report lists every check"
    );
    for name in &names {
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{name} "))),
            "the table has no row for {name}:\n{}",
            run.stdout
        );
    }
    assert!(
        run.stdout.contains("conformance: ") && run.stdout.contains(" failed, "),
        "no summary line:\n{}",
        run.stdout
    );
}

fn failures(run: &Run) -> Vec<(&str, &str)> {
    run.cases
        .iter()
        .filter(|(_, c)| c.status == "fail")
        .map(|(n, c)| (n.as_str(), c.message.as_str()))
        .collect()
}

#[test]
fn good_baseline_passes_every_check() {
    let run = conformance(&fixture("good_baseline"), &[]);
    assert_full_report(&run);
    assert_eq!(failures(&run), [], "{}", run.stdout);
    assert_eq!(run.code, Some(0), "{}", run.stdout);
    let skipped: Vec<&String> = run
        .cases
        .iter()
        .filter(|(_, c)| c.status == "skip")
        .map(|(n, _)| n)
        .collect();
    // A Triton device has no C++ kernels to build and run.
    assert_eq!(skipped, ["e2e.cpp_run", "overrides.tma_descriptor_helpers"]);
    assert!(run
        .stdout
        .contains("device `baseline`, plugin version 0.1.0"));
}

/// Each broken fixture: the one check that must fail and a part of its reason.
const BROKEN: [(&str, &str, &str); 17] = [
    ("undeclared_in_driver", "driver.compiles", "baseMemPrefetch"),
    (
        "wrong_launch_signature",
        "driver.signatures",
        "too few arguments",
    ),
    ("segv_set_device", "overrides.set_device", "SIGSEGV"),
    ("panic_kernel_driver", "overrides.kernel_driver", "panicked"),
    (
        "loop_device_properties",
        "properties.query",
        "timed out after 2 s",
    ),
    (
        "empty_cpp_device_guard",
        "overrides.cpp_device_guard",
        "empty",
    ),
    ("newline_set_device", "overrides.set_device", "U+000A"),
    ("no_device_guard", "backend.python_wrapper", "device_guard"),
    ("zero_warp_size", "properties.warp_size", "warp_size 0"),
    (
        "shared_memory_in_kib",
        "properties.shared_memory",
        "shared_memory_per_block(0) is 48, outside",
    ),
    (
        "l2_cache_in_kib",
        "properties.l2_cache",
        "l2_cache_bytes(0) is 51200, outside",
    ),
    (
        "matmul_alignment_of_3",
        "heuristics.matmul_alignment",
        "matmul_alignment is 3:",
    ),
    (
        "conv_channels_last_half",
        "heuristics.conv_channels_last",
        "conv_channels_last names [\"half\"]:",
    ),
    ("configs_over_limit", "heuristics.thread_limit", "threads"),
    ("shrinking_adjust_grid", "heuristics.grid", "shrank"),
    ("wrong_api_major", "load.api_version", "kiln-plugin-api 2"),
    ("not_a_plugin", "load.root_symbol", "not a Kiln plugin"),
];

#[test]
fn every_broken_plugin_fails_exactly_its_own_check() {
    let mut problems = Vec::new();
    for (name, check, reason) in BROKEN {
        let run = conformance(&fixture(name), &["--timeout", "2"]);
        assert_full_report(&run);
        let failed = failures(&run);
        match failed.as_slice() {
            [(got, message)] if *got == check && message.contains(reason) => {}
            _ => problems.push(format!(
                "{name}: expected only {check} to fail with {reason:?}, got {failed:?}"
            )),
        }
        if run.code != Some(1) {
            problems.push(format!("{name}: exit code {:?}, expected 1", run.code));
        }
        // Everything else passed, or was skipped for a stated reason.
        for (check_name, case) in &run.cases {
            if case.status == "skip" && case.message.is_empty() {
                problems.push(format!("{name}: {check_name} skipped without a reason"));
            }
        }
        if check.starts_with("load.") {
            let after_load = run
                .cases
                .iter()
                .filter(|(n, _)| !n.starts_with("load."))
                .all(|(_, c)| c.status == "skip" && c.message.contains("plugin did not load"));
            if !after_load {
                problems.push(format!(
                    "{name}: checks after loading should be skipped with \"plugin did not load\""
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_crash_or_a_hang_is_reported_with_its_reason_in_the_table() {
    let segv = conformance(&fixture("segv_set_device"), &[]);
    let row = segv
        .stdout
        .lines()
        .find(|l| l.starts_with("overrides.set_device "))
        .expect("a row for set_device");
    assert!(
        row.contains("FAIL") && row.contains("killed by SIGSEGV"),
        "{row}"
    );
    // The checks after the crash still ran.
    assert_eq!(segv.cases["overrides.synchronize"].status, "pass");
    // The Python wrapper needs set_device; it is skipped, not failed twice.
    assert!(segv.cases["backend.python_wrapper"]
        .message
        .contains("overrides.set_device"));

    let start = std::time::Instant::now();
    let hang = conformance(&fixture("loop_device_properties"), &["--timeout", "1"]);
    assert!(start.elapsed().as_secs() < 30, "the hang was not cut short");
    assert!(hang.cases["properties.query"]
        .message
        .contains("timed out after 1 s"));
    assert_eq!(hang.cases["heuristics.grid"].status, "skip");
    assert_eq!(hang.cases["backend.cpp_wrapper"].status, "pass");
}

#[test]
fn a_duplicate_device_name_passes_conformance_but_is_shadowed_in_discovery() {
    let duplicate = fixture("duplicate_gxu");
    let run = conformance(&duplicate, &[]);
    assert_eq!(failures(&run), [], "{}", run.stdout);
    assert_eq!(run.code, Some(0));

    // The bundled gxu comes first in search order and wins.
    let first = profile_dir().join(dll_name("kiln_gxu"));
    let output = host(&[
        "--plugins".as_ref(),
        first.as_os_str(),
        "--plugins".as_ref(),
        duplicate.as_os_str(),
        "list".as_ref(),
        "--json".as_ref(),
    ]);
    let list: Value = serde_json::from_slice(&output.stdout).expect("host list --json");
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let gxu = list["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == "gxu"))
        .expect("gxu is registered");
    assert_eq!(
        PathBuf::from(gxu["path"].as_str().unwrap()),
        canonical(&first)
    );
    let shadowed = &list["shadowed"][0];
    assert_eq!(shadowed["name"], "gxu", "{list:#}");
    assert_eq!(
        PathBuf::from(shadowed["path"].as_str().unwrap()),
        canonical(&duplicate)
    );
}

#[test]
fn a_library_that_is_not_a_plugin_is_refused_clearly() {
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib64/libm.so.6",
        "/lib64/libm.so.6",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
    .or_else(|| {
        let out = Command::new("ldconfig").arg("-p").output().ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.trim_start().starts_with("libm.so.6"))
            .and_then(|l| l.split("=> ").nth(1))
            .map(|p| PathBuf::from(p.trim()))
    })
    .expect("the system's libm.so.6");
    let run = conformance(&libm, &[]);
    assert_ne!(run.code, Some(0));
    assert!(
        run.stderr.contains("is not a Kiln plugin") && run.stderr.contains("export_plugin!"),
        "{}",
        run.stderr
    );
    assert_eq!(failures(&run)[0].0, "load.root_symbol");
}

#[test]
fn a_missing_file_or_a_text_file_is_refused_clearly() {
    let missing = host(&["conformance".as_ref(), "surely/not/here.so".as_ref()]);
    assert_ne!(missing.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("surely/not/here.so: no such file"),
        "{stderr}"
    );

    let text = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-text-{}.so", std::process::id()));
    std::fs::write(&text, "not a library\n").expect("write a text file");
    let run = conformance(&text, &[]);
    let _ = std::fs::remove_file(&text);
    assert_ne!(run.code, Some(0));
    assert!(
        run.stderr
            .contains("not a shared library: 14 bytes, too short for an ELF header"),
        "{}",
        run.stderr
    );
}

#[test]
fn json_report_and_only_filter() {
    let path = fixture("zero_warp_size");
    let output = host(&[
        "conformance".as_ref(),
        path.as_os_str(),
        "--json".as_ref(),
        "--only".as_ref(),
        "properties.*".as_ref(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    let checks = report["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), 7, "{report:#}");
    assert!(checks
        .iter()
        .all(|c| c["name"].as_str().unwrap().starts_with("properties.")));
    assert_eq!(
        (report["failed"].as_u64(), report["passed"].as_u64()),
        (Some(1), Some(6))
    );
    assert_eq!(report["device"], "zerowarp");

    let none = host(&[
        "conformance".as_ref(),
        path.as_os_str(),
        "--only".as_ref(),
        "nothing.*".as_ref(),
    ]);
    assert_ne!(none.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&none.stderr).contains("matches no check"));

    // A prerequisite that fails makes the run fail even when it is not shown.
    let not_loaded = host(&[
        "conformance".as_ref(),
        fixture("wrong_api_major").as_os_str(),
        "--only".as_ref(),
        "overrides.set_device".as_ref(),
    ]);
    assert_eq!(not_loaded.status.code(), Some(1));
    let table = String::from_utf8_lossy(&not_loaded.stdout);
    assert!(
        table.contains("skip    plugin did not load (see load.api_version)")
            && table.contains("(left out by --only) but failed: load.api_version"),
        "{table}"
    );
}

#[test]
fn bundled_plugins_pass_every_check() {
    for device in ["cuda", "xpu", "gxu", "cpu"] {
        let lib = profile_dir().join(dll_name(&format!("kiln_{device}")));
        assert!(
            lib.is_file(),
            "{} is missing: run `cargo build --workspace` first",
            lib.display()
        );
        let run = conformance(&lib, &[]);
        assert_full_report(&run);
        assert_eq!(failures(&run), [], "{device}:\n{}", run.stdout);
        assert_eq!(run.code, Some(0), "{device}:\n{}", run.stdout);
        assert!(
            run.stdout.contains(&format!("device `{device}`")),
            "{}",
            run.stdout
        );
    }
}

#[test]
fn every_check_is_documented_for_vendors() {
    let guide = repo_root().join("docs/writing-a-plugin.md");
    let text = std::fs::read_to_string(&guide).expect("docs/writing-a-plugin.md");
    let missing: Vec<String> = kiln::conformance::catalogue()
        .into_iter()
        .filter(|c| !text.contains(&format!("| `{}` | {} |", c.name, c.description)))
        .map(|c| format!("| `{}` | {} |", c.name, c.description))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/writing-a-plugin.md's table of checks is out of date; these rows are missing:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_driver_text_whose_header_is_nowhere_names_it_and_asks_for_include() {
    // No --include: the baseline's <base.h> is neither a Kiln stub nor given.
    let junit = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "kiln-conformance-noinclude-{}.xml",
        std::process::id()
    ));
    let out = host(&[
        "conformance".as_ref(),
        fixture("good_baseline").as_os_str(),
        "--only".as_ref(),
        "driver.*".as_ref(),
        "--junit".as_ref(),
        junit.as_os_str(),
    ]);
    let xml = std::fs::read_to_string(&junit).expect("the JUnit report");
    let _ = std::fs::remove_file(&junit);
    let cases = parse_junit(&xml);
    let compiles = &cases["driver.compiles"];
    assert_eq!(compiles.status, "fail", "{cases:?}");
    for part in ["<base.h>", "cuda.h", "--include DIR"] {
        assert!(
            compiles.message.contains(part),
            "missing {part:?}: {compiles:?}"
        );
    }
    assert_eq!(cases["driver.signatures"].status, "skip", "{cases:?}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn the_guide_s_ci_snippet_and_junit_sample_match_what_the_harness_runs() {
    let guide = std::fs::read_to_string(repo_root().join("docs/writing-a-plugin.md"))
        .expect("docs/writing-a-plugin.md");
    let checks = kiln::conformance::catalogue();
    let count = format!("tests=\"{}\"", checks.len());
    assert_eq!(
        guide.matches("tests=\"").count(),
        guide.matches(&count).count(),
        "the JUnit sample's counts should be {count}"
    );
    assert!(
        guide.contains(&count),
        "the JUnit sample should say {count}"
    );
    let mut areas: Vec<&str> = checks
        .iter()
        .filter_map(|c| c.name.split('.').next())
        .collect();
    areas.dedup();
    let bullet = guide
        .split("- `classname` is the area (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("the guide's list of areas");
    for area in &areas {
        assert!(
            bullet.contains(&format!("`{area}`")),
            "area `{area}` is missing from the guide's list: {bullet}"
        );
    }
    // The CI snippet passes the template's own headers, without which the
    // driver-text checks fail on the unmodified template.
    let ci = guide
        .split("## 6. Conformance in CI")
        .nth(1)
        .and_then(|rest| rest.split("```").nth(1))
        .expect("the CI snippet");
    assert!(
        ci.contains("host conformance") && ci.contains("--include include/"),
        "{ci}"
    );
    // The README and the usage guide give the same number of checks.
    let named = format!("{} named checks", checks.len());
    for doc in ["README.md", "docs/usage.md"] {
        let text = std::fs::read_to_string(repo_root().join(doc)).expect(doc);
        assert!(text.contains(&named), "{doc} should say `{named}`");
    }
}
