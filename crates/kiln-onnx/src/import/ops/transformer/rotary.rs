//! ONNX RotaryEmbedding (opset 23), as onnx's reference (`op_rotary_embedding.py`): the first
//! `rotary_embedding_dim` features of each head are rotated pairwise, pairs being the two
//! halves (default) or even/odd features (`interleaved`); the rest pass through.

use super::build::{bin, concat, fixed, reshape, slice, unflatten_heads};
use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{BinaryOp, Dim, Error, Op, Result};

/// The converter of ONNX RotaryEmbedding.
pub(in crate::import::ops) fn rotary_embedding(
    ctx: &mut Ctx,
    node: &NodeProto,
) -> Result<Vec<Val>> {
    if ctx.opset < 23 {
        return Err(Error::Unsupported(format!(
            "RotaryEmbedding opset {} is not supported (23 and later are)",
            ctx.opset
        )));
    }
    attrs::check_known(node, &["interleaved", "rotary_embedding_dim", "num_heads"])?;
    let interleaved = attrs::int(node, "interleaved", 0)? != 0;
    let rot_attr = attrs::int(node, "rotary_embedding_dim", 0)?;
    let num_heads = attrs::int(node, "num_heads", 0)?;
    let x = ctx.input(node, 0)?;
    let mut cos = ctx.input(node, 1)?;
    let mut sin = ctx.input(node, 2)?;
    let t = ctx.dtype(x);
    if !t.is_float() || ctx.dtype(cos) != t || ctx.dtype(sin) != t {
        return Err(Error::DType(format!(
            "RotaryEmbedding needs input and caches of one float dtype, got {}, {}, {}",
            t,
            ctx.dtype(cos),
            ctx.dtype(sin)
        )));
    }
    let xd = ctx.dims(x);
    // Work on [B, S, H, D] (3-D input) or [B, H, S, D] (4-D), with the caches broadcast as
    // [B, S, 1, half] or [B, 1, S, half].
    let (x4, seq_axis) = match xd.len() {
        3 => (unflatten_heads(ctx, x, num_heads, "RotaryEmbedding", "3-D input")?, 1),
        4 => (x, 2),
        r => {
            return Err(Error::Shape(format!(
                "RotaryEmbedding needs a 3-D or 4-D input, got rank {r}"
            )));
        }
    };
    let head = fixed(&ctx.dims(x4)[3], "RotaryEmbedding", "head size")?;
    let rot = if rot_attr == 0 {
        head
    } else {
        rot_attr as usize
    };
    if rot > head || rot % 2 != 0 {
        return Err(Error::Shape(format!(
            "RotaryEmbedding: rotary_embedding_dim {rot} must be even and at most the head size {head}"
        )));
    }
    let half = rot / 2;
    if let Some(ids) = ctx.opt_input(node, 3)? {
        cos = ctx.add(Op::Gather { axis: 0 }, &[cos, ids])?;
        sin = ctx.add(Op::Gather { axis: 0 }, &[sin, ids])?;
    }
    let cd = ctx.dims(cos);
    if cd.len() != 3 || cd[2] != Dim::Fixed(half) || ctx.dims(sin) != cd {
        return Err(Error::Shape(format!(
            "RotaryEmbedding: the caches (after position_ids) must be [batch, seq, {half}], got {:?} and {:?}",
            cd,
            ctx.dims(sin)
        )));
    }
    let c4 = if seq_axis == 1 {
        vec![cd[0].clone(), cd[1].clone(), Dim::Fixed(1), cd[2].clone()]
    } else {
        vec![cd[0].clone(), Dim::Fixed(1), cd[1].clone(), cd[2].clone()]
    };
    let cos = reshape(ctx, cos, c4.clone())?;
    let sin = reshape(ctx, sin, c4)?;

    let (x1, x2) = if interleaved {
        (
            slice(ctx, x4, 3, 0, rot as i64, 2)?,
            slice(ctx, x4, 3, 1, rot as i64, 2)?,
        )
    } else {
        (
            slice(ctx, x4, 3, 0, half as i64, 1)?,
            slice(ctx, x4, 3, half as i64, rot as i64, 1)?,
        )
    };
    let real = {
        let a = bin(ctx, BinaryOp::Mul, cos, x1)?;
        let b = bin(ctx, BinaryOp::Mul, sin, x2)?;
        bin(ctx, BinaryOp::Sub, a, b)?
    };
    let imag = {
        let a = bin(ctx, BinaryOp::Mul, sin, x1)?;
        let b = bin(ctx, BinaryOp::Mul, cos, x2)?;
        bin(ctx, BinaryOp::Add, a, b)?
    };
    let rotated = if interleaved {
        let rd = ctx.dims(real);
        let mut d5 = rd.clone();
        d5.push(Dim::Fixed(1));
        let r5 = reshape(ctx, real, d5.clone())?;
        let i5 = reshape(ctx, imag, d5)?;
        let both = concat(ctx, &[r5, i5], 4)?;
        let mut d4 = rd;
        d4[3] = Dim::Fixed(rot);
        reshape(ctx, both, d4)?
    } else {
        concat(ctx, &[real, imag], 3)?
    };
    let out = if rot < head {
        let rest = slice(ctx, x4, 3, rot as i64, head as i64, 1)?;
        concat(ctx, &[rotated, rest], 3)?
    } else {
        rotated
    };
    one(reshape(ctx, out, xd)?)
}
