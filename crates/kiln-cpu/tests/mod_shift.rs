//! Floor modulo (`BinaryOp::Mod`) and logical bit shifts (`Shl`/`Shr`) against naive references
//! in i128 arithmetic on the two's-complement bit patterns.

mod common_kernels;

use common_kernels::*;
use kiln_cpu::eval;
use kiln_ir::{BinaryOp, DType, Error, HostTensor, Op};

fn bin(op: BinaryOp, a: &HostTensor, b: &HostTensor) -> kiln_ir::Result<HostTensor> {
    eval(&Op::Binary(op), &[a, b])
}

fn int_dtypes() -> Vec<DType> {
    DType::ALL.into_iter().filter(|d| d.is_int()).collect()
}

/// The representable range of an integer dtype.
fn range(d: DType) -> (i128, i128) {
    let bits = d.size_of() as u32 * 8;
    if d.is_signed() { (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1) } else { (0, (1i128 << bits) - 1) }
}

/// `v` reduced into the dtype's range modulo 2^bits (two's complement).
fn wrap(v: i128, d: DType) -> i128 {
    let bits = d.size_of() as u32 * 8;
    let m = 1i128 << bits;
    let u = v.rem_euclid(m);
    if d.is_signed() && u >= m / 2 { u - m } else { u }
}

#[test]
fn integer_mod_has_the_sign_of_the_divisor() {
    for d in int_dtypes() {
        let (lo, hi) = range(d);
        let mut a: Vec<i128> = vec![7, 6, 0, 1, 100, hi, hi - 1];
        let mut b: Vec<i128> = vec![3, 3, 5, 1, 7, 2, 10];
        if d.is_signed() {
            a.extend([-7, 7, -7, -6, lo, lo, lo + 1, -1]);
            b.extend([3, -3, -3, 4, -1, 3, -7, hi]);
        }
        let n = a.len();
        let to_f = |v: &[i128]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        // Exact in f64 only up to 2^53: keep the wide types' extremes out of the f64 path.
        let keep: Vec<usize> = (0..n).filter(|&i| a[i].abs() < 1 << 53 && b[i].abs() < 1 << 53).collect();
        let (a, b): (Vec<i128>, Vec<i128>) = keep.iter().map(|&i| (a[i], b[i])).unzip();
        let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| wrap(((x % y) + y) % y, d) as f64).collect();
        let (ta, tb) = (tensor(d, &to_f(&a), &[a.len()]), tensor(d, &to_f(&b), &[b.len()]));
        let out = bin(BinaryOp::Mod, &ta, &tb).unwrap();
        assert_eq!(out.dtype(), d);
        assert_eq!(out.to_f64_vec(), want, "{d}");
        // Broadcast over a transposed 2-D operand.
        let a2 = tensor(d, &[7.0, 9.0, 4.0, 5.0, 3.0, 11.0], &[2, 3]);
        let b2 = tensor(d, &[2.0, 4.0], &[2, 1]);
        let out = bin(BinaryOp::Mod, &transposed(&a2), &b2).unwrap();
        assert_eq!(out.to_f64_vec(), vec![1.0, 1.0, 0.0, 1.0, 3.0, 3.0], "{d} broadcast");
    }
    let e =
        bin(BinaryOp::Mod, &tensor(DType::I32, &[1.0, 2.0], &[2]), &tensor(DType::I32, &[1.0, 0.0], &[2])).unwrap_err();
    assert!(matches!(e, Error::Value(_)) && e.to_string().contains("division by zero"), "{e}");
    let e = bin(BinaryOp::Mod, &tensor(DType::Bool, &[1.0], &[1]), &tensor(DType::Bool, &[1.0], &[1])).unwrap_err();
    assert!(matches!(e, Error::DType(_)), "{e}");
}

