//! The shape of decomposed graphs (the numbers are checked against the kernels in
//! kiln-cpu/tests/decompose.rs): primitives only, inputs/outputs/constants/names kept.

use kiln_ir::*;
use std::sync::Arc;

fn f32t(dims: &[usize]) -> TensorType {
    TensorType::new(DType::F32, dims)
}

fn ops(g: &Graph) -> Vec<String> {
    g.nodes.iter().map(|n| n.op.name()).collect()
}

#[test]
fn softmax_becomes_max_sub_exp_sum_div() {
    let mut g = Graph::new();
    let x = g.input("x", f32t(&[2, 5]));
    let s = g.add_named(Op::Softmax { axis: 1 }, &[x], Some("probs".into())).unwrap();
    g.output(s);
    let d = decompose(&g).unwrap();
    verify(&d).unwrap();
    assert_eq!(ops(&d), ["input", "reduce_max", "sub", "exp", "reduce_sum", "div"]);
    let out = d.node(d.outputs[0]);
    assert_eq!(out.name.as_deref(), Some("probs"));
    assert_eq!(out.ty, f32t(&[2, 5]));
    assert_eq!(d.nodes[1].op, Op::Reduce { op: ReduceOp::Max, axes: vec![1], keep_dims: true });
}

#[test]
fn half_precision_is_computed_in_f32() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F16, [3usize, 4].as_slice()));
    let y = g.add(Op::Gelu { tanh_approx: false }, &[x]).unwrap();
    g.output(y);
    let d = decompose(&g).unwrap();
    verify(&d).unwrap();
    assert_eq!(d.nodes[1].op, Op::Cast(DType::F32));
    assert_eq!(d.node(d.outputs[0]).op, Op::Cast(DType::F16));
    assert_eq!(d.ty(d.outputs[0]).dtype, DType::F16);
    assert!(ops(&d).contains(&"erfc".to_string()), "{d}");
}

#[test]
fn scalars_are_shared_and_constants_kept() {
    let mut g = Graph::new();
    let x = g.input("x", f32t(&[2, 3, 4]));
    let w = g.constant(HostTensor::from_vec(vec![1f32; 4], &[4]).unwrap());
    let a = g.add(Op::LayerNorm { axis: 2, eps: 1e-5 }, &[x, w]).unwrap();
    let b = g.add(Op::LayerNorm { axis: 2, eps: 1e-5 }, &[a, w]).unwrap();
    g.output(b);
    let d = decompose(&g).unwrap();
    verify(&d).unwrap();
    assert!(Arc::ptr_eq(&d.consts[0], &g.consts[0]), "the weight is shared, not copied");
    // one eps constant for both layer norms
    assert_eq!(d.consts.len(), 2, "{d}");
    assert_eq!(d.consts[1].to_f64_vec(), vec![1e-5f32 as f64]);
    let names = ops(&d);
    assert_eq!(names.iter().filter(|n| *n == "reduce_mean").count(), 4);
    assert_eq!(names.iter().filter(|n| *n == "sqrt").count(), 2);
}

#[test]
fn inputs_keep_their_binding_order_and_primitives_are_copied() {
    // A hand-built graph whose input list is not in node order.
    let mut g = Graph::new();
    let a = g.input("a", f32t(&[3]));
    let b = g.input("b", f32t(&[3]));
    g.inputs = vec![b, a];
    let s = g.add_named(Op::Binary(BinaryOp::Sub), &[a, b], Some("diff".into())).unwrap();
    g.output(s);
    g.output(a);
    verify(&g).unwrap();
    let d = decompose(&g).unwrap();
    verify(&d).unwrap();
    let name = |id: NodeId| match &d.node(id).op {
        Op::Input { name } => name.clone(),
        op => panic!("{op:?}"),
    };
    assert_eq!(name(d.inputs[0]), "b");
    assert_eq!(name(d.inputs[1]), "a");
    let sub = d.node(d.outputs[0]);
    assert_eq!(sub.op, Op::Binary(BinaryOp::Sub));
    assert_eq!(sub.name.as_deref(), Some("diff"));
    assert_eq!(name(sub.inputs[0]), "a");
    assert_eq!(name(d.outputs[1]), "a");
    // primitive-only graphs decompose to the same computation
    assert_eq!(structural_hash(&d), structural_hash(&g));
}

#[test]
fn batch_norm_reshapes_parameters_to_the_channel_axis() {
    let mut g = Graph::new();
    let x = g.input("x", f32t(&[2, 3, 4, 4]));
    let p: Vec<NodeId> = (0..4).map(|i| g.input(&format!("p{i}"), f32t(&[3]))).collect();
    let y = g.add(Op::BatchNorm { eps: 1e-5 }, &[x, p[0], p[1], p[2], p[3]]).unwrap();
    g.output(y);
    let d = decompose(&g).unwrap();
    verify(&d).unwrap();
    let reshapes: Vec<&Node> = d.nodes.iter().filter(|n| matches!(n.op, Op::Reshape(_))).collect();
    assert_eq!(reshapes.len(), 4);
    assert!(reshapes.iter().all(|n| n.ty == f32t(&[3, 1, 1])));
}

#[test]
fn malformed_graphs_are_errors() {
    let mut g = Graph::new();
    let x = g.input("x", f32t(&[3]));
    let e = g.add(Op::Unary(UnaryOp::Exp), &[x]).unwrap();
    g.output(e);
    let mut bad = g.clone();
    bad.outputs.push(NodeId(9));
    assert!(decompose(&bad).unwrap_err().to_string().contains("output %9"));
    let mut bad = g.clone();
    bad.nodes[1].inputs = vec![NodeId(1)];
    assert!(decompose(&bad).is_err());
    let mut bad = g;
    bad.inputs.clear();
    assert!(decompose(&bad).unwrap_err().to_string().contains("not in the graph's inputs"));
}
