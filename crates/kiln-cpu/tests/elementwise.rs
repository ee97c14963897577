//! Unary, binary and where kernels against naive f64 / exact-integer references, across
//! dtypes, broadcasting, empty and rank-0 shapes, non-contiguous views and NaN/Inf.

mod ewise_support;

use ewise_support::*;
use kiln_cpu::eval;
use kiln_ir::{BinaryOp, DType, Error, HostTensor, Layout, Op, UnaryOp};
use proptest::prelude::*;

const FLOAT_UNARY: [UnaryOp; 27] = {
    use UnaryOp::*;
    [
        Neg, Abs, Sign, Exp, Log, Sqrt, Rsqrt, Reciprocal, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Tanh,
        Asinh, Acosh, Atanh, Sigmoid, Relu, Erf, Erfc, Floor, Ceil, Round,
    ]
};

/// A reference erf: the Maclaurin series for |x| <= 2.5 (little cancellation there), and
/// beyond, 1 - erfc from erfc's continued fraction
/// `exp(-x²)/√π / (x + (1/2)/(x + (2/2)/(x + (3/2)/(x + ...))))`, evaluated backwards.
fn erf_ref(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() > 2.5 {
        return x.signum() * (1.0 - erfc_tail(x.abs()));
    }
    let mut term = x;
    let mut sum = x;
    for n in 1..200 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// erfc's continued fraction, accurate for `ax >= 2`.
fn erfc_tail(ax: f64) -> f64 {
    let mut k = ax;
    for n in (1..400).rev() {
        k = ax + (n as f64 / 2.0) / k;
    }
    (-ax * ax).exp() / (std::f64::consts::PI.sqrt() * k)
}

/// A reference erfc: the continued fraction for |x| >= 2 (relative accuracy kept where erfc
/// is tiny; the series loses digits near 2.5), `1 - erf` in between (erfc > 4e-3 there).
fn erfc_ref(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x >= 2.0 {
        erfc_tail(x)
    } else if x <= -2.0 {
        2.0 - erfc_tail(-x)
    } else {
        1.0 - erf_ref(x)
    }
}

fn unary_ref(op: UnaryOp, x: f64) -> f64 {
    use UnaryOp::*;
    match op {
        Neg => -x,
        Abs => x.abs(),
        Sign => {
            if x.is_nan() || x == 0.0 {
                x
            } else {
                x.signum()
            }
        }
        Exp => x.exp(),
        Log => x.ln(),
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Reciprocal => 1.0 / x,
        Sin => x.sin(),
        Cos => x.cos(),
        Tan => x.tan(),
        Asin => x.asin(),
        Acos => x.acos(),
        Atan => x.atan(),
        Sinh => x.sinh(),
        Cosh => x.cosh(),
        Tanh => x.tanh(),
        Asinh => x.asinh(),
        Acosh => x.acosh(),
        Atanh => x.atanh(),
        Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        Erf => erf_ref(x),
        Erfc => erfc_ref(x),
        Floor => x.floor(),
        Ceil => x.ceil(),
        Round => x.round_ties_even(),
        Not | IsNan | IsInf => unreachable!(),
    }
}

/// Values covering signs, zeros, halves (rounding), the asin/acosh domains, NaN and ±inf.
const SPECIAL: [f64; 20] = [
    -2.5,
    -1.5,
    -1.0,
    -0.5,
    -0.0,
    0.0,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.5,
    3.0,
    7.25,
    -40.0,
    100.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    1e-3,
];

fn un(op: UnaryOp, x: &HostTensor) -> kiln_ir::Result<HostTensor> {
    eval(&Op::Unary(op), &[x])
}

fn bin(op: BinaryOp, a: &HostTensor, b: &HostTensor) -> kiln_ir::Result<HostTensor> {
    eval(&Op::Binary(op), &[a, b])
}

#[test]
fn float_unary_ops_match_f64_reference_on_every_layout() {
    for d in FLOATS {
        let vals: Vec<f64> = SPECIAL.iter().map(|&v| round_to(v, d)).collect();
        for op in FLOAT_UNARY {
            let want: Vec<f64> = vals.iter().map(|&v| round_to(unary_ref(op, v), d)).collect();
            for (name, x) in views(&vals, &[4, 5], d) {
                let got = un(op, &x).unwrap();
                assert_eq!((got.dtype(), got.shape()), (d, &[4usize, 5][..]));
                assert!(got.is_dense());
                assert_close(&got, &want, d, &format!("{op:?} {d} {name}"));
            }
        }
    }
}

#[test]
fn isnan_isinf_give_bool_for_floats_and_false_for_integers() {
    for d in FLOATS {
        let vals: Vec<f64> = SPECIAL.iter().map(|&v| round_to(v, d)).collect();
        for (name, x) in views(&vals, &[2, 10], d) {
            let nan = un(UnaryOp::IsNan, &x).unwrap();
            let inf = un(UnaryOp::IsInf, &x).unwrap();
            assert_eq!(nan.dtype(), DType::Bool);
            let want_nan: Vec<bool> = vals.iter().map(|v| v.is_nan()).collect();
            let want_inf: Vec<bool> = vals.iter().map(|v| v.is_infinite()).collect();
            assert_eq!(nan.to_vec::<bool>().unwrap(), want_nan, "{d} {name}");
            assert_eq!(inf.to_vec::<bool>().unwrap(), want_inf, "{d} {name}");
        }
    }
    for d in INTS {
        let x = int_tensor(&[0, 1, 5], &[3], d);
        assert_eq!(un(UnaryOp::IsNan, &x).unwrap().to_vec::<bool>().unwrap(), vec![false; 3]);
        assert_eq!(un(UnaryOp::IsInf, &x).unwrap().to_vec::<bool>().unwrap(), vec![false; 3]);
    }
}

#[test]
fn round_is_half_to_even_and_sign_relu_keep_nan() {
    let x = HostTensor::from_vec(vec![0.5f32, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998, 3.5], &[8]).unwrap();
    let r = un(UnaryOp::Round, &x).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(r, vec![0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 2.0, 4.0]);
    let x = HostTensor::from_vec(vec![f32::NAN, -3.0, 0.0, 2.0, f32::NEG_INFINITY], &[5]).unwrap();
    let s = un(UnaryOp::Sign, &x).unwrap().to_vec::<f32>().unwrap();
    assert!(s[0].is_nan());
    assert_eq!(&s[1..], &[-1.0, 0.0, 1.0, -1.0]);
    let r = un(UnaryOp::Relu, &x).unwrap().to_vec::<f32>().unwrap();
    assert!(r[0].is_nan());
    assert_eq!(&r[1..], &[0.0, 0.0, 2.0, 0.0]);
    // Sigmoid saturates instead of producing NaN from inf/inf.
    let x = HostTensor::from_vec(vec![-1000.0f32, 1000.0, 0.0], &[3]).unwrap();
    assert_eq!(un(UnaryOp::Sigmoid, &x).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 1.0, 0.5]);
}

