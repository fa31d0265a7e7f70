//! The system C++ compiler and the compile cache.
//!
//! The compiler is `$CXX`, else the first of `c++`, `g++`, `clang++` on the
//! `PATH`. Flags are [`DEFAULT_FLAGS`] (replaced by
//! `$KILN_CXXFLAGS` when set) plus `-std=c++17 -shared -fPIC`, which a loadable
//! library always needs. Libraries are cached in `$KILN_CACHE_DIR` (default
//! `~/.cache/kiln`) under the SHA-256 of the source, the headers it includes,
//! the flags and the compiler's `--version` output, and written atomically (a
//! temporary file renamed into place), so concurrent runs never see half a
//! library. The cpu runtime's headers (`kiln/*.h`, which a cpu `wrapper.cpp`
//! includes) are written once into `runtime/<hash of the headers>/` in the
//! cache, which the compiler searches for quoted includes (`-iquote`).
//!
//! Parts of the runtime that a cpu library would otherwise compile again
//! every time (the matrix product of a dtype: [`Linked`]) are compiled once
//! per compiler, flags and runtime into `objects/` of the cache and linked
//! into every library that uses them ([`build_linked`]). A cold build runs
//! those objects' compilers in parallel with the generated file's, then links.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::codegen::cpp::runtime::{self, Header, Linked};
pub use crate::codegen::cpp::{DEFAULT_FLAGS, REQUIRED_FLAGS};

/// Why a library could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No compiler could be run.
    #[error("no C++ compiler: {0}; install g++ or clang++, or set CXX to a C++ compiler")]
    NoCompiler(String),
    /// The compiler rejected the source.
    #[error(
        "the C++ compiler failed ({compiler} {flags}); the generated source is kept at {source_path}\n{message}"
    )]
    Compile {
        /// The compiler command.
        compiler: String,
        /// The flags.
        flags: String,
        /// Where the source is.
        source_path: PathBuf,
        /// The compiler's output.
        message: String,
    },
    /// The cache folder could not be used.
    #[error("compile cache {path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A C++ compiler and its flags.
#[derive(Clone, Debug)]
pub struct Compiler {
    /// The program.
    pub program: String,
    /// `--version` output (part of the cache key).
    pub version: String,
    /// Every flag, in order.
    pub flags: Vec<String>,
    /// Flags after the source file: libraries and their folders (a device
    /// plugin's `cpp_build_flags`), which linkers read in order.
    pub link: Vec<String>,
}

impl Compiler {
    /// The compiler from the environment (`CXX`, `KILN_CXXFLAGS`).
    pub fn from_env() -> Result<Compiler, Error> {
        let candidates: Vec<String> = match std::env::var("CXX") {
            Ok(cxx) if !cxx.trim().is_empty() => vec![cxx],
            _ => ["c++", "g++", "clang++"].map(String::from).to_vec(),
        };
        let mut tried = Vec::new();
        for program in candidates {
            match Command::new(&program).arg("--version").output() {
                Ok(out) if out.status.success() => {
                    let flags = std::env::var("KILN_CXXFLAGS")
                        .unwrap_or_else(|_| DEFAULT_FLAGS.to_string())
                        .split_whitespace()
                        .map(String::from)
                        .chain(REQUIRED_FLAGS.iter().map(|f| f.to_string()))
                        .collect();
                    return Ok(Compiler {
                        program,
                        version: String::from_utf8_lossy(&out.stdout).into_owned(),
                        flags,
                        link: Vec::new(),
                    });
                }
                Ok(out) => tried.push(format!("`{program} --version` exited with {}", out.status)),
                Err(e) => tried.push(format!("cannot run `{program}`: {e}")),
            }
        }
        Err(Error::NoCompiler(tried.join("; ")))
    }
}

/// The cache folder: `$KILN_CACHE_DIR`, else `~/.cache/kiln`, else a folder
/// in the system's temporary directory.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KILN_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("kiln"),
        None => std::env::temp_dir().join("kiln-cache"),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, renamed.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = temp_beside(path);
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

fn temp_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    path.with_file_name(format!(".{name}.{}.{nanos}.tmp", std::process::id()))
}

/// A compiled library and whether it came from the cache.
#[derive(Clone, Debug)]
pub struct Built {
    /// The shared library.
    pub library: PathBuf,
    /// The source it was built from (kept beside it).
    pub source: PathBuf,
    /// Whether it was already in the cache.
    pub cached: bool,
    /// The runtime objects linked into it, in the order given.
    pub linked: Vec<Object>,
}

/// A runtime object of the cache ([`Linked`]).
#[derive(Clone, Debug)]
pub struct Object {
    /// The object file.
    pub path: PathBuf,
    /// Whether it was already in the cache (built by an earlier library).
    pub cached: bool,
}

