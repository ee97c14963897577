//! Views (reshape, permute, expand, slice) and copies (pad, concat) against naive references.

mod common_kernels;

use common_kernels::*;
use kiln_cpu::eval;
use kiln_ir::{DType, Error, HostTensor, Op, PadMode, Shape, SliceAxis};

fn reshape(t: &HostTensor, shape: &[usize]) -> HostTensor {
    eval(&Op::Reshape(Shape::fixed(shape)), &[t]).unwrap()
}

/// Element `idx` of `t` (logical index), read through its layout.
fn at(t: &HostTensor, idx: &[usize]) -> f64 {
    t.storage.get_f64(t.layout.offset_of(idx))
}

#[test]
fn reshape_of_contiguous_data_is_a_view_in_every_dtype() {
    for dtype in DType::ALL {
        let t = ramp_tensor(dtype, &[2, 3, 4]);
        let r = reshape(&t, &[4, 6]);
        assert_eq!(r.shape(), &[4, 6]);
        assert!(shares(&t, &r), "{dtype}");
        assert_eq!(r.to_f64_vec(), t.to_f64_vec(), "{dtype}");
        assert_eq!(r.dtype(), dtype);
        // To and from rank 0 / size-1 dims.
        let one = tensor(dtype, &[1.0], &[1, 1]);
        let s = reshape(&one, &[]);
        assert_eq!(s.shape(), &[] as &[usize]);
        assert_eq!(reshape(&s, &[1, 1, 1]).to_f64_vec(), vec![1.0]);
    }
}

#[test]
fn reshape_of_an_offset_contiguous_slice_is_a_view() {
    let t = ramp_tensor(DType::F32, &[4, 3]);
    let rows = eval(&Op::Slice(vec![SliceAxis { start: 1, end: 3, step: 1 }, SliceAxis::FULL]), &[&t]).unwrap();
    let r = reshape(&rows, &[6]);
    assert!(shares(&t, &r));
    assert_eq!(r.to_f64_vec(), t.to_f64_vec()[3..9].to_vec());
}

#[test]
fn reshape_of_non_contiguous_data_copies_in_row_major_order() {
    for dtype in DType::ALL {
        let t = ramp_tensor(dtype, &[3, 4]);
        for v in [transposed(&t), strided(&t), reversed(&t)] {
            let r = reshape(&v, &[2, 6]);
            assert_eq!(r.shape(), &[2, 6]);
            assert_eq!(r.to_f64_vec(), t.to_f64_vec(), "{dtype}");
        }
        // A permuted view, reshaped, follows the permuted (logical) order.
        let p = eval(&Op::Permute(vec![1, 0]), &[&t]).unwrap();
        let r = reshape(&p, &[12]);
        assert!(!shares(&t, &r));
        let v = t.to_f64_vec();
        let want: Vec<f64> = (0..12).map(|i| v[(i % 3) * 4 + i / 3]).collect();
        assert_eq!(r.to_f64_vec(), want, "{dtype}");
    }
}

#[test]
fn reshape_of_empty_tensors() {
    let t = ramp_tensor(DType::I64, &[0, 3]);
    let r = reshape(&t, &[3, 0, 5]);
    assert_eq!(r.shape(), &[3, 0, 5]);
    assert!(r.to_f64_vec().is_empty());
    let err = eval(&Op::Reshape(Shape::fixed(&[4])), &[&ramp_tensor(DType::F32, &[5])]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
}

#[test]
fn permute_is_a_view_matching_a_naive_transpose() {
    let shape = [2, 3, 4];
    let perm = [2, 0, 1];
    for dtype in DType::ALL {
        let t = ramp_tensor(dtype, &shape);
        for input in [t.clone(), transposed(&t), strided(&t), reversed(&t)] {
            let p = eval(&Op::Permute(perm.to_vec()), &[&input]).unwrap();
            assert!(shares(&input, &p));
            assert_eq!(p.shape(), &[4, 2, 3]);
            let v = t.to_f64_vec();
            let want: Vec<f64> = (0..24)
                .map(|i| {
                    let o = unravel(i, &[4, 2, 3]);
                    let mut src = [0; 3];
                    for (k, &p) in perm.iter().enumerate() {
                        src[p] = o[k];
                    }
                    v[ravel(&src, &shape)]
                })
                .collect();
            assert_eq!(p.to_f64_vec(), want, "{dtype}");
        }
    }
    let err = eval(&Op::Permute(vec![0, 0, 1]), &[&ramp_tensor(DType::F32, &shape)]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)));
}

