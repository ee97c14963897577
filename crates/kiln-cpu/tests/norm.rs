//! Softmax, log-softmax, layer norm, batch norm, GELU and erf against f64 naive references.

mod common_kernels;

use common_kernels::*;
use kiln_cpu::eval;
use kiln_cpu::kernels::activation::{erf, erfc};
use kiln_ir::{DType, Error, HostTensor, Op};

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// (rtol, atol) for results rounded to `dtype` from an exact reference.
fn tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-12, 1e-14),
        DType::F32 => (1e-5, 1e-6),
        DType::F16 => (2e-3, 1e-4),
        _ => (1.6e-2, 1e-3),
    }
}

/// Naive softmax / log-softmax of `v` (row-major, `shape`) along `axis`, in f64, one line at a time.
fn naive_softmax(v: &[f64], shape: &[usize], axis: usize, log: bool) -> Vec<f64> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out = v.to_vec();
    if n * inner == 0 {
        return out;
    }
    for o in 0..v.len() / (n * inner) {
        for c in 0..inner {
            let at = |j: usize| (o * n + j) * inner + c;
            let m = (0..n).map(|j| v[at(j)]).fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..n).map(|j| (v[at(j)] - m).exp()).sum();
            for j in 0..n {
                let x = v[at(j)];
                out[at(j)] = if log { x - m - s.ln() } else { (x - m).exp() / s };
            }
        }
    }
    out
}

fn softmax_op(axis: usize, log: bool) -> Op {
    if log { Op::LogSoftmax { axis } } else { Op::Softmax { axis } }
}

#[test]
fn softmax_matches_naive_along_every_axis_dtype_and_layout() {
    let shape = [3, 4, 5];
    for dtype in FLOATS {
        let x = tensor(dtype, &noise(60, 1, 6.0), &shape);
        let v = x.to_f64_vec();
        let (rtol, atol) = tol(dtype);
        for axis in 0..3 {
            for log in [false, true] {
                let want = naive_softmax(&v, &shape, axis, log);
                for input in [x.clone(), transposed(&x), strided(&x), reversed(&x)] {
                    let out = eval(&softmax_op(axis, log), &[&input]).unwrap();
                    assert_eq!(out.dtype(), dtype);
                    assert_eq!(out.shape(), &shape);
                    // log-softmax values are O(10): scale the absolute tolerance with them
                    let atol = if log { atol * 10.0 } else { atol };
                    assert_close(&out.to_f64_vec(), &want, rtol, atol, &format!("{dtype} axis {axis} log {log}"));
                }
            }
        }
    }
}

#[test]
fn softmax_of_large_rows_is_accurate_and_parallel_safe() {
    // Many rows (parallel path) with a large spread of values and long rows.
    let shape = [64, 1000];
    let x = tensor(DType::F32, &noise(64_000, 7, 30.0), &shape);
    let v = x.to_f64_vec();
    for log in [false, true] {
        let out = eval(&softmax_op(1, log), &[&x]).unwrap();
        assert_close(&out.to_f64_vec(), &naive_softmax(&v, &shape, 1, log), 1e-5, if log { 1e-5 } else { 1e-12 }, "big");
    }
    // The strided path in parallel: softmax over axis 0 of a [50, 2000] tensor.
    let shape = [50, 2000];
    let x = tensor(DType::F64, &noise(100_000, 8, 5.0), &shape);
    let out = eval(&Op::Softmax { axis: 0 }, &[&x]).unwrap();
    assert_close(&out.to_f64_vec(), &naive_softmax(&x.to_f64_vec(), &shape, 0, false), 1e-12, 1e-15, "axis 0");
}