#[test]
fn f64_erf_matches_series_and_known_values() {
    let known = [
        (0.0, 0.0),
        (1e-10, 1.1283791670955126e-10),
        (0.1, 0.1124629160182849),
        (0.5, 0.5204998778130465),
        (1.0, 0.8427007929497149),
        (-1.5, -0.9661051464753108),
        (2.0, 0.9953222650189527),
        (3.0, 0.9999779095030014),
        (4.0, 0.9999999845827421),
        (f64::INFINITY, 1.0),
        (f64::NEG_INFINITY, -1.0),
    ];
    let erf = |xs: Vec<f64>| {
        let n = xs.len();
        un(UnaryOp::Erf, &HostTensor::from_vec(xs, &[n]).unwrap()).unwrap().to_vec::<f64>().unwrap()
    };
    let got = erf(known.iter().map(|k| k.0).collect());
    for ((x, want), got) in known.iter().zip(got) {
        assert!((got - want).abs() <= 2e-16 * want.abs(), "erf({x}) = {got}, want {want}");
    }
    assert!(erf(vec![f64::NAN])[0].is_nan());
    let xs: Vec<f64> = (0..600).map(|i| -5.0 + i as f64 * 0.0173).collect();
    for (x, got) in xs.iter().zip(erf(xs.clone())) {
        let want = erf_ref(*x);
        assert!((got - want).abs() <= 1e-14, "erf({x}) = {got}, series says {want}");
    }
}

