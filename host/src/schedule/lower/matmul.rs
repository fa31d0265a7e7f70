//! Matrix products: `mm`, `bmm` and `matmul` as extern calls on strided views.

use super::{contiguous_view, first_value, meta_of, node_of, Def, Lowered, SKind, SNode};
use crate::graph::ir::{Graph, NodeId, TensorMeta, ValueId};
use crate::graph::views::view_strides;
use crate::schedule::index::{contiguous_sizes, product, Size};
use crate::schedule::ir::{ExternOp, View};
use crate::schedule::Error;

/// A matmul's operands flattened to `[B, M, K]` and `[B, K, N]` (each `None` when its
/// strides cannot express that), with `B`, `M` and `N`.
type Flattened = (Option<View>, Option<View>, Size, Size, Size);

/// `mm`, `bmm` and `matmul` as extern calls on strided views; `matmul`'s
/// broadcasting becomes views onto a `bmm` (or a `mm` when there is no batch).
pub(super) fn lower_matmul(graph: &Graph, low: &mut Lowered, id: NodeId) -> Result<(), Error> {
    let node = node_of(graph, id)?;
    let v0 = ValueId::first(id);
    let out_meta = meta_of(graph, v0)?.clone();
    let a = first_value(graph, id, 0)?;
    let b = first_value(graph, id, 1)?;
    let va = low.realize_view(graph, a)?;
    let vb = low.realize_view(graph, b)?;
    let unsupported = |what: &str| Error::Unsupported {
        node: node.name.clone(),
        what: what.to_string(),
    };
    if va.shape.len() == 2 && vb.shape.len() == 2 {
        low.add_snode(
            graph,
            v0,
            SKind::Extern {
                op: ExternOp::Mm,
                args: vec![va, vb],
            },
            "mm",
        )?;
        return Ok(());
    }
    // General matmul: vectors become matrices, batch dims broadcast and flatten. An
    // operand whose batch dims cannot be flattened as strided (a transposed head dim,
    // say) is copied to contiguous memory first.
    let flattened = |va: &View, vb: &View| -> Result<Flattened, Error> {
        let (mut a_shape, mut a_strides) = (va.shape.clone(), va.strides.clone());
        let (mut b_shape, mut b_strides) = (vb.shape.clone(), vb.strides.clone());
        if a_shape.len() == 1 {
            a_shape.insert(0, Size::from(1));
            a_strides.insert(0, Size::from(0));
        }
        if b_shape.len() == 1 {
            b_shape.push(Size::from(1));
            b_strides.push(Size::from(0));
        }
        let (m, k) = (&a_shape[a_shape.len() - 2], &a_shape[a_shape.len() - 1]);
        let n = &b_shape[b_shape.len() - 1];
        let a_batch = &a_shape[..a_shape.len() - 2];
        let b_batch = &b_shape[..b_shape.len() - 2];
        let batch = crate::graph::infer::symbolic::broadcast_sizes(a_batch, b_batch)
            .map_err(|e| unsupported(&e.to_string()))?;
        let bsize = product(&batch);
        let expand = |shape: &[Size], strides: &[Size], rows: &Size, cols: &Size| {
            let lead = batch.len() + 2 - shape.len();
            let mut st = vec![Size::from(0); lead];
            for (d, s) in shape[..shape.len() - 2].iter().enumerate() {
                st.push(if *s == 1 {
                    Size::from(0)
                } else {
                    strides[d].clone()
                });
            }
            st.extend_from_slice(&strides[strides.len() - 2..]);
            let mut sh = batch.clone();
            sh.extend([rows.clone(), cols.clone()]);
            (sh, st)
        };
        let (ea_shape, ea_strides) = expand(&a_shape, &a_strides, m, k);
        let (eb_shape, eb_strides) = expand(&b_shape, &b_strides, k, n);
        let flat = |view: &View, shape: &[Size], strides: &[Size], rows: &Size, cols: &Size| {
            let shape3 = vec![bsize.clone(), rows.clone(), cols.clone()];
            let st = view_strides(shape, strides, &shape3)?;
            Some(View {
                buf: view.buf,
                shape: shape3,
                strides: st,
                offset: view.offset.clone(),
            })
        };
        Ok((
            flat(va, &ea_shape, &ea_strides, m, k),
            flat(vb, &eb_shape, &eb_strides, k, n),
            bsize.clone(),
            m.clone(),
            n.clone(),
        ))
    };
    let (mut va, mut vb) = (va, vb);
    let (mut fa, mut fb, bsize, m, n) = flattened(&va, &vb)?;
    if fa.is_none() || fb.is_none() {
        for (f, v, value) in [(&fa, &mut va, a), (&fb, &mut vb, b)] {
            if f.is_none() {
                let id = low.add_snode(graph, value, SKind::Pointwise { value }, "copy")?;
                let s = &low.snodes[id];
                *v = contiguous_view(s.buf, &s.meta.shape);
            }
        }
        (fa, fb, ..) = flattened(&va, &vb)?;
    }
    let (Some(fa), Some(fb)) = (fa, fb) else {
        return Err(unsupported(
            "matmul whose broadcast batch dims cannot be flattened without a copy",
        ));
    };
    // The product is computed as [B, M, N]; the graph's value is a view of it.
    let product_meta = TensorMeta::contiguous_sizes(vec![bsize, m, n], out_meta.dtype);
    let buf = low.add_buffer(
        &node.name,
        &product_meta,
        crate::schedule::ir::BufferKind::Computed,
    );
    low.snodes.push(SNode {
        kind: SKind::Extern {
            op: ExternOp::Bmm,
            args: vec![fa, fb],
        },
        value: v0,
        meta: product_meta,
        buf,
        op_name: "bmm",
    });
    low.defs.insert(
        v0,
        Def::Strided(View {
            buf,
            strides: contiguous_sizes(&out_meta.shape),
            shape: out_meta.shape,
            offset: Size::from(0),
        }),
    );
    Ok(())
}
