//! Discovery, loading, `host list` and `host inspect` against the real plugin
//! libraries, and every bad input the plugin-ABI issue names.

use std::path::{Path, PathBuf};

use kiln_tests::*;

fn list_json(cmd: &mut std::process::Command) -> serde_json::Value {
    let (output, stdout, stderr) = run(cmd.args(["list", "--json"]));
    assert!(output.status.success(), "host list failed: {stderr}");
    json(&stdout)
}

fn device_names(list: &serde_json::Value) -> Vec<String> {
    list["devices"]
        .as_array()
        .expect("devices array")
        .iter()
        .map(|d| d["name"].as_str().expect("name").to_string())
        .collect()
}

fn copy_into(dir: &Path, lib: &Path, name: &str) -> PathBuf {
    let dest = dir.join(name);
    std::fs::copy(lib, &dest).expect("copy library");
    dest
}

#[test]
fn list_finds_the_four_bundled_plugins_beside_the_executable() {
    let list = list_json(&mut host(&host_bin()));
    assert_eq!(device_names(&list), ["cpu", "cuda", "gxu", "xpu"]);
    assert_eq!(list["rejected"], serde_json::json!([]), "{list:#}");
    for device in list["devices"].as_array().unwrap() {
        assert_eq!(
            device["api_version"],
            kiln_plugin_api::ApiVersion::CURRENT.to_string()
        );
        assert!(device["path"]
            .as_str()
            .unwrap()
            .ends_with(&dll_name(&format!(
                "kiln_{}",
                device["name"].as_str().unwrap()
            ))));
        assert!(
            device["status"].as_str().unwrap().starts_with("ok"),
            "{device}"
        );
    }
    let (_, table, _) = run(host(&host_bin()).arg("list"));
    assert!(table.starts_with("DEVICE"), "{table}");
    assert!(
        table.contains("gxu") && table.contains("triton") && table.contains("cpp"),
        "{table}"
    );
}

#[test]
fn inspect_gxu_shows_the_seed_strings_heuristics_and_grid() {
    let (output, stdout, stderr) = run(host(&host_bin()).args(["inspect", "gxu", "--json"]));
    assert!(output.status.success(), "{stderr}");
    let report = json(&stdout);
    let overrides = &report["overrides"];
    assert_eq!(overrides["set_device"], "torch.gxu.set_device(0)");
    assert_eq!(
        overrides["import_get_raw_stream_as"],
        "from torch._C import _gxu_getCurrentRawStream as get_raw_stream"
    );
    assert_eq!(overrides["cpp_device_guard"], "at::gxu::GXUGuard");
    let driver = overrides["kernel_driver"].as_str().expect("kernel_driver");
    assert!(
        driver.contains("loadKernel(") && driver.contains("launchKernel("),
        "{driver}"
    );
    assert!(driver.contains("GXU_DRIVER_CHECK"), "{driver}");
    let heuristics = &report["heuristics"];
    for kind in ["pointwise", "reduction"] {
        let configs = heuristics[kind]["configs"].as_array().expect("configs");
        assert!(!configs.is_empty());
        assert!(
            configs.iter().all(|c| c["num_warps"] == 1),
            "{kind}: {configs:?}"
        );
    }
    let grids: Vec<(u64, u64)> = heuristics["adjust_grid"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["grid"][0].as_u64().unwrap(),
                g["adjusted"][0].as_u64().unwrap(),
            )
        })
        .collect();
    // Probed around the device's own width (48 programs per wave): up to 48
    // programs stay, more round up to a multiple of 48.
    assert_eq!(
        grids,
        [
            (1, 1),
            (47, 47),
            (48, 48),
            (49, 96),
            (95, 96),
            (97, 144),
            (963, 1008)
        ]
    );
    assert_eq!(report["device"]["properties"]["warp_size"], 32);
    assert_eq!(report["backend"]["scheduling"], "triton");
}

#[test]
fn inspect_accepts_a_library_path_and_text_output_names_every_override() {
    let path = bundled_plugin("cuda");
    let (output, stdout, stderr) = run(host(&host_bin()).arg("inspect").arg(&path));
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("torch.cuda.set_device(0)"), "{stdout}");
    for name in [
        "import_get_raw_stream_as",
        "cpp_getStreamFromExternal",
        "kernel_driver",
        "tma_descriptor_helpers",
        "cpp_scratch",
    ] {
        assert!(stdout.contains(name), "{name} missing from:\n{stdout}");
    }
    assert!(stdout.contains("cuLaunchKernel"), "{stdout}");
}

#[test]
fn each_bundled_plugin_states_its_matmul_alignment_and_the_compile_target_takes_it() {
    // (device, inspect's JSON, the compile's `Target::matmul_alignment`)
    let cases = [
        (
            "cuda",
            serde_json::json!({ "value": 16, "stated_by": "plugin" }),
            16,
        ),
        (
            "gxu",
            serde_json::json!({ "value": 16, "stated_by": "plugin" }),
            16,
        ),
        (
            "xpu",
            serde_json::json!({ "value": 0, "stated_by": "host default" }),
            0,
        ),
        ("cpu", serde_json::Value::Null, 0),
    ];
    for (device, stated, target) in cases {
        let (inspected, query) = stated_and_target(device, "matmul_alignment");
        assert_eq!(inspected, stated, "{device}");
        assert_eq!(query.map(|t| t.matmul_alignment), Some(target), "{device}");
    }
    let (_, text, _) = run(host(&host_bin()).args(["inspect", "cuda"]));
    assert!(
        text.contains("K and N are padded to; 0: none): 16 (from the plugin)"),
        "{text}"
    );
}

