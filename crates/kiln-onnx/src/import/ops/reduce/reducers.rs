//! ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare and ArgMax/ArgMin.

use super::{bin, cast, reduce, reshape, scalar_like, un};
use crate::import::{Convert, Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{ArgReduceOp, BinaryOp, DType, Error, Op, ReduceOp, Result, UnaryOp, normalize_axis};

/// The ONNX reductions, by what they compute.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "ReduceSum" => |c, n| reduce_op(c, n, Kind::Sum),
        "ReduceMean" => |c, n| reduce_op(c, n, Kind::Mean),
        "ReduceMax" => |c, n| reduce_op(c, n, Kind::Max),
        "ReduceMin" => |c, n| reduce_op(c, n, Kind::Min),
        "ReduceProd" => |c, n| reduce_op(c, n, Kind::Prod),
        "ReduceL1" => |c, n| reduce_op(c, n, Kind::L1),
        "ReduceL2" => |c, n| reduce_op(c, n, Kind::L2),
        "ReduceLogSum" => |c, n| reduce_op(c, n, Kind::LogSum),
        "ReduceLogSumExp" => |c, n| reduce_op(c, n, Kind::LogSumExp),
        "ReduceSumSquare" => |c, n| reduce_op(c, n, Kind::SumSquare),
        "ArgMax" => |c, n| arg_op(c, n, ArgReduceOp::ArgMax),
        "ArgMin" => |c, n| arg_op(c, n, ArgReduceOp::ArgMin),
        _ => return None,
    })
}

/// The axes a reduction node reduces (sorted, unique, non-negative): the `axes` attribute
/// before `axes_input_since`, the optional second input from then on. No axes means all axes,
/// or none with `noop_with_empty_axes` (the reduction then only applies its elementwise part,
/// as the ONNX reference does).
pub(super) fn reduction_axes(
    ctx: &mut Ctx,
    node: &NodeProto,
    rank: usize,
    axes_input_since: i64,
) -> Result<Vec<usize>> {
    let given = if ctx.opset < axes_input_since {
        attrs::ints(node, "axes")?
    } else {
        ctx.const_ints(node, 1, "axes")?
    };
    let noop = attrs::int(node, "noop_with_empty_axes", 0)? != 0;
    let mut axes = match given {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|&a| normalize_axis(a, rank, node.op_type()))
            .collect::<Result<Vec<_>>>()?,
        _ if noop => Vec::new(),
        _ => (0..rank).collect(),
    };
    axes.sort_unstable();
    axes.dedup();
    Ok(axes)
}

