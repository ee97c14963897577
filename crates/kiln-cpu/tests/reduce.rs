//! Reductions and arg-reductions against naive loops over every input element, across
//! dtypes, axis sets, keep_dims, empty and rank-0 shapes, non-contiguous views, NaN/Inf,
//! and the sizes that take the parallel and column paths.

mod ewise_support;

use ewise_support::*;
use kiln_cpu::eval;
use kiln_ir::half::f16;
use kiln_ir::{ArgReduceOp, DType, Error, HostTensor, Layout, Op, ReduceOp};
use proptest::prelude::*;

const OPS: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod];

fn reduce(op: ReduceOp, x: &HostTensor, axes: &[usize], keep_dims: bool) -> kiln_ir::Result<HostTensor> {
    eval(&Op::Reduce { op, axes: axes.to_vec(), keep_dims }, &[x])
}

fn out_shape(shape: &[usize], axes: &[usize], keep_dims: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|d| match (axes.contains(&d), keep_dims) {
            (false, _) => Some(shape[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// Output slot of input element `i`: its kept coordinates, row-major.
fn slot(i: usize, shape: &[usize], axes: &[usize]) -> usize {
    let idx = unravel(i, shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
    kept.iter().fold(0, |acc, &d| acc * shape[d] + idx[d])
}

/// The float reference: exact-ish f64 accumulation, NaN propagating through max/min.
fn naive_float(op: ReduceOp, vals: &[f64], shape: &[usize], axes: &[usize]) -> Vec<f64> {
    let n_out: usize = (0..shape.len()).filter(|d| !axes.contains(d)).map(|d| shape[d]).product();
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    let init = match op {
        ReduceOp::Sum | ReduceOp::Mean => 0.0,
        ReduceOp::Prod => 1.0,
        ReduceOp::Max => f64::NEG_INFINITY,
        ReduceOp::Min => f64::INFINITY,
    };
    let mut acc = vec![init; n_out];
    for (i, &v) in vals.iter().enumerate() {
        let a = &mut acc[slot(i, shape, axes)];
        *a = match op {
            ReduceOp::Sum | ReduceOp::Mean => *a + v,
            ReduceOp::Prod => *a * v,
            ReduceOp::Max if a.is_nan() || v.is_nan() => f64::NAN,
            ReduceOp::Min if a.is_nan() || v.is_nan() => f64::NAN,
            ReduceOp::Max => a.max(v),
            ReduceOp::Min => a.min(v),
        };
    }
    if op == ReduceOp::Mean {
        acc.iter_mut().for_each(|a| *a /= count as f64);
    }
    acc
}

/// The integer reference: exact i128 arithmetic, wrapped into the dtype at the end.
fn naive_int(op: ReduceOp, vals: &[i128], shape: &[usize], axes: &[usize], d: DType) -> Vec<i128> {
    let n_out: usize = (0..shape.len()).filter(|d| !axes.contains(d)).map(|d| shape[d]).product();
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    let (lo, hi) = int_range(d);
    let init = match op {
        ReduceOp::Sum | ReduceOp::Mean => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Max => lo,
        ReduceOp::Min => hi,
    };
    let mut acc = vec![init; n_out];
    for (i, &v) in vals.iter().enumerate() {
        let a = &mut acc[slot(i, shape, axes)];
        *a = match op {
            ReduceOp::Sum | ReduceOp::Mean => *a + v,
            ReduceOp::Prod => a.wrapping_mul(v),
            ReduceOp::Max => (*a).max(v),
            ReduceOp::Min => (*a).min(v),
        };
    }
    acc.iter()
        .map(|&a| if op == ReduceOp::Mean { if count == 0 { 0 } else { a / count as i128 } } else { wrap(a, d) })
        .collect()
}

fn check_all(vals: &[f64], shape: &[usize], axes: &[usize], ctx: &str) {
    for d in DType::ALL.into_iter().filter(|&d| d != DType::Bool) {
        let held: Vec<f64> = vals.iter().map(|&v| round_to(v, d)).collect();
        for op in OPS {
            for keep in [false, true] {
                let oshape = out_shape(shape, axes, keep);
                for (name, x) in views(&held, shape, d) {
                    let got = reduce(op, &x, axes, keep).unwrap();
                    let what = format!("{ctx}: {op:?} {d} {shape:?} axes {axes:?} keep {keep} ({name})");
                    assert_eq!((got.dtype(), got.shape()), (d, &oshape[..]), "{what}");
                    if d.is_float() {
                        let want: Vec<f64> =
                            naive_float(op, &held, shape, axes).into_iter().map(|v| round_to(v, d)).collect();
                        assert_close(&got, &want, d, &what);
                    } else {
                        let exact = ints(&tensor(&held, shape, d));
                        assert_eq!(ints(&got), naive_int(op, &exact, shape, axes, d), "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn every_axis_set_of_a_3d_tensor_in_every_dtype() {
    let mut rng = Lcg::new(5);
    let shape = [2, 3, 4];
    let vals: Vec<f64> = rng.vals(24, 5.0).iter().map(|v| v.round()).collect();
    for mask in 0..8u32 {
        let axes: Vec<usize> = (0..3).filter(|d| mask & (1 << d) != 0).collect();
        check_all(&vals, &shape, &axes, "3d");
    }
    // Axes sets where a kept dim sits between reduced ones, in rank 4.
    let vals: Vec<f64> = rng.vals(2 * 3 * 2 * 5, 3.0).iter().map(|v| v.round()).collect();
    for axes in [&[0, 2][..], &[1, 3], &[0, 1, 3], &[3]] {
        check_all(&vals, &[2, 3, 2, 5], axes, "4d");
    }
}

#[test]
fn empty_reductions_give_identities_and_empty_outputs_stay_empty() {
    let e = HostTensor::zeros(DType::F32, &[0, 3]);
    let on0 = |op| reduce(op, &e, &[0], false).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(on0(ReduceOp::Sum), vec![0.0; 3]);
    assert_eq!(on0(ReduceOp::Prod), vec![1.0; 3]);
    assert_eq!(on0(ReduceOp::Max), vec![f32::NEG_INFINITY; 3]);
    assert_eq!(on0(ReduceOp::Min), vec![f32::INFINITY; 3]);
    assert!(on0(ReduceOp::Mean).iter().all(|v| v.is_nan()));
    let all = reduce(ReduceOp::Sum, &e, &[0, 1], true).unwrap();
    assert_eq!((all.shape(), all.to_vec::<f32>().unwrap()), (&[1usize, 1][..], vec![0.0]));
    let r = reduce(ReduceOp::Max, &e, &[1], false).unwrap();
    assert_eq!((r.shape(), r.numel()), (&[0usize][..], 0));
    let ei = HostTensor::zeros(DType::I8, &[2, 0]);
    assert_eq!(reduce(ReduceOp::Max, &ei, &[1], false).unwrap().to_vec::<i8>().unwrap(), vec![i8::MIN; 2]);
    assert_eq!(reduce(ReduceOp::Min, &ei, &[1], false).unwrap().to_vec::<i8>().unwrap(), vec![i8::MAX; 2]);
    let eu = HostTensor::zeros(DType::U8, &[2, 0]);
    assert_eq!(reduce(ReduceOp::Max, &eu, &[1], false).unwrap().to_vec::<u8>().unwrap(), vec![0; 2]);
    // No axes: the identity, for a rank-0 tensor too; a view comes back dense.
    let s = HostTensor::scalar(3.5f64);
    for op in OPS {
        let r = reduce(op, &s, &[], false).unwrap();
        assert_eq!((r.shape(), r.to_vec::<f64>().unwrap()), (&[][..], vec![3.5]));
    }
    let t = tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], DType::I32);
    let tv = t.with_layout(Layout::contiguous(&[2, 3]).permute(&[1, 0]).unwrap());
    let r = reduce(ReduceOp::Mean, &tv, &[], true).unwrap();
    assert!(r.is_dense());
    assert_eq!(r.to_vec::<i32>().unwrap(), vec![1, 4, 2, 5, 3, 6]);
    // Reducing a rank-0 tensor's no axes, and a [1]-shaped tensor's only axis.
    let one = tensor(&[-2.0], &[1], DType::F16);
    assert_eq!(reduce(ReduceOp::Prod, &one, &[0], false).unwrap().to_f64_vec(), vec![-2.0]);
}

#[test]
fn nan_and_inf_propagate() {
    let x = HostTensor::from_vec(
        vec![1.0f32, f32::NAN, 3.0, f32::INFINITY, -1.0, 2.0, f32::NEG_INFINITY, 0.0, f32::INFINITY],
        &[3, 3],
    )
    .unwrap();
    let row = |op| reduce(op, &x, &[1], false).unwrap().to_vec::<f32>().unwrap();
    let mx = row(ReduceOp::Max);
    assert!(mx[0].is_nan());
    assert_eq!(&mx[1..], &[f32::INFINITY, f32::INFINITY]);
    let mn = row(ReduceOp::Min);
    assert!(mn[0].is_nan());
    assert_eq!(&mn[1..], &[-1.0, f32::NEG_INFINITY]);
    let sm = row(ReduceOp::Sum);
    assert!(sm[0].is_nan() && sm[2].is_nan()); // -inf + inf
    assert_eq!(sm[1], f32::INFINITY);
    // NaN after the first lane block and in the tail of a long row.
    for at in [0, 9, 1000, 1022] {
        let mut v = vec![1.0f64; 1023];
        v[at] = f64::NAN;
        let t = HostTensor::from_vec(v, &[1023]).unwrap();
        assert!(reduce(ReduceOp::Max, &t, &[0], false).unwrap().to_vec::<f64>().unwrap()[0].is_nan(), "{at}");
        assert!(reduce(ReduceOp::Min, &t, &[0], false).unwrap().to_vec::<f64>().unwrap()[0].is_nan(), "{at}");
    }
}

#[test]
fn integer_sums_wrap_and_float_sums_accumulate_wide() {
    let x = HostTensor::from_vec(vec![100i8, 100, 100], &[3]).unwrap();
    assert_eq!(reduce(ReduceOp::Sum, &x, &[0], false).unwrap().to_vec::<i8>().unwrap(), vec![44]);
    assert_eq!(reduce(ReduceOp::Mean, &x, &[0], false).unwrap().to_vec::<i8>().unwrap(), vec![100]);
    let x = HostTensor::from_vec(vec![i64::MAX, 1], &[2]).unwrap();
    assert_eq!(reduce(ReduceOp::Sum, &x, &[0], false).unwrap().to_vec::<i64>().unwrap(), vec![i64::MIN]);
    let x = HostTensor::from_vec(vec![-7i32, 2], &[2]).unwrap();
    assert_eq!(reduce(ReduceOp::Mean, &x, &[0], false).unwrap().to_vec::<i32>().unwrap(), vec![-2]);
    // 3000 ones in f16: an f16 accumulator would stop at 2048.
    let h = HostTensor::from_vec(vec![f16::ONE; 3000], &[3000]).unwrap();
    assert_eq!(reduce(ReduceOp::Sum, &h, &[0], false).unwrap().to_vec::<f16>().unwrap(), vec![f16::from_f32(3000.0)]);
    assert_eq!(reduce(ReduceOp::Mean, &h, &[0], false).unwrap().to_vec::<f16>().unwrap(), vec![f16::ONE]);
    // A million 0.1f32: a naive f32 running sum is off by about 1%.
    let f = HostTensor::from_vec(vec![0.1f32; 1_000_000], &[1_000_000]).unwrap();
    let s = reduce(ReduceOp::Sum, &f, &[0], false).unwrap().to_vec::<f32>().unwrap()[0];
    assert!((s as f64 - 0.1f32 as f64 * 1e6).abs() < 0.05, "{s}");
    // The same through the column path (axis 0 of [1_000_000 / 16, 16]).
    let c = f.with_layout(Layout::contiguous(&[62_500, 16]));
    let s = reduce(ReduceOp::Sum, &c, &[0], false).unwrap().to_vec::<f32>().unwrap();
    assert!(s.iter().all(|&v| (v as f64 - 0.1f32 as f64 * 62_500.0).abs() < 5e-3), "{s:?}");
}

/// Shapes large enough for the threaded paths: many rows, one huge row, leading and middle
/// axes (column loop, with rows longer than one accumulator block), and strided views.
#[test]
fn large_reductions_match_naive_loops() {
    let mut rng = Lcg::new(9);
    let cases: [(&[usize], &[usize]); 8] = [
        (&[64, 4096], &[1]),
        (&[1 << 17], &[0]),
        (&[512, 130], &[0]),
        (&[8, 64, 1030], &[1]),
        (&[8, 64, 130], &[0, 2]),
        (&[3, 70000], &[1]),
        (&[70000, 3], &[1]),
        (&[40, 50, 60], &[0, 1, 2]),
    ];
    for (shape, axes) in cases {
        let n: usize = shape.iter().product();
        let vals: Vec<f64> = rng.vals(n, 2.0).iter().map(|&v| v as f32 as f64).collect();
        // f32 accumulation may lose a few ulps of the sum of magnitudes (not of the result,
        // which cancellation can make small); max is exact.
        let abs: Vec<f64> = vals.iter().map(|v| v.abs()).collect();
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean] {
            let want = naive_float(op, &vals, shape, axes);
            let slack = naive_float(if op == ReduceOp::Max { ReduceOp::Min } else { op }, &abs, shape, axes);
            for (name, x) in views(&vals, shape, DType::F32) {
                let got = reduce(op, &x, axes, false).unwrap().to_f64_vec();
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    let tol = if op == ReduceOp::Max { 0.0 } else { 2e-7 * w.abs() + 1e-6 * slack[i] };
                    assert!((g - w).abs() <= tol, "{op:?} {shape:?} {axes:?} {name}: [{i}] = {g}, want {w}");
                }
            }
        }
        // Integers: exact.
        let iv: Vec<f64> = vals.iter().map(|v| (v * 50.0).round()).collect();
        let exact: Vec<i128> = iv.iter().map(|&v| v as i128).collect();
        for (name, x) in views(&iv, shape, DType::I32).into_iter().take(3) {
            let got = reduce(ReduceOp::Sum, &x, axes, false).unwrap();
            assert_eq!(ints(&got), naive_int(ReduceOp::Sum, &exact, shape, axes, DType::I32), "{shape:?} {name}");
        }
    }
}

#[test]
fn bool_input_and_bad_axes_are_errors() {
    let b = HostTensor::from_vec(vec![true, false], &[2]).unwrap();
    assert!(matches!(reduce(ReduceOp::Sum, &b, &[0], false), Err(Error::DType(_))));
    let x = HostTensor::zeros(DType::F32, &[2, 3]);
    assert!(matches!(reduce(ReduceOp::Sum, &x, &[2], false), Err(Error::Shape(_))));
    assert!(matches!(reduce(ReduceOp::Sum, &x, &[1, 0], false), Err(Error::Shape(_))));
    assert!(matches!(arg(ArgReduceOp::ArgMax, &b, 0, false, false), Err(Error::DType(_))));
    assert!(matches!(arg(ArgReduceOp::ArgMax, &x, 2, false, false), Err(Error::Shape(_))));
    let e = HostTensor::zeros(DType::F32, &[3, 0]);
    assert!(matches!(arg(ArgReduceOp::ArgMin, &e, 1, false, false), Err(Error::Shape(_))));
}

fn arg(op: ArgReduceOp, x: &HostTensor, axis: usize, keep_dims: bool, select_last: bool) -> kiln_ir::Result<HostTensor> {
    eval(&Op::ArgReduce { op, axis, keep_dims, select_last }, &[x])
}

/// The reference: a scan keeping the first (or last) extreme, NaN beating every number.
fn naive_arg(vals: &[f64], shape: &[usize], axis: usize, is_max: bool, last: bool) -> Vec<i64> {
    let n_out: usize = (0..shape.len()).filter(|&d| d != axis).map(|d| shape[d]).product();
    let mut best: Vec<Option<(f64, i64)>> = vec![None; n_out];
    for (i, &v) in vals.iter().enumerate() {
        let j = unravel(i, shape)[axis] as i64;
        let b = &mut best[slot(i, shape, &[axis])];
        let replace = match *b {
            None => true,
            Some((bv, _)) if bv.is_nan() => last && v.is_nan(),
            Some(_) if v.is_nan() => true,
            Some((bv, _)) => {
                if is_max {
                    v > bv || (last && v == bv)
                } else {
                    v < bv || (last && v == bv)
                }
            }
        };
        if replace {
            *b = Some((v, j));
        }
    }
    best.into_iter().map(|b| b.map_or(0, |(_, j)| j)).collect()
}

#[test]
fn argmax_argmin_ties_nan_dtypes_views_and_paths() {
    let mut rng = Lcg::new(13);
    let shapes: [(&[usize], usize); 7] =
        [(&[5, 7], 0), (&[5, 7], 1), (&[3, 4, 9], 1), (&[20, 16], 0), (&[2, 3, 12], 0), (&[6], 0), (&[0, 3], 1)];
    for (shape, axis) in shapes {
        let n: usize = shape.iter().product();
        // Few distinct values, so ties are common; some NaN for the float dtypes.
        let vals: Vec<f64> = (0..n).map(|i| if i % 11 == 4 { f64::NAN } else { (rng.below(4) as f64) - 1.0 }).collect();
        for d in DType::ALL.into_iter().filter(|&d| d != DType::Bool) {
            let held: Vec<f64> = vals.iter().map(|&v| round_to(v, d)).collect();
            for op in [ArgReduceOp::ArgMax, ArgReduceOp::ArgMin] {
                for last in [false, true] {
                    let want = naive_arg(&held, shape, axis, op == ArgReduceOp::ArgMax, last);
                    for keep in [false, true] {
                        for (name, x) in views(&held, shape, d) {
                            let got = arg(op, &x, axis, keep, last).unwrap();
                            assert_eq!(got.dtype(), DType::I64);
                            assert_eq!(got.shape(), &out_shape(shape, &[axis], keep)[..]);
                            assert_eq!(
                                got.to_vec::<i64>().unwrap(),
                                want,
                                "{op:?} {d} {shape:?} axis {axis} last {last} ({name})"
                            );
                        }
                    }
                }
            }
        }
    }
    // Explicit: ties and NaN.
    let x = HostTensor::from_vec(vec![1.0f32, 3.0, 3.0, f32::NAN, 0.0, f32::NAN, 0.0], &[7]).unwrap();
    let get = |op, last| arg(op, &x, 0, false, last).unwrap().to_vec::<i64>().unwrap()[0];
    assert_eq!((get(ArgReduceOp::ArgMax, false), get(ArgReduceOp::ArgMax, true)), (3, 5));
    assert_eq!((get(ArgReduceOp::ArgMin, false), get(ArgReduceOp::ArgMin, true)), (3, 5));
    let y = HostTensor::from_vec(vec![2i64, 5, 5, -1, -1], &[5]).unwrap();
    let g = |op, last| arg(op, &y, 0, true, last).unwrap().to_vec::<i64>().unwrap()[0];
    assert_eq!((g(ArgReduceOp::ArgMax, false), g(ArgReduceOp::ArgMax, true)), (1, 2));
    assert_eq!((g(ArgReduceOp::ArgMin, false), g(ArgReduceOp::ArgMin, true)), (3, 4));
    // Large: the threaded column path (axis 0) and row path (axis 1).
    let (r, c) = (300, 257);
    let v = rng.vals(r * c, 10.0);
    let t = tensor(&v, &[r, c], DType::F64);
    for axis in [0, 1] {
        let want = naive_arg(&v, &[r, c], axis, true, false);
        assert_eq!(arg(ArgReduceOp::ArgMax, &t, axis, false, false).unwrap().to_vec::<i64>().unwrap(), want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn random_shapes_and_axes_match_naive(
        shape in proptest::collection::vec(0usize..5, 1..5),
        mask in any::<u8>(),
        op in proptest::sample::select(OPS.to_vec()),
        keep in any::<bool>(),
        d in proptest::sample::select(vec![DType::F64, DType::I32, DType::F32]),
        view in 0usize..4,
        seed in any::<u64>(),
    ) {
        let axes: Vec<usize> = (0..shape.len()).filter(|&a| mask & (1 << a) != 0).collect();
        let mut rng = Lcg::new(seed);
        let vals: Vec<f64> = rng.vals(shape.iter().product(), 3.0).iter().map(|v| v.round()).collect();
        let vs = views(&vals, &shape, d);
        let (_, x) = &vs[view.min(vs.len() - 1)];
        let got = reduce(op, x, &axes, keep).unwrap();
        prop_assert_eq!(got.shape(), &out_shape(&shape, &axes, keep)[..]);
        if d.is_float() {
            let want: Vec<f64> = naive_float(op, &vals, &shape, &axes).into_iter().map(|v| round_to(v, d)).collect();
            let g = got.to_f64_vec();
            for (a, b) in g.iter().zip(&want) {
                prop_assert!(close(*a, *b, d), "{:?} vs {:?}", g, want);
            }
        } else {
            let exact: Vec<i128> = vals.iter().map(|&v| v as i128).collect();
            prop_assert_eq!(ints(&got), naive_int(op, &exact, &shape, &axes, d));
        }
    }
}
