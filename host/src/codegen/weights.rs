//! The weights file: a program's large constants in `weights.safetensors`
//! beside the generated code, the way AOTInductor keeps constants out of its
//! code. A constant of more than [`INLINE_MAX_ELEMENTS`] elements (a model's
//! weights, a folded table) goes into the file in its own dtype; smaller ones
//! and fills stay literals in the code, where a reader sees them.
//!
//! The file is plain [safetensors](https://huggingface.co/docs/safetensors):
//! an 8-byte little-endian header length, a JSON header naming every tensor
//! with its dtype, shape and byte range, then the data (written by the
//! `safetensors` crate, tensors aligned to their element size). Tensors are
//! keyed by the buffer's name in the generated code, so a reader of the file
//! and of the code sees the same names. Both wrappers read it: the Python
//! wrapper memory-maps it once, on first use; `wrapper.cpp` reads it in
//! `kiln_load_weights(path)` and checks every tensor's dtype and size.

use std::path::Path;

use crate::graph::dtype::DType;
use crate::graph::ops::ConstData;
use crate::schedule::ir::{BufferId, BufferKind, Program};

/// The file's name, beside `output_code.py` or `wrapper.cpp`.
pub const FILE_NAME: &str = "weights.safetensors";

/// Constants of at most this many elements stay literals in the code.
pub const INLINE_MAX_ELEMENTS: i64 = 64;

/// Whether buffer `b` of `p` is read from the weights file.
pub fn in_file(p: &Program, b: BufferId) -> bool {
    let buf = p.buffer(b);
    matches!(
        &buf.kind,
        BufferKind::Constant {
            data: ConstData::Values(_) | ConstData::Bytes { .. }
        }
    ) && buf.numel() > INLINE_MAX_ELEMENTS
}

/// One tensor of the file.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its key: the buffer's name in the generated code.
    pub key: String,
    /// The buffer it fills.
    pub buffer: BufferId,
    /// Its dtype.
    pub dtype: DType,
    /// Its sizes.
    pub shape: Vec<usize>,
    /// Its elements.
    pub data: ConstData,
}

impl Entry {
    /// Bytes of its data.
    pub fn bytes(&self) -> u64 {
        self.shape.iter().product::<usize>() as u64 * self.dtype.size_bytes() as u64
    }
}

/// The tensors of a weights file, in the order the wrapper binds them.
#[derive(Clone, Debug, Default)]
pub struct Weights {
    /// Every tensor.
    pub entries: Vec<Entry>,
}

/// Why the weights file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The crate refused the tensors or the file could not be written.
    #[error("writing {path}: {message}")]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// What failed.
        message: String,
    },
}

/// The safetensors dtype of `d`.
pub fn safetensors_dtype(d: DType) -> safetensors::Dtype {
    use safetensors::Dtype as S;
    match d {
        DType::Bool => S::BOOL,
        DType::Int32 => S::I32,
        DType::Int64 => S::I64,
        DType::Float16 => S::F16,
        DType::BFloat16 => S::BF16,
        DType::Float32 => S::F32,
        DType::Float64 => S::F64,
    }
}

/// The dtype's name in a safetensors header (`F32`).
pub fn header_name(d: DType) -> String {
    safetensors_dtype(d).to_string()
}

impl Weights {
    /// The tensors a wrapper reads from the file: `keys`, each the code's
    /// name of a constant buffer of `p`, in the wrapper's order.
    pub fn from_keys(p: &Program, keys: &[(String, BufferId)]) -> Weights {
        let entries = keys
            .iter()
            .filter_map(|(key, b)| {
                let b = *b;
                let buf = p.buffer(b);
                let BufferKind::Constant { data } = &buf.kind else {
                    return None;
                };
                Some(Entry {
                    key: key.clone(),
                    buffer: b,
                    dtype: buf.dtype,
                    shape: buf.shape.iter().map(|d| d.hint().max(0) as usize).collect(),
                    data: data.clone(),
                })
            })
            .collect();
        Weights { entries }
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of all tensors' data.
    pub fn data_bytes(&self) -> u64 {
        self.entries.iter().map(Entry::bytes).sum()
    }

    /// Writes the file at `path`.
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        let views: Vec<(String, View<'_>)> = self
            .entries
            .iter()
            .map(|e| (e.key.clone(), View(e)))
            .collect();
        let mut metadata = std::collections::HashMap::new();
        metadata.insert("format".to_string(), "kiln".to_string());
        let failed = |message: String| Error::Write {
            path: path.to_path_buf(),
            message,
        };
        safetensors::serialize_to_file(views, Some(metadata), path)
            .map_err(|e| failed(e.to_string()))?;
        // The crate writes through a private temporary file (mode 0600); the
        // weights are read as the code beside them is.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
                .map_err(|e| failed(e.to_string()))?;
        }
        Ok(())
    }
}

/// An entry as the `safetensors` crate reads it.
struct View<'a>(&'a Entry);

impl safetensors::View for View<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        safetensors_dtype(self.0.dtype)
    }

    fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        let n = self.0.shape.iter().product();
        self.0.data.storage(self.0.dtype, n)
    }

    fn data_len(&self) -> usize {
        self.0.bytes() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn file_round_trips_through_the_safetensors_reader() {
        let entry = |key: &str, dtype, shape: Vec<usize>, data| Entry {
            key: key.into(),
            buffer: BufferId(0),
            dtype,
            shape,
            data,
        };
        let w = Weights {
            entries: vec![
                entry(
                    "b_w",
                    DType::Float32,
                    vec![2, 3],
                    ConstData::Values(Arc::from(vec![1.0, -2.0, 3.5, 0.0, 5.0, 6.25])),
                ),
                entry(
                    "b_h",
                    DType::BFloat16,
                    vec![2],
                    ConstData::Bytes {
                        dtype: DType::BFloat16,
                        bytes: Arc::from(DType::BFloat16.encode_le(&[1.5, -4.0])),
                    },
                ),
                entry("b_i", DType::Int64, vec![3], ConstData::Fill(7.0)),
            ],
        };
        let dir = std::env::temp_dir().join(format!("kiln-weights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE_NAME);
        w.write(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let t = st.tensor("b_w").unwrap();
        assert_eq!(t.dtype(), safetensors::Dtype::F32);
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(
            DType::Float32.decode_le(t.data()),
            vec![1.0, -2.0, 3.5, 0.0, 5.0, 6.25]
        );
        let h = st.tensor("b_h").unwrap();
        assert_eq!(DType::BFloat16.decode_le(h.data()), vec![1.5, -4.0]);
        let i = st.tensor("b_i").unwrap();
        assert_eq!(i.dtype(), safetensors::Dtype::I64);
        assert_eq!(DType::Int64.decode_le(i.data()), vec![7.0; 3]);
        // Every tensor starts at a multiple of its element size (the header is padded).
        let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(header % 8, 0);
        std::fs::remove_dir_all(&dir).ok();
    }
}
