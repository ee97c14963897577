//! Transformer blocks as ONNX 23+ defines them (Attention, RotaryEmbedding, SwiGLU), built
//! from IR ops.

use crate::import::{Convert, Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{BinaryOp, Error, Result, UnaryOp};

mod attention;
pub(super) mod build;
mod causal_conv;
mod flex;
mod linear;
mod rotary;

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "Attention" => attention::attention,
        "RotaryEmbedding" => rotary::rotary_embedding,
        "SwiGLU" => swiglu,
        "LinearAttention" => linear::linear_attention,
        "CausalConvWithState" => causal_conv::causal_conv_with_state,
        _ => return None,
    })
}

/// The converter for an ai.onnx.preview op, if kiln has one.
pub(super) fn lookup_preview(op: &str) -> Option<Convert> {
    Some(match op {
        "FlexAttention" => flex::flex_attention,
        _ => return None,
    })
}

/// ONNX SwiGLU (opset 28): `a * sigmoid(alpha * a) * b`, `a` and `b` of one shape and dtype.
fn swiglu(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["alpha"])?;
    let alpha = attrs::float(node, "alpha", 1.0)? as f64;
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    if ctx.ty(a) != ctx.ty(b) || !ctx.dtype(a).is_float() {
        return Err(Error::Shape(format!(
            "SwiGLU needs A and B of one float type and shape (no broadcasting), got {:?} and {:?}",
            ctx.ty(a),
            ctx.ty(b)
        )));
    }
    let k = build::lit(ctx, a, alpha)?;
    let ka = build::bin(ctx, BinaryOp::Mul, a, k)?;
    let s = build::un(ctx, UnaryOp::Sigmoid, ka)?;
    let sw = build::bin(ctx, BinaryOp::Mul, a, s)?;
    one(build::bin(ctx, BinaryOp::Mul, sw, b)?)
}
