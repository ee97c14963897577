//! Index ops: Gather (also on symbolic shape values), GatherElements, GatherND, Scatter /
//! ScatterElements and ScatterND.

use super::sym::{dims_val, sym_input};
use crate::import::{Ctx, SymInt, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{Error, Op, Result, ScatterReduction, normalize_axis};

/// `data[.., indices, ..]` along `axis`; a symbolic shape value with constant indices stays symbolic.
pub(super) fn gather(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis"])?;
    let axis = attrs::int(node, "axis", 0)?;
    if let Some((d, false)) = sym_input(ctx, node, 0)
        && let Some((idx, scalar)) = ctx.dims_input(node, 1)
    {
        normalize_axis(axis, 1, "Gather")?;
        let n = d.len() as i64;
        let mut picked = Vec::with_capacity(idx.len());
        for i in idx {
            let SymInt::Int(i) = i else {
                return Err(Error::Unsupported("Gather with symbolic indices".into()));
            };
            let j = if i < 0 { i + n } else { i };
            if !(0..n).contains(&j) {
                return Err(Error::Value(format!(
                    "Gather: index {i} is out of range for {n} entries"
                )));
            }
            picked.push(d[j as usize].clone());
        }
        return Ok(vec![dims_val(ctx, picked, scalar)?]);
    }
    let x = ctx.input(node, 0)?;
    let idx = ctx.input(node, 1)?;
    let axis = normalize_axis(axis, ctx.rank(x), "Gather")?;
    one(ctx.add(Op::Gather { axis }, &[x, idx])?)
}

/// `torch.gather` along `axis`.
pub(super) fn gather_elements(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis"])?;
    let x = ctx.input(node, 0)?;
    let idx = ctx.input(node, 1)?;
    let axis = normalize_axis(attrs::int(node, "axis", 0)?, ctx.rank(x), "GatherElements")?;
    one(ctx.add(Op::GatherElements { axis }, &[x, idx])?)
}

/// Gathers slices by index tuples (`batch_dims` from opset 12).
pub(super) fn gather_nd(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["batch_dims"])?;
    let x = ctx.input(node, 0)?;
    let idx = ctx.input(node, 1)?;
    let b = attrs::int(node, "batch_dims", 0)?;
    let batch_dims = usize::try_from(b)
        .map_err(|_| Error::Value(format!("GatherND: batch_dims {b} is negative")))?;
    one(ctx.add(Op::GatherNd { batch_dims }, &[x, idx])?)
}

/// The `reduction` attribute (opset 16: add/mul, opset 18: max/min).
fn reduction(node: &NodeProto) -> Result<ScatterReduction> {
    Ok(
        match attrs::string(node, "reduction")?
            .as_deref()
            .unwrap_or("none")
        {
            "none" => ScatterReduction::None,
            "add" => ScatterReduction::Add,
            "mul" => ScatterReduction::Mul,
            "max" => ScatterReduction::Max,
            "min" => ScatterReduction::Min,
            r => {
                return Err(Error::Unsupported(format!(
                    "{} reduction '{r}'",
                    node.op_type()
                )));
            }
        },
    )
}

/// ScatterElements (and its old name Scatter, which has no reduction).
pub(super) fn scatter_elements(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis", "reduction"])?;
    let x = ctx.input(node, 0)?;
    let idx = ctx.input(node, 1)?;
    let upd = ctx.input(node, 2)?;
    let axis = normalize_axis(attrs::int(node, "axis", 0)?, ctx.rank(x), node.op_type())?;
    let reduction = reduction(node)?;
    one(ctx.add(Op::ScatterElements { axis, reduction }, &[x, idx, upd])?)
}

/// Replaces (or combines) slices addressed by index tuples.
pub(super) fn scatter_nd(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["reduction"])?;
    let x = ctx.input(node, 0)?;
    let idx = ctx.input(node, 1)?;
    let upd = ctx.input(node, 2)?;
    let reduction = reduction(node)?;
    one(ctx.add(Op::ScatterNd { reduction }, &[x, idx, upd])?)
}