/// The first 16 bytes of the SHA-256 of `parts` (each ended by a zero byte),
/// in hex.
fn key_of<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    let digest = hasher.finalize();
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// The cache key of what `compiler` builds from `source` with `headers` and
/// `extra` flags: everything that can change the result.
fn unit_key(source: &str, headers: &[Header], compiler: &Compiler, extra: &[String]) -> String {
    let flags = compiler.flags.join(" ");
    let link = compiler.link.join(" ");
    let extra = extra.join(" ");
    key_of(
        [
            source,
            &flags,
            &extra,
            &link,
            &compiler.program,
            &compiler.version,
        ]
        .into_iter()
        .chain(headers.iter().flat_map(|h| [h.path, h.text])),
    )
}

/// The cache key of the library built from `source` with `headers` by
/// `compiler`, linking `linked`: everything that can change the library.
fn library_key(source: &str, headers: &[Header], compiler: &Compiler, linked: &[Linked]) -> String {
    let mut extra = Vec::new();
    for part in linked {
        extra.push(part.source.clone());
        extra.extend(part.object_flags.iter().cloned());
        extra.extend(part.library_flags.iter().cloned());
    }
    unit_key(source, headers, compiler, &extra)
}

/// The folder of the cache holding `headers` at their paths, written now if
/// absent (in a folder of its own renamed into place, so that concurrent
/// runs never see half of it). Named by the headers' hash: a Kiln with other
/// headers uses another folder.
fn header_folder(headers: &[Header], dir: &Path) -> Result<PathBuf, Error> {
    let key = key_of(headers.iter().flat_map(|h| [h.path, h.text]));
    let runtime = dir.join("runtime");
    let folder = runtime.join(&key);
    if folder.is_dir() {
        return Ok(folder);
    }
    let staging = temp_beside(&folder);
    for h in headers {
        let path = staging.join(h.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, h.text).map_err(io(&path))?;
    }
    if let Err(e) = std::fs::rename(&staging, &folder) {
        let _ = std::fs::remove_dir_all(&staging);
        // Another run wrote the same headers first.
        if !folder.is_dir() {
            return Err(io(&folder)(e));
        }
    }
    Ok(folder)
}

/// Compiles `source` into a shared library in `dir`, or finds it there. The
/// source may include the cpu runtime's headers (`#include "kiln/scalar.h"`,
/// as every cpu `wrapper.cpp` does): they are part of the cache key, and the
/// compiler finds them in the cache's copy ([`header_folder`]).
pub fn build(source: &str, compiler: &Compiler, dir: &Path) -> Result<Built, Error> {
    build_linked(source, &[], compiler, dir)
}

/// [`build`], linking the runtime objects `linked` into the library instead
/// of compiling those parts into it. Each object is built once per compiler,
/// flags, runtime headers and object source, in `objects/` of `dir`, and
/// reused by every later library. Objects missing from the cache compile in
/// parallel with `source` (each in a process of its own), and the library
/// is linked from them; every file appears under its name only once whole.
pub fn build_linked(
    source: &str,
    linked: &[Linked],
    compiler: &Compiler,
    dir: &Path,
) -> Result<Built, Error> {
    let headers = &runtime::HEADERS;
    let key = library_key(source, headers, compiler, linked);
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let library = dir.join(format!("kiln_{key}{}", std::env::consts::DLL_SUFFIX));
    let source_path = dir.join(format!("kiln_{key}.cpp"));
    let objects = linked
        .iter()
        .map(|part| {
            let key = unit_key(&part.source, headers, compiler, &part.object_flags);
            let path = dir
                .join("objects")
                .join(format!("kiln_{}_{key}.o", part.name));
            let cached = path.is_file();
            Object { path, cached }
        })
        .collect::<Vec<_>>();
    if library.is_file() {
        return Ok(Built {
            library,
            source: source_path,
            cached: true,
            linked: objects,
        });
    }
    write_atomic(&source_path, source.as_bytes())?;
    let include = [
        "-iquote".to_string(),
        header_folder(headers, dir)?.display().to_string(),
    ];
    let mut jobs = Vec::new();
    for (part, object) in linked.iter().zip(&objects) {
        if object.cached {
            tracing::debug!("runtime object {} reused", object.path.display());
            continue;
        }
        let folder = dir.join("objects");
        std::fs::create_dir_all(&folder).map_err(io(&folder))?;
        let part_source = object.path.with_extension("cpp");
        write_atomic(&part_source, part.source.as_bytes())?;
        let flags = object_flags(&compiler.flags, &[&part.object_flags, &include]);
        let unit = Unit::compiled(part_source, flags);
        jobs.push(Job::start(compiler, unit, &object.path)?);
    }
    let mut flags = compiler.flags.clone();
    flags.extend(linked.iter().flat_map(|p| p.library_flags.iter().cloned()));
    flags.extend(include);
    let objects_now: Vec<String> = objects
        .iter()
        .map(|o| o.path.display().to_string())
        .collect();
    if jobs.is_empty() {
        // Every object is there: compile and link in one step.
        let mut unit = Unit::compiled(source_path.clone(), flags);
        unit.inputs.extend(objects_now);
        unit.inputs.extend(compiler.link.iter().cloned());
        Job::start(compiler, unit, &library)?.finish()?;
    } else {
        let own = dir.join("objects").join(format!("kiln_{key}.o"));
        let unit = Unit::compiled(source_path.clone(), object_flags(&flags, &[]));
        jobs.push(Job::start(compiler, unit, &own)?);
        // Every job is waited for before the first failure is reported, so
        // that no compiler outlives this call.
        let finished: Vec<Result<(), Error>> = jobs.into_iter().map(Job::finish).collect();
        finished.into_iter().collect::<Result<(), Error>>()?;
        let mut unit = Unit::compiled(own.clone(), compiler.flags.clone());
        unit.kept = source_path.clone();
        unit.inputs.extend(objects_now);
        unit.inputs.extend(compiler.link.iter().cloned());
        let linking = Job::start(compiler, unit, &library).and_then(Job::finish);
        let _ = std::fs::remove_file(&own);
        linking?;
    }
    Ok(Built {
        library,
        source: source_path,
        cached: false,
        linked: objects,
    })
}

