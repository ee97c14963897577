//! Elementwise methods against hand-computed values: broadcasting, scalars, operators,
//! integer and bool dtypes, NaN/Inf and non-contiguous inputs. Needs the CPU kernels.

use kiln::{DType, HostTensor, Tensor};

fn f32s(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{got:?} vs {want:?}");
    }
}

#[test]
fn binary_arithmetic_broadcasts() {
    let a = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let row = f32s(&[10.0, 20.0, 30.0], &[3]);
    let col = f32s(&[1.0, 2.0], &[2, 1]);
    assert_eq!(a.add(&row).unwrap().to_vec::<f32>().unwrap(), [11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    assert_eq!(a.sub(&col).unwrap().to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 2.0, 3.0, 4.0]);
    let outer = col.mul(&row).unwrap();
    assert_eq!(outer.shape(), &[2, 3]);
    assert_eq!(outer.to_vec::<f32>().unwrap(), [10.0, 20.0, 30.0, 20.0, 40.0, 60.0]);
    assert_eq!(a.div(&col).unwrap().to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 2.0, 2.5, 3.0]);
    assert_eq!(a.pow(&col).unwrap().to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 16.0, 25.0, 36.0]);
    let m = f32s(&[-7.0, 7.0], &[2]);
    assert_eq!(m.rem(&f32s(&[3.0], &[1])).unwrap().to_vec::<f32>().unwrap(), [-1.0, 1.0]);
    // Size-1 and empty dims.
    let e = Tensor::zeros(&[0, 3], DType::F32);
    let r = e.add(&row).unwrap();
    assert_eq!((r.shape(), r.numel()), (&[0usize, 3][..], 0));
    let s = Tensor::scalar(2.0f32);
    assert_eq!(s.mul(&a).unwrap().shape(), &[2, 3]);
}

#[test]
fn maximum_minimum_propagate_nan() {
    let a = f32s(&[1.0, f32::NAN, 3.0, f32::NEG_INFINITY], &[4]);
    let b = f32s(&[2.0, 0.0, f32::NAN, 0.0], &[4]);
    close(&a.maximum(&b).unwrap().to_vec::<f32>().unwrap(), &[2.0, f32::NAN, f32::NAN, 0.0], 0.0);
    close(&a.minimum(&b).unwrap().to_vec::<f32>().unwrap(), &[1.0, f32::NAN, f32::NAN, f32::NEG_INFINITY], 0.0);
}

#[test]
fn comparisons_yield_bool() {
    let a = f32s(&[1.0, 2.0, 3.0, f32::NAN], &[4]);
    let b = f32s(&[2.0], &[1]);
    type Cmp = fn(&Tensor, &Tensor) -> kiln::Result<Tensor>;
    let cases: [(Cmp, [bool; 4]); 6] = [
        (Tensor::eq, [false, true, false, false]),
        (Tensor::ne, [true, false, true, true]),
        (Tensor::lt, [true, false, false, false]),
        (Tensor::le, [true, true, false, false]),
        (Tensor::gt, [false, false, true, false]),
        (Tensor::ge, [false, true, true, false]),
    ];
    for (f, want) in cases {
        let r = f(&a, &b).unwrap();
        assert_eq!(r.dtype(), DType::Bool);
        assert_eq!(r.to_vec::<bool>().unwrap(), want);
    }
}

#[test]
fn integer_and_bool_dtypes() {
    let a = Tensor::from_vec(vec![7i64, -7, 9, 4], &[4]).unwrap();
    let b = Tensor::from_vec(vec![2i64, 2, -4, 3], &[4]).unwrap();
    assert_eq!(a.div(&b).unwrap().to_vec::<i64>().unwrap(), [3, -3, -2, 1]);
    assert_eq!(a.rem(&b).unwrap().to_vec::<i64>().unwrap(), [1, -1, 1, 1]);
    assert_eq!(a.add_scalar(1.9).unwrap().to_vec::<i64>().unwrap(), [8, -6, 10, 5]);
    assert_eq!(a.mul_scalar(2.0).unwrap().to_vec::<i64>().unwrap(), [14, -14, 18, 8]);
    assert_eq!(a.neg().unwrap().to_vec::<i64>().unwrap(), [-7, 7, -9, -4]);
    assert_eq!(a.abs().unwrap().to_vec::<i64>().unwrap(), [7, 7, 9, 4]);
    assert_eq!(a.sign().unwrap().to_vec::<i64>().unwrap(), [1, -1, 1, 1]);
    assert_eq!(a.relu().unwrap().to_vec::<i64>().unwrap(), [7, 0, 9, 4]);
    let u = Tensor::from_vec(vec![0b1100u8, 0b1010], &[2]).unwrap();
    let v = Tensor::from_vec(vec![0b1010u8, 0b0110], &[2]).unwrap();
    assert_eq!(u.logical_and(&v).unwrap().to_vec::<u8>().unwrap(), [0b1000, 0b0010]);
    assert_eq!(u.logical_or(&v).unwrap().to_vec::<u8>().unwrap(), [0b1110, 0b1110]);
    assert_eq!(u.logical_xor(&v).unwrap().to_vec::<u8>().unwrap(), [0b0110, 0b1100]);
    let p = Tensor::from_vec(vec![true, true, false, false], &[4]).unwrap();
    let q = Tensor::from_vec(vec![true, false, true, false], &[4]).unwrap();
    assert_eq!(p.logical_and(&q).unwrap().to_vec::<bool>().unwrap(), [true, false, false, false]);
    assert_eq!(p.logical_or(&q).unwrap().to_vec::<bool>().unwrap(), [true, true, true, false]);
    assert_eq!(p.logical_xor(&q).unwrap().to_vec::<bool>().unwrap(), [false, true, true, false]);
    assert_eq!(p.logical_not().unwrap().to_vec::<bool>().unwrap(), [false, false, true, true]);
    assert_eq!(p.eq(&q).unwrap().to_vec::<bool>().unwrap(), [true, false, false, true]);
    assert!(f32s(&[1.0], &[1]).logical_and(&f32s(&[1.0], &[1])).is_err());
}

