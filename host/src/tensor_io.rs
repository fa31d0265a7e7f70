//! Tensor files as DESIGN.md defines them: raw little-endian, row-major elements of the
//! graph's dtype, one file per tensor (`NAME.bin` or `inputN.bin` in, `outputN.bin` out).
//!
//! Shared by `host eval` and `host run`. It never guesses a shape or dtype: they always
//! come from the graph, and a file of the wrong size is an error.

use crate::graph::{DType, TensorMeta};
use crate::tensor::Tensor;
use std::path::{Path, PathBuf};

/// Errors reading or writing tensor files.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// I/O failed.
    #[error("cannot access {path}")]
    Io {
        /// the file
        path: PathBuf,
        /// why
        #[source]
        source: std::io::Error,
    },
    /// The file's size does not match the tensor.
    #[error("{path}: expected {expected} bytes ({dtype}{shape:?}), found {found}")]
    Size {
        /// the file
        path: PathBuf,
        /// bytes the shape and dtype need
        expected: u64,
        /// bytes in the file
        found: u64,
        /// the dtype
        dtype: DType,
        /// the shape
        shape: Vec<i64>,
    },
    /// Neither `NAME.bin` nor `inputN.bin` exists.
    #[error("no file for input `{name}` in {dir}: looked for {name}.bin and input{index}.bin")]
    Missing {
        /// the input's name
        name: String,
        /// its position
        index: usize,
        /// the folder
        dir: PathBuf,
    },
}

/// Reads one tensor file of the given metadata.
pub fn read_tensor(path: &Path, meta: &TensorMeta) -> Result<Tensor, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.into(),
        source,
    })?;
    let expected = meta.numel() as u64 * meta.dtype.size_bytes() as u64;
    if bytes.len() as u64 != expected {
        return Err(Error::Size {
            path: path.into(),
            expected,
            found: bytes.len() as u64,
            dtype: meta.dtype,
            shape: meta.shape.clone(),
        });
    }
    Ok(Tensor::new(
        meta.shape.clone(),
        meta.dtype,
        meta.dtype.decode_le(&bytes),
    ))
}

/// Reads the inputs from `dir`: `NAME.bin` by name, else `inputN.bin` by position.
pub fn read_inputs(dir: &Path, inputs: &[(String, TensorMeta)]) -> Result<Vec<Tensor>, Error> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, (name, meta))| {
            let by_name = dir.join(format!("{name}.bin"));
            let by_pos = dir.join(format!("input{i}.bin"));
            let path = if by_name.is_file() {
                by_name
            } else if by_pos.is_file() {
                by_pos
            } else {
                return Err(Error::Missing {
                    name: name.clone(),
                    index: i,
                    dir: dir.into(),
                });
            };
            read_tensor(&path, meta)
        })
        .collect()
}

/// Writes `outputN.bin` for each tensor into `dir` (created if needed).
pub fn write_outputs(dir: &Path, outputs: &[Tensor]) -> Result<Vec<PathBuf>, Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.into(),
        source,
    })?;
    let mut paths = vec![];
    for (i, t) in outputs.iter().enumerate() {
        let path = dir.join(format!("output{i}.bin"));
        std::fs::write(&path, t.dtype.encode_le(&t.values())).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        paths.push(path);
    }
    Ok(paths)
}

/// Deterministic pseudo-random inputs (SplitMix64): floats uniform in [-1, 1), integers in
/// [-8, 8), bools fair; the same seed always gives the same tensors.
pub fn random_inputs(metas: &[TensorMeta], seed: u64) -> Vec<Tensor> {
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    metas
        .iter()
        .map(|m| {
            let vals = (0..m.numel())
                .map(|_| {
                    let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
                    match m.dtype {
                        DType::Bool => (u < 0.5) as i64 as f64,
                        DType::Int32 | DType::Int64 => (u * 16.0).floor() - 8.0,
                        _ => u * 2.0 - 1.0,
                    }
                })
                .collect();
            Tensor::new(m.shape.clone(), m.dtype, vals)
        })
        .collect()
}
