//! Attention, RotaryEmbedding and SwiGLU converters on tiny models built here, checked against
//! plain f64 loops written from the ONNX spec: grouped-query attention with a past cache
//! (offset causal mask), softcap and a bool mask, a symbolic batch dim, fully masked rows,
//! partial interleaved rotation, and refused attributes.

mod support;

use kiln_ir::{DType, Dim, HostTensor};
use kiln_onnx::builder::{attr_float, attr_int, fixed};
use kiln_onnx::{ImportOptions, import};
use support::{assert_shaped_close as assert_close, one_node, run, sine, t};

fn seq(n: usize, k: f64) -> Vec<f32> {
    sine(n, k, 1.5)
}

/// Naive attention on [B, H, L, D] arrays with GQA, additive bias `bias(b, h, i, j)` and softcap.
#[allow(clippy::too_many_arguments)]
fn naive_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (b, hq, hk, lq, lk, d, dv): (usize, usize, usize, usize, usize, usize, usize),
    scale: f64,
    softcap: f64,
    bias: impl Fn(usize, usize, usize, usize) -> f64,
) -> Vec<f64> {
    let mut out = vec![0.0; b * hq * lq * dv];
    for bi in 0..b {
        for h in 0..hq {
            let kh = h / (hq / hk);
            for i in 0..lq {
                let mut s = vec![0.0f64; lk];
                let mut allmasked = true;
                for (j, sj) in s.iter_mut().enumerate() {
                    let mut dot = 0.0;
                    for e in 0..d {
                        dot += q[((bi * hq + h) * lq + i) * d + e] as f64
                            * k[((bi * hk + kh) * lk + j) * d + e] as f64;
                    }
                    let mut x = dot * scale;
                    if softcap > 0.0 {
                        x = (x / softcap).tanh() * softcap;
                    }
                    let bb = bias(bi, h, i, j);
                    if bb != f64::NEG_INFINITY {
                        allmasked = false;
                    }
                    *sj = x + bb;
                }
                if allmasked {
                    continue;
                }
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..dv {
                    let mut acc = 0.0;
                    for j in 0..lk {
                        acc += e[j] / z * v[((bi * hk + kh) * lk + j) * dv + c] as f64;
                    }
                    out[((bi * hq + h) * lq + i) * dv + c] = acc;
                }
            }
        }
    }
    out
}

#[test]
fn attention_gqa_with_past_causal_softcap_bool_mask_matches_naive() {
    let (b, hq, hk, lq, lp, d, dv) = (2, 4, 2, 3, 2, 4, 3);
    let lk = lp + lq;
    let q = seq(b * hq * lq * d, 0.37);
    let k = seq(b * hk * lq * d, 0.23);
    let v = seq(b * hk * lq * dv, 0.41);
    let pk = seq(b * hk * lp * d, 0.19);
    let pv = seq(b * hk * lp * dv, 0.29);
    // Mask covers 4 of the 5 keys (the rest padded as masked); key 1 is masked for query 0.
    let mask: Vec<bool> = (0..lq * 4).map(|x| x != 1).collect();
    let m = one_node(
        "Attention",
        &[
            ("q", DType::F32, fixed(&[b, hq, lq, d])),
            ("k", DType::F32, fixed(&[b, hk, lq, d])),
            ("v", DType::F32, fixed(&[b, hk, lq, dv])),
            ("mask", DType::Bool, fixed(&[lq, 4])),
            ("pk", DType::F32, fixed(&[b, hk, lp, d])),
            ("pv", DType::F32, fixed(&[b, hk, lp, dv])),
        ],
        vec![
            attr_int("is_causal", 1),
            attr_float("softcap", 0.8),
            attr_float("scale", 0.7),
        ],
        &["y", "present_k", "present_v"],
        23,
    );
    let out = run(
        &m,
        &[
            ("q", t(q.clone(), &[b, hq, lq, d])),
            ("k", t(k.clone(), &[b, hk, lq, d])),
            ("v", t(v.clone(), &[b, hk, lq, dv])),
            (
                "mask",
                HostTensor::from_vec(mask.clone(), &[lq, 4]).unwrap(),
            ),
            ("pk", t(pk.clone(), &[b, hk, lp, d])),
            ("pv", t(pv.clone(), &[b, hk, lp, dv])),
        ],
    );
    // present = past ++ new along the sequence axis.
    let cat = |p: &[f32], n: &[f32], w: usize| -> Vec<f32> {
        let mut o = Vec::new();
        for bh in 0..b * hk {
            o.extend_from_slice(&p[bh * lp * w..(bh + 1) * lp * w]);
            o.extend_from_slice(&n[bh * lq * w..(bh + 1) * lq * w]);
        }
        o
    };
    let (fk, fv) = (cat(&pk, &k, d), cat(&pv, &v, dv));
    let want = naive_attention(
        &q,
        &fk,
        &fv,
        (b, hq, hk, lq, lk, d, dv),
        0.7,
        0.8,
        |_, _, i, j| {
            // Causal aligned at the past length; mask columns beyond 4 are masked.
            let ok = j <= i + lp && j < 4 && mask[i * 4 + j];
            if ok { 0.0 } else { f64::NEG_INFINITY }
        },
    );
    assert_close(&out[0], &want, &[b, hq, lq, dv]);
    let fk64: Vec<f64> = fk.iter().map(|&x| x as f64).collect();
    assert_close(&out[1], &fk64, &[b, hk, lk, d]);
}

