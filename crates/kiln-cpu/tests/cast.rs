//! Cast between every pair of dtypes against a reference written from the spec of
//! `Op::Cast`: float→int truncates and saturates (NaN → 0), anything→bool is `x != 0`,
//! bool→number is 0/1, int→int wraps, →float rounds to nearest.

mod ewise_support;

use ewise_support::*;
use kiln_cpu::eval;
use kiln_ir::half::{bf16, f16};
use kiln_ir::{DType, HostTensor, Layout, Op};

fn cast(x: &HostTensor, to: DType) -> HostTensor {
    eval(&Op::Cast(to), &[x]).unwrap()
}

/// The spec, for a source value `v` of dtype `from` (`exact` holds integer sources exactly).
fn cast_ref(v: f64, exact: Option<i128>, from: DType, to: DType) -> f64 {
    if to == DType::Bool {
        return (v != 0.0) as u8 as f64;
    }
    if to.is_float() {
        return round_to(v, to);
    }
    let (lo, hi) = int_range(to);
    if from.is_float() {
        if v.is_nan() {
            0.0
        } else {
            v.trunc().clamp(lo as f64, hi as f64)
        }
    } else {
        wrap(exact.unwrap_or(v as i128), to) as f64
    }
}

/// Values that exercise truncation, saturation, wrapping, rounding and the specials.
fn sources(from: DType) -> Vec<f64> {
    let raw = [
        0.0, -0.0, 1.0, -1.0, 0.4, -0.6, 1.7, -1.7, 2.5, 127.9, 128.0, -129.0, 255.5, 256.0, 300.7, -300.7, 65504.0,
        65520.0, 1e-8, 3.4e38, 1e10, -3e9, 1.0 / 3.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY,
    ];
    let mut v: Vec<f64> = raw.iter().map(|&x| round_to(x, from)).collect();
    if from.is_int() {
        // The integer storage already wrapped/saturated these; keep them as they are held.
        v.dedup();
    }
    v
}

#[test]
fn every_dtype_pair_follows_the_spec_on_every_layout() {
    for from in DType::ALL {
        let vals = sources(from);
        let n = vals.len();
        let exact: Vec<Option<i128>> = if from.is_float() {
            vec![None; n]
        } else {
            ints(&tensor(&vals, &[n], from)).into_iter().map(Some).collect()
        };
        for to in DType::ALL {
            let want: Vec<f64> = (0..n).map(|i| cast_ref(vals[i], exact[i], from, to)).collect();
            for (name, x) in views(&vals, &[n], from) {
                let got = cast(&x, to);
                assert_eq!((got.dtype(), got.shape()), (to, &[n][..]));
                let g = got.to_f64_vec();
                for i in 0..n {
                    let ok = if want[i].is_nan() { g[i].is_nan() } else { g[i] == want[i] };
                    assert!(ok, "{from}->{to} ({name}): cast({}) = {}, want {}", vals[i], g[i], want[i]);
                }
            }
        }
    }
}

