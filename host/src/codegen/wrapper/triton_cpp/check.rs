//! What the C++ wrapper of a Triton device refuses, before anything is
//! compiled, and a matrix product as BLAS (the plugin's `kilnGemm`) sees it.

use super::super::cpp::layout::is_dense;
use super::{Error, Options, Strings, GEMM_FUNCTION, GRAPH_FUNCTIONS, MEMORY_FUNCTIONS};
use crate::codegen::triton;
use crate::graph::dtype::DType;
use crate::plugins::cpp_text::defines_function;
use crate::schedule::index::Size;
use crate::schedule::ir::{BufferId, ExternCall, ExternOp, Program, Step, View};
use crate::schedule::Scheduled;

/// What the wrapper can do without the binaries: refuses programs it cannot
/// run (autotuned kernels, convolutions of 3 spatial dims or a symbolic image
/// size, matrix products the plugin has no `kilnGemm` for or whose operands no
/// BLAS reads, strided outputs) before anything is compiled.
pub fn check(
    scheduled: &Scheduled,
    kernels: &triton::Kernels,
    strings: &Strings,
    options: &Options,
) -> Result<(), Error> {
    if options.graphs {
        if let Some(function) = GRAPH_FUNCTIONS
            .into_iter()
            .find(|f| !defines_function(&strings.driver, f))
        {
            return Err(Error::Unsupported(format!(
                "--cuda-graph captures the call with the plugin's graph functions, and the {} \
                 plugin's kernel_driver does not define `{function}`; leave --cuda-graph out",
                strings.device
            )));
        }
    }
    for function in ["loadKernel", "launchKernel"]
        .into_iter()
        .chain(MEMORY_FUNCTIONS)
    {
        if !defines_function(&strings.driver, function) {
            return Err(Error::Unsupported(format!(
                "the {} plugin's kernel_driver does not define `{function}`, which Kiln's C++ wrapper \
                 calls (kiln_plugin_kit::driver::device_memory writes the device-memory functions for a \
                 CUDA-like API); `host compile` without `--wrapper cpp` writes the Python wrapper, \
                 which does not need it",
                strings.device
            )));
        }
    }
    // An input a step writes is state the program updates in place: the wrapper keeps
    // it in the output that gives its new value, as a whole.
    let p = &scheduled.program;
    if let Some(&b) = p
        .inputs
        .iter()
        .find(|&&b| written(p, b) && state_output(p, b).is_none())
    {
        return Err(Error::Unsupported(format!(
            "input `{}` is written in place, and no output of the program gives its whole new \
             value (a bug in Kiln's scheduler: please report)",
            p.buffer(b).name
        )));
    }
    if let Some(k) = kernels.info.iter().find(|k| k.candidates.len() > 1) {
        return Err(Error::Unsupported(format!(
            "kernel `{}` is autotuned, which needs Triton at run time: leave --autotune out for --wrapper cpp",
            k.name
        )));
    }
    let p = &scheduled.program;
    for (i, step) in p.steps.iter().enumerate() {
        if let Step::Extern(e) = step {
            match &e.op {
                ExternOp::Mm | ExternOp::Bmm => {
                    if !defines_function(&strings.driver, GEMM_FUNCTION) {
                        return Err(Error::Unsupported(format!(
                            "a matrix product (`{}`): the {} plugin's kernel_driver defines no \
                             `{GEMM_FUNCTION}` for the C++ wrapper; `host compile` without \
                             `--wrapper cpp` writes the Python wrapper, which does not need it",
                            e.op.name(),
                            strings.device
                        )));
                    }
                    gemm(p, e)?;
                }
                ExternOp::Addmm => {
                    return Err(Error::Unsupported(
                        "a matrix product with its bias in the library's epilogue: the C++ \
                         wrapper's product takes no bias (the driver schedules it only for the \
                         Python wrapper)"
                            .into(),
                    ))
                }
                ExternOp::Conv { .. } => {
                    if !kernels.convs.contains_key(&i) {
                        let x = &e.args[0];
                        return Err(Error::Unsupported(format!(
                            "a convolution over an input of sizes {:?}: Kiln's C++ wrapper for \
                             Triton devices runs 1-D and 2-D convolutions of static sizes but \
                             for the batch; `host compile` without `--wrapper cpp` writes the \
                             Python wrapper (output_code.py), which runs this one",
                            x.shape
                        )));
                    }
                }
                ExternOp::IndexCopy { .. } => {
                    let x = &e.args[0];
                    if !kernels.index_copies.contains_key(&i) || !is_dense(&x.shape, &x.strides) {
                        return Err(Error::Unsupported(format!(
                            "an index_copy of {} dims into a tensor of strides {:?}: Kiln's C++ \
                             wrapper for Triton devices copies at most four dims, into a dense \
                             tensor; `host compile` without `--wrapper cpp` writes the Python \
                             wrapper (output_code.py), which runs it",
                            e.args[2].shape.len(),
                            x.strides
                        )));
                    }
                }
                ExternOp::GroupedMm | ExternOp::SortRuns { .. } | ExternOp::MergeRuns { .. } => {
                    if !kernels.templates.contains_key(&i) {
                        return Err(Error::Unsupported(format!(
                            "a `{}` step without Kiln's kernel (its sizes are not static)",
                            e.op.name()
                        )));
                    }
                }
                ExternOp::Attention { .. } => {
                    if !kernels.attention.launches.contains_key(&i) {
                        return Err(Error::Unsupported(
                            "an attention step without a fused kernel".into(),
                        ));
                    }
                }
            }
        }
    }
    for (i, v) in p.outputs.iter().enumerate() {
        if !is_dense(&v.shape, &v.strides) {
            return Err(Error::Unsupported(format!(
                "output {i} is a strided view (sizes {:?}, strides {:?}) of another tensor: Kiln's \
                 C++ wrapper for Triton devices returns dense tensors only (make it contiguous in \
                 the graph; `host compile` without `--wrapper cpp` writes the Python wrapper, which \
                 returns views)",
                v.shape, v.strides
            )));
        }
    }
    Ok(())
}

