//! Running generated code: the compile cache ([`compile`]), a loaded library
//! whose `kiln_call` runs a scheduled program on tensors (a Triton device's
//! C++ wrapper: [`device`]), and Triton compiling a C++ wrapper's kernels
//! ahead of time ([`ahead`], the one step from a compile to `wrapper.cpp`),
//! with the Python that [`python`] finds.
//!
//! This is the only module that executes generated code; code generation
//! never does. Tensors cross the boundary as dense little-endian storage in
//! their dtype (float16/bfloat16 as raw bits), 8-byte aligned.

pub mod ahead;
pub mod compile;
pub mod device;
pub mod python;

use std::path::{Path, PathBuf};

use crate::codegen::weights::Weights;
use crate::graph::dtype::DType;
use crate::graph::ops::ConstData;
use crate::schedule::index::hints;
use crate::schedule::Scheduled;
use crate::tensor::Tensor;

/// Why a compiled program could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Building the library failed.
    #[error(transparent)]
    Compile(#[from] compile::Error),
    /// The library could not be opened or lacks an entry point.
    #[error("cannot load {path}")]
    Load {
        /// The library.
        path: PathBuf,
        /// Why.
        #[source]
        source: libloading::Error,
    },
    /// The library is not the program it should be.
    #[error("{path}: {what}")]
    Mismatch {
        /// The library.
        path: PathBuf,
        /// What differs.
        what: String,
    },
    /// An input does not fit the graph.
    #[error("input {index}: expected {expected}, got {found}")]
    Input {
        /// Position.
        index: usize,
        /// What the graph declares.
        expected: String,
        /// What was given.
        found: String,
    },
    /// `kiln_call` reported that an index tensor held a value out of range.
    #[error("the compiled program read an index out of range: a value of an index tensor (embedding, index or gather) lies outside the dim it indexes; check the inputs (token ids from 0 to below the vocabulary size, say: an embedding takes no negative id)")]
    IndexOutOfRange,
    /// The weights could not be loaded.
    #[error("{0}")]
    Weights(String),
    /// `kiln_call` reported that no weights were loaded.
    #[error("the compiled program was called before its weights were loaded (kiln_load_weights or kiln_set_weights)")]
    NoWeights,
    /// A library compiled for a range of sizes refused the inputs' sizes.
    #[error("the compiled program refused the inputs' sizes: {0}")]
    Sizes(String),
    /// `kiln_call` reported a failure.
    #[error("the compiled program failed with status {0} (out of memory)")]
    Call(i32),
    /// A device wrapper's entry point failed (`kiln_init`, `kiln_run_host`).
    #[error("{what} failed with status {status}: {message}")]
    Device {
        /// The entry point, with its arguments.
        what: String,
        /// Its return code.
        status: i32,
        /// `kiln_last_error()`.
        message: String,
    },
}

type CallFn = unsafe extern "C" fn(*const *const u8, *const *mut u8) -> i32;
type CountFn = unsafe extern "C" fn() -> i32;
type SetWeightsFn = unsafe extern "C" fn(*const *const u8) -> i32;
type LoadWeightsFn = unsafe extern "C" fn(*const std::ffi::c_char) -> i32;
type ErrorFn = unsafe extern "C" fn() -> *const std::ffi::c_char;
type NameFn = unsafe extern "C" fn(i32) -> *const std::ffi::c_char;
type ShapedCallFn =
    unsafe extern "C" fn(*const *const i64, *const *const u8, *const *mut u8) -> i32;
type OutputShapesFn = unsafe extern "C" fn(*const *const i64, *const *mut i64) -> i32;

/// The entry points of a library compiled for a range of sizes
/// (`codegen/wrapper/cpp/sizes.rs`).
#[derive(Clone, Copy)]
struct Shaped {
    call: ShapedCallFn,
    output_shapes: OutputShapesFn,
}

