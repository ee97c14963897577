//! Pool2d kernel against naive per-tap loops following PyTorch's rules, plus hand-computed
//! windows for ceil_mode and both count_include_pad settings, NaN/Inf in max pooling,
//! integer dtypes, dilation, strided inputs and empty batches.

mod hot_common;

use half::{bf16, f16};
use hot_common::{assert_close, rand, rand_int, stored_permuted};
use kiln_cpu::eval;
use kiln_ir::{Error, HostTensor, Op, Pool2dAttrs, PoolKind, infer::window_out};

fn pool(kind: PoolKind, kernel: [usize; 2], stride: [usize; 2], padding: [usize; 4], dilation: [usize; 2], ceil_mode: bool) -> Pool2dAttrs {
    Pool2dAttrs { kind, kernel, stride, padding, dilation, ceil_mode }
}

const MAX: PoolKind = PoolKind::Max;
const AVG_PAD: PoolKind = PoolKind::Avg { count_include_pad: true };
const AVG_NOPAD: PoolKind = PoolKind::Avg { count_include_pad: false };

/// Pooling tap by tap on logical values in f64. Max: a NaN tap makes the result NaN (the
/// PyTorch `v > m || isnan(v)` rule). Avg: padded taps count up to the end of the far padding.
fn naive(p: &Pool2dAttrs, x: &HostTensor) -> (Vec<f64>, Vec<usize>) {
    let s = x.shape();
    let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
    let [pt, pl, pb, pr] = p.padding;
    let oh = window_out(h, p.kernel[0], p.stride[0], (pt, pb), p.dilation[0], p.ceil_mode).unwrap();
    let ow = window_out(w, p.kernel[1], p.stride[1], (pl, pr), p.dilation[1], p.ceil_mode).unwrap();
    let xv = x.to_f64_vec();
    let mut out = Vec::new();
    for plane in 0..n * c {
        for y in 0..oh {
            for z in 0..ow {
                let (mut m, mut sum, mut inc, mut valid) = (f64::NEG_INFINITY, 0.0, 0usize, 0usize);
                for i in 0..p.kernel[0] {
                    for j in 0..p.kernel[1] {
                        let hh = (y * p.stride[0] + i * p.dilation[0]) as isize - pt as isize;
                        let ww = (z * p.stride[1] + j * p.dilation[1]) as isize - pl as isize;
                        if hh < (h + pb) as isize && ww < (w + pr) as isize {
                            inc += 1;
                        }
                        if hh < 0 || ww < 0 || hh >= h as isize || ww >= w as isize {
                            continue;
                        }
                        let v = xv[(plane * h + hh as usize) * w + ww as usize];
                        valid += 1;
                        sum += v;
                        if v > m || v.is_nan() {
                            m = v;
                        }
                    }
                }
                out.push(match p.kind {
                    PoolKind::Max => m,
                    PoolKind::Avg { count_include_pad: true } => sum / inc as f64,
                    PoolKind::Avg { count_include_pad: false } => sum / valid as f64,
                });
            }
        }
    }
    (out, vec![n, c, oh, ow])
}

fn check(p: &Pool2dAttrs, x: &HostTensor, tol: f64, what: &str) {
    let got = eval(&Op::Pool2d(*p), &[x]).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (want, shape) = naive(p, x);
    assert_eq!(got.shape(), &shape[..], "{what}: shape");
    assert_eq!(got.dtype(), x.dtype(), "{what}: dtype");
    assert_close(&got.to_f64_vec(), &want, tol, what);
}

/// x shape, kernel, stride, padding, dilation, ceil_mode.
type Case = (Vec<usize>, [usize; 2], [usize; 2], [usize; 4], [usize; 2], bool);

/// Windows to test; each runs with max and both average kinds.
fn cases() -> Vec<Case> {
    vec![
        (vec![1, 4, 15, 15], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], false), // resnet max pool
        (vec![2, 3, 8, 9], [2, 2], [2, 2], [0; 4], [1, 1], false),
        (vec![1, 2, 7, 7], [7, 7], [1, 1], [0; 4], [1, 1], false), // global
        (vec![2, 2, 5, 6], [3, 2], [2, 2], [1, 1, 1, 0], [1, 1], true), // ceil, asymmetric pad
        (vec![1, 3, 6, 6], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], true),
        (vec![1, 2, 4, 4], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], true),
        (vec![1, 2, 9, 8], [3, 2], [1, 2], [1, 0, 0, 1], [2, 3], false), // dilation
        (vec![1, 2, 10, 10], [2, 3], [3, 2], [1, 1, 1, 1], [2, 2], true), // dilation + ceil
        (vec![1, 1, 1, 1], [1, 1], [1, 1], [0; 4], [1, 1], false),
        (vec![1, 1, 3, 3], [3, 3], [5, 5], [0; 4], [1, 1], true),
        (vec![0, 3, 4, 4], [2, 2], [2, 2], [0; 4], [1, 1], false), // empty batch
        (vec![2, 0, 4, 4], [2, 2], [2, 2], [0; 4], [1, 1], false), // no channels
        (vec![1, 2, 0, 3], [2, 2], [1, 1], [1; 4], [1, 1], false), // zero height: windows of padding only
    ]
}

