//! Channels-last convs for a GPU. cuDNN's tensor-core conv kernels read and write NHWC; given
//! NCHW tensors they transpose on every call, in and out (resnet50 bs64 f32 on the H200 spent
//! 1.3-3.2 ms of its 7-8 ms forward in cuDNN's `nchwToNhwc` / `nhwcToNchw` kernels). This pass
//! makes every float conv with a constant weight channels last (the weight permuted once,
//! here, unless it is stored channels last already: a constant read through the permutation
//! back to `[O, I, kh, kw]`, as `bn_fold` leaves the weights it rescales) and carries the
//! NHWC form of each value through the ops between convs (pointwise ops, pads, slices,
//! reductions), so one conv's output reaches the next without a transpose.
//! Where an NHWC value meets an op that needs the original layout, or a graph output, a
//! `Permute` view gives that layout back: a view costs nothing until a kernel reads it.

use super::Pass;
use crate::rewrite::{Rewrite, Step};
use kiln_ir::{Graph, NodeId, Op, Result, Shape};
use std::collections::HashMap;

/// Makes float convs with constant weights channels last (see the module doc).
pub struct ChannelsLast;

/// Axis `i` of a value's NHWC form is axis `TO_NHWC[i]` of the value.
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
/// Axis `i` of a value is axis `TO_NCHW[i]` of its NHWC form; also: source axis `a` sits at
/// axis `TO_NCHW[a]` of the NHWC form.
pub(crate) const TO_NCHW: [usize; 4] = [0, 3, 1, 2];

impl Pass for ChannelsLast {
    fn name(&self) -> &'static str {
        "channels_last"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        // Source value -> its NHWC form in the new graph (the mapped value is a view of it).
        let mut nhwc: HashMap<NodeId, NodeId> = HashMap::new();
        // Source weight -> its permuted copy (a weight shared by convs is permuted once).
        let mut weights: HashMap<NodeId, NodeId> = HashMap::new();
        let mut convs = 0usize;
        let out = Rewrite::new(graph)?.run(|rw, old, node| {
            let src = rw.src();
            let is_nhwc = |id: &NodeId| nhwc.contains_key(id);
            let rank4 = node.ty.shape.rank() == 4;
            let form = match &node.op {
                Op::Conv2d(a) if !a.channels_last && node.ty.dtype.is_float() && rank4 => {
                    let w = node.inputs[1];
                    let w_new = match (&src.node(w).op, weights.get(&w)) {
                        (_, Some(&n)) => n,
                        // A weight stored channels last already (bn_fold's rescaled ones).
                        (Op::Permute(p), None) if p[..] == TO_NCHW && matches!(src.node(src.node(w).inputs[0]).op, Op::Constant(_)) => {
                            rw.mapped(src.node(w).inputs[0])?
                        }
                        (Op::Constant(c), None) => {
                            let Some(value) = src.consts.get(c.0 as usize) else {
                                return Ok(Step::Copy);
                            };
                            let n = rw.constant(value.with_layout(value.layout.permute(&TO_NHWC)?).contiguous());
                            weights.insert(w, n);
                            n
                        }
                        _ => return Ok(Step::Copy),
                    };
                    let x = to_nhwc(rw, &nhwc, node.inputs[0])?;
                    let mut args = vec![x, w_new];
                    if let Some(&b) = node.inputs.get(2) {
                        args.push(rw.mapped(b)?);
                    }
                    convs += 1;
                    rw.add(Op::Conv2d(kiln_ir::Conv2dAttrs { channels_last: true, ..*a }), &args)?
                }
                Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast(_) if rank4 && node.inputs.iter().any(is_nhwc) => {
                    let args = node.inputs.iter().map(|&i| broadcast_nhwc(rw, &nhwc, i)).collect::<Result<Vec<_>>>()?;
                    rw.add(node.op.clone(), &args)?
                }
                Op::Pad { pads, mode } if rank4 && is_nhwc(&node.inputs[0]) => {
                    let pads = TO_NHWC.iter().map(|&a| pads[a]).collect();
                    rw.add(Op::Pad { pads, mode: *mode }, &[nhwc[&node.inputs[0]]])?
                }
                Op::Slice(axes) if rank4 && is_nhwc(&node.inputs[0]) => {
                    let axes = TO_NHWC.iter().map(|&a| axes[a]).collect();
                    rw.add(Op::Slice(axes), &[nhwc[&node.inputs[0]]])?
                }
                Op::Reduce { op, axes, keep_dims } if is_nhwc(&node.inputs[0]) => {
                    let mut new_axes: Vec<usize> = axes.iter().map(|&a| TO_NCHW[a]).collect();
                    new_axes.sort_unstable();
                    let reduce = Op::Reduce { op: *op, axes: new_axes, keep_dims: *keep_dims };
                    if *keep_dims {
                        rw.add(reduce, &[nhwc[&node.inputs[0]]])?
                    } else {
                        // The kept axes in NHWC order: the same order as the source's when
                        // only the spatial axes go (N, C either way); then the value is plain.
                        let kept_src: Vec<usize> = (0..4).filter(|a| !axes.contains(a)).collect();
                        let kept_new: Vec<usize> = TO_NHWC.iter().copied().filter(|a| !axes.contains(a)).collect();
                        if kept_src != kept_new {
                            return Ok(Step::Copy);
                        }
                        return Ok(Step::Replace(rw.add(reduce, &[nhwc[&node.inputs[0]]])?));
                    }
                }
                _ => return Ok(Step::Copy),
            };
            nhwc.insert(old, form);
            // With 1x1 spatial dims (a global pool) the transpose only moves size-1 axes.
            let back = match rw.graph().ty(form).shape.as_fixed() {
                Some(d) if d[1] == 1 && d[2] == 1 => Op::Reshape(node.ty.shape.clone()),
                _ => Op::Permute(TO_NCHW.to_vec()),
            };
            Ok(Step::Replace(rw.add(back, &[form])?))
        })?;
        if convs > 0 {
            tracing::info!(target: "kiln::graph", "channels_last: {convs} convs run NHWC ({} weights permuted)", weights.len());
        }
        Ok(out)
    }
}