#[test]
fn expand_is_a_view_with_zero_strides() {
    for dtype in DType::ALL {
        let t = ramp_tensor(dtype, &[3, 1]);
        for input in [t.clone(), strided(&t), reversed(&t)] {
            let e = eval(&Op::Expand(Shape::fixed(&[2, 3, 4])), &[&input]).unwrap();
            assert!(shares(&input, &e));
            assert_eq!(e.layout.strides[0], 0);
            assert_eq!(e.layout.strides[2], 0);
            let v = t.to_f64_vec();
            let want: Vec<f64> = (0..24).map(|i| v[unravel(i, &[2, 3, 4])[1]]).collect();
            assert_eq!(e.to_f64_vec(), want, "{dtype}");
        }
    }
    // Expanding to an empty dim, and a bad expand.
    let t = ramp_tensor(DType::F32, &[1, 3]);
    let e = eval(&Op::Expand(Shape::fixed(&[0, 3])), &[&t]).unwrap();
    assert_eq!(e.numel(), 0);
    assert!(eval(&Op::Expand(Shape::fixed(&[2, 4])), &[&t]).is_err());
}

/// Python's `range(len)[start:end:step]`, written independently of `SliceAxis::resolve`.
fn py_slice(len: usize, s: SliceAxis) -> Vec<usize> {
    let n = len as i64;
    let fix = |v: i64, lo: i64, hi: i64| if v < 0 { (v + n).max(lo) } else { v.min(hi) };
    let mut out = Vec::new();
    if s.step > 0 {
        let (mut i, end) = (fix(s.start, 0, n), fix(s.end, 0, n));
        while i < end {
            out.push(i as usize);
            i += s.step;
        }
    } else {
        let (mut i, end) = (fix(s.start, -1, n - 1), fix(s.end, -1, n - 1));
        while i > end {
            out.push(i as usize);
            i += s.step;
        }
    }
    out
}

#[test]
fn slice_is_a_view_with_python_semantics() {
    let shape = [5, 6];
    let cases = [
        SliceAxis { start: 1, end: 4, step: 1 },
        SliceAxis { start: 0, end: i64::MAX, step: 2 },
        SliceAxis { start: -2, end: i64::MAX, step: 1 },
        SliceAxis { start: -1, end: i64::MIN, step: -1 },
        SliceAxis { start: 4, end: 0, step: -2 },
        SliceAxis { start: 10, end: -10, step: -3 },
        SliceAxis { start: 3, end: 1, step: 1 },
        SliceAxis { start: -100, end: 100, step: 4 },
        SliceAxis { start: 2, end: 3, step: 1 },
    ];
    for dtype in [DType::F32, DType::BF16, DType::I8, DType::Bool] {
        let t = ramp_tensor(dtype, &shape);
        let v = t.to_f64_vec();
        for input in [t.clone(), transposed(&t), strided(&t), reversed(&t)] {
            for a in cases {
                for b in cases {
                    let s = eval(&Op::Slice(vec![a, b]), &[&input]).unwrap();
                    assert!(shares(&input, &s));
                    let (ra, rb) = (py_slice(5, a), py_slice(6, b));
                    assert_eq!(s.shape(), &[ra.len(), rb.len()], "{a:?} {b:?}");
                    let want: Vec<f64> =
                        ra.iter().flat_map(|&i| rb.iter().map(move |&j| (i, j))).map(|(i, j)| v[i * 6 + j]).collect();
                    assert_eq!(s.to_f64_vec(), want, "{dtype} {a:?} {b:?}");
                }
            }
        }
    }
}

#[test]
fn slices_of_slices_and_reshape_of_reversed_slices() {
    let t = ramp_tensor(DType::I32, &[4, 5]);
    let rev = Op::Slice(vec![SliceAxis { start: -1, end: i64::MIN, step: -1 }, SliceAxis { start: 4, end: 0, step: -2 }]);
    let s = eval(&rev, &[&t]).unwrap();
    assert!(s.layout.strides.iter().all(|&st| st < 0));
    let s2 = eval(&Op::Slice(vec![SliceAxis { start: 1, end: 3, step: 1 }, SliceAxis::FULL]), &[&s]).unwrap();
    assert!(shares(&t, &s2));
    // rows 2, 1 (of the original), columns 4, 2
    assert_eq!(s2.to_f64_vec(), vec![at(&t, &[2, 4]), at(&t, &[2, 2]), at(&t, &[1, 4]), at(&t, &[1, 2])]);
    let r = reshape(&s2, &[4]);
    assert_eq!(r.to_f64_vec(), s2.to_f64_vec());
    // A slice of an empty dim and a slice producing an empty dim.
    let e = ramp_tensor(DType::F32, &[0, 3]);
    let se = eval(&Op::Slice(vec![SliceAxis { start: -1, end: i64::MIN, step: -1 }, SliceAxis::FULL]), &[&e]).unwrap();
    assert_eq!(se.shape(), &[0, 3]);
    let bad = eval(&Op::Slice(vec![SliceAxis { start: 0, end: 1, step: 0 }, SliceAxis::FULL]), &[&t]).unwrap_err();
    assert!(matches!(bad, Error::Value(_)), "{bad}");
}

