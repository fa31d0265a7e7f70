//! `kiln-plugin-api`: the only crate a Kiln device plugin depends on.
//!
//! A plugin is a `cdylib` that exports one [`KilnPluginRef`] root module through
//! `abi_stable`. The easy way is to implement [`DevicePlugin`] and call
//! [`export_plugin!`]; the tables in [`root`] are public for plugins that need
//! full control (the deliberately broken test plugins use them).
//!
//! # What crosses the boundary
//! Only `#[repr(C)]` types deriving `StableAbi` and `abi_stable`'s `R*` types.
//! Every function is `extern "C"` and returns [`PResult`]; the export shims
//! catch panics, so a plugin bug reaches the host as a [`PluginError`] and never
//! unwinds into it.
//!
//! # Versioning: how to add a field in a later minor version
//! The host accepts a plugin whose API version has the same major and a minor
//! no newer than its own. Within a major version, the rules are:
//!
//! 1. Only **append** fields, at the end of a prefix-type table ([`KilnPlugin`],
//!    [`OpOverrides`], [`DeviceModule`], [`Heuristics`]), and bump the crate's
//!    minor version (`1.0.0` → `1.1.0`).
//! 2. Never move `#[sabi(last_prefix_field)]`, never reorder, rename, remove or
//!    retype a field, and never change a struct passed by value
//!    ([`DeviceProperties`], [`LaunchConfig`], the queries). Data that may grow
//!    goes into a new prefix-type table reached from an appended field.
//! 3. Every appended field is read through its generated accessor, which returns
//!    `None` for a plugin built against an older, shorter table. The host treats
//!    that `None` exactly like a method returning `RNone`: "not provided", and it
//!    reports an error only when a code path needs the missing piece.
//! 4. Give the new field a default in [`DevicePlugin`], so that existing plugin
//!    sources still compile against the new minor.
//!
//! Anything else is a new major version: plugins must be rebuilt, and the host
//! refuses old ones with a message naming both versions.

pub mod export;
pub mod root;
pub mod types;

#[doc(hidden)]
pub use abi_stable;

pub use export::{DevicePlugin, FixedOverrides, PluginSlot};
#[cfg(not(feature = "__shorter_root_for_compat_test"))]
pub use root::{DeviceModule, DeviceModuleRef, Heuristics, HeuristicsRef};
pub use root::{KilnPlugin, KilnPluginRef, OpOverrides, OpOverridesRef, PResult};
pub use types::*;

/// Major version of this crate: plugins and host must agree on it.
pub const API_VERSION_MAJOR: u32 = parse_u32(env!("CARGO_PKG_VERSION_MAJOR"));
/// Minor version of this crate: a host accepts plugins with a minor up to its own.
pub const API_VERSION_MINOR: u32 = parse_u32(env!("CARGO_PKG_VERSION_MINOR"));
/// Patch version of this crate.
pub const API_VERSION_PATCH: u32 = parse_u32(env!("CARGO_PKG_VERSION_PATCH"));

/// The device-name grammar, PyTorch's PrivateUse1 rule: `^[a-z][a-z0-9_]{0,31}$`.
pub fn is_valid_device_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 32
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
}

const fn parse_u32(text: &str) -> u32 {
    let bytes = text.as_bytes();
    let mut value = 0u32;
    let mut i = 0;
    while i < bytes.len() {
        value = value * 10 + (bytes[i] - b'0') as u32;
        i += 1;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_name_grammar() {
        for good in [
            "gxu",
            "cuda",
            "a",
            "npu_2",
            "abcdefghijklmnopqrstuvwxyz012345",
        ] {
            assert!(is_valid_device_name(good), "{good}");
        }
        for bad in [
            "",
            "Gxu",
            "2gxu",
            "_x",
            "g-x",
            "g x",
            "abcdefghijklmnopqrstuvwxyz0123456",
        ] {
            assert!(!is_valid_device_name(bad), "{bad}");
        }
    }

    #[test]
    fn version_constants_match_the_package() {
        assert_eq!(ApiVersion::CURRENT.to_string(), env!("CARGO_PKG_VERSION"));
    }
}
