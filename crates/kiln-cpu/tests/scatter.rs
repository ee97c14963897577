//! GatherElements, ScatterElements, GatherND and ScatterND (ONNX semantics) against naive
//! references written from the ONNX definitions.

mod common_kernels;

use common_kernels::*;
use kiln_cpu::eval;
use kiln_ir::{DType, Error, HostTensor, Op, ScatterReduction};

const REDUCTIONS: [ScatterReduction; 5] = [
    ScatterReduction::None,
    ScatterReduction::Add,
    ScatterReduction::Mul,
    ScatterReduction::Max,
    ScatterReduction::Min,
];

fn idx64(v: &[i64], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), shape).unwrap()
}

fn idx32(v: &[i64], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.iter().map(|&i| i as i32).collect::<Vec<_>>(), shape).unwrap()
}

/// Every non-contiguous variant of `t` the helpers make (reversed needs a non-empty axis 0).
fn layouts(t: &HostTensor) -> Vec<HostTensor> {
    let mut v = vec![t.clone(), transposed(t), strided(t)];
    if t.shape().first().is_some_and(|&n| n > 0) {
        v.push(reversed(t));
    }
    v
}

/// Deterministic indices in `-n..n` (both signs).
fn some_indices(count: usize, n: usize, seed: u64) -> Vec<i64> {
    noise(count, seed, 1.0).iter().map(|v| ((v * 1000.0).abs() as i64 % (2 * n as i64)) - n as i64).collect()
}

fn wrap(i: i64, n: usize) -> usize {
    if i < 0 { (i + n as i64) as usize } else { i as usize }
}

/// `v ⊕ u` in f64 (the values in these tests keep every dtype exact).
fn reduce(r: ScatterReduction, v: f64, u: f64) -> f64 {
    match r {
        ScatterReduction::None => u,
        ScatterReduction::Add => v + u,
        ScatterReduction::Mul => v * u,
        ScatterReduction::Max => {
            if v.is_nan() || u.is_nan() {
                f64::NAN
            } else {
                v.max(u)
            }
        }
        ScatterReduction::Min => {
            if v.is_nan() || u.is_nan() {
                f64::NAN
            } else {
                v.min(u)
            }
        }
    }
}

fn small(dtype: DType, n: usize, seed: u64) -> Vec<f64> {
    noise(n, seed, 3.49).iter().map(|v| if dtype.is_signed() { v.round() } else { v.abs().round() }).collect()
}

fn same(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g == w || (g.is_nan() && w.is_nan()))
}

// ---- GatherElements / ScatterElements ----

fn naive_gather_elements(data: &[f64], dshape: &[usize], idx: &[i64], ishape: &[usize], axis: usize) -> Vec<f64> {
    (0..idx.len())
        .map(|p| {
            let mut c = unravel(p, ishape);
            c[axis] = wrap(idx[p], dshape[axis]);
            data[ravel(&c, dshape)]
        })
        .collect()
}

fn naive_scatter_elements(
    data: &[f64],
    dshape: &[usize],
    idx: &[i64],
    ishape: &[usize],
    upd: &[f64],
    axis: usize,
    r: ScatterReduction,
) -> Vec<f64> {
    let mut out = data.to_vec();
    for p in 0..idx.len() {
        let mut c = unravel(p, ishape);
        c[axis] = wrap(idx[p], dshape[axis]);
        let q = ravel(&c, dshape);
        out[q] = reduce(r, out[q], upd[p]);
    }
    out
}

