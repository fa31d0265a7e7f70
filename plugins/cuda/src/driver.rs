//! The CUDA driver API, opened at run time.
//!
//! `libcuda.so.1` is loaded with `libloading` when the plugin is first asked
//! about devices; the plugin never links against it, so it loads (and answers
//! with static defaults) on machines without an NVIDIA driver. This module only
//! wraps the four entry points the plugin needs and turns every `CUresult`
//! into an error message; it must never panic on anything the driver returns.

use std::ffi::{c_int, c_uint};

use libloading::Library;

/// The driver library's file name: the versioned soname, so that a CUDA
/// toolkit's unversioned development stub is never picked up by mistake.
#[cfg(not(windows))]
pub const LIBRARY_NAME: &str = "libcuda.so.1";
/// The driver library's file name on Windows.
#[cfg(windows)]
pub const LIBRARY_NAME: &str = "nvcuda.dll";

/// `CUresult`: 0 is `CUDA_SUCCESS`.
type CuResult = c_int;
/// `CUdevice`: an ordinal handle.
type CuDevice = c_int;

type CuInit = unsafe extern "C" fn(flags: c_uint) -> CuResult;
type CuDeviceGetCount = unsafe extern "C" fn(count: *mut c_int) -> CuResult;
type CuDeviceGet = unsafe extern "C" fn(device: *mut CuDevice, ordinal: c_int) -> CuResult;
type CuDeviceGetAttribute =
    unsafe extern "C" fn(value: *mut c_int, attribute: c_int, device: CuDevice) -> CuResult;

/// The `CUdevice_attribute` values the plugin reads, numbered as in `cuda.h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Attribute {
    /// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
    MaxThreadsPerBlock = 1,
    /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X`.
    MaxGridDimX = 5,
    /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y`.
    MaxGridDimY = 6,
    /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z`.
    MaxGridDimZ = 7,
    /// `CU_DEVICE_ATTRIBUTE_WARP_SIZE`.
    WarpSize = 10,
    /// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
    MultiprocessorCount = 16,
    /// `CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE`, in bytes.
    L2CacheSize = 38,
    /// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR`.
    MaxThreadsPerMultiprocessor = 39,
    /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
    ComputeCapabilityMajor = 75,
    /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
    ComputeCapabilityMinor = 76,
    /// `CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR`.
    MaxRegistersPerMultiprocessor = 82,
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`: the shared
    /// memory one block may use when its kernel opts in, as Triton's launcher
    /// does for a kernel that needs more than the static 48 KiB.
    MaxSharedMemoryPerBlockOptin = 97,
}

/// An initialised CUDA driver. The library stays loaded for as long as this
/// value lives; the plugin keeps it for the life of the process, because
/// unloading `libcuda` after `cuInit` is not supported by the driver.
pub struct Driver {
    device_get_count: CuDeviceGetCount,
    device_get: CuDeviceGet,
    device_get_attribute: CuDeviceGetAttribute,
    // The pointers above point into this library: owning it here keeps them
    // valid for as long as they can be called.
    _library: Library,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

impl Driver {
    /// Opens the driver library and calls `cuInit(0)`.
    pub fn open() -> Result<Driver, String> {
        // SAFETY: loading the NVIDIA driver runs its initialisers, which have
        // no preconditions on the caller.
        let library = unsafe { Library::new(LIBRARY_NAME) }
            .map_err(|e| format!("cannot open {LIBRARY_NAME}: {e}"))?;
        // SAFETY: each type alias above matches the driver API's prototype
        // of the symbol it is read from (cuda.h, CUDA 12).
        let (init, device_get_count, device_get, device_get_attribute) = unsafe {
            (
                *symbol::<CuInit>(&library, b"cuInit\0")?,
                *symbol::<CuDeviceGetCount>(&library, b"cuDeviceGetCount\0")?,
                *symbol::<CuDeviceGet>(&library, b"cuDeviceGet\0")?,
                *symbol::<CuDeviceGetAttribute>(&library, b"cuDeviceGetAttribute\0")?,
            )
        };
        // SAFETY: `cuInit` takes a flags word that must be 0.
        check("cuInit(0)", unsafe { init(0) })?;
        Ok(Driver {
            device_get_count,
            device_get,
            device_get_attribute,
            _library: library,
        })
    }

    /// `cuDeviceGetCount`.
    pub fn device_count(&self) -> Result<u32, String> {
        let mut count: c_int = 0;
        // SAFETY: the out-pointer is a live, aligned `c_int`.
        check("cuDeviceGetCount", unsafe {
            (self.device_get_count)(&mut count)
        })?;
        u32::try_from(count).map_err(|_| format!("cuDeviceGetCount returned {count}"))
    }

    /// `cuDeviceGet` then `cuDeviceGetAttribute` for device `ordinal`.
    pub fn attribute(&self, ordinal: u32, attribute: Attribute) -> Result<i32, String> {
        let ordinal_c =
            c_int::try_from(ordinal).map_err(|_| format!("device ordinal {ordinal} too large"))?;
        let mut device: CuDevice = 0;
        // SAFETY: the out-pointer is a live, aligned `CUdevice`.
        check("cuDeviceGet", unsafe {
            (self.device_get)(&mut device, ordinal_c)
        })?;
        let mut value: c_int = 0;
        // SAFETY: the out-pointer is a live, aligned `c_int`; the attribute
        // number is one of `cuda.h`'s.
        check(&format!("cuDeviceGetAttribute({attribute:?})"), unsafe {
            (self.device_get_attribute)(&mut value, attribute as c_int, device)
        })?;
        Ok(value)
    }
}

/// Reads one symbol, naming it in the error.
///
/// # Safety
/// `T` must be the symbol's real type.
unsafe fn symbol<'l, T>(
    library: &'l Library,
    name: &[u8],
) -> Result<libloading::Symbol<'l, T>, String> {
    // SAFETY: forwarded to the caller.
    unsafe { library.get::<T>(name) }.map_err(|e| {
        let printable = String::from_utf8_lossy(name.strip_suffix(b"\0").unwrap_or(name));
        format!("{LIBRARY_NAME} lacks {printable}: {e}")
    })
}

fn check(call: &str, code: CuResult) -> Result<(), String> {
    if code == 0 {
        Ok(())
    } else {
        Err(format!("{call} failed with CUresult {code}"))
    }
}
