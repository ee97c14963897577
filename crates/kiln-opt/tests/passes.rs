//! Each pass on small hand-built graphs: the op counts it leaves and the outputs it keeps
//! (against the reference interpreter on the original graph).

mod common;

use common::{Rng, assert_same_outputs, count, rand_f32};
use kiln_ir::{
    BinaryOp, DType, Graph, HostTensor, Op, ReduceOp, Shape, SliceAxis, TensorType, UnaryOp, verify,
};
use kiln_opt::passes::{Cse, Dce, Decompose, Fold, Layout, Simplify};
use kiln_opt::{OptOptions, Pass, optimize, parse_disabled, pass_names};
use std::sync::Arc;

fn f32_input(g: &mut Graph, name: &str, shape: &[usize]) -> kiln_ir::NodeId {
    g.input(name, TensorType::new(DType::F32, Shape::fixed(shape)))
}

fn run_pass(p: &dyn Pass, g: &Graph) -> Graph {
    let out = p.run(g).unwrap();
    verify(&out).unwrap();
    out
}

/// Inputs with the awkward floats: signed zeros, NaN, infinities.
fn special_f32(shape: &[usize]) -> HostTensor {
    let pool = [
        -0.0f32,
        0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1.5,
        -2.25,
        3e-39,
    ];
    let n: usize = shape.iter().product();
    HostTensor::from_vec((0..n).map(|i| pool[i % pool.len()]).collect(), shape).unwrap()
}

#[test]
fn fold_evaluates_constant_subgraphs_but_not_big_expands() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[2, 3]);
    let a = g.constant(HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap());
    let b = g.constant(HostTensor::scalar(2.0f32));
    let ab = g.add(Op::Binary(BinaryOp::Mul), &[a, b]).unwrap();
    let e = g.add(Op::Unary(UnaryOp::Exp), &[ab]).unwrap();
    let y = g.add(Op::Binary(BinaryOp::Add), &[x, e]).unwrap();
    // A scalar expanded to 100 elements: bigger than its input and than 64, so it stays.
    let big = g.add(Op::Expand(Shape::fixed(&[10, 10])), &[b]).unwrap();
    let small = g.add(Op::Expand(Shape::fixed(&[4, 4])), &[b]).unwrap();
    g.output(y);
    g.output(big);
    g.output(small);
    let out = run_pass(&Fold, &g);
    assert_eq!(count(&out, "mul"), 0);
    assert_eq!(count(&out, "exp"), 0);
    assert_eq!(count(&out, "add"), 1);
    assert_eq!(count(&out, "expand"), 1, "{out}");
    assert_eq!(out.node(out.outputs[2]).op.name(), "const");
    let x_val = rand_f32(&mut Rng(1), &[2, 3], -1.0, 1.0);
    assert_same_outputs(&g, &out, &[x_val], 0.0);
}

#[test]
fn fold_keeps_nodes_whose_kernel_fails() {
    // Integer division by zero is a run-time error of the graph; folding must not hide it or fail.
    let mut g = Graph::new();
    let a = g.constant(HostTensor::from_vec(vec![4i32, 5], &[2]).unwrap());
    let z = g.constant(HostTensor::from_vec(vec![0i32, 1], &[2]).unwrap());
    let d = g.add(Op::Binary(BinaryOp::Div), &[a, z]).unwrap();
    g.output(d);
    let out = run_pass(&Fold, &g);
    assert_eq!(count(&out, "div"), 1);
    assert!(kiln_cpu::run(&out, &[]).is_err());
}

#[test]
fn fold_integer_and_bool_constants() {
    let mut g = Graph::new();
    let a = g.constant(HostTensor::from_vec(vec![i64::MAX, -3], &[2]).unwrap());
    let one = g.constant(HostTensor::scalar(1i64));
    let s = g.add(Op::Binary(BinaryOp::Add), &[a, one]).unwrap();
    let c = g.add(Op::Binary(BinaryOp::Lt), &[s, a]).unwrap();
    g.output(s);
    g.output(c);
    let out = run_pass(&Fold, &g);
    assert_eq!(count(&out, "add") + count(&out, "lt"), 0);
    let r = kiln_cpu::run(&out, &[]).unwrap();
    assert_eq!(r[0].to_vec::<i64>().unwrap(), vec![i64::MIN, -2]);
    assert_eq!(r[1].to_vec::<bool>().unwrap(), vec![true, false]);
}