/// The NHWC form of source value `id`: its own when it has one, else a permuting view.
fn to_nhwc(rw: &mut Rewrite, nhwc: &HashMap<NodeId, NodeId>, id: NodeId) -> Result<NodeId> {
    match nhwc.get(&id) {
        Some(&n) => Ok(n),
        None => {
            let v = rw.mapped(id)?;
            rw.add(Op::Permute(TO_NHWC.to_vec()), &[v])
        }
    }
}

/// Operand `id` of a rank-4 pointwise op, in the NHWC order: its NHWC form, a scalar as it is,
/// or a lower-rank operand (broadcast from the right) reshaped to rank 4 and permuted.
fn broadcast_nhwc(rw: &mut Rewrite, nhwc: &HashMap<NodeId, NodeId>, id: NodeId) -> Result<NodeId> {
    if nhwc.contains_key(&id) {
        return to_nhwc(rw, nhwc, id);
    }
    let ty = rw.src().ty(id).clone();
    let v = rw.mapped(id)?;
    let rank = ty.shape.rank();
    if rank == 0 || ty.shape.as_fixed().is_some_and(|d| d.iter().all(|&n| n == 1) && rank < 4) {
        return Ok(v);
    }
    let v = if rank < 4 {
        let Some(dims) = ty.shape.as_fixed() else {
            return Err(kiln_ir::Error::Unsupported("channels_last: a symbolic operand of lower rank".into()));
        };
        let mut four = vec![1usize; 4 - rank];
        four.extend(dims);
        rw.add(Op::Reshape(Shape::fixed(&four)), &[v])?
    } else {
        v
    };
    rw.add(Op::Permute(TO_NHWC.to_vec()), &[v])
}
