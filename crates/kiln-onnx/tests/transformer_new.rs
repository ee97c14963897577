//! LinearAttention, CausalConvWithState (opset 27) and ai.onnx.preview FlexAttention on tiny
//! models built here, checked against plain f64 loops written from the ONNX spec: grouped
//! KV heads with a past state and per-key decay, a conv with bias, past state and SiLU, two
//! FlexAttention nodes sharing subgraph value names, and refused inputs.

mod support;

use kiln_ir::{DType, Dim, HostTensor};
use kiln_onnx::builder::{
    attr_float, attr_graph, attr_int, attr_string, fixed, graph, model, model_with_opsets, node,
    node_in, tensor_info,
};
use kiln_onnx::{ImportOptions, OnnxModel, import};
use support::{assert_shaped_close as assert_close, data, run, t as tensor};

/// One node over graph inputs `ins` (name, dtype, dims), outputs `outs` ("" skips an input).
fn one_node(
    op: &str,
    ins: &[(&str, DType, Vec<Dim>)],
    wires: &[&str],
    attrs: Vec<kiln_onnx::proto::AttributeProto>,
    outs: &[&str],
) -> OnnxModel {
    let n = node(op, wires, outs, attrs);
    let inputs = ins.iter().map(|(n, d, s)| tensor_info(n, *d, s)).collect();
    let outputs = outs
        .iter()
        .map(|o| tensor_info(o, DType::F32, &[]))
        .collect();
    model(graph(vec![n], inputs, outputs, &[]), 27)
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Naive gated-delta linear attention from the spec, on packed [B, T, H*D] inputs; decay per
/// key dim ([B, T, Hkv*dk]), beta per KV head ([B, T, Hkv]). Returns (output, state).
#[allow(clippy::too_many_arguments)]
fn naive_gated_delta(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    past: &[f32],
    (b, t, hq, hkv, dk, dv): (usize, usize, usize, usize, usize, usize),
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let mut s = f64s(past);
    let mut out = vec![0.0; b * t * hq * dv];
    let si = |bi: usize, h: usize, i: usize, j: usize| ((bi * hkv + h) * dk + i) * dv + j;
    for bi in 0..b {
        for ti in 0..t {
            for h in 0..hkv {
                let kk = |i: usize| k[(bi * t + ti) * hkv * dk + h * dk + i] as f64;
                for i in 0..dk {
                    let e = (g[(bi * t + ti) * hkv * dk + h * dk + i] as f64).exp();
                    for j in 0..dv {
                        s[si(bi, h, i, j)] *= e;
                    }
                }
                let bt = beta[(bi * t + ti) * hkv + h] as f64;
                for j in 0..dv {
                    let retrieved: f64 = (0..dk).map(|i| s[si(bi, h, i, j)] * kk(i)).sum();
                    let vj = v[(bi * t + ti) * hkv * dv + h * dv + j] as f64;
                    let w = bt * (vj - retrieved);
                    for i in 0..dk {
                        s[si(bi, h, i, j)] += kk(i) * w;
                    }
                }
            }
            for h in 0..hq {
                let kvh = h / (hq / hkv);
                for j in 0..dv {
                    let o: f64 = (0..dk)
                        .map(|i| {
                            q[(bi * t + ti) * hq * dk + h * dk + i] as f64 * s[si(bi, kvh, i, j)]
                        })
                        .sum();
                    out[(bi * t + ti) * hq * dv + h * dv + j] = scale * o;
                }
            }
        }
    }
    (out, s)
}

#[test]
fn linear_attention_gqa_gated_delta_with_past_matches_naive() {
    let (b, t, hq, hkv, dk, dv) = (2, 3, 4, 2, 3, 2);
    let q = data(b * t * hq * dk, 1);
    let k: Vec<f32> = data(b * t * hkv * dk, 2).iter().map(|x| x * 0.4).collect();
    let v = data(b * t * hkv * dv, 3);
    let g: Vec<f32> = data(b * t * hkv * dk, 4)
        .iter()
        .map(|x| x * 0.2 - 0.3)
        .collect();
    let beta: Vec<f32> = data(b * t * hkv, 5)
        .iter()
        .map(|x| x.abs() * 0.25)
        .collect();
    let past = data(b * hkv * dk * dv, 6);
    let ins = [
        ("q", DType::F32, fixed(&[b, t, hq * dk])),
        ("k", DType::F32, fixed(&[b, t, hkv * dk])),
        ("v", DType::F32, fixed(&[b, t, hkv * dv])),
        ("past", DType::F32, fixed(&[b, hkv, dk, dv])),
        ("g", DType::F32, fixed(&[b, t, hkv * dk])),
        ("beta", DType::F32, fixed(&[b, t, hkv])),
    ];
    let m = one_node(
        "LinearAttention",
        &ins,
        &["q", "k", "v", "past", "g", "beta"],
        vec![
            attr_int("q_num_heads", hq as i64),
            attr_int("kv_num_heads", hkv as i64),
            attr_float("scale", 0.7),
        ],
        &["y", "state"],
    );
    let out = run(
        &m,
        &[
            ("q", tensor(q.clone(), &[b, t, hq * dk])),
            ("k", tensor(k.clone(), &[b, t, hkv * dk])),
            ("v", tensor(v.clone(), &[b, t, hkv * dv])),
            ("past", tensor(past.clone(), &[b, hkv, dk, dv])),
            ("g", tensor(g.clone(), &[b, t, hkv * dk])),
            ("beta", tensor(beta.clone(), &[b, t, hkv])),
        ],
    );
    let (want_y, want_s) =
        naive_gated_delta(&q, &k, &v, &g, &beta, &past, (b, t, hq, hkv, dk, dv), 0.7);
    assert_close(&out[0], &want_y, &[b, t, hq * dv]);
    assert_close(&out[1], &want_s, &[b, hkv, dk, dv]);
}

#[test]
fn linear_attention_refuses_symbolic_length_missing_decay_and_unknown_attributes() {
    let heads = || vec![attr_int("q_num_heads", 1), attr_int("kv_num_heads", 1)];
    let sym = vec![Dim::Fixed(1), Dim::Sym("T".into()), Dim::Fixed(2)];
    let ins = [
        ("q", DType::F32, sym.clone()),
        ("k", DType::F32, sym.clone()),
        ("v", DType::F32, sym),
    ];
    let mut lin = heads();
    lin.push(attr_string("update_rule", "linear"));
    let m = one_node("LinearAttention", &ins, &["q", "k", "v"], lin, &["y"]);
    let err = import(&m, &ImportOptions::default())
        .expect_err("symbolic T")
        .to_string();
    assert!(err.contains("sequence length"), "{err}");

    let ins = [
        ("q", DType::F32, fixed(&[1, 2, 2])),
        ("k", DType::F32, fixed(&[1, 2, 2])),
        ("v", DType::F32, fixed(&[1, 2, 2])),
    ];
    // The default rule (gated_delta) needs decay and beta.
    let m = one_node("LinearAttention", &ins, &["q", "k", "v"], heads(), &["y"]);
    let err = import(&m, &ImportOptions::default())
        .expect_err("no decay")
        .to_string();
    assert!(err.contains("decay"), "{err}");

    let mut odd = heads();
    odd.push(attr_int("frobnicate", 1));
    let m = one_node("LinearAttention", &ins, &["q", "k", "v"], odd, &["y"]);
    let err = import(&m, &ImportOptions::default())
        .expect_err("unknown attr")
        .to_string();
    assert!(err.contains("frobnicate"), "{err}");
}

#[test]
fn causal_conv_with_bias_past_state_and_silu_matches_naive() {
    let (b, c, l, k) = (2, 3, 4, 3);
    let x = data(b * c * l, 11);
    let w = data(c * k, 12);
    let bias = data(c, 13);
    let past = data(b * c * (k - 1), 14);
    let ins = [
        ("x", DType::F32, fixed(&[b, c, l])),
        ("w", DType::F32, fixed(&[c, 1, k])),
        ("bias", DType::F32, fixed(&[c])),
        ("past", DType::F32, fixed(&[b, c, k - 1])),
    ];
    let m = one_node(
        "CausalConvWithState",
        &ins,
        &["x", "w", "bias", "past"],
        vec![attr_string("activation", "silu")],
        &["y", "state"],
    );
    let out = run(
        &m,
        &[
            ("x", tensor(x.clone(), &[b, c, l])),
            ("w", tensor(w.clone(), &[c, 1, k])),
            ("bias", tensor(bias.clone(), &[c])),
            ("past", tensor(past.clone(), &[b, c, k - 1])),
        ],
    );
    let n = l + k - 1;
    let padded = |bi: usize, ci: usize, p: usize| -> f64 {
        if p < k - 1 {
            past[(bi * c + ci) * (k - 1) + p] as f64
        } else {
            x[(bi * c + ci) * l + p - (k - 1)] as f64
        }
    };
    let mut want_y = Vec::new();
    let mut want_s = Vec::new();
    for bi in 0..b {
        for ci in 0..c {
            for li in 0..l {
                let z: f64 = bias[ci] as f64
                    + (0..k)
                        .map(|j| padded(bi, ci, li + j) * w[ci * k + j] as f64)
                        .sum::<f64>();
                want_y.push(z / (1.0 + (-z).exp()));
            }
            want_s.extend((l..n).map(|p| padded(bi, ci, p)));
        }
    }
    assert_close(&out[0], &want_y, &[b, c, l]);
    assert_close(&out[1], &want_s, &[b, c, k - 1]);
}

#[test]
fn causal_conv_refuses_bad_activation_and_mismatched_state() {
    let ins = [
        ("x", DType::F32, fixed(&[1, 2, 4])),
        ("w", DType::F32, fixed(&[2, 1, 3])),
        ("past", DType::F32, fixed(&[1, 2, 3])),
    ];
    let m = one_node(
        "CausalConvWithState",
        &ins[..2],
        &["x", "w"],
        vec![attr_string("activation", "gelu")],
        &["y"],
    );
    let err = import(&m, &ImportOptions::default())
        .expect_err("gelu")
        .to_string();
    assert!(err.contains("gelu"), "{err}");
    let m = one_node(
        "CausalConvWithState",
        &ins,
        &["x", "w", "", "past"],
        vec![],
        &["y"],
    );
    let err = import(&m, &ImportOptions::default())
        .expect_err("state length")
        .to_string();
    assert!(err.contains("past_state"), "{err}");
}

/// Naive GQA attention on [B, H, L, E] with `mod_score(i, j, s)` applied to scaled scores.
#[allow(clippy::too_many_arguments)]
fn naive_flex(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (b, hq, hkv, l, s, e, ev): (usize, usize, usize, usize, usize, usize, usize),
    scale: f64,
    mod_score: impl Fn(usize, usize, f64) -> f64,
) -> Vec<f64> {
    let mut out = Vec::new();
    for bi in 0..b {
        for h in 0..hq {
            let kh = h / (hq / hkv);
            for i in 0..l {
                let sc: Vec<f64> = (0..s)
                    .map(|j| {
                        let dot: f64 = (0..e)
                            .map(|d| {
                                q[((bi * hq + h) * l + i) * e + d] as f64
                                    * k[((bi * hkv + kh) * s + j) * e + d] as f64
                            })
                            .sum();
                        mod_score(i, j, dot * scale)
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let ex: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = ex.iter().sum();
                for c in 0..ev {
                    out.push(
                        (0..s)
                            .map(|j| ex[j] / z * v[((bi * hkv + kh) * s + j) * ev + c] as f64)
                            .sum(),
                    );
                }
            }
        }
    }
    out
}

#[test]
fn flex_attention_gqa_with_shared_score_mod_names_matches_naive() {
    let (b, hq, hkv, l, s, e, ev) = (1, 4, 2, 3, 3, 2, 3);
    let q = data(b * hq * l * e, 21);
    let k = data(b * hkv * s * e, 22);
    let v = data(b * hkv * s * ev, 23);
    // score_mod: scores + 0.5 * bias, where `bias` is an outer-scope graph input; both nodes
    // use the same subgraph (same inner value names), so inlining must keep them apart.
    let body = || {
        let half = HostTensor::from_vec(vec![0.5f32], &[]).unwrap();
        graph(
            vec![
                node("Mul", &["bias", "half"], &["hb"], vec![]),
                node("Add", &["scores", "hb"], &["out"], vec![]),
            ],
            vec![tensor_info("scores", DType::F32, &[])],
            vec![tensor_info("out", DType::F32, &[])],
            &[("half", half)],
        )
    };
    let n1 = node_in(
        "ai.onnx.preview",
        "FlexAttention",
        &["q", "k", "v"],
        &["y1"],
        vec![attr_graph("score_mod", body()), attr_float("scale", 0.6)],
    );
    let n2 = node_in(
        "ai.onnx.preview",
        "FlexAttention",
        &["q", "k", "v"],
        &["y2"],
        vec![attr_graph("score_mod", body())],
    );
    let inputs = vec![
        tensor_info("q", DType::F32, &fixed(&[b, hq, l, e])),
        tensor_info("k", DType::F32, &fixed(&[b, hkv, s, e])),
        tensor_info("v", DType::F32, &fixed(&[b, hkv, s, ev])),
        tensor_info("bias", DType::F32, &fixed(&[l, s])),
    ];
    let outputs = vec![
        tensor_info("y1", DType::F32, &[]),
        tensor_info("y2", DType::F32, &[]),
    ];
    let m = model_with_opsets(
        graph(vec![n1, n2], inputs, outputs, &[]),
        &[("", 26), ("ai.onnx.preview", 1)],
    );
    let bias = data(l * s, 24);
    let out = run(
        &m,
        &[
            ("q", tensor(q.clone(), &[b, hq, l, e])),
            ("k", tensor(k.clone(), &[b, hkv, s, e])),
            ("v", tensor(v.clone(), &[b, hkv, s, ev])),
            ("bias", tensor(bias.clone(), &[l, s])),
        ],
    );
    let shape = (b, hq, hkv, l, s, e, ev);
    let add = |i: usize, j: usize, x: f64| x + 0.5 * bias[i * s + j] as f64;
    let want1 = naive_flex(&q, &k, &v, shape, 0.6, add);
    let want2 = naive_flex(&q, &k, &v, shape, 1.0 / (e as f64).sqrt(), add);
    assert_close(&out[0], &want1, &[b, hq, l, ev]);
    assert_close(&out[1], &want2, &[b, hq, l, ev]);
}