/// `x op c` for a scalar constant `c`, as one graph output.
fn bin_const(dtype: DType, op: BinaryOp, c: HostTensor, const_first: bool) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(dtype, Shape::fixed(&[2, 4])));
    let c = g.constant(c);
    let args = if const_first { [c, x] } else { [x, c] };
    let y = g.add(Op::Binary(op), &args).unwrap();
    g.output(y);
    g
}

#[test]
fn simplify_removes_exact_float_identities_only() {
    let x = special_f32(&[2, 4]);
    let cases: [(BinaryOp, f32, bool, bool); 9] = [
        (BinaryOp::Mul, 1.0, false, true),
        (BinaryOp::Mul, 1.0, true, true),
        (BinaryOp::Div, 1.0, false, true),
        (BinaryOp::Sub, 0.0, false, true),
        // x - (-0) turns -0 into +0: not an identity.
        (BinaryOp::Sub, -0.0, false, false),
        // x + 0 turns -0 into +0: not an identity for floats.
        (BinaryOp::Add, 0.0, false, false),
        (BinaryOp::Add, -0.0, false, true),
        (BinaryOp::Add, -0.0, true, true),
        (BinaryOp::Div, 1.0, true, false),
    ];
    for (op, v, first, removed) in cases {
        let g = bin_const(DType::F32, op, HostTensor::scalar(v), first);
        let out = run_pass(&Simplify, &g);
        let left = count(&out, &op.clone_name());
        assert_eq!(
            left,
            usize::from(!removed),
            "{op:?} {v} first={first}: {out}"
        );
        assert_same_outputs(&g, &out, std::slice::from_ref(&x), 0.0);
    }
}

trait OpName {
    fn clone_name(&self) -> String;
}

impl OpName for BinaryOp {
    fn clone_name(&self) -> String {
        Op::Binary(*self).name()
    }
}

#[test]
fn simplify_integer_identities_and_splat_constants() {
    let x = HostTensor::from_vec(vec![i32::MIN, -1, 0, 1, 2, i32::MAX, 7, -7], &[2, 4]).unwrap();
    for (op, v) in [
        (BinaryOp::Add, 0),
        (BinaryOp::Sub, 0),
        (BinaryOp::Mul, 1),
        (BinaryOp::Div, 1),
    ] {
        // An all-equal [4] constant counts as a scalar.
        let g = bin_const(
            DType::I32,
            op,
            HostTensor::from_vec(vec![v; 4], &[4]).unwrap(),
            false,
        );
        let out = run_pass(&Simplify, &g);
        assert_eq!(count(&out, &op.clone_name()), 0, "{op:?}");
        assert_same_outputs(&g, &out, std::slice::from_ref(&x), 0.0);
    }
    // Not all equal: stays.
    let g = bin_const(
        DType::I32,
        BinaryOp::Mul,
        HostTensor::from_vec(vec![1, 1, 2, 1], &[4]).unwrap(),
        false,
    );
    assert_eq!(count(&run_pass(&Simplify, &g), "mul"), 1);
    // Broadcasting grows x: the identity would change the shape, so it stays.
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[4])));
    let one = g.constant(HostTensor::from_vec(vec![1.0f32; 8], &[2, 4]).unwrap());
    let y = g.add(Op::Binary(BinaryOp::Mul), &[x, one]).unwrap();
    g.output(y);
    let out = run_pass(&Simplify, &g);
    assert_eq!(count(&out, "mul"), 1);
    assert_same_outputs(&g, &out, &[special_f32(&[4])], 0.0);
}

