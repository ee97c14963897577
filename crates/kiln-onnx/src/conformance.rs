//! Runs ONNX backend test cases (a folder with `model.onnx` and `test_data_set_*/{input,output}_N.pb`)
//! through the importer and the reference interpreter, and compares with the expected outputs
//! as ONNX's own backend runner does: same count, shape and dtype, then
//! `|out - ref| <= atol + rtol * |ref|` elementwise, NaN equal to NaN.

use crate::proto::TensorProto;
use crate::tensor::tensor_from_proto;
use crate::import::{InputValue, OutputKind};
use crate::model::{Container, ValueInfo};
use crate::{OnnxModel, import_for_values};
use kiln_ir::{Error, HostTensor, Result};
use prost::Message;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The outcome of one case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Every output matched.
    Pass,
    /// kiln produced a wrong answer (or crashed): a bug.
    Fail,
    /// kiln refused the case with an error saying why (unsupported op, attribute, dtype...).
    Unsupported,
}

impl Status {
    /// `pass`, `fail` or `unsupported`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Unsupported => "unsupported",
        }
    }
}

/// The result of one case, as written to the JSON-lines report.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub case: String,
    pub kind: String,
    pub op: String,
    pub status: Status,
    pub message: String,
}

impl CaseResult {
    /// One JSON object (a line of the report).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "case": self.case, "kind": self.kind, "op": self.op,
            "status": self.status.name(), "message": self.message,
        })
        .to_string()
    }
}

/// Every case folder (one holding `model.onnx`) under `root`, sorted by path.
pub fn discover(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir.join("model.onnx").is_file() {
            out.push(dir);
            continue;
        }
        let entries = std::fs::read_dir(&dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
        for e in entries.flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Tolerances and labels of a case, from its `case.json` when present (written by
/// `scripts/onnx_cases.py`), else ONNX's defaults.
struct CaseInfo {
    kind: String,
    op: String,
    rtol: f64,
    atol: f64,
}

fn case_info(dir: &Path) -> CaseInfo {
    let kind = dir
        .parent()
        .and_then(|p| p.file_name())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut info = CaseInfo { kind, op: String::new(), rtol: 1e-3, atol: 1e-7 };
    if let Ok(text) = std::fs::read_to_string(dir.join("case.json"))
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
    {
        if let Some(k) = v["kind"].as_str() {
            info.kind = k.to_string();
        }
        if let Some(o) = v["op"].as_str() {
            info.op = o.to_string();
        }
        info.rtol = v["rtol"].as_f64().unwrap_or(info.rtol);
        info.atol = v["atol"].as_f64().unwrap_or(info.atol);
    }
    info
}

/// Runs a graph on its bound inputs: the reference interpreter, or a compiled backend under test.
pub type GraphRunner<'a> = &'a (dyn Fn(&kiln_ir::Graph, &[HostTensor]) -> Result<Vec<HostTensor>> + Sync);

/// Runs the case in `dir` on the reference interpreter. Never panics: a panic inside kiln is
/// caught and reported as a failure.
pub fn run_case(dir: &Path) -> CaseResult {
    run_case_with(dir, &|g, xs| kiln_cpu::run(g, xs))
}

/// Runs the case in `dir` with `runner` executing the imported graph (so a compiler is held to
/// the same expected outputs). Never panics.
pub fn run_case_with(dir: &Path, runner: GraphRunner) -> CaseResult {
    let info = case_info(dir);
    let case = dir.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_case_inner(dir, &info, runner)));
    let (status, message) = match outcome {
        Ok(Ok(specialised)) if specialised.is_empty() => (Status::Pass, String::new()),
        Ok(Ok(specialised)) => {
            (Status::Pass, format!("with inputs fixed at import: {}", specialised.join(", ")))
        }
        Ok(Err(CaseError::Mismatch(m))) => (Status::Fail, m),
        Ok(Err(CaseError::Refused(m))) => (Status::Unsupported, m),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            (Status::Fail, format!("panic: {msg}"))
        }
    };
    CaseResult { case, kind: info.kind, op: info.op, status, message }
}

enum CaseError {
    Mismatch(String),
    Refused(String),
}

impl From<Error> for CaseError {
    fn from(e: Error) -> Self {
        CaseError::Refused(e.to_string())
    }
}

