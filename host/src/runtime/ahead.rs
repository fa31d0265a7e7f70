//! Compiling Triton kernels ahead of time, and the one step from a compile
//! of a Triton device's C++ wrapper to its `wrapper.cpp`: `kernels.py`
//! written, its kernels compiled by Triton (`kernels.py --precompile`, run
//! in a child process with the Python [`super::python::find`] chooses), their binaries read from
//! `kernels/`, and the wrapper written around them.
//!
//! `host compile --wrapper cpp` ([`Binaries::Compile`]), `host run` on a
//! Triton device ([`Binaries::Cached`]), conformance's driver-text check and
//! the tests ([`Binaries::StandIn`]) all go through [`write_wrapper`], so that
//! what one of them builds is what the others build. Like the rest of
//! `runtime`, this runs generated code (Python); code generation never does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::python;
use crate::driver::{triton_cpp, Artifacts, CodeInfo};

/// Why the kernels could not be compiled ahead or the wrapper written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The compile has no C++ wrapper of Triton kernels.
    #[error("this compile has no C++ wrapper of Triton kernels (compile for a Triton device with the C++ wrapper)")]
    NotTritonCpp,
    /// Writing the files or the wrapper failed.
    #[error(transparent)]
    Driver(#[from] crate::driver::Error),
    /// Python could not be started.
    #[error(
        "compiling the kernels ahead runs Python with Triton, but {python} could not be started: \
         install Python 3 with Triton (pip install triton), or run tools/test.sh once, or set \
         KILN_PYTHON to a Python that has Triton"
    )]
    NoPython {
        /// The interpreter, and where it came from.
        python: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The Python has no Triton.
    #[error("compiling the kernels ahead needs Triton, but {0}")]
    NoTriton(String),
    /// Triton failed to compile a kernel.
    #[error(
        "precompiling the kernels{} failed ({status}):\n{detail}\n({})",
        code.as_ref().map_or_else(String::new, |c| format!(" of {}", c.display())),
        purpose.advice()
    )]
    Precompile {
        /// The generated file, where it outlives the error (not a run's
        /// scratch copy, removed before the error is shown).
        code: Option<PathBuf>,
        /// The child's exit status.
        status: String,
        /// Its complaint: the lines that name a failure, else all of stderr.
        detail: String,
        /// Who needed the binaries.
        purpose: Purpose,
    },
    /// A file or folder could not be read, written or linked.
    #[error("cannot {what} {}", path.display())]
    Io {
        /// What was tried.
        what: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file Triton wrote is not what was expected.
    #[error("{} is not {what}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// What it should be.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The compiled kernels do not fit the wrapper.
    #[error("{0}")]
    Binaries(String),
}

/// Where the binaries of a wrapper's kernels come from.
#[derive(Clone, Debug)]
pub enum Binaries {
    /// Triton compiles `kernels.py` into `DIR/kernels` now (`host compile`).
    Compile,
    /// Triton compiles `kernels.py` into this cache folder, once per text of
    /// the kernels, and `DIR/kernels` links to it (`host run`).
    Cached(PathBuf),
    /// Nothing is compiled: each kernel stands in as
    /// `kernels/NAME/NAME.EXTENSION` with no shared memory (launched as a
    /// programmatic dependent where it waits for the one before), for checking the
    /// wrapper's text where this Triton has no backend for the device
    /// (conformance, the tests).
    StandIn {
        /// The binaries' file extension (`cubin`, `spv`).
        extension: String,
    },
}

/// Who needs a precompile's kernels, which decides what its failure
/// advises and whether the generated file outlives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// `host compile --wrapper cpp`: `wrapper.cpp` loads them, and the file
    /// stays in the output folder.
    Wrapper,
    /// `host run`: the run loads them; the file was in a scratch folder.
    Run,
    /// `host compile --precompile` of the Python wrapper, which would compile
    /// them at their first launch anyway.
    PythonWrapper,
}

impl Purpose {
    /// What to do about a failure, in the terms of the command that failed.
    fn advice(self) -> &'static str {
        match self {
            Purpose::Wrapper => {
                "wrapper.cpp loads compiled kernels, so it was not written: compile on a machine \
                 whose Triton has a backend for this device, or leave --wrapper cpp out for the \
                 Python wrapper"
            }
            Purpose::Run => {
                "host run launches kernels compiled ahead: run it where Triton has a backend for \
                 this device"
            }
            Purpose::PythonWrapper => {
                "the wrapper still works: it compiles the kernels at their first launch"
            }
        }
    }

    /// Whether the generated file is still there when the error is shown.
    fn keeps_code(self) -> bool {
        self != Purpose::Run
    }
}

/// What [`write_wrapper`] wrote.
#[derive(Clone, Debug)]
pub struct Wrapper {
    /// The compile's files (`kernels.py`, the debug texts, the weights).
    pub files: Vec<PathBuf>,
    /// `wrapper.cpp`.
    pub path: PathBuf,
    /// What the wrapper needs.
    pub info: triton_cpp::Info,
    /// The folder of the compiled kernels (`DIR/kernels`, or the cache's).
    pub kernels: PathBuf,
    /// Triton's report, when it compiled the kernels now.
    pub precompiled: Option<String>,
}