#[test]
fn simplify_movement_and_casts() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[2, 3, 4]);
    let c = g.add(Op::Cast(DType::F32), &[x]).unwrap();
    let r0 = g.add(Op::Reshape(Shape::fixed(&[2, 3, 4])), &[c]).unwrap();
    let r1 = g.add(Op::Reshape(Shape::fixed(&[6, 4])), &[r0]).unwrap();
    let r2 = g.add(Op::Reshape(Shape::fixed(&[4, 6])), &[r1]).unwrap();
    let p0 = g.add(Op::Permute(vec![1, 0]), &[r2]).unwrap();
    let p1 = g.add(Op::Permute(vec![0, 1]), &[p0]).unwrap();
    let p2 = g.add(Op::Permute(vec![1, 0]), &[p1]).unwrap();
    let e = g.add(Op::Expand(Shape::fixed(&[4, 6])), &[p2]).unwrap();
    let n1 = g.add(Op::Unary(UnaryOp::Neg), &[e]).unwrap();
    let n2 = g.add(Op::Unary(UnaryOp::Neg), &[n1]).unwrap();
    let full = vec![
        SliceAxis {
            start: -100,
            end: i64::MAX,
            step: 1,
        },
        SliceAxis {
            start: 0,
            end: 6,
            step: 1,
        },
    ];
    let s = g.add(Op::Slice(full), &[n2]).unwrap();
    let rev = vec![
        SliceAxis::FULL,
        SliceAxis {
            start: -1,
            end: i64::MIN,
            step: -1,
        },
    ];
    let s2 = g.add(Op::Slice(rev), &[s]).unwrap();
    let p3 = g.add(Op::Permute(vec![1, 0]), &[s2]).unwrap();
    let p4 = g.add(Op::Permute(vec![1, 0]), &[p3]).unwrap();
    g.output(s);
    g.output(s2);
    g.output(p4);
    let out = run_pass(&Simplify, &g);
    let live = run_pass(&Dce, &out);
    assert_eq!(count(&live, "cast"), 0, "{live}");
    assert_eq!(count(&live, "reshape"), 1, "{live}");
    assert_eq!(count(&live, "permute"), 0, "{live}");
    assert_eq!(count(&live, "expand") + count(&live, "neg"), 0, "{live}");
    assert_eq!(
        count(&live, "slice"),
        1,
        "only the reversing slice stays: {live}"
    );
    assert_eq!(
        live.outputs[2], live.outputs[1],
        "a permute pair is the identity"
    );
    let x_val = rand_f32(&mut Rng(2), &[2, 3, 4], -3.0, 3.0);
    assert_same_outputs(&g, &live, &[x_val], 0.0);
}

#[test]
fn simplify_composes_permutes() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[2, 3, 4]);
    let p = g.add(Op::Permute(vec![2, 0, 1]), &[x]).unwrap();
    let q = g.add(Op::Permute(vec![0, 2, 1]), &[p]).unwrap();
    g.output(q);
    let out = run_pass(&Dce, &run_pass(&Simplify, &g));
    assert_eq!(count(&out, "permute"), 1);
    // Output axis i of q is p's axis [0,2,1][i], which is x's axis [2,0,1][that].
    assert_eq!(out.node(out.outputs[0]).op, Op::Permute(vec![2, 1, 0]));
    assert_same_outputs(
        &g,
        &out,
        &[rand_f32(&mut Rng(3), &[2, 3, 4], -1.0, 1.0)],
        0.0,
    );
}

#[test]
fn simplify_neg_neg_wraps_for_integers() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::I8, Shape::fixed(&[4])));
    let a = g.add(Op::Unary(UnaryOp::Neg), &[x]).unwrap();
    let b = g.add(Op::Unary(UnaryOp::Neg), &[a]).unwrap();
    g.output(b);
    let out = run_pass(&Dce, &run_pass(&Simplify, &g));
    assert_eq!(count(&out, "neg"), 0);
    let xs = HostTensor::from_vec(vec![i8::MIN, -1, 0, i8::MAX], &[4]).unwrap();
    assert_same_outputs(&g, &out, &[xs], 0.0);
}

#[test]
fn cse_merges_identical_nodes_and_small_constants() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[2, 3]);
    let c1 = g.constant(HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap());
    let c2 = g.constant(HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap());
    // Same bits but a different sign of zero: a different constant.
    let z1 = g.constant(HostTensor::scalar(0.0f32));
    let z2 = g.constant(HostTensor::scalar(-0.0f32));
    let a1 = g.add(Op::Binary(BinaryOp::Add), &[x, c1]).unwrap();
    let a2 = g.add(Op::Binary(BinaryOp::Add), &[x, c2]).unwrap();
    let r1 = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: true,
            },
            &[a1],
        )
        .unwrap();
    let r2 = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: false,
            },
            &[a2],
        )
        .unwrap();
    let r3 = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: true,
            },
            &[a2],
        )
        .unwrap();
    let s1 = g.add(Op::Binary(BinaryOp::Sub), &[r1, z1]).unwrap();
    let s2 = g.add(Op::Binary(BinaryOp::Sub), &[r3, z2]).unwrap();
    for o in [r1, r2, r3, s1, s2] {
        g.output(o);
    }
    let out = run_pass(&Cse, &g);
    assert_eq!(count(&out, "add"), 1);
    assert_eq!(count(&out, "reduce_sum"), 2, "keep_dims differs");
    assert_eq!(count(&out, "sub"), 2);
    assert_eq!(count(&out, "const"), 3);
    assert_eq!(out.consts.len(), 3);
    assert_eq!(out.outputs[0], out.outputs[2]);
    assert_same_outputs(&g, &out, &[special_f32(&[2, 3])], 0.0);
}

