//! Elementwise converters on tiny hand-built ONNX models, for what the conformance cases do not
//! cover: symbolic batch dims, half-precision decompositions, opset-6 broadcasting, edge values
//! of BitShift/Pow/Mod/Mish, and refusals (unknown attributes, mismatched dtypes, training
//! dropout). Each result is checked against a plain f64 loop.

use kiln_ir::half::f16;
use kiln_ir::{DType, HostTensor};
use kiln_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto,
    TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};
use kiln_onnx::tensor::{dtype_to_onnx, tensor_to_proto};
use kiln_onnx::{ImportOptions, OnnxModel, import, import_for_inputs};
use std::collections::HashMap;

/// A declared dim: a size or a symbolic name.
enum D {
    N(i64),
    S(&'static str),
}

fn value_info(name: &str, dtype: DType, dims: &[D]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(match d {
                D::N(n) => tensor_shape_proto::dimension::Value::DimValue(*n),
                D::S(s) => tensor_shape_proto::dimension::Value::DimParam(s.to_string()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(dtype_to_onnx(dtype)),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn attr_i(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(2),
        ..Default::default()
    }
}

fn attr_f(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(1),
        ..Default::default()
    }
}

fn attr_s(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec()),
        r#type: Some(3),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute,
        ..Default::default()
    }
}

/// A one-node model: graph inputs `inputs`, constant initializers `inits`, outputs `outputs`.
fn model(
    opset: i64,
    n: NodeProto,
    inputs: Vec<ValueInfoProto>,
    inits: &[(&str, HostTensor)],
    outputs: &[(&str, DType)],
) -> OnnxModel {
    let graph = GraphProto {
        node: vec![n],
        input: inputs,
        initializer: inits
            .iter()
            .map(|(name, t)| tensor_to_proto(t, name))
            .collect(),
        output: outputs
            .iter()
            .map(|(name, d)| value_info(name, *d, &[]))
            .collect(),
        ..Default::default()
    };
    OnnxModel {
        proto: ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(opset),
            }],
            graph: Some(graph),
            ..Default::default()
        },
        dir: None,
    }
}

/// Imports specialised to `inputs` and runs; the error message when either step fails.
fn run(m: &OnnxModel, inputs: &[(&str, HostTensor)]) -> Result<Vec<HostTensor>, String> {
    let map: HashMap<String, HostTensor> = inputs
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    let (imp, bound) = import_for_inputs(m, &map).map_err(|e| e.to_string())?;
    kiln_cpu::run(&imp.graph, &bound).map_err(|e| e.to_string())
}

fn t<T: kiln_ir::Element>(v: Vec<T>, shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v, shape).expect("test tensor")
}

fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "element {i}: got {g}, want {w}");
    }
}

#[test]
fn selu_f16_with_symbolic_batch_computes_in_f16() {
    let (alpha, gamma) = (1.5f32, 2.0f32);
    let m = model(
        22,
        node(
            "Selu",
            &["x"],
            &["y"],
            vec![attr_f("alpha", alpha), attr_f("gamma", gamma)],
        ),
        vec![value_info("x", DType::F16, &[D::S("N"), D::N(3)])],
        &[],
        &[("y", DType::F16)],
    );
    // Imported without concrete shapes: the batch stays symbolic and binds at run time.
    let imp = import(&m, &ImportOptions::default()).expect("import");
    assert_eq!(imp.graph.ty(imp.graph.outputs[0]).dtype, DType::F16);
    let xs = [-3.0, -0.5, 0.0, 0.25, 2.0, -10.0];
    let x = t(xs.iter().map(|&v| f16::from_f64(v)).collect(), &[2, 3]);
    let y = kiln_cpu::run(&imp.graph, &[x]).expect("run");
    assert_eq!(y[0].dtype(), DType::F16);
    let want: Vec<f64> = xs
        .iter()
        .map(|&v| {
            let v = f16::from_f64(v).to_f64();
            let r = if v > 0.0 {
                gamma as f64 * v
            } else {
                gamma as f64 * (alpha as f64 * v.exp() - alpha as f64)
            };
            f16::from_f64(r).to_f64()
        })
        .collect();
    // A few f16 roundings of intermediate results.
    assert_close(&y[0].to_f64_vec(), &want, 4e-3);
}

#[test]
fn unknown_attribute_is_refused() {
    let m = model(
        14,
        node("Relu", &["x"], &["y"], vec![attr_i("fancy", 1)]),
        vec![value_info("x", DType::F32, &[D::N(2)])],
        &[],
        &[("y", DType::F32)],
    );
    let err = run(&m, &[("x", t(vec![1.0f32, -1.0], &[2]))]).unwrap_err();
    assert!(err.contains("fancy"), "{err}");
}

