//! The inputs of an ONNX model for `run` and `bench`: `.npy` files checked against what the
//! model declares, random values for the rest, and the sizes chosen for symbolic dims.
//!
//! Symbolic dims are sized, in this order of precedence: `--dim NAME=SIZE`; the shape of a
//! given `--input` file that uses the dim; `--batch` for batch-like dims (named like a batch,
//! an unnamed leading dim, or the model's first symbolic dim); `--seq` for every other one.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use half::{bf16, f16};
use kiln::rng::Rng;
use kiln_ir::{DType, HostTensor, Storage};
use kiln_onnx::{DeclaredDim, OnnxModel, ValueInfo};

use crate::exit::{CliError, CliResult};
use crate::npy;

/// What the user asked for on the command line.
#[derive(Debug, Clone, Default)]
pub struct InputRequest {
    /// `--input NAME=FILE.npy`, in the order given.
    pub files: Vec<(String, PathBuf)>,
    /// `--dim NAME=SIZE`, in the order given.
    pub dims: Vec<(String, usize)>,
    /// Size of batch-like symbolic dims not otherwise set.
    pub batch: usize,
    /// Size of the other symbolic dims not otherwise set.
    pub seq: usize,
    /// Seed of the random inputs.
    pub seed: u64,
}

/// Where a symbolic dim's size came from, for the report `run` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DimSource {
    /// `--dim NAME=SIZE`.
    Flag,
    /// The shape of this input's `.npy` file.
    File(String),
    /// `--batch` (default 1), for batch-like dims.
    Batch,
    /// `--seq` (default 128), for the other dims.
    Seq,
}

impl DimSource {
    /// Text for people: `--dim`, `input 'x'`, `--batch`, `--seq`.
    pub fn describe(&self) -> String {
        match self {
            DimSource::Flag => "--dim".into(),
            DimSource::File(input) => format!("input '{input}'"),
            DimSource::Batch => "--batch".into(),
            DimSource::Seq => "--seq".into(),
        }
    }
}

/// One input value and where it came from.
#[derive(Debug, Clone)]
pub struct InputValue {
    pub name: String,
    pub tensor: HostTensor,
    /// The `.npy` file, or `None` for random values.
    pub file: Option<PathBuf>,
}

/// The inputs to run a model on.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// One per declared input, in declaration order.
    pub inputs: Vec<InputValue>,
    /// Each symbolic dim of the inputs with its size and its source, in order of first use.
    pub dims: Vec<(String, usize, DimSource)>,
}

impl Prepared {
    /// The inputs by name, as `kiln_onnx::import_for_inputs` takes them.
    pub fn by_name(&self) -> HashMap<String, HostTensor> {
        self.inputs
            .iter()
            .map(|v| (v.name.clone(), v.tensor.clone()))
            .collect()
    }

    /// The batch size to report: the model's first symbolic dim, else the leading dim of its
    /// first input, else 1.
    pub fn batch(&self) -> usize {
        if let Some((_, n, _)) = self.dims.first() {
            return *n;
        }
        self.inputs
            .iter()
            .find_map(|v| v.tensor.shape().first().copied())
            .unwrap_or(1)
    }

    /// True when some dim took its size from `--seq`.
    pub fn used_seq(&self) -> bool {
        self.dims.iter().any(|(_, _, s)| *s == DimSource::Seq)
    }

    /// `batch=2 (input 'x'), seq=128 (--seq)`, or `none` without symbolic dims.
    pub fn dims_report(&self) -> String {
        if self.dims.is_empty() {
            return "none".into();
        }
        let parts: Vec<String> = self
            .dims
            .iter()
            .map(|(n, size, src)| format!("{n}={size} ({})", src.describe()))
            .collect();
        parts.join(", ")
    }
}

/// The key a declared dim is set by: its name, or `INPUT.AXIS` for an unnamed one (as kiln-onnx
/// names unknown dims); `None` for fixed dims.
fn dim_key(input: &str, axis: usize, d: &DeclaredDim) -> Option<String> {
    match d {
        DeclaredDim::Fixed(_) => None,
        DeclaredDim::Named(s) => Some(s.clone()),
        DeclaredDim::Unknown => Some(format!("{input}.{axis}")),
    }
}

/// Whether a dim should take `--batch`: named like a batch, or an unnamed leading dim.
fn batch_like(axis: usize, d: &DeclaredDim) -> bool {
    match d {
        DeclaredDim::Named(s) => {
            let l = s.to_ascii_lowercase();
            l.contains("batch") || matches!(l.as_str(), "n" | "b" | "bs" | "bsz")
        }
        DeclaredDim::Unknown => axis == 0,
        DeclaredDim::Fixed(_) => false,
    }
}

/// The declared dtype of an input, or an error naming the type kiln cannot hold.
fn declared_dtype(info: &ValueInfo) -> CliResult<DType> {
    info.dtype.clone().map_err(|t| {
        CliError::Failed(format!(
            "input '{}' has type {t}, which kiln does not support",
            info.name
        ))
    })
}

