//! Exact checks of the i16/u16/u32/u64 paths at their extremes. Values above 2^53 are not
//! representable in f64, so every expectation here is computed in integer arithmetic
//! (wrapping, as the kernels document) and compared bit for bit: a kernel that took a detour
//! through f64 or through i64 ordering would fail.

use kiln_cpu::eval;
use kiln_ir::{ArgReduceOp, BinaryOp, DType, Element, Error, HostTensor, Op, PadMode, ReduceOp, UnaryOp};

const BIG: u64 = (1 << 53) + 1;

fn t<T: Element>(v: Vec<T>, shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v, shape).unwrap()
}

fn bin(op: BinaryOp, a: &HostTensor, b: &HostTensor) -> kiln_ir::Result<HostTensor> {
    eval(&Op::Binary(op), &[a, b])
}

fn un(op: UnaryOp, x: &HostTensor) -> HostTensor {
    eval(&Op::Unary(op), &[x]).unwrap()
}

fn cast(x: &HostTensor, to: DType) -> HostTensor {
    eval(&Op::Cast(to), &[x]).unwrap()
}

fn reduce(op: ReduceOp, x: &HostTensor, axes: &[usize]) -> HostTensor {
    eval(&Op::Reduce { op, axes: axes.to_vec(), keep_dims: false }, &[x]).unwrap()
}

#[test]
fn u64_arithmetic_wraps_and_stays_exact_above_2_pow_53() {
    let a = t(vec![u64::MAX, BIG, 0, u64::MAX - 1, 1 << 63], &[5]);
    let b = t(vec![1u64, 2, 1, 3, 1 << 63], &[5]);
    let add = bin(BinaryOp::Add, &a, &b).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(add, vec![0, BIG + 2, 1, 1, 0]);
    let sub = bin(BinaryOp::Sub, &a, &b).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(sub, vec![u64::MAX - 1, BIG - 2, u64::MAX, u64::MAX - 4, 0]);
    let mul = bin(BinaryOp::Mul, &a, &b).unwrap().to_vec::<u64>().unwrap();
    let want: Vec<u64> = [u64::MAX, BIG, 0, u64::MAX - 1, 1 << 63]
        .iter()
        .zip([1u64, 2, 1, 3, 1 << 63])
        .map(|(x, y)| x.wrapping_mul(y))
        .collect();
    assert_eq!(mul, want);
    // Unsigned division and remainder, not signed ones of the same bits.
    let div = bin(BinaryOp::Div, &a, &b).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(div, vec![u64::MAX, BIG / 2, 0, (u64::MAX - 1) / 3, 1]);
    let rem = bin(BinaryOp::Rem, &a, &b).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(rem, vec![0, 1, 0, (u64::MAX - 1) % 3, 0]);
    // A broadcast scalar above 2^53.
    let s = t(vec![BIG], &[]);
    let got = bin(BinaryOp::Add, &t(vec![0u64, 1, 2], &[3]), &s).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(got, vec![BIG, BIG + 1, BIG + 2]);
}

