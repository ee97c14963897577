//! LayerNormalization, RMSNormalization, GroupNormalization, InstanceNormalization and
//! BatchNormalization (inference). Statistics are computed in `stash_type` where the op has
//! one, and the result cast back to the input dtype.

use super::{bin, cast, fixed_prod, reduce, reshape, scalar_like, stash_dtype, un};
use crate::import::{Convert, Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{
    BinaryOp, Dim, Error, NodeId, Op, ReduceOp, Result, Shape, UnaryOp, broadcast, normalize_axis,
};

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "LayerNormalization" => layer_norm,
        "RMSNormalization" => rms_norm,
        "GroupNormalization" => group_norm,
        "InstanceNormalization" => instance_norm,
        "BatchNormalization" => batch_norm,
        "LpNormalization" => super::norm_misc::lp_norm,
        "MeanVarianceNormalization" => super::norm_misc::mvn,
        "LRN" => super::norm_misc::lrn,
        _ => return None,
    })
}

/// True when output `i` of `node` is used (named).
fn wants_output(node: &NodeProto, i: usize) -> bool {
    node.output.get(i).is_some_and(|s| !s.is_empty())
}

/// True when `p`'s shape broadcasts to `dims` without changing them (what the IR LayerNorm
/// accepts for scale and bias).
fn fits(ctx: &Ctx, p: NodeId, dims: &[Dim]) -> bool {
    let want = Shape(dims.to_vec());
    broadcast(&ctx.ty(p).shape, &want, "LayerNormalization").is_ok_and(|s| s == want)
}

/// `x * scale (+ bias)` with broadcasting.
fn affine(ctx: &mut Ctx, x: NodeId, scale: NodeId, bias: Option<NodeId>) -> Result<NodeId> {
    let y = bin(ctx, BinaryOp::Mul, x, scale)?;
    match bias {
        Some(b) => bin(ctx, BinaryOp::Add, y, b),
        None => Ok(y),
    }
}

/// LayerNormalization (opset 17): Y, and Mean / InvStdDev (in the stash dtype) when asked for.
fn layer_norm(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis", "epsilon", "stash_type"])?;
    let x = ctx.input(node, 0)?;
    let scale = ctx.input(node, 1)?;
    let bias = ctx.opt_input(node, 2)?;
    let rank = ctx.rank(x);
    let axis = normalize_axis(attrs::int(node, "axis", -1)?, rank, "LayerNormalization")?;
    let eps = attrs::float(node, "epsilon", 1e-5)? as f64;
    let stash = stash_dtype(node, attrs::int(node, "stash_type", 1)?)?;
    let dtype = ctx.dtype(x);
    let dims = ctx.dims(x);
    let normalized = &dims[axis..];
    let params_fit = fits(ctx, scale, normalized) && bias.is_none_or(|b| fits(ctx, b, normalized));
    let y = if stash == dtype && params_fit {
        let mut ins = vec![x, scale];
        ins.extend(bias);
        ctx.add(Op::LayerNorm { axis, eps }, &ins)?
    } else {
        let xs = cast(ctx, x, stash)?;
        let n = ctx.add(Op::LayerNorm { axis, eps }, &[xs])?;
        let n = cast(ctx, n, dtype)?;
        affine(ctx, n, scale, bias)?
    };
    let mut outs = vec![Val::Node(y)];
    if wants_output(node, 1) || wants_output(node, 2) {
        let axes: Vec<usize> = (axis..rank).collect();
        let xs = cast(ctx, x, stash)?;
        let mean = reduce(ctx, ReduceOp::Mean, xs, &axes, true)?;
        let d = bin(ctx, BinaryOp::Sub, xs, mean)?;
        let sq = bin(ctx, BinaryOp::Mul, d, d)?;
        let var = reduce(ctx, ReduceOp::Mean, sq, &axes, true)?;
        let e = scalar_like(ctx, var, eps)?;
        let ve = bin(ctx, BinaryOp::Add, var, e)?;
        let inv = un(ctx, UnaryOp::Rsqrt, ve)?;
        outs.push(Val::Node(mean));
        outs.push(Val::Node(inv));
    }
    Ok(outs)
}

