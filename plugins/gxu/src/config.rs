//! `gxu.toml`: the vendor's tuning file, read from the folder of the plugin's
//! shared library when the host loads it.
//!
//! The file is optional; every key is optional; an unknown key, a value of
//! the wrong type or out of range, or malformed TOML is an error naming the
//! file, the line and the column (`PATH: line L, column C: what is wrong`).
//! See the crate docs for the format. This module only reads and checks the
//! file; it never decides a launch config.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

/// The file name looked for beside the plugin's shared library.
pub const FILE_NAME: &str = "gxu.toml";

/// The GXU: 32 threads per warp.
pub const DEFAULT_WARP_SIZE: u32 = 32;
/// The GXU: grids of up to 48 programs, or multiples of 48.
pub const DEFAULT_GRID_MULTIPLE: u32 = 48;
/// Threads in one program (block).
pub const DEFAULT_MAX_THREADS_PER_BLOCK: u32 = 1024;
/// Shared memory one program may use, in bytes: the reference GXU integration gives
/// no number, so the bundled plugin keeps what hosts before plugin API 1.5 assumed of
/// every device (96 KiB) and its kernels are the same; a vendor sets its
/// device's in `gxu.toml`.
pub const DEFAULT_SHARED_MEMORY_PER_BLOCK: u64 = 96 * 1024;
/// The least `shared_memory_per_block` a `gxu.toml` may set: a flash-attention
/// program's smallest tiles (16 query rows and keys of heads of 16 elements)
/// need 1.5 KiB in float32; 1 KiB is a typing slip, not a device.
pub const MIN_SHARED_MEMORY_PER_BLOCK: u64 = 4 * 1024;
/// The byte multiple a 16-bit matrix product's K and N are padded to: 16, 8
/// bfloat16 or float16 elements. The bundled plugin stands in for GXU
/// hardware on an NVIDIA GPU (see [`DEFAULT_TRITON_BACKEND`]), whose cuBLAS
/// runs 16-bit products 3 to 6 times slower off that multiple; a vendor sets
/// its library's in `gxu.toml`, or 0 for no padding.
pub const DEFAULT_MATMUL_ALIGNMENT: u32 = 16;
/// The largest `matmul_alignment` a `gxu.toml` may set, in bytes (as the
/// host's own validation allows).
pub const MAX_MATMUL_ALIGNMENT: u32 = 256;
/// The dtypes whose 2-D convolutions run channels-last: float16 and bfloat16,
/// as on the NVIDIA GPU the bundled plugin stands in on (cuDNN's 16-bit
/// kernels are `NHWC` ones); a vendor lists its library's in `gxu.toml`, or
/// none.
pub const DEFAULT_CONV_CHANNELS_LAST: [&str; 2] = ["float16", "bfloat16"];
/// The dtypes `conv_channels_last` may list: the floating ones (as the host's
/// own validation allows).
pub const CONV_DTYPES: [&str; 4] = ["float16", "bfloat16", "float32", "float64"];
/// The Triton backend GXU kernels are compiled with by default. The GXU
/// ships its own Triton backend (`triton.backends.gxu`); the bundled plugin
/// stands in for hardware Kiln cannot reach, so its kernels are checked with
/// upstream Triton's CUDA backend and run on an NVIDIA GPU with CUDA standing
/// in for GXU. A vendor
/// with Triton GXU installed sets `triton_backend = "gxu"`.
pub const DEFAULT_TRITON_BACKEND: &str = "cuda";
/// The `GPUTarget.arch` of the default backend: sm_90, the stand-in GPU.
pub const DEFAULT_TRITON_ARCH: &str = "90";

/// The tuning the plugin runs with: the defaults, overridden by `gxu.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GxuConfig {
    /// Threads per warp; written into `kernel_driver` as `GXU_WARP_SIZE`.
    pub warp_size: u32,
    /// Grids above this many programs are rounded up to a multiple of it.
    pub grid_multiple: u32,
    /// Threads in one program.
    pub max_threads_per_block: u32,
    /// Shared memory one program may use, in bytes.
    pub shared_memory_per_block: u64,
    /// The byte multiple 16-bit matrix products' K and N are padded to (0:
    /// no padding).
    pub matmul_alignment: u32,
    /// The dtypes whose 2-D convolutions run channels-last.
    pub conv_channels_last: Vec<String>,
    /// The Triton backend the kernels compile with.
    pub triton_backend: String,
    /// That backend's `GPUTarget.arch`, as text.
    pub triton_arch: String,
    /// The file the values came from, if any.
    pub source: Option<PathBuf>,
}

