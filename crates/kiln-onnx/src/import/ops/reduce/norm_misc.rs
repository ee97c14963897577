//! LpNormalization, MeanVarianceNormalization and LRN, built from reductions and elementwise ops.

use super::{bin, fixed_prod, reduce, scalar_like, un};
use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{BinaryOp, Error, Op, PadMode, ReduceOp, Result, SliceAxis, UnaryOp, normalize_axis};

/// LpNormalization: `x / ||x||_p` along `axis` (p 1 or 2); a zero norm gives 0 (as the ONNX reference).
pub(super) fn lp_norm(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis", "p"])?;
    let x = ctx.input(node, 0)?;
    let axis = normalize_axis(
        attrs::int(node, "axis", -1)?,
        ctx.rank(x),
        "LpNormalization",
    )?;
    let p = attrs::int(node, "p", 2)?;
    let norm = match p {
        1 => {
            let a = un(ctx, UnaryOp::Abs, x)?;
            reduce(ctx, ReduceOp::Sum, a, &[axis], true)?
        }
        2 => {
            let sq = bin(ctx, BinaryOp::Mul, x, x)?;
            let s = reduce(ctx, ReduceOp::Sum, sq, &[axis], true)?;
            un(ctx, UnaryOp::Sqrt, s)?
        }
        _ => {
            return Err(Error::Value(format!(
                "LpNormalization: p must be 1 or 2, got {p}"
            )));
        }
    };
    let zero = scalar_like(ctx, x, 0.0)?;
    let is_zero = bin(ctx, BinaryOp::Eq, norm, zero)?;
    let q = bin(ctx, BinaryOp::Div, x, norm)?;
    one(ctx.add(Op::Where, &[is_zero, zero, q])?)
}

/// MeanVarianceNormalization, as its ONNX function body:
/// `(x - E[x]) / (sqrt(E[x²] - E[x]²) + 1e-9)` over `axes` (default `[0, 2, 3]`).
pub(super) fn mvn(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axes"])?;
    let x = ctx.input(node, 0)?;
    let rank = ctx.rank(x);
    let given = attrs::ints(node, "axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let mut axes = given
        .iter()
        .map(|&a| normalize_axis(a, rank, "MeanVarianceNormalization"))
        .collect::<Result<Vec<_>>>()?;
    axes.sort_unstable();
    axes.dedup();
    let mean = reduce(ctx, ReduceOp::Mean, x, &axes, true)?;
    let mean_sq = bin(ctx, BinaryOp::Mul, mean, mean)?;
    let sq = bin(ctx, BinaryOp::Mul, x, x)?;
    let sq_mean = reduce(ctx, ReduceOp::Mean, sq, &axes, true)?;
    let var = bin(ctx, BinaryOp::Sub, sq_mean, mean_sq)?;
    let std = un(ctx, UnaryOp::Sqrt, var)?;
    let e = scalar_like(ctx, x, 1e-9)?;
    let den = bin(ctx, BinaryOp::Add, std, e)?;
    let num = bin(ctx, BinaryOp::Sub, x, mean)?;
    one(bin(ctx, BinaryOp::Div, num, den)?)
}

/// LRN across channels: `x / (bias + alpha/size * sum(x²))^beta`, the sum over channels
/// `c - floor((size-1)/2) ..= c + ceil((size-1)/2)` (zero-padded): the sum of `size` shifted
/// slices of the padded squares.
pub(super) fn lrn(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["alpha", "beta", "bias", "size"])?;
    let x = ctx.input(node, 0)?;
    let alpha = attrs::float(node, "alpha", 1e-4)? as f64;
    let beta = attrs::float(node, "beta", 0.75)? as f64;
    let bias = attrs::float(node, "bias", 1.0)? as f64;
    let size = attrs::opt_int(node, "size")?
        .and_then(|s| usize::try_from(s).ok())
        .filter(|&s| s > 0)
        .ok_or_else(|| Error::Value("LRN needs a positive `size` attribute".into()))?;
    let dims = ctx.dims(x);
    if dims.len() < 2 {
        return Err(Error::Shape(format!(
            "LRN needs [N, C, ..] input, got {}",
            ctx.ty(x).shape
        )));
    }
    let c = fixed_prod(&dims[1..2], "LRN")?;
    let sq = bin(ctx, BinaryOp::Mul, x, x)?;
    let mut pads = vec![(0, 0); dims.len()];
    pads[1] = ((size - 1) / 2, size - 1 - (size - 1) / 2);
    let padded = ctx.add(
        Op::Pad {
            pads,
            mode: PadMode::Constant(0.0),
        },
        &[sq],
    )?;
    let mut sum = None;
    for i in 0..size {
        let mut sl = vec![SliceAxis::FULL; dims.len()];
        sl[1] = SliceAxis {
            start: i as i64,
            end: (i + c) as i64,
            step: 1,
        };
        let s = ctx.add(Op::Slice(sl), &[padded])?;
        sum = Some(match sum {
            None => s,
            Some(acc) => bin(ctx, BinaryOp::Add, acc, s)?,
        });
    }
    let sum = sum.ok_or_else(|| Error::Value("LRN: size must be positive".into()))?;
    let k = scalar_like(ctx, x, alpha / size as f64)?;
    let scaled = bin(ctx, BinaryOp::Mul, sum, k)?;
    let b = scalar_like(ctx, x, bias)?;
    let base = bin(ctx, BinaryOp::Add, scaled, b)?;
    let e = scalar_like(ctx, x, beta)?;
    let den = bin(ctx, BinaryOp::Pow, base, e)?;
    one(bin(ctx, BinaryOp::Div, x, den)?)
}
