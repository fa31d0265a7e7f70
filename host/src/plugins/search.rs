//! Where plugins are looked for, PrivateUse1-style: drop a library into a
//! folder and the host finds it, with no rebuild.
//!
//! Search order: each `--plugins DIR` in the order given, then
//! `KILN_PLUGIN_PATH` (`:`-separated), then the folder of the `host`
//! executable and its `plugins/` subfolder. Within a folder, libraries are
//! tried in file-name order so that discovery is deterministic. This module
//! only lists paths; it never opens a library.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The environment variable holding extra plugin folders.
pub const PLUGIN_PATH_VAR: &str = "KILN_PLUGIN_PATH";

/// Why a folder is on the search path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Given with `--plugins`.
    Flag,
    /// Listed in `KILN_PLUGIN_PATH`.
    EnvVar,
    /// The folder of the `host` executable.
    ExeDir,
    /// The `plugins/` subfolder of the executable's folder.
    ExePluginsDir,
}

impl Origin {
    /// How a report names the origin.
    pub fn describe(self) -> &'static str {
        match self {
            Origin::Flag => "--plugins",
            Origin::EnvVar => PLUGIN_PATH_VAR,
            Origin::ExeDir => "the host's folder",
            Origin::ExePluginsDir => "the host's plugins/ folder",
        }
    }
}

/// One entry of the search path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchEntry {
    /// A folder, or (from `--plugins`) a single library file.
    pub path: PathBuf,
    /// Why it is searched.
    pub origin: Origin,
}

/// A search-path problem that is not about one library.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{} ({}): {reason}", path.display(), origin.describe())]
pub struct SearchProblem {
    /// The folder at fault.
    pub path: PathBuf,
    /// Where it came from.
    pub origin: Origin,
    /// What is wrong.
    pub reason: String,
}

/// The search path for these `--plugins` arguments, the environment and the
/// running executable.
pub fn search_path(flags: &[PathBuf]) -> Vec<SearchEntry> {
    let env = std::env::var_os(PLUGIN_PATH_VAR);
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    search_path_from(flags, env.as_deref(), exe_dir.as_deref())
}

/// [`search_path`] with its inputs spelled out, for tests.
pub fn search_path_from(
    flags: &[PathBuf],
    env: Option<&std::ffi::OsStr>,
    exe_dir: Option<&Path>,
) -> Vec<SearchEntry> {
    let mut entries: Vec<SearchEntry> = flags
        .iter()
        .map(|p| SearchEntry {
            path: p.clone(),
            origin: Origin::Flag,
        })
        .collect();
    if let Some(env) = env {
        entries.extend(
            std::env::split_paths(env)
                .filter(|p| !p.as_os_str().is_empty())
                .map(|path| SearchEntry {
                    path,
                    origin: Origin::EnvVar,
                }),
        );
    }
    if let Some(dir) = exe_dir {
        entries.push(SearchEntry {
            path: dir.to_path_buf(),
            origin: Origin::ExeDir,
        });
        entries.push(SearchEntry {
            path: dir.join("plugins"),
            origin: Origin::ExePluginsDir,
        });
    }
    entries
}

/// Whether a file name looks like a shared library on this platform.
pub(super) fn is_shared_library(path: &Path) -> bool {
    let suffix = std::env::consts::DLL_SUFFIX;
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.len() > suffix.len() && n.ends_with(suffix))
}

/// One library-looking entry of a searched folder, in name order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Candidate {
    /// A readable file to try loading.
    Library(PathBuf),
    /// A name that looks like a library but cannot be one: a folder, a
    /// dangling link, a link loop, an unreadable file.
    Unusable {
        /// The entry.
        path: PathBuf,
        /// Why it cannot be loaded.
        reason: String,
    },
}

/// Why `path` cannot be followed, given the error `std::fs::metadata` gave:
/// a dangling link names its target, a loop says so.
fn unfollowable(path: &Path, error: &std::io::Error) -> String {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return match error.kind() {
            std::io::ErrorKind::NotFound => "does not exist".to_string(),
            _ => format!("cannot be read: {error}"),
        };
    }
    let target = std::fs::read_link(path)
        .map(|t| format!(" to {}", t.display()))
        .unwrap_or_default();
    match error.kind() {
        std::io::ErrorKind::NotFound => {
            format!("is a symbolic link{target}, which does not exist")
        }
        _ if error.raw_os_error() == Some(libc::ELOOP) => {
            format!("is a symbolic link{target} that loops back on itself")
        }
        _ => format!("is a symbolic link{target} that cannot be followed: {error}"),
    }
}

/// What a library-looking folder entry is: a file that can be opened for
/// reading is a library to try; anything else is unusable, with the reason.
fn candidate(path: PathBuf) -> Candidate {
    let reason = match std::fs::metadata(&path) {
        Err(e) => unfollowable(&path, &e),
        Ok(meta) if meta.is_dir() => "is a folder, not a library file".to_string(),
        Ok(meta) if !meta.is_file() => "is not a regular file".to_string(),
        Ok(_) => match std::fs::File::open(&path) {
            Ok(_) => return Candidate::Library(path),
            Err(e) => format!("cannot be read: {e}"),
        },
    };
    Candidate::Unusable { path, reason }
}

