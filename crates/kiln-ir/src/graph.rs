//! The graph: a typed SSA DAG of [`Node`]s in topological order, with constants held once.

use crate::data::HostTensor;
use crate::{ConstId, DType, Dim, Error, Op, Result, Shape};
use std::fmt;
use std::sync::Arc;

/// Index of a node (and of the one value it yields) in [`Graph::nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index into [`Graph::nodes`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// The dtype and shape of a value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorType {
    /// A type with the given dtype and shape.
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorType {
        TensorType { dtype, shape: shape.into() }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

/// One operation applied to earlier nodes' values, with its inferred result type.
#[derive(Clone, Debug)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<NodeId>,
    pub ty: TensorType,
    /// A name for people (from the model's source or file); never affects meaning or hash.
    pub name: Option<String>,
}

/// A computation: nodes in topological order (every input id is smaller than the node's
/// own), the input nodes callers bind in order, the outputs, and the constants.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub inputs: Vec<NodeId>,
    pub outputs: Vec<NodeId>,
    /// Constant tensors (dense), each held once and shared by `Op::Constant` nodes.
    pub consts: Vec<Arc<HostTensor>>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// The node `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// The type of the value `id`.
    pub fn ty(&self, id: NodeId) -> &TensorType {
        &self.nodes[id.index()].ty
    }

    /// Adds a graph input of type `ty`, bound by callers in the order inputs are added.
    pub fn input(&mut self, name: &str, ty: TensorType) -> NodeId {
        let id = self.push(Node { op: Op::Input { name: name.to_string() }, inputs: vec![], ty, name: None });
        self.inputs.push(id);
        id
    }

    /// Adds a constant; the tensor is made dense and stored once in [`Graph::consts`].
    pub fn constant(&mut self, value: HostTensor) -> NodeId {
        self.constant_shared(Arc::new(value.contiguous()))
    }

    /// Adds a node for an already-registered constant tensor (shared, not copied).
    pub fn constant_shared(&mut self, value: Arc<HostTensor>) -> NodeId {
        let value = if value.is_dense() { value } else { Arc::new(value.contiguous()) };
        let ty = TensorType::new(value.dtype(), value.ir_shape());
        let cid = ConstId(self.consts.len() as u32);
        self.consts.push(value);
        self.push(Node { op: Op::Constant(cid), inputs: vec![], ty, name: None })
    }

    /// Adds `op` applied to `inputs`, inferring its type. Errors name the op and input types.
    pub fn add(&mut self, op: Op, inputs: &[NodeId]) -> Result<NodeId> {
        self.add_named(op, inputs, None)
    }

    /// As [`Graph::add`], with a name for people.
    pub fn add_named(&mut self, op: Op, inputs: &[NodeId], name: Option<String>) -> Result<NodeId> {
        if matches!(op, Op::Input { .. } | Op::Constant(_)) {
            return Err(Error::Graph(format!(
                "{} nodes are added with Graph::input / Graph::constant",
                op.name()
            )));
        }
        let mut tys = Vec::with_capacity(inputs.len());
        for &i in inputs {
            if i.index() >= self.nodes.len() {
                return Err(Error::Graph(format!("{}: input {i} does not exist", op.name())));
            }
            tys.push(&self.nodes[i.index()].ty);
        }
        let ty = crate::infer::infer(&op, &tys)?;
        Ok(self.push(Node { op, inputs: inputs.to_vec(), ty, name }))
    }

    /// Marks `id` as an output (in order).
    pub fn output(&mut self, id: NodeId) {
        self.outputs.push(id);
    }

    fn push(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        NodeId(self.nodes.len() as u32 - 1)
    }

    /// Nodes that compute (neither inputs nor constants): what eager execution launches per run.
    pub fn compute_nodes(&self) -> usize {
        self.nodes.iter().filter(|n| !matches!(n.op, Op::Input { .. } | Op::Constant(_))).count()
    }

    /// The size of each symbolic dim, read from concrete input shapes (in [`Graph::inputs`]
    /// order): ranks and fixed dims must match, and a symbol seen twice must agree. Errors name
    /// the input and both shapes.
    pub fn bind_input_dims(&self, shapes: &[&[usize]]) -> Result<std::collections::HashMap<String, usize>> {
        if shapes.len() != self.inputs.len() {
            return Err(Error::Value(format!("the graph takes {} inputs, {} were given", self.inputs.len(), shapes.len())));
        }
        let mut syms = std::collections::HashMap::new();
        for (&id, &dims) in self.inputs.iter().zip(shapes) {
            let node = self.node(id);
            let name = match &node.op {
                Op::Input { name } => name.as_str(),
                _ => "?",
            };
            let want = &node.ty.shape;
            let bad = || Error::Shape(format!("input '{name}' must have shape {want}, got {dims:?}"));
            if want.rank() != dims.len() {
                return Err(bad());
            }
            for (d, &n) in want.0.iter().zip(dims) {
                match d {
                    Dim::Fixed(m) if *m != n => return Err(bad()),
                    Dim::Fixed(_) => {}
                    Dim::Sym(s) => {
                        let bound = *syms.entry(s.to_string()).or_insert(n);
                        if bound != n {
                            return Err(Error::Shape(format!(
                                "input '{name}': dim {s} is {n} here but {bound} in an earlier input"
                            )));
                        }
                    }
                }
            }
        }
        Ok(syms)
    }

    /// Number of elements of all constants (the parameter count of a traced model).
    pub fn const_numel(&self) -> usize {
        self.consts.iter().map(|c| c.numel()).sum()
    }
}