#[test]
fn float_pooling_matches_naive() {
    for (i, (xs, k, s, p, d, ceil)) in cases().into_iter().enumerate() {
        for kind in [MAX, AVG_PAD, AVG_NOPAD] {
            let a = pool(kind, k, s, p, d, ceil);
            check(&a, &rand::<f32>(&xs, i as u64), 1e-6, &format!("f32 case {i} {a:?}"));
            check(&a, &rand::<f64>(&xs, i as u64), 1e-12, &format!("f64 case {i} {a:?}"));
            check(&a, &rand::<f16>(&xs, i as u64), 1e-3, &format!("f16 case {i} {a:?}"));
            check(&a, &rand::<bf16>(&xs, i as u64), 1e-2, &format!("bf16 case {i} {a:?}"));
        }
    }
}

#[test]
fn integer_max_pooling() {
    for (i, (xs, k, s, p, d, ceil)) in cases().into_iter().enumerate() {
        let a = pool(MAX, k, s, p, d, ceil);
        if xs[2] == 0 {
            // padding-only windows give the type's lowest value (its "-inf")
            let out = eval(&Op::Pool2d(a), &[&rand_int::<i8>(&xs, 1, -9, 9)]).unwrap();
            assert!(out.numel() > 0 && out.to_vec::<i8>().unwrap().iter().all(|&v| v == i8::MIN));
            continue;
        }
        check(&a, &rand_int::<i64>(&xs, i as u64, -1000, 1000), 0.0, &format!("i64 case {i}"));
        check(&a, &rand_int::<i32>(&xs, i as u64, -1000, 1000), 0.0, &format!("i32 case {i}"));
        check(&a, &rand_int::<i8>(&xs, i as u64, -128, 127), 0.0, &format!("i8 case {i}"));
        check(&a, &rand_int::<u8>(&xs, i as u64, 0, 255), 0.0, &format!("u8 case {i}"));
    }
    // padding must never win, even over all-negative data: hand-computed 3x3 result
    let x = HostTensor::from_vec(vec![-5i8, -3, -2, -7], &[1, 1, 2, 2]).unwrap();
    let out = eval(&Op::Pool2d(pool(MAX, [2, 2], [1, 1], [1; 4], [1, 1], false)), &[&x]).unwrap();
    assert_eq!(out.to_vec::<i8>().unwrap(), vec![-5, -3, -3, -2, -2, -3, -2, -2, -7]);
}

#[test]
fn max_pool_nan_and_inf() {
    let nan = f32::NAN;
    #[rustfmt::skip]
    let xv = vec![
        1.0, nan, 3.0, 4.0,
        5.0, 6.0, f32::NEG_INFINITY, f32::NEG_INFINITY,
        f32::INFINITY, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY,
        2.0, 1.0, nan, 9.0,
    ];
    let x = HostTensor::from_vec(xv, &[1, 1, 4, 4]).unwrap();
    let out = eval(&Op::Pool2d(pool(MAX, [2, 2], [2, 2], [0; 4], [1, 1], false)), &[&x]).unwrap();
    assert_close(&out.to_f64_vec(), &[f64::NAN, 4.0, f64::INFINITY, f64::NAN], 0.0, "nan/inf");
    // the NaN wins wherever it sits in the window (first, middle or last tap)
    for pos in 0..4 {
        let mut v = vec![1.0f64, 2.0, 3.0, 4.0];
        v[pos] = f64::NAN;
        let x = HostTensor::from_vec(v, &[1, 1, 2, 2]).unwrap();
        let out = eval(&Op::Pool2d(pool(MAX, [2, 2], [1, 1], [0; 4], [1, 1], false)), &[&x]).unwrap();
        assert!(out.to_f64_vec()[0].is_nan(), "NaN at tap {pos}");
    }
    // a window of only -inf stays -inf (and with padding as well)
    let x = HostTensor::from_vec(vec![f32::NEG_INFINITY; 4], &[1, 1, 2, 2]).unwrap();
    let out = eval(&Op::Pool2d(pool(MAX, [2, 2], [1, 1], [1; 4], [1, 1], false)), &[&x]).unwrap();
    assert!(out.to_f64_vec().iter().all(|&v| v == f64::NEG_INFINITY));
    // avg: NaN and inf flow into the mean
    let x = HostTensor::from_vec(vec![1.0f32, nan, 3.0, f32::INFINITY], &[1, 1, 1, 4]).unwrap();
    let out = eval(&Op::Pool2d(pool(AVG_PAD, [1, 2], [1, 2], [0; 4], [1, 1], false)), &[&x]).unwrap();
    assert_close(&out.to_f64_vec(), &[f64::NAN, f64::INFINITY], 0.0, "avg nan/inf");
}

