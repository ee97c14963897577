//! RNN, GRU and LSTM converters on tiny models built here, checked against plain f64 loops of
//! the ONNX equations: bidirectional batch-first LSTM with peepholes, clip and initial states,
//! reverse GRU with `linear_before_reset`, RNN with a Relu activation, and refused inputs.

mod support;

use kiln_ir::{DType, Dim, HostTensor};
use kiln_onnx::builder::{attr_float, attr_floats, attr_int, attr_string, attr_strings, fixed};
use kiln_onnx::proto::AttributeProto;
use kiln_onnx::{ImportOptions, OnnxModel, import, import_for_inputs};
use std::collections::HashMap;
use support::{assert_shaped_close as assert_close, one_node, run, sine};

fn seq(n: usize, k: f64) -> Vec<f32> {
    sine(n, k, 0.9)
}

/// `support::one_node` with fixed dims; `lens` (sequence_lens) is i32, everything else f32.
fn rnn_model(
    op: &str,
    ins: &[(&str, Vec<usize>)],
    attrs: Vec<AttributeProto>,
    outs: &[&str],
    opset: i64,
) -> OnnxModel {
    let ins: Vec<(&str, DType, Vec<Dim>)> = ins
        .iter()
        .map(|(n, s)| {
            (
                *n,
                if *n == "lens" { DType::I32 } else { DType::F32 },
                fixed(s),
            )
        })
        .collect();
    one_node(op, &ins, attrs, outs, opset)
}

fn t(v: &[f32], s: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), s).unwrap()
}

fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `sum_k m[row, k] * v[k]` for a row-major `[rows, n]` slice.
fn dot(m: &[f32], row: usize, v: &[f64]) -> f64 {
    let n = v.len();
    (0..n).map(|k| m[row * n + k] as f64 * v[k]).sum()
}

#[test]
fn lstm_bidirectional_batch_first_peepholes_clip_matches_naive() {
    let (s, b, i, h) = (3, 2, 2, 3);
    let clip = 0.6;
    let w = seq(2 * 4 * h * i, 0.31);
    let r = seq(2 * 4 * h * h, 0.17);
    let bias = seq(2 * 8 * h, 0.23);
    let p = seq(2 * 3 * h, 0.41);
    let x = seq(b * s * i, 0.57); // layout 1: [B, S, I]
    let h0 = seq(b * 2 * h, 0.13); // [B, D, H]
    let c0 = seq(b * 2 * h, 0.07);
    let m = rnn_model(
        "LSTM",
        &[
            ("x", vec![b, s, i]),
            ("w", vec![2, 4 * h, i]),
            ("r", vec![2, 4 * h, h]),
            ("bias", vec![2, 8 * h]),
            ("", vec![]),
            ("h0", vec![b, 2, h]),
            ("c0", vec![b, 2, h]),
            ("p", vec![2, 3 * h]),
        ],
        vec![
            attr_int("hidden_size", h as i64),
            attr_string("direction", "bidirectional"),
            attr_int("layout", 1),
            attr_float("clip", clip as f32),
        ],
        &["y", "yh", "yc"],
        22,
    );
    let out = run(
        &m,
        &[
            ("x", t(&x, &[b, s, i])),
            ("w", t(&w, &[2, 4 * h, i])),
            ("r", t(&r, &[2, 4 * h, h])),
            ("bias", t(&bias, &[2, 8 * h])),
            ("h0", t(&h0, &[b, 2, h])),
            ("c0", t(&c0, &[b, 2, h])),
            ("p", t(&p, &[2, 3 * h])),
        ],
    );
    let cl = |v: f64| v.clamp(-clip, clip);
    let mut y = vec![0.0; b * s * 2 * h]; // [B, S, D, H]
    let mut yh = vec![0.0; b * 2 * h];
    let mut yc = vec![0.0; b * 2 * h];
    for d in 0..2 {
        let wd = &w[d * 4 * h * i..(d + 1) * 4 * h * i];
        let rd = &r[d * 4 * h * h..(d + 1) * 4 * h * h];
        let bd = &bias[d * 8 * h..(d + 1) * 8 * h];
        let pd = &p[d * 3 * h..(d + 1) * 3 * h];
        for bi in 0..b {
            let mut hs: Vec<f64> = (0..h).map(|k| h0[(bi * 2 + d) * h + k] as f64).collect();
            let mut cs: Vec<f64> = (0..h).map(|k| c0[(bi * 2 + d) * h + k] as f64).collect();
            for step in 0..s {
                let ti = if d == 0 { step } else { s - 1 - step };
                let xt: Vec<f64> = (0..i).map(|k| x[(bi * s + ti) * i + k] as f64).collect();
                let pre = |g: usize, k: usize| {
                    let row = g * h + k;
                    dot(wd, row, &xt) + dot(rd, row, &hs) + bd[row] as f64 + bd[4 * h + row] as f64
                };
                let mut hn = vec![0.0; h];
                let mut cn = vec![0.0; h];
                for k in 0..h {
                    let ig = sig(cl(pre(0, k) + pd[k] as f64 * cs[k]));
                    let fg = sig(cl(pre(2, k) + pd[2 * h + k] as f64 * cs[k]));
                    let cg = cl(pre(3, k)).tanh();
                    cn[k] = fg * cs[k] + ig * cg;
                    let og = sig(cl(pre(1, k) + pd[h + k] as f64 * cn[k]));
                    hn[k] = og * cn[k].tanh();
                }
                hs = hn;
                cs = cn;
                for k in 0..h {
                    y[((bi * s + ti) * 2 + d) * h + k] = hs[k];
                }
            }
            for k in 0..h {
                yh[(bi * 2 + d) * h + k] = hs[k];
                yc[(bi * 2 + d) * h + k] = cs[k];
            }
        }
    }
    assert_close(&out[0], &y, &[b, s, 2, h]);
    assert_close(&out[1], &yh, &[b, 2, h]);
    assert_close(&out[2], &yc, &[b, 2, h]);
}

