//! Opening one shared library and turning it into a [`Plugin`]: the
//! `abi_stable` layout check, the version handshake, the manifest checks and
//! `init`, in that order. Nothing here panics on a bad library: every failure
//! becomes a [`LoadError`] recorded against the path.

use std::path::{Path, PathBuf};

use abi_stable::abi_stability::abi_checking::{check_layout_compatibility, AbiInstabilityErrors};
use abi_stable::library::{lib_header_from_path, LibHeader, LibraryError};
use kiln_plugin_api::{is_valid_device_name, ApiVersion, KilnPluginRef, LoadContext, Manifest};

use super::library::Plugin;
use super::validate::one_line_problem;

/// Why a library could not be used as a plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The dynamic loader refused the file (not a shared library, missing dependencies, ...).
    #[error("cannot be opened as a shared library: {0}")]
    Open(String),
    /// The file was not opened: it is not a whole shared library for this
    /// machine (see `preflight`).
    #[error("not opened: {0}")]
    Unfit(String),
    /// `abi_stable`'s own version check failed: the plugin-api majors differ.
    #[error(
        "built against kiln-plugin-api {plugin}, but this host speaks kiln-plugin-api {host}: \
         rebuild the plugin against kiln-plugin-api {host_major}.x (same major, minor no newer than the host's)"
    )]
    AbiVersion {
        /// The plugin's plugin-api version, as `abi_stable` read it.
        plugin: String,
        /// The host's plugin-api version.
        host: String,
        /// The host's major version.
        host_major: u32,
    },
    /// `abi_stable`'s layout check failed: the types crossing the boundary differ.
    #[error("its ABI layout does not match this host's kiln-plugin-api {host}: {detail}")]
    Layout {
        /// The host's plugin-api version.
        host: String,
        /// `abi_stable`'s report, first line.
        detail: String,
    },
    /// The manifest's API version is not one this host accepts.
    #[error(
        "built against kiln-plugin-api {plugin}, but this host accepts {host_major}.0 to {host_major}.{host_minor} \
         (it speaks {host}): {what_to_do}"
    )]
    ApiVersion {
        /// The plugin's version.
        plugin: ApiVersion,
        /// The host's version.
        host: ApiVersion,
        /// The host's major.
        host_major: u32,
        /// The host's minor.
        host_minor: u32,
        /// What to rebuild.
        what_to_do: String,
    },
    /// The manifest is malformed.
    #[error("invalid manifest: {0}")]
    Manifest(String),
    /// The plugin's `manifest` or `init` returned an error.
    #[error("{0}")]
    Init(String),
    /// What the plugin returned failed load-time validation.
    #[error("failed validation: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

/// The result of trying one library.
#[derive(Debug)]
pub enum LoadOutcome {
    /// A working plugin.
    Loaded(Box<Plugin>),
    /// A shared library without Kiln's root module: skipped quietly.
    NotAPlugin(String),
    /// A Kiln plugin (or something claiming to be) that failed.
    Failed(LoadError),
    /// A valid manifest for a device name an earlier plugin already claimed.
    Shadowed {
        /// The device name claimed twice.
        name: String,
        /// The library that claimed it first.
        by: PathBuf,
    },
}

/// The host's plugin-api version.
pub fn host_api_version() -> ApiVersion {
    ApiVersion::CURRENT
}

/// Opens the library at `path` and returns its root module, without calling
/// anything in the plugin yet. Conformance uses this to test a plugin check by check.
///
/// `abi_stable`'s own layout checker runs first, but in Kiln's direction.
/// `abi_stable` assumes the loader is the older party (a library may have
/// *more* prefix fields than the loader knows). Kiln's rule is the reverse: a
/// newer host loads plugins built against an older, shorter root module, whose
/// missing fields read as "not provided"; a plugin with fields the host does
/// not know is too new. So the plugin's layout plays the interface and the
/// host's the implementation: every field the plugin has must match the host's
/// exactly, and the host may have more.
// `LoadOutcome` is large (it can hold a loaded `Plugin`), but these run once
// per library and callers match on the outcome itself, so it is not boxed
// (the same holds for `open_header` and `root_from_header`).
#[allow(clippy::result_large_err)]
pub fn open_root(path: &Path) -> Result<KilnPluginRef, LoadOutcome> {
    root_from_header(open_header(path)?)
}

/// The first half of [`open_root`]: checks the file is a whole shared library
/// for this machine (`preflight`: a truncated library would crash the
/// loader), opens it and finds `abi_stable`'s root-module header, without
/// checking its layout. A library without the symbol is
/// [`LoadOutcome::NotAPlugin`].
#[allow(clippy::result_large_err)]
pub fn open_header(path: &Path) -> Result<&'static LibHeader, LoadOutcome> {
    if let Some(problem) = super::preflight::problem(path) {
        return Err(LoadOutcome::Failed(LoadError::Unfit(problem)));
    }
    lib_header_from_path(path).map_err(classify)
}