/// A matrix product as BLAS sees it: row-major `C = op(A) · op(B)`. Each size is
/// an expression over the size symbols (a number in a compile of one size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Gemm {
    pub(super) dtype: u8,
    pub(super) batch: Size,
    pub(super) m: Size,
    pub(super) n: Size,
    pub(super) k: Size,
    /// Per operand: transposed, its leading dimension, its batch stride.
    pub(super) a: (bool, Size, Size),
    pub(super) b: (bool, Size, Size),
    /// The result's leading dimension and batch stride.
    pub(super) c: (Size, Size),
    /// The sizes that may pass `2^31 - 1` within the ranges (BLAS takes 32-bit
    /// sizes): the wrapper checks them at each call.
    pub(super) checked: Vec<Size>,
}

/// One operand, `rows × cols` with strides `(s_rows, s_cols)`, as BLAS reads
/// it: `(transposed, leading dimension)`, or `None` when neither dim is
/// unit-stride (or rows would overlap).
fn blas_operand(rows: i64, cols: i64, s_rows: i64, s_cols: i64) -> Option<(bool, i64)> {
    let fits = |ld: i64, inner: i64| ld >= inner.max(1) && ld <= i64::from(i32::MAX);
    if cols == 1 || s_cols == 1 {
        let ld = if rows == 1 { cols.max(1) } else { s_rows };
        if fits(ld, cols) {
            return Some((false, ld));
        }
    }
    if rows == 1 || s_rows == 1 {
        let ld = if cols == 1 { rows.max(1) } else { s_cols };
        if fits(ld, rows) {
            return Some((true, ld));
        }
    }
    None
}

/// [`blas_operand`] over symbolic sizes: a dim is 1, or unit-stride, only where it
/// is so at every size, and a leading dimension must cover its rows at every size
/// (the same expression, or a least value at least the rows' greatest).
fn blas_operand_sized(
    p: &Program,
    rows: &Size,
    cols: &Size,
    s_rows: &Size,
    s_cols: &Size,
) -> Option<(bool, Size)> {
    if [rows, cols, s_rows, s_cols].iter().all(|s| s.is_const()) {
        return blas_operand(rows.hint(), cols.hint(), s_rows.hint(), s_cols.hint())
            .map(|(t, ld)| (t, Size::from(ld)));
    }
    let one = |s: &Size| s.as_const() == Some(1);
    let fits = |ld: &Size, inner: &Size| {
        ld == inner || ld.bounds(&p.symbols).0 >= inner.bounds(&p.symbols).1.max(1)
    };
    if one(cols) || one(s_cols) {
        let ld = if one(rows) { cols } else { s_rows };
        if fits(ld, cols) {
            return Some((false, ld.clone()));
        }
    }
    if one(rows) || one(s_rows) {
        let ld = if one(cols) { rows } else { s_cols };
        if fits(ld, rows) {
            return Some((true, ld.clone()));
        }
    }
    None
}