#[test]
fn gru_reverse_linear_before_reset_matches_naive() {
    let (s, b, i, h) = (4, 2, 3, 2);
    let w = seq(3 * h * i, 0.29);
    let r = seq(3 * h * h, 0.47);
    let bias = seq(6 * h, 0.61);
    let x = seq(s * b * i, 0.37);
    let m = rnn_model(
        "GRU",
        &[
            ("x", vec![s, b, i]),
            ("w", vec![1, 3 * h, i]),
            ("r", vec![1, 3 * h, h]),
            ("bias", vec![1, 6 * h]),
        ],
        vec![
            attr_int("hidden_size", h as i64),
            attr_string("direction", "reverse"),
            attr_int("linear_before_reset", 1),
        ],
        &["y", "yh"],
        14,
    );
    let out = run(
        &m,
        &[
            ("x", t(&x, &[s, b, i])),
            ("w", t(&w, &[1, 3 * h, i])),
            ("r", t(&r, &[1, 3 * h, h])),
            ("bias", t(&bias, &[1, 6 * h])),
        ],
    );
    let mut y = vec![0.0; s * b * h];
    let mut yh = vec![0.0; b * h];
    for bi in 0..b {
        let mut hs = vec![0.0f64; h];
        for step in 0..s {
            let ti = s - 1 - step;
            let xt: Vec<f64> = (0..i).map(|k| x[(ti * b + bi) * i + k] as f64).collect();
            let xw = |g: usize, k: usize| dot(&w, g * h + k, &xt) + bias[g * h + k] as f64;
            let hr = |g: usize, k: usize| dot(&r, g * h + k, &hs) + bias[3 * h + g * h + k] as f64;
            let mut hn = vec![0.0; h];
            for k in 0..h {
                let z = sig(xw(0, k) + hr(0, k));
                let rg = sig(xw(1, k) + hr(1, k));
                let hc = (xw(2, k) + rg * hr(2, k)).tanh();
                hn[k] = (1.0 - z) * hc + z * hs[k];
            }
            hs = hn;
            for k in 0..h {
                y[(ti * b + bi) * h + k] = hs[k];
            }
        }
        yh[bi * h..(bi + 1) * h].copy_from_slice(&hs);
    }
    assert_close(&out[0], &y, &[s, 1, b, h]);
    assert_close(&out[1], &yh, &[1, b, h]);
}

#[test]
fn rnn_relu_activation_matches_naive() {
    let (s, b, i, h) = (3, 1, 2, 3);
    let w = seq(h * i, 0.71);
    let r = seq(h * h, 0.33);
    let x = seq(s * b * i, 0.91);
    let m = rnn_model(
        "RNN",
        &[
            ("x", vec![s, b, i]),
            ("w", vec![1, h, i]),
            ("r", vec![1, h, h]),
        ],
        vec![
            attr_int("hidden_size", h as i64),
            attr_strings("activations", &["Relu"]),
        ],
        &["y"],
        7,
    );
    let out = run(
        &m,
        &[
            ("x", t(&x, &[s, b, i])),
            ("w", t(&w, &[1, h, i])),
            ("r", t(&r, &[1, h, h])),
        ],
    );
    let mut hs = vec![0.0f64; h];
    let mut y = Vec::new();
    for ti in 0..s {
        let xt: Vec<f64> = (0..i).map(|k| x[ti * i + k] as f64).collect();
        hs = (0..h)
            .map(|k| (dot(&w, k, &xt) + dot(&r, k, &hs)).max(0.0))
            .collect();
        y.extend_from_slice(&hs);
    }
    assert_close(&out[0], &y, &[s, 1, b, h]);
}

#[test]
fn refuses_uneven_sequence_lens_and_activation_parameters() {
    let (s, b, i, h) = (2, 2, 1, 1);
    let ins = [
        ("x", vec![s, b, i]),
        ("w", vec![1, h, i]),
        ("r", vec![1, h, h]),
        ("", vec![]),
        ("lens", vec![b]),
    ];
    let m = rnn_model("RNN", &ins, vec![attr_int("hidden_size", 1)], &["y"], 22);
    let map: HashMap<String, HostTensor> = [
        ("x", t(&[0.0; 4], &[s, b, i])),
        ("w", t(&[1.0], &[1, h, i])),
        ("r", t(&[1.0], &[1, h, h])),
        ("lens", HostTensor::from_vec(vec![2i32, 1], &[b]).unwrap()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    let err = import_for_inputs(&m, &map)
        .expect_err("uneven lengths")
        .to_string();
    assert!(err.contains("sequence_lens"), "{err}");
    let m = rnn_model(
        "RNN",
        &ins[..3],
        vec![
            attr_int("hidden_size", 1),
            attr_floats("activation_alpha", &[0.5]),
        ],
        &["y"],
        22,
    );
    assert!(import(&m, &ImportOptions::default()).is_err());
}
