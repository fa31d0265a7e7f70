//! `cargo +nightly fuzz run pt2_member`: see kiln_tests::importers::pt2_member.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kiln_tests::importers::pt2_member(data));
