//! BatchNorm folding: an inference BatchNorm (constant parameters) is an affine map per
//! channel, `y * s + t` with `s = scale / sqrt(var + eps)` and `t = bias - mean * s`, so it
//! becomes one multiply and one add by `[C, 1, ..]` constants (computed in f64, stored in the
//! value's dtype). The scheduler fuses those into the producing conv's or matmul's epilogue,
//! where they cost one FMA per output element in a pass over the output that runs anyway.
//!
//! A constant conv bias read only by the BatchNorm is folded into `t` (`t += b * s`) and
//! dropped from the conv, so the conv's result needs no separate bias pass either.
//!
//! The weights themselves are left alone, and shared with the source graph: rescaling them
//! (ORT's way) writes a second copy of every conv weight on every compile, warm starts too.
//! On the 2-core VM that was 130-400 ms of ResNet-50's warm start, nearly all of it the
//! kernel backing 100 MB of fresh pages; this form costs O(channels).

use super::Pass;
use crate::rewrite::{Rewrite, Step, use_counts};
use kiln_ir::{BinaryOp, DType, Element, Graph, HostTensor, NodeId, Op, Result};
use std::collections::HashMap;

/// Turns BatchNorm with constant parameters into a per-channel multiply-add.
pub struct BnFold;

/// A BatchNorm to rewrite.
#[derive(Clone, Copy)]
struct Fold {
    /// The conv whose constant bias moves into the shift (read only by the BatchNorm).
    conv_bias: Option<NodeId>,
}

impl Pass for BnFold {
    fn name(&self) -> &'static str {
        "bn_fold"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        let plan = find(graph);
        let dropped: Vec<NodeId> = plan.values().filter_map(|f| f.conv_bias).collect();
        Rewrite::new(graph)?.run(|rw, old, node| {
            if dropped.contains(&old) {
                return Ok(Step::Drop);
            }
            let (Some(f), Op::BatchNorm { eps }) = (plan.get(&old), &node.op) else {
                return Ok(Step::Copy);
            };
            let src = rw.src();
            let values = |id: NodeId| -> Option<Vec<f64>> {
                match src.node(id).op {
                    Op::Constant(c) => src.consts.get(c.0 as usize).map(|t| t.to_f64_vec()),
                    _ => None,
                }
            };
            let Some(p) = node.inputs[1..5].iter().map(|&i| values(i)).collect::<Option<Vec<_>>>() else {
                return Ok(Step::Copy);
            };
            let (scale, bias, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
            let s: Vec<f64> = scale.iter().zip(var).map(|(g, v)| g / (v + eps).sqrt()).collect();
            let mut t: Vec<f64> = (0..s.len()).map(|c| bias[c] - mean[c] * s[c]).collect();
            let y = match f.conv_bias {
                Some(conv) => {
                    let cn = src.node(conv);
                    let Some(b) = values(cn.inputs[2]) else {
                        return Ok(Step::Copy);
                    };
                    for (c, tc) in t.iter_mut().enumerate() {
                        *tc += b[c] * s[c];
                    }
                    let (x, w) = (rw.mapped(cn.inputs[0])?, rw.mapped(cn.inputs[1])?);
                    rw.add(cn.op.clone(), &[x, w])?
                }
                None => rw.mapped(node.inputs[0])?,
            };
            // [C, 1, ..]: broadcasts over the dims after the channel one.
            let rank = node.ty.shape.rank();
            let mut shape = vec![s.len()];
            shape.resize(rank.saturating_sub(1).max(1), 1);
            let dtype = node.ty.dtype;
            let sc = rw.constant(typed(dtype, s, &shape)?);
            let tc = rw.constant(typed(dtype, t, &shape)?);
            let scaled = rw.add(Op::Binary(BinaryOp::Mul), &[y, sc])?;
            Ok(Step::Replace(rw.add(Op::Binary(BinaryOp::Add), &[scaled, tc])?))
        })
    }
}

/// A dense tensor of `dtype` from f64 values (rounded once).
fn typed(dtype: DType, v: Vec<f64>, shape: &[usize]) -> Result<HostTensor> {
    kiln_ir::with_dtype!(dtype, T, {
        HostTensor::from_vec(v.into_iter().map(<T as Element>::from_f64).collect::<Vec<T>>(), shape)
    })
}

/// The BatchNorm nodes to rewrite: float, channel dim 1 of a value of rank >= 2, parameters
/// constant `[C]` of the value's dtype.
fn find(g: &Graph) -> HashMap<NodeId, Fold> {
    let uses = use_counts(g);
    let konst = |id: NodeId| matches!(g.node(id).op, Op::Constant(_));
    let mut plan = HashMap::new();
    for (idx, node) in g.nodes.iter().enumerate() {
        let Op::BatchNorm { .. } = node.op else {
            continue;
        };
        let ty = &node.ty;
        let rank = ty.shape.rank();
        let Some(c) = ty.shape.as_fixed().and_then(|d| d.get(1).copied()) else {
            continue;
        };
        let is_c = |id: NodeId| {
            konst(id) && g.ty(id).shape.as_fixed().is_some_and(|s| s == [c]) && g.ty(id).dtype == ty.dtype
        };
        if !ty.dtype.is_float() || node.inputs.len() != 5 || rank < 2 || !node.inputs[1..].iter().all(|&p| is_c(p)) {
            continue;
        }
        let y = node.inputs[0];
        let yn = g.node(y);
        let conv_bias = (matches!(yn.op, Op::Conv2d(_))
            && uses[y.index()] == 1
            && yn.inputs.get(2).is_some_and(|&b| is_c(b)))
        .then_some(y);
        plan.insert(NodeId(idx as u32), Fold { conv_bias });
    }
    plan
}
