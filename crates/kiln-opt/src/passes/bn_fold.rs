//! BatchNorm folding: an inference BatchNorm right after a convolution (or a matmul by a
//! constant weight) is an affine map per output channel, so it is merged into that op's
//! weight and bias. The new parameters are computed in f64 and stored in the weight's dtype.
//!
//! Patterns (every parameter a constant; the intermediate values read only by the next op of
//! the pattern and not graph outputs, so nothing else sees the unfolded values):
//! - `BatchNorm(Conv2d(x, w [, b]))` → `Conv2d(x, w', b')`;
//! - `BatchNorm(MatMul(x, w [K, C]) [+ b])` on a rank-2 `[N, C]` value → `MatMul(x, w') + b'`.
//!
//! With `s = scale / sqrt(var + eps)`: `w'[.., c] = w[.., c] * s[c]` and
//! `b'[c] = (b[c] - mean[c]) * s[c] + bias[c]` (`b = 0` when absent).

use super::Pass;
use crate::rewrite::{Rewrite, Step, use_counts};
use kiln_ir::{BinaryOp, DType, Element, Error, Graph, HostTensor, NodeId, Op, Result};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

/// Folds BatchNorm into the preceding Conv2d or constant-weight MatMul.
pub struct BnFold;

/// The producer a BatchNorm is folded into.
#[derive(Clone, Copy)]
enum Producer {
    /// `Conv2d(x, w [, b])`: the conv node.
    Conv { conv: NodeId },
    /// `MatMul(x, w)`, optionally followed by `add` of a constant bias (`bias_first` when the
    /// bias is the add's first operand).
    MatMul {
        mm: NodeId,
        add: Option<(NodeId, bool)>,
    },
}

impl Pass for BnFold {
    fn name(&self) -> &'static str {
        "bn_fold"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        let plan = find(graph);
        if plan.is_empty() {
            return Rewrite::new(graph)?.run(|_, _, _| Ok(Step::Copy));
        }
        // The folded producers are rebuilt at their BatchNorm, so the originals are dropped.
        let mut dropped = vec![false; graph.nodes.len()];
        for p in plan.values() {
            match *p {
                Producer::Conv { conv } => dropped[conv.index()] = true,
                Producer::MatMul { mm, add } => {
                    dropped[mm.index()] = true;
                    if let Some((a, _)) = add {
                        dropped[a.index()] = true;
                    }
                }
            }
        }
        Rewrite::new(graph)?.run(|rw, old, node| {
            if dropped[old.index()] {
                return Ok(Step::Drop);
            }
            let (Some(p), Op::BatchNorm { eps }) = (plan.get(&old), &node.op) else {
                return Ok(Step::Copy);
            };
            let src = rw.src();
            let konst = |id: NodeId| -> Option<&Arc<HostTensor>> {
                match src.node(id).op {
                    Op::Constant(c) => src.consts.get(c.0 as usize),
                    _ => None,
                }
            };
            let params: Option<Vec<Vec<f64>>> = node.inputs[1..5]
                .iter()
                .map(|&i| konst(i).map(|t| t.to_f64_vec()))
                .collect();
            let Some(params) = params else {
                return Ok(Step::Copy);
            };
            let s: Vec<f64> = params[0]
                .iter()
                .zip(&params[3])
                .map(|(g, v)| g / (v + eps).sqrt())
                .collect();
            let shift = |c: usize, b: f64| (b - params[2][c]) * s[c] + params[1][c];
            match *p {
                Producer::Conv { conv } => {
                    let cn = src.node(conv);
                    let (Some(w), Op::Conv2d(attrs)) = (konst(cn.inputs[1]), &cn.op) else {
                        return Ok(Step::Copy);
                    };
                    let b = cn
                        .inputs
                        .get(2)
                        .and_then(|&i| konst(i))
                        .map(|t| t.to_f64_vec());
                    let bv: Vec<f64> = (0..s.len())
                        .map(|c| shift(c, b.as_ref().map_or(0.0, |b| b[c])))
                        .collect();
                    let w2 = rw.constant(scaled(w, &s, Channels::Outer)?);
                    let b2 = rw.constant(typed(w.dtype(), bv, &[s.len()])?);
                    let x = rw.mapped(cn.inputs[0])?;
                    Ok(Step::Replace(rw.add(Op::Conv2d(*attrs), &[x, w2, b2])?))
                }
                Producer::MatMul { mm, add } => {
                    let mn = src.node(mm);
                    let Some(w) = konst(mn.inputs[1]) else {
                        return Ok(Step::Copy);
                    };
                    let b = match add {
                        Some((a, bias_first)) => {
                            let an = src.node(a);
                            let bi = if bias_first {
                                an.inputs[0]
                            } else {
                                an.inputs[1]
                            };
                            konst(bi).map(|t| t.to_f64_vec())
                        }
                        None => None,
                    };
                    let c = s.len();
                    let bv: Vec<f64> = (0..c)
                        .map(|k| shift(k, b.as_ref().map_or(0.0, |b| b[k])))
                        .collect();
                    let w2 = rw.constant(scaled(w, &s, Channels::Inner)?);
                    let b2 = rw.constant(typed(w.dtype(), bv, &[c])?);
                    let x = rw.mapped(mn.inputs[0])?;
                    let y = rw.add(Op::MatMul, &[x, w2])?;
                    Ok(Step::Replace(rw.add(Op::Binary(BinaryOp::Add), &[y, b2])?))
                }
            }
        })
    }
}

