//! Sibling matmul merging (Q/K/V projections): merged graphs against the reference interpreter
//! on the original, and the cases that must not merge.

mod common;

use common::{Rng, count, max_rel_err, rand_f32};
use kiln_ir::{BinaryOp, DType, Graph, NodeId, Op, Shape, TensorType, UnaryOp, verify};
use kiln_opt::Pass;
use kiln_opt::passes::{Dce, MergeMatmuls};

fn merge(g: &Graph) -> Graph {
    merge_with(g, false)
}

/// The pass with `join_rows` (a backend that packs weights from any layout), then DCE.
fn merge_with(g: &Graph, join_rows: bool) -> Graph {
    let out = Dce.run(&MergeMatmuls { join_rows }.run(g).unwrap()).unwrap();
    verify(&out).unwrap();
    out
}

/// `x [2, 5, K]` times constant weights `[K, n]` for each `n` of `ns` (with a constant bias
/// each when `bias`), each result through its own consumer (relu, or a reshape into heads).
fn siblings(seed: u64, ns: &[usize], bias: bool) -> (Graph, Vec<kiln_ir::HostTensor>) {
    let mut rng = Rng(seed);
    let k = 6;
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[2, 5, k])));
    for (i, &n) in ns.iter().enumerate() {
        let w = g.constant(rand_f32(&mut rng, &[k, n], -1.0, 1.0));
        let mut y = g.add(Op::MatMul, &[x, w]).unwrap();
        if bias {
            let b = g.constant(rand_f32(&mut rng, &[n], -1.0, 1.0));
            // Either operand order of the add.
            let args = if i % 2 == 0 { [y, b] } else { [b, y] };
            y = g.add(Op::Binary(BinaryOp::Add), &args).unwrap();
        }
        let z = if n % 2 == 0 {
            g.add(Op::Reshape(Shape::fixed(&[2, 5, 2, n / 2])), &[y]).unwrap()
        } else {
            g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap()
        };
        g.output(z);
    }
    (g, vec![rand_f32(&mut rng, &[2, 5, k], -1.0, 1.0)])
}

#[test]
fn qkv_like_siblings_become_one_matmul_and_one_add() {
    for (seed, ns, bias) in [(1, vec![4, 4, 4], true), (2, vec![3, 8, 5], true), (3, vec![4, 6], false)] {
        let (g, xs) = siblings(seed, &ns, bias);
        let out = merge(&g);
        assert_eq!(count(&out, "matmul"), 1, "{out}");
        assert_eq!(count(&out, "add"), bias as usize, "{out}");
        assert_eq!(count(&out, "slice"), ns.len(), "{out}");
        let w = out.consts.iter().find(|t| t.shape().len() == 2).unwrap();
        assert_eq!(w.shape(), [6, ns.iter().sum::<usize>()]);
        // Exact: each output element is the same dot product plus the same bias.
        assert_eq!(max_rel_err(&g, &out, &xs), 0.0, "seed {seed}");
    }
}

#[test]
fn matmuls_that_must_not_merge_are_left_alone() {
    let mut rng = Rng(9);
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[3, 4])));
    let x2 = g.input("x2", TensorType::new(DType::F32, Shape::fixed(&[3, 4])));
    let wi = g.input("w", TensorType::new(DType::F32, Shape::fixed(&[4, 2])));
    let w1 = g.constant(rand_f32(&mut rng, &[4, 2], -1.0, 1.0));
    let w2 = g.constant(rand_f32(&mut rng, &[4, 3], -1.0, 1.0));
    let b = g.constant(rand_f32(&mut rng, &[3], -1.0, 1.0));
    // A lone matmul by a constant, one by a graph input, one on another left operand, and one
    // with a bias next to one without: no group of two alike.
    let a = g.add(Op::MatMul, &[x, w1]).unwrap();
    let c = g.add(Op::MatMul, &[x, wi]).unwrap();
    let d = g.add(Op::MatMul, &[x2, w2]).unwrap();
    let d = g.add(Op::Binary(BinaryOp::Add), &[d, b]).unwrap();
    let e = g.add(Op::MatMul, &[x2, w1]).unwrap();
    for v in [a, c, d, e] {
        g.output(v);
    }
    let out = merge(&g);
    assert_eq!(count(&out, "matmul"), 4, "{out}");
    assert_eq!(count(&out, "slice"), 0, "{out}");
    // A matmul read twice is merged without its add (the add stays, on the slice).
    let (mut g, xs) = siblings(4, &[4, 4], true);
    let first = NodeId(g.nodes.iter().position(|n| n.op == Op::MatMul).unwrap() as u32);
    g.output(first);
    let out = merge(&g);
    assert_eq!(count(&out, "matmul"), 2, "only one member has its bias add alone: {out}");
    assert_eq!(max_rel_err(&g, &out, &xs), 0.0);
}

