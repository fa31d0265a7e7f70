//! Tensor files as `docs/usage.md` describes them: raw little-endian, row-major elements of the
//! graph's dtype, one file per tensor (`NAME.bin` or `inputN.bin` in; `NAME.bin` and
//! `outputN.bin` out).
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
    /// The inputs folder does not exist or is not a folder.
    #[error("the inputs folder {dir} does not exist (or is not a folder); give --inputs an existing folder")]
    MissingDir {
        /// the folder
        dir: PathBuf,
    },
    /// The process could not allocate a tensor.
    #[error(transparent)]
    OutOfMemory(#[from] crate::memory::OutOfMemory),
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
/// The file's size is checked before anything is read, and the buffers are
/// allocated fallibly: a file too large for the memory left is refused.
pub fn read_tensor(path: &Path, meta: &TensorMeta) -> Result<Tensor, Error> {
    use std::io::Read;
    let io = |source| Error::Io {
        path: path.into(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let found = file.metadata().map_err(io)?.len();
    let expected = (meta.numel().max(0) as u64).saturating_mul(meta.dtype.size_bytes() as u64);
    if found != expected {
        return Err(Error::Size {
            path: path.into(),
            expected,
            found,
            dtype: meta.dtype,
            shape: meta.hint_shape(),
        });
    }
    let what = || format!("reading {}", path.display());
    let len = usize::try_from(found).unwrap_or(usize::MAX);
    let mut bytes = crate::memory::try_vec::<u8>(what, len)?;
    file.read_to_end(&mut bytes).map_err(io)?;
    let mut values = crate::memory::try_vec::<f64>(what, len / meta.dtype.size_bytes())?;
    // Decoded a block at a time, so the only large buffers are the two above.
    for block in bytes.chunks(meta.dtype.size_bytes() << 16) {
        values.extend(meta.dtype.decode_le(block));
    }
    Ok(Tensor::new(meta.hint_shape(), meta.dtype, values))
}

/// Reads the inputs from `dir`: `NAME.bin` by name, else `inputN.bin` by position.
pub fn read_inputs(dir: &Path, inputs: &[(String, TensorMeta)]) -> Result<Vec<Tensor>, Error> {
    if !dir.is_dir() {
        return Err(Error::MissingDir { dir: dir.into() });
    }
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

/// The files one output was written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// `NAME.bin`, by the output's name in the graph, when that name makes a
    /// safe, unambiguous file name.
    pub named: Option<PathBuf>,
    /// `outputN.bin`, by position (a link to the named file when there is one).
    pub positional: PathBuf,
}

/// Whether `name` can be a file name of its own: letters, digits, `_`, `-`
/// and `.`, not starting with a dot, of reasonable length. Anything else (a
/// `/`, a `..`, a character the shell or another system treats specially)
/// is never written as a path.
fn safe_file_stem(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Writes each output into `dir` (created if needed) as `NAME.bin`, named as
/// the graph names it, with `outputN.bin` by position beside it (a symbolic
/// link to the named file where the platform has them), as inputs are read
/// by name or by position. An output whose name is not a safe file name, is
/// shared with another output, or is another position's `outputK` gets only
/// its positional file.
pub fn write_outputs(dir: &Path, outputs: &[(String, Tensor)]) -> Result<Vec<Written>, Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.into(),
        source,
    })?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let positional_names: Vec<String> = (0..outputs.len()).map(|i| format!("output{i}")).collect();
    let mut written = vec![];
    for (i, (name, t)) in outputs.iter().enumerate() {
        let positional = dir.join(format!("output{i}.bin"));
        let unique = outputs.iter().filter(|(n, _)| n == name).count() == 1;
        let clashes = positional_names
            .iter()
            .enumerate()
            .any(|(k, p)| k != i && p == name);
        let named = (safe_file_stem(name) && unique && !clashes && *name != positional_names[i])
            .then(|| dir.join(format!("{name}.bin")));
        let bytes = t.dtype.encode_le(&t.values());
        // A file already there (a link from an earlier run, say) is replaced,
        // never written through.
        let replace = |path: &Path| match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path)(e)),
            _ => Ok(()),
        };
        let data_file = named.as_ref().unwrap_or(&positional);
        replace(data_file)?;
        std::fs::write(data_file, &bytes).map_err(io(data_file))?;
        if named.is_some() {
            replace(&positional)?;
            #[cfg(unix)]
            let linked = std::os::unix::fs::symlink(format!("{name}.bin"), &positional);
            #[cfg(not(unix))]
            let linked = std::fs::write(&positional, &bytes);
            linked.map_err(io(&positional))?;
        }
        written.push(Written { named, positional });
    }
    Ok(written)
}

