//! The scheduler against the reference interpreter: graphs (hand-built patterns, decomposed
//! composites, views, dtypes, NaN/Inf, empty and size-1 dims) are scheduled with and without
//! fusion and externs, run through the compiled runner (kernel IR interpreted), and compared
//! with `kiln_cpu::run` on the same inputs.

use kiln_ir::{
    BinaryOp, Conv2dAttrs, DType, Graph, HostTensor, NodeId, Op, PadMode, Pool2dAttrs, PoolKind,
    ReduceOp, Shape, SliceAxis, TensorType, UnaryOp, decompose,
};
use kiln_sched::{ScheduleOptions, schedule};

/// Deterministic values in [-2, 2).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn f32_input(shape: &[usize], seed: u64) -> HostTensor {
    HostTensor::from_vec(values(shape.iter().product(), seed), shape).unwrap()
}

fn input(g: &mut Graph, name: &str, dtype: DType, shape: &[usize]) -> NodeId {
    g.input(name, TensorType::new(dtype, Shape::fixed(shape)))
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

/// Runs `g` through every scheduling mode and compares each output with the interpreter.
fn check(g: &Graph, inputs: &[HostTensor]) {
    let want = kiln_cpu::run(g, inputs).unwrap();
    for opts in [
        ScheduleOptions::default(),
        ScheduleOptions {
            fuse: false,
            ..ScheduleOptions::default()
        },
        ScheduleOptions {
            extern_dtypes: &[],
            ..ScheduleOptions::default()
        },
        ScheduleOptions {
            row_epilogues: false,
            ..ScheduleOptions::default()
        },
    ] {
        let (p, rep) = schedule(g, &opts).unwrap();
        let got = kiln_cpu::compiled::run_interpreted(&p, inputs)
            .unwrap_or_else(|e| panic!("{opts:?}: {e}\n{rep}\n{p:#?}"));
        assert_eq!(got.len(), want.len());
        for (k, (w, o)) in want.iter().zip(&got).enumerate() {
            assert_eq!(w.dtype(), o.dtype(), "output {k} {opts:?}");
            assert_eq!(w.shape(), o.shape(), "output {k} {opts:?}");
            let tol = match w.dtype() {
                DType::F16 | DType::BF16 => 1e-2,
                DType::F32 => 1e-5,
                _ => 0.0,
            };
            let (wv, ov) = (w.to_f64_vec(), o.to_f64_vec());
            for (i, (a, b)) in wv.iter().zip(&ov).enumerate() {
                assert!(
                    close(*a, *b, tol),
                    "output {k} element {i}: want {a}, got {b} ({opts:?})\n{rep}"
                );
            }
        }
    }
}

#[test]
fn pointwise_with_broadcasting_and_literals() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[4, 1, 5]);
    let y = input(&mut g, "y", DType::F32, &[3, 1]);
    let one = g.constant(HostTensor::scalar(1.0f32));
    let s = g.add(Op::Binary(BinaryOp::Add), &[x, y]).unwrap();
    let r = g.add(Op::Unary(UnaryOp::Relu), &[s]).unwrap();
    let t = g.add(Op::Binary(BinaryOp::Sub), &[r, one]).unwrap();
    let c = g.add(Op::Binary(BinaryOp::Gt), &[t, x]).unwrap();
    let w = g.add(Op::Where, &[c, t, y]).unwrap();
    g.output(w);
    g.output(c);
    check(&g, &[f32_input(&[4, 1, 5], 1), f32_input(&[3, 1], 2)]);
}

