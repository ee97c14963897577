//! BatchNorm folding: an inference BatchNorm (constant parameters) is an affine map per
//! channel, `y * s + t` with `s = scale / sqrt(var + eps)` and `t = bias - mean * s`, so it
//! becomes one multiply and one add by `[C, 1, ..]` constants (computed in f64, stored in the
//! value's dtype). The scheduler fuses those into the producing conv's or matmul's epilogue,
//! where they cost one FMA per output element in a pass over the output that runs anyway.
//!
//! A constant conv bias read only by the BatchNorm is folded into `t` (`t += b * s`) and
//! dropped from the conv, so the conv's result needs no separate bias pass either.
//!
//! By default the weights themselves are left alone, and shared with the source graph:
//! rescaling them (ORT's way) writes a second copy of every conv weight on every compile, warm
//! starts too. On the 2-core VM that was 130-400 ms of ResNet-50's warm start, nearly all of it
//! the kernel backing 100 MB of fresh pages; this form costs O(channels).
//!
//! [`BnFold::into_weights`] is the other trade, for a GPU: every weight is copied to the device
//! anyway, and a conv whose BatchNorm is gone entirely (`w * s`, bias `t`) lets cuDNN apply
//! bias, residual add and ReLU inside the conv call, where the multiply-add would need a
//! separate pass over the output. With [`BnFold::channels_last`] the rescaled weight is stored
//! channels last (`[O, kh, kw, I]`) behind a permuting view back to `[O, I, kh, kw]`, the form
//! `channels_last` wants, which then takes the stored weight as it is: each weight is written
//! once instead of rescaled and then permuted. The rescaled weights are shared across compiles
//! through `memo.rs` (keyed by the source weight and the scale), so compiling a model again in
//! a process that holds a compiled copy (the GPU's warm first call) writes none.

use super::Pass;
use crate::rewrite::{Rewrite, Step, use_counts};
use kiln_ir::{BinaryOp, DType, Element, Error, Graph, HostTensor, NodeId, Op, Result};
use rayon::prelude::*;
use std::collections::HashMap;

/// Turns BatchNorm with constant parameters into a per-channel multiply-add, or into the
/// producing conv's weights and bias.
#[derive(Clone, Copy, Debug, Default)]
pub struct BnFold {
    /// Rescale the producing conv's weights (a new constant per conv) and give it the shift as
    /// its bias, so no multiply-add is left; a BatchNorm after anything else still becomes the
    /// multiply-add.
    pub into_weights: bool,
    /// With `into_weights`: store each rescaled 4-d weight channels last, behind a `Permute`
    /// view back to the conv's order (set when the `channels_last` pass runs next).
    pub channels_last: bool,
}

/// A BatchNorm to rewrite.
#[derive(Clone, Copy)]
struct Fold {
    /// The conv rebuilt with the BatchNorm (read only by it): its constant bias moves into the
    /// shift, and with `into_weights` the scale moves into its constant weight.
    conv: Option<NodeId>,
}