#[test]
fn gather_elements_matches_naive_for_every_dtype_axis_and_layout() {
    let dshape = [3, 4, 2];
    for dtype in DType::ALL {
        let data = tensor(dtype, &ramp(dtype, 24), &dshape);
        // Read back, so the reference sees the values as the dtype holds them.
        let vals = data.to_f64_vec();
        for axis in 0..3 {
            // Indices smaller than data on the other axes, larger along `axis`.
            let mut ishape = vec![2, 3, 2];
            ishape[axis] = 5;
            let n: usize = ishape.iter().product();
            let ids = some_indices(n, dshape[axis], axis as u64);
            let want = naive_gather_elements(&vals, &dshape, &ids, &ishape, axis);
            for d in layouts(&data) {
                for ix in [idx64(&ids, &ishape), idx32(&ids, &ishape), transposed(&idx64(&ids, &ishape))] {
                    let out = eval(&Op::GatherElements { axis }, &[&d, &ix]).unwrap();
                    assert_eq!(out.dtype(), dtype);
                    assert_eq!(out.shape(), ishape.as_slice());
                    assert_eq!(out.to_f64_vec(), want, "{dtype} axis {axis}");
                }
            }
        }
    }
}

#[test]
fn gather_elements_with_empty_indices_and_size_one_dims() {
    let data = tensor(DType::F32, &[1.0, 2.0, 3.0], &[1, 3]);
    let out = eval(&Op::GatherElements { axis: 1 }, &[&data, &idx64(&[], &[1, 0])]).unwrap();
    assert_eq!(out.shape(), &[1, 0]);
    let out = eval(&Op::GatherElements { axis: 0 }, &[&data, &idx64(&[0, -1], &[1, 2])]).unwrap();
    assert_eq!(out.to_f64_vec(), vec![1.0, 2.0]);
}

