//! Code generation. Every generator has the same module shape: options, an
//! error type and one entry function, a writer into `fmt::Write`, and the
//! shared [`namer::Namer`] for every name that comes from an input file.
//! Code generation never touches a device: it only asks the plugin for strings
//! and numbers.

pub mod keywords;
pub mod namer;
