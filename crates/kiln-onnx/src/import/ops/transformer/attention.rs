//! ONNX Attention (opsets 23-25), following onnx's reference implementation
//! (`onnx/reference/ops/op_attention.py`) step by step:
//!
//! - 3-D inputs `[B, L, H*D]` are split into heads (`q_num_heads`/`kv_num_heads`) and moved to
//!   `[B, H, L, D]`; the output goes back to `[B, L, H*Dv]`.
//! - `present_key/value` are `past ++ new` along the sequence axis.
//! - One additive bias (0 / -inf in Q's dtype) collects the mask (bool → 0/-inf, padded with
//!   -inf up to the key length), the causal mask, the sliding window (opset 25) and the
//!   `nonpad_kv_seqlen` padding mask (opset 24). Causal and window masks are aligned at an
//!   offset: the past length with `past_key`, `nonpad_kv_seqlen[b] - q_len` with it, else 0
//!   (top-left: query `i` sees keys `j <= i`).
//! - Q and K are each scaled by `sqrt(scale)` in Q's dtype (as the reference), K/V heads are
//!   repeated (`h0, h0, h1, h1, ..`) for grouped-query attention, softcap is applied before
//!   the bias, and rows whose bias is all -inf give zeros (not NaN).

use super::build::{
    bin, cast, concat, fixed, grid_bool, grid_i64, lit, matmul, permute, reduce, reshape, select,
    un, unflatten_heads,
};
use crate::import::{Ctx, Val, attrs};
use crate::proto::NodeProto;
use crate::tensor::dtype_from_onnx;
use kiln_ir::{BinaryOp, DType, Dim, Error, NodeId, Op, PadMode, ReduceOp, Result, Shape, UnaryOp};

/// Where causal and window masks are aligned: query `i` sits at key position `i + offset`.
enum Offset {
    /// The same offset for every batch entry (0, or the past length).
    Static(i64),
    /// `nonpad_kv_seqlen[b] - q_len`, known at run time: the i64 `[B, 1, 1]` lengths.
    PerBatch(NodeId),
}

