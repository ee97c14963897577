//! Importer tests for the reduction family (reductions, softmax family, normalisations, top-k,
//! losses) on tiny hand-built models, for what the ONNX conformance cases do not cover: old
//! opsets' 2-D coercion, symbolic batch dims, per-group GroupNormalization scales, TopK's
//! attribute `k`, out-of-range ignore_index, refused attributes. Each result is checked against a
//! naive f64 loop.

mod support;

use kiln_ir::{DType, Dim, HostTensor};
use kiln_onnx::builder::{
    self, attr_float, attr_int, attr_ints, attr_string, graph, node, tensor_info,
    tensor_info_fixed, untyped_info,
};
use kiln_onnx::proto::{AttributeProto, ValueInfoProto};
use kiln_onnx::{ImportOptions, OnnxModel, import};
use support::{assert_tensor_close as assert_close, data, run};

/// A one-node model: `inputs` are graph inputs, `consts` initializers, `outputs` output names
/// ("" skips an optional output).
fn model(
    op: &str,
    opset: i64,
    attrs: Vec<AttributeProto>,
    inputs: &[ValueInfoProto],
    consts: &[(&str, HostTensor)],
    node_inputs: &[&str],
    outputs: &[&str],
) -> OnnxModel {
    let n = node(op, node_inputs, outputs, attrs);
    let declared = outputs
        .iter()
        .filter(|o| !o.is_empty())
        .map(|o| untyped_info(o))
        .collect();
    builder::model(graph(vec![n], inputs.to_vec(), declared, consts), opset)
}

#[test]
fn softmax_family_before_opset_13_coerce_to_2d() {
    let x = data(24, 1);
    let xt = HostTensor::from_vec(x.clone(), &[2, 3, 4]).unwrap();
    for op in ["Softmax", "LogSoftmax", "Hardmax"] {
        let m = model(
            op,
            11,
            vec![attr_int("axis", 1)],
            &[tensor_info_fixed("x", DType::F32, &[2, 3, 4])],
            &[],
            &["x"],
            &["y"],
        );
        let got = run(&m, &[("x", xt.clone())]);
        assert_eq!(got[0].shape(), &[2, 3, 4]);
        // Each batch row of 12 elements is one softmax row.
        let mut want = Vec::new();
        for row in x.chunks(12) {
            let r: Vec<f64> = row.iter().map(|&v| v as f64).collect();
            let mx = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = r.iter().map(|v| (v - mx).exp()).sum();
            let first_max = r.iter().position(|&v| v == mx).unwrap();
            for (j, v) in r.iter().enumerate() {
                want.push(match op {
                    "Softmax" => (v - mx).exp() / s,
                    "LogSoftmax" => v - mx - s.ln(),
                    _ => (j == first_max) as i32 as f64,
                });
            }
        }
        assert_close(&got[0], &want, 1e-5);
    }
}

#[test]
fn reductions_with_axes_attribute_negative_and_duplicate_axes() {
    // Opset 11: axes is an attribute; -1 and 2 name the same axis.
    let x = data(24, 2);
    let lse_x: Vec<f32> = x.iter().map(|v| v * 500.0).collect(); // exp would overflow f32 unshifted
    for (op, input) in [
        ("ReduceSum", &x),
        ("ReduceL2", &x),
        ("ReduceLogSumExp", &lse_x),
    ] {
        let attrs = vec![attr_ints("axes", &[-1, 2]), attr_int("keepdims", 0)];
        let m = model(
            op,
            11,
            attrs,
            &[tensor_info_fixed("x", DType::F32, &[2, 3, 4])],
            &[],
            &["x"],
            &["y"],
        );
        let t = HostTensor::from_vec(input.clone(), &[2, 3, 4]).unwrap();
        let got = run(&m, &[("x", t)]);
        assert_eq!(got[0].shape(), &[2, 3]);
        let want: Vec<f64> = input
            .chunks(4)
            .map(|r| {
                let r: Vec<f64> = r.iter().map(|&v| v as f64).collect();
                match op {
                    "ReduceSum" => r.iter().sum(),
                    "ReduceL2" => r.iter().map(|v| v * v).sum::<f64>().sqrt(),
                    _ => {
                        let mx = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        mx + r.iter().map(|v| (v - mx).exp()).sum::<f64>().ln()
                    }
                }
            })
            .collect();
        assert_close(&got[0], &want, 1e-5);
    }
}