#[test]
fn u64_comparisons_max_min_and_bitwise_are_exact_and_unsigned() {
    let a = t(vec![BIG, u64::MAX, 1 << 63, 5, 0], &[5]);
    let b = t(vec![BIG - 1, u64::MAX - 1, 1, 5, u64::MAX], &[5]);
    // BIG and BIG-1 are the same f64; values >= 2^63 are negative as i64.
    let cmp = |op| bin(op, &a, &b).unwrap().to_vec::<bool>().unwrap();
    assert_eq!(cmp(BinaryOp::Gt), vec![true, true, true, false, false]);
    assert_eq!(cmp(BinaryOp::Lt), vec![false, false, false, false, true]);
    assert_eq!(cmp(BinaryOp::Eq), vec![false, false, false, true, false]);
    assert_eq!(cmp(BinaryOp::Ne), vec![true, true, true, false, true]);
    assert_eq!(cmp(BinaryOp::Ge), vec![true, true, true, true, false]);
    assert_eq!(cmp(BinaryOp::Le), vec![false, false, false, true, true]);
    let max = bin(BinaryOp::Max, &a, &b).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(max, vec![BIG, u64::MAX, 1 << 63, 5, u64::MAX]);
    let min = bin(BinaryOp::Min, &a, &b).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(min, vec![BIG - 1, u64::MAX - 1, 1, 5, 0]);
    let xa = [BIG, u64::MAX, 1 << 63, 5, 0];
    let xb = [BIG - 1, u64::MAX - 1, 1, 5, u64::MAX];
    let bw = |op, f: fn(u64, u64) -> u64| {
        let want: Vec<u64> = xa.iter().zip(xb).map(|(&x, y)| f(x, y)).collect();
        assert_eq!(bin(op, &a, &b).unwrap().to_vec::<u64>().unwrap(), want, "{op:?}");
    };
    bw(BinaryOp::And, |x, y| x & y);
    bw(BinaryOp::Or, |x, y| x | y);
    bw(BinaryOp::Xor, |x, y| x ^ y);
    assert_eq!(un(UnaryOp::Not, &a).to_vec::<u64>().unwrap(), xa.map(|x| !x).to_vec());
}

#[test]
fn u16_and_u32_comparisons_use_the_unsigned_order() {
    // 40000 and 65535 are negative as i16; 3e9 is negative as i32.
    let a = t(vec![40000u16, 65535, 1, 32768], &[4]);
    let b = t(vec![50000u16, 1, 1, 32767], &[4]);
    assert_eq!(bin(BinaryOp::Lt, &a, &b).unwrap().to_vec::<bool>().unwrap(), vec![true, false, false, false]);
    assert_eq!(bin(BinaryOp::Gt, &a, &b).unwrap().to_vec::<bool>().unwrap(), vec![false, true, false, true]);
    assert_eq!(bin(BinaryOp::Le, &a, &b).unwrap().to_vec::<bool>().unwrap(), vec![true, false, true, false]);
    assert_eq!(bin(BinaryOp::Max, &a, &b).unwrap().to_vec::<u16>().unwrap(), vec![50000, 65535, 1, 32768]);
    let a = t(vec![3_000_000_000u32, 7], &[2]);
    let b = t(vec![2u32, 3_000_000_000], &[2]);
    assert_eq!(bin(BinaryOp::Gt, &a, &b).unwrap().to_vec::<bool>().unwrap(), vec![true, false]);
    assert_eq!(bin(BinaryOp::Min, &a, &b).unwrap().to_vec::<u32>().unwrap(), vec![2, 7]);
    // u16 and u32 arithmetic wraps at their own width.
    let x = t(vec![65535u16, 0], &[2]);
    let one = t(vec![1u16], &[1]);
    assert_eq!(bin(BinaryOp::Add, &x, &one).unwrap().to_vec::<u16>().unwrap(), vec![0, 1]);
    assert_eq!(bin(BinaryOp::Sub, &x, &one).unwrap().to_vec::<u16>().unwrap(), vec![65534, 65535]);
    let y = t(vec![u32::MAX, 1 << 31], &[2]);
    let two = t(vec![2u32], &[]);
    assert_eq!(bin(BinaryOp::Mul, &y, &two).unwrap().to_vec::<u32>().unwrap(), vec![u32::MAX - 1, 0]);
    assert_eq!(
        bin(BinaryOp::Pow, &two, &t(vec![31u32, 32, 0], &[3])).unwrap().to_vec::<u32>().unwrap(),
        vec![1 << 31, 0, 1]
    );
}

