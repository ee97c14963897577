//! Structural hashing: invariant to names, insertion order and dead nodes; sensitive to
//! everything that changes the computation.

use kiln_ir::*;

fn f32t(dims: &[usize]) -> TensorType {
    TensorType::new(DType::F32, dims)
}

fn scalar(v: f32) -> HostTensor {
    HostTensor::scalar(v)
}

/// `softmax(x + c) - y * c` built with the additions first, names "a"/"b".
fn forward_order() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", f32t(&[2, 3]));
    let y = g.input("y", f32t(&[2, 3]));
    let c = g.constant(scalar(2.0));
    let a = g.add_named(Op::Binary(BinaryOp::Add), &[x, c], Some("a".into())).unwrap();
    let s = g.add(Op::Softmax { axis: 1 }, &[a]).unwrap();
    let b = g.add_named(Op::Binary(BinaryOp::Mul), &[y, c], Some("b".into())).unwrap();
    let o = g.add(Op::Binary(BinaryOp::Sub), &[s, b]).unwrap();
    g.output(o);
    g
}

/// The same DAG, constant first, the product before the sum, other names, an extra copy of the
/// constant and a dead node.
fn other_order() -> Graph {
    let mut g = Graph::new();
    let c1 = g.constant(scalar(2.0));
    let x = g.input("input_0", f32t(&[2, 3]));
    let y = g.input("input_1", f32t(&[2, 3]));
    let b = g.add_named(Op::Binary(BinaryOp::Mul), &[y, c1], Some("prod".into())).unwrap();
    let _dead = g.add(Op::Unary(UnaryOp::Exp), &[b]).unwrap();
    let c2 = g.constant(scalar(2.0));
    let a = g.add(Op::Binary(BinaryOp::Add), &[x, c2]).unwrap();
    let s = g.add_named(Op::Softmax { axis: 1 }, &[a], Some("sm".into())).unwrap();
    let o = g.add_named(Op::Binary(BinaryOp::Sub), &[s, b], Some("out".into())).unwrap();
    g.output(o);
    g
}

#[test]
fn same_dag_same_hash() {
    let h = structural_hash(&forward_order());
    assert_eq!(h, structural_hash(&forward_order()));
    assert_eq!(h, structural_hash(&other_order()));
    assert_ne!(h, [0u8; 32]);
}

/// Rebuilds `forward_order` with one piece changed by `tweak`.
fn variant(tweak: &dyn Fn(&mut Graph)) -> [u8; 32] {
    let mut g = forward_order();
    tweak(&mut g);
    verify(&g).unwrap();
    structural_hash(&g)
}

#[test]
fn any_change_changes_the_hash() {
    let base = structural_hash(&forward_order());
    type Tweak = Box<dyn Fn(&mut Graph)>;
    let cases: Vec<(&str, Tweak)> = vec![
        ("attribute", Box::new(|g: &mut Graph| g.nodes[4].op = Op::LogSoftmax { axis: 1 })),
        ("axis", Box::new(|g: &mut Graph| g.nodes[4].op = Op::Softmax { axis: 0 })),
        ("binary op", Box::new(|g: &mut Graph| g.nodes[5].op = Op::Binary(BinaryOp::Add))),
        ("operand order", Box::new(|g: &mut Graph| g.nodes[6].inputs.reverse())),
        ("constant value", Box::new(|g: &mut Graph| g.consts[0] = std::sync::Arc::new(scalar(2.5)))),
        ("input positions", Box::new(|g: &mut Graph| g.inputs.reverse())),
        ("extra output", Box::new(|g: &mut Graph| g.outputs.push(NodeId(4)))),
        ("input type", Box::new(|g: &mut Graph| {
            // x: f32[2, 3] -> f32[1, 3]; every type downstream stays valid by broadcasting
            g.nodes[0].ty = f32t(&[1, 3]);
            g.nodes[3].ty = f32t(&[1, 3]);
            g.nodes[4].ty = f32t(&[1, 3]);
        })),
    ];
    for (what, tweak) in cases {
        assert_ne!(variant(&*tweak), base, "changing the {what} kept the hash");
    }
}

