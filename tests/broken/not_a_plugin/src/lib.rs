//! A shared library that is not a Kiln plugin: it exports an ordinary C
//! function and no Kiln root module, like any system library would.

/// Adds two numbers, so that the library exports something.
#[no_mangle]
pub extern "C" fn kiln_not_a_plugin_add(a: i32, b: i32) -> i32 {
    a.wrapping_add(b)
}