#[test]
fn integer_unary_ops_wrap_and_bool_not() {
    use UnaryOp::*;
    for d in INTS {
        let (lo, hi) = int_range(d);
        let vals = [lo, lo + 1, -3, -1, 0, 1, 7, hi - 1, hi].map(|v| wrap(v, d));
        for (name, x) in views(&vals.map(|v| v as f64), &[3, 3], d) {
            // i64/u64 extremes are not exact in f64: rebuild those views from exact values.
            let x = if matches!(d, DType::I64 | DType::U64) { exact_view(&vals, name, d) } else { x };
            for op in [Neg, Abs, Sign, Relu, Not] {
                let want: Vec<i128> = vals
                    .iter()
                    .map(|&v| {
                        wrap(
                            match op {
                                Neg => -v,
                                Abs => v.abs(),
                                Sign => v.signum(),
                                Relu => v.max(0),
                                Not => !v,
                                _ => unreachable!(),
                            },
                            d,
                        )
                    })
                    .collect();
                assert_eq!(ints(&un(op, &x).unwrap()), want, "{op:?} {d} {name}");
            }
        }
        // Float-only ops are rejected with a dtype error, not a panic.
        assert!(matches!(un(Exp, &int_tensor(&[1], &[1], d)), Err(Error::DType(_))));
    }
    let b = HostTensor::from_vec(vec![true, false], &[2]).unwrap();
    assert_eq!(un(Not, &b).unwrap().to_vec::<bool>().unwrap(), vec![false, true]);
    assert!(matches!(un(Neg, &b), Err(Error::DType(_))));
    assert!(matches!(un(Not, &HostTensor::scalar(1.0f32)), Err(Error::DType(_))));
}

/// An i64 view (as [`views`] builds them, for a [3, 3] tensor) from exact values.
fn exact_view(vals: &[i128], name: &str, d: DType) -> HostTensor {
    let base = int_tensor(vals, &[9], d);
    match name {
        "dense" => base.with_layout(Layout::contiguous(&[3, 3])),
        "transposed" => {
            let mut t = vec![0; 9];
            for i in 0..3 {
                for j in 0..3 {
                    t[j * 3 + i] = vals[i * 3 + j];
                }
            }
            int_tensor(&t, &[3, 3], d).with_layout(Layout::contiguous(&[3, 3]).permute(&[1, 0]).unwrap())
        }
        "reversed" => {
            let rows: Vec<i128> = (0..3).rev().flat_map(|r| vals[r * 3..r * 3 + 3].to_vec()).collect();
            int_tensor(&rows, &[3, 3], d).with_layout(Layout::contiguous(&[3, 3]).slice(0, 2, -1, -1).unwrap())
        }
        _ => {
            let mut t = vec![5i128; 21];
            for i in 0..3 {
                for j in 0..3 {
                    t[i * 7 + 2 * j + 1] = vals[i * 3 + j];
                }
            }
            int_tensor(&t, &[21], d).with_layout(Layout::contiguous(&[3, 7]).slice(1, 1, 7, 2).unwrap())
        }
    }
}

