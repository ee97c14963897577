//! Helpers shared by the matmul, conv and pool kernel tests: deterministic data, strided
//! views built with `Layout` methods, and a tolerance check that names the failing element.
#![allow(dead_code)]

use kiln_ir::{Element, HostTensor};

/// Deterministic pseudo-random values in [-1, 1) (a 64-bit LCG; no test dependency needed).
pub fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// A dense tensor of `T` with `values(seed)` (rounded to `T`).
pub fn rand<T: Element>(shape: &[usize], seed: u64) -> HostTensor {
    let n = shape.iter().product();
    let v: Vec<T> = values(n, seed).into_iter().map(T::from_f64).collect();
    HostTensor::from_vec(v, shape).unwrap()
}

/// Small integers in `lo..=hi` as `T` (exact in every dtype).
pub fn rand_int<T: Element>(shape: &[usize], seed: u64, lo: i64, hi: i64) -> HostTensor {
    let n = shape.iter().product();
    let span = (hi - lo + 1) as f64;
    let v: Vec<T> = values(n, seed)
        .into_iter()
        .map(|x| T::from_f64((lo + (((x + 1.0) / 2.0 * span) as i64).min(hi - lo)) as f64))
        .collect();
    HostTensor::from_vec(v, shape).unwrap()
}

/// `t` viewed with axes permuted (`out axis i = t axis perm[i]`), no copy.
pub fn permuted(t: &HostTensor, perm: &[usize]) -> HostTensor {
    t.with_layout(t.layout.permute(perm).unwrap())
}

/// A non-contiguous tensor of logical shape `shape` holding `data`: stored with axes in
/// `perm` order and permuted back, so its strides are not row-major.
pub fn stored_permuted(data: &HostTensor, perm: &[usize]) -> HostTensor {
    // store axes in order perm: physical axis i is logical axis perm[i]
    let phys = permuted(data, perm).contiguous();
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    let v = permuted(&phys, &inv);
    assert!(!v.layout.is_contiguous() || data.numel() <= 1);
    assert_eq!(v.to_f64_vec(), data.to_f64_vec());
    v
}

/// `t` broadcast to `shape` (stride-0 dims), no copy.
pub fn expanded(t: &HostTensor, shape: &[usize]) -> HostTensor {
    t.with_layout(t.layout.broadcast_to(shape).unwrap())
}

/// `t` sliced along `axis` (clamped start/end, any non-zero step), no copy.
pub fn sliced(t: &HostTensor, axis: usize, start: i64, end: i64, step: i64) -> HostTensor {
    t.with_layout(t.layout.slice(axis, start, end, step).unwrap())
}

/// Asserts `got` matches `want` within `|g - w| <= tol * (1 + |w|)`; NaN must match NaN and
/// infinities must match exactly.
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= tol * (1.0 + w.abs())
        };
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// Strides of a row-major tensor of `shape` (for naive reference loops).
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}