impl Default for GxuConfig {
    fn default() -> Self {
        GxuConfig {
            warp_size: DEFAULT_WARP_SIZE,
            grid_multiple: DEFAULT_GRID_MULTIPLE,
            max_threads_per_block: DEFAULT_MAX_THREADS_PER_BLOCK,
            shared_memory_per_block: DEFAULT_SHARED_MEMORY_PER_BLOCK,
            matmul_alignment: DEFAULT_MATMUL_ALIGNMENT,
            conv_channels_last: DEFAULT_CONV_CHANNELS_LAST
                .iter()
                .map(|d| d.to_string())
                .collect(),
            triton_backend: DEFAULT_TRITON_BACKEND.to_string(),
            triton_arch: DEFAULT_TRITON_ARCH.to_string(),
            source: None,
        }
    }
}

/// The file as written. `Spanned` keeps where each value sits, so that a
/// value that parses but is out of range is still reported with its line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    warp_size: Option<Spanned<u32>>,
    grid_multiple: Option<Spanned<u32>>,
    max_threads_per_block: Option<Spanned<u32>>,
    shared_memory_per_block: Option<Spanned<u64>>,
    matmul_alignment: Option<Spanned<u32>>,
    conv_channels_last: Option<Spanned<Vec<String>>>,
    triton_backend: Option<Spanned<String>>,
    triton_arch: Option<Spanned<String>>,
}

