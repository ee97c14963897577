//! Layout choice for constant GEMM operands: a matmul whose right-hand side is a strided view
//! of a constant (a `Linear`'s weight `[out, in]` used as its transpose) gets a row-major copy
//! of that view instead, made once here. The GEMM packs a row-major right-hand side with
//! vector loads; a transposed one element by element, which measured as slow as the
//! multiply itself for bert-base's `[128, 768] @ [768, 768]` on two cores. This is the weight
//! "prepacking" of ONNX Runtime and Inductor's freezing: it trades a second copy of those
//! weights for speed on every run. Skipped when the backend packs the weights itself from any
//! layout ([`crate::OptOptions::packs_weights`]: kiln-cpu's GEMM on AVX2 CPUs).

use super::Pass;
use crate::rewrite::{Rewrite, Step};
use kiln_ir::{Graph, HostTensor, NodeId, Op, Result};
use std::collections::HashMap;

/// Gives matmuls row-major constant right-hand sides (see the module doc).
pub struct Layout;

impl Pass for Layout {
    fn name(&self) -> &'static str {
        "layout"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        // One dense copy per view, however many matmuls read it (tied weights).
        let mut packed: HashMap<NodeId, NodeId> = HashMap::new();
        let mut bytes = 0usize;
        let out = Rewrite::new(graph)?.run(|rw, _old, node| {
            let (Op::MatMul, &[a, b]) = (&node.op, rw.args(node)?.as_slice()) else {
                return Ok(Step::Copy);
            };
            let dense = match packed.get(&b) {
                Some(&d) => d,
                None => {
                    let Some(value) = const_view(rw.graph(), b)? else {
                        return Ok(Step::Copy);
                    };
                    let rank = value.layout.rank();
                    if rank < 2 || value.layout.strides[rank - 1] == 1 || value.numel() == 0 {
                        return Ok(Step::Copy);
                    }
                    let value = crate::memo::derived("layout", &[&value], &[], || Ok(value.contiguous()))?;
                    bytes += value.numel() * value.dtype().size_of();
                    let d = rw.constant(value);
                    packed.insert(b, d);
                    d
                }
            };
            Ok(Step::Replace(rw.add(Op::MatMul, &[a, dense])?))
        })?;
        if !packed.is_empty() {
            tracing::info!(
                target: "kiln::graph",
                "layout: {} matmul weights stored row-major ({:.1} MB)",
                packed.len(),
                bytes as f64 / 1e6
            );
        }
        Ok(out)
    }
}

/// The value of `id` when it is a constant seen through views only (no arithmetic), as a
/// strided view of the constant's storage; `None` when anything else is in the way.
pub(crate) fn const_view(g: &Graph, id: NodeId) -> Result<Option<HostTensor>> {
    let node = g.node(id);
    match &node.op {
        Op::Constant(c) => Ok(g.consts.get(c.0 as usize).map(|t| HostTensor::clone(t))),
        op if op.is_view() && node.inputs.len() == 1 => {
            let Some(src) = const_view(g, node.inputs[0])? else {
                return Ok(None);
            };
            // Views only touch the layout, so this costs no copy of the weight.
            Ok(Some(kiln_cpu::eval(op, &[&src])?))
        }
        _ => Ok(None),
    }
}
