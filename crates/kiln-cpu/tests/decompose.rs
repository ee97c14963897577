//! Decomposed composites against the direct kernels: every composite op, on random inputs
//! (broadcast parameters, size-1 and empty dims, non-contiguous inputs, half precision,
//! NaN/Inf), must give the same numbers through its primitive expansion.

use kiln_cpu::run;
use kiln_ir::*;

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `[-scale, scale)`.
    fn vec(&mut self, n: usize, scale: f64) -> Vec<f64> {
        (0..n).map(|_| (self.uniform() * 2.0 - 1.0) * scale).collect()
    }
}

fn tensor(d: DType, v: &[f64], shape: &[usize]) -> HostTensor {
    with_dtype!(d, T, HostTensor::from_vec(v.iter().map(|&x| <T as Element>::from_f64(x)).collect::<Vec<T>>(), shape).unwrap())
}

fn random(rng: &mut Rng, d: DType, shape: &[usize], scale: f64) -> HostTensor {
    tensor(d, &rng.vec(shape.iter().product(), scale), shape)
}

/// Runs `op` on `args` as a one-node graph, directly and decomposed, and compares.
fn check(op: Op, args: &[HostTensor], tol: f64) {
    let mut g = Graph::new();
    let ids: Vec<NodeId> = args
        .iter()
        .enumerate()
        .map(|(i, a)| g.input(&format!("a{i}"), TensorType::new(a.dtype(), a.ir_shape())))
        .collect();
    let y = g.add(op.clone(), &ids).unwrap();
    g.output(y);
    check_graph(&g, args, tol, &format!("{op:?}"));
}

fn check_graph(g: &Graph, args: &[HostTensor], tol: f64, what: &str) {
    let d = decompose(g).unwrap();
    verify(&d).unwrap();
    for n in &d.nodes {
        assert!(
            !matches!(
                n.op,
                Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::LayerNorm { .. } | Op::BatchNorm { .. } | Op::Gelu { .. } | Op::Attention { .. }
            ),
            "{what}: composite left in\n{d}"
        );
    }
    let want = run(g, args).unwrap();
    let got = run(&d, args).unwrap_or_else(|e| panic!("{what}: decomposed graph failed: {e}\n{d}"));
    assert_eq!(want.len(), got.len());
    for (w, o) in want.iter().zip(&got) {
        assert_eq!(w.dtype(), o.dtype(), "{what}");
        assert_eq!(w.shape(), o.shape(), "{what}");
        for (i, (a, b)) in w.to_f64_vec().iter().zip(o.to_f64_vec()).enumerate() {
            let same = (a.is_nan() && b.is_nan()) || a == &b || (a - b).abs() <= tol * (1.0 + a.abs());
            assert!(same, "{what}: element {i}: direct {a} vs decomposed {b}\n{d}");
        }
    }
}

const TOL: f64 = 1e-5;
/// Half precision: the decomposition rounds once to f16/bf16 as the kernel does, but its f32
/// intermediates may land on the other side of a rounding boundary (one ulp).
const TOL_F16: f64 = 2e-3;
const TOL_BF16: f64 = 1.6e-2;

fn tol(d: DType) -> f64 {
    match d {
        DType::F16 => TOL_F16,
        DType::BF16 => TOL_BF16,
        _ => TOL,
    }
}

#[test]
fn softmax_and_log_softmax() {
    let mut rng = Rng(1);
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (shape, axis) in [(vec![3, 5], 1), (vec![2, 4, 3], 1), (vec![4, 3], 0), (vec![3, 1], 1), (vec![0, 4], 1), (vec![2, 0], 1), (vec![7], 0)] {
            let x = random(&mut rng, d, &shape, 8.0);
            check(Op::Softmax { axis }, std::slice::from_ref(&x), tol(d));
            check(Op::LogSoftmax { axis }, &[x], tol(d));
        }
    }
}

#[test]
fn softmax_special_values() {
    let inf = f64::INFINITY;
    // rows: plain, one -inf, all -inf, a NaN, a +inf
    let v = [1.0, 2.0, 3.0, 0.5, -inf, 2.0, -inf, -inf, -inf, 1.0, f64::NAN, 0.0, 1.0, inf, 0.0];
    let x = tensor(DType::F32, &v, &[5, 3]);
    check(Op::Softmax { axis: 1 }, std::slice::from_ref(&x), TOL);
    check(Op::LogSoftmax { axis: 1 }, &[x], TOL);
}

