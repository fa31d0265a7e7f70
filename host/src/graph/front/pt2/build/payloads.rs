//! The stored tensors of an archive (parameters, buffers, constants), read as their
//! `*_config.json` describe them, strided layouts gathered into dense storage.

use super::super::archive::Archive;
use super::super::schema::{self, PayloadConfig};
use super::super::Pt2Error;
use super::{json, CONSTANTS_CONFIG, CONSTANTS_DIR, WEIGHTS_CONFIG, WEIGHTS_DIR};
use crate::graph::ir::TensorMeta;
use crate::graph::ops::ConstData;
use std::collections::HashMap;
use std::io::{Read, Seek};
use std::sync::Arc;

/// Reads stored tensors, loading each config member once.
pub(super) struct Payloads<'a, R> {
    pub(super) archive: &'a mut Archive<R>,
    pub(super) prefix: String,
    pub(super) configs: HashMap<&'static str, PayloadConfig>,
}

impl<R: Read + Seek> Payloads<'_, R> {
    fn config(&mut self, member: &'static str) -> Result<&PayloadConfig, Pt2Error> {
        if !self.configs.contains_key(member) {
            let full = format!("{}{member}", self.prefix);
            let c: PayloadConfig = json(self.archive, &full)?;
            self.configs.insert(member, c);
        }
        self.configs
            .get(member)
            .ok_or_else(|| Pt2Error::MissingMember(member.into()))
    }

    /// The values of a parameter/buffer (`constant` false) or tensor constant.
    pub(super) fn values(
        &mut self,
        key: &str,
        constant: bool,
        want: &TensorMeta,
    ) -> Result<ConstData, Pt2Error> {
        let mut places = vec![(CONSTANTS_CONFIG, CONSTANTS_DIR)];
        if !constant {
            // Non-persistent buffers are stored with the constants.
            places.insert(0, (WEIGHTS_CONFIG, WEIGHTS_DIR));
        }
        for (i, (config, dir)) in places.iter().enumerate() {
            let full = format!("{}{config}", self.prefix);
            if i > 0 && !self.archive.has(&full) {
                continue;
            }
            let Some(meta) = self.config(config)?.config.get(key) else {
                continue;
            };
            let (use_pickle, path_name) = (meta.use_pickle, meta.path_name.clone());
            let (dtype, shape, strides, offset) = layout(&meta.tensor_meta, key)?;
            if use_pickle {
                return Err(Pt2Error::Weight {
                    name: key.into(),
                    message: "stored pickled (use_pickle), which Kiln cannot read".into(),
                });
            }
            let member = format!("{}{dir}{path_name}", self.prefix);
            if dtype != want.dtype || Some(&shape) != want.fixed_shape().as_ref() {
                return Err(Pt2Error::Weight {
                    name: key.into(),
                    message: format!(
                        "stored as {dtype}{shape:?}, but the graph uses it as {}{:?}",
                        want.dtype, want.shape
                    ),
                });
            }
            // Its dense tensor, which a strided layout's gather makes beside
            // the stored bytes, must fit before anything is read.
            let dense = crate::memory::elements(want.numel(), dtype.size_bytes() as u64);
            if dense.is_none_or(|bytes| bytes > self.archive.left()) {
                return Err(self.archive.refuse(
                    &format!("weight `{key}` (member `{member}`)"),
                    "this weight",
                    dense,
                ));
            }
            let need = extent_bytes(key, dtype, &shape, &strides, offset)?;
            let stored = self.archive.read_prefix(&member, need)?;
            let bytes = gather(stored, key, dtype, &shape, &strides, offset)?;
            return Ok(ConstData::Bytes { dtype, bytes });
        }
        Err(Pt2Error::Weight {
            name: key.into(),
            message: format!(
                "not listed in {}{}",
                self.prefix,
                places.iter().map(|p| p.0).collect::<Vec<_>>().join(" or ")
            ),
        })
    }
}

pub(super) type Layout = (crate::graph::DType, Vec<i64>, Vec<i64>, i64);

pub(super) fn layout(m: &schema::TensorMeta, key: &str) -> Result<Layout, Pt2Error> {
    let dtype = schema::dtype(m.dtype, key)?;
    let shape = schema::int_sizes(m, key)?;
    let strides = if m.strides.is_empty() {
        crate::graph::shape::contiguous_strides(&shape)
    } else {
        m.strides
            .iter()
            .map(|s| schema::sym_int(s, key))
            .collect::<Result<Vec<_>, _>>()?
    };
    let offset = match &m.storage_offset {
        Some(o) => schema::sym_int(o, key)?,
        None => 0,
    };
    if strides.len() != shape.len() || strides.iter().any(|&s| s < 0) || offset < 0 {
        return Err(Pt2Error::Weight {
            name: key.into(),
            message: format!(
                "bad layout: strides {strides:?}, offset {offset} for sizes {shape:?}"
            ),
        });
    }
    Ok((dtype, shape, strides, offset))
}

/// The bytes of storage a strided tensor's layout reaches (0 for no elements).
pub(super) fn extent_bytes(
    key: &str,
    dtype: crate::graph::DType,
    shape: &[i64],
    strides: &[i64],
    offset: i64,
) -> Result<u64, Pt2Error> {
    let overflow = || Pt2Error::Overflow {
        tensor: key.into(),
        message: "the storage extent does not fit in 64 bits".into(),
    };
    if shape.iter().product::<i64>() == 0 {
        return Ok(0);
    }
    // One past the last element read, in elements.
    let mut end = offset.checked_add(1).ok_or_else(overflow)?;
    for (&d, &s) in shape.iter().zip(strides) {
        end = (d - 1)
            .checked_mul(s)
            .and_then(|x| end.checked_add(x))
            .ok_or_else(overflow)?;
    }
    let need = end
        .checked_mul(dtype.size_bytes() as i64)
        .ok_or_else(overflow)?;
    Ok(need.max(0) as u64)
}

/// The row-major elements of a strided tensor whose storage is `stored` (as
/// much as its layout reaches), as dense little-endian storage of `dtype`:
/// `stored` itself when the layout is already dense, so that weights are
/// never copied nor decoded.
pub(super) fn gather(
    stored: Arc<[u8]>,
    key: &str,
    dtype: crate::graph::DType,
    shape: &[i64],
    strides: &[i64],
    offset: i64,
) -> Result<Arc<[u8]>, Pt2Error> {
    let numel: i64 = shape.iter().product();
    if numel == 0 {
        return Ok(Arc::from(Vec::new()));
    }
    let elem = dtype.size_bytes();
    let need = extent_bytes(key, dtype, shape, strides, offset)?;
    if (stored.len() as u64) < need {
        return Err(Pt2Error::Weight {
            name: key.into(),
            message: format!(
                "the stored file has {} bytes, its layout needs {need}",
                stored.len()
            ),
        });
    }
    let dense = offset == 0
        && crate::graph::shape::contiguous_strides(shape)
            .iter()
            .zip(strides.iter().zip(shape))
            .all(|(c, (s, d))| *d == 1 || c == s);
    if dense && stored.len() == numel as usize * elem {
        return Ok(stored);
    }
    let mut out = crate::memory::try_vec(
        || format!("gathering weight `{key}` into dense storage"),
        numel as usize * elem,
    )?;
    let mut index = vec![0i64; shape.len()];
    for _ in 0..numel {
        let at = (offset + index.iter().zip(strides).map(|(i, s)| i * s).sum::<i64>()) as usize;
        out.extend_from_slice(&stored[at * elem..(at + 1) * elem]);
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Ok(Arc::from(out))
}