/// Naive padding: the input index read by output coordinate `o` of an axis of size `n`.
fn pad_source(o: usize, n: usize, before: usize, mode: PadMode) -> Option<usize> {
    let mut p = o as i64 - before as i64;
    let n = n as i64;
    if (0..n).contains(&p) {
        return Some(p as usize);
    }
    match mode {
        PadMode::Constant(_) => None,
        PadMode::Edge => Some(p.clamp(0, n - 1) as usize),
        PadMode::Reflect => {
            while !(0..n).contains(&p) {
                p = if p < 0 { -p } else { 2 * (n - 1) - p };
            }
            Some(p as usize)
        }
    }
}

fn naive_pad(t: &HostTensor, pads: &[(usize, usize)], mode: PadMode) -> (Vec<usize>, Vec<f64>) {
    let shape = t.shape();
    let out: Vec<usize> = shape.iter().zip(pads).map(|(n, (a, b))| n + a + b).collect();
    let v = t.to_f64_vec();
    let fill = match mode {
        PadMode::Constant(c) => tensor(t.dtype(), &[c], &[]).to_f64_vec()[0],
        _ => 0.0,
    };
    let vals = (0..out.iter().product())
        .map(|i| {
            let o = unravel(i, &out);
            let src: Option<Vec<usize>> =
                (0..shape.len()).map(|a| pad_source(o[a], shape[a], pads[a].0, mode)).collect();
            src.map_or(fill, |s| v[ravel(&s, shape)])
        })
        .collect();
    (out, vals)
}

#[test]
fn pad_matches_a_naive_reference_in_every_mode_dtype_and_layout() {
    let pads = [(1, 2), (0, 0), (2, 1)];
    for dtype in DType::ALL {
        let t = ramp_tensor(dtype, &[3, 2, 4]);
        for mode in [PadMode::Constant(7.0), PadMode::Constant(-1.5), PadMode::Reflect, PadMode::Edge] {
            let (shape, want) = naive_pad(&t, &pads, mode);
            for input in [t.clone(), transposed(&t), strided(&t), reversed(&t)] {
                let p = eval(&Op::Pad { pads: pads.to_vec(), mode }, &[&input]).unwrap();
                assert_eq!(p.shape(), shape.as_slice());
                assert_eq!(p.dtype(), dtype);
                assert_eq!(p.to_f64_vec(), want, "{dtype} {mode:?}");
            }
        }
    }
}

#[test]
fn pad_constant_converts_the_value_to_the_dtype() {
    let cases = [(DType::I32, 2.7, 2.0), (DType::U8, -1.0, 0.0), (DType::I8, 1000.0, 127.0), (DType::Bool, 0.5, 1.0), (DType::F16, 0.1, 0.0999755859375)];
    for (dtype, value, want) in cases {
        let t = tensor(dtype, &[1.0], &[1]);
        let p = eval(&Op::Pad { pads: vec![(1, 0)], mode: PadMode::Constant(value) }, &[&t]).unwrap();
        assert_eq!(p.to_f64_vec(), vec![want, 1.0], "{dtype}");
    }
    // NaN and infinity pad values in floats.
    let t = tensor(DType::F32, &[1.0], &[1]);
    let p = eval(&Op::Pad { pads: vec![(0, 1)], mode: PadMode::Constant(f64::NEG_INFINITY) }, &[&t]).unwrap();
    assert_eq!(p.to_f64_vec(), vec![1.0, f64::NEG_INFINITY]);
}

