//! Elementwise converters on tiny hand-built ONNX models, for what the conformance cases do not
//! cover: symbolic batch dims, half-precision decompositions, opset-6 broadcasting, edge values
//! of BitShift/Pow/Mod/Mish, and refusals (unknown attributes, mismatched dtypes, training
//! dropout). Each result is checked against a plain f64 loop.

mod support;

use kiln_ir::half::f16;
use kiln_ir::{DType, Dim, HostTensor};
use kiln_onnx::builder::{
    self, attr_float, attr_int, attr_string, graph, node, tensor_info, tensor_info_fixed,
};
use kiln_onnx::proto::{NodeProto, ValueInfoProto};
use kiln_onnx::{ImportOptions, OnnxModel, import};
use support::{assert_close, t, try_run};

/// A one-node model: graph inputs `inputs`, constant initializers `inits`, outputs `outputs`
/// declared with a dtype and no dims (the importer infers their shapes).
fn model(
    opset: i64,
    n: NodeProto,
    inputs: Vec<ValueInfoProto>,
    inits: &[(&str, HostTensor)],
    outputs: &[(&str, DType)],
) -> OnnxModel {
    let outputs = outputs
        .iter()
        .map(|(name, d)| tensor_info(name, *d, &[]))
        .collect();
    builder::model(graph(vec![n], inputs, outputs, inits), opset)
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
            vec![attr_float("alpha", alpha), attr_float("gamma", gamma)],
        ),
        vec![tensor_info(
            "x",
            DType::F16,
            &[Dim::sym("N"), Dim::Fixed(3)],
        )],
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
        node("Relu", &["x"], &["y"], vec![attr_int("fancy", 1)]),
        vec![tensor_info_fixed("x", DType::F32, &[2])],
        &[],
        &[("y", DType::F32)],
    );
    let err = try_run(&m, &[("x", t(vec![1.0f32, -1.0], &[2]))]).unwrap_err();
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
            vec![attr_int("broadcast", 1), attr_int("axis", 1)],
        ),
        vec![
            tensor_info_fixed("a", DType::F64, &[2, 3, 4]),
            tensor_info_fixed("b", DType::F64, &[3]),
        ],
        &[],
        &[("c", DType::F64)],
    );
    let a: Vec<f64> = (0..24).map(|i| i as f64).collect();
    let b = vec![100.0, 200.0, 300.0];
    let got = try_run(
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
            tensor_info_fixed("a", DType::F64, &[2, 3]),
            tensor_info_fixed("b", DType::F64, &[3]),
        ],
        &[],
        &[("c", DType::F64)],
    );
    let err = try_run(
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
                vec![attr_string("direction", dir)],
            ),
            vec![
                tensor_info_fixed("x", DType::I8, &[8]),
                tensor_info_fixed("s", DType::I8, &[8]),
            ],
            &[],
            &[("y", DType::I8)],
        );
        let got = try_run(
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
            tensor_info_fixed("a", DType::I32, &[4]),
            tensor_info_fixed("b", DType::F32, &[4]),
        ],
        &[],
        &[("c", DType::I32)],
    );
    let a = vec![2i32, 10, 7, -3];
    let b = vec![0.5f32, 1.5, 2.0, 3.0];
    let got = try_run(&m, &[("a", t(a.clone(), &[4])), ("b", t(b.clone(), &[4]))]).expect("run");
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
            tensor_info_fixed("a", DType::F16, &[2]),
            tensor_info_fixed("b", DType::I64, &[2]),
        ],
        &[],
        &[("c", DType::F16)],
    );
    let got = try_run(
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
            node("Mod", &["a", "b"], &["c"], vec![attr_int("fmod", fmod)]),
            vec![
                tensor_info_fixed("a", DType::I32, &[6]),
                tensor_info_fixed("b", DType::I32, &[6]),
            ],
            &[],
            &[("c", DType::I32)],
        );
        let got =
            try_run(&m, &[("a", t(a.clone(), &[6])), ("b", t(b.clone(), &[6]))]).expect("run");
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
        vec![tensor_info_fixed("x", DType::F32, &[xs.len()])],
        &[],
        &[("y", DType::F32)],
    );
    let got = try_run(&m, &[("x", t(xs.clone(), &[xs.len()]))]).expect("run");
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
            tensor_info_fixed("a", DType::F32, &[2]),
            tensor_info_fixed("b", DType::F64, &[2]),
        ],
        &[],
        &[("c", DType::Bool)],
    );
    assert!(
        try_run(
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
            tensor_info_fixed("a", DType::I32, &[2]),
            tensor_info_fixed("b", DType::I32, &[2]),
        ],
        &[],
        &[("c", DType::I32)],
    );
    let err = try_run(
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
            vec![attr_float("min", -0.5), attr_float("max", 0.5)],
        ),
        vec![tensor_info_fixed("x", DType::F64, &[6])],
        &[],
        &[("y", DType::F64)],
    );
    let got = try_run(&m, &[("x", t(xs.clone(), &[6]))]).expect("run");
    assert_close(
        &got[0].to_f64_vec(),
        &[-0.5, -0.25, 0.0, 0.5, 0.5, f64::NAN],
        0.0,
    );

    // Opset 13 inputs, integers, min > max: every element becomes max.
    let m = model(
        13,
        node("Clip", &["x", "lo", "hi"], &["y"], vec![]),
        vec![tensor_info_fixed("x", DType::I64, &[3])],
        &[("lo", t(vec![5i64], &[])), ("hi", t(vec![2i64], &[]))],
        &[("y", DType::I64)],
    );
    let got = try_run(&m, &[("x", t(vec![-9i64, 3, 9], &[3]))]).expect("run");
    assert_eq!(got[0].to_vec::<i64>().expect("i64"), vec![2, 2, 2]);
}

#[test]
fn dropout_inference_mask_and_training_refusal() {
    let x = t(vec![1.0f32, -2.0, 3.0, f32::NAN], &[2, 2]);
    let m = model(
        13,
        node("Dropout", &["x", "r"], &["y", "mask"], vec![]),
        vec![tensor_info(
            "x",
            DType::F32,
            &[Dim::sym("N"), Dim::Fixed(2)],
        )],
        &[("r", t(vec![0.5f32], &[]))],
        &[("y", DType::F32), ("mask", DType::Bool)],
    );
    let got = try_run(&m, &[("x", x.clone())]).expect("run");
    assert_close(&got[0].to_f64_vec(), &x.to_f64_vec(), 0.0);
    assert_eq!(got[1].to_vec::<bool>().expect("bool"), vec![true; 4]);

    let m = model(
        13,
        node("Dropout", &["x", "r", "train"], &["y"], vec![]),
        vec![tensor_info_fixed("x", DType::F32, &[2, 2])],
        &[("r", t(vec![0.5f32], &[])), ("train", t(vec![true], &[]))],
        &[("y", DType::F32)],
    );
    let err = try_run(&m, &[("x", x)]).unwrap_err();
    assert!(err.contains("training"), "{err}");
}