#[test]
fn dce_drops_dead_nodes_keeps_inputs_and_shares_constants() {
    let mut g = Graph::new();
    let unused = f32_input(&mut g, "unused", &[5]);
    let x = f32_input(&mut g, "x", &[3]);
    let w = Arc::new(HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap());
    let c = g.constant_shared(w.clone());
    let dead_c = g.constant(HostTensor::from_vec(vec![9.0f32; 3], &[3]).unwrap());
    let dead = g.add(Op::Binary(BinaryOp::Mul), &[x, dead_c]).unwrap();
    let _dead2 = g.add(Op::Unary(UnaryOp::Exp), &[dead]).unwrap();
    let y = g.add(Op::Binary(BinaryOp::Mul), &[x, c]).unwrap();
    g.output(y);
    g.output(x);
    let out = run_pass(&Dce, &g);
    assert_eq!(out.nodes.len(), 4, "{out}");
    assert_eq!(out.inputs.len(), 2);
    assert_eq!(
        out.node(out.inputs[0]).op,
        Op::Input {
            name: "unused".into()
        }
    );
    assert_eq!(out.node(out.inputs[1]).op, Op::Input { name: "x".into() });
    assert_eq!(out.consts.len(), 1);
    assert!(
        Arc::ptr_eq(&out.consts[0], &w),
        "the constant is shared, not copied"
    );
    let _ = unused;
    assert_same_outputs(&g, &out, &[special_f32(&[5]), special_f32(&[3])], 0.0);
}

#[test]
fn decompose_pass_leaves_primitives() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[2, 5]);
    let s = g.add(Op::Softmax { axis: 1 }, &[x]).unwrap();
    let ge = g.add(Op::Gelu { tanh_approx: false }, &[s]).unwrap();
    g.output(ge);
    let out = run_pass(&Decompose { keep: None }, &g);
    assert_eq!(count(&out, "softmax") + count(&out, "gelu"), 0);
    common::assert_same_outputs(&g, &out, &[rand_f32(&mut Rng(4), &[2, 5], -4.0, 4.0)], 1e-5);
}

/// A backend's `keep` leaves the composites it names whole (kiln-cuda's attention) and the
/// pass decomposes the rest; without one, attention is decomposed too.
#[test]
fn decompose_keeps_what_the_backend_runs_whole() {
    let mut g = Graph::new();
    let q = f32_input(&mut g, "q", &[2, 3, 4]);
    let k = f32_input(&mut g, "k", &[2, 5, 4]);
    let a = g.add(Op::Attention { causal: false, scale: None }, &[q, k, k]).unwrap();
    let s = g.add(Op::Softmax { axis: 2 }, &[a]).unwrap();
    g.output(s);
    fn attention_only(op: &Op, tys: &[&kiln_ir::TensorType]) -> bool {
        matches!(op, Op::Attention { .. }) && tys.len() == 3
    }
    let kept = run_pass(&Decompose { keep: Some(attention_only) }, &g);
    assert_eq!((count(&kept, "attention"), count(&kept, "softmax")), (1, 0));
    let all = run_pass(&Decompose { keep: None }, &g);
    assert_eq!(count(&all, "attention"), 0);
    let inputs = [rand_f32(&mut Rng(5), &[2, 3, 4], -2.0, 2.0), rand_f32(&mut Rng(6), &[2, 5, 4], -2.0, 2.0)];
    common::assert_same_outputs(&g, &kept, &inputs, 1e-5);
    common::assert_same_outputs(&g, &all, &inputs, 1e-5);
}