#[test]
fn softmax_with_infinities_and_nan_follows_pytorch() {
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    let rows = [
        vec![0.0, -inf, 1.0, -inf],
        vec![-inf, -inf, -inf, -inf],
        vec![1.0, nan, 2.0, 3.0],
        vec![1.0, inf, 2.0, 3.0],
        vec![1e30, -1e30, 1e30, 0.0],
    ];
    let e = (1f64).exp();
    let soft = [
        vec![1.0 / (1.0 + e), 0.0, e / (1.0 + e), 0.0],
        vec![nan; 4],
        vec![nan; 4],
        vec![nan; 4],
        vec![0.5, 0.0, 0.5, 0.0],
    ];
    let lse = (1.0 + e).ln();
    let logs = [
        vec![-lse, -inf, 1.0 - lse, -inf],
        vec![nan; 4],
        vec![nan; 4],
        vec![nan; 4],
        vec![-(2f64).ln(), -inf, -(2f64).ln(), -inf],
    ];
    for dtype in [DType::F32, DType::F64] {
        let flat: Vec<f64> = rows.concat();
        let x = tensor(dtype, &flat, &[5, 4]);
        let out = eval(&Op::Softmax { axis: 1 }, &[&x]).unwrap();
        assert_close(&out.to_f64_vec(), &soft.concat(), 1e-6, 1e-7, "softmax");
        let out = eval(&Op::LogSoftmax { axis: 1 }, &[&x]).unwrap();
        // f32 loses -1e30 - 1e30 to -inf, which is the right answer here anyway
        let got = out.to_f64_vec();
        let want = logs.concat();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if *w == -inf {
                assert!(*g == -inf || *g < -1e29, "{dtype} {i}: {g}");
            } else {
                assert_close(&[*g], &[*w], 1e-6, 1e-6, &format!("{dtype} log {i}"));
            }
        }
    }
}

#[test]
fn softmax_of_size_one_and_empty_axes() {
    let x = tensor(DType::F32, &[3.0, -2.0, 1e20], &[3, 1]);
    assert_eq!(eval(&Op::Softmax { axis: 1 }, &[&x]).unwrap().to_f64_vec(), vec![1.0; 3]);
    assert_eq!(eval(&Op::LogSoftmax { axis: 1 }, &[&x]).unwrap().to_f64_vec(), vec![0.0; 3]);
    for shape in [[0, 4], [3, 0]] {
        let e = ramp_tensor(DType::F32, &shape);
        for axis in 0..2 {
            let out = eval(&Op::Softmax { axis }, &[&e]).unwrap();
            assert_eq!(out.shape(), &shape);
        }
    }
    let err = eval(&Op::Softmax { axis: 0 }, &[&ramp_tensor(DType::I32, &[3])]).unwrap_err();
    assert!(matches!(err, Error::DType(_)), "{err}");
    let err = eval(&Op::Softmax { axis: 2 }, &[&ramp_tensor(DType::F32, &[3])]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
}

/// Naive layer norm over axes `axis..` with optional scale/bias given as full [normalized] vectors.
fn naive_layer_norm(v: &[f64], shape: &[usize], axis: usize, scale: &[f64], bias: &[f64], eps: f64) -> Vec<f64> {
    let d: usize = shape[axis..].iter().product();
    v.chunks(d)
        .flat_map(|row| {
            let mean = row.iter().sum::<f64>() / d as f64;
            let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / d as f64;
            row.iter().enumerate().map(move |(i, x)| (x - mean) / (var + eps).sqrt() * scale[i] + bias[i]).collect::<Vec<_>>()
        })
        .collect()
}

/// (axis, scale/bias inputs, the scale and bias they broadcast to).
type LayerNormCase<'a> = (usize, Vec<&'a HostTensor>, Vec<f64>, Vec<f64>);

