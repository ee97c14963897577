//! Malformed and hostile ONNX files: each must give an `Err` whose message names the problem,
//! never a panic, and never an allocation sized by a length field the file does not back.

use kiln_ir::{DType, HostTensor};
use kiln_onnx::builder::{self, graph, node_in, raw_tensor, tensor_info_fixed, untyped_info};
use kiln_onnx::proto::tensor_proto::DataLocation;
use kiln_onnx::proto::{
    FunctionProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
};
use kiln_onnx::tensor::tensor_to_proto;
use kiln_onnx::{ImportOptions, OnnxModel, import};
use prost::Message;
use std::path::PathBuf;

/// ONNX `TensorProto.DataType` FLOAT, for hand-made tensor protos.
const F32: i32 = 1;

/// A node named after its op and first output, so that messages can be checked for the name.
fn node(op: &str, domain: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    let name = format!("{op}_{}", outputs.first().copied().unwrap_or(""));
    NodeProto {
        name: Some(name),
        ..node_in(domain, op, inputs, outputs, vec![])
    }
}

/// A model of `nodes` with input `x: f32[2,3]`, the given initializers, and output `y`.
fn proto(nodes: Vec<NodeProto>, inits: Vec<TensorProto>) -> ModelProto {
    let mut g = graph(
        nodes,
        vec![tensor_info_fixed("x", DType::F32, &[2, 3])],
        vec![untyped_info("y")],
        &[],
    );
    g.initializer = inits;
    builder::model(g, 17).proto
}

/// `y = Relu(x)`: the well-formed model the malformed ones are made from.
fn good_bytes() -> Vec<u8> {
    proto(vec![node("Relu", "", &["x"], &["y"])], vec![]).encode_to_vec()
}

/// The error message of importing `m` (decoding must succeed).
fn import_err(m: ModelProto) -> String {
    import_err_in(OnnxModel {
        proto: m,
        dir: None,
    })
}

fn import_err_in(m: OnnxModel) -> String {
    match import(&m, &ImportOptions::default()) {
        Ok(_) => panic!("import of a malformed model succeeded"),
        Err(e) => e.to_string(),
    }
}

fn decode_err(bytes: &[u8]) -> String {
    match OnnxModel::from_bytes(bytes) {
        Ok(_) => panic!("decoding {} malformed bytes succeeded", bytes.len()),
        Err(e) => e.to_string(),
    }
}

fn assert_has(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "message {msg:?} does not mention {p:?}");
    }
}

/// `y = Add(x, w)` with initializer `w`.
fn add_with(w: TensorProto) -> ModelProto {
    proto(vec![node("Add", "", &["x", "w"], &["y"])], vec![w])
}

#[test]
fn the_good_model_imports_and_runs() {
    // The control: every malformed model below differs from this one in one way.
    let m = OnnxModel::from_bytes(&good_bytes()).unwrap();
    let imp = import(&m, &ImportOptions::default()).unwrap();
    let x = HostTensor::from_vec(vec![-1.0f32, 2.0, -3.0, 4.0, 0.0, -0.5], &[2, 3]).unwrap();
    let y = kiln_cpu::run(&imp.graph, &[x]).unwrap();
    assert_eq!(y[0].to_f64_vec(), vec![0.0, 2.0, 0.0, 4.0, 0.0, 0.0]);
}

#[test]
fn truncated_file_is_a_decode_error() {
    let bytes = good_bytes();
    let msg = decode_err(&bytes[..bytes.len() / 2]);
    assert_has(&msg, &["not a valid ONNX model", "protobuf decode failed"]);
    // Every prefix: an error or (cut at a field boundary) a smaller model, never a panic.
    for cut in 0..bytes.len() {
        if let Ok(m) = OnnxModel::from_bytes(&bytes[..cut]) {
            let _ = import(&m, &ImportOptions::default());
        }
    }
    assert_has(&decode_err(&[]), &["no graph"]);
}

#[test]
fn random_bytes_are_refused() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for len in [1usize, 2, 7, 16, 100, 1000, 4096] {
        for _ in 0..50 {
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            match OnnxModel::from_bytes(&bytes) {
                Err(e) => assert_has(&e.to_string(), &["not a valid ONNX model"]),
                // Random bytes that happen to decode must still import or fail cleanly.
                Ok(m) => {
                    let _ = import(&m, &ImportOptions::default());
                }
            }
        }
    }
}