/// Where the channel of a weight element is: the outermost dim (conv `[O, ..]`) or the
/// innermost (matmul `[K, C]`).
#[derive(Clone, Copy)]
enum Channels {
    Outer,
    Inner,
}

/// `w` with each element multiplied by its channel's factor `s[c]`, in f64, rounded once to
/// `w`'s dtype. ResNet-50 has 25M weights to rescale on every compile (warm starts too), so
/// f32 and f64 get the product written with `as` casts (bit-identical to `Element`'s
/// conversions, which are not inlined across crates and so cost a call per element).
fn scaled(w: &HostTensor, s: &[f64], channels: Channels) -> Result<HostTensor> {
    let c = s.len();
    if c == 0 || w.numel() % c != 0 {
        return Err(Error::Shape(format!(
            "bn_fold: weight {:?} does not split into {c} channels",
            w.shape()
        )));
    }
    match w.dtype() {
        DType::F32 => scaled_by::<f32>(w, s, channels, |x, k| (x as f64 * k) as f32),
        DType::F64 => scaled_by::<f64>(w, s, channels, |x, k| x * k),
        dtype => kiln_ir::with_dtype!(dtype, T, {
            scaled_by::<T>(w, s, channels, |x, k| {
                <T as Element>::from_f64(x.to_f64() * k)
            })
        }),
    }
}

/// [`scaled`] for elements of type `T`, with `mul(x, k)` the rounded product: one tight loop
/// over each channel's contiguous run, in parallel over channels, into a buffer allocated
/// once. Each element's value does not depend on the split.
fn scaled_by<T: Element>(
    w: &HostTensor,
    s: &[f64],
    channels: Channels,
    mul: impl Fn(T, f64) -> T + Sync,
) -> Result<HostTensor> {
    let c = s.len();
    // Constants are dense, so this is a view; a strided weight is gathered once.
    let dense = w.contiguous();
    let src = dense.dense_slice::<T>().ok_or_else(|| {
        Error::DType(format!(
            "bn_fold: weight of dtype {} has no {} data",
            w.dtype(),
            T::DTYPE
        ))
    })?;
    let mut out = vec![T::zero(); src.len()];
    match channels {
        Channels::Outer => {
            let row = src.len() / c;
            if row > 0 {
                out.par_chunks_mut(row)
                    .zip(src.par_chunks(row))
                    .zip(s.par_iter())
                    .with_min_len(min_rows(row))
                    .for_each(|((dst, src), &k)| {
                        for (d, &x) in dst.iter_mut().zip(src) {
                            *d = mul(x, k);
                        }
                    });
            }
        }
        Channels::Inner => {
            out.par_chunks_mut(c)
                .zip(src.par_chunks(c))
                .with_min_len(min_rows(c))
                .for_each(|(dst, src)| {
                    for ((d, &x), &k) in dst.iter_mut().zip(src).zip(s) {
                        *d = mul(x, k);
                    }
                });
        }
    }
    HostTensor::from_vec(out, w.shape())
}