fn reduce_op(ctx: &mut Ctx, node: &NodeProto, kind: Kind) -> Result<Vec<Val>> {
    // ReduceSum took axes as an input from opset 13, the others from 18.
    let since = if kind == Kind::Sum { 13 } else { 18 };
    if ctx.opset < since {
        attrs::check_known(node, &["axes", "keepdims"])?;
    } else {
        attrs::check_known(node, &["keepdims", "noop_with_empty_axes"])?;
    }
    let x = ctx.input(node, 0)?;
    let keep = attrs::int(node, "keepdims", 1)? != 0;
    let axes = reduction_axes(ctx, node, ctx.rank(x), since)?;
    let dtype = ctx.dtype(x);
    if dtype == DType::Bool {
        // Boolean ReduceMax/ReduceMin (opset 20) are any/all: reduce 0/1 bytes.
        let op = match kind {
            Kind::Max => ReduceOp::Max,
            Kind::Min => ReduceOp::Min,
            _ => {
                return Err(Error::DType(format!(
                    "{} does not accept bool input; cast it to a number first",
                    node.op_type()
                )));
            }
        };
        let b = cast(ctx, x, DType::U8)?;
        let r = reduce(ctx, op, b, &axes, keep)?;
        return one(cast(ctx, r, DType::Bool)?);
    }
    let needs_float = matches!(kind, Kind::L2 | Kind::LogSum | Kind::LogSumExp);
    if needs_float && !dtype.is_float() {
        // ONNX defines these through Sqrt/Log/Exp, which are float-only (the reference refuses
        // integer LogSum/LogSumExp; integer L2 is computed in f64 and truncated as NumPy's astype).
        if kind != Kind::L2 {
            return Err(Error::Unsupported(format!(
                "{} of integer input ({dtype}) is not defined; cast it to a float first",
                node.op_type()
            )));
        }
        let xf = cast(ctx, x, DType::F64)?;
        let sq = bin(ctx, BinaryOp::Mul, xf, xf)?;
        let s = reduce(ctx, ReduceOp::Sum, sq, &axes, keep)?;
        let r = un(ctx, UnaryOp::Sqrt, s)?;
        return one(cast(ctx, r, dtype)?);
    }
    let y = match kind {
        Kind::Sum => reduce(ctx, ReduceOp::Sum, x, &axes, keep)?,
        Kind::Mean => reduce(ctx, ReduceOp::Mean, x, &axes, keep)?,
        Kind::Max => reduce(ctx, ReduceOp::Max, x, &axes, keep)?,
        Kind::Min => reduce(ctx, ReduceOp::Min, x, &axes, keep)?,
        Kind::Prod => reduce(ctx, ReduceOp::Prod, x, &axes, keep)?,
        Kind::L1 => {
            let a = if dtype.is_signed() {
                un(ctx, UnaryOp::Abs, x)?
            } else {
                x
            };
            reduce(ctx, ReduceOp::Sum, a, &axes, keep)?
        }
        Kind::L2 => {
            let sq = bin(ctx, BinaryOp::Mul, x, x)?;
            let s = reduce(ctx, ReduceOp::Sum, sq, &axes, keep)?;
            un(ctx, UnaryOp::Sqrt, s)?
        }
        Kind::SumSquare => {
            let sq = bin(ctx, BinaryOp::Mul, x, x)?;
            reduce(ctx, ReduceOp::Sum, sq, &axes, keep)?
        }
        Kind::LogSum => {
            let s = reduce(ctx, ReduceOp::Sum, x, &axes, keep)?;
            un(ctx, UnaryOp::Log, s)?
        }
        Kind::LogSumExp => log_sum_exp(ctx, x, &axes, keep)?,
    };
    one(y)
}

/// `log(sum(exp(x - m))) + m` with `m` the max over the finite elements (as the ONNX reference:
/// it keeps large inputs from overflowing, and an empty reduction gives -inf).
fn log_sum_exp(
    ctx: &mut Ctx,
    x: kiln_ir::NodeId,
    axes: &[usize],
    keep: bool,
) -> Result<kiln_ir::NodeId> {
    let inf = un(ctx, UnaryOp::IsInf, x)?;
    let ninf = scalar_like(ctx, x, f64::NEG_INFINITY)?;
    let finite = ctx.add(Op::Where, &[inf, ninf, x])?;
    let m = reduce(ctx, ReduceOp::Max, finite, axes, true)?;
    let d = bin(ctx, BinaryOp::Sub, x, m)?;
    let e = un(ctx, UnaryOp::Exp, d)?;
    let s = reduce(ctx, ReduceOp::Sum, e, axes, true)?;
    let l = un(ctx, UnaryOp::Log, s)?;
    let r = bin(ctx, BinaryOp::Add, l, m)?;
    if keep {
        return Ok(r);
    }
    let dims = ctx
        .dims(x)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, d)| d)
        .collect();
    reshape(ctx, r, dims)
}

/// ArgMax/ArgMin (opsets 1-13; `select_last_index` from 12).
fn arg_op(ctx: &mut Ctx, node: &NodeProto, op: ArgReduceOp) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis", "keepdims", "select_last_index"])?;
    let x = ctx.input(node, 0)?;
    let axis = normalize_axis(attrs::int(node, "axis", 0)?, ctx.rank(x), node.op_type())?;
    let keep_dims = attrs::int(node, "keepdims", 1)? != 0;
    let select_last = attrs::int(node, "select_last_index", 0)? != 0;
    one(ctx.add(
        Op::ArgReduce {
            op,
            axis,
            keep_dims,
            select_last,
        },
        &[x],
    )?)
}