/// What `host inspect DEVICE --json` says of heuristic `key`, and the compile
/// target the bundled plugin of `device` makes (`None` where it makes none).
fn stated_and_target(device: &str, key: &str) -> (serde_json::Value, Option<kiln::driver::Target>) {
    let (output, stdout, stderr) = run(host(&host_bin()).args(["inspect", device, "--json"]));
    assert!(output.status.success(), "{device}: {stderr}");
    let stated = json(&stdout)["heuristics"][key].clone();
    let plugin = match kiln::plugins::load::load_library(&bundled_plugin(device)) {
        kiln::plugins::load::LoadOutcome::Loaded(p) => p,
        _ => panic!("the bundled {device} plugin loads"),
    };
    let target = kiln::driver::Target::query(&plugin, &kiln::driver::Options::default()).ok();
    (stated, target)
}

#[test]
fn each_bundled_plugin_states_its_channels_last_convolutions_and_the_compile_target_takes_them() {
    use kiln::graph::DType;
    let sixteen = [DType::Float16, DType::BFloat16];
    // (device, inspect's JSON, the compile's `Target::conv_channels_last`)
    let cases = [
        (
            "cuda",
            serde_json::json!({ "value": ["float16", "bfloat16"], "stated_by": "plugin" }),
            &sixteen[..],
        ),
        (
            "gxu",
            serde_json::json!({ "value": ["float16", "bfloat16"], "stated_by": "plugin" }),
            &sixteen[..],
        ),
        (
            "xpu",
            serde_json::json!({ "value": [], "stated_by": "host default" }),
            &[][..],
        ),
        ("cpu", serde_json::Value::Null, &[][..]),
    ];
    for (device, stated, target) in cases {
        let (inspected, query) = stated_and_target(device, "conv_channels_last");
        assert_eq!(inspected, stated, "{device}");
        let got = query.map(|t| t.conv_channels_last.iter().collect::<Vec<_>>());
        assert_eq!(got, Some(target.to_vec()), "{device}");
    }
    let (_, text, _) = run(host(&host_bin()).args(["inspect", "cuda"]));
    assert!(
        text.contains("convolutions run channels-last): float16, bfloat16 (from the plugin)"),
        "{text}"
    );
    let (_, text, _) = run(host(&host_bin()).args(["inspect", "xpu"]));
    assert!(
        text.contains("convolutions run channels-last): none (the host's default"),
        "{text}"
    );
}

#[test]
fn inspect_of_an_unknown_device_says_what_exists_and_where_it_looked() {
    let (output, _, stderr) = run(host(&host_bin()).args(["inspect", "npu"]));
    assert!(!output.status.success());
    assert!(
        stderr.contains("no plugin provides the device `npu`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("available devices: cpu, cuda, gxu, xpu"),
        "{stderr}"
    );
    assert!(stderr.contains("--plugins"), "{stderr}");
}

#[test]
fn an_empty_plugin_folder_finds_nothing_and_says_where_it_looked() {
    let tmp = TempDir::new("empty");
    let bin = isolated_host(&tmp);
    let empty = tmp.subdir("plugins-empty");
    let (output, stdout, _) = run(host(&bin).arg("--plugins").arg(&empty).arg("list"));
    assert!(output.status.success());
    assert!(stdout.contains("No device plugins found."), "{stdout}");
    assert!(
        stdout.contains(&format!("{} (--plugins)", empty.display())),
        "{stdout}"
    );
}

#[test]
fn a_plugin_folder_that_does_not_exist_is_listed_not_an_error() {
    let tmp = TempDir::new("missing");
    let missing = tmp.path().join("no-such-folder");
    let (output, stdout, stderr) =
        run(host(&host_bin()).arg("--plugins").arg(&missing).arg("list"));
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("no-such-folder"), "{stdout}");
    assert!(stdout.contains("does not exist"), "{stdout}");
}

fn system_libm() -> PathBuf {
    let candidates = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib/aarch64-linux-gnu/libm.so.6",
        "/usr/lib64/libm.so.6",
        "/lib64/libm.so.6",
    ];
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("the system's libm.so.6")
}

