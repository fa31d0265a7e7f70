//! The template plugin (`examples/vendor-plugin`) as a vendor uses it: copied
//! out of the repository, built on its own against the Kiln crates by path,
//! its own `cargo test` running `host conformance`, and no check failing; the
//! vendor guide's code is that template's code, file for file; and the guide's CI
//! snippet runs as written in the template's folder.

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

/// The shell block of the guide's §6 ("Conformance in CI"), verbatim.
fn ci_snippet() -> String {
    let guide =
        std::fs::read_to_string(repo_root().join("docs/writing-a-plugin.md")).expect("the guide");
    let section = guide
        .split("\n## 6. Conformance in CI\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the guide's section 6");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("a ```sh block in section 6");
    format!("{block}\n")
}

/// The value of `attribute` on the first `<element ` of `xml`.
fn attribute(xml: &str, element: &str, attribute: &str) -> Option<String> {
    let start = xml.find(&format!("<{element} "))?;
    let tag = &xml[start..start + xml[start..].find('>')?];
    let value = tag.split(&format!(" {attribute}=\"")).nth(1)?;
    Some(value.split('"').next()?.to_string())
}

#[test]
fn the_guide_s_ci_snippet_runs_as_written_on_the_template() {
    let snippet = ci_snippet();
    let dir = std::env::temp_dir().join(format!("kiln-vendor-ci-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_template(&dir);
    // The snippet builds into the template's own `target/`: a link to a folder of
    // this checkout's, kept between runs so that only changes rebuild.
    let target = repo_root().join("target/vendor-plugin");
    std::fs::create_dir_all(&target).expect("target/vendor-plugin");
    std::os::unix::fs::symlink(&target, dir.join("target")).expect("link target/");
    // `host` on PATH, as after `cargo install --path host`; cargo beside it.
    let bin = dir.join("ci-bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::os::unix::fs::symlink(host_bin(), bin.join("host")).expect("link host");
    let cargo_dir = Path::new(env!("CARGO")).parent().expect("cargo's folder");
    let path = std::env::join_paths([bin.clone(), cargo_dir.to_path_buf()].into_iter().chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let (output, stdout, stderr) = run(Command::new("sh")
        .arg("-ec")
        .arg(&snippet)
        .current_dir(&dir)
        .env("PATH", path)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("KILN_PLUGIN_PATH"));
    assert!(
        output.status.success(),
        "the guide's CI snippet failed on the template:\n{snippet}\n{stdout}\n{stderr}"
    );
    let xml = std::fs::read_to_string(dir.join("conformance.xml")).expect("conformance.xml");
    let checks = kiln::conformance::catalogue().len().to_string();
    for element in ["testsuites", "testsuite"] {
        assert_eq!(
            attribute(&xml, element, "tests").as_deref(),
            Some(checks.as_str()),
            "{xml}"
        );
        assert_eq!(
            attribute(&xml, element, "failures").as_deref(),
            Some("0"),
            "{xml}"
        );
    }
    // Skips are features the template leaves out or a missing Triton, never a failure.
    assert_eq!(
        xml.matches("<testcase ").count().to_string(),
        checks,
        "{xml}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
