//! Views and data movement in the interpreter: zero-copy where PyTorch's op is a view
//! (strides and offsets from `graph::views`, the one description of every view),
//! copies for `contiguous`, `clone`, `cat` and reshapes no strides can express. Must
//! never compute element values.

use super::{dense, elements, room, OpError, Val};
use crate::graph::shape::{consts, sizes, wrap_dim};
use crate::graph::sym::{Size, Symbols};
use crate::graph::views::{self, ViewMap};
use crate::graph::{FixedMeta, Op};
use crate::tensor::Tensor;

fn t0<'a>(args: &[Val<'a>]) -> Result<&'a Tensor, String> {
    match args.first() {
        Some(Val::Tensor(t)) => Ok(t),
        _ => Err("operand 0 must be a tensor".into()),
    }
}

/// Evaluates a view/data-movement op, or returns `None` for other ops.
pub(crate) fn eval_view(
    op: &Op,
    args: &[Val],
    outs: &[FixedMeta],
) -> Result<Option<Vec<Tensor>>, OpError> {
    let out = outs.first().ok_or("no output metadata")?;
    let r = match op {
        Op::Cat { dim } => {
            // A 1-D tensor of no elements is skipped, as PyTorch skips it.
            let ts: Vec<&Tensor> = args
                .iter()
                .filter_map(|a| match a {
                    Val::Tensor(t) if t.shape != [0] || out.shape.len() == 1 => Some(*t),
                    _ => None,
                })
                .collect();
            let d = wrap_dim(*dim, out.shape.len()).map_err(|e| e.to_string())?;
            let outer: i64 = out.shape[..d].iter().product();
            let mut vals = room(out.numel() as usize)?;
            let parts = ts
                .iter()
                .map(|t| elements(t))
                .collect::<Result<Vec<_>, _>>()?;
            for o in 0..outer {
                for (t, p) in ts.iter().zip(&parts) {
                    // Each part's rows of the concatenated dim, for this outer index.
                    let chunk: i64 = t.shape[d..].iter().product();
                    let start = (o * chunk) as usize;
                    vals.extend(p.iter().skip(start).take(chunk as usize).copied());
                }
            }
            vec![Tensor::new(out.shape.clone(), out.dtype, vals)]
        }
        op if views::copies(op) => vec![dense(t0(args)?)?],
        op if views::describes(op) => {
            let t = t0(args)?;
            let shape = sizes(&t.shape);
            let count = views::output_count(op, &shape).map_err(|e| e.to_string())?;
            (0..count)
                .map(|k| {
                    let map = views::view_map(op, &shape, k as u32, Symbols::none())
                        .map_err(|e| e.to_string())?;
                    view_of(t, &map)
                })
                .collect::<Result<Vec<_>, OpError>>()?
        }
        _ => return Ok(None),
    };
    Ok(Some(r))
}

/// The view `map` makes of `t`: its own storage when strides can express it,
/// else (a reshape PyTorch would copy) a contiguous copy's. The interpreter binds
/// every size before it runs an op, so the map's sizes are integers.
fn view_of(t: &Tensor, map: &ViewMap) -> Result<Tensor, OpError> {
    let ints = |v: &[Size]| -> Result<Vec<i64>, OpError> {
        consts(v).ok_or_else(|| OpError::from(format!("a view of unbound sizes {v:?}")))
    };
    let out_shape = ints(&map.out_shape)?;
    let restride = |strides: &[i64], offset: i64| -> Result<Option<(Vec<i64>, i64)>, OpError> {
        match map.restride(&sizes(strides), &Size::from(offset)) {
            Some((s, o)) => Ok(Some((ints(&s)?, ints(&[o])?[0]))),
            None => Ok(None),
        }
    };
    if let Some((strides, offset)) = restride(&t.strides, t.offset)? {
        return Ok(t.view(out_shape, strides, offset));
    }
    let copy = dense(t)?;
    Ok(match restride(&copy.strides, copy.offset)? {
        Some((strides, offset)) => copy.view(out_shape, strides, offset),
        // A contiguous tensor can always be viewed; keep the values regardless.
        None => Tensor::new(out_shape, copy.dtype, elements(&copy)?),
    })
}
