//! What each wrapper generator needs from a device's `DeviceOpOverrides`.
//!
//! This is the one list: `host conformance` checks a plugin against it, and
//! the wrapper code generators use it to refuse a device that lacks something
//! before they write a line. It must never call into a plugin: it only
//! reasons about the plugin's declared [`BackendSpec`].

use kiln_plugin_api::{BackendSpec, SchedulingKind};

use super::library::Override;
use super::registry::WrapperKind;

/// The overrides a wrapper of kind `wrapper` calls for a device with this
/// backend spec, in [`Override::ALL`] order. Every one must return `Some`.
///
/// - The Python wrapper of a Triton-scheduled device imports the raw-stream
///   getter, sets and guards the device and synchronises it (Inductor's
///   `PythonWrapperCodegen`). A C++-scheduled device's Python wrapper calls
///   compiled host code directly and needs none of them.
/// - The C++ wrapper always needs the kernel header. A Triton device's C++
///   wrapper (Inductor's `CppWrapperGpu`) also guards the device and its
///   stream, loads and launches kernels itself, and so needs the device and
///   stream guards, the kernel driver and the C++ names of kernels, device
///   pointers, streams and the AOTI stream getter. A C++-scheduled device runs
///   on the host: like PyTorch's `CppWrapperCpu`, its wrapper has no device to
///   guard and no stream, so it needs the header alone.
pub fn required_overrides(spec: &BackendSpec, wrapper: WrapperKind) -> Vec<Override> {
    let triton = spec.scheduling == SchedulingKind::Triton;
    let mut needed = match wrapper {
        WrapperKind::Python if triton => vec![
            Override::ImportGetRawStreamAs,
            Override::SetDevice,
            Override::Synchronize,
            Override::DeviceGuard,
        ],
        WrapperKind::Python => Vec::new(),
        WrapperKind::Cpp => {
            let mut cpp = vec![Override::KernelHeader];
            if triton {
                cpp.extend([
                    Override::CppDeviceGuard,
                    Override::CppStreamGuard,
                    Override::KernelDriver,
                    Override::CppStreamType,
                    Override::AotiGetStream,
                    Override::CppKernelType,
                    Override::CppDevicePtr,
                ]);
            }
            cpp
        }
    };
    needed.sort_by_key(|o| Override::ALL.iter().position(|a| a == o));
    needed
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_plugin_api::{BackendFeatures, Wrappers};

    fn spec(scheduling: SchedulingKind) -> BackendSpec {
        BackendSpec {
            scheduling,
            wrappers: Wrappers::PYTHON | Wrappers::CPP,
            features: BackendFeatures::empty(),
        }
    }

    fn names(list: Vec<Override>) -> Vec<&'static str> {
        list.into_iter().map(Override::name).collect()
    }

    #[test]
    fn triton_python_wrapper_needs_the_four_python_strings() {
        assert_eq!(
            names(required_overrides(
                &spec(SchedulingKind::Triton),
                WrapperKind::Python
            )),
            [
                "import_get_raw_stream_as",
                "set_device",
                "synchronize",
                "device_guard"
            ]
        );
    }

    #[test]
    fn cpp_wrapper_needs_streams_and_driver_only_for_triton_devices() {
        let gpu = names(required_overrides(
            &spec(SchedulingKind::Triton),
            WrapperKind::Cpp,
        ));
        assert_eq!(
            gpu,
            [
                "cpp_device_guard",
                "cpp_stream_guard",
                "kernel_header",
                "kernel_driver",
                "cpp_stream_type",
                "aoti_get_stream",
                "cpp_kernel_type",
                "cpp_device_ptr"
            ]
        );
        let cpu = names(required_overrides(
            &spec(SchedulingKind::Cpp),
            WrapperKind::Cpp,
        ));
        assert_eq!(cpu, ["kernel_header"]);
        assert!(required_overrides(&spec(SchedulingKind::Cpp), WrapperKind::Python).is_empty());
    }
}