#[test]
fn pad_of_scalars_empty_and_size_one_dims() {
    let s = tensor(DType::F64, &[3.0], &[]);
    assert_eq!(eval(&Op::Pad { pads: vec![], mode: PadMode::Reflect }, &[&s]).unwrap().to_f64_vec(), vec![3.0]);
    // Constant padding can grow an empty dim.
    let e = ramp_tensor(DType::I64, &[2, 0]);
    let p = eval(&Op::Pad { pads: vec![(0, 1), (1, 1)], mode: PadMode::Constant(4.0) }, &[&e]).unwrap();
    assert_eq!(p.shape(), &[3, 2]);
    assert_eq!(p.to_f64_vec(), vec![4.0; 6]);
    // Edge padding of a size-1 dim repeats it.
    let one = tensor(DType::U8, &[9.0, 8.0], &[2, 1]);
    let p = eval(&Op::Pad { pads: vec![(0, 0), (2, 1)], mode: PadMode::Edge }, &[&one]).unwrap();
    assert_eq!(p.to_f64_vec(), vec![9.0; 4].into_iter().chain(vec![8.0; 4]).collect::<Vec<_>>());
}

#[test]
fn invalid_reflect_and_edge_padding_are_errors() {
    let t = ramp_tensor(DType::F32, &[3, 2]);
    for pads in [vec![(3, 0), (0, 0)], vec![(0, 0), (0, 2)]] {
        let err = eval(&Op::Pad { pads, mode: PadMode::Reflect }, &[&t]).unwrap_err();
        assert!(matches!(err, Error::Shape(_)), "{err}");
    }
    let e = ramp_tensor(DType::F32, &[0, 2]);
    let err = eval(&Op::Pad { pads: vec![(1, 0), (0, 0)], mode: PadMode::Edge }, &[&e]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
    let err = eval(&Op::Pad { pads: vec![(1, 0)], mode: PadMode::Edge }, &[&t]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
}

fn naive_concat(ts: &[HostTensor], axis: usize) -> (Vec<usize>, Vec<f64>) {
    let mut shape = ts[0].shape().to_vec();
    shape[axis] = ts.iter().map(|t| t.shape()[axis]).sum();
    let vals = (0..shape.iter().product())
        .map(|i| {
            let mut idx = unravel(i, &shape);
            for t in ts {
                let n = t.shape()[axis];
                if idx[axis] < n {
                    return t.to_f64_vec()[ravel(&idx, t.shape())];
                }
                idx[axis] -= n;
            }
            unreachable!()
        })
        .collect();
    (shape, vals)
}

#[test]
fn concat_matches_a_naive_reference_for_mixed_layouts() {
    for dtype in DType::ALL {
        for axis in 0..3 {
            let mut sa = [2, 3, 4];
            let mut sb = [2, 3, 4];
            let mut sc = [2, 3, 4];
            sa[axis] = 1;
            sb[axis] = 3;
            sc[axis] = 0;
            let a = ramp_tensor(dtype, &sa);
            let b = tensor(dtype, &ramp(dtype, sb.iter().product()).iter().map(|v| v + 1.0).collect::<Vec<_>>(), &sb);
            let c = ramp_tensor(dtype, &sc);
            let (shape, want) = naive_concat(&[a.clone(), b.clone(), c.clone(), a.clone()], axis);
            let layouts = [
                [a.clone(), b.clone(), c.clone(), a.clone()],
                [transposed(&a), strided(&b), reversed(&c), reversed(&a)],
            ];
            for ins in layouts {
                let refs: Vec<&HostTensor> = ins.iter().collect();
                let out = eval(&Op::Concat { axis }, &refs).unwrap();
                assert_eq!(out.shape(), shape.as_slice());
                assert_eq!(out.to_f64_vec(), want, "{dtype} axis {axis}");
            }
        }
    }
}

#[test]
fn concat_of_expanded_and_single_inputs_and_errors() {
    let row = ramp_tensor(DType::F32, &[1, 3]);
    let ex = eval(&Op::Expand(Shape::fixed(&[2, 3])), &[&row]).unwrap();
    let other = ramp_tensor(DType::F32, &[2, 2]);
    let out = eval(&Op::Concat { axis: 1 }, &[&ex, &other]).unwrap();
    let (r, o) = (row.to_f64_vec(), other.to_f64_vec());
    assert_eq!(out.to_f64_vec(), vec![r[0], r[1], r[2], o[0], o[1], r[0], r[1], r[2], o[2], o[3]]);
    let single = eval(&Op::Concat { axis: 0 }, &[&other]).unwrap();
    assert_eq!(single.to_f64_vec(), o);
    let err = eval(&Op::Concat { axis: 0 }, &[&other, &ramp_tensor(DType::F32, &[2, 3])]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
    let err = eval(&Op::Concat { axis: 0 }, &[&other, &ramp_tensor(DType::F64, &[2, 2])]).unwrap_err();
    assert!(matches!(err, Error::DType(_)), "{err}");
}