/// Broadcast pairs: trailing vector, size-1 dims on both sides, rank 0, empty dims.
const SHAPE_PAIRS: [(&[usize], &[usize]); 9] = [
    (&[3, 4], &[4]),
    (&[2, 1, 4], &[3, 1]),
    (&[], &[2, 3]),
    (&[2, 3], &[]),
    (&[], &[]),
    (&[0, 3], &[3]),
    (&[0, 3], &[1, 3]),
    (&[1], &[5]),
    (&[4, 1, 1, 3], &[1, 2, 3, 1]),
];

fn broadcast_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    kiln_ir::broadcast_fixed(a, b, "test").unwrap()
}

fn float_bin_ref(op: BinaryOp, x: f64, y: f64) -> f64 {
    use BinaryOp::*;
    let b = |c: bool| c as u8 as f64;
    match op {
        Add => x + y,
        Sub => x - y,
        Mul => x * y,
        Div => x / y,
        Rem => x % y,
        Pow => x.powf(y),
        Max => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.max(y)
            }
        }
        Min => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.min(y)
            }
        }
        Eq => b(x == y),
        Ne => b(x != y),
        Lt => b(x < y),
        Le => b(x <= y),
        Gt => b(x > y),
        Ge => b(x >= y),
        // Python's float `%` (floor modulo); covered with its edge cases in tests/mod_shift.rs.
        Mod => x - (x / y).floor() * y,
        And | Or | Xor | Shl | Shr => unreachable!(),
    }
}

const FLOAT_BINARY: [BinaryOp; 14] = {
    use BinaryOp::*;
    [Add, Sub, Mul, Div, Rem, Pow, Max, Min, Eq, Ne, Lt, Le, Gt, Ge]
};

#[test]
fn float_binary_ops_broadcast_like_numpy() {
    let mut rng = Lcg::new(1);
    for d in FLOATS {
        for (sa, sb) in SHAPE_PAIRS {
            let out = broadcast_shape(sa, sb);
            let na: usize = sa.iter().product();
            let nb: usize = sb.iter().product();
            // Mostly random values, with NaN/inf/zero sprinkled in.
            let mut va: Vec<f64> = rng.vals(na, 4.0);
            let mut vb: Vec<f64> = rng.vals(nb, 4.0);
            for (i, v) in va.iter_mut().enumerate() {
                if i % 5 == 3 {
                    *v = SPECIAL[i % SPECIAL.len()];
                }
                *v = round_to(*v, d);
            }
            for (i, v) in vb.iter_mut().enumerate() {
                if i % 4 == 1 {
                    *v = SPECIAL[(i * 7) % SPECIAL.len()];
                }
                *v = round_to(*v, d);
            }
            for op in FLOAT_BINARY {
                let want: Vec<f64> = (0..out.iter().product())
                    .map(|i| {
                        let idx = unravel(i, &out);
                        round_to(float_bin_ref(op, va[bcast_index(&idx, sa)], vb[bcast_index(&idx, sb)]), d)
                    })
                    .collect();
                let want_dtype = if op.is_comparison() { DType::Bool } else { d };
                for (an, a) in views(&va, sa, d) {
                    for (bn, b) in views(&vb, sb, d).into_iter().take(2) {
                        let got = bin(op, &a, &b).unwrap();
                        assert_eq!(got.dtype(), want_dtype);
                        assert_eq!(got.shape(), &out[..]);
                        assert_close(&got, &want, d, &format!("{op:?} {d} {sa:?}({an}) {sb:?}({bn})"));
                    }
                }
            }
        }
    }
}

