//! The limits the operating system puts on the host's memory: work too large
//! for an address-space limit (`ulimit -v`) or a cgroup memory limit is
//! refused with the figures and the limit's name, never aborted with a
//! backtrace.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The address-space limit of the tests, in KiB: a container's 4 GB.
const ULIMIT_V_KIB: &str = "4000000";

/// A fresh folder for test `name`.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-memory-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A graph file `NAME.toml` in a fresh folder, with `body` after the header.
fn graph(name: &str, outputs: &str, body: &str) -> PathBuf {
    let dir = scratch(name);
    let path = dir.join(format!("{name}.toml"));
    let text =
        format!("format = \"kiln-graph/1\"\nname = \"{name}\"\noutputs = [{outputs}]\n\n{body}");
    std::fs::write(&path, text).unwrap();
    path
}

/// `host ARGS` under `ulimit -v`, with no explicit budget: exit code and stderr.
fn host_under_ulimit(args: &[&str]) -> (i32, String) {
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {ULIMIT_V_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_host"))
        .args(args)
        .env_remove("KILN_MAX_MEMORY")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

/// A refusal: a failure exit code below 100 (not a signal or an abort), and
/// no trace of a panic.
fn assert_refused(code: i32, err: &str, wants: &[&str]) {
    assert!((1..100).contains(&code), "exit code {code}: {err}");
    for bad in ["backtrace", "panicked", "memory allocation of"] {
        assert!(!err.contains(bad), "{bad:?} in: {err}");
    }
    for want in wants {
        assert!(err.contains(want), "{want:?} not in: {err}");
    }
}

#[test]
fn a_huge_input_under_ulimit_v_is_refused_naming_the_limit() {
    let g = graph(
        "huge_bool_input",
        "\"y\"",
        "[[inputs]]\nname = \"x\"\nshape = [8, 100000000]\ndtype = \"bool\"\n\n\
         [[nodes]]\nname = \"y\"\nop = \"logical_not\"\nargs = [\"x\"]\n",
    );
    let (code, err) = host_under_ulimit(&["eval", g.to_str().unwrap()]);
    assert_refused(
        code,
        &err,
        &[
            "needs ",
            "left under the address-space limit (ulimit -v)",
            "raise `ulimit -v`",
        ],
    );
}

#[test]
fn host_run_on_cpu_under_ulimit_v_refuses_a_graph_too_large() {
    // 3.0 GiB of float32 input, read as 6.0 GiB of float64.
    let g = graph(
        "run_relu",
        "\"y\"",
        "[[inputs]]\nname = \"x\"\nshape = [8, 100000000]\ndtype = \"float32\"\n\n\
         [[nodes]]\nname = \"y\"\nop = \"relu\"\nargs = [\"x\"]\n",
    );
    let file = g.to_str().unwrap();
    for check in [None, Some("--check")] {
        let args: Vec<&str> = ["run", file, "--device", "cpu"]
            .into_iter()
            .chain(check)
            .collect();
        let (code, err) = host_under_ulimit(&args);
        assert_refused(
            code,
            &err,
            &[
                "running ",
                "inputs 6.0 GiB",
                "the compiled program ",
                "left under the address-space limit (ulimit -v)",
                "raise `ulimit -v`",
            ],
        );
        let reference = err.contains("the reference interpreter 6.0 GiB");
        assert_eq!(reference, check.is_some(), "{err}");
    }
}

#[test]
fn a_huge_intermediate_of_a_small_input_is_refused_before_or_when_it_is_allocated() {
    // A [1, 1] input broadcast and added into 1.6 billion elements: 11.9 GiB
    // of float64, made by the interpreter (or the scheduled program).
    let g = graph(
        "huge_intermediate",
        "\"y\"",
        "[[inputs]]\nname = \"x\"\nshape = [1, 1]\ndtype = \"float32\"\n\n\
         [[nodes]]\nname = \"big\"\nop = \"expand\"\nargs = [\"x\", [40000, 40000]]\n\n\
         [[nodes]]\nname = \"y\"\nop = \"add\"\nargs = [\"big\", 1.0]\n",
    );
    let file = g.to_str().unwrap();
    // The estimate counts it and refuses before anything is allocated.
    let (code, err) = host_under_ulimit(&["eval", file]);
    assert_refused(
        code,
        &err,
        &[
            "the reference interpreter 11.9 GiB",
            "left under the address-space limit (ulimit -v)",
        ],
    );
    // A budget that lets it through meets the real limit at the kernel's
    // allocation, in the interpreter and in the scheduled program alike:
    // the same refusal, not an abort.
    for (args, what) in [
        (
            vec!["eval", file],
            "node `y` (an intermediate of 1600000000 elements)",
        ),
        (
            vec!["eval", file, "--device", "cpu"],
            "evaluating the scheduled program: ",
        ),
    ] {
        let args: Vec<&str> = args.into_iter().chain(["--max-memory", "1T"]).collect();
        let (code, err) = host_under_ulimit(&args);
        assert_refused(
            code,
            &err,
            &[
                what,
                "more, which this process could not allocate (it has ",
                "left under the address-space limit (ulimit -v))",
            ],
        );
    }
}

#[test]
fn a_huge_fill_constant_is_counted() {
    let g = graph(
        "huge_fill",
        "\"f\"",
        "[[nodes]]\nname = \"f\"\nop = \"full\"\nargs = [[65536, 65536], 2]\n",
    );
    let (code, err) = host_under_ulimit(&["eval", g.to_str().unwrap()]);
    assert_refused(
        code,
        &err,
        &["needs 32.0 GiB", "left under the address-space limit"],
    );
}

#[test]
fn a_cgroup_memory_limit_is_honoured() {
    let g = graph(
        "cgroup_relu",
        "\"y\"",
        "[[inputs]]\nname = \"x\"\nshape = [16384, 16384]\ndtype = \"float32\"\n\n\
         [[nodes]]\nname = \"y\"\nop = \"relu\"\nargs = [\"x\"]\n",
    );
    let root = fake_cgroup(g.parent().unwrap());
    let o = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["eval", g.to_str().unwrap()])
        .env("KILN_CGROUP_ROOT", &root)
        .env_remove("KILN_MAX_MEMORY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_refused(
        o.status.code().unwrap_or(-1),
        &err,
        &[
            "more than the 1.0 GiB left under this process's cgroup memory limit",
            "give the container more memory",
        ],
    );
}

/// A fake cgroup file system under `dir`, with a 1 GiB limit at its root, which is an ancestor of whatever cgroup this
/// process is in, v2 and v1 alike.
fn fake_cgroup(dir: &Path) -> PathBuf {
    let root = dir.join("cgroup");
    std::fs::create_dir_all(root.join("memory")).unwrap();
    for (file, text) in [
        ("memory.max", "1073741824\n"),
        ("memory.current", "0\n"),
        ("memory/memory.limit_in_bytes", "1073741824\n"),
        ("memory/memory.usage_in_bytes", "0\n"),
    ] {
        std::fs::write(root.join(file), text).unwrap();
    }
    root
}

/// zip's CRC-32 of `bytes`.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & 0u32.wrapping_sub(crc & 1));
        }
    }
    !crc
}

