//! QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked; 8/16/32-bit integers),
//! DynamicQuantizeLinear, and the requantization QLinearMatMul/QLinearConv share. Float8,
//! float4 and 4/2-bit types are held as patterns (`ops::lowp`). Arithmetic follows ONNX's reference:
//! quantize divides in the input's float type and rounds half to even; dequantize works in f32.

use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use crate::tensor::dtype_from_onnx;
use kiln_ir::{
    BinaryOp, DType, Dim, Error, HostTensor, LowpType, NodeId, Op, ReduceOp, Result, Shape, UnaryOp,
};

/// The value range of an integer quantized type.
fn range(d: DType) -> Result<(f64, f64)> {
    Ok(match d {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65535.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        _ => {
            return Err(Error::Unsupported(format!(
                "quantized type {d} is not supported by kiln (int8, uint8, int16, uint16, int32 only)"
            )));
        }
    })
}

/// A per-tensor or 1-D per-axis parameter `v` shaped to broadcast against `x` along `axis`.
pub(super) fn per_axis(
    ctx: &mut Ctx,
    v: NodeId,
    x: NodeId,
    axis: usize,
    what: &str,
) -> Result<NodeId> {
    let vd = ctx.dims(v);
    let numel: Option<usize> = vd.iter().map(Dim::fixed).product();
    if vd.is_empty() {
        return Ok(v);
    }
    if numel == Some(1) {
        return ctx.add(Op::Reshape(Shape(vec![])), &[v]);
    }
    let rank = ctx.rank(x);
    if vd.len() != 1 || axis >= rank {
        return Err(Error::Shape(format!(
            "{what} {} must be a scalar or 1-D along axis {axis} of the input {}",
            ctx.ty(v).shape,
            ctx.ty(x).shape
        )));
    }
    let mut dims = vec![Dim::Fixed(1); rank];
    dims[axis] = vd[0].clone();
    ctx.add(Op::Reshape(Shape(dims)), &[v])
}

/// A blocked parameter `v` (x's shape with `axis` shrunk to `ceil(len / block)`) repeated
/// `block` times along `axis` to x's shape.
fn blocked(
    ctx: &mut Ctx,
    v: NodeId,
    x: NodeId,
    axis: usize,
    block: usize,
    what: &str,
) -> Result<NodeId> {
    let xs = ctx.fixed_shape(x, "blocked quantization")?;
    let vs = ctx.fixed_shape(v, "blocked quantization")?;
    let len = xs[axis];
    let ok = vs.len() == xs.len()
        && vs.iter().zip(&xs).enumerate().all(|(i, (a, b))| {
            if i == axis {
                *a == len.div_ceil(block)
            } else {
                a == b
            }
        });
    if !ok {
        return Err(Error::Shape(format!(
            "{what} {vs:?} does not fit input {xs:?} blocked by {block} along axis {axis}"
        )));
    }
    let idx: Vec<i64> = (0..len).map(|i| (i / block) as i64).collect();
    let idx = ctx.constant(HostTensor::from_vec(idx, &[len])?);
    ctx.add(Op::Gather { axis }, &[v, idx])
}

/// A scale or zero point shaped for `x` by `axis` and `block` (0 = per tensor or per axis).
fn shape_param(
    ctx: &mut Ctx,
    node: &NodeProto,
    v: NodeId,
    x: NodeId,
    block: i64,
    what: &str,
) -> Result<NodeId> {
    let numel: Option<usize> = ctx.dims(v).iter().map(Dim::fixed).product();
    if ctx.rank(v) == 0 || numel == Some(1) {
        return per_axis(ctx, v, x, 0, what);
    }
    let axis = kiln_ir::normalize_axis(attrs::int(node, "axis", 1)?, ctx.rank(x), node.op_type())?;
    if block > 0 {
        blocked(ctx, v, x, axis, block as usize, what)
    } else if block < 0 {
        Err(Error::Value(format!(
            "{}: block_size must be >= 0, got {block}",
            node.op_type()
        )))
    } else {
        per_axis(ctx, v, x, axis, what)
    }
}

/// `saturate(round_half_even(y) + zp)` in `dtype`, `y` any float.
pub(super) fn requantize(ctx: &mut Ctx, y: NodeId, zp: NodeId, dtype: DType) -> Result<NodeId> {
    let (lo, hi) = range(dtype)?;
    let y = ctx.add(Op::Cast(DType::F64), &[y])?;
    let r = ctx.add(Op::Unary(UnaryOp::Round), &[y])?;
    let z = ctx.add(Op::Cast(DType::F64), &[zp])?;
    let s = ctx.add(Op::Binary(BinaryOp::Add), &[r, z])?;
    let lo = ctx.scalar(DType::F64, lo)?;
    let hi = ctx.scalar(DType::F64, hi)?;
    let s = ctx.add(Op::Binary(BinaryOp::Max), &[s, lo])?;
    let s = ctx.add(Op::Binary(BinaryOp::Min), &[s, hi])?;
    ctx.add(Op::Cast(dtype), &[s])
}