impl Pass for BnFold {
    fn name(&self) -> &'static str {
        "bn_fold"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        let plan = find(graph, self.into_weights);
        let dropped: Vec<NodeId> = plan.values().filter_map(|f| f.conv).collect();
        Rewrite::new(graph)?.run(|rw, old, node| {
            if dropped.contains(&old) {
                return Ok(Step::Drop);
            }
            let (Some(f), Op::BatchNorm { eps }) = (plan.get(&old), &node.op) else {
                return Ok(Step::Copy);
            };
            let src = rw.src();
            let tensor = |id: NodeId| match src.node(id).op {
                Op::Constant(c) => src.consts.get(c.0 as usize),
                _ => None,
            };
            let values = |id: NodeId| tensor(id).map(|t| t.to_f64_vec());
            let Some(p) = node.inputs[1..5].iter().map(|&i| values(i)).collect::<Option<Vec<_>>>() else {
                return Ok(Step::Copy);
            };
            let (scale, bias, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
            let s: Vec<f64> = scale.iter().zip(var).map(|(g, v)| g / (v + eps).sqrt()).collect();
            let mut t: Vec<f64> = (0..s.len()).map(|c| bias[c] - mean[c] * s[c]).collect();
            let dtype = node.ty.dtype;
            let y = match f.conv {
                Some(conv) => {
                    let cn = src.node(conv);
                    // `find` checked the bias (and, into weights, the weight) is constant.
                    if let Some(&b) = cn.inputs.get(2) {
                        let b = values(b).ok_or_else(|| Error::Graph(format!("bn_fold: the bias of {conv} is not a constant")))?;
                        for (c, tc) in t.iter_mut().enumerate() {
                            *tc += b[c] * s[c];
                        }
                    }
                    let x = rw.mapped(cn.inputs[0])?;
                    if self.into_weights {
                        let w = tensor(cn.inputs[1]).ok_or_else(|| Error::Graph(format!("bn_fold: the weight of {conv} is not a constant")))?;
                        let nhwc = self.channels_last && w.shape().len() == 4;
                        let tag = if nhwc { "bn_fold_nhwc" } else { "bn_fold" };
                        let bits: Vec<u64> = s.iter().map(|v| v.to_bits()).collect();
                        let folded = crate::memo::derived(tag, &[w], &bits, || scale_rows(w, &s, nhwc))?;
                        let mut w = rw.constant(folded);
                        if nhwc {
                            w = rw.add(Op::Permute(super::channels_last::TO_NCHW.to_vec()), &[w])?;
                        }
                        let b = rw.constant(typed(dtype, t, &[s.len()])?);
                        return Ok(Step::Replace(rw.add(cn.op.clone(), &[x, w, b])?));
                    }
                    let w = rw.mapped(cn.inputs[1])?;
                    rw.add(cn.op.clone(), &[x, w])?
                }
                None => rw.mapped(node.inputs[0])?,
            };
            // [C, 1, ..]: broadcasts over the dims after the channel one.
            let rank = node.ty.shape.rank();
            let mut shape = vec![s.len()];
            shape.resize(rank.saturating_sub(1).max(1), 1);
            let sc = rw.constant(typed(dtype, s, &shape)?);
            let tc = rw.constant(typed(dtype, t, &shape)?);
            let scaled = rw.add(Op::Binary(BinaryOp::Mul), &[y, sc])?;
            Ok(Step::Replace(rw.add(Op::Binary(BinaryOp::Add), &[scaled, tc])?))
        })
    }
}

/// `w` with each of its `s.len()` leading rows (output channels) times `s[row]`, computed in
/// f64 and rounded once (typed loops: this runs over every conv weight on a first compile).
/// With `nhwc` a 4-d `[O, I, kh, kw]` weight comes out as `[O, kh, kw, I]`: each row's
/// `[I, kh*kw]` block is transposed as it is scaled.
fn scale_rows(w: &HostTensor, s: &[f64], nhwc: bool) -> Result<HostTensor> {
    let dims = w.shape().to_vec();
    let (inner, taps) = match dims[..] {
        [_, i, kh, kw] if nhwc => (i, kh * kw),
        _ => (1, 1),
    };
    let shape = if nhwc { vec![dims[0], dims[2], dims[3], dims[1]] } else { dims.clone() };
    kiln_ir::with_dtype!(w.dtype(), T, {
        let v = w.values::<T>()?;
        let per_row = (v.len() / s.len().max(1)).max(1);
        let mut out = vec![T::zero(); v.len()];
        // Rows in parallel: the pages of the new weights are first touched by many threads.
        out.par_chunks_mut(per_row).zip(v.par_chunks(per_row)).zip(s.par_iter()).for_each(|((dst, row), &k)| {
            // Source `[i, tap]` goes to `[tap, i]` (the identity when `inner` is 1).
            for (i, taps_of_i) in row.chunks(taps).enumerate() {
                for (tap, &x) in taps_of_i.iter().enumerate() {
                    dst[tap * inner + i] = T::from_f64(x.to_f64() * k);
                }
            }
        });
        HostTensor::from_vec(out, &shape)
    })
}

/// A dense tensor of `dtype` from f64 values (rounded once).
fn typed(dtype: DType, v: Vec<f64>, shape: &[usize]) -> Result<HostTensor> {
    kiln_ir::with_dtype!(dtype, T, {
        HostTensor::from_vec(v.into_iter().map(<T as Element>::from_f64).collect::<Vec<T>>(), shape)
    })
}

/// The BatchNorm nodes to rewrite: float, channel dim 1 of a value of rank >= 2, parameters
/// constant `[C]` of the value's dtype; with the conv each one folds into, if any.
fn find(g: &Graph, into_weights: bool) -> HashMap<NodeId, Fold> {
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
        let bias = yn.inputs.get(2).copied();
        let weight_ok = |w: NodeId| {
            konst(w) && g.ty(w).dtype == ty.dtype && g.ty(w).shape.as_fixed().is_some_and(|s| s.first() == Some(&c))
        };
        let folds = if into_weights {
            bias.is_none_or(is_c) && yn.inputs.get(1).is_some_and(|&w| weight_ok(w))
        } else {
            bias.is_some_and(is_c)
        };
        let conv = (matches!(yn.op, Op::Conv2d(_)) && uses[y.index()] == 1 && folds).then_some(y);
        plan.insert(NodeId(idx as u32), Fold { conv });
    }
    plan
}
