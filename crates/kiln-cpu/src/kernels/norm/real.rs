//! What the float kernels (softmax, norms, GELU, attention) share: the [`Real`] compute types
//! (f16 and bf16 are computed in f32, f64 in f64, so each kernel is written once), conversion of
//! a tensor of any layout to a dense compute buffer and back, and row-parallel iteration.

use kiln_ir::{DType, Element, Error, HostTensor, Result};
use rayon::prelude::*;
use std::ops::{Add, AddAssign, Div, Mul, Sub};

/// Below this much work (elements touched, roughly) a kernel stays on the calling thread:
/// handing rows to rayon costs more than it saves.
pub(crate) const PAR_MIN_WORK: usize = 1 << 15;

/// A float type kernels compute in (f32 or f64).
pub(crate) trait Real:
    Element + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> + AddAssign
{
    /// Negative infinity (the identity of max).
    const NEG_INFINITY: Self;
    /// Replaces every `x` of `xs` by `e^(x - shift)` and returns their sum in f64.
    fn exp_shifted(xs: &mut [Self], shift: Self) -> f64;
    /// `Σ e^(x - shift)` over `xs`, in f64.
    fn exp_shifted_sum(xs: &[Self], shift: Self) -> f64;
    /// Widens to f64. (`Element::to_f64` lives in kiln-ir and is not inlined into hot loops here.)
    fn widen(self) -> f64;
    /// Rounds from f64.
    fn narrow(x: f64) -> Self;
}

impl Real for f32 {
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
    fn exp_shifted(xs: &mut [Self], shift: Self) -> f64 {
        // Plain map loop first, so that it vectorises; then the sum.
        wide(#[inline(always)] || {
            for x in xs.iter_mut() {
                *x = exp_f32(*x - shift);
            }
            sum_f64(xs)
        })
    }
    fn exp_shifted_sum(xs: &[Self], shift: Self) -> f64 {
        wide(#[inline(always)] || {
            let mut buf = [0.0f32; 256];
            let mut total = 0.0;
            for c in xs.chunks(256) {
                let b = &mut buf[..c.len()];
                for (o, &x) in b.iter_mut().zip(c) {
                    *o = exp_f32(x - shift);
                }
                total += sum_f64(b);
            }
            total
        })
    }
    #[inline(always)]
    fn widen(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn narrow(x: f64) -> Self {
        x as f32
    }
}

impl Real for f64 {
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
    fn exp_shifted(xs: &mut [Self], shift: Self) -> f64 {
        let mut sum = 0.0;
        for x in xs {
            *x = f64::exp(*x - shift);
            sum += *x;
        }
        sum
    }
    fn exp_shifted_sum(xs: &[Self], shift: Self) -> f64 {
        xs.iter().map(|&x| f64::exp(x - shift)).sum()
    }
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
    #[inline(always)]
    fn narrow(x: f64) -> Self {
        x
    }
}

/// Runs `f` compiled for AVX2 when the CPU has it, so that the loops inlined into it vectorise
/// 8 f32 wide instead of the baseline SSE2's 4. `f` should be small and call only inlined code.
#[inline(always)]
pub(crate) fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `avx2` needs only that the CPU supports AVX2, checked just above.
        return unsafe { avx2(f) };
    }
    f()
}

