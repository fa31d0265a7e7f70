//! The template plugin (`examples/vendor-plugin`) as a vendor uses it: copied
//! out of the repository, built on its own against the Kiln crates by path,
//! its own `cargo test` running `host conformance`, and no check failing; and
//! the vendor guide's code is that template's code, file for file.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_tests::*;

const TEMPLATE: &str = "examples/vendor-plugin";
/// The template's files the guide shows whole.
const FILES: [&str; 4] = [
    "Cargo.toml",
    "src/lib.rs",
    "include/npu.h",
    "tests/conformance.rs",
];

/// Copies the template's sources (not its `target/`) to `to`, pointing its
/// Kiln dependencies at this checkout by absolute path.
fn copy_template(to: &Path) {
    let from = repo_root().join(TEMPLATE);
    for file in FILES.iter().chain(&["Cargo.lock"]) {
        let dest = to.join(file);
        std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
        let mut text = std::fs::read_to_string(from.join(file)).expect("template file");
        if *file == "Cargo.toml" {
            for krate in ["plugin-api", "plugin-kit"] {
                let absolute = repo_root().join(krate);
                text = text.replace(
                    &format!("\"../../{krate}\""),
                    &format!("{:?}", absolute.display().to_string()),
                );
            }
            assert!(!text.contains("../../"), "a relative path is left: {text}");
        }
        std::fs::write(&dest, text).expect("write");
    }
}

#[test]
fn the_template_plugin_builds_out_of_tree_and_passes_conformance_from_its_own_cargo_test() {
    // Outside the repository, so no Kiln manifest is above it.
    let dir = std::env::temp_dir().join(format!("kiln-vendor-plugin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_template(&dir);
    // Its own target folder, kept between runs so only changes rebuild.
    let target: PathBuf = repo_root().join("target/vendor-plugin");
    let output = Command::new(env!("CARGO"))
        .arg("test")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .env("KILN_HOST", host_bin())
        .env_remove("KILN_PLUGIN_PATH")
        .output()
        .expect("cargo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the template's cargo test failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("test conformance ... ok"), "{stdout}");
    // The host's own verdict on the library it built.
    let library = target.join("debug").join(dll_name("kiln_npu"));
    let (out, report, err) = run(host(&host_bin())
        .arg("conformance")
        .arg(&library)
        .arg("--include")
        .arg(dir.join("include")));
    assert!(out.status.success(), "{report}\n{err}");
    assert!(report.contains(", 0 failed,"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_guide_shows_the_template_file_for_file_and_no_other_rust() {
    let guide =
        std::fs::read_to_string(repo_root().join("docs/writing-a-plugin.md")).expect("the guide");
    let mut shown = vec![];
    let mut lines = guide.lines().peekable();
    let mut marker: Option<&str> = None;
    while let Some(line) = lines.next() {
        if let Some(file) = line
            .strip_prefix("<!-- template: ")
            .and_then(|l| l.strip_suffix(" -->"))
        {
            marker = Some(file);
            continue;
        }
        if let Some(lang) = line.strip_prefix("```").filter(|l| !l.is_empty()) {
            let mut block = String::new();
            for body in lines.by_ref() {
                if body == "```" {
                    break;
                }
                block.push_str(body);
                block.push('\n');
            }
            match marker.take() {
                Some(file) => {
                    let want = std::fs::read_to_string(repo_root().join(TEMPLATE).join(file))
                        .expect("template file");
                    assert_eq!(block, want, "the guide's {file} differs from the template's");
                    shown.push(file);
                }
                None => assert_ne!(
                    lang, "rust",
                    "Rust in the guide that is not the template's (mark it <!-- template: FILE -->):\n{block}"
                ),
            }
        } else if !line.trim().is_empty() {
            marker = None;
        }
    }
    assert_eq!(
        shown, FILES,
        "the guide must show every template file, in order"
    );
}
