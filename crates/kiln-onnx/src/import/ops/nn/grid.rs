//! GridSample: 2-D as the IR op; 3-D (volumetric, trilinear or nearest, zeros or border
//! padding) as a depth-weighted sum of 2-D samplings of the depth planes.

use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{
    BinaryOp, DType, Dim, Error, GridSampleAttrs, GridSampleMode, GridSamplePadding, NodeId, Op,
    Result, Shape, SliceAxis, UnaryOp,
};

/// ONNX GridSample (opsets 16, 20, 22): mode names of both spellings are accepted.
pub(super) fn grid_sample(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["align_corners", "mode", "padding_mode"])?;
    let x = ctx.input(node, 0)?;
    let grid = ctx.input(node, 1)?;
    if ctx.rank(x) != 4 && ctx.rank(x) != 5 {
        return Err(Error::Unsupported(format!(
            "GridSample on a rank-{} input {} is not supported by kiln (2-D [N, C, H, W] and 3-D [N, C, D, H, W] only)",
            ctx.rank(x),
            ctx.ty(x).shape
        )));
    }
    let mode = match attrs::string(node, "mode")?
        .as_deref()
        .unwrap_or("bilinear")
    {
        "bilinear" | "linear" => GridSampleMode::Bilinear,
        "nearest" => GridSampleMode::Nearest,
        "bicubic" | "cubic" => GridSampleMode::Bicubic,
        m => return Err(Error::Value(format!("GridSample mode '{m}' is not known"))),
    };
    let padding = match attrs::string(node, "padding_mode")?
        .as_deref()
        .unwrap_or("zeros")
    {
        "zeros" => GridSamplePadding::Zeros,
        "border" => GridSamplePadding::Border,
        "reflection" => GridSamplePadding::Reflection,
        m => {
            return Err(Error::Value(format!(
                "GridSample padding_mode '{m}' is not known"
            )));
        }
    };
    let align_corners = attrs::int(node, "align_corners", 0)? != 0;
    let a = GridSampleAttrs {
        mode,
        padding,
        align_corners,
    };
    if ctx.rank(x) == 5 {
        return one(grid_sample_3d(ctx, x, grid, a)?);
    }
    one(ctx.add(Op::GridSample(a), &[x, grid])?)
}