#[test]
fn attention_3d_with_symbolic_batch_matches_naive() {
    let (b, h, l, d) = (3, 2, 3, 2);
    let n = Dim::sym("N");
    let m = one_node(
        "Attention",
        &[
            (
                "q",
                DType::F32,
                vec![n.clone(), Dim::Fixed(l), Dim::Fixed(h * d)],
            ),
            (
                "k",
                DType::F32,
                vec![n.clone(), Dim::Fixed(l), Dim::Fixed(h * d)],
            ),
            (
                "v",
                DType::F32,
                vec![n.clone(), Dim::Fixed(l), Dim::Fixed(h * d)],
            ),
        ],
        vec![
            attr_int("q_num_heads", h as i64),
            attr_int("kv_num_heads", h as i64),
            attr_int("is_causal", 1),
        ],
        &["y"],
        23,
    );
    let imp = import(&m, &ImportOptions::default()).expect("import with a symbolic batch");
    let q = seq(b * l * h * d, 0.31);
    let k = seq(b * l * h * d, 0.17);
    let v = seq(b * l * h * d, 0.53);
    let y = kiln_cpu::run(
        &imp.graph,
        &[
            t(q.clone(), &[b, l, h * d]),
            t(k.clone(), &[b, l, h * d]),
            t(v.clone(), &[b, l, h * d]),
        ],
    )
    .expect("run");
    // [B, L, H*D] → [B, H, L, D] for the naive loop, and back.
    let to4 = |x: &[f32]| -> Vec<f32> {
        let mut o = vec![0.0; x.len()];
        for bi in 0..b {
            for li in 0..l {
                for hi in 0..h {
                    for e in 0..d {
                        o[((bi * h + hi) * l + li) * d + e] = x[(bi * l + li) * h * d + hi * d + e];
                    }
                }
            }
        }
        o
    };
    let w4 = naive_attention(
        &to4(&q),
        &to4(&k),
        &to4(&v),
        (b, h, h, l, l, d, d),
        1.0 / (d as f64).sqrt(),
        0.0,
        |_, _, i, j| {
            if j <= i { 0.0 } else { f64::NEG_INFINITY }
        },
    );
    let mut want = vec![0.0; w4.len()];
    for bi in 0..b {
        for li in 0..l {
            for hi in 0..h {
                for e in 0..d {
                    want[(bi * l + li) * h * d + hi * d + e] = w4[((bi * h + hi) * l + li) * d + e];
                }
            }
        }
    }
    assert_close(&y[0], &want, &[b, l, h * d]);
}

#[test]
fn attention_fully_masked_row_is_zero_not_nan() {
    let (l, d) = (2, 2);
    let m = one_node(
        "Attention",
        &[
            ("q", DType::F32, fixed(&[1, 1, l, d])),
            ("k", DType::F32, fixed(&[1, 1, l, d])),
            ("v", DType::F32, fixed(&[1, 1, l, d])),
            ("mask", DType::Bool, fixed(&[l, l])),
        ],
        vec![],
        &["y"],
        23,
    );
    let v = vec![1.0f32, 2.0, 3.0, 4.0];
    let out = run(
        &m,
        &[
            ("q", t(vec![0.5f32; 4], &[1, 1, l, d])),
            ("k", t(vec![0.25f32; 4], &[1, 1, l, d])),
            ("v", t(v, &[1, 1, l, d])),
            (
                "mask",
                HostTensor::from_vec(vec![false, false, true, true], &[l, l]).unwrap(),
            ),
        ],
    );
    // Row 0 sees nothing: zeros. Row 1 sees both keys with equal scores: the mean of V.
    assert_close(&out[0], &[0.0, 0.0, 2.0, 3.0], &[1, 1, l, d]);
}