impl GxuConfig {
    /// Reads `gxu.toml` from the folder holding `library_path`; the defaults
    /// when there is no such file (or no folder, for an empty path).
    pub fn load_beside(library_path: &str) -> Result<GxuConfig, String> {
        let Some(dir) = Path::new(library_path).parent() else {
            return Ok(GxuConfig::default());
        };
        let path = dir.join(FILE_NAME);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let text = String::from_utf8(bytes).map_err(|e| {
                    format!(
                        "{}: not UTF-8 text (byte {})",
                        path.display(),
                        e.utf8_error().valid_up_to()
                    )
                })?;
                GxuConfig::parse(&text, &path)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(GxuConfig::default()),
            Err(e) => Err(format!("{}: cannot read: {e}", path.display())),
        }
    }

    /// Parses and checks the text of a `gxu.toml` read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<GxuConfig, String> {
        let at = |offset: usize, message: &str| {
            let (line, column) = line_column(text, offset);
            format!(
                "{}: line {line}, column {column}: {message}",
                path.display()
            )
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => at(span.start, e.message().trim()),
            None => format!("{}: {}", path.display(), e.message().trim()),
        })?;

        let mut config = GxuConfig {
            source: Some(path.to_path_buf()),
            ..GxuConfig::default()
        };
        let warp_offset = raw.warp_size.as_ref().map(|v| v.span().start);
        if let Some(v) = raw.warp_size {
            if !v.get_ref().is_power_of_two() {
                return Err(at(
                    v.span().start,
                    &format!(
                        "`warp_size` must be a power of two above 0, found {}",
                        v.get_ref()
                    ),
                ));
            }
            config.warp_size = v.into_inner();
        }
        if let Some(v) = raw.grid_multiple {
            if *v.get_ref() == 0 {
                return Err(at(
                    v.span().start,
                    "`grid_multiple` must be above 0, found 0",
                ));
            }
            config.grid_multiple = v.into_inner();
        }
        if let Some(v) = raw.max_threads_per_block {
            // Every launch has one warp, so a block holds whole warps, at
            // least one.
            let threads = *v.get_ref();
            if threads == 0 || threads % config.warp_size != 0 {
                return Err(at(
                    v.span().start,
                    &format!(
                        "`max_threads_per_block` must be a positive multiple of `warp_size` ({}), found {threads}",
                        config.warp_size,
                    ),
                ));
            }
            config.max_threads_per_block = v.into_inner();
        } else if let Some(offset) = warp_offset {
            if !config
                .max_threads_per_block
                .is_multiple_of(config.warp_size)
            {
                return Err(at(
                    offset,
                    &format!(
                        "`warp_size` {} does not divide the default `max_threads_per_block` {}; \
                         set `max_threads_per_block` too",
                        config.warp_size, config.max_threads_per_block
                    ),
                ));
            }
        }
        if let Some(v) = raw.shared_memory_per_block {
            if *v.get_ref() < MIN_SHARED_MEMORY_PER_BLOCK {
                return Err(at(
                    v.span().start,
                    &format!(
                        "`shared_memory_per_block` is in bytes and must be at least {MIN_SHARED_MEMORY_PER_BLOCK}, found {}",
                        v.get_ref()
                    ),
                ));
            }
            config.shared_memory_per_block = v.into_inner();
        }
        if let Some(v) = raw.matmul_alignment {
            let bytes = *v.get_ref();
            if bytes != 0
                && !(bytes.is_power_of_two() && (2..=MAX_MATMUL_ALIGNMENT).contains(&bytes))
            {
                return Err(at(
                    v.span().start,
                    &format!(
                        "`matmul_alignment` is in bytes and must be 0 (no padding) or a power of two from 2 to {MAX_MATMUL_ALIGNMENT}, found {bytes}"
                    ),
                ));
            }
            config.matmul_alignment = bytes;
        }
        if let Some(v) = raw.conv_channels_last {
            if let Some(bad) = v
                .get_ref()
                .iter()
                .find(|d| !CONV_DTYPES.contains(&d.as_str()))
            {
                return Err(at(
                    v.span().start,
                    &format!(
                        "`conv_channels_last` lists dtypes, each one of {}, found {bad:?}",
                        CONV_DTYPES.join(", ")
                    ),
                ));
            }
            config.conv_channels_last = v.into_inner();
        }
        if let Some(v) = raw.triton_backend {
            if !kiln_plugin_api::is_valid_device_name(v.get_ref()) {
                return Err(at(
                    v.span().start,
                    &format!(
                        "`triton_backend` must match ^[a-z][a-z0-9_]{{0,31}}$ (a Triton backend such as \"cuda\" or \"gxu\"), found {:?}",
                        v.get_ref()
                    ),
                ));
            }
            config.triton_backend = v.into_inner();
        }
        if let Some(v) = raw.triton_arch {
            let arch = v.get_ref();
            if arch.trim().is_empty() || arch.chars().any(char::is_control) {
                return Err(at(
                    v.span().start,
                    &format!("`triton_arch` must be one non-empty line, found {arch:?}"),
                ));
            }
            config.triton_arch = v.into_inner();
        }
        Ok(config)
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    // A span may end inside a multi-byte character; step back to its start.
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<GxuConfig, String> {
        GxuConfig::parse(text, Path::new("/opt/gxu/gxu.toml"))
    }

    #[test]
    fn empty_file_is_the_defaults() {
        let config = parse("").expect("empty is fine");
        assert_eq!(
            (
                config.warp_size,
                config.grid_multiple,
                config.max_threads_per_block
            ),
            (32, 48, 1024)
        );
    }

    #[test]
    fn keys_override_defaults() {
        let config = parse("warp_size = 64\ngrid_multiple = 24\nmax_threads_per_block = 512\n")
            .expect("valid");
        assert_eq!(
            (
                config.warp_size,
                config.grid_multiple,
                config.max_threads_per_block
            ),
            (64, 24, 512)
        );
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let cases = [
            ("warp_size = 32\ngrid_multiple = \n", "/opt/gxu/gxu.toml: line 2, "),
            (
                "warp_size = 32\n\nwarp_sise = 16\n",
                "/opt/gxu/gxu.toml: line 3, column 1: ",
            ),
            (
                "grid_multiple = 0\n",
                "/opt/gxu/gxu.toml: line 1, column 17: `grid_multiple` must be above 0",
            ),
            (
                "\nwarp_size = 24\n",
                "/opt/gxu/gxu.toml: line 2, column 13: `warp_size` must be a power of two",
            ),
            (
                "warp_size = 0\n",
                "/opt/gxu/gxu.toml: line 1, column 13: `warp_size` must be a power of two",
            ),
            ("warp_size = \"32\"\n", "/opt/gxu/gxu.toml: line 1, column 13: "),
            ("warp_size = -1\n", "/opt/gxu/gxu.toml: line 1, column 13: "),
            (
                "warp_size = 64\nmax_threads_per_block = 32\n",
                "/opt/gxu/gxu.toml: line 2, column 25: ",
            ),
            (
                "warp_size = 32\nmax_threads_per_block = 48\n",
                "/opt/gxu/gxu.toml: line 2, column 25: `max_threads_per_block` must be a positive multiple",
            ),
            (
                "warp_size = 2048\n",
                "/opt/gxu/gxu.toml: line 1, column 13: `warp_size` 2048 does not divide",
            ),
        ];
        for (text, prefix) in cases {
            let err = parse(text).expect_err(text);
            assert!(err.starts_with(prefix), "{text:?} gave {err:?}");
            assert!(!err.contains('\n'), "one line: {err:?}");
        }
        assert!(parse("warp_sise = 16")
            .expect_err("unknown")
            .contains("warp_sise"));
    }

    #[test]
    fn matmul_alignment_is_configurable_in_bytes() {
        assert_eq!(parse("").expect("empty is fine").matmul_alignment, 16);
        for (text, bytes) in [
            ("matmul_alignment = 0\n", 0),
            ("matmul_alignment = 64\n", 64),
        ] {
            assert_eq!(parse(text).expect(text).matmul_alignment, bytes);
        }
        for bad in [1, 3, 24, 512] {
            let err = parse(&format!("\nmatmul_alignment = {bad}\n")).expect_err("out of range");
            assert!(
                err.starts_with(
                    "/opt/gxu/gxu.toml: line 2, column 20: `matmul_alignment` is in bytes"
                ) && err.ends_with(&format!("found {bad}")),
                "{err}"
            );
        }
    }

    #[test]
    fn conv_channels_last_lists_floating_dtypes() {
        assert_eq!(
            parse("").expect("empty is fine").conv_channels_last,
            ["float16", "bfloat16"]
        );
        for (text, dtypes) in [
            ("conv_channels_last = []\n", &[][..]),
            ("conv_channels_last = [\"float32\"]\n", &["float32"][..]),
        ] {
            assert_eq!(parse(text).expect(text).conv_channels_last, dtypes);
        }
        let err = parse("\nconv_channels_last = [\"half\"]\n").expect_err("not a dtype");
        assert!(
            err.starts_with("/opt/gxu/gxu.toml: line 2, column 22: `conv_channels_last` lists")
                && err.ends_with("found \"half\""),
            "{err}"
        );
    }

    #[test]
    fn shared_memory_per_block_is_configurable_in_bytes() {
        assert_eq!(
            parse("").expect("empty is fine").shared_memory_per_block,
            96 * 1024
        );
        let small = parse("shared_memory_per_block = 49152\n").expect("valid");
        assert_eq!(small.shared_memory_per_block, 49152);
        let err = parse("\nshared_memory_per_block = 48\n").expect_err("48 bytes");
        assert!(
            err.starts_with(
                "/opt/gxu/gxu.toml: line 2, column 27: `shared_memory_per_block` is in bytes"
            ),
            "{err}"
        );
    }

    #[test]
    fn the_triton_target_is_configurable() {
        let default = parse("").expect("empty is fine");
        assert_eq!(
            (
                default.triton_backend.as_str(),
                default.triton_arch.as_str()
            ),
            ("cuda", "90")
        );
        let own = parse("triton_backend = \"gxu\"\ntriton_arch = \"gxu2\"\n").expect("valid");
        assert_eq!(
            (own.triton_backend.as_str(), own.triton_arch.as_str()),
            ("gxu", "gxu2")
        );
        for (text, prefix) in [
            (
                "triton_backend = \"Gxu\"\n",
                "/opt/gxu/gxu.toml: line 1, column 18: `triton_backend` must match",
            ),
            (
                "triton_arch = \"\"\n",
                "/opt/gxu/gxu.toml: line 1, column 15: `triton_arch` must be one non-empty line",
            ),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.starts_with(prefix), "{text:?} gave {err:?}");
        }
    }

    #[test]
    fn columns_count_characters() {
        assert_eq!(line_column("a\nbé = x", 6), (2, 4));
        assert_eq!(line_column("abc", 99), (1, 4));
        assert_eq!(line_column("é", 1), (1, 1));
    }
}