/// Volumetric GridSample: x `[N, C, D, H, W]`, grid `[N, Do, Ho, Wo, 3]` of `(x, y, z)`.
/// Every depth plane `d` is sampled in 2-D at the `(x, y)` of all output points, then weighted
/// by its depth weight at the point's `z` (linear: `max(0, 1 - |z - d|)`; nearest: `z`
/// rounded half to even equals `d`) and the planes summed: taps outside the depth read 0
/// (zeros padding), and border padding clamps `z` into the depth first.
fn grid_sample_3d(ctx: &mut Ctx, x: NodeId, grid: NodeId, a: GridSampleAttrs) -> Result<NodeId> {
    let xs = ctx.fixed_shape(x, "GridSample (3-D)")?;
    let gs = ctx.fixed_shape(grid, "GridSample (3-D)")?;
    if gs.len() != 5 || gs[4] != 3 || gs[0] != xs[0] {
        return Err(Error::Shape(format!(
            "GridSample: a 3-D input {xs:?} needs a grid [N, Do, Ho, Wo, 3], got {gs:?}"
        )));
    }
    if a.mode == GridSampleMode::Bicubic || a.padding == GridSamplePadding::Reflection {
        return Err(Error::Unsupported(format!(
            "GridSample on a 3-D input with {:?} mode and {:?} padding is not supported by kiln \
             (linear or nearest with zeros or border padding)",
            a.mode, a.padding
        )));
    }
    let (n, depth) = (xs[0], xs[2]);
    let rows = gs[1] * gs[2];
    let coords = |ctx: &mut Ctx, start: i64, end: i64, last: usize| -> Result<NodeId> {
        let mut axes = vec![SliceAxis::FULL; 5];
        axes[4] = SliceAxis {
            start,
            end,
            step: 1,
        };
        let c = ctx.add(Op::Slice(axes), &[grid])?;
        let dims = [n, rows, gs[3], last].map(Dim::Fixed).to_vec();
        ctx.add(Op::Reshape(Shape(dims)), &[c])
    };
    let xy = coords(ctx, 0, 2, 2)?;
    // z as [N, 1, Do*Ho, Wo] in f64, to broadcast over the channels of the 2-D samples.
    let z = coords(ctx, 2, 3, 1)?;
    let z = ctx.add(Op::Permute(vec![0, 3, 1, 2]), &[z])?;
    let z = ctx.add(Op::Cast(DType::F64), &[z])?;
    let zp = unnormalize(ctx, z, depth, a.align_corners)?;
    let zp = match a.mode {
        GridSampleMode::Nearest => ctx.add(Op::Unary(UnaryOp::Round), &[zp])?,
        _ => zp,
    };
    let zp = if a.padding == GridSamplePadding::Border {
        let lo = ctx.scalar(DType::F64, 0.0)?;
        let hi = ctx.scalar(DType::F64, (depth - 1) as f64)?;
        let c = ctx.add(Op::Binary(BinaryOp::Max), &[zp, lo])?;
        ctx.add(Op::Binary(BinaryOp::Min), &[c, hi])?
    } else {
        zp
    };
    let dtype = ctx.dtype(x);
    let one = ctx.scalar(DType::F64, 1.0)?;
    let mut acc: Option<NodeId> = None;
    for d in 0..depth {
        let mut axes = vec![SliceAxis::FULL; 5];
        axes[2] = SliceAxis {
            start: d as i64,
            end: d as i64 + 1,
            step: 1,
        };
        let plane = ctx.add(Op::Slice(axes), &[x])?;
        let dims = [n, xs[1], xs[3], xs[4]].map(Dim::Fixed).to_vec();
        let plane = ctx.add(Op::Reshape(Shape(dims)), &[plane])?;
        let s = ctx.add(Op::GridSample(a), &[plane, xy])?;
        let dv = ctx.scalar(DType::F64, d as f64)?;
        let wt = match a.mode {
            GridSampleMode::Nearest => {
                let hit = ctx.add(Op::Binary(BinaryOp::Eq), &[zp, dv])?;
                ctx.add(Op::Cast(DType::F64), &[hit])?
            }
            _ => {
                let diff = ctx.add(Op::Binary(BinaryOp::Sub), &[zp, dv])?;
                let dist = ctx.add(Op::Unary(UnaryOp::Abs), &[diff])?;
                let w = ctx.add(Op::Binary(BinaryOp::Sub), &[one, dist])?;
                ctx.add(Op::Unary(UnaryOp::Relu), &[w])?
            }
        };
        let wt = ctx.add(Op::Cast(dtype), &[wt])?;
        let term = ctx.add(Op::Binary(BinaryOp::Mul), &[s, wt])?;
        acc = Some(match acc {
            None => term,
            Some(p) => ctx.add(Op::Binary(BinaryOp::Add), &[p, term])?,
        });
    }
    let y = acc.ok_or_else(|| Error::Shape("GridSample: empty input depth".into()))?;
    // A NaN z matches no plane in nearest mode; ONNX gives NaN there, as the linear weights do.
    let y = if a.mode == GridSampleMode::Nearest {
        let nan = ctx.add(Op::Unary(UnaryOp::IsNan), &[zp])?;
        let zx = ctx.add(Op::Cast(dtype), &[zp])?;
        ctx.add(Op::Where, &[nan, zx, y])?
    } else {
        y
    };
    let dims = [n, xs[1], gs[1], gs[2], gs[3]].map(Dim::Fixed).to_vec();
    ctx.add(Op::Reshape(Shape(dims)), &[y])
}

/// A normalized coordinate in `[-1, 1]` as a pixel coordinate along an axis of `len`.
fn unnormalize(ctx: &mut Ctx, g: NodeId, len: usize, align_corners: bool) -> Result<NodeId> {
    let one = ctx.scalar(DType::F64, 1.0)?;
    let half = ctx.scalar(DType::F64, 0.5)?;
    let t = ctx.add(Op::Binary(BinaryOp::Add), &[g, one])?;
    if align_corners {
        let f = ctx.scalar(DType::F64, (len as f64 - 1.0) / 2.0)?;
        return ctx.add(Op::Binary(BinaryOp::Mul), &[t, f]);
    }
    let l = ctx.scalar(DType::F64, len as f64)?;
    let t = ctx.add(Op::Binary(BinaryOp::Mul), &[t, l])?;
    let t = ctx.add(Op::Binary(BinaryOp::Sub), &[t, one])?;
    ctx.add(Op::Binary(BinaryOp::Mul), &[t, half])
}
