//! ONNX Resize (nearest, N-linear, N-cubic; every coordinate transform; antialias).
//!
//! Each axis that changes gets a plan: for every output index, the input indices it reads
//! (already clamped to the edge) and their weights, or a flag saying it is extrapolated
//! (crop-and-resize outside the input). Nearest is then one gather straight from the input's
//! strided storage, for any dtype. Linear and cubic run one pass per planned axis, in axis
//! order, over f64 buffers (as ONNX's reference computes), and round once at the end.
//! Taps of weight 0 are skipped, so a NaN or inf next to an exactly hit input does not leak in.

use super::norm::real::{for_each_row, worth_parallel};
use kiln_ir::{
    Element, Error, HostTensor, ResizeAttrs, ResizeCoord, ResizeMode, ResizeNearest, Result,
};

/// Resizes `x` as `a` says; `shape` is the inferred output shape.
pub fn resize(a: &ResizeAttrs, x: &HostTensor, shape: &[usize]) -> Result<HostTensor> {
    let ins = x.shape();
    if shape != a.out_shape.as_slice() || ins.len() != shape.len() || a.scales.len() != shape.len()
    {
        return Err(Error::Shape(format!(
            "resize(x {ins:?}) -> {shape:?}: out_shape {:?} and scales {:?} must have one entry per axis",
            a.out_shape, a.scales
        )));
    }
    let plans: Vec<Option<AxisPlan>> = (0..ins.len())
        .map(|ax| AxisPlan::new(a, ax, ins[ax], shape[ax]).transpose())
        .collect::<Result<_>>()?;
    if shape.contains(&0) {
        return Ok(HostTensor::zeros(x.dtype(), shape));
    }
    match a.mode {
        ResizeMode::Nearest => nearest(a, x, shape, &plans),
        ResizeMode::Linear | ResizeMode::Cubic => {
            if !x.dtype().is_float() {
                return Err(Error::DType(format!(
                    "resize: {:?} mode needs a float input, got {}",
                    a.mode,
                    x.dtype()
                )));
            }
            let y = separable(a, x.to_f64_vec(), ins, &plans);
            kiln_ir::with_dtype!(x.dtype(), T, {
                HostTensor::from_vec(y.into_iter().map(T::from_f64).collect::<Vec<T>>(), shape)
            })
        }
    }
}

/// Most (output index, tap) pairs one axis plan may hold.
const MAX_PLAN_TAPS: usize = 1 << 28;

/// How one resized axis reads its input: `taps` input indices and weights per output index.
struct AxisPlan {
    taps: usize,
    /// `[out, taps]` input indices in `0..in`.
    idx: Vec<usize>,
    /// `[out, taps]` weights.
    w: Vec<f64>,
    /// Per output index: the value is the extrapolation value.
    extrap: Vec<bool>,
}

impl AxisPlan {
    /// The plan of axis `ax` (`len` → `out`), or `None` when the axis is left as it is.
    fn new(a: &ResizeAttrs, ax: usize, len: usize, out: usize) -> Option<Result<AxisPlan>> {
        let scale = a.scales[ax];
        let roi = match &a.coord {
            ResizeCoord::TfCropAndResize { roi, .. } => roi.get(ax).copied(),
            _ => None,
        };
        // ONNX's reference skips such axes (math.isclose), which matters for crop-and-resize.
        let unit_scale = (scale - 1.0).abs() <= 1e-9 * scale.abs().max(1.0);
        let unit_roi =
            roi.is_none_or(|(s, e)| s == 0.0 && (e - 1.0).abs() <= 1e-9 * e.abs().max(1.0));
        if (unit_scale && out == len && unit_roi) || len == 0 || out == 0 {
            return None;
        }
        let taps = match a.mode {
            ResizeMode::Nearest => 1,
            ResizeMode::Linear | ResizeMode::Cubic if a.antialias => {
                kernel_taps(a.mode, scale.min(1.0))
            }
            ResizeMode::Linear => 2,
            ResizeMode::Cubic => 4,
        };
        // A tiny antialias scale stretches the kernel without bound; refuse plans that would
        // not fit in memory rather than abort.
        if taps == 0 || out.checked_mul(taps).is_none_or(|n| n > MAX_PLAN_TAPS) {
            return Some(Err(Error::Unsupported(format!(
                "resize: antialias at scale {scale} on axis {ax} ({len} -> {out}) needs {taps} taps per output; \
                 use a larger scale or antialias=false"
            ))));
        }
        let mut plan = AxisPlan {
            taps,
            idx: Vec::with_capacity(out * taps),
            w: Vec::with_capacity(out * taps),
            extrap: Vec::with_capacity(out),
        };
        let last = (len - 1) as f64;
        for y in 0..out {
            let xo = source_coord(&a.coord, y as f64, scale, len, out, roi);
            plan.extrap.push(roi.is_some() && (xo < 0.0 || xo > last));
            // x0 = ceil(x) - 1 keeps r in (0, 1]: an integer x reads its left neighbour with
            // weight 0, as ONNX's reference does.
            let x0 = xo.ceil() - 1.0;
            let r = xo - x0;
            let first = x0 + 1.0 - (taps / 2) as f64;
            if a.mode == ResizeMode::Nearest {
                let up = match a.nearest {
                    _ if r == 1.0 => true,
                    ResizeNearest::RoundPreferFloor => r > 0.5,
                    ResizeNearest::RoundPreferCeil => r >= 0.5,
                    ResizeNearest::Floor => false,
                    ResizeNearest::Ceil => true,
                };
                plan.idx
                    .push(clamp_index(if up { x0 + 1.0 } else { x0 }, len));
                plan.w.push(1.0);
                continue;
            }
            let mut w = match a.mode {
                _ if a.antialias => antialias_weights(a.mode, a.cubic_a, r, scale.min(1.0), taps),
                ResizeMode::Cubic => cubic_weights(r, a.cubic_a).to_vec(),
                _ => vec![1.0 - r, r],
            };
            if a.exclude_outside {
                for (k, wk) in w.iter_mut().enumerate() {
                    let i = first + k as f64;
                    if i < 0.0 || i > last {
                        *wk = 0.0;
                    }
                }
                let sum: f64 = w.iter().sum();
                let sum = if sum == 0.0 { 1.0 } else { sum };
                w.iter_mut().for_each(|v| *v /= sum);
            }
            plan.idx
                .extend((0..taps).map(|k| clamp_index(first + k as f64, len)));
            plan.w.extend(w);
        }
        Some(Ok(plan))
    }
}

