//! Bit reinterpretation between dtypes of one size ([`kiln_ir::Op::BitCast`]).
//!
//! Each element goes through its bit pattern widened to u64 (zero-extended), so one table of
//! "to bits" and one of "from bits" cover every pair of equal-sized dtypes.

use kiln_ir::half::{bf16, f16};
use kiln_ir::{DType, Error, HostTensor, Result, Storage};

/// `x`'s elements with their bits read as `to` (same size; `to` is not bool).
pub fn bitcast(x: &HostTensor, to: DType) -> Result<HostTensor> {
    let from = x.dtype();
    if to == DType::Bool || from.size_of() != to.size_of() {
        return Err(Error::DType(format!(
            "bitcast: cannot reinterpret {from} as {to} (the sizes must match and the result cannot be bool)"
        )));
    }
    let bits: Vec<u64> = match from {
        DType::F32 => x
            .to_vec::<f32>()?
            .into_iter()
            .map(|v| v.to_bits() as u64)
            .collect(),
        DType::F16 => x
            .to_vec::<f16>()?
            .into_iter()
            .map(|v| v.to_bits() as u64)
            .collect(),
        DType::BF16 => x
            .to_vec::<bf16>()?
            .into_iter()
            .map(|v| v.to_bits() as u64)
            .collect(),
        DType::F64 => x.to_vec::<f64>()?.into_iter().map(f64::to_bits).collect(),
        // Signed integers: `as` to the unsigned type of the same width keeps the bits.
        DType::I64 => x.to_vec::<i64>()?.into_iter().map(|v| v as u64).collect(),
        DType::I32 => x
            .to_vec::<i32>()?
            .into_iter()
            .map(|v| v as u32 as u64)
            .collect(),
        DType::I16 => x
            .to_vec::<i16>()?
            .into_iter()
            .map(|v| v as u16 as u64)
            .collect(),
        DType::I8 => x
            .to_vec::<i8>()?
            .into_iter()
            .map(|v| v as u8 as u64)
            .collect(),
        DType::U64 => x.to_vec::<u64>()?,
        DType::U32 => x.to_vec::<u32>()?.into_iter().map(u64::from).collect(),
        DType::U16 => x.to_vec::<u16>()?.into_iter().map(u64::from).collect(),
        DType::U8 => x.to_vec::<u8>()?.into_iter().map(u64::from).collect(),
        DType::Bool => x.to_vec::<bool>()?.into_iter().map(u64::from).collect(),
    };
    // Truncating `as` casts below only drop the zero bits added above.
    let storage = match to {
        DType::F32 => Storage::F32(bits.iter().map(|&b| f32::from_bits(b as u32)).collect()),
        DType::F16 => Storage::F16(bits.iter().map(|&b| f16::from_bits(b as u16)).collect()),
        DType::BF16 => Storage::BF16(bits.iter().map(|&b| bf16::from_bits(b as u16)).collect()),
        DType::F64 => Storage::F64(bits.iter().map(|&b| f64::from_bits(b)).collect()),
        DType::I64 => Storage::I64(bits.iter().map(|&b| b as i64).collect()),
        DType::I32 => Storage::I32(bits.iter().map(|&b| b as u32 as i32).collect()),
        DType::I16 => Storage::I16(bits.iter().map(|&b| b as u16 as i16).collect()),
        DType::I8 => Storage::I8(bits.iter().map(|&b| b as u8 as i8).collect()),
        DType::U64 => Storage::U64(bits),
        DType::U32 => Storage::U32(bits.iter().map(|&b| b as u32).collect()),
        DType::U16 => Storage::U16(bits.iter().map(|&b| b as u16).collect()),
        DType::U8 => Storage::U8(bits.iter().map(|&b| b as u8).collect()),
        DType::Bool => return Err(Error::DType("bitcast: the result cannot be bool".into())),
    };
    HostTensor::new(storage, x.shape())
}
