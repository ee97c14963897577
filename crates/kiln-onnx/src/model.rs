//! A loaded ONNX model: the decoded `ModelProto`, where it came from, and what it declares
//! (inputs, outputs, opsets, ops) without importing anything.

use crate::proto::{ModelProto, ValueInfoProto, tensor_shape_proto::dimension::Value as DimValue, type_proto};
use crate::tensor::{dtype_from_onnx, onnx_type_name};
use kiln_ir::{DType, Dim, Error, Result, Shape};
use prost::Message;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Files larger than this are refused before reading (protobuf itself caps messages at 2 GiB;
/// larger models keep their weights in external data files).
const MAX_MODEL_BYTES: u64 = 2 << 30;

/// One dim of a declared input or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeclaredDim {
    /// A fixed size.
    Fixed(usize),
    /// A named symbolic size (`batch`, `sequence`).
    Named(String),
    /// No size given.
    Unknown,
}

/// A graph input or output as the file declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueInfo {
    pub name: String,
    /// The element type, or the reason kiln cannot hold it (e.g. `STRING`, a sequence type).
    pub dtype: std::result::Result<DType, String>,
    /// The dims, `None` when the rank is not declared.
    pub dims: Option<Vec<DeclaredDim>>,
    /// For a sequence or optional value, the declared type of what it holds (`dtype` then says
    /// `sequence`/`optional`): the importer expands these into tensors at import time.
    pub container: Container,
}

/// Whether a declared value holds other values (ONNX sequence and optional types).
#[derive(Clone, Debug, PartialEq)]
pub enum Container {
    /// A tensor, or a type kiln cannot hold (see [`ValueInfo::dtype`]).
    None,
    /// `seq(T)`: a list of values of the element type.
    Sequence(Box<ValueInfo>),
    /// `optional(T)`: a value of the element type, or nothing.
    Optional(Box<ValueInfo>),
}

impl ValueInfo {
    /// The dims as a kiln shape: unknown dims get a symbol named after the value and axis,
    /// so that every unknown dim binds on its own at run time.
    pub fn shape(&self) -> Option<Shape> {
        let dims = self.dims.as_ref()?;
        Some(Shape(
            dims.iter()
                .enumerate()
                .map(|(i, d)| match d {
                    DeclaredDim::Fixed(n) => Dim::Fixed(*n),
                    DeclaredDim::Named(s) => Dim::sym(s),
                    DeclaredDim::Unknown => Dim::sym(&format!("{}.{i}", self.name)),
                })
                .collect(),
        ))
    }

    /// `f32[batch,3,224,224]`-style text for people.
    pub fn describe(&self) -> String {
        let dtype = match &self.dtype {
            Ok(d) => d.name().to_string(),
            Err(e) => e.clone(),
        };
        match &self.dims {
            None => format!("{dtype}[?]"),
            Some(dims) => {
                let d: Vec<String> = dims
                    .iter()
                    .map(|d| match d {
                        DeclaredDim::Fixed(n) => n.to_string(),
                        DeclaredDim::Named(s) => s.clone(),
                        DeclaredDim::Unknown => "?".into(),
                    })
                    .collect();
                format!("{dtype}[{}]", d.join(","))
            }
        }
    }
}

/// A decoded ONNX model.
#[derive(Clone, Debug)]
pub struct OnnxModel {
    pub proto: ModelProto,
    /// The folder the model was read from (external data is looked up there).
    pub dir: Option<PathBuf>,
}