/// The fewest rows of `row` elements a parallel task takes, so small weights are not split
/// into tasks cheaper than their scheduling.
fn min_rows(row: usize) -> usize {
    const MIN_ELEMS_PER_TASK: usize = 1 << 14;
    MIN_ELEMS_PER_TASK.div_ceil(row.max(1))
}

/// A dense tensor of `dtype` from f64 values (rounded once).
fn typed(dtype: DType, v: Vec<f64>, shape: &[usize]) -> Result<HostTensor> {
    kiln_ir::with_dtype!(dtype, T, {
        HostTensor::from_vec(
            v.into_iter()
                .map(<T as Element>::from_f64)
                .collect::<Vec<T>>(),
            shape,
        )
    })
}

/// The BatchNorm nodes that can be folded, with their producers.
fn find(g: &Graph) -> HashMap<NodeId, Producer> {
    let uses = use_counts(g);
    let only_bn = |id: NodeId| uses[id.index()] == 1;
    let konst = |id: NodeId| matches!(g.node(id).op, Op::Constant(_));
    let mut plan = HashMap::new();
    for (idx, node) in g.nodes.iter().enumerate() {
        let Op::BatchNorm { .. } = node.op else {
            continue;
        };
        let ty = &node.ty;
        let Some(dims) = ty.shape.as_fixed() else {
            continue;
        };
        if !ty.dtype.is_float() || node.inputs.len() != 5 || dims.len() < 2 {
            continue;
        }
        let c = dims[1];
        let params_ok = node.inputs[1..].iter().all(|&p| {
            konst(p)
                && g.ty(p).shape.as_fixed().is_some_and(|s| s == [c])
                && g.ty(p).dtype == ty.dtype
        });
        let y = node.inputs[0];
        if !params_ok || !only_bn(y) {
            continue;
        }
        let same = |id: NodeId, shape: &[usize]| {
            g.ty(id).dtype == ty.dtype && g.ty(id).shape.as_fixed().is_some_and(|s| s == shape)
        };
        let yn = g.node(y);
        let producer = match &yn.op {
            Op::Conv2d(_) => {
                let w = yn.inputs[1];
                let w_ok = konst(w)
                    && g.ty(w).dtype == ty.dtype
                    && g.ty(w)
                        .shape
                        .as_fixed()
                        .is_some_and(|s| s.first() == Some(&c));
                let b_ok = yn.inputs.get(2).is_none_or(|&b| konst(b) && same(b, &[c]));
                (dims.len() == 4 && w_ok && b_ok).then_some(Producer::Conv { conv: y })
            }
            Op::MatMul if dims.len() == 2 => matmul_producer(g, y, c, &same, &only_bn, None),
            Op::Binary(BinaryOp::Add) if dims.len() == 2 => {
                let (a, b) = (yn.inputs[0], yn.inputs[1]);
                let bias_ok = |id: NodeId| konst(id) && (same(id, &[c]) || same(id, &[1, c]));
                if bias_ok(b) && g.node(a).op == Op::MatMul && only_bn(a) {
                    matmul_producer(g, a, c, &same, &only_bn, Some((y, false)))
                } else if bias_ok(a) && g.node(b).op == Op::MatMul && only_bn(b) {
                    matmul_producer(g, b, c, &same, &only_bn, Some((y, true)))
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some(p) = producer {
            plan.insert(NodeId(idx as u32), p);
        }
    }
    plan
}

/// `MatMul(x, w)` with a constant `[K, C]` weight and a rank-2 result.
fn matmul_producer(
    g: &Graph,
    mm: NodeId,
    c: usize,
    same: &dyn Fn(NodeId, &[usize]) -> bool,
    only_bn: &dyn Fn(NodeId) -> bool,
    add: Option<(NodeId, bool)>,
) -> Option<Producer> {
    let n = g.node(mm);
    let w = n.inputs[1];
    let w_ok = matches!(g.node(w).op, Op::Constant(_))
        && g.ty(w)
            .shape
            .as_fixed()
            .is_some_and(|s| s.len() == 2 && s[1] == c && same(w, &s));
    let rank2 = g.ty(mm).shape.rank() == 2 && g.ty(n.inputs[0]).shape.rank() == 2;
    (w_ok && rank2 && only_bn(mm)).then_some(Producer::MatMul { mm, add })
}