/// Two `Linear`-style projections of `x [3, 6]`: weights stored `[n, 6]` and used transposed.
fn transposed_siblings(seed: u64) -> (Graph, Vec<kiln_ir::HostTensor>) {
    let mut rng = Rng(seed);
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[3, 6])));
    for n in [4, 5] {
        let w = g.constant(rand_f32(&mut rng, &[n, 6], -1.0, 1.0));
        let wt = g.add(Op::Permute(vec![1, 0]), &[w]).unwrap();
        let y = g.add(Op::MatMul, &[x, wt]).unwrap();
        g.output(y);
    }
    (g, vec![rand_f32(&mut rng, &[3, 6], -1.0, 1.0)])
}

#[test]
fn weights_seen_through_views_merge_into_one_row_major_weight() {
    let (g, xs) = transposed_siblings(21);
    let out = merge(&g);
    assert_eq!((count(&out, "matmul"), count(&out, "permute"), count(&out, "slice")), (1, 0, 2), "{out}");
    let w = out.consts.iter().find(|t| t.shape() == [6, 9]).expect("the merged weight");
    assert!(w.is_dense());
    // The GEMM may sum in another order for another rhs layout: not bit-exact.
    assert!(max_rel_err(&g, &out, &xs) < 1e-6);
}

#[test]
fn compiling_the_same_weights_again_shares_the_merged_weight_while_it_is_held() {
    let (g, xs) = transposed_siblings(22);
    let merged = |out: &Graph| out.consts.iter().find(|t| t.shape() == [6, 9]).expect("the merged weight").clone();
    let first = merge(&g);
    let second = merge(&g);
    // The second compile found the first one's weight (same storage), and computes the same.
    assert!(std::sync::Arc::ptr_eq(&merged(&first).storage, &merged(&second).storage));
    assert!(max_rel_err(&g, &second, &xs) < 1e-6);
    // Other weights are other keys.
    let (h, _) = transposed_siblings(23);
    assert!(!std::sync::Arc::ptr_eq(&merged(&merge(&h)).storage, &merged(&first).storage));
    // Once nothing holds it, a compile makes it again, still right.
    drop((first, second));
    assert!(max_rel_err(&g, &merge(&g), &xs) < 1e-6);
}

/// For a backend that packs weights from any layout, transposed weights are merged by joining
/// the stored `[n, 6]` constants' rows (a plain copy) and reading the transpose of the result;
/// a weight that is not such a transpose keeps the row-major merge.
#[test]
fn transposed_weights_merge_by_their_rows_for_a_backend_that_packs_weights() {
    let (g, xs) = transposed_siblings(24);
    let out = merge_with(&g, true);
    assert_eq!((count(&out, "matmul"), count(&out, "permute"), count(&out, "slice")), (1, 1, 2), "{out}");
    let rows = out.consts.iter().find(|t| t.shape() == [9, 6]).expect("the joined rows");
    assert!(rows.is_dense());
    assert!(out.consts.iter().all(|t| t.shape() != [6, 9]), "no row-major copy: {out}");
    assert!(max_rel_err(&g, &out, &xs) < 1e-6);
    // Shared across compiles while held, as the row-major merge is.
    let again = merge_with(&g, true);
    let joined = |o: &Graph| o.consts.iter().find(|t| t.shape() == [9, 6]).expect("the joined rows").clone();
    assert!(std::sync::Arc::ptr_eq(&joined(&out).storage, &joined(&again).storage));
    // Weights stored [K, n] (not transposes) merge row-major as before.
    let (g, xs) = siblings(5, &[4, 4], false);
    let out = merge_with(&g, true);
    assert_eq!((count(&out, "matmul"), count(&out, "permute")), (1, 0), "{out}");
    assert!(max_rel_err(&g, &out, &xs) < 1e-6);
}