#[test]
fn softmax_layer_norm_gelu_decomposed() {
    for axis in [0usize, 1, 2] {
        let mut g = Graph::new();
        let x = input(&mut g, "x", DType::F32, &[3, 4, 5]);
        let s = g.add(Op::Softmax { axis }, &[x]).unwrap();
        let l = g.add(Op::LogSoftmax { axis }, &[x]).unwrap();
        g.output(s);
        g.output(l);
        check(&decompose(&g).unwrap(), &[f32_input(&[3, 4, 5], 3)]);
    }
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[2, 3, 8]);
    let w = input(&mut g, "w", DType::F32, &[8]);
    let b = input(&mut g, "b", DType::F32, &[8]);
    let y = g
        .add(Op::LayerNorm { axis: 1, eps: 1e-5 }, &[x, w, b])
        .unwrap();
    let z = g
        .add(Op::LayerNorm { axis: 2, eps: 1e-5 }, &[x, w, b])
        .unwrap();
    let e = g.add(Op::Gelu { tanh_approx: false }, &[z]).unwrap();
    let t = g.add(Op::Gelu { tanh_approx: true }, &[x]).unwrap();
    g.output(y);
    g.output(e);
    g.output(t);
    check(
        &decompose(&g).unwrap(),
        &[
            f32_input(&[2, 3, 8], 4),
            f32_input(&[8], 5),
            f32_input(&[8], 6),
        ],
    );
}

#[test]
fn attention_decomposed_with_mask_and_causal() {
    let mut g = Graph::new();
    let q = input(&mut g, "q", DType::F32, &[2, 3, 4, 8]);
    let k = input(&mut g, "k", DType::F32, &[2, 3, 6, 8]);
    let v = input(&mut g, "v", DType::F32, &[2, 3, 6, 5]);
    let m = input(&mut g, "m", DType::F32, &[4, 6]);
    let a = g
        .add(
            Op::Attention {
                causal: true,
                scale: None,
            },
            &[q, k, v, m],
        )
        .unwrap();
    g.output(a);
    let ins = [
        f32_input(&[2, 3, 4, 8], 7),
        f32_input(&[2, 3, 6, 8], 8),
        f32_input(&[2, 3, 6, 5], 9),
        f32_input(&[4, 6], 10),
    ];
    check(&decompose(&g).unwrap(), &ins);
}

#[test]
fn nan_and_inf_through_softmax_and_reductions() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[4, 3]);
    let s = g.add(Op::Softmax { axis: 1 }, &[x]).unwrap();
    let mx = g
        .add(
            Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![1],
                keep_dims: false,
            },
            &[x],
        )
        .unwrap();
    let mn = g
        .add(
            Op::Reduce {
                op: ReduceOp::Min,
                axes: vec![0],
                keep_dims: true,
            },
            &[x],
        )
        .unwrap();
    let pr = g
        .add(
            Op::Reduce {
                op: ReduceOp::Prod,
                axes: vec![0, 1],
                keep_dims: false,
            },
            &[x],
        )
        .unwrap();
    g.output(s);
    g.output(mx);
    g.output(mn);
    g.output(pr);
    let data = vec![
        1.0f32,
        f32::NAN,
        2.0,
        f32::INFINITY,
        1.0,
        0.0,
        f32::NEG_INFINITY,
        -1.0,
        3.0,
        0.5,
        -0.5,
        2.0,
    ];
    check(
        &decompose(&g).unwrap(),
        &[HostTensor::from_vec(data, &[4, 3]).unwrap()],
    );
}

#[test]
fn non_contiguous_views_slices_pad_concat() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[2, 3, 4]);
    let p = g.add(Op::Permute(vec![2, 0, 1]), &[x]).unwrap(); // [4,2,3]
    let r = g.add(Op::Reshape(Shape::fixed(&[8, 3])), &[p]).unwrap(); // non-contiguous reshape
    let s = g
        .add(
            Op::Slice(vec![
                SliceAxis {
                    start: -1,
                    end: i64::MIN,
                    step: -3,
                },
                SliceAxis {
                    start: 0,
                    end: 3,
                    step: 2,
                },
            ]),
            &[r],
        )
        .unwrap(); // [3, 2]
    let e = g.add(Op::Unary(UnaryOp::Exp), &[s]).unwrap();
    let pad = g
        .add(
            Op::Pad {
                pads: vec![(1, 0), (2, 1)],
                mode: PadMode::Constant(-1.5),
            },
            &[e],
        )
        .unwrap(); // [4, 5]
    let ex = g.add(Op::Expand(Shape::fixed(&[2, 4, 5])), &[pad]).unwrap();
    let y = input(&mut g, "y", DType::F32, &[2, 4, 3]);
    let c = g.add(Op::Concat { axis: 2 }, &[ex, y, ex]).unwrap(); // [2,4,13]
    let t = g.add(Op::Permute(vec![1, 0]), &[r]).unwrap();
    g.output(c);
    g.output(t); // a view that is an output
    g.output(r);
    check(&g, &[f32_input(&[2, 3, 4], 11), f32_input(&[2, 4, 3], 12)]);
}

