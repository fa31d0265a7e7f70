//! The importer fuzz targets (`fuzz/`, libFuzzer) replayed on the stable toolchain:
//! every seed the fuzzers start from, every input a fuzzer found and that was fixed
//! (`fuzz/regressions/TARGET/`), and each seed cut short at several points. None
//! may panic; the readers answer bad bytes with an error.

use std::path::Path;

use kiln_tests::importers::{self, base_member, member_input, MEMBERS};
use kiln_tests::repo_root;

fn files_in(dir: &Path, ext: Option<&str>) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && ext.is_none_or(|x| p.extension().is_some_and(|e| e == x)))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

/// `data`, then its prefixes at a few fractions of its length, then with one byte
/// flipped at a few positions: cheap deterministic variations of a valid input.
fn variations(data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![data.to_vec()];
    for frac in [0.0, 0.1, 0.5, 0.9, 0.99] {
        out.push(data[..(data.len() as f64 * frac) as usize].to_vec());
    }
    for frac in [0.05, 0.3, 0.6, 0.95] {
        let mut d = data.to_vec();
        if let Some(b) = d.get_mut((data.len() as f64 * frac) as usize) {
            *b ^= 0x5a;
        }
        out.push(d);
    }
    out
}

fn regressions(target: &str) -> Vec<Vec<u8>> {
    files_in(&repo_root().join("fuzz/regressions").join(target), None)
}

#[test]
fn toml_reader_survives_its_corpus_and_every_past_finding() {
    let root = repo_root();
    let mut inputs = files_in(&root.join("examples"), Some("toml"));
    inputs.extend(files_in(&root.join("tests/graphs"), Some("toml")));
    assert!(inputs.len() > 10, "the seed graphs are missing");
    let mut n = 0;
    for seed in &inputs {
        for v in variations(seed) {
            importers::toml_graph(&v);
            n += 1;
        }
    }
    for r in regressions("toml_graph") {
        importers::toml_graph(&r);
        n += 1;
    }
    eprintln!("{n} TOML inputs read");
}

#[test]
fn pt2_reader_survives_its_corpus_and_every_past_finding() {
    let root = repo_root();
    let archives = files_in(&root.join("tests/fixtures/pt2"), Some("pt2"));
    assert!(archives.len() >= 4, "the fixture archives are missing");
    for a in archives.iter().take(4) {
        for v in variations(a) {
            importers::pt2_archive(&v);
        }
    }
    for r in regressions("pt2_archive") {
        importers::pt2_archive(&r);
    }
}

#[test]
fn pt2_members_survive_their_corpus_and_every_past_finding() {
    for base in 0..2 {
        for member in MEMBERS {
            let body = base_member(base, member)
                .unwrap_or_else(|| panic!("base archive {base} has no {member}"));
            for v in variations(body) {
                importers::pt2_member(&member_input(base, member, &v));
            }
        }
    }
    for r in regressions("pt2_member") {
        importers::pt2_member(&r);
    }
}

#[test]
fn member_selector_round_trips() {
    for base in 0..2 {
        for member in MEMBERS {
            let input = member_input(base, member, b"x");
            assert_eq!(importers::member_of(input[0]), (base, *member));
        }
    }
}
