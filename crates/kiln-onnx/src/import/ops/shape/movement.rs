//! Movement ops: Transpose, Concat, Slice, Split, DepthToSpace, SpaceToDepth, ReverseSequence,
//! Compress. Concat and Slice also work on symbolic shape values.

use super::sym::{dims_val, fixed_dim, i64_const, norm_axes, slice_axis, sym_input};
use crate::import::{Ctx, SymInt, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{Dim, Error, NodeId, Op, Result, Shape, SliceAxis, normalize_axis};

/// Permutes axes (`perm`, default reversed).
pub(super) fn transpose(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["perm"])?;
    let x = ctx.input(node, 0)?;
    let r = ctx.rank(x);
    let perm = match attrs::ints(node, "perm")? {
        Some(p) => p
            .iter()
            .map(|&a| {
                usize::try_from(a).map_err(|_| {
                    Error::Value(format!("Transpose: perm {p:?} has a negative entry"))
                })
            })
            .collect::<Result<Vec<_>>>()?,
        None => (0..r).rev().collect(),
    };
    if perm.iter().copied().eq(0..r) {
        return one(x);
    }
    one(ctx.add(Op::Permute(perm), &[x])?)
}

/// Joins along `axis`; symbolic shape values are joined entry-wise.
pub(super) fn concat(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis"])?;
    let axis = attrs::opt_int(node, "axis")?;
    let present: Vec<usize> = (0..node.input.len())
        .filter(|&i| Ctx::has_input(node, i))
        .collect();
    if present.iter().any(|&i| sym_input(ctx, node, i).is_some()) {
        let mut entries = Vec::new();
        for &i in &present {
            let (d, scalar) = ctx.dims_input(node, i).ok_or_else(|| {
                Error::Unsupported("Concat of a symbolic shape value with a run-time tensor".into())
            })?;
            if scalar {
                return Err(Error::Shape("Concat: inputs must have rank >= 1".into()));
            }
            entries.extend(d);
        }
        return Ok(vec![dims_val(ctx, entries, false)?]);
    }
    let ids = present
        .iter()
        .map(|&i| ctx.input(node, i))
        .collect::<Result<Vec<NodeId>>>()?;
    let first = *ids
        .first()
        .ok_or_else(|| Error::Graph("Concat needs at least one input".into()))?;
    let axis = normalize_axis(axis.unwrap_or(1), ctx.rank(first), "Concat")?;
    if ids.len() == 1 {
        return one(first);
    }
    one(ctx.add(Op::Concat { axis }, &ids)?)
}

/// Strided slices (attributes before opset 10; inputs starts/ends/axes/steps after).
pub(super) fn slice(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (starts, ends, axes, steps) = if ctx.opset < 10 {
        attrs::check_known(node, &["starts", "ends", "axes"])?;
        let need = |n: &str| {
            attrs::ints(node, n)?.ok_or_else(|| Error::Value(format!("Slice-1 needs '{n}'")))
        };
        (
            need("starts")?,
            need("ends")?,
            attrs::ints(node, "axes")?,
            None,
        )
    } else {
        attrs::check_known(node, &[])?;
        let need = |ctx: &mut Ctx, i: usize, n: &str| {
            ctx.const_ints(node, i, n)?
                .ok_or_else(|| Error::Value(format!("Slice needs input '{n}'")))
        };
        let starts = need(ctx, 1, "starts")?;
        let ends = need(ctx, 2, "ends")?;
        (
            starts,
            ends,
            ctx.const_ints(node, 3, "axes")?,
            ctx.const_ints(node, 4, "steps")?,
        )
    };
    let n = starts.len();
    if ends.len() != n
        || axes.as_ref().is_some_and(|a| a.len() != n)
        || steps.as_ref().is_some_and(|s| s.len() != n)
    {
        return Err(Error::Shape(format!(
            "Slice: starts {starts:?}, ends {ends:?}, axes {axes:?}, steps {steps:?} differ in length"
        )));
    }
    let axes = axes.unwrap_or_else(|| (0..n as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; n]);
    if let Some((d, false)) = sym_input(ctx, node, 0) {
        norm_axes(&axes, 1, "Slice")?;
        if n == 0 {
            return Ok(vec![Val::Dims {
                dims: d,
                scalar: false,
            }]);
        }
        let s = SliceAxis {
            start: starts[0],
            end: ends[0],
            step: steps[0],
        };
        if s.step == 0 {
            return Err(Error::Value("Slice: step must not be zero".into()));
        }
        let (start, _, count) = s.resolve(d.len());
        let picked: Vec<SymInt> = (0..count as i64)
            .map(|k| d[(start + k * s.step) as usize].clone())
            .collect();
        return Ok(vec![dims_val(ctx, picked, false)?]);
    }
    let x = ctx.input(node, 0)?;
    let rank = ctx.rank(x);
    let axes = norm_axes(&axes, rank, "Slice")?;
    let mut spec = vec![SliceAxis::FULL; rank];
    for (k, &a) in axes.iter().enumerate() {
        if steps[k] == 0 {
            return Err(Error::Value("Slice: step must not be zero".into()));
        }
        spec[a] = SliceAxis {
            start: starts[k],
            end: ends[k],
            step: steps[k],
        };
    }
    if spec.iter().all(|s| *s == SliceAxis::FULL) {
        return one(x);
    }
    one(ctx.add(Op::Slice(spec), &[x])?)
}