/// Reads the given files, checks them against the declarations, sizes the symbolic dims and
/// fills the remaining inputs with seeded random values.
pub fn prepare(model: &OnnxModel, req: &InputRequest) -> CliResult<Prepared> {
    let declared = model.inputs();
    let names: Vec<&str> = declared.iter().map(|v| v.name.as_str()).collect();
    let mut files: HashMap<&str, &PathBuf> = HashMap::new();
    for (name, path) in &req.files {
        if !names.contains(&name.as_str()) {
            return Err(CliError::Failed(format!(
                "--input {name}=...: the model has no input '{name}' (its inputs: {})",
                list_or_none(&names)
            )));
        }
        if files.insert(name, path).is_some() {
            return Err(CliError::Failed(format!(
                "--input {name} is given more than once"
            )));
        }
    }

    // Every symbolic dim of the inputs, in order of first use, and whether it is batch-like.
    let mut sym_order: Vec<(String, bool)> = Vec::new();
    for info in &declared {
        for (axis, d) in info.dims.iter().flatten().enumerate() {
            if let Some(key) = dim_key(&info.name, axis, d) {
                let is_batch = sym_order.is_empty() || batch_like(axis, d);
                match sym_order.iter_mut().find(|(k, _)| *k == key) {
                    Some(entry) => entry.1 |= is_batch,
                    None => sym_order.push((key, is_batch)),
                }
            }
        }
    }
    let mut sizes: BTreeMap<String, (usize, DimSource)> = BTreeMap::new();
    for (name, size) in &req.dims {
        if !sym_order.iter().any(|(k, _)| k == name) {
            let known: Vec<&str> = sym_order.iter().map(|(k, _)| k.as_str()).collect();
            return Err(CliError::Failed(format!(
                "--dim {name}={size}: the model's inputs have no symbolic dim '{name}' (theirs: {})",
                list_or_none(&known)
            )));
        }
        sizes.insert(name.clone(), (*size, DimSource::Flag));
    }

    // Given files first, so their shapes bind the dims that random inputs then share.
    let mut values: HashMap<String, InputValue> = HashMap::new();
    for info in &declared {
        let Some(path) = files.get(info.name.as_str()) else {
            continue;
        };
        let dtype = declared_dtype(info)?;
        let t =
            npy::read(path).map_err(|e| CliError::Failed(format!("input '{}': {e}", info.name)))?;
        check_given(info, dtype, &t, path, &mut sizes)?;
        values.insert(
            info.name.clone(),
            InputValue {
                name: info.name.clone(),
                tensor: t,
                file: Some((*path).clone()),
            },
        );
    }
    for (key, is_batch) in &sym_order {
        sizes.entry(key.clone()).or_insert_with(|| {
            if *is_batch {
                (req.batch, DimSource::Batch)
            } else {
                (req.seq, DimSource::Seq)
            }
        });
    }

    let mut inputs = Vec::with_capacity(declared.len());
    for info in &declared {
        if let Some(v) = values.remove(&info.name) {
            inputs.push(v);
            continue;
        }
        let dtype = declared_dtype(info)?;
        let dims = info.dims.as_ref().ok_or_else(|| {
            CliError::Failed(format!(
                "input '{}' declares no rank, so kiln cannot make a random value for it; pass it with --input {}=FILE.npy",
                info.name, info.name
            ))
        })?;
        let shape: Vec<usize> = dims
            .iter()
            .enumerate()
            .map(|(axis, d)| match d {
                DeclaredDim::Fixed(n) => *n,
                _ => dim_key(&info.name, axis, d)
                    .and_then(|k| sizes.get(&k))
                    .map_or(1, |(n, _)| *n),
            })
            .collect();
        let tensor = random_tensor(dtype, &shape, &mut Rng::for_name(req.seed, &info.name))
            .map_err(|m| {
                CliError::Failed(format!("input '{}' ({}): {m}", info.name, info.describe()))
            })?;
        inputs.push(InputValue {
            name: info.name.clone(),
            tensor,
            file: None,
        });
    }
    let dims = sym_order
        .into_iter()
        .filter_map(|(k, _)| sizes.remove(&k).map(|(n, src)| (k, n, src)))
        .collect();
    Ok(Prepared { inputs, dims })
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// Checks a given input against its declaration and binds the symbolic dims it fixes.
fn check_given(
    info: &ValueInfo,
    dtype: DType,
    t: &HostTensor,
    path: &std::path::Path,
    sizes: &mut BTreeMap<String, (usize, DimSource)>,
) -> CliResult<()> {
    let mismatch = |why: String| {
        CliError::Failed(format!(
            "input '{}' expects {}, but {} holds {}{:?}: {why}",
            info.name,
            info.describe(),
            path.display(),
            t.dtype(),
            t.shape()
        ))
    };
    if t.dtype() != dtype {
        return Err(mismatch(format!("dtype {} is not {dtype}", t.dtype())));
    }
    let Some(dims) = &info.dims else {
        return Ok(());
    };
    if dims.len() != t.shape().len() {
        return Err(mismatch(format!(
            "rank {} is not {}",
            t.shape().len(),
            dims.len()
        )));
    }
    for (axis, (d, &n)) in dims.iter().zip(t.shape()).enumerate() {
        match d {
            DeclaredDim::Fixed(want) if *want != n => {
                return Err(mismatch(format!("axis {axis} is {n}, not {want}")));
            }
            DeclaredDim::Fixed(_) => {}
            _ => {
                let Some(key) = dim_key(&info.name, axis, d) else {
                    continue;
                };
                match sizes.get(&key) {
                    Some((want, src)) if *want != n => {
                        return Err(mismatch(format!(
                            "axis {axis} ({key}) is {n}, but {key} is {want} (from {})",
                            src.describe()
                        )));
                    }
                    Some(_) => {}
                    None => {
                        sizes.insert(key, (n, DimSource::File(info.name.clone())));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The largest random input made, so a huge declared shape is refused rather than aborting
/// the process when the allocation fails.
const MAX_RANDOM_BYTES: usize = 16 << 30;

/// Seeded random values of `shape`: standard normal floats, integers in 0..10 (valid as
/// indices and token ids of any small vocabulary), fair-coin bools.
pub fn random_tensor(dtype: DType, shape: &[usize], rng: &mut Rng) -> Result<HostTensor, String> {
    let n = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n.saturating_mul(dtype.size_of()) <= MAX_RANDOM_BYTES)
        .ok_or_else(|| {
            format!("shape {shape:?} of {dtype} needs more than 16 GiB; set smaller symbolic dims with --dim")
        })?;
    let mut normal = || (0..n).map(|_| rng.normal()).collect::<Vec<f64>>();
    let storage = match dtype {
        DType::F32 => Storage::F32(normal().into_iter().map(|x| x as f32).collect()),
        DType::F64 => Storage::F64(normal()),
        DType::F16 => Storage::F16(normal().into_iter().map(f16::from_f64).collect()),
        DType::BF16 => Storage::BF16(normal().into_iter().map(bf16::from_f64).collect()),
        DType::Bool => Storage::Bool((0..n).map(|_| rng.next_u64() & 1 == 1).collect()),
        _ => {
            // 0..10 fits every integer dtype, so the byte-level conversion below is exact.
            let small: Vec<i64> = (0..n).map(|_| (rng.next_u64() % 10) as i64).collect();
            let bytes: Vec<u8> = small
                .iter()
                .flat_map(|v| v.to_le_bytes()[..dtype.size_of()].to_vec())
                .collect();
            Storage::from_le_bytes(dtype, &bytes).map_err(|e| e.to_string())?
        }
    };
    HostTensor::new(storage, shape).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_integers_are_small_and_non_negative_for_every_int_dtype() {
        for dtype in DType::ALL.into_iter().filter(|d| d.is_int()) {
            let t = random_tensor(dtype, &[4, 50], &mut Rng::new(3)).unwrap();
            assert_eq!((t.dtype(), t.shape()), (dtype, &[4usize, 50][..]));
            let v = t.to_f64_vec();
            assert!(
                v.iter()
                    .all(|&x| (0.0..10.0).contains(&x) && x.fract() == 0.0),
                "{dtype}: {v:?}"
            );
            // 200 draws from 10 values: all of them should appear.
            for k in 0..10 {
                assert!(v.contains(&(k as f64)), "{dtype}: {k} never drawn");
            }
        }
    }

    #[test]
    fn random_floats_look_standard_normal_and_bools_mix() {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let v = random_tensor(dtype, &[10_000], &mut Rng::new(1))
                .unwrap()
                .to_f64_vec();
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
            assert!(
                mean.abs() < 0.05 && (var - 1.0).abs() < 0.1,
                "{dtype}: mean {mean} var {var}"
            );
        }
        let b = random_tensor(DType::Bool, &[1000], &mut Rng::new(1))
            .unwrap()
            .to_f64_vec();
        let ones = b.iter().filter(|&&x| x == 1.0).count();
        assert!((400..600).contains(&ones), "{ones}");
    }

    #[test]
    fn random_values_depend_only_on_the_seed_and_empty_shapes_work() {
        let a = random_tensor(DType::F32, &[3, 2], &mut Rng::for_name(7, "x")).unwrap();
        let b = random_tensor(DType::F32, &[3, 2], &mut Rng::for_name(7, "x")).unwrap();
        assert_eq!(a.to_f64_vec(), b.to_f64_vec());
        let c = random_tensor(DType::F32, &[3, 2], &mut Rng::for_name(8, "x")).unwrap();
        assert_ne!(a.to_f64_vec(), c.to_f64_vec());
        assert_eq!(
            random_tensor(DType::I64, &[0, 5], &mut Rng::new(0))
                .unwrap()
                .numel(),
            0
        );
        assert!(random_tensor(DType::F32, &[usize::MAX, 2], &mut Rng::new(0)).is_err());
    }

    #[test]
    fn batch_like_names() {
        let named = |s: &str| DeclaredDim::Named(s.into());
        assert!(batch_like(0, &named("batch_size")));
        assert!(batch_like(0, &named("N")));
        assert!(!batch_like(1, &named("sequence")));
        assert!(batch_like(0, &DeclaredDim::Unknown));
        assert!(!batch_like(2, &DeclaredDim::Unknown));
    }
}