#[test]
fn integer_and_bool_dtypes() {
    let mut g = Graph::new();
    let a = input(&mut g, "a", DType::I32, &[2, 6]);
    let b = input(&mut g, "b", DType::I32, &[2, 6]);
    let three = g.constant(HostTensor::scalar(-3i32));
    let d = g.add(Op::Binary(BinaryOp::Div), &[a, three]).unwrap();
    let m = g.add(Op::Binary(BinaryOp::Mod), &[a, three]).unwrap();
    let rm = g.add(Op::Binary(BinaryOp::Rem), &[a, three]).unwrap();
    let q = g.add(Op::Binary(BinaryOp::Div), &[a, b]).unwrap(); // eval (divisor not constant)
    let s = g.add(Op::Binary(BinaryOp::Add), &[d, m]).unwrap();
    let s = g.add(Op::Binary(BinaryOp::Mul), &[s, rm]).unwrap();
    let lt = g.add(Op::Binary(BinaryOp::Lt), &[s, q]).unwrap();
    let nt = g.add(Op::Unary(UnaryOp::Not), &[lt]).unwrap();
    let f = g.add(Op::Cast(DType::F32), &[s]).unwrap();
    let sum = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: false,
            },
            &[s],
        )
        .unwrap();
    let mean = g
        .add(
            Op::Reduce {
                op: ReduceOp::Mean,
                axes: vec![0],
                keep_dims: true,
            },
            &[a],
        )
        .unwrap();
    let i8v = g.add(Op::Cast(DType::I8), &[f]).unwrap();
    let i8s = g
        .add(
            Op::Reduce {
                op: ReduceOp::Mean,
                axes: vec![1],
                keep_dims: false,
            },
            &[i8v],
        )
        .unwrap();
    for o in [q, nt, f, sum, mean, i8s] {
        g.output(o);
    }
    let av: Vec<i32> = vec![-7, -3, 0, 2, 9, 100, 5, -1, 13, -13, 6, 1];
    let bv: Vec<i32> = vec![2, 3, -5, 7, 1, 9, -2, 4, 3, 5, 6, 1];
    check(
        &g,
        &[
            HostTensor::from_vec(av, &[2, 6]).unwrap(),
            HostTensor::from_vec(bv, &[2, 6]).unwrap(),
        ],
    );
}

#[test]
fn half_precision_reductions_and_empty_dims() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[3, 40]);
    let h = g.add(Op::Cast(DType::F16), &[x]).unwrap();
    let s = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: true,
            },
            &[h],
        )
        .unwrap();
    let m = g
        .add(
            Op::Reduce {
                op: ReduceOp::Mean,
                axes: vec![1],
                keep_dims: true,
            },
            &[h],
        )
        .unwrap();
    let d = g.add(Op::Binary(BinaryOp::Sub), &[h, m]).unwrap();
    g.output(s);
    g.output(d);
    let e = input(&mut g, "e", DType::F32, &[2, 0, 3]);
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Prod] {
        let r = g
            .add(
                Op::Reduce {
                    op,
                    axes: vec![1],
                    keep_dims: false,
                },
                &[e],
            )
            .unwrap();
        g.output(r);
    }
    let ee = g.add(Op::Unary(UnaryOp::Exp), &[e]).unwrap();
    g.output(ee);
    let one = input(&mut g, "one", DType::F32, &[1, 1, 1]);
    let o = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![0, 2],
                keep_dims: true,
            },
            &[one],
        )
        .unwrap();
    g.output(o);
    let ins = [
        f32_input(&[3, 40], 13),
        HostTensor::from_vec(Vec::<f32>::new(), &[2, 0, 3]).unwrap(),
        f32_input(&[1, 1, 1], 14),
    ];
    check(&g, &ins);
}