#[test]
fn float_max_min_nan_wins_and_rem_has_dividend_sign() {
    let a = HostTensor::from_vec(vec![f32::NAN, 1.0, f32::NAN, -7.5, 7.5, f32::INFINITY], &[6]).unwrap();
    let b = HostTensor::from_vec(vec![1.0f32, f32::NAN, f32::NAN, 2.0, -2.0, 1.0], &[6]).unwrap();
    let mx = bin(BinaryOp::Max, &a, &b).unwrap().to_vec::<f32>().unwrap();
    let mn = bin(BinaryOp::Min, &a, &b).unwrap().to_vec::<f32>().unwrap();
    assert!(mx[..3].iter().all(|v| v.is_nan()) && mn[..3].iter().all(|v| v.is_nan()));
    assert_eq!(&mx[3..], &[2.0, 7.5, f32::INFINITY]);
    assert_eq!(&mn[3..], &[-7.5, -2.0, 1.0]);
    let r = bin(BinaryOp::Rem, &a, &b).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(&r[3..5], &[-1.5, 1.5]);
    assert!(r[5].is_nan());
}

fn int_bin_ref(op: BinaryOp, x: i128, y: i128, d: DType) -> i128 {
    use BinaryOp::*;
    let b = |c: bool| c as i128;
    match op {
        Add => wrap(x + y, d),
        Sub => wrap(x - y, d),
        // Wrapping in i128 first: u64 products overflow i128, and 2^128 is a multiple of 2^bits.
        Mul => wrap(x.wrapping_mul(y), d),
        Div => wrap(x / y, d),
        Rem => wrap(x % y, d),
        Pow => (0..y).fold(1i128, |acc, _| wrap(acc.wrapping_mul(x), d)),
        Max => x.max(y),
        Min => x.min(y),
        Eq => b(x == y),
        Ne => b(x != y),
        Lt => b(x < y),
        Le => b(x <= y),
        Gt => b(x > y),
        Ge => b(x >= y),
        And => wrap(x & y, d),
        Or => wrap(x | y, d),
        Xor => wrap(x ^ y, d),
        // Mod, Shl and Shr are tested against their own references in tests/mod_shift.rs.
        Mod => wrap(((x % y) + y) % y, d),
        Shl | Shr => unreachable!(),
    }
}

const ALL_BINARY: [BinaryOp; 17] = {
    use BinaryOp::*;
    [Add, Sub, Mul, Div, Rem, Pow, Max, Min, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Xor]
};

#[test]
fn integer_binary_ops_wrap_and_truncate() {
    for d in INTS {
        let (lo, hi) = int_range(d);
        // Row vector a (with extremes) against a column b of non-zero divisors/small exponents.
        let va: Vec<i128> = [lo, lo + 1, -7, -1, 0, 1, 7, 100, hi].map(|v| wrap(v, d)).to_vec();
        let vb: Vec<i128> = [-1, 3, 2, -7, 1].map(|v| wrap(v, d)).to_vec();
        let a = int_tensor(&va, &[1, 9], d);
        let b = int_tensor(&vb, &[5, 1], d);
        for op in ALL_BINARY {
            // Signed types get negative exponents (an error) and wide unsigned ones exponents
            // too large for the reference loop: both use small exponents instead.
            let small_exp = op == BinaryOp::Pow && (d.is_signed() || int_range(d).1 > u16::MAX as i128);
            let bb = if small_exp { int_tensor(&[0, 1, 2, 3, 5], &[5, 1], d) } else { b.clone() };
            let vbb = ints(&bb);
            let got = bin(op, &a, &bb).unwrap();
            assert_eq!(got.shape(), &[5, 9]);
            let want: Vec<i128> = (0..45).map(|i| int_bin_ref(op, va[i % 9], vbb[i / 9], d)).collect();
            assert_eq!(ints(&got), want, "{op:?} {d}");
            // The same through a transposed/expanded layout of b.
            let bt = bb.with_layout(bb.layout.broadcast_to(&[5, 9]).unwrap());
            assert_eq!(ints(&bin(op, &a, &bt).unwrap()), want, "{op:?} {d} expanded");
        }
    }
    // i64::MIN / -1 and i64::MIN % -1 wrap instead of panicking.
    let a = HostTensor::from_vec(vec![i64::MIN, i64::MIN], &[2]).unwrap();
    let b = HostTensor::from_vec(vec![-1i64, -1], &[2]).unwrap();
    assert_eq!(bin(BinaryOp::Div, &a, &b).unwrap().to_vec::<i64>().unwrap(), vec![i64::MIN; 2]);
    assert_eq!(bin(BinaryOp::Rem, &a, &b).unwrap().to_vec::<i64>().unwrap(), vec![0; 2]);
    // Large exponents wrap (3^100 mod 2^32, and 2^40 == 0 in i32).
    let a = HostTensor::from_vec(vec![3i32, 2, -1, 0], &[4]).unwrap();
    let b = HostTensor::from_vec(vec![100i32, 40, 1_000_001, 0], &[4]).unwrap();
    let p3 = (0..100).fold(1i32, |acc, _| acc.wrapping_mul(3));
    assert_eq!(bin(BinaryOp::Pow, &a, &b).unwrap().to_vec::<i32>().unwrap(), vec![p3, 0, -1, 1]);
}

