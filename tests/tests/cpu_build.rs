//! The cpu device's in-process build: the runtime's matrix products are compiled once
//! into an object of the compile cache and linked into every later library (a second
//! graph reuses it, never rebuilds it), the linked library computes exactly what the
//! library built as one file computes, and a compile error in either unit names the
//! source file it kept.

use std::path::{Path, PathBuf};

use kiln::codegen::wrapper::cpp::linked_runtime;
use kiln::driver::{self, Artifacts};
use kiln::plugins::load::{load_library, LoadOutcome};
use kiln::runtime::{compile, Module};
use kiln_tests::*;

fn zoo(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/models").join(name)
}

fn compile_cpu(archive: &Path) -> Artifacts {
    let plugin = match load_library(&bundled_plugin("cpu")) {
        LoadOutcome::Loaded(p) => p,
        _ => panic!("the bundled cpu plugin loads"),
    };
    let graph = kiln::graph::front::load(archive).expect("the archive imports");
    driver::compile(graph, &plugin, &driver::Options::default()).expect("it compiles")
}

fn outputs(artifacts: &Artifacts, library: &Path) -> Vec<kiln::tensor::Tensor> {
    let module = Module::load(library, &artifacts.scheduled, &artifacts.weights).expect("loads");
    let metas: Vec<_> = artifacts
        .scheduled
        .program
        .inputs
        .iter()
        .map(|b| {
            let buf = artifacts.scheduled.program.buffer(*b);
            kiln::graph::TensorMeta::contiguous(buf.shape_hint(), buf.dtype)
        })
        .collect();
    // Integer inputs (token ids, token types, masks) as 0 or 1: in range for every model.
    let inputs: Vec<_> = kiln::tensor_io::random_inputs(&metas, 3)
        .into_iter()
        .map(|t| {
            if t.dtype.is_float() {
                return t;
            }
            let values = t.data.iter().map(|v| v.abs() % 2.0).collect();
            kiln::tensor::Tensor::new(t.shape.clone(), t.dtype, values)
        })
        .collect();
    module.run(&inputs).expect("runs")
}

#[test]
fn a_second_graph_links_the_product_object_the_first_built_and_both_compute_what_one_file_computes()
{
    let tmp = TempDir::new("cpu-build-linked");
    let compiler = compile::Compiler::from_env().expect("a C++ compiler");
    let mut first_object: Option<(PathBuf, std::time::SystemTime)> = None;
    for model in ["bert.pt2", "llama.pt2"] {
        let artifacts = compile_cpu(&zoo(model));
        let linked = linked_runtime(&artifacts.code, &artifacts.scheduled.program);
        assert_eq!(
            linked.iter().map(|l| l.name).collect::<Vec<_>>(),
            ["mm_f32"],
            "{model}: its float32 products are linked"
        );
        let built =
            compile::build_linked(&artifacts.code, &linked, &compiler, &tmp.subdir("cache"))
                .expect("the linked library builds");
        assert!(!built.cached, "{model}: a new graph's library is built");
        let [object] = built.linked.as_slice() else {
            panic!("{model}: one object linked, got {:?}", built.linked);
        };
        let modified = std::fs::metadata(&object.path)
            .and_then(|m| m.modified())
            .expect("the object is in the cache");
        match &first_object {
            None => {
                assert!(!object.cached, "the first graph builds the object");
                first_object = Some((object.path.clone(), modified));
            }
            Some((path, when)) => {
                assert!(object.cached, "{model}: the object was built again");
                assert_eq!(&object.path, path, "{model}: another object");
                assert_eq!(modified, *when, "{model}: the object was rewritten");
            }
        }
        let whole = compile::build(&artifacts.code, &compiler, &tmp.subdir("whole"))
            .expect("the file builds alone");
        assert_eq!(
            outputs(&artifacts, &built.library),
            outputs(&artifacts, &whole.library),
            "{model}: the linked library computes something else"
        );
        let again =
            compile::build_linked(&artifacts.code, &linked, &compiler, &tmp.subdir("cache"))
                .expect("found");
        assert!(again.cached && again.library == built.library);
    }
}

#[test]
fn a_compile_error_in_either_unit_names_the_source_it_kept() {
    let tmp = TempDir::new("cpu-build-errors");
    let compiler = compile::Compiler::from_env().expect("a C++ compiler");
    let artifacts = compile_cpu(&zoo("llama.pt2"));
    let linked = linked_runtime(&artifacts.code, &artifacts.scheduled.program);
    let broken_code = format!("{}\nint kiln_broken_here = ;\n", artifacts.code);
    let mut broken_part = linked.clone();
    broken_part[0].source.push_str("int kiln_broken_part = ;\n");
    for (what, code, parts) in [
        ("the generated file", &broken_code, &linked),
        ("the runtime object", &artifacts.code, &broken_part),
    ] {
        let dir = tmp.subdir(what.replace(' ', "-").as_str());
        match compile::build_linked(code, parts, &compiler, &dir) {
            Err(compile::Error::Compile {
                source_path,
                message,
                ..
            }) => {
                let kept = std::fs::read_to_string(&source_path).expect("the source is kept");
                assert!(
                    kept.contains("= ;"),
                    "{what}: {} is not the broken unit",
                    source_path.display()
                );
                assert!(
                    message.contains("kiln_broken"),
                    "{what}: the compiler's message: {message}"
                );
            }
            Err(e) => panic!("{what}: expected a compile error, got {e}"),
            Ok(b) => panic!("{what}: a broken unit built {}", b.library.display()),
        }
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.ends_with(std::env::consts::DLL_SUFFIX) || name.ends_with(".tmp")
            })
            .collect();
        assert!(
            leftovers.is_empty(),
            "{what}: a library or temporary file was left: {leftovers:?}"
        );
    }
}