#[test]
fn opset6_add_broadcast_aligns_b_at_axis() {
    let m = model(
        6,
        node(
            "Add",
            &["a", "b"],
            &["c"],
            vec![attr_i("broadcast", 1), attr_i("axis", 1)],
        ),
        vec![
            value_info("a", DType::F64, &[D::N(2), D::N(3), D::N(4)]),
            value_info("b", DType::F64, &[D::N(3)]),
        ],
        &[],
        &[("c", DType::F64)],
    );
    let a: Vec<f64> = (0..24).map(|i| i as f64).collect();
    let b = vec![100.0, 200.0, 300.0];
    let got = run(
        &m,
        &[("a", t(a.clone(), &[2, 3, 4])), ("b", t(b.clone(), &[3]))],
    )
    .expect("run");
    let want: Vec<f64> = (0..24).map(|i| a[i] + b[(i / 4) % 3]).collect();
    assert_eq!(got[0].shape(), &[2, 3, 4]);
    assert_eq!(got[0].to_f64_vec(), want);

    // Without broadcast=1, opset 6 needs equal shapes.
    let m = model(
        6,
        node("Add", &["a", "b"], &["c"], vec![]),
        vec![
            value_info("a", DType::F64, &[D::N(2), D::N(3)]),
            value_info("b", DType::F64, &[D::N(3)]),
        ],
        &[],
        &[("c", DType::F64)],
    );
    let err = run(
        &m,
        &[
            ("a", t(vec![0.0; 6], &[2, 3])),
            ("b", t(vec![0.0; 3], &[3])),
        ],
    )
    .unwrap_err();
    assert!(err.contains("equal shapes"), "{err}");
}

#[test]
fn bitshift_right_is_arithmetic_for_signed_and_handles_any_amount() {
    let xs: Vec<i8> = vec![-128, -8, -1, 7, 100, -3, 64, -64];
    let ss: Vec<i8> = vec![1, 2, 7, 8, -1, 127, 3, 0];
    let reference = |right: bool, x: i8, s: i8| -> i8 {
        if !(0..8).contains(&s) {
            if right && x < 0 { -1 } else { 0 }
        } else if right {
            x >> s
        } else {
            ((x as u8) << s) as i8
        }
    };
    for (dir, right) in [("RIGHT", true), ("LEFT", false)] {
        let m = model(
            28,
            node(
                "BitShift",
                &["x", "s"],
                &["y"],
                vec![attr_s("direction", dir)],
            ),
            vec![
                value_info("x", DType::I8, &[D::N(8)]),
                value_info("s", DType::I8, &[D::N(8)]),
            ],
            &[],
            &[("y", DType::I8)],
        );
        let got = run(
            &m,
            &[("x", t(xs.clone(), &[8])), ("s", t(ss.clone(), &[8]))],
        )
        .expect("run");
        let want: Vec<i8> = xs
            .iter()
            .zip(&ss)
            .map(|(&x, &s)| reference(right, x, s))
            .collect();
        assert_eq!(got[0].to_vec::<i8>().expect("i8"), want, "{dir}");
    }
}

#[test]
fn pow_with_other_exponent_dtypes() {
    // Integer base, float exponent: computed in f64 and truncated, as NumPy's astype.
    let m = model(
        15,
        node("Pow", &["a", "b"], &["c"], vec![]),
        vec![
            value_info("a", DType::I32, &[D::N(4)]),
            value_info("b", DType::F32, &[D::N(4)]),
        ],
        &[],
        &[("c", DType::I32)],
    );
    let a = vec![2i32, 10, 7, -3];
    let b = vec![0.5f32, 1.5, 2.0, 3.0];
    let got = run(&m, &[("a", t(a.clone(), &[4])), ("b", t(b.clone(), &[4]))]).expect("run");
    let want: Vec<i32> = a
        .iter()
        .zip(&b)
        .map(|(&x, &e)| (x as f64).powf(e as f64) as i32)
        .collect();
    assert_eq!(got[0].to_vec::<i32>().expect("i32"), want);

    // f16 base, i64 exponent: the exponent must not be rounded to f16 (2049 is not an f16).
    let m = model(
        15,
        node("Pow", &["a", "b"], &["c"], vec![]),
        vec![
            value_info("a", DType::F16, &[D::N(2)]),
            value_info("b", DType::I64, &[D::N(2)]),
        ],
        &[],
        &[("c", DType::F16)],
    );
    let got = run(
        &m,
        &[
            (
                "a",
                t(vec![f16::from_f32(-1.0), f16::from_f32(1.001)], &[2]),
            ),
            ("b", t(vec![2049i64, 3], &[2])),
        ],
    )
    .expect("run");
    let want = [
        -1.0,
        f16::from_f64(f16::from_f32(1.001).to_f64().powi(3)).to_f64(),
    ];
    assert_close(&got[0].to_f64_vec(), &want, 1e-3);
}