#[test]
fn scalar_forms_use_the_tensor_dtype() {
    let a = f32s(&[1.0, 2.0, 4.0], &[3]);
    assert_eq!(a.add_scalar(1.0).unwrap().to_vec::<f32>().unwrap(), [2.0, 3.0, 5.0]);
    assert_eq!(a.sub_scalar(1.0).unwrap().to_vec::<f32>().unwrap(), [0.0, 1.0, 3.0]);
    assert_eq!(a.mul_scalar(0.5).unwrap().to_vec::<f32>().unwrap(), [0.5, 1.0, 2.0]);
    assert_eq!(a.div_scalar(4.0).unwrap().to_vec::<f32>().unwrap(), [0.25, 0.5, 1.0]);
    assert_eq!(a.pow_scalar(2.0).unwrap().to_vec::<f32>().unwrap(), [1.0, 4.0, 16.0]);
    let d = Tensor::from_vec(vec![1.0f64], &[1]).unwrap().add_scalar(0.1).unwrap();
    assert_eq!(d.dtype(), DType::F64);
    assert_eq!(d.to_vec::<f64>().unwrap(), [1.1]);
}

#[test]
fn operators_match_methods() {
    let a = f32s(&[1.0, 2.0], &[2]);
    let b = f32s(&[3.0, 5.0], &[2]);
    assert_eq!((&a + &b).unwrap().to_vec::<f32>().unwrap(), [4.0, 7.0]);
    assert_eq!((&a - &b).unwrap().to_vec::<f32>().unwrap(), [-2.0, -3.0]);
    assert_eq!((&a * &b).unwrap().to_vec::<f32>().unwrap(), [3.0, 10.0]);
    assert_eq!((&b / &a).unwrap().to_vec::<f32>().unwrap(), [3.0, 2.5]);
    assert_eq!((-&a).unwrap().to_vec::<f32>().unwrap(), [-1.0, -2.0]);
    assert_eq!((a.clone() + b.clone()).unwrap().to_vec::<f32>().unwrap(), [4.0, 7.0]);
    assert_eq!((a.clone() * &b).unwrap().to_vec::<f32>().unwrap(), [3.0, 10.0]);
    assert_eq!((-a.clone()).unwrap().to_vec::<f32>().unwrap(), [-1.0, -2.0]);
    assert!((&a + &f32s(&[1.0, 2.0, 3.0], &[3])).is_err());
}

#[test]
fn unary_functions() {
    let x = f32s(&[-1.5, 0.0, 0.5, 2.5], &[4]);
    let v = |t: kiln::Result<Tensor>| t.unwrap().to_vec::<f32>().unwrap();
    let map = |f: fn(f32) -> f32| [-1.5f32, 0.0, 0.5, 2.5].map(f);
    close(&v(x.neg()), &map(|a| -a), 0.0);
    close(&v(x.abs()), &map(f32::abs), 0.0);
    close(&v(x.sign()), &[-1.0, 0.0, 1.0, 1.0], 0.0);
    close(&v(x.exp()), &map(f32::exp), 1e-6);
    close(&v(x.sin()), &map(f32::sin), 1e-6);
    close(&v(x.cos()), &map(f32::cos), 1e-6);
    close(&v(x.tanh()), &map(f32::tanh), 1e-6);
    close(&v(x.sigmoid()), &map(|a| 1.0 / (1.0 + (-a).exp())), 1e-6);
    close(&v(x.relu()), &[0.0, 0.0, 0.5, 2.5], 0.0);
    close(&v(x.floor()), &[-2.0, 0.0, 0.0, 2.0], 0.0);
    close(&v(x.ceil()), &[-1.0, 0.0, 1.0, 3.0], 0.0);
    // Half to even.
    close(&v(x.round()), &[-2.0, 0.0, 0.0, 2.0], 0.0);
    close(&v(x.erf()), &[-0.966_105_1, 0.0, 0.520_499_9, 0.999_593], 1e-5);
    close(&v(x.silu()), &map(|a| a / (1.0 + (-a).exp())), 1e-6);
    let p = f32s(&[4.0, 0.25, 0.0, -1.0], &[4]);
    close(&v(p.sqrt()), &[2.0, 0.5, 0.0, f32::NAN], 1e-6);
    close(&v(p.rsqrt()), &[0.5, 2.0, f32::INFINITY, f32::NAN], 1e-6);
    close(&v(p.reciprocal()), &[0.25, 4.0, f32::INFINITY, -1.0], 1e-6);
    close(&v(p.log()), &[4f32.ln(), 0.25f32.ln(), f32::NEG_INFINITY, f32::NAN], 1e-6);
}