#[test]
fn wrong_magic_is_refused() {
    let png =
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00";
    assert_has(&decode_err(png), &["not a valid ONNX model"]);
    let json = br#"{"graph": {"node": []}}"#;
    assert_has(&decode_err(json), &["not a valid ONNX model"]);
    let pytorch_zip = b"PK\x03\x04\x14\x00\x00\x00\x08\x00archive/data.pkl";
    assert_has(&decode_err(pytorch_zip), &["not a valid ONNX model"]);
}

#[test]
fn lying_length_prefix_is_a_decode_error() {
    // Field 7 (graph), length-delimited, claiming ~2 GiB of body in a 6-byte file.
    let msg = decode_err(&[0x3a, 0xff, 0xff, 0xff, 0xff, 0x07]);
    assert_has(&msg, &["protobuf decode failed"]);
}

#[test]
fn op_in_an_unknown_domain_names_the_domain() {
    let m = proto(
        vec![node("Frobnicate", "com.example", &["x"], &["y"])],
        vec![],
    );
    let msg = import_err(m.clone());
    assert_has(
        &msg,
        &["Frobnicate", "domain 'com.example' is not imported"],
    );

    // Imported domain, op without a converter: named, and listed by unsupported_ops.
    let mut m = m;
    m.opset_import.push(OperatorSetIdProto {
        domain: Some("com.example".into()),
        version: Some(1),
    });
    let model = OnnxModel {
        proto: m,
        dir: None,
    };
    assert_eq!(
        model.unsupported_ops(),
        vec!["com.example::Frobnicate (opset 1)".to_string()]
    );
    assert_has(
        &import_err_in(model),
        &["com.example::Frobnicate is not supported"],
    );
}

#[test]
fn missing_initializer_names_the_value() {
    let m = proto(vec![node("Add", "", &["x", "bias"], &["y"])], vec![]);
    assert_has(
        &import_err(m),
        &["Add", "value 'bias' is used before any node produces it"],
    );
}

#[test]
fn missing_graph_output_names_the_output() {
    let mut m = proto(vec![node("Relu", "", &["x"], &["z"])], vec![]);
    let msg = import_err(m.clone());
    assert_has(&msg, &["graph output 'y'", "value 'y'"]);
    m.graph.as_mut().unwrap().node.clear();
    assert_has(&import_err(m), &["graph output 'y'"]);
}

#[test]
fn cycles_are_reported_as_cycles() {
    // A node consuming its own output.
    let m = proto(vec![node("Add", "", &["x", "y"], &["y"])], vec![]);
    assert_has(
        &import_err(m),
        &["input 'y' is produced by node 'Add_y'", "cycle"],
    );
    // Two nodes feeding each other.
    let m = proto(
        vec![
            node("Add", "", &["x", "b"], &["a"]),
            node("Relu", "", &["a"], &["b"]),
            node("Relu", "", &["b"], &["y"]),
        ],
        vec![],
    );
    assert_has(
        &import_err(m),
        &["input 'b' is produced by node 'Relu_b' (Relu)", "cycle"],
    );
}

#[test]
fn dims_claiming_a_trillion_elements_with_tiny_data_are_refused() {
    // raw_data: 4 bytes for 10^12 f32 elements.
    let msg = import_err(add_with(raw_tensor(
        "w",
        F32,
        &[1_000_000, 1_000_000],
        vec![0; 4],
    )));
    assert_has(
        &msg,
        &["tensor 'w'", "raw_data holds 4 bytes", "1000000000000"],
    );

    // Typed field: one float for 10^12 elements (checked before anything is allocated).
    let typed = TensorProto {
        name: Some("w".into()),
        dims: vec![1_000_000, 1_000_000],
        data_type: Some(F32),
        float_data: vec![1.0],
        ..Default::default()
    };
    assert_has(
        &import_err(add_with(typed)),
        &["tensor 'w'", "holds 1 f32 values", "needs 1000000000000"],
    );

    // Dims whose product overflows, also when a zero dim makes the count 0.
    let msg = import_err(add_with(raw_tensor("w", F32, &[1 << 40, 1 << 40], vec![])));
    assert_has(&msg, &["tensor 'w'", "overflow the element count"]);
    let msg = import_err(add_with(raw_tensor(
        "w",
        F32,
        &[0, 1 << 40, 1 << 40],
        vec![],
    )));
    assert_has(&msg, &["tensor 'w'", "overflow the element count"]);
}