#[test]
fn layer_norm_matches_naive_with_broadcast_scale_and_bias() {
    let shape = [2, 3, 4, 5];
    for dtype in FLOATS {
        let x = tensor(dtype, &noise(120, 3, 4.0).iter().map(|v| v + 2.0).collect::<Vec<_>>(), &shape);
        let v = x.to_f64_vec();
        let (rtol, atol) = tol(dtype);
        // axis 3: scale/bias [5]; axis 2: scale [5] and bias [4, 1] broadcast to [4, 5].
        let s5 = tensor(dtype, &[0.5, -1.0, 2.0, 1.5, 0.25], &[5]);
        let b5 = tensor(dtype, &[0.1, 0.2, -0.3, 0.0, 1.0], &[5]);
        let b41 = tensor(dtype, &[1.0, -2.0, 0.5, 0.0], &[4, 1]);
        let sv: Vec<f64> = s5.to_f64_vec();
        let cases: Vec<LayerNormCase> = vec![
            (3, vec![], vec![1.0; 5], vec![0.0; 5]),
            (3, vec![&s5], sv.clone(), vec![0.0; 5]),
            (3, vec![&s5, &b5], sv.clone(), b5.to_f64_vec()),
            (2, vec![&s5, &b41], sv.iter().cycle().take(20).cloned().collect(), (0..20).map(|i| b41.to_f64_vec()[i / 5]).collect()),
            (0, vec![], vec![1.0; 120], vec![0.0; 120]),
        ];
        for (axis, params, scale, bias) in cases {
            let want = naive_layer_norm(&v, &shape, axis, &scale, &bias, 1e-5);
            for input in [x.clone(), transposed(&x), strided(&x)] {
                let mut ins = vec![&input];
                let views: Vec<HostTensor> = params.iter().map(|p| strided(p)).collect();
                ins.extend(views.iter());
                let out = eval(&Op::LayerNorm { axis, eps: 1e-5 }, &ins).unwrap();
                assert_eq!(out.dtype(), dtype);
                assert_close(&out.to_f64_vec(), &want, rtol, atol * 10.0, &format!("{dtype} axis {axis} {} params", params.len()));
            }
        }
    }
}

#[test]
fn layer_norm_edge_cases() {
    // A constant row has zero variance: the result is the bias (eps keeps it finite).
    let x = tensor(DType::F32, &[3.0, 3.0, 3.0, 1.0, 2.0, f64::NAN], &[2, 3]);
    let b = tensor(DType::F32, &[1.0, 2.0, 3.0], &[3]);
    let out = eval(&Op::LayerNorm { axis: 1, eps: 1e-5 }, &[&x, &b, &b]).unwrap().to_f64_vec();
    assert_eq!(&out[..3], &[1.0, 2.0, 3.0]);
    assert!(out[3..].iter().all(|v| v.is_nan()), "a NaN poisons its row: {out:?}");
    // Large rows in parallel, with a large mean (two-pass variance stays accurate).
    let shape = [200, 768];
    let x = tensor(DType::F32, &noise(200 * 768, 9, 1.0).iter().map(|v| v + 1000.0).collect::<Vec<_>>(), &shape);
    let want = naive_layer_norm(&x.to_f64_vec(), &shape, 1, &[1.0; 768], &[0.0; 768], 1e-12);
    let out = eval(&Op::LayerNorm { axis: 1, eps: 1e-12 }, &[&x]).unwrap();
    assert_close(&out.to_f64_vec(), &want, 1e-5, 1e-5, "large");
    // Empty, and bad inputs.
    let e = ramp_tensor(DType::F32, &[0, 3]);
    assert_eq!(eval(&Op::LayerNorm { axis: 1, eps: 1e-5 }, &[&e]).unwrap().shape(), &[0, 3]);
    let err = eval(&Op::LayerNorm { axis: 1, eps: 1e-5 }, &[&ramp_tensor(DType::F32, &[2, 3]), &ramp_tensor(DType::F32, &[2])]);
    assert!(matches!(err, Err(Error::Shape(_))));
    let err = eval(&Op::LayerNorm { axis: 0, eps: 1e-5 }, &[&ramp_tensor(DType::I64, &[2])]);
    assert!(matches!(err, Err(Error::DType(_))));
}

