//! `cargo +nightly fuzz run pt2_archive`: see kiln_tests::importers::pt2_archive.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kiln_tests::importers::pt2_archive(data));