/// The input coordinate of output index `y` along one axis (see [`ResizeCoord`]).
fn source_coord(
    coord: &ResizeCoord,
    y: f64,
    scale: f64,
    len: usize,
    out: usize,
    roi: Option<(f64, f64)>,
) -> f64 {
    let (lenf, outf) = (len as f64, out as f64);
    match coord {
        ResizeCoord::HalfPixel => (y + 0.5) / scale - 0.5,
        ResizeCoord::HalfPixelSymmetric => {
            let adjustment = outf / (scale * lenf);
            let offset = lenf / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / scale - 0.5
        }
        ResizeCoord::PytorchHalfPixel if out > 1 => (y + 0.5) / scale - 0.5,
        ResizeCoord::PytorchHalfPixel => 0.0,
        ResizeCoord::AlignCorners if out > 1 => y * (lenf - 1.0) / (outf - 1.0),
        ResizeCoord::AlignCorners => 0.0,
        ResizeCoord::Asymmetric => y / scale,
        ResizeCoord::TfCropAndResize { .. } => {
            let (s, e) = roi.unwrap_or((0.0, 1.0));
            let x = if out > 1 {
                y * (e - s) * (lenf - 1.0) / (outf - 1.0)
            } else {
                (e - s) * (lenf - 1.0) / 2.0
            };
            x + s * (lenf - 1.0)
        }
    }
}

/// `i` clamped into `0..len` (edge padding); `len` is at least 1.
fn clamp_index(i: f64, len: usize) -> usize {
    if i <= 0.0 {
        0
    } else {
        (i as usize).min(len - 1)
    }
}

/// The four Keys cubic weights of taps `x0-1 ..= x0+2` for `x = x0 + r` (ONNX's formulas).
pub(crate) fn cubic_weights(r: f64, a: f64) -> [f64; 4] {
    let (p, q) = (r + 1.0, 2.0 - r);
    [
        ((a * p - 5.0 * a) * p + 8.0 * a) * p - 4.0 * a,
        ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
        ((a + 2.0) * (1.0 - r) - (a + 3.0)) * (1.0 - r) * (1.0 - r) + 1.0,
        ((a * q - 5.0 * a) * q + 8.0 * a) * q - 4.0 * a,
    ]
}

/// Taps of the stretched (antialias) kernel at `scale <= 1`, from ONNX's reference:
/// `2 - 2*(floor(-support/scale) + 1)` with support 1 (linear) or 2 (cubic).
fn kernel_taps(mode: ResizeMode, scale: f64) -> usize {
    let support = if mode == ResizeMode::Cubic { 2.0 } else { 1.0 };
    let start = (-support / scale).floor() + 1.0;
    (2.0 - 2.0 * start) as usize
}

