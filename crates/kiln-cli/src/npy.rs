//! NumPy `.npy` files ⇄ host tensors: the inputs of `kiln run --input` and its `--out` files.
//!
//! Reading goes through `npyz`, which parses every header variant (format versions 1-3, any
//! byte order); C and Fortran order are both accepted. bf16, which NumPy itself lacks, is
//! stored as 2-byte raw values (`|V2`, what `ml_dtypes.bfloat16` arrays save as) read little-endian.

use std::io::Write;
use std::path::Path;

use half::f16;
use kiln_ir::{DType, Error, HostTensor, Layout, Result, Storage};
use npyz::{Order, TypeChar};

/// The kiln dtype of an npy element type, or a message naming what the file holds.
fn dtype_of(dtype: &npyz::DType) -> std::result::Result<DType, String> {
    let npyz::DType::Plain(ts) = dtype else {
        return Err(format!("a structured or array dtype ({})", dtype.descr()));
    };
    let size = ts.size_field();
    let d = match (ts.type_char(), size) {
        (TypeChar::Float, 2) => DType::F16,
        (TypeChar::Float, 4) => DType::F32,
        (TypeChar::Float, 8) => DType::F64,
        (TypeChar::Int, 1) => DType::I8,
        (TypeChar::Int, 2) => DType::I16,
        (TypeChar::Int, 4) => DType::I32,
        (TypeChar::Int, 8) => DType::I64,
        (TypeChar::Uint, 1) => DType::U8,
        (TypeChar::Uint, 2) => DType::U16,
        (TypeChar::Uint, 4) => DType::U32,
        (TypeChar::Uint, 8) => DType::U64,
        (TypeChar::Bool, 1) => DType::Bool,
        (TypeChar::RawData, 2) => DType::BF16,
        _ => return Err(format!("element type '{ts}', which kiln does not hold")),
    };
    Ok(d)
}

fn open(path: &Path) -> Result<std::io::BufReader<std::fs::File>> {
    let f = std::fs::File::open(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    Ok(std::io::BufReader::new(f))
}

fn bad_file(path: &Path, e: &std::io::Error) -> Error {
    Error::Value(format!(
        "{}: not a readable .npy file ({e})",
        path.display()
    ))
}

fn shape_of(path: &Path, shape: &[u64]) -> Result<Vec<usize>> {
    let shape: Vec<usize> = shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::Value(format!("{}: shape {shape:?} is too large", path.display())))?;
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            Error::Value(format!(
                "{}: shape {shape:?} overflows the element count",
                path.display()
            ))
        })?;
    Ok(shape)
}

/// Reads an `.npy` file into a dense, row-major host tensor.
pub fn read(path: &Path) -> Result<HostTensor> {
    let npy = npyz::NpyFile::new(open(path)?).map_err(|e| bad_file(path, &e))?;
    let dtype = dtype_of(&npy.dtype())
        .map_err(|m| Error::DType(format!("{}: holds {m}", path.display())))?;
    let shape = shape_of(path, npy.shape())?;
    let order = npy.order();
    let data = |e: std::io::Error| Error::Value(format!("{}: bad data ({e})", path.display()));
    let storage = match dtype {
        DType::F32 => Storage::F32(npy.into_vec().map_err(data)?),
        DType::F16 => Storage::F16(npy.into_vec::<f16>().map_err(data)?),
        DType::F64 => Storage::F64(npy.into_vec().map_err(data)?),
        DType::I64 => Storage::I64(npy.into_vec().map_err(data)?),
        DType::I32 => Storage::I32(npy.into_vec().map_err(data)?),
        DType::I16 => Storage::I16(npy.into_vec().map_err(data)?),
        DType::I8 => Storage::I8(npy.into_vec().map_err(data)?),
        DType::U64 => Storage::U64(npy.into_vec().map_err(data)?),
        DType::U32 => Storage::U32(npy.into_vec().map_err(data)?),
        DType::U16 => Storage::U16(npy.into_vec().map_err(data)?),
        DType::U8 => Storage::U8(npy.into_vec().map_err(data)?),
        DType::Bool => Storage::Bool(npy.into_vec().map_err(data)?),
        DType::BF16 => {
            let rows: Vec<Vec<u8>> = npy.into_vec().map_err(data)?;
            Storage::from_le_bytes(DType::BF16, &rows.concat())?
        }
    };
    match order {
        Order::C => HostTensor::new(storage, &shape),
        Order::Fortran => {
            // Fortran data is the row-major layout of the reversed shape; reversing the axes
            // back gives the array, which is then made dense.
            let reversed: Vec<usize> = shape.iter().rev().copied().collect();
            let t = HostTensor::new(storage, &reversed)?;
            let perm: Vec<usize> = (0..shape.len()).rev().collect();
            let layout: Layout = t.layout.permute(&perm)?;
            Ok(t.with_layout(layout).contiguous())
        }
    }
}