/// The converter of ONNX Attention.
pub(in crate::import::ops) fn attention(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    if ctx.opset < 23 {
        return Err(Error::Unsupported(format!(
            "Attention opset {} is not supported (23 and later are)",
            ctx.opset
        )));
    }
    let mut known = vec![
        "is_causal",
        "kv_num_heads",
        "q_num_heads",
        "qk_matmul_output_mode",
        "scale",
        "softcap",
        "softmax_precision",
    ];
    if ctx.opset >= 25 {
        known.extend(["left_window_size", "right_window_size"]);
    }
    attrs::check_known(node, &known)?;
    let is_causal = attrs::int(node, "is_causal", 0)? != 0;
    let mode = attrs::int(node, "qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return Err(Error::Value(format!(
            "Attention: qk_matmul_output_mode must be 0..3, not {mode}"
        )));
    }
    let softcap = attrs::float(node, "softcap", 0.0)? as f64;
    let left = attrs::int(node, "left_window_size", -1)?;
    let right = attrs::int(node, "right_window_size", -1)?;
    if left < -1 || right < -1 {
        return Err(Error::Value(format!(
            "Attention: left/right_window_size must be -1 or >= 0, not {left}/{right}"
        )));
    }
    let softmax_dtype = match attrs::opt_int(node, "softmax_precision")? {
        Some(code) => {
            let d = dtype_from_onnx(
                i32::try_from(code).map_err(|_| Error::Value(format!("bad type code {code}")))?,
            )?;
            if !d.is_float() {
                return Err(Error::Value(format!(
                    "Attention: softmax_precision must be a float type, not {d}"
                )));
            }
            Some(d)
        }
        None => None,
    };

    let q = ctx.input(node, 0)?;
    let k = ctx.input(node, 1)?;
    let v = ctx.input(node, 2)?;
    let t = ctx.dtype(q);
    if !t.is_float() || ctx.dtype(k) != t || ctx.dtype(v) != t {
        return Err(Error::DType(format!(
            "Attention needs Q, K and V of one float dtype, got {}, {}, {}",
            t,
            ctx.dtype(k),
            ctx.dtype(v)
        )));
    }
    let rank = ctx.rank(q);
    if ctx.rank(k) != rank || ctx.rank(v) != rank || (rank != 3 && rank != 4) {
        return Err(Error::Shape(format!(
            "Attention needs Q, K, V all 3-D or all 4-D, got ranks {}, {}, {}",
            rank,
            ctx.rank(k),
            ctx.rank(v)
        )));
    }
    let q_heads_attr = attrs::opt_int(node, "q_num_heads")?;
    let kv_heads_attr = attrs::opt_int(node, "kv_num_heads")?;
    let (q4, k4, v4) = if rank == 3 {
        let (Some(hq), Some(hk)) = (q_heads_attr, kv_heads_attr) else {
            return Err(Error::Value(
                "Attention with 3-D inputs needs q_num_heads and kv_num_heads".into(),
            ));
        };
        (
            split_heads(ctx, q, hq, "Q")?,
            split_heads(ctx, k, hk, "K")?,
            split_heads(ctx, v, hk, "V")?,
        )
    } else {
        (q, k, v)
    };

    let past_k = ctx.opt_input(node, 4)?;
    let past_v = ctx.opt_input(node, 5)?;
    let nonpad = if ctx.opset >= 24 {
        ctx.opt_input(node, 6)?
    } else {
        None
    };
    let (present_k, present_v) = match (past_k, past_v) {
        (Some(pk), Some(pv)) => (concat(ctx, &[pk, k4], 2)?, concat(ctx, &[pv, v4], 2)?),
        (None, None) => (k4, v4),
        _ => {
            return Err(Error::Value(
                "Attention: past_key and past_value must be given together".into(),
            ));
        }
    };
    if nonpad.is_some() && past_k.is_some() {
        return Err(Error::Value(
            "Attention: nonpad_kv_seqlen cannot be combined with past_key/past_value".into(),
        ));
    }

    let qd = ctx.dims(q4);
    let kd = ctx.dims(present_k);
    let vd = ctx.dims(present_v);
    let hq = fixed(&qd[1], "Attention", "number of query heads")?;
    let hk = fixed(&kd[1], "Attention", "number of key heads")?;
    let hv = fixed(&vd[1], "Attention", "number of value heads")?;
    for (what, attr, got) in [
        ("q_num_heads", q_heads_attr, hq),
        ("kv_num_heads", kv_heads_attr, hk),
    ] {
        if let Some(a) = attr
            && a != got as i64
        {
            return Err(Error::Shape(format!(
                "Attention: {what} = {a} but the inputs have {got} heads"
            )));
        }
    }
    // Grouped-query attention: each K/V head serves hq/hk query heads.
    let (k_rep, v_rep) = if hq == hk && hk == hv {
        (present_k, present_v)
    } else if hk == hv && hk > 0 && hq % hk == 0 {
        (
            repeat_heads(ctx, present_k, hq / hk)?,
            repeat_heads(ctx, present_v, hq / hk)?,
        )
    } else {
        return Err(Error::Shape(format!(
            "Attention: {hq} query heads cannot share {hk} key / {hv} value heads (needs equal K/V heads dividing the query heads)"
        )));
    };

    let head = fixed(&qd[3], "Attention", "head size")?;
    let scale = match attrs::has(node, "scale") {
        true => attrs::float(node, "scale", 1.0)? as f64,
        false => 1.0 / (head as f64).sqrt(),
    };
    let s = ctx.scalar(t, scale.sqrt())?;
    let qs = bin(ctx, BinaryOp::Mul, q4, s)?;
    let ks = bin(ctx, BinaryOp::Mul, k_rep, s)?;
    let kt = permute(ctx, ks, &[0, 1, 3, 2])?;
    let mut qk = matmul(ctx, qs, kt)?;
    if softcap > 0.0 {
        let c = ctx.scalar(t, softcap)?;
        let x = bin(ctx, BinaryOp::Div, qk, c)?;
        let x = un(ctx, UnaryOp::Tanh, x)?;
        qk = bin(ctx, BinaryOp::Mul, x, c)?;
    }

    let q_len = qd[2].clone();
    let kv_len = kd[2].clone();
    let offset = match (past_k, nonpad) {
        (Some(pk), _) => {
            Offset::Static(fixed(&ctx.dims(pk)[2], "Attention", "past length")? as i64)
        }
        (None, Some(n)) => {
            let n = cast(ctx, n, DType::I64)?;
            Offset::PerBatch(reshape(
                ctx,
                n,
                vec![qd[0].clone(), Dim::Fixed(1), Dim::Fixed(1)],
            )?)
        }
        (None, None) => Offset::Static(0),
    };
    let mut terms = Vec::new();
    if let Some(m) = ctx.opt_input(node, 3)? {
        terms.push(mask_bias(ctx, m, t, &kv_len)?);
    }
    if is_causal {
        let (ql, kl) = (
            fixed(&q_len, "Attention", "query length")?,
            fixed(&kv_len, "Attention", "key length")?,
        );
        let allowed = match &offset {
            Offset::Static(off) => grid_bool(ctx, ql, kl, |i, j| j <= i + off)?,
            // j <= i + n[b] - q_len  <=>  j - i + q_len <= n[b]
            Offset::PerBatch(n) => {
                let d = grid_i64(ctx, ql, kl, |i, j| j - i + ql as i64)?;
                let a = bin(ctx, BinaryOp::Le, d, *n)?;
                per_batch_4d(ctx, a)?
            }
        };
        terms.push(bias_of(ctx, allowed, t)?);
    }
    if left >= 0 || right >= 0 {
        let (ql, kl) = (
            fixed(&q_len, "Attention", "query length")?,
            fixed(&kv_len, "Attention", "key length")?,
        );
        let inside = |diff: i64| (left < 0 || diff <= left) && (right < 0 || -diff <= right);
        let allowed = match &offset {
            Offset::Static(off) => grid_bool(ctx, ql, kl, |i, j| inside(i + off - j))?,
            Offset::PerBatch(n) => {
                // diff = i - j - q_len + n[b]
                let e = grid_i64(ctx, ql, kl, |i, j| i - j - ql as i64)?;
                let diff = bin(ctx, BinaryOp::Add, e, *n)?;
                let mut a: Option<NodeId> = None;
                if left >= 0 {
                    let l = ctx.scalar(DType::I64, left as f64)?;
                    a = Some(bin(ctx, BinaryOp::Le, diff, l)?);
                }
                if right >= 0 {
                    let r = ctx.scalar(DType::I64, -right as f64)?;
                    let b = bin(ctx, BinaryOp::Ge, diff, r)?;
                    a = Some(match a {
                        Some(a) => bin(ctx, BinaryOp::And, a, b)?,
                        None => b,
                    });
                }
                let a = a.ok_or_else(|| Error::Graph("Attention: empty window".into()))?;
                per_batch_4d(ctx, a)?
            }
        };
        terms.push(bias_of(ctx, allowed, t)?);
    }
    if let Offset::PerBatch(n) = &offset {
        let kl = fixed(&kv_len, "Attention", "key length")?;
        let j = grid_i64(ctx, 1, kl, |_, j| j)?;
        let a = bin(ctx, BinaryOp::Lt, j, *n)?; // [B, 1, kv]
        let a = per_batch_4d(ctx, a)?;
        terms.push(bias_of(ctx, a, t)?);
    }
    let mut bias: Option<NodeId> = None;
    for term in terms {
        bias = Some(match bias {
            Some(b) => bin(ctx, BinaryOp::Add, b, term)?,
            None => term,
        });
    }

    let with_bias = match bias {
        Some(b) => bin(ctx, BinaryOp::Add, qk, b)?,
        None => qk,
    };
    let logits = cast(ctx, with_bias, softmax_dtype.unwrap_or(t))?;
    let mut probs = softmax_last(ctx, logits)?;
    if let Some(b) = bias {
        // A row with no attendable key is all zeros, decided on the bias (as the reference).
        let mx = reduce(ctx, ReduceOp::Max, b, vec![ctx.rank(b) - 1], true)?;
        let ninf = lit(ctx, b, f64::NEG_INFINITY)?;
        let dead = bin(ctx, BinaryOp::Eq, mx, ninf)?;
        let zero = lit(ctx, probs, 0.0)?;
        probs = select(ctx, dead, zero, probs)?;
    }
    let probs_t = cast(ctx, probs, t)?;
    let mut y = matmul(ctx, probs_t, v_rep)?;
    if rank == 3 {
        y = permute(ctx, y, &[0, 2, 1, 3])?;
        let yd = ctx.dims(y);
        let dv = fixed(&yd[3], "Attention", "value head size")?;
        y = reshape(
            ctx,
            y,
            vec![yd[0].clone(), yd[1].clone(), Dim::Fixed(hq * dv)],
        )?;
    }
    let mut outs = vec![Val::Node(y), Val::Node(present_k), Val::Node(present_v)];
    if node.output.get(3).is_some_and(|s| !s.is_empty()) {
        let qk_out = match mode {
            0 | 1 => qk,
            2 => with_bias,
            _ => probs,
        };
        outs.push(Val::Node(cast(ctx, qk_out, t)?));
    }
    Ok(outs)
}

