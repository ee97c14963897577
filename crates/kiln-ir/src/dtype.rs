//! Element types a tensor can hold.

use std::fmt;

/// The element type of a tensor. Every backend supports all of these; ops say which they accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I64,
    I32,
    I8,
    U8,
    I16,
    U16,
    U32,
    U64,
    Bool,
}

impl DType {
    /// Every dtype, in a fixed order (tests iterate over it).
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
    ];

    /// Size of one element in bytes.
    pub fn size_of(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// True for the signed and unsigned integer types (not bool).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U64 | DType::U32 | DType::U16 | DType::U8
        )
    }

    /// True for signed numeric types (floats and signed integers).
    pub fn is_signed(self) -> bool {
        self.is_float() || matches!(self, DType::I64 | DType::I32 | DType::I16 | DType::I8)
    }

    /// The short lowercase name used in printed graphs, CLI flags and errors (`f32`, `i64`, `bool`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
        }
    }

    /// Parses a name as printed by [`DType::name`] (also accepts `float32`, `int64`, ... aliases).
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "f32" | "float32" | "float" => DType::F32,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f64" | "float64" | "double" => DType::F64,
            "i64" | "int64" | "long" => DType::I64,
            "i32" | "int32" | "int" => DType::I32,
            "i8" | "int8" => DType::I8,
            "u8" | "uint8" => DType::U8,
            "i16" | "int16" | "short" => DType::I16,
            "u16" | "uint16" => DType::U16,
            "u32" | "uint32" => DType::U32,
            "u64" | "uint64" => DType::U64,
            "bool" => DType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
