//! Dtype conversion.
//!
//! Each source type converts through a type of its kind that holds it exactly, so no value is
//! rounded twice: f32/f16/bf16 through f32, f64 as itself, u64 as itself (it does not fit
//! i64), other integers and bool through i64.
//! Rust's `as` already has the float→integer semantics of [`kiln_ir::Op::Cast`] (truncate,
//! saturate, NaN → 0); integer→integer wraps, as C and PyTorch do.

use super::elementwise::iter::map1;
use kiln_ir::half::{bf16, f16};
use kiln_ir::{DType, HostTensor, Result};

/// Converts every element to `to` (semantics in [`kiln_ir::Op::Cast`]).
pub fn cast(x: &HostTensor, to: DType) -> Result<HostTensor> {
    if x.dtype() == to && x.is_dense() {
        // Storage is immutable and shared, so an unchanged dense tensor can be returned as is.
        return Ok(x.clone());
    }
    kiln_ir::with_dtype!(x.dtype(), S, {
        kiln_ir::with_dtype!(to, D, map1::<S, D>(x, "cast", |v: S| v.cast_to::<D>()))
    })
}

/// A type elements can be converted from.
trait Src: Copy {
    fn cast_to<D: Dst>(self) -> D;
}

/// A type elements can be converted to. The conversions are spelled out per type (rather
/// than through `Element::from_f64`) because `Element`'s are not inlined across crates.
trait Dst: Copy {
    /// From an integer: `as` (wrapping) for integers, nearest for floats, `!= 0` for bool.
    fn from_i64(x: i64) -> Self;
    /// From a u64: `as` (wrapping) for integers, nearest for floats, `!= 0` for bool.
    fn from_u64(x: u64) -> Self;
    /// From a float: truncating and saturating `as` (NaN → 0) for integers, nearest for
    /// floats, `!= 0` for bool.
    fn from_f64(x: f64) -> Self;
    /// The same as `from_f64(x as f64)` (which is exact), often without the detour.
    fn from_f32(x: f32) -> Self;
}

macro_rules! src {
    ($($t:ty => $via:ident($conv:expr)),*) => {$(
        impl Src for $t {
            #[inline(always)]
            fn cast_to<D: Dst>(self) -> D {
                let f: fn($t) -> _ = $conv;
                D::$via(f(self))
            }
        }
    )*};
}
src!(
    f32 => from_f32(|x| x),
    f64 => from_f64(|x| x),
    f16 => from_f32(f16::to_f32),
    bf16 => from_f32(bf16::to_f32),
    i64 => from_i64(|x| x),
    i32 => from_i64(|x| x as i64),
    i8 => from_i64(|x| x as i64),
    u8 => from_i64(|x| x as i64),
    i16 => from_i64(|x| x as i64),
    u16 => from_i64(|x| x as i64),
    u32 => from_i64(|x| x as i64),
    u64 => from_u64(|x| x),
    bool => from_i64(|x| x as i64)
);

macro_rules! dst_num {
    ($($t:ty),*) => {$(
        impl Dst for $t {
            #[inline(always)] fn from_i64(x: i64) -> Self { x as $t }
            #[inline(always)] fn from_u64(x: u64) -> Self { x as $t }
            #[inline(always)] fn from_f64(x: f64) -> Self { x as $t }
            #[inline(always)] fn from_f32(x: f32) -> Self { x as $t }
        }
    )*};
}
dst_num!(i64, i32, i16, i8, u64, u32, u16, u8, f32, f64);

macro_rules! dst_half {
    ($($t:ty),*) => {$(
        impl Dst for $t {
            // |x| > 2^53 rounds twice (through f64), at most one ulp off in a rare tie.
            #[inline(always)] fn from_i64(x: i64) -> Self { <$t>::from_f64(x as f64) }
            #[inline(always)] fn from_u64(x: u64) -> Self { <$t>::from_f64(x as f64) }
            #[inline(always)] fn from_f64(x: f64) -> Self { <$t>::from_f64(x) }
            #[inline(always)] fn from_f32(x: f32) -> Self { <$t>::from_f32(x) }
        }
    )*};
}
dst_half!(f16, bf16);

impl Dst for bool {
    #[inline(always)]
    fn from_i64(x: i64) -> Self {
        x != 0
    }
    #[inline(always)]
    fn from_u64(x: u64) -> Self {
        x != 0
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x != 0.0
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x != 0.0
    }
}
