//! The importer's state while it walks the nodes: the graph being built, what each ONNX value
//! name stands for, and the helpers converters use to read inputs and add ops. Ops whose
//! inputs are all constants are evaluated here (constant folding), which is also how shape
//! computations (`Shape → Gather → Concat → Reshape`) become static.

use crate::proto::NodeProto;
use kiln_ir::{DType, Dim, Error, Graph, HostTensor, NodeId, Op, Result, Storage, TensorType};
use std::collections::HashMap;

/// Constant-folded results larger than this stay as ops (so an `Expand` of a constant does not
/// materialise a huge tensor at import time).
const FOLD_LIMIT: usize = 1 << 22;

/// What an ONNX value name stands for.
#[derive(Clone, Debug)]
pub enum Val {
    /// A node of the graph (an input, a constant or an op).
    Node(NodeId),
    /// A 1-D (or, with `scalar`, 0-D) int64 value some of whose entries are symbolic dims:
    /// what `Shape` yields for a tensor with a symbolic batch. Converters of shape ops keep it
    /// symbolic; anything else needs it as a tensor, which works only when no entry is symbolic.
    Dims { dims: Vec<SymInt>, scalar: bool },
    /// An output a converter does not produce (e.g. MaxPool's indices), with the reason.
    Unavailable(String),
    /// An ONNX sequence: its elements, whose count and order are known at import (sequence
    /// ops only rearrange values, so they are resolved here and leave no trace in the graph).
    Seq(Vec<Val>),
    /// An ONNX optional: its value, or `None` when empty (known at import, like sequences).
    Opt(Option<Box<Val>>),
}

/// One entry of a [`Val::Dims`] shape value: a known integer or a symbolic dim's size.
#[derive(Clone, Debug, PartialEq)]
pub enum SymInt {
    Int(i64),
    Sym(std::sync::Arc<str>),
}

impl SymInt {
    /// The entry for a dim.
    pub fn of_dim(d: &Dim) -> SymInt {
        match d {
            Dim::Fixed(n) => SymInt::Int(*n as i64),
            Dim::Sym(s) => SymInt::Sym(s.clone()),
        }
    }
}

/// The importer's state; converters receive `&mut Ctx`.
pub struct Ctx {
    pub graph: Graph,
    values: HashMap<String, Val>,
    /// The opset of the domain of the node being converted.
    pub opset: i64,
    /// The model's opset for each domain (`""` is ai.onnx), for converters that convert
    /// subgraphs of their own (FlexAttention's modifiers).
    pub(crate) opsets: HashMap<String, i64>,
    /// ONNX graph input names bound to nodes, for `NeedsValue` reporting.
    input_nodes: HashMap<NodeId, String>,
    /// Set when a converter needed the value of a graph input given only at run time.
    pub(crate) needs_value: Option<String>,
    /// Folder of the model file (external data).
    pub model_dir: Option<std::path::PathBuf>,
    /// Nodes added so far by inlining model-local functions (bounded: nested calls multiply).
    pub(crate) inlined: usize,
    /// Nodes whose values are bit patterns of an ONNX low-precision type (float8, int4...),
    /// not numbers: only converters that know these types may read them.
    pub lowp: HashMap<NodeId, kiln_ir::LowpType>,
}

impl Ctx {
    pub(crate) fn new(model_dir: Option<std::path::PathBuf>) -> Ctx {
        Ctx {
            graph: Graph::new(),
            values: HashMap::new(),
            opset: 0,
            opsets: HashMap::new(),
            input_nodes: HashMap::new(),
            needs_value: None,
            model_dir,
            inlined: 0,
            lowp: HashMap::new(),
        }
    }

    /// Binds an ONNX value name.
    pub fn bind(&mut self, name: &str, v: Val) {
        self.values.insert(name.to_string(), v);
    }

    /// Adds a graph input and binds its name.
    pub(crate) fn graph_input(&mut self, name: &str, ty: TensorType) -> NodeId {
        let id = self.graph.input(name, ty);
        self.input_nodes.insert(id, name.to_string());
        self.bind(name, Val::Node(id));
        id
    }

    /// What the value `name` stands for; an error for names no node produced.
    pub fn value(&self, name: &str) -> Result<&Val> {
        self.values
            .get(name)
            .ok_or_else(|| Error::Graph(format!("value '{name}' is used before any node produces it")))
    }