#[test]
fn conv_block_matmul_and_eval_ops() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[2, 3, 7, 7]);
    let w = g.constant(HostTensor::from_vec(values(4 * 3 * 9, 20), &[4, 3, 3, 3]).unwrap());
    let bias = g.constant(HostTensor::from_vec(values(4, 21), &[1, 4, 1, 1]).unwrap());
    let skip = input(&mut g, "skip", DType::F32, &[2, 4, 4, 4]);
    let attrs = Conv2dAttrs {
        stride: [2, 2],
        padding: [1, 1, 1, 1],
        dilation: [1, 1],
        groups: 1, channels_last: false,
    };
    let c = g.add(Op::Conv2d(attrs), &[x, w]).unwrap();
    let cb = g.add(Op::Binary(BinaryOp::Add), &[c, bias]).unwrap();
    let r = g.add(Op::Unary(UnaryOp::Relu), &[cb]).unwrap();
    let y = g.add(Op::Binary(BinaryOp::Add), &[r, skip]).unwrap();
    let pool = Pool2dAttrs {
        kind: PoolKind::Max,
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0; 4],
        dilation: [1, 1],
        ceil_mode: false,
    };
    let p = g.add(Op::Pool2d(pool), &[y]).unwrap();
    g.output(y);
    g.output(p);
    // Batched matmul of a permuted operand, then bias; a square matmul read transposed.
    let a = input(&mut g, "a", DType::F32, &[2, 6, 5]);
    let at = g.add(Op::Permute(vec![0, 2, 1]), &[a]).unwrap(); // [2,5,6]
    let bm = input(&mut g, "bm", DType::F32, &[6, 5]);
    let mm = g.add(Op::MatMul, &[at, bm]).unwrap(); // [2,5,5]
    let mt = g.add(Op::Permute(vec![0, 2, 1]), &[mm]).unwrap();
    let sum = g.add(Op::Binary(BinaryOp::Add), &[mm, mt]).unwrap();
    g.output(sum);
    let ins = [
        f32_input(&[2, 3, 7, 7], 22),
        f32_input(&[2, 4, 4, 4], 23),
        f32_input(&[2, 6, 5], 24),
        f32_input(&[6, 5], 25),
    ];
    check(&g, &ins);
    let (prog, rep) = schedule(
        &g,
        &ScheduleOptions::default(),
    )
    .unwrap();
    assert!(
        rep.steps
            .iter()
            .any(|s| s.kind == kiln_sched::StepKindName::ExternEpilogue),
        "{rep}"
    );
    assert!(prog.steps.len() <= 5, "{rep}");
}

#[test]
fn reduction_read_at_another_row_is_not_a_local() {
    // The row sums are read transposed: the planner's first guess (one kernel) cannot hold
    // them as a local, so lowering asks for a second plan with the reduction stored.
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[4, 4]);
    let r = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: true,
            },
            &[x],
        )
        .unwrap();
    let rt = g.add(Op::Permute(vec![1, 0]), &[r]).unwrap();
    let e = g.add(Op::Unary(UnaryOp::Exp), &[x]).unwrap();
    let z = g.add(Op::Binary(BinaryOp::Add), &[e, rt]).unwrap();
    g.output(z);
    check(&g, &[f32_input(&[4, 4], 30)]);
}

fn reduce_sum(g: &mut Graph, x: NodeId, axes: &[usize], keep_dims: bool) -> NodeId {
    let op = Op::Reduce { op: ReduceOp::Sum, axes: axes.to_vec(), keep_dims };
    g.add(op, &[x]).unwrap()
}

#[test]
fn extern_reading_a_reduction_through_an_output_reshape() {
    // The reshape is a graph output in the reduction's kernel; the matmul reads the reduction
    // through it as a strided view, so the reduction itself must be stored too.
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[3, 5, 8]);
    let s = reduce_sum(&mut g, x, &[1, 2], true);
    let v = g.add(Op::Reshape(Shape::fixed(&[3])), &[s]).unwrap();
    let w = g.constant(f32_input(&[3, 2], 41));
    let m = g.add(Op::MatMul, &[v, w]).unwrap();
    g.output(m);
    g.output(v);
    check(&g, &[f32_input(&[3, 5, 8], 40)]);
}

