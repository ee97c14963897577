//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, built from GatherElements, Gather,
//! Where and reductions as the ONNX reference computes them:
//! `loss[n, d..] = -input[n, target[n, d..], d..] * w[n, d..]`, with `w = weight[target]` (or 1)
//! and 0 where `target == ignore_index`; `mean` is `sum(loss) / sum(w)` when there are weights
//! or an ignore_index, else the plain mean.

use super::{bin, cast, reduce, reshape, un};
use crate::import::{Convert, Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{BinaryOp, DType, Dim, Error, NodeId, Op, ReduceOp, Result, UnaryOp};

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "NegativeLogLikelihoodLoss" => nll_loss,
        "SoftmaxCrossEntropyLoss" => sce_loss,
        _ => return None,
    })
}

/// How the per-element losses are combined.
#[derive(Clone, Copy, PartialEq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

fn reduction(node: &NodeProto) -> Result<Reduction> {
    match attrs::string(node, "reduction")?.as_deref() {
        None | Some("mean") => Ok(Reduction::Mean),
        Some("sum") => Ok(Reduction::Sum),
        Some("none") => Ok(Reduction::None),
        Some(r) => Err(Error::Value(format!(
            "{}: reduction must be none, sum or mean, got '{r}'",
            node.op_type()
        ))),
    }
}

fn nll_loss(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["reduction", "ignore_index"])?;
    let input = ctx.input(node, 0)?;
    let target = ctx.input(node, 1)?;
    let weight = ctx.opt_input(node, 2)?;
    let r = reduction(node)?;
    let ii = attrs::opt_int(node, "ignore_index")?;
    one(nll(ctx, input, target, weight, r, ii)?)
}

fn sce_loss(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["reduction", "ignore_index"])?;
    let scores = ctx.input(node, 0)?;
    let labels = ctx.input(node, 1)?;
    let weight = ctx.opt_input(node, 2)?;
    let r = reduction(node)?;
    let ii = attrs::opt_int(node, "ignore_index")?;
    if ctx.rank(scores) < 2 {
        return Err(Error::Shape(format!(
            "SoftmaxCrossEntropyLoss needs [N, C, ..] scores, got {}",
            ctx.ty(scores).shape
        )));
    }
    let log_prob = super::softmax::log_softmax(ctx, scores, 1)?;
    let loss = nll(ctx, log_prob, labels, weight, r, ii)?;
    Ok(vec![Val::Node(loss), Val::Node(log_prob)])
}

/// The NLL loss of `input` `[N, C, d..]` at `target` `[N, d..]`.
fn nll(
    ctx: &mut Ctx,
    input: NodeId,
    target: NodeId,
    weight: Option<NodeId>,
    r: Reduction,
    ignore_index: Option<i64>,
) -> Result<NodeId> {
    let in_dims = ctx.dims(input);
    let t_dims = ctx.dims(target);
    if in_dims.len() < 2 || t_dims.len() + 1 != in_dims.len() {
        return Err(Error::Shape(format!(
            "NegativeLogLikelihoodLoss: input must be [N, C, d..] and target [N, d..], got {} and {}",
            ctx.ty(input).shape,
            ctx.ty(target).shape
        )));
    }
    if !ctx.dtype(input).is_float() {
        return Err(Error::DType(format!(
            "NegativeLogLikelihoodLoss needs float input, got {}",
            ctx.dtype(input)
        )));
    }
    let t = cast(ctx, target, DType::I64)?;
    // Ignored positions may hold any value (negative, >= C): point them at class 0 so the
    // gathers stay in range; their weight is 0.
    let ignored = match ignore_index {
        Some(ii) => {
            let iiv = ctx.scalar(DType::I64, ii as f64)?;
            Some(bin(ctx, BinaryOp::Eq, t, iiv)?)
        }
        None => None,
    };
    let t = match ignored {
        Some(m) => {
            let zero = ctx.scalar(DType::I64, 0.0)?;
            ctx.add(Op::Where, &[m, zero, t])?
        }
        None => t,
    };
    let mut col_dims = t_dims.clone();
    col_dims.insert(1, Dim::Fixed(1));
    let idx = reshape(ctx, t, col_dims)?;
    let picked = ctx.add(Op::GatherElements { axis: 1 }, &[input, idx])?;
    let picked = reshape(ctx, picked, t_dims)?;
    let loss = un(ctx, UnaryOp::Neg, picked)?;
    let dtype = ctx.dtype(input);
    let w = match weight {
        Some(wt) => {
            let wt = cast(ctx, wt, dtype)?;
            Some(ctx.add(Op::Gather { axis: 0 }, &[wt, t])?)
        }
        None => None,
    };
    let w = match ignored {
        Some(m) => {
            let zero = ctx.scalar(dtype, 0.0)?;
            let w1 = match w {
                Some(w) => w,
                None => ctx.scalar(dtype, 1.0)?,
            };
            Some(ctx.add(Op::Where, &[m, zero, w1])?)
        }
        None => w,
    };
    let loss = match w {
        Some(w) => bin(ctx, BinaryOp::Mul, loss, w)?,
        None => loss,
    };
    let all: Vec<usize> = (0..ctx.rank(loss)).collect();
    Ok(match (r, w) {
        (Reduction::None, _) => loss,
        (Reduction::Sum, _) => reduce(ctx, ReduceOp::Sum, loss, &all, false)?,
        (Reduction::Mean, None) => reduce(ctx, ReduceOp::Mean, loss, &all, false)?,
        (Reduction::Mean, Some(w)) => {
            let s = reduce(ctx, ReduceOp::Sum, loss, &all, false)?;
            let ws = reduce(ctx, ReduceOp::Sum, w, &all, false)?;
            bin(ctx, BinaryOp::Div, s, ws)?
        }
    })
}
