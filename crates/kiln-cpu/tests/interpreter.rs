//! The graph interpreter: runs small graphs end to end against hand-computed values, binds
//! symbolic dims from its inputs, and rejects inputs that do not fit the graph.

use kiln_cpu::run;
use kiln_ir::*;

fn ty(d: DType, dims: &[usize]) -> TensorType {
    TensorType::new(d, dims)
}

fn sym_ty(d: DType, dims: &[&str]) -> TensorType {
    let dims = dims.iter().map(|s| s.parse::<usize>().map(Dim::Fixed).unwrap_or_else(|_| Dim::sym(s))).collect();
    TensorType { dtype: d, shape: Shape(dims) }
}

fn f32s(v: &[f32], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), shape).unwrap()
}

/// `relu(x @ w + b)`, x: f32[2, 3], w = [[1, 0], [0, 1], [1, -1]], b = [0.5, -10].
fn mlp() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", ty(DType::F32, &[2, 3]));
    let w = g.constant(f32s(&[1.0, 0.0, 0.0, 1.0, 1.0, -1.0], &[3, 2]));
    let b = g.constant(f32s(&[0.5, -10.0], &[2]));
    let mm = g.add(Op::MatMul, &[x, w]).unwrap();
    let a = g.add_named(Op::Binary(BinaryOp::Add), &[mm, b], Some("fc".into())).unwrap();
    let r = g.add(Op::Unary(UnaryOp::Relu), &[a]).unwrap();
    g.output(r);
    g
}

#[test]
fn runs_a_small_mlp() {
    let x = f32s(&[1.0, 2.0, 3.0, -1.0, 20.0, 0.0], &[2, 3]);
    let out = run(&mlp(), &[x]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].shape(), &[2, 2]);
    // row 0: [1+3, 2-3] + b = [4.5, -11] -> relu; row 1: [-1, 20] + b = [-0.5, 10]
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![4.5, 0.0, 0.0, 10.0]);
}

#[test]
fn non_contiguous_and_nan_inputs() {
    // x given as the transpose of a [3, 2] tensor: the same logical values as above.
    let xt = f32s(&[1.0, -1.0, 2.0, 20.0, 3.0, 0.0], &[3, 2]);
    let x = xt.with_layout(xt.layout.permute(&[1, 0]).unwrap());
    let out = run(&mlp(), &[x]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![4.5, 0.0, 0.0, 10.0]);
    let x = f32s(&[f32::NAN, 0.0, 0.0, f32::INFINITY, 0.0, 0.0], &[2, 3]);
    let v = run(&mlp(), &[x]).unwrap()[0].to_vec::<f32>().unwrap();
    // row 0 is all NaN; row 1 is [inf * 1, inf * 0 (NaN)] + b
    assert!(v[0].is_nan() && v[1].is_nan(), "{v:?}");
    assert_eq!(v[2], f32::INFINITY);
    assert!(v[3].is_nan(), "{v:?}");
}

#[test]
fn outputs_may_repeat_and_include_inputs_and_constants() {
    let mut g = Graph::new();
    let x = g.input("x", ty(DType::I32, &[3]));
    let c = g.constant(HostTensor::from_vec(vec![10i32, 20, 30], &[3]).unwrap());
    let s = g.add(Op::Binary(BinaryOp::Mul), &[x, c]).unwrap();
    let gt = g.add(Op::Binary(BinaryOp::Gt), &[s, c]).unwrap();
    let w = g.add(Op::Where, &[gt, s, c]).unwrap();
    for o in [w, x, c, w, gt] {
        g.output(o);
    }
    let x = HostTensor::from_vec(vec![2i32, -1, 1], &[3]).unwrap();
    let out = run(&g, &[x]).unwrap();
    assert_eq!(out.len(), 5);
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![20, 20, 30]);
    assert_eq!(out[1].to_vec::<i32>().unwrap(), vec![2, -1, 1]);
    assert_eq!(out[2].to_vec::<i32>().unwrap(), vec![10, 20, 30]);
    assert_eq!(out[3].to_vec::<i32>().unwrap(), vec![20, 20, 30]);
    assert_eq!(out[4].to_vec::<bool>().unwrap(), vec![true, false, false]);
}

#[test]
fn empty_tensors_flow_through() {
    let mut g = Graph::new();
    let x = g.input("x", ty(DType::F32, &[0, 3]));
    let e = g.add(Op::Unary(UnaryOp::Exp), &[x]).unwrap();
    let s = g.add(Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keep_dims: false }, &[e]).unwrap();
    g.output(e);
    g.output(s);
    let out = run(&g, &[HostTensor::zeros(DType::F32, &[0, 3])]).unwrap();
    assert_eq!(out[0].shape(), &[0, 3]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![0.0; 3]);
}

