//! Reading and writing `.safetensors` files (the format HF and PyTorch checkpoints are
//! converted to), between the file's bytes and [`HostTensor`]s.

use crate::{DType, Result, Tensor};
use kiln_ir::{Error, HostTensor, Storage};
use safetensors::tensor::{Dtype, Metadata, SafeTensors, View};
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// An opened safetensors file: its bytes and parsed header. Tensors are decoded on demand.
pub struct SafetensorsFile {
    path: PathBuf,
    bytes: Vec<u8>,
    /// Where the data section starts (after the 8-byte length and the JSON header).
    data_start: usize,
    metadata: Metadata,
}

fn to_kiln_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F64 => DType::F64,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::I8 => DType::I8,
        Dtype::U8 => DType::U8,
        Dtype::I16 => DType::I16,
        Dtype::U16 => DType::U16,
        Dtype::U32 => DType::U32,
        Dtype::U64 => DType::U64,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

fn to_st_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F64 => Dtype::F64,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::I8 => Dtype::I8,
        DType::U8 => Dtype::U8,
        DType::I16 => Dtype::I16,
        DType::U16 => Dtype::U16,
        DType::U32 => Dtype::U32,
        DType::U64 => Dtype::U64,
        DType::Bool => Dtype::BOOL,
    }
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SafetensorsFile({}, {} tensors)", self.path.display(), self.metadata.tensors().len())
    }
}

impl SafetensorsFile {
    /// Reads and parses the file at `path`.
    pub fn open(path: &Path) -> Result<SafetensorsFile> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::Io(format!("cannot read safetensors file {}: {e}", path.display())))?;
        let (n, metadata) = SafeTensors::read_metadata(&bytes).map_err(|e| {
            Error::Io(format!("{} is not a valid safetensors file: {e}", path.display()))
        })?;
        Ok(SafetensorsFile { path: path.to_path_buf(), bytes, data_start: 8 + n, metadata })
    }

    /// The file's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The names of all tensors in the file, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.metadata.tensors().into_keys().collect();
        v.sort();
        v
    }

    /// True when the file holds a tensor called `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.metadata.info(name).is_some()
    }

    /// Decodes the tensor called `name`. Errors name the key and the file; a missing key's
    /// error lists stored names that end like it, as a hint at a prefix mismatch.
    pub fn load(&self, name: &str) -> Result<HostTensor> {
        let file = self.path.display();
        let Some(info) = self.metadata.info(name) else {
            let last = name.rsplit('.').take(2).collect::<Vec<_>>();
            let suffix = last.into_iter().rev().collect::<Vec<_>>().join(".");
            let similar: Vec<String> =
                self.names().into_iter().filter(|k| k.ends_with(&suffix)).take(3).collect();
            let hint = if similar.is_empty() {
                String::new()
            } else {
                format!(" (similar names in the file: {})", similar.join(", "))
            };
            return Err(Error::Value(format!(
                "safetensors file {file} has no tensor named '{name}'{hint}"
            )));
        };
        let dtype = to_kiln_dtype(info.dtype).ok_or_else(|| {
            Error::Unsupported(format!(
                "tensor '{name}' in {file} has dtype {:?}, which kiln cannot hold",
                info.dtype
            ))
        })?;
        let (start, end) = info.data_offsets;
        let bytes = self
            .bytes
            .get(self.data_start + start..self.data_start + end)
            .ok_or_else(|| Error::Io(format!("tensor '{name}' lies outside the data of {file}")))?;
        Storage::from_le_bytes(dtype, bytes)
            .and_then(|storage| HostTensor::new(storage, &info.shape))
            .map_err(|e| Error::Io(format!("tensor '{name}' in {file}: {e}")))
    }
}

/// A dense host tensor as the `safetensors` serializer sees it (bytes borrowed, not copied).
struct Dense(HostTensor);

impl View for &Dense {
    fn dtype(&self) -> Dtype {
        to_st_dtype(self.0.dtype())
    }
    fn shape(&self) -> &[usize] {
        self.0.shape()
    }
    fn data(&self) -> Cow<'_, [u8]> {
        self.0.storage.as_bytes()
    }
    fn data_len(&self) -> usize {
        self.0.numel() * self.0.dtype().size_of()
    }
}

/// Writes `tensors` (any layout, any dtype; copied to row-major) to a safetensors file at
/// `path`. Names must be unique. Traced tensors have no data and are refused.
pub fn save_safetensors(path: &Path, tensors: &[(String, Tensor)]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    let mut encoded = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if !seen.insert(name.as_str()) {
            return Err(Error::Value(format!("save_safetensors: the name '{name}' appears twice")));
        }
        // `contiguous` yields a tensor covering its whole storage, so the storage's bytes
        // are exactly the tensor's.
        encoded.push((name.clone(), Dense(t.to_host()?.contiguous())));
    }
    let views = encoded.iter().map(|(n, b)| (n.clone(), b));
    safetensors::serialize_to_file(views, None, path).map_err(|e| {
        Error::Io(format!("cannot write safetensors file {}: {e}", path.display()))
    })
}
