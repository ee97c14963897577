//! Movement methods: values, shapes, and that eager views share storage (no copy). Needs the
//! CPU kernels.

use kiln::{DType, HostTensor, Tensor};
use kiln_ir::PadMode;
use std::sync::Arc;

fn x234() -> Tensor {
    Tensor::from_vec((0..24).map(|i| i as f32).collect(), &[2, 3, 4]).unwrap()
}

fn same_storage(a: &Tensor, b: &Tensor) -> bool {
    Arc::ptr_eq(&a.to_host().unwrap().storage, &b.to_host().unwrap().storage)
}

fn v(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// Naive reference: element `[i, j, k]` of `x234` is `12 i + 4 j + k`.
fn at(i: usize, j: usize, k: usize) -> f32 {
    (12 * i + 4 * j + k) as f32
}

#[test]
fn reshape_views_and_infers() {
    let x = x234();
    let r = x.reshape(&[4, -1]).unwrap();
    assert_eq!(r.shape(), &[4, 6]);
    assert_eq!(v(&r), v(&x));
    assert!(same_storage(&r, &x));
    assert_eq!(x.reshape(&[-1]).unwrap().shape(), &[24]);
    assert_eq!(x.reshape(&[2, 1, -1, 3]).unwrap().shape(), &[2, 1, 4, 3]);
    let e = Tensor::zeros(&[0, 4], DType::F32);
    assert_eq!(e.reshape(&[2, 0, 2]).unwrap().shape(), &[2, 0, 2]);
    assert_eq!(e.reshape(&[-1, 2]).unwrap().shape(), &[0, 2]);
    // Reshape of a transposed tensor is a copy with the row-major order of the view.
    let t = x.reshape(&[6, 4]).unwrap().t().unwrap();
    let rt = t.reshape(&[24]).unwrap();
    let want: Vec<f32> = (0..4).flat_map(|c| (0..6).map(move |r| (r * 4 + c) as f32)).collect();
    assert_eq!(v(&rt), want);
}

#[test]
fn permute_transpose_t_share_storage() {
    let x = x234();
    let p = x.permute(&[2, 0, -2]).unwrap();
    assert_eq!(p.shape(), &[4, 2, 3]);
    assert!(same_storage(&p, &x));
    assert_eq!(p.strides(), vec![1, 12, 4]);
    let want: Vec<f32> = (0..4).flat_map(|k| (0..2).flat_map(move |i| (0..3).map(move |j| at(i, j, k)))).collect();
    assert_eq!(v(&p), want);
    let t = x.transpose(0, -1).unwrap();
    assert_eq!(t.shape(), &[4, 3, 2]);
    assert!(same_storage(&t, &x));
    let tt = x.t().unwrap();
    assert_eq!(tt.shape(), &[2, 4, 3]);
    assert_eq!(v(&tt)[..3], [0.0, 4.0, 8.0]);
}

#[test]
fn expand_unsqueeze_squeeze_flatten() {
    let r = Tensor::from_vec(vec![1i32, 2, 3], &[3]).unwrap();
    let e = r.expand(&[2, 3]).unwrap();
    assert!(same_storage(&e, &r));
    assert_eq!(e.strides(), vec![0, 1]);
    assert_eq!(e.to_vec::<i32>().unwrap(), [1, 2, 3, 1, 2, 3]);
    let c = r.unsqueeze(-1).unwrap();
    assert_eq!(c.shape(), &[3, 1]);
    assert_eq!(c.broadcast_to(&[3, 2]).unwrap().to_vec::<i32>().unwrap(), [1, 1, 2, 2, 3, 3]);
    assert_eq!(r.unsqueeze(0).unwrap().shape(), &[1, 3]);
    assert_eq!(c.squeeze(1).unwrap().shape(), &[3]);
    assert_eq!(c.squeeze(0).unwrap().shape(), &[3, 1]); // size 3: unchanged
    let x = x234();
    let f = x.flatten(1, -1).unwrap();
    assert_eq!(f.shape(), &[2, 12]);
    assert!(same_storage(&f, &x));
    assert_eq!(x.flatten(0, 1).unwrap().shape(), &[6, 4]);
    assert_eq!(x.flatten(0, -1).unwrap().shape(), &[24]);
    assert_eq!(Tensor::scalar(1.0f32).flatten(0, -1).unwrap().shape(), &[1]);
}

#[test]
fn slice_and_narrow_are_views() {
    let x = x234();
    let s = x.slice(-1, 1, 4, 2).unwrap(); // k = 1, 3
    assert_eq!(s.shape(), &[2, 3, 2]);
    assert!(same_storage(&s, &x));
    let want: Vec<f32> = (0..2).flat_map(|i| (0..3).flat_map(move |j| [at(i, j, 1), at(i, j, 3)])).collect();
    assert_eq!(v(&s), want);
    let rev = x.slice(1, -1, i64::MIN, -1).unwrap(); // j = 2, 1, 0
    assert!(same_storage(&rev, &x));
    assert_eq!(v(&rev)[..4], [8.0, 9.0, 10.0, 11.0]);
    let clamp = x.slice(2, -100, 100, 1).unwrap();
    assert_eq!(clamp.shape(), &[2, 3, 4]);
    let empty = x.slice(0, 2, 5, 1).unwrap();
    assert_eq!(empty.shape(), &[0, 3, 4]);
    let n = x.narrow(1, 1, 2).unwrap();
    assert_eq!(n.shape(), &[2, 2, 4]);
    assert!(same_storage(&n, &x));
    assert_eq!(v(&n)[..5], [4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_eq!(x.narrow(1, 3, 0).unwrap().shape(), &[2, 0, 4]);
}

#[test]
fn chunk_splits_like_pytorch() {
    let x = Tensor::arange(5, DType::I64);
    let parts = x.chunk(2, 0).unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].to_vec::<i64>().unwrap(), [0, 1, 2]);
    assert_eq!(parts[1].to_vec::<i64>().unwrap(), [3, 4]);
    assert!(same_storage(&parts[1], &x));
    // Fewer chunks than asked when the dim is small.
    assert_eq!(x.chunk(4, -1).unwrap().len(), 3);
    let q = x234().chunk(3, 1).unwrap();
    assert_eq!(q.iter().map(|t| t.dims()).collect::<Vec<_>>(), vec![vec![2, 1, 4]; 3]);
}

#[test]
fn pad_cat_index_select_copy() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let p = x.pad(&[(1, 0)], PadMode::Constant(9.0)).unwrap(); // last axis only
    assert_eq!(p.shape(), &[2, 3]);
    assert_eq!(v(&p), [9.0, 1.0, 2.0, 9.0, 3.0, 4.0]);
    let p2 = x.pad(&[(0, 1), (1, 1)], PadMode::Edge).unwrap();
    assert_eq!(p2.shape(), &[3, 4]);
    assert_eq!(v(&p2), [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 3.0, 3.0, 4.0, 4.0]);
    let r = Tensor::from_vec(vec![1i32, 2, 3], &[3]).unwrap().pad(&[(2, 1)], PadMode::Reflect).unwrap();
    assert_eq!(r.to_vec::<i32>().unwrap(), [3, 2, 1, 2, 3, 2]);

    let y = Tensor::from_vec(vec![5.0f32, 6.0], &[1, 2]).unwrap();
    let c = Tensor::cat(&[&x, &y], 0).unwrap();
    assert_eq!(c.shape(), &[3, 2]);
    assert_eq!(v(&c), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let c1 = Tensor::cat(&[&x, &x.t().unwrap()], -1).unwrap();
    assert_eq!(v(&c1), [1.0, 2.0, 1.0, 3.0, 3.0, 4.0, 2.0, 4.0]);
    let err = Tensor::cat(&[&x, &y], 1).unwrap_err();
    assert!(err.to_string().contains("concat"), "{err}");

    let idx = Tensor::from_vec(vec![1i64, -2, 1], &[3]).unwrap();
    let g = x.index_select(-1, &idx).unwrap();
    assert_eq!(g.shape(), &[2, 3]);
    assert_eq!(v(&g), [2.0, 1.0, 2.0, 4.0, 3.0, 4.0]);
    let bad = Tensor::from_vec(vec![2i64], &[1]).unwrap();
    assert!(x.index_select(0, &bad).is_err());
}

#[test]
fn views_of_host_views_compose() {
    // A view made with Layout methods, then viewed again through Tensor methods.
    let h = HostTensor::from_vec((0..6).map(|i| i as f32).collect::<Vec<_>>(), &[2, 3]).unwrap();
    let perm = Tensor::from_host(h.with_layout(h.layout.permute(&[1, 0]).unwrap())); // [3, 2]
    let s = perm.slice(0, 1, 3, 1).unwrap().expand(&[2, 2, 2]).unwrap();
    assert_eq!(s.shape(), &[2, 2, 2]);
    assert_eq!(v(&s), [1.0, 4.0, 2.0, 5.0, 1.0, 4.0, 2.0, 5.0]);
    assert!(Arc::ptr_eq(&s.to_host().unwrap().storage, &h.storage));
    // Reshaping a non-contiguous view (here: adding a size-1 axis) gives the same values.
    let u = perm.slice(0, 1, 3, 1).unwrap().unsqueeze(0).unwrap();
    assert_eq!(u.shape(), &[1, 2, 2]);
    assert_eq!(v(&u), [1.0, 4.0, 2.0, 5.0]);
}