#[test]
fn spot_values_from_the_spec() {
    let x = HostTensor::from_vec(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -1.7, 300.7, -0.5], &[6]).unwrap();
    assert_eq!(cast(&x, DType::I32).to_vec::<i32>().unwrap(), vec![0, i32::MAX, i32::MIN, -1, 300, 0]);
    assert_eq!(cast(&x, DType::U8).to_vec::<u8>().unwrap(), vec![0, 255, 0, 0, 255, 0]);
    assert_eq!(cast(&x, DType::I8).to_vec::<i8>().unwrap(), vec![0, 127, -128, -1, 127, 0]);
    assert_eq!(cast(&x, DType::Bool).to_vec::<bool>().unwrap(), vec![true, true, true, true, true, true]);
    // Integer narrowing wraps; bool is 0/1.
    let x = HostTensor::from_vec(vec![300i32, -1, 128, i32::MIN], &[4]).unwrap();
    assert_eq!(cast(&x, DType::U8).to_vec::<u8>().unwrap(), vec![44, 255, 128, 0]);
    assert_eq!(cast(&x, DType::I8).to_vec::<i8>().unwrap(), vec![44, -1, -128, 0]);
    let b = HostTensor::from_vec(vec![true, false], &[2]).unwrap();
    assert_eq!(cast(&b, DType::F16).to_vec::<f16>().unwrap(), vec![f16::ONE, f16::ZERO]);
    assert_eq!(cast(&b, DType::I64).to_vec::<i64>().unwrap(), vec![1, 0]);
    // i64 values beyond 2^53 survive i64 -> i64 paths and round correctly to f64.
    let big = HostTensor::from_vec(vec![i64::MAX, i64::MIN + 1, (1 << 53) + 1], &[3]).unwrap();
    let as_i32 = cast(&big, DType::I32).to_vec::<i32>().unwrap();
    assert_eq!(as_i32, vec![-1, 1, 1]);
    assert_eq!(cast(&big, DType::F64).to_vec::<f64>().unwrap(), vec![i64::MAX as f64, (i64::MIN + 1) as f64, (1u64 << 53) as f64]);
    // f32 -> half types round to nearest even, and overflow to inf.
    let x = HostTensor::from_vec(vec![65519.0f32, 65520.0, 1.0 + 1.0 / 2048.0, 1.0 + 3.0 / 2048.0, 1e-8], &[5]).unwrap();
    let h = cast(&x, DType::F16).to_vec::<f16>().unwrap();
    assert_eq!(h[0], f16::MAX);
    assert!(h[1].is_infinite());
    assert_eq!(h[2], f16::ONE); // a tie rounds to the even neighbour
    assert_eq!(h[3], f16::from_f32(1.0 + 4.0 / 2048.0));
    assert_eq!(h[4], f16::ZERO);
    let hb = cast(&x, DType::BF16).to_vec::<bf16>().unwrap();
    assert_eq!(hb[0], bf16::from_f32(65536.0));
    // f64 -> f32 rounds once (not through anything narrower).
    let x = HostTensor::from_vec(vec![1.0f64 + 2f64.powi(-24) + 2f64.powi(-40)], &[1]).unwrap();
    assert_eq!(cast(&x, DType::F32).to_vec::<f32>().unwrap(), vec![1.0 + 2f32.powi(-23)]);
}

#[test]
fn scalars_empty_tensors_and_same_dtype() {
    let s = HostTensor::scalar(-2.75f64);
    let c = cast(&s, DType::I8);
    assert_eq!((c.shape(), c.to_vec::<i8>().unwrap()), (&[][..], vec![-2]));
    let e = HostTensor::zeros(DType::F32, &[0, 3]);
    let c = cast(&e, DType::I64);
    assert_eq!((c.dtype(), c.shape(), c.numel()), (DType::I64, &[0usize, 3][..], 0));
    // Same dtype: values kept; a non-contiguous view comes back dense.
    let t = HostTensor::from_vec((0..12).map(|v| v as f32).collect(), &[3, 4]).unwrap();
    let tv = t.with_layout(Layout::contiguous(&[3, 4]).permute(&[1, 0]).unwrap());
    let c = cast(&tv, DType::F32);
    assert!(c.is_dense());
    assert_eq!(c.to_vec::<f32>().unwrap(), tv.to_vec::<f32>().unwrap());
    assert_eq!(cast(&t, DType::F32).to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
}

#[test]
fn large_strided_cast_matches_elementwise_conversion() {
    let mut rng = Lcg::new(11);
    let (r, k) = (260, 301);
    let v: Vec<f64> = rng.vals(r * k, 1000.0);
    let t = tensor(&v, &[r, k], DType::F32).with_layout(Layout::contiguous(&[r, k]).permute(&[1, 0]).unwrap());
    let h = cast(&t, DType::F16).to_vec::<f16>().unwrap();
    let i = cast(&t, DType::I32).to_vec::<i32>().unwrap();
    for a in 0..k {
        for b in 0..r {
            let x = v[b * k + a] as f32;
            assert_eq!(h[a * r + b], f16::from_f32(x));
            assert_eq!(i[a * r + b], x as i32);
        }
    }
}
