//! MatMul kernel against a naive NumPy-semantics loop in f64: batch broadcasting, 1-D operands,
//! strided views (transposed, expanded, reversed, stepped), K=0 / M=0 / empty batches,
//! half types, integer wrapping and NaN/Inf.

mod hot_common;

use half::{bf16, f16};
use hot_common::{assert_close, expanded, permuted, rand, rand_int, sliced, stored_permuted, strides};
use kiln_cpu::eval;
use kiln_ir::{Element, Error, HostTensor, Op};

/// NumPy matmul on logical values in f64 (1-D promotion, right-aligned batch broadcasting).
fn naive(a: &[f64], ash: &[usize], b: &[f64], bsh: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let a2: Vec<usize> = if ash.len() == 1 { vec![1, ash[0]] } else { ash.to_vec() };
    let b2: Vec<usize> = if bsh.len() == 1 { vec![bsh[0], 1] } else { bsh.to_vec() };
    let (ra, rb) = (a2.len(), b2.len());
    let (m, k, n) = (a2[ra - 2], a2[ra - 1], b2[rb - 1]);
    assert_eq!(b2[rb - 2], k);
    let rank = (ra - 2).max(rb - 2);
    let pad = |s: &[usize]| {
        let mut v = vec![1; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (ab, bb) = (pad(&a2[..ra - 2]), pad(&b2[..rb - 2]));
    let batch: Vec<usize> = ab.iter().zip(&bb).map(|(&x, &y)| if x == 1 { y } else { x }).collect();
    let (sa, sb, so) = (strides(&ab), strides(&bb), strides(&batch));
    let nb: usize = batch.iter().product();
    let mut out = vec![0.0; nb * m * n];
    for bi in 0..nb {
        let (mut ia, mut ib) = (0, 0);
        for d in 0..rank {
            let idx = (bi / so[d]) % batch[d];
            ia += if ab[d] == 1 { 0 } else { idx * sa[d] };
            ib += if bb[d] == 1 { 0 } else { idx * sb[d] };
        }
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for p in 0..k {
                    s += a[ia * m * k + i * k + p] * b[ib * k * n + p * n + j];
                }
                out[bi * m * n + i * n + j] = s;
            }
        }
    }
    let mut shape = batch;
    if ash.len() > 1 {
        shape.push(m);
    }
    if bsh.len() > 1 {
        shape.push(n);
    }
    (out, shape)
}

/// Runs the kernel and checks shape, dtype and values against [`naive`].
fn check(a: &HostTensor, b: &HostTensor, tol: f64, what: &str) {
    let got = eval(&Op::MatMul, &[a, b]).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (want, shape) = naive(&a.to_f64_vec(), a.shape(), &b.to_f64_vec(), b.shape());
    assert_eq!(got.shape(), &shape[..], "{what}: shape");
    assert_eq!(got.dtype(), a.dtype(), "{what}: dtype");
    // (kiln-ir reports a contiguous layout with a 0 dim as non-contiguous, so skip empties)
    assert!(got.numel() == 0 || got.is_dense(), "{what}: result should be dense");
    assert_close(&got.to_f64_vec(), &want, tol, what);
}

fn shapes() -> Vec<(Vec<usize>, Vec<usize>)> {
    vec![
        (vec![3, 4], vec![4, 5]),
        (vec![1, 1], vec![1, 1]),
        (vec![2, 3, 4], vec![4, 5]),
        (vec![4, 5], vec![3, 5, 2]),
        (vec![2, 1, 3, 4], vec![5, 4, 6]),
        (vec![4], vec![4, 5]),
        (vec![3, 4], vec![4]),
        (vec![6], vec![6]),
        (vec![7], vec![2, 7, 3]),
        (vec![2, 3, 7], vec![7]),
        (vec![3, 0], vec![0, 2]),
        (vec![0, 4], vec![4, 3]),
        (vec![3, 4], vec![4, 0]),
        (vec![0, 3, 4], vec![4, 2]),
        (vec![2, 3, 0], vec![2, 0, 5]),
        (vec![0], vec![0]),
        // big enough for the threaded gemm and for the batch-parallel path
        (vec![130, 70], vec![70, 90]),
        (vec![8, 16, 16], vec![8, 16, 16]),
        (vec![2, 200, 64], vec![64, 300]),
    ]
}

#[test]
fn float_shapes_match_naive() {
    for (i, (sa, sb)) in shapes().into_iter().enumerate() {
        let what = format!("f32 {sa:?} @ {sb:?}");
        check(&rand::<f32>(&sa, i as u64), &rand::<f32>(&sb, 100 + i as u64), 1e-4, &what);
        let what = format!("f64 {sa:?} @ {sb:?}");
        check(&rand::<f64>(&sa, i as u64), &rand::<f64>(&sb, 100 + i as u64), 1e-12, &what);
    }
}

