//! If / Loop / Scan are expanded at import: a branch is chosen from a known condition, loops
//! are unrolled, and a condition only known at run time is reported (NeedsValue) so that the
//! caller can fix it, never guessed.

use kiln_ir::HostTensor;
use kiln_onnx::proto::type_proto::{self, Tensor};
use kiln_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
    ValueInfoProto, tensor_shape_proto::Dimension, tensor_shape_proto::dimension,
};
use kiln_onnx::tensor::tensor_to_proto;
use kiln_onnx::{ImportError, ImportOptions, OnnxModel, import, import_for_inputs};
use std::collections::HashMap;

fn info(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&n| Dimension { value: Some(dimension::Value::DimValue(n)), ..Default::default() })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
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

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(5), g: Some(g), ..Default::default() }
}

fn model(g: GraphProto) -> OnnxModel {
    OnnxModel {
        proto: ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
            graph: Some(g),
            ..Default::default()
        },
        dir: None,
    }
}

/// y = x + c, where c is 1 in the then-branch and 100 in the else-branch.
fn if_model() -> OnnxModel {
    let branch = |name: &str, v: f32| GraphProto {
        name: Some(name.into()),
        initializer: vec![tensor_to_proto(&HostTensor::from_vec(vec![v], &[1]).unwrap(), &format!("{name}_c"))],
        node: vec![node("Add", &["x", &format!("{name}_c")], &[&format!("{name}_y")], vec![])],
        output: vec![info(&format!("{name}_y"), 1, &[3])],
        ..Default::default()
    };
    model(GraphProto {
        input: vec![info("cond", 9, &[]), info("x", 1, &[3])],
        output: vec![info("y", 1, &[3])],
        node: vec![node(
            "If",
            &["cond", "x"][..1],
            &["y"],
            vec![graph_attr("then_branch", branch("then", 1.0)), graph_attr("else_branch", branch("else", 100.0))],
        )],
        ..Default::default()
    })
}

#[test]
fn if_with_a_runtime_condition_needs_its_value_and_then_takes_the_right_branch() {
    let m = if_model();
    match import(&m, &ImportOptions::default()) {
        Err(ImportError::NeedsValue { input, .. }) => assert_eq!(input, "cond"),
        other => panic!("expected NeedsValue for cond, got {other:?}"),
    }
    let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    for (cond, add) in [(true, 1.0f32), (false, 100.0)] {
        let inputs = HashMap::from([
            ("cond".to_string(), HostTensor::from_vec(vec![cond], &[]).unwrap()),
            ("x".to_string(), x.clone()),
        ]);
        let (imp, bound) = import_for_inputs(&m, &inputs).unwrap();
        assert_eq!(imp.specialised, vec!["cond".to_string()]);
        let y = kiln_cpu::run(&imp.graph, &bound).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![1.0 + add, 2.0 + add, 3.0 + add]);
    }
}

/// A Loop with trip count 4: carried s = s + x each iteration, and a scan output of s.
#[test]
fn loop_unrolls_carried_values_and_scan_outputs() {
    let body = GraphProto {
        name: Some("body".into()),
        input: vec![info("i", 7, &[]), info("c_in", 9, &[]), info("s_in", 1, &[2])],
        node: vec![
            node("Add", &["s_in", "x"], &["s_out"], vec![]),
            node("Identity", &["c_in"], &["c_out"], vec![]),
            node("Identity", &["s_out"], &["scan"], vec![]),
        ],
        output: vec![info("c_out", 9, &[]), info("s_out", 1, &[2]), info("scan", 1, &[2])],
        ..Default::default()
    };
    let trip = tensor_to_proto(&HostTensor::from_vec(vec![4i64], &[]).unwrap(), "M");
    let m = model(GraphProto {
        input: vec![info("x", 1, &[2]), info("s0", 1, &[2])],
        initializer: vec![trip],
        output: vec![info("s", 1, &[2]), info("all", 1, &[4, 2])],
        node: vec![node("Loop", &["M", "", "s0"], &["s", "all"], vec![graph_attr("body", body)])],
        ..Default::default()
    });
    let imp = import(&m, &ImportOptions::default()).unwrap();
    let x = HostTensor::from_vec(vec![1.0f32, 10.0], &[2]).unwrap();
    let s0 = HostTensor::from_vec(vec![0.5f32, 0.0], &[2]).unwrap();
    let out = kiln_cpu::run(&imp.graph, &[x, s0]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![4.5, 40.0]);
    assert_eq!(out[1].shape(), &[4, 2]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![1.5, 10.0, 2.5, 20.0, 3.5, 30.0, 4.5, 40.0]);
}
