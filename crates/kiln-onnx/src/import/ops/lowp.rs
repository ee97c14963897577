//! Casts between kiln dtypes and ONNX low-precision types (float8, float4, 4/2-bit
//! integers), which kiln holds as bit patterns (`Ctx::lowp`, [`kiln_ir::Op::EncodeLowp`]).
//! Shared by Cast/CastLike and Quantize/DequantizeLinear.

use crate::import::Ctx;
use crate::lowp::lowp_from_onnx;
use crate::tensor::dtype_from_onnx;
use kiln_ir::{DType, LowpType, NodeId, Op, Result};

/// An ONNX element type a value can be cast to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A kiln dtype.
    Kiln(DType),
    /// A low-precision type, held as patterns.
    Lowp(LowpType),
}

impl Target {
    /// The target of an ONNX element type code; an error for types kiln cannot hold.
    pub(crate) fn from_onnx(code: i32) -> Result<Target> {
        match lowp_from_onnx(code) {
            Some(lt) => Ok(Target::Lowp(lt)),
            None => dtype_from_onnx(code).map(Target::Kiln),
        }
    }

    /// The type `id` holds.
    pub(crate) fn of(ctx: &Ctx, id: NodeId) -> Target {
        match ctx.lowp.get(&id) {
            Some(&lt) => Target::Lowp(lt),
            None => Target::Kiln(ctx.dtype(id)),
        }
    }
}

/// `x` (patterns when `ctx.lowp` says so) as f32 values when it is low-precision, else as is.
pub(crate) fn decoded(ctx: &mut Ctx, x: NodeId) -> Result<NodeId> {
    match ctx.lowp.get(&x) {
        Some(&from) => ctx.add(Op::DecodeLowp { from }, &[x]),
        None => Ok(x),
    }
}

/// Patterns of `to` encoding the values of `x` (any kiln dtype), recorded in `ctx.lowp`.
pub(crate) fn encoded(ctx: &mut Ctx, x: NodeId, to: LowpType, saturate: bool) -> Result<NodeId> {
    let y = ctx.add(Op::EncodeLowp { to, saturate }, &[x])?;
    ctx.lowp.insert(y, to);
    Ok(y)
}

/// Casts `x` to `to` as ONNX Cast does; a low-precision source is decoded to f32 first
/// (exact), so low-precision → low-precision goes through f32.
pub(crate) fn cast(ctx: &mut Ctx, x: NodeId, to: Target, saturate: bool) -> Result<NodeId> {
    if Target::of(ctx, x) == to {
        return Ok(x);
    }
    let v = decoded(ctx, x)?;
    match to {
        Target::Kiln(d) => ctx.add(Op::Cast(d), &[v]),
        Target::Lowp(lt) => encoded(ctx, v, lt, saturate),
    }
}
