//! TopK (ONNX semantics: ties to the lower index, NaN largest) against a naive sort.

mod common_kernels;

use common_kernels::*;
use kiln_cpu::eval;
use kiln_ir::{DType, Error, Op, TopKOutput};
use std::cmp::Ordering;

fn topk(axis: usize, k: usize, largest: bool, sorted: bool, output: TopKOutput) -> Op {
    Op::TopK { axis, k, largest, sorted, output }
}

/// Per lane: a stable sort of the positions by value (NaN above everything), descending for
/// `largest`, so equal values keep increasing index order; the first `k`, re-sorted by
/// position when not `sorted`. Returns (values, indices) in the output layout.
fn naive(x: &[f64], shape: &[usize], axis: usize, k: usize, largest: bool, sorted: bool) -> (Vec<f64>, Vec<f64>) {
    let mut out_shape = shape.to_vec();
    out_shape[axis] = k;
    let total: usize = out_shape.iter().product();
    let (mut vals, mut idxs) = (vec![0.0; total], vec![0.0; total]);
    let rank_of = |v: f64| if v.is_nan() { (1, 0.0) } else { (0, v) };
    let lanes: Vec<Vec<usize>> = (0..x.len()).map(|p| unravel(p, shape)).filter(|i| i[axis] == 0).collect();
    for start in lanes {
        let mut pos: Vec<usize> = (0..shape[axis]).collect();
        let at = |j: usize| {
            let mut i = start.clone();
            i[axis] = j;
            x[ravel(&i, shape)]
        };
        pos.sort_by(|&a, &b| {
            let (ra, rb) = (rank_of(at(a)), rank_of(at(b)));
            let o = ra.0.cmp(&rb.0).then(ra.1.partial_cmp(&rb.1).unwrap_or(Ordering::Equal));
            if largest { o.reverse() } else { o }
        });
        pos.truncate(k);
        if !sorted {
            pos.sort();
        }
        for (r, &j) in pos.iter().enumerate() {
            let mut o = start.clone();
            o[axis] = r;
            let q = ravel(&o, &out_shape);
            vals[q] = at(j);
            idxs[q] = j as f64;
        }
    }
    (vals, idxs)
}

/// Values with many ties (and NaN for floats) that every dtype holds exactly.
fn tied_values(dtype: DType, n: usize, seed: u64) -> Vec<f64> {
    noise(n, seed, 1.0)
        .iter()
        .enumerate()
        .map(|(i, v)| {
            if dtype.is_float() && i % 7 == 3 {
                f64::NAN
            } else {
                let r = (v * 2.49).round();
                if dtype.is_signed() { r } else { r.abs() }
            }
        })
        .collect()
}

fn same(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g == w || (g.is_nan() && w.is_nan()))
}

#[test]
fn matches_naive_for_every_dtype_axis_k_flag_and_layout() {
    let shapes: [&[usize]; 4] = [&[3, 6, 4], &[7], &[2, 1, 5], &[0, 4]];
    for dtype in DType::ALL.into_iter().filter(|d| *d != DType::Bool) {
        for (si, shape) in shapes.iter().enumerate() {
            let vals = tied_values(dtype, shape.iter().product(), si as u64 + 1);
            let x = tensor(dtype, &vals, shape);
            let mut layouts = vec![x.clone(), transposed(&x), strided(&x)];
            if shape[0] > 0 {
                layouts.push(reversed(&x));
            }
            for axis in 0..shape.len() {
                for k in 0..=shape[axis] {
                    for (largest, sorted) in [(true, true), (false, true), (true, false), (false, false)] {
                        let (want_v, want_i) = naive(&vals, shape, axis, k, largest, sorted);
                        let what = format!("{dtype} {shape:?} axis {axis} k {k} largest {largest} sorted {sorted}");
                        for xin in &layouts {
                            let v = eval(&topk(axis, k, largest, sorted, TopKOutput::Values), &[xin]).unwrap();
                            let i = eval(&topk(axis, k, largest, sorted, TopKOutput::Indices), &[xin]).unwrap();
                            assert_eq!(v.dtype(), dtype, "{what}");
                            assert_eq!(i.dtype(), DType::I64, "{what}");
                            assert_eq!(v.shape(), i.shape(), "{what}");
                            assert!(
                                same(&v.to_f64_vec(), &want_v),
                                "{what}: values {:?} want {want_v:?}",
                                v.to_f64_vec()
                            );
                            assert_eq!(i.to_f64_vec(), want_i, "{what}: indices");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn ties_take_the_lower_index_and_nan_counts_as_largest() {
    let x = tensor(DType::F32, &[1.0, 3.0, f64::NAN, 3.0, -1.0, f64::NAN], &[6]);
    let idx =
        |k, largest| eval(&topk(0, k, largest, true, TopKOutput::Indices), &[&x]).unwrap().to_vec::<i64>().unwrap();
    assert_eq!(idx(4, true), vec![2, 5, 1, 3]);
    assert_eq!(idx(3, false), vec![4, 0, 1]);
    assert_eq!(idx(6, false), vec![4, 0, 1, 3, 2, 5]);
    let unsorted = eval(&topk(0, 3, true, false, TopKOutput::Indices), &[&x]).unwrap().to_vec::<i64>().unwrap();
    assert_eq!(unsorted, vec![1, 2, 5]);
    // -0.0 and 0.0 tie.
    let z = tensor(DType::F64, &[-0.0, 0.0, -0.0], &[3]);
    let i = eval(&topk(0, 2, true, true, TopKOutput::Indices), &[&z]).unwrap().to_vec::<i64>().unwrap();
    assert_eq!(i, vec![0, 1]);
}

#[test]
fn large_lanes_select_the_right_elements() {
    let n = 1000;
    let vals = noise(3 * n, 11, 100.0);
    let x = tensor(DType::F64, &vals, &[3, n]);
    let (want_v, want_i) = naive(&vals, &[3, n], 1, 17, true, true);
    let v = eval(&topk(1, 17, true, true, TopKOutput::Values), &[&transposed(&x)]).unwrap();
    let i = eval(&topk(1, 17, true, true, TopKOutput::Indices), &[&x]).unwrap();
    assert_eq!(v.to_f64_vec(), want_v);
    assert_eq!(i.to_f64_vec(), want_i);
}

#[test]
fn k_above_the_dim_bad_axis_and_bool_are_errors() {
    let x = tensor(DType::F32, &[1.0, 2.0, 3.0], &[3]);
    let e = eval(&topk(0, 4, true, true, TopKOutput::Values), &[&x]).unwrap_err();
    assert!(matches!(e, Error::Shape(_)) && e.to_string().contains("k = 4"), "{e}");
    let e = eval(&topk(1, 1, true, true, TopKOutput::Values), &[&x]).unwrap_err();
    assert!(matches!(e, Error::Shape(_)) && e.to_string().contains("axis 1"), "{e}");
    let b = tensor(DType::Bool, &[1.0, 0.0], &[2]);
    assert!(matches!(eval(&topk(0, 1, true, true, TopKOutput::Indices), &[&b]), Err(Error::DType(_))));
}
