//! Shape-family converters on tiny hand-built models: symbolic batch dims through the
//! Shape → Gather → Unsqueeze → Concat → Reshape chain PyTorch exports, run-time shape targets,
//! ONNX's two-way Expand, wrap and cropping Pad, and refused attributes.

use kiln_ir::{DType, Dim, HostTensor, Shape};
use kiln_onnx::builder::{
    self, attr_int, attr_ints, attr_string, attr_tensor, graph, node, tensor_info,
    tensor_info_fixed, untyped_info,
};
use kiln_onnx::proto::{NodeProto, ValueInfoProto};
use kiln_onnx::{ImportError, ImportOptions, OnnxModel, import, import_for_inputs};
use std::collections::HashMap;

/// A model of `nodes` whose `outputs` are declared by name alone.
fn model(
    nodes: Vec<NodeProto>,
    inits: Vec<(&str, HostTensor)>,
    inputs: Vec<ValueInfoProto>,
    outputs: &[&str],
    opset: i64,
) -> OnnxModel {
    let outputs = outputs.iter().map(|o| untyped_info(o)).collect();
    builder::model(graph(nodes, inputs, outputs, &inits), opset)
}

fn i64s(v: &[i64]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn iota(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    HostTensor::from_vec(
        (0..n).map(|i| i as f32 * 0.5 - 3.0).collect::<Vec<f32>>(),
        shape,
    )
    .unwrap()
}

/// `Reshape(x, Concat(Gather(Shape(x), [0]), [-1]))` with `x: f32[batch, 4, 6]` (and the
/// scalar-index form PyTorch emits, with an Unsqueeze): the imported graph keeps `batch`
/// symbolic and runs for any batch size.
#[test]
fn symbolic_batch_reshape_chain() {
    let axis0 = || vec![attr_int("axis", 0)];
    let chains = [
        vec![
            node("Shape", &["x"], &["s"], vec![]),
            node("Gather", &["s", "zero1"], &["b1"], vec![]),
            node("Concat", &["b1", "minus1"], &["target"], axis0()),
            node("Reshape", &["x", "target"], &["y"], vec![]),
        ],
        vec![
            node("Shape", &["x"], &["s"], vec![]),
            node("Gather", &["s", "zero"], &["b"], vec![]),
            node("Unsqueeze", &["b", "axes0"], &["b1"], vec![]),
            node("Concat", &["b1", "minus1"], &["target"], axis0()),
            node("Reshape", &["x", "target"], &["y"], vec![]),
        ],
    ];
    for nodes in chains {
        let m = model(
            nodes,
            vec![
                ("zero", HostTensor::scalar(0i64)),
                ("zero1", i64s(&[0])),
                ("axes0", i64s(&[0])),
                ("minus1", i64s(&[-1])),
            ],
            vec![tensor_info(
                "x",
                DType::F32,
                &[Dim::sym("batch"), Dim::Fixed(4), Dim::Fixed(6)],
            )],
            &["y"],
            13,
        );
        let imp = import(&m, &ImportOptions::default()).unwrap();
        let out = imp.graph.outputs[0];
        assert_eq!(
            imp.graph.ty(out).shape,
            Shape(vec![Dim::sym("batch"), Dim::Fixed(24)])
        );
        for batch in [1usize, 2, 5] {
            let x = iota(&[batch, 4, 6]);
            let y = kiln_cpu::run(&imp.graph, std::slice::from_ref(&x)).unwrap();
            assert_eq!(y[0].shape(), &[batch, 24]);
            assert_eq!(y[0].to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
        }
    }
}

/// A -1 that would need dividing a symbolic dim is refused rather than guessed.
#[test]
fn symbolic_reshape_that_cannot_be_inferred_is_refused() {
    let m = model(
        vec![node("Reshape", &["x", "target"], &["y"], vec![])],
        vec![("target", i64s(&[-1, 5]))],
        vec![tensor_info(
            "x",
            DType::F32,
            &[Dim::sym("batch"), Dim::Fixed(4), Dim::Fixed(6)],
        )],
        &["y"],
        13,
    );
    let err = import(&m, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be inferred"), "{err}");
}

/// ConstantOfShape consuming a symbolic shape: `y = x + ConstantOfShape(Shape(x), 1)` keeps `[batch, 3]`.
#[test]
fn symbolic_shape_feeds_constant_of_shape() {
    let one = HostTensor::from_vec(vec![1.0f32], &[1]).unwrap();
    let m = model(
        vec![
            node("Shape", &["x"], &["s"], vec![]),
            node(
                "ConstantOfShape",
                &["s"],
                &["ones"],
                vec![attr_tensor("value", &one)],
            ),
            node("Add", &["x", "ones"], &["y"], vec![]),
        ],
        vec![],
        vec![tensor_info(
            "x",
            DType::F32,
            &[Dim::sym("batch"), Dim::Fixed(3)],
        )],
        &["y"],
        13,
    );
    let imp = import(&m, &ImportOptions::default()).unwrap();
    assert_eq!(
        imp.graph.ty(imp.graph.outputs[0]).shape,
        Shape(vec![Dim::sym("batch"), Dim::Fixed(3)])
    );
    for batch in [2usize, 4] {
        let x = iota(&[batch, 3]);
        let y = kiln_cpu::run(&imp.graph, std::slice::from_ref(&x)).unwrap();
        let want: Vec<f32> = x.to_vec::<f32>().unwrap().iter().map(|v| v + 1.0).collect();
        assert_eq!(y[0].shape(), &[batch, 3]);
        assert_eq!(y[0].to_vec::<f32>().unwrap(), want);
    }
}

/// A Reshape whose target is a graph input is refused with NeedsValue naming that input; with
/// the value given, import_for_inputs specialises it and the result is right.
#[test]
fn runtime_reshape_target_needs_value() {
    let m = model(
        vec![node("Reshape", &["x", "shape"], &["y"], vec![])],
        vec![],
        vec![
            tensor_info_fixed("x", DType::F32, &[2, 6]),
            tensor_info_fixed("shape", DType::I64, &[3]),
        ],
        &["y"],
        14,
    );
    match import(&m, &ImportOptions::default()) {
        Err(ImportError::NeedsValue { input, .. }) => assert_eq!(input, "shape"),
        other => panic!("expected NeedsValue, got {other:?}"),
    }
    let x = iota(&[2, 6]);
    // 0 copies the input's dim 0, -1 takes the rest: [2, 3, 2].
    let inputs = HashMap::from([
        ("x".to_string(), x.clone()),
        ("shape".to_string(), i64s(&[0, 3, -1])),
    ]);
    let (imp, bound) = import_for_inputs(&m, &inputs).unwrap();
    assert_eq!(imp.input_names, vec!["x".to_string()]);
    let y = kiln_cpu::run(&imp.graph, &bound).unwrap();
    assert_eq!(y[0].shape(), &[2, 3, 2]);
    assert_eq!(y[0].to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
}

/// ONNX Expand broadcasts both ways: `[3, 1]` expanded to `[2, 1, 4]` is `[2, 3, 4]`.
#[test]
fn expand_broadcasts_both_ways() {
    let m = model(
        vec![node("Expand", &["x", "shape"], &["y"], vec![])],
        vec![("shape", i64s(&[2, 1, 4]))],
        vec![tensor_info_fixed("x", DType::F32, &[3, 1])],
        &["y"],
        13,
    );
    let imp = import(&m, &ImportOptions::default()).unwrap();
    let x = iota(&[3, 1]);
    let y = kiln_cpu::run(&imp.graph, std::slice::from_ref(&x)).unwrap();
    let xv = x.to_vec::<f32>().unwrap();
    let mut want = Vec::new();
    for _ in 0..2 {
        for v in &xv {
            for _ in 0..4 {
                want.push(*v);
            }
        }
    }
    assert_eq!(y[0].shape(), &[2, 3, 4]);
    assert_eq!(y[0].to_vec::<f32>().unwrap(), want);
}

/// Pad in wrap mode with pads larger than the dim (periodic), and negative pads that crop,
/// against a naive index loop.
#[test]
fn pad_wrap_and_crop() {
    let pads = [0i64, 5, -1, 2];
    let m = model(
        vec![node(
            "Pad",
            &["x", "pads"],
            &["y"],
            vec![attr_string("mode", "wrap")],
        )],
        vec![("pads", i64s(&pads))],
        vec![tensor_info_fixed("x", DType::F32, &[2, 3])],
        &["y"],
        19,
    );
    let imp = import(&m, &ImportOptions::default()).unwrap();
    let x = iota(&[2, 3]);
    let y = kiln_cpu::run(&imp.graph, std::slice::from_ref(&x)).unwrap();
    let xv = x.to_vec::<f32>().unwrap();
    // Axis 0: [0, 2) stays (no pad, one cropped at the end); axis 1: 5 wrapped before, 2 after.
    let (rows, cols) = (1usize, 3 + 5 + 2);
    let mut want = Vec::new();
    for r in 0..rows {
        for c in 0..cols {
            let src = (c as i64 - 5).rem_euclid(3) as usize;
            want.push(xv[r * 3 + src]);
        }
    }
    assert_eq!(y[0].shape(), &[rows, cols]);
    assert_eq!(y[0].to_vec::<f32>().unwrap(), want);
}

/// An attribute the converter does not implement is an error, never silently ignored.
#[test]
fn unknown_attribute_is_refused() {
    let m = model(
        vec![node(
            "Transpose",
            &["x"],
            &["y"],
            vec![attr_ints("perm", &[1, 0]), attr_string("layout", "nhwc")],
        )],
        vec![],
        vec![tensor_info_fixed("x", DType::F32, &[2, 3])],
        &["y"],
        13,
    );
    let err = import(&m, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("layout"), "{err}");
}

/// Slices of a symbolic shape stay symbolic: `Reshape(x, Concat(Shape(x)[0:1], Shape(x)[-1:], [-1]))`
/// turns `[batch, 4, 6]` into `[batch, 6, 4]`; Flatten at axis 1 gives `[batch, 24]`.
#[test]
fn symbolic_slice_and_flatten() {
    let axis0 = attr_int("axis", 0);
    let m = model(
        vec![
            node("Shape", &["x"], &["s"], vec![]),
            node("Slice", &["s", "zero", "one"], &["head"], vec![]),
            node("Slice", &["s", "minus1", "max"], &["tail"], vec![]),
            node(
                "Concat",
                &["head", "tail", "minus1"],
                &["target"],
                vec![axis0],
            ),
            node("Reshape", &["x", "target"], &["y"], vec![]),
            node("Flatten", &["x"], &["f"], vec![]),
        ],
        vec![
            ("zero", i64s(&[0])),
            ("one", i64s(&[1])),
            ("minus1", i64s(&[-1])),
            ("max", i64s(&[i64::MAX])),
        ],
        vec![tensor_info(
            "x",
            DType::F32,
            &[Dim::sym("batch"), Dim::Fixed(4), Dim::Fixed(6)],
        )],
        &["y", "f"],
        13,
    );
    let imp = import(&m, &ImportOptions::default()).unwrap();
    let b = Dim::sym("batch");
    assert_eq!(
        imp.graph.ty(imp.graph.outputs[0]).shape,
        Shape(vec![b.clone(), Dim::Fixed(6), Dim::Fixed(4)])
    );
    assert_eq!(
        imp.graph.ty(imp.graph.outputs[1]).shape,
        Shape(vec![b, Dim::Fixed(24)])
    );
    let x = iota(&[3, 4, 6]);
    let y = kiln_cpu::run(&imp.graph, std::slice::from_ref(&x)).unwrap();
    assert_eq!(y[0].shape(), &[3, 6, 4]);
    assert_eq!(y[1].shape(), &[3, 24]);
    assert_eq!(y[0].to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    assert_eq!(y[1].to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
}
