//! Gemm, MatMul and the integer forms MatMulInteger and QLinearMatMul.

use super::quant;
use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{BinaryOp, DType, Dim, Error, NodeId, Op, Result, Shape};

/// ONNX Gemm: `alpha * A' B' + beta * C` with optional transposes; C broadcasts (the opset < 7
/// `broadcast` flag only says whether it may, which NumPy broadcasting covers).
pub(super) fn gemm(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["alpha", "beta", "transA", "transB", "broadcast"])?;
    let mut a = ctx.input(node, 0)?;
    let mut b = ctx.input(node, 1)?;
    let c = ctx.opt_input(node, 2)?;
    if ctx.rank(a) != 2 || ctx.rank(b) != 2 {
        return Err(Error::Shape(format!(
            "Gemm needs 2-D A and B, got {} and {}",
            ctx.ty(a).shape,
            ctx.ty(b).shape
        )));
    }
    if attrs::int(node, "transA", 0)? != 0 {
        a = ctx.add(Op::Permute(vec![1, 0]), &[a])?;
    }
    if attrs::int(node, "transB", 0)? != 0 {
        b = ctx.add(Op::Permute(vec![1, 0]), &[b])?;
    }
    let d = ctx.dtype(a);
    let alpha = attrs::float(node, "alpha", 1.0)? as f64;
    let beta = attrs::float(node, "beta", 1.0)? as f64;
    let mut y = ctx.add(Op::MatMul, &[a, b])?;
    if alpha != 1.0 {
        let s = ctx.scalar(d, alpha)?;
        y = ctx.add(Op::Binary(BinaryOp::Mul), &[y, s])?;
    }
    if let Some(mut c) = c {
        if beta != 1.0 {
            let s = ctx.scalar(d, beta)?;
            c = ctx.add(Op::Binary(BinaryOp::Mul), &[c, s])?;
        }
        y = ctx.add(Op::Binary(BinaryOp::Add), &[y, c])?;
    }
    one(y)
}

/// ONNX MatMul (NumPy matmul).
pub(super) fn matmul(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    one(ctx.add(Op::MatMul, &[a, b])?)
}

/// A row parameter of A (scalar, or 1-D with one entry per row of A) shaped `[M, 1]` so it
/// broadcasts along rows.
fn per_row(ctx: &mut Ctx, v: NodeId) -> Result<NodeId> {
    let d = ctx.dims(v);
    if d.len() == 1 && d[0] != Dim::Fixed(1) {
        return ctx.add(Op::Reshape(Shape(vec![d[0].clone(), Dim::Fixed(1)])), &[v]);
    }
    Ok(v)
}

/// `x - zp` in f64 (exact for 8-bit data); `row` shapes a 1-D zero point per row of A.
fn shifted(ctx: &mut Ctx, x: NodeId, zp: Option<NodeId>, row: bool) -> Result<NodeId> {
    let xf = ctx.add(Op::Cast(DType::F64), &[x])?;
    let Some(z) = zp else { return Ok(xf) };
    let z = if row { per_row(ctx, z)? } else { z };
    let zf = ctx.add(Op::Cast(DType::F64), &[z])?;
    ctx.add(Op::Binary(BinaryOp::Sub), &[xf, zf])
}

/// The exact integer product `(a - a_zp) @ (b - b_zp)`, in f64 (8-bit operands: every partial
/// sum is an integer far below 2^53).
fn int_matmul(
    ctx: &mut Ctx,
    a: NodeId,
    az: Option<NodeId>,
    b: NodeId,
    bz: Option<NodeId>,
) -> Result<NodeId> {
    for v in [a, b] {
        let d = ctx.dtype(v);
        if !matches!(d, DType::U8 | DType::I8) {
            return Err(Error::Unsupported(format!(
                "integer matmul of {d} is not supported (int8/uint8 only)"
            )));
        }
    }
    let a = shifted(ctx, a, az, true)?;
    let b = shifted(ctx, b, bz, false)?;
    ctx.add(Op::MatMul, &[a, b])
}

/// ONNX MatMulInteger: i32 result of the zero-point-shifted 8-bit matmul.
pub(super) fn matmul_integer(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    let az = ctx.opt_input(node, 2)?;
    let bz = ctx.opt_input(node, 3)?;
    let y = int_matmul(ctx, a, az, b, bz)?;
    one(ctx.add(Op::Cast(DType::I32), &[y])?)
}

/// ONNX QLinearMatMul: the integer matmul rescaled by `a_scale * b_scale / y_scale` (in the
/// scales' type, as ONNX's reference), requantized to y_zero_point's type.
pub(super) fn qlinear_matmul(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let a = ctx.input(node, 0)?;
    let a_s = ctx.input(node, 1)?;
    let az = ctx.opt_input(node, 2)?;
    let b = ctx.input(node, 3)?;
    let b_s = ctx.input(node, 4)?;
    let bz = ctx.opt_input(node, 5)?;
    let y_s = ctx.input(node, 6)?;
    let yz = ctx.opt_input(node, 7)?;
    let acc = int_matmul(ctx, a, az, b, bz)?;
    let a_s = per_row(ctx, a_s)?;
    let m = ctx.add(Op::Binary(BinaryOp::Mul), &[a_s, b_s])?;
    let m = ctx.add(Op::Binary(BinaryOp::Div), &[m, y_s])?;
    let m = ctx.add(Op::Cast(DType::F64), &[m])?;
    let d = ctx.add(Op::Binary(BinaryOp::Mul), &[acc, m])?;
    let (zp, out) = match yz {
        Some(z) => (z, ctx.dtype(z)),
        None => {
            let out = ctx.dtype(a);
            (ctx.scalar(out, 0.0)?, out)
        }
    };
    one(quant::requantize(ctx, d, zp, out)?)
}
