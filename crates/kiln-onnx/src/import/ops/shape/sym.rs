//! Helpers shared by the shape converters: symbolic shape values ([`Val::Dims`]), IR dims made
//! from them, and small graph-building steps (one-axis slices, i64 constants, axis lists).

use crate::import::{Ctx, SymInt, Val};
use crate::proto::NodeProto;
use kiln_ir::{Dim, Error, HostTensor, NodeId, Op, Result, SliceAxis, normalize_axis};

/// Input `i` when it is a symbolic shape value (a `Val::Dims`): its entries and whether it is 0-D.
pub(super) fn sym_input(ctx: &Ctx, node: &NodeProto, i: usize) -> Option<(Vec<SymInt>, bool)> {
    if !Ctx::has_input(node, i) {
        return None;
    }
    match ctx.value(&node.input[i]).ok()? {
        Val::Dims { dims, scalar } => Some((dims.clone(), *scalar)),
        _ => None,
    }
}

/// The entries when none is symbolic.
pub(super) fn all_ints(dims: &[SymInt]) -> Option<Vec<i64>> {
    dims.iter()
        .map(|d| {
            if let SymInt::Int(n) = d {
                Some(*n)
            } else {
                None
            }
        })
        .collect()
}

/// A shape value as a converter output: all-known entries become an i64 constant (so they fold
/// like any constant); symbolic ones stay a `Val::Dims`.
pub(super) fn dims_val(ctx: &mut Ctx, dims: Vec<SymInt>, scalar: bool) -> Result<Val> {
    if let Some(v) = all_ints(&dims) {
        let shape: Vec<usize> = if scalar { vec![] } else { vec![v.len()] };
        return Ok(Val::Node(i64_const(ctx, v, &shape)?));
    }
    Ok(Val::Dims { dims, scalar })
}

/// Input `i` as shape entries (a symbolic shape value or constant integers). An input known
/// only at run time is the error of [`Ctx::const_ints`] (which lets the caller specialise it).
pub(super) fn shape_entries(
    ctx: &mut Ctx,
    node: &NodeProto,
    i: usize,
    what: &str,
) -> Result<Vec<SymInt>> {
    if let Some((d, _)) = ctx.dims_input(node, i) {
        return Ok(d);
    }
    let v = ctx
        .const_ints(node, i, what)?
        .ok_or_else(|| Error::Graph(format!("{} needs input {i} ({what})", node.op_type())))?;
    Ok(v.into_iter().map(SymInt::Int).collect())
}

/// A shape entry as an IR dim (entries must be non-negative).
pub(super) fn to_dim(e: &SymInt, op: &str) -> Result<Dim> {
    match e {
        SymInt::Int(n) if *n >= 0 => Ok(Dim::Fixed(*n as usize)),
        SymInt::Int(n) => Err(Error::Shape(format!("{op}: shape entry {n} is negative"))),
        SymInt::Sym(s) => Ok(Dim::Sym(s.clone())),
    }
}

/// The dims of input `i`, also when it is a shape value (a 1-D or 0-D tensor).
pub(super) fn input_dims(ctx: &mut Ctx, node: &NodeProto, i: usize) -> Result<Vec<Dim>> {
    if let Some((d, scalar)) = sym_input(ctx, node, i) {
        return Ok(if scalar {
            vec![]
        } else {
            vec![Dim::Fixed(d.len())]
        });
    }
    let x = ctx.input(node, i)?;
    Ok(ctx.dims(x))
}

/// The product of `dims` as one dim: fixed when all are, the symbolic dim when exactly one is
/// symbolic and the others multiply to 1; `None` when it cannot be written as one dim.
pub(super) fn dims_product(dims: &[Dim]) -> Option<Dim> {
    let mut fixed = 1usize;
    let mut sym = None;
    for d in dims {
        match d {
            Dim::Fixed(n) => fixed = fixed.checked_mul(*n)?,
            Dim::Sym(_) if sym.is_none() => sym = Some(d.clone()),
            Dim::Sym(_) => return None,
        }
    }
    match sym {
        None => Some(Dim::Fixed(fixed)),
        Some(s) if fixed == 1 => Some(s),
        Some(_) => None,
    }
}

/// The dim itself when it is fixed, else an Unsupported error naming `op` and `what`.
pub(super) fn fixed_dim(d: &Dim, op: &str, what: &str) -> Result<usize> {
    d.fixed().ok_or_else(|| {
        Error::Unsupported(format!(
            "{op} needs a static {what}, but it is the symbolic dim {d}; import with concrete input shapes"
        ))
    })
}

/// `x[.., start:end:step, ..]` along one axis (the others whole).
pub(super) fn slice_axis(
    ctx: &mut Ctx,
    x: NodeId,
    axis: usize,
    start: i64,
    end: i64,
    step: i64,
) -> Result<NodeId> {
    let mut axes = vec![SliceAxis::FULL; ctx.rank(x)];
    axes[axis] = SliceAxis { start, end, step };
    ctx.add(Op::Slice(axes), &[x])
}

/// An i64 constant of `shape`.
pub(super) fn i64_const(ctx: &mut Ctx, v: Vec<i64>, shape: &[usize]) -> Result<NodeId> {
    Ok(ctx.constant(HostTensor::from_vec(v, shape)?))
}

/// Possibly negative axes normalised against `rank`, refusing repeats.
pub(super) fn norm_axes(axes: &[i64], rank: usize, op: &str) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let a = normalize_axis(a, rank, op)?;
        if out.contains(&a) {
            return Err(Error::Value(format!(
                "{op}: axis {a} is given twice in {axes:?}"
            )));
        }
        out.push(a);
    }
    Ok(out)
}

/// Axes from the `axes` attribute (opset < `input_from`) or from input `i` (later opsets).
pub(super) fn axes_attr_or_input(
    ctx: &mut Ctx,
    node: &NodeProto,
    i: usize,
    input_from: i64,
) -> Result<Option<Vec<i64>>> {
    if ctx.opset < input_from {
        crate::import::attrs::ints(node, "axes")
    } else {
        ctx.const_ints(node, i, "axes")
    }
}
