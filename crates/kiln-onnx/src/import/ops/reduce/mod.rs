//! Reductions, arg-reductions, softmax family, normalisations, cumulative ops, top-k and losses.
//! One file per sub-family; this file maps op types to converters and holds the small graph
//! building helpers they share.

use crate::import::{Convert, Ctx};
use crate::tensor::dtype_from_onnx;
use kiln_ir::{BinaryOp, DType, Dim, Error, NodeId, Op, ReduceOp, Result, Shape, UnaryOp};

mod loss;
mod norm;
mod norm_misc;
mod reducers;
mod scan;
mod softmax;

pub(super) fn lookup(op: &str) -> Option<Convert> {
    reducers::lookup(op)
        .or_else(|| softmax::lookup(op))
        .or_else(|| norm::lookup(op))
        .or_else(|| scan::lookup(op))
        .or_else(|| loss::lookup(op))
}

/// `f(x)`.
fn un(ctx: &mut Ctx, u: UnaryOp, x: NodeId) -> Result<NodeId> {
    ctx.add(Op::Unary(u), &[x])
}

/// `f(a, b)` with broadcasting.
fn bin(ctx: &mut Ctx, b: BinaryOp, x: NodeId, y: NodeId) -> Result<NodeId> {
    ctx.add(Op::Binary(b), &[x, y])
}

/// `x` converted to `dtype` (no node when it already has it).
fn cast(ctx: &mut Ctx, x: NodeId, dtype: DType) -> Result<NodeId> {
    if ctx.dtype(x) == dtype {
        Ok(x)
    } else {
        ctx.add(Op::Cast(dtype), &[x])
    }
}

/// A scalar constant of `x`'s dtype.
fn scalar_like(ctx: &mut Ctx, x: NodeId, v: f64) -> Result<NodeId> {
    let d = ctx.dtype(x);
    ctx.scalar(d, v)
}

/// `x` reduced over `axes` (sorted, unique).
fn reduce(
    ctx: &mut Ctx,
    op: ReduceOp,
    x: NodeId,
    axes: &[usize],
    keep_dims: bool,
) -> Result<NodeId> {
    ctx.add(
        Op::Reduce {
            op,
            axes: axes.to_vec(),
            keep_dims,
        },
        &[x],
    )
}

/// `x` with new dims (same element count).
fn reshape(ctx: &mut Ctx, x: NodeId, dims: Vec<Dim>) -> Result<NodeId> {
    if ctx.dims(x) == dims {
        return Ok(x);
    }
    ctx.add(Op::Reshape(Shape(dims)), &[x])
}

/// The dtype a `stash_type` attribute (an ONNX element type code) names; normalisations compute
/// their statistics in it.
fn stash_dtype(node: &crate::proto::NodeProto, code: i64) -> Result<DType> {
    let d = i32::try_from(code)
        .ok()
        .and_then(|c| dtype_from_onnx(c).ok())
        .filter(|d| d.is_float())
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "{}: stash_type {code} is not a float type kiln supports",
                node.op_type()
            ))
        })?;
    Ok(d)
}

/// The product of `dims` when all are fixed (for reshapes that merge them).
fn fixed_prod(dims: &[Dim], op: &str) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, d| {
        d.fixed().map(|n| acc * n).ok_or_else(|| {
            Error::Unsupported(format!(
                "{op} needs static dims here, but got {}; import with concrete shapes",
                Shape(dims.to_vec())
            ))
        })
    })
}