/// The npy `descr` of a dtype (little-endian, as kiln stores everything).
fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::BF16 => "|V2",
        DType::F64 => "<f8",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::I16 => "<i2",
        DType::I8 => "|i1",
        DType::U64 => "<u8",
        DType::U32 => "<u4",
        DType::U16 => "<u2",
        DType::U8 => "|u1",
        DType::Bool => "|b1",
    }
}

/// The bytes of a format-1.0 `.npy` file holding `t` in C order.
pub fn encode(t: &HostTensor) -> Vec<u8> {
    let dense = t.contiguous();
    let dims: Vec<String> = dense.shape().iter().map(|d| d.to_string()).collect();
    // Python tuple syntax: a 1-tuple needs its trailing comma.
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr(dense.dtype())
    );
    // The data must start at a multiple of 64 bytes; the header ends with a newline.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let body = dense.storage.as_bytes();
    let mut out = Vec::with_capacity(10 + header.len() + body.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    // Headers of format 1.0 are at most 65535 bytes; a shape's text never comes near that
    // for ranks kiln handles, so the length always fits.
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&body);
    out
}

/// Writes `t` to `path` as an `.npy` file.
pub fn write(path: &Path, t: &HostTensor) -> Result<()> {
    let io = |e: std::io::Error| Error::Io(format!("{}: {e}", path.display()));
    let mut f = std::fs::File::create(path).map_err(io)?;
    f.write_all(&encode(t)).map_err(io)?;
    f.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn scratch(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("kiln-npy-unit-{}-{name}", std::process::id()))
    }

    fn roundtrip(t: &HostTensor, name: &str) -> HostTensor {
        let p = scratch(name);
        write(&p, t).unwrap();
        let back = read(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        back
    }

    #[test]
    fn every_dtype_roundtrips_with_its_shape() {
        let cases = [
            HostTensor::from_vec(
                vec![1.5f32, -2.0, f32::NAN, f32::INFINITY, 0.0, -0.0],
                &[2, 3],
            )
            .unwrap(),
            HostTensor::from_vec(vec![f16::from_f32(1.5), f16::from_f32(-65504.0)], &[2]).unwrap(),
            HostTensor::from_vec(vec![bf16::from_f32(3.0), bf16::from_f32(-0.125)], &[1, 2])
                .unwrap(),
            HostTensor::from_vec(vec![1e300f64, -1e-300], &[2, 1]).unwrap(),
            HostTensor::from_vec(vec![i64::MIN, i64::MAX, 0], &[3]).unwrap(),
            HostTensor::from_vec(vec![i32::MIN, 7], &[2]).unwrap(),
            HostTensor::from_vec(vec![-128i8, 127], &[2]).unwrap(),
            HostTensor::from_vec(vec![0u8, 255], &[2]).unwrap(),
            HostTensor::from_vec(vec![-3i16, 3], &[2]).unwrap(),
            HostTensor::from_vec(vec![65535u16], &[1]).unwrap(),
            HostTensor::from_vec(vec![u32::MAX], &[1, 1, 1]).unwrap(),
            HostTensor::from_vec(vec![u64::MAX], &[1]).unwrap(),
            HostTensor::from_vec(vec![true, false, true], &[3]).unwrap(),
            HostTensor::from_vec(vec![2.5f32], &[]).unwrap(),
            HostTensor::from_vec(Vec::<f32>::new(), &[0, 4]).unwrap(),
        ];
        for (i, t) in cases.iter().enumerate() {
            let back = roundtrip(t, &format!("rt{i}.npy"));
            assert_eq!(back.dtype(), t.dtype(), "case {i}");
            assert_eq!(back.shape(), t.shape(), "case {i}");
            assert_eq!(back.storage.as_bytes(), t.storage.as_bytes(), "case {i}");
        }
    }

    #[test]
    fn data_starts_64_byte_aligned() {
        for shape in [&[][..], &[1], &[2, 3], &[1, 2, 3, 4, 5, 6, 7, 8]] {
            let t = HostTensor::zeros(DType::F32, shape);
            let b = encode(&t);
            let header_len = u16::from_le_bytes([b[8], b[9]]) as usize;
            assert_eq!((10 + header_len) % 64, 0, "{shape:?}");
            assert_eq!(b[10 + header_len - 1], b'\n');
        }
    }

    #[test]
    fn non_contiguous_tensors_are_written_in_logical_order() {
        let t = HostTensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
        let tt = t.with_layout(t.layout.permute(&[1, 0]).unwrap());
        let back = roundtrip(&tt, "transposed.npy");
        assert_eq!(back.shape(), &[3, 2]);
        assert_eq!(back.to_vec::<i32>().unwrap(), [1, 4, 2, 5, 3, 6]);
    }

    #[test]
    fn garbage_and_missing_files_are_errors() {
        let p = scratch("garbage.npy");
        std::fs::write(&p, b"not numpy at all").unwrap();
        let e = read(&p).unwrap_err().to_string();
        std::fs::remove_file(&p).unwrap();
        assert!(
            e.contains("garbage.npy") && e.contains("not a readable .npy"),
            "{e}"
        );
        let e = read(Path::new("/nonexistent/x.npy"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/x.npy"), "{e}");
    }
}
