//! Pad (constant, reflect, edge, wrap; negative pads crop) and CenterCropPad.

use super::sym::{fixed_dim, norm_axes, slice_axis};
use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{Error, NodeId, Op, PadMode, Result};

/// ONNX Pad: `pads` (attribute before opset 11, input after; `paddings` in opset 1) as
/// `[begin.., end..]` over `axes` (input 3, opset 18; all axes by default).
pub(super) fn pad(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (pads, value, axes) = if ctx.opset < 11 {
        attrs::check_known(node, &["pads", "paddings", "value", "mode"])?;
        let name = if ctx.opset < 2 { "paddings" } else { "pads" };
        let pads =
            attrs::ints(node, name)?.ok_or_else(|| Error::Value(format!("Pad needs '{name}'")))?;
        (pads, attrs::float(node, "value", 0.0)? as f64, None)
    } else {
        attrs::check_known(node, &["mode"])?;
        let pads = ctx
            .const_ints(node, 1, "pads")?
            .ok_or_else(|| Error::Value("Pad needs input 'pads'".into()))?;
        let value = match ctx.const_floats(node, 2, "constant_value")? {
            Some(v) => *v
                .first()
                .ok_or_else(|| Error::Value("Pad: constant_value is empty".into()))?,
            None => 0.0,
        };
        let axes = if ctx.opset >= 18 {
            ctx.const_ints(node, 3, "axes")?
        } else {
            None
        };
        (pads, value, axes)
    };
    let x = ctx.input(node, 0)?;
    let rank = ctx.rank(x);
    let axes = match axes {
        Some(a) => norm_axes(&a, rank, "Pad")?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(Error::Shape(format!(
            "Pad: {} pads for {} axes (want 2 per axis)",
            pads.len(),
            axes.len()
        )));
    }
    let mut per_axis = vec![(0i64, 0i64); rank];
    for (k, &a) in axes.iter().enumerate() {
        per_axis[a] = (pads[k], pads[k + axes.len()]);
    }
    let mode = attrs::string(node, "mode")?.unwrap_or_else(|| "constant".into());
    let mode = match mode.as_str() {
        "constant" => Some(PadMode::Constant(value)),
        "reflect" => Some(PadMode::Reflect),
        "edge" => Some(PadMode::Edge),
        "wrap" => None,
        m => {
            return Err(Error::Unsupported(format!(
                "Pad mode '{m}' (kiln supports constant, reflect, edge, wrap)"
            )));
        }
    };
    pad_axes(ctx, x, &per_axis, mode)
}

/// Crops negative pads, then pads by `mode` (`None`: wrap around).
fn pad_axes(
    ctx: &mut Ctx,
    mut x: NodeId,
    per_axis: &[(i64, i64)],
    mode: Option<PadMode>,
) -> Result<Vec<Val>> {
    for (a, &(b, e)) in per_axis.iter().enumerate() {
        if b < 0 || e < 0 {
            let d = fixed_dim(&ctx.dims(x)[a], "Pad", "dim where it crops")? as i64;
            let (start, end) = ((-b).max(0), d - (-e).max(0));
            if start > end {
                return Err(Error::Shape(format!(
                    "Pad: pads ({b}, {e}) crop more than the dim {d}"
                )));
            }
            x = slice_axis(ctx, x, a, start, end, 1)?;
        }
    }
    let pos: Vec<(usize, usize)> = per_axis
        .iter()
        .map(|&(b, e)| (b.max(0) as usize, e.max(0) as usize))
        .collect();
    if pos.iter().all(|&p| p == (0, 0)) {
        return one(x);
    }
    match mode {
        Some(mode) => one(ctx.add(Op::Pad { pads: pos, mode }, &[x])?),
        None => {
            for (a, &(b, e)) in pos.iter().enumerate() {
                if (b, e) != (0, 0) {
                    x = wrap_axis(ctx, x, a, b, e)?;
                }
            }
            one(x)
        }
    }
}

/// Wrap padding of one axis: enough copies of the input side by side, then the window
/// `[-b, d + e)` of the middle copy (so pads larger than the dim repeat periodically).
fn wrap_axis(ctx: &mut Ctx, x: NodeId, axis: usize, b: usize, e: usize) -> Result<NodeId> {
    let d = fixed_dim(&ctx.dims(x)[axis], "Pad", "dim to wrap")?;
    if d == 0 {
        return Err(Error::Shape("Pad: cannot wrap-pad an empty dim".into()));
    }
    let (kb, ke) = (b.div_ceil(d), e.div_ceil(d));
    let copies = vec![x; kb + 1 + ke];
    let tiled = ctx.add(Op::Concat { axis }, &copies)?;
    let start = (kb * d - b) as i64;
    slice_axis(ctx, tiled, axis, start, start + (b + d + e) as i64, 1)
}

/// Crops (centred, extra element from the end) or zero-pads (extra element at the end) each
/// of `axes` to the constant target `shape`.
pub(super) fn center_crop_pad(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axes"])?;
    let x = ctx.input(node, 0)?;
    let rank = ctx.rank(x);
    let shape = ctx
        .const_ints(node, 1, "shape")?
        .ok_or_else(|| Error::Value("CenterCropPad needs 'shape'".into()))?;
    let axes = match attrs::ints(node, "axes")? {
        Some(a) => norm_axes(&a, rank, "CenterCropPad")?,
        None => (0..rank).collect(),
    };
    if shape.len() != axes.len() {
        return Err(Error::Shape(format!(
            "CenterCropPad: {} target sizes for {} axes",
            shape.len(),
            axes.len()
        )));
    }
    let mut per_axis = vec![(0i64, 0i64); rank];
    for (&a, &want) in axes.iter().zip(&shape) {
        let d = fixed_dim(&ctx.dims(x)[a], "CenterCropPad", "dim")? as i64;
        if want < 0 {
            return Err(Error::Value(format!(
                "CenterCropPad: target size {want} is negative"
            )));
        }
        // Negative pads crop: the same begin/end split both ways.
        let diff = want - d;
        let before = if diff >= 0 { diff / 2 } else { -((-diff) / 2) };
        per_axis[a] = (before, diff - before);
    }
    pad_axes(ctx, x, &per_axis, Some(PadMode::Constant(0.0)))
}