#[test]
fn unsigned_unary_ops_neg_wraps_abs_is_identity_sign_is_0_or_1() {
    let x = t(vec![0u64, 1, BIG, u64::MAX], &[4]);
    assert_eq!(un(UnaryOp::Neg, &x).to_vec::<u64>().unwrap(), vec![0, u64::MAX, BIG.wrapping_neg(), 1]);
    assert_eq!(un(UnaryOp::Abs, &x).to_vec::<u64>().unwrap(), vec![0, 1, BIG, u64::MAX]);
    assert_eq!(un(UnaryOp::Sign, &x).to_vec::<u64>().unwrap(), vec![0, 1, 1, 1]);
    assert_eq!(un(UnaryOp::Relu, &x).to_vec::<u64>().unwrap(), vec![0, 1, BIG, u64::MAX]);
    let y = t(vec![0u16, 1, 65535], &[3]);
    assert_eq!(un(UnaryOp::Neg, &y).to_vec::<u16>().unwrap(), vec![0, 65535, 1]);
    assert_eq!(un(UnaryOp::Sign, &y).to_vec::<u16>().unwrap(), vec![0, 1, 1]);
    let z = t(vec![i16::MIN, -3, 0, 4], &[4]);
    assert_eq!(un(UnaryOp::Neg, &z).to_vec::<i16>().unwrap(), vec![i16::MIN, 3, 0, -4]);
    assert_eq!(un(UnaryOp::Abs, &z).to_vec::<i16>().unwrap(), vec![i16::MIN, 3, 0, 4]);
    assert_eq!(un(UnaryOp::Sign, &z).to_vec::<i16>().unwrap(), vec![-1, -1, 0, 1]);
    assert!(matches!(eval(&Op::Unary(UnaryOp::Exp), &[&x]), Err(Error::DType(_))));
}

#[test]
fn i16_division_truncates_wraps_and_rejects_zero() {
    let a = t(vec![i16::MIN, -7, 7, -7], &[4]);
    let b = t(vec![-1i16, 2, -2, -2], &[4]);
    assert_eq!(bin(BinaryOp::Div, &a, &b).unwrap().to_vec::<i16>().unwrap(), vec![i16::MIN, -3, -3, 3]);
    assert_eq!(bin(BinaryOp::Rem, &a, &b).unwrap().to_vec::<i16>().unwrap(), vec![0, -1, 1, -1]);
    for op in [BinaryOp::Div, BinaryOp::Rem] {
        match bin(op, &a, &t(vec![3i16, 0, 1, 1], &[4])) {
            Err(Error::Value(m)) => assert!(m.contains("division by zero"), "{m}"),
            other => panic!("{op:?}: {other:?}"),
        }
    }
    for d in [DType::U16, DType::U32, DType::U64] {
        let a = cast(&t(vec![1i64, 2], &[2]), d);
        let z = cast(&t(vec![0i64], &[1]), d);
        assert!(matches!(bin(BinaryOp::Div, &a, &z), Err(Error::Value(_))), "{d}");
    }
    assert!(matches!(bin(BinaryOp::Pow, &a, &t(vec![1i16, -1, 0, 2], &[4])), Err(Error::Value(_))));
}

#[test]
fn integer_casts_are_exact_or_wrap() {
    let x = t(vec![u64::MAX, BIG, 1 << 63, 0x1_0001_0005, 0], &[5]);
    assert_eq!(cast(&x, DType::I64).to_vec::<i64>().unwrap(), vec![-1, BIG as i64, i64::MIN, 0x1_0001_0005, 0]);
    assert_eq!(cast(&x, DType::U32).to_vec::<u32>().unwrap(), vec![u32::MAX, 1, 0, 0x0001_0005, 0]);
    assert_eq!(cast(&x, DType::U16).to_vec::<u16>().unwrap(), vec![u16::MAX, 1, 0, 5, 0]);
    assert_eq!(cast(&x, DType::I16).to_vec::<i16>().unwrap(), vec![-1, 1, 0, 5, 0]);
    assert_eq!(cast(&x, DType::Bool).to_vec::<bool>().unwrap(), vec![true, true, true, true, false]);
    // i64 -> u64 -> i64 round trips every bit pattern.
    let s = t(vec![i64::MIN, -1, BIG as i64, i64::MAX], &[4]);
    let u = cast(&s, DType::U64);
    assert_eq!(u.to_vec::<u64>().unwrap(), vec![1 << 63, u64::MAX, BIG, (1 << 63) - 1]);
    assert_eq!(cast(&u, DType::I64).to_vec::<i64>().unwrap(), s.to_vec::<i64>().unwrap());
    // Narrow sources widen by value (sign extension for i16, zero extension for u16/u32).
    let h = t(vec![-2i16, i16::MAX], &[2]);
    assert_eq!(cast(&h, DType::U64).to_vec::<u64>().unwrap(), vec![u64::MAX - 1, 32767]);
    assert_eq!(cast(&h, DType::U16).to_vec::<u16>().unwrap(), vec![65534, 32767]);
    let w = t(vec![u32::MAX, 65536], &[2]);
    assert_eq!(cast(&w, DType::I64).to_vec::<i64>().unwrap(), vec![u32::MAX as i64, 65536]);
    assert_eq!(cast(&w, DType::I16).to_vec::<i16>().unwrap(), vec![-1, 0]);
    assert_eq!(cast(&w, DType::U64).to_vec::<u64>().unwrap(), vec![u32::MAX as u64, 65536]);
}

