//! Binding a graph's symbolic dims (`batch`, `seq`) to the sizes of concrete inputs, so the
//! scheduler sees fixed shapes. The compiled result is then valid for exactly those sizes
//! (the cache key and, later, guards carry them).

use kiln_ir::{Graph, Node, NodeId, Op, Result, Shape, TensorType};
use std::collections::HashMap;

/// The size of each symbolic dim, read from the input shapes (in `graph.inputs` order).
pub fn bind_dims(graph: &Graph, shapes: &[Vec<usize>]) -> Result<HashMap<String, usize>> {
    let shapes: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    graph.bind_input_dims(&shapes)
}

/// A copy of `graph` with every symbolic dim replaced by its size in `syms` (in input types,
/// Reshape/Expand targets and every inferred type). Graphs without symbolic dims are cloned.
pub fn specialize(graph: &Graph, syms: &HashMap<String, usize>) -> Result<Graph> {
    let has_sym = graph.nodes.iter().any(|n| !n.ty.shape.is_fixed());
    if !has_sym {
        return Ok(graph.clone());
    }
    let fix = |s: &Shape| s.bind(syms, "specialize");
    let mut g = Graph::new();
    g.consts = graph.consts.clone();
    let mut map: Vec<NodeId> = Vec::with_capacity(graph.nodes.len());
    for node in &graph.nodes {
        let new = match &node.op {
            Op::Input { name } => g.input(name, TensorType::new(node.ty.dtype, fix(&node.ty.shape)?)),
            Op::Constant(_) => {
                g.nodes.push(Node { op: node.op.clone(), inputs: vec![], ty: node.ty.clone(), name: None });
                NodeId(g.nodes.len() as u32 - 1)
            }
            op => {
                let op = match op {
                    Op::Reshape(s) => Op::Reshape(fix(s)?),
                    Op::Expand(s) => Op::Expand(fix(s)?),
                    op => op.clone(),
                };
                let args: Vec<NodeId> = node.inputs.iter().map(|i| map[i.index()]).collect();
                g.add(op, &args)?
            }
        };
        g.nodes[new.index()].name = node.name.clone();
        map.push(new);
    }
    // Inputs must keep their binding order even if the source listed them out of node order.
    g.inputs = graph.inputs.iter().map(|i| map[i.index()]).collect();
    g.outputs = graph.outputs.iter().map(|o| map[o.index()]).collect();
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::{DType, Dim, HostTensor, UnaryOp};

    #[test]
    fn symbolic_batch_is_bound_everywhere() -> Result<()> {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("b"), Dim::Fixed(6)])));
        let r = g.add(Op::Reshape(Shape(vec![Dim::sym("b"), Dim::Fixed(2), Dim::Fixed(3)])), &[x])?;
        let y = g.add(Op::Unary(UnaryOp::Neg), &[r])?;
        g.output(y);
        let syms = bind_dims(&g, &[vec![4, 6]])?;
        let s = specialize(&g, &syms)?;
        assert!(s.nodes.iter().all(|n| n.ty.shape.is_fixed()));
        assert_eq!(s.ty(s.outputs[0]).shape, Shape::fixed(&[4, 2, 3]));
        let x = HostTensor::from_vec((0..24).map(|i| i as f32).collect(), &[4, 6])?;
        let (a, b) = (kiln_cpu::run(&g, &[x.clone()])?, kiln_cpu::run(&s, &[x])?);
        assert_eq!(a[0].to_vec::<f32>()?, b[0].to_vec::<f32>()?);
        assert!(bind_dims(&g, &[vec![4, 5]]).is_err());
        assert!(bind_dims(&g, &[]).is_err());
        Ok(())
    }
}