#[test]
fn mod_fmod_0_follows_the_divisor_and_fmod_1_the_dividend() {
    let a = vec![-7i32, 7, -7, 7, 0, -6];
    let b = vec![3i32, -3, -3, 3, -5, 3];
    let floor_mod: fn(i32, i32) -> i32 = |x, y| ((x % y) + y) % y;
    let c_fmod: fn(i32, i32) -> i32 = |x, y| x % y;
    for (fmod, f) in [(0, floor_mod), (1, c_fmod)] {
        let m = model(
            13,
            node("Mod", &["a", "b"], &["c"], vec![attr_i("fmod", fmod)]),
            vec![
                value_info("a", DType::I32, &[D::N(6)]),
                value_info("b", DType::I32, &[D::N(6)]),
            ],
            &[],
            &[("c", DType::I32)],
        );
        let got = run(&m, &[("a", t(a.clone(), &[6])), ("b", t(b.clone(), &[6]))]).expect("run");
        let want: Vec<i32> = a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect();
        assert_eq!(got[0].to_vec::<i32>().expect("i32"), want, "fmod={fmod}");
    }
}

#[test]
fn mish_keeps_precision_for_very_negative_inputs() {
    let xs = vec![-30.0f32, -17.0, -5.0, 0.0, 1.0, 20.0, 100.0];
    let m = model(
        22,
        node("Mish", &["x"], &["y"], vec![]),
        vec![value_info("x", DType::F32, &[D::N(xs.len() as i64)])],
        &[],
        &[("y", DType::F32)],
    );
    let got = run(&m, &[("x", t(xs.clone(), &[xs.len()]))]).expect("run");
    let want: Vec<f64> = xs
        .iter()
        .map(|&x| x as f64 * (x as f64).exp().ln_1p().tanh())
        .collect();
    assert_close(&got[0].to_f64_vec(), &want, 1e-5);
}

#[test]
fn mismatched_dtypes_and_non_bool_logic_are_errors() {
    let m = model(
        13,
        node("Less", &["a", "b"], &["c"], vec![]),
        vec![
            value_info("a", DType::F32, &[D::N(2)]),
            value_info("b", DType::F64, &[D::N(2)]),
        ],
        &[],
        &[("c", DType::Bool)],
    );
    assert!(
        run(
            &m,
            &[
                ("a", t(vec![1.0f32, 2.0], &[2])),
                ("b", t(vec![1.0f64, 2.0], &[2]))
            ]
        )
        .is_err()
    );

    let m = model(
        7,
        node("And", &["a", "b"], &["c"], vec![]),
        vec![
            value_info("a", DType::I32, &[D::N(2)]),
            value_info("b", DType::I32, &[D::N(2)]),
        ],
        &[],
        &[("c", DType::I32)],
    );
    let err = run(
        &m,
        &[("a", t(vec![1i32, 2], &[2])), ("b", t(vec![3i32, 2], &[2]))],
    )
    .unwrap_err();
    assert!(err.contains("bool"), "{err}");
}

#[test]
fn clip_opset6_attributes_and_min_above_max() {
    let xs = vec![-2.0f64, -0.25, 0.0, 0.75, 3.0, f64::NAN];
    let m = model(
        6,
        node(
            "Clip",
            &["x"],
            &["y"],
            vec![attr_f("min", -0.5), attr_f("max", 0.5)],
        ),
        vec![value_info("x", DType::F64, &[D::N(6)])],
        &[],
        &[("y", DType::F64)],
    );
    let got = run(&m, &[("x", t(xs.clone(), &[6]))]).expect("run");
    assert_close(
        &got[0].to_f64_vec(),
        &[-0.5, -0.25, 0.0, 0.5, 0.5, f64::NAN],
        0.0,
    );

    // Opset 13 inputs, integers, min > max: every element becomes max.
    let m = model(
        13,
        node("Clip", &["x", "lo", "hi"], &["y"], vec![]),
        vec![value_info("x", DType::I64, &[D::N(3)])],
        &[("lo", t(vec![5i64], &[])), ("hi", t(vec![2i64], &[]))],
        &[("y", DType::I64)],
    );
    let got = run(&m, &[("x", t(vec![-9i64, 3, 9], &[3]))]).expect("run");
    assert_eq!(got[0].to_vec::<i64>().expect("i64"), vec![2, 2, 2]);
}

#[test]
fn dropout_inference_mask_and_training_refusal() {
    let x = t(vec![1.0f32, -2.0, 3.0, f32::NAN], &[2, 2]);
    let m = model(
        13,
        node("Dropout", &["x", "r"], &["y", "mask"], vec![]),
        vec![value_info("x", DType::F32, &[D::S("N"), D::N(2)])],
        &[("r", t(vec![0.5f32], &[]))],
        &[("y", DType::F32), ("mask", DType::Bool)],
    );
    let got = run(&m, &[("x", x.clone())]).expect("run");
    assert_close(&got[0].to_f64_vec(), &x.to_f64_vec(), 0.0);
    assert_eq!(got[1].to_vec::<bool>().expect("bool"), vec![true; 4]);

    let m = model(
        13,
        node("Dropout", &["x", "r", "train"], &["y"], vec![]),
        vec![value_info("x", DType::F32, &[D::N(2), D::N(2)])],
        &[("r", t(vec![0.5f32], &[])), ("train", t(vec![true], &[]))],
        &[("y", DType::F32)],
    );
    let err = run(&m, &[("x", x)]).unwrap_err();
    assert!(err.contains("training"), "{err}");
}