#[test]
fn u64_to_float_rounds_to_nearest_by_value() {
    let x = t(vec![u64::MAX, 1 << 63, BIG, (1 << 24) + 1, 0], &[5]);
    let f = cast(&x, DType::F32).to_vec::<f32>().unwrap();
    assert_eq!(f, vec![18446744073709551616.0f32, 9223372036854775808.0, 9007199254740992.0, 16777216.0, 0.0]);
    let d = cast(&x, DType::F64).to_vec::<f64>().unwrap();
    assert_eq!(d, vec![18446744073709551616.0f64, 9223372036854775808.0, 9007199254740992.0, 16777217.0, 0.0]);
    let h = cast(&x, DType::F16).to_vec::<kiln_ir::half::f16>().unwrap();
    assert!(h[0].is_infinite() && h[0] > kiln_ir::half::f16::ZERO, "u64::MAX -> f16 overflows to +inf, got {}", h[0]);
    assert_eq!(h[4], kiln_ir::half::f16::ZERO);
}

#[test]
fn float_to_wide_ints_truncates_saturates_and_maps_nan_to_0() {
    let x = t(vec![f32::NAN, 70000.0, -5.0, 3.9, f32::INFINITY, f32::NEG_INFINITY, 65535.0, -0.9, 1e30], &[9]);
    assert_eq!(cast(&x, DType::U16).to_vec::<u16>().unwrap(), vec![0, 65535, 0, 3, 65535, 0, 65535, 0, 65535]);
    assert_eq!(cast(&x, DType::I16).to_vec::<i16>().unwrap(), vec![0, 32767, -5, 3, 32767, -32768, 32767, 0, 32767]);
    assert_eq!(cast(&x, DType::U32).to_vec::<u32>().unwrap(), vec![0, 70000, 0, 3, u32::MAX, 0, 65535, 0, u32::MAX]);
    assert_eq!(cast(&x, DType::U64).to_vec::<u64>().unwrap(), vec![0, 70000, 0, 3, u64::MAX, 0, 65535, 0, u64::MAX]);
    let y = t(vec![f64::NAN, 1.8446744073709552e19, 9007199254740993.0, -1e300], &[4]);
    // 2^64 saturates; 2^53 + 1 is not an f64, the literal is 2^53.
    assert_eq!(cast(&y, DType::U64).to_vec::<u64>().unwrap(), vec![0, u64::MAX, 1 << 53, 0]);
}

