//! Importer tests for the signal ops (DFT, STFT, windows) and the miscellaneous ops (BitCast,
//! AffineGrid, TensorScatter, MaxUnpool, training-mode BatchNormalization, ai.onnx.ml ops) on
//! tiny hand-built models, for what the conformance cases do not cover: dft_length padding and
//! truncation, complex input with a non-default axis, pads in MaxUnpool, default write
//! indices, refused modes and types. Results are checked against naive f64 loops.

mod support;

use kiln_ir::{DType, HostTensor};
use kiln_onnx::OnnxModel;
use kiln_onnx::builder::{
    attr_int, attr_ints, attr_string, graph, model_with_opsets, node_in, tensor_info_fixed,
    untyped_info,
};
use kiln_onnx::proto::{AttributeProto, ValueInfoProto};
use support::{assert_tensor_close as assert_close, data, try_run};

/// A one-node model of `domain` at `opset`; `consts` become initializers.
#[allow(clippy::too_many_arguments)]
fn model(
    domain: &str,
    op: &str,
    opset: i64,
    attrs: Vec<AttributeProto>,
    inputs: &[ValueInfoProto],
    consts: &[(&str, HostTensor)],
    node_inputs: &[&str],
    outputs: &[&str],
) -> OnnxModel {
    let n = node_in(domain, op, node_inputs, outputs, attrs);
    let declared = outputs.iter().map(|o| untyped_info(o)).collect();
    model_with_opsets(
        graph(vec![n], inputs.to_vec(), declared, consts),
        &[(domain, opset)],
    )
}

/// Naive complex DFT of `x` (length m, zero-padded or truncated to n), inverse scaled by 1/n.
fn naive_dft(x: &[(f64, f64)], n: usize, inverse: bool) -> Vec<(f64, f64)> {
    let sign = if inverse { 1.0 } else { -1.0 };
    (0..n)
        .map(|k| {
            let mut acc = (0.0, 0.0);
            for (t, &(re, im)) in x.iter().enumerate().take(n) {
                let a = sign * 2.0 * std::f64::consts::PI * (k * t) as f64 / n as f64;
                acc.0 += re * a.cos() - im * a.sin();
                acc.1 += re * a.sin() + im * a.cos();
            }
            if inverse {
                (acc.0 / n as f64, acc.1 / n as f64)
            } else {
                acc
            }
        })
        .collect()
}

#[test]
fn dft_complex_input_on_axis_0_with_padding_and_truncation() {
    // x [5, 3, 2] complex, transformed along axis 0 (opset 17 attribute), dft_length 8 (padded) and 3 (truncated).
    let x = data(30, 7);
    let xt = HostTensor::from_vec(x.clone(), &[5, 3, 2]).unwrap();
    for (n, inverse) in [(8usize, false), (3, false), (8, true)] {
        let m = model(
            "",
            "DFT",
            17,
            vec![attr_int("axis", 0), attr_int("inverse", inverse as i64)],
            &[tensor_info_fixed("x", DType::F32, &[5, 3, 2])],
            &[("len", HostTensor::scalar(n as i64))],
            &["x", "len"],
            &["y"],
        );
        let got = try_run(&m, &[("x", xt.clone())]).unwrap();
        assert_eq!(got[0].shape(), &[n, 3, 2]);
        let mut want = vec![0.0; n * 6];
        for col in 0..3 {
            let sig: Vec<(f64, f64)> = (0..5)
                .map(|t| (x[t * 6 + col * 2] as f64, x[t * 6 + col * 2 + 1] as f64))
                .collect();
            for (k, (re, im)) in naive_dft(&sig, n, inverse).into_iter().enumerate() {
                want[k * 6 + col * 2] = re;
                want[k * 6 + col * 2 + 1] = im;
            }
        }
        assert_close(&got[0], &want, 1e-5);
    }
}

