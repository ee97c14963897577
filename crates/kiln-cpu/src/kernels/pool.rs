//! 2-D max and average pooling (NCHW), parallel over the N*C planes.
//!
//! Windows follow PyTorch: padding is -inf for max and zero for average; a NaN anywhere in a
//! max window makes the result NaN; with `count_include_pad` the divisor counts padded
//! positions only up to the end of the right/bottom padding (ceil-mode windows that run past
//! it are clipped).

use super::conv::{dense_data, valid_range};
use kiln_ir::{DType, Element, Error, HostTensor, Pool2dAttrs, PoolKind, Result, infer::window_out};
use rayon::prelude::*;

/// Pools `x`; `shape` is the inferred output shape.
pub fn pool2d(p: &Pool2dAttrs, x: &HostTensor, shape: &[usize]) -> Result<HostTensor> {
    let g = Geom::new(p, x.shape(), shape)?;
    match p.kind {
        PoolKind::Max => kiln_ir::with_dtype!(x.dtype(), T, {
            if T::DTYPE == DType::Bool {
                return Err(Error::DType("max_pool2d: needs a numeric input, got bool".into()));
            }
            run::<T, Max>(&g, x, shape, &[], &[])
        }),
        PoolKind::Avg { count_include_pad } => {
            let (dh, dw) = (g.divisors(0, count_include_pad), g.divisors(1, count_include_pad));
            match x.dtype() {
                DType::F32 => run::<f32, Avg>(&g, x, shape, &dh, &dw),
                DType::F64 => run::<f64, Avg>(&g, x, shape, &dh, &dw),
                DType::F16 => run::<half::f16, Avg>(&g, x, shape, &dh, &dw),
                DType::BF16 => run::<half::bf16, Avg>(&g, x, shape, &dh, &dw),
                d => Err(Error::DType(format!("avg_pool2d: needs a float input, got {d}"))),
            }
        }
    }
}

/// Sizes of one pooling, checked against the inferred output shape.
#[derive(Clone, Copy, Debug)]
struct Geom {
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    a: Pool2dAttrs,
}

impl Geom {
    fn new(a: &Pool2dAttrs, x: &[usize], shape: &[usize]) -> Result<Geom> {
        let bad = |why: &str| Error::Shape(format!("pool2d(x {x:?}) -> {shape:?}: {why}"));
        let (&[n, c, h, w], &[on, oc, oh, ow]) = (x, shape) else {
            return Err(bad("x and the result must be rank 4"));
        };
        if a.stride.contains(&0) || a.dilation.contains(&0) || a.kernel.contains(&0) {
            return Err(bad("kernel, stride and dilation must be >= 1"));
        }
        let p = a.padding;
        let fits = |len, ax: usize, p0, p1, out| {
            window_out(len, a.kernel[ax], a.stride[ax], (p0, p1), a.dilation[ax], a.ceil_mode) == Some(out)
        };
        if (on, oc) != (n, c) || !fits(h, 0, p[0], p[2], oh) || !fits(w, 1, p[1], p[3], ow) {
            return Err(bad("the output size does not match the window"));
        }
        Ok(Geom { h, w, oh, ow, a: *a })
    }

    /// (input length, output length, kernel, stride, dilation, leading pad, trailing pad) of axis `ax`.
    fn axis(&self, ax: usize) -> (usize, usize, usize, usize, usize, usize, usize) {
        let (len, out) = if ax == 0 { (self.h, self.oh) } else { (self.w, self.ow) };
        let a = &self.a;
        (len, out, a.kernel[ax], a.stride[ax], a.dilation[ax], a.padding[ax], a.padding[ax + 2])
    }

    /// Along axis `ax`, for every output: the input position of its first tap, and the
    /// range of taps that land inside the input.
    fn windows(&self, ax: usize) -> Vec<(isize, (usize, usize))> {
        let (len, out, k, s, d, p0, _) = self.axis(ax);
        (0..out)
            .map(|o| {
                let start = (o * s) as isize - p0 as isize;
                (start, valid_range(k, len, d, start))
            })
            .collect()
    }

    /// Along axis `ax`, for every kernel tap: the range of outputs whose tap lands inside the
    /// input (the same walk as a depthwise convolution).
    fn tap_outputs(&self, ax: usize) -> Vec<(usize, usize)> {
        let (len, out, k, s, d, p0, _) = self.axis(ax);
        (0..k).map(|j| valid_range(out, len, s, (j * d) as isize - p0 as isize)).collect()
    }