#[test]
fn reductions_of_wide_ints_wrap_as_the_type_and_order_unsigned() {
    let x = t(vec![1u64, u64::MAX, 1 << 63, BIG], &[2, 2]);
    assert_eq!(reduce(ReduceOp::Max, &x, &[0, 1]).to_vec::<u64>().unwrap(), vec![u64::MAX]);
    assert_eq!(reduce(ReduceOp::Min, &x, &[0, 1]).to_vec::<u64>().unwrap(), vec![1]);
    assert_eq!(reduce(ReduceOp::Max, &x, &[1]).to_vec::<u64>().unwrap(), vec![u64::MAX, BIG.max(1 << 63)]);
    assert_eq!(reduce(ReduceOp::Min, &x, &[0]).to_vec::<u64>().unwrap(), vec![1, BIG]);
    let want_sum = [1u64, u64::MAX, 1 << 63, BIG].iter().fold(0u64, |a, &v| a.wrapping_add(v));
    assert_eq!(reduce(ReduceOp::Sum, &x, &[0, 1]).to_vec::<u64>().unwrap(), vec![want_sum]);
    let want_prod = [1u64, u64::MAX, 1 << 63, BIG].iter().fold(1u64, |a, &v| a.wrapping_mul(v));
    assert_eq!(reduce(ReduceOp::Prod, &x, &[0, 1]).to_vec::<u64>().unwrap(), vec![want_prod]);
    // Exact above 2^53 when nothing overflows; mean truncates.
    let y = t(vec![BIG, BIG + 2, BIG + 3], &[3]);
    assert_eq!(reduce(ReduceOp::Sum, &y, &[0]).to_vec::<u64>().unwrap(), vec![3 * BIG + 5]);
    assert_eq!(reduce(ReduceOp::Mean, &y, &[0]).to_vec::<u64>().unwrap(), vec![BIG + 1]);
    // Narrow types wrap at their own width.
    let u = t(vec![65535u16, 2, 40000, 40000], &[2, 2]);
    assert_eq!(reduce(ReduceOp::Sum, &u, &[1]).to_vec::<u16>().unwrap(), vec![1, 80000u32 as u16]);
    assert_eq!(reduce(ReduceOp::Max, &u, &[0]).to_vec::<u16>().unwrap(), vec![65535, 40000]);
    let s = t(vec![i16::MAX, 1, i16::MIN, -1], &[4]);
    assert_eq!(reduce(ReduceOp::Sum, &s, &[0]).to_vec::<i16>().unwrap(), vec![-1]);
    assert_eq!(reduce(ReduceOp::Min, &s, &[0]).to_vec::<i16>().unwrap(), vec![i16::MIN]);
    let w = t(vec![u32::MAX, u32::MAX], &[2]);
    assert_eq!(reduce(ReduceOp::Prod, &w, &[0]).to_vec::<u32>().unwrap(), vec![1]);
    assert_eq!(reduce(ReduceOp::Mean, &w, &[0]).to_vec::<u32>().unwrap(), vec![u32::MAX]);
    // Empty reductions give the identities.
    let e = HostTensor::zeros(DType::U64, &[0]);
    assert_eq!(reduce(ReduceOp::Min, &e, &[0]).to_vec::<u64>().unwrap(), vec![u64::MAX]);
    assert_eq!(reduce(ReduceOp::Max, &e, &[0]).to_vec::<u64>().unwrap(), vec![0]);
    assert_eq!(reduce(ReduceOp::Prod, &e, &[0]).to_vec::<u64>().unwrap(), vec![1]);
}

#[test]
fn argmax_of_u64_above_i64_max() {
    let x = t(vec![5u64, u64::MAX, 1 << 63, BIG, BIG - 1, 0, u64::MAX], &[7]);
    let arg = |op, last| {
        eval(&Op::ArgReduce { op, axis: 0, keep_dims: false, select_last: last }, &[&x])
            .unwrap()
            .to_vec::<i64>()
            .unwrap()
    };
    assert_eq!(arg(ArgReduceOp::ArgMax, false), vec![1]);
    assert_eq!(arg(ArgReduceOp::ArgMax, true), vec![6]);
    assert_eq!(arg(ArgReduceOp::ArgMin, false), vec![5]);
    // A strided column (the non-contiguous path): BIG vs BIG-1 must not tie.
    let y = t(vec![BIG - 1, 0, BIG, 1, 3, 2], &[3, 2]);
    let got =
        eval(&Op::ArgReduce { op: ArgReduceOp::ArgMax, axis: 0, keep_dims: false, select_last: false }, &[&y]).unwrap();
    assert_eq!(got.to_vec::<i64>().unwrap(), vec![1, 2]);
}

