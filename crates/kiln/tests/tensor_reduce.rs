//! Reductions and arg-reductions against hand-computed values. Needs the CPU kernels.

use kiln::{DType, HostTensor, Tensor};

fn x23() -> Tensor {
    Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 4.0, 2.0, 6.0], &[2, 3]).unwrap()
}

fn vals(t: kiln::Result<Tensor>) -> (Vec<usize>, Vec<f32>) {
    let t = t.unwrap();
    (t.dims(), t.to_vec::<f32>().unwrap())
}

#[test]
fn sum_mean_max_min_prod_over_axes() {
    let x = x23();
    assert_eq!(vals(x.sum(&[0], false)), (vec![3], vec![5.0, 7.0, 9.0]));
    assert_eq!(vals(x.sum(&[-1], false)), (vec![2], vec![9.0, 12.0]));
    assert_eq!(vals(x.sum(&[1], true)), (vec![2, 1], vec![9.0, 12.0]));
    assert_eq!(vals(x.mean(&[1], false)), (vec![2], vec![3.0, 4.0]));
    assert_eq!(vals(x.max(&[0], false)), (vec![3], vec![4.0, 5.0, 6.0]));
    assert_eq!(vals(x.min(&[-1], true)), (vec![2, 1], vec![1.0, 2.0]));
    assert_eq!(vals(x.prod(&[0], false)), (vec![3], vec![4.0, 10.0, 18.0]));
    // Axes in any order, negative or not, mean the same.
    assert_eq!(vals(x.sum(&[1, 0], false)), (vec![], vec![21.0]));
    assert_eq!(vals(x.sum(&[-1, -2], true)), (vec![1, 1], vec![21.0]));
}

#[test]
fn empty_axes_reduce_everything() {
    let x = x23();
    assert_eq!(vals(x.sum(&[], false)), (vec![], vec![21.0]));
    assert_eq!(vals(x.sum(&[], true)), (vec![1, 1], vec![21.0]));
    assert_eq!(vals(x.sum_all()), (vec![], vec![21.0]));
    assert_eq!(vals(x.max(&[], false)), (vec![], vec![6.0]));
    assert_eq!(vals(x.mean(&[], false)), (vec![], vec![3.5]));
}

#[test]
fn empty_dims_give_identities() {
    let e = Tensor::zeros(&[0, 2], DType::F32);
    assert_eq!(vals(e.sum(&[0], false)), (vec![2], vec![0.0, 0.0]));
    assert_eq!(vals(e.prod(&[0], false)), (vec![2], vec![1.0, 1.0]));
    assert_eq!(vals(e.max(&[0], false)), (vec![2], vec![f32::NEG_INFINITY; 2]));
    assert!(e.mean(&[0], false).unwrap().to_vec::<f32>().unwrap().iter().all(|v| v.is_nan()));
    assert!(e.argmax(0, false).is_err());
}

#[test]
fn integer_reductions_keep_dtype() {
    let x = Tensor::from_vec(vec![1i64, -2, 3, 4], &[2, 2]).unwrap();
    let s = x.sum(&[0], false).unwrap();
    assert_eq!(s.dtype(), DType::I64);
    assert_eq!(s.to_vec::<i64>().unwrap(), [4, 2]);
    assert_eq!(x.max(&[1], false).unwrap().to_vec::<i64>().unwrap(), [1, 4]);
    assert_eq!(x.prod(&[], false).unwrap().to_vec::<i64>().unwrap(), [-24]);
    assert!(Tensor::zeros(&[2], DType::Bool).sum_all().is_err());
}

#[test]
fn nan_propagates_through_sum_and_max() {
    let x = Tensor::from_vec(vec![1.0f32, f32::NAN, 3.0, f32::INFINITY], &[2, 2]).unwrap();
    let s = x.sum(&[1], false).unwrap().to_vec::<f32>().unwrap();
    assert!(s[0].is_nan() && s[1] == f32::INFINITY);
    let m = x.max(&[0], false).unwrap().to_vec::<f32>().unwrap();
    assert!(m[0] == 3.0 && m[1].is_nan());
}

#[test]
fn argmax_argmin() {
    let x = Tensor::from_vec(vec![1.0f32, 5.0, 5.0, 7.0, 2.0, 0.0], &[2, 3]).unwrap();
    let a = x.argmax(1, false).unwrap();
    assert_eq!(a.dtype(), DType::I64);
    assert_eq!(a.to_vec::<i64>().unwrap(), [1, 0]); // first of the tied 5s
    assert_eq!(x.argmax(-2, true).unwrap().dims(), vec![1, 3]);
    assert_eq!(x.argmax(-2, true).unwrap().to_vec::<i64>().unwrap(), [1, 0, 0]);
    assert_eq!(x.argmin(-1, false).unwrap().to_vec::<i64>().unwrap(), [0, 2]);
    let n = Tensor::from_vec(vec![1.0f32, f32::NAN, 9.0], &[3]).unwrap();
    assert_eq!(n.argmax(0, false).unwrap().to_vec::<i64>().unwrap(), [1]);
    let i = Tensor::from_vec(vec![3i32, -1, 2], &[3]).unwrap();
    assert_eq!(i.argmin(0, false).unwrap().to_vec::<i64>().unwrap(), [1]);
}

#[test]
fn reductions_of_views() {
    // The transpose of x23 summed over its last axis = column sums of x23.
    let x = x23();
    assert_eq!(vals(x.t().unwrap().sum(&[-1], false)), (vec![3], vec![5.0, 7.0, 9.0]));
    // A broadcast view: every row is [1, 2].
    let h = HostTensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let b = Tensor::from_host(h.with_layout(h.layout.broadcast_to(&[3, 2]).unwrap()));
    assert_eq!(vals(b.sum(&[0], false)), (vec![2], vec![3.0, 6.0]));
}
