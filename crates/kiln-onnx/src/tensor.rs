//! ONNX `TensorProto` ⇄ kiln [`HostTensor`]: element types, the typed data fields, `raw_data`
//! and external data files beside the model.

use crate::proto::TensorProto;
use kiln_ir::{DType, Error, HostTensor, Result, Storage};
use std::path::Path;

/// The ONNX `TensorProto.DataType` code's name, for messages (`FLOAT`, `INT64`, ...).
pub fn onnx_type_name(code: i32) -> &'static str {
    match code {
        1 => "FLOAT",
        2 => "UINT8",
        3 => "INT8",
        4 => "UINT16",
        5 => "INT16",
        6 => "INT32",
        7 => "INT64",
        8 => "STRING",
        9 => "BOOL",
        10 => "FLOAT16",
        11 => "DOUBLE",
        12 => "UINT32",
        13 => "UINT64",
        14 => "COMPLEX64",
        15 => "COMPLEX128",
        16 => "BFLOAT16",
        17 => "FLOAT8E4M3FN",
        18 => "FLOAT8E4M3FNUZ",
        19 => "FLOAT8E5M2",
        20 => "FLOAT8E5M2FNUZ",
        21 => "UINT4",
        22 => "INT4",
        23 => "FLOAT4E2M1",
        24 => "FLOAT8E8M0",
        25 => "UINT2",
        26 => "INT2",
        _ => "UNDEFINED",
    }
}

/// The kiln dtype of an ONNX element type code; an error names types kiln does not hold.
pub fn dtype_from_onnx(code: i32) -> Result<DType> {
    let kiln_name = match code {
        1 => "f32",
        2 => "u8",
        3 => "i8",
        4 => "u16",
        5 => "i16",
        6 => "i32",
        7 => "i64",
        9 => "bool",
        10 => "f16",
        11 => "f64",
        12 => "u32",
        13 => "u64",
        16 => "bf16",
        _ => "",
    };
    DType::parse(kiln_name).ok_or_else(|| {
        Error::Unsupported(format!(
            "ONNX element type {} (code {code}) is not supported by kiln",
            onnx_type_name(code)
        ))
    })
}

/// The ONNX element type code of a kiln dtype.
pub fn dtype_to_onnx(dtype: DType) -> i32 {
    match dtype.name() {
        "f32" => 1,
        "u8" => 2,
        "i8" => 3,
        "u16" => 4,
        "i16" => 5,
        "i32" => 6,
        "i64" => 7,
        "bool" => 9,
        "f16" => 10,
        "f64" => 11,
        "u32" => 12,
        "u64" => 13,
        "bf16" => 16,
        _ => 0,
    }
}

/// Checked element count of `dims` (each must be >= 0).
pub fn checked_numel(dims: &[i64], what: &str) -> Result<(Vec<usize>, usize)> {
    let mut shape = Vec::with_capacity(dims.len());
    let mut n: usize = 1;
    // The product of the non-zero dims must fit too: strides are computed from it, even when
    // a zero dim makes the tensor empty.
    let mut strides: usize = 1;
    let overflow = || Error::Value(format!("{what}: dims {dims:?} overflow the element count"));
    for &d in dims {
        let d = usize::try_from(d)
            .map_err(|_| Error::Value(format!("{what}: negative dimension {d} in {dims:?}")))?;
        n = n.checked_mul(d).ok_or_else(overflow)?;
        strides = strides.checked_mul(d.max(1)).ok_or_else(overflow)?;
        shape.push(d);
    }
    Ok((shape, n))
}

/// Decodes `t` into a host tensor. `model_dir` is where external data files are looked up
/// (they must lie inside it); `None` rejects external data.
pub fn tensor_from_proto(t: &TensorProto, model_dir: Option<&Path>) -> Result<HostTensor> {
    let what = format!("tensor '{}'", t.name());
    decode(t, model_dir).map_err(|e| e.context(&what))
}

