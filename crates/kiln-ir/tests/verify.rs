//! The verifier accepts built graphs and catches each kind of hand-made corruption, naming the node.

use kiln_ir::*;
use std::sync::Arc;

/// `relu(x @ w + b)` with x: f32[2, 3], w: const [3, 4], b: const [4]; the add is named "fc".
fn mlp() -> (Graph, [NodeId; 6]) {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, [2usize, 3].as_slice()));
    let w = g.constant(HostTensor::from_vec(vec![0.5f32; 12], &[3, 4]).unwrap());
    let b = g.constant(HostTensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[4]).unwrap());
    let mm = g.add(Op::MatMul, &[x, w]).unwrap();
    let fc = g.add_named(Op::Binary(BinaryOp::Add), &[mm, b], Some("fc".into())).unwrap();
    let r = g.add(Op::Unary(UnaryOp::Relu), &[fc]).unwrap();
    g.output(r);
    (g, [x, w, b, mm, fc, r])
}

/// Asserts that `verify` fails with a message containing every one of `subs`.
fn fails(g: &Graph, subs: &[&str]) {
    let e = verify(g).expect_err("corrupted graph passed verification").to_string();
    for s in subs {
        assert!(e.contains(s), "{e:?} does not mention {s:?}");
    }
}

#[test]
fn accepts_built_graphs() {
    let (g, _) = mlp();
    verify(&g).unwrap();
    verify(&Graph::new()).unwrap();
}

#[test]
fn wrong_stored_type() {
    let (mut g, [.., fc, _]) = mlp();
    g.nodes[fc.index()].ty = TensorType::new(DType::F32, [2usize, 5].as_slice());
    fails(&g, &["%4 (fc) add", "f32[2, 5]", "f32[2, 4]"]);
    let (mut g, [.., r]) = mlp();
    g.nodes[r.index()].ty.dtype = DType::F64;
    fails(&g, &["%5 relu", "f64[2, 4]"]);
}

#[test]
fn inputs_out_of_order_or_missing() {
    let (mut g, [.., mm, fc, _]) = mlp();
    g.nodes[mm.index()].inputs[0] = fc;
    fails(&g, &["%3 matmul", "input %4 is not defined before it"]);
    let (mut g, [.., mm, _, _]) = mlp();
    g.nodes[mm.index()].inputs[1] = NodeId(77);
    fails(&g, &["%3 matmul", "%77 does not exist"]);
    let (mut g, [.., mm, _, _]) = mlp();
    g.nodes[mm.index()].inputs[1] = mm;
    fails(&g, &["%3 matmul", "%3 is not defined before it"]);
}

#[test]
fn wrong_arity() {
    let (mut g, [.., fc, _]) = mlp();
    g.nodes[fc.index()].inputs.pop();
    fails(&g, &["%4 (fc) add", "takes 2 inputs, got 1"]);
    let (mut g, [x, w, ..]) = mlp();
    g.nodes[w.index()].inputs.push(x);
    fails(&g, &["%1 const", "takes no inputs"]);
}

#[test]
fn input_type_change_is_caught_at_the_consumer() {
    let (mut g, [x, ..]) = mlp();
    g.nodes[x.index()].ty.dtype = DType::I32;
    fails(&g, &["%3 matmul", "dtype", "i32", "f32"]);
}

#[test]
fn bad_constants() {
    let (mut g, [_, w, ..]) = mlp();
    g.nodes[w.index()].op = Op::Constant(ConstId(9));
    fails(&g, &["%1 const", "constant #9 does not exist"]);
    let (mut g, [_, w, b, ..]) = mlp();
    g.nodes[w.index()].op = Op::Constant(ConstId(1));
    let _ = b;
    fails(&g, &["%1 const", "constant #1 is f32[4]", "f32[3, 4]"]);
    // a same-shaped but non-dense (transposed) tensor
    let (mut g, [_, w, ..]) = mlp();
    let sq = HostTensor::from_vec((0..12).map(|v| v as f32).collect(), &[4, 3]).unwrap();
    let t = sq.with_layout(sq.layout.permute(&[1, 0]).unwrap());
    g.consts[0] = Arc::new(t);
    let _ = w;
    fails(&g, &["%1 const", "not dense"]);
}

#[test]
fn graph_inputs_and_outputs() {
    let (mut g, _) = mlp();
    g.inputs.clear();
    fails(&g, &["%0 (x) input", "not listed"]);
    let (mut g, [_, w, ..]) = mlp();
    g.inputs.push(w);
    fails(&g, &["graph input #1", "%1 const", "not an input node"]);
    let (mut g, [x, ..]) = mlp();
    g.inputs.push(x);
    fails(&g, &["graph input #1", "%0 is listed twice"]);
    let (mut g, _) = mlp();
    g.inputs.push(NodeId(40));
    fails(&g, &["graph input #1", "%40", "does not exist"]);
    let (mut g, _) = mlp();
    g.outputs.push(NodeId(99));
    fails(&g, &["graph output #1", "%99", "does not exist"]);
}

#[test]
fn bad_attribute_is_reported_with_the_node() {
    let (mut g, [.., r]) = mlp();
    g.nodes[r.index()].op = Op::Softmax { axis: 5 };
    g.nodes[r.index()].name = Some("probs".into());
    fails(&g, &["%5 (probs) softmax", "axis 5", "rank 2"]);
}

#[test]
fn labels() {
    let (g, [x, w, _, mm, fc, _]) = mlp();
    assert_eq!(node_label(&g, x), "%0 (x) input");
    assert_eq!(node_label(&g, w), "%1 const");
    assert_eq!(node_label(&g, mm), "%3 matmul");
    assert_eq!(node_label(&g, fc), "%4 (fc) add");
    assert_eq!(node_label(&g, NodeId(50)), "%50 (missing)");
}