#[test]
fn batch_norm_matches_naive_for_rank_2_to_4() {
    let eps = 1e-3;
    for dtype in FLOATS {
        let (rtol, atol) = tol(dtype);
        let c = 3;
        let scale = tensor(dtype, &[1.0, -0.5, 2.0], &[c]);
        let bias = tensor(dtype, &[0.0, 1.0, -1.0], &[c]);
        let mean = tensor(dtype, &[0.5, -1.0, 2.0], &[c]);
        let var = tensor(dtype, &[1.0, 0.25, 4.0], &[c]);
        let p: Vec<Vec<f64>> = [&scale, &bias, &mean, &var].iter().map(|t| t.to_f64_vec()).collect();
        for shape in [vec![4, 3], vec![2, 3, 5], vec![2, 3, 2, 4], vec![1, 3, 1, 1], vec![0, 3, 2]] {
            let n: usize = shape.iter().product();
            let x = tensor(dtype, &noise(n, 4, 3.0), &shape);
            let v = x.to_f64_vec();
            let want: Vec<f64> = (0..n)
                .map(|i| {
                    let ch = unravel(i, &shape)[1];
                    (v[i] - p[2][ch]) / (p[3][ch] + eps).sqrt() * p[0][ch] + p[1][ch]
                })
                .collect();
            let inputs = if shape[0] > 0 { vec![x.clone(), transposed(&x), reversed(&x)] } else { vec![x.clone()] };
            for input in inputs {
                let out = eval(&Op::BatchNorm { eps }, &[&input, &scale, &bias, &strided(&mean), &var]).unwrap();
                assert_eq!(out.shape(), shape.as_slice());
                assert_close(&out.to_f64_vec(), &want, rtol, atol * 10.0, &format!("{dtype} {shape:?}"));
            }
        }
    }
    let x = ramp_tensor(DType::F32, &[2, 3]);
    let p2 = ramp_tensor(DType::F32, &[2]);
    assert!(matches!(eval(&Op::BatchNorm { eps }, &[&x, &p2, &p2, &p2, &p2]), Err(Error::Shape(_))));
    let r1 = ramp_tensor(DType::F32, &[3]);
    let p3 = ramp_tensor(DType::F32, &[3]);
    assert!(matches!(eval(&Op::BatchNorm { eps }, &[&r1, &p3, &p3, &p3, &p3]), Err(Error::Shape(_))));
}

/// (x, erf(x), erfc(x)) from Python's `math.erf`/`math.erfc` (C libm, correctly rounded or 1 ulp).
const ERF_TABLE: [(f64, f64, f64); 21] = [
    (0.0, 0.0, 1.0),
    (1e-10, 1.1283791670955126e-10, 0.999999999887162),
    (-3e-09, -3.3851375012865378e-09, 1.0000000033851375),
    (1e-05, 1.1283791670579e-05, 0.9999887162083294),
    (0.1, 0.1124629160182849, 0.8875370839817152),
    (-0.25, -0.2763263901682369, 1.276326390168237),
    (0.5, 0.5204998778130465, 0.4795001221869535),
    (0.84, 0.7651427114549946, 0.23485728854500548),
    (0.85, 0.7706680576083526, 0.2293319423916475),
    (-1.0, -0.8427007929497149, 1.842700792949715),
    (1.2, 0.9103139782296353, 0.08968602177036465),
    (1.3, 0.9340079449406524, 0.06599205505934755),
    (-2.0, -0.9953222650189527, 1.9953222650189528),
    (2.5, 0.999593047982555, 0.0004069520174449589),
    (2.9, 0.9999589021219005, 4.109787809945886e-05),
    (-3.5, -0.9999992569016276, 1.9999992569016276),
    (4.0, 0.9999999845827421, 1.541725790028002e-08),
    (5.5, 0.9999999999999927, 7.357847917974398e-15),
    (6.5, 1.0, 3.8421483271206475e-20),
    (-10.0, -1.0, 2.0),
    (30.0, 1.0, 0.0),
];