fn decode(t: &TensorProto, model_dir: Option<&Path>) -> Result<HostTensor> {
    let dtype = dtype_from_onnx(t.data_type())?;
    let (shape, numel) = checked_numel(&t.dims, "dims")?;
    let size = dtype.size_of();
    let nbytes = numel
        .checked_mul(size)
        .ok_or_else(|| Error::Value(format!("{numel} elements overflow the byte count")))?;
    if t.data_location() == crate::proto::tensor_proto::DataLocation::External {
        let bytes = read_external(t, model_dir, nbytes)?;
        return HostTensor::new(Storage::from_le_bytes(dtype, &bytes)?, &shape);
    }
    if let Some(raw) = &t.raw_data {
        if raw.len() != nbytes {
            return Err(Error::Value(format!(
                "raw_data holds {} bytes, but {} {} elements of shape {shape:?} need {nbytes}",
                raw.len(),
                numel,
                dtype.name()
            )));
        }
        return HostTensor::new(Storage::from_le_bytes(dtype, raw)?, &shape);
    }
    // The count is checked before allocating: `dims` may claim far more elements than the
    // file holds, and `nbytes` must not size an allocation until the data backs it.
    let typed_len = match dtype.name() {
        "f32" => t.float_data.len(),
        "f64" => t.double_data.len(),
        "i64" => t.int64_data.len(),
        "u32" | "u64" => t.uint64_data.len(),
        _ => t.int32_data.len(),
    };
    if typed_len != numel {
        return Err(Error::Value(format!(
            "holds {typed_len} {} values, but shape {shape:?} needs {numel}",
            dtype.name()
        )));
    }
    // Typed fields: each element is written as the little-endian bytes of the target type,
    // truncated to its size, which is how ONNX packs narrow types into int32_data/uint64_data.
    let mut bytes = Vec::with_capacity(nbytes);
    match dtype.name() {
        "f32" => t.float_data.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes())),
        "f64" => t.double_data.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes())),
        "i64" => t.int64_data.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes())),
        "u32" | "u64" => t.uint64_data.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()[..size])),
        "bool" => t.int32_data.iter().for_each(|&v| bytes.push((v != 0) as u8)),
        _ => t.int32_data.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()[..size])),
    }
    HostTensor::new(Storage::from_le_bytes(dtype, &bytes)?, &shape)
}

/// Reads the bytes of an external-data tensor: `location` relative to the model's folder (no
/// absolute paths, no `..`), optional `offset` and `length`, checked against the file size.
pub(crate) fn read_external(t: &TensorProto, model_dir: Option<&Path>, nbytes: usize) -> Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let dir = model_dir.ok_or_else(|| {
        Error::Value("uses external data, but the model was not loaded from a file".into())
    })?;
    let (mut location, mut offset, mut length) = (None, 0u64, None);
    for kv in &t.external_data {
        let parse = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| Error::Value(format!("external data {}={v:?} is not a number", kv.key())))
        };
        match kv.key() {
            "location" => location = Some(kv.value().to_string()),
            "offset" => offset = parse(kv.value())?,
            "length" => length = Some(parse(kv.value())?),
            _ => {}
        }
    }
    let location = location.ok_or_else(|| Error::Value("external data without a location".into()))?;
    let rel = Path::new(&location);
    if rel.is_absolute() || rel.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        return Err(Error::Value(format!(
            "external data location {location:?} must be a relative path inside the model's folder"
        )));
    }
    if let Some(len) = length
        && len != nbytes as u64
    {
        return Err(Error::Value(format!("external data length {len} but the tensor needs {nbytes} bytes")));
    }
    let path = dir.join(rel);
    let io = |e: std::io::Error| Error::Io(format!("external data {}: {e}", path.display()));
    let mut f = std::fs::File::open(&path).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
    if offset.checked_add(nbytes as u64).is_none_or(|end| end > file_len) {
        return Err(Error::Value(format!(
            "external data {}: {nbytes} bytes at offset {offset} run past the end of the file ({file_len} bytes)",
            path.display()
        )));
    }
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut bytes = vec![0u8; nbytes];
    f.read_exact(&mut bytes).map_err(io)?;
    Ok(bytes)
}

/// Encodes a host tensor as a `TensorProto` with `raw_data` (for writing test data and models).
pub fn tensor_to_proto(t: &HostTensor, name: &str) -> TensorProto {
    let dense = t.contiguous();
    TensorProto {
        dims: dense.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(dtype_to_onnx(dense.dtype())),
        name: Some(name.to_string()),
        raw_data: Some(dense.storage.as_bytes().into_owned()),
        ..Default::default()
    }
}