fn read_pb(path: &Path) -> Result<HostTensor> {
    let bytes = std::fs::read(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    let t = TensorProto::decode(bytes.as_slice())
        .map_err(|e| Error::Value(format!("{}: not a TensorProto ({e})", path.display())))?;
    // Low-precision tensors (float8, int4...) read as kiln holds them: their patterns.
    crate::lowp::tensor_from_proto_lowp(&t, None).map(|(t, _)| t)
}

/// The values of a low-precision output (or expected output) `t` of type `lt`, for comparing
/// by value as ONNX's runner does.
fn decode_lowp(t: &HostTensor, lt: Option<kiln_ir::LowpType>) -> Result<HostTensor> {
    match lt {
        Some(from) => kiln_cpu::eval(&kiln_ir::Op::DecodeLowp { from }, &[t]),
        None => Ok(t.clone()),
    }
}

/// `SequenceProto` of ONNX's `onnx-data.proto` (test data of sequence values), which the
/// vendored `onnx.proto` does not define; fields kiln does not read are skipped.
#[derive(Clone, PartialEq, prost::Message)]
struct SequenceProto {
    #[prost(int32, optional, tag = "2")]
    elem_type: Option<i32>,
    #[prost(message, repeated, tag = "3")]
    tensor_values: Vec<TensorProto>,
    #[prost(message, repeated, tag = "5")]
    sequence_values: Vec<SequenceProto>,
    #[prost(message, repeated, tag = "7")]
    optional_values: Vec<OptionalProto>,
}

/// `OptionalProto` of `onnx-data.proto` (test data of optional values).
#[derive(Clone, PartialEq, prost::Message)]
struct OptionalProto {
    #[prost(int32, optional, tag = "2")]
    elem_type: Option<i32>,
    #[prost(message, optional, tag = "3")]
    tensor_value: Option<TensorProto>,
    #[prost(message, optional, boxed, tag = "5")]
    sequence_value: Option<Box<SequenceProto>>,
    #[prost(message, optional, boxed, tag = "7")]
    optional_value: Option<Box<OptionalProto>>,
}

/// Reads a test-data file as the type `info` declares (`None`: a tensor): a `TensorProto`,
/// `SequenceProto` or `OptionalProto`, as ONNX's backend runner does.
fn read_value(path: &Path, info: Option<&ValueInfo>) -> Result<InputValue> {
    let bad = |what: &str, e: prost::DecodeError| Error::Value(format!("{}: not a {what} ({e})", path.display()));
    match info.map(|i| &i.container) {
        None | Some(Container::None) => read_pb(path).map(InputValue::Tensor),
        Some(Container::Sequence(_)) => {
            let bytes = std::fs::read(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
            let s = SequenceProto::decode(bytes.as_slice()).map_err(|e| bad("SequenceProto", e))?;
            sequence_value(&s, path)
        }
        Some(Container::Optional(_)) => {
            let bytes = std::fs::read(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
            let o = OptionalProto::decode(bytes.as_slice()).map_err(|e| bad("OptionalProto", e))?;
            optional_value(&o, path)
        }
    }
}

fn sequence_value(s: &SequenceProto, path: &Path) -> Result<InputValue> {
    if !s.sequence_values.is_empty() || !s.optional_values.is_empty() || !matches!(s.elem_type, None | Some(0 | 1)) {
        return Err(Error::Unsupported(format!("{}: a sequence of non-tensors", path.display())));
    }
    let ts = s.tensor_values.iter().map(|t| tensor_from_proto(t, None)).collect::<Result<Vec<_>>>()?;
    Ok(InputValue::Sequence(ts))
}

fn optional_value(o: &OptionalProto, path: &Path) -> Result<InputValue> {
    let missing = || Error::Value(format!("{}: an OptionalProto without the value its elem_type names", path.display()));
    let v = match o.elem_type.unwrap_or(0) {
        0 => None,
        1 => Some(InputValue::Tensor(tensor_from_proto(o.tensor_value.as_ref().ok_or_else(missing)?, None)?)),
        3 => Some(sequence_value(o.sequence_value.as_deref().ok_or_else(missing)?, path)?),
        t => return Err(Error::Unsupported(format!("{}: an optional of ONNX data type {t}", path.display()))),
    };
    Ok(InputValue::Optional(v.map(Box::new)))
}

/// Compares the graph outputs that ONNX output `kind` became (from `got[*next]` on; `next`
/// moves past them) with the expected value.
fn compare_value(
    kind: &OutputKind,
    want: &InputValue,
    got: &[HostTensor],
    next: &mut usize,
    rtol: f64,
    atol: f64,
) -> std::result::Result<(), String> {
    let mut take = |w: &HostTensor| -> std::result::Result<(), String> {
        let g = got.get(*next).ok_or_else(|| "kiln's graph has fewer outputs than expected".to_string())?;
        *next += 1;
        compare(g, w, rtol, atol)
    };
    match (kind, want) {
        (OutputKind::Optional(None), InputValue::Optional(None)) => Ok(()),
        (OutputKind::Optional(None), _) => Err("kiln's optional is empty, but a value is expected".into()),
        (_, InputValue::Optional(None)) => Err("an empty optional is expected, but kiln has a value".into()),
        (OutputKind::Optional(Some(k)), InputValue::Optional(Some(w))) => compare_value(k, w, got, next, rtol, atol),
        (OutputKind::Optional(Some(k)), w) => compare_value(k, w, got, next, rtol, atol),
        (k, InputValue::Optional(Some(w))) => compare_value(k, w, got, next, rtol, atol),
        (OutputKind::Tensor, InputValue::Tensor(w)) => take(w),
        (OutputKind::Sequence(n), InputValue::Sequence(ws)) => {
            if *n != ws.len() {
                return Err(format!("a sequence of {n} elements, expected {}", ws.len()));
            }
            for (i, w) in ws.iter().enumerate() {
                take(w).map_err(|m| format!("element {i}: {m}"))?;
            }
            Ok(())
        }
        (OutputKind::Tensor, InputValue::Sequence(_)) => Err("a tensor, expected a sequence".into()),
        (OutputKind::Sequence(_), InputValue::Tensor(_)) => Err("a sequence, expected a tensor".into()),
    }
}

fn data_sets(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_")))
        .collect();
    sets.sort();
    Ok(sets)
}

/// Runs every data set of the case; returns the inputs that had to be fixed at import time.
fn run_case_inner(dir: &Path, info: &CaseInfo, runner: GraphRunner) -> std::result::Result<Vec<String>, CaseError> {
    let model = OnnxModel::load(&dir.join("model.onnx"))?;
    let g = model.proto.graph.as_ref().ok_or_else(|| Error::Value("no graph".into()))?;
    let declared_inputs: Vec<String> = g.input.iter().map(|v| v.name().to_string()).collect();
    let outputs = model.outputs();
    for o in &outputs {
        let lowp = g.output.iter().find(|v| v.name() == o.name).and_then(crate::lowp::declared_lowp);
        if let (Err(t), Container::None, None) = (&o.dtype, &o.container, lowp) {
            return Err(CaseError::Refused(format!("output '{}' has type {t}, which kiln does not support", o.name)));
        }
    }
    let sets = data_sets(dir)?;
    if sets.is_empty() {
        return Err(CaseError::Refused("the case has no test_data_set_*".into()));
    }
    let declared: HashMap<String, ValueInfo> = model.inputs().into_iter().map(|v| (v.name.clone(), v)).collect();
    let mut specialised = Vec::new();
    for set in sets {
        let mut inputs = HashMap::new();
        for (j, name) in declared_inputs.iter().enumerate() {
            let p = set.join(format!("input_{j}.pb"));
            if p.exists() {
                inputs.insert(name.clone(), read_value(&p, declared.get(name))?);
            }
        }
        let (imported, bound) = import_for_values(&model, &inputs).map_err(|e| CaseError::Refused(e.to_string()))?;
        let got = runner(&imported.graph, &bound)?;
        let got = (got.iter().enumerate())
            .map(|(i, t)| decode_lowp(t, imported.output_types.get(i).copied().flatten()))
            .collect::<Result<Vec<_>>>()?;
        let mut next = 0;
        for (k, (kind, out)) in imported.output_kinds.iter().zip(&outputs).enumerate() {
            let mut want = read_value(&set.join(format!("output_{k}.pb")), Some(out))?;
            if let (InputValue::Tensor(w), Some(lt)) = (&want, g.output.get(k).and_then(crate::lowp::declared_lowp)) {
                want = InputValue::Tensor(decode_lowp(w, Some(lt))?);
            }
            compare_value(kind, &want, &got, &mut next, info.rtol, info.atol)
                .map_err(|m| CaseError::Mismatch(format!("{}: output '{}': {m}", set.display(), out.name)))?;
        }
        specialised.extend(imported.specialised);
    }
    specialised.sort();
    specialised.dedup();
    Ok(specialised)
}

/// Compares `got` with `want` as ONNX's backend runner does; the error says what differs.
pub fn compare(got: &HostTensor, want: &HostTensor, rtol: f64, atol: f64) -> std::result::Result<(), String> {
    if got.shape() != want.shape() {
        return Err(format!("shape {:?}, expected {:?}", got.shape(), want.shape()));
    }
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {}, expected {}", got.dtype(), want.dtype()));
    }
    let rtol = if got.dtype() == kiln_ir::DType::BF16 { rtol.max(1.0 / 64.0) } else { rtol };
    let exact = !got.dtype().is_float();
    let (a, b) = (got.to_f64_vec(), want.to_f64_vec());
    let mut bad = 0;
    let mut first = None;
    for (i, (&x, &y)) in a.iter().zip(&b).enumerate() {
        let ok = if exact {
            x == y
        } else if x.is_nan() || y.is_nan() {
            x.is_nan() && y.is_nan()
        } else if x.is_infinite() || y.is_infinite() {
            x == y
        } else {
            (x - y).abs() <= atol + rtol * y.abs()
        };
        if !ok {
            bad += 1;
            first.get_or_insert((i, x, y));
        }
    }
    match first {
        None => Ok(()),
        Some((i, x, y)) => Err(format!("{bad} of {} elements differ; first at {i}: got {x}, expected {y}", a.len())),
    }
}
