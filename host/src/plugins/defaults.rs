//! What the host assumes where a plugin says nothing: it was built against an
//! older minor of the plugin API, which did not ask, or it answers `RNone`.
//!
//! These are the only device numbers the host holds, each with why it is that
//! value. A plugin that knows its device reports its own; `host inspect` says
//! which of the two a compile uses.

use serde::Serialize;

use super::{CallError, Plugin};

/// Shared memory one program may use, for a plugin that does not say (API 1.5
/// added the question): 96 KiB, what every host before 1.5 assumed of every
/// Triton device, so that a plugin built earlier keeps exactly the
/// flash-attention tiles it got then.
pub const SHARED_MEMORY_PER_BLOCK: u64 = 96 * 1024;

/// Whether float32 `tl.dot` may use TF32 products, for a plugin that does not
/// say (API 1.5 added the question): no. Exact FMA products (`ieee`) compile
/// on every Triton target and keep float32's accuracy, where three TF32
/// products (`tf32x3`) do not compile on a target without TF32 units. (Hosts
/// before 1.5 read it from a CUDA compute capability, a device rule the host
/// must not hold; a cuda plugin built earlier now gets exact products.)
pub const TF32_DOT: bool = false;

/// The byte multiple a 16-bit matrix product's K and N are padded to, for a
/// plugin that does not say (API 1.6 added the question): 0, no padding, what
/// every host before 1.6 did. Padding costs a copy of an activation, so only a
/// plugin that has measured its library's fast kernels asks for it.
pub const MATMUL_ALIGNMENT: u32 = 0;

/// The dtypes whose 2-D convolutions run channels-last, for a plugin that does
/// not say (API 1.7 added the question): none, what every host before 1.7 did.
/// Channels-last pays only where the device's convolution library has fast
/// `NHWC` kernels for the dtype (float32 on an H100 with TF32 off ran slower
/// channels-last), so only a plugin that has measured them asks for it.
pub const CONV_CHANNELS_LAST: &[&str] = &[];

/// The bytes of L2 cache, for a plugin that does not say (API 1.8 added the
/// question): 0, so that nothing is prefetched into it, what every host before 1.8
/// did. A prefetch larger than what the cache holds beside a kernel's other reads
/// slows it (split attention's at batch 8 on an H100), so only a plugin that
/// knows its cache gets one.
pub const L2_CACHE_BYTES: u64 = 0;

/// A value a compile uses, and whether the plugin stated it or the host's
/// default stands in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Stated<T> {
    /// The value in force.
    pub value: T,
    /// `true` when the plugin reported it; `false` when it is the default here.
    pub from_plugin: bool,
}

impl<T> Stated<T> {
    /// `reported`, or `default` where the plugin said nothing.
    pub fn or_default(reported: Option<T>, default: T) -> Stated<T> {
        match reported {
            Some(value) => Stated {
                value,
                from_plugin: true,
            },
            None => Stated {
                value: default,
                from_plugin: false,
            },
        }
    }
}

/// The shared memory one program of device `index` may use: the plugin's
/// answer, or [`SHARED_MEMORY_PER_BLOCK`].
pub fn shared_memory_per_block(plugin: &Plugin, index: u32) -> Result<Stated<u64>, CallError> {
    Ok(Stated::or_default(
        plugin.shared_memory_per_block(index)?,
        SHARED_MEMORY_PER_BLOCK,
    ))
}

/// The bytes of device `index`'s L2 cache: the plugin's answer, or
/// [`L2_CACHE_BYTES`].
pub fn l2_cache_bytes(plugin: &Plugin, index: u32) -> Result<Stated<u64>, CallError> {
    Ok(Stated::or_default(
        plugin.l2_cache_bytes(index)?,
        L2_CACHE_BYTES,
    ))
}

/// Whether float32 `tl.dot` may use TF32 products: the plugin's answer, or
/// [`TF32_DOT`].
pub fn tf32_dot(plugin: &Plugin) -> Result<Stated<bool>, CallError> {
    Ok(Stated::or_default(plugin.tf32_dot()?, TF32_DOT))
}

/// The byte multiple a 16-bit matrix product's K and N are padded to (0: no
/// padding): the plugin's answer, or [`MATMUL_ALIGNMENT`]. Load-time
/// validation refuses a plugin whose answer is not 0 or a power of two from 2
/// to 256 (`validate::matmul_alignment_problem`).
pub fn matmul_alignment(plugin: &Plugin) -> Result<Stated<u32>, CallError> {
    Ok(Stated::or_default(
        plugin.matmul_alignment()?,
        MATMUL_ALIGNMENT,
    ))
}

/// The dtypes (by name) whose 2-D convolutions run channels-last: the plugin's
/// answer, or [`CONV_CHANNELS_LAST`]. Load-time validation refuses a plugin
/// naming anything but a floating dtype (`validate::conv_channels_last_problem`).
pub fn conv_channels_last(plugin: &Plugin) -> Result<Stated<Vec<String>>, CallError> {
    let default = CONV_CHANNELS_LAST.iter().map(|s| s.to_string()).collect();
    Ok(Stated::or_default(plugin.conv_channels_last()?, default))
}