/// Splits along `axis` into the node's outputs: by `split` sizes (attribute before opset 13,
/// input after), else into equal parts (opset 18 `num_outputs`: the last part may be smaller).
pub(super) fn split(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis", "split", "num_outputs"])?;
    let x = ctx.input(node, 0)?;
    let dims = ctx.dims(x);
    let axis = normalize_axis(attrs::int(node, "axis", 0)?, dims.len(), "Split")?;
    let sizes = if ctx.opset < 13 {
        attrs::ints(node, "split")?
    } else {
        ctx.const_ints(node, 1, "split")?
    };
    let outputs = node.output.len();
    let sizes: Vec<i64> = match sizes {
        Some(s) => s,
        None => {
            let n = attrs::opt_int(node, "num_outputs")?.map_or(outputs, |n| n.max(0) as usize);
            if n == 1 {
                return one(x);
            }
            let d = fixed_dim(&dims[axis], "Split", "split axis")? as i64;
            let n = n as i64;
            if n == 0 {
                return Err(Error::Value("Split: zero outputs".into()));
            }
            let part = if d % n == 0 { d / n } else { d / n + 1 };
            let mut s = vec![part; n as usize];
            if let Some(last) = s.last_mut() {
                *last = d - part * (n - 1);
            }
            if s.iter().any(|&v| v < 0) {
                return Err(Error::Shape(format!(
                    "Split: cannot split {d} into {n} parts"
                )));
            }
            s
        }
    };
    let d = fixed_dim(&dims[axis], "Split", "split axis")? as i64;
    if sizes.iter().any(|&v| v < 0) || sizes.iter().sum::<i64>() != d {
        return Err(Error::Shape(format!(
            "Split: sizes {sizes:?} do not add up to dim {d} of axis {axis}"
        )));
    }
    let mut outs = Vec::with_capacity(sizes.len());
    let mut pos = 0;
    for s in sizes {
        outs.push(Val::Node(slice_axis(ctx, x, axis, pos, pos + s, 1)?));
        pos += s;
    }
    Ok(outs)
}

/// The `[N, C, H, W]` dims of a 4-D input, C/H/W static.
fn nchw(ctx: &Ctx, x: NodeId, op: &str) -> Result<(Dim, usize, usize, usize)> {
    let d = ctx.dims(x);
    let [n, c, h, w] = d.as_slice() else {
        return Err(Error::Shape(format!(
            "{op} needs a 4-D input, got {}",
            Shape(d.clone())
        )));
    };
    Ok((
        n.clone(),
        fixed_dim(c, op, "C")?,
        fixed_dim(h, op, "H")?,
        fixed_dim(w, op, "W")?,
    ))
}

/// Block size `blocksize` (>= 1).
fn block(node: &NodeProto) -> Result<usize> {
    let b = attrs::int(node, "blocksize", 0)?;
    usize::try_from(b)
        .ok()
        .filter(|&b| b >= 1)
        .ok_or_else(|| Error::Value(format!("{} needs blocksize >= 1, got {b}", node.op_type())))
}

/// Moves channel blocks into space (modes DCR, the default, and CRD).
pub(super) fn depth_to_space(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["blocksize", "mode"])?;
    let b = block(node)?;
    let x = ctx.input(node, 0)?;
    let (n, c, h, w) = nchw(ctx, x, "DepthToSpace")?;
    if c % (b * b) != 0 {
        return Err(Error::Shape(format!(
            "DepthToSpace: C = {c} is not divisible by blocksize² = {}",
            b * b
        )));
    }
    let c2 = c / (b * b);
    let f = Dim::Fixed;
    let (split, perm) = match attrs::string(node, "mode")?.as_deref().unwrap_or("DCR") {
        "DCR" => (
            vec![n.clone(), f(b), f(b), f(c2), f(h), f(w)],
            vec![0, 3, 4, 1, 5, 2],
        ),
        "CRD" => (
            vec![n.clone(), f(c2), f(b), f(b), f(h), f(w)],
            vec![0, 1, 4, 2, 5, 3],
        ),
        m => {
            return Err(Error::Unsupported(format!(
                "DepthToSpace mode '{m}' (kiln supports DCR, CRD)"
            )));
        }
    };
    let a = ctx.add(Op::Reshape(Shape(split)), &[x])?;
    let p = ctx.add(Op::Permute(perm), &[a])?;
    one(ctx.add(Op::Reshape(Shape(vec![n, f(c2), f(h * b), f(w * b)])), &[p])?)
}