#[test]
fn softmax_of_a_non_contiguous_input() {
    let mut rng = Rng(2);
    let x = random(&mut rng, DType::F32, &[4, 3, 5], 4.0);
    let xt = x.with_layout(x.layout.permute(&[2, 0, 1]).unwrap());
    check(Op::Softmax { axis: 2 }, std::slice::from_ref(&xt), TOL);
    let col = random(&mut rng, DType::F32, &[3, 1], 4.0);
    let wide = col.with_layout(col.layout.broadcast_to(&[2, 3, 6]).unwrap());
    check(Op::LogSoftmax { axis: 0 }, &[wide], TOL);
}

#[test]
fn layer_norm() {
    let mut rng = Rng(3);
    for d in [DType::F32, DType::F64, DType::F16] {
        let x = random(&mut rng, d, &[2, 3, 4], 3.0);
        let s4 = random(&mut rng, d, &[4], 2.0);
        let b34 = random(&mut rng, d, &[3, 4], 2.0);
        let s1 = random(&mut rng, d, &[1], 2.0);
        for eps in [1e-5, 0.5] {
            check(Op::LayerNorm { axis: 2, eps }, std::slice::from_ref(&x), tol(d));
            check(Op::LayerNorm { axis: 2, eps }, &[x.clone(), s4.clone()], tol(d));
            check(Op::LayerNorm { axis: 1, eps }, &[x.clone(), s4.clone(), b34.clone()], tol(d));
            check(Op::LayerNorm { axis: 0, eps }, &[x.clone(), s1.clone(), b34.clone()], tol(d));
        }
    }
    let x = random(&mut rng, DType::F32, &[3, 1], 3.0);
    check(Op::LayerNorm { axis: 1, eps: 1e-5 }, &[x], TOL);
    let x = tensor(DType::F32, &[1.0, f64::NAN, 2.0, 3.0, 4.0, f64::INFINITY], &[2, 3]);
    check(Op::LayerNorm { axis: 1, eps: 1e-5 }, &[x], TOL);
    let x = HostTensor::zeros(DType::F32, &[0, 5]);
    check(Op::LayerNorm { axis: 1, eps: 1e-5 }, &[x], TOL);
}

#[test]
fn batch_norm() {
    let mut rng = Rng(4);
    for (d, shape) in [(DType::F32, vec![2, 3, 4, 5]), (DType::F64, vec![4, 3]), (DType::F32, vec![2, 3, 7]), (DType::F16, vec![1, 3, 2, 2]), (DType::F32, vec![0, 3, 2])] {
        let x = random(&mut rng, d, &shape, 3.0);
        let c = shape[1];
        let var = tensor(d, &rng.vec(c, 1.0).iter().map(|v| v.abs()).collect::<Vec<_>>(), &[c]);
        let args = [x, random(&mut rng, d, &[c], 2.0), random(&mut rng, d, &[c], 2.0), random(&mut rng, d, &[c], 2.0), var];
        check(Op::BatchNorm { eps: 1e-5 }, &args, tol(d));
    }
    // non-contiguous x: NHWC storage viewed as NCHW
    let nhwc = random(&mut rng, DType::F32, &[2, 4, 5, 3], 3.0);
    let x = nhwc.with_layout(nhwc.layout.permute(&[0, 3, 1, 2]).unwrap());
    let p = |rng: &mut Rng| random(rng, DType::F32, &[3], 1.0);
    let args = [x, p(&mut rng), p(&mut rng), p(&mut rng), tensor(DType::F32, &[0.5, 1.0, 2.0], &[3])];
    check(Op::BatchNorm { eps: 1e-3 }, &args, TOL);
}

#[test]
fn gelu_both_forms() {
    let mut rng = Rng(5);
    let special = [0.0, -0.0, 1.0, -1.0, 6.0, -6.0, 30.0, -30.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN];
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for tanh_approx in [false, true] {
            check(Op::Gelu { tanh_approx }, &[random(&mut rng, d, &[4, 5], 5.0)], tol(d));
            check(Op::Gelu { tanh_approx }, &[tensor(d, &special, &[special.len()])], tol(d));
            check(Op::Gelu { tanh_approx }, &[HostTensor::zeros(d, &[2, 0])], tol(d));
        }
    }
}

