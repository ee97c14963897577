//! ONNX FlexAttention (ai.onnx.preview, opset 1): scaled dot-product attention whose scores
//! and probabilities pass through user subgraphs (`score_mod`, `prob_mod`), which are
//! inlined here once each.

use super::build::{bin, cast, matmul, permute, reshape};
use crate::import::{Ctx, Env, ImportError, Val, attrs, convert_nodes, one};
use crate::proto::{GraphProto, NodeProto};
use crate::tensor::tensor_from_proto;
use kiln_ir::{BinaryOp, DType, Dim, Error, NodeId, Op, Result};
use std::collections::{HashMap, HashSet};

/// The ai.onnx opset the modifier subgraphs are converted at. Converters cannot see the
/// model's opset imports, so this is the opset FlexAttention was introduced alongside; the
/// ops modifiers use (elementwise math, Shape/Gather/Range/Reshape, Where, Cast) have had
/// their current semantics since opset 13.
const BODY_OPSET: i64 = 26;

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
    let g = renamed(g, &prefix);
    ctx.bind(g.input[0].name(), Val::Node(x));
    for t in &g.initializer {
        let c = tensor_from_proto(t, ctx.model_dir.as_deref())?;
        let id = ctx.constant(c);
        ctx.bind(t.name(), Val::Node(id));
    }
    let opsets: HashMap<String, i64> = [
        (String::new(), BODY_OPSET),
        ("ai.onnx.preview".to_string(), 1),
    ]
    .into();
    let functions = HashMap::new();
    let sizes = HashMap::new();
    let mut env = Env {
        opsets: &opsets,
        functions: &functions,
        sizes: &sizes,
        depth: 1,
    };
    convert_nodes(ctx, &g.node, &mut env).map_err(|e| match e {
        ImportError::Ir(e) => e,
        ImportError::NeedsValue { message, .. } => Error::Unsupported(message),
    })?;
    let out = match ctx.value(g.output[0].name())? {
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

/// A copy of `g` whose own names (inputs, initializers, node outputs, in nested bodies too)
/// carry `prefix`, so they cannot clash with the enclosing graph's.
fn renamed(g: &GraphProto, prefix: &str) -> GraphProto {
    let mut own = HashSet::new();
    collect_defs(g, &mut own);
    let mut g = g.clone();
    rename_graph(&mut g, &own, prefix);
    g
}

fn collect_defs(g: &GraphProto, own: &mut HashSet<String>) {
    own.extend(g.input.iter().map(|v| v.name().to_string()));
    own.extend(g.initializer.iter().map(|t| t.name().to_string()));
    for n in &g.node {
        own.extend(n.output.iter().filter(|o| !o.is_empty()).cloned());
        for a in &n.attribute {
            a.g.iter()
                .chain(a.graphs.iter())
                .for_each(|sub| collect_defs(sub, own));
        }
    }
}

fn rename_graph(g: &mut GraphProto, own: &HashSet<String>, prefix: &str) {
    let r = |s: &mut String| {
        if own.contains(s.as_str()) {
            *s = format!("{prefix}{s}");
        }
    };
    g.input
        .iter_mut()
        .for_each(|v| v.name.iter_mut().for_each(r));
    g.output
        .iter_mut()
        .for_each(|v| v.name.iter_mut().for_each(r));
    g.initializer
        .iter_mut()
        .for_each(|t| t.name.iter_mut().for_each(r));
    for n in &mut g.node {
        n.input.iter_mut().for_each(r);
        n.output.iter_mut().for_each(r);
        for a in &mut n.attribute {
            a.g.iter_mut()
                .chain(a.graphs.iter_mut())
                .for_each(|sub| rename_graph(sub, own, prefix));
        }
    }
}
