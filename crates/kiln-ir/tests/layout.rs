//! Strided layouts (permute, broadcast, slice, reshape, offset iteration) against naive
//! index arithmetic, and host tensor views read through them.

use kiln_ir::data::{Layout, contiguous_strides};
use kiln_ir::{HostTensor, SliceAxis};
use proptest::prelude::*;

/// Every multi-index of `shape` in row-major order, by division (not an odometer).
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|mut flat| {
            let mut ix = vec![0; shape.len()];
            for a in (0..shape.len()).rev() {
                ix[a] = flat % shape[a];
                flat /= shape[a];
            }
            ix
        })
        .collect()
}

fn naive_offset(l: &Layout, ix: &[usize]) -> usize {
    let mut o = l.offset as isize;
    for (i, s) in ix.iter().zip(&l.strides) {
        o += *i as isize * s;
    }
    o as usize
}

fn naive_offsets(l: &Layout) -> Vec<usize> {
    indices(&l.shape).iter().map(|ix| naive_offset(l, ix)).collect()
}

/// A tensor whose element values are their storage positions, so `to_vec` shows offsets.
fn iota(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    HostTensor::from_vec((0..n as i64).collect::<Vec<i64>>(), shape).unwrap()
}

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..5)
}

fn perm_strategy(rank: usize) -> impl Strategy<Value = Vec<usize>> {
    Just((0..rank).collect::<Vec<usize>>()).prop_shuffle()
}

