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
    I16(Vec<i16>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
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
            Storage::I16(_) => DType::I16,
            Storage::U16(_) => DType::U16,
            Storage::U32(_) => DType::U32,
            Storage::U64(_) => DType::U64,
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
            Storage::I16(v) => v.len(),
            Storage::U16(v) => v.len(),
            Storage::U32(v) => v.len(),
            Storage::U64(v) => v.len(),
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
            DType::I16 => Storage::I16(vec![0; n]),
            DType::U16 => Storage::U16(vec![0; n]),
            DType::U32 => Storage::U32(vec![0; n]),
            DType::U64 => Storage::U64(vec![0; n]),
            DType::Bool => Storage::Bool(vec![false; n]),
        }
    }

    /// Decodes little-endian bytes (as safetensors, ONNX `raw_data` and .npy hold them) into
    /// typed storage; bool is `byte != 0`. Errors when the length is not a multiple of the size.
    pub fn from_le_bytes(dtype: DType, b: &[u8]) -> crate::Result<Storage> {
        if b.len() % dtype.size_of() != 0 {
            return Err(crate::Error::Value(format!(
                "{} bytes are not a whole number of {} elements",
                b.len(),
                dtype.name()
            )));
        }
        /// Copies (rather than casts in place) so the bytes need no alignment.
        fn collect<T: bytemuck::Pod>(b: &[u8]) -> Vec<T> {
            let mut v = vec![T::zeroed(); b.len() / std::mem::size_of::<T>()];
            bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(b);
            v
        }
        Ok(match dtype {
            DType::F32 => Storage::F32(collect(b)),
            DType::F16 => Storage::F16(collect(b)),
            DType::BF16 => Storage::BF16(collect(b)),
            DType::F64 => Storage::F64(collect(b)),
            DType::I64 => Storage::I64(collect(b)),
            DType::I32 => Storage::I32(collect(b)),
            DType::I8 => Storage::I8(collect(b)),
            DType::U8 => Storage::U8(b.to_vec()),
            DType::I16 => Storage::I16(collect(b)),
            DType::U16 => Storage::U16(collect(b)),
            DType::U32 => Storage::U32(collect(b)),
            DType::U64 => Storage::U64(collect(b)),
            DType::Bool => Storage::Bool(b.iter().map(|&x| x != 0).collect()),
        })
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
            Storage::I16(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
            Storage::U16(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
            Storage::U32(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
            Storage::U64(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
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
            Storage::I16(v) => v[i] as f64,
            Storage::U16(v) => v[i] as f64,
            Storage::U32(v) => v[i] as f64,
            Storage::U64(v) => v[i] as f64,
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
element!(i16, I16, |x| x as f64, |x| x as i16, 0, 1);
element!(u16, U16, |x| x as f64, |x| x as u16, 0, 1);
element!(u32, U32, |x| x as f64, |x| x as u32, 0, 1);
element!(u64, U64, |x| x as f64, |x| x as u64, 0, 1);
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
            $crate::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::DType::U16 => {
                type $T = u16;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::U64 => {
                type $T = u64;
                $body
            }
            $crate::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}