#[test]
fn bool_reduce_min_max_are_all_and_any() {
    let x = HostTensor::from_vec(vec![true, true, true, false, false, false], &[3, 2]).unwrap();
    let axes = HostTensor::from_vec(vec![1i64], &[1]).unwrap();
    for (op, want) in [
        ("ReduceMin", [true, false, false]),
        ("ReduceMax", [true, true, false]),
    ] {
        let m = model(
            op,
            20,
            vec![attr_int("keepdims", 0)],
            &[tensor_info_fixed("x", DType::Bool, &[3, 2])],
            &[("axes", axes.clone())],
            &["x", "axes"],
            &["y"],
        );
        let got = run(&m, &[("x", x.clone())]);
        assert_eq!(got[0].dtype(), DType::Bool);
        assert_eq!(got[0].to_vec::<bool>().unwrap(), want.to_vec(), "{op}");
    }
}

#[test]
fn layer_norm_with_symbolic_batch_and_statistics_outputs() {
    let w = HostTensor::from_vec(vec![0.5f32, -1.0, 2.0, 1.5], &[4]).unwrap();
    let b = HostTensor::from_vec(vec![0.1f32, 0.2, -0.3, 0.0], &[4]).unwrap();
    let m = model(
        "LayerNormalization",
        17,
        vec![attr_float("epsilon", 1e-3)],
        &[tensor_info(
            "x",
            DType::F32,
            &[Dim::sym("N"), Dim::Fixed(4)],
        )],
        &[("w", w.clone()), ("b", b.clone())],
        &["x", "w", "b"],
        &["y", "mean", "inv"],
    );
    // Imported without concrete shapes: the batch stays symbolic.
    let imp = import(&m, &ImportOptions::default()).expect("import with a symbolic batch");
    let x = data(12, 3);
    let got = kiln_cpu::run(
        &imp.graph,
        &[HostTensor::from_vec(x.clone(), &[3, 4]).unwrap()],
    )
    .unwrap();
    let (mut y, mut mean, mut inv) = (Vec::new(), Vec::new(), Vec::new());
    let (wv, bv) = (w.to_f64_vec(), b.to_f64_vec());
    for row in x.chunks(4) {
        let r: Vec<f64> = row.iter().map(|&v| v as f64).collect();
        let mu = r.iter().sum::<f64>() / 4.0;
        let var = r.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / 4.0;
        let is = 1.0 / (var + 1e-3f32 as f64).sqrt();
        for j in 0..4 {
            y.push((r[j] - mu) * is * wv[j] + bv[j]);
        }
        mean.push(mu);
        inv.push(is);
    }
    assert_close(&got[0], &y, 1e-5);
    assert_eq!(got[1].shape(), &[3, 1]);
    assert_close(&got[1], &mean, 1e-5);
    assert_close(&got[2], &inv, 1e-5);
}

#[test]
fn group_norm_opset_18_scales_per_group() {
    // x [1, 4, 3], 2 groups of 2 channels; scale/bias have one value per group.
    let x = data(12, 4);
    let scale = HostTensor::from_vec(vec![2.0f32, -0.5], &[2]).unwrap();
    let bias = HostTensor::from_vec(vec![1.0f32, 0.25], &[2]).unwrap();
    let m = model(
        "GroupNormalization",
        18,
        vec![attr_int("num_groups", 2), attr_float("epsilon", 1e-5)],
        &[tensor_info_fixed("x", DType::F32, &[1, 4, 3])],
        &[("s", scale), ("b", bias)],
        &["x", "s", "b"],
        &["y"],
    );
    let got = run(
        &m,
        &[("x", HostTensor::from_vec(x.clone(), &[1, 4, 3]).unwrap())],
    );
    let mut want = Vec::new();
    for (g, grp) in x.chunks(6).enumerate() {
        let r: Vec<f64> = grp.iter().map(|&v| v as f64).collect();
        let mu = r.iter().sum::<f64>() / 6.0;
        let var = r.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / 6.0;
        let (s, b) = ([2.0, -0.5][g], [1.0, 0.25][g]);
        want.extend(
            r.iter()
                .map(|v| (v - mu) / (var + 1e-5f32 as f64).sqrt() * s + b),
        );
    }
    assert_close(&got[0], &want, 1e-5);
}

