//! End-to-end tests of `kiln run`, `kiln inspect` and `kiln bench` on ONNX files built here:
//! outputs checked against plain f64 loops, `.npy` inputs written byte by byte (independent of
//! kiln's writer) and outputs read back with `npyz` (independent of kiln's reader).

mod common;

use common::{kiln, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::Output;

use kiln_ir::{DType, Dim};
use kiln_onnx::builder::{self, tensor_info};
use kiln_onnx::proto::{GraphProto, NodeProto, TensorProto};
use prost::Message;

/// A fresh scratch folder unique to this test process and test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-onnx-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn assert_ok(o: &Output) -> String {
    let out = stdout(o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {}", stderr(o));
    out
}

/// Bad input must end in one `error:` line and exit 1, never a panic.
fn assert_clean_failure(o: &Output) -> String {
    common::assert_clean_failure(o, 1)
}

// ---- building ONNX models ----

/// A node with a name, as exporters give them (inspect and errors report it).
fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        name: Some(name.into()),
        ..builder::node(op, inputs, outputs, vec![])
    }
}

/// An f32 initializer in the typed `float_data` field (the builder writes `raw_data`).
fn f32_init(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        float_data: data.to_vec(),
        ..Default::default()
    }
}

/// Writes the model of `graph` at opset 17, with the producer that `inspect` reports, to
/// `dir/file`.
fn write_model(dir: &Path, file: &str, graph: GraphProto) -> PathBuf {
    let mut m = builder::model(graph, 17).proto;
    m.producer_name = Some("kiln-test".into());
    m.producer_version = Some("0.1".into());
    let p = dir.join(file);
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

const W: [f32; 6] = [0.5, -1.0, 2.0, 0.25, -0.75, 1.5]; // [3, 2], row-major
const B: [f32; 2] = [0.1, -0.2];

/// `Y = Relu(X @ W + B)` with `X: f32[batch, 3]`, `Y: f32[batch, 2]`.
fn mlp_model(dir: &Path) -> PathBuf {
    let g = GraphProto {
        name: Some("mlp".into()),
        node: vec![
            node("MatMul", "mm", &["X", "W"], &["XW"]),
            node("Add", "bias", &["XW", "B"], &["S"]),
            node("Relu", "act", &["S"], &["Y"]),
        ],
        initializer: vec![f32_init("W", &[3, 2], &W), f32_init("B", &[2], &B)],
        input: vec![tensor_info(
            "X",
            DType::F32,
            &[Dim::sym("batch"), Dim::Fixed(3)],
        )],
        output: vec![tensor_info(
            "Y",
            DType::F32,
            &[Dim::sym("batch"), Dim::Fixed(2)],
        )],
        ..Default::default()
    };
    write_model(dir, "mlp.onnx", g)
}

/// The reference: the same MLP as plain f64 loops.
fn mlp_reference(x: &[f32], rows: usize) -> Vec<f64> {
    let mut y = vec![0.0f64; rows * 2];
    for r in 0..rows {
        for c in 0..2 {
            let mut acc = B[c] as f64;
            for k in 0..3 {
                acc += x[r * 3 + k] as f64 * W[k * 2 + c] as f64;
            }
            y[r * 2 + c] = acc.max(0.0);
        }
    }
    y
}

// ---- .npy files written byte by byte ----

fn npy_bytes(descr: &str, fortran: bool, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let order = if fortran { "True" } else { "False" };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn read_npy_f64(path: &Path) -> (Vec<u64>, Vec<f64>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape = npy.shape().to_vec();
    assert_eq!(npy.order(), npyz::Order::C);
    let v = match npy.dtype().descr().as_str() {
        "'<f4'" => npy
            .into_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        "'<i8'" => npy
            .into_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|x| x as f64)
            .collect(),
        "'|b1'" => npy
            .into_vec::<bool>()
            .unwrap()
            .into_iter()
            .map(|x| x as u8 as f64)
            .collect(),
        "'<f2'" => npy
            .into_vec::<half::f16>()
            .unwrap()
            .into_iter()
            .map(|x| x.to_f64())
            .collect(),
        d => panic!("unexpected dtype {d}"),
    };
    (shape, v)
}

fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{got:?} vs {want:?}"
        );
    }
}

const X: [f32; 6] = [1.0, 2.0, 3.0, -4.0, 0.5, 1.0]; // [2, 3], row-major

// ---- run ----

