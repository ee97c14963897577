//! If / Loop / Scan are expanded at import: a branch is chosen from a known condition, loops
//! are unrolled, and a condition only known at run time is reported (NeedsValue) so that the
//! caller can fix it, never guessed.

use kiln_ir::{DType, Dim, HostTensor};
use kiln_onnx::builder::{attr_graph, graph, model, node, tensor_info};
use kiln_onnx::proto::{GraphProto, ValueInfoProto};
use kiln_onnx::{ImportError, ImportOptions, OnnxModel, import, import_for_inputs};
use std::collections::HashMap;

fn info(name: &str, dtype: DType, dims: &[usize]) -> ValueInfoProto {
    tensor_info(name, dtype, &dims.iter().map(|&n| Dim::Fixed(n)).collect::<Vec<_>>())
}

/// y = x + c, where c is 1 in the then-branch and 100 in the else-branch.
fn if_model() -> OnnxModel {
    let branch = |name: &str, v: f32| -> GraphProto {
        let (c, y) = (format!("{name}_c"), format!("{name}_y"));
        graph(
            vec![node("Add", &["x", &c], &[&y], vec![])],
            vec![],
            vec![info(&y, DType::F32, &[3])],
            &[(&c, HostTensor::from_vec(vec![v], &[1]).unwrap())],
        )
    };
    let branches = vec![attr_graph("then_branch", branch("then", 1.0)), attr_graph("else_branch", branch("else", 100.0))];
    model(
        graph(
            vec![node("If", &["cond"], &["y"], branches)],
            vec![info("cond", DType::Bool, &[]), info("x", DType::F32, &[3])],
            vec![info("y", DType::F32, &[3])],
            &[],
        ),
        17,
    )
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
    let body = graph(
        vec![
            node("Add", &["s_in", "x"], &["s_out"], vec![]),
            node("Identity", &["c_in"], &["c_out"], vec![]),
            node("Identity", &["s_out"], &["scan"], vec![]),
        ],
        vec![info("i", DType::I64, &[]), info("c_in", DType::Bool, &[]), info("s_in", DType::F32, &[2])],
        vec![info("c_out", DType::Bool, &[]), info("s_out", DType::F32, &[2]), info("scan", DType::F32, &[2])],
        &[],
    );
    let m = model(
        graph(
            vec![node("Loop", &["M", "", "s0"], &["s", "all"], vec![attr_graph("body", body)])],
            vec![info("x", DType::F32, &[2]), info("s0", DType::F32, &[2])],
            vec![info("s", DType::F32, &[2]), info("all", DType::F32, &[4, 2])],
            &[("M", HostTensor::from_vec(vec![4i64], &[]).unwrap())],
        ),
        17,
    );
    let imp = import(&m, &ImportOptions::default()).unwrap();
    let x = HostTensor::from_vec(vec![1.0f32, 10.0], &[2]).unwrap();
    let s0 = HostTensor::from_vec(vec![0.5f32, 0.0], &[2]).unwrap();
    let out = kiln_cpu::run(&imp.graph, &[x, s0]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![4.5, 40.0]);
    assert_eq!(out[1].shape(), &[4, 2]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![1.5, 10.0, 2.5, 20.0, 3.5, 30.0, 4.5, 40.0]);
}
