//! Plugin discovery, loading, validation and the device registry.
//!
//! This is the only module that calls into plugin libraries. It turns the
//! ABI's `R*` types into plain Rust and every failure into a recorded reason;
//! it must never let a broken library stop the others from loading, and never
//! hold a device's numbers of its own beyond [`defaults`]: what the host
//! assumes where a plugin says nothing, each value with why.

pub mod cpp_text;
pub mod defaults;
pub mod discovery;
pub mod library;
pub mod load;
pub mod preflight;
pub mod registry;
pub mod requirements;
pub mod search;
pub mod validate;

pub use discovery::discover;
pub use library::{CallError, Override, OverrideArgs, Plugin, ScratchCodeOwned, TritonTargetOwned};
pub use load::{host_api_version, load_library, LoadError, LoadOutcome};
pub use registry::{Registry, Rejected, Shadowed, WrapperKind};
pub use requirements::required_overrides;
pub use search::{search_path, Origin, SearchEntry, SearchProblem, PLUGIN_PATH_VAR};

/// Discovers every plugin on the default search path for these `--plugins` folders.
pub fn discover_default(flags: &[std::path::PathBuf]) -> Registry {
    discover(&search_path(flags))
}