    /// Input `i` of `node` is given (present and not the empty name).
    pub fn has_input(node: &NodeProto, i: usize) -> bool {
        node.input.get(i).is_some_and(|s| !s.is_empty())
    }

    /// Input `i` of `node` as a graph node; errors when absent.
    pub fn input(&mut self, node: &NodeProto, i: usize) -> Result<NodeId> {
        self.opt_input(node, i)?.ok_or_else(|| {
            Error::Graph(format!("{} needs input {i}, which is missing", node.op_type()))
        })
    }

    /// Input `i` of `node` as a graph node, `None` when absent (optional inputs).
    pub fn opt_input(&mut self, node: &NodeProto, i: usize) -> Result<Option<NodeId>> {
        if !Ctx::has_input(node, i) {
            return Ok(None);
        }
        let name = &node.input[i];
        let v = self.value(name)?.clone();
        self.materialise(name, &v).map(Some)
    }

    /// A value as a graph node: symbolic dims become a constant when they are all fixed.
    fn materialise(&mut self, name: &str, v: &Val) -> Result<NodeId> {
        match v {
            Val::Node(id) => Ok(*id),
            Val::Unavailable(why) => Err(Error::Unsupported(format!("value '{name}': {why}"))),
            Val::Seq(_) | Val::Opt(_) => Err(Error::Value(format!(
                "value '{name}' is a sequence or optional, but is used where a tensor is needed"
            ))),
            Val::Dims { dims, scalar } => {
                let fixed: Option<Vec<i64>> =
                    dims.iter().map(|d| if let SymInt::Int(n) = d { Some(*n) } else { None }).collect();
                match fixed {
                    Some(v) => {
                        let shape: &[usize] = if *scalar { &[] } else { &[v.len()] };
                        let t = HostTensor::from_vec(v, shape)?;
                        let id = self.constant(t);
                        self.bind(name, Val::Node(id));
                        Ok(id)
                    }
                    None => Err(Error::Unsupported(format!(
                        "value '{name}' is computed from symbolic dims ({dims:?}) and used as data; import with \
                         concrete input shapes (e.g. `kiln run` with inputs, or ImportOptions::input_shapes)"
                    ))),
                }
            }
        }
    }

    /// Input `i` as a shape value (entries and whether it is 0-D), when it is one or is a
    /// constant int tensor of rank <= 1.
    pub fn dims_input(&self, node: &NodeProto, i: usize) -> Option<(Vec<SymInt>, bool)> {
        if !Ctx::has_input(node, i) {
            return None;
        }
        match self.values.get(&node.input[i])? {
            Val::Dims { dims, scalar } => Some((dims.clone(), *scalar)),
            Val::Node(id) => {
                let t = self.const_of(*id)?;
                if t.shape().len() > 1 || !t.dtype().is_int() {
                    return None;
                }
                let dims = ints_of(t).into_iter().map(SymInt::Int).collect();
                Some((dims, t.shape().is_empty()))
            }
            Val::Unavailable(_) | Val::Seq(_) | Val::Opt(_) => None,
        }
    }

    /// The constant tensor of node `id`, if it is a constant.
    pub fn const_of(&self, id: NodeId) -> Option<&HostTensor> {
        match self.graph.node(id).op {
            Op::Constant(c) => self.graph.consts.get(c.0 as usize).map(|t| &**t),
            _ => None,
        }
    }

    /// Input `i` as a constant tensor (`None` when absent). An input that is not known at
    /// import time is an error that says so (and, for a graph input, the caller can retry
    /// with that input's value specialised).
    pub fn const_input(&mut self, node: &NodeProto, i: usize, what: &str) -> Result<Option<HostTensor>> {
        let Some(id) = self.opt_input(node, i)? else { return Ok(None) };
        if let Some(t) = self.const_of(id) {
            return Ok(Some(t.clone()));
        }
        self.needs_value = self.input_behind(id);
        Err(Error::Unsupported(format!(
            "{} input {i} ({what}, '{}') must be known when the model is imported (a constant or computed from \
             static shapes), but it is only known at run time",
            node.op_type(),
            node.input[i]
        )))
    }

