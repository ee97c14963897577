//! Activations that are not plain unary ops (GELU), and the accurate [`erf`]/[`erfc`] they use
//! (shared with the elementwise kernels).

mod erf;

pub use erf::{erf, erfc};

use super::norm::real::{
    Real, ensure_float, exp_f32_sum, for_each_row, from_real, to_real, wide, with_real, worth_parallel,
};
use kiln_ir::{HostTensor, Result};
use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI};

/// Elements per parallel task: large enough to amortise scheduling, small enough to balance.
const CHUNK: usize = 1 << 14;

/// GELU, exact (erf) or tanh-approximated. f64 goes through the f64 [`gelu_erf`] /
/// [`gelu_tanh`]; f32 (and f16/bf16, computed in f32) through branch-free f32 forms that
/// vectorise, within about 1e-6 relative of the f64 result.
pub fn gelu(x: &HostTensor, tanh_approx: bool) -> Result<HostTensor> {
    ensure_float(x, "gelu")?;
    with_real!(x.dtype(), F, {
        let mut data = to_real::<F>(x)?;
        // Each element costs tens of flops, so even small tensors are worth splitting.
        let par = worth_parallel(data.len() * 16);
        for_each_row(&mut data, CHUNK, par, |_, chunk| {
            F::gelu_in_place(chunk, tanh_approx);
            Ok(())
        })?;
        from_real(data, x.dtype(), x.shape())
    })
}

/// Exact GELU `x Φ(x)` in f64, with `Φ(x) = erfc(-x/√2)/2` so that the negative tail keeps its
/// relative accuracy (`1 + erf` would cancel). `-inf` gives NaN, as `x * Φ(x)` does in PyTorch.
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * erfc(-x * FRAC_1_SQRT_2)
}

/// The tanh approximation `x/2 (1 + tanh(√(2/π) (x + 0.044715 x³)))` (PyTorch
/// `approximate="tanh"`) in f64, evaluated as the identical `x / (1 + e^(-2u))` so that the
/// negative tail does not cancel to 0.
pub fn gelu_tanh(x: f64) -> f64 {
    let u = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
    x / (1.0 + (-2.0 * u).exp())
}

/// √(2/π) = (2/√π) / √2.
const SQRT_2_OVER_PI: f64 = FRAC_2_SQRT_PI * FRAC_1_SQRT_2;

/// GELU over a slice of one compute type.
trait Gelu: Real {
    fn gelu_in_place(xs: &mut [Self], tanh_approx: bool);
}

impl Gelu for f64 {
    fn gelu_in_place(xs: &mut [f64], tanh_approx: bool) {
        let f = if tanh_approx { gelu_tanh } else { gelu_erf };
        xs.iter_mut().for_each(|x| *x = f(*x));
    }
}

impl Gelu for f32 {
    fn gelu_in_place(xs: &mut [f32], tanh_approx: bool) {
        wide(#[inline(always)] || {
            // Plain loops: `for_each` would be a call that is not compiled for AVX2.
            if tanh_approx {
                for x in xs.iter_mut() {
                    *x = gelu_tanh_f32(*x);
                }
            } else {
                for x in xs.iter_mut() {
                    *x = gelu_erf_f32(*x);
                }
            }
        })
    }
}

/// Exact GELU in f32, branch-free: `erfc(z) = t e^(-z² + P(t))` with `t = 1/(1 + z/2)` (the
/// Chebyshev fit of Numerical Recipes' `erfcc`, relative error below 1.2e-7 for every `z >= 0`),
/// so both tails keep their relative accuracy. `z² = x²/2` is formed exactly (x split into
/// 12-bit halves) because `e^(-z²)` turns its rounding into relative error.
#[inline(always)]
#[allow(clippy::excessive_precision)] // the fit's coefficients, as published
fn gelu_erf_f32(x: f32) -> f32 {
    let ax = x.abs();
    let z = ax * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * z);
    let p = 0.170_872_77f32;
    let p = p * t - 0.822_152_23;
    let p = p * t + 1.488_515_87;
    let p = p * t - 1.135_203_98;
    let p = p * t + 0.278_868_07;
    let p = p * t - 0.186_288_06;
    let p = p * t + 0.096_784_18;
    let p = p * t + 0.374_091_96;
    let p = p * t + 1.000_023_68;
    let p = p * t - 1.265_512_23;
    let hi = f32::from_bits(ax.to_bits() & 0xffff_f000);
    let e = exp_f32_sum(-0.5 * (hi * hi), p - 0.5 * ((ax - hi) * (ax + hi)));
    // At |x| = inf the split gives inf - inf; erfc(inf) is 0.
    let half_erfc = if ax < f32::INFINITY { 0.5 * t * e } else { 0.0 };
    // Φ(x) = erfc(-x/√2)/2: erfc(z)/2 for x < 0, 1 - erfc(z)/2 otherwise.
    let phi = if x < 0.0 { half_erfc } else { 1.0 - half_erfc };
    x * phi
}

/// Tanh GELU in f32, as `x σ(2u) = x / (1 + e^(-2u))` (the same function; no cancellation in
/// either tail). `2u` is formed in f64 and handed to the exponential as f32 high and low parts,
/// since its rounding (|2u| reaches 88) would otherwise become relative error.
#[inline(always)]
fn gelu_tanh_f32(x: f32) -> f32 {
    let xd = x as f64;
    let arg = -2.0 * SQRT_2_OVER_PI * (xd + 0.044715 * xd * xd * xd);
    let hi = arg as f32;
    // Where 2u overflows f32 (|x| above ~4e12, or inf) the low part would be ±inf and the
    // sum inf - inf; the high part alone decides there.
    let lo = if hi.is_finite() { (arg - hi as f64) as f32 } else { 0.0 };
    x / (1.0 + exp_f32_sum(hi, lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_forms_match_the_f64_ones() {
        for i in 0..=40_000 {
            let x = -13.0 + 26.0 * i as f64 / 40_000.0;
            let xf = x as f32;
            let pairs = [("erf", gelu_erf_f32(xf), gelu_erf(xf as f64)), ("tanh", gelu_tanh_f32(xf), gelu_tanh(xf as f64))];
            for (name, got, want) in pairs {
                let got = got as f64;
                assert!((got - want).abs() <= 1e-6 * want.abs() + 1e-37, "{name} x = {x}: {got} vs {want}");
            }
        }
        for x in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.0, -0.0, 3.7e32, -3.7e32, 9.2e18, 1e13, -1e13] {
            let (e, t) = (gelu_erf_f32(x), gelu_tanh_f32(x));
            let want = gelu_erf(x as f64) as f32;
            assert!(e == want || (e.is_nan() && want.is_nan()), "erf gelu({x}) = {e}, want {want}");
            assert!(t == want || (t.is_nan() && want.is_nan()), "tanh gelu({x}) = {t}, want {want}");
        }
    }

    #[test]
    fn erfcc_fit_is_accurate_in_f64() {
        // The fit itself, evaluated in f64, against the fdlibm erfc.
        for i in 0..=10_000 {
            let z = 9.0 * i as f64 / 10_000.0;
            let t = 1.0 / (1.0 + 0.5 * z);
            let c = [-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277];
            let p = c.iter().rev().fold(0.0, |acc, &k| acc * t + k);
            let approx = t * (p - z * z).exp();
            assert!((approx / erfc(z) - 1.0).abs() < 1.3e-7, "z = {z}");
        }
    }
}
