//! ONNX's low-precision element types (float8, float4, 4/2-bit integers) at the file
//! boundary. kiln holds such a tensor as its bit patterns, one element per byte
//! ([`LowpType::pattern_dtype`]: U8 codes, or the sign-extended I8 value for INT4/INT2), and
//! remembers the element type beside it; `TensorProto`s pack 4-bit types two per byte and
//! 2-bit types four per byte, first element in the low bits.

use crate::proto::{TensorProto, ValueInfoProto, type_proto};
use crate::tensor::{checked_numel, tensor_from_proto};
use kiln_ir::{Error, HostTensor, LowpType, Result};
use std::path::Path;

/// The low-precision type of an ONNX element type code, `None` for other codes.
pub fn lowp_from_onnx(code: i32) -> Option<LowpType> {
    Some(match code {
        17 => LowpType::F8E4M3FN,
        18 => LowpType::F8E4M3FNUZ,
        19 => LowpType::F8E5M2,
        20 => LowpType::F8E5M2FNUZ,
        21 => LowpType::U4,
        22 => LowpType::I4,
        23 => LowpType::F4E2M1,
        24 => LowpType::F8E8M0,
        25 => LowpType::U2,
        26 => LowpType::I2,
        _ => return None,
    })
}

/// The ONNX element type code of a low-precision type.
pub fn lowp_to_onnx(t: LowpType) -> i32 {
    match t {
        LowpType::F8E4M3FN => 17,
        LowpType::F8E4M3FNUZ => 18,
        LowpType::F8E5M2 => 19,
        LowpType::F8E5M2FNUZ => 20,
        LowpType::U4 => 21,
        LowpType::I4 => 22,
        LowpType::F4E2M1 => 23,
        LowpType::F8E8M0 => 24,
        LowpType::U2 => 25,
        LowpType::I2 => 26,
    }
}

/// The low-precision element type a graph input/output declares, if it declares one.
pub fn declared_lowp(v: &ValueInfoProto) -> Option<LowpType> {
    match v.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => lowp_from_onnx(t.elem_type()),
        _ => None,
    }
}

/// Decodes `t` like [`tensor_from_proto`], and also low-precision tensors, into their
/// patterns; the second value says which low-precision type they are (`None`: a plain tensor).
pub fn tensor_from_proto_lowp(
    t: &TensorProto,
    model_dir: Option<&Path>,
) -> Result<(HostTensor, Option<LowpType>)> {
    match lowp_from_onnx(t.data_type()) {
        None => Ok((tensor_from_proto(t, model_dir)?, None)),
        Some(lt) => {
            let what = format!("tensor '{}' ({})", t.name(), lt.name());
            Ok((
                decode(t, lt, model_dir).map_err(|e| e.context(&what))?,
                Some(lt),
            ))
        }
    }
}

fn decode(t: &TensorProto, lt: LowpType, model_dir: Option<&Path>) -> Result<HostTensor> {
    let (shape, numel) = checked_numel(&t.dims, "dims")?;
    let bits = lt.bits() as usize;
    let per_byte = 8 / bits;
    let nbytes = numel.div_ceil(per_byte);
    let packed: Vec<u8> = if t.data_location() == crate::proto::tensor_proto::DataLocation::External
    {
        crate::tensor::read_external(t, model_dir, nbytes)?
    } else if let Some(raw) = &t.raw_data {
        if raw.len() != nbytes {
            return Err(Error::Value(format!(
                "raw_data holds {} bytes, but {numel} elements of shape {shape:?} need {nbytes}",
                raw.len()
            )));
        }
        raw.clone()
    } else {
        // One int32 per byte of packed data (one element for 8-bit types).
        if t.int32_data.len() != nbytes {
            return Err(Error::Value(format!(
                "holds {} int32_data entries, but {numel} elements of shape {shape:?} need {nbytes}",
                t.int32_data.len()
            )));
        }
        t.int32_data.iter().map(|&v| v as u8).collect()
    };
    let mask = ((1u16 << bits) - 1) as u8;
    let field = |i: usize| (packed[i / per_byte] >> ((i % per_byte) * bits)) & mask;
    if lt.pattern_dtype() == kiln_ir::DType::I8 {
        // Sign-extend the field: shift it to the top of an i8, then back.
        let shift = 8 - bits;
        let v: Vec<i8> = (0..numel)
            .map(|i| ((field(i) << shift) as i8) >> shift)
            .collect();
        HostTensor::from_vec(v, &shape)
    } else {
        HostTensor::from_vec((0..numel).map(field).collect::<Vec<u8>>(), &shape)
    }
}