#[test]
fn attention() {
    let mut rng = Rng(6);
    for d in [DType::F32, DType::F64, DType::F16] {
        let q = random(&mut rng, d, &[2, 3, 4, 8], 1.5);
        let k = random(&mut rng, d, &[2, 3, 6, 8], 1.5);
        let v = random(&mut rng, d, &[2, 3, 6, 5], 1.5);
        let mask = random(&mut rng, d, &[4, 6], 2.0);
        for causal in [false, true] {
            for scale in [None, Some(0.3)] {
                let a = Op::Attention { causal, scale };
                check(a.clone(), &[q.clone(), k.clone(), v.clone()], tol(d));
                check(a, &[q.clone(), k.clone(), v.clone(), mask.clone()], tol(d));
            }
        }
    }
    // broadcast batch dims, a rank-2 problem, Lq > Lk with a causal mask (rows seeing no key are NaN)
    let q = random(&mut rng, DType::F32, &[2, 1, 3, 4], 1.0);
    let k = random(&mut rng, DType::F32, &[1, 2, 5, 4], 1.0);
    let v = random(&mut rng, DType::F32, &[2, 2, 5, 3], 1.0);
    check(Op::Attention { causal: true, scale: None }, &[q, k, v], TOL);
    let q = random(&mut rng, DType::F32, &[5, 4], 1.0);
    let k = random(&mut rng, DType::F32, &[3, 4], 1.0);
    let v = random(&mut rng, DType::F32, &[3, 2], 1.0);
    check(Op::Attention { causal: false, scale: None }, &[q.clone(), k.clone(), v.clone()], TOL);
    check(Op::Attention { causal: true, scale: None }, &[q, k, v], TOL);
    // a -inf mask entry, size-1 dims, and a transposed (non-contiguous) k
    let q = random(&mut rng, DType::F32, &[1, 1, 4], 1.0);
    let kt = random(&mut rng, DType::F32, &[1, 4, 2], 1.0);
    let k = kt.with_layout(kt.layout.permute(&[0, 2, 1]).unwrap());
    let v = random(&mut rng, DType::F32, &[1, 2, 3], 1.0);
    let mask = tensor(DType::F32, &[0.0, f64::NEG_INFINITY], &[2]);
    check(Op::Attention { causal: false, scale: None }, &[q, k, v, mask], TOL);
}

#[test]
fn graphs_with_symbolic_batch_and_other_ops() {
    // x: f32[batch, 6] -> layer_norm -> gelu -> softmax, plus a primitive node kept as is.
    let mut g = Graph::new();
    let x = g.input("x", TensorType { dtype: DType::F32, shape: Shape(vec![Dim::sym("batch"), Dim::Fixed(6)]) });
    let s = g.constant(HostTensor::from_vec(vec![0.5f32, 1.0, 1.5, 2.0, 2.5, 3.0], &[6]).unwrap());
    let ln = g.add_named(Op::LayerNorm { axis: 1, eps: 1e-5 }, &[x, s], Some("ln".into())).unwrap();
    let ge = g.add(Op::Gelu { tanh_approx: true }, &[ln]).unwrap();
    let sm = g.add(Op::Softmax { axis: 1 }, &[ge]).unwrap();
    let ex = g.add(Op::Unary(UnaryOp::Exp), &[x]).unwrap();
    g.output(sm);
    g.output(ex);
    let d = decompose(&g).unwrap();
    assert_eq!(d.inputs.len(), 1);
    assert_eq!(d.ty(d.inputs[0]), g.ty(g.inputs[0]));
    assert!(d.nodes.iter().any(|n| n.name.as_deref() == Some("ln")), "{d}");
    let mut rng = Rng(7);
    for b in [1, 4] {
        check_graph(&g, &[random(&mut rng, DType::F32, &[b, 6], 3.0)], TOL, "symbolic batch");
    }
}