#[test]
fn matmul_of_wide_ints_wraps_and_is_exact() {
    let a = t(vec![BIG, 1, u64::MAX, 2], &[2, 2]);
    let b = t(vec![1u64, 2], &[2, 1]);
    let got = eval(&Op::MatMul, &[&a, &b]).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(got, vec![BIG + 2, u64::MAX.wrapping_add(4)]);
    let a = t(vec![300i16, -2, 7, 1], &[2, 2]);
    let b = t(vec![300i16, 1, 1, 0], &[2, 2]);
    let got = eval(&Op::MatMul, &[&a, &b]).unwrap().to_vec::<i16>().unwrap();
    assert_eq!(got, vec![(90000i32 - 2) as i16, 300, 2101, 7]);
    let a = t(vec![65535u16, 3], &[1, 2]);
    let b = t(vec![2u16, 5], &[2]);
    assert_eq!(
        eval(&Op::MatMul, &[&a, &b]).unwrap().to_vec::<u16>().unwrap(),
        vec![65535u16.wrapping_mul(2).wrapping_add(15)]
    );
    let a = t(vec![u32::MAX], &[1, 1]);
    assert_eq!(eval(&Op::MatMul, &[&a, &a]).unwrap().to_vec::<u32>().unwrap(), vec![1]);
}

#[test]
fn data_movement_keeps_wide_values_bit_exact() {
    let x = t(vec![u64::MAX, BIG, 1 << 63, 7], &[2, 2]);
    let idx = t(vec![1i64, -2, 1], &[3]);
    let g = eval(&Op::Gather { axis: 0 }, &[&x, &idx]).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(g, vec![1 << 63, 7, u64::MAX, BIG, 1 << 63, 7]);
    let c = eval(&Op::Concat { axis: 1 }, &[&x, &x]).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(c, vec![u64::MAX, BIG, u64::MAX, BIG, 1 << 63, 7, 1 << 63, 7]);
    let cond = t(vec![true, false], &[2]);
    let y = t(vec![BIG - 1], &[]);
    let w = eval(&Op::Where, &[&cond, &x, &y]).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(w, vec![u64::MAX, BIG - 1, 1 << 63, BIG - 1]);
    let p = eval(&Op::Pad { pads: vec![(0, 0), (1, 0)], mode: PadMode::Constant(3.0) }, &[&x]).unwrap();
    assert_eq!(p.to_vec::<u64>().unwrap(), vec![3, u64::MAX, BIG, 3, 1 << 63, 7]);
    let p = eval(&Op::Pad { pads: vec![(0, 0), (0, 1)], mode: PadMode::Edge }, &[&x]).unwrap();
    assert_eq!(p.to_vec::<u64>().unwrap(), vec![u64::MAX, BIG, BIG, 1 << 63, 7, 7]);
    let tr = eval(&Op::Permute(vec![1, 0]), &[&x]).unwrap();
    assert_eq!(tr.contiguous().to_vec::<u64>().unwrap(), vec![u64::MAX, 1 << 63, BIG, 7]);
    // A negative constant pads unsigned types with 0 (saturating, as Cast does).
    let z = t(vec![9u16], &[1]);
    let p = eval(&Op::Pad { pads: vec![(1, 1)], mode: PadMode::Constant(-4.0) }, &[&z]).unwrap();
    assert_eq!(p.to_vec::<u16>().unwrap(), vec![0, 9, 0]);
}

#[test]
fn max_pool_of_unsigned_pads_with_zero() {
    use kiln_ir::{Pool2dAttrs, PoolKind};
    let x = t(vec![65535u16, 1, 2, 40000], &[1, 1, 2, 2]);
    let attrs = Pool2dAttrs {
        kind: PoolKind::Max,
        kernel: [2, 2],
        stride: [1, 1],
        padding: [1, 1, 1, 1],
        dilation: [1, 1],
        ceil_mode: false,
    };
    let got = eval(&Op::Pool2d(attrs), &[&x]).unwrap();
    assert_eq!(got.shape(), &[1, 1, 3, 3]);
    assert_eq!(got.to_vec::<u16>().unwrap(), vec![65535, 65535, 1, 65535, 65535, 40000, 2, 40000, 40000]);
}
