//! Typed host memory: one `Vec` per dtype, so every element is correctly aligned and no
//! code needs `unsafe` to read it.

use crate::DType;
use half::{bf16, f16};

/// Contiguous host memory holding elements of one dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Storage {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F64(Vec<f64>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
}

impl Storage {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) => DType::F32,
            Storage::F16(_) => DType::F16,
            Storage::BF16(_) => DType::BF16,
            Storage::F64(_) => DType::F64,
            Storage::I64(_) => DType::I64,
            Storage::I32(_) => DType::I32,
            Storage::I8(_) => DType::I8,
            Storage::U8(_) => DType::U8,
            Storage::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Storage::F32(v) => v.len(),
            Storage::F16(v) => v.len(),
            Storage::BF16(v) => v.len(),
            Storage::F64(v) => v.len(),
            Storage::I64(v) => v.len(),
            Storage::I32(v) => v.len(),
            Storage::I8(v) => v.len(),
            Storage::U8(v) => v.len(),
            Storage::Bool(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` zeros (false for bool) of `dtype`.
    pub fn zeros(dtype: DType, n: usize) -> Storage {
        match dtype {
            DType::F32 => Storage::F32(vec![0.0; n]),
            DType::F16 => Storage::F16(vec![f16::ZERO; n]),
            DType::BF16 => Storage::BF16(vec![bf16::ZERO; n]),
            DType::F64 => Storage::F64(vec![0.0; n]),
            DType::I64 => Storage::I64(vec![0; n]),
            DType::I32 => Storage::I32(vec![0; n]),
            DType::I8 => Storage::I8(vec![0; n]),
            DType::U8 => Storage::U8(vec![0; n]),
            DType::Bool => Storage::Bool(vec![false; n]),
        }
    }

    /// The elements as raw little-endian bytes (for hashing and serialisation).
    pub fn as_bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        use std::borrow::Cow;
        match self {
            Storage::F32(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
            Storage::F16(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
            Storage::BF16(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
            Storage::F64(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
            Storage::I64(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
            Storage::I32(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
            Storage::I8(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
            Storage::U8(v) => Cow::Borrowed(v),
            Storage::Bool(v) => Cow::Owned(v.iter().map(|&b| b as u8).collect()),
        }
    }

    /// Element `i` converted to f64 (bool: 0/1). Slow path for printing, checksums and tests.
    pub fn get_f64(&self, i: usize) -> f64 {
        match self {
            Storage::F32(v) => v[i] as f64,
            Storage::F16(v) => v[i].to_f64(),
            Storage::BF16(v) => v[i].to_f64(),
            Storage::F64(v) => v[i],
            Storage::I64(v) => v[i] as f64,
            Storage::I32(v) => v[i] as f64,
            Storage::I8(v) => v[i] as f64,
            Storage::U8(v) => v[i] as f64,
            Storage::Bool(v) => v[i] as u8 as f64,
        }
    }
}

/// A Rust scalar type that kiln stores: ties the Rust type to its [`DType`] and its [`Storage`]
/// variant, and converts through f64 for casts and generic reference kernels.
pub trait Element: Copy + Send + Sync + PartialOrd + std::fmt::Debug + 'static {
    /// The dtype of this Rust type.
    const DTYPE: DType;
    /// Borrows the elements when `s` holds this type.
    fn slice(s: &Storage) -> Option<&[Self]>;
    /// Mutably borrows the elements when `s` holds this type.
    fn slice_mut(s: &mut Storage) -> Option<&mut [Self]>;
    /// Wraps a vector in its storage variant.
    fn into_storage(v: Vec<Self>) -> Storage;
    /// Widens to f64 (bool: 0/1).
    fn to_f64(self) -> f64;
    /// Narrows from f64 with Rust `as` semantics for integers (saturating, NaN → 0) and
    /// `x != 0` for bool.
    fn from_f64(x: f64) -> Self;
    /// Zero (false).
    fn zero() -> Self;
    /// One (true).
    fn one() -> Self;
}

macro_rules! element {
    ($t:ty, $variant:ident, $to:expr, $from:expr, $zero:expr, $one:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn slice(s: &Storage) -> Option<&[Self]> {
                match s {
                    Storage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(s: &mut Storage) -> Option<&mut [Self]> {
                match s {
                    Storage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn into_storage(v: Vec<Self>) -> Storage {
                Storage::$variant(v)
            }
            fn to_f64(self) -> f64 {
                let f: fn($t) -> f64 = $to;
                f(self)
            }
            fn from_f64(x: f64) -> Self {
                let f: fn(f64) -> $t = $from;
                f(x)
            }
            fn zero() -> Self {
                $zero
            }
            fn one() -> Self {
                $one
            }
        }
    };
}

element!(f32, F32, |x| x as f64, |x| x as f32, 0.0, 1.0);
element!(f16, F16, |x| x.to_f64(), f16::from_f64, f16::ZERO, f16::ONE);
element!(bf16, BF16, |x| x.to_f64(), bf16::from_f64, bf16::ZERO, bf16::ONE);
element!(f64, F64, |x| x, |x| x, 0.0, 1.0);
element!(i64, I64, |x| x as f64, |x| x as i64, 0, 1);
element!(i32, I32, |x| x as f64, |x| x as i32, 0, 1);
element!(i8, I8, |x| x as f64, |x| x as i8, 0, 1);
element!(u8, U8, |x| x as f64, |x| x as u8, 0, 1);
element!(bool, Bool, |x| x as u8 as f64, |x| x != 0.0, false, true);

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype` (a [`DType`] value).
/// The one place that maps dtypes to Rust types for generic kernels.
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident, $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}
