//! Softmax, log-softmax, layer norm and inference batch norm. Each works on a dense
//! compute-type copy of its input ([`real`]), row by row, with rows spread over threads when large.

pub(crate) mod real;

use kiln_ir::{Element, Error, HostTensor, Result};
use real::{Real, ensure_float, for_each_row, from_real, to_real, wide, with_real, worth_parallel};

/// Softmax (or log-softmax) along `axis`.
pub fn softmax(x: &HostTensor, axis: usize, log: bool) -> Result<HostTensor> {
    let name = if log { "log_softmax" } else { "softmax" };
    ensure_float(x, name)?;
    let shape = x.shape();
    if axis >= shape.len() {
        return Err(Error::Shape(format!("{name}: axis {axis} is out of range for shape {shape:?}")));
    }
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    with_real!(x.dtype(), F, {
        let mut data = to_real::<F>(x)?;
        let par = worth_parallel(data.len());
        if inner == 1 {
            for_each_row(&mut data, n, par, |_, row| {
                softmax_row(row, log);
                Ok(())
            })?;
        } else {
            // The axis is strided: each column of a [n, inner] block is copied out, done as a
            // row, and copied back.
            for_each_row(&mut data, n * inner, par, |_, block| {
                let mut col = vec![F::zero(); n];
                for c in 0..inner {
                    for (j, v) in col.iter_mut().enumerate() {
                        *v = block[j * inner + c];
                    }
                    softmax_row(&mut col, log);
                    for (j, v) in col.iter().enumerate() {
                        block[j * inner + c] = *v;
                    }
                }
                Ok(())
            })?;
        }
        from_real(data, x.dtype(), shape)
    })
}

/// Softmax (or log-softmax) of one contiguous row in place, stable (the max is subtracted
/// first) with the sum accumulated in f64. A row of all -inf, or holding NaN or +inf, becomes
/// NaN (as PyTorch).
pub(crate) fn softmax_row<F: Real>(row: &mut [F], log: bool) {
    let max = row_max(row);
    if log {
        // `max` and the log-sum are subtracted separately so that `x - max` stays exact.
        let lse = F::from_f64(F::exp_shifted_sum(row, max).ln());
        for v in row.iter_mut() {
            *v = *v - max - lse;
        }
    } else {
        let inv = F::from_f64(1.0 / F::exp_shifted(row, max));
        for v in row.iter_mut() {
            *v = *v * inv;
        }
    }
}

/// The largest element, ignoring NaN (-inf for an empty row); NaN still reaches the result
/// through `x - max`. Eight independent lanes so the loop vectorises.
fn row_max<F: Real>(row: &[F]) -> F {
    let mut lanes = [F::NEG_INFINITY; 8];
    let chunks = row.chunks_exact(8);
    let mut max = F::NEG_INFINITY;
    for &v in chunks.remainder() {
        max = if v > max { v } else { max };
    }
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = if v > *l { v } else { *l };
        }
    }
    for l in lanes {
        max = if l > max { l } else { max };
    }
    max
}

/// Layer norm over axes `axis..`: `(x - mean) / sqrt(var + eps) * scale + bias` with the biased
/// variance; `scale` and `bias` broadcast to the normalized dims.
pub fn layer_norm(
    x: &HostTensor,
    scale: Option<&HostTensor>,
    bias: Option<&HostTensor>,
    axis: usize,
    eps: f64,
) -> Result<HostTensor> {
    ensure_float(x, "layer_norm")?;
    let shape = x.shape();
    if axis >= shape.len() {
        return Err(Error::Shape(format!("layer_norm: axis {axis} is out of range for shape {shape:?}")));
    }
    let normalized = &shape[axis..];
    let d: usize = normalized.iter().product();
    let param = |t: Option<&HostTensor>, default: f64| -> Result<Vec<f64>> {
        match t {
            None => Ok(vec![default; d]),
            Some(t) => {
                let l = t.layout.broadcast_to(normalized).map_err(|e| {
                    Error::Shape(format!(
                        "layer_norm: scale/bias {:?} must broadcast to the normalized dims {normalized:?} ({e})",
                        t.shape()
                    ))
                })?;
                Ok(t.with_layout(l).to_f64_vec())
            }
        }
    };
    let (scale, bias) = (param(scale, 1.0)?, param(bias, 0.0)?);
    with_real!(x.dtype(), F, {
        let mut data = to_real::<F>(x)?;
        let par = worth_parallel(data.len());
        for_each_row(&mut data, d, par, |_, row| wide(#[inline(always)] || {
            let n = row.len() as f64;
            let mean = lane_sum(row, |v| v) / n;
            // Two passes: the variance of the centred values cannot go negative.
            let var = lane_sum(row, |v| (v - mean) * (v - mean)) / n;
            let rstd = 1.0 / (var + eps).sqrt();
            for ((v, s), b) in row.iter_mut().zip(&scale).zip(&bias) {
                *v = F::narrow((v.widen() - mean) * rstd * s + b);
            }
            Ok(())
        }))?;
        from_real(data, x.dtype(), shape)
    })
}

/// `Σ f(x)` over `row` in f64 with eight independent partial sums, so that it vectorises
/// (one running sum is bound by the latency of each add).
#[inline(always)]
fn lane_sum<F: Real>(row: &[F], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = row.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|v| f(v.widen())).sum();
    for c in chunks {
        for l in 0..8 {
            acc[l] += f(c[l].widen());
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// Inference batch norm over channel axis 1 of `x` (rank >= 2): every parameter is `[C]`.
pub fn batch_norm(
    x: &HostTensor,
    scale: &HostTensor,
    bias: &HostTensor,
    mean: &HostTensor,
    var: &HostTensor,
    eps: f64,
) -> Result<HostTensor> {
    ensure_float(x, "batch_norm")?;
    let shape = x.shape();
    if shape.len() < 2 {
        return Err(Error::Shape(format!("batch_norm: input {shape:?} needs a channel axis (rank >= 2)")));
    }
    let c = shape[1];
    let params = [scale, bias, mean, var];
    if let Some(p) = params.iter().find(|p| p.shape() != [c]) {
        return Err(Error::Shape(format!(
            "batch_norm: scale, bias, mean and var must be [{c}] for input {shape:?}, got {:?}",
            p.shape()
        )));
    }
    let [scale, bias, mean, var] = params.map(|p| p.to_f64_vec());
    // Per channel: y = (x - mean) * k + bias with k = scale / sqrt(var + eps).
    let k: Vec<f64> = scale.iter().zip(&var).map(|(s, v)| s / (v + eps).sqrt()).collect();
    let spatial: usize = shape[2..].iter().product();
    with_real!(x.dtype(), F, {
        let mut data = to_real::<F>(x)?;
        let par = worth_parallel(data.len());
        for_each_row(&mut data, spatial, par, |i, row| {
            let ch = i % c;
            let (m, k, b) = (mean[ch], k[ch], bias[ch]);
            for v in row.iter_mut() {
                *v = F::narrow((v.widen() - m) * k + b);
            }
            Ok(())
        })?;
        from_real(data, x.dtype(), shape)
    })
}