#[test]
fn integer_division_by_zero_and_negative_power_are_errors() {
    for d in INTS {
        let a = int_tensor(&[1, 2, 3, 4, 5, 6], &[2, 3], d);
        for op in [BinaryOp::Div, BinaryOp::Rem] {
            let z = int_tensor(&[1, 0, 2], &[3], d);
            match bin(op, &a, &z) {
                Err(Error::Value(m)) => assert!(m.contains("division by zero"), "{m}"),
                other => panic!("{op:?} {d}: {other:?}"),
            }
            // A zero that broadcasts over the whole output, and a rank-0 zero.
            assert!(matches!(bin(op, &a, &int_tensor(&[0], &[1], d)), Err(Error::Value(_))));
            assert!(matches!(bin(op, &a, &int_tensor(&[0], &[], d)), Err(Error::Value(_))));
            // An empty output divides nothing.
            let e = int_tensor(&[], &[0, 3], d);
            assert_eq!(bin(op, &e, &z).unwrap().shape(), &[0, 3]);
        }
        if d.is_signed() {
            let n = int_tensor(&[2, -1, 1], &[3], d);
            assert!(matches!(bin(BinaryOp::Pow, &a, &n), Err(Error::Value(_))));
        }
    }
    // Float division by zero is IEEE, not an error.
    let a = HostTensor::from_vec(vec![1.0f32, -1.0, 0.0], &[3]).unwrap();
    let z = HostTensor::from_vec(vec![0.0f32; 3], &[3]).unwrap();
    let q = bin(BinaryOp::Div, &a, &z).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(&q[..2], &[f32::INFINITY, f32::NEG_INFINITY]);
    assert!(q[2].is_nan());
}

#[test]
fn bool_binary_ops_follow_truth_tables() {
    let a = HostTensor::from_vec(vec![false, false, true, true], &[4]).unwrap();
    let b = HostTensor::from_vec(vec![false, true, false, true], &[4]).unwrap();
    let table: [(BinaryOp, [bool; 4]); 11] = {
        use BinaryOp::*;
        [
            (And, [false, false, false, true]),
            (Or, [false, true, true, true]),
            (Xor, [false, true, true, false]),
            (Max, [false, true, true, true]),
            (Min, [false, false, false, true]),
            (Eq, [true, false, false, true]),
            (Ne, [false, true, true, false]),
            (Lt, [false, true, false, false]),
            (Le, [true, true, false, true]),
            (Gt, [false, false, true, false]),
            (Ge, [true, false, true, true]),
        ]
    };
    for (op, want) in table {
        assert_eq!(bin(op, &a, &b).unwrap().to_vec::<bool>().unwrap(), want, "{op:?}");
    }
    assert!(matches!(bin(BinaryOp::Add, &a, &b), Err(Error::DType(_))));
    let f = HostTensor::from_vec(vec![1.0f32], &[1]).unwrap();
    assert!(matches!(bin(BinaryOp::And, &f, &f), Err(Error::DType(_))));
    let i = HostTensor::from_vec(vec![1i32], &[1]).unwrap();
    assert!(matches!(bin(BinaryOp::Add, &f, &i), Err(Error::DType(_))));
    let f3 = HostTensor::zeros(DType::F32, &[3]);
    assert!(matches!(bin(BinaryOp::Add, &f3, &HostTensor::zeros(DType::F32, &[2])), Err(Error::Shape(_))));
}