/// Moves spatial blocks into channels (modes DCR, the default, and CRD from opset 28).
pub(super) fn space_to_depth(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["blocksize", "mode"])?;
    let b = block(node)?;
    let perm = match attrs::string(node, "mode")?.as_deref().unwrap_or("DCR") {
        "DCR" => vec![0, 3, 5, 1, 2, 4],
        "CRD" => vec![0, 1, 3, 5, 2, 4],
        m => {
            return Err(Error::Unsupported(format!(
                "SpaceToDepth mode '{m}' (kiln supports DCR, CRD)"
            )));
        }
    };
    let x = ctx.input(node, 0)?;
    let (n, c, h, w) = nchw(ctx, x, "SpaceToDepth")?;
    if h % b != 0 || w % b != 0 {
        return Err(Error::Shape(format!(
            "SpaceToDepth: H = {h} and W = {w} must be divisible by blocksize {b}"
        )));
    }
    let f = Dim::Fixed;
    let a = ctx.add(
        Op::Reshape(Shape(vec![n.clone(), f(c), f(h / b), f(b), f(w / b), f(b)])),
        &[x],
    )?;
    let p = ctx.add(Op::Permute(perm), &[a])?;
    one(ctx.add(
        Op::Reshape(Shape(vec![n, f(c * b * b), f(h / b), f(w / b)])),
        &[p],
    )?)
}

/// Reverses the first `sequence_lens[i]` steps along `time_axis` of each batch entry `i`
/// (constant lengths: per-entry slices, reversed prefixes, concatenated back).
pub(super) fn reverse_sequence(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["batch_axis", "time_axis"])?;
    let x = ctx.input(node, 0)?;
    let dims = ctx.dims(x);
    let batch_axis = normalize_axis(
        attrs::int(node, "batch_axis", 1)?,
        dims.len(),
        "ReverseSequence",
    )?;
    let time_axis = normalize_axis(
        attrs::int(node, "time_axis", 0)?,
        dims.len(),
        "ReverseSequence",
    )?;
    if batch_axis == time_axis {
        return Err(Error::Value(
            "ReverseSequence: batch_axis and time_axis must differ".into(),
        ));
    }
    let lens = ctx
        .const_ints(node, 1, "sequence_lens")?
        .ok_or_else(|| Error::Graph("ReverseSequence needs sequence_lens".into()))?;
    let batch = fixed_dim(&dims[batch_axis], "ReverseSequence", "batch dim")?;
    let steps = fixed_dim(&dims[time_axis], "ReverseSequence", "time dim")? as i64;
    if lens.len() != batch {
        return Err(Error::Shape(format!(
            "ReverseSequence: {} sequence_lens for batch {batch}",
            lens.len()
        )));
    }
    let mut parts = Vec::with_capacity(batch);
    for (i, &len) in lens.iter().enumerate() {
        if !(0..=steps).contains(&len) {
            return Err(Error::Value(format!(
                "ReverseSequence: length {len} is outside 0..={steps}"
            )));
        }
        let row = slice_axis(ctx, x, batch_axis, i as i64, i as i64 + 1, 1)?;
        if len <= 1 {
            parts.push(row);
            continue;
        }
        let rev = slice_axis(ctx, row, time_axis, len - 1, i64::MIN, -1)?;
        let part = if len < steps {
            let rest = slice_axis(ctx, row, time_axis, len, steps, 1)?;
            ctx.add(Op::Concat { axis: time_axis }, &[rev, rest])?
        } else {
            rev
        };
        parts.push(part);
    }
    if parts.len() == 1 {
        return one(parts[0]);
    }
    one(ctx.add(Op::Concat { axis: batch_axis }, &parts)?)
}

/// Keeps the slices along `axis` (or of the flattened input) where the constant condition holds.
pub(super) fn compress(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis"])?;
    let cond = ctx
        .const_input(node, 1, "condition")?
        .ok_or_else(|| Error::Graph("Compress needs a condition".into()))?
        .to_f64_vec();
    let mut x = ctx.input(node, 0)?;
    let axis = match attrs::opt_int(node, "axis")? {
        Some(a) => normalize_axis(a, ctx.rank(x), "Compress")?,
        None => {
            let n = ctx.fixed_shape(x, "Compress")?.iter().product::<usize>();
            x = ctx.add(Op::Reshape(Shape::fixed(&[n])), &[x])?;
            0
        }
    };
    let dim = fixed_dim(&ctx.dims(x)[axis], "Compress", "axis")?;
    let mut keep = Vec::new();
    for (i, &c) in cond.iter().enumerate() {
        if c != 0.0 {
            if i >= dim {
                return Err(Error::Shape(format!(
                    "Compress: condition entry {i} is true but the axis has {dim} entries"
                )));
            }
            keep.push(i as i64);
        }
    }
    let n = keep.len();
    let idx = i64_const(ctx, keep, &[n])?;
    one(ctx.add(Op::Gather { axis }, &[x, idx])?)
}
