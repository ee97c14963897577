//! Ops that make values: Constant, ConstantOfShape, Range, EyeLike, Trilu (a constant mask),
//! OneHot (a comparison with an arange) and NonZero (folded for constant inputs only).

use super::sym::{fixed_dim, shape_entries, to_dim};
use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use crate::tensor::dtype_from_onnx;
use kiln_ir::{BinaryOp, Dim, Error, HostTensor, NodeId, Op, Result, Shape, normalize_axis};

/// A constant from exactly one of `value`, `value_float(s)` or `value_int(s)`.
pub(super) fn constant(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    for a in ["value_string", "value_strings", "sparse_value"] {
        if attrs::has(node, a) {
            return Err(Error::Unsupported(format!(
                "Constant with '{a}': kiln has no string or sparse tensors"
            )));
        }
    }
    attrs::check_known(
        node,
        &[
            "value",
            "value_float",
            "value_floats",
            "value_int",
            "value_ints",
        ],
    )?;
    let t = if let Some(t) = attrs::tensor(node, "value")? {
        t
    } else if attrs::has(node, "value_float") {
        HostTensor::scalar(attrs::float(node, "value_float", 0.0)?)
    } else if let Some(v) = attrs::floats(node, "value_floats")? {
        let n = v.len();
        HostTensor::from_vec(v, &[n])?
    } else if let Some(v) = attrs::opt_int(node, "value_int")? {
        HostTensor::scalar(v)
    } else if let Some(v) = attrs::ints(node, "value_ints")? {
        let n = v.len();
        HostTensor::from_vec(v, &[n])?
    } else {
        return Err(Error::Value("Constant has no value attribute".into()));
    };
    one(ctx.constant(t))
}

/// A tensor of the given (possibly symbolic) shape filled with `value` (default f32 0).
pub(super) fn constant_of_shape(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["value"])?;
    let shape = shape_entries(ctx, node, 0, "shape")?;
    let shape = Shape(
        shape
            .iter()
            .map(|e| to_dim(e, "ConstantOfShape"))
            .collect::<Result<_>>()?,
    );
    let value = attrs::tensor(node, "value")?.unwrap_or_else(|| HostTensor::scalar(0.0f32));
    if value.numel() != 1 {
        return Err(Error::Value(format!(
            "ConstantOfShape: value must have one element, it has {}",
            value.numel()
        )));
    }
    let v = ctx.constant(value);
    let s = ctx.add(Op::Reshape(Shape::scalar()), &[v])?;
    if shape.rank() == 0 {
        return one(s);
    }
    one(ctx.add(Op::Expand(shape), &[s])?)
}

/// `start, start + delta, ..` below `limit` (above, for negative delta); constant inputs only.
pub(super) fn range(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let mut get = |i: usize, what: &str| -> Result<HostTensor> {
        let t = ctx
            .const_input(node, i, what)?
            .ok_or_else(|| Error::Graph(format!("Range needs input {i} ({what})")))?;
        if t.numel() != 1 {
            return Err(Error::Shape(format!(
                "Range: {what} must be a scalar, got shape {:?}",
                t.shape()
            )));
        }
        Ok(t)
    };
    let (start, limit, delta) = (get(0, "start")?, get(1, "limit")?, get(2, "delta")?);
    let dtype = start.dtype();
    let t = if dtype.is_int() {
        let (s, l, d) = (ints1(&start), ints1(&limit), ints1(&delta));
        if d == 0 {
            return Err(Error::Value("Range: delta must not be zero".into()));
        }
        let span = l as i128 - s as i128;
        let n = if (span > 0) == (d > 0) && span != 0 {
            (span.abs() + d.abs() as i128 - 1) / d.abs() as i128
        } else {
            0
        };
        let v: Vec<i64> = (0..n as i64)
            .map(|i| s.wrapping_add(i.wrapping_mul(d)))
            .collect();
        HostTensor::from_vec(v, &[n as usize])?
    } else {
        let (s, l, d) = (
            start.to_f64_vec()[0],
            limit.to_f64_vec()[0],
            delta.to_f64_vec()[0],
        );
        if d == 0.0 || !d.is_finite() || !s.is_finite() || !l.is_finite() {
            return Err(Error::Value(format!(
                "Range: start {s}, limit {l}, delta {d} do not give a finite range"
            )));
        }
        let n = ((l - s) / d).ceil().max(0.0) as usize;
        let v: Vec<f64> = (0..n).map(|i| s + i as f64 * d).collect();
        HostTensor::from_vec(v, &[n])?
    };
    let id = ctx.constant(t);
    one(ctx.add(Op::Cast(dtype), &[id])?)
}

fn ints1(t: &HostTensor) -> i64 {
    crate::import::ints_of(t).first().copied().unwrap_or(0)
}

/// A 2-D tensor shaped like the input with ones on diagonal `k` (dtype attribute or the input's).
pub(super) fn eye_like(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["dtype", "k"])?;
    let x = ctx.input(node, 0)?;
    let shape = ctx.fixed_shape(x, "EyeLike")?;
    let &[n, m] = shape.as_slice() else {
        return Err(Error::Shape(format!(
            "EyeLike needs a 2-D input, got {shape:?}"
        )));
    };
    let dtype = match attrs::opt_int(node, "dtype")? {
        Some(code) => dtype_from_onnx(code as i32)?,
        None => ctx.dtype(x),
    };
    let k = attrs::int(node, "k", 0)?;
    let mut v = vec![0.0f64; n * m];
    for i in 0..n {
        let j = i as i64 + k;
        if (0..m as i64).contains(&j) {
            v[i * m + j as usize] = 1.0;
        }
    }
    let id = ctx.constant(HostTensor::from_vec(v, &[n, m])?);
    one(ctx.add(Op::Cast(dtype), &[id])?)
}