#[test]
fn output_order_and_float_attributes_matter() {
    let mut g = Graph::new();
    let x = g.input("x", f32t(&[4, 8]));
    let a = g.add(Op::LayerNorm { axis: 1, eps: 1e-5 }, &[x]).unwrap();
    let b = g.add(Op::Gelu { tanh_approx: false }, &[x]).unwrap();
    g.outputs = vec![a, b];
    let h = structural_hash(&g);
    g.outputs = vec![b, a];
    assert_ne!(structural_hash(&g), h);
    g.outputs = vec![a, b];
    g.nodes[a.index()].op = Op::LayerNorm { axis: 1, eps: 1e-6 };
    assert_ne!(structural_hash(&g), h);
    g.nodes[a.index()].op = Op::LayerNorm { axis: 1, eps: 1e-5 };
    assert_eq!(structural_hash(&g), h);
    g.nodes[b.index()].op = Op::Gelu { tanh_approx: true };
    assert_ne!(structural_hash(&g), h);
}

#[test]
fn constants_hash_by_dtype_shape_and_bits() {
    let one = |t: HostTensor| {
        let mut g = Graph::new();
        let c = g.constant(t);
        g.output(c);
        structural_hash(&g)
    };
    let v = |d: Vec<f32>, s: &[usize]| HostTensor::from_vec(d, s).unwrap();
    let base = one(v(vec![1.0, 2.0], &[2]));
    assert_eq!(base, one(v(vec![1.0, 2.0], &[2])));
    assert_ne!(base, one(v(vec![1.0, 2.0], &[2, 1])));
    assert_ne!(base, one(v(vec![2.0, 1.0], &[2])));
    assert_ne!(base, one(HostTensor::from_vec(vec![1.0f64, 2.0], &[2]).unwrap()));
    assert_ne!(one(scalar(0.0)), one(scalar(-0.0)));
    assert_eq!(one(scalar(f32::NAN)), one(scalar(f32::NAN)));
    assert_ne!(one(HostTensor::scalar(1i32)), one(HostTensor::scalar(1u8)));
    assert_ne!(one(HostTensor::scalar(true)), one(HostTensor::scalar(false)));
    // a non-dense view hashes as its logical contents
    let t = v(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let tt = t.with_layout(t.layout.permute(&[1, 0]).unwrap());
    assert_eq!(one(tt), one(v(vec![1.0, 3.0, 2.0, 4.0], &[2, 2])));
}

#[test]
fn input_names_do_not_matter_but_symbols_do() {
    let one = |name: &str, sym: &str| {
        let mut g = Graph::new();
        let x = g.input(name, TensorType { dtype: DType::F32, shape: Shape(vec![Dim::sym(sym), Dim::Fixed(3)]) });
        let r = g.add(Op::Unary(UnaryOp::Tanh), &[x]).unwrap();
        g.output(r);
        structural_hash(&g)
    };
    assert_eq!(one("x", "batch"), one("tokens", "batch"));
    assert_ne!(one("x", "batch"), one("x", "seq"));
}

#[test]
fn unused_inputs_are_part_of_the_signature() {
    let mut g = forward_order();
    let h = structural_hash(&g);
    g.input("extra", f32t(&[1]));
    assert_ne!(structural_hash(&g), h);
}

#[test]
fn malformed_graphs_hash_without_panicking() {
    let mut g = forward_order();
    g.nodes[4].inputs = vec![NodeId(6)];
    g.outputs.push(NodeId(1000));
    g.nodes[2].op = Op::Constant(ConstId(42));
    let h = structural_hash(&g);
    assert_eq!(h, structural_hash(&g));
}
