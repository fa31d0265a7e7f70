//! Code generation. Every generator has the same module shape: options, an
//! error type and one entry function, a writer into `fmt::Write`, and the
//! shared [`namer::Namer`] for every name that comes from an input file.
//! Code generation never touches a device: it only asks the plugin for strings
//! and numbers.

pub mod cpp;
pub mod keywords;
pub mod namer;
pub mod triton;
pub mod wrapper;

use crate::plugins::{Override, OverrideArgs, Plugin, WrapperKind};
use crate::schedule::Scheduled;

/// Why code could not be generated for a device.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin lacks something the chosen wrapper needs.
    #[error(
        "plugin `{plugin}` ({path}) does not provide `{method}`, which the {wrapper} wrapper needs; \
         implement it in the plugin or choose another wrapper"
    )]
    MissingOverride {
        /// The device.
        plugin: String,
        /// Its library.
        path: String,
        /// The `DeviceOpOverrides` method.
        method: &'static str,
        /// Which wrapper.
        wrapper: &'static str,
    },
    /// The plugin does not support the wrapper or the scheduling kind.
    #[error("plugin `{plugin}`: {what}")]
    Unsupported {
        /// The device.
        plugin: String,
        /// What.
        what: String,
    },
    /// A call into the plugin failed.
    #[error(transparent)]
    Plugin(#[from] crate::plugins::CallError),
    /// Triton kernel generation failed.
    #[error(transparent)]
    Triton(#[from] triton::Error),
    /// C++ kernel generation failed.
    #[error(transparent)]
    Cpp(#[from] cpp::Error),
    /// The C++ wrapper could not be written.
    #[error(transparent)]
    CppWrapper(#[from] wrapper::cpp::Error),
    /// Writing text failed.
    #[error("formatting the wrapper failed")]
    Fmt(#[from] std::fmt::Error),
}

/// Generated files.
#[derive(Debug, Clone)]
pub struct Output {
    /// `output_code.py`.
    pub output_code: String,
    /// Launch information of every kernel, in order.
    pub kernels: Vec<triton::KernelInfo>,
}

fn required(plugin: &Plugin, which: Override, wrapper: &'static str) -> Result<String, Error> {
    match plugin.override_text(which, &OverrideArgs::default())? {
        Some(text) => Ok(text),
        None => Err(Error::MissingOverride {
            plugin: plugin.name().to_string(),
            path: plugin.path().display().to_string(),
            method: which.name(),
            wrapper,
        }),
    }
}

/// `output_code.py` (Triton kernels and a Python wrapper) for a Triton device.
pub fn python_triton(
    scheduled: &Scheduled,
    plugin: &Plugin,
    options: &triton::Options,
) -> Result<Output, Error> {
    let spec = plugin.backend_spec()?.ok_or_else(|| Error::Unsupported {
        plugin: plugin.name().to_string(),
        what: "it provides no backend spec (scheduling kind and wrappers)".into(),
    })?;
    if spec.scheduling != kiln_plugin_api::SchedulingKind::Triton {
        return Err(Error::Unsupported {
            plugin: plugin.name().to_string(),
            what: format!(
                "it schedules `{}` kernels; Triton kernels and output_code.py are for Triton devices",
                spec.scheduling.name()
            ),
        });
    }
    if !spec.wrappers.contains(kiln_plugin_api::Wrappers::PYTHON) {
        return Err(Error::Unsupported {
            plugin: plugin.name().to_string(),
            what: "it does not support the Python wrapper".into(),
        });
    }
    for which in crate::plugins::requirements::required_overrides(&spec, WrapperKind::Python) {
        required(plugin, which, "Python")?;
    }
    let strings = wrapper::python::DeviceStrings {
        device: plugin.name().to_string(),
        import_raw_stream: required(plugin, Override::ImportGetRawStreamAs, "Python")?,
        set_device: required(plugin, Override::SetDevice, "Python")?,
        synchronize: required(plugin, Override::Synchronize, "Python")?,
        device_guard: required(plugin, Override::DeviceGuard, "Python")?,
        plugin: format!("{} {}", plugin.name(), plugin.version()),
    };
    let mut namer = namer::Namer::new();
    let kernels = triton::write_kernels(&scheduled.program, plugin, options, &mut namer)?;
    let output_code = wrapper::python::write(scheduled, &kernels, &strings, &mut namer)?;
    Ok(Output {
        output_code,
        kernels: kernels.into_iter().map(|k| k.info).collect(),
    })
}

/// Generated C++ for a C++-scheduled device.
#[derive(Debug, Clone)]
pub struct CppOutput {
    /// `wrapper.cpp`: kernels, prelude and the `kiln_call` entry point.
    pub source: String,
    /// Call information of every kernel, in order.
    pub kernels: Vec<cpp::KernelInfo>,
}

/// `wrapper.cpp` (C++/OpenMP kernels and a C++ wrapper) for a C++-scheduled
/// device such as `cpu`, built on the plugin's `kernel_header`.
pub fn cpp_wrapper(scheduled: &Scheduled, plugin: &Plugin) -> Result<CppOutput, Error> {
    cpp_wrapper_with(scheduled, plugin, &cpp::CppOptions::default())
}

/// [`cpp_wrapper`] with explicit code-generation options.
pub fn cpp_wrapper_with(
    scheduled: &Scheduled,
    plugin: &Plugin,
    options: &cpp::CppOptions,
) -> Result<CppOutput, Error> {
    let spec = plugin.backend_spec()?.ok_or_else(|| Error::Unsupported {
        plugin: plugin.name().to_string(),
        what: "it provides no backend spec (scheduling kind and wrappers)".into(),
    })?;
    if spec.scheduling != kiln_plugin_api::SchedulingKind::Cpp {
        return Err(Error::Unsupported {
            plugin: plugin.name().to_string(),
            what: format!(
                "it schedules `{}` kernels; C++/OpenMP kernels are for `cpp`-scheduled devices",
                spec.scheduling.name()
            ),
        });
    }
    if !spec.wrappers.contains(kiln_plugin_api::Wrappers::CPP) {
        return Err(Error::Unsupported {
            plugin: plugin.name().to_string(),
            what: "it does not support the C++ wrapper".into(),
        });
    }
    for which in crate::plugins::requirements::required_overrides(&spec, WrapperKind::Cpp) {
        required(plugin, which, "C++")?;
    }
    let header = required(plugin, Override::KernelHeader, "C++")?;
    let mut namer = namer::Namer::new();
    let kernels = cpp::write_kernels(&scheduled.program, plugin, options, &mut namer)?;
    let origin = format!("{} {}", plugin.name(), plugin.version());
    let source = wrapper::cpp::write(scheduled, &kernels, &header, &origin, &mut namer)?;
    Ok(CppOutput {
        source,
        kernels: kernels.into_iter().map(|k| k.info).collect(),
    })
}