/// The float type numpy computes `a op b` in.
fn promote(a: DType, b: DType) -> DType {
    if a == b {
        a
    } else if a == DType::F64 || b == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// An ONNX element-type attribute (`output_dtype`, `precision`) as a kiln dtype; 0 = unset.
fn dtype_attr(node: &NodeProto, name: &str) -> Result<Option<DType>> {
    match attrs::int(node, name, 0)? {
        0 => Ok(None),
        code => dtype_from_onnx(code as i32)
            .map(Some)
            .map_err(|e| e.context(&format!("{} {name}", node.op_type()))),
    }
}

/// ONNX QuantizeLinear (opsets 10-25): `saturate(round(x / scale) + zp)`.
pub(super) fn quantize_linear(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(
        node,
        &[
            "axis",
            "saturate",
            "block_size",
            "output_dtype",
            "precision",
        ],
    )?;
    let x = ctx.input(node, 0)?;
    let scale = ctx.input(node, 1)?;
    let zp = ctx.opt_input(node, 2)?;
    no_lowp(ctx, node, &[x, scale])?;
    let lowp_out = match zp {
        Some(z) => ctx.lowp.get(&z).copied(),
        None => crate::lowp::lowp_from_onnx(attrs::int(node, "output_dtype", 0)? as i32),
    };
    if let Some(lt) = lowp_out {
        return quantize_lowp(ctx, node, x, scale, zp, lt);
    }
    let block = attrs::int(node, "block_size", 0)?;
    let out = match (zp, dtype_attr(node, "output_dtype")?) {
        (Some(z), Some(d)) if ctx.dtype(z) != d => {
            return Err(Error::Value(format!(
                "QuantizeLinear: output_dtype {d} differs from the zero point's type {}",
                ctx.dtype(z)
            )));
        }
        (Some(z), _) => ctx.dtype(z),
        (None, Some(d)) => d,
        (None, None) => DType::U8,
    };
    range(out)?;
    if out == DType::I32 {
        return Err(Error::Unsupported(
            "QuantizeLinear to int32 is not an ONNX quantized type".into(),
        ));
    }
    let (xd, sd) = (ctx.dtype(x), ctx.dtype(scale));
    if !xd.is_float() || !sd.is_float() {
        return Err(Error::DType(format!(
            "QuantizeLinear needs float x and scale, got {xd} and {sd}"
        )));
    }
    let work = dtype_attr(node, "precision")?.unwrap_or(promote(xd, sd));
    let s = shape_param(ctx, node, scale, x, block, "y_scale")?;
    let s = ctx.add(Op::Cast(work), &[s])?;
    let xw = ctx.add(Op::Cast(work), &[x])?;
    let q = ctx.add(Op::Binary(BinaryOp::Div), &[xw, s])?;
    let z = match zp {
        Some(z) => shape_param(ctx, node, z, x, block, "y_zero_point")?,
        None => ctx.scalar(out, 0.0)?,
    };
    one(requantize(ctx, q, z, out)?)
}

/// ONNX DequantizeLinear (opsets 10-25): `(x - zp) * scale`, computed in f32 and cast to the
/// scale's type (or `output_dtype`).
pub(super) fn dequantize_linear(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis", "block_size", "output_dtype"])?;
    let x = ctx.input(node, 0)?;
    let scale = ctx.input(node, 1)?;
    let zp = ctx.opt_input(node, 2)?;
    no_lowp(ctx, node, &[scale])?;
    if let Some(&lt) = ctx.lowp.get(&x) {
        return dequantize_lowp(ctx, node, x, scale, zp, lt);
    }
    no_lowp(ctx, node, &zp.into_iter().collect::<Vec<_>>())?;
    let block = attrs::int(node, "block_size", 0)?;
    range(ctx.dtype(x))?;
    let sd = ctx.dtype(scale);
    if !sd.is_float() {
        return Err(Error::DType(format!(
            "DequantizeLinear needs a float scale, got {sd}"
        )));
    }
    let out = dtype_attr(node, "output_dtype")?.unwrap_or(sd);
    let mut v = ctx.add(Op::Cast(DType::F32), &[x])?;
    if let Some(z) = zp {
        let z = shape_param(ctx, node, z, x, block, "x_zero_point")?;
        let z = ctx.add(Op::Cast(DType::F32), &[z])?;
        v = ctx.add(Op::Binary(BinaryOp::Sub), &[v, z])?;
    }
    let s = shape_param(ctx, node, scale, x, block, "x_scale")?;
    let s = ctx.add(Op::Cast(DType::F32), &[s])?;
    let y = ctx.add(Op::Binary(BinaryOp::Mul), &[v, s])?;
    one(ctx.add(Op::Cast(out), &[y])?)
}

/// ONNX DynamicQuantizeLinear: uint8 quantization with the scale and zero point that map
/// `[min(0, min x), max(0, max x)]` onto `[0, 255]`. Outputs y, y_scale, y_zero_point.
pub(super) fn dynamic_quantize_linear(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let x = ctx.input(node, 0)?;
    let xd = ctx.dtype(x);
    if xd != DType::F32 {
        return Err(Error::DType(format!(
            "DynamicQuantizeLinear needs f32 input, got {xd}"
        )));
    }
    let axes: Vec<usize> = (0..ctx.rank(x)).collect();
    let zero = ctx.scalar(DType::F32, 0.0)?;
    let mx = ctx.add(
        Op::Reduce {
            op: ReduceOp::Max,
            axes: axes.clone(),
            keep_dims: false,
        },
        &[x],
    )?;
    let mx = ctx.add(Op::Binary(BinaryOp::Max), &[mx, zero])?;
    let mn = ctx.add(
        Op::Reduce {
            op: ReduceOp::Min,
            axes,
            keep_dims: false,
        },
        &[x],
    )?;
    let mn = ctx.add(Op::Binary(BinaryOp::Min), &[mn, zero])?;
    let span = ctx.add(Op::Binary(BinaryOp::Sub), &[mx, mn])?;
    let same = ctx.add(Op::Binary(BinaryOp::Eq), &[mx, mn])?;
    let one_ = ctx.scalar(DType::F32, 1.0)?;
    let span = ctx.add(Op::Where, &[same, one_, span])?;
    let q = ctx.scalar(DType::F32, 255.0)?;
    let scale = ctx.add(Op::Binary(BinaryOp::Div), &[span, q])?;
    // zp = round(clip(0 - min / scale, 0, 255)), then y = saturate(round(x / scale) + zp).
    let t = ctx.add(Op::Binary(BinaryOp::Div), &[mn, scale])?;
    let t = ctx.add(Op::Binary(BinaryOp::Sub), &[zero, t])?;
    let t = ctx.add(Op::Binary(BinaryOp::Max), &[t, zero])?;
    let t = ctx.add(Op::Binary(BinaryOp::Min), &[t, q])?;
    let zpf = ctx.add(Op::Unary(UnaryOp::Round), &[t])?;
    let zp = ctx.add(Op::Cast(DType::U8), &[zpf])?;
    let xs = ctx.add(Op::Binary(BinaryOp::Div), &[x, scale])?;
    let y = requantize(ctx, xs, zp, DType::U8)?;
    Ok(vec![Val::Node(y), Val::Node(scale), Val::Node(zp)])
}

// ---------------------------------------------------------------------------------------------
// Low-precision types (float8, float4, 4/2-bit integers), held as patterns (`ops::lowp`).

/// Refuses low-precision values where these converters take only plain ones.
fn no_lowp(ctx: &Ctx, node: &NodeProto, ids: &[NodeId]) -> Result<()> {
    match ids.iter().find_map(|id| ctx.lowp.get(id)) {
        Some(lt) => Err(Error::Unsupported(format!(
            "{}: a {} input is supported only as the quantized value (and its zero point)",
            node.op_type(),
            lt.name()
        ))),
        None => Ok(()),
    }
}

/// The value range of a low-precision integer type.
fn lowp_range(lt: LowpType) -> (f64, f64) {
    match lt {
        LowpType::I4 => (-8.0, 7.0),
        LowpType::U4 => (0.0, 15.0),
        LowpType::I2 => (-2.0, 1.0),
        _ => (0.0, 3.0),
    }
}

/// QuantizeLinear to a low-precision type, as ONNX's reference: integers are
/// `clamp(round_half_even(x / scale) + zp)`; float8 encodes `x / scale` (the zero point must be
/// 0, and is ignored) with `saturate`; float4 encodes `x / scale + zp`, saturating.
fn quantize_lowp(
    ctx: &mut Ctx,
    node: &NodeProto,
    x: NodeId,
    scale: NodeId,
    zp: Option<NodeId>,
    lt: LowpType,
) -> Result<Vec<Val>> {
    let code = attrs::int(node, "output_dtype", 0)?;
    if code != 0 && crate::lowp::lowp_from_onnx(code as i32) != Some(lt) {
        return Err(Error::Value(format!(
            "QuantizeLinear: output_dtype {code} differs from the zero point's type {}",
            lt.name()
        )));
    }
    if lt == LowpType::F8E8M0 {
        return Err(Error::Unsupported("QuantizeLinear to float8e8m0 is not an ONNX quantized type".into()));
    }
    let (xd, sd) = (ctx.dtype(x), ctx.dtype(scale));
    if !xd.is_float() || !sd.is_float() {
        return Err(Error::DType(format!("QuantizeLinear needs float x and scale, got {xd} and {sd}")));
    }
    let block = attrs::int(node, "block_size", 0)?;
    let work = dtype_attr(node, "precision")?.unwrap_or(promote(xd, sd));
    let s = shape_param(ctx, node, scale, x, block, "y_scale")?;
    let s = ctx.add(Op::Cast(work), &[s])?;
    let xw = ctx.add(Op::Cast(work), &[x])?;
    let mut q = ctx.add(Op::Binary(BinaryOp::Div), &[xw, s])?;
    let z = match zp {
        Some(z) => {
            let z = super::super::lowp::decoded(ctx, z)?;
            Some(shape_param(ctx, node, z, x, block, "y_zero_point")?)
        }
        None => None,
    };
    let y = if lt.is_int() {
        let (lo, hi) = lowp_range(lt);
        let q = ctx.add(Op::Cast(DType::F64), &[q])?;
        let mut r = ctx.add(Op::Unary(UnaryOp::Round), &[q])?;
        if let Some(z) = z {
            let z = ctx.add(Op::Cast(DType::F64), &[z])?;
            r = ctx.add(Op::Binary(BinaryOp::Add), &[r, z])?;
        }
        let lo = ctx.scalar(DType::F64, lo)?;
        let hi = ctx.scalar(DType::F64, hi)?;
        let r = ctx.add(Op::Binary(BinaryOp::Max), &[r, lo])?;
        let r = ctx.add(Op::Binary(BinaryOp::Min), &[r, hi])?;
        super::super::lowp::encoded(ctx, r, lt, true)?
    } else {
        if lt == LowpType::F4E2M1
            && let Some(z) = z
        {
            let z = ctx.add(Op::Cast(work), &[z])?;
            q = ctx.add(Op::Binary(BinaryOp::Add), &[q, z])?;
        }
        let saturate = attrs::int(node, "saturate", 1)? != 0;
        super::super::lowp::encoded(ctx, q, lt, saturate)?
    };
    one(y)
}

/// DequantizeLinear of a low-precision `x`, as ONNX's reference: integers are
/// `(x - zp) * scale`; float8/float4 are `x * scale` (their zero point must be 0 and is
/// ignored); in f32, cast to the scale's type (or `output_dtype`).
fn dequantize_lowp(
    ctx: &mut Ctx,
    node: &NodeProto,
    x: NodeId,
    scale: NodeId,
    zp: Option<NodeId>,
    lt: LowpType,
) -> Result<Vec<Val>> {
    let sd = ctx.dtype(scale);
    if !sd.is_float() {
        return Err(Error::DType(format!("DequantizeLinear needs a float scale, got {sd}")));
    }
    let block = attrs::int(node, "block_size", 0)?;
    let out = dtype_attr(node, "output_dtype")?.unwrap_or(sd);
    let mut v = super::super::lowp::decoded(ctx, x)?;
    if let Some(z) = zp
        && lt.is_int()
    {
        if ctx.lowp.get(&z) != Some(&lt) {
            return Err(Error::DType(format!(
                "DequantizeLinear: the zero point must have x's type {}, got {}",
                lt.name(),
                ctx.lowp.get(&z).map_or_else(|| ctx.dtype(z).to_string(), |t| t.name().to_string())
            )));
        }
        let z = super::super::lowp::decoded(ctx, z)?;
        let z = shape_param(ctx, node, z, x, block, "x_zero_point")?;
        v = ctx.add(Op::Binary(BinaryOp::Sub), &[v, z])?;
    }
    let s = shape_param(ctx, node, scale, x, block, "x_scale")?;
    let s = ctx.add(Op::Cast(DType::F32), &[s])?;
    let y = ctx.add(Op::Binary(BinaryOp::Mul), &[v, s])?;
    one(ctx.add(Op::Cast(out), &[y])?)
}
