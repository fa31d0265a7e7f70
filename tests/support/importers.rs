//! The bodies of the importer fuzz targets.
//!
//! `fuzz/fuzz_targets/*.rs` run these under libFuzzer (`cargo +nightly fuzz run
//! TARGET`, see "Fuzzing the importers" in docs/testing.md); `tests/fuzz_importers.rs` replays
//! the seed corpus and every input a fuzzer ever found (`fuzz/regressions/TARGET/`)
//! on the stable toolchain in CI. Each body feeds one input to a reader and discards
//! the result: an error is the right answer to a bad file, and a panic, a hang or an
//! allocation beyond [`MAX_ARCHIVE_BYTES`] (plus the graph built from it) is a finding.

use std::io::{Cursor, Read, Write};
use std::sync::OnceLock;

use kiln::graph::front::pt2::{read_pt2, Limits, Pt2Options};

/// The decompressed bytes one archive may cost under the fuzzers: the importer's
/// `Limits`, lowered from the 4 GiB default so that libFuzzer's allocation cap
/// (`-malloc_limit_mb=512`, set by `fuzz/run.sh`) catches anything that allocates
/// beyond what the archive's members hold.
pub const MAX_ARCHIVE_BYTES: u64 = 64 << 20;

/// Graphs whose values together hold more elements than this are only parsed, not
/// run through the passes (constant folding materialises values, which a graph file
/// may legitimately declare at any size).
const MAX_PASS_ELEMENTS: u64 = 1 << 16;

fn options() -> Pt2Options {
    Pt2Options {
        specialize: vec![],
        dynamic: false,
        params_as_inputs: false,
        limits: Limits {
            max_members: 10_000,
            budget: kiln::memory::Budget {
                bytes: MAX_ARCHIVE_BYTES,
                source: kiln::memory::Source::Default,
            },
        },
    }
}

/// `toml_graph`: the bytes as a kiln-graph/1 TOML file. A graph the reader accepts
/// must also print, and (when small) survive every pass.
pub fn toml_graph(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut graph) = kiln::graph::parse_toml(text) else {
        return;
    };
    let _ = kiln::graph::print::to_text(&graph);
    let elements: u64 = graph
        .node_ids()
        .filter_map(|id| graph.node(id))
        .flat_map(|n| n.outputs.iter())
        .map(|m| {
            m.hint_shape()
                .iter()
                .map(|&d| d.max(1) as u64)
                .product::<u64>()
        })
        .fold(0u64, u64::saturating_add);
    if elements <= MAX_PASS_ELEMENTS {
        let _ = kiln::passes::run_pipeline(&mut graph);
    }
}

/// `pt2_archive`: the bytes as a whole `.pt2` file (the zip structure first).
pub fn pt2_archive(data: &[u8]) {
    let _ = read_pt2(Cursor::new(data), "fuzz", &options());
}

/// The members a `.pt2` reader interprets, which `pt2_member` replaces one at a time.
pub const MEMBERS: &[&str] = &[
    "models/model.json",
    "data/weights/model_weights_config.json",
    "data/constants/model_constants_config.json",
    "data/weights/weight_0",
    "archive_format",
    "archive_version",
    "byteorder",
];

/// One archive's members: (name, bytes), in the archive's order.
type Members = Vec<(String, Vec<u8>)>;

/// The archives `pt2_member` starts from: an exported MLP and the core-ATen form of
/// a layer norm + softmax (weights, constants and a decomposed graph).
fn bases() -> &'static [Members] {
    static BASES: OnceLock<Vec<Members>> = OnceLock::new();
    BASES.get_or_init(|| {
        [
            &include_bytes!("../fixtures/pt2/mlp.pt2")[..],
            &include_bytes!("../fixtures/pt2/ln_softmax_core.pt2")[..],
        ]
        .iter()
        .map(|bytes| {
            let mut zip = zip::ZipArchive::new(Cursor::new(*bytes)).expect("a fixture archive");
            (0..zip.len())
                .map(|i| {
                    let mut f = zip.by_index(i).expect("a member");
                    let mut body = Vec::new();
                    f.read_to_end(&mut body).expect("a readable member");
                    (f.name().expect("a member name").to_string(), body)
                })
                .collect()
        })
        .collect()
    })
}

/// Which base archive and member a `pt2_member` input's first byte selects.
pub fn member_of(selector: u8) -> (usize, &'static str) {
    let base = selector as usize % 2;
    (base, MEMBERS[(selector as usize / 2) % MEMBERS.len()])
}

/// A `pt2_member` input that replaces `member` of base archive `base` with `body`.
pub fn member_input(base: usize, member: &str, body: &[u8]) -> Vec<u8> {
    let index = MEMBERS
        .iter()
        .position(|m| *m == member)
        .expect("a fuzzed member");
    let mut out = vec![(index * 2 + base) as u8];
    out.extend_from_slice(body);
    out
}

/// The unchanged body of `member` in base archive `base`.
pub fn base_member(base: usize, member: &str) -> Option<&'static [u8]> {
    bases()[base]
        .iter()
        .find(|(name, _)| name.split_once('/').is_some_and(|(_, rest)| rest == member))
        .map(|(_, body)| body.as_slice())
}

/// `pt2_member`: a valid archive with one member's content replaced by the input
/// (after its first byte, which picks the base and the member). Mutating a zip's
/// bytes mostly breaks its checksums; this reaches the JSON schema and the weights.
pub fn pt2_member(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let (base, member) = member_of(selector);
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, original) in &bases()[base] {
        let replaced = name.split_once('/').is_some_and(|(_, rest)| rest == member);
        zip.start_file(name.as_str(), stored)
            .expect("writing to memory");
        zip.write_all(if replaced { body } else { original })
            .expect("writing to memory");
    }
    let bytes = zip.finish().expect("writing to memory").into_inner();
    let _ = read_pt2(Cursor::new(bytes), "fuzz", &options());
}