#[test]
fn groups_that_would_read_each_other_stay_apart() {
    // Two reductions a, b of one row; c reads a and b, d reads a and b. Merging c into a's
    // kernel and d into b's would make each kernel wait for the other.
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::I32, &[7]);
    let a = reduce_sum(&mut g, x, &[0], true);
    let p = g.add(Op::Pad { pads: vec![(1, 0)], mode: PadMode::Constant(0.5) }, &[x]).unwrap();
    let b = reduce_sum(&mut g, p, &[0], true);
    let ca = g.add(Op::Cast(DType::Bool), &[a]).unwrap();
    let c = g.add(Op::Where, &[ca, b, a]).unwrap();
    let m = g.add(Op::Binary(BinaryOp::Min), &[a, p]).unwrap();
    let cm = g.add(Op::Cast(DType::Bool), &[m]).unwrap();
    let d = g.add(Op::Where, &[cm, b, m]).unwrap();
    g.output(d);
    g.output(c);
    let xs = HostTensor::from_vec(vec![3i32, -1, 0, 4, -2, 2, -6], &[7]).unwrap();
    check(&g, &[xs]);
}

#[test]
fn matmul_epilogue_over_an_empty_output() {
    // An extern's epilogue splits its row index by the output's dims; a zero dim must not
    // divide by zero.
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[0, 3, 7]);
    let w = g.constant(f32_input(&[7, 4], 43));
    let m = g.add(Op::MatMul, &[x, w]).unwrap();
    let r = g.add(Op::Unary(UnaryOp::Relu), &[m]).unwrap();
    g.output(r);
    check(&g, &[HostTensor::from_vec(Vec::<f32>::new(), &[0, 3, 7]).unwrap()]);
}

/// Steps of `g` scheduled by default, and how many of them are externs with an epilogue.
fn steps_and_epilogues(g: &Graph) -> (usize, usize) {
    let (_, rep) = schedule(g, &ScheduleOptions::default()).unwrap();
    let epi = rep.steps.iter().filter(|s| s.kind == kiln_sched::StepKindName::ExternEpilogue).count();
    (rep.steps.len(), epi)
}

/// A transformer's `h = x @ w + b + res` (x `[2, 5, 12]`, res `[2, 5, 16]`) and
/// `y = layer_norm(h)`: `(h, y)`.
fn matmul_residual_norm(g: &mut Graph) -> (NodeId, NodeId) {
    let x = input(g, "x", DType::F32, &[2, 5, 12]);
    let res = input(g, "res", DType::F32, &[2, 5, 16]);
    let w = g.constant(f32_input(&[12, 16], 50));
    let b = g.constant(f32_input(&[16], 51));
    let m = g.add(Op::MatMul, &[x, w]).unwrap();
    let mb = g.add(Op::Binary(BinaryOp::Add), &[m, b]).unwrap();
    let h = g.add(Op::Binary(BinaryOp::Add), &[mb, res]).unwrap();
    let gamma = g.constant(f32_input(&[16], 52));
    let y = g.add(Op::LayerNorm { axis: 2, eps: 1e-5 }, &[h, gamma, b]).unwrap();
    (h, y)
}

