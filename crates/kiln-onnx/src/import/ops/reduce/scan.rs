//! CumSum, CumProd and TopK.

use crate::import::{Convert, Ctx, Val, attrs};
use crate::proto::NodeProto;
use kiln_ir::{CumulativeOp, Error, Op, Result, TopKOutput, normalize_axis};

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "CumSum" => |c, n| cumulative(c, n, CumulativeOp::Sum),
        "CumProd" => |c, n| cumulative(c, n, CumulativeOp::Prod),
        "TopK" => topk,
        _ => return None,
    })
}

/// The single integer of input `i` (a scalar or a 1-element tensor), known at import time.
fn one_int(ctx: &mut Ctx, node: &NodeProto, i: usize, what: &str) -> Result<i64> {
    let v = ctx
        .const_ints(node, i, what)?
        .ok_or_else(|| Error::Graph(format!("{} needs input {i} ({what})", node.op_type())))?;
    match v.as_slice() {
        [k] => Ok(*k),
        _ => Err(Error::Shape(format!(
            "{} input {i} ({what}) must hold one value, got {v:?}",
            node.op_type()
        ))),
    }
}

/// CumSum (opset 11+) / CumProd: the axis is a scalar input; `exclusive` and `reverse` attributes.
fn cumulative(ctx: &mut Ctx, node: &NodeProto, op: CumulativeOp) -> Result<Vec<Val>> {
    attrs::check_known(node, &["exclusive", "reverse"])?;
    let x = ctx.input(node, 0)?;
    let axis = one_int(ctx, node, 1, "axis")?;
    let axis = normalize_axis(axis, ctx.rank(x), node.op_type())?;
    let exclusive = attrs::int(node, "exclusive", 0)? != 0;
    let reverse = attrs::int(node, "reverse", 0)? != 0;
    Ok(vec![Val::Node(ctx.add(
        Op::Cumulative {
            op,
            axis,
            exclusive,
            reverse,
        },
        &[x],
    )?)])
}

/// TopK: `k` is an attribute before opset 10, an input from then on; `largest` and `sorted`
/// from opset 11. Yields values and indices as two IR nodes.
fn topk(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let k = if ctx.opset < 10 {
        attrs::check_known(node, &["axis", "k"])?;
        attrs::opt_int(node, "k")?
            .ok_or_else(|| Error::Value("TopK (opset < 10) needs the k attribute".into()))?
    } else {
        if ctx.opset < 11 {
            attrs::check_known(node, &["axis"])?;
        } else {
            attrs::check_known(node, &["axis", "largest", "sorted"])?;
        }
        one_int(ctx, node, 1, "k")?
    };
    let x = ctx.input(node, 0)?;
    let axis = normalize_axis(attrs::int(node, "axis", -1)?, ctx.rank(x), "TopK")?;
    let k =
        usize::try_from(k).map_err(|_| Error::Value(format!("TopK: k must be >= 0, got {k}")))?;
    let largest = attrs::int(node, "largest", 1)? != 0;
    let sorted = attrs::int(node, "sorted", 1)? != 0;
    let values = ctx.add(
        Op::TopK {
            axis,
            k,
            largest,
            sorted,
            output: TopKOutput::Values,
        },
        &[x],
    )?;
    let indices = ctx.add(
        Op::TopK {
            axis,
            k,
            largest,
            sorted,
            output: TopKOutput::Indices,
        },
        &[x],
    )?;
    Ok(vec![Val::Node(values), Val::Node(indices)])
}