/// A linear map of the CRC register, as the images of its 32 bits.
type CrcMap = [u32; 32];

fn apply(map: &CrcMap, v: u32) -> u32 {
    (0..32)
        .filter(|i| v >> i & 1 == 1)
        .fold(0, |acc, i| acc ^ map[i])
}

/// zip's CRC-32 of `n` zero bytes without reading them: one zero byte is a
/// linear map of the register, raised to the `n`th power by squaring.
fn crc32_of_zeros(mut n: u64) -> u32 {
    let mut byte: CrcMap = std::array::from_fn(|i| {
        let mut crc = 1u32 << i;
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & 0u32.wrapping_sub(crc & 1));
        }
        crc
    });
    let mut power: CrcMap = std::array::from_fn(|i| 1u32 << i);
    while n > 0 {
        if n & 1 == 1 {
            power = power.map(|column| apply(&byte, column));
        }
        byte = byte.map(|column| apply(&byte, column));
        n >>= 1;
    }
    !apply(&power, !0)
}

/// Bits written least significant first, as deflate packs them.
#[derive(Default)]
struct Bits {
    bytes: Vec<u8>,
    acc: u64,
    used: u32,
}

impl Bits {
    fn put(&mut self, value: u64, count: u32) {
        self.acc |= value << self.used;
        self.used += count;
        while self.used >= 8 {
            self.bytes.push(self.acc as u8);
            self.acc >>= 8;
            self.used -= 8;
        }
    }

