//! Arithmetic that every stored element type supports, for the kernels that combine elements
//! of any dtype (cumulative sums and products, scatter reductions, top-k ordering).
//!
//! Floats widen to f64 for sums and products, so f16/bf16/f32 results round once per
//! operation; integers wrap on overflow in their own width. Bool has an implementation only so
//! that generic code compiles for every dtype (`infer` rejects bool sums and products).

use kiln_ir::half::{bf16, f16};
use std::cmp::Ordering;

/// Sums, products, NaN-aware extremes and a total order for one stored element type.
pub(crate) trait Accum: Copy + PartialOrd + Send + Sync + 'static {
    /// The type sums and products are computed in (f64 for floats, the type itself otherwise).
    type Acc: Copy + Send + Sync;
    /// The additive identity in the accumulator type.
    const ACC_ZERO: Self::Acc;
    /// The multiplicative identity in the accumulator type.
    const ACC_ONE: Self::Acc;
    /// Widens to the accumulator type.
    fn widen(self) -> Self::Acc;
    /// Rounds (floats) or keeps (integers) an accumulator as the stored type.
    fn narrow(a: Self::Acc) -> Self;
    /// `a + b` (wrapping for integers).
    fn add(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// `a * b` (wrapping for integers).
    fn mul(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// True for a float NaN (never for integers and bool).
    fn is_nan(self) -> bool;

    /// `max(a, b)`; NaN wins (as `BinaryOp::Max`).
    fn max_nan(a: Self, b: Self) -> Self {
        if a.is_nan() || a > b { a } else { b }
    }

    /// `min(a, b)`; NaN wins (as `BinaryOp::Min`).
    fn min_nan(a: Self, b: Self) -> Self {
        if a.is_nan() || a < b { a } else { b }
    }

    /// A total order in which NaN is larger than every number and equal to every NaN
    /// (`-0.0` and `0.0` are equal).
    fn total_cmp_nan(a: Self, b: Self) -> Ordering {
        match (a.is_nan(), b.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
        }
    }
}

macro_rules! accum_float {
    ($t:ty, $widen:expr, $narrow:expr) => {
        impl Accum for $t {
            type Acc = f64;
            const ACC_ZERO: f64 = 0.0;
            const ACC_ONE: f64 = 1.0;
            #[inline(always)]
            fn widen(self) -> f64 {
                let f: fn($t) -> f64 = $widen;
                f(self)
            }
            #[inline(always)]
            fn narrow(a: f64) -> $t {
                let f: fn(f64) -> $t = $narrow;
                f(a)
            }
            #[inline(always)]
            fn add(a: f64, b: f64) -> f64 {
                a + b
            }
            #[inline(always)]
            fn mul(a: f64, b: f64) -> f64 {
                a * b
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
accum_float!(f32, |x| x as f64, |x| x as f32);
accum_float!(f64, |x| x, |x| x);
accum_float!(f16, f16::to_f64, f16::from_f64);
accum_float!(bf16, bf16::to_f64, bf16::from_f64);

macro_rules! accum_int {
    ($($t:ty),*) => {$(
        impl Accum for $t {
            type Acc = $t;
            const ACC_ZERO: $t = 0;
            const ACC_ONE: $t = 1;
            #[inline(always)]
            fn widen(self) -> $t {
                self
            }
            #[inline(always)]
            fn narrow(a: $t) -> $t {
                a
            }
            #[inline(always)]
            fn add(a: $t, b: $t) -> $t {
                a.wrapping_add(b)
            }
            #[inline(always)]
            fn mul(a: $t, b: $t) -> $t {
                a.wrapping_mul(b)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                false
            }
        }
    )*};
}
// Every Rust integer kiln stores or is about to store, so new dtypes need no change here.
accum_int!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Logical or/and, so that generic kernels compile for bool (`infer` rejects bool sums).
impl Accum for bool {
    type Acc = bool;
    const ACC_ZERO: bool = false;
    const ACC_ONE: bool = true;
    fn widen(self) -> bool {
        self
    }
    fn narrow(a: bool) -> bool {
        a
    }
    fn add(a: bool, b: bool) -> bool {
        a | b
    }
    fn mul(a: bool, b: bool) -> bool {
        a & b
    }
    fn is_nan(self) -> bool {
        false
    }
}
