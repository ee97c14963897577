//! Small graph-building helpers shared by the transformer, recurrent and einsum converters
//! (each is one IR op; they keep the decompositions readable).

use crate::import::Ctx;
use kiln_ir::{
    BinaryOp, DType, Dim, Error, HostTensor, NodeId, Op, ReduceOp, Result, Shape, SliceAxis,
    UnaryOp,
};

/// `op(x)`.
pub(in crate::import::ops) fn un(ctx: &mut Ctx, op: UnaryOp, x: NodeId) -> Result<NodeId> {
    ctx.add(Op::Unary(op), &[x])
}

/// `op(a, b)` with broadcasting.
pub(in crate::import::ops) fn bin(
    ctx: &mut Ctx,
    op: BinaryOp,
    a: NodeId,
    b: NodeId,
) -> Result<NodeId> {
    ctx.add(Op::Binary(op), &[a, b])
}

/// A scalar constant of `like`'s dtype.
pub(in crate::import::ops) fn lit(ctx: &mut Ctx, like: NodeId, v: f64) -> Result<NodeId> {
    let d = ctx.dtype(like);
    ctx.scalar(d, v)
}

/// `cond ? a : b`.
pub(in crate::import::ops) fn select(
    ctx: &mut Ctx,
    cond: NodeId,
    a: NodeId,
    b: NodeId,
) -> Result<NodeId> {
    ctx.add(Op::Where, &[cond, a, b])
}

/// `x` converted to `to` (no node when it already is).
pub(in crate::import::ops) fn cast(ctx: &mut Ctx, x: NodeId, to: DType) -> Result<NodeId> {
    if ctx.dtype(x) == to {
        Ok(x)
    } else {
        ctx.add(Op::Cast(to), &[x])
    }
}

/// `x` reshaped to `dims` (no node when the shape is already that).
pub(in crate::import::ops) fn reshape(ctx: &mut Ctx, x: NodeId, dims: Vec<Dim>) -> Result<NodeId> {
    if ctx.dims(x) == dims {
        return Ok(x);
    }
    ctx.add(Op::Reshape(Shape(dims)), &[x])
}

/// `x` with its axes reordered (no node for the identity order).
pub(in crate::import::ops) fn permute(ctx: &mut Ctx, x: NodeId, perm: &[usize]) -> Result<NodeId> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x);
    }
    ctx.add(Op::Permute(perm.to_vec()), &[x])
}

/// `x[.., start:end:step, ..]` along `axis`.
pub(in crate::import::ops) fn slice(
    ctx: &mut Ctx,
    x: NodeId,
    axis: usize,
    start: i64,
    end: i64,
    step: i64,
) -> Result<NodeId> {
    let mut axes = vec![SliceAxis::FULL; ctx.rank(x)];
    let a = axes.get_mut(axis).ok_or_else(|| {
        Error::Shape(format!(
            "slice: axis {axis} out of range for rank {}",
            ctx.rank(x)
        ))
    })?;
    *a = SliceAxis { start, end, step };
    ctx.add(Op::Slice(axes), &[x])
}

/// `xs` joined along `axis` (the input itself when there is one).
pub(in crate::import::ops) fn concat(ctx: &mut Ctx, xs: &[NodeId], axis: usize) -> Result<NodeId> {
    match xs {
        [one] => Ok(*one),
        _ => ctx.add(Op::Concat { axis }, xs),
    }
}

/// Batched `a @ b`.
pub(in crate::import::ops) fn matmul(ctx: &mut Ctx, a: NodeId, b: NodeId) -> Result<NodeId> {
    ctx.add(Op::MatMul, &[a, b])
}

/// Reduces `axes` (sorted) with `op`.
pub(in crate::import::ops) fn reduce(
    ctx: &mut Ctx,
    op: ReduceOp,
    x: NodeId,
    axes: Vec<usize>,
    keep_dims: bool,
) -> Result<NodeId> {
    if axes.is_empty() {
        return Ok(x);
    }
    ctx.add(
        Op::Reduce {
            op,
            axes,
            keep_dims,
        },
        &[x],
    )
}

/// An i64 constant of `shape` whose element at multi-index `[i, j]` (2-D) is `f(i, j)`.
pub(in crate::import::ops) fn grid_i64(
    ctx: &mut Ctx,
    rows: usize,
    cols: usize,
    f: impl Fn(i64, i64) -> i64,
) -> Result<NodeId> {
    let mut v = Vec::with_capacity(rows * cols);
    for i in 0..rows as i64 {
        for j in 0..cols as i64 {
            v.push(f(i, j));
        }
    }
    Ok(ctx.constant(HostTensor::from_vec(v, &[rows, cols])?))
}

/// A bool constant `[rows, cols]` whose element `[i, j]` is `f(i, j)`.
pub(in crate::import::ops) fn grid_bool(
    ctx: &mut Ctx,
    rows: usize,
    cols: usize,
    f: impl Fn(i64, i64) -> bool,
) -> Result<NodeId> {
    let mut v = Vec::with_capacity(rows * cols);
    for i in 0..rows as i64 {
        for j in 0..cols as i64 {
            v.push(f(i, j));
        }
    }
    Ok(ctx.constant(HostTensor::from_vec(v, &[rows, cols])?))
}

/// The fixed size of `d`, or an Unsupported error naming `what` and `op`.
pub(in crate::import::ops) fn fixed(d: &Dim, op: &str, what: &str) -> Result<usize> {
    d.fixed().ok_or_else(|| {
        Error::Unsupported(format!(
            "{op} needs a static {what}, but it is symbolic ({d:?}); import with concrete input shapes"
        ))
    })
}

/// `[B, L, H*D]` → `[B, L, H, D]` (the head split of 3-D attention inputs); `heads` must divide
/// the (static) hidden size.
pub(in crate::import::ops) fn unflatten_heads(ctx: &mut Ctx, x: NodeId, heads: i64, op: &str, what: &str) -> Result<NodeId> {
    let d = ctx.dims(x);
    let hidden = fixed(&d[2], op, "hidden size")?;
    if heads <= 0 || hidden % heads as usize != 0 {
        return Err(Error::Shape(format!("{op}: {what} hidden size {hidden} is not a multiple of its {heads} heads")));
    }
    let h = heads as usize;
    reshape(ctx, x, vec![d[0].clone(), d[1].clone(), Dim::Fixed(h), Dim::Fixed(hidden / h)])
}