#[test]
fn run_with_an_npy_input_writes_the_hand_computed_output() {
    let dir = scratch("run-npy");
    let m = mlp_model(&dir);
    let x = dir.join("x.npy");
    std::fs::write(&x, npy_bytes("<f4", false, &[2, 3], &f32_bytes(&X))).unwrap();
    let out_dir = dir.join("out");
    let input = format!("X={}", s(&x));
    let o = kiln(&["run", s(&m), "--input", &input, "--out", s(&out_dir)]);
    let out = assert_ok(&o);
    assert!(out.contains("dims: batch=2 (input 'X')"), "{out}");
    assert!(
        out.contains("input  X: shape [2, 3] dtype f32 (from "),
        "{out}"
    );
    let want = mlp_reference(&X, 2);
    let line = out
        .lines()
        .find(|l| l.starts_with("output Y:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("shape [2, 2] dtype f32"), "{line}");
    let sum: f64 = line
        .split_whitespace()
        .skip_while(|w| *w != "sum")
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (sum - want.iter().sum::<f64>()).abs() < 1e-4,
        "{line} vs {want:?}"
    );
    let (shape, got) = read_npy_f64(&out_dir.join("Y.npy"));
    assert_eq!(shape, [2, 2]);
    assert_close(&got, &want);
    // Relu must have clipped something, or the test would not see it.
    assert!(
        want.contains(&0.0) && want.iter().any(|&v| v > 0.0),
        "{want:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fortran_order_npy_gives_the_same_answer() {
    let dir = scratch("run-fortran");
    let m = mlp_model(&dir);
    // Column-major bytes of the same [2, 3] array.
    let col_major: Vec<f32> = (0..3)
        .flat_map(|c| (0..2).map(move |r| X[r * 3 + c]))
        .collect();
    let x = dir.join("xf.npy");
    std::fs::write(&x, npy_bytes("<f4", true, &[2, 3], &f32_bytes(&col_major))).unwrap();
    let out_dir = dir.join("out");
    let input = format!("X={}", s(&x));
    assert_ok(&kiln(&[
        "run",
        s(&m),
        "--input",
        &input,
        "--out",
        s(&out_dir),
    ]));
    let (shape, got) = read_npy_f64(&out_dir.join("Y.npy"));
    assert_eq!(shape, [2, 2]);
    assert_close(&got, &mlp_reference(&X, 2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn random_inputs_follow_dim_and_batch_and_are_seeded() {
    let dir = scratch("run-random");
    let m = mlp_model(&dir);
    let out = assert_ok(&kiln(&["run", s(&m)]));
    assert!(out.contains("dims: batch=1 (--batch)"), "{out}");
    assert!(
        out.contains("input  X: shape [1, 3] dtype f32 (random, seed 0)"),
        "{out}"
    );
    assert!(out.contains("output Y: shape [1, 2] dtype f32"), "{out}");

    let out_dir = dir.join("out");
    let out = assert_ok(&kiln(&[
        "run",
        s(&m),
        "--dim",
        "batch=5",
        "--out",
        s(&out_dir),
    ]));
    assert!(out.contains("dims: batch=5 (--dim)"), "{out}");
    let (shape, y) = read_npy_f64(&out_dir.join("Y.npy"));
    assert_eq!(shape, [5, 2]);
    assert!(y.iter().all(|v| v.is_finite() && *v >= 0.0), "{y:?}");

    let out = assert_ok(&kiln(&["run", s(&m), "--batch", "4"]));
    assert!(out.contains("dims: batch=4 (--batch)"), "{out}");

    let checksum = |seed: &str| {
        let out = assert_ok(&kiln(&["run", s(&m), "--batch", "8", "--seed", seed]));
        out.lines()
            .find(|l| l.starts_with("output Y:"))
            .unwrap()
            .to_string()
    };
    assert_eq!(checksum("3"), checksum("3"));
    assert_ne!(checksum("3"), checksum("4"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `twice:0 = ids + ids` (i64) and `inv = Not(mask)` (bool), both `[batch, seq]`.
fn int_bool_model(dir: &Path) -> PathBuf {
    let g = GraphProto {
        name: Some("intbool".into()),
        node: vec![
            node("Add", "dbl", &["ids", "ids"], &["twice:0"]),
            node("Not", "not", &["mask"], &["inv"]),
        ],
        input: vec![
            tensor_info("ids", DType::I64, &[Dim::sym("batch"), Dim::sym("seq")]),
            tensor_info("mask", DType::Bool, &[Dim::sym("batch"), Dim::sym("seq")]),
        ],
        output: vec![
            tensor_info("twice:0", DType::I64, &[Dim::sym("batch"), Dim::sym("seq")]),
            tensor_info("inv", DType::Bool, &[Dim::sym("batch"), Dim::sym("seq")]),
        ],
        ..Default::default()
    };
    write_model(dir, "intbool.onnx", g)
}

#[test]
fn integer_and_bool_inputs_random_and_from_npy() {
    let dir = scratch("run-int-bool");
    let m = int_bool_model(&dir);
    let mask = [true, false, false, true, true, false, true, true];
    let mask_path = dir.join("mask.npy");
    let mask_bytes: Vec<u8> = mask.iter().map(|&b| b as u8).collect();
    std::fs::write(&mask_path, npy_bytes("|b1", false, &[2, 4], &mask_bytes)).unwrap();
    let out_dir = dir.join("out");
    let input = format!("mask={}", s(&mask_path));
    let out = assert_ok(&kiln(&[
        "run",
        s(&m),
        "--input",
        &input,
        "--out",
        s(&out_dir),
    ]));
    // The file binds both dims; the random ids take the same sizes.
    assert!(
        out.contains("dims: batch=2 (input 'mask'), seq=4 (input 'mask')"),
        "{out}"
    );
    assert!(
        out.contains("input  ids: shape [2, 4] dtype i64 (random, seed 0)"),
        "{out}"
    );
    // Output names are sanitised for the filesystem.
    let (shape, twice) = read_npy_f64(&out_dir.join("twice_0.npy"));
    assert_eq!(shape, [2, 4]);
    assert!(
        twice
            .iter()
            .all(|&v| (0.0..=18.0).contains(&v) && v % 2.0 == 0.0),
        "{twice:?}"
    );
    let (shape, inv) = read_npy_f64(&out_dir.join("inv.npy"));
    assert_eq!(shape, [2, 4]);
    let want: Vec<f64> = mask.iter().map(|&b| if b { 0.0 } else { 1.0 }).collect();
    assert_eq!(inv, want);

    // Without files, batch takes --batch and the other dim --seq.
    let out = assert_ok(&kiln(&["run", s(&m), "--seq", "7"]));
    assert!(
        out.contains("dims: batch=1 (--batch), seq=7 (--seq)"),
        "{out}"
    );
    assert!(
        out.contains("input  mask: shape [1, 7] dtype bool"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn f16_npy_inputs_are_read() {
    let dir = scratch("run-f16");
    let g = GraphProto {
        node: vec![node("Relu", "act", &["h"], &["r"])],
        input: vec![tensor_info("h", DType::F16, &[Dim::Fixed(4)])],
        output: vec![tensor_info("r", DType::F16, &[Dim::Fixed(4)])],
        ..Default::default()
    };
    let m = write_model(&dir, "half.onnx", g);
    let vals = [1.5f32, -2.0, 0.0, 65504.0];
    let bytes: Vec<u8> = vals
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    let h = dir.join("h.npy");
    std::fs::write(&h, npy_bytes("<f2", false, &[4], &bytes)).unwrap();
    let out_dir = dir.join("out");
    let input = format!("h={}", s(&h));
    assert_ok(&kiln(&[
        "run",
        s(&m),
        "--input",
        &input,
        "--out",
        s(&out_dir),
    ]));
    let (shape, r) = read_npy_f64(&out_dir.join("r.npy"));
    assert_eq!(shape, [4]);
    assert_eq!(r, [1.5, 0.0, 0.0, 65504.0]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn wrong_dtype_or_shape_npy_is_an_error_naming_the_input() {
    let dir = scratch("run-wrong");
    let m = mlp_model(&dir);
    let f64_path = dir.join("x64.npy");
    let data: Vec<u8> = X.iter().flat_map(|&x| (x as f64).to_le_bytes()).collect();
    std::fs::write(&f64_path, npy_bytes("<f8", false, &[2, 3], &data)).unwrap();
    let input = format!("X={}", s(&f64_path));
    let err = assert_clean_failure(&kiln(&["run", s(&m), "--input", &input]));
    assert!(
        err.contains("input 'X'") && err.contains("f32[batch,3]") && err.contains("f64[2, 3]"),
        "{err}"
    );

    let wide = dir.join("wide.npy");
    std::fs::write(
        &wide,
        npy_bytes("<f4", false, &[2, 4], &f32_bytes(&[0.0; 8])),
    )
    .unwrap();
    let input = format!("X={}", s(&wide));
    let err = assert_clean_failure(&kiln(&["run", s(&m), "--input", &input]));
    assert!(
        err.contains("input 'X'")
            && err.contains("f32[batch,3]")
            && err.contains("axis 1 is 4, not 3"),
        "{err}"
    );

    let flat = dir.join("flat.npy");
    std::fs::write(&flat, npy_bytes("<f4", false, &[6], &f32_bytes(&X))).unwrap();
    let input = format!("X={}", s(&flat));
    let err = assert_clean_failure(&kiln(&["run", s(&m), "--input", &input]));
    assert!(
        err.contains("input 'X'") && err.contains("rank 1 is not 2"),
        "{err}"
    );

    // A --dim that contradicts the file.
    let x = dir.join("x.npy");
    std::fs::write(&x, npy_bytes("<f4", false, &[2, 3], &f32_bytes(&X))).unwrap();
    let input = format!("X={}", s(&x));
    let err = assert_clean_failure(&kiln(&[
        "run",
        s(&m),
        "--input",
        &input,
        "--dim",
        "batch=3",
    ]));
    assert!(
        err.contains("input 'X'") && err.contains("batch is 3 (from --dim)"),
        "{err}"
    );

    // Unknown input and dim names list what the model has.
    let err = assert_clean_failure(&kiln(&["run", s(&m), "--input", "Z=x.npy"]));
    assert!(err.contains("no input 'Z'") && err.contains("X"), "{err}");
    let err = assert_clean_failure(&kiln(&["run", s(&m), "--dim", "seq=3"]));
    assert!(
        err.contains("no symbolic dim 'seq'") && err.contains("batch"),
        "{err}"
    );

    // Truncated data and a garbage file.
    let short = dir.join("short.npy");
    std::fs::write(
        &short,
        npy_bytes("<f4", false, &[2, 3], &f32_bytes(&X[..4])),
    )
    .unwrap();
    let input = format!("X={}", s(&short));
    let err = assert_clean_failure(&kiln(&["run", s(&m), "--input", &input]));
    assert!(
        err.contains("input 'X'") && err.contains("short.npy"),
        "{err}"
    );
    let junk = dir.join("junk.npy");
    std::fs::write(&junk, b"definitely not numpy").unwrap();
    let input = format!("X={}", s(&junk));
    let err = assert_clean_failure(&kiln(&["run", s(&m), "--input", &input]));
    assert!(
        err.contains("input 'X'") && err.contains("junk.npy"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_and_corrupt_model_files_are_clean_errors() {
    let dir = scratch("bad-files");
    let missing = dir.join("nope.onnx");
    for cmd in ["run", "bench", "inspect"] {
        let err = assert_clean_failure(&kiln(&[cmd, s(&missing)]));
        assert!(
            err.contains("nope.onnx") && err.contains("does not exist"),
            "{cmd}: {err}"
        );
    }
    let corrupt = dir.join("corrupt.onnx");
    std::fs::write(&corrupt, b"\xff\xff\xff\xff\x0f this is not protobuf").unwrap();
    for cmd in ["run", "bench", "inspect"] {
        let err = assert_clean_failure(&kiln(&[cmd, s(&corrupt)]));
        assert!(
            err.contains("corrupt.onnx") && err.contains("not a valid ONNX model"),
            "{cmd}: {err}"
        );
    }
    // Zoo-only flags are refused for ONNX files, ONNX-only flags for zoo models.
    let m = mlp_model(&dir);
    let err = assert_clean_failure(&kiln(&["run", s(&m), "--dtype", "bf16"]));
    assert!(
        err.contains("--dtype bf16 applies to zoo models only"),
        "{err}"
    );
    let err = assert_clean_failure(&kiln(&["run", "resnet18", "--dim", "batch=2"]));
    assert!(err.contains(".onnx models only"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn unsupported_model(dir: &Path) -> PathBuf {
    let g = GraphProto {
        node: vec![
            node("Relu", "act", &["X"], &["R"]),
            node("FrobnicateOp", "frob_node", &["R"], &["Y"]),
        ],
        input: vec![tensor_info("X", DType::F32, &[Dim::Fixed(2)])],
        output: vec![tensor_info("Y", DType::F32, &[Dim::Fixed(2)])],
        ..Default::default()
    };
    write_model(dir, "unsupported.onnx", g)
}

#[test]
fn unsupported_op_is_an_error_naming_op_opset_and_node() {
    let dir = scratch("unsupported");
    let m = unsupported_model(&dir);
    for args in [&["run", s(&m)][..], &["bench", s(&m), "--iters", "1"]] {
        let err = assert_clean_failure(&kiln(args));
        assert!(
            err.contains("FrobnicateOp") && err.contains("opset 17") && err.contains("frob_node"),
            "{args:?}: {err}"
        );
    }
    let out = assert_ok(&kiln(&["inspect", s(&m)]));
    assert!(
        out.contains("unsupported:  FrobnicateOp (opset 17)"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- inspect ----

#[test]
fn inspect_reports_the_model_as_text_and_json() {
    let dir = scratch("inspect");
    let m = mlp_model(&dir);
    let out = assert_ok(&kiln(&["inspect", s(&m)]));
    for want in [
        "producer:     kiln-test 0.1",
        "ir version:   8",
        "opsets:       ai.onnx 17",
        "  X: f32[batch,3]",
        "  Y: f32[batch,2]",
        "nodes:        3",
        "initializers: 2",
        "parameters:   8 (32 bytes",
        "all ops supported",
    ] {
        assert!(out.contains(want), "no '{want}' in:\n{out}");
    }
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("MatMul") && l.trim_end().ends_with(" 1")),
        "{out}"
    );

    let o = kiln(&["inspect", s(&m), "--json"]);
    let out = assert_ok(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is JSON");
    assert_eq!(v["producer"], "kiln-test");
    assert_eq!(v["producer_version"], "0.1");
    assert_eq!(v["ir_version"], 8);
    assert_eq!(v["opsets"][""], 17);
    assert_eq!(v["inputs"][0]["name"], "X");
    assert_eq!(v["inputs"][0]["describe"], "f32[batch,3]");
    assert_eq!(v["inputs"][0]["dtype"], "f32");
    assert_eq!(v["inputs"][0]["dims"], serde_json::json!(["batch", 3]));
    assert_eq!(v["outputs"][0]["describe"], "f32[batch,2]");
    assert_eq!(v["nodes"], 3);
    assert_eq!(
        v["op_histogram"],
        serde_json::json!({"Add": 1, "MatMul": 1, "Relu": 1})
    );
    assert_eq!(v["initializers"], 2);
    assert_eq!(v["params"], 8);
    assert_eq!(v["param_bytes"], 32);
    assert_eq!(v["unsupported_ops"], serde_json::json!([]));
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- bench ----

#[test]
fn bench_json_for_an_onnx_model() {
    let dir = scratch("bench");
    let m = mlp_model(&dir);
    let o = kiln(&[
        "bench",
        s(&m),
        "--iters",
        "3",
        "--warmup",
        "1",
        "--batch",
        "4",
        "--threads",
        "1",
        "--json",
    ]);
    let out = assert_ok(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).expect("stdout is JSON");
    assert_eq!(v["model"], "mlp");
    assert_eq!(v["batch"], 4);
    assert!(v.get("seq").is_none(), "{v}");
    assert_eq!(v["device"], "cpu");
    assert_eq!(v["mode"], "eager");
    assert_eq!(v["dtype"], "f32");
    assert_eq!(v["threads"], 1);
    assert_eq!(v["iters"], 3);
    assert_eq!(v["warmup"], 1);
    assert_eq!(v["params"], 8);
    let num = |k: &str| {
        v[k].as_f64()
            .unwrap_or_else(|| panic!("{k} missing in {v}"))
    };
    // One kernel per op node: at least MatMul, Add and Relu.
    assert!((3.0..=6.0).contains(&num("kernels")), "{v}");
    assert!(
        num("median_ms") > 0.0 && num("first_call_s") > 0.0 && num("build_s") > 0.0,
        "{v}"
    );
    assert!(
        num("p10_ms") <= num("median_ms") && num("median_ms") <= num("p90_ms"),
        "{v}"
    );
    assert!(num("peak_mb") >= 0.0, "{v}");

    // A model with a non-batch symbolic dim reports the --seq it used.
    let ib = int_bool_model(&dir);
    let out = assert_ok(&kiln(&[
        "bench",
        s(&ib),
        "--iters",
        "1",
        "--seq",
        "9",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["model"].as_str(), v["batch"].as_u64(), v["seq"].as_u64()),
        (Some("intbool"), Some(1), Some(9))
    );
    assert_eq!(v["dtype"], "i64");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bench_and_explain_of_an_onnx_model_compile_it() {
    let dir = scratch("bench-modes");
    let m = mlp_model(&dir);
    let o = kiln(&["bench", s(&m), "--mode", "default", "--json", "--iters", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mode"], "default");
    assert!(v["compile_s"].as_f64().is_some(), "{v}");
    let o = kiln(&["explain", s(&m), "--code"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in ["== passes ==", "== fusion groups ==", "kernels per run:", "planned peak memory:", "compile time:", "== generated C ==", "max relative difference"] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // For CUDA (no GPU needed): the matmul goes to cuBLASLt, which also adds the bias and
    // applies the ReLU.
    let o = kiln(&["explain", s(&m), "--device", "cuda", "--code"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in ["== CUDA steps ==", "cuBLASLt matmul+bias+relu (fused)", "== generated CUDA C =="] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