/// RMSNormalization (opset 23): `x / sqrt(mean(x²) + eps) * scale` over axes `axis..`.
fn rms_norm(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis", "epsilon", "stash_type"])?;
    let x = ctx.input(node, 0)?;
    let scale = ctx.input(node, 1)?;
    let rank = ctx.rank(x);
    let axis = normalize_axis(attrs::int(node, "axis", -1)?, rank, "RMSNormalization")?;
    let eps = attrs::float(node, "epsilon", 1e-5)? as f64;
    let stash = stash_dtype(node, attrs::int(node, "stash_type", 1)?)?;
    let dtype = ctx.dtype(x);
    let axes: Vec<usize> = (axis..rank).collect();
    let xs = cast(ctx, x, stash)?;
    let sq = bin(ctx, BinaryOp::Mul, xs, xs)?;
    let ms = reduce(ctx, ReduceOp::Mean, sq, &axes, true)?;
    let e = scalar_like(ctx, ms, eps)?;
    let mse = bin(ctx, BinaryOp::Add, ms, e)?;
    let rms = un(ctx, UnaryOp::Sqrt, mse)?;
    let inv = un(ctx, UnaryOp::Reciprocal, rms)?;
    let n = bin(ctx, BinaryOp::Mul, xs, inv)?;
    let n = cast(ctx, n, dtype)?;
    one(bin(ctx, BinaryOp::Mul, n, scale)?)
}

/// `p` (shape `[C]`) reshaped to `[C, 1, ..]` so it broadcasts over `[N, C, spatial..]`.
fn per_channel(ctx: &mut Ctx, p: NodeId, rank: usize) -> Result<NodeId> {
    let mut dims = ctx.dims(p);
    dims.extend(std::iter::repeat_n(Dim::Fixed(1), rank.saturating_sub(2)));
    reshape(ctx, p, dims)
}

/// GroupNormalization: opset 18 has one scale/bias per group (`[G]`), opset 21 one per
/// channel (`[C]`) and a `stash_type`.
fn group_norm(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    if ctx.opset >= 21 {
        attrs::check_known(node, &["epsilon", "num_groups", "stash_type"])?;
    } else {
        attrs::check_known(node, &["epsilon", "num_groups"])?;
    }
    let x = ctx.input(node, 0)?;
    let scale = ctx.input(node, 1)?;
    let bias = ctx.input(node, 2)?;
    let eps = attrs::float(node, "epsilon", 1e-5)? as f64;
    let groups = attrs::opt_int(node, "num_groups")?
        .ok_or_else(|| Error::Value("GroupNormalization needs the num_groups attribute".into()))?;
    let stash = stash_dtype(node, attrs::int(node, "stash_type", 1)?)?;
    let dims = ctx.dims(x);
    if dims.len() < 2 {
        return Err(Error::Shape(format!(
            "GroupNormalization needs [N, C, ..] input, got {}",
            ctx.ty(x).shape
        )));
    }
    let c = fixed_prod(&dims[1..2], "GroupNormalization")?;
    let rest = fixed_prod(&dims[2..], "GroupNormalization")?;
    let g = usize::try_from(groups).ok().filter(|&g| g > 0 && c % g == 0).ok_or_else(|| {
        Error::Value(format!("GroupNormalization: num_groups {groups} must be positive and divide the {c} channels"))
    })?;
    let dtype = ctx.dtype(x);
    let xs = cast(ctx, x, stash)?;
    let grouped = reshape(
        ctx,
        xs,
        vec![dims[0].clone(), Dim::Fixed(g), Dim::Fixed(c / g * rest)],
    )?;
    let n = ctx.add(Op::LayerNorm { axis: 2, eps }, &[grouped])?;
    let n = reshape(ctx, n, dims.clone())?;
    let n = cast(ctx, n, dtype)?;
    let (scale, bias) = if ctx.opset >= 21 {
        (scale, bias)
    } else {
        // One value per group: repeat each over the group's channels.
        let spread = |ctx: &mut Ctx, p: NodeId| -> Result<NodeId> {
            let col = reshape(ctx, p, vec![Dim::Fixed(g), Dim::Fixed(1)])?;
            let wide = ctx.add(Op::Expand(Shape::fixed(&[g, c / g])), &[col])?;
            reshape(ctx, wide, vec![Dim::Fixed(c)])
        };
        (spread(ctx, scale)?, spread(ctx, bias)?)
    };
    let scale = per_channel(ctx, scale, dims.len())?;
    let bias = per_channel(ctx, bias, dims.len())?;
    one(affine(ctx, n, scale, Some(bias))?)
}

