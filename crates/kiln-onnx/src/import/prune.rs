//! Drops what the outputs do not need: nodes left behind by constant folding, unused
//! initializers and dead branches. Graph inputs are all kept (callers bind them by position).

use kiln_ir::{Error, Graph, NodeId, Op, Result};

/// A copy of `g` with only the nodes that graph outputs depend on (and every input).
pub fn prune(g: &Graph) -> Result<Graph> {
    let mut live = vec![false; g.nodes.len()];
    for o in &g.outputs {
        live[o.index()] = true;
    }
    for i in &g.inputs {
        live[i.index()] = true;
    }
    // Nodes are topologically ordered, so one backward sweep finds everything needed.
    for idx in (0..g.nodes.len()).rev() {
        if live[idx] {
            for i in &g.nodes[idx].inputs {
                live[i.index()] = true;
            }
        }
    }
    let mut out = Graph::new();
    let mut map: Vec<Option<NodeId>> = vec![None; g.nodes.len()];
    for (idx, n) in g.nodes.iter().enumerate() {
        if !live[idx] {
            continue;
        }
        let new = match &n.op {
            Op::Input { name } => out.input(name, n.ty.clone()),
            Op::Constant(c) => out.constant_shared(g.consts[c.0 as usize].clone()),
            op => {
                let inputs = n.inputs.iter().map(|i| mapped(&map, *i)).collect::<Result<Vec<NodeId>>>()?;
                out.add_named(op.clone(), &inputs, n.name.clone())?
            }
        };
        map[idx] = Some(new);
    }
    for o in &g.outputs {
        out.output(mapped(&map, *o)?);
    }
    Ok(out)
}

/// Where node `id` went in the pruned graph; an error (not a panic) if the graph broke the
/// topological order that makes every needed node come first.
fn mapped(map: &[Option<NodeId>], id: NodeId) -> Result<NodeId> {
    map.get(id.index())
        .copied()
        .flatten()
        .ok_or_else(|| Error::Graph(format!("node {id} is used before it is defined (not in topological order)")))
}