#[test]
fn gelu_exact_and_tanh() {
    let xs = [-2.0f32, -0.5, 0.0, 1.0, 3.0];
    let x = f32s(&xs, &[5]);
    // x * Φ(x) with Φ from erf values computed in f64 by hand formulae.
    let exact: Vec<f32> = xs.iter().map(|&a| (a as f64 * 0.5 * (1.0 + erf(a as f64 / 2f64.sqrt()))) as f32).collect();
    close(&x.gelu().unwrap().to_vec::<f32>().unwrap(), &exact, 1e-5);
    let approx: Vec<f32> = xs
        .iter()
        .map(|&a| {
            let a = a as f64;
            (0.5 * a * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (a + 0.044715 * a * a * a)).tanh())) as f32
        })
        .collect();
    close(&x.gelu_tanh().unwrap().to_vec::<f32>().unwrap(), &approx, 1e-5);
    assert!(Tensor::zeros(&[1], DType::I32).gelu().is_err());
}

/// Abramowitz–Stegun 7.1.26 is too coarse for 1e-5; a series/continued-fraction pair is exact enough.
fn erf(x: f64) -> f64 {
    if x.abs() < 3.0 {
        // Maclaurin series.
        let mut sum = 0.0;
        let mut term = x;
        let mut n = 0.0;
        while term.abs() > 1e-17 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        x.signum()
    }
}

#[test]
fn isnan_isinf() {
    let x = f32s(&[1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY], &[4]);
    assert_eq!(x.isnan().unwrap().to_vec::<bool>().unwrap(), [false, true, false, false]);
    assert_eq!(x.isinf().unwrap().to_vec::<bool>().unwrap(), [false, false, true, true]);
    let i = Tensor::arange(2, DType::I32);
    assert_eq!(i.isnan().unwrap().to_vec::<bool>().unwrap(), [false, false]);
}

#[test]
fn where_cond_broadcasts() {
    let c = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();
    let a = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = Tensor::scalar(-1.0f32);
    let r = Tensor::where_cond(&c, &a, &b).unwrap();
    assert_eq!(r.shape(), &[2, 3]);
    assert_eq!(r.to_vec::<f32>().unwrap(), [1.0, -1.0, 3.0, 4.0, -1.0, 6.0]);
    assert!(Tensor::where_cond(&a, &a, &b).is_err());
}

#[test]
fn to_dtype_casts() {
    let x = f32s(&[-1.7, 0.0, 2.9, f32::NAN], &[4]);
    assert_eq!(x.to_dtype(DType::I32).unwrap().to_vec::<i32>().unwrap(), [-1, 0, 2, 0]);
    assert_eq!(x.to_dtype(DType::Bool).unwrap().to_vec::<bool>().unwrap(), [true, false, true, true]);
    let b = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    assert_eq!(b.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(), [1.0, 0.0]);
    let h = x.to_dtype(DType::F16).unwrap();
    assert_eq!(h.dtype(), DType::F16);
    close(&h.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(), &[-1.7, 0.0, 2.9, f32::NAN], 1e-3);
}

#[test]
fn non_contiguous_inputs() {
    // A permuted view, a broadcast (stride-0) view and a reversed slice as operands.
    let base = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let tr = Tensor::from_host(base.with_layout(base.layout.permute(&[1, 0]).unwrap())); // [3, 2]
    let row = HostTensor::from_vec(vec![10.0f32, 20.0], &[2]).unwrap();
    let bc = Tensor::from_host(row.with_layout(row.layout.broadcast_to(&[3, 2]).unwrap()));
    let r = tr.add(&bc).unwrap();
    assert_eq!(r.to_vec::<f32>().unwrap(), [11.0, 24.0, 12.0, 25.0, 13.0, 26.0]);
    let rev = tr.slice(0, -1, i64::MIN, -1).unwrap(); // rows 2, 1, 0
    assert_eq!(rev.exp().unwrap().to_vec::<f32>().unwrap(), [3f32.exp(), 6f32.exp(), 2f32.exp(), 5f32.exp(), 1f32.exp(), 4f32.exp()]);
    assert_eq!(rev.mul(&tr).unwrap().to_vec::<f32>().unwrap(), [3.0, 24.0, 4.0, 25.0, 3.0, 24.0]);
}