#[test]
fn where_broadcasts_all_three_in_every_dtype() {
    let mut rng = Lcg::new(7);
    let cases: [(&[usize], &[usize], &[usize]); 5] = [
        (&[2, 3], &[2, 3], &[2, 3]),
        (&[2, 1], &[3], &[]),
        (&[], &[4, 2], &[1, 2]),
        (&[3, 1, 2], &[1, 4, 1], &[2]),
        (&[0, 2], &[2], &[1]),
    ];
    for d in DType::ALL {
        for (sc, sx, sy) in cases {
            let out = broadcast_shape(&broadcast_shape(sc, sx), sy);
            let nc: usize = sc.iter().product();
            let vc: Vec<f64> = (0..nc).map(|_| (rng.below(2)) as f64).collect();
            let vx: Vec<f64> = rng.vals(sx.iter().product(), 50.0).iter().map(|&v| round_to(v, d)).collect();
            let vy: Vec<f64> = rng.vals(sy.iter().product(), 50.0).iter().map(|&v| round_to(v, d)).collect();
            let want: Vec<f64> = (0..out.iter().product())
                .map(|i| {
                    let idx = unravel(i, &out);
                    if vc[bcast_index(&idx, sc)] != 0.0 { vx[bcast_index(&idx, sx)] } else { vy[bcast_index(&idx, sy)] }
                })
                .collect();
            for (cn, c) in views(&vc, sc, DType::Bool) {
                for (xn, x) in views(&vx, sx, d).into_iter().rev().take(2) {
                    let got = eval(&Op::Where, &[&c, &x, &tensor(&vy, sy, d)]).unwrap();
                    assert_eq!((got.dtype(), got.shape()), (d, &out[..]));
                    assert_eq!(got.to_f64_vec(), want, "where {d} {sc:?}({cn}) {sx:?}({xn}) {sy:?}");
                }
            }
        }
    }
    let c = HostTensor::from_vec(vec![true], &[1]).unwrap();
    let x = HostTensor::from_vec(vec![1.0f32], &[1]).unwrap();
    let y = HostTensor::from_vec(vec![1.0f64], &[1]).unwrap();
    assert!(matches!(eval(&Op::Where, &[&c, &x, &y]), Err(Error::DType(_))));
    assert!(matches!(eval(&Op::Where, &[&x, &x, &x]), Err(Error::DType(_))));
}

