//! ONNX LinearAttention (opset 27): the recurrent state update of linear / gated / delta /
//! gated-delta attention, unrolled over the (static) sequence length.

use super::build::{bin, cast, concat, fixed, matmul, reshape, slice, un};
use crate::import::{Ctx, Val, attrs};
use crate::proto::NodeProto;
use kiln_ir::{BinaryOp, DType, Dim, Error, HostTensor, NodeId, Result, UnaryOp};

/// The recurrence `update_rule` selects: whether the state decays and whether the write is a
/// delta-rule correction.
struct Rule {
    gating: bool,
    delta: bool,
}

fn rule(s: &str) -> Result<Rule> {
    Ok(match s {
        "linear" => Rule {
            gating: false,
            delta: false,
        },
        "gated" => Rule {
            gating: true,
            delta: false,
        },
        "delta" => Rule {
            gating: false,
            delta: true,
        },
        "gated_delta" => Rule {
            gating: true,
            delta: true,
        },
        other => {
            return Err(Error::Value(format!(
                "LinearAttention update_rule '{other}' is not one of linear, gated, delta, gated_delta"
            )));
        }
    })
}

/// The static dims of a rank-3 `[B, T, X]` input named `what`.
fn dims3(ctx: &Ctx, id: NodeId, what: &str) -> Result<[usize; 3]> {
    let d = ctx.dims(id);
    if d.len() != 3 {
        return Err(Error::Shape(format!(
            "LinearAttention {what} must be rank 3 (B, T, H*D), got {:?}",
            ctx.ty(id)
        )));
    }
    Ok([
        fixed(&d[0], "LinearAttention", "batch size")?,
        fixed(&d[1], "LinearAttention", "sequence length")?,
        fixed(&d[2], "LinearAttention", "hidden size")?,
    ])
}