/// The second half of [`open_root`]: the layout check in Kiln's direction
/// (see there) and the root module's initialisation.
#[allow(clippy::result_large_err)]
pub fn root_from_header(header: &'static LibHeader) -> Result<KilnPluginRef, LoadOutcome> {
    let host = host_api_version().to_string();
    let Some(plugin_layout) = header.layout() else {
        return Err(LoadOutcome::Failed(LoadError::Layout {
            host,
            detail: "the library was exported without a layout constant \
                     (#[unsafe_no_layout_constant]), so it cannot be checked"
                .to_string(),
        }));
    };
    let host_layout = <KilnPluginRef as abi_stable::StableAbi>::LAYOUT;
    if let Err(errors) = check_layout_compatibility(plugin_layout, host_layout) {
        return Err(LoadOutcome::Failed(LoadError::Layout {
            host,
            detail: layout_mismatch(&errors),
        }));
    }
    // SAFETY: the layout was checked just above, in the direction that makes
    // every field the plugin has identical to the host's; fields past the
    // plugin's prefix are only read through accessors that return `None`.
    unsafe { header.init_root_module_with_unchecked_layout::<KilnPluginRef>() }.map_err(classify)
}

/// What differs between the plugin's types and the host's, from
/// `abi_stable`'s structured report: each type whose layout differs, where it
/// is reached from, what differs, and what to rebuild against.
fn layout_mismatch(errors: &AbiInstabilityErrors) -> String {
    use abi_stable::abi_stability::abi_checking::AbiInstability as Ai;
    use abi_stable::type_layout::TLFieldOrFunction;
    let mut types: Vec<String> = vec![];
    // The plugin's kiln-plugin-api version, as its types record it.
    let mut plugin_version = None;
    // `abi_stable` also reports each enclosing type of a difference (with no
    // difference of its own): only the types that differ are named.
    for error in errors.errors.iter().filter(|e| !e.errs.is_empty()) {
        // The path from the root module to the type where the layouts part
        // (the plugin's side is `expected`: its layout is the interface).
        let fields: Vec<_> = error
            .stack_trace
            .iter()
            .filter_map(|step| match &step.expected {
                TLFieldOrFunction::Field(f) => Some(f),
                TLFieldOrFunction::Function(_) => None,
            })
            .collect();
        let path: Vec<&str> = fields
            .iter()
            .map(|f| f.name())
            // Unnamed steps: a reference's pointee, a function's parameter.
            .filter(|name| !name.is_empty() && *name != "0" && *name != ",")
            .collect();
        let layout = fields.last().map(|f| f.layout());
        if let Some(l) = layout.filter(|l| l.package().as_str() == "kiln-plugin-api") {
            plugin_version = Some(l.package_version().to_string());
        }
        let ty = layout.map_or("the root module", |l| l.name());
        let what: Vec<String> = error
            .errs
            .iter()
            .map(|e| match e {
                Ai::Size(ef) => format!("{} bytes, the host's {}", ef.expected, ef.found),
                Ai::Alignment(ef) => {
                    format!("alignment {}, the host's {}", ef.expected, ef.found)
                }
                Ai::FieldCountMismatch(ef) => {
                    format!("{} fields, the host's {}", ef.expected, ef.found)
                }
                Ai::UnexpectedField(ef) => format!(
                    "field `{}` where the host has `{}`",
                    ef.expected.name(),
                    ef.found.name()
                ),
                Ai::Name(ef) => format!("type {} where the host has {}", ef.expected, ef.found),
                Ai::TooManyVariants(ef) => {
                    format!("{} variants, the host's {}", ef.expected, ef.found)
                }
                Ai::UnexpectedVariant(ef) => format!(
                    "variant `{}` where the host has `{}`",
                    ef.expected, ef.found
                ),
                other => format!("{other:?}")
                    .split(['(', ' ', '{'])
                    .next()
                    .unwrap_or("a difference")
                    .to_string(),
            })
            .collect();
        let via = if path.is_empty() {
            String::new()
        } else {
            format!(" (reached through `{}`)", path.join("."))
        };
        let line = format!("`{ty}`{via} has {}", what.join(", "));
        if !types.contains(&line) {
            types.push(line);
        }
    }
    let host_version = host_api_version().to_string();
    let advice = match plugin_version {
        Some(v) if v == host_version => format!(
            "the plugin's kiln-plugin-api says it is {v}, the host's version, yet lays these \
             types out differently: it was built from a modified or unreleased copy; rebuild it \
             against the kiln-plugin-api {host_version} release this host was built with"
        ),
        Some(v) => format!(
            "the plugin was built against kiln-plugin-api {v}; rebuild it against \
             {host_version}, the version this host was built with"
        ),
        None => format!(
            "rebuild the plugin against kiln-plugin-api {host_version}, the version this host was built with"
        ),
    };
    if types.is_empty() {
        return format!("abi_stable's layout check failed; {advice}");
    }
    format!("{}; {advice}", types.join("; "))
}

