//! C++ literals of the wrapper: strings, kernel scalars, and the fixed text
//! every wrapper starts with.

use super::Error;

pub(super) use super::super::c_str;

/// The C++ type of a Triton scalar signature type.
pub(super) fn scalar_type(triton: &str) -> Result<&'static str, Error> {
    Ok(match triton {
        "i32" => "int32_t",
        "i64" => "int64_t",
        "fp32" => "float",
        "fp64" => "double",
        "i1" => "bool",
        other => {
            return Err(Error::Unsupported(format!(
                "a kernel scalar of Triton type {other}"
            )))
        }
    })
}

/// A Python literal of a scalar (an attention launch's) as C++.
pub(super) fn scalar_value(text: &str, ty: &str) -> Result<String, Error> {
    let bad = || Error::Unsupported(format!("a kernel scalar `{text}`"));
    match ty {
        "float" | "double" => {
            let v: f64 = match text {
                "float('inf')" | "math.inf" => f64::INFINITY,
                "float('-inf')" | "-math.inf" => f64::NEG_INFINITY,
                t => t.parse().map_err(|_| bad())?,
            };
            Ok(if v.is_infinite() {
                format!(
                    "{}std::numeric_limits<{ty}>::infinity()",
                    if v < 0.0 { "-" } else { "" }
                )
            } else {
                format!("static_cast<{ty}>({v:e})")
            })
        }
        "bool" => Ok(match text {
            "True" | "1" => "true".into(),
            "False" | "0" => "false".into(),
            _ => return Err(bad()),
        }),
        _ => {
            let v: i64 = text.parse().map_err(|_| bad())?;
            Ok(format!("static_cast<{ty}>({v}LL)"))
        }
    }
}

/// The standard headers every wrapper starts with, before the plugin's text:
/// what every driver text may rely on.
pub const STD_HEADERS: &str = "\
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

";

/// The error text, where the weights reader (which defines it) is not included.
pub(super) const ERROR_TEXT: &str = "\nstatic char kiln_error_text[768] = \"\";\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_are_typed_cpp_literals() {
        assert_eq!(
            scalar_value("0.125", "float").unwrap(),
            "static_cast<float>(1.25e-1)"
        );
        assert_eq!(
            scalar_value("float('-inf')", "float").unwrap(),
            "-std::numeric_limits<float>::infinity()"
        );
        assert_eq!(
            scalar_value("-7", "int64_t").unwrap(),
            "static_cast<int64_t>(-7LL)"
        );
        assert!(scalar_value("x + 1", "int32_t").is_err());
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(c_str("kernels/a-1/k.cubin"), "\"kernels/a-1/k.cubin\"");
        assert_eq!(c_str("a\"b\\c??/"), "\"a\\\"b\\\\c\\?\\?/\"");
        assert_eq!(c_str("é\n"), "\"\\303\\251\\012\"");
    }
}