#[test]
fn k_zero_gives_zeros() {
    let out = eval(&Op::MatMul, &[&rand::<f32>(&[2, 3, 0], 1), &rand::<f32>(&[0, 4], 2)]).unwrap();
    assert_eq!(out.shape(), &[2, 3, 4]);
    assert!(out.to_f64_vec().iter().all(|&v| v == 0.0));
}

#[test]
fn half_types_go_through_f32() {
    for (i, (sa, sb)) in shapes().into_iter().enumerate() {
        check(&rand::<f16>(&sa, i as u64), &rand::<f16>(&sb, 7 + i as u64), 2e-2, &format!("f16 {sa:?}@{sb:?}"));
        check(&rand::<bf16>(&sa, i as u64), &rand::<bf16>(&sb, 7 + i as u64), 3e-2, &format!("bf16 {sa:?}@{sb:?}"));
    }
}

#[test]
fn transposed_and_permuted_views() {
    // a^T @ b^T from stored [K, M] and [N, K]
    let at = permuted(&rand::<f32>(&[70, 130], 1), &[1, 0]);
    let bt = permuted(&rand::<f32>(&[90, 70], 2), &[1, 0]);
    assert!(!at.layout.is_contiguous() && !bt.layout.is_contiguous());
    check(&at, &bt, 1e-4, "f32 a^T @ b^T");
    check(&at, &rand::<f32>(&[70, 5], 3), 1e-4, "f32 a^T @ b");
    // batched heads: [B, H, L, D] stored as [B, L, H, D]
    let q = stored_permuted(&rand::<f32>(&[2, 3, 5, 4], 4), &[0, 2, 1, 3]);
    let k = permuted(&stored_permuted(&rand::<f32>(&[2, 3, 6, 4], 5), &[0, 2, 1, 3]), &[0, 1, 3, 2]);
    check(&q, &k, 1e-4, "f32 q @ k^T");
    // batch dim with a stride that is not the matrix size
    let a = stored_permuted(&rand::<f64>(&[4, 3, 5], 6), &[1, 0, 2]);
    check(&a, &rand::<f64>(&[4, 5, 2], 7), 1e-12, "f64 batch-interleaved");
}

#[test]
fn broadcast_reversed_and_stepped_views() {
    // stride-0 batch: one matrix shared by every batch entry
    let b = expanded(&rand::<f32>(&[1, 4, 5], 1), &[3, 4, 5]);
    check(&rand::<f32>(&[3, 2, 4], 2), &b, 1e-4, "f32 expanded batch");
    // stride-0 row (every row of a the same)
    let a = expanded(&rand::<f32>(&[1, 4], 3), &[6, 4]);
    check(&a, &rand::<f32>(&[4, 3], 4), 1e-4, "f32 expanded rows");
    // both strides zero (a constant matrix) needs the copy path
    let c = expanded(&HostTensor::scalar(2.5f32), &[3, 4]);
    check(&c, &rand::<f32>(&[4, 2], 5), 1e-4, "f32 fully expanded");
    // rows reversed (negative row stride) and columns reversed
    let r = sliced(&rand::<f32>(&[5, 4], 6), 0, 4, -1, -1);
    check(&r, &rand::<f32>(&[4, 3], 7), 1e-4, "f32 reversed rows");
    let c = sliced(&rand::<f64>(&[4, 6], 8), 1, 5, -1, -1);
    check(&rand::<f64>(&[3, 4], 9), &c, 1e-12, "f64 reversed columns");
    // every other row and column: no unit stride at all
    let s = sliced(&sliced(&rand::<f32>(&[10, 8], 10), 0, 0, 10, 2), 1, 1, 8, 2);
    check(&s, &rand::<f32>(&[4, 3], 11), 1e-4, "f32 stepped");
    check(&rand::<f32>(&[2, 5], 12), &s, 1e-4, "f32 stepped rhs");
    // 1-D operand with a stride
    let v = sliced(&rand::<f32>(&[8], 13), 0, 0, 8, 2);
    check(&v, &rand::<f32>(&[4, 3], 14), 1e-4, "f32 strided vector lhs");
    check(&rand::<f32>(&[3, 4], 15), &v, 1e-4, "f32 strided vector rhs");
}

