//! `einsum`: operands contracted pairwise, left to right, each pair as one batched
//! matrix product over the letters both share.

use super::{ints, t, Steps};
use std::collections::HashMap;

/// The letters of one side of an einsum equation, `...` replaced by `ell` (the letters
/// standing for the broadcast dims, rightmost last) trimmed to `rank` dims.
fn einsum_letters(spec: &str, rank: Option<usize>, ell: &[char]) -> Result<Vec<char>, String> {
    let mut out = vec![];
    let parts: Vec<&str> = spec.split("...").collect();
    if parts.len() > 2 {
        return Err(format!("`{spec}` has more than one ellipsis"));
    }
    for c in parts[0].chars() {
        if !c.is_ascii_alphabetic() {
            return Err(format!("`{c}` in `{spec}` is not a letter"));
        }
        out.push(c);
    }
    if parts.len() == 2 {
        let named = parts[0].len() + parts[1].len();
        let n = match rank {
            Some(r) => r
                .checked_sub(named)
                .ok_or_else(|| format!("`{spec}` names more dims than the operand's {r}"))?,
            None => ell.len(),
        };
        out.extend_from_slice(&ell[ell.len() - n..]);
        for c in parts[1].chars() {
            if !c.is_ascii_alphabetic() {
                return Err(format!("`{c}` in `{spec}` is not a letter"));
            }
            out.push(c);
        }
    }
    if let Some(r) = rank {
        if out.len() != r {
            return Err(format!(
                "`{spec}` names {} dims, the operand has {r}",
                out.len()
            ));
        }
    }
    Ok(out)
}

/// An einsum equation read against its operands' shapes.
struct Parsed {
    /// each operand with the letters of its dims
    terms: Vec<(String, Vec<char>)>,
    /// each letter's size (the largest, size-1 dims broadcasting)
    size: HashMap<char, i64>,
    /// the output's letters
    output: Vec<char>,
}

/// The letters of every operand and of the output, and each letter's size.
fn parse(equation: &str, operands: &[(String, Vec<i64>)]) -> Result<Parsed, String> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let specs: Vec<&str> = lhs.split(',').collect();
    if specs.len() != operands.len() {
        return Err(format!(
            "the equation `{equation}` has {} operand(s), the node passes {}",
            specs.len(),
            operands.len()
        ));
    }
    // Letters for the ellipsis dims: upper-case ones the equation does not use.
    let ell_rank = specs
        .iter()
        .zip(operands)
        .filter(|(sp, _)| sp.contains("..."))
        .map(|(sp, (_, shape))| (shape.len() + 3).saturating_sub(sp.len()))
        .max()
        .unwrap_or(0);
    let ell: Vec<char> = ('A'..='Z')
        .chain('a'..='z')
        .filter(|c| !eq.contains(*c))
        .take(ell_rank)
        .collect();
    if ell.len() < ell_rank {
        return Err("too many dims for the letters left".into());
    }
    let mut size: HashMap<char, i64> = HashMap::new();
    let mut terms: Vec<(String, Vec<char>)> = vec![];
    for (spec, (x, shape)) in specs.iter().zip(operands) {
        let letters = einsum_letters(spec, Some(shape.len()), &ell)?;
        let mut seen = vec![];
        for (&c, &n) in letters.iter().zip(shape) {
            if seen.contains(&c) {
                return Err(format!(
                    "`{spec}` repeats `{c}` (a diagonal): Kiln does not take diagonals in einsum"
                ));
            }
            seen.push(c);
            match size.get(&c) {
                Some(&m) if m != n && m != 1 && n != 1 => {
                    return Err(format!("`{c}` has sizes {m} and {n}"));
                }
                Some(&m) if m >= n => {}
                _ => {
                    size.insert(c, n);
                }
            }
        }
        terms.push((x.clone(), letters));
    }
    let output: Vec<char> = match rhs {
        Some(r) => einsum_letters(r, None, &ell)?,
        None => {
            // Implicit output: the ellipsis dims, then the letters used once, sorted.
            let mut once: Vec<char> = size
                .keys()
                .copied()
                .filter(|c| !ell.contains(c))
                .filter(|c| {
                    terms
                        .iter()
                        .flat_map(|(_, l)| l)
                        .filter(|x| *x == c)
                        .count()
                        == 1
                })
                .collect();
            once.sort_unstable();
            ell.iter().copied().chain(once).collect()
        }
    };
    for c in &output {
        if !size.contains_key(c) {
            return Err(format!("the output's `{c}` is in no operand"));
        }
    }
    Ok(Parsed {
        terms,
        size,
        output,
    })
}

