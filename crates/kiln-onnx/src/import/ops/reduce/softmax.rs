//! Softmax, LogSoftmax and Hardmax. Before opset 13 they act on the input coerced to 2-D at
//! `axis` (`[prod(dims[..axis]), prod(dims[axis..])]`, default axis 1); from 13 along `axis`
//! (default -1).

use super::{bin, cast, fixed_prod, reduce, reshape, un};
use crate::import::{Convert, Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{
    ArgReduceOp, BinaryOp, DType, Dim, HostTensor, NodeId, Op, ReduceOp, Result, UnaryOp,
    normalize_axis,
};

/// What the op computes along its axis.
#[derive(Clone, Copy)]
enum Kind {
    Softmax,
    LogSoftmax,
    Hardmax,
}

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "Softmax" => |c, n| softmax(c, n, Kind::Softmax),
        "LogSoftmax" => |c, n| softmax(c, n, Kind::LogSoftmax),
        "Hardmax" => |c, n| softmax(c, n, Kind::Hardmax),
        _ => return None,
    })
}

fn softmax(ctx: &mut Ctx, node: &NodeProto, kind: Kind) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis"])?;
    let x = ctx.input(node, 0)?;
    let rank = ctx.rank(x);
    let name = node.op_type();
    if ctx.opset >= 13 {
        let axis = normalize_axis(attrs::int(node, "axis", -1)?, rank, name)?;
        return one(along(ctx, kind, x, axis)?);
    }
    let axis = if rank == 0 {
        0
    } else {
        normalize_axis(attrs::int(node, "axis", 1)?, rank, name)?
    };
    if rank >= 1 && axis == rank - 1 {
        // Coercing to 2-D at the last axis leaves the rows as they are.
        return one(along(ctx, kind, x, axis)?);
    }
    let dims = ctx.dims(x);
    let rows = fixed_prod(&dims[..axis], name)?;
    let cols = fixed_prod(&dims[axis..], name)?;
    let flat = reshape(ctx, x, vec![Dim::Fixed(rows), Dim::Fixed(cols)])?;
    let y = along(ctx, kind, flat, 1)?;
    one(reshape(ctx, y, dims)?)
}

/// LogSoftmax of `x` along `axis` (for the losses), rounded as the ONNX reference does.
pub(super) fn log_softmax(ctx: &mut Ctx, x: NodeId, axis: usize) -> Result<NodeId> {
    along(ctx, Kind::LogSoftmax, x, axis)
}

/// The op along one axis of `x`.
fn along(ctx: &mut Ctx, kind: Kind, x: NodeId, axis: usize) -> Result<NodeId> {
    if !matches!(kind, Kind::Hardmax) && matches!(ctx.dtype(x), DType::F16 | DType::BF16) {
        return half_softmax(ctx, kind, x, axis);
    }
    match kind {
        Kind::Softmax => ctx.add(Op::Softmax { axis }, &[x]),
        Kind::LogSoftmax => ctx.add(Op::LogSoftmax { axis }, &[x]),
        Kind::Hardmax => hardmax(ctx, x, axis),
    }
}

/// Softmax / LogSoftmax of a half-precision input step by step, each step rounded to the
/// input dtype, as the ONNX reference computes it (`e = exp(x - max)`, `e / sum(e)`, then `log`
/// for LogSoftmax); the fused IR ops round only once, which differs by more than the
/// conformance tolerance on long rows.
fn half_softmax(ctx: &mut Ctx, kind: Kind, x: NodeId, axis: usize) -> Result<NodeId> {
    let m = reduce(ctx, ReduceOp::Max, x, &[axis], true)?;
    let d = bin(ctx, BinaryOp::Sub, x, m)?;
    let e = un(ctx, UnaryOp::Exp, d)?;
    let s = reduce(ctx, ReduceOp::Sum, e, &[axis], true)?;
    let y = bin(ctx, BinaryOp::Div, e, s)?;
    match kind {
        Kind::LogSoftmax => un(ctx, UnaryOp::Log, y),
        _ => Ok(y),
    }
}

/// One-hot of the first maximum along `axis`: `argmax(x) == iota`, in x's dtype.
fn hardmax(ctx: &mut Ctx, x: NodeId, axis: usize) -> Result<NodeId> {
    let dims = ctx.dims(x);
    let n = fixed_prod(&dims[axis..=axis], "Hardmax")?;
    let am = ctx.add(
        Op::ArgReduce {
            op: ArgReduceOp::ArgMax,
            axis,
            keep_dims: true,
            select_last: false,
        },
        &[x],
    )?;
    let mut shape = vec![1usize; dims.len()];
    shape[axis] = n;
    let iota = HostTensor::from_vec((0..n as i64).collect::<Vec<i64>>(), &shape)?;
    let iota = ctx.constant(iota);
    let hit = ctx.add(Op::Binary(BinaryOp::Eq), &[am, iota])?;
    let d = ctx.dtype(x);
    cast(ctx, hit, d)
}