#[test]
fn attention_refuses_window_attributes_before_opset_25_and_unknown_attributes() {
    let ins = [
        ("q", DType::F32, fixed(&[1, 1, 2, 2])),
        ("k", DType::F32, fixed(&[1, 1, 2, 2])),
        ("v", DType::F32, fixed(&[1, 1, 2, 2])),
    ];
    for (attr, opset) in [
        (attr_int("left_window_size", 1), 23),
        (attr_int("frobnicate", 1), 25),
    ] {
        let name = attr.name.clone().unwrap();
        let m = one_node("Attention", &ins, vec![attr], &["y"], opset);
        let err = import(&m, &ImportOptions::default())
            .expect_err("must refuse")
            .to_string();
        assert!(err.contains(&name), "{err}");
    }
}

#[test]
fn rotary_interleaved_partial_with_position_ids_matches_naive() {
    let (b, h, s, d, rot, maxp) = (1, 2, 3, 6, 4, 5);
    let half = rot / 2;
    let x = seq(b * h * s * d, 0.29);
    let cos: Vec<f32> = (0..maxp * half).map(|i| (i as f32 * 0.3).cos()).collect();
    let sin: Vec<f32> = (0..maxp * half).map(|i| (i as f32 * 0.3).sin()).collect();
    let pos: Vec<i64> = vec![4, 0, 2];
    let m = one_node(
        "RotaryEmbedding",
        &[
            ("x", DType::F32, fixed(&[b, h, s, d])),
            ("cos", DType::F32, fixed(&[maxp, half])),
            ("sin", DType::F32, fixed(&[maxp, half])),
            ("pos", DType::I64, fixed(&[b, s])),
        ],
        vec![
            attr_int("interleaved", 1),
            attr_int("rotary_embedding_dim", rot as i64),
        ],
        &["y"],
        23,
    );
    let out = run(
        &m,
        &[
            ("x", t(x.clone(), &[b, h, s, d])),
            ("cos", t(cos.clone(), &[maxp, half])),
            ("sin", t(sin.clone(), &[maxp, half])),
            ("pos", HostTensor::from_vec(pos.clone(), &[b, s]).unwrap()),
        ],
    );
    let mut want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for hi in 0..h {
        for si in 0..s {
            let base = (hi * s + si) * d;
            for p in 0..half {
                let (c, sn) = (
                    cos[pos[si] as usize * half + p] as f64,
                    sin[pos[si] as usize * half + p] as f64,
                );
                let (x1, x2) = (x[base + 2 * p] as f64, x[base + 2 * p + 1] as f64);
                want[base + 2 * p] = c * x1 - sn * x2;
                want[base + 2 * p + 1] = sn * x1 + c * x2;
            }
        }
    }
    assert_close(&out[0], &want, &[b, h, s, d]);
}

#[test]
fn swiglu_matches_naive_and_refuses_broadcasting() {
    let a = vec![1.0f32, -2.0, 0.5, 3.0];
    let bv = vec![0.5f32, 1.0, -1.0, 2.0];
    let m = one_node(
        "SwiGLU",
        &[
            ("a", DType::F32, fixed(&[2, 2])),
            ("b", DType::F32, fixed(&[2, 2])),
        ],
        vec![attr_float("alpha", 0.5)],
        &["y"],
        28,
    );
    let out = run(
        &m,
        &[("a", t(a.clone(), &[2, 2])), ("b", t(bv.clone(), &[2, 2]))],
    );
    let want: Vec<f64> = a
        .iter()
        .zip(&bv)
        .map(|(&x, &y)| x as f64 / (1.0 + (-0.5 * x as f64).exp()) * y as f64)
        .collect();
    assert_close(&out[0], &want, &[2, 2]);
    let m = one_node(
        "SwiGLU",
        &[
            ("a", DType::F32, fixed(&[2, 2])),
            ("b", DType::F32, fixed(&[1, 2])),
        ],
        vec![],
        &["y"],
        28,
    );
    assert!(import(&m, &ImportOptions::default()).is_err());
}
