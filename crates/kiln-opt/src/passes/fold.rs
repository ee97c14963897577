//! Constant folding: a node whose inputs are all constants is evaluated once, here, by the
//! reference CPU kernels and becomes a constant.

use super::Pass;
use crate::rewrite::{Rewrite, Step};
use kiln_ir::{Graph, HostTensor, Op, Result, TensorType};

/// Results up to this many elements are always folded, whatever their inputs' size.
const SMALL: usize = 64;

/// Evaluates nodes of constant inputs into constants, unless the result is much bigger than
/// its inputs (an Expand of a scalar stays: it is a free view at run time, a big constant is not)
/// or is a view of more than a few elements (also free at run time).
pub struct Fold;

impl Pass for Fold {
    fn name(&self) -> &'static str {
        "fold"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        Rewrite::new(graph)?.run(|rw, _old, node| {
            if matches!(node.op, Op::Constant(_)) {
                return Ok(Step::Copy);
            }
            let args = rw.args(node)?;
            let Some(vals) = args
                .iter()
                .map(|&a| rw.const_value(a).cloned())
                .collect::<Option<Vec<_>>>()
            else {
                return Ok(Step::Copy);
            };
            let biggest = vals.iter().map(|v| v.numel()).max().unwrap_or(0);
            if let Some(n) = node.ty.shape.numel()
                && n > SMALL
                && (n > biggest || node.op.is_view())
            {
                // Views (a transposed weight, say) are free index expressions at run time;
                // folding them would copy every weight at each compile.
                return Ok(Step::Copy);
            }
            let refs: Vec<&HostTensor> = vals.iter().map(|v| v.as_ref()).collect();
            // A kernel error (integer division by zero, an index out of range) is the graph's
            // behaviour at run time: the node stays and reports it then.
            let Ok(value) = kiln_cpu::eval(&node.op, &refs) else {
                return Ok(Step::Copy);
            };
            if TensorType::new(value.dtype(), value.ir_shape()) != node.ty {
                return Ok(Step::Copy);
            }
            Ok(Step::Replace(rw.constant(value)))
        })
    }
}