/// Deterministic pseudo-random inputs (SplitMix64): floats uniform in [-1, 1), integers in
/// [-8, 8), bools fair; the same seed always gives the same tensors. For the small graphs
/// of tests and conformance: the commands use [`random_inputs_bounded`], which refuses
/// inputs too large for the memory left instead of aborting.
pub fn random_inputs(metas: &[TensorMeta], seed: u64) -> Vec<Tensor> {
    let mut next = splitmix(seed);
    metas
        .iter()
        .map(|m| {
            let mut values = Vec::new();
            draw(m, None, &mut next, &mut values);
            Tensor::new(m.hint_shape(), m.dtype, values)
        })
        .collect()
}

/// [`random_inputs`], except that an integer input with a bound in `bounds` (by
/// position; see [`crate::graph::Graph::index_bound`]) is drawn in `[0, bound)`: valid
/// indices, such as a model's token ids. An input the process cannot allocate is
/// refused ([`Error::OutOfMemory`]).
pub fn random_inputs_bounded(
    metas: &[TensorMeta],
    bounds: &[Option<i64>],
    seed: u64,
) -> Result<Vec<Tensor>, Error> {
    let mut next = splitmix(seed);
    metas
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let bound = bounds.get(i).copied().flatten().filter(|&b| b > 0);
            let what = || format!("drawing random input {i} ({}{:?})", m.dtype, m.shape);
            let mut values = crate::memory::try_vec(what, m.numel().max(0) as usize)?;
            draw(m, bound, &mut next, &mut values);
            Ok(Tensor::new(m.hint_shape(), m.dtype, values))
        })
        .collect()
}

