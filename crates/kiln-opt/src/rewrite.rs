//! The one way passes change a graph: rebuild it node by node into a new [`Graph`], keeping an
//! old→new id map (as tract's `ModelPatch`). A pass looks at each source node (its inputs
//! already mapped) and copies it, replaces it by new nodes or by an existing value, or drops
//! it. Inputs keep their order, names and types; outputs follow the map; constants are
//! shared (`Arc`), and only those still used are carried over.

use kiln_ir::{ConstId, Error, Graph, HostTensor, Node, NodeId, Op, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// What a pass does with one source node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Copy the node as it is (with its inputs mapped).
    Copy,
    /// The node's value is this value of the new graph (built by the pass or already there).
    Replace(NodeId),
    /// Leave the node out; a later use of its value is an error.
    Drop,
}

/// A graph being rebuilt from a source graph.
pub struct Rewrite<'a> {
    src: &'a Graph,
    out: Graph,
    map: Vec<Option<NodeId>>,
    consts: HashMap<ConstId, ConstId>,
}

impl<'a> Rewrite<'a> {
    /// Starts a rebuild of `src`: its inputs are added first, in binding order.
    pub fn new(src: &'a Graph) -> Result<Rewrite<'a>> {
        let mut rw = Rewrite {
            src,
            out: Graph::new(),
            map: vec![None; src.nodes.len()],
            consts: HashMap::new(),
        };
        for &i in &src.inputs {
            let node = src
                .nodes
                .get(i.index())
                .ok_or_else(|| Error::Graph(format!("rewrite: graph input {i} does not exist")))?;
            let Op::Input { name } = &node.op else {
                return Err(Error::Graph(format!(
                    "rewrite: graph input {i} is a {} node",
                    node.op.name()
                )));
            };
            if rw.map[i.index()].is_some() {
                return Err(Error::Graph(format!(
                    "rewrite: graph input {i} is listed twice"
                )));
            }
            let id = rw.out.input(name, node.ty.clone());
            rw.out.nodes[id.index()].name = node.name.clone();
            rw.map[i.index()] = Some(id);
        }
        Ok(rw)
    }

    /// The graph being rewritten.
    pub fn src(&self) -> &'a Graph {
        self.src
    }

    /// The graph built so far.
    pub fn graph(&self) -> &Graph {
        &self.out
    }

    /// The new id of the source value `old`; an error when it was dropped or is not built yet.
    pub fn mapped(&self, old: NodeId) -> Result<NodeId> {
        self.map.get(old.index()).copied().flatten().ok_or_else(|| {
            Error::Graph(format!(
                "rewrite: {old} is used but has no value in the rewritten graph"
            ))
        })
    }

    /// The new ids of `node`'s inputs.
    pub fn args(&self, node: &Node) -> Result<Vec<NodeId>> {
        node.inputs.iter().map(|&i| self.mapped(i)).collect()
    }

    /// Adds `op` on values of the new graph (type inferred).
    pub fn add(&mut self, op: Op, inputs: &[NodeId]) -> Result<NodeId> {
        self.out.add(op, inputs)
    }

    /// Adds a new constant (made dense).
    pub fn constant(&mut self, value: HostTensor) -> NodeId {
        self.out.constant(value)
    }

    /// Adds a constant node for a tensor already shared elsewhere (not copied).
    pub fn constant_shared(&mut self, value: Arc<HostTensor>) -> NodeId {
        self.out.constant_shared(value)
    }

    /// The tensor of a new-graph value when it is a constant node.
    pub fn const_value(&self, id: NodeId) -> Option<&Arc<HostTensor>> {
        match self.out.nodes.get(id.index())?.op {
            Op::Constant(c) => self.out.consts.get(c.0 as usize),
            _ => None,
        }
    }

    /// Copies source node `old` with its inputs mapped; a constant keeps sharing its tensor
    /// (two nodes of one source constant share one new constant).
    pub fn copy(&mut self, old: NodeId) -> Result<NodeId> {
        let node = self
            .src
            .nodes
            .get(old.index())
            .ok_or_else(|| Error::Graph(format!("rewrite: {old} does not exist")))?;
        let id = match &node.op {
            Op::Input { .. } => self.mapped(old)?,
            Op::Constant(c) => {
                let new_c = match self.consts.get(c) {
                    Some(&n) => n,
                    None => {
                        let t = self.src.consts.get(c.0 as usize).ok_or_else(|| {
                            Error::Graph(format!(
                                "rewrite: {old} refers to missing constant #{}",
                                c.0
                            ))
                        })?;
                        let n = ConstId(self.out.consts.len() as u32);
                        self.out.consts.push(t.clone());
                        self.consts.insert(*c, n);
                        n
                    }
                };
                self.out.nodes.push(Node {
                    op: Op::Constant(new_c),
                    inputs: vec![],
                    ty: node.ty.clone(),
                    name: None,
                });
                NodeId(self.out.nodes.len() as u32 - 1)
            }
            op => {
                let args = self.args(node)?;
                self.out.add(op.clone(), &args)?
            }
        };
        Ok(id)
    }

    /// Runs `f` on every source node in order (graph inputs are already mapped and skipped)
    /// and applies its [`Step`]; then maps the outputs. A node that replaces a named node and
    /// has no name of its own takes that name.
    pub fn run(
        mut self,
        mut f: impl FnMut(&mut Rewrite<'a>, NodeId, &'a Node) -> Result<Step>,
    ) -> Result<Graph> {
        let src = self.src;
        for (idx, node) in src.nodes.iter().enumerate() {
            let old = NodeId(idx as u32);
            if self.map[idx].is_some() {
                continue;
            }
            if let Op::Input { .. } = node.op {
                return Err(Error::Graph(format!(
                    "rewrite: input node {old} is not in the graph's inputs"
                )));
            }
            let before = self.out.nodes.len();
            let new = match f(&mut self, old, node)? {
                Step::Drop => continue,
                Step::Copy => self.copy(old)?,
                Step::Replace(id) => {
                    if id.index() >= self.out.nodes.len() {
                        return Err(Error::Graph(format!(
                            "rewrite: {old} replaced by missing {id}"
                        )));
                    }
                    id
                }
            };
            if new.index() >= before && self.out.nodes[new.index()].name.is_none() {
                self.out.nodes[new.index()].name = node.name.clone();
            }
            self.map[idx] = Some(new);
        }
        for &o in &src.outputs {
            let id = self
                .mapped(o)
                .map_err(|e| e.context("rewrite: graph output"))?;
            self.out.output(id);
        }
        Ok(self.out)
    }
}

/// How many times each source value is read (by nodes and as graph outputs).
pub fn use_counts(graph: &Graph) -> Vec<usize> {
    let mut uses = vec![0usize; graph.nodes.len()];
    for n in &graph.nodes {
        for i in &n.inputs {
            if let Some(u) = uses.get_mut(i.index()) {
                *u += 1;
            }
        }
    }
    for o in &graph.outputs {
        if let Some(u) = uses.get_mut(o.index()) {
            *u += 1;
        }
    }
    uses
}