#[test]
fn graph_without_inputs() {
    let mut g = Graph::new();
    let c = g.constant(HostTensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2]).unwrap());
    let t = g.add(Op::Permute(vec![1, 0]), &[c]).unwrap();
    let r = g.add(Op::Reshape(Shape::fixed(&[4])), &[t]).unwrap();
    g.output(r);
    assert_eq!(run(&g, &[]).unwrap()[0].to_vec::<i64>().unwrap(), vec![1, 3, 2, 4]);
}

fn err_text(r: Result<Vec<HostTensor>>) -> String {
    r.expect_err("should fail").to_string()
}

#[test]
fn rejects_inputs_that_do_not_fit() {
    let g = mlp();
    let e = err_text(run(&g, &[]));
    assert!(e.contains("takes 1 inputs, 0 were given"), "{e}");
    let e = err_text(run(&g, &[HostTensor::zeros(DType::F64, &[2, 3])]));
    assert!(e.starts_with("dtype error") && e.contains("'x'") && e.contains("f32") && e.contains("f64"), "{e}");
    let e = err_text(run(&g, &[HostTensor::zeros(DType::F32, &[3, 2])]));
    assert!(e.starts_with("shape error") && e.contains("'x'") && e.contains("[2, 3]") && e.contains("[3, 2]"), "{e}");
    let e = err_text(run(&g, &[HostTensor::zeros(DType::F32, &[6])]));
    assert!(e.contains("'x'") && e.contains("[6]"), "{e}");
}

/// `x + y` with x, y: f32[batch, 2], reshaped to [batch, 2, 1] (a symbolic reshape target).
fn batched() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", sym_ty(DType::F32, &["batch", "2"]));
    let y = g.input("y", sym_ty(DType::F32, &["batch", "2"]));
    let s = g.add(Op::Binary(BinaryOp::Add), &[x, y]).unwrap();
    let r = g.add(Op::Reshape(Shape(vec![Dim::sym("batch"), Dim::Fixed(2), Dim::Fixed(1)])), &[s]).unwrap();
    g.output(r);
    g
}

#[test]
fn symbolic_batch_binds_per_run() {
    let g = batched();
    verify(&g).unwrap();
    for b in [1usize, 3, 0] {
        let x = HostTensor::from_vec((0..2 * b).map(|v| v as f32).collect(), &[b, 2]).unwrap();
        let y = HostTensor::from_vec(vec![100f32; 2 * b], &[b, 2]).unwrap();
        let out = run(&g, &[x, y]).unwrap();
        assert_eq!(out[0].shape(), &[b, 2, 1]);
        let want: Vec<f32> = (0..2 * b).map(|v| v as f32 + 100.0).collect();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), want);
    }
}

#[test]
fn conflicting_symbolic_dims_are_an_error() {
    let g = batched();
    let e = err_text(run(&g, &[HostTensor::zeros(DType::F32, &[2, 2]), HostTensor::zeros(DType::F32, &[3, 2])]));
    assert!(e.starts_with("shape error") && e.contains("'y'") && e.contains("batch") && e.contains('3') && e.contains('2'), "{e}");
    // the fixed dim next to the symbol is still checked
    let e = err_text(run(&g, &[HostTensor::zeros(DType::F32, &[2, 5]), HostTensor::zeros(DType::F32, &[2, 5])]));
    assert!(e.contains("'x'") && e.contains("[batch, 2]"), "{e}");
}

#[test]
fn unbound_symbol_in_an_attribute_is_an_error() {
    let mut g = Graph::new();
    let x = g.input("x", ty(DType::F32, &[1, 4]));
    let e = g.add(Op::Expand(Shape(vec![Dim::sym("n"), Dim::Fixed(4)])), &[x]).unwrap();
    g.output(e);
    let msg = err_text(run(&g, &[HostTensor::zeros(DType::F32, &[1, 4])]));
    assert!(msg.contains("expand") && msg.contains('n') && msg.contains("not bound"), "{msg}");
}

#[test]
fn kernel_errors_name_the_node() {
    let mut g = Graph::new();
    let d = g.input("table", ty(DType::F32, &[3, 2]));
    let i = g.input("ids", ty(DType::I64, &[2]));
    let r = g.add_named(Op::Gather { axis: 0 }, &[d, i], Some("embed".into())).unwrap();
    g.output(r);
    let table = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]);
    let ok = run(&g, &[table.clone(), HostTensor::from_vec(vec![2i64, -3], &[2]).unwrap()]).unwrap();
    assert_eq!(ok[0].to_vec::<f32>().unwrap(), vec![4.0, 5.0, 0.0, 1.0]);
    let e = err_text(run(&g, &[table, HostTensor::from_vec(vec![0i64, 7], &[2]).unwrap()]));
    assert!(e.contains("%2") && e.contains("embed"), "{e}");
}