fn classify(error: LibraryError) -> LoadOutcome {
    let host = host_api_version();
    match error {
        LibraryError::GetSymbolError { .. } => {
            LoadOutcome::NotAPlugin("no Kiln root module symbol".to_string())
        }
        LibraryError::OpenError { err, .. } => {
            LoadOutcome::Failed(LoadError::Open(err.to_string()))
        }
        LibraryError::IncompatibleVersionNumber { actual_version, .. } => {
            LoadOutcome::Failed(LoadError::AbiVersion {
                plugin: actual_version.to_string(),
                host: host.to_string(),
                host_major: host.major,
            })
        }
        LibraryError::Many(errors) => match errors.into_iter().next() {
            Some(first) => classify(first),
            None => LoadOutcome::Failed(LoadError::Layout {
                host: host.to_string(),
                detail: "abi_stable reported an empty list of errors".to_string(),
            }),
        },
        other => {
            let text = other.to_string();
            let detail = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("no detail")
                .to_string();
            LoadOutcome::Failed(LoadError::Layout {
                host: host.to_string(),
                detail,
            })
        }
    }
}

/// Calls the plugin's `manifest` and returns it unchecked (conformance checks
/// its parts one by one; everyone else wants [`read_manifest`]).
pub fn raw_manifest(root: KilnPluginRef) -> Result<Manifest, LoadError> {
    root.manifest()()
        .into_result()
        .map_err(|e| LoadError::Init(format!("`manifest` failed: {}", e.message)))
}

/// Reads and checks the manifest: API version handshake, name grammar, semver.
pub fn read_manifest(root: KilnPluginRef) -> Result<(Manifest, semver::Version), LoadError> {
    let manifest = raw_manifest(root)?;
    check_api_version(manifest.api_version)?;
    if !is_valid_device_name(&manifest.name) {
        return Err(LoadError::Manifest(format!(
            "device name {:?} does not match ^[a-z][a-z0-9_]{{0,31}}$ (PyTorch's PrivateUse1 rule)",
            manifest.name.as_str()
        )));
    }
    let version = semver::Version::parse(&manifest.version).map_err(|e| {
        LoadError::Manifest(format!(
            "plugin version {:?} is not semver: {e}",
            manifest.version.as_str()
        ))
    })?;
    for (field, value) in [
        ("vendor", &manifest.vendor),
        ("description", &manifest.description),
    ] {
        if let Some(problem) = one_line_problem(value) {
            return Err(LoadError::Manifest(format!("{field} {problem}")));
        }
    }
    Ok((manifest, version))
}

/// The handshake: same major, minor no newer than the host's.
pub fn check_api_version(plugin: ApiVersion) -> Result<(), LoadError> {
    let host = host_api_version();
    if plugin.major == host.major && plugin.minor <= host.minor {
        return Ok(());
    }
    let what_to_do = if plugin.major != host.major {
        format!(
            "rebuild the plugin against kiln-plugin-api {}.{}, or use a host built for kiln-plugin-api {}.x",
            host.major, host.minor, plugin.major
        )
    } else {
        format!(
            "the plugin needs a newer host (kiln-plugin-api {}.{} or later); upgrade the host, \
             or rebuild the plugin against kiln-plugin-api {}.{}",
            plugin.major, plugin.minor, host.major, host.minor
        )
    };
    Err(LoadError::ApiVersion {
        plugin,
        host,
        host_major: host.major,
        host_minor: host.minor,
        what_to_do,
    })
}

/// Calls the plugin's `init` with its own path.
pub fn init(root: KilnPluginRef, path: &Path) -> Result<(), LoadError> {
    let ctx = LoadContext {
        library_path: path.to_string_lossy().into_owned().into(),
        host_version: env!("CARGO_PKG_VERSION").into(),
    };
    root.init()(&ctx)
        .into_result()
        .map_err(|e| LoadError::Init(e.message.into_string()))
}

/// Loads, checks, initialises and validates one library.
pub fn load_library(path: &Path) -> LoadOutcome {
    load_unclaimed(path, |_| None)
}

/// Like [`load_library`], but a device name for which `claimed` returns the
/// path of an earlier plugin is reported as shadowed, before `init` runs.
pub fn load_unclaimed(path: &Path, claimed: impl Fn(&str) -> Option<PathBuf>) -> LoadOutcome {
    let path: PathBuf = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let root = match open_root(&path) {
        Ok(root) => root,
        Err(outcome) => return outcome,
    };
    let (manifest, version) = match read_manifest(root) {
        Ok(m) => m,
        Err(e) => return LoadOutcome::Failed(e),
    };
    if let Some(by) = claimed(&manifest.name) {
        return LoadOutcome::Shadowed {
            name: manifest.name.into_string(),
            by,
        };
    }
    if let Err(e) = init(root, &path) {
        return LoadOutcome::Failed(e);
    }
    let plugin = Plugin::new(path, manifest, version, root);
    let problems = super::validate::validate(&plugin);
    if problems.is_empty() {
        LoadOutcome::Loaded(Box::new(plugin))
    } else {
        LoadOutcome::Failed(LoadError::Invalid(problems))
    }
}