#[test]
fn row_epilogues_layer_norm_softmax_and_global_pool() {
    // bert's `layer_norm(x @ w + b + residual)`: the matmul's rows are the norm's rows.
    let mut g = Graph::new();
    let (_, y) = matmul_residual_norm(&mut g);
    g.output(y);
    let g = decompose(&g).unwrap();
    assert_eq!(steps_and_epilogues(&g), (1, 1), "one matmul step, the norm its epilogue");
    check(&g, &[f32_input(&[2, 5, 12], 53), f32_input(&[2, 5, 16], 54)]);

    // gpt2's pre-norm stream: `h = x @ w + b + res` is stored (the next residual add reads it
    // too) and the next layer norm reduces it: both in the matmul's epilogue.
    let mut g = Graph::new();
    let (h, y) = matmul_residual_norm(&mut g);
    let e = g.add(Op::Unary(UnaryOp::Exp), &[y]).unwrap();
    let w2 = g.constant(f32_input(&[16, 16], 53));
    let f = g.add(Op::MatMul, &[e, w2]).unwrap();
    let z = g.add(Op::Binary(BinaryOp::Add), &[f, h]).unwrap();
    g.output(z);
    let g = decompose(&g).unwrap();
    assert_eq!(steps_and_epilogues(&g), (2, 2), "norm and exp in the first matmul's epilogue, the add in the second's");
    check(&g, &[f32_input(&[2, 5, 12], 53), f32_input(&[2, 5, 16], 54)]);

    // Attention scores: a batched matmul of heads, softmax over its columns; a NaN and an
    // infinity in the queries reach some rows.
    let mut g = Graph::new();
    let q = input(&mut g, "q", DType::F32, &[2, 3, 4, 8]);
    let k = input(&mut g, "k", DType::F32, &[2, 3, 8, 6]);
    let s = g.add(Op::MatMul, &[q, k]).unwrap();
    let p = g.add(Op::Softmax { axis: 3 }, &[s]).unwrap();
    g.output(p);
    let g = decompose(&g).unwrap();
    assert_eq!(steps_and_epilogues(&g), (1, 1));
    let mut qs = values(2 * 3 * 4 * 8, 55);
    qs[3] = f32::NAN;
    qs[40] = f32::INFINITY;
    check(&g, &[HostTensor::from_vec(qs, &[2, 3, 4, 8]).unwrap(), f32_input(&[2, 3, 8, 6], 56)]);

    // A softmax over the matmul's rows (not its columns) is not a row epilogue.
    let mut g = Graph::new();
    let a = input(&mut g, "a", DType::F32, &[6, 4]);
    let w = g.constant(f32_input(&[4, 5], 57));
    let m = g.add(Op::MatMul, &[a, w]).unwrap();
    let p = g.add(Op::Softmax { axis: 0 }, &[m]).unwrap();
    g.output(p);
    let g = decompose(&g).unwrap();
    assert_eq!(steps_and_epilogues(&g), (2, 0));
    check(&g, &[f32_input(&[6, 4], 58)]);

    // resnet's head: relu(conv + bias + skip), then the mean over [H, W], a 1x1 conv's rows
    // (channels) each reduced whole; the sum stays a second output of the epilogue.
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[1, 3, 5, 5]);
    let skip = input(&mut g, "skip", DType::F32, &[1, 4, 5, 5]);
    let w = g.constant(f32_input(&[4, 3, 1, 1], 59));
    let attrs = Conv2dAttrs {
        stride: [1, 1],
        padding: [0; 4],
        dilation: [1, 1],
        groups: 1,
        channels_last: false,
    };
    let c = g.add(Op::Conv2d(attrs), &[x, w]).unwrap();
    let y = g.add(Op::Binary(BinaryOp::Add), &[c, skip]).unwrap();
    let r = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
    let mean = g.add(Op::Reduce { op: ReduceOp::Mean, axes: vec![2, 3], keep_dims: false }, &[r]).unwrap();
    g.output(mean);
    assert_eq!(steps_and_epilogues(&g), (1, 1));
    check(&g, &[f32_input(&[1, 3, 5, 5], 60), f32_input(&[1, 4, 5, 5], 61)]);
    g.output(y);
    check(&g, &[f32_input(&[1, 3, 5, 5], 62), f32_input(&[1, 4, 5, 5], 63)]);

    // The conv paths that finish rows differently: a 3x3 stride-1 conv (Winograd where kiln's
    // GEMM runs), a 7x7 stride-2 stem (conv tiles) and a grouped one, each with a max over
    // [H, W] as its row epilogue.
    for (c, o, hw, k, stride, pad, groups) in [(16, 16, 12, 3, 1, 1, 1), (3, 16, 23, 7, 2, 3, 1), (8, 8, 9, 3, 1, 1, 4)] {
        let mut g = Graph::new();
        let x = input(&mut g, "x", DType::F32, &[1, c, hw, hw]);
        let w = g.constant(f32_input(&[o, c / groups, k, k], 64));
        let attrs = Conv2dAttrs { stride: [stride; 2], padding: [pad; 4], dilation: [1, 1], groups, channels_last: false };
        let y = g.add(Op::Conv2d(attrs), &[x, w]).unwrap();
        let m = g.add(Op::Reduce { op: ReduceOp::Max, axes: vec![2, 3], keep_dims: true }, &[y]).unwrap();
        g.output(m);
        assert_eq!(steps_and_epilogues(&g), (1, 1), "{k}x{k} conv");
        check(&g, &[f32_input(&[1, c, hw, hw], 65)]);
    }
}