/// A tensor layout of the program's boundary.
#[derive(Clone, Debug, PartialEq)]
struct Slot {
    dtype: DType,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

impl Slot {
    /// Elements of storage the layout spans.
    fn extent(&self) -> usize {
        if self.shape.iter().any(|d| *d <= 0) {
            return 0;
        }
        let last: i64 = self
            .shape
            .iter()
            .zip(&self.strides)
            .map(|(d, s)| (d - 1) * s.max(&0))
            .sum();
        (last + 1).max(0) as usize
    }

    fn words(&self) -> usize {
        (self.extent() * self.dtype.size_bytes()).div_ceil(8).max(1)
    }
}

/// A loaded program.
pub struct Module {
    // Never unloaded: OpenMP's worker threads (libgomp, loaded with the
    // library) outlive a call, and unloading under them crashes the process.
    _lib: std::mem::ManuallyDrop<libloading::Library>,
    call: CallFn,
    set_weights: SetWeightsFn,
    load_weights: LoadWeightsFn,
    last_error: ErrorFn,
    // The weights handed to the library, kept alive while it may read them.
    weights: Vec<Held>,
    path: PathBuf,
    /// The inputs' and outputs' layouts; for a library of a range of sizes,
    /// at the size symbols' hints (each call's come from its inputs).
    inputs: Vec<Slot>,
    outputs: Vec<Slot>,
    /// Present for a library compiled for a range of sizes.
    shaped: Option<Shaped>,
}

/// A weight's storage handed to the library.
enum Held {
    /// The compile's own bytes (aligned, in the dtype).
    Shared(std::sync::Arc<[u8]>),
    /// A dense copy, 8-byte aligned.
    Words(Vec<u64>),
}

impl Held {
    fn as_ptr(&self) -> *const u8 {
        match self {
            Held::Shared(b) => b.as_ptr(),
            Held::Words(w) => w.as_ptr().cast::<u8>(),
        }
    }
}

/// Inputs laid out for `kiln_call`, reusable across calls (benchmarks).
pub struct Prepared {
    inputs: Vec<Vec<u64>>,
    outputs: Vec<Vec<u64>>,
    /// Each input's sizes, for a library of a range of sizes.
    input_shapes: Vec<Vec<i64>>,
    /// The outputs' layouts at these inputs' sizes.
    output_slots: Vec<Slot>,
}

impl Prepared {
    /// One pointer per input and per output, in order, for a C entry point.
    fn pointers(&mut self) -> (Vec<*const u8>, Vec<*mut u8>) {
        let ins = self
            .inputs
            .iter()
            .map(|w| w.as_ptr().cast::<u8>())
            .collect();
        let outs = self
            .outputs
            .iter_mut()
            .map(|w| w.as_mut_ptr().cast::<u8>())
            .collect();
        (ins, outs)
    }
}

fn bytes_of(words: &mut [u64]) -> &mut [u8] {
    let len = std::mem::size_of_val(words);
    // SAFETY: u64 storage viewed as bytes: same memory, alignment 1 <= 8, length in bytes.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

impl Module {
    /// Opens the library at `path`, built from `scheduled`, and hands it
    /// `weights` (the compile's, in memory). A library with weights whose
    /// `weights` are empty waits for [`Module::load_weights_file`].
    pub fn load(path: &Path, scheduled: &Scheduled, weights: &Weights) -> Result<Module, Error> {
        let p = &scheduled.program;
        let load = |source| Error::Load {
            path: path.to_path_buf(),
            source,
        };
        // SAFETY: the library is one Kiln generated and compiled; its
        // initialisers only set up static constants.
        let lib = unsafe { libloading::Library::new(path) }.map_err(load)?;
        // SAFETY: the symbols have the signatures `wrapper/cpp.rs` writes.
        let (call, abi, n_in, n_out) = unsafe {
            let call: libloading::Symbol<CallFn> = lib.get(b"kiln_call\0").map_err(load)?;
            let abi: libloading::Symbol<CountFn> = lib.get(b"kiln_abi_version\0").map_err(load)?;
            let n_in: libloading::Symbol<CountFn> = lib.get(b"kiln_num_inputs\0").map_err(load)?;
            let n_out: libloading::Symbol<CountFn> =
                lib.get(b"kiln_num_outputs\0").map_err(load)?;
            (*call, abi(), n_in(), n_out())
        };
        // A program of symbolic sizes: its library takes each call's sizes.
        let symbolic = !crate::codegen::wrapper::symbol_sources(p)
            .map_err(|what| Error::Mismatch {
                path: path.to_path_buf(),
                what,
            })?
            .is_empty();
        let shaped = if symbolic {
            // SAFETY: the signatures `wrapper/cpp/sizes.rs` writes.
            unsafe {
                let call: libloading::Symbol<ShapedCallFn> =
                    lib.get(b"kiln_call_shaped\0").map_err(load)?;
                let output_shapes: libloading::Symbol<OutputShapesFn> =
                    lib.get(b"kiln_output_shapes\0").map_err(load)?;
                Some(Shaped {
                    call: *call,
                    output_shapes: *output_shapes,
                })
            }
        } else {
            None
        };
        let expected_abi = crate::codegen::wrapper::cpp::ABI_VERSION;
        if abi != expected_abi {
            return Err(Error::Mismatch {
                path: path.to_path_buf(),
                what: format!("ABI {abi}, expected ABI {expected_abi}"),
            });
        }
        // SAFETY: as above; these exist from ABI 2 on, checked just now.
        let (set_weights, load_weights, last_error, names) = unsafe {
            let set: libloading::Symbol<SetWeightsFn> =
                lib.get(b"kiln_set_weights\0").map_err(load)?;
            let file: libloading::Symbol<LoadWeightsFn> =
                lib.get(b"kiln_load_weights\0").map_err(load)?;
            let err: libloading::Symbol<ErrorFn> = lib.get(b"kiln_last_error\0").map_err(load)?;
            let count: libloading::Symbol<CountFn> =
                lib.get(b"kiln_num_weights\0").map_err(load)?;
            let name: libloading::Symbol<NameFn> = lib.get(b"kiln_weight_name\0").map_err(load)?;
            let names: Vec<String> = (0..count())
                .map(|i| {
                    let p = name(i);
                    if p.is_null() {
                        String::new()
                    } else {
                        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
                    }
                })
                .collect();
            (*set, *file, *err, names)
        };
        let keys: Vec<&str> = weights.entries.iter().map(|e| e.key.as_str()).collect();
        if !weights.is_empty() && names != keys {
            return Err(Error::Mismatch {
                path: path.to_path_buf(),
                what: format!("its weights are {names:?}, the compile's are {keys:?}"),
            });
        }
        let inputs: Vec<Slot> = p
            .inputs
            .iter()
            .map(|b| {
                let buf = p.buffer(*b);
                Slot {
                    dtype: buf.dtype,
                    shape: buf.shape_hint(),
                    strides: buf.strides_hint(),
                }
            })
            .collect();
        let outputs: Vec<Slot> = p
            .outputs
            .iter()
            .map(|v| Slot {
                dtype: p.buffer(v.buf).dtype,
                shape: hints(&v.shape),
                strides: crate::graph::shape::contiguous_strides(&hints(&v.shape)),
            })
            .collect();
        let expected = (
            crate::codegen::wrapper::cpp::ABI_VERSION,
            inputs.len() as i32,
            outputs.len() as i32,
        );
        if (abi, n_in, n_out) != expected {
            return Err(Error::Mismatch {
                path: path.to_path_buf(),
                what: format!(
                    "ABI {abi} with {n_in} inputs and {n_out} outputs, expected ABI {} with {} and {}",
                    expected.0, expected.1, expected.2
                ),
            });
        }
        let mut module = Module {
            _lib: std::mem::ManuallyDrop::new(lib),
            call,
            set_weights,
            load_weights,
            last_error,
            weights: vec![],
            path: path.to_path_buf(),
            inputs,
            outputs,
            shaped,
        };
        if !weights.is_empty() {
            module.set_weights(weights);
        }
        Ok(module)
    }

    /// Hands the library the compile's weights (kept by the module).
    fn set_weights(&mut self, weights: &Weights) {
        self.weights = weights
            .entries
            .iter()
            .map(|e| {
                let n = e.shape.iter().product();
                match &e.data {
                    ConstData::Bytes { dtype, bytes }
                        if *dtype == e.dtype
                            && bytes.len() as u64 == e.bytes()
                            && (bytes.as_ptr() as usize).is_multiple_of(8) =>
                    {
                        Held::Shared(bytes.clone())
                    }
                    data => {
                        // Dense storage in u64 words (8-byte aligned).
                        let storage = data.storage(e.dtype, n);
                        let mut words = vec![0u64; storage.len().div_ceil(8).max(1)];
                        bytes_of(&mut words)[..storage.len()].copy_from_slice(&storage);
                        Held::Words(words)
                    }
                }
            })
            .collect();
        let pointers: Vec<*const u8> = self.weights.iter().map(Held::as_ptr).collect();
        // SAFETY: one pointer per weight the library names (checked at load),
        // each to dense storage of its size, kept alive in `self.weights`.
        unsafe { (self.set_weights)(pointers.as_ptr()) };
    }

    /// Makes the library read its weights from the file at `path` (as a
    /// deployment would), replacing any it had.
    pub fn load_weights_file(&mut self, path: &Path) -> Result<(), Error> {
        let text = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::Weights(format!("{}: a path with a NUL byte", path.display())))?;
        // SAFETY: a NUL-terminated path; the library copies what it reads.
        let status = unsafe { (self.load_weights)(text.as_ptr()) };
        if status != 0 {
            return Err(Error::Weights(self.last_error()));
        }
        self.weights.clear();
        Ok(())
    }

    /// The library's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lays out `inputs` (one per graph input) for [`Module::call`]. A library
    /// of a range of sizes takes each input at its own sizes (dense), and says
    /// the outputs' sizes.
    pub fn prepare(&self, inputs: &[Tensor]) -> Result<Prepared, Error> {
        match self.shaped {
            None => prepare(&self.inputs, &self.outputs, inputs),
            Some(shaped) => prepare_shaped(
                &self.inputs,
                &self.outputs,
                inputs,
                shaped.output_shapes,
                &|| self.last_error(),
            ),
        }
    }

    /// `kiln_last_error()`.
    fn last_error(&self) -> String {
        // SAFETY: the library returns a NUL-terminated buffer that lives on.
        unsafe { std::ffi::CStr::from_ptr((self.last_error)()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Runs the program once on prepared inputs.
    pub fn call(&self, prepared: &mut Prepared) -> Result<(), Error> {
        let shapes: Vec<*const i64> = prepared.input_shapes.iter().map(|s| s.as_ptr()).collect();
        let (ins, outs) = prepared.pointers();
        // SAFETY: every pointer spans the storage its tensor's layout needs
        // (checked in `prepare`), and the library was checked at load; a
        // shaped call's sizes are each input's, as `prepare` laid it out.
        let status = unsafe {
            match self.shaped {
                Some(shaped) => (shaped.call)(shapes.as_ptr(), ins.as_ptr(), outs.as_ptr()),
                None => (self.call)(ins.as_ptr(), outs.as_ptr()),
            }
        };
        match status {
            0 => {}
            2 => return Err(Error::IndexOutOfRange),
            3 => return Err(Error::NoWeights),
            4 => return Err(Error::Sizes(self.last_error())),
            s => return Err(Error::Call(s)),
        }
        Ok(())
    }

    /// The outputs of the last call.
    pub fn outputs(&self, prepared: &mut Prepared) -> Vec<Tensor> {
        outputs(prepared)
    }

    /// Runs the program on `inputs` and returns its outputs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        let mut prepared = self.prepare(inputs)?;
        self.call(&mut prepared)?;
        Ok(self.outputs(&mut prepared))
    }
}

/// A loaded program that runs on prepared inputs: the cpu device's library
/// ([`Module`]) or a Triton device's C++ wrapper ([`device::DeviceModule`]).
pub trait Loaded {
    /// Lays out `inputs` (one per graph input) for [`Loaded::call`].
    fn prepare(&self, inputs: &[Tensor]) -> Result<Prepared, Error>;
    /// Runs the program once on prepared inputs.
    fn call(&self, prepared: &mut Prepared) -> Result<(), Error>;
    /// The outputs of the last call.
    fn outputs(&self, prepared: &mut Prepared) -> Vec<Tensor>;
}

impl Loaded for Module {
    fn prepare(&self, inputs: &[Tensor]) -> Result<Prepared, Error> {
        Module::prepare(self, inputs)
    }
    fn call(&self, prepared: &mut Prepared) -> Result<(), Error> {
        Module::call(self, prepared)
    }
    fn outputs(&self, prepared: &mut Prepared) -> Vec<Tensor> {
        Module::outputs(self, prepared)
    }
}

/// [`prepare`] for a library of a range of sizes: each input at its own sizes
/// (dense, of the graph's rank and dtype; the library checks the sizes), the
/// outputs at the sizes `output_shapes` gives for them. `last_error` reads the
/// library's reason for a refusal.
fn prepare_shaped(
    slots: &[Slot],
    outputs: &[Slot],
    inputs: &[Tensor],
    output_shapes: OutputShapesFn,
    last_error: &dyn Fn() -> String,
) -> Result<Prepared, Error> {
    if inputs.len() != slots.len() {
        return Err(Error::Input {
            index: inputs.len().min(slots.len()),
            expected: format!("{} inputs", slots.len()),
            found: format!("{}", inputs.len()),
        });
    }
    let mut at_sizes = Vec::with_capacity(inputs.len());
    for (i, (t, slot)) in inputs.iter().zip(slots).enumerate() {
        if t.shape.len() != slot.shape.len() || t.dtype != slot.dtype {
            return Err(Error::Input {
                index: i,
                expected: format!("{} of {} dims", slot.dtype, slot.shape.len()),
                found: format!("{}{:?}", t.dtype, t.shape),
            });
        }
        at_sizes.push(Slot {
            dtype: slot.dtype,
            shape: t.shape.clone(),
            strides: crate::graph::shape::contiguous_strides(&t.shape),
        });
    }
    let input_shapes: Vec<Vec<i64>> = at_sizes.iter().map(|s| s.shape.clone()).collect();
    let shape_ptrs: Vec<*const i64> = input_shapes.iter().map(|s| s.as_ptr()).collect();
    let mut out_shapes: Vec<Vec<i64>> = outputs.iter().map(|s| vec![0; s.shape.len()]).collect();
    let out_ptrs: Vec<*mut i64> = out_shapes.iter_mut().map(|s| s.as_mut_ptr()).collect();
    // SAFETY: one pointer per input to as many sizes as its rank (checked above),
    // and one per output to room for as many as its rank.
    let status = unsafe { output_shapes(shape_ptrs.as_ptr(), out_ptrs.as_ptr()) };
    if status != 0 {
        return Err(Error::Sizes(last_error()));
    }
    let outputs: Vec<Slot> = outputs
        .iter()
        .zip(out_shapes)
        .map(|(slot, shape)| Slot {
            dtype: slot.dtype,
            strides: crate::graph::shape::contiguous_strides(&shape),
            shape,
        })
        .collect();
    let mut prepared = prepare(&at_sizes, &outputs, inputs)?;
    prepared.input_shapes = input_shapes;
    Ok(prepared)
}

/// Lays out `inputs` in the storage of `slots` (the program's inputs), with
/// room for `outputs`.
fn prepare(slots: &[Slot], outputs: &[Slot], inputs: &[Tensor]) -> Result<Prepared, Error> {
    if inputs.len() != slots.len() {
        return Err(Error::Input {
            index: inputs.len().min(slots.len()),
            expected: format!("{} inputs", slots.len()),
            found: format!("{}", inputs.len()),
        });
    }
    let mut staged = Vec::new();
    for (i, (t, slot)) in inputs.iter().zip(slots).enumerate() {
        if t.shape != slot.shape || t.dtype != slot.dtype {
            return Err(Error::Input {
                index: i,
                expected: format!("{}{:?}", slot.dtype, slot.shape),
                found: format!("{}{:?}", t.dtype, t.shape),
            });
        }
        let mut words = vec![0u64; slot.words()];
        let size = slot.dtype.size_bytes();
        let bytes = bytes_of(&mut words);
        let values = t.to_vec();
        let encoded = slot.dtype.encode_le(&values);
        let walk = crate::tensor::walk::Walk::<1>::new(&slot.shape, [(&slot.strides, 0)]);
        walk.run(0..walk.len(), |n, [off]| {
            let (dst, src) = (off as usize * size, n * size);
            if let (Some(d), Some(s)) =
                (bytes.get_mut(dst..dst + size), encoded.get(src..src + size))
            {
                d.copy_from_slice(s);
            }
        });
        staged.push(words);
    }
    Ok(Prepared {
        inputs: staged,
        outputs: outputs.iter().map(|s| vec![0u64; s.words()]).collect(),
        input_shapes: Vec::new(),
        output_slots: outputs.to_vec(),
    })
}

/// The tensors in `prepared`'s outputs, laid out as its slots say.
fn outputs(prepared: &mut Prepared) -> Vec<Tensor> {
    prepared
        .output_slots
        .iter()
        .zip(prepared.outputs.iter_mut())
        .map(|(slot, words)| {
            let n = slot.extent() * slot.dtype.size_bytes();
            let bytes = bytes_of(words);
            let mut values = slot.dtype.decode_le(&bytes[..n.min(bytes.len())]);
            let numel: i64 = slot.shape.iter().product();
            values.resize(numel.max(0) as usize, 0.0);
            Tensor::new(slot.shape.clone(), slot.dtype, values)
        })
        .collect()
}

/// At most how many bytes running `scheduled` in-process takes: the inputs
/// laid out in their dtypes (and one input's float64 staging), the program's
/// own buffers and constants, and the outputs in their dtypes and as float64
/// tensors. `None` past 64 bits.
pub fn memory_needed(scheduled: &Scheduled) -> Option<u64> {
    let p = &scheduled.program;
    let dtype_bytes = |b: &crate::schedule::Buffer| b.dtype.size_bytes() as u64;
    let f64_bytes = |n: i64| crate::memory::elements(n, std::mem::size_of::<f64>() as u64);
    let inputs = p.inputs.iter().map(|b| {
        let buf = p.buffer(*b);
        crate::memory::elements(buf.numel(), dtype_bytes(buf))
    });
    let staging = p
        .inputs
        .iter()
        .map(|b| p.buffer(*b).numel())
        .max()
        .map(|n| crate::memory::total([f64_bytes(n), f64_bytes(n)]));
    let outputs = p.outputs.iter().map(|v| {
        let n = v
            .shape
            .iter()
            .fold(1i64, |n, d| n.saturating_mul(d.hint().max(0)));
        let buf = p.buffer(v.buf);
        crate::memory::total([crate::memory::elements(n, dtype_bytes(buf)), f64_bytes(n)])
    });
    let own = scheduled.memory.storage_bytes(p, dtype_bytes);
    crate::memory::total(
        inputs
            .chain([staging.unwrap_or(Some(0))])
            .chain(outputs)
            .chain([own]),
    )
}

/// Compiles (or finds in the cache) `source`, a cpu `wrapper.cpp` of
/// `scheduled`, into a shared library, as [`build_and_load`] does, without
/// loading it.
pub fn build_library(source: &str, scheduled: &Scheduled) -> Result<compile::Built, Error> {
    let compiler = compile::Compiler::from_env()?;
    let linked = crate::codegen::wrapper::cpp::linked_runtime(source, &scheduled.program);
    Ok(compile::build_linked(
        source,
        &linked,
        &compiler,
        &compile::cache_dir(),
    )?)
}

/// Compiles (or finds in the cache) `source`, a cpu `wrapper.cpp` (which
/// includes the C++ runtime's headers), and loads it for `scheduled`. The
/// runtime's matrix products are compiled once into objects of the cache and
/// linked in ([`compile::build_linked`]).
pub fn build_and_load(
    source: &str,
    scheduled: &Scheduled,
    weights: &Weights,
) -> Result<(Module, compile::Built), Error> {
    let built = build_library(source, scheduled)?;
    let module = Module::load(&built.library, scheduled, weights)?;
    Ok((module, built))
}
