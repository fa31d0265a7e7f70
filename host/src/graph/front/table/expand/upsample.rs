//! The `upsample_*` interpolations: per spatial dim, a gather of each tap and a sum
//! weighted by constants computed here as ATen computes them.

use super::{t, Raw, Steps};
use crate::graph::ir::FixedMeta;
use crate::graph::DType;

/// How an `upsample_*` op maps output positions to input ones.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Mode {
    Nearest,
    NearestExact,
    Linear,
    Cubic,
}

pub(super) fn upsample_kind(op: &str) -> Option<(Mode, usize)> {
    Some(match op {
        "upsample_nearest1d" => (Mode::Nearest, 1),
        "upsample_nearest2d" => (Mode::Nearest, 2),
        "upsample_nearest3d" => (Mode::Nearest, 3),
        "_upsample_nearest_exact1d" => (Mode::NearestExact, 1),
        "_upsample_nearest_exact2d" => (Mode::NearestExact, 2),
        "_upsample_nearest_exact3d" => (Mode::NearestExact, 3),
        "upsample_linear1d" => (Mode::Linear, 1),
        "upsample_bilinear2d" => (Mode::Linear, 2),
        "upsample_trilinear3d" => (Mode::Linear, 3),
        "upsample_bicubic2d" => (Mode::Cubic, 2),
        _ => return None,
    })
}

/// The taps of one output position along one dim: input indices and weights.
type Taps = Vec<(i64, f64)>;

/// ATen's `area_pixel_compute_scale`, in float32 as ATen computes it for float inputs.
fn pixel_scale(input: i64, output: i64, align: bool, scale: Option<f64>) -> f32 {
    if align {
        if output > 1 {
            (input - 1) as f32 / (output - 1) as f32
        } else {
            0.0
        }
    } else {
        match scale {
            Some(s) if s > 0.0 => (1.0 / s) as f32,
            _ => input as f32 / output as f32,
        }
    }
}

/// The taps of every output position along one dim of `input` elements.
fn taps(mode: Mode, input: i64, output: i64, align: bool, scale: Option<f64>) -> Vec<Taps> {
    let last = input - 1;
    let clamp = |i: i64| i.clamp(0, last);
    (0..output)
        .map(|o| match mode {
            Mode::Nearest | Mode::NearestExact => {
                // ATen's nearest modes use in/out or 1/scale, never align_corners.
                let sc = pixel_scale(input, output, false, scale);
                let at = if mode == Mode::Nearest {
                    (o as f32 * sc).floor()
                } else {
                    ((o as f32 + 0.5) * sc).floor()
                };
                vec![(clamp((at as i64).min(last)), 1.0)]
            }
            Mode::Linear => {
                let sc = pixel_scale(input, output, align, scale);
                let real = if align {
                    sc * o as f32
                } else {
                    (sc * (o as f32 + 0.5) - 0.5).max(0.0)
                };
                let i0 = (real as i64).min(last);
                let i1 = (i0 + 1).min(last);
                let l1 = real - i0 as f32;
                vec![(i0, (1.0 - l1) as f64), (i1, l1 as f64)]
            }
            Mode::Cubic => {
                let sc = pixel_scale(input, output, align, scale);
                let real = if align {
                    sc * o as f32
                } else {
                    sc * (o as f32 + 0.5) - 0.5
                };
                let i = real.floor();
                let tt = real - i;
                let i = i as i64;
                const A: f32 = -0.75;
                let near = |x: f32| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
                let far = |x: f32| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
                let w = [far(tt + 1.0), near(tt), near(1.0 - tt), far(2.0 - tt)];
                (0..4)
                    .map(|k| (clamp(i - 1 + k as i64), w[k] as f64))
                    .collect()
            }
        })
        .collect()
}

