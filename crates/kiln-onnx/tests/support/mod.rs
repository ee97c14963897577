//! Helpers shared by the importer's test files that are not about building models (those are
//! in `kiln_onnx::builder`): running a model on named inputs, deterministic data, and comparing
//! results with a naive f64 reference.

// Each test file is its own crate and uses only some of these.
#![allow(dead_code)]

use kiln_ir::{DType, Dim, HostTensor};
use kiln_onnx::builder::{graph, model, node, tensor_info};
use kiln_onnx::proto::AttributeProto;
use kiln_onnx::{OnnxModel, import_for_inputs};
use std::collections::HashMap;

/// Imports `m` specialised to the named `inputs` and runs it on the CPU; the error message
/// when either step fails.
pub fn try_run(m: &OnnxModel, inputs: &[(&str, HostTensor)]) -> Result<Vec<HostTensor>, String> {
    let map: HashMap<String, HostTensor> = inputs
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    let (imp, bound) = import_for_inputs(m, &map).map_err(|e| e.to_string())?;
    kiln_cpu::run(&imp.graph, &bound).map_err(|e| e.to_string())
}

/// `try_run` for models that must import and run.
pub fn run(m: &OnnxModel, inputs: &[(&str, HostTensor)]) -> Vec<HostTensor> {
    try_run(m, inputs).unwrap_or_else(|e| panic!("import or run failed: {e}"))
}

/// A test tensor of `v` in `shape`.
pub fn t<T: kiln_ir::Element>(v: Vec<T>, shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v, shape).expect("test tensor")
}

/// Deterministic values in about [-2, 2], different for each `seed`.
pub fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 4001) as f32 / 1000.0
                - 2.0
        })
        .collect()
}

/// Element-wise `|got - want| <= tol * (1 + |want|)`, NaN matching NaN, same lengths.
pub fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "element count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "element {i}: got {g}, want {w}");
    }
}

/// `assert_close` on a tensor's values.
pub fn assert_tensor_close(got: &HostTensor, want: &[f64], tol: f64) {
    assert_close(&got.to_f64_vec(), want, tol);
}

/// `assert_tensor_close` with relative tolerance 1e-4, after checking the shape.
pub fn assert_shaped_close(got: &HostTensor, want: &[f64], shape: &[usize]) {
    assert_eq!(got.shape(), shape, "shape");
    assert_tensor_close(got, want, 1e-4);
}

/// `amp * sin(i * k)` for `i` in `0..n`: smooth, distinct test values.
pub fn sine(n: usize, k: f64, amp: f64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f64 * k).sin() * amp) as f32)
        .collect()
}

/// A model of one `op` node over graph inputs `ins` (name, dtype, dims; an empty name leaves an
/// optional input out) and outputs `outs` ("" skips one) declared f32 with no dims, which the
/// importer infers.
pub fn one_node(
    op: &str,
    ins: &[(&str, DType, Vec<Dim>)],
    attrs: Vec<AttributeProto>,
    outs: &[&str],
    opset: i64,
) -> OnnxModel {
    let names: Vec<&str> = ins.iter().map(|i| i.0).collect();
    let n = node(op, &names, outs, attrs);
    let inputs = ins
        .iter()
        .filter(|i| !i.0.is_empty())
        .map(|(n, d, s)| tensor_info(n, *d, s))
        .collect();
    let outputs = outs
        .iter()
        .filter(|o| !o.is_empty())
        .map(|o| tensor_info(o, DType::F32, &[]))
        .collect();
    model(graph(vec![n], inputs, outputs, &[]), opset)
}