#[test]
fn negative_dim_is_refused() {
    let msg = import_err(add_with(raw_tensor("w", F32, &[-1, 3], vec![0; 12])));
    assert_has(&msg, &["tensor 'w'", "negative dimension -1"]);
}

#[test]
fn unsupported_element_type_is_named() {
    let mut w = raw_tensor("w", F32, &[3], vec![0; 3]);
    w.data_type = Some(8); // STRING
    assert_has(
        &import_err(add_with(w)),
        &["tensor 'w'", "STRING", "not supported"],
    );
}

/// A fresh folder under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("kiln-bad-input-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn external(location: &str, dims: &[i64], extra: &[(&str, &str)]) -> TensorProto {
    let mut kv = vec![("location", location)];
    kv.extend_from_slice(extra);
    TensorProto {
        name: Some("w".into()),
        dims: dims.to_vec(),
        data_type: Some(F32),
        data_location: Some(DataLocation::External as i32),
        external_data: kv
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: Some(k.to_string()),
                value: Some(v.to_string()),
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn external_data_stays_inside_the_model_folder() {
    let dir = TempDir::new("ext");
    // Control: a file inside the folder is read.
    let w: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(dir.0.join("w.bin"), &w).unwrap();
    let ok = OnnxModel {
        proto: add_with(external("w.bin", &[3], &[])),
        dir: Some(dir.0.clone()),
    };
    let imp = import(&ok, &ImportOptions::default()).unwrap();
    let x = HostTensor::from_vec(vec![0.5f32; 6], &[2, 3]).unwrap();
    let y = kiln_cpu::run(&imp.graph, &[x]).unwrap();
    assert_eq!(y[0].to_f64_vec(), vec![1.5, 2.5, 3.5, 1.5, 2.5, 3.5]);

    let at = |loc: &str, dims: &[i64], extra: &[(&str, &str)]| {
        import_err_in(OnnxModel {
            proto: add_with(external(loc, dims, extra)),
            dir: Some(dir.0.clone()),
        })
    };
    for loc in ["../../etc/passwd", "/etc/passwd", "sub/../../w.bin"] {
        assert_has(
            &at(loc, &[3], &[]),
            &[
                "tensor 'w'",
                loc,
                "must be a relative path inside the model's folder",
            ],
        );
    }
    // A length or offset that the file does not back.
    assert_has(
        &at("w.bin", &[1_000_000, 1_000_000], &[]),
        &["run past the end of the file (12 bytes)"],
    );
    assert_has(
        &at("w.bin", &[3], &[("offset", "8")]),
        &["12 bytes at offset 8 run past the end"],
    );
    assert_has(
        &at("w.bin", &[3], &[("length", "4000000000000")]),
        &["external data length 4000000000000"],
    );
    assert_has(
        &at("w.bin", &[3], &[("offset", "-1")]),
        &["offset=\"-1\" is not a number"],
    );
    assert_has(&at("missing.bin", &[3], &[]), &["missing.bin"]);
    // A model decoded from bytes has no folder: external data is refused, not looked up in the cwd.
    let m = OnnxModel {
        proto: add_with(external("w.bin", &[3], &[])),
        dir: None,
    };
    assert_has(&import_err_in(m), &["not loaded from a file"]);
}

#[test]
fn inputs_of_the_wrong_shape_or_dtype_are_refused_at_run_time() {
    let m = OnnxModel::from_bytes(&good_bytes()).unwrap();
    let imp = import(&m, &ImportOptions::default()).unwrap();
    let g = &imp.graph;
    let msg = kiln_cpu::run(g, &[HostTensor::zeros(DType::F32, &[3, 2])])
        .unwrap_err()
        .to_string();
    assert_has(&msg, &["input 'x'", "[2, 3]"]);
    let msg = kiln_cpu::run(g, &[HostTensor::zeros(DType::F32, &[2, 3, 1])])
        .unwrap_err()
        .to_string();
    assert_has(&msg, &["input 'x'"]);
    let msg = kiln_cpu::run(g, &[HostTensor::zeros(DType::I64, &[2, 3])])
        .unwrap_err()
        .to_string();
    assert_has(&msg, &["input 'x' must be f32, got i64"]);
    let msg = kiln_cpu::run(g, &[]).unwrap_err().to_string();
    assert_has(&msg, &["takes 1 inputs, 0 were given"]);
}

#[test]
fn initializer_roundtrip_still_works() {
    // Control for the typed-field reordering: a tensor with typed data decodes to its values.
    let typed = TensorProto {
        name: Some("w".into()),
        dims: vec![3],
        data_type: Some(F32),
        float_data: vec![1.0, -2.0, 3.0],
        ..Default::default()
    };
    let m = OnnxModel {
        proto: add_with(typed),
        dir: None,
    };
    let imp = import(&m, &ImportOptions::default()).unwrap();
    let y = kiln_cpu::run(&imp.graph, &[HostTensor::zeros(DType::F32, &[2, 3])]).unwrap();
    assert_eq!(y[0].to_f64_vec(), vec![1.0, -2.0, 3.0, 1.0, -2.0, 3.0]);
    let raw = tensor_to_proto(
        &HostTensor::from_vec(vec![4.0f32, 5.0, 6.0], &[3]).unwrap(),
        "w",
    );
    let m = OnnxModel {
        proto: add_with(raw),
        dir: None,
    };
    let imp = import(&m, &ImportOptions::default()).unwrap();
    let y = kiln_cpu::run(&imp.graph, &[HostTensor::zeros(DType::F32, &[2, 3])]).unwrap();
    assert_eq!(y[0].to_f64_vec(), vec![4.0, 5.0, 6.0, 4.0, 5.0, 6.0]);
}

/// Local functions `f0(x) = x + x` and `fk(x) = f(k-1)(f(k-1)(x))`, and a main graph `y = f{depth}(x)`.
fn doubling_functions(depth: usize) -> ModelProto {
    let mut m = proto(
        vec![node(&format!("f{depth}"), "local", &["x"], &["y"])],
        vec![],
    );
    let body = |k: usize| {
        if k == 0 {
            return vec![node("Add", "", &["a", "a"], &["b"])];
        }
        let callee = format!("f{}", k - 1);
        vec![
            node(&callee, "local", &["a"], &["t"]),
            node(&callee, "local", &["t"], &["b"]),
        ]
    };
    m.functions = (0..=depth)
        .map(|k| FunctionProto {
            name: Some(format!("f{k}")),
            domain: Some("local".into()),
            input: vec!["a".into()],
            output: vec!["b".into()],
            node: body(k),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            }],
            ..Default::default()
        })
        .collect();
    m
}