#[test]
fn scatter_elements_matches_naive_for_every_dtype_reduction_and_layout() {
    let dshape = [3, 4, 2];
    for dtype in DType::ALL {
        let data = tensor(dtype, &small(dtype, 24, 1), &dshape);
        let vals = data.to_f64_vec();
        for axis in 0..3 {
            let ishape = [2, 3, 2];
            let n: usize = ishape.iter().product();
            // Duplicates are likely: 12 indices into an axis of at most 4.
            let ids = some_indices(n, dshape[axis], 10 + axis as u64);
            let upd = tensor(dtype, &small(dtype, n, 20 + axis as u64), &ishape);
            let uvals = upd.to_f64_vec();
            for r in REDUCTIONS {
                if dtype == DType::Bool && matches!(r, ScatterReduction::Add | ScatterReduction::Mul) {
                    continue;
                }
                let want = naive_scatter_elements(&vals, &dshape, &ids, &ishape, &uvals, axis, r);
                for d in layouts(&data) {
                    for (ix, u) in [(idx64(&ids, &ishape), upd.clone()), (idx32(&ids, &ishape), transposed(&upd))] {
                        let op = Op::ScatterElements { axis, reduction: r };
                        let out = eval(&op, &[&d, &transposed(&ix), &u]).unwrap();
                        assert_eq!(out.dtype(), dtype);
                        assert_eq!(out.shape(), &dshape);
                        assert_eq!(out.to_f64_vec(), want, "{dtype} axis {axis} {r:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn scatter_elements_last_duplicate_wins_and_nan_wins_max() {
    let data = tensor(DType::F32, &[0.0; 4], &[4]);
    let upd = tensor(DType::F32, &[1.0, 2.0, 3.0], &[3]);
    let none = Op::ScatterElements { axis: 0, reduction: ScatterReduction::None };
    let out = eval(&none, &[&data, &idx64(&[1, -3, 2], &[3]), &upd]).unwrap();
    assert_eq!(out.to_f64_vec(), vec![0.0, 2.0, 3.0, 0.0]);
    let add = Op::ScatterElements { axis: 0, reduction: ScatterReduction::Add };
    let out = eval(&add, &[&data, &idx64(&[1, 1, 1], &[3]), &upd]).unwrap();
    assert_eq!(out.to_f64_vec(), vec![0.0, 6.0, 0.0, 0.0]);
    let nan = tensor(DType::F64, &[f64::NAN, 5.0], &[2]);
    let max = Op::ScatterElements { axis: 0, reduction: ScatterReduction::Max };
    let out = eval(&max, &[&tensor(DType::F64, &[1.0, 9.0], &[2]), &idx64(&[0, 1], &[2]), &nan]).unwrap();
    let o = out.to_f64_vec();
    assert!(o[0].is_nan() && o[1] == 9.0, "{o:?}");
}

// ---- GatherND / ScatterND ----

/// `out[b.., i.., s..] = data[b.., tuple(b.., i..), s..]`.
fn naive_gather_nd(data: &[f64], dshape: &[usize], idx: &[i64], ishape: &[usize], b: usize) -> (Vec<usize>, Vec<f64>) {
    let q = ishape.len();
    let m = ishape[q - 1];
    let mut oshape = ishape[..q - 1].to_vec();
    oshape.extend_from_slice(&dshape[b + m..]);
    let vals = (0..oshape.iter().product())
        .map(|p| {
            let o = unravel(p, &oshape);
            let lead = &o[..q - 1];
            let mut src = o[..b].to_vec();
            for j in 0..m {
                let mut ic = lead.to_vec();
                ic.push(j);
                src.push(wrap(idx[ravel(&ic, ishape)], dshape[b + j]));
            }
            src.extend_from_slice(&o[q - 1..]);
            data[ravel(&src, dshape)]
        })
        .collect();
    (oshape, vals)
}

fn naive_scatter_nd(
    data: &[f64],
    dshape: &[usize],
    idx: &[i64],
    ishape: &[usize],
    upd: &[f64],
    r: ScatterReduction,
) -> Vec<f64> {
    let q = ishape.len();
    let k = ishape[q - 1];
    let mut ushape = ishape[..q - 1].to_vec();
    ushape.extend_from_slice(&dshape[k..]);
    let mut out = data.to_vec();
    for (p, &uv) in upd.iter().enumerate() {
        let u = unravel(p, &ushape);
        let mut dst = Vec::new();
        for (j, &n) in dshape[..k].iter().enumerate() {
            let mut ic = u[..q - 1].to_vec();
            ic.push(j);
            dst.push(wrap(idx[ravel(&ic, ishape)], n));
        }
        dst.extend_from_slice(&u[q - 1..]);
        let t = ravel(&dst, dshape);
        out[t] = reduce(r, out[t], uv);
    }
    out
}

/// Index tuples in range (both signs) for dims `dims` (one tuple per row of `ishape`).
fn nd_indices(ishape: &[usize], dims: &[usize], seed: u64) -> Vec<i64> {
    let n: usize = ishape.iter().product();
    let m = ishape[ishape.len() - 1];
    let raw = noise(n, seed, 1.0);
    (0..n)
        .map(|p| {
            let d = dims[p % m] as i64;
            ((raw[p] * 1000.0).abs() as i64 % (2 * d)) - d
        })
        .collect()
}

#[test]
fn gather_nd_matches_naive_across_batch_dims_tuple_lengths_and_layouts() {
    let dshape = [2, 3, 4];
    // (indices shape, batch_dims)
    let cases: [(&[usize], usize); 7] =
        [(&[2], 0), (&[5, 1], 0), (&[2, 2, 3], 0), (&[2, 1], 1), (&[2, 3, 2], 1), (&[2, 3, 1], 2), (&[0, 2], 0)];
    for dtype in [DType::F32, DType::I64, DType::U8, DType::Bool, DType::BF16] {
        let data = tensor(dtype, &ramp(dtype, 24), &dshape);
        // Read back, so the reference sees the values as the dtype holds them.
        let vals = data.to_f64_vec();
        for (ci, &(ishape, b)) in cases.iter().enumerate() {
            let ids = nd_indices(ishape, &dshape[b..], ci as u64);
            let (oshape, want) = naive_gather_nd(&vals, &dshape, &ids, ishape, b);
            for d in layouts(&data) {
                for ix in [idx64(&ids, ishape), transposed(&idx32(&ids, ishape))] {
                    let out = eval(&Op::GatherNd { batch_dims: b }, &[&d, &ix]).unwrap();
                    assert_eq!(out.shape(), oshape.as_slice(), "{dtype} {ishape:?} b {b}");
                    assert_eq!(out.to_f64_vec(), want, "{dtype} {ishape:?} b {b}");
                }
            }
        }
    }
}

#[test]
fn gather_nd_onnx_examples() {
    let data = tensor(DType::I32, &[0.0, 1.0, 2.0, 3.0], &[2, 2]);
    let out = eval(&Op::GatherNd { batch_dims: 0 }, &[&data, &idx64(&[0, 0, 1, 1], &[2, 2])]).unwrap();
    assert_eq!(out.to_f64_vec(), vec![0.0, 3.0]);
    let out = eval(&Op::GatherNd { batch_dims: 0 }, &[&data, &idx64(&[1, 0], &[2, 1])]).unwrap();
    assert_eq!((out.shape(), out.to_f64_vec()), (&[2usize, 2][..], vec![2.0, 3.0, 0.0, 1.0]));
    let data = tensor(DType::I32, &(0..8).map(f64::from).collect::<Vec<_>>(), &[2, 2, 2]);
    let out = eval(&Op::GatherNd { batch_dims: 1 }, &[&data, &idx64(&[1, 0], &[2, 1])]).unwrap();
    assert_eq!((out.shape(), out.to_f64_vec()), (&[2usize, 2][..], vec![2.0, 3.0, 4.0, 5.0]));
}

#[test]
fn scatter_nd_matches_naive_for_every_reduction_tuple_length_and_layout() {
    let dshape = [3, 4, 2];
    let cases: [&[usize]; 5] = [&[4, 1], &[3, 2], &[2, 2, 3], &[1], &[0, 2]];
    for dtype in [DType::F32, DType::F16, DType::I32, DType::U8, DType::I8, DType::Bool] {
        let data = tensor(dtype, &small(dtype, 24, 3), &dshape);
        let vals = data.to_f64_vec();
        for (ci, ishape) in cases.iter().enumerate() {
            let q = ishape.len();
            let ids = nd_indices(ishape, &dshape, 40 + ci as u64);
            let mut ushape = ishape[..q - 1].to_vec();
            ushape.extend_from_slice(&dshape[ishape[q - 1]..]);
            let upd = tensor(dtype, &small(dtype, ushape.iter().product(), 50 + ci as u64), &ushape);
            let uvals = upd.to_f64_vec();
            for r in REDUCTIONS {
                if dtype == DType::Bool && matches!(r, ScatterReduction::Add | ScatterReduction::Mul) {
                    continue;
                }
                let want = naive_scatter_nd(&vals, &dshape, &ids, ishape, &uvals, r);
                for d in layouts(&data) {
                    for (ix, u) in
                        [(idx64(&ids, ishape), upd.clone()), (transposed(&idx32(&ids, ishape)), transposed(&upd))]
                    {
                        let out = eval(&Op::ScatterNd { reduction: r }, &[&d, &ix, &u]).unwrap();
                        assert_eq!(out.shape(), &dshape);
                        assert!(same(&out.to_f64_vec(), &want), "{dtype} {ishape:?} {r:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn scatter_nd_duplicates_last_wins() {
    let data = tensor(DType::F32, &[0.0; 4], &[4]);
    let upd = tensor(DType::F32, &[1.0, 2.0, 3.0], &[3]);
    let out = eval(&Op::ScatterNd { reduction: ScatterReduction::None }, &[&data, &idx64(&[2, -2, 0], &[3, 1]), &upd])
        .unwrap();
    assert_eq!(out.to_f64_vec(), vec![3.0, 0.0, 2.0, 0.0]);
    let out = eval(
        &Op::ScatterNd { reduction: ScatterReduction::Mul },
        &[
            &tensor(DType::I64, &[2.0; 4], &[4]),
            &idx64(&[1, 1, 1], &[3, 1]),
            &tensor(DType::I64, &[1.0, 2.0, 3.0], &[3]),
        ],
    )
    .unwrap();
    assert_eq!(out.to_f64_vec(), vec![2.0, 12.0, 2.0, 2.0]);
}

// ---- errors ----

fn assert_err(r: kiln_ir::Result<HostTensor>, value_err: bool, subs: &[&str]) {
    let e = r.expect_err("should fail");
    assert_eq!(matches!(e, Error::Value(_)), value_err, "{e}");
    let s = e.to_string();
    for sub in subs {
        assert!(s.contains(sub), "{s:?} lacks {sub:?}");
    }
}

#[test]
fn out_of_range_indices_bad_axes_and_bad_shapes_are_errors() {
    let data = tensor(DType::F32, &(0..6).map(f64::from).collect::<Vec<_>>(), &[2, 3]);
    let upd = tensor(DType::F32, &[9.0, 9.0], &[1, 2]);
    // Out of range, both signs.
    assert_err(
        eval(&Op::GatherElements { axis: 1 }, &[&data, &idx64(&[0, 3], &[1, 2])]),
        true,
        &["gather_elements", "index 3", "size 3"],
    );
    assert_err(eval(&Op::GatherElements { axis: 0 }, &[&data, &idx32(&[-3, 0], &[1, 2])]), true, &["index -3"]);
    let se = Op::ScatterElements { axis: 1, reduction: ScatterReduction::Add };
    assert_err(eval(&se, &[&data, &idx64(&[0, -4], &[1, 2]), &upd]), true, &["scatter_elements", "index -4"]);
    assert_err(
        eval(&Op::GatherNd { batch_dims: 0 }, &[&data, &idx64(&[1, 3], &[1, 2])]),
        true,
        &["gather_nd", "index 3", "dim 1"],
    );
    assert_err(eval(&Op::GatherNd { batch_dims: 1 }, &[&data, &idx64(&[3, 0], &[2, 1])]), true, &["index 3", "dim 1"]);
    let upd_nd = tensor(DType::F32, &[1.0, 2.0, 3.0], &[1, 3]);
    assert_err(
        eval(&Op::ScatterNd { reduction: ScatterReduction::None }, &[&data, &idx64(&[2], &[1, 1]), &upd_nd]),
        true,
        &["scatter_nd", "index 2", "dim 0"],
    );
    // Bad axis, rank, shape, dtype.
    assert_err(eval(&Op::GatherElements { axis: 2 }, &[&data, &idx64(&[0], &[1, 1])]), false, &["axis 2"]);
    assert_err(eval(&Op::GatherElements { axis: 0 }, &[&data, &idx64(&[0, 0], &[2])]), false, &["rank"]);
    assert_err(eval(&Op::GatherElements { axis: 0 }, &[&data, &idx64(&[0; 4], &[1, 4])]), false, &["dim 1"]);
    let fidx = tensor(DType::F32, &[0.0], &[1, 1]);
    assert_err(eval(&Op::GatherElements { axis: 0 }, &[&data, &fidx]), false, &["i64 or i32"]);
    assert_err(
        eval(&se, &[&data, &idx64(&[0, 1], &[1, 2]), &tensor(DType::F32, &[1.0], &[1, 1])]),
        false,
        &["updates"],
    );
    assert_err(eval(&Op::GatherNd { batch_dims: 0 }, &[&data, &idx64(&[0, 0, 0], &[1, 3])]), false, &["length 3"]);
    assert_err(eval(&Op::GatherNd { batch_dims: 2 }, &[&data, &idx64(&[0, 0], &[2, 1])]), false, &["batch_dims"]);
    assert_err(eval(&Op::GatherNd { batch_dims: 1 }, &[&data, &idx64(&[0, 0, 0], &[3, 1])]), false, &["batch"]);
    assert_err(
        eval(&Op::ScatterNd { reduction: ScatterReduction::None }, &[&data, &idx64(&[0], &[1, 1]), &upd]),
        false,
        &["updates"],
    );
    let bools = tensor(DType::Bool, &[1.0, 0.0], &[2]);
    let add = Op::ScatterNd { reduction: ScatterReduction::Add };
    assert_err(eval(&add, &[&bools, &idx64(&[0], &[1, 1]), &tensor(DType::Bool, &[1.0], &[1])]), false, &["bool"]);
}
