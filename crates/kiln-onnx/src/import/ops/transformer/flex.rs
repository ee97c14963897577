//! ONNX FlexAttention (ai.onnx.preview, opset 1): scaled dot-product attention whose scores
//! and probabilities pass through user subgraphs (`score_mod`, `prob_mod`), which are
//! inlined here once each.

use super::build::{bin, cast, matmul, permute, reshape};
use crate::import::control::run_body;
use crate::import::{Ctx, Env, Val, attrs, one};
use crate::proto::{GraphProto, NodeProto};
use kiln_ir::{BinaryOp, DType, Dim, Error, NodeId, Op, Result};
use std::collections::HashMap;

/// The softmax dtype: `softmax_precision` when set, else f32 for 16-bit inputs, else the
/// input dtype (as the ONNX reference does).
fn compute_dtype(node: &NodeProto, input: DType) -> Result<DType> {
    match attrs::opt_int(node, "softmax_precision")? {
        None => Ok(match input {
            DType::F16 | DType::BF16 => DType::F32,
            d => d,
        }),
        Some(1) => Ok(DType::F32),
        Some(10) => Ok(DType::F16),
        Some(16) => Ok(DType::BF16),
        Some(11) => Ok(DType::F64),
        Some(p) => Err(Error::Value(format!(
            "FlexAttention softmax_precision {p} is not one of FLOAT (1), FLOAT16 (10), BFLOAT16 (16), DOUBLE (11)"
        ))),
    }
}

/// FlexAttention: `scores = (Q*sqrt(s)) @ (K*sqrt(s))^T` in the input dtype, then (in the
/// softmax dtype) `score_mod`, softmax over the last axis, `prob_mod`, `@ V`, cast back to
/// V's dtype. Query head `h` reads KV head `h / (Hq / Hkv)`.
pub(super) fn flex_attention(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(
        node,
        &["prob_mod", "score_mod", "softmax_precision", "scale"],
    )?;
    if ctx.opset != 1 {
        return Err(Error::Unsupported(format!(
            "ai.onnx.preview FlexAttention at opset {} (kiln implements opset 1)",
            ctx.opset
        )));
    }
    let q = ctx.input(node, 0)?;
    let k = ctx.input(node, 1)?;
    let v = ctx.input(node, 2)?;
    let dt = ctx.dtype(q);
    if !dt.is_float() || ctx.dtype(k) != dt || !ctx.dtype(v).is_float() {
        return Err(Error::DType(format!(
            "FlexAttention needs float Q, K, V (Q and K of one dtype), got {}, {}, {}",
            dt,
            ctx.dtype(k),
            ctx.dtype(v)
        )));
    }
    let [b, hq, l, e] = fixed4(ctx, q, "Q")?;
    let [kb, hkv, s, ek] = fixed4(ctx, k, "K")?;
    let [vb, vh, vs, ev] = fixed4(ctx, v, "V")?;
    if kb != b || vb != b || vh != hkv || vs != s || ek != e || hkv == 0 || hq % hkv != 0 {
        return Err(Error::Shape(format!(
            "FlexAttention shapes do not agree: Q {:?}, K {:?}, V {:?} (need one batch, K/V of one head count and \
             length, Q/K of one head size, Q heads a multiple of KV heads)",
            ctx.ty(q),
            ctx.ty(k),
            ctx.ty(v)
        )));
    }
    let group = hq / hkv;
    let scale = match attrs::has(node, "scale") {
        true => attrs::float(node, "scale", 0.0)?,
        false => (1.0 / (e as f64).sqrt()) as f32,
    };
    let work = compute_dtype(node, dt)?;
    let fx = |d: &[usize]| d.iter().map(|&n| Dim::Fixed(n)).collect::<Vec<_>>();

    // The reference rounds sqrt(scale) (computed in f32) to Q's dtype and scales Q and K by it.
    let ss = ctx.scalar(dt, scale.sqrt() as f64)?;
    let qs = bin(ctx, BinaryOp::Mul, q, ss)?;
    let ks = bin(ctx, BinaryOp::Mul, k, ss)?;
    // Query heads of one KV head are contiguous, so they fold into the row axis.
    let qs = reshape(ctx, qs, fx(&[b, hkv, group * l, e]))?;
    let kt = permute(ctx, ks, &[0, 1, 3, 2])?;
    let scores = matmul(ctx, qs, kt)?;
    let scores = reshape(ctx, scores, fx(&[b, hq, l, s]))?;
    let mut scores = cast(ctx, scores, work)?;
    if let Some(g) = attrs::graph(node, "score_mod") {
        scores = run_modifier(ctx, node, g, "score_mod", scores)?;
    }
    let mut probs = ctx.add(Op::Softmax { axis: 3 }, &[scores])?;
    if let Some(g) = attrs::graph(node, "prob_mod") {
        probs = run_modifier(ctx, node, g, "prob_mod", probs)?;
    }
    let probs = reshape(ctx, probs, fx(&[b, hkv, group * l, s]))?;
    let vw = cast(ctx, v, work)?;
    let y = matmul(ctx, probs, vw)?;
    let y = reshape(ctx, y, fx(&[b, hq, l, ev]))?;
    one(cast(ctx, y, ctx.dtype(v))?)
}

/// The static dims of a rank-4 input.
fn fixed4(ctx: &Ctx, id: NodeId, what: &str) -> Result<[usize; 4]> {
    let d = ctx.dims(id);
    let f: Option<Vec<usize>> = d.iter().map(Dim::fixed).collect();
    match f.as_deref() {
        Some(&[a, b, c, e]) => Ok([a, b, c, e]),
        _ => Err(Error::Unsupported(format!(
            "FlexAttention needs a static rank-4 {what}, got {:?}; import with concrete input shapes",
            ctx.ty(id)
        ))),
    }
}

/// Inlines modifier subgraph `g` on `x`: its one output must have `x`'s shape; it is cast to
/// `x`'s dtype as the reference does.
fn run_modifier(
    ctx: &mut Ctx,
    node: &NodeProto,
    g: &GraphProto,
    what: &str,
    x: NodeId,
) -> Result<NodeId> {
    if g.input.len() != 1 || g.output.len() != 1 {
        return Err(Error::Graph(format!(
            "FlexAttention {what} must have one input and one output, it has {} and {}",
            g.input.len(),
            g.output.len()
        )));
    }
    let prefix = format!(
        "flex#{}#{what}/",
        node.output.first().map(String::as_str).unwrap_or("")
    );
    let opsets = ctx.opsets.clone();
    let (functions, sizes) = (HashMap::new(), HashMap::new());
    let mut env = Env {
        opsets: &opsets,
        functions: &functions,
        sizes: &sizes,
        depth: 1,
    };
    let outs = run_body(ctx, g, &prefix, &[Val::Node(x)], &mut env)?;
    let out = match &outs[0] {
        Val::Node(id) => *id,
        other => {
            return Err(Error::Unsupported(format!(
                "FlexAttention {what} output is not a tensor: {other:?}"
            )));
        }
    };
    if ctx.dims(out) != ctx.dims(x) {
        return Err(Error::Shape(format!(
            "FlexAttention {what} must keep its input's shape {:?}, it gives {:?}",
            ctx.ty(x),
            ctx.ty(out)
        )));
    }
    cast(ctx, out, ctx.dtype(x))
}