#[test]
fn erf_and_erfc_are_accurate_to_a_few_ulp() {
    for (x, e, c) in ERF_TABLE {
        assert_close(&[erf(x)], &[e], 4e-16, 0.0, &format!("erf({x})"));
        assert_close(&[erfc(x)], &[c], 4e-16, 0.0, &format!("erfc({x})"));
        assert_eq!(erf(-x), -erf(x), "erf is odd at {x}");
    }
    assert_eq!(erf(f64::INFINITY), 1.0);
    assert_eq!(erf(f64::NEG_INFINITY), -1.0);
    assert_eq!(erfc(f64::NEG_INFINITY), 2.0);
    assert_eq!(erfc(f64::INFINITY), 0.0);
    assert!(erf(f64::NAN).is_nan() && erfc(f64::NAN).is_nan());
    // erf + erfc = 1 across the intervals of the approximation.
    for x in noise(2000, 5, 7.0) {
        assert!((erf(x) + erfc(x) - 1.0).abs() < 3e-16, "{x}");
    }
}

/// GELU in f64. The tanh form is written as the identical `x σ(2u)`, whose negative tail does
/// not cancel; exact GELU uses `erfc` (checked against Python above) so any x can be tested.
fn naive_gelu(x: f64, tanh: bool) -> f64 {
    if tanh {
        let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3));
        x / (1.0 + (-2.0 * u).exp())
    } else {
        x * 0.5 * erfc(-x / std::f64::consts::SQRT_2)
    }
}

#[test]
fn gelu_matches_naive_in_every_float_dtype_and_layout() {
    for dtype in FLOATS {
        let (rtol, atol) = tol(dtype);
        let x = tensor(dtype, &noise(210, 11, 6.0), &[3, 7, 10]);
        for tanh in [false, true] {
            let want: Vec<f64> = x.to_f64_vec().iter().map(|&v| naive_gelu(v, tanh)).collect();
            for input in [x.clone(), transposed(&x), strided(&x), reversed(&x)] {
                let out = eval(&Op::Gelu { tanh_approx: tanh }, &[&input]).unwrap();
                assert_eq!(out.dtype(), dtype);
                assert_close(&out.to_f64_vec(), &want, rtol, atol * 1e-3, &format!("{dtype} tanh {tanh}"));
            }
        }
    }
}

#[test]
fn gelu_special_values_and_tails() {
    let x = tensor(DType::F64, &[0.0, 1.0, -1.0, -10.0, 10.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN], &[8]);
    let out = eval(&Op::Gelu { tanh_approx: false }, &[&x]).unwrap().to_f64_vec();
    // 1 * Φ(1) = (1 + erf(1/√2)) / 2, Φ(-10) from Python's 0.5 * erfc(10 / √2).
    let phi1 = 0.8413447460685429;
    let want = [0.0, phi1, -(1.0 - phi1), -7.619853024160593e-23, 10.0, f64::INFINITY, f64::NAN, f64::NAN];
    // Near x = -10 erfc amplifies the rounding of x/√2 about 100-fold, in the reference too.
    assert_close(&out, &want, 1e-13, 0.0, "exact gelu");
    let out = eval(&Op::Gelu { tanh_approx: true }, &[&x]).unwrap().to_f64_vec();
    assert_close(&out[..3], &[0.0, 0.8411919906082768, -0.15880800939172324], 1e-14, 0.0, "tanh gelu");
    assert_eq!(out[5], f64::INFINITY);
    assert!(out[7].is_nan());
    // f32: the negative tail keeps relative accuracy; a big parallel tensor matches too.
    let big = tensor(DType::F32, &noise(100_000, 12, 8.0), &[100, 1000]);
    let want: Vec<f64> = big.to_f64_vec().iter().map(|&v| naive_gelu(v, false)).collect();
    let out = eval(&Op::Gelu { tanh_approx: false }, &[&big]).unwrap();
    assert_close(&out.to_f64_vec(), &want, 1e-6, 1e-37, "f32 gelu");
    let e = ramp_tensor(DType::F16, &[0, 5]);
    assert_eq!(eval(&Op::Gelu { tanh_approx: true }, &[&e]).unwrap().shape(), &[0, 5]);
    assert!(matches!(eval(&Op::Gelu { tanh_approx: false }, &[&ramp_tensor(DType::I32, &[2])]), Err(Error::DType(_))));
}
