//! The host's import structure, checked: every `crate::`/`super::` path in
//! `host/src` (comments and string literals aside) is an arrow from one module
//! to another, and the arrows must follow the data flow of `ARCHITECTURE.md`:
//!
//! - between top-level modules, only the arrows of [`ALLOWED`] (so the
//!   harness never reaches into the CLI, and the graph layer depends on no
//!   stage after it, nor on tensor files);
//! - no circle, between any two files.
//!
//! A module may always use its parent and its children (`super::Error`, a
//! `mod.rs` using what it declares).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which top-level modules each may import from (the rest of the crate's
/// layering; `cli` is the top and may use anything).
const ALLOWED: &[(&str, &[&str])] = &[
    ("diag", &[]),
    ("graph", &["memory"]),
    ("memory", &[]),
    ("plugins", &[]),
    ("tensor", &["graph", "memory"]),
    ("tensor_io", &["graph", "memory", "tensor"]),
    ("interp", &["graph", "memory", "tensor"]),
    ("passes", &["graph", "interp", "memory"]),
    ("schedule", &["graph", "interp", "memory", "tensor"]),
    ("codegen", &["graph", "plugins", "schedule"]),
    (
        "driver",
        &["codegen", "graph", "passes", "plugins", "schedule"],
    ),
    (
        "runtime",
        &["codegen", "driver", "graph", "memory", "schedule", "tensor"],
    ),
    (
        "conformance",
        &[
            "diag",
            "driver",
            "graph",
            "interp",
            "plugins",
            "runtime",
            "tensor",
            "tensor_io",
        ],
    ),
];

/// Every `.rs` file under `dir` with its module path (`graph::front::pt2`).
fn modules(dir: &Path) -> BTreeMap<Vec<String>, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("src folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative: PathBuf = path.strip_prefix(dir).expect("inside").with_extension("");
            let mut module: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            if module == ["lib"] || module == ["main"] {
                module.clear();
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            out.insert(module, code_only(&text));
        }
    }
    out
}

/// The text with comments, string literals and `#[cfg(test)] mod tests`
/// removed: what the compiler resolves as paths.
fn code_only(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == 'r' && matches!(chars.get(i + 1), Some('#') | Some('"')) {
            // A raw string r#"..."#: skip to its closing quote and hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) == Some(&'"') {
                j += 1;
                loop {
                    match chars.get(j) {
                        None => break,
                        Some('"') if (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) => {
                            j += 1 + hashes;
                            break;
                        }
                        _ => j += 1,
                    }
                }
                out.push_str("\"\"");
                i = j;
                continue;
            }
        }
        if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
            continue;
        }
        if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // A char literal such as '"'.
            out.push_str("' '");
            i += 3;
            continue;
        }
        if c == '\'' && chars.get(i + 1) == Some(&'\\') {
            let mut j = i + 2;
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The modules `text` (of module `at`) refers to by path, resolved to the
/// longest module prefix that exists.
fn references(at: &[String], text: &str, known: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    let resolve = |path: &[&str]| -> Option<Vec<String>> {
        let mut base: Vec<String> = at.to_vec();
        let mut rest = path;
        match rest.first() {
            Some(&"crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some(&"self") => rest = &rest[1..],
            Some(&"super") => {
                while rest.first() == Some(&"super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            _ => return None,
        }
        let mut full = base;
        full.extend(rest.iter().map(|s| s.to_string()));
        (1..=full.len())
            .rev()
            .map(|k| full[..k].to_vec())
            .find(|m| known.contains(m))
    };
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !is_word(bytes[i - 1]);
        if !starts_word || !bytes[i].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        // Read a path a::b::c, then a `{x, y}` group after a trailing `::`.
        let mut segments: Vec<String> = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < bytes.len() && is_word(bytes[j]) {
                j += 1;
            }
            segments.push(bytes[start..j].iter().collect());
            if bytes.get(j) == Some(&':') && bytes.get(j + 1) == Some(&':') {
                j += 2;
                if bytes.get(j).is_some_and(|c| is_word(*c)) {
                    continue;
                }
            }
            break;
        }
        if matches!(segments[0].as_str(), "crate" | "super" | "self") {
            let path: Vec<&str> = segments.iter().map(String::as_str).collect();
            if let Some(m) = resolve(&path).filter(|_| segments.len() > 1) {
                out.insert(m);
            }
            if bytes.get(j) == Some(&'{') {
                let close = (j..bytes.len()).find(|&k| bytes[k] == '}').unwrap_or(j);
                let group: String = bytes[j + 1..close].iter().collect();
                for item in group.split(',') {
                    let first = item.trim().split("::").next().unwrap_or("").trim();
                    let first = first.split_whitespace().next().unwrap_or("");
                    if first.is_empty() || first == "self" {
                        continue;
                    }
                    let mut p = path.clone();
                    p.push(first);
                    if let Some(m) = resolve(&p) {
                        out.insert(m);
                    }
                }
            }
        }
        i = j.max(i + 1);
    }
    out
}

/// The import arrows between modules, leaving out parent/child pairs.
fn arrows() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    let known: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    for (module, text) in &modules {
        let targets: BTreeSet<Vec<String>> = references(module, text, &known)
            .into_iter()
            .filter(|t| !t.starts_with(module) && !module.starts_with(t))
            .collect();
        edges.insert(module.clone(), targets);
    }
    edges
}

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".to_string()
    } else {
        module.join("::")
    }
}

#[test]
fn top_level_modules_import_only_what_the_layering_allows() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut wrong = Vec::new();
    for (from, targets) in arrows() {
        let Some(top) = from.first() else { continue };
        if top == "cli" || top == "main" {
            continue;
        }
        let Some(may) = allowed.get(top.as_str()) else {
            wrong.push(format!("{} is not in the layering table", name(&from)));
            continue;
        };
        for to in targets {
            let to_top = to.first().map(String::as_str).unwrap_or("");
            if to_top != top && !may.contains(&to_top) {
                wrong.push(format!("{} -> {}", name(&from), name(&to)));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "arrows the layering forbids:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_module_imports_in_a_circle() {
    let edges = arrows();
    // Tarjan's strongly connected components, iteratively.
    let nodes: Vec<&Vec<String>> = edges.keys().collect();
    let index_of: BTreeMap<&Vec<String>, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let succ: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            edges[*n]
                .iter()
                .filter_map(|t| index_of.get(t).copied())
                .collect()
        })
        .collect();
    let n = nodes.len();
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut next, mut circles) = (Vec::new(), 0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut child)) = work.last_mut() {
            if *child == 0 {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on[v] = true;
            }
            if let Some(&w) = succ[v].get(*child) {
                *child += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on[w] = false;
                    component.push(name(nodes[w]));
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    circles.push(component.join(" <-> "));
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_path_reader_sees_imports_and_ignores_comments_and_strings() {
    let known: BTreeSet<Vec<String>> = [
        vec!["graph".to_string()],
        vec!["graph".to_string(), "ir".to_string()],
        vec!["schedule".to_string()],
        vec!["cli".to_string()],
    ]
    .into_iter()
    .collect();
    let at = vec!["graph".to_string(), "ops".to_string()];
    let text = code_only(
        "use super::ir::Node;\nuse crate::{schedule::Step, graph};\n\
         // crate::cli::run\nlet s = \"crate::cli\"; let r = r#\"crate::cli\"#; let c = '\"';",
    );
    let got: Vec<String> = references(&at, &text, &known)
        .iter()
        .map(|m| name(m))
        .collect();
    assert_eq!(got, ["graph", "graph::ir", "schedule"]);
}
