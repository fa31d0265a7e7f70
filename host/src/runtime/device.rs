//! Running a Triton device's C++ wrapper in-process (`host run --device
//! cuda`): the `wrapper.cpp` that `host compile --wrapper cpp` writes, built
//! with the system C++ compiler and the plugin's `cpp_build_flags`, loaded,
//! initialised from its folder (`kiln_init`), and called with host memory
//! (`kiln_run_host`, which copies in and out around one call). No Python runs
//! in this process.

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};

use super::{compile, Error, Loaded, OutputShapesFn, Prepared, Slot};
use crate::codegen::wrapper::triton_cpp;
use crate::graph::dtype::DType;
use crate::schedule::index::hints;
use crate::schedule::Scheduled;
use crate::tensor::Tensor;

type CountFn = unsafe extern "C" fn() -> i32;
type InitFn = unsafe extern "C" fn(*const c_char) -> i32;
type RunHostFn = unsafe extern "C" fn(*const *const u8, *const *mut u8) -> i32;
type ErrorFn = unsafe extern "C" fn() -> *const c_char;
type RankFn = unsafe extern "C" fn(i32) -> i32;
type SizeFn = unsafe extern "C" fn(i32, i32) -> i64;
type DtypeFn = unsafe extern "C" fn(i32) -> *const c_char;
type RunHostShapedFn =
    unsafe extern "C" fn(*const *const i64, *const *const u8, *const *mut u8) -> i32;

/// The entry points of a wrapper compiled for a range of sizes.
#[derive(Clone, Copy)]
struct Shaped {
    run_host: RunHostShapedFn,
    output_shapes: OutputShapesFn,
}

/// A loaded and initialised wrapper of a Triton device.
pub struct DeviceModule {
    // Never unloaded: the device driver's threads and the loaded kernels
    // outlive a call, and unloading under them is undefined.
    _lib: std::mem::ManuallyDrop<libloading::Library>,
    run_host: RunHostFn,
    /// For a wrapper of a range of sizes: the entry points that take them.
    shaped: Option<Shaped>,
    last_error: ErrorFn,
    path: PathBuf,
    /// The inputs and outputs at the example's sizes.
    inputs: Vec<Slot>,
    outputs: Vec<Slot>,
}