#[test]
fn nested_function_calls_cannot_blow_up_the_graph() {
    // Control: 2 levels inline to 4 Adds, y = 16 x.
    let m = OnnxModel {
        proto: doubling_functions(2),
        dir: None,
    };
    let imp = import(&m, &ImportOptions::default()).unwrap();
    let x = HostTensor::from_vec(vec![1.0f32, -2.0, 0.5, 0.0, 3.0, -1.0], &[2, 3]).unwrap();
    let y = kiln_cpu::run(&imp.graph, &[x]).unwrap();
    assert_eq!(y[0].to_f64_vec(), vec![16.0, -32.0, 8.0, 0.0, 48.0, -16.0]);

    // 40 levels would be 2^40 nodes from a file of a few kB: refused before any work.
    let start = std::time::Instant::now();
    let msg = import_err(doubling_functions(40));
    assert_has(
        &msg,
        &[
            "inlining function 'f40' (1099511627776 nodes",
            "inlined nodes",
        ],
    );
    assert!(
        start.elapsed().as_secs() < 5,
        "the refusal took {:?}",
        start.elapsed()
    );

    // A function that calls itself.
    let mut m = doubling_functions(0);
    m.functions[0].node = vec![node("f0", "local", &["a"], &["b"])];
    assert_has(&import_err(m), &["function 'f0' (unboundedly many nodes"]);
}
