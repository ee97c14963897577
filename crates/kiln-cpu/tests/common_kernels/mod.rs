//! Helpers shared by the movement, gather, norm and attention kernel tests: building tensors of
//! any dtype from f64 values, non-contiguous copies with the same logical values, and
//! NaN-aware comparisons.
#![allow(dead_code)]

use kiln_ir::{DType, Element, HostTensor, Layout};

/// A dense tensor of `dtype` holding `vals` (converted with `Element::from_f64`).
pub fn tensor(dtype: DType, vals: &[f64], shape: &[usize]) -> HostTensor {
    let storage = kiln_ir::with_dtype!(dtype, T, T::into_storage(vals.iter().map(|&v| T::from_f64(v)).collect()));
    HostTensor::new(storage, shape).expect("test tensor shape")
}

/// Values `0, 1, 2, ...` made representable in every dtype (small, alternating sign where signed).
pub fn ramp(dtype: DType, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| match dtype {
            DType::Bool => (i % 3 == 1) as u8 as f64,
            DType::U8 => (i % 200) as f64,
            DType::I8 => (i % 100) as f64 - 50.0,
            _ => i as f64 - (n as f64) / 2.0,
        })
        .collect()
}

/// A dense `ramp` tensor.
pub fn ramp_tensor(dtype: DType, shape: &[usize]) -> HostTensor {
    tensor(dtype, &ramp(dtype, shape.iter().product()), shape)
}

/// Deterministic pseudo-random values in `[-scale, scale)`.
pub fn noise(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The same logical values as `t`, stored with every axis reversed in memory and viewed through
/// a permutation (non-contiguous for rank >= 2).
pub fn transposed(t: &HostTensor) -> HostTensor {
    let rev: Vec<usize> = (0..t.shape().len()).rev().collect();
    let phys = t.with_layout(t.layout.permute(&rev).unwrap()).contiguous();
    phys.with_layout(phys.layout.permute(&rev).unwrap())
}

/// The same logical values as `t`, stored with a gap after every element (last-axis stride 2)
/// and a non-zero offset.
pub fn strided(t: &HostTensor) -> HostTensor {
    let mut shape = t.shape().to_vec();
    if shape.is_empty() {
        return t.clone();
    }
    let last = shape.len() - 1;
    let vals = t.to_f64_vec();
    let filler = vals.first().copied().unwrap_or(0.0);
    let mut phys = vec![filler; 1];
    for v in &vals {
        phys.push(*v);
        phys.push(filler);
    }
    let n = phys.len();
    let whole = tensor(t.dtype(), &phys, &[n]);
    shape[last] *= 2;
    let rows: usize = shape.iter().product();
    // Drop the leading filler via the offset, then take every second element.
    let l = Layout { shape: shape.clone(), strides: kiln_ir::data::contiguous_strides(&shape), offset: 1 };
    assert_eq!(rows + 1, n);
    let l = l.slice(last, 0, shape[last] as i64, 2).unwrap();
    whole.with_layout(l)
}

/// The same logical values as `t`, stored upside down along axis 0 (negative stride).
pub fn reversed(t: &HostTensor) -> HostTensor {
    let n = t.shape()[0] as i64;
    let flip = |x: &HostTensor| x.with_layout(x.layout.slice(0, n - 1, -1, -1).unwrap());
    let phys = flip(t).contiguous();
    flip(&phys)
}

/// Asserts `got` equals `want` within `atol + rtol * |want|`; NaN must match NaN and infinities
/// must match exactly.
pub fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        if !ok {
            let all = if got.len() <= 64 { format!("\n got {got:?}\nwant {want:?}") } else { String::new() };
            panic!("{what}: element {i}: got {g}, want {w}{all}");
        }
    }
}

/// Row-major multi-index of flat position `i` in `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
    idx
}

/// Flat row-major position of `idx` in `shape`.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

/// True when `a` and `b` share one storage allocation.
pub fn shares(a: &HostTensor, b: &HostTensor) -> bool {
    std::sync::Arc::ptr_eq(&a.storage, &b.storage)
}