/// The one step from a compile for a Triton device's C++ wrapper to its
/// `wrapper.cpp`: writes the compile's files into `dir` (created if needed),
/// gets the kernels' binaries as `binaries` says, and writes
/// `dir/wrapper.cpp` around them.
pub fn write_wrapper(
    artifacts: &Artifacts,
    dir: &Path,
    binaries: &Binaries,
) -> Result<Wrapper, Error> {
    let CodeInfo::TritonCpp(plan) = &artifacts.info else {
        return Err(Error::NotTritonCpp);
    };
    let files = artifacts.write_to(dir)?;
    let names = plan.kernel_names();
    let kernel_files = plan.kernel_files();
    let folder = dir.join("kernels");
    let (found, kernels, precompiled) = match binaries {
        Binaries::Compile => {
            let report = precompile(&dir.join(artifacts.file_name), Purpose::Wrapper)?;
            (read_binaries(dir, &kernel_files)?, folder, Some(report))
        }
        Binaries::Cached(cache) => {
            let (cached, report) = cached_kernels(cache, &artifacts.code)?;
            link_dir(&cached, &folder)?;
            (read_binaries(dir, &kernel_files)?, cached, report)
        }
        Binaries::StandIn { extension } => {
            // As a compile with `launch_pdl` makes them: every kernel that waits for the
            // one before it (the generated ones that say so, and the templates).
            let waits = |name: &String| {
                plan.kernels
                    .info
                    .iter()
                    .find(|k| &k.name == name)
                    .is_none_or(|k| k.dependent)
            };
            (stand_ins(&names, extension, waits), folder, None)
        }
    };
    let (path, info) = artifacts.write_cpp_wrapper(dir, &found)?;
    Ok(Wrapper {
        files,
        path,
        info,
        kernels,
        precompiled,
    })
}

/// Runs `code --precompile` (a generated `kernels.py` or `output_code.py`)
/// with the Python [`python::find`] chooses, which compiles every Triton
/// kernel into `kernels/` beside it; returns Triton's report. `purpose` says
/// who needs the binaries.
pub fn precompile(code: &Path, purpose: Purpose) -> Result<String, Error> {
    let python = python::find();
    let output = std::process::Command::new(&python.program)
        .arg(code)
        .arg("--precompile")
        .output()
        .map_err(|source| Error::NoPython {
            python: python.to_string(),
            source,
        })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    if python::says_no_triton(&stderr) {
        return Err(Error::NoTriton(python.no_triton()));
    }
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("FAILED") || l.contains("Error"))
        .collect();
    let mut detail = if failed.is_empty() {
        stderr.trim().to_string()
    } else {
        failed.join("\n")
    };
    let kept = purpose.keeps_code();
    if let (false, Some(folder)) = (kept, code.parent()) {
        // The scratch folder is gone by the time this is read: name the file alone.
        detail = detail.replace(&format!("{}/", folder.display()), "");
    }
    Err(Error::Precompile {
        code: kept.then(|| code.to_path_buf()),
        status: output.status.to_string(),
        detail,
        purpose,
    })
}

/// The folder holding `kernels.py`'s compiled kernels (`kernels/` with its
/// manifest) in `cache`, keyed by the text's SHA-256, and Triton's report
/// when it compiled them now: compiled when absent, in a folder of its own
/// renamed into place, so that concurrent runs never see half of it.
fn cached_kernels(cache: &Path, code: &str) -> Result<(PathBuf, Option<String>), Error> {
    use crate::codegen::wrapper::python::{RUNTIME, RUNTIME_FILE};
    use sha2::{Digest, Sha256};
    // The runtime compiles them: a Kiln with another runtime compiles them again.
    let digest = Sha256::new()
        .chain_update(code.as_bytes())
        .chain_update(RUNTIME.as_bytes())
        .finalize();
    let key: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    let folder = cache.join("kernels").join(&key);
    let compiled = folder.join("kernels");
    if compiled.join("manifest.json").is_file() {
        return Ok((compiled, None));
    }
    let scratch = scratch_dir(&cache.join("kernels"), &key)?;
    let staging = scratch.path();
    let source = staging.join("kernels.py");
    std::fs::write(&source, code).map_err(|source_error| Error::Io {
        what: "write",
        path: source.clone(),
        source: source_error,
    })?;
    let runtime = staging.join(RUNTIME_FILE);
    std::fs::write(&runtime, RUNTIME).map_err(|source| Error::Io {
        what: "write",
        path: runtime.clone(),
        source,
    })?;
    let report = precompile(&source, Purpose::Run)?;
    if let Err(source) = std::fs::rename(staging, &folder) {
        // Another run finished first: its kernels are the same.
        if !compiled.join("manifest.json").is_file() {
            return Err(Error::Io {
                what: "move the compiled kernels to",
                path: folder,
                source,
            });
        }
    }
    Ok((compiled, Some(report)))
}