impl OnnxModel {
    /// Reads and decodes the model file at `path`.
    pub fn load(path: &Path) -> Result<OnnxModel> {
        let io = |e: std::io::Error| Error::Io(format!("{}: {e}", path.display()));
        let len = std::fs::metadata(path).map_err(io)?.len();
        if len > MAX_MODEL_BYTES {
            return Err(Error::Value(format!(
                "{}: {len} bytes is larger than an ONNX protobuf can be (2 GiB); keep weights in external data",
                path.display()
            )));
        }
        let bytes = std::fs::read(path).map_err(io)?;
        let mut model = OnnxModel::from_bytes(&bytes).map_err(|e| e.context(&path.display().to_string()))?;
        model.dir = Some(path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(".")));
        Ok(model)
    }

    /// Decodes a model from the bytes of a `.onnx` file.
    pub fn from_bytes(bytes: &[u8]) -> Result<OnnxModel> {
        let proto = ModelProto::decode(bytes)
            .map_err(|e| Error::Value(format!("not a valid ONNX model (protobuf decode failed: {e})")))?;
        if proto.graph.is_none() {
            return Err(Error::Value("not a valid ONNX model: it has no graph".into()));
        }
        Ok(OnnxModel { proto, dir: None })
    }

    fn graph(&self) -> &crate::proto::GraphProto {
        // from_bytes guarantees a graph; the default keeps this total.
        static EMPTY: std::sync::OnceLock<crate::proto::GraphProto> = std::sync::OnceLock::new();
        self.proto.graph.as_ref().unwrap_or_else(|| EMPTY.get_or_init(Default::default))
    }

    /// The opset version imported for each domain (`""` is the default ai.onnx domain).
    pub fn opsets(&self) -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        for o in &self.proto.opset_import {
            let d = o.domain().to_string();
            let d = if d == "ai.onnx" { String::new() } else { d };
            m.insert(d, o.version());
        }
        if self.proto.opset_import.is_empty() {
            // IR version 1-2 models predate opset_import; they are opset 1.
            m.insert(String::new(), 1);
        }
        m
    }

    /// The graph inputs callers provide (initializers listed as inputs are excluded: they have values).
    pub fn inputs(&self) -> Vec<ValueInfo> {
        let g = self.graph();
        let inits: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
        g.input.iter().filter(|v| !inits.contains(v.name())).map(value_info).collect()
    }

    /// The graph outputs.
    pub fn outputs(&self) -> Vec<ValueInfo> {
        self.graph().output.iter().map(value_info).collect()
    }

    /// How often each `domain::OpType` (plain `OpType` for ai.onnx) occurs in the main graph.
    pub fn op_histogram(&self) -> BTreeMap<String, usize> {
        let mut h = BTreeMap::new();
        for n in &self.graph().node {
            *h.entry(op_key(n.domain(), n.op_type())).or_insert(0) += 1;
        }
        h
    }

    /// The ops of the main graph that kiln has no converter for, with their domain opset.
    pub fn unsupported_ops(&self) -> Vec<String> {
        let opsets = self.opsets();
        let local: HashMap<(&str, &str), ()> =
            self.proto.functions.iter().map(|f| ((f.domain(), f.name()), ())).collect();
        let mut out: Vec<String> = self
            .graph()
            .node
            .iter()
            .filter(|n| {
                crate::import::lookup(n.domain(), n.op_type()).is_none()
                    && !local.contains_key(&(n.domain(), n.op_type()))
            })
            .map(|n| {
                let d = if n.domain() == "ai.onnx" { "" } else { n.domain() };
                format!("{} (opset {})", op_key(d, n.op_type()), opsets.get(d).copied().unwrap_or(0))
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// `domain::Op`, or `Op` for the default domain.
pub(crate) fn op_key(domain: &str, op: &str) -> String {
    if domain.is_empty() || domain == "ai.onnx" { op.to_string() } else { format!("{domain}::{op}") }
}

fn value_info(v: &ValueInfoProto) -> ValueInfo {
    type_info(v.name().to_string(), v.r#type.as_ref())
}

/// The declared type `t` of a value named `name` (sequence and optional element types too).
fn type_info(name: String, t: Option<&crate::proto::TypeProto>) -> ValueInfo {
    let elem = |e: &Option<Box<crate::proto::TypeProto>>| Box::new(type_info(name.clone(), e.as_deref()));
    let container = match t.and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::SequenceType(s)) => Container::Sequence(elem(&s.elem_type)),
        Some(type_proto::Value::OptionalType(o)) => Container::Optional(elem(&o.elem_type)),
        _ => Container::None,
    };
    let (dtype, dims) = match t.and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => {
            let dtype = dtype_from_onnx(t.elem_type()).map_err(|_| onnx_type_name(t.elem_type()).to_string());
            let dims = t.shape.as_ref().map(|s| {
                s.dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(DimValue::DimValue(n)) if *n >= 0 => DeclaredDim::Fixed(*n as usize),
                        Some(DimValue::DimParam(p)) if !p.is_empty() => DeclaredDim::Named(p.clone()),
                        _ => DeclaredDim::Unknown,
                    })
                    .collect()
            });
            (dtype, dims)
        }
        Some(type_proto::Value::SequenceType(_)) => (Err("sequence".to_string()), None),
        Some(type_proto::Value::OptionalType(_)) => (Err("optional".to_string()), None),
        Some(type_proto::Value::MapType(_)) => (Err("map".to_string()), None),
        _ => (Err("untyped".to_string()), None),
    };
    ValueInfo { name, dtype, dims, container }
}