impl DeviceModule {
    /// Opens the library at `path`, built from `scheduled`'s wrapper, and
    /// calls `kiln_init(dir)`: `dir` holds `kernels/` and, for a graph with
    /// weights, `weights.safetensors`. Both may be removed once this returns.
    pub fn load(path: &Path, scheduled: &Scheduled, dir: &Path) -> Result<DeviceModule, Error> {
        let p = &scheduled.program;
        let load = |source| Error::Load {
            path: path.to_path_buf(),
            source,
        };
        let mismatch = |what: String| Error::Mismatch {
            path: path.to_path_buf(),
            what,
        };
        // SAFETY: the library is a wrapper Kiln generated and compiled; its
        // initialisers only set up static constants.
        let lib = unsafe { libloading::Library::new(path) }.map_err(load)?;
        // SAFETY: the symbols have the signatures `codegen/wrapper/triton_cpp` writes;
        // the ABI version is checked before any other is called.
        let abi = unsafe {
            let abi: libloading::Symbol<CountFn> = lib.get(b"kiln_abi_version\0").map_err(load)?;
            abi()
        };
        if abi != triton_cpp::ABI_VERSION {
            return Err(mismatch(format!(
                "ABI {abi}, expected ABI {}",
                triton_cpp::ABI_VERSION
            )));
        }
        // SAFETY: as above, for ABI 3.
        let (init, run_host, last_error, slots) = unsafe {
            let init: libloading::Symbol<InitFn> = lib.get(b"kiln_init\0").map_err(load)?;
            let run: libloading::Symbol<RunHostFn> = lib.get(b"kiln_run_host\0").map_err(load)?;
            let err: libloading::Symbol<ErrorFn> = lib.get(b"kiln_last_error\0").map_err(load)?;
            let mut slots = Vec::new();
            for what in ["input", "output"] {
                let symbol = |name: &str| format!("kiln_{what}_{name}\0").into_bytes();
                let count: libloading::Symbol<CountFn> =
                    lib.get(&symbol_count(what)).map_err(load)?;
                let rank: libloading::Symbol<RankFn> = lib.get(&symbol("rank")).map_err(load)?;
                let size: libloading::Symbol<SizeFn> = lib.get(&symbol("size")).map_err(load)?;
                let dtype: libloading::Symbol<DtypeFn> = lib.get(&symbol("dtype")).map_err(load)?;
                let mut these = Vec::new();
                for i in 0..count() {
                    let shape: Vec<i64> = (0..rank(i).max(0)).map(|d| size(i, d)).collect();
                    let name = dtype(i);
                    let name = if name.is_null() {
                        String::new()
                    } else {
                        CStr::from_ptr(name).to_string_lossy().into_owned()
                    };
                    these.push((shape, name));
                }
                slots.push(these);
            }
            (*init, *run, *err, slots)
        };
        let expected_inputs: Vec<Slot> = p
            .inputs
            .iter()
            .map(|b| dense(p.buffer(*b).dtype, &p.buffer(*b).shape_hint()))
            .collect();
        let expected_outputs: Vec<Slot> = p
            .outputs
            .iter()
            .map(|v| dense(p.buffer(v.buf).dtype, &hints(&v.shape)))
            .collect();
        // The wrapper describes a size that varies between calls as -1.
        let fixed = |shape: &[crate::schedule::index::Size]| -> Vec<i64> {
            shape.iter().map(|s| s.as_const().unwrap_or(-1)).collect()
        };
        let input_shapes: Vec<Vec<i64>> = p
            .inputs
            .iter()
            .map(|b| fixed(&p.buffer(*b).shape))
            .collect();
        let output_shapes: Vec<Vec<i64>> = p.outputs.iter().map(|v| fixed(&v.shape)).collect();
        for (what, found, expected, shapes) in [
            ("inputs", &slots[0], &expected_inputs, &input_shapes),
            ("outputs", &slots[1], &expected_outputs, &output_shapes),
        ] {
            let described: Vec<(Vec<i64>, String)> = expected
                .iter()
                .zip(shapes)
                .map(|(s, shape)| (shape.clone(), s.dtype.name().to_string()))
                .collect();
            if *found != described {
                return Err(mismatch(format!(
                    "its {what} are {found:?}, the compile's are {described:?}"
                )));
            }
        }
        let symbolic = !crate::codegen::wrapper::symbol_sources(p)
            .map_err(mismatch)?
            .is_empty();
        let shaped = if symbolic {
            // SAFETY: the signatures `codegen/wrapper/triton_cpp` writes for a range of sizes.
            unsafe {
                let run: libloading::Symbol<RunHostShapedFn> =
                    lib.get(b"kiln_run_host_shaped\0").map_err(load)?;
                let shapes: libloading::Symbol<OutputShapesFn> =
                    lib.get(b"kiln_output_shapes\0").map_err(load)?;
                Some(Shaped {
                    run_host: *run,
                    output_shapes: *shapes,
                })
            }
        } else {
            None
        };
        let dir_text = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| {
            mismatch(format!(
                "the folder {} has a NUL byte in its path",
                dir.display()
            ))
        })?;
        // SAFETY: a NUL-terminated path; kiln_init copies what it reads.
        let status = unsafe { init(dir_text.as_ptr()) };
        if status != 0 {
            return Err(Error::Device {
                what: format!("kiln_init({})", dir.display()),
                status,
                message: error_text(last_error),
            });
        }
        Ok(DeviceModule {
            _lib: std::mem::ManuallyDrop::new(lib),
            run_host,
            shaped,
            last_error,
            path: path.to_path_buf(),
            inputs: expected_inputs,
            outputs: expected_outputs,
        })
    }

    /// The library's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Loaded for DeviceModule {
    /// Lays out `inputs` (one per graph input, dense) for [`DeviceModule::call`].
    fn prepare(&self, inputs: &[Tensor]) -> Result<Prepared, Error> {
        match self.shaped {
            None => super::prepare(&self.inputs, &self.outputs, inputs),
            Some(shaped) => super::prepare_shaped(
                &self.inputs,
                &self.outputs,
                inputs,
                shaped.output_shapes,
                &|| error_text(self.last_error),
            ),
        }
    }

    /// Runs the program once: the inputs copied to the device, one call on
    /// its default stream, the outputs copied back.
    fn call(&self, prepared: &mut Prepared) -> Result<(), Error> {
        let shapes: Vec<*const i64> = prepared.input_shapes.iter().map(|s| s.as_ptr()).collect();
        let (ins, outs) = prepared.pointers();
        // SAFETY: one pointer per input and output, each spanning its dense
        // storage (laid out by `prepare` from the shapes checked at load, or, for
        // a range of sizes, at the sizes `shapes` gives and the library checks).
        let (status, what) = unsafe {
            match self.shaped {
                Some(shaped) => (
                    (shaped.run_host)(shapes.as_ptr(), ins.as_ptr(), outs.as_ptr()),
                    "kiln_run_host_shaped",
                ),
                None => (
                    (self.run_host)(ins.as_ptr(), outs.as_ptr()),
                    "kiln_run_host",
                ),
            }
        };
        match status {
            0 => Ok(()),
            4 if self.shaped.is_some() => Err(Error::Sizes(error_text(self.last_error))),
            _ => Err(Error::Device {
                what: what.into(),
                status,
                message: error_text(self.last_error),
            }),
        }
    }

    /// The outputs of the last call.
    fn outputs(&self, prepared: &mut Prepared) -> Vec<Tensor> {
        super::outputs(prepared)
    }
}

fn symbol_count(what: &str) -> Vec<u8> {
    format!("kiln_num_{what}s\0").into_bytes()
}

fn dense(dtype: DType, shape: &[i64]) -> Slot {
    Slot {
        dtype,
        shape: shape.to_vec(),
        strides: crate::graph::shape::contiguous_strides(shape),
    }
}

fn error_text(last_error: ErrorFn) -> String {
    // SAFETY: the library returns a NUL-terminated static buffer.
    unsafe {
        let p = last_error();
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// The compiler for a device wrapper: the environment's C++ compiler, with
/// the plugin's `cpp_build_flags` and `$KILN_DEVICE_CXXFLAGS` (split on
/// whitespace) after the source.
pub fn compiler(plugin_flags: &[String]) -> Result<compile::Compiler, Error> {
    let mut compiler = compile::Compiler::from_env()?;
    compiler.link = plugin_flags
        .iter()
        .cloned()
        .chain(
            std::env::var("KILN_DEVICE_CXXFLAGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from),
        )
        .collect();
    Ok(compiler)
}