pub(super) fn gemm(p: &Program, e: &ExternCall) -> Result<Gemm, Error> {
    let [a, b] = e.args.as_slice() else {
        return Err(Error::Unsupported(
            "a matrix product needs two operands".into(),
        ));
    };
    let rank = if matches!(e.op, ExternOp::Bmm) { 3 } else { 2 };
    if a.shape.len() != rank || b.shape.len() != rank {
        return Err(Error::Unsupported(format!(
            "`{}` of operands of rank {} and {}",
            e.op.name(),
            a.shape.len(),
            b.shape.len()
        )));
    }
    let out = p.buffer(e.out);
    let d = out.dtype;
    let dtype = match d {
        DType::Float32 => 0,
        DType::Float16 => 1,
        DType::BFloat16 => 2,
        other => {
            return Err(Error::Unsupported(format!(
                "a matrix product of {}: the C++ wrapper's kilnGemm takes float32, float16 and bfloat16",
                other.name()
            )))
        }
    };
    if p.buffer(a.buf).dtype != d || p.buffer(b.buf).dtype != d {
        return Err(Error::Unsupported(format!(
            "`{}` with operands of different dtypes",
            e.op.name()
        )));
    }
    let o = rank - 2;
    let (m, k, n) = (&a.shape[o], &a.shape[o + 1], &b.shape[o + 1]);
    let batch = if rank == 3 {
        a.shape[0].clone()
    } else {
        Size::from(1)
    };
    if !is_dense(&out.shape, &out.strides) {
        return Err(Error::Unsupported(format!(
            "`{}` into a strided buffer",
            e.op.name()
        )));
    }
    let operand = |v: &View, rows: &Size, cols: &Size, what: &str| {
        blas_operand_sized(p, rows, cols, &v.strides[o], &v.strides[o + 1])
            .map(|(t, ld)| {
                let batch_stride = if rank == 3 {
                    v.strides[0].clone()
                } else {
                    Size::from(0)
                };
                (t, ld, batch_stride)
            })
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "`{}` whose {what} operand (sizes {:?}, strides {:?}) has no unit-stride dim, \
                     which BLAS needs; `host compile` without `--wrapper cpp` writes the Python \
                     wrapper, which does not need it",
                    e.op.name(),
                    v.shape,
                    v.strides
                ))
            })
    };
    let a_op = operand(a, m, k, "first")?;
    let b_op = operand(b, k, n, "second")?;
    let largest = |s: &Size| s.bounds(&p.symbols).1;
    let over = |s: &Size| largest(s) > i128::from(i32::MAX);
    let sizes = [m, n, k, &batch, &a_op.1, &b_op.1];
    if let Some(s) = sizes.iter().find(|s| s.is_const() && over(s)) {
        return Err(Error::Unsupported(format!(
            "`{}` with a dim of {}, over 2^31 - 1",
            e.op.name(),
            s.hint()
        )));
    }
    let checked = sizes
        .iter()
        .filter(|s| !s.is_const() && over(s))
        .map(|s| (*s).clone())
        .collect();
    let c = (
        match n.as_const() {
            Some(n) => Size::from(n.max(1)),
            None => n.clone(),
        },
        m.mul(n).map_err(|e| Error::Unsupported(e.to_string()))?,
    );
    Ok(Gemm {
        dtype,
        batch,
        m: m.clone(),
        n: n.clone(),
        k: k.clone(),
        a: a_op,
        b: b_op,
        c,
        checked,
    })
}

/// Whether a step writes buffer `b`.
fn written(p: &Program, b: BufferId) -> bool {
    p.steps.iter().any(|s| s.writes().contains(&b))
}

/// The output that gives input buffer `b`'s new value as a whole, where a step writes
/// `b` (state the scheduler made a kernel update in place: `schedule::Options::
/// state_scatter`); `None` for an input no step writes.
pub(super) fn state_output(p: &Program, b: BufferId) -> Option<usize> {
    if !written(p, b) {
        return None;
    }
    let buf = p.buffer(b);
    p.outputs.iter().position(|v| {
        v.buf == b
            && v.offset.as_const() == Some(0)
            && v.shape == buf.shape
            && v.strides == buf.strides
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_are_read_by_blas_as_stored() {
        // Row-major 4×3, contiguous: as is, ld 3.
        assert_eq!(blas_operand(4, 3, 3, 1), Some((false, 3)));
        // The transpose of a contiguous 3×4: read transposed, ld 4.
        assert_eq!(blas_operand(4, 3, 1, 4), Some((true, 4)));
        // A row of a wider matrix (ld beyond the cols) is fine.
        assert_eq!(blas_operand(4, 3, 8, 1), Some((false, 8)));
        // One row: any row stride; one col: any col stride.
        assert_eq!(blas_operand(1, 5, 0, 1), Some((false, 5)));
        assert_eq!(blas_operand(5, 1, 1, 0), Some((false, 1)));
        // No unit stride, or rows that overlap: not for BLAS.
        assert_eq!(blas_operand(4, 3, 6, 2), None);
        assert_eq!(blas_operand(4, 3, 2, 1), None);
        assert_eq!(blas_operand(4, 3, 0, 1), None);
    }
}
