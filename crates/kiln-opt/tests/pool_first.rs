//! `pool_first`: a max pool moved before the non-decreasing pointwise chain feeding it (resnet's
//! stem: BatchNorm as a multiply-add, ReLU, 3x3 max pool), bit for bit the same outputs, NaN and
//! infinities included; and every case where the move would not be exact left alone.

mod common;

use common::{Rng, assert_same_outputs, rand_f32};
use kiln_ir::{BinaryOp, DType, Graph, HostTensor, NodeId, Op, PoolKind, Pool2dAttrs, Shape, TensorType, UnaryOp, verify};
use kiln_opt::Pass;
use kiln_opt::passes::{Dce, PoolFirst};

fn pool(kind: PoolKind, ceil_mode: bool) -> Op {
    Op::Pool2d(Pool2dAttrs { kind, kernel: [3, 3], stride: [2, 2], padding: [1; 4], dilation: [1, 1], ceil_mode })
}

/// `pool(relu(x * s + t))` over a `[2, 3, 9, 8]` input, `s` and `t` constants of `shape`.
fn stem(s: &[f32], t: &[f32], shape: &[usize], op: Op) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[2, 3, 9, 8])));
    let s = g.constant(HostTensor::from_vec(s.to_vec(), shape).unwrap());
    let t = g.constant(HostTensor::from_vec(t.to_vec(), shape).unwrap());
    let y = g.add(Op::Binary(BinaryOp::Mul), &[x, s]).unwrap();
    // The shift on the left: the constant may sit on either side.
    let y = g.add(Op::Binary(BinaryOp::Add), &[t, y]).unwrap();
    let y = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
    let y = g.add(op, &[y]).unwrap();
    g.output(y);
    g
}

/// The pass then dead-code elimination, checked.
fn moved(g: &Graph) -> Graph {
    let out = Dce.run(&PoolFirst.run(g).unwrap()).unwrap();
    verify(&out).unwrap();
    out
}

/// The op reading the graph's input.
fn first_op(g: &Graph) -> &Op {
    let x = g.inputs[0];
    &g.nodes.iter().find(|n| n.inputs.contains(&x)).unwrap().op
}

/// Random values with NaN, infinities and signed zeros among them.
fn inputs(seed: u64) -> Vec<HostTensor> {
    let mut rng = Rng(seed);
    let t = rand_f32(&mut rng, &[2, 3, 9, 8], -2.0, 2.0);
    let mut v = t.to_vec::<f32>().unwrap();
    for (i, special) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0].into_iter().enumerate() {
        v[7 + 31 * i] = special;
    }
    vec![HostTensor::from_vec(v, &[2, 3, 9, 8]).unwrap()]
}

#[test]
fn stem_pool_moves_before_the_multiply_add_and_relu_bit_exactly() {
    let g = stem(&[0.5, 2.0, 1e-3], &[-0.25, 0.0, 3.0], &[3, 1, 1], pool(PoolKind::Max, false));
    let out = moved(&g);
    assert!(matches!(first_op(&out), Op::Pool2d(_)), "the pool reads the input first:\n{out}");
    for seed in 0..4 {
        assert_same_outputs(&g, &out, &inputs(seed), 0.0);
    }
}

#[test]
fn a_pool_stays_where_moving_it_would_not_be_exact() {
    let chan = [3usize, 1, 1];
    let cases: Vec<(&str, Graph)> = vec![
        ("a zero scale", stem(&[0.5, 0.0, 1.0], &[0.0; 3], &chan, pool(PoolKind::Max, false))),
        ("a negative scale", stem(&[0.5, -1.0, 1.0], &[0.0; 3], &chan, pool(PoolKind::Max, false))),
        ("an infinite shift", stem(&[0.5, 1.0, 1.0], &[0.0, f32::INFINITY, 0.0], &chan, pool(PoolKind::Max, false))),
        ("an average pool", stem(&[0.5, 1.0, 1.0], &[0.0; 3], &chan, pool(PoolKind::Avg { count_include_pad: false }, false))),
        ("ceil mode", stem(&[0.5, 1.0, 1.0], &[0.0; 3], &chan, pool(PoolKind::Max, true))),
    ];
    for (why, g) in cases {
        let out = moved(&g);
        assert!(matches!(first_op(&out), Op::Binary(BinaryOp::Mul)), "{why}: moved\n{out}");
        assert_same_outputs(&g, &out, &inputs(1), 0.0);
    }
    // A scale that changes along the row: no longer one map for every tap.
    let along_w: Vec<f32> = (0..8).map(|i| 0.5 + i as f32).collect();
    let g = stem(&along_w, &[0.0; 8], &[8], pool(PoolKind::Max, false));
    assert!(matches!(first_op(&moved(&g)), Op::Binary(BinaryOp::Mul)), "a per-column scale moved");
}

#[test]
fn a_relu_read_elsewhere_stays_and_the_pool_takes_what_is_below_it() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[2, 3, 9, 8])));
    let s = g.constant(HostTensor::from_vec(vec![2.0f32, 1.0, 0.5], &[3, 1, 1]).unwrap());
    let y: NodeId = g.add(Op::Binary(BinaryOp::Mul), &[x, s]).unwrap();
    let r = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
    let p = g.add(pool(PoolKind::Max, false), &[r]).unwrap();
    g.output(p);
    g.output(r);
    let out = moved(&g);
    // The ReLU has two readers: the pool stays on it.
    let pooled = &out.nodes[out.outputs[0].index()];
    assert!(matches!(out.node(pooled.inputs[0]).op, Op::Unary(UnaryOp::Relu)), "{out}");
    assert_same_outputs(&g, &out, &inputs(2), 0.0);
}