#[test]
fn unsupported_symbolic_attention_is_an_error() {
    let mut g = Graph::new();
    let q = g.input("q", TensorType { dtype: DType::F32, shape: Shape(vec![Dim::sym("s"), Dim::sym("d")]) });
    let a = g.add(Op::Attention { causal: false, scale: None }, &[q, q, q]).unwrap();
    g.output(a);
    let e = decompose(&g).unwrap_err().to_string();
    assert!(e.contains("attention") && e.contains("head dim"), "{e}");
    let mut g = Graph::new();
    let q = g.input("q", TensorType { dtype: DType::F32, shape: Shape(vec![Dim::sym("s"), Dim::Fixed(4)]) });
    let a = g.add(Op::Attention { causal: true, scale: None }, &[q, q, q]).unwrap();
    g.output(a);
    let e = decompose(&g).unwrap_err().to_string();
    assert!(e.contains("causal") && e.contains("fixed sequence"), "{e}");
}

/// True when the decomposition of a one-node `op` graph still holds a pool2d node.
fn keeps_pool(op: &Op, x: &HostTensor) -> bool {
    let mut g = Graph::new();
    let i = g.input("x", TensorType::new(x.dtype(), x.ir_shape()));
    let y = g.add(op.clone(), &[i]).unwrap();
    g.output(y);
    decompose(&g).unwrap().nodes.iter().any(|n| matches!(n.op, Op::Pool2d(_)))
}

#[test]
fn max_pool_becomes_max_of_strided_taps_exactly() {
    let mut rng = Rng(77);
    let pool = |kernel, stride, padding, dilation, ceil_mode| {
        Op::Pool2d(Pool2dAttrs { kind: PoolKind::Max, kernel, stride, padding, dilation, ceil_mode })
    };
    let cases = [
        // ResNet's stem pool, unpadded, asymmetric padding, dilation, ceil mode reaching past
        // the bottom/right padding, a window wider than the input with padding, 1x1.
        (pool([3, 3], [2, 2], [1, 1, 1, 1], [1, 1], false), vec![2, 3, 9, 8]),
        (pool([2, 2], [2, 2], [0; 4], [1, 1], false), vec![1, 2, 6, 7]),
        (pool([3, 2], [1, 2], [1, 0, 0, 1], [1, 1], false), vec![1, 3, 5, 6]),
        (pool([2, 3], [2, 1], [1, 1, 1, 1], [2, 2], false), vec![1, 2, 7, 7]),
        (pool([3, 3], [2, 2], [1, 1, 1, 1], [1, 1], true), vec![1, 2, 8, 6]),
        (pool([4, 4], [1, 1], [2, 2, 2, 2], [1, 1], false), vec![1, 1, 3, 3]),
        (pool([1, 1], [2, 3], [0; 4], [1, 1], true), vec![2, 1, 5, 7]),
    ];
    for (op, shape) in &cases {
        for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let mut x = random(&mut rng, d, shape, 3.0);
            if d == DType::F32 {
                // NaN wins over everything, -inf and +inf pass through.
                let mut v = x.to_f64_vec();
                v[0] = f64::NAN;
                let n = v.len();
                v[n / 2] = f64::INFINITY;
                v[n - 1] = f64::NEG_INFINITY;
                x = tensor(d, &v, shape);
            }
            assert!(!keeps_pool(op, &x), "{op:?} {d} was not decomposed");
            check(op.clone(), &[x], 0.0);
        }
        // A non-contiguous input (a transposed view) decomposes the same.
        let t = random(&mut rng, DType::F32, &[shape[0], shape[1], shape[3], shape[2]], 1.0);
        let t = t.with_layout(t.layout.permute(&[0, 1, 3, 2]).unwrap());
        check(op.clone(), &[t], 0.0);
    }
    // Kept as one op: average pools, integer inputs, windows of more than 16 taps, empty outputs.
    let x = random(&mut rng, DType::F32, &[1, 1, 9, 9], 1.0);
    let avg = Op::Pool2d(Pool2dAttrs {
        kind: PoolKind::Avg { count_include_pad: true },
        kernel: [2, 2],
        stride: [1, 1],
        padding: [0; 4],
        dilation: [1, 1],
        ceil_mode: false,
    });
    assert!(keeps_pool(&avg, &x));
    assert!(keeps_pool(&pool([5, 5], [1, 1], [0; 4], [1, 1], false), &x));
    assert!(keeps_pool(&pool([2, 2], [1, 1], [0; 4], [1, 1], false), &tensor(DType::I32, &[1.0; 9], &[1, 1, 3, 3])));
    assert!(keeps_pool(&pool([2, 2], [1, 1], [0; 4], [1, 1], false), &random(&mut rng, DType::F32, &[0, 2, 4, 4], 1.0)));
}