/// Keeps the upper (`upper=1`, `j - i >= k`) or lower (`j - i <= k`) triangle of the last two
/// axes and zeroes the rest: `where(mask, x, 0)` with a constant mask.
pub(super) fn trilu(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["upper"])?;
    let upper = attrs::int(node, "upper", 1)? != 0;
    let x = ctx.input(node, 0)?;
    let k = match ctx.const_ints(node, 1, "k")? {
        Some(v) => *v
            .first()
            .ok_or_else(|| Error::Value("Trilu: k is empty".into()))?,
        None => 0,
    };
    let dims = ctx.dims(x);
    if dims.len() < 2 {
        return Err(Error::Shape(format!(
            "Trilu needs rank >= 2, got {}",
            Shape(dims)
        )));
    }
    let n = fixed_dim(&dims[dims.len() - 2], "Trilu", "row count")?;
    let m = fixed_dim(&dims[dims.len() - 1], "Trilu", "column count")?;
    let mut mask = Vec::with_capacity(n * m);
    for i in 0..n as i64 {
        for j in 0..m as i64 {
            mask.push(if upper { j - i >= k } else { j - i <= k });
        }
    }
    let mask = ctx.constant(HostTensor::from_vec(mask, &[n, m])?);
    let zero = ctx.scalar(ctx.dtype(x), 0.0)?;
    one(ctx.add(Op::Where, &[mask, x, zero])?)
}

/// `where(wrap(indices) == arange(depth), on, off)` with the new axis at `axis`; out-of-range
/// indices match nothing (all `off`), negative ones count from `depth`.
pub(super) fn one_hot(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis"])?;
    let idx = ctx.input(node, 0)?;
    let depth = ctx
        .const_floats(node, 1, "depth")?
        .and_then(|v| v.first().copied())
        .ok_or_else(|| Error::Value("OneHot needs a depth".into()))?;
    if !(depth >= 0.0 && depth.is_finite()) {
        return Err(Error::Value(format!(
            "OneHot: depth {depth} must be a non-negative number"
        )));
    }
    let depth = depth as usize;
    let values = ctx.input(node, 2)?;
    let dims = ctx.dims(idx);
    let r = dims.len();
    let axis = normalize_axis(attrs::int(node, "axis", -1)?, r + 1, "OneHot")?;
    let dt = ctx.dtype(idx);
    let mut i = idx;
    if dt.is_signed() || dt.is_float() {
        let zero = ctx.scalar(dt, 0.0)?;
        let d = ctx.scalar(dt, depth as f64)?;
        let neg = ctx.add(Op::Binary(BinaryOp::Lt), &[i, zero])?;
        let wrapped = ctx.add(Op::Binary(BinaryOp::Add), &[i, d])?;
        i = ctx.add(Op::Where, &[neg, wrapped, i])?;
    }
    let mut unsq = dims.clone();
    unsq.insert(axis, Dim::Fixed(1));
    let i = ctx.add(Op::Reshape(Shape(unsq)), &[i])?;
    let mut ashape = vec![1usize; r + 1];
    ashape[axis] = depth;
    let ar: Vec<f64> = (0..depth).map(|k| k as f64).collect();
    let ar = ctx.constant(HostTensor::from_vec(ar, &ashape)?);
    let ar = ctx.add(Op::Cast(dt), &[ar])?;
    let eq = ctx.add(Op::Binary(BinaryOp::Eq), &[i, ar])?;
    let off = element(ctx, values, 0)?;
    let on = element(ctx, values, 1)?;
    one(ctx.add(Op::Where, &[eq, on, off])?)
}

/// Element `k` of a 1-D tensor as a scalar.
fn element(ctx: &mut Ctx, v: NodeId, k: i64) -> Result<NodeId> {
    let s = super::sym::slice_axis(ctx, v, 0, k, k + 1, 1)?;
    ctx.add(Op::Reshape(Shape::scalar()), &[s])
}

/// The indices of the non-zero elements, `[rank, count]` i64; only for a constant input (the
/// count is data-dependent).
pub(super) fn non_zero(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let x = ctx.input(node, 0)?;
    let Some(t) = ctx.const_of(x) else {
        return Err(Error::Unsupported(
            "NonZero of a run-time tensor has a data-dependent output shape, which kiln cannot express".into(),
        ));
    };
    let shape = t.shape().to_vec();
    let vals = t.to_f64_vec();
    let mut hits: Vec<usize> = Vec::new();
    for (i, v) in vals.iter().enumerate() {
        if *v != 0.0 {
            hits.push(i);
        }
    }
    let r = shape.len();
    let mut out = vec![0i64; r * hits.len()];
    for (c, &flat) in hits.iter().enumerate() {
        let mut rem = flat;
        for a in (0..r).rev() {
            out[a * hits.len() + c] = (rem % shape[a]) as i64;
            rem /= shape[a];
        }
    }
    let n = hits.len();
    one(ctx.constant(HostTensor::from_vec(out, &[r, n])?))
}
