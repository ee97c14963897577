//! Ops that read or set shapes: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Expand,
//! Tile. Shape values with symbolic dims flow through them as [`Val::Dims`].

use super::sym::{
    all_ints, axes_attr_or_input, dims_product, dims_val, input_dims, norm_axes, shape_entries,
    sym_input, to_dim,
};
use crate::import::{Ctx, SymInt, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{Dim, Error, Op, Result, Shape, broadcast};

/// The input's shape as an i64 vector (opset 15: `start`/`end`, clamped like Python slices).
pub(super) fn shape(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["start", "end"])?;
    let dims = input_dims(ctx, node, 0)?;
    let r = dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(attrs::int(node, "start", 0)?);
    let end = clamp(attrs::int(node, "end", r)?);
    let picked = if start < end {
        &dims[start..end]
    } else {
        &[][..]
    };
    let entries = picked.iter().map(SymInt::of_dim).collect();
    Ok(vec![dims_val(ctx, entries, false)?])
}

/// The element count as an i64 scalar.
pub(super) fn size(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let dims = input_dims(ctx, node, 0)?;
    match dims_product(&dims) {
        Some(d) => Ok(vec![dims_val(ctx, vec![SymInt::of_dim(&d)], true)?]),
        None => Err(Error::Unsupported(format!(
            "Size of a tensor of shape {} is a product of symbolic dims; import with concrete input shapes",
            Shape(dims)
        ))),
    }
}

/// ONNX Reshape: `0` copies the input dim (unless `allowzero`), `-1` is inferred.
pub(super) fn reshape(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["allowzero", "shape"])?;
    let allowzero = attrs::int(node, "allowzero", 0)? != 0;
    let target: Vec<SymInt> = if ctx.opset < 5 {
        let s = attrs::ints(node, "shape")?
            .ok_or_else(|| Error::Value("Reshape-1 needs a 'shape' attribute".into()))?;
        s.into_iter().map(SymInt::Int).collect()
    } else {
        shape_entries(ctx, node, 1, "shape")?
    };
    if let Some((d, _)) = sym_input(ctx, node, 0) {
        // A shape value stays one: only the 1-D ⇄ 0-D/[1] changes keep it a vector of entries.
        return match all_ints(&target).as_deref() {
            Some([]) if d.len() == 1 => Ok(vec![Val::Dims {
                dims: d,
                scalar: true,
            }]),
            Some([n]) if *n == -1 || *n == d.len() as i64 => Ok(vec![Val::Dims {
                dims: d,
                scalar: false,
            }]),
            _ => Err(Error::Unsupported(format!(
                "Reshape of a symbolic shape value {d:?} to {target:?}; import with concrete input shapes"
            ))),
        };
    }
    let x = ctx.input(node, 0)?;
    let out = reshape_dims(&ctx.dims(x), &target, allowzero)?;
    if out == ctx.dims(x) {
        return one(x);
    }
    one(ctx.add(Op::Reshape(Shape(out)), &[x])?)
}

/// The output dims of ONNX Reshape of `input` to `target`.
fn reshape_dims(input: &[Dim], target: &[SymInt], allowzero: bool) -> Result<Vec<Dim>> {
    let shown = || format!("Reshape of {} to {target:?}", Shape(input.to_vec()));
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, e) in target.iter().enumerate() {
        match e {
            SymInt::Int(0) if !allowzero => out.push(input.get(i).cloned().ok_or_else(|| {
                Error::Shape(format!(
                    "{}: entry {i} is 0 (copy) but the input has rank {}",
                    shown(),
                    input.len()
                ))
            })?),
            SymInt::Int(-1) if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(Dim::Fixed(1));
            }
            SymInt::Int(-1) => return Err(Error::Shape(format!("{}: more than one -1", shown()))),
            e => out.push(to_dim(e, "Reshape")?),
        }
    }
    if let Some(at) = infer_at {
        if allowzero && out.contains(&Dim::Fixed(0)) {
            return Err(Error::Shape(format!(
                "{}: -1 together with a 0 under allowzero",
                shown()
            )));
        }
        out[at] = infer_dim(input, &out).ok_or_else(|| {
            Error::Unsupported(format!(
                "{}: the -1 entry cannot be inferred as one dim (sizes do not divide, or symbolic dims do not \
                 cancel); import with concrete input shapes",
                shown()
            ))
        })?;
    }
    Ok(out)
}