    /// The average's divisor factor along axis `ax` for every output: the taps inside the
    /// input, or with `include_pad` the taps before the end of the trailing padding.
    fn divisors(&self, ax: usize, include_pad: bool) -> Vec<f64> {
        let (len, _, k, _, d, _, p1) = self.axis(ax);
        self.windows(ax)
            .into_iter()
            .map(|(start, (lo, hi))| {
                let n = if include_pad {
                    let end = (len + p1) as isize;
                    valid_range(k, (end - start).max(0) as usize, d, 0).1
                } else {
                    hi - lo
                };
                n as f64
            })
            .collect()
    }
}

/// How one kind of pooling folds a window's elements into its result.
trait Reducer<T: Element> {
    /// The running value of one window.
    type Acc: Copy + Send;
    /// The value of a window with no element inside the input.
    fn init() -> Self::Acc;
    /// Folds one element in.
    fn add(acc: Self::Acc, v: T) -> Self::Acc;
    /// The result, given the window's divisor.
    fn finish(acc: Self::Acc, divisor: f64) -> T;
}

/// Max pooling: padding is -inf (the type's minimum for integers); NaN wins over anything.
struct Max;

impl<T: Element> Reducer<T> for Max {
    type Acc = T;
    fn init() -> T {
        T::from_f64(f64::NEG_INFINITY)
    }
    #[inline(always)]
    fn add(acc: T, v: T) -> T {
        // `v != v` is the NaN test (always false for integers); once acc is NaN nothing beats
        // it. `|` rather than `||` keeps this a branch-free select: on real data `v > acc`
        // is unpredictable and a branch costs more than the whole comparison.
        #[allow(clippy::eq_op)]
        let take = (v > acc) | (v != v);
        if take { v } else { acc }
    }
    fn finish(acc: T, _: f64) -> T {
        acc
    }
}

/// Average pooling, summed in f64.
struct Avg;

impl<T: Element> Reducer<T> for Avg {
    type Acc = f64;
    fn init() -> f64 {
        0.0
    }
    #[inline(always)]
    fn add(acc: f64, v: T) -> f64 {
        acc + v.to_f64()
    }
    fn finish(acc: f64, divisor: f64) -> T {
        T::from_f64(acc / divisor)
    }
}

/// Pools every plane of `x` with reducer `R`, planes in parallel. Each output row is built
/// tap by tap: for kernel tap `(i, j)` the outputs it reaches form one contiguous run, read
/// from one input row with the column stride, so the inner loop has no bounds logic.
/// `div_h`/`div_w` are the per-row/per-column divisor factors (empty for max).
fn run<T: Element, R: Reducer<T>>(g: &Geom, x: &HostTensor, shape: &[usize], div_h: &[f64], div_w: &[f64]) -> Result<HostTensor> {
    let x = x.contiguous();
    let xd = dense_data::<T>(&x, "pool2d")?;
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    let mut out = vec![T::zero(); shape.iter().product()];
    if out.is_empty() {
        return HostTensor::from_vec(out, shape);
    }
    let rows = g.windows(0);
    let cols = g.tap_outputs(1);
    let [dh, dw] = g.a.dilation;
    let sw = g.a.stride[1];
    let pl = g.a.padding[1] as isize;
    out.par_chunks_mut(ohw).enumerate().for_each_init(
        || vec![R::init(); g.ow],
        |acc, (q, dst)| {
            let plane = &xd[q * hw..][..hw];
            for (oh, dst_row) in dst.chunks_mut(g.ow).enumerate() {
                acc.fill(R::init());
                let (hs, (h_lo, h_hi)) = rows[oh];
                for i in h_lo..h_hi {
                    let src = &plane[(hs + (i * dh) as isize) as usize * g.w..][..g.w];
                    for (j, &(lo, hi)) in cols.iter().enumerate() {
                        if lo == hi {
                            continue;
                        }
                        let first = ((lo * sw + j * dw) as isize - pl) as usize;
                        let run = &mut acc[lo..hi];
                        if sw == 1 {
                            for (a, &v) in run.iter_mut().zip(&src[first..]) {
                                *a = R::add(*a, v);
                            }
                        } else {
                            // chunks(sw) yields every sw-th element without bounds checks
                            for (a, c) in run.iter_mut().zip(src[first..].chunks(sw)) {
                                *a = R::add(*a, c[0]);
                            }
                        }
                    }
                }
                let div_row = div_h.get(oh).copied().unwrap_or(1.0);
                for (ow, (d, &a)) in dst_row.iter_mut().zip(acc.iter()).enumerate() {
                    *d = R::finish(a, div_row * div_w.get(ow).copied().unwrap_or(1.0));
                }
            }
        },
    );
    HostTensor::from_vec(out, shape)
}