    /// A graph input that `id` is computed from (the first found), if any: fixing its value at
    /// import time may make `id` a constant.
    fn input_behind(&self, id: NodeId) -> Option<String> {
        let mut stack = vec![id];
        let mut seen = std::collections::HashSet::new();
        while let Some(n) = stack.pop() {
            if let Some(name) = self.input_nodes.get(&n) {
                return Some(name.clone());
            }
            if seen.insert(n) {
                stack.extend(self.graph.node(n).inputs.iter().copied());
            }
        }
        None
    }

    /// Input `i` as constant integers (`None` when absent).
    pub fn const_ints(&mut self, node: &NodeProto, i: usize, what: &str) -> Result<Option<Vec<i64>>> {
        let Some(t) = self.const_input(node, i, what)? else { return Ok(None) };
        if !t.dtype().is_int() {
            return Err(Error::DType(format!(
                "{} input {i} ({what}) must be integers, not {}",
                node.op_type(),
                t.dtype()
            )));
        }
        Ok(Some(ints_of(&t)))
    }

    /// Input `i` as constant floats (`None` when absent).
    pub fn const_floats(&mut self, node: &NodeProto, i: usize, what: &str) -> Result<Option<Vec<f64>>> {
        Ok(self.const_input(node, i, what)?.map(|t| t.to_f64_vec()))
    }

    /// Adds a constant node.
    pub fn constant(&mut self, t: HostTensor) -> NodeId {
        self.graph.constant(t)
    }

    /// A scalar constant of `dtype` holding `v` (converted as casts do).
    pub fn scalar(&mut self, dtype: DType, v: f64) -> Result<NodeId> {
        let t = HostTensor::new(Storage::F64(vec![v]), &[])?;
        let t = kiln_cpu::eval(&Op::Cast(dtype), &[&t])?;
        Ok(self.constant(t))
    }

    /// Adds `op` on `inputs`; when every input is a constant the op is evaluated now and its
    /// result added as a constant instead.
    pub fn add(&mut self, op: Op, inputs: &[NodeId]) -> Result<NodeId> {
        let consts: Option<Vec<HostTensor>> = inputs.iter().map(|&i| self.const_of(i).cloned()).collect();
        if let Some(consts) = consts {
            let ty = {
                let tys: Vec<&TensorType> = inputs.iter().map(|&i| self.graph.ty(i)).collect();
                kiln_ir::infer::infer(&op, &tys)?
            };
            // A checked product: inferred dims come from file data and may overflow usize.
            let numel = ty.shape.as_fixed().and_then(|d| d.iter().try_fold(1usize, |a, &n| a.checked_mul(n)));
            if numel.is_some_and(|n| n <= FOLD_LIMIT) {
                let refs: Vec<&HostTensor> = consts.iter().collect();
                let t = kiln_cpu::eval(&op, &refs)?;
                return Ok(self.constant(t));
            }
        }
        self.graph.add(op, inputs)
    }

    /// The type of node `id`.
    pub fn ty(&self, id: NodeId) -> &TensorType {
        self.graph.ty(id)
    }

    /// The dtype of node `id`.
    pub fn dtype(&self, id: NodeId) -> DType {
        self.graph.ty(id).dtype
    }

    /// The rank of node `id`.
    pub fn rank(&self, id: NodeId) -> usize {
        self.graph.ty(id).shape.rank()
    }

    /// The dims of node `id`.
    pub fn dims(&self, id: NodeId) -> Vec<Dim> {
        self.graph.ty(id).shape.0.clone()
    }

    /// The shape of node `id` when all its dims are fixed; otherwise an error naming `op`.
    pub fn fixed_shape(&self, id: NodeId, op: &str) -> Result<Vec<usize>> {
        let s = &self.graph.ty(id).shape;
        s.as_fixed().ok_or_else(|| {
            Error::Unsupported(format!(
                "{op} needs a static input shape here, but it is {s}; import with concrete input shapes"
            ))
        })
    }
}

/// The elements of an integer tensor as i64 (i64 read exactly: INT64_MAX means "to the end"
/// in Slice, which an f64 round trip would change).
pub fn ints_of(t: &HostTensor) -> Vec<i64> {
    t.to_vec::<i64>().unwrap_or_else(|_| t.to_f64_vec().into_iter().map(|x| x as i64).collect())
}

/// One output of a converter: a single node.
pub fn one(id: NodeId) -> Result<Vec<Val>> {
    Ok(vec![Val::Node(id)])
}