/// Outputs above the parallel threshold, through the bias-add fast paths and a transposed
/// input whose rows do not line up with the threads' chunks.
#[test]
fn large_outputs_and_bias_broadcasts_match_naive_loops() {
    let mut rng = Lcg::new(3);
    let (n, c, h, w) = (4, 16, 33, 31);
    let x = rng.vals(n * c * h * w, 3.0);
    let bias = rng.vals(c, 3.0);
    let xt = tensor(&x, &[n, c, h, w], DType::F32);
    let bt = tensor(&bias, &[1, c, 1, 1], DType::F32);
    let got = bin(BinaryOp::Add, &xt, &bt).unwrap().to_vec::<f32>().unwrap();
    for (i, &g) in got.iter().enumerate() {
        let ch = (i / (h * w)) % c;
        assert_eq!(g, (x[i] as f32) + (bias[ch] as f32), "nchw bias at {i}");
    }
    // [N, C] + [C], and [C] * [N, C] (scalar-like operand first).
    let rows = 3000;
    let m = rng.vals(rows * c, 3.0);
    let mt = tensor(&m, &[rows, c], DType::F32);
    let vt = tensor(&bias, &[c], DType::F32);
    let add = bin(BinaryOp::Add, &mt, &vt).unwrap().to_vec::<f32>().unwrap();
    let mul = bin(BinaryOp::Mul, &vt, &mt).unwrap().to_vec::<f32>().unwrap();
    for i in 0..rows * c {
        assert_eq!(add[i], m[i] as f32 + bias[i % c] as f32);
        assert_eq!(mul[i], bias[i % c] as f32 * m[i] as f32);
    }
    // Transposed [300, 257] view, unary and binary with a scalar.
    let (r, k) = (300, 257);
    let v = rng.vals(r * k, 2.0);
    let tv = tensor(&v, &[r, k], DType::F64).with_layout(Layout::contiguous(&[r, k]).permute(&[1, 0]).unwrap());
    let e = un(UnaryOp::Exp, &tv).unwrap().to_vec::<f64>().unwrap();
    let s = bin(BinaryOp::Sub, &tv, &HostTensor::scalar(1.0f64)).unwrap().to_vec::<f64>().unwrap();
    for i in 0..k {
        for j in 0..r {
            assert_eq!(e[i * r + j], v[j * k + i].exp());
            assert_eq!(s[i * r + j], v[j * k + i] - 1.0);
        }
    }
}

#[test]
fn layouts_outside_their_storage_are_errors_not_panics() {
    let t = HostTensor::from_vec(vec![1.0f32; 4], &[4]).unwrap();
    let bad = t.with_layout(Layout { shape: vec![4], strides: vec![2], offset: 0 });
    assert!(matches!(un(UnaryOp::Neg, &bad), Err(Error::Shape(_))));
    assert!(matches!(bin(BinaryOp::Add, &bad, &t), Err(Error::Shape(_))));
}

/// Two shapes derived from one full shape (dims dropped from the front or set to 1), so
/// that they broadcast together.
fn broadcastable() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    proptest::collection::vec(0usize..4, 0..5).prop_flat_map(|full| {
        let r = full.len();
        let side = (0..=r, proptest::collection::vec(any::<bool>(), r));
        (Just(full), side.clone(), side).prop_map(|(full, (da, ma), (db, mb))| {
            let mk = |drop: usize, mask: &[bool]| -> Vec<usize> {
                (drop..full.len()).map(|i| if mask[i] { 1 } else { full[i] }).collect()
            };
            (mk(da, &ma), mk(db, &mb))
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_broadcasts_match_naive(
        (sa, sb) in broadcastable(),
        op in proptest::sample::select(vec![BinaryOp::Add, BinaryOp::Mul, BinaryOp::Sub, BinaryOp::Max, BinaryOp::Lt]),
        d in proptest::sample::select(vec![DType::F32, DType::I32, DType::F16]),
        view in 0usize..4,
        seed in any::<u64>(),
    ) {
        let out = broadcast_shape(&sa, &sb);
        let mut rng = Lcg::new(seed);
        let va: Vec<f64> = rng.vals(sa.iter().product(), 20.0).iter().map(|v| round_to(v.round(), d)).collect();
        let vb: Vec<f64> = rng.vals(sb.iter().product(), 20.0).iter().map(|v| round_to(v.round(), d)).collect();
        let views_a = views(&va, &sa, d);
        let (_, a) = &views_a[view.min(views_a.len() - 1)];
        let b = tensor(&vb, &sb, d);
        let got = bin(op, a, &b).unwrap();
        prop_assert_eq!(got.shape(), &out[..]);
        let want: Vec<f64> = (0..out.iter().product())
            .map(|i| {
                let idx = unravel(i, &out);
                round_to(float_bin_ref(op, va[bcast_index(&idx, &sa)], vb[bcast_index(&idx, &sb)]), d)
            })
            .collect();
        prop_assert_eq!(got.to_f64_vec(), want);
    }
}