/// Softmax over the last axis. Half-precision softmax is built step by step in that dtype
/// (the spec computes it in the input's precision, rounding each step; the IR op works in f32).
fn softmax_last(ctx: &mut Ctx, x: NodeId) -> Result<NodeId> {
    let axis = ctx.rank(x) - 1;
    if matches!(ctx.dtype(x), DType::F32 | DType::F64) {
        return ctx.add(Op::Softmax { axis }, &[x]);
    }
    let m = reduce(ctx, ReduceOp::Max, x, vec![axis], true)?;
    let d = bin(ctx, BinaryOp::Sub, x, m)?;
    let e = un(ctx, UnaryOp::Exp, d)?;
    let s = reduce(ctx, ReduceOp::Sum, e, vec![axis], true)?;
    bin(ctx, BinaryOp::Div, e, s)
}

/// `[B, L, H*D]` → `[B, H, L, D]`.
fn split_heads(ctx: &mut Ctx, x: NodeId, heads: i64, what: &str) -> Result<NodeId> {
    let x = unflatten_heads(ctx, x, heads, "Attention", what)?;
    permute(ctx, x, &[0, 2, 1, 3])
}

/// `[B, H, L, D]` → `[B, H*r, L, D]` with each head repeated `r` times in place.
fn repeat_heads(ctx: &mut Ctx, x: NodeId, r: usize) -> Result<NodeId> {
    let d = ctx.dims(x);
    let h = fixed(&d[1], "Attention", "number of heads")?;
    let x5 = reshape(
        ctx,
        x,
        vec![
            d[0].clone(),
            d[1].clone(),
            Dim::Fixed(1),
            d[2].clone(),
            d[3].clone(),
        ],
    )?;
    let e = ctx.add(
        Op::Expand(Shape(vec![
            d[0].clone(),
            d[1].clone(),
            Dim::Fixed(r),
            d[2].clone(),
            d[3].clone(),
        ])),
        &[x5],
    )?;
    reshape(
        ctx,
        e,
        vec![d[0].clone(), Dim::Fixed(h * r), d[2].clone(), d[3].clone()],
    )
}