#[test]
fn layout_stores_transposed_matmul_weights_row_major_once() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[3, 7]);
    let z = f32_input(&mut g, "z", &[7, 2]);
    // A Linear weight [out, in] = [5, 7] read as its transpose by two matmuls (tied).
    let w = g.constant(rand_f32(&mut Rng(11), &[5, 7], -1.0, 1.0));
    let wt = g.add(Op::Permute(vec![1, 0]), &[w]).unwrap();
    let a = g.add(Op::MatMul, &[x, wt]).unwrap();
    let b = g.add(Op::MatMul, &[x, wt]).unwrap();
    // A row-major constant, a view that keeps unit inner stride, and a non-constant rhs stay.
    let r = g.constant(rand_f32(&mut Rng(12), &[7, 4], -1.0, 1.0));
    let c = g.add(Op::MatMul, &[x, r]).unwrap();
    let d = g.add(Op::MatMul, &[x, z]).unwrap();
    g.output(a);
    g.output(b);
    g.output(c);
    g.output(d);
    let out = run_pass(&Layout, &g);
    let out = run_pass(&Dce, &out);
    assert_eq!(count(&out, "permute"), 0, "{out}");
    assert_eq!(out.consts.len(), 2, "one packed copy for both uses, r kept: {out}");
    for n in out.nodes.iter().filter(|n| n.op == Op::MatMul) {
        if let Op::Constant(c) = out.node(n.inputs[1]).op {
            let t = &out.consts[c.0 as usize];
            assert!(t.is_dense(), "{out}");
        }
    }
    let (wc, rc) = (g.consts[0].clone(), g.consts[1].clone());
    assert!(out.consts.iter().any(|t| Arc::ptr_eq(t, &rc)), "the row-major weight is shared, not copied");
    assert!(!out.consts.iter().any(|t| Arc::ptr_eq(t, &wc)), "the transposed weight is replaced");
    let inputs = [rand_f32(&mut Rng(13), &[3, 7], -2.0, 2.0), rand_f32(&mut Rng(14), &[7, 2], -2.0, 2.0)];
    // The GEMM may sum in another order for another rhs layout: not bit-exact.
    assert_same_outputs(&g, &out, &inputs, 1e-6);
}

#[test]
fn optimize_runs_the_pipeline_and_reports() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[2, 5]);
    let one = g.constant(HostTensor::scalar(1.0f32));
    let two = g.constant(HostTensor::scalar(2.0f32));
    let k = g.add(Op::Binary(BinaryOp::Sub), &[two, one]).unwrap();
    let y = g.add(Op::Binary(BinaryOp::Mul), &[x, k]).unwrap();
    let s = g.add(Op::Softmax { axis: 1 }, &[y]).unwrap();
    g.output(s);
    let (out, reports) = optimize(&g, &OptOptions::default()).unwrap();
    verify(&out).unwrap();
    let names: Vec<&str> = reports.iter().map(|r| r.name).collect();
    assert_eq!(
        names,
        [
            "fold",
            "simplify",
            "bn_fold",
            "pool_first",
            "decompose",
            "fold",
            "simplify",
            "cse",
            "merge_matmuls",
            "layout",
            "dce"
        ]
    );
    assert_eq!(reports[0].nodes_before, g.nodes.len());
    assert_eq!(reports.last().unwrap().nodes_after, out.nodes.len());
    assert_eq!(count(&out, "mul") + count(&out, "softmax"), 0, "{out}");
    assert_same_outputs(&g, &out, &[rand_f32(&mut Rng(5), &[2, 5], -4.0, 4.0)], 1e-5);

    let opts = OptOptions {
        disabled: vec!["simplify".into(), "cse".into()],
        decompose: false,
        ..OptOptions::default()
    };
    let (kept, reports) = optimize(&g, &opts).unwrap();
    let names: Vec<&str> = reports.iter().map(|r| r.name).collect();
    assert_eq!(names, ["fold", "bn_fold", "pool_first", "fold", "merge_matmuls", "layout", "dce"]);
    assert_eq!(count(&kept, "softmax"), 1);
    assert_eq!(count(&kept, "mul"), 1);

    // A backend that packs its weights itself gets no row-major copies: `layout` does not run
    // and a transposed weight stays a view of the original constant.
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[3, 9]);
    let w = g.constant(rand_f32(&mut Rng(15), &[11, 9], -1.0, 1.0));
    let wt = g.add(Op::Permute(vec![1, 0]), &[w]).unwrap();
    let y = g.add(Op::MatMul, &[x, wt]).unwrap();
    g.output(y);
    let packs = OptOptions { packs_weights: true, ..OptOptions::default() };
    let (out, reports) = optimize(&g, &packs).unwrap();
    assert!(reports.iter().all(|r| r.name != "layout"));
    assert!(out.consts.iter().any(|t| Arc::ptr_eq(t, &g.consts[0])), "a view, not a copy: {out}");
    let (copied, _) = optimize(&g, &OptOptions::default()).unwrap();
    assert!(!copied.consts.iter().any(|t| Arc::ptr_eq(t, &g.consts[0])), "{copied}");
}