/// `einsum(equation, operands)`: operands contracted pairwise, left to right, each pair
/// as one batched matrix product over the letters both share.
pub(super) fn einsum(
    s: &mut Steps<'_>,
    equation: &str,
    operands: &[(String, Vec<i64>)],
) -> Result<String, String> {
    let Parsed {
        mut terms,
        size,
        output,
    } = parse(equation, operands)?;
    // Broadcast size-1 dims up to the letter's size.
    for (x, letters) in terms.iter_mut() {
        let shape: Vec<i64> = letters.iter().map(|c| size[c]).collect();
        let own: Vec<i64> = operands
            .iter()
            .find(|(n, _)| n == x)
            .map(|(_, sh)| sh.clone())
            .unwrap_or_default();
        if own != shape && own.len() == shape.len() {
            *x = s.op("expand", vec![("self", t(x)), ("size", ints(&shape))]);
        }
    }
    let needed_after = |i: usize, terms: &[(String, Vec<char>)]| -> Vec<char> {
        let mut v = output.clone();
        for (_, l) in &terms[i..] {
            v.extend(l);
        }
        v
    };
    // Sums over the letters of one term that nothing else needs.
    let sum_own =
        |s: &mut Steps<'_>, x: &str, letters: &[char], keep: &[char]| -> (String, Vec<char>) {
            let dims: Vec<i64> = letters
                .iter()
                .enumerate()
                .filter(|(_, c)| !keep.contains(c))
                .map(|(i, _)| i as i64)
                .collect();
            if dims.is_empty() {
                return (x.to_string(), letters.to_vec());
            }
            let y = s.reduce("sum", x, Some(&dims), false);
            (
                y,
                letters
                    .iter()
                    .copied()
                    .filter(|c| keep.contains(c))
                    .collect(),
            )
        };
    let (mut acc, mut acc_letters) = {
        let keep = needed_after(1, &terms);
        sum_own(s, &terms[0].0, &terms[0].1, &keep)
    };
    for i in 1..terms.len() {
        let keep_later = needed_after(i + 1, &terms);
        let (b, b_letters) = {
            let mut keep = keep_later.clone();
            keep.extend(&acc_letters);
            sum_own(s, &terms[i].0, &terms[i].1, &keep)
        };
        let a_keep: Vec<char> = keep_later.iter().chain(&b_letters).copied().collect();
        let (a, a_letters) = sum_own(s, &acc, &acc_letters, &a_keep);
        let batch: Vec<char> = a_letters
            .iter()
            .copied()
            .filter(|c| b_letters.contains(c) && keep_later.contains(c))
            .collect();
        let contract: Vec<char> = a_letters
            .iter()
            .copied()
            .filter(|c| b_letters.contains(c) && !keep_later.contains(c))
            .collect();
        let a_only: Vec<char> = a_letters
            .iter()
            .copied()
            .filter(|c| !b_letters.contains(c))
            .collect();
        let b_only: Vec<char> = b_letters
            .iter()
            .copied()
            .filter(|c| !a_letters.contains(c))
            .collect();
        let pos = |letters: &[char], c: char| letters.iter().position(|x| *x == c).unwrap_or(0);
        let prod = |cs: &[char]| -> i64 { cs.iter().map(|c| size[c]).product() };
        let a_perm: Vec<usize> = batch
            .iter()
            .chain(&a_only)
            .chain(&contract)
            .map(|&c| pos(&a_letters, c))
            .collect();
        let b_perm: Vec<usize> = batch
            .iter()
            .chain(&contract)
            .chain(&b_only)
            .map(|&c| pos(&b_letters, c))
            .collect();
        let ap = s.permute(&a, &a_perm);
        let bp = s.permute(&b, &b_perm);
        let (nb, na, nc, nbo) = (prod(&batch), prod(&a_only), prod(&contract), prod(&b_only));
        let a3 = s.reshape(&ap, &[nb, na, nc]);
        let b3 = s.reshape(&bp, &[nb, nc, nbo]);
        let p = s.op("bmm", vec![("self", t(&a3)), ("mat2", t(&b3))]);
        let letters: Vec<char> = batch
            .iter()
            .chain(&a_only)
            .chain(&b_only)
            .copied()
            .collect();
        let shape: Vec<i64> = letters.iter().map(|c| size[c]).collect();
        acc = s.reshape(&p, &shape);
        acc_letters = letters;
    }
    let (acc, acc_letters) = sum_own(s, &acc, &acc_letters, &output);
    let perm: Vec<usize> = output
        .iter()
        .map(|c| acc_letters.iter().position(|x| x == c).unwrap_or(0))
        .collect();
    Ok(s.permute(&acc, &perm))
}
