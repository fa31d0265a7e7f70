//! `cargo +nightly fuzz run toml_graph`: see kiln_tests::importers::toml_graph.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kiln_tests::importers::toml_graph(data));
