//! Sequence and optional values are resolved at import: sequence graph inputs/outputs become
//! one graph tensor per element (`x[i]`), positions must be known at import (a graph input
//! holding one is specialised), and an empty optional input is an import-time fact.

use kiln_ir::{DType, Dim, HostTensor, TensorType};
use kiln_onnx::builder::{attr_int, graph, model, node, tensor_info};
use kiln_onnx::proto::{TypeProto, ValueInfoProto, type_proto};
use kiln_onnx::{
    ImportError, ImportOptions, InputValue, OnnxModel, OutputKind, import, import_for_values,
};
use std::collections::HashMap;

fn info(name: &str, dtype: DType, dims: &[usize]) -> ValueInfoProto {
    tensor_info(
        name,
        dtype,
        &dims.iter().map(|&n| Dim::Fixed(n)).collect::<Vec<_>>(),
    )
}

/// `seq(tensor(dtype))`, `optional(tensor(dtype))` or `optional(seq(tensor(dtype)))` for `kind`
/// `seq`, `opt_tensor`, `opt_seq` (tensors declared 0-D; the given values decide shapes).
fn container_info(name: &str, dtype: DType, kind: &str) -> ValueInfoProto {
    let tensor = info("", dtype, &[]).r#type.map(Box::new);
    let seq = TypeProto {
        value: Some(type_proto::Value::SequenceType(Box::new(
            type_proto::Sequence {
                elem_type: tensor.clone(),
            },
        ))),
        ..Default::default()
    };
    let value = match kind {
        "seq" => seq,
        "opt_tensor" => TypeProto {
            value: Some(type_proto::Value::OptionalType(Box::new(
                type_proto::Optional { elem_type: tensor },
            ))),
            ..Default::default()
        },
        _ => TypeProto {
            value: Some(type_proto::Value::OptionalType(Box::new(
                type_proto::Optional {
                    elem_type: Some(Box::new(seq)),
                },
            ))),
            ..Default::default()
        },
    };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(value),
        ..Default::default()
    }
}

fn f32s(v: &[f32], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), shape).unwrap()
}

fn run(m: &OnnxModel, inputs: &[(&str, InputValue)]) -> (kiln_onnx::Imported, Vec<HostTensor>) {
    let map: HashMap<String, InputValue> = inputs
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect();
    let (imp, bound) = import_for_values(m, &map).unwrap();
    let out = kiln_cpu::run(&imp.graph, &bound).unwrap();
    (imp, out)
}

/// s = [a, b, c] (a graph input), erase at a run-time position p, insert x at -1, then stack
/// along a new last axis: checked against the same list edit done by hand.
#[test]
fn sequence_input_edits_with_positions_given_at_run_time() {
    let m = model(
        graph(
            vec![
                node("SequenceErase", &["s", "p"], &["s1"], vec![]),
                node("SequenceInsert", &["s1", "x", "m1"], &["s2"], vec![]),
                node(
                    "ConcatFromSequence",
                    &["s2"],
                    &["y"],
                    vec![attr_int("axis", -1), attr_int("new_axis", 1)],
                ),
                node("SequenceLength", &["s2"], &["n"], vec![]),
            ],
            vec![
                container_info("s", DType::F32, "seq"),
                info("p", DType::I64, &[]),
                info("x", DType::F32, &[2]),
            ],
            vec![info("y", DType::F32, &[2, 3]), info("n", DType::I64, &[])],
            &[("m1", HostTensor::from_vec(vec![-1i64], &[]).unwrap())],
        ),
        17,
    );
    // Without the element types the sequence input cannot be imported.
    assert!(matches!(
        import(&m, &ImportOptions::default()),
        Err(ImportError::Ir(_))
    ));
    let elems: Vec<Vec<f32>> = vec![vec![1.0, 2.0], vec![3.0, 4.0], vec![5.0, 6.0]];
    let x = vec![-1.0f32, -2.0];
    for p in [-3i64, 0, 1, 2] {
        let seq = InputValue::Sequence(elems.iter().map(|e| f32s(e, &[2])).collect());
        let (imp, out) = run(
            &m,
            &[
                ("s", seq),
                (
                    "p",
                    InputValue::Tensor(HostTensor::from_vec(vec![p], &[]).unwrap()),
                ),
                ("x", InputValue::Tensor(f32s(&x, &[2]))),
            ],
        );
        assert_eq!(imp.specialised, vec!["p".to_string()]);
        let mut list = elems.clone();
        list.remove(if p < 0 { (p + 3) as usize } else { p as usize });
        list.insert(1, x.clone()); // -1 on a list of 2 inserts before the last
        let want: Vec<f32> = (0..2)
            .flat_map(|r| list.iter().map(move |e| e[r]))
            .collect();
        assert_eq!(out[0].shape(), &[2, 3]);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), want, "p = {p}");
        assert_eq!(out[1].to_vec::<i64>().unwrap(), vec![3]);
    }
}