#[test]
fn ceil_mode_and_count_include_pad_by_hand() {
    // 3x3 of 1..9, 2x2 windows, stride 2, ceil_mode: the last windows are clipped to the
    // input and (no padding) divide by the taps that exist either way.
    let x = HostTensor::from_vec((1..=9).map(|v| v as f32).collect::<Vec<_>>(), &[1, 1, 3, 3]).unwrap();
    for kind in [AVG_PAD, AVG_NOPAD] {
        let out = eval(&Op::Pool2d(pool(kind, [2, 2], [2, 2], [0; 4], [1, 1], true)), &[&x]).unwrap();
        assert_eq!(out.to_vec::<f32>().unwrap(), vec![3.0, 4.5, 7.5, 9.0], "{kind:?}");
    }
    // 4x4 of 1..16, 3x3 windows, stride 2, pad 1, ceil_mode: 3x3 output. Rows counted with
    // padding are [3, 3, 2] (the last window runs past input + pad), valid rows [2, 3, 1].
    let x = HostTensor::from_vec((1..=16).map(|v| v as f64).collect::<Vec<_>>(), &[1, 1, 4, 4]).unwrap();
    let inc = eval(&Op::Pool2d(pool(AVG_PAD, [3, 3], [2, 2], [1; 4], [1, 1], true)), &[&x]).unwrap().to_f64_vec();
    let exc = eval(&Op::Pool2d(pool(AVG_NOPAD, [3, 3], [2, 2], [1; 4], [1, 1], true)), &[&x]).unwrap().to_f64_vec();
    assert_eq!(inc.len(), 9);
    assert_close(&[inc[0], inc[2], inc[8]], &[14.0 / 9.0, 12.0 / 6.0, 16.0 / 4.0], 1e-12, "include pad");
    assert_close(&[exc[0], exc[2], exc[8]], &[14.0 / 4.0, 12.0 / 2.0, 16.0], 1e-12, "exclude pad");
}

#[test]
fn strided_inputs() {
    let x = stored_permuted(&rand::<f32>(&[2, 3, 9, 7], 1), &[0, 2, 3, 1]);
    for kind in [MAX, AVG_PAD, AVG_NOPAD] {
        check(&pool(kind, [3, 3], [2, 2], [1; 4], [1, 1], true), &x, 1e-6, &format!("nhwc {kind:?}"));
    }
    let flipped = hot_common::sliced(&rand_int::<i32>(&[1, 2, 5, 5], 2, -9, 9), 2, 4, -1, -1);
    check(&pool(MAX, [2, 2], [1, 1], [0; 4], [1, 1], false), &flipped, 0.0, "flipped i32");
}

#[test]
fn bad_inputs_are_errors() {
    let b = HostTensor::from_vec(vec![true; 4], &[1, 1, 2, 2]).unwrap();
    assert!(matches!(eval(&Op::Pool2d(pool(MAX, [2, 2], [1, 1], [0; 4], [1, 1], false)), &[&b]), Err(Error::DType(_))));
    let i = HostTensor::from_vec(vec![1i32; 4], &[1, 1, 2, 2]).unwrap();
    assert!(matches!(eval(&Op::Pool2d(pool(AVG_PAD, [2, 2], [1, 1], [0; 4], [1, 1], false)), &[&i]), Err(Error::DType(_))));
    let x = rand::<f32>(&[1, 1, 2, 2], 1);
    assert!(eval(&Op::Pool2d(pool(MAX, [3, 3], [1, 1], [0; 4], [1, 1], false)), &[&x]).is_err());
    assert!(matches!(eval(&Op::Pool2d(pool(MAX, [2, 2], [0, 1], [0; 4], [1, 1], false)), &[&x]), Err(Error::Value(_))));
    let r = kiln_cpu::kernels::pool::pool2d(&pool(MAX, [2, 2], [1, 1], [0; 4], [1, 1], false), &x, &[1, 1, 2, 2]);
    assert!(matches!(r, Err(Error::Shape(_))));
}