/// ONNX LinearAttention. State `S` is `[B, H_kv, d_k, d_v]`; per token `t`:
/// gated rules scale `S` by `exp(g_t)`, delta rules replace `v_t` with
/// `beta_t * (v_t - S^T k_t)`, then `S += k_t ⊗ v_t` and `o_t = scale * q_t^T S` (query
/// heads `kv*group .. kv*group+group` read KV head `kv`). Computes in f32 for 16-bit inputs
/// (as the ONNX reference does), in the input dtype otherwise.
pub(super) fn linear_attention(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(
        node,
        &[
            "chunk_size",
            "kv_num_heads",
            "q_num_heads",
            "scale",
            "update_rule",
        ],
    )?;
    if ctx.opset < 27 {
        return Err(Error::Unsupported(format!(
            "LinearAttention at opset {} (kiln implements opset 27)",
            ctx.opset
        )));
    }
    let hq = attrs::opt_int(node, "q_num_heads")?;
    let hkv = attrs::opt_int(node, "kv_num_heads")?;
    let (Some(hq), Some(hkv)) = (hq, hkv) else {
        return Err(Error::Value(
            "LinearAttention needs the q_num_heads and kv_num_heads attributes".into(),
        ));
    };
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        return Err(Error::Value(format!(
            "LinearAttention q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})"
        )));
    }
    let (hq, hkv) = (hq as usize, hkv as usize);
    let group = hq / hkv;
    let rule = rule(&attrs::string(node, "update_rule")?.unwrap_or_else(|| "gated_delta".into()))?;
    let scale_attr = attrs::float(node, "scale", 0.0)? as f64;

    let q = ctx.input(node, 0)?;
    let k = ctx.input(node, 1)?;
    let v = ctx.input(node, 2)?;
    let past = ctx.opt_input(node, 3)?;
    let decay = ctx.opt_input(node, 4)?;
    let beta = ctx.opt_input(node, 5)?;
    if rule.gating != decay.is_some() || rule.delta != beta.is_some() {
        return Err(Error::Value(format!(
            "LinearAttention: decay must be given exactly for gated rules and beta exactly for delta rules \
             (decay given: {}, beta given: {})",
            decay.is_some(),
            beta.is_some()
        )));
    }
    let out_dtype = ctx.dtype(q);
    if !out_dtype.is_float() || [k, v].iter().any(|&x| ctx.dtype(x) != out_dtype) {
        return Err(Error::DType(format!(
            "LinearAttention needs query, key and value of one float dtype, got {}, {}, {}",
            out_dtype,
            ctx.dtype(k),
            ctx.dtype(v)
        )));
    }
    let [b, t, qhd] = dims3(ctx, q, "query")?;
    let [kb, kt, khd] = dims3(ctx, k, "key")?;
    let [vb, vt, vhd] = dims3(ctx, v, "value")?;
    if qhd % hq != 0 || vhd % hkv != 0 {
        return Err(Error::Shape(format!(
            "LinearAttention: query last dim {qhd} must divide by q_num_heads {hq} and value last dim {vhd} by \
             kv_num_heads {hkv}"
        )));
    }
    let (dk, dv) = (qhd / hq, vhd / hkv);
    if (kb, kt, khd) != (b, t, hkv * dk) || (vb, vt) != (b, t) {
        return Err(Error::Shape(format!(
            "LinearAttention: key must be [{b}, {t}, {}] and value [{b}, {t}, _], got {:?} and {:?}",
            hkv * dk,
            ctx.ty(k),
            ctx.ty(v)
        )));
    }
    let state_dtype = match past {
        Some(p) => {
            let want: Vec<Dim> = [b, hkv, dk, dv].iter().map(|&n| Dim::Fixed(n)).collect();
            if ctx.dims(p) != want || !ctx.dtype(p).is_float() {
                return Err(Error::Shape(format!(
                    "LinearAttention past_state must be float [{b}, {hkv}, {dk}, {dv}], got {:?}",
                    ctx.ty(p)
                )));
            }
            ctx.dtype(p)
        }
        None => out_dtype,
    };
    let work = match out_dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    };
    let scale = if scale_attr == 0.0 {
        1.0 / (dk as f64).sqrt()
    } else {
        scale_attr
    };

    let q = cast(ctx, q, work)?;
    let k = cast(ctx, k, work)?;
    let v = cast(ctx, v, work)?;
    // decay as [B, T, H_kv, d_k or 1] so a per-token slice reshapes to [B, H_kv, d_k|1, 1].
    let decay = match decay {
        None => None,
        Some(g) => {
            let [gb, gt, gl] = dims3(ctx, g, "decay")?;
            let per = if gl == hkv {
                1
            } else if gl == hkv * dk {
                dk
            } else {
                return Err(Error::Shape(format!(
                    "LinearAttention decay last dim {gl} must be kv_num_heads ({hkv}) or kv_num_heads*d_k ({})",
                    hkv * dk
                )));
            };
            if (gb, gt) != (b, t) || ctx.dtype(g) != out_dtype {
                return Err(Error::Shape(format!(
                    "LinearAttention decay must be {out_dtype} [{b}, {t}, _], got {:?}",
                    ctx.ty(g)
                )));
            }
            let g = cast(ctx, g, work)?;
            Some((g, per))
        }
    };
    let beta = match beta {
        None => None,
        Some(bt) => {
            let [bb, btt, bl] = dims3(ctx, bt, "beta")?;
            if (bb, btt) != (b, t) || (bl != hkv && bl != 1) || ctx.dtype(bt) != out_dtype {
                return Err(Error::Shape(format!(
                    "LinearAttention beta must be {out_dtype} [{b}, {t}, {hkv} or 1], got {:?}",
                    ctx.ty(bt)
                )));
            }
            let bt = cast(ctx, bt, work)?;
            Some((bt, bl))
        }
    };

    let fx = |d: &[usize]| d.iter().map(|&n| Dim::Fixed(n)).collect::<Vec<_>>();
    let mut state = match past {
        Some(p) => cast(ctx, p, work)?,
        None => {
            let z = HostTensor::zeros(work, &[b, hkv, dk, dv]);
            ctx.constant(z)
        }
    };
    let scale_c = ctx.scalar(work, scale)?;
    let mut outs = Vec::with_capacity(t);
    for i in 0..t as i64 {
        let qi = slice(ctx, q, 1, i, i + 1, 1)?;
        let qi = reshape(ctx, qi, fx(&[b, hkv, group, dk]))?;
        let ki = slice(ctx, k, 1, i, i + 1, 1)?;
        let k_col = reshape(ctx, ki, fx(&[b, hkv, dk, 1]))?;
        let vi = slice(ctx, v, 1, i, i + 1, 1)?;
        let mut v_row = reshape(ctx, vi, fx(&[b, hkv, 1, dv]))?;
        if let Some((g, per)) = decay {
            let gi = slice(ctx, g, 1, i, i + 1, 1)?;
            let gi = reshape(ctx, gi, fx(&[b, hkv, per, 1]))?;
            let e = un(ctx, UnaryOp::Exp, gi)?;
            state = bin(ctx, BinaryOp::Mul, state, e)?;
        }
        if let Some((bt, bl)) = beta {
            let k_row = reshape(ctx, ki, fx(&[b, hkv, 1, dk]))?;
            let retrieved = matmul(ctx, k_row, state)?;
            let diff = bin(ctx, BinaryOp::Sub, v_row, retrieved)?;
            let bi = slice(ctx, bt, 1, i, i + 1, 1)?;
            let bi = reshape(ctx, bi, fx(&[b, bl, 1, 1]))?;
            v_row = bin(ctx, BinaryOp::Mul, bi, diff)?;
        }
        let outer = bin(ctx, BinaryOp::Mul, k_col, v_row)?;
        state = bin(ctx, BinaryOp::Add, state, outer)?;
        let o = matmul(ctx, qi, state)?;
        let o = bin(ctx, BinaryOp::Mul, scale_c, o)?;
        outs.push(reshape(ctx, o, fx(&[b, 1, hq * dv]))?);
    }
    let out = if outs.is_empty() {
        let z = HostTensor::zeros(out_dtype, &[b, 0, hq * dv]);
        ctx.constant(z)
    } else {
        let o = concat(ctx, &outs, 1)?;
        cast(ctx, o, out_dtype)?
    };
    let present = cast(ctx, state, state_dtype)?;
    Ok(vec![Val::Node(out), Val::Node(present)])
}
