//! The one place where names from input files (graph nodes, `.pt2` names)
//! become identifiers in generated code. Every name it returns is a legal,
//! unreserved identifier in Python, Triton and C++ at once, and unique within
//! the namer. Nothing from an input file may reach generated code any other way.

use std::collections::HashSet;

use super::keywords;

/// Hands out legal, unique identifiers.
#[derive(Debug, Clone)]
pub struct Namer {
    used: HashSet<String>,
}

impl Default for Namer {
    fn default() -> Self {
        Namer::new()
    }
}

fn is_reserved(name: &str) -> bool {
    [
        keywords::PYTHON,
        keywords::PYTHON_BUILTINS,
        keywords::CPP,
        keywords::KILN,
    ]
    .iter()
    .any(|list| list.contains(&name))
}

/// `raw` reduced to ASCII letters, digits and single underscores, starting
/// with a letter: legal in all three languages, and free of the shapes C++
/// reserves (`__x`, `_X`) and Python treats specially (`__x__`).
pub fn sanitize(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '_' };
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() {
        out.push('v');
    } else if out.as_bytes()[0].is_ascii_digit() {
        out.insert(0, 'v');
    }
    out
}

impl Namer {
    /// A namer with only the reserved words taken.
    pub fn new() -> Namer {
        Namer {
            used: HashSet::new(),
        }
    }

    /// Takes a name the generator itself uses, so no user name collides with it.
    pub fn reserve(&mut self, name: &str) {
        self.used.insert(name.to_string());
    }

    /// A fresh identifier for `raw`: sanitised, not reserved, not used before.
    pub fn name(&mut self, raw: &str) -> String {
        let base = sanitize(raw);
        let base = if is_reserved(&base) {
            format!("{base}_v")
        } else {
            base
        };
        let mut candidate = base.clone();
        let mut n = 1u64;
        while self.used.contains(&candidate) || is_reserved(&candidate) {
            candidate = format!("{base}_{n}");
            n += 1;
        }
        self.used.insert(candidate.clone());
        candidate
    }
}

/// Whether `text` is a plain identifier (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_from_input_files_become_safe_identifiers() {
        let mut namer = Namer::new();
        assert_eq!(namer.name("x"), "x");
        assert_eq!(namer.name("x"), "x_1");
        assert_eq!(namer.name("layer.0/weight"), "layer_0_weight");
        assert_eq!(namer.name("0bias"), "v0bias");
        assert_eq!(namer.name("def"), "def_v");
        assert_eq!(namer.name("class"), "class_v");
        assert_eq!(namer.name("__init__"), "init");
        assert_eq!(namer.name("\"); import os; (\""), "import_os");
        assert_eq!(namer.name(""), "v");
        assert_eq!(namer.name("é"), "v_1");
        namer.reserve("buf0");
        assert_eq!(namer.name("buf0"), "buf0_1");
    }

    proptest! {
        #[test]
        fn every_name_is_a_legal_unique_unreserved_identifier(raws in proptest::collection::vec(".*", 1..20)) {
            let mut namer = Namer::new();
            let mut seen = HashSet::new();
            for raw in &raws {
                let name = namer.name(raw);
                prop_assert!(is_identifier(&name), "{name:?}");
                prop_assert!(!is_reserved(&name), "{name:?}");
                prop_assert!(!name.contains("__"), "{name:?}");
                prop_assert!(!name.starts_with('_'), "{name:?}");
                prop_assert!(seen.insert(name.clone()), "duplicate {name:?}");
            }
        }
    }
}