#[test]
fn contiguous_basics() {
    assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    assert_eq!(contiguous_strides(&[2, 0, 4]), vec![4, 4, 1]);
    assert_eq!(contiguous_strides(&[]), Vec::<isize>::new());
    let l = Layout::contiguous(&[2, 3]);
    assert!(l.is_contiguous());
    assert_eq!(l.offsets(), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(Layout::contiguous(&[]).offsets(), vec![0]);
    assert_eq!(Layout::contiguous(&[3, 0, 2]).offsets(), Vec::<usize>::new());
    let t = l.permute(&[1, 0]).unwrap();
    assert!(!t.is_contiguous());
    assert_eq!(t.offsets(), vec![0, 3, 1, 4, 2, 5]);
    assert_eq!(t.reshape(&[6]), None);
    // ... but adding/removing size-1 axes and splitting one axis of it are views (as torch `view`)
    let u = t.reshape(&[3, 1, 2]).unwrap();
    assert_eq!(u.offsets(), t.offsets());
    assert_eq!((u.strides[0], u.strides[2]), (1, 3));
    let wide = Layout::contiguous(&[4, 6]).permute(&[1, 0]).unwrap(); // [6, 4], strides [1, 6]
    let split = wide.reshape(&[2, 3, 4]).unwrap();
    assert_eq!(split.strides, vec![3, 1, 6]);
    assert_eq!(split.offsets(), wide.offsets());
    assert_eq!(wide.reshape(&[4, 6]), None);
    // size-1 dims may carry any stride and still be contiguous
    assert!(Layout { shape: vec![1, 3], strides: vec![99, 1], offset: 2 }.is_contiguous());
}

#[test]
fn layout_errors_name_the_shapes() {
    let l = Layout::contiguous(&[2, 3]);
    let e = l.permute(&[0, 0]).unwrap_err().to_string();
    assert!(e.contains("permute") && e.contains("[0, 0]"), "{e}");
    let e = l.broadcast_to(&[3]).unwrap_err().to_string();
    assert!(e.contains("expand") && e.contains("[2, 3]"), "{e}");
    let e = l.broadcast_to(&[4, 3, 3]).unwrap_err().to_string();
    assert!(e.contains("expand") && e.contains("[4, 3, 3]"), "{e}");
    assert!(l.slice(2, 0, 1, 1).is_err());
    assert!(l.slice(0, 0, 1, 0).is_err());
}

#[test]
fn huge_slice_steps_do_not_overflow() {
    let l = Layout::contiguous(&[4, 2]);
    let s = l.slice(0, 1, 4, i64::MAX).unwrap();
    assert_eq!(s.shape, vec![1, 2]);
    assert_eq!(s.offsets(), vec![2, 3]);
    let s = l.slice(0, 3, -1, i64::MIN).unwrap();
    assert_eq!(s.offsets(), vec![6, 7]);
}

#[test]
fn views_of_a_host_tensor() {
    // [[0, 1, 2], [3, 4, 5]] reversed along axis 1, then transposed.
    let t = iota(&[2, 3]);
    let (s, _, _) = SliceAxis { start: -1, end: i64::MIN, step: -1 }.resolve(3);
    let rev = t.layout.slice(1, s, -1, -1).unwrap();
    let v = t.with_layout(rev.permute(&[1, 0]).unwrap());
    assert_eq!(v.to_vec::<i64>().unwrap(), vec![2, 5, 1, 4, 0, 3]);
    assert_eq!(v.to_f64_vec(), vec![2.0, 5.0, 1.0, 4.0, 0.0, 3.0]);
    let c = v.contiguous();
    assert!(c.is_dense());
    assert_eq!(c.dense_slice::<i64>().unwrap(), &[2, 5, 1, 4, 0, 3]);
    assert!(v.dense_slice::<i64>().is_none());
    assert!(v.to_vec::<f32>().is_err());
    // A broadcast of a column: stride 0.
    let col = HostTensor::from_vec(vec![true, false], &[2, 1]).unwrap();
    let b = col.with_layout(col.layout.broadcast_to(&[2, 2, 3]).unwrap());
    assert_eq!(b.to_vec::<bool>().unwrap(), [[true; 3], [false; 3], [true; 3], [false; 3]].concat());
}

proptest! {
    #[test]
    fn for_each_offset_matches_naive(shape in shape_strategy(), offset in 0usize..7,
                                     neg in prop::collection::vec(any::<bool>(), 5)) {
        // Arbitrary strides (some negative, some zero) with an offset that keeps them >= 0.
        let mut l = Layout::contiguous(&shape);
        let mut off = offset as isize;
        for (a, s) in l.strides.iter_mut().enumerate() {
            if neg[a] && shape[a] > 0 {
                off += *s * (shape[a] as isize - 1);
                *s = -*s;
            }
        }
        l.offset = off as usize;
        prop_assert_eq!(l.offsets(), naive_offsets(&l));
        let mut via_fn = Vec::new();
        l.for_each_offset(|o| via_fn.push(o));
        prop_assert_eq!(via_fn, naive_offsets(&l));
        let src: Vec<usize> = (0..l.offset + 1 + naive_offsets(&l).into_iter().max().unwrap_or(0)).collect();
        prop_assert_eq!(l.gather(&src), naive_offsets(&l));
    }

    #[test]
    fn gather_copies_transposed_views_across_tiles(rows in 1usize..80, cols in 1usize..80, lead in 1usize..3,
                                                   perm in perm_strategy(3), reverse in any::<bool>()) {
        // Sizes around the 32-element tile, permuted (so the inner stride is rarely 1) and
        // optionally reversed along one axis (negative stride).
        let t = iota(&[lead, rows, cols]);
        let mut l = t.layout.permute(&perm).unwrap();
        if reverse {
            let n = l.shape[1] as i64;
            l = l.slice(1, n - 1, -1, -1).unwrap();
        }
        let src = t.dense_slice::<i64>().unwrap();
        let want: Vec<i64> = naive_offsets(&l).iter().map(|&o| src[o]).collect();
        prop_assert_eq!(l.gather(src), want);
    }

    #[test]
    fn permute_moves_axes((shape, perm) in shape_strategy().prop_flat_map(|s| { let r = s.len(); (Just(s), perm_strategy(r)) })) {
        let base = Layout::contiguous(&shape);
        let p = base.permute(&perm).unwrap();
        for j in indices(&p.shape) {
            let mut src = vec![0; shape.len()];
            for (k, &axis) in perm.iter().enumerate() {
                src[axis] = j[k];
            }
            prop_assert_eq!(p.offset_of(&j), base.offset_of(&src));
        }
        prop_assert_eq!(p.offsets(), naive_offsets(&p));
        let t = iota(&shape).with_layout(p.clone());
        prop_assert_eq!(t.to_vec::<i64>().unwrap(), naive_offsets(&p).iter().map(|&o| o as i64).collect::<Vec<_>>());
    }

    #[test]
    fn broadcast_stretches_ones(shape in shape_strategy(), lead in prop::collection::vec(0usize..4, 0..3),
                                stretch in prop::collection::vec(1usize..4, 5)) {
        // Target: new leading dims, and each size-1 dim possibly stretched.
        let mut target = lead.clone();
        target.extend(shape.iter().enumerate().map(|(a, &d)| if d == 1 { stretch[a] } else { d }));
        let base = Layout::contiguous(&shape);
        let b = base.broadcast_to(&target).unwrap();
        for j in indices(&target) {
            let src: Vec<usize> = shape.iter().enumerate()
                .map(|(a, &d)| if d == 1 { 0 } else { j[lead.len() + a] })
                .collect();
            prop_assert_eq!(b.offset_of(&j), base.offset_of(&src));
        }
        prop_assert_eq!(b.offsets(), naive_offsets(&b));
    }

    #[test]
    fn slice_takes_every_step(shape in prop::collection::vec(1usize..6, 1..4), axis_seed in 0usize..8,
                              start in -8i64..8, end in -8i64..8, step in prop_oneof![1i64..4, -3i64..0]) {
        let axis = axis_seed % shape.len();
        let (s, e, count) = SliceAxis { start, end, step }.resolve(shape[axis]);
        let base = Layout::contiguous(&shape);
        let l = base.slice(axis, s, e, step).unwrap();
        prop_assert_eq!(l.shape[axis], count);
        for j in indices(&l.shape) {
            let mut src = j.clone();
            src[axis] = (s + j[axis] as i64 * step) as usize;
            prop_assert_eq!(l.offset_of(&j), base.offset_of(&src));
        }
        prop_assert_eq!(l.offsets(), naive_offsets(&l));
    }

    #[test]
    fn chained_views_and_reshape((shape, perm) in prop::collection::vec(1usize..5, 1..5).prop_flat_map(|s| { let r = s.len(); (Just(s), perm_strategy(r)) }),
                                 lead in 0usize..3) {
        // permute, then reverse the first axis, then broadcast a new leading dim
        let t = iota(&shape);
        let p = t.layout.permute(&perm).unwrap();
        let n0 = p.shape[0] as i64;
        let r = p.slice(0, n0 - 1, -1, -1).unwrap();
        let mut target = vec![lead];
        target.extend(&r.shape);
        let b = r.broadcast_to(&target).unwrap();
        let v = t.with_layout(b.clone());
        let want: Vec<i64> = naive_offsets(&b).iter().map(|&o| o as i64).collect();
        prop_assert_eq!(v.to_vec::<i64>().unwrap(), want.clone());
        let c = v.contiguous();
        prop_assert!(c.is_dense());
        prop_assert_eq!(c.dense_slice::<i64>().unwrap(), &want[..]);
        // reshape keeps row-major order for contiguous layouts
        let flat = c.layout.reshape(&[want.len()]).unwrap();
        prop_assert_eq!(c.with_layout(flat).to_vec::<i64>().unwrap(), want.clone());
        // a strided view reshapes without a copy only when its strides allow it, and then keeps
        // row-major order
        match b.reshape(&[b.numel()]) {
            Some(flat) => prop_assert_eq!(t.with_layout(flat).to_vec::<i64>().unwrap(), want),
            None => prop_assert!(!b.is_contiguous()),
        }
    }
}

#[test]
fn gather_of_a_big_transpose_splits_rows_over_threads_exactly() {
    // Over the size where gather uses several threads; odd sizes so bands and tiles are ragged.
    let t = iota(&[1037, 1013]);
    let l = t.layout.permute(&[1, 0]).unwrap();
    let src = t.dense_slice::<i64>().unwrap();
    let got = l.gather(src);
    assert_eq!(got.len(), 1037 * 1013);
    for (k, &v) in got.iter().enumerate() {
        let (i, j) = (k / 1037, k % 1037);
        assert_eq!(v, (j * 1013 + i) as i64, "element [{i}, {j}]");
    }
}
