//! ONNX CausalConvWithState (opset 27): a causal depthwise 1-D convolution that carries its
//! last `k - 1` input positions as state, built as a sum of `k` shifted, weighted slices.

use super::build::{bin, cast, concat, fixed, reshape, slice, un};
use crate::import::{Ctx, Val, attrs};
use crate::proto::NodeProto;
use kiln_ir::{BinaryOp, DType, Dim, Error, Op, PadMode, Result, UnaryOp};

/// ONNX CausalConvWithState: `padded = concat(past_state or zeros, input)` along the length
/// axis; `output[b, c, l] = bias[c] + sum_j padded[b, c, l + j] * weight[c, 0, j]`, optionally
/// followed by SiLU; `present_state` is the last `k - 1` positions of `padded`. The convolution
/// accumulates in f32 for 16-bit inputs and is rounded to the input dtype before the
/// activation, as the ONNX reference does.
pub(super) fn causal_conv_with_state(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["activation"])?;
    if ctx.opset < 27 {
        return Err(Error::Unsupported(format!(
            "CausalConvWithState at opset {} (kiln implements opset 27)",
            ctx.opset
        )));
    }
    let silu = match attrs::string(node, "activation")?.as_deref() {
        None | Some("none") => false,
        Some("silu") | Some("swish") => true,
        Some(other) => {
            return Err(Error::Value(format!(
                "CausalConvWithState activation '{other}' is not one of none, silu, swish"
            )));
        }
    };
    let x = ctx.input(node, 0)?;
    let w = ctx.input(node, 1)?;
    let bias = ctx.opt_input(node, 2)?;
    let past = ctx.opt_input(node, 3)?;
    let dt = ctx.dtype(x);
    if !dt.is_float() || ctx.dtype(w) != dt {
        return Err(Error::DType(format!(
            "CausalConvWithState needs input and weight of one float dtype, got {dt} and {}",
            ctx.dtype(w)
        )));
    }
    let (xd, wd) = (ctx.dims(x), ctx.dims(w));
    if xd.len() != 3 || wd.len() != 3 {
        return Err(Error::Shape(format!(
            "CausalConvWithState needs input (B, C, L) and weight (C, 1, k), got {:?} and {:?}",
            ctx.ty(x),
            ctx.ty(w)
        )));
    }
    let l = fixed(&xd[2], "CausalConvWithState", "input length")?;
    let c = fixed(&xd[1], "CausalConvWithState", "channel count")?;
    let k = fixed(&wd[2], "CausalConvWithState", "kernel size")?;
    if wd[0] != Dim::Fixed(c) || wd[1] != Dim::Fixed(1) || k == 0 {
        return Err(Error::Shape(format!(
            "CausalConvWithState weight must be ({c}, 1, k) with k >= 1, got {:?}",
            ctx.ty(w)
        )));
    }
    let padded = match past {
        Some(p) => {
            let want = vec![xd[0].clone(), Dim::Fixed(c), Dim::Fixed(k - 1)];
            if ctx.dims(p) != want || ctx.dtype(p) != dt {
                return Err(Error::Shape(format!(
                    "CausalConvWithState past_state must be {dt} {want:?}, got {:?}",
                    ctx.ty(p)
                )));
            }
            concat(ctx, &[p, x], 2)?
        }
        None if k == 1 => x,
        None => ctx.add(
            Op::Pad {
                pads: vec![(0, 0), (0, 0), (k - 1, 0)],
                mode: PadMode::Constant(0.0),
            },
            &[x],
        )?,
    };
    let work = match dt {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    };
    let pw = cast(ctx, padded, work)?;
    let ww = cast(ctx, w, work)?;
    // (C, k): a (C, 1) column per tap broadcasts over (B, C, L).
    let ww = reshape(ctx, ww, vec![Dim::Fixed(c), Dim::Fixed(k)])?;
    let mut acc = None;
    for j in 0..k as i64 {
        let xs = slice(ctx, pw, 2, j, j + l as i64, 1)?;
        let wj = slice(ctx, ww, 1, j, j + 1, 1)?;
        let term = bin(ctx, BinaryOp::Mul, xs, wj)?;
        acc = Some(match acc {
            None => term,
            Some(a) => bin(ctx, BinaryOp::Add, a, term)?,
        });
    }
    let mut out = acc.ok_or_else(|| Error::Shape("CausalConvWithState kernel size is 0".into()))?;
    if let Some(bv) = bias {
        if ctx.dims(bv) != vec![Dim::Fixed(c)] || ctx.dtype(bv) != dt {
            return Err(Error::Shape(format!(
                "CausalConvWithState bias must be {dt} ({c}), got {:?}",
                ctx.ty(bv)
            )));
        }
        let bw = cast(ctx, bv, work)?;
        let bw = reshape(ctx, bw, vec![Dim::Fixed(c), Dim::Fixed(1)])?;
        out = bin(ctx, BinaryOp::Add, out, bw)?;
    }
    let mut out = cast(ctx, out, dt)?;
    if silu {
        let of = cast(ctx, out, work)?;
        let s = un(ctx, UnaryOp::Sigmoid, of)?;
        let y = bin(ctx, BinaryOp::Mul, of, s)?;
        out = cast(ctx, y, dt)?;
    }
    let total = (l + k - 1) as i64;
    let present = slice(ctx, padded, 2, l as i64, total, 1)?;
    Ok(vec![Val::Node(out), Val::Node(present)])
}
