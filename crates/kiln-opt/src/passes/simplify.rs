//! Algebraic identities that hold exactly, bit for bit, under IEEE arithmetic and wrapping
//! integer arithmetic. Each rule replaces a node by its operand only when the node's type
//! equals the operand's (so a broadcasting `x * 1` that grows `x` stays).
//!
//! Signed zeros decide which additive identities are exact:
//! - `x - (+0.0) = x` for every x (`-0 - +0 = -0`), but `x - (-0.0)` turns `-0` into `+0`;
//! - `x + (-0.0) = x` for every x, but `x + (+0.0)` turns `-0` into `+0`, so the common
//!   `x + 0` is only folded for integers (or when the zero is `-0.0`).
//!
//! Multiplying or dividing by one is exact for every value (NaN stays NaN).

use super::Pass;
use crate::rewrite::{Rewrite, Step};
use kiln_ir::{BinaryOp, DType, Graph, NodeId, Op, Result, SliceAxis, UnaryOp};

/// Constants with more elements are not inspected for being a splat.
const SPLAT_MAX: usize = 4096;

/// Removes identity ops and merges chains of reshapes and permutes.
pub struct Simplify;

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        Rewrite::new(graph)?.run(|rw, _old, node| {
            if matches!(node.op, Op::Constant(_)) {
                return Ok(Step::Copy);
            }
            let args = rw.args(node)?;
            let same_ty = |rw: &Rewrite, x: NodeId| rw.graph().ty(x) == &node.ty;
            let step = match (&node.op, args.as_slice()) {
                (Op::Binary(b), &[x, y]) => match binary_identity(rw, *b, x, y) {
                    Some(keep) if same_ty(rw, keep) => Step::Replace(keep),
                    _ => Step::Copy,
                },
                (Op::Cast(_), &[x]) | (Op::Reshape(_), &[x]) | (Op::Expand(_), &[x])
                    if same_ty(rw, x) =>
                {
                    Step::Replace(x)
                }
                (Op::Reshape(s), &[x]) => match &rw.graph().node(x).op {
                    Op::Reshape(_) => {
                        let inner = rw.graph().node(x).inputs[0];
                        Step::Replace(rw.add(Op::Reshape(s.clone()), &[inner])?)
                    }
                    _ => Step::Copy,
                },
                (Op::Permute(p), &[x]) => {
                    if p.iter().enumerate().all(|(i, &a)| i == a) {
                        Step::Replace(x)
                    } else if let Op::Permute(inner_p) = &rw.graph().node(x).op {
                        // Output axis i is x's axis p[i], which is the inner input's axis inner_p[p[i]].
                        let q: Option<Vec<usize>> =
                            p.iter().map(|&a| inner_p.get(a).copied()).collect();
                        let inner = rw.graph().node(x).inputs[0];
                        match q {
                            Some(q) if q.iter().enumerate().all(|(i, &a)| i == a) => {
                                Step::Replace(inner)
                            }
                            Some(q) => Step::Replace(rw.add(Op::Permute(q), &[inner])?),
                            None => Step::Copy,
                        }
                    } else {
                        Step::Copy
                    }
                }
                (Op::Unary(UnaryOp::Neg), &[x]) => match &rw.graph().node(x).op {
                    // Negation is exact for floats and wraps for integers: applying it twice
                    // gives back every value.
                    Op::Unary(UnaryOp::Neg) if rw.graph().ty(x).dtype != DType::Bool => {
                        Step::Replace(rw.graph().node(x).inputs[0])
                    }
                    _ => Step::Copy,
                },
                (Op::Slice(axes), &[x]) if same_ty(rw, x) && covers_all(rw, x, axes) => {
                    Step::Replace(x)
                }
                _ => Step::Copy,
            };
            Ok(step)
        })
    }
}

/// The operand `x op y` equals exactly (before the type check), when one is an identity element.
fn binary_identity(rw: &Rewrite, op: BinaryOp, x: NodeId, y: NodeId) -> Option<NodeId> {
    let dtype = rw.graph().ty(x).dtype;
    if dtype == DType::Bool {
        return None;
    }
    let is = |id: NodeId, want: Want| splat(rw, id).is_some_and(|v| want.matches(v, dtype));
    match op {
        BinaryOp::Mul if is(y, Want::One) => Some(x),
        BinaryOp::Mul if is(x, Want::One) => Some(y),
        BinaryOp::Div if is(y, Want::One) => Some(x),
        BinaryOp::Sub if is(y, Want::PlusZero) => Some(x),
        BinaryOp::Add if is(y, Want::AddZero) => Some(x),
        BinaryOp::Add if is(x, Want::AddZero) => Some(y),
        _ => None,
    }
}

/// Which identity element a rule needs.
#[derive(Clone, Copy)]
enum Want {
    One,
    /// `+0.0` for floats (the identity of subtraction), `0` for integers.
    PlusZero,
    /// `-0.0` for floats (the identity of addition), `0` for integers.
    AddZero,
}

impl Want {
    fn matches(self, v: f64, dtype: DType) -> bool {
        // Every integer converts to f64 with 0 and 1 exactly and nothing else rounding to them.
        match self {
            Want::One => v == 1.0,
            Want::PlusZero => v == 0.0 && (!dtype.is_float() || v.is_sign_positive()),
            Want::AddZero => v == 0.0 && (!dtype.is_float() || v.is_sign_negative()),
        }
    }
}

/// The value of every element of a small constant whose elements are all bitwise equal.
fn splat(rw: &Rewrite, id: NodeId) -> Option<f64> {
    let t = rw.const_value(id)?;
    if t.numel() == 0 || t.numel() > SPLAT_MAX {
        return None;
    }
    let vals = t.to_f64_vec();
    let first = *vals.first()?;
    vals.iter()
        .all(|v| v.to_bits() == first.to_bits())
        .then_some(first)
}

/// True when the slice takes every element of `x` in order.
fn covers_all(rw: &Rewrite, x: NodeId, axes: &[SliceAxis]) -> bool {
    let shape = &rw.graph().ty(x).shape;
    axes.len() == shape.rank()
        && axes.iter().zip(shape.dims()).all(|(a, d)| {
            a.step == 1
                && match d.fixed() {
                    Some(n) => a.resolve(n) == (0, n as i64, n),
                    None => a.start == 0 && a.end == i64::MAX,
                }
        })
}
