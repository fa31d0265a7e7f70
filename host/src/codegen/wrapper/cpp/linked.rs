//! The parts of the cpu runtime that `host run` links into a `wrapper.cpp`'s
//! library instead of compiling them into it (`runtime::compile::build_linked`):
//! the matrix product of each dtype, whose load and store types the wrapper's
//! calls name, built from the plugin's `kernel_header` that [`super::write`]
//! puts between two marker lines.

use super::super::super::cpp::expr::{compute_type, storage_type};
use super::super::super::cpp::runtime;
use crate::graph::dtype::DType;
use crate::schedule::ir::{ExternOp, Program, Step};

/// The runtime's load of storage of `d` that `kiln_mm` takes (`matmul.h`):
/// one type per dtype, so that every product of a file shares one
/// instantiation of the packed product.
pub(super) fn mm_load(d: DType) -> String {
    match d {
        DType::Float16 => "KilnLoadF16{}".into(),
        DType::BFloat16 => "KilnLoadBF16{}".into(),
        _ => format!("KilnLoad<{}>{{}}", storage_type(d)),
    }
}

/// The runtime's store into storage of `d` that `kiln_mm` takes, as
/// [`mm_load`].
pub(super) fn mm_store(d: DType) -> String {
    match d {
        DType::Float16 => "KilnStoreF16{}".into(),
        DType::BFloat16 => "KilnStoreBF16{}".into(),
        _ => format!("KilnStore<{}>{{}}", storage_type(d)),
    }
}

/// The line before the plugin's `kernel_header` in `wrapper.cpp`.
pub(super) const HEADER_BEGINS: &str =
    "// Kiln's C++ runtime is included from kiln/ beside this file, where `host compile` writes it.\n";
/// The line after the plugin's `kernel_header` in `wrapper.cpp`.
pub(super) const HEADER_ENDS: &str =
    "// What the generated code uses of the standard library and of Kiln's C++ runtime:\n";

/// The parts of the runtime that `host run` may compile once and link into
/// the library of `source` (a `wrapper.cpp` that [`write`] wrote for
/// `program`) instead of compiling them into it: the products of each float
/// dtype the program multiplies in (`matmul.h`'s `KILN_MM_LINKED`). None
/// where `source` is not such a file; the file builds alone either way.
pub fn linked_runtime(source: &str, program: &Program) -> Vec<runtime::Linked> {
    let Some(header) = header_of(source) else {
        return Vec::new();
    };
    let mut dtypes: Vec<DType> = program
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Extern(e) if matches!(e.op, ExternOp::Mm | ExternOp::Bmm) => {
                Some(program.buffer(e.out).dtype)
            }
            _ => None,
        })
        .collect();
    dtypes.sort_by_key(|d| d.name());
    dtypes.dedup();
    dtypes
        .into_iter()
        .filter_map(|d| product_object(header, d))
        .collect()
}

/// The plugin's `kernel_header` in `source`: the text between the marker
/// lines [`super::write`] writes around it.
fn header_of(source: &str) -> Option<&str> {
    let (_, rest) = source.split_once(HEADER_BEGINS)?;
    let (header, _) = rest.split_once(HEADER_ENDS)?;
    Some(header)
}

/// The object holding the product of `d` (a float dtype; none otherwise),
/// built after the plugin's `header`.
fn product_object(header: &str, d: DType) -> Option<runtime::Linked> {
    let (name, tag) = match d {
        DType::Float32 => ("mm_f32", "F32"),
        DType::Float64 => ("mm_f64", "F64"),
        DType::Float16 => ("mm_f16", "F16"),
        DType::BFloat16 => ("mm_bf16", "BF16"),
        _ => return None,
    };
    let instance = format!(
        "{}, {}, {}, {}",
        compute_type(d),
        storage_type(d),
        mm_load(d).trim_end_matches("{}"),
        mm_store(d).trim_end_matches("{}")
    );
    Some(runtime::Linked {
        name,
        source: format!(
            "// Kiln's cpu runtime: the {} matrix product that `host run` links into its libraries.\n\
             {header}#include \"{}\"\n\
             template KILN_MM_INSTANCE({instance});\n",
            d.name(),
            runtime::MATMUL.path
        ),
        object_flags: vec!["-DKILN_MM_LINKED".into()],
        library_flags: vec!["-DKILN_MM_LINKED".into(), format!("-DKILN_MM_LINKED_{tag}")],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_between_the_markers_goes_into_each_float_product_object() {
        let source =
            format!("// top\n{HEADER_BEGINS}#define KILN_MM_MR 6\n{HEADER_ENDS}#include <x>\n");
        let header = header_of(&source);
        assert_eq!(header, Some("#define KILN_MM_MR 6\n"));
        assert_eq!(header_of("int f();\n"), None);
        assert_eq!(header_of(&format!("{HEADER_BEGINS}int f();\n")), None);
        let bf16 = product_object("#define KILN_MM_MR 6\n", DType::BFloat16).expect("a float");
        assert_eq!(bf16.name, "mm_bf16");
        assert!(bf16.source.contains(
            "#define KILN_MM_MR 6\n#include \"kiln/matmul.h\"\n\
             template KILN_MM_INSTANCE(float, uint16_t, KilnLoadBF16, KilnStoreBF16);"
        ));
        assert!(bf16
            .library_flags
            .contains(&"-DKILN_MM_LINKED_BF16".to_string()));
        assert!(product_object("", DType::Int64).is_none());
    }
}