#[test]
fn float_mod_follows_python() {
    // Expected values from Python's `%` (float).
    let inf = f64::INFINITY;
    let cases = [
        (-7.0, 3.0, 2.0),
        (7.0, -3.0, -2.0),
        (-7.0, -3.0, -1.0),
        (5.5, 2.0, 1.5),
        (-5.5, 2.0, 0.5),
        (-4.0, 2.0, 0.0),
        (4.0, -2.0, -0.0),
        (5.0, inf, 5.0),
        (-5.0, inf, inf),
        (5.0, -inf, -inf),
        (-0.0, 3.0, 0.0),
        (5.0, 0.0, f64::NAN),
        (inf, 3.0, f64::NAN),
        (f64::NAN, 3.0, f64::NAN),
    ];
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let a: Vec<f64> = cases.iter().map(|c| c.0).collect();
        let b: Vec<f64> = cases.iter().map(|c| c.1).collect();
        let out = bin(BinaryOp::Mod, &tensor(d, &a, &[a.len()]), &tensor(d, &b, &[b.len()])).unwrap().to_f64_vec();
        for (i, c) in cases.iter().enumerate() {
            let ok = if c.2.is_nan() {
                out[i].is_nan()
            } else {
                out[i] == c.2 && out[i].is_sign_negative() == c.2.is_sign_negative()
            };
            assert!(ok, "{d}: {} mod {} = {}, want {}", c.0, c.1, out[i], c.2);
        }
    }
    // Properties on many values: |r| < |b|, r has b's sign (or is zero), (a - r) / b is whole.
    let a = noise(500, 1, 100.0);
    let b: Vec<f64> = noise(500, 2, 10.0).iter().map(|v| if v.abs() < 0.01 { 1.0 } else { *v }).collect();
    let out =
        bin(BinaryOp::Mod, &tensor(DType::F64, &a, &[500]), &tensor(DType::F64, &b, &[500])).unwrap().to_f64_vec();
    for i in 0..500 {
        let (r, y) = (out[i], b[i]);
        assert!(r.abs() < y.abs() + 1e-12, "{} mod {y} = {r}", a[i]);
        assert!(r == 0.0 || (r < 0.0) == (y < 0.0), "{} mod {y} = {r}", a[i]);
        let q = (a[i] - r) / y;
        assert!((q - q.round()).abs() < 1e-9, "{} mod {y} = {r}", a[i]);
    }
}

/// Logical shifts of the bit pattern of `v` by `s` in a `d`-wide integer.
fn naive_shift(v: i128, s: i128, d: DType, left: bool) -> i128 {
    let bits = d.size_of() as i128 * 8;
    if s >= bits {
        return 0;
    }
    let mask = (1i128 << bits) - 1;
    let pattern = v & mask;
    let r = if left { (pattern << s) & mask } else { pattern >> s };
    wrap(r, d)
}

#[test]
fn shifts_are_logical_and_saturate_to_zero() {
    for d in int_dtypes() {
        let bits = d.size_of() as i128 * 8;
        let (lo, _) = range(d);
        let mut vals: Vec<i128> = vec![0, 1, 5, 0x5a, 127];
        if d.is_signed() {
            vals.extend([-1, -128.max(lo), -3]);
        }
        let shifts: Vec<i128> = vec![0, 1, 3, 7, bits - 1, bits, bits + 1, 100];
        let (mut a, mut b) = (vec![], vec![]);
        for &v in &vals {
            for &s in &shifts {
                a.push(v);
                b.push(s);
            }
        }
        for left in [true, false] {
            let op = if left { BinaryOp::Shl } else { BinaryOp::Shr };
            let want: Vec<i128> = a.iter().zip(&b).map(|(&v, &s)| naive_shift(v, s, d, left)).collect();
            // Skip results f64 cannot hold exactly (64-bit patterns).
            let keep: Vec<usize> = (0..want.len()).filter(|&i| want[i].abs() < 1 << 53).collect();
            let pick = |v: &[i128]| keep.iter().map(|&i| v[i] as f64).collect::<Vec<_>>();
            let (ta, tb) = (tensor(d, &pick(&a), &[keep.len()]), tensor(d, &pick(&b), &[keep.len()]));
            let out = bin(op, &strided(&ta), &tb).unwrap();
            assert_eq!(out.dtype(), d);
            assert_eq!(out.to_f64_vec(), pick(&want), "{d} {op:?}");
        }
    }
    // Exact 64-bit patterns, checked through the typed data.
    let a = HostTensor::from_vec(vec![-1i64, i64::MIN, 3], &[3]).unwrap();
    let s = HostTensor::from_vec(vec![60i64, 63, 62], &[3]).unwrap();
    let out = bin(BinaryOp::Shr, &a, &s).unwrap().to_vec::<i64>().unwrap();
    assert_eq!(out, vec![15, 1, 0]);
    let out = bin(BinaryOp::Shl, &a, &s).unwrap().to_vec::<i64>().unwrap();
    assert_eq!(out, vec![-(1i64 << 60), 0, -(1i64 << 62)]);
}

#[test]
fn shift_errors() {
    let a = tensor(DType::I32, &[1.0, 2.0], &[2]);
    let e = bin(BinaryOp::Shl, &a, &tensor(DType::I32, &[1.0, -1.0], &[2])).unwrap_err();
    assert!(matches!(e, Error::Value(_)) && e.to_string().contains("negative shift"), "{e}");
    let f = tensor(DType::F32, &[1.0], &[1]);
    assert!(matches!(bin(BinaryOp::Shr, &f, &f), Err(Error::DType(_))));
    let b = tensor(DType::Bool, &[1.0], &[1]);
    assert!(matches!(bin(BinaryOp::Shl, &b, &b), Err(Error::DType(_))));
}