#[test]
fn dft_irfft_of_odd_length_matches_hermitian_extension() {
    // Opset 20: axis input -2 (default), one-sided spectrum of 4 bins → real signal of length 7.
    let x = data(8, 3);
    let m = model(
        "",
        "DFT",
        20,
        vec![attr_int("inverse", 1), attr_int("onesided", 1)],
        &[tensor_info_fixed("x", DType::F64, &[4, 2])],
        &[("len", HostTensor::from_vec(vec![7i64], &[1]).unwrap())],
        &["x", "len"],
        &["y"],
    );
    let xt =
        HostTensor::from_vec(x.iter().map(|&v| v as f64).collect::<Vec<_>>(), &[4, 2]).unwrap();
    let got = try_run(&m, &[("x", xt)]).unwrap();
    assert_eq!(got[0].shape(), &[7, 1]);
    // Full spectrum: X[k] for k < 4, conj(X[7-k]) above; the DC bin's imaginary part is dropped.
    let half: Vec<(f64, f64)> = (0..4)
        .map(|k| {
            (
                x[2 * k] as f64,
                if k == 0 { 0.0 } else { x[2 * k + 1] as f64 },
            )
        })
        .collect();
    let full: Vec<(f64, f64)> = (0..7)
        .map(|k| {
            if k < 4 {
                half[k]
            } else {
                (half[7 - k].0, -half[7 - k].1)
            }
        })
        .collect();
    let want: Vec<f64> = naive_dft(&full, 7, true).into_iter().map(|c| c.0).collect();
    assert_close(&got[0], &want, 1e-12);
}

#[test]
fn hann_window_with_integer_output() {
    // Periodic Hann of size 4 as i32 truncates 0, 0.5, 1, 0.5 → 0, 0, 1, 0.
    let m = model(
        "",
        "HannWindow",
        17,
        vec![attr_int("output_datatype", 6)],
        &[],
        &[("n", HostTensor::scalar(4i64))],
        &["n"],
        &["y"],
    );
    let got = try_run(&m, &[]).unwrap();
    assert_eq!(got[0].dtype(), DType::I32);
    assert_eq!(got[0].to_vec::<i32>().unwrap(), vec![0, 0, 1, 0]);
}

#[test]
fn bitcast_keeps_bits_and_refuses_size_mismatch() {
    let m = model(
        "",
        "BitCast",
        26,
        vec![attr_int("to", 6)],
        &[tensor_info_fixed("x", DType::F32, &[3])],
        &[],
        &["x"],
        &["y"],
    );
    let x = HostTensor::from_vec(vec![1.0f32, -0.0, f32::NAN], &[3]).unwrap();
    let got = try_run(&m, &[("x", x)]).unwrap();
    let want: Vec<i32> = [1.0f32, -0.0, f32::NAN]
        .iter()
        .map(|v| v.to_bits() as i32)
        .collect();
    assert_eq!(got[0].to_vec::<i32>().unwrap(), want);
    let bad = model(
        "",
        "BitCast",
        26,
        vec![attr_int("to", 7)],
        &[tensor_info_fixed("x", DType::F32, &[3])],
        &[],
        &["x"],
        &["y"],
    );
    let err = try_run(
        &bad,
        &[("x", HostTensor::from_vec(vec![0f32; 3], &[3]).unwrap())],
    )
    .unwrap_err();
    assert!(err.to_string().contains("size"), "{err}");
}

#[test]
fn tensor_scatter_default_indices_and_bad_mode() {
    // No write_indices: every batch writes at position 0 along axis 1 of [2, 4, 3].
    let cache: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let upd: Vec<f32> = (0..12).map(|v| -(v as f32) - 1.0).collect();
    let m = model(
        "",
        "TensorScatter",
        24,
        vec![attr_int("axis", 1)],
        &[
            tensor_info_fixed("c", DType::F32, &[2, 4, 3]),
            tensor_info_fixed("u", DType::F32, &[2, 2, 3]),
        ],
        &[],
        &["c", "u"],
        &["y"],
    );
    let got = try_run(
        &m,
        &[
            (
                "c",
                HostTensor::from_vec(cache.clone(), &[2, 4, 3]).unwrap(),
            ),
            ("u", HostTensor::from_vec(upd.clone(), &[2, 2, 3]).unwrap()),
        ],
    )
    .unwrap();
    let mut want: Vec<f64> = cache.iter().map(|&v| v as f64).collect();
    for b in 0..2 {
        for s in 0..2 {
            for j in 0..3 {
                want[b * 12 + s * 3 + j] = upd[b * 6 + s * 3 + j] as f64;
            }
        }
    }
    assert_close(&got[0], &want, 0.0);
    let bad = model(
        "",
        "TensorScatter",
        24,
        vec![attr_string("mode", "ring")],
        &[
            tensor_info_fixed("c", DType::F32, &[2, 4, 3]),
            tensor_info_fixed("u", DType::F32, &[2, 2, 3]),
        ],
        &[],
        &["c", "u"],
        &["y"],
    );
    let c = HostTensor::from_vec(cache, &[2, 4, 3]).unwrap();
    let u = HostTensor::from_vec(upd, &[2, 2, 3]).unwrap();
    assert!(
        try_run(&bad, &[("c", c), ("u", u)])
            .unwrap_err()
            .to_string()
            .contains("ring")
    );
}