/// `attention(q, k, v[, mask])` kept whole: the CPU runner's attention step reads its operands
/// through their views.
fn attention_graph(
    g: &mut Graph,
    q: NodeId,
    k: NodeId,
    v: NodeId,
    mask: Option<NodeId>,
    causal: bool,
    scale: Option<f64>,
) -> NodeId {
    let mut ins = vec![q, k, v];
    ins.extend(mask);
    g.add(Op::Attention { causal, scale }, &ins).unwrap()
}

#[test]
fn attention_step_on_views_masks_and_edge_sizes() {
    // bert's layout: q, k, v are permuted slices of one [B, L, 3 * H * D] projection.
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[2, 5, 3 * 4 * 8]);
    let heads = |g: &mut Graph, part: i64| {
        let axes = vec![
            SliceAxis::FULL,
            SliceAxis::FULL,
            SliceAxis { start: part * 32, end: (part + 1) * 32, step: 1 },
        ];
        let s = g.add(Op::Slice(axes), &[x]).unwrap();
        let r = g.add(Op::Reshape(Shape::fixed(&[2, 5, 4, 8])), &[s]).unwrap();
        g.add(Op::Permute(vec![0, 2, 1, 3]), &[r]).unwrap()
    };
    let (q, k, v) = (heads(&mut g, 0), heads(&mut g, 1), heads(&mut g, 2));
    let a = attention_graph(&mut g, q, k, v, None, false, None);
    g.output(a);
    let (p, rep) = schedule(&g, &ScheduleOptions::default()).unwrap();
    assert_eq!(p.steps.len(), 1, "one attention step on views of x, no copies\n{rep}");
    check(&g, &[f32_input(&[2, 5, 96], 70)]);

    // Causal with fewer queries than keys, an explicit scale, and masks of every broadcast
    // shape: [Lk], [B, 1, 1, Lk] and [Lq, Lk] with -inf (a row of which sees no key: NaN,
    // as in the reference), NaN and an infinite query.
    for (mask_shape, causal) in [(vec![6], true), (vec![2, 1, 1, 6], false), (vec![3, 6], false)] {
        let mut g = Graph::new();
        let q = input(&mut g, "q", DType::F32, &[2, 3, 3, 8]);
        let k = input(&mut g, "k", DType::F32, &[2, 3, 6, 8]);
        let v = input(&mut g, "v", DType::F32, &[2, 1, 6, 5]);
        let m = input(&mut g, "m", DType::F32, &mask_shape);
        let a = attention_graph(&mut g, q, k, v, Some(m), causal, Some(0.3));
        g.output(a);
        let mut ms = values(mask_shape.iter().product(), 71);
        ms[1] = f32::NEG_INFINITY;
        if mask_shape == [3, 6] {
            ms[6..12].fill(f32::NEG_INFINITY);
        }
        let mut qs = values(2 * 3 * 3 * 8, 72);
        qs[9] = f32::NAN;
        qs[30] = f32::INFINITY;
        let ins = [
            HostTensor::from_vec(qs, &[2, 3, 3, 8]).unwrap(),
            f32_input(&[2, 3, 6, 8], 73),
            f32_input(&[2, 1, 6, 5], 74),
            HostTensor::from_vec(ms, &mask_shape).unwrap(),
        ];
        check(&g, &ins);
    }

    // No keys (zeros), a head dim of 0 (uniform weights), one query.
    for (qs, ks, vs) in [
        ([1, 2, 3, 4], [1, 2, 0, 4], [1, 2, 0, 3]),
        ([1, 2, 3, 0], [1, 2, 5, 0], [1, 2, 5, 3]),
        ([1, 2, 1, 4], [1, 2, 5, 4], [1, 2, 5, 3]),
    ] {
        let mut g = Graph::new();
        let q = input(&mut g, "q", DType::F32, &qs);
        let k = input(&mut g, "k", DType::F32, &ks);
        let v = input(&mut g, "v", DType::F32, &vs);
        let a = attention_graph(&mut g, q, k, v, None, false, None);
        g.output(a);
        let ins = [f32_input(&qs, 75), f32_input(&ks, 76), f32_input(&vs, 77)];
        check(&g, &ins);
    }
}
