//! ONNX GridSample in 2-D (PyTorch `grid_sample`): bilinear, nearest and bicubic sampling of
//! NCHW planes at normalized grid positions, with zeros, border or reflection padding.
//!
//! The taps (input indices and weights per axis) depend only on the image and the grid
//! position, so they are worked out once per image and then applied to every channel, the
//! channels in parallel. Sums run in f64; a value is rounded once to the input dtype.
//! A NaN grid coordinate gives NaN; an infinite one reads zeros (zeros padding), the edge
//! (border) or NaN (reflection).

use super::norm::real::{for_each_row, worth_parallel};
use super::resize::cubic_weights;
use kiln_ir::{
    Element, Error, GridSampleAttrs, GridSampleMode, GridSamplePadding, HostTensor, Result,
};

/// Samples `x` `[N, C, H, W]` at `grid` `[N, Hout, Wout, 2]`; `shape` is the inferred output shape.
pub fn grid_sample(
    a: &GridSampleAttrs,
    x: &HostTensor,
    grid: &HostTensor,
    shape: &[usize],
) -> Result<HostTensor> {
    let (&[n, c, h, w], &[gn, gh, gw, two]) = (x.shape(), grid.shape()) else {
        return Err(Error::Shape(format!(
            "grid_sample(x {:?}, grid {:?}): needs x [N, C, H, W] and grid [N, Hout, Wout, 2]",
            x.shape(),
            grid.shape()
        )));
    };
    if gn != n || two != 2 || shape != [n, c, gh, gw] {
        return Err(Error::Shape(format!(
            "grid_sample(x {:?}, grid {:?}) -> {shape:?}: grid must be [N, Hout, Wout, 2] with x's N",
            x.shape(),
            grid.shape()
        )));
    }
    if !x.dtype().is_float() || !grid.dtype().is_float() {
        return Err(Error::DType(format!(
            "grid_sample: needs float x and grid, got {} and {}",
            x.dtype(),
            grid.dtype()
        )));
    }
    let numel = n * c * gh * gw;
    if numel == 0 {
        return Ok(HostTensor::zeros(x.dtype(), shape));
    }
    let g = grid.to_f64_vec();
    let x = x.contiguous();
    let (hw, pos) = (h * w, gh * gw);
    let storage = kiln_ir::with_dtype!(x.dtype(), T, {
        let xd = super::conv::dense_data::<T>(&x, "grid_sample")?;
        let mut out: Vec<T> = vec![T::zero(); numel];
        for (img, dst) in out.chunks_mut(c * pos).enumerate() {
            let taps: Vec<(Taps, Taps)> = (0..pos)
                .map(|p| {
                    let (gx, gy) = (g[(img * pos + p) * 2], g[(img * pos + p) * 2 + 1]);
                    (Taps::new(a, gy, h), Taps::new(a, gx, w))
                })
                .collect();
            for_each_row(dst, pos, worth_parallel(c * pos * 4), |ch, plane_out| {
                let plane = &xd[(img * c + ch) * hw..][..hw];
                for (o, (ty, tx)) in plane_out.iter_mut().zip(&taps) {
                    let mut acc = 0.0;
                    for k in 0..ty.n {
                        let row = ty.idx[k].map(|i| &plane[i * w..][..w]);
                        let mut inner = 0.0;
                        for m in 0..tx.n {
                            let v = match (row, tx.idx[m]) {
                                (Some(r), Some(j)) => r[j].to_f64(),
                                _ => 0.0,
                            };
                            inner += tx.w[m] * v;
                        }
                        acc += ty.w[k] * inner;
                    }
                    *o = T::from_f64(acc);
                }
                Ok(())
            })?;
        }
        T::into_storage(out)
    });
    HostTensor::new(storage, shape)
}

/// The taps of one axis for one grid coordinate: up to four input indices (`None` reads 0)
/// and their weights.
#[derive(Clone, Copy, Debug)]
struct Taps {
    n: usize,
    idx: [Option<usize>; 4],
    w: [f64; 4],
}

impl Taps {
    /// Taps for normalized coordinate `gv` along an axis of `len` pixels.
    fn new(a: &GridSampleAttrs, gv: f64, len: usize) -> Taps {
        let lenf = len as f64;
        let (lo, hi) = if a.align_corners {
            (0.0, lenf - 1.0)
        } else {
            (-0.5, lenf - 0.5)
        };
        let mut x = if a.align_corners {
            (gv + 1.0) / 2.0 * (lenf - 1.0)
        } else {
            ((gv + 1.0) * lenf - 1.0) / 2.0
        };
        if a.mode == GridSampleMode::Nearest {
            // PyTorch (and ONNX) round half to even here.
            x = x.round_ties_even();
        }
        if x < lo || x > hi {
            x = match a.padding {
                GridSamplePadding::Zeros => x,
                GridSamplePadding::Border => x.clamp(0.0, lenf - 1.0),
                GridSamplePadding::Reflection => reflect(x, lo, hi),
            };
        }
        let mut t = Taps {
            n: 0,
            idx: [None; 4],
            w: [0.0; 4],
        };
        if x.is_nan() || (x.is_infinite() && a.padding == GridSamplePadding::Reflection) {
            t.n = 1;
            t.w[0] = f64::NAN;
            return t;
        }
        if x.is_infinite() {
            // Zeros padding: nothing is read (border clamped it already).
            return t;
        }
        let (first, weights): (f64, &[f64]) = match a.mode {
            GridSampleMode::Nearest => (x.trunc(), &[1.0]),
            GridSampleMode::Bilinear => {
                let x0 = x.floor();
                (x0, &[1.0 - (x - x0), x - x0])
            }
            GridSampleMode::Bicubic => {
                let x0 = x.floor();
                (x0 - 1.0, &cubic_weights(x - x0, -0.75))
            }
        };
        t.n = weights.len();
        for (k, &wk) in weights.iter().enumerate() {
            t.idx[k] = pixel(a.padding, first + k as f64, len, lo, hi);
            t.w[k] = wk;
        }
        t
    }
}

/// The index tap `i` (an integer value) reads under `padding`, or `None` for a zero.
fn pixel(padding: GridSamplePadding, i: f64, len: usize, lo: f64, hi: f64) -> Option<usize> {
    let last = (len as f64 - 1.0).max(0.0);
    match padding {
        GridSamplePadding::Zeros => (i >= 0.0 && i < len as f64).then_some(i as usize),
        _ if len == 0 => None,
        GridSamplePadding::Border => Some(i.clamp(0.0, last) as usize),
        // Truncation toward zero, as ONNX's reference (`int(...)`); the clamp only guards rounding.
        GridSamplePadding::Reflection => Some(reflect(i, lo, hi).trunc().clamp(0.0, last) as usize),
    }
}

/// Mirrors `x` at the bounds `lo`/`hi` until it lies between them (ONNX's `_gs_reflect`).
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let fold = |dx: f64, near: f64, far: f64| {
        let n = (dx / range).trunc();
        let r = dx - n * range;
        if n % 2.0 == 0.0 {
            near + r.copysign(far - near)
        } else {
            far - r.copysign(far - near)
        }
    };
    if x < lo {
        fold(lo - x, lo, hi)
    } else if x > hi {
        fold(x - hi, hi, lo)
    } else {
        x
    }
}