#[test]
fn max_unpool_with_pads() {
    // 1-D: in 3, kernel 3, stride 2, pads (1, 1) → (3-1)*2 - 2 + 3 = 5 outputs.
    let m = model(
        "",
        "MaxUnpool",
        11,
        vec![
            attr_ints("kernel_shape", &[3]),
            attr_ints("strides", &[2]),
            attr_ints("pads", &[1, 1]),
        ],
        &[tensor_info_fixed("x", DType::F32, &[1, 1, 3])],
        &[(
            "i",
            HostTensor::from_vec(vec![0i64, 2, 4], &[1, 1, 3]).unwrap(),
        )],
        &["x", "i"],
        &["y"],
    );
    let got = try_run(
        &m,
        &[(
            "x",
            HostTensor::from_vec(vec![7f32, 8.0, 9.0], &[1, 1, 3]).unwrap(),
        )],
    )
    .unwrap();
    assert_eq!(got[0].shape(), &[1, 1, 5]);
    assert_close(&got[0], &[7.0, 0.0, 8.0, 0.0, 9.0], 0.0);
}

#[test]
fn batch_norm_training_mode_outputs_running_stats() {
    let x = data(2 * 3 * 4, 11);
    let m = model(
        "",
        "BatchNormalization",
        15,
        vec![attr_int("training_mode", 1)],
        &[tensor_info_fixed("x", DType::F32, &[2, 3, 4])],
        &[
            (
                "s",
                HostTensor::from_vec(vec![1.0f32, 2.0, -1.0], &[3]).unwrap(),
            ),
            (
                "b",
                HostTensor::from_vec(vec![0.0f32, 0.5, 1.0], &[3]).unwrap(),
            ),
            (
                "m",
                HostTensor::from_vec(vec![0.1f32, 0.2, 0.3], &[3]).unwrap(),
            ),
            (
                "v",
                HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap(),
            ),
        ],
        &["x", "s", "b", "m", "v"],
        &["y", "rm", "rv"],
    );
    let got = try_run(
        &m,
        &[("x", HostTensor::from_vec(x.clone(), &[2, 3, 4]).unwrap())],
    )
    .unwrap();
    let (s, b, rm, rv) = (
        [1.0, 2.0, -1.0],
        [0.0, 0.5, 1.0],
        [0.1, 0.2, 0.3],
        [1.0, 2.0, 3.0],
    );
    let mut y = vec![0.0; 24];
    let (mut wm, mut wv) = (vec![], vec![]);
    for c in 0..3 {
        let vals: Vec<(usize, f64)> = (0..2)
            .flat_map(|n| (0..4).map(move |k| n * 12 + c * 4 + k))
            .map(|i| (i, x[i] as f64))
            .collect();
        let mean = vals.iter().map(|v| v.1).sum::<f64>() / 8.0;
        let var = vals.iter().map(|v| (v.1 - mean).powi(2)).sum::<f64>() / 8.0;
        for &(i, v) in &vals {
            y[i] = (v - mean) / (var + 1e-5).sqrt() * s[c] + b[c];
        }
        wm.push(rm[c] * 0.9 + mean * 0.1);
        wv.push(rv[c] * 0.9 + var * 0.1);
    }
    assert_close(&got[0], &y, 1e-5);
    assert_close(&got[1], &wm, 1e-6);
    assert_close(&got[2], &wv, 1e-6);
}

#[test]
fn ml_binarizer_on_integers_uses_the_fractional_threshold() {
    let t = AttributeProto {
        name: Some("threshold".into()),
        f: Some(1.5),
        r#type: Some(1),
        ..Default::default()
    };
    let m = model(
        "ai.onnx.ml",
        "Binarizer",
        1,
        vec![t],
        &[tensor_info_fixed("x", DType::I64, &[4])],
        &[],
        &["x"],
        &["y"],
    );
    let got = try_run(
        &m,
        &[(
            "x",
            HostTensor::from_vec(vec![1i64, 2, -3, 5], &[4]).unwrap(),
        )],
    )
    .unwrap();
    assert_eq!(got[0].to_vec::<i64>().unwrap(), vec![0, 1, 0, 1]);
}
