//! `cargo test` builds the plugin and runs `host conformance` on it: every
//! guarantee the host relies on, each check in a child process. Set
//! `KILN_HOST` to the Kiln host binary (or put `host` on PATH).

kiln_plugin_kit::conformance_test!();