/// A new, empty folder `{parent}/.{stem}-XXXXXX`, removed (if still there)
/// when dropped, whatever happened.
pub fn scratch_dir(parent: &Path, stem: &str) -> Result<tempfile::TempDir, Error> {
    let io = |what| {
        move |source| Error::Io {
            what,
            path: parent.to_path_buf(),
            source,
        }
    };
    std::fs::create_dir_all(parent).map_err(io("create"))?;
    tempfile::Builder::new()
        .prefix(&format!(".{stem}-"))
        .tempdir_in(parent)
        .map_err(io("create a folder in"))
}

/// Makes `link` name the folder `target`.
fn link_dir(target: &Path, link: &Path) -> Result<(), Error> {
    #[cfg(unix)]
    let made = std::os::unix::fs::symlink(target, link);
    #[cfg(not(unix))]
    let made = std::os::windows::fs::symlink_dir(target, link);
    made.map_err(|source| Error::Io {
        what: "link the compiled kernels as",
        path: link.to_path_buf(),
        source,
    })
}

/// Stand-in binaries for `kernels`: only their names, and whether each `waits`
/// for the kernel before it, reach the text.
fn stand_ins(
    kernels: &[String],
    extension: &str,
    waits: impl Fn(&String) -> bool,
) -> HashMap<String, triton_cpp::Binary> {
    kernels
        .iter()
        .map(|k| {
            let binary = triton_cpp::Binary {
                path: format!("kernels/{k}/{k}.{extension}"),
                function: k.clone(),
                shared: 0,
                dependent: waits(k),
            };
            (k.clone(), binary)
        })
        .collect()
}

/// Reads a file, naming it on failure.
fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        what: "read",
        path: path.to_path_buf(),
        source,
    })
}

/// The binaries `kernels.py --precompile` wrote into `dir/kernels` for
/// `kernels` (by name, each with the function whose files its folder holds),
/// from its `manifest.json` and each kernel's Triton metadata (`FUNCTION.json`:
/// the function's name and its shared memory).
pub fn read_binaries(
    dir: &Path,
    kernels: &[(String, String)],
) -> Result<HashMap<String, triton_cpp::Binary>, Error> {
    let folder = dir.join("kernels");
    let manifest_path = folder.join("manifest.json");
    let manifest: HashMap<String, String> =
        serde_json::from_str(&read(&manifest_path)?).map_err(|source| Error::Json {
            path: manifest_path.clone(),
            what: "a kernel manifest (it is written by `python kernels.py --precompile`)",
            source,
        })?;
    let mut binaries = HashMap::new();
    for (name, function) in kernels {
        let key = manifest.get(name).ok_or_else(|| {
            Error::Binaries(format!(
                "kernel `{name}` was not compiled ({} does not list it)",
                manifest_path.display()
            ))
        })?;
        if key.contains(['/', '\\']) || key.starts_with('.') {
            return Err(Error::Binaries(format!(
                "{} names the folder {key:?} for `{name}`, outside kernels/",
                manifest_path.display()
            )));
        }
        let binary = read_binary(&folder.join(key), function)?;
        binaries.insert(
            name.clone(),
            triton_cpp::Binary {
                path: format!("kernels/{key}/{}", binary.path),
                ..binary
            },
        );
    }
    Ok(binaries)
}

/// Kernel `name`'s binary in `folder` (its path relative to `folder`), from
/// its Triton metadata.
fn read_binary(folder: &Path, name: &str) -> Result<triton_cpp::Binary, Error> {
    let meta_path = folder.join(format!("{name}.json"));
    let meta: serde_json::Value =
        serde_json::from_str(&read(&meta_path)?).map_err(|source| Error::Json {
            path: meta_path.clone(),
            what: "Triton metadata",
            source,
        })?;
    let field = |f: &str| meta.get(f).and_then(serde_json::Value::as_u64);
    let shared = field("shared")
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| {
            Error::Binaries(format!(
                "{} gives no shared-memory size",
                meta_path.display()
            ))
        })?;
    if field("global_scratch_size").unwrap_or(0) > 0 {
        return Err(Error::Binaries(format!(
            "kernel `{name}` needs Triton's global scratch memory, which Kiln's C++ wrapper does not allocate"
        )));
    }
    let function = meta
        .get("name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or(name)
        .to_string();
    let path = std::fs::read_dir(folder)
        .map_err(|source| Error::Io {
            what: "list",
            path: folder.to_path_buf(),
            source,
        })?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .find(|file| file.starts_with(&format!("{name}.")) && !file.ends_with(".json"))
        .ok_or_else(|| {
            Error::Binaries(format!(
                "{} holds no binary of `{name}` beside its metadata",
                folder.display()
            ))
        })?;
    Ok(triton_cpp::Binary {
        path,
        function,
        shared,
        // Compiled with `launch_pdl`: it calls `griddepcontrol.wait` before it reads
        // what the kernel before it wrote.
        dependent: meta.get("launch_pdl").and_then(serde_json::Value::as_bool) == Some(true),
    })
}
