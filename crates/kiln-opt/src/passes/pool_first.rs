//! Max pooling before the pointwise ops that feed it, where that is exact: for a map `f` that
//! never decreases, `max_i f(x_i) = f(max_i x_i)` (both are `f` of the same element), so
//! `max_pool(relu(x * s + t))` is `relu(max_pool(x) * s + t)` when every `s` is positive and
//! every `t` finite, both constant per channel. Resnet's stem (BatchNorm folded into a
//! multiply-add, ReLU, 3x3 max pool) then runs the multiply-add and the ReLU once per pooled
//! element instead of once per tap (nine per output, the pool's kernel cost four times as much
//! as ONNX Runtime's pool on the CPU).
//!
//! Exact for every input, NaN and infinities included: `x * s + t` with `s > 0` and `t` finite
//! is non-decreasing on the extended reals and maps NaN to NaN, ReLU keeps NaN (`x < 0 ? 0 :
//! x`), and the pool's NaN wins either way. Rounding is monotone too, so f16 / bf16 values
//! hold as well. The pool's padding is `-inf`, which `f` maps to the padding's own result
//! (`-inf`, or 0 after a ReLU, at most any tap's value); a window must hold one input element
//! at least (no `ceil_mode`, padding smaller than the window, no dilation), so padding never
//! decides a result.
//!
//! Runs for the CPU only: on a GPU the ReLU stays in cuDNN's conv call.

use super::Pass;
use crate::rewrite::{Rewrite, Step, use_counts};
use kiln_ir::{BinaryOp, Graph, NodeId, Op, PoolKind, Result, UnaryOp};

/// Moves a max pool before the non-decreasing pointwise chain that feeds it.
pub struct PoolFirst;

impl Pass for PoolFirst {
    fn name(&self) -> &'static str {
        "pool_first"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        let uses = use_counts(graph);
        Rewrite::new(graph)?.run(|rw, _old, node| {
            let Op::Pool2d(a) = &node.op else {
                return Ok(Step::Copy);
            };
            let [kh, kw] = a.kernel;
            let p = a.padding;
            let window_holds_input = !a.ceil_mode && a.dilation == [1, 1] && p[0].max(p[2]) < kh && p[1].max(p[3]) < kw;
            if a.kind != PoolKind::Max || !window_holds_input || !node.ty.dtype.is_float() {
                return Ok(Step::Copy);
            }
            let (x, chain) = monotone_chain(rw.src(), node.inputs[0], &uses);
            if chain.is_empty() {
                return Ok(Step::Copy);
            }
            let mut y = rw.add(node.op.clone(), &[rw.mapped(x)?])?;
            // Innermost op first, its constant operand where it was.
            for &(op, at) in chain.iter().rev() {
                let n = rw.src().node(op);
                let mut args = rw.args(n)?;
                args[at] = y;
                y = rw.add(n.op.clone(), &args)?;
            }
            Ok(Step::Replace(y))
        })
    }
}

/// The pointwise ops from `v` down that [`PoolFirst`] may move after the pool, outermost
/// first, each with the position of its input on the chain, and the value below them: ReLU,
/// and multiply by / add to a constant whose every value is positive / finite and which is
/// the same at every pixel (size 1 in the last two dims). Each op's only user is the next (so
/// it goes with the move) and its type is its chained input's (no broadcast grows it).
fn monotone_chain(g: &Graph, mut v: NodeId, uses: &[usize]) -> (NodeId, Vec<(NodeId, usize)>) {
    let mut chain = Vec::new();
    loop {
        let n = g.node(v);
        if uses[v.index()] != 1 {
            break;
        }
        let per_channel = |c: NodeId, ok: fn(f64) -> bool| match g.node(c).op {
            Op::Constant(k) => g.consts.get(k.0 as usize).is_some_and(|t| {
                let s = t.shape();
                s.iter().rev().take(2).all(|&d| d == 1) && t.to_f64_vec().into_iter().all(ok)
            }),
            _ => false,
        };
        let at = match (&n.op, &n.inputs[..]) {
            (Op::Unary(UnaryOp::Relu), [_]) => Some(0),
            (Op::Binary(BinaryOp::Mul), &[l, r]) => {
                let positive = |x: f64| x > 0.0 && x.is_finite();
                if per_channel(r, positive) { Some(0) } else if per_channel(l, positive) { Some(1) } else { None }
            }
            (Op::Binary(BinaryOp::Add), &[l, r]) => {
                if per_channel(r, f64::is_finite) { Some(0) } else if per_channel(l, f64::is_finite) { Some(1) } else { None }
            }
            _ => None,
        };
        let Some(at) = at.filter(|&at| g.ty(n.inputs[at]) == &n.ty) else {
            break;
        };
        chain.push((v, at));
        v = n.inputs[at];
    }
    (v, chain)
}