/// `[B, q, kv]` → `[B, 1, q, kv]` (a per-batch mask must not broadcast against heads).
fn per_batch_4d(ctx: &mut Ctx, a: NodeId) -> Result<NodeId> {
    let d = ctx.dims(a);
    reshape(
        ctx,
        a,
        vec![d[0].clone(), Dim::Fixed(1), d[1].clone(), d[2].clone()],
    )
}

/// 0 where `allowed`, -inf elsewhere, in `t`.
fn bias_of(ctx: &mut Ctx, allowed: NodeId, t: DType) -> Result<NodeId> {
    let zero = ctx.scalar(t, 0.0)?;
    let ninf = ctx.scalar(t, f64::NEG_INFINITY)?;
    select(ctx, allowed, zero, ninf)
}

/// The user mask as an additive bias in `t`, its last axis padded with -inf to `kv_len`.
fn mask_bias(ctx: &mut Ctx, m: NodeId, t: DType, kv_len: &Dim) -> Result<NodeId> {
    let b = if ctx.dtype(m) == DType::Bool {
        bias_of(ctx, m, t)?
    } else {
        cast(ctx, m, t)?
    };
    let d = ctx.dims(b);
    let Some(last) = d.last() else {
        return Err(Error::Shape(
            "Attention: attn_mask must have rank >= 1".into(),
        ));
    };
    if last == kv_len {
        return Ok(b);
    }
    let (ml, kl) = (
        fixed(last, "Attention", "mask length")?,
        fixed(kv_len, "Attention", "key length")?,
    );
    if ml > kl {
        return Err(Error::Shape(format!(
            "Attention: attn_mask covers {ml} keys but there are only {kl}"
        )));
    }
    let mut pads = vec![(0, 0); d.len()];
    if let Some(p) = pads.last_mut() {
        *p = (0, kl - ml);
    }
    ctx.add(
        Op::Pad {
            pads,
            mode: PadMode::Constant(f64::NEG_INFINITY),
        },
        &[b],
    )
}