/// InstanceNormalization: normalizes each `[n, c]` over the spatial axes, then `* scale[c] + bias[c]`.
fn instance_norm(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    if ctx.opset < 6 {
        attrs::check_known(node, &["epsilon", "consumed_inputs"])?;
    } else {
        attrs::check_known(node, &["epsilon"])?;
    }
    let x = ctx.input(node, 0)?;
    let scale = ctx.input(node, 1)?;
    let bias = ctx.input(node, 2)?;
    let eps = attrs::float(node, "epsilon", 1e-5)? as f64;
    let rank = ctx.rank(x);
    if rank < 3 {
        return Err(Error::Unsupported(format!(
            "InstanceNormalization of rank-{rank} input (no spatial axes) is not supported; it needs [N, C, D1, ..]"
        )));
    }
    let n = ctx.add(Op::LayerNorm { axis: 2, eps }, &[x])?;
    let scale = per_channel(ctx, scale, rank)?;
    let bias = per_channel(ctx, bias, rank)?;
    one(affine(ctx, n, scale, Some(bias))?)
}

/// BatchNormalization in inference mode (running mean and variance). Training mode
/// (`training_mode=1`, or `is_test=0` before opset 7) and per-activation statistics
/// (`spatial=0`) are refused.
fn batch_norm(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let known: &[&str] = match ctx.opset {
        ..6 => &[
            "epsilon",
            "momentum",
            "spatial",
            "is_test",
            "consumed_inputs",
        ],
        6 => &["epsilon", "momentum", "spatial", "is_test"],
        7 | 8 => &["epsilon", "momentum", "spatial"],
        9..=13 => &["epsilon", "momentum"],
        _ => &["epsilon", "momentum", "training_mode"],
    };
    attrs::check_known(node, known)?;
    if attrs::int(node, "training_mode", 0)? != 0 {
        return batch_norm_training(ctx, node);
    }
    if ctx.opset < 7 && attrs::int(node, "is_test", 0)? == 0 {
        return Err(Error::Unsupported(
            "BatchNormalization with is_test=0 (training mode, batch statistics) is not supported; export the model \
             in eval mode"
                .into(),
        ));
    }
    if attrs::int(node, "spatial", 1)? == 0 {
        return Err(Error::Unsupported(
            "BatchNormalization with spatial=0 (per-activation statistics) is not supported".into(),
        ));
    }
    let x = ctx.input(node, 0)?;
    let dtype = ctx.dtype(x);
    let mut ins = vec![x];
    for i in 1..5 {
        let p = ctx.input(node, i)?;
        ins.push(cast(ctx, p, dtype)?);
    }
    let eps = attrs::float(node, "epsilon", 1e-5)? as f64;
    one(ctx.add(Op::BatchNorm { eps }, &ins)?)
}

/// BatchNormalization with `training_mode=1` (opsets 14, 15): normalizes with the batch
/// statistics (mean and biased variance over every axis but 1) and also yields the running
/// statistics `input * momentum + batch * (1 - momentum)` in the running stats' dtype.
fn batch_norm_training(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let x = ctx.input(node, 0)?;
    let rank = ctx.rank(x);
    if rank < 2 {
        return Err(Error::Shape(format!(
            "BatchNormalization needs an input [N, C, ..], got {}",
            ctx.ty(x).shape
        )));
    }
    let dtype = ctx.dtype(x);
    let axes: Vec<usize> = (0..rank).filter(|&a| a != 1).collect();
    let mean = reduce(ctx, ReduceOp::Mean, x, &axes, true)?;
    let d = bin(ctx, BinaryOp::Sub, x, mean)?;
    let sq = bin(ctx, BinaryOp::Mul, d, d)?;
    let var = reduce(ctx, ReduceOp::Mean, sq, &axes, true)?;
    let c = ctx.dims(x)[1].clone();
    let mean_c = reshape(ctx, mean, vec![c.clone()])?;
    let var_c = reshape(ctx, var, vec![c])?;
    let eps = attrs::float(node, "epsilon", 1e-5)? as f64;
    let scale = ctx.input(node, 1)?;
    let scale = cast(ctx, scale, dtype)?;
    let bias = ctx.input(node, 2)?;
    let bias = cast(ctx, bias, dtype)?;
    let y = ctx.add(Op::BatchNorm { eps }, &[x, scale, bias, mean_c, var_c])?;
    let momentum = attrs::float(node, "momentum", 0.9)? as f64;
    let mut outs = vec![Val::Node(y)];
    for (i, batch) in [(3, mean_c), (4, var_c)] {
        let run = ctx.input(node, i)?;
        let batch = cast(ctx, batch, ctx.dtype(run))?;
        let m = scalar_like(ctx, run, momentum)?;
        let m1 = scalar_like(ctx, run, 1.0 - momentum)?;
        let a = bin(ctx, BinaryOp::Mul, run, m)?;
        let b = bin(ctx, BinaryOp::Mul, batch, m1)?;
        outs.push(Val::Node(bin(ctx, BinaryOp::Add, a, b)?));
    }
    Ok(outs)
}