#[test]
fn non_plugin_libraries_are_skipped_quietly_and_junk_is_rejected_without_stopping_the_others() {
    let tmp = TempDir::new("mixed");
    let bin = isolated_host(&tmp);
    let dir = tmp.subdir("plugins");
    copy_into(&dir, &system_libm(), &dll_name("m"));
    std::fs::write(
        dir.join(dll_name("notes")),
        "this is a text file, not a library\n",
    )
    .unwrap();
    copy_into(&dir, &bundled_plugin("gxu"), &dll_name("gxu"));
    let list = list_json(host(&bin).arg("--plugins").arg(&dir));
    assert_eq!(device_names(&list), ["gxu"]);
    let skipped = list["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{list:#}");
    assert!(skipped[0].as_str().unwrap().ends_with(&dll_name("m")));
    let rejected = list["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 1, "{list:#}");
    assert!(rejected[0]["path"]
        .as_str()
        .unwrap()
        .ends_with(&dll_name("notes")));
    assert!(
        rejected[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not opened: not a shared library"),
        "{list:#}"
    );
}

#[test]
fn inspect_refuses_a_non_plugin_library_by_path() {
    let (output, _, stderr) = run(host(&host_bin()).arg("inspect").arg(system_libm()));
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("is not a Kiln plugin"), "{stderr}");
}

#[test]
fn the_first_plugin_in_search_order_wins_a_device_name_and_the_other_is_shadowed() {
    let tmp = TempDir::new("dup");
    let bin = isolated_host(&tmp);
    let first = tmp.subdir("first");
    let second = tmp.subdir("second");
    let winner = copy_into(&first, &bundled_plugin("gxu"), &dll_name("gxu"));
    let loser = copy_into(&second, &bundled_plugin("gxu"), &dll_name("gxu_copy"));
    let list = list_json(
        host(&bin)
            .arg("--plugins")
            .arg(&first)
            .arg("--plugins")
            .arg(&second),
    );
    assert_eq!(device_names(&list), ["gxu"]);
    let devices = list["devices"].as_array().unwrap();
    assert_eq!(
        devices[0]["path"],
        winner.canonicalize().unwrap().to_str().unwrap()
    );
    let shadowed = list["shadowed"].as_array().unwrap();
    assert_eq!(shadowed.len(), 1);
    assert_eq!(shadowed[0]["name"], "gxu");
    assert_eq!(
        shadowed[0]["path"],
        loser.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(
        shadowed[0]["by"],
        winner.canonicalize().unwrap().to_str().unwrap()
    );
    // KILN_PLUGIN_PATH comes after --plugins.
    let list = list_json(
        host(&bin)
            .env("KILN_PLUGIN_PATH", &second)
            .arg("--plugins")
            .arg(&first),
    );
    assert_eq!(
        list["shadowed"][0]["by"],
        winner.canonicalize().unwrap().to_str().unwrap()
    );
}

#[test]
fn plugins_are_found_through_kiln_plugin_path_and_the_hosts_plugins_folder() {
    let tmp = TempDir::new("env");
    let bin = isolated_host(&tmp);
    let env_dir = tmp.subdir("env");
    copy_into(&env_dir, &bundled_plugin("xpu"), &dll_name("xpu"));
    let beside = bin.parent().unwrap().join("plugins");
    std::fs::create_dir_all(&beside).unwrap();
    copy_into(&beside, &bundled_plugin("cpu"), &dll_name("cpu"));
    let list = list_json(host(&bin).env("KILN_PLUGIN_PATH", &env_dir));
    assert_eq!(device_names(&list), ["cpu", "xpu"]);
}

#[test]
fn a_malformed_gxu_toml_rejects_gxu_naming_the_file_and_line() {
    let tmp = TempDir::new("gxutoml");
    let bin = isolated_host(&tmp);
    let dir = tmp.subdir("vendor");
    copy_into(&dir, &bundled_plugin("gxu"), &dll_name("gxu"));
    copy_into(&dir, &bundled_plugin("cuda"), &dll_name("cuda"));
    std::fs::write(
        dir.join("gxu.toml"),
        "warp_size = 32\ngrid_multiple = = 48\n",
    )
    .unwrap();
    let list = list_json(host(&bin).arg("--plugins").arg(&dir));
    assert_eq!(
        device_names(&list),
        ["cuda"],
        "a broken gxu must not stop cuda"
    );
    let reason = list["rejected"][0]["reason"]
        .as_str()
        .expect("gxu rejected")
        .to_string();
    assert!(reason.contains("gxu.toml"), "{reason}");
    assert!(reason.contains("line 2"), "{reason}");
}

#[test]
fn gxu_toml_beside_the_library_tunes_warp_size_and_grid_multiple() {
    let tmp = TempDir::new("gxutune");
    let dir = tmp.subdir("vendor");
    let lib = copy_into(&dir, &bundled_plugin("gxu"), &dll_name("gxu"));
    std::fs::write(
        dir.join("gxu.toml"),
        "warp_size = 64\ngrid_multiple = 32\nmatmul_alignment = 32\n\
         conv_channels_last = [\"float32\"]\n",
    )
    .unwrap();
    let (output, stdout, stderr) = run(host(&host_bin()).arg("inspect").arg(&lib).arg("--json"));
    assert!(output.status.success(), "{stderr}");
    let report = json(&stdout);
    assert_eq!(report["device"]["properties"]["warp_size"], 64);
    assert_eq!(
        report["heuristics"]["matmul_alignment"],
        serde_json::json!({ "value": 32, "stated_by": "plugin" })
    );
    assert_eq!(
        report["heuristics"]["conv_channels_last"],
        serde_json::json!({ "value": ["float32"], "stated_by": "plugin" })
    );
    assert_eq!(
        report["heuristics"]["adjust_grid"][3]["adjusted"][0], 64,
        "50 rounds up to 64"
    );
}

#[test]
fn a_plugin_built_against_an_older_shorter_root_module_loads_with_missing_parts_not_provided() {
    let lib = compat_plugin();
    let (output, stdout, stderr) = run(host(&host_bin()).arg("inspect").arg(&lib).arg("--json"));
    assert!(output.status.success(), "{stderr}");
    let report = json(&stdout);
    assert_eq!(report["name"], "oldapi");
    assert_eq!(
        report["overrides"]["set_device"],
        "torch.oldapi.set_device(0)"
    );
    assert_eq!(
        report["overrides"]["kernel_driver"],
        serde_json::Value::Null
    );
    assert_eq!(report["device"]["properties"], serde_json::Value::Null);
    assert_eq!(report["backend"], serde_json::Value::Null);
    assert_eq!(
        report["heuristics"]["pointwise"]["configs"],
        serde_json::Value::Null
    );
    assert_eq!(
        report["heuristics"]["adjust_grid"][0]["adjusted"],
        serde_json::Value::Null
    );
    let list = list_json(host(&host_bin()).arg("--plugins").arg(&lib));
    let old = list["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "oldapi")
        .expect("oldapi listed")
        .clone();
    // It loads, but a compile needs the backend spec its older API lacks.
    assert_eq!(
        old["status"],
        "cannot compile (see below), no device module"
    );
    let why = old["cannot_compile"].as_str().unwrap_or_default();
    assert!(why.contains("no backend spec"), "{why}");
}

/// A kiln-graph/1 file of one `scaled_dot_product_attention` of `[4, 8, 512,
/// head]` operands of `dtype`: the host's own flash-attention kernel on a
/// Triton device.
fn attention_graph(dtype: &str, head: i64) -> String {
    let mut text = "format = \"kiln-graph/1\"\nname = \"attn\"\noutputs = [\"o\"]\n\n".to_string();
    for name in ["q", "k", "v"] {
        text += &format!(
            "[[inputs]]\nname = \"{name}\"\nshape = [4, 8, 512, {head}]\ndtype = \"{dtype}\"\n\n"
        );
    }
    text + "[[nodes]]\nname = \"o\"\nop = \"scaled_dot_product_attention\"\nargs = [\"q\", \"k\", \"v\"]\n"
}

/// Compiles `graph` for `device` found through `plugins`; the text of
/// `output_code.py`.
fn compile_with(plugins: &Path, device: &str, graph: &str, out: &Path) -> String {
    let path = out.with_extension("toml");
    std::fs::write(&path, graph).expect("write graph");
    let (output, _, stderr) = run(host(&host_bin())
        .arg("--plugins")
        .arg(plugins)
        .arg("compile")
        .arg(&path)
        .args(["--device", device, "-o"])
        .arg(out));
    assert!(output.status.success(), "{stderr}");
    std::fs::read_to_string(out.join("output_code.py")).expect("output_code.py")
}

/// The flash-attention kernel's tiles as its `KERNEL_META` entry gives them:
/// BLOCK_M, BLOCK_N, BLOCK_E, BLOCK_EV and the stages.
fn attention_tiles(code: &str) -> [i64; 5] {
    let meta = code
        .lines()
        .find(|l| l.trim_start().starts_with("\"kiln_flash_attention_0\": {"))
        .unwrap_or_else(|| panic!("no attention kernel in:\n{code}"));
    let value = |key: &str| -> i64 {
        let at = meta
            .find(&format!("\"{key}\": "))
            .unwrap_or_else(|| panic!("{key} in {meta}"));
        let rest = &meta[at + key.len() + 4..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end]
            .parse()
            .unwrap_or_else(|_| panic!("{key} in {meta}"))
    };
    ["BLOCK_M", "BLOCK_N", "BLOCK_E", "BLOCK_EV", "num_stages"].map(value)
}

/// The shared memory those tiles take, as the host counts it: the pipelined
/// key and value tiles and the query tile.
fn shared_bytes([m, n, e, ev, stages]: [i64; 5], elem: i64) -> i64 {
    (stages * n * (e + ev) + m * e) * elem
}

#[test]
fn a_gxu_of_48_kib_of_shared_memory_gets_flash_attention_tiles_that_fit_it() {
    let tmp = TempDir::new("gxu48");
    let dir = tmp.subdir("vendor");
    let lib = copy_into(&dir, &bundled_plugin("gxu"), &dll_name("gxu"));
    std::fs::write(dir.join("gxu.toml"), "shared_memory_per_block = 49152\n").unwrap();
    let (output, stdout, stderr) = run(host(&host_bin()).arg("inspect").arg(&lib).arg("--json"));
    assert!(output.status.success(), "{stderr}");
    let report = json(&stdout);
    assert_eq!(
        report["device"]["shared_memory_per_block"],
        serde_json::json!({ "value": 49152, "stated_by": "plugin" })
    );
    let wide = tmp.subdir("wide");
    let mut shrunk = 0;
    for (dtype, elem) in [("float16", 2), ("bfloat16", 2), ("float32", 4)] {
        for head in [32, 64, 128, 256] {
            let name = format!("{dtype}_{head}");
            let graph = attention_graph(dtype, head);
            let tiles =
                attention_tiles(&compile_with(&dir, "gxu", &graph, &tmp.path().join(&name)));
            assert!(shared_bytes(tiles, elem) <= 49152, "{name}: {tiles:?}");
            // The bundled gxu, 96 KiB: the tiles only shrink where they must.
            let roomy = attention_tiles(&compile_with(
                &bundled_plugin("gxu"),
                "gxu",
                &graph,
                &wide.join(&name),
            ));
            assert!(shared_bytes(roomy, elem) <= 96 * 1024, "{name}: {roomy:?}");
            if roomy != tiles {
                assert!(shared_bytes(roomy, elem) > 49152, "{name}: {roomy:?} fit");
                shrunk += 1;
            }
        }
    }
    // float32 heads of 128 and 256 and 16-bit heads of 256 take more than 48 KiB at 96.
    assert!(shrunk >= 3, "{shrunk}");
}

#[test]
fn a_plugin_built_against_api_1_4_loads_and_gets_the_hosts_stated_defaults() {
    let lib = api_1_4_plugin();
    let (output, stdout, stderr) = run(host(&host_bin()).arg("inspect").arg(&lib).arg("--json"));
    assert!(output.status.success(), "{stderr}");
    let report = json(&stdout);
    assert_eq!(report["name"], "apifour");
    // Its source says 48 KiB and TF32, but its tables cannot carry them.
    assert_eq!(
        report["device"]["shared_memory_per_block"],
        serde_json::json!({ "value": 98304, "stated_by": "host default" })
    );
    assert_eq!(
        report["heuristics"]["tf32_dot"],
        serde_json::json!({ "value": false, "stated_by": "host default" })
    );
    // Nor its 16-byte matmul_alignment (API 1.6): no product is padded.
    assert_eq!(
        report["heuristics"]["matmul_alignment"],
        serde_json::json!({ "value": 0, "stated_by": "host default" })
    );
    // Nor an L2 cache (API 1.8): nothing is prefetched.
    assert_eq!(
        report["device"]["l2_cache_bytes"],
        serde_json::json!({ "value": 0, "stated_by": "host default" })
    );
    // Nor its channels-last convolutions (API 1.7): every one stays NCHW.
    assert_eq!(
        report["heuristics"]["conv_channels_last"],
        serde_json::json!({ "value": [], "stated_by": "host default" })
    );
    let (_, text, _) = run(host(&host_bin()).arg("inspect").arg(&lib));
    assert!(
        text.contains("98304 (the host's default: the plugin does not say)"),
        "{text}"
    );
    // It compiles: float32 products exact, tiles fitted to 96 KiB.
    let tmp = TempDir::new("api14");
    let code = compile_with(
        &lib,
        "apifour",
        &attention_graph("float32", 128),
        &tmp.path().join("f32"),
    );
    assert!(code.contains("input_precision=\"ieee\""), "{code}");
    assert!(!code.contains("tf32x3"), "{code}");
    assert!(shared_bytes(attention_tiles(&code), 4) <= 96 * 1024);
}

/// Discovers one deliberately broken plugin (from `tests/broken`) alone in a folder.
fn rejected_reason(fixture: &str) -> String {
    let tmp = TempDir::new(fixture);
    let bin = isolated_host(&tmp);
    let dir = tmp.subdir("plugins");
    copy_into(
        &dir,
        &kiln_tests::broken::fixture(fixture),
        &dll_name(fixture),
    );
    let list = list_json(host(&bin).arg("--plugins").arg(&dir));
    assert_eq!(device_names(&list), Vec::<String>::new(), "{list:#}");
    list["rejected"][0]["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("{fixture} was not rejected: {list:#}"))
        .to_string()
}

#[test]
fn an_incompatible_api_major_is_refused_naming_both_versions_and_what_to_rebuild() {
    let reason = rejected_reason("wrong_api_major");
    assert!(reason.contains("kiln-plugin-api 2."), "{reason}");
    let minor = kiln_plugin_api::API_VERSION_MINOR;
    assert!(
        reason.contains(&format!("this host accepts 1.0 to 1.{minor}")),
        "{reason}"
    );
    assert!(
        reason.contains(&format!(
            "rebuild the plugin against kiln-plugin-api 1.{minor}"
        )),
        "{reason}"
    );
}

#[test]
fn a_matmul_alignment_that_is_not_a_power_of_two_is_refused_at_load_naming_it() {
    let reason = rejected_reason("matmul_alignment_of_3");
    assert!(
        reason.contains("failed validation: matmul_alignment is 3:")
            && reason.contains("0 (no padding) or a power of two from 2 to 256"),
        "{reason}"
    );
}

#[test]
fn a_channels_last_dtype_the_host_does_not_know_is_refused_at_load_naming_it() {
    let reason = rejected_reason("conv_channels_last_half");
    assert!(
        reason.contains("failed validation: conv_channels_last names [\"half\"]:")
            && reason.contains("float16, bfloat16, float32, float64"),
        "{reason}"
    );
}

#[test]
fn empty_and_multi_line_one_line_strings_are_refused_at_load() {
    let empty = rejected_reason("empty_cpp_device_guard");
    assert!(empty.contains("`cpp_device_guard` is empty"), "{empty}");
    let newline = rejected_reason("newline_set_device");
    assert!(
        newline.contains("`set_device` must be one line") && newline.contains("U+000A"),
        "{newline}"
    );
}

/// Where the last loadable segment of a 64-bit little-endian ELF library ends:
/// cutting the file anywhere before it leaves a library the loader would
/// fault on.
fn loadable_end(bytes: &[u8]) -> usize {
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([bytes[at], bytes[at + 1]]));
    let u64_at = |at: usize| {
        let mut v = [0u8; 8];
        v.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(v) as usize
    };
    let (phoff, phentsize, phnum) = (u64_at(32), u16_at(54), u16_at(56));
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&h| bytes[h..h + 4] == [1, 0, 0, 0])
        .map(|h| u64_at(h + 8) + u64_at(h + 32))
        .max()
        .expect("a loadable segment")
}

#[test]
fn broken_library_files_never_bring_a_command_down_and_are_each_listed_once() {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return;
    }
    let tmp = TempDir::new("broken-files");
    let dir = tmp.subdir("plugins");
    let good = std::fs::read(bundled_plugin("gxu")).expect("the gxu plugin");
    let end = loadable_end(&good);
    let mut expected: Vec<(String, &str)> = Vec::new();
    for cut in [16, 63, 64, 1000, 4096, 65_536, end / 4, end / 2, end - 1] {
        let name = dll_name(&format!("cut_{cut}"));
        std::fs::write(dir.join(&name), &good[..cut]).expect("write a prefix");
        expected.push((name, if cut < 64 { "too short" } else { "truncated" }));
    }
    let name = dll_name("zeros");
    std::fs::write(dir.join(&name), vec![0u8; good.len()]).expect("write zeros");
    expected.push((name, "no ELF header"));
    let mut foreign = good.clone();
    foreign[18..20].copy_from_slice(&183u16.to_le_bytes()); // e_machine: AArch64
    let name = dll_name("aarch64");
    std::fs::write(dir.join(&name), &foreign).expect("write a foreign library");
    expected.push((name, "built for another machine"));
    let name = dll_name("text");
    std::fs::write(dir.join(&name), "this is not a library\n").expect("write text");
    expected.push((name, "no ELF header"));

    for cmd in [
        host(&host_bin()).arg("--plugins").arg(&dir),
        host(&host_bin()).env("KILN_PLUGIN_PATH", &dir),
    ] {
        let list = list_json(cmd);
        assert_eq!(
            device_names(&list),
            ["cpu", "cuda", "gxu", "xpu"],
            "{list:#}"
        );
        let rejected = list["rejected"].as_array().expect("rejected");
        assert_eq!(rejected.len(), expected.len(), "{list:#}");
        for (name, why) in &expected {
            let entries: Vec<&serde_json::Value> = rejected
                .iter()
                .filter(|r| {
                    r["path"]
                        .as_str()
                        .is_some_and(|p| p.ends_with(name.as_str()))
                })
                .collect();
            assert_eq!(entries.len(), 1, "{name} is listed once: {list:#}");
            let reason = entries[0]["reason"].as_str().unwrap_or("");
            assert!(reason.contains(why), "{name}: {reason}");
        }
    }
    // Every other command works beside them too.
    let (output, stdout, stderr) = run(host(&host_bin())
        .arg("--plugins")
        .arg(&dir)
        .arg("run")
        .arg(repo_root().join("examples/small_layernorm.toml"))
        .args(["--device", "cpu", "--check"])
        .env("KILN_CACHE_DIR", tmp.subdir("cache")));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let (output, _, stderr) = run(host(&host_bin())
        .arg("--plugins")
        .arg(&dir)
        .args(["inspect", "gxu"]));
    assert!(output.status.success(), "{stderr}");
}

#[test]
fn a_plugin_that_panics_is_reported_once_quietly_with_where_it_panicked() {
    let tmp = TempDir::new("panics");
    let dir = tmp.subdir("plugins");
    copy_into(
        &dir,
        &kiln_tests::broken::fixture("panic_kernel_driver"),
        &dll_name("panic_kernel_driver"),
    );
    let (output, stdout, stderr) = run(host(&host_bin())
        .env("RUST_BACKTRACE", "1")
        .arg("--plugins")
        .arg(&dir)
        .arg("list"));
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stderr, "", "nothing but the report: {stderr}");
    let reported: Vec<&str> = stdout.lines().filter(|l| l.contains("panicked")).collect();
    assert_eq!(reported.len(), 1, "{stdout}");
    assert!(
        reported[0].contains("panicked in `kernel_driver`")
            && reported[0].contains("(at panic_kernel_driver/src/lib.rs:"),
        "{stdout}"
    );
    // A command that does not need the broken device says nothing about it.
    let (output, _, stderr) = run(host(&host_bin())
        .env("RUST_BACKTRACE", "1")
        .arg("--plugins")
        .arg(&dir)
        .arg("compile")
        .arg(repo_root().join("examples/add.toml"))
        .args(["--device", "gxu", "-o"])
        .arg(tmp.path().join("out")));
    assert!(output.status.success(), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("stack backtrace"),
        "{stderr}"
    );
}

#[test]
fn a_plugin_that_cannot_compile_is_listed_as_such_with_the_reason_and_a_true_hint() {
    let tmp = TempDir::new("noguard");
    let bin = isolated_host(&tmp);
    let dir = tmp.subdir("plugins");
    copy_into(
        &dir,
        &kiln_tests::broken::fixture("no_device_guard"),
        &dll_name("no_device_guard"),
    );
    // It loads and is listed, but not as "ok": no wrapper works.
    let list = list_json(host(&bin).arg("--plugins").arg(&dir));
    let device = &list["devices"][0];
    assert_eq!(device["name"], "noguard", "{list:#}");
    assert_eq!(device["wrappers"], serde_json::json!([]), "{list:#}");
    let status = device["status"].as_str().unwrap_or_default();
    assert!(status.starts_with("cannot compile"), "{status}");
    let reason = device["cannot_compile"].as_str().unwrap_or_default();
    assert!(reason.contains("`device_guard`"), "{reason}");
    let (out, table, _) = run(host(&bin).arg("--plugins").arg(&dir).arg("list"));
    assert!(out.status.success());
    assert!(table.contains("Cannot compile"), "{table}");
    assert!(table.contains("noguard: "), "{table}");
    // `inspect` gives the verdict per wrapper.
    let (out, report, _) = run(host(&bin)
        .arg("--plugins")
        .arg(&dir)
        .args(["inspect", "noguard", "--json"]));
    assert!(out.status.success());
    let report = json(&report);
    let python = report["compiles"]["python"].as_str().unwrap_or_default();
    assert!(python.contains("`device_guard`"), "{report:#}");
    // The compile error says what the plugin must implement, and offers no
    // other wrapper: this plugin has none that works.
    let graph = repo_root().join("examples/small_mlp.toml");
    let out_dir = tmp.subdir("out");
    let (out, _, err) = run(host(&bin)
        .arg("--plugins")
        .arg(&dir)
        .args([
            "compile",
            &graph.to_string_lossy(),
            "--device",
            "noguard",
            "-o",
        ])
        .arg(&out_dir));
    assert!(!out.status.success());
    assert!(err.contains("DeviceOpOverrides::device_guard"), "{err}");
    assert!(
        !err.contains("wrapper python") && !err.contains("another wrapper"),
        "{err}"
    );
    // The bundled plugins each compile with their own wrapper.
    let list = list_json(&mut host(&host_bin()));
    for d in list["devices"].as_array().unwrap() {
        // The Triton devices also compile with the C++ wrapper (`--wrapper cpp`).
        let want = if d["name"] == "cpu" {
            serde_json::json!(["cpp"])
        } else {
            serde_json::json!(["python", "cpp"])
        };
        assert_eq!(d["wrappers"], want, "{d:#}");
        assert!(d["cannot_compile"].is_null(), "{d:#}");
    }
}

#[test]
fn a_plugin_built_against_a_modified_api_is_refused_naming_the_type_that_differs() {
    let tmp = TempDir::new("changed-layout");
    let bin = isolated_host(&tmp);
    let dir = tmp.subdir("plugins");
    copy_into(
        &dir,
        &changed_layout_plugin(),
        &dll_name("changed_layout_plugin"),
    );
    let list = list_json(host(&bin).arg("--plugins").arg(&dir));
    assert_eq!(device_names(&list), Vec::<String>::new(), "{list:#}");
    let reason = list["rejected"][0]["reason"].as_str().unwrap_or_default();
    let host_version = kiln::plugins::host_api_version().to_string();
    for part in [
        "`LoadContext` (reached through `init`) has 72 bytes, the host's 64, 3 fields, the host's 2",
        &format!("says it is {host_version}, the host's version"),
        "modified or unreleased copy",
    ] {
        assert!(reason.contains(part), "missing {part:?} in {reason}");
    }
    // Conformance says the same, under the check that found it.
    let out = run(host(&bin)
        .arg("conformance")
        .arg(dir.join(dll_name("changed_layout_plugin")))
        .arg("--json"));
    let report = json(&out.1);
    let case = report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "load.abi_layout"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(case["status"], "fail", "{report:#}");
    assert!(
        case["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("`LoadContext`"),
        "{case:#}"
    );
}

/// A plugin folder holding every kind of entry that looks like a library but
/// is not one, and two `--plugins` paths that cannot be searched.
struct BadEntries {
    tmp: TempDir,
    folder: PathBuf,
    /// (file name in `folder`, what its reason must say)
    expected: Vec<(String, &'static str)>,
    loop_path: PathBuf,
    missing_path: PathBuf,
}

#[cfg(unix)]
fn bad_entries(tag: &str) -> BadEntries {
    use std::os::unix::fs::symlink;
    let tmp = TempDir::new(tag);
    let folder = tmp.subdir("plugins");
    let dir = dll_name("dir");
    std::fs::create_dir(folder.join(&dir)).expect("a folder named like a library");
    let dangling = dll_name("dangling");
    symlink("nowhere", folder.join(&dangling)).expect("a dangling link");
    let (a, b) = (dll_name("loop_a"), dll_name("loop_b"));
    symlink(&b, folder.join(&a)).expect("a -> b");
    symlink(&a, folder.join(&b)).expect("b -> a");
    // A link loop given itself as a --plugins path.
    let loop_path = tmp.path().join("loop");
    let other = tmp.path().join("loop-back");
    symlink(&other, &loop_path).expect("loop -> loop-back");
    symlink(&loop_path, &other).expect("loop-back -> loop");
    BadEntries {
        missing_path: tmp.path().join("no-such-folder"),
        expected: vec![
            (dir, "is a folder"),
            (dangling, "which does not exist"),
            (a, "loops back on itself"),
            (b, "loops back on itself"),
        ],
        tmp,
        folder,
        loop_path,
    }
}

#[cfg(unix)]
#[test]
fn folders_links_and_loops_in_a_plugin_folder_are_each_listed_once_with_their_reason() {
    let bad = bad_entries("bad-entries");
    let with_bad = |cmd: &mut std::process::Command| {
        cmd.arg("--plugins")
            .arg(&bad.folder)
            .arg("--plugins")
            .arg(&bad.loop_path)
            .arg("--plugins")
            .arg(&bad.missing_path)
            // The same folder again, spelled otherwise: still listed once.
            .env("KILN_PLUGIN_PATH", bad.folder.join("."));
    };
    let mut cmd = host(&host_bin());
    with_bad(&mut cmd);
    let list = list_json(&mut cmd);
    assert_eq!(
        device_names(&list),
        ["cpu", "cuda", "gxu", "xpu"],
        "{list:#}"
    );
    let rejected = list["rejected"].as_array().expect("rejected");
    assert_eq!(rejected.len(), bad.expected.len(), "{list:#}");
    for (name, why) in &bad.expected {
        let entries: Vec<&serde_json::Value> = rejected
            .iter()
            .filter(|r| {
                r["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(name.as_str()))
            })
            .collect();
        assert_eq!(entries.len(), 1, "{name} is listed once: {list:#}");
        let reason = entries[0]["reason"].as_str().unwrap_or("");
        assert!(reason.contains(why), "{name}: {reason}");
    }
    let problems = list["search_problems"].as_array().expect("search_problems");
    assert_eq!(problems.len(), 2, "{list:#}");
    for (path, why) in [
        (&bad.loop_path, "loops back on itself"),
        (&bad.missing_path, "does not exist"),
    ] {
        let entries: Vec<&serde_json::Value> = problems
            .iter()
            .filter(|p| p["path"].as_str() == path.to_str())
            .collect();
        assert_eq!(
            entries.len(),
            1,
            "{} is listed once: {list:#}",
            path.display()
        );
        assert_eq!(entries[0]["origin"], "flag", "{list:#}");
        let reason = entries[0]["reason"].as_str().unwrap_or("");
        assert!(reason.contains(why), "{}: {reason}", path.display());
    }

    // The table lists the same entries, each once, and exits 0.
    let mut cmd = host(&host_bin());
    with_bad(&mut cmd);
    let (output, table, stderr) = run(cmd.arg("list"));
    assert!(output.status.success(), "{stderr}");
    for (name, why) in &bad.expected {
        let shown = format!("{}: ", bad.folder.join(name).display());
        let lines: Vec<&str> = table.lines().filter(|l| l.contains(&shown)).collect();
        assert_eq!(lines.len(), 1, "{name} is listed once: {table}");
        assert!(lines[0].contains(why), "{name}: {table}");
    }
    for (path, why) in [
        (&bad.loop_path, "loops back on itself"),
        (&bad.missing_path, "does not exist"),
    ] {
        let shown = format!("{} (--plugins): ", path.display());
        let lines: Vec<&str> = table.lines().filter(|l| l.contains(&shown)).collect();
        assert_eq!(lines.len(), 1, "{shown} is listed once: {table}");
        assert!(lines[0].contains(why), "{table}");
    }
}

#[cfg(unix)]
#[test]
fn a_bad_plugins_path_never_stops_a_command_that_does_not_need_it() {
    let bad = bad_entries("bad-paths");
    for path in [&bad.loop_path, &bad.missing_path] {
        let out = bad.tmp.path().join("out");
        let (output, stdout, stderr) = run(host(&host_bin())
            .arg("--plugins")
            .arg(path)
            .arg("--plugins")
            .arg(&bad.folder)
            .arg("compile")
            .arg(repo_root().join("examples/add.toml"))
            .args(["--device", "cpu", "-o"])
            .arg(&out));
        assert!(
            output.status.success(),
            "{}: {stdout}\n{stderr}",
            path.display()
        );
        assert!(out.join("wrapper.cpp").is_file(), "{stdout}");
        // It is still said, once, on stderr.
        let shown = format!("{} (--plugins)", path.display());
        assert_eq!(stderr.matches(&shown).count(), 1, "{stderr}");
    }
    // A device that only a bad path could have provided fails clearly,
    // naming what was rejected and what could not be searched.
    let (output, _, stderr) = run(host(&host_bin())
        .arg("--plugins")
        .arg(&bad.loop_path)
        .arg("--plugins")
        .arg(&bad.folder)
        .args(["inspect", "vendorx"]));
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        error.contains("no plugin provides the device `vendorx`"),
        "{stderr}"
    );
    assert!(error.contains(&dll_name("loop_a")), "{stderr}");
    assert!(error.contains(&dll_name("dir")), "{stderr}");
    assert!(
        error.contains(&format!("{} (--plugins)", bad.loop_path.display())),
        "{stderr}"
    );
}
