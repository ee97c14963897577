//! Cumulative sum and product (ONNX CumSum/CumProd) against a naive f64 reference.

mod common_kernels;

use common_kernels::*;
use kiln_cpu::eval;
use kiln_ir::{CumulativeOp, DType, Error, HostTensor, Op};

/// The running op along `axis` by the ONNX definition: for each output position, fold the
/// input positions `0..=i` (`0..i` when exclusive; `i..n` / `i+1..n` when reversed).
fn naive(x: &[f64], shape: &[usize], axis: usize, op: CumulativeOp, exclusive: bool, reverse: bool) -> Vec<f64> {
    let n = shape[axis];
    (0..x.len())
        .map(|p| {
            let mut idx = unravel(p, shape);
            let i = idx[axis];
            let range: Vec<usize> = match (exclusive, reverse) {
                (false, false) => (0..=i).collect(),
                (true, false) => (0..i).collect(),
                (false, true) => (i..n).collect(),
                (true, true) => (i + 1..n).collect(),
            };
            let mut acc = if op == CumulativeOp::Sum { 0.0 } else { 1.0 };
            for j in range {
                idx[axis] = j;
                let v = x[ravel(&idx, shape)];
                acc = if op == CumulativeOp::Sum { acc + v } else { acc * v };
            }
            acc
        })
        .collect()
}

/// Small integers every dtype holds exactly, and whose sums and products (over at most five
/// elements) stay in range: -2..=2, or 0..=2 for unsigned types.
fn small_values(dtype: DType, n: usize, seed: u64) -> Vec<f64> {
    noise(n, seed, 2.49).iter().map(|v| if dtype.is_signed() { v.round() } else { v.abs().round() }).collect()
}

fn op(op: CumulativeOp, axis: usize, exclusive: bool, reverse: bool) -> Op {
    Op::Cumulative { op, axis, exclusive, reverse }
}

#[test]
fn matches_naive_for_every_numeric_dtype_axis_flag_and_layout() {
    let shapes: [&[usize]; 5] = [&[3, 4, 5], &[5], &[2, 1, 3], &[1, 0, 3], &[4, 1]];
    for dtype in DType::ALL.into_iter().filter(|d| *d != DType::Bool) {
        for (si, shape) in shapes.iter().enumerate() {
            let vals = small_values(dtype, shape.iter().product(), si as u64 + 7);
            let x = tensor(dtype, &vals, shape);
            let mut layouts = vec![x.clone(), transposed(&x), strided(&x)];
            if shape[0] > 0 {
                layouts.push(reversed(&x));
            }
            for axis in 0..shape.len() {
                for cop in [CumulativeOp::Sum, CumulativeOp::Prod] {
                    for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
                        let want = naive(&vals, shape, axis, cop, exclusive, reverse);
                        for xin in &layouts {
                            let out = eval(&op(cop, axis, exclusive, reverse), &[xin]).unwrap();
                            let what = format!("{dtype} {shape:?} axis {axis} {cop:?} excl {exclusive} rev {reverse}");
                            assert_eq!(out.dtype(), dtype, "{what}");
                            assert_eq!(out.shape(), *shape, "{what}");
                            assert_eq!(out.to_f64_vec(), want, "{what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn float_sums_accumulate_accurately_and_propagate_nan_and_inf() {
    let vals = noise(2 * 300, 3, 10.0);
    for dtype in [DType::F32, DType::F64] {
        let x = tensor(dtype, &vals, &[2, 300]);
        let want = naive(&x.to_f64_vec(), &[2, 300], 1, CumulativeOp::Sum, false, false);
        let out = eval(&op(CumulativeOp::Sum, 1, false, false), &[&transposed(&x)]).unwrap();
        assert_close(&out.to_f64_vec(), &want, 1e-6, 1e-4, &format!("{dtype} long cumsum"));
    }
    let x = tensor(DType::F32, &[1.0, f64::NAN, 2.0, f64::INFINITY, 1.0], &[5]);
    let out = eval(&op(CumulativeOp::Sum, 0, false, true), &[&x]).unwrap().to_f64_vec();
    assert_eq!(out[4], 1.0);
    assert_eq!(out[3], f64::INFINITY);
    assert!(out[..2].iter().all(|v| v.is_nan()), "{out:?}");
    // Exclusive forward: the NaN at 1 reaches positions 2.. only.
    let out = eval(&op(CumulativeOp::Prod, 0, true, false), &[&x]).unwrap().to_f64_vec();
    assert_eq!(&out[..2], &[1.0, 1.0]);
    assert!(out[2..].iter().all(|v| v.is_nan()), "{out:?}");
}

#[test]
fn integers_wrap_on_overflow() {
    let x = tensor(DType::I8, &[100.0, 100.0, 100.0], &[3]);
    assert_eq!(eval(&op(CumulativeOp::Sum, 0, false, false), &[&x]).unwrap().to_f64_vec(), vec![100.0, -56.0, 44.0]);
    let x = tensor(DType::U8, &[16.0, 16.0, 3.0], &[3]);
    assert_eq!(eval(&op(CumulativeOp::Prod, 0, false, false), &[&x]).unwrap().to_f64_vec(), vec![16.0, 0.0, 0.0]);
    let x = HostTensor::from_vec(vec![i64::MAX, 1], &[2]).unwrap();
    let out = eval(&op(CumulativeOp::Sum, 0, false, false), &[&x]).unwrap();
    assert_eq!(out.to_vec::<i64>().unwrap(), vec![i64::MAX, i64::MIN]);
}

#[test]
fn bad_axis_and_bool_are_errors() {
    let x = tensor(DType::F32, &[1.0, 2.0], &[2]);
    let e = eval(&op(CumulativeOp::Sum, 1, false, false), &[&x]).unwrap_err();
    assert!(matches!(e, Error::Shape(_)) && e.to_string().contains("cumsum"), "{e}");
    let b = tensor(DType::Bool, &[1.0, 0.0], &[2]);
    let e = eval(&op(CumulativeOp::Prod, 0, false, false), &[&b]).unwrap_err();
    assert!(matches!(e, Error::DType(_)) && e.to_string().contains("cumprod"), "{e}");
    let s = tensor(DType::F32, &[1.0], &[]);
    assert!(eval(&op(CumulativeOp::Sum, 0, false, false), &[&s]).is_err(), "rank-0 input has no axis 0");
}