/// `flags` for a unit compiled into an object file: without `-shared`, with
/// `extra`, and `-c`.
fn object_flags(flags: &[String], extra: &[&[String]]) -> Vec<String> {
    flags
        .iter()
        .filter(|f| *f != "-shared")
        .chain(extra.iter().flat_map(|e| e.iter()))
        .cloned()
        .chain(["-c".to_string()])
        .collect()
}

/// One command of a build: the compiler's flags, its first input, the rest
/// (objects, libraries), and the source an error points at.
struct Unit {
    flags: Vec<String>,
    first: PathBuf,
    inputs: Vec<String>,
    kept: PathBuf,
}

impl Unit {
    fn compiled(source: PathBuf, flags: Vec<String>) -> Unit {
        Unit {
            flags,
            first: source.clone(),
            inputs: Vec::new(),
            kept: source,
        }
    }
}

/// A compiler running, writing a temporary file that [`Job::finish`] renames
/// to `out` once it succeeded.
struct Job {
    child: std::process::Child,
    program: String,
    unit: Unit,
    tmp: PathBuf,
    out: PathBuf,
}

impl Job {
    fn start(compiler: &Compiler, unit: Unit, out: &Path) -> Result<Job, Error> {
        let tmp = temp_beside(out);
        let child = Command::new(&compiler.program)
            .args(&unit.flags)
            .arg(&unit.first)
            .args(&unit.inputs)
            .arg("-o")
            .arg(&tmp)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| Error::NoCompiler(format!("cannot run `{}`: {e}", compiler.program)))?;
        Ok(Job {
            child,
            program: compiler.program.clone(),
            unit,
            tmp,
            out: out.to_path_buf(),
        })
    }

    fn finish(self) -> Result<(), Error> {
        let Job {
            child,
            program,
            unit,
            tmp,
            out,
        } = self;
        let output = child
            .wait_with_output()
            .map_err(|e| Error::NoCompiler(format!("cannot wait for `{program}`: {e}")))?;
        if output.status.success() {
            return std::fs::rename(&tmp, &out).map_err(io(&out));
        }
        let _ = std::fs::remove_file(&tmp);
        let mut message = String::from_utf8_lossy(&output.stderr).into_owned();
        message.push_str(&String::from_utf8_lossy(&output.stdout));
        Err(Error::Compile {
            compiler: program,
            flags: unit
                .flags
                .iter()
                .cloned()
                .chain([unit.first.display().to_string()])
                .chain(unit.inputs)
                .collect::<Vec<_>>()
                .join(" "),
            source_path: unit.kept,
            message: message.trim_end().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_changes_with_every_input_of_the_build_and_a_header_changes_its_folder() {
        let compiler = Compiler {
            program: "c++".into(),
            version: "c++ 12".into(),
            flags: vec!["-O3".into()],
            link: Vec::new(),
        };
        let headers = runtime::HEADERS;
        let linked = Linked {
            name: "mm_f32",
            source: "int g() { return 1; }".into(),
            object_flags: Vec::new(),
            library_flags: vec!["-DX".into()],
        };
        let base = library_key("int f();", &headers, &compiler, &[]);
        let mut edited = headers;
        edited[0].text = "// another scalar.h";
        let mut other = compiler.clone();
        other.flags.push("-DX".into());
        for (what, key) in [
            (
                "the source",
                library_key("int g();", &headers, &compiler, &[]),
            ),
            ("a header", library_key("int f();", &edited, &compiler, &[])),
            ("the flags", library_key("int f();", &headers, &other, &[])),
            (
                "a linked object",
                library_key("int f();", &headers, &compiler, &[linked]),
            ),
        ] {
            assert_ne!(key, base, "{what} changed, the key did not");
        }
        assert_eq!(base, library_key("int f();", &headers, &compiler, &[]));
        let dir = std::env::temp_dir().join(format!("kiln-compile-key-{}", std::process::id()));
        let one = header_folder(&headers, &dir).expect("headers written");
        let two = header_folder(&edited, &dir).expect("headers written");
        assert_ne!(one, two);
        for (folder, h) in [(&one, headers[0]), (&two, edited[0])] {
            let text = std::fs::read_to_string(folder.join(h.path)).expect("header there");
            assert_eq!(text, h.text);
        }
        assert_eq!(header_folder(&headers, &dir).expect("found again"), one);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