/// The libraries an entry names: the file itself, or each library-looking
/// entry of a folder in name order. The executable's `plugins/` folder may be
/// absent; any other entry that cannot be read is a problem.
pub(super) fn libraries_of(entry: &SearchEntry) -> Result<Vec<Candidate>, SearchProblem> {
    let problem = |reason: String| SearchProblem {
        path: entry.path.clone(),
        origin: entry.origin,
        reason,
    };
    let meta = match std::fs::metadata(&entry.path) {
        Ok(meta) => meta,
        Err(e)
            if entry.origin == Origin::ExePluginsDir
                && e.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(Vec::new())
        }
        Err(e) => return Err(problem(unfollowable(&entry.path, &e))),
    };
    if meta.is_file() {
        return match candidate(entry.path.clone()) {
            Candidate::Unusable { reason, .. } => Err(problem(reason)),
            library => Ok(vec![library]),
        };
    }
    if !meta.is_dir() {
        return Err(problem(
            "is neither a folder nor a library file".to_string(),
        ));
    }
    let reader =
        std::fs::read_dir(&entry.path).map_err(|e| problem(format!("cannot be listed: {e}")))?;
    let mut paths: Vec<PathBuf> = reader
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| is_shared_library(p))
        .collect();
    paths.sort();
    Ok(paths.into_iter().map(candidate).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_order_is_flags_then_env_then_exe_dir() {
        let flags = [PathBuf::from("a"), PathBuf::from("b")];
        let env = std::ffi::OsString::from("c::d");
        let got = search_path_from(&flags, Some(&env), Some(Path::new("/opt/kiln/bin")));
        let paths: Vec<_> = got
            .iter()
            .map(|e| (e.path.to_str().unwrap(), e.origin))
            .collect();
        assert_eq!(
            paths,
            vec![
                ("a", Origin::Flag),
                ("b", Origin::Flag),
                ("c", Origin::EnvVar),
                ("d", Origin::EnvVar),
                ("/opt/kiln/bin", Origin::ExeDir),
                ("/opt/kiln/bin/plugins", Origin::ExePluginsDir),
            ]
        );
    }

    #[test]
    fn only_platform_libraries_are_tried() {
        let suffix = std::env::consts::DLL_SUFFIX;
        assert!(is_shared_library(Path::new(&format!("libgxu{suffix}"))));
        assert!(!is_shared_library(Path::new("libgxu.rlib")));
        assert!(!is_shared_library(Path::new("gxu.toml")));
        assert!(!is_shared_library(Path::new(suffix)));
    }

    #[test]
    fn a_missing_flag_folder_is_a_problem_but_a_missing_plugins_subfolder_is_not() {
        let missing = PathBuf::from("surely/not/here");
        let flag = SearchEntry {
            path: missing.clone(),
            origin: Origin::Flag,
        };
        let err = libraries_of(&flag).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(err.to_string().contains("--plugins"), "{err}");
        let sub = SearchEntry {
            path: missing,
            origin: Origin::ExePluginsDir,
        };
        assert_eq!(libraries_of(&sub).unwrap(), Vec::<Candidate>::new());
    }

    #[cfg(unix)]
    #[test]
    fn library_named_folders_links_and_loops_are_unusable_with_a_reason() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let name = |stem: &str| format!("lib{stem}{}", std::env::consts::DLL_SUFFIX);
        std::fs::create_dir(dir.path().join(name("dir"))).expect("mkdir");
        std::os::unix::fs::symlink("nowhere", dir.path().join(name("dangling"))).expect("link");
        std::os::unix::fs::symlink(name("b"), dir.path().join(name("a"))).expect("a -> b");
        std::os::unix::fs::symlink(name("a"), dir.path().join(name("b"))).expect("b -> a");
        std::fs::write(dir.path().join(name("real")), b"bytes").expect("a file");
        std::fs::write(dir.path().join("notes.txt"), b"ignored").expect("a file");
        let entry = SearchEntry {
            path: dir.path().to_path_buf(),
            origin: Origin::EnvVar,
        };
        let got: Vec<(String, String)> = libraries_of(&entry)
            .expect("the folder is listed")
            .into_iter()
            .map(|c| match c {
                Candidate::Library(p) => (p.display().to_string(), "library".to_string()),
                Candidate::Unusable { path, reason } => (path.display().to_string(), reason),
            })
            .collect();
        let reasons: Vec<&str> = got.iter().map(|(_, r)| r.as_str()).collect();
        assert_eq!(got.len(), 5, "{got:?}");
        assert!(reasons[0].contains("loops back"), "{got:?}");
        assert!(reasons[1].contains("loops back"), "{got:?}");
        assert!(reasons[2].contains("which does not exist"), "{got:?}");
        assert!(reasons[3].contains("is a folder"), "{got:?}");
        assert_eq!(reasons[4], "library", "{got:?}");
        let looped = SearchEntry {
            path: dir.path().join(name("a")),
            origin: Origin::Flag,
        };
        let err = libraries_of(&looped).expect_err("a loop is a problem");
        assert!(err.reason.contains("loops back"), "{err}");
    }
}