#[test]
fn disabled_pass_names_are_checked() {
    assert_eq!(
        parse_disabled(" cse, bn_fold ,").unwrap(),
        vec!["cse".to_string(), "bn_fold".to_string()]
    );
    assert!(parse_disabled("").unwrap().is_empty());
    let err = parse_disabled("cse,fuse").unwrap_err().to_string();
    assert!(err.contains("fuse"), "{err}");
    for n in pass_names() {
        assert!(err.contains(n), "{err} lists {n}");
    }
    let g = Graph::new();
    let opts = OptOptions {
        disabled: vec!["nope".into()],
        decompose: true,
        ..OptOptions::default()
    };
    assert!(optimize(&g, &opts).is_err());
    // The environment is read as a whole (this test does not set it).
    if std::env::var(kiln_opt::DISABLE_ENV).is_err() {
        let env = OptOptions::from_env().unwrap();
        assert!(env.disabled.is_empty() && env.decompose && env.target == kiln_opt::Target::Cpu && env.keep.is_none());
    }
}

/// For a GPU, stride-2 convs over few channels become stride-1 convs over 2x2 pixel blocks with
/// the same outputs: odd and even image sizes, odd and even kernels, asymmetric and large
/// padding, with and without a bias; other convs keep their stride.
#[test]
fn space_to_depth_keeps_stride_2_convs_over_few_channels_equal() {
    use kiln_ir::Conv2dAttrs;
    let mut rng = Rng(41);
    let gpu = OptOptions { target: kiln_opt::Target::Gpu, ..OptOptions::default() };
    // (x dims NCHW, kernel, padding [top, left, bottom, right], bias)
    let cases: [([usize; 4], usize, [usize; 4], bool); 6] = [
        ([2, 3, 17, 19], 7, [3; 4], true),
        ([1, 3, 16, 16], 7, [3; 4], false),
        ([2, 1, 9, 8], 3, [1; 4], true),
        ([1, 4, 11, 11], 4, [0, 1, 1, 0], false),
        ([1, 2, 8, 8], 2, [0; 4], true),
        ([1, 3, 12, 12], 5, [4, 4, 4, 4], true),
    ];
    for (x_dims, k, padding, bias) in cases {
        let mut g = Graph::new();
        let x = f32_input(&mut g, "x", &x_dims);
        let w = g.constant(rand_f32(&mut rng, &[8, x_dims[1], k, k], -1.0, 1.0));
        let mut args = vec![x, w];
        if bias {
            args.push(g.constant(rand_f32(&mut rng, &[8], -1.0, 1.0)));
        }
        let attrs = Conv2dAttrs { stride: [2, 2], padding, dilation: [1, 1], groups: 1, channels_last: false };
        let y = g.add(Op::Conv2d(attrs), &args).unwrap();
        let out = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
        g.output(out);
        let (opt, reports) = optimize(&g, &gpu).unwrap();
        verify(&opt).unwrap();
        assert!(reports.iter().any(|r| r.name == "space_to_depth"));
        let strides: Vec<[usize; 2]> = opt.nodes.iter().filter_map(|n| match &n.op {
            Op::Conv2d(a) => Some(a.stride),
            _ => None,
        }).collect();
        assert_eq!(strides, vec![[1, 1]], "{x_dims:?} k{k}: {opt}");
        let xs = [rand_f32(&mut rng, &x_dims, -1.0, 1.0)];
        assert_same_outputs(&g, &opt, &xs, 1e-5);
    }
    // 16 channels (cuDNN has tensor-core kernels), stride 1, and a conv whose windows stop
    // short of the image's last column (the block grid would end inside the image) stay.
    for (c, stride, k, w_dim, padding) in [(16, 2, 3, 8, [1; 4]), (3, 1, 3, 8, [1; 4]), (4, 2, 4, 11, [0, 2, 1, 0])] {
        let mut g = Graph::new();
        let x = f32_input(&mut g, "x", &[1, c, 10, w_dim]);
        let w = g.constant(rand_f32(&mut rng, &[4, c, k, k], -1.0, 1.0));
        let attrs = Conv2dAttrs { stride: [stride; 2], padding, dilation: [1, 1], groups: 1, channels_last: false };
        let y = g.add(Op::Conv2d(attrs), &[x, w]).unwrap();
        g.output(y);
        let (opt, _) = optimize(&g, &gpu).unwrap();
        assert!(opt.nodes.iter().any(|n| matches!(&n.op, Op::Conv2d(a) if a.stride == [stride; 2])), "{opt}");
    }
}
