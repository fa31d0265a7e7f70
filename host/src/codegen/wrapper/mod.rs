//! Wrapper generators: the host code that allocates buffers and launches the
//! kernels, built from the plugin's `DeviceOpOverrides` strings.

pub mod cpp;
pub mod python;
pub mod triton_cpp;

/// A C++ string literal of `text`.
pub(crate) fn c_str(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '?' => out.push_str("\\?"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c => {
                let mut bytes = [0u8; 4];
                for b in c.encode_utf8(&mut bytes).bytes() {
                    out.push_str(&format!("\\{b:03o}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// An input dim that a size symbol is: where `call` reads the symbol's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SymbolSource {
    /// The symbol.
    pub symbol: crate::graph::sym::SymId,
    /// The graph input.
    pub input: usize,
    /// Its dim.
    pub dim: usize,
}

/// Where `call` reads each size symbol of `p`: the first input dim that is the
/// symbol itself. `Err` names a symbol that no input's dim is (its value could not be
/// known from a call's inputs).
pub(crate) fn symbol_sources(
    p: &crate::schedule::ir::Program,
) -> Result<Vec<SymbolSource>, String> {
    let mut out: Vec<SymbolSource> = Vec::new();
    for (input, b) in p.inputs.iter().enumerate() {
        for (dim, size) in p.buffer(*b).shape.iter().enumerate() {
            if let Some(symbol) = size.as_symbol() {
                if !out.iter().any(|s| s.symbol == symbol) {
                    out.push(SymbolSource { symbol, input, dim });
                }
            }
        }
    }
    let used = p
        .buffers
        .iter()
        .flat_map(|b| b.shape.iter().flat_map(|s| s.symbols()));
    for s in used {
        if !out.iter().any(|o| o.symbol == s) {
            let name = p
                .symbols
                .get(s)
                .map_or_else(|| format!("ks{}", s.0), |v| v.name.clone());
            return Err(format!(
                "the size symbol `{name}` is no input's dim, so a call cannot give its value; \
                 compile at one size (--specialize)"
            ));
        }
    }
    Ok(out)
}