/// `numel(input) / numel(known)` as one dim, cancelling symbolic factors by name.
fn infer_dim(input: &[Dim], known: &[Dim]) -> Option<Dim> {
    let split = |ds: &[Dim]| -> Option<(usize, Vec<Dim>)> {
        let mut n = 1usize;
        let mut syms = Vec::new();
        for d in ds {
            match d {
                Dim::Fixed(k) => n = n.checked_mul(*k)?,
                Dim::Sym(_) => syms.push(d.clone()),
            }
        }
        Some((n, syms))
    };
    let (n_in, mut syms) = split(input)?;
    let (n_known, known_syms) = split(known)?;
    for s in known_syms {
        let pos = syms.iter().position(|d| *d == s)?;
        syms.remove(pos);
    }
    if n_known == 0 || n_in % n_known != 0 {
        return None;
    }
    let q = n_in / n_known;
    match syms.as_slice() {
        [] => Some(Dim::Fixed(q)),
        [s] if q == 1 => Some(s.clone()),
        _ => None,
    }
}

/// To 2-D: `[prod(dims[..axis]), prod(dims[axis..])]`.
pub(super) fn flatten(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis"])?;
    let x = ctx.input(node, 0)?;
    let dims = ctx.dims(x);
    let axis = attrs::int(node, "axis", 1)?;
    let r = dims.len() as i64;
    let axis = if axis < 0 { axis + r } else { axis };
    if !(0..=r).contains(&axis) {
        return Err(Error::Shape(format!(
            "Flatten: axis {axis} is out of range for rank {r}"
        )));
    }
    let axis = axis as usize;
    let (a, b) = (dims_product(&dims[..axis]), dims_product(&dims[axis..]));
    let (Some(a), Some(b)) = (a, b) else {
        return Err(Error::Unsupported(format!(
            "Flatten at axis {axis} of {} multiplies symbolic dims; import with concrete input shapes",
            Shape(dims)
        )));
    };
    one(ctx.add(Op::Reshape(Shape(vec![a, b])), &[x])?)
}

/// Removes size-1 axes (`axes` attribute before opset 13, input after; all size-1 axes when absent).
pub(super) fn squeeze(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axes"])?;
    let axes = axes_attr_or_input(ctx, node, 1, 13)?;
    if let Some((d, false)) = sym_input(ctx, node, 0)
        && d.len() == 1
        && axes.as_deref().is_none_or(|a| a == [0] || a == [-1])
    {
        return Ok(vec![Val::Dims {
            dims: d,
            scalar: true,
        }]);
    }
    let x = ctx.input(node, 0)?;
    let dims = ctx.dims(x);
    let drop: Vec<usize> = match axes {
        Some(a) => norm_axes(&a, dims.len(), "Squeeze")?,
        None => {
            if dims.iter().any(|d| matches!(d, Dim::Sym(_))) {
                return Err(Error::Unsupported(format!(
                    "Squeeze without axes of {}: whether a symbolic dim is 1 is unknown; give axes or concrete shapes",
                    Shape(dims)
                )));
            }
            (0..dims.len())
                .filter(|&i| dims[i] == Dim::Fixed(1))
                .collect()
        }
    };
    for &a in &drop {
        if let Dim::Fixed(n) = dims[a]
            && n != 1
        {
            return Err(Error::Shape(format!(
                "Squeeze: axis {a} of {} has size {n}, not 1",
                Shape(dims)
            )));
        }
    }
    let out: Vec<Dim> = (0..dims.len())
        .filter(|i| !drop.contains(i))
        .map(|i| dims[i].clone())
        .collect();
    one(ctx.add(Op::Reshape(Shape(out)), &[x])?)
}