#[test]
fn nan_and_inf_propagate() {
    let mut a = rand::<f32>(&[3, 4], 1).to_vec::<f32>().unwrap();
    a[0] = f32::NAN; // row 0 of the result is NaN
    a[5] = f32::INFINITY; // row 1: +-inf (b has no zeros)
    let b: Vec<f32> = (0..8).map(|i| 0.5 + i as f32).collect();
    let a = HostTensor::from_vec(a, &[3, 4]).unwrap();
    let b = HostTensor::from_vec(b, &[4, 2]).unwrap();
    check(&a, &b, 1e-4, "f32 nan/inf");
    let out = eval(&Op::MatMul, &[&a, &b]).unwrap().to_f64_vec();
    assert!(out[0].is_nan() && out[1].is_nan());
    assert_eq!(out[2], f64::INFINITY);
    assert!(out[4].is_finite());
}

/// Integer matmul against exact i64 products reduced with the dtype's wrapping.
fn check_int<T: Element>(a: &HostTensor, b: &HostTensor, wrap: fn(i64) -> f64, what: &str) {
    let got = eval(&Op::MatMul, &[a, b]).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (want, shape) = naive(&a.to_f64_vec(), a.shape(), &b.to_f64_vec(), b.shape());
    assert_eq!(got.shape(), &shape[..], "{what}");
    assert_eq!(got.dtype(), T::DTYPE);
    let want: Vec<f64> = want.into_iter().map(|v| wrap(v as i64)).collect();
    assert_eq!(got.to_f64_vec(), want, "{what}");
}

#[test]
fn integer_matmul_wraps() {
    for (i, (sa, sb)) in shapes().into_iter().enumerate() {
        let s = i as u64;
        check_int::<i64>(&rand_int::<i64>(&sa, s, -50, 50), &rand_int::<i64>(&sb, s + 1, -50, 50), |v| v as f64, "i64");
        check_int::<i32>(&rand_int::<i32>(&sa, s, -9, 9), &rand_int::<i32>(&sb, s + 1, -9, 9), |v| v as i32 as f64, "i32");
        check_int::<i8>(&rand_int::<i8>(&sa, s, -100, 100), &rand_int::<i8>(&sb, s + 1, -100, 100), |v| v as i8 as f64, "i8");
        check_int::<u8>(&rand_int::<u8>(&sa, s, 0, 255), &rand_int::<u8>(&sb, s + 1, 0, 255), |v| v as u8 as f64, "u8");
    }
    // a hand-computed overflow: 100 * 100 + 100 * 100 = 20000 wraps to 32 in i8
    let a = HostTensor::from_vec(vec![100i8, 100], &[1, 2]).unwrap();
    let b = HostTensor::from_vec(vec![100i8, 100], &[2, 1]).unwrap();
    assert_eq!(eval(&Op::MatMul, &[&a, &b]).unwrap().to_vec::<i8>().unwrap(), vec![32]);
    // strided integer views
    let at = permuted(&rand_int::<i32>(&[5, 3], 1, -9, 9), &[1, 0]);
    let bx = expanded(&rand_int::<i32>(&[5, 1], 2, -9, 9), &[2, 5, 4]);
    check_int::<i32>(&at, &bx, |v| v as i32 as f64, "i32 views");
}

#[test]
fn hand_computed() {
    let a = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b = HostTensor::from_vec(vec![7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0], &[3, 2]).unwrap();
    let out = eval(&Op::MatMul, &[&a, &b]).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![58.0, 64.0, 139.0, 154.0]);
    let v = HostTensor::from_vec(vec![1.0f64, 2.0, 3.0], &[3]).unwrap();
    let dot = eval(&Op::MatMul, &[&v, &v]).unwrap();
    assert_eq!(dot.shape(), &[] as &[usize]);
    assert_eq!(dot.to_f64_vec(), vec![14.0]);
}

#[test]
fn bad_inputs_are_errors() {
    let f = rand::<f32>(&[2, 3], 1);
    let b = HostTensor::from_vec(vec![true; 6], &[3, 2]).unwrap();
    let bb = HostTensor::from_vec(vec![true; 6], &[2, 3]).unwrap();
    assert!(matches!(eval(&Op::MatMul, &[&bb, &b]), Err(Error::DType(_))));
    assert!(matches!(eval(&Op::MatMul, &[&f, &rand::<f64>(&[3, 2], 2)]), Err(Error::DType(_))));
    assert!(matches!(eval(&Op::MatMul, &[&f, &rand::<f32>(&[2, 3], 2)]), Err(Error::Shape(_))));
    assert!(matches!(eval(&Op::MatMul, &[&rand::<f32>(&[2, 2, 3], 1), &rand::<f32>(&[3, 3, 2], 2)]), Err(Error::Shape(_))));
    // a hand-built layout that reaches past its storage is refused, not read
    let mut bad = rand::<f32>(&[2, 3], 3);
    bad.layout.offset = 4;
    assert!(kiln_cpu::kernels::matmul::matmul(&bad, &rand::<f32>(&[3, 2], 4), &[2, 2]).is_err());
}
