//! `host eval FILE [--params-as-inputs] [--inputs DIR] [--seed N] [--out DIR]`: runs the reference interpreter.

use super::Error;
use crate::tensor::Tensor;
use crate::tensor_io;
use clap::Args;
use std::path::PathBuf;

/// Arguments of `host eval`.
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The graph file: kiln-graph/1 TOML or a torch.export `.pt2` archive.
    pub file: PathBuf,
    /// For a `.pt2` archive: keep parameters, buffers and constants as graph inputs
    /// (after the user inputs) instead of baking them in from the archive.
    #[arg(long)]
    pub params_as_inputs: bool,
    /// Folder with one raw file per input (`NAME.bin` or `inputN.bin`); random inputs
    /// when absent.
    #[arg(long, value_name = "DIR")]
    pub inputs: Option<PathBuf>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write `outputN.bin` files here instead of printing a summary.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Runs `host eval`.
pub fn run(a: &EvalArgs) -> Result<(), Error> {
    let g = crate::graph::load_with(
        &a.file,
        &crate::graph::LoadOptions {
            params_as_inputs: a.params_as_inputs,
        },
    )?;
    let decls: Vec<(String, crate::graph::TensorMeta)> = g
        .inputs()
        .iter()
        .filter_map(|&id| g.node(id))
        .filter_map(|n| Some((n.name.clone(), n.outputs.first()?.clone())))
        .collect();
    let inputs = match &a.inputs {
        Some(dir) => tensor_io::read_inputs(dir, &decls)?,
        None => {
            let metas: Vec<_> = decls.iter().map(|(_, m)| m.clone()).collect();
            tensor_io::random_inputs(&metas, a.seed)
        }
    };
    let outs = crate::interp::evaluate(&g, &inputs)?;
    match &a.out {
        Some(dir) => {
            for p in tensor_io::write_outputs(dir, &outs)? {
                println!("wrote {}", p.display());
            }
        }
        None => {
            for (i, t) in outs.iter().enumerate() {
                println!("output{i}: {}", summary(t));
            }
        }
    }
    Ok(())
}

/// One line: dtype, shape, the first values, min/max/mean.
pub fn summary(t: &Tensor) -> String {
    let v = t.to_vec();
    let first: Vec<String> = v.iter().take(6).map(|x| format!("{x:.6}")).collect();
    let (mut lo, mut hi, mut sum) = (f64::INFINITY, f64::NEG_INFINITY, 0.0);
    for &x in &v {
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