/// Interpolates `x` (`inp`) to `out`'s spatial sizes, one spatial dim at a time: for each
/// tap, the input gathered at that tap's indices, weighted per output position.
pub(super) fn upsample(
    s: &mut Steps<'_>,
    x: &str,
    inp: &FixedMeta,
    out: &FixedMeta,
    mode: Mode,
    align: bool,
    scales: &[Option<f64>],
) -> Result<String, String> {
    let rank = inp.rank();
    let spatial = scales.len();
    let mut cur = x.to_string();
    for (k, scale) in scales.iter().enumerate() {
        let d = rank - spatial + k;
        let (i, o) = (inp.shape[d], out.shape[d]);
        // Equal sizes copy (ATen's nearest modes always; the others unless a scale
        // other than 1 was given, which ATen would follow).
        let nearest = matches!(mode, Mode::Nearest | Mode::NearestExact);
        if i == o && (nearest || scale.is_none() || *scale == Some(1.0)) {
            continue;
        }
        if i <= 0 {
            return Err(format!("interpolation of an empty dim {d}"));
        }
        let taps = taps(mode, i, o, align, *scale);
        let n = taps.first().map_or(0, Vec::len);
        let mut acc: Option<String> = None;
        for tap in 0..n {
            let index: Vec<f64> = taps.iter().map(|p| p[tap].0 as f64).collect();
            let idx = s.konst(vec![o], DType::Int64, index);
            let mut indices = vec![Raw::None; d];
            indices.push(t(&idx));
            let g = s.op(
                "index",
                vec![("self", t(&cur)), ("indices", Raw::List(indices))],
            );
            let term = if matches!(mode, Mode::Nearest | Mode::NearestExact) {
                g
            } else {
                let mut wshape = vec![o];
                wshape.extend(std::iter::repeat_n(1, rank - d - 1));
                let w = s.konst(wshape, inp.dtype, taps.iter().map(|p| p[tap].1).collect());
                s.bin("mul", t(&g), t(&w))
            };
            acc = Some(match acc {
                None => term,
                Some(a) => s.bin("add", t(&a), t(&term)),
            });
        }
        cur = acc.unwrap_or(cur);
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_taps_follow_aten() {
        // 2 -> 4, align_corners=False: positions -0.25 (clamped to 0), 0.25, 0.75, 1.25.
        let t = taps(Mode::Linear, 2, 4, false, None);
        let want = [
            [(0, 1.0), (1, 0.0)],
            [(0, 0.75), (1, 0.25)],
            [(0, 0.25), (1, 0.75)],
            [(1, 0.75), (1, 0.25)],
        ];
        for (got, want) in t.iter().zip(want) {
            for ((gi, gw), (wi, ww)) in got.iter().zip(want) {
                assert_eq!(*gi, wi);
                assert!((gw - ww).abs() < 1e-6, "{t:?}");
            }
        }
        // align_corners=True maps the corners onto each other.
        let t = taps(Mode::Linear, 3, 5, true, None);
        assert_eq!(t[0][0], (0, 1.0));
        assert_eq!(t[4][0].0, 2);
    }

    #[test]
    fn cubic_weights_sum_to_one_and_nearest_floors() {
        for o in taps(Mode::Cubic, 5, 9, false, None) {
            let sum: f64 = o.iter().map(|p| p.1).sum();
            assert!((sum - 1.0).abs() < 1e-6);
        }
        let near: Vec<i64> = taps(Mode::Nearest, 3, 7, false, None)
            .iter()
            .map(|p| p[0].0)
            .collect();
        assert_eq!(near, [0, 0, 0, 1, 1, 2, 2]);
        // A scale given explicitly wins over in/out (5 * 1.5 -> 7 samples at 1/1.5).
        let by_scale: Vec<i64> = taps(Mode::Nearest, 5, 7, false, Some(1.5))
            .iter()
            .map(|p| p[0].0)
            .collect();
        assert_eq!(by_scale, [0, 0, 1, 2, 2, 3, 4]);
    }
}
