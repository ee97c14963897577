//! Runs a whole [`Graph`] on the CPU, node by node, through [`crate::eval`]. This is the
//! reference every compiled backend is checked against.

use crate::eval::eval;
use kiln_ir::{Error, Graph, HostTensor, Op, Result, Shape};
use std::collections::HashMap;

/// Binds `inputs` (in `graph.inputs` order) and evaluates the graph, returning its outputs.
/// Input dtypes and shapes are checked against the graph; a symbolic dim binds to the size of
/// its first use and must agree everywhere else. Values are dropped after their last use.
pub fn run(graph: &Graph, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
    if inputs.len() != graph.inputs.len() {
        return Err(Error::Value(format!(
            "the graph takes {} inputs, {} were given",
            graph.inputs.len(),
            inputs.len()
        )));
    }
    for (&id, t) in graph.inputs.iter().zip(inputs) {
        let node = graph.node(id);
        if t.dtype() != node.ty.dtype {
            let name = match &node.op {
                Op::Input { name } => name.as_str(),
                _ => "?",
            };
            return Err(Error::DType(format!("input '{name}' must be {}, got {}", node.ty.dtype, t.dtype())));
        }
    }
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
    let syms = graph.bind_input_dims(&shapes)?;
    let mut values: Vec<Option<HostTensor>> = vec![None; graph.nodes.len()];
    for (&id, t) in graph.inputs.iter().zip(inputs) {
        values[id.index()] = Some(t.clone());
    }

    // Remaining uses of each value, so memory is released as soon as it is dead.
    let mut uses = vec![0usize; graph.nodes.len()];
    for n in &graph.nodes {
        for i in &n.inputs {
            uses[i.index()] += 1;
        }
    }
    for o in &graph.outputs {
        uses[o.index()] += 1;
    }

    for (idx, node) in graph.nodes.iter().enumerate() {
        match &node.op {
            Op::Input { .. } => continue,
            Op::Constant(c) => {
                let t = graph.consts.get(c.0 as usize).ok_or_else(|| {
                    Error::Graph(format!("constant {} does not exist", c.0))
                })?;
                values[idx] = Some((**t).clone());
                continue;
            }
            _ => {}
        }
        let args: Vec<&HostTensor> = node
            .inputs
            .iter()
            .map(|i| values[i.index()].as_ref())
            .collect::<Option<_>>()
            .ok_or_else(|| Error::Graph(format!("node %{idx} reads a value that is not computed")))?;
        let op = bind_op(&node.op, &syms)?;
        let out = eval(&op, &args).map_err(|e| match &node.name {
            Some(n) => e.context(&format!("node %{idx} ({n})")),
            None => e.context(&format!("node %{idx}")),
        })?;
        values[idx] = Some(out);
        for i in &node.inputs {
            uses[i.index()] -= 1;
            if uses[i.index()] == 0 {
                values[i.index()] = None;
            }
        }
    }
    graph
        .outputs
        .iter()
        .map(|o| values[o.index()].clone().ok_or_else(|| Error::Graph(format!("output {o} was not computed"))))
        .collect()
}

/// Replaces symbolic dims in shape attributes (reshape/expand targets) by their bound sizes.
fn bind_op(op: &Op, syms: &HashMap<String, usize>) -> Result<Op> {
    let bind = |s: &Shape| s.bind(syms, &op.name());
    Ok(match op {
        Op::Reshape(s) if !s.is_fixed() => Op::Reshape(bind(s)?),
        Op::Expand(s) if !s.is_fixed() => Op::Expand(bind(s)?),
        _ => op.clone(),
    })
}
