//! The output folders of `host compile -o DIR` and `host run --out DIR`:
//! checked before any work, and, for `host compile`, cleared of what an
//! earlier compile for another device (or with other options) left there.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::CliError;
use crate::codegen::cpp::runtime::HEADERS;

/// The files `host compile` writes at the top of its output folder, for one
/// device or another (`weights.safetensors` is the driver's to remove).
const FILES: [&str; 9] = [
    "output_code.py",
    "wrapper.cpp",
    "kernels.py",
    "kiln_runtime.py",
    "graph_pre_passes.txt",
    "graph_post_passes.txt",
    "ir_pre_fusion.txt",
    "ir_post_fusion.txt",
    "graph.dot",
];

/// The folder of Triton's compiled kernels, Kiln's where it holds this manifest.
const KERNELS: &str = "kernels";
const KERNELS_MANIFEST: &str = "manifest.json";

/// Refuses an output folder `dir` (given as `option`) that names something
/// other than a folder, before any work is done; a missing folder is fine
/// (it is created).
pub fn check(dir: &Path, option: &str) -> Result<(), CliError> {
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => Err(format!(
            "output folder `{}` ({option}) is a file, not a folder: name a folder \
             (created if missing) or remove the file",
            dir.display()
        )
        .into()),
        _ => Ok(()),
    }
}

/// Removes from `dir` every file Kiln generates that this compile did not
/// write (`written`, plus `kernels/` where `kernels_written`): the output of
/// an earlier compile for another device or with other options, which would
/// otherwise sit beside the new code as if it were part of it. Returns what
/// was removed.
pub fn remove_stale(
    dir: &Path,
    written: &[PathBuf],
    kernels_written: bool,
) -> Result<Vec<PathBuf>, CliError> {
    let written: HashSet<&Path> = written.iter().map(PathBuf::as_path).collect();
    let mut removed = vec![];
    let mut headers = vec![];
    let names = FILES.iter().map(|n| (*n, false));
    for (name, header) in names.chain(HEADERS.iter().map(|h| (h.path, true))) {
        let path = dir.join(name);
        if !written.contains(path.as_path()) && path.is_file() {
            remove(&path, |p| std::fs::remove_file(p))?;
            if header { &mut headers } else { &mut removed }.push(path);
        }
    }
    // The headers' folder, where no header is left in it (never a folder with
    // anything else), reported as one.
    let headers_dir = HEADERS.first().and_then(|h| Path::new(h.path).parent());
    match headers_dir.map(|d| dir.join(d)) {
        Some(folder) if std::fs::read_dir(&folder).is_ok_and(|mut e| e.next().is_none()) => {
            remove(&folder, |p| std::fs::remove_dir(p))?;
            removed.push(folder);
        }
        _ => removed.extend(headers),
    }
    let kernels = dir.join(KERNELS);
    if !kernels_written && kernels.join(KERNELS_MANIFEST).is_file() {
        remove(&kernels, |p| std::fs::remove_dir_all(p))?;
        removed.push(kernels);
    }
    Ok(removed)
}

fn remove(path: &Path, how: impl FnOnce(&Path) -> std::io::Result<()>) -> Result<(), CliError> {
    how(path).map_err(|e| {
        format!(
            "cannot remove {}, left by an earlier compile into the same folder: {e} \
             (remove it, or compile into another folder)",
            path.display()
        )
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-out-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_is_refused_and_a_missing_folder_is_not() {
        let dir = temp("check");
        let file = dir.join("afile");
        std::fs::write(&file, "x").unwrap();
        let e = check(&file, "-o").unwrap_err().to_string();
        assert!(e.contains("afile") && e.contains("is a file"), "{e}");
        check(&dir.join("new"), "-o").unwrap();
        check(&dir, "-o").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_what_kiln_wrote_before_is_removed() {
        let dir = temp("stale");
        // A cpu compile's output, a Triton device's, and a user's own files.
        for f in [
            "wrapper.cpp",
            "output_code.py",
            "kiln_runtime.py",
            "notes.txt",
        ] {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        std::fs::create_dir_all(dir.join("kiln")).unwrap();
        std::fs::write(dir.join(HEADERS[0].path), "x").unwrap();
        std::fs::create_dir_all(dir.join("kernels/k0")).unwrap();
        std::fs::write(dir.join("kernels/manifest.json"), "{}").unwrap();
        std::fs::create_dir_all(dir.join("mine")).unwrap();
        // This compile wrote output_code.py and kiln_runtime.py.
        let written = [dir.join("output_code.py"), dir.join("kiln_runtime.py")];
        let removed = remove_stale(&dir, &written, false).unwrap();
        assert_eq!(removed.len(), 3, "{removed:?}");
        for gone in ["wrapper.cpp", "kiln", "kernels"] {
            assert!(!dir.join(gone).exists(), "{gone} should be removed");
        }
        for kept in ["output_code.py", "kiln_runtime.py", "notes.txt", "mine"] {
            assert!(dir.join(kept).exists(), "{kept} should be kept");
        }
        // Kernels this compile wrote, and a kernels/ folder that is not Kiln's, stay.
        std::fs::create_dir_all(dir.join("kernels")).unwrap();
        std::fs::write(dir.join("kernels/manifest.json"), "{}").unwrap();
        remove_stale(&dir, &written, true).unwrap();
        assert!(dir.join("kernels/manifest.json").exists());
        std::fs::remove_file(dir.join("kernels/manifest.json")).unwrap();
        remove_stale(&dir, &written, false).unwrap();
        assert!(dir.join("kernels").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
