//! What `host eval` and `host run` do with the outputs: write them as tensor
//! files or print a summary of each, and check them against the reference
//! interpreter.

use std::path::Path;

use super::CliError;
use crate::graph::Graph;
use crate::tensor::Tensor;

/// Writes each output into `dir` as `NAME.bin` (with `outputN.bin` beside
/// it), or prints one summary line per output when there is no folder and
/// `print` is set. `names` are the graph's output names.
pub fn emit(
    outs: &[Tensor],
    names: &[String],
    dir: Option<&Path>,
    print: bool,
) -> Result<(), CliError> {
    match dir {
        Some(dir) => {
            let named: Vec<(String, Tensor)> =
                names.iter().cloned().zip(outs.iter().cloned()).collect();
            for w in crate::tensor_io::write_outputs(dir, &named)? {
                match &w.named {
                    Some(file) => println!("wrote {} ({})", file.display(), w.positional.display()),
                    None => println!("wrote {}", w.positional.display()),
                }
            }
        }
        None if print => {
            for (name, t) in names.iter().zip(outs) {
                println!("{name}: {}", summary(t));
            }
        }
        None => {}
    }
    Ok(())
}

/// Compares `outs` with the reference interpreter's outputs of `graph` on
/// `inputs`, printing a line per output that names it, gives its errors and
/// the tolerance it was held to; whether all match.
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
    let names = graph.output_names();
    let mut failed = 0usize;
    for ((name, g), w) in names.iter().zip(outs).zip(&want) {
        let line = compare(g, w);
        failed += usize::from(!line.ok);
        println!("{name} {}{:?}: {}", w.dtype, w.shape, line.text);
    }
    if failed > 0 {
        eprintln!("error: {failed} output(s) differ from the reference interpreter");
        return Ok(false);
    }
    println!("check: all {} output(s) match the reference", outs.len());
    Ok(true)
}

/// One output's verdict.
struct Verdict {
    ok: bool,
    text: String,
}

/// How `got` compares with the reference `want`: the errors, the tolerance
/// of the dtype and what it bounds.
fn compare(got: &Tensor, want: &Tensor) -> Verdict {
    if got.shape != want.shape {
        return Verdict {
            ok: false,
            text: format!(
                "shape {:?} differs from the reference's: MISMATCH",
                got.shape
            ),
        };
    }
    let (abs, rel) = crate::tensor::errors(got, want);
    let tol = crate::tensor::tolerance(want.dtype);
    let ok = rel <= tol;
    let verdict = if ok { "ok" } else { "MISMATCH" };
    let text = if tol == 0.0 {
        format!(
            "{verdict}: max abs err {abs:.3e} ({} must match exactly)",
            want.dtype
        )
    } else {
        format!(
            "{verdict}: max |got - want| / max |want| = {rel:.3e} {} {tol:.0e} ({} tolerance); max abs err {abs:.3e}",
            if ok { "<=" } else { ">" },
            want.dtype
        )
    };
    Verdict { ok, text }
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
