//! Which Python runs Triton for the host, found in one place so that
//! `host compile --wrapper cpp`, `host compile --precompile`, `host run` on a
//! Triton device and conformance's Triton check all run the same one.
//!
//! The lookup order ([`find`]):
//! 1. `$KILN_PYTHON`, when set and not empty;
//! 2. `target/test-python/bin/python3`, the virtual environment README's test
//!    command (`tools/test.sh`) installs Triton into, found from the running
//!    executable (`<repo>/target/{debug,release}/host` looks in
//!    `<repo>/target/test-python`), when it exists;
//! 3. `python3` on `PATH`.
//!
//! This module only chooses the interpreter and words the advice; it never
//! runs Python itself.

use std::fmt;
use std::path::{Path, PathBuf};

/// What to do when the chosen Python has no Triton: the one wording of the
/// advice, shared by every message that needs it.
pub const INSTALL_HINT: &str = "install Triton into that Python (`pip install triton`), \
     or run tools/test.sh once (it installs Triton into target/test-python, which host then \
     uses), or set KILN_PYTHON to a Python that has Triton";

/// The text Python prints when `import triton` finds no module.
const NO_TRITON: &str = "No module named 'triton'";

/// Where [`Python::program`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `$KILN_PYTHON`.
    Env,
    /// `target/test-python`, made by `tools/test.sh`, beside the executable's
    /// build folder.
    TestVenv,
    /// `python3` on `PATH`, for want of the others.
    Default,
}

/// The Python that compiles Triton kernels, and why it was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Python {
    /// The interpreter to run.
    pub program: PathBuf,
    /// Which step of the lookup order chose it.
    pub origin: Origin,
}

impl fmt::Display for Python {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = match self.origin {
            Origin::Env => "from KILN_PYTHON",
            Origin::TestVenv => "tools/test.sh's target/test-python, as KILN_PYTHON is not set",
            Origin::Default => {
                "the default, as KILN_PYTHON is not set and no target/test-python was found"
            }
        };
        write!(f, "`{}` ({origin})", self.program.display())
    }
}

impl Python {
    /// The message for this Python lacking Triton, with the advice.
    pub fn no_triton(&self) -> String {
        format!("{self} has no Triton ({NO_TRITON}): {INSTALL_HINT}")
    }
}

/// The Python to run Triton with, in the order the module documents.
pub fn find() -> Python {
    let exe = std::env::current_exe().ok();
    choose(std::env::var_os("KILN_PYTHON"), exe.as_deref())
}

/// [`find`]'s order, given `$KILN_PYTHON` and the running executable.
fn choose(env: Option<std::ffi::OsString>, exe: Option<&Path>) -> Python {
    if let Some(program) = env.filter(|p| !p.is_empty()) {
        return Python {
            program: PathBuf::from(program),
            origin: Origin::Env,
        };
    }
    if let Some(program) = exe.and_then(test_venv) {
        return Python {
            program,
            origin: Origin::TestVenv,
        };
    }
    Python {
        program: PathBuf::from("python3"),
        origin: Origin::Default,
    }
}

/// `tools/test.sh`'s interpreter for an executable at
/// `<target>/<profile>/host`: `<target>/test-python/bin/python3`, if it exists.
fn test_venv(exe: &Path) -> Option<PathBuf> {
    let target = exe.parent()?.parent()?;
    let program = target.join("test-python").join("bin").join("python3");
    program.exists().then_some(program)
}

/// Whether a Python child's stderr says Triton is not installed.
pub fn says_no_triton(stderr: &str) -> bool {
    stderr.contains(NO_TRITON)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lookup_order_is_env_then_test_venv_then_python3() {
        let dir = tempfile::tempdir().expect("temp dir");
        let exe = dir.path().join("target").join("debug").join("host");
        let venv = dir.path().join("target/test-python/bin/python3");
        // No venv yet: the default.
        let found = choose(None, Some(&exe));
        assert_eq!(found.program, PathBuf::from("python3"));
        assert_eq!(found.origin, Origin::Default);
        std::fs::create_dir_all(venv.parent().expect("bin")).expect("mkdir");
        std::fs::write(&venv, "").expect("write");
        let found = choose(None, Some(&exe));
        assert_eq!(
            (found.program, found.origin),
            (venv.clone(), Origin::TestVenv)
        );
        // An empty KILN_PYTHON counts as unset; a set one wins.
        let found = choose(Some("".into()), Some(&exe));
        assert_eq!(found.origin, Origin::TestVenv);
        let found = choose(Some("/opt/py".into()), Some(&exe));
        assert_eq!(
            (found.program, found.origin),
            (PathBuf::from("/opt/py"), Origin::Env)
        );
    }

    #[test]
    fn the_missing_triton_message_names_the_python_and_the_fixes() {
        let python = choose(Some("/opt/py".into()), None);
        let message = python.no_triton();
        for part in [
            "`/opt/py`",
            "KILN_PYTHON",
            "pip install triton",
            "tools/test.sh",
        ] {
            assert!(message.contains(part), "{part} missing from: {message}");
        }
        assert!(says_no_triton(
            "ModuleNotFoundError: No module named 'triton'\n"
        ));
        assert!(!says_no_triton(
            "ModuleNotFoundError: No module named 'torch'"
        ));
    }
}