/// `f()` in a function compiled with AVX2 enabled (see [`wide`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `Σ xs` in f64 with eight partial sums (vectorises; long rows keep their precision).
#[inline(always)]
fn sum_f64(xs: &[f32]) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&x| x as f64).sum();
    for c in chunks {
        for l in 0..8 {
            acc[l] += c[l] as f64;
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// `e^x` in f32 without branches, so that loops over it vectorise (std's `expf` is a call per
/// element). Cephes' `expf`: `x = n ln2 + r` with `|r| <= ln2/2`, a degree-6 polynomial for
/// `e^r`, and `2^n` built in the exponent bits. Relative error below 3e-7 (2.5 ulp) where the
/// result is a normal float; 0 below -87.34 (where it would be subnormal), +inf above
/// ln(f32::MAX); NaN stays NaN.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    exp_f32_sum(x, 0.0)
}

/// `e^(a + b)` as [`exp_f32`], for an exactly known large part `a` and a small correction `b`:
/// the reduction subtracts `n ln2` from `a` exactly before adding `b`, so the rounding of
/// `a + b` (up to 4e-6 absolute near |x| = 80) does not reach the result.
#[inline(always)]
#[allow(clippy::excessive_precision)] // Cephes' coefficients, as published
pub(crate) fn exp_f32_sum(a: f32, b: f32) -> f32 {
    const HI: f32 = 88.722_83;
    const LO: f32 = -87.336_55;
    let x = a + b;
    // `clamp` keeps NaN, which then propagates to the result.
    let xc = x.clamp(LO, HI);
    // Round to nearest through the 1.5 * 2^23 trick (no SSE4.1 `round` needed); the integer n
    // is then read from the low mantissa bits, since a float-to-int cast does not vectorise.
    // n <= 127 so that 2^n stays finite.
    const MAGIC: f32 = 12_582_912.0;
    let t = xc * std::f32::consts::LOG2_E + MAGIC;
    let n = (t - MAGIC).min(127.0);
    let ni = (t.to_bits() as i32 - MAGIC.to_bits() as i32).min(127);
    // r = x - n ln2, with ln2 split in two so that `a - n * C1` is exact.
    let r = (a - n * 0.693_359_4) + b + n * 2.121_944_4e-4;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 5.000_000_1e-1;
    let y = p * r * r + r + 1.0;
    let scaled = y * f32::from_bits(((ni + 127) as u32) << 23);
    if x < LO {
        0.0
    } else if x > HI {
        f32::INFINITY
    } else {
        scaled
    }
}

/// Runs `$body` with `$F` bound to the compute type of the float dtype `$dtype`: f64 for f64,
/// f32 for f32, f16 and bf16 (half-precision arithmetic would lose too much in reductions).
macro_rules! with_real {
    ($dtype:expr, $F:ident, $body:expr) => {
        if $dtype == kiln_ir::DType::F64 {
            type $F = f64;
            $body
        } else {
            type $F = f32;
            $body
        }
    };
}
pub(crate) use with_real;

/// Errors unless `t` holds floats; `op` names the kernel in the message.
pub(crate) fn ensure_float(t: &HostTensor, op: &str) -> Result<()> {
    if !t.dtype().is_float() {
        return Err(Error::DType(format!(
            "{op}: needs a float input, got {} {:?}",
            t.dtype(),
            t.shape()
        )));
    }
    Ok(())
}

/// The elements of `t` (any dtype, any layout) in row-major order, converted to `F`.
pub(crate) fn to_real<F: Real>(t: &HostTensor) -> Result<Vec<F>> {
    if t.dtype() == F::DTYPE {
        return t.to_vec::<F>();
    }
    kiln_ir::with_dtype!(t.dtype(), T, {
        let s = T::slice(&t.storage).ok_or_else(|| {
            Error::DType(format!("storage of a {} tensor does not hold {}", t.dtype(), T::DTYPE))
        })?;
        let mut out = Vec::with_capacity(t.numel());
        t.layout.for_each_offset(|o| out.push(F::from_f64(s[o].to_f64())));
        Ok(out)
    })
}

/// A dense tensor of `dtype` and `shape` from compute-type values (rounded once to `dtype`).
pub(crate) fn from_real<F: Real>(v: Vec<F>, dtype: DType, shape: &[usize]) -> Result<HostTensor> {
    if dtype == F::DTYPE {
        return HostTensor::new(F::into_storage(v), shape);
    }
    let storage = kiln_ir::with_dtype!(dtype, T, {
        T::into_storage(v.iter().map(|x| T::from_f64(x.to_f64())).collect())
    });
    HostTensor::new(storage, shape)
}

/// True when `work` (about how many elements a kernel touches) is worth spreading over threads.
pub(crate) fn worth_parallel(work: usize) -> bool {
    work >= PAR_MIN_WORK
}

/// Calls `f(i, row)` for every consecutive `row_len`-element row of `data` (the last one may be
/// shorter), on rayon's pool when `parallel`, stopping at the first error. Does nothing when
/// `row_len` is 0.
pub(crate) fn for_each_row<T: Send>(
    data: &mut [T],
    row_len: usize,
    parallel: bool,
    f: impl Fn(usize, &mut [T]) -> Result<()> + Sync + Send,
) -> Result<()> {
    if row_len == 0 || data.is_empty() {
        return Ok(());
    }
    if parallel {
        // Enough rows per task that each task does at least a few thousand elements.
        let min_rows = (4096 / row_len).max(1);
        data.par_chunks_mut(row_len).enumerate().with_min_len(min_rows).try_for_each(|(i, r)| f(i, r))
    } else {
        data.chunks_mut(row_len).enumerate().try_for_each(|(i, r)| f(i, r))
    }
}

#[cfg(test)]
mod tests {
    use super::exp_f32;

    #[test]
    fn exp_f32_is_accurate_over_the_normal_range() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            let x = -87.3 + (88.7 + 87.3) * i as f64 / 200_000.0;
            let xf = x as f32;
            let want = (xf as f64).exp();
            let got = exp_f32(xf) as f64;
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
    }

    #[test]
    fn exp_f32_special_values() {
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-100.0), 0.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
        assert!(exp_f32(88.7).is_finite());
    }
}
