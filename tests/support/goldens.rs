//! Golden files: the one snapshot helper of the test suite.
//!
//! A test checks each generated text against `tests/snapshots/<suite>/<name>`
//! with [`Goldens::check`] and ends with [`Goldens::finish`], which fails
//! once, listing every file that differs (with its first differing line),
//! every one missing, and every checked-in file no case produced any more.
//!
//! - `UPDATE_SNAPSHOTS=1` writes the files instead (re-blessing; review the
//!   diff before committing it) and removes the orphans.
//! - `SNAPSHOT_FILTER=TEXT` runs only the cases whose name contains `TEXT`
//!   (`SNAPSHOT_FILTER=small_mlp/cpu` for one example on one device).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::repo_root;

/// The golden files of one suite (a folder under `tests/snapshots`).
pub struct Goldens {
    dir: PathBuf,
    bless: bool,
    filter: Option<String>,
    seen: BTreeSet<PathBuf>,
    problems: Vec<String>,
}

impl Goldens {
    /// The goldens under `tests/snapshots/<suite>`.
    pub fn new(suite: &str) -> Goldens {
        Goldens {
            dir: repo_root().join("tests/snapshots").join(suite),
            bless: std::env::var_os("UPDATE_SNAPSHOTS").is_some(),
            filter: std::env::var("SNAPSHOT_FILTER")
                .ok()
                .filter(|f| !f.is_empty()),
            seen: BTreeSet::new(),
            problems: Vec::new(),
        }
    }

    /// Whether the case called `case` runs (the filter, if any, is in its name).
    pub fn selected(&self, case: &str) -> bool {
        self.filter.as_deref().is_none_or(|f| case.contains(f))
    }

    /// Whether `UPDATE_SNAPSHOTS` is set.
    pub fn blessing(&self) -> bool {
        self.bless
    }

    /// Compares `actual` with the golden file `name` (a path under the suite),
    /// or writes it when blessing.
    pub fn check(&mut self, name: &str, actual: &str) {
        let path = self.dir.join(name);
        self.seen.insert(path.clone());
        if self.bless {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("create the snapshot folder");
            }
            std::fs::write(&path, actual).expect("write the snapshot");
            return;
        }
        match std::fs::read_to_string(&path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => self.problems.push(difference(name, &expected, actual)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.problems.push(format!(
                "{name}: missing (run with UPDATE_SNAPSHOTS=1 to create it)"
            )),
            Err(e) => self.problems.push(format!("{name}: cannot read it: {e}")),
        }
    }

    /// Fails with every problem found; with no filter, also with every file
    /// of the suite that no case checked (removed when blessing).
    pub fn finish(self) {
        let mut problems = self.problems;
        if self.filter.is_none() {
            for orphan in files_under(&self.dir) {
                if self.seen.contains(&orphan) {
                    continue;
                }
                if self.bless {
                    std::fs::remove_file(&orphan).expect("remove an orphaned snapshot");
                } else {
                    problems.push(format!(
                        "{}: no case produces it any more (UPDATE_SNAPSHOTS=1 removes it)",
                        orphan.strip_prefix(&self.dir).unwrap_or(&orphan).display()
                    ));
                }
            }
        }
        assert!(
            problems.is_empty(),
            "{} golden file(s) of {} differ (review, then re-bless with UPDATE_SNAPSHOTS=1):\n{}",
            problems.len(),
            self.dir.display(),
            problems.join("\n")
        );
    }
}

/// Where two texts first differ, for a readable failure.
fn difference(name: &str, expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let line = e
        .iter()
        .zip(&a)
        .position(|(x, y)| x != y)
        .unwrap_or(e.len().min(a.len()));
    format!(
        "{name}: differs from line {} ({} lines expected, {} generated)\n  expected: {:?}\n  actual:   {:?}",
        line + 1,
        e.len(),
        a.len(),
        e.get(line).copied().unwrap_or("<end of file>"),
        a.get(line).copied().unwrap_or("<end of file>")
    )
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}
