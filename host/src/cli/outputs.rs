//! What `host eval` and `host run` do with the outputs: write them as tensor
//! files or print a summary of each, and check them against the reference
//! interpreter.

use std::path::Path;

use super::CliError;
use crate::graph::Graph;
use crate::tensor::Tensor;

/// Writes `outputN.bin` files into `dir`, or prints one summary line per
/// output when there is no folder and `print` is set.
pub fn emit(outs: &[Tensor], dir: Option<&Path>, print: bool) -> Result<(), CliError> {
    match dir {
        Some(dir) => {
            for p in crate::tensor_io::write_outputs(dir, outs)? {
                println!("wrote {}", p.display());
            }
        }
        None if print => {
            for (i, t) in outs.iter().enumerate() {
                println!("output{i}: {}", summary(t));
            }
        }
        None => {}
    }
    Ok(())
}

/// Compares `outs` with the reference interpreter's outputs of `graph` on
/// `inputs`, printing a line per output; whether all match.
pub fn check(outs: &[Tensor], graph: &Graph, inputs: &[Tensor]) -> Result<bool, CliError> {
    let want =
        super::progress::evaluate("checking against the reference interpreter", graph, inputs)?;
    if outs.len() != want.len() {
        return Err(format!(
            "{} outputs, the reference interpreter gives {}",
            outs.len(),
            want.len()
        )
        .into());
    }
    let mut failed = 0usize;
    for (i, (g, w)) in outs.iter().zip(&want).enumerate() {
        let (abs, rel) = crate::tensor::errors(g, w);
        let tol = crate::tensor::tolerance(w.dtype);
        let ok = g.shape == w.shape && rel <= tol;
        failed += usize::from(!ok);
        println!(
            "output{i} {}{:?}: max abs err {abs:.3e}, max rel err {rel:.3e} (tolerance {tol:.0e}) {}",
            w.dtype,
            w.shape,
            if ok { "ok" } else { "MISMATCH" }
        );
    }
    if failed > 0 {
        eprintln!("error: {failed} output(s) differ from the reference interpreter");
        return Ok(false);
    }
    println!("check: all {} output(s) match the reference", outs.len());
    Ok(true)
}

/// One line: dtype, shape, the first values, min/max/mean.
pub fn summary(t: &Tensor) -> String {
    let v = t.values();
    let first: Vec<String> = v.iter().take(6).map(|x| format!("{x:.6}")).collect();
    let (mut lo, mut hi, mut sum) = (f64::INFINITY, f64::NEG_INFINITY, 0.0);
    for &x in v.iter() {
        lo = lo.min(x);
        hi = hi.max(x);
        sum += x;
    }
    let mean = if v.is_empty() {
        f64::NAN
    } else {
        sum / v.len() as f64
    };
    format!(
        "{}{:?} [{}{}] min {lo:.6} max {hi:.6} mean {mean:.6}",
        t.dtype,
        t.shape,
        first.join(", "),
        if v.len() > 6 { ", ..." } else { "" }
    )
}