/// A sequence output becomes one graph output per element, named `y[i]`; a scalar split that
/// does not divide the axis leaves a shorter last piece.
#[test]
fn split_to_sequence_output_is_one_graph_output_per_element() {
    let m = model(
        graph(
            vec![node(
                "SplitToSequence",
                &["x", "k"],
                &["y"],
                vec![attr_int("axis", -1)],
            )],
            vec![info("x", DType::I32, &[2, 5])],
            vec![container_info("y", DType::I32, "seq")],
            &[("k", HostTensor::from_vec(vec![2i64], &[]).unwrap())],
        ),
        17,
    );
    let x: Vec<i32> = (0..10).collect();
    let (imp, out) = run(
        &m,
        &[(
            "x",
            InputValue::Tensor(HostTensor::from_vec(x, &[2, 5]).unwrap()),
        )],
    );
    assert_eq!(imp.output_kinds, vec![OutputKind::Sequence(3)]);
    assert_eq!(imp.output_names, vec!["y[0]", "y[1]", "y[2]"]);
    let got: Vec<(Vec<usize>, Vec<i32>)> = out
        .iter()
        .map(|t| (t.shape().to_vec(), t.to_vec::<i32>().unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![
            (vec![2, 2], vec![0, 1, 5, 6]),
            (vec![2, 2], vec![2, 3, 7, 8]),
            (vec![2, 1], vec![4, 9])
        ]
    );
}

/// An optional input given empty is known to be empty at import; given a value, the value
/// flows through OptionalGetElement.
#[test]
fn optional_input_present_or_absent() {
    let m = model(
        graph(
            vec![
                node("OptionalHasElement", &["o"], &["has"], vec![]),
                node("Identity", &["o"], &["o2"], vec![]),
            ],
            vec![container_info("o", DType::F32, "opt_tensor")],
            vec![
                info("has", DType::Bool, &[]),
                container_info("o2", DType::F32, "opt_tensor"),
            ],
            &[],
        ),
        18,
    );
    let (imp, out) = run(&m, &[("o", InputValue::Optional(None))]);
    assert_eq!(
        imp.output_kinds,
        vec![OutputKind::Tensor, OutputKind::Optional(None)]
    );
    assert!(imp.input_names.is_empty());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to_vec::<bool>().unwrap(), vec![false]);

    let v = f32s(&[1.5, f32::NAN], &[2]);
    let (imp, out) = run(
        &m,
        &[(
            "o",
            InputValue::Optional(Some(Box::new(InputValue::Tensor(v)))),
        )],
    );
    assert_eq!(
        imp.output_kinds,
        vec![
            OutputKind::Tensor,
            OutputKind::Optional(Some(Box::new(OutputKind::Tensor)))
        ]
    );
    assert_eq!(out[0].to_vec::<bool>().unwrap(), vec![true]);
    let o2 = out[1].to_vec::<f32>().unwrap();
    assert_eq!(o2[0], 1.5);
    assert!(o2[1].is_nan());
}

/// An optional sequence input holding an empty sequence: it has an element (the sequence),
/// and the sequence has no elements.
#[test]
fn optional_of_an_empty_sequence_has_an_element() {
    let m = model(
        graph(
            vec![
                node("OptionalHasElement", &["o"], &["has"], vec![]),
                node("OptionalGetElement", &["o"], &["s"], vec![]),
                node("SequenceLength", &["s"], &["n"], vec![]),
            ],
            vec![container_info("o", DType::F32, "opt_seq")],
            vec![info("has", DType::Bool, &[]), info("n", DType::I64, &[])],
            &[],
        ),
        18,
    );
    let empty = InputValue::Optional(Some(Box::new(InputValue::Sequence(vec![]))));
    let (_, out) = run(&m, &[("o", empty)]);
    assert_eq!(out[0].to_vec::<bool>().unwrap(), vec![true]);
    assert_eq!(out[1].to_vec::<i64>().unwrap(), vec![0]);
    // Imported from types alone, each element becomes a graph input `o[i]`.
    let mut opts = ImportOptions::default();
    opts.input_sequences.insert(
        "o".into(),
        vec![TensorType::new(DType::F32, kiln_ir::Shape::fixed(&[4]))],
    );
    let imp = import(&m, &opts).unwrap();
    assert_eq!(imp.input_names, vec!["o[0]"]);
}

/// Out-of-range positions, a sequence used as a tensor and an empty optional's element are
/// errors that say so, never a guess.
#[test]
fn bad_positions_and_types_are_errors() {
    let at = |pos: i64| {
        model(
            graph(
                vec![
                    node("SequenceConstruct", &["a", "a"], &["s"], vec![]),
                    node("SequenceAt", &["s", "p"], &["y"], vec![]),
                ],
                vec![info("a", DType::F32, &[1])],
                vec![info("y", DType::F32, &[1])],
                &[("p", HostTensor::from_vec(vec![pos], &[]).unwrap())],
            ),
            17,
        )
    };
    for p in [-2i64, 1] {
        assert!(
            import(&at(p), &ImportOptions::default()).is_ok(),
            "position {p}"
        );
    }
    for p in [-3i64, 2] {
        let e = import(&at(p), &ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of range"), "position {p}: {e}");
    }
    let as_tensor = model(
        graph(
            vec![
                node("SequenceConstruct", &["a"], &["s"], vec![]),
                node("Relu", &["s"], &["y"], vec![]),
            ],
            vec![info("a", DType::F32, &[1])],
            vec![info("y", DType::F32, &[1])],
            &[],
        ),
        17,
    );
    let e = import(&as_tensor, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("is a sequence or optional"), "{e}");
    let empty_get = model(
        graph(
            vec![node("OptionalGetElement", &["o"], &["y"], vec![])],
            vec![container_info("o", DType::F32, "opt_tensor")],
            vec![info("y", DType::F32, &[1])],
            &[],
        ),
        18,
    );
    let mut opts = ImportOptions::default();
    opts.absent_optionals.insert("o".into());
    let e = import(&empty_get, &opts).unwrap_err().to_string();
    assert!(e.contains("empty optional"), "{e}");
}