    /// A Huffman code, which deflate writes most significant bit first.
    fn code(&mut self, code: u64, count: u32) {
        self.put(code.reverse_bits() >> (64 - count), count);
    }

    fn finish(mut self) -> Vec<u8> {
        if self.used > 0 {
            self.bytes.push(self.acc as u8);
        }
        self.bytes
    }
}

/// A raw deflate stream of `n` zero bytes (n ≥ 1) in one block of the fixed
/// Huffman code: a few literal zeros, then copies of 258 bytes at distance
/// 1, each 13 bits, so gigabytes of zeros take a few megabytes.
fn deflated_zeros(n: u64) -> Vec<u8> {
    let literals = match n % 258 {
        0 => 258,
        r => r,
    };
    let mut bits = Bits::default();
    bits.put(0b011, 3); // the last block, fixed Huffman codes
    for _ in 0..literals {
        bits.code(0b0011_0000, 8); // literal 0
    }
    for _ in 0..(n - literals) / 258 {
        bits.code(0b1100_0101, 8); // length 258 (code 285)
        bits.code(0, 5); // distance 1 (code 0)
    }
    bits.code(0, 7); // end of block (code 256)
    bits.finish()
}

/// A zip member: name, stored bytes, CRC-32, size once inflated, and the
/// method (0 stored, 8 deflated).
struct Member {
    name: String,
    data: Vec<u8>,
    crc: u32,
    size: u32,
    method: u16,
}

impl Member {
    fn stored(name: &str, data: Vec<u8>) -> Member {
        Member {
            name: name.into(),
            crc: crc32(&data),
            size: u32::try_from(data.len()).unwrap(),
            data,
            method: 0,
        }
    }
}

/// A zip archive of `members`, written from byte 0 as `torch.export.save`
/// writes one.
fn zip(members: &[Member]) -> Vec<u8> {
    let (mut out, mut directory) = (Vec::new(), Vec::new());
    let u16le = |v: &mut Vec<u8>, x: u16| v.extend_from_slice(&x.to_le_bytes());
    let u32le = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_le_bytes());
    for m in members {
        let offset = u32::try_from(out.len()).unwrap();
        let name_len = u16::try_from(m.name.len()).unwrap();
        let compressed = u32::try_from(m.data.len()).unwrap();
        // The fields a local header and a directory entry share, from the
        // version needed to the extra field's length.
        let mut common = Vec::new();
        for x in [20, 0, m.method, 0, 0x21] {
            u16le(&mut common, x);
        }
        for x in [m.crc, compressed, m.size] {
            u32le(&mut common, x);
        }
        u16le(&mut common, name_len);
        u16le(&mut common, 0);
        u32le(&mut out, 0x0403_4b50);
        out.extend_from_slice(&common);
        out.extend_from_slice(m.name.as_bytes());
        out.extend_from_slice(&m.data);
        u32le(&mut directory, 0x0201_4b50);
        u16le(&mut directory, 20);
        directory.extend_from_slice(&common);
        for x in [0, 0, 0] {
            u16le(&mut directory, x); // comment length, disk, internal attributes
        }
        u32le(&mut directory, 0); // external attributes
        u32le(&mut directory, offset);
        directory.extend_from_slice(m.name.as_bytes());
    }
    let (at, count) = (
        u32::try_from(out.len()).unwrap(),
        u16::try_from(members.len()).unwrap(),
    );
    let size = u32::try_from(directory.len()).unwrap();
    out.extend_from_slice(&directory);
    u32le(&mut out, 0x0605_4b50);
    for x in [0, 0, count, count] {
        u16le(&mut out, x);
    }
    u32le(&mut out, size);
    u32le(&mut out, at);
    u16le(&mut out, 0);
    out
}

