//! The graph verifier: checks every invariant the rest of kiln assumes of a [`Graph`], so a
//! pass that breaks one is caught where it happens rather than as a wrong number later.

use crate::{Error, Graph, NodeId, Op, Result, TensorType};

/// Checks that `graph` is well formed:
/// - nodes are in topological order (every input id is smaller than the node's own);
/// - input and constant nodes take no inputs, other nodes the arity their op needs;
/// - `graph.inputs` lists exactly the `Input` nodes, each once;
/// - every output exists;
/// - every `Constant` refers to an existing, dense constant whose dtype and shape are the node's type;
/// - every node's stored type is what [`crate::infer::infer`] gives for its inputs' types.
///
/// Errors name the node, as `%12 (name) matmul: ...`.
pub fn verify(graph: &Graph) -> Result<()> {
    let n = graph.nodes.len();
    for (idx, node) in graph.nodes.iter().enumerate() {
        let at = || node_label(graph, NodeId(idx as u32));
        for &i in &node.inputs {
            if i.index() >= idx {
                let why = if i.index() >= n { "does not exist" } else { "is not defined before it" };
                return Err(Error::Graph(format!("{}: input {i} {why}", at())));
            }
        }
        match &node.op {
            Op::Input { .. } | Op::Constant(_) if !node.inputs.is_empty() => {
                return Err(Error::Graph(format!("{}: takes no inputs, has {}", at(), node.inputs.len())));
            }
            Op::Input { .. } => {
                if !graph.inputs.contains(&NodeId(idx as u32)) {
                    return Err(Error::Graph(format!("{}: is not listed in the graph's inputs", at())));
                }
            }
            Op::Constant(c) => {
                let t = graph.consts.get(c.0 as usize).ok_or_else(|| {
                    Error::Graph(format!(
                        "{}: constant #{} does not exist (the graph has {})",
                        at(),
                        c.0,
                        graph.consts.len()
                    ))
                })?;
                let ty = TensorType::new(t.dtype(), t.ir_shape());
                if ty != node.ty {
                    return Err(Error::Graph(format!(
                        "{}: constant #{} is {ty} but the node says {}",
                        at(),
                        c.0,
                        node.ty
                    )));
                }
                if !t.is_dense() {
                    return Err(Error::Graph(format!("{}: constant #{} is not dense", at(), c.0)));
                }
            }
            op => {
                let tys: Vec<&TensorType> = node.inputs.iter().map(|i| graph.ty(*i)).collect();
                // infer checks the arity, dtypes and shapes; its message gets the node's label.
                let ty = crate::infer::infer(op, &tys).map_err(|e| e.context(&at()))?;
                if ty != node.ty {
                    return Err(Error::Graph(format!(
                        "{}: stored type {} differs from the inferred {ty}",
                        at(),
                        node.ty
                    )));
                }
            }
        }
    }
    for (pos, &i) in graph.inputs.iter().enumerate() {
        match graph.nodes.get(i.index()).map(|nd| &nd.op) {
            None => return Err(Error::Graph(format!("graph input #{pos} is {i}, which does not exist"))),
            Some(Op::Input { .. }) => {}
            Some(_) => {
                return Err(Error::Graph(format!(
                    "graph input #{pos} is {}, which is not an input node",
                    node_label(graph, i)
                )));
            }
        }
        if graph.inputs[..pos].contains(&i) {
            return Err(Error::Graph(format!("graph input #{pos}: {i} is listed twice")));
        }
    }
    for (pos, &o) in graph.outputs.iter().enumerate() {
        if o.index() >= n {
            return Err(Error::Graph(format!("graph output #{pos} is {o}, which does not exist")));
        }
    }
    Ok(())
}

/// How errors and listings refer to a node: `%12 (name) matmul`, or `%12 matmul` without a
/// name. An id past the end reads `%12 (missing)`.
pub fn node_label(graph: &Graph, id: NodeId) -> String {
    match graph.nodes.get(id.index()) {
        None => format!("{id} (missing)"),
        Some(node) => match (&node.name, &node.op) {
            (Some(name), op) => format!("{id} ({name}) {}", op.name()),
            (None, Op::Input { name }) => format!("{id} ({name}) input"),
            (None, op) => format!("{id} {}", op.name()),
        },
    }
}

