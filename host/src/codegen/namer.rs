//! The one place where names from input files (graph nodes, `.pt2` names)
//! become identifiers in generated code. Every name it returns is a legal,
//! unreserved identifier in Python, Triton and C++ at once, and unique within
//! the namer. Nothing from an input file may reach generated code any other way.

use std::collections::HashSet;
use std::sync::OnceLock;

use super::keywords;

/// A set of names fixed for the life of the process (a language's words, a
/// writer's own names and the identifiers of text it always pastes): built
/// once, shared by every [`Namer`] that reserves it.
pub type WordSet = HashSet<&'static str>;

/// Builds a [`WordSet`] once per process, from lists of names and from the
/// identifiers of fixed texts.
pub fn word_set(
    cell: &'static OnceLock<WordSet>,
    lists: &[&[&'static str]],
    texts: &[&'static str],
) -> &'static WordSet {
    cell.get_or_init(|| {
        let mut set: WordSet = lists.iter().flat_map(|l| l.iter().copied()).collect();
        for text in texts {
            set.extend(identifiers(text));
        }
        set
    })
}

/// The reserved words of Python, Triton and C++.
fn language_words() -> &'static WordSet {
    static WORDS: OnceLock<WordSet> = OnceLock::new();
    word_set(
        &WORDS,
        &[keywords::PYTHON, keywords::PYTHON_BUILTINS, keywords::CPP],
        &[],
    )
}

/// Hands out legal, unique identifiers for one generated file.
///
/// A writer reserves every name it binds itself (its fixed names, and every
/// identifier in text it pastes, such as a plugin's strings or a C++ prelude)
/// before it names anything from an input file; a name it makes up as it goes
/// (a kernel's) it asks for with [`Namer::name`] before any user name, too.
#[derive(Debug, Clone)]
pub struct Namer {
    /// Sets of reserved names fixed for the process: the languages' words,
    /// the writers' own names.
    fixed: Vec<&'static WordSet>,
    /// Reserved names known only now (in a plugin's strings, say).
    reserved: HashSet<String>,
    /// Names handed out.
    used: HashSet<String>,
}

impl Default for Namer {
    fn default() -> Self {
        Namer::new()
    }
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

/// Every identifier-shaped word of `text` (`[A-Za-z_][A-Za-z0-9_]*`), in
/// order, repeats included: what a writer reserves from text it pastes.
pub fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.chars().next().is_some_and(|c| !c.is_ascii_digit()))
}

impl Namer {
    /// A namer with the reserved words of Python, Triton and C++ taken.
    pub fn new() -> Namer {
        Namer {
            fixed: vec![language_words()],
            reserved: HashSet::new(),
            used: HashSet::new(),
        }
    }

    /// Takes every name of a set fixed for the process (see [`word_set`]).
    pub fn reserve_set(&mut self, set: &'static WordSet) {
        self.fixed.push(set);
    }

    /// Takes a name the generator itself binds, so no user name collides with it.
    pub fn reserve(&mut self, name: &str) {
        if !self.is_reserved(name) {
            self.reserved.insert(name.to_string());
        }
    }

    /// Takes every name of a writer's list.
    pub fn reserve_all(&mut self, names: &[&str]) {
        for name in names {
            self.reserve(name);
        }
    }

    /// Takes every identifier that appears in `text`: text a writer pastes
    /// into its output (a plugin's strings, a prelude) may bind or use any of
    /// them, so none may become a user's name.
    pub fn reserve_identifiers_in(&mut self, text: &str) {
        for word in identifiers(text) {
            self.reserve(word);
        }
    }

    fn is_reserved(&self, name: &str) -> bool {
        self.fixed.iter().any(|set| set.contains(name)) || self.reserved.contains(name)
    }

    /// Whether `name` is reserved or already handed out.
    pub fn is_taken(&self, name: &str) -> bool {
        self.is_reserved(name) || self.used.contains(name)
    }

    /// A fresh identifier for `raw`: sanitised, not reserved, not used before.
    pub fn name(&mut self, raw: &str) -> String {
        let base = sanitize(raw);
        let base = if self.is_reserved(&base) {
            format!("{base}_v")
        } else {
            base
        };
        let mut candidate = base.clone();
        let mut n = 1u64;
        while self.is_taken(&candidate) {
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
        assert_eq!(namer.name("input"), "input_v");
        namer.reserve("buf0");
        assert_eq!(namer.name("buf0"), "buf0_v");
        namer
            .reserve_identifiers_in("with torch.cuda._DeviceGuard(0): stream0 = get_raw_stream(0)");
        assert_eq!(namer.name("stream0"), "stream0_v");
        assert_eq!(namer.name("get_raw_stream"), "get_raw_stream_v");
        assert_eq!(namer.name("DeviceGuard"), "DeviceGuard");
        assert_eq!(namer.name("torch"), "torch_v");
    }

    #[test]
    fn identifiers_are_the_words_of_a_text() {
        let words: Vec<&str> = identifiers("a.b_1(2, x9) + 3e5 // _c").collect();
        assert_eq!(words, ["a", "b_1", "x9", "_c"]);
    }

    proptest! {
        #[test]
        fn every_name_is_a_legal_unique_unreserved_identifier(raws in proptest::collection::vec(".*", 1..20)) {
            let mut namer = Namer::new();
            let fresh = Namer::new();
            let mut seen = HashSet::new();
            for raw in &raws {
                let name = namer.name(raw);
                prop_assert!(is_identifier(&name), "{name:?}");
                prop_assert!(!fresh.is_taken(&name), "{name:?}");
                prop_assert!(!name.contains("__"), "{name:?}");
                prop_assert!(!name.starts_with('_'), "{name:?}");
                prop_assert!(seen.insert(name.clone()), "duplicate {name:?}");
            }
        }
    }
}