#[test]
fn topk_opset_1_takes_k_as_attribute() {
    let x = HostTensor::from_vec(vec![3.0f32, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0], &[2, 4]).unwrap();
    let m = model(
        "TopK",
        1,
        vec![attr_int("k", 2)],
        &[tensor_info_fixed("x", DType::F32, &[2, 4])],
        &[],
        &["x"],
        &["v", "i"],
    );
    let got = run(&m, &[("x", x)]);
    assert_eq!(got[0].to_f64_vec(), vec![4.0, 3.0, 9.0, 6.0]);
    assert_eq!(got[1].to_vec::<i64>().unwrap(), vec![2, 0, 1, 3]);
}

#[test]
fn nll_loss_i32_target_out_of_range_ignore_index_and_weights() {
    // input [2, 3, 2], target [2, 2] with one ignored entry (index 7, outside the classes).
    let input = data(12, 5);
    let target = HostTensor::from_vec(vec![0i32, 2, 7, 1], &[2, 2]).unwrap();
    let weight = vec![0.5f32, 2.0, 1.5];
    for red in ["mean", "sum", "none"] {
        let m = model(
            "NegativeLogLikelihoodLoss",
            13,
            vec![attr_string("reduction", red), attr_int("ignore_index", 7)],
            &[
                tensor_info_fixed("x", DType::F32, &[2, 3, 2]),
                tensor_info_fixed("t", DType::I32, &[2, 2]),
            ],
            &[("w", HostTensor::from_vec(weight.clone(), &[3]).unwrap())],
            &["x", "t", "w"],
            &["loss"],
        );
        let got = run(
            &m,
            &[
                (
                    "x",
                    HostTensor::from_vec(input.clone(), &[2, 3, 2]).unwrap(),
                ),
                ("t", target.clone()),
            ],
        );
        let t = [0usize, 2, 7, 1];
        let (mut losses, mut wsum) = (Vec::new(), 0.0);
        for n in 0..2 {
            for d in 0..2 {
                let c = t[n * 2 + d];
                if c == 7 {
                    losses.push(0.0);
                    continue;
                }
                let w = weight[c] as f64;
                losses.push(-(input[n * 6 + c * 2 + d] as f64) * w);
                wsum += w;
            }
        }
        let want = match red {
            "none" => losses.clone(),
            "sum" => vec![losses.iter().sum()],
            _ => vec![losses.iter().sum::<f64>() / wsum],
        };
        assert_close(&got[0], &want, 1e-5);
    }
}

#[test]
fn lrn_even_size_pads_more_after() {
    // size 2: channel c sums channels c and c+1.
    let x = data(8, 6);
    let m = model(
        "LRN",
        13,
        vec![
            attr_int("size", 2),
            attr_float("alpha", 0.5),
            attr_float("beta", 0.75),
            attr_float("bias", 1.0),
        ],
        &[tensor_info_fixed("x", DType::F32, &[1, 4, 2])],
        &[],
        &["x"],
        &["y"],
    );
    let got = run(
        &m,
        &[("x", HostTensor::from_vec(x.clone(), &[1, 4, 2]).unwrap())],
    );
    let mut want = Vec::new();
    for c in 0..4 {
        for s in 0..2 {
            let sq: f64 = (c..(c + 2).min(4))
                .map(|k| (x[k * 2 + s] as f64).powi(2))
                .sum();
            want.push(x[c * 2 + s] as f64 / (1.0 + 0.5 / 2.0 * sq).powf(0.75));
        }
    }
    assert_close(&got[0], &want, 1e-5);
}

#[test]
fn unsupported_attributes_and_modes_are_errors() {
    let x = [tensor_info_fixed("x", DType::F32, &[2, 3])];
    let m = model(
        "ReduceMean",
        13,
        vec![attr_int("frobnicate", 1)],
        &x,
        &[],
        &["x"],
        &["y"],
    );
    let e = import(&m, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("frobnicate"), "{e}");
    let p = HostTensor::from_vec(vec![1.0f32; 3], &[3]).unwrap();
    let consts = [
        ("s", p.clone()),
        ("b", p.clone()),
        ("m", p.clone()),
        ("v", p),
    ];
    // Training mode is converted now (see misc.rs); per-activation statistics are not.
    let m = model(
        "BatchNormalization",
        7,
        vec![attr_int("spatial", 0)],
        &x,
        &consts,
        &["x", "s", "b", "m", "v"],
        &["y"],
    );
    let e = import(&m, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("spatial=0"), "{e}");
    let m = model(
        "LpNormalization",
        22,
        vec![attr_int("p", 3)],
        &x,
        &[],
        &["x"],
        &["y"],
    );
    assert!(import(&m, &ImportOptions::default()).is_err());
}