/// A `.pt2` archive whose one parameter `w`, float32 of `numel` elements, is
/// stored in full (zeros, deflated): `relu(w)` is its output.
fn archive_with_weight(numel: u64) -> Vec<u8> {
    let meta = serde_json::json!({
        "dtype": 7,
        "sizes": [{"as_int": numel}],
        "strides": [{"as_int": 1}],
        "storage_offset": {"as_int": 0},
        "requires_grad": false,
        "device": {"type": "cpu"},
        "layout": 7
    });
    let tensor = |name: &str| serde_json::json!({"as_tensor": {"name": name}});
    let model = serde_json::json!({
        "graph_module": {
            "graph": {
                "inputs": [tensor("p_w")],
                "outputs": [tensor("relu")],
                "nodes": [{
                    "target": "torch.ops.aten.relu.default",
                    "inputs": [{"name": "self", "arg": tensor("p_w"), "kind": 1}],
                    "outputs": [tensor("relu")],
                    "name": "relu"
                }],
                "tensor_values": {"p_w": meta, "relu": meta},
                "sym_int_values": {},
                "sym_bool_values": {},
                "is_single_tensor_return": true
            },
            "signature": {
                "input_specs": [{"parameter": {"arg": {"name": "p_w"}, "parameter_name": "w"}}],
                "output_specs": [{"user_output": {"arg": tensor("relu")}}]
            },
            "module_call_graph": []
        },
        "opset_version": {"aten": 0},
        "range_constraints": {},
        "schema_version": {"major": 8, "minor": 17},
        "verifiers": [],
        "torch_version": "2.11"
    });
    let config = serde_json::json!({"config": {"w": {
        "path_name": "weight_0", "is_param": true, "use_pickle": false, "tensor_meta": meta
    }}});
    let bytes = numel * 4;
    zip(&[
        Member::stored("archive/byteorder", b"little".to_vec()),
        Member::stored(
            "archive/models/model.json",
            serde_json::to_vec(&model).unwrap(),
        ),
        Member::stored(
            "archive/data/weights/model_weights_config.json",
            serde_json::to_vec(&config).unwrap(),
        ),
        Member {
            name: "archive/data/weights/weight_0".into(),
            data: deflated_zeros(bytes),
            crc: crc32_of_zeros(bytes),
            size: u32::try_from(bytes).unwrap(),
            method: 8,
        },
    ])
}

#[test]
fn the_handmade_archive_is_a_valid_pt2_that_evaluates() {
    assert_eq!(crc32_of_zeros(0), 0);
    assert_eq!(crc32_of_zeros(1000), crc32(&[0; 1000]));
    let dir = scratch("small_weight");
    let path = dir.join("small_weight.pt2");
    // 300 bytes: literals and one copy; the zip crate checks the CRC.
    std::fs::write(&path, archive_with_weight(75)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["eval", path.to_str().unwrap()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("[75]"), "{out}");
}

#[test]
fn a_huge_archive_weight_is_refused_before_it_is_read() {
    // 4.2 GB of float32 zeros, which deflate to 26 MB: more than is left
    // under a 4 GB address-space limit, and than a 1 GiB cgroup allows.
    let numel = 1_050_000_000;
    let dir = scratch("huge_weight");
    let path = dir.join("huge_weight.pt2");
    std::fs::write(&path, archive_with_weight(numel)).unwrap();
    let file = path.to_str().unwrap();
    let wants = [
        "weight `w` (member `archive/data/weights/weight_0`) needs ",
        "this weight 3.9 GiB",
    ];
    for args in [vec!["eval", file], vec!["graph", file]] {
        let (code, err) = host_under_ulimit(&args);
        assert_refused(code, &err, &wants);
        assert_refused(
            code,
            &err,
            &[
                "left under the address-space limit (ulimit -v)",
                "raise `ulimit -v`",
            ],
        );
    }
    // A budget set above the address-space limit lets the weight through to
    // its allocation, which is refused in turn.
    let (code, err) = host_under_ulimit(&["eval", file, "--max-memory", "1T"]);
    assert_refused(
        code,
        &err,
        &[
            "reading member `archive/data/weights/weight_0` needs 3.9 GiB more, \
             which this process could not allocate",
            "left under the address-space limit (ulimit -v))",
        ],
    );
    let out = dir.join("out");
    let root = fake_cgroup(&dir);
    for args in [
        vec!["eval", file],
        vec![
            "compile",
            file,
            "--device",
            "cpu",
            "-o",
            out.to_str().unwrap(),
        ],
    ] {
        let o = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v {ULIMIT_V_KIB} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_host"))
            .args(&args)
            .env("KILN_CGROUP_ROOT", &root)
            .env_remove("KILN_MAX_MEMORY")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_refused(o.status.code().unwrap_or(-1), &err, &wants);
        assert_refused(
            o.status.code().unwrap_or(-1),
            &err,
            &["more than the 1.0 GiB left under this process's cgroup memory limit"],
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