/// Normalized weights of the stretched kernel for taps `x0 + 1 - taps/2 + k`.
fn antialias_weights(mode: ResizeMode, a: f64, r: f64, scale: f64, taps: usize) -> Vec<f64> {
    let start = 1.0 - (taps / 2) as f64;
    let kernel = |t: f64| {
        let t = t.abs();
        if mode == ResizeMode::Linear {
            (1.0 - t).clamp(0.0, 1.0)
        } else if t <= 1.0 {
            (a + 2.0) * t * t * t - (a + 3.0) * t * t + 1.0
        } else if t < 2.0 {
            a * t * t * t - 5.0 * a * t * t + 8.0 * a * t - 4.0 * a
        } else {
            0.0
        }
    };
    let w: Vec<f64> = (0..taps)
        .map(|k| kernel((start + k as f64 - r) * scale))
        .collect();
    let sum: f64 = w.iter().sum();
    w.into_iter().map(|v| v / sum).collect()
}

/// The value crop-and-resize writes outside the input (0 for the other transforms).
fn extrapolation(a: &ResizeAttrs) -> f64 {
    match &a.coord {
        ResizeCoord::TfCropAndResize { extrapolation, .. } => *extrapolation,
        _ => 0.0,
    }
}

/// Nearest: every output element copies one input element (or is the extrapolation value).
fn nearest(
    a: &ResizeAttrs,
    x: &HostTensor,
    shape: &[usize],
    plans: &[Option<AxisPlan>],
) -> Result<HostTensor> {
    let l = &x.layout;
    let rank = shape.len();
    // Per axis and output index: the storage offset it adds, or None when extrapolated.
    let offs: Vec<Vec<Option<isize>>> = (0..rank)
        .map(|ax| match &plans[ax] {
            Some(p) => p
                .idx
                .iter()
                .zip(&p.extrap)
                .map(|(&i, &e)| (!e).then_some(i as isize * l.strides[ax]))
                .collect(),
            None => (0..shape[ax])
                .map(|i| Some(i as isize * l.strides[ax]))
                .collect(),
        })
        .collect();
    let numel: usize = shape.iter().product();
    let row = shape.last().copied().unwrap_or(1).max(1);
    let storage = kiln_ir::with_dtype!(x.dtype(), T, {
        let src = T::slice(&x.storage)
            .ok_or_else(|| Error::DType(format!("resize: storage is not {}", x.dtype())))?;
        let fill = T::from_f64(extrapolation(a));
        let mut out: Vec<T> = vec![T::zero(); numel];
        for_each_row(&mut out, row, worth_parallel(numel), |r, dst| {
            // Offset of the row's outer index; None when some outer axis is extrapolated.
            let mut base = Some(l.offset as isize);
            let mut rest = r;
            for ax in (0..rank.saturating_sub(1)).rev() {
                let i = rest % shape[ax];
                rest /= shape[ax];
                base = base.zip(offs[ax][i]).map(|(b, o)| b + o);
            }
            match (base, offs.last()) {
                (Some(b), Some(inner)) => {
                    for (d, o) in dst.iter_mut().zip(inner) {
                        *d = o.map_or(fill, |o| src[(b + o) as usize]);
                    }
                }
                // Rank 0: the one element.
                (Some(b), None) => dst[0] = src[b as usize],
                (None, _) => dst.fill(fill),
            }
            Ok(())
        })?;
        T::into_storage(out)
    });
    HostTensor::new(storage, shape)
}

/// Linear/cubic: one weighted pass per planned axis over a dense f64 buffer.
fn separable(
    a: &ResizeAttrs,
    mut data: Vec<f64>,
    ins: &[usize],
    plans: &[Option<AxisPlan>],
) -> Vec<f64> {
    let mut dims = ins.to_vec();
    let fill = extrapolation(a);
    for (ax, plan) in plans.iter().enumerate() {
        let Some(p) = plan else { continue };
        let out_len = p.extrap.len();
        let (len, inner) = (dims[ax], dims[ax + 1..].iter().product::<usize>());
        let outer: usize = dims[..ax].iter().product();
        let mut next = vec![0.0; outer * out_len * inner];
        let src = &data;
        // The result cannot fail; for_each_row's error path is unused here.
        let _ = for_each_row(
            &mut next,
            out_len * inner,
            worth_parallel(outer * out_len * inner * p.taps),
            |o, block| {
                let plane = &src[o * len * inner..][..len * inner];
                for (y, dst) in block.chunks_mut(inner).enumerate() {
                    if p.extrap[y] {
                        dst.fill(fill);
                        continue;
                    }
                    dst.fill(0.0);
                    let taps = y * p.taps..(y + 1) * p.taps;
                    // Zero-weight taps are skipped so a NaN/inf there does not leak in (0 * inf).
                    for (&i, &w) in p.idx[taps.clone()]
                        .iter()
                        .zip(&p.w[taps])
                        .filter(|(_, w)| **w != 0.0)
                    {
                        for (d, &s) in dst.iter_mut().zip(&plane[i * inner..][..inner]) {
                            *d += w * s;
                        }
                    }
                }
                Ok(())
            },
        );
        dims[ax] = out_len;
        data = next;
    }
    data
}