/// The SplitMix64 generator from `seed`.
fn splitmix(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Appends `m`'s elements, drawn from `next`, to `values`.
fn draw(m: &TensorMeta, bound: Option<i64>, next: &mut impl FnMut() -> u64, values: &mut Vec<f64>) {
    values.extend((0..m.numel()).map(|_| {
        let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
        match (m.dtype, bound) {
            (DType::Int32 | DType::Int64, Some(b)) => (u * b as f64).floor(),
            (DType::Bool, _) => (u < 0.5) as i64 as f64,
            (DType::Int32 | DType::Int64, None) => (u * 16.0).floor() - 8.0,
            _ => u * 2.0 - 1.0,
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_read_as_indices_are_drawn_as_valid_indices() {
        // Token ids reshaped and cast before an embedding of 50 rows, and a second
        // integer input that is only added: only the first is an index.
        let g = crate::graph::parse_toml(
            r#"format = "kiln-graph/1"
name = "ids"
outputs = ["y", "s"]
[[inputs]]
name = "ids"
shape = [2, 5]
dtype = "int32"
[[inputs]]
name = "w"
shape = [50, 4]
dtype = "float32"
[[inputs]]
name = "k"
shape = [3]
dtype = "int64"
[[nodes]]
name = "flat"
op = "reshape"
args = ["ids", [10]]
[[nodes]]
name = "long"
op = "to"
args = ["flat"]
attrs = { dtype = "int64" }
[[nodes]]
name = "y"
op = "embedding"
args = ["w", "long"]
[[nodes]]
name = "s"
op = "add"
args = ["k", 1]
"#,
        )
        .expect("a valid graph");
        let bounds: Vec<_> = g.inputs().iter().map(|&i| g.index_bound(i)).collect();
        assert_eq!(bounds, [Some(50), None, None]);
        let metas: Vec<_> = g
            .inputs()
            .iter()
            .map(|&i| g.node(i).expect("an input").outputs[0].clone())
            .collect();
        let inputs = random_inputs_bounded(&metas, &bounds, 7).unwrap();
        let ids = inputs[0].values();
        assert!(ids
            .iter()
            .all(|&v| (0.0..50.0).contains(&v) && v.fract() == 0.0));
        assert!(
            ids.iter().any(|&v| v >= 16.0),
            "ids span the vocabulary: {ids:?}"
        );
        assert!(inputs[2].values().iter().all(|&v| (-8.0..8.0).contains(&v)));
    }

    fn scalar(v: f64) -> Tensor {
        Tensor::new(vec![], DType::Float32, vec![v])
    }

    #[test]
    fn outputs_are_named_by_the_graph_unless_the_name_is_unsafe_or_ambiguous() {
        let dir = std::env::temp_dir().join(format!("kiln-tensor-io-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let outs: Vec<(String, Tensor)> = [
            ("logits", 1.0),
            ("../escape", 2.0),
            ("twice", 3.0),
            ("twice", 4.0),
            ("output0", 5.0),
            (".hidden", 6.0),
            ("output6", 7.0),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), scalar(v)))
        .collect();
        let written = write_outputs(&dir, &outs).expect("write");
        let named: Vec<Option<String>> = written
            .iter()
            .map(|w| {
                w.named
                    .as_ref()
                    .map(|p| p.file_name().unwrap().to_string_lossy().into())
            })
            .collect();
        assert_eq!(
            named,
            [
                Some("logits.bin".to_string()),
                None,
                None,
                None,
                None,
                None,
                None
            ]
        );
        // Every output is readable by position, with its own value.
        for (i, (_, t)) in outs.iter().enumerate() {
            let bytes = std::fs::read(dir.join(format!("output{i}.bin"))).expect("positional");
            assert_eq!(bytes, t.dtype.encode_le(&t.to_vec()), "output{i}");
        }
        assert_eq!(
            std::fs::read(dir.join("logits.bin")).unwrap(),
            1f32.to_le_bytes()
        );
        // Nothing was written outside the folder.
        assert!(!dir.parent().unwrap().join("escape.bin").exists());
        // Writing again where links now stand replaces them, never writes
        // through them: `logits` becomes positional only.
        let again = vec![("a/b".to_string(), scalar(8.0))];
        write_outputs(&dir, &again).expect("again");
        assert_eq!(
            std::fs::read(dir.join("output0.bin")).unwrap(),
            8f32.to_le_bytes()
        );
        assert_eq!(
            std::fs::read(dir.join("logits.bin")).unwrap(),
            1f32.to_le_bytes()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_inputs_folder_is_named_as_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("nowhere");
        let meta = TensorMeta::contiguous(vec![2], DType::Float32);
        let err = read_inputs(&gone, &[("x".to_string(), meta.clone())]).unwrap_err();
        assert!(matches!(err, Error::MissingDir { .. }), "{err}");
        assert!(err.to_string().contains("inputs folder"), "{err}");
        // A file of the wrong size is refused before it is read.
        std::fs::write(dir.path().join("x.bin"), [0u8; 12]).unwrap();
        let err = read_inputs(dir.path(), &[("x".to_string(), meta.clone())]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Size {
                    expected: 8,
                    found: 12,
                    ..
                }
            ),
            "{err}"
        );
        std::fs::write(dir.path().join("x.bin"), 1.5f32.to_le_bytes().repeat(2)).unwrap();
        let read = read_inputs(dir.path(), &[("x".to_string(), meta)]).unwrap();
        assert_eq!(read[0].to_vec(), vec![1.5, 1.5]);
    }
}