/// Inserts size-1 axes at `axes` (positions in the output; attribute before opset 13, input after).
pub(super) fn unsqueeze(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axes"])?;
    let axes = axes_attr_or_input(ctx, node, 1, 13)?
        .ok_or_else(|| Error::Value("Unsqueeze needs axes".into()))?;
    if let Some((d, true)) = sym_input(ctx, node, 0)
        && (axes == [0] || axes == [-1])
    {
        return Ok(vec![Val::Dims {
            dims: d,
            scalar: false,
        }]);
    }
    let x = ctx.input(node, 0)?;
    let dims = ctx.dims(x);
    let out_rank = dims.len() + axes.len();
    let axes = norm_axes(&axes, out_rank, "Unsqueeze")?;
    let mut rest = dims.into_iter();
    let mut out = Vec::with_capacity(out_rank);
    for i in 0..out_rank {
        if axes.contains(&i) {
            out.push(Dim::Fixed(1));
        } else {
            out.extend(rest.next());
        }
    }
    one(ctx.add(Op::Reshape(Shape(out)), &[x])?)
}

/// ONNX Expand: the output is the broadcast of the input shape and the target (both ways).
pub(super) fn expand(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let target = shape_entries(ctx, node, 1, "shape")?;
    let x = ctx.input(node, 0)?;
    let target = Shape(
        target
            .iter()
            .map(|e| to_dim(e, "Expand"))
            .collect::<Result<_>>()?,
    );
    let out = broadcast(&ctx.ty(x).shape, &target, "Expand")?;
    if out == ctx.ty(x).shape {
        return one(x);
    }
    one(ctx.add(Op::Expand(out), &[x])?)
}

/// Repeats the input `repeats[i]` times along each axis: reshape to `[1, d0, 1, d1, ..]`,
/// expand to `[r0, d0, r1, d1, ..]`, reshape to `[r0*d0, ..]`.
pub(super) fn tile(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let reps = shape_entries(ctx, node, 1, "repeats")?;
    let reps = all_ints(&reps).ok_or_else(|| {
        Error::Unsupported(format!(
            "Tile with symbolic repeats {reps:?}; import with concrete shapes"
        ))
    })?;
    let x = ctx.input(node, 0)?;
    let dims = ctx.dims(x);
    if reps.len() != dims.len() {
        return Err(Error::Shape(format!(
            "Tile: {} repeats for a tensor of rank {}",
            reps.len(),
            dims.len()
        )));
    }
    if reps.iter().all(|&r| r == 1) {
        return one(x);
    }
    let (mut inter, mut expanded, mut out) = (Vec::new(), Vec::new(), Vec::new());
    for (d, &r) in dims.iter().zip(&reps) {
        if r < 0 {
            return Err(Error::Value(format!("Tile: repeat {r} is negative")));
        }
        let r = r as usize;
        inter.extend([Dim::Fixed(1), d.clone()]);
        expanded.extend([Dim::Fixed(r), d.clone()]);
        out.push(match d {
            Dim::Fixed(n) => Dim::Fixed(n * r),
            Dim::Sym(_) if r == 1 => d.clone(),
            Dim::Sym(_) => {
                return Err(Error::Unsupported(format!(
                    "Tile of the symbolic dim {d} by {r}; import with concrete input shapes"
                )));
            }
        });
    }
    let a = ctx.add(Op::Reshape(Shape(inter)), &[x])?;
    let b = ctx.add(Op::Expand(Shape(expanded)), &[a])?;
    one(ctx.add(Op::Reshape(Shape(out)), &[b])?)
}
