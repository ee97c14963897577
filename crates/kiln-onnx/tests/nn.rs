//! Converters of the nn family (Conv, pools, Gemm, quantization, Resize) on tiny models built
//! here, for what the ONNX conformance cases do not cover: symbolic batch dims, padding larger
//! than half the kernel, refused attributes and outputs. Results are checked against plain
//! f64 loops.

use kiln_ir::HostTensor;
use kiln_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto,
    TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};
use kiln_onnx::tensor::tensor_to_proto;
use kiln_onnx::{ImportOptions, OnnxModel, import};

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(7),
        ..Default::default()
    }
}
fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(2),
        ..Default::default()
    }
}
fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(1),
        ..Default::default()
    }
}
fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec()),
        r#type: Some(3),
        ..Default::default()
    }
}

/// A value info of ONNX element type `elem` with dims (`None` = the symbolic dim "N").
fn info(name: &str, elem: i32, dims: &[Option<i64>]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(match d {
                Some(v) => tensor_shape_proto::dimension::Value::DimValue(*v),
                None => tensor_shape_proto::dimension::Value::DimParam("N".into()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A one-node model: graph input "x" (f32, `dims`), constant inputs, outputs `outs`.
fn model(
    op: &str,
    x_dims: &[Option<i64>],
    consts: &[(&str, HostTensor)],
    attrs: Vec<AttributeProto>,
    outs: &[&str],
    opset: i64,
) -> OnnxModel {
    let mut inputs = vec!["x".to_string()];
    inputs.extend(consts.iter().map(|(n, _)| n.to_string()));
    let node = NodeProto {
        op_type: Some(op.into()),
        input: inputs,
        output: outs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    };
    let graph = GraphProto {
        node: vec![node],
        input: vec![info("x", 1, x_dims)],
        initializer: consts.iter().map(|(n, t)| tensor_to_proto(t, n)).collect(),
        output: outs
            .iter()
            .map(|o| ValueInfoProto {
                name: Some(o.to_string()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let proto = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(graph),
        ..Default::default()
    };
    OnnxModel { proto, dir: None }
}

fn run(m: &OnnxModel, x: HostTensor) -> Vec<HostTensor> {
    let imp = import(m, &ImportOptions::default()).expect("import");
    kiln_cpu::run(&imp.graph, &[x]).expect("run")
}

fn seq(n: usize, f: impl Fn(usize) -> f32) -> Vec<f32> {
    (0..n).map(f).collect()
}

fn assert_close(got: &HostTensor, want: &[f64], shape: &[usize]) {
    assert_eq!(got.shape(), shape);
    let g = got.to_f64_vec();
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "element {i}: got {a}, want {b}"
        );
    }
}

#[test]
fn conv_1d_with_symbolic_batch_matches_naive() {
    // x [N, 2, 7], w [3, 2, 3], dilation 2, pads (1, 2), stride 2, bias.
    let (c, o, l, k, d, s, p0, p1) = (
        2usize, 3usize, 7usize, 3usize, 2usize, 2usize, 1usize, 2usize,
    );
    let w = seq(o * c * k, |i| (i as f32 * 0.37).sin());
    let b = vec![0.5f32, -1.0, 2.0];
    let m = model(
        "Conv",
        &[None, Some(c as i64), Some(l as i64)],
        &[
            ("w", HostTensor::from_vec(w.clone(), &[o, c, k]).unwrap()),
            ("b", HostTensor::from_vec(b.clone(), &[o]).unwrap()),
        ],
        vec![
            ints("dilations", &[d as i64]),
            ints("pads", &[p0 as i64, p1 as i64]),
            ints("strides", &[s as i64]),
        ],
        &["y"],
        17,
    );
    let n = 2;
    let x = seq(n * c * l, |i| (i as f32 * 0.11).cos());
    let out_len = (l + p0 + p1 - d * (k - 1) - 1) / s + 1;
    let mut want = vec![0.0f64; n * o * out_len];
    for bi in 0..n {
        for oc in 0..o {
            for t in 0..out_len {
                let mut acc = b[oc] as f64;
                for ic in 0..c {
                    for j in 0..k {
                        let pos = (t * s + j * d) as i64 - p0 as i64;
                        if pos >= 0 && (pos as usize) < l {
                            acc += x[(bi * c + ic) * l + pos as usize] as f64
                                * w[(oc * c + ic) * k + j] as f64;
                        }
                    }
                }
                want[(bi * o + oc) * out_len + t] = acc;
            }
        }
    }
    let y = run(&m, HostTensor::from_vec(x, &[n, c, l]).unwrap());
    assert_close(&y[0], &want, &[n, o, out_len]);
}

#[test]
fn average_pool_with_pads_over_half_the_kernel_excludes_padding() {
    // kernel 3, pads 2 (more than the IR pool takes directly), count_include_pad = 0.
    let (h, w, k, p) = (4usize, 5usize, 3usize, 2usize);
    let m = model(
        "AveragePool",
        &[Some(1), Some(1), Some(h as i64), Some(w as i64)],
        &[],
        vec![
            ints("kernel_shape", &[k as i64, k as i64]),
            ints("pads", &[p as i64; 4]),
        ],
        &["y"],
        19,
    );
    let x = seq(h * w, |i| i as f32 - 7.5);
    let (oh, ow) = (h + 2 * p - k + 1, w + 2 * p - k + 1);
    let mut want = Vec::new();
    for i in 0..oh {
        for j in 0..ow {
            let (mut s, mut cnt) = (0.0, 0.0);
            for a in 0..k {
                for b in 0..k {
                    let (r, c) = ((i + a) as i64 - p as i64, (j + b) as i64 - p as i64);
                    if r >= 0 && c >= 0 && (r as usize) < h && (c as usize) < w {
                        s += x[r as usize * w + c as usize] as f64;
                        cnt += 1.0;
                    }
                }
            }
            want.push(s / cnt);
        }
    }
    let y = run(&m, HostTensor::from_vec(x, &[1, 1, h, w]).unwrap());
    assert_close(&y[0], &want, &[1, 1, oh, ow]);
}

#[test]
fn gemm_transposes_and_scales() {
    // y = 0.5 * x^T @ b^T + 2 * c, x [3, 2], b [4, 3], c [4] broadcast over rows.
    let bv = seq(12, |i| i as f32 * 0.25 - 1.0);
    let cv = vec![1.0f32, -2.0, 0.5, 3.0];
    let m = model(
        "Gemm",
        &[Some(3), Some(2)],
        &[
            ("b", HostTensor::from_vec(bv.clone(), &[4, 3]).unwrap()),
            ("c", HostTensor::from_vec(cv.clone(), &[4]).unwrap()),
        ],
        vec![
            int("transA", 1),
            int("transB", 1),
            float("alpha", 0.5),
            float("beta", 2.0),
        ],
        &["y"],
        13,
    );
    let xv = seq(6, |i| i as f32 - 2.0);
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..4 {
            let dot: f64 = (0..3)
                .map(|k| xv[k * 2 + i] as f64 * bv[j * 3 + k] as f64)
                .sum();
            want.push(0.5 * dot + 2.0 * cv[j] as f64);
        }
    }
    let y = run(&m, HostTensor::from_vec(xv, &[3, 2]).unwrap());
    assert_close(&y[0], &want, &[2, 4]);
}

#[test]
fn quantize_per_axis_rounds_half_to_even_and_saturates() {
    let scale = vec![0.5f32, 2.0];
    let zp = vec![10i8, -3];
    let m = model(
        "QuantizeLinear",
        &[Some(2), Some(3)],
        &[
            ("s", HostTensor::from_vec(scale.clone(), &[2]).unwrap()),
            ("z", HostTensor::from_vec(zp.clone(), &[2]).unwrap()),
        ],
        vec![int("axis", 0)],
        &["y"],
        13,
    );
    let xv = vec![1.25f32, -0.75, 100.0, 5.0, 3.0, -1000.0];
    let want: Vec<f64> = xv
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let r = i / 3;
            let q = (v as f64 / scale[r] as f64).round_ties_even() + zp[r] as f64;
            q.clamp(-128.0, 127.0)
        })
        .collect();
    let y = run(&m, HostTensor::from_vec(xv, &[2, 3]).unwrap());
    assert_eq!(y[0].dtype(), kiln_ir::DType::I8);
    assert_close(&y[0], &want, &[2, 3]);
}

#[test]
fn resize_align_corners_from_scales_uses_the_unrounded_length() {
    // in 4, scale 0.6: output floor(2.4) = 2, x = y * 3 / (2.4 - 1), as ONNX defines it.
    let m = model(
        "Resize",
        &[Some(1), Some(4)],
        &[
            (
                "roi",
                HostTensor::from_vec(Vec::<f32>::new(), &[0]).unwrap(),
            ),
            (
                "scales",
                HostTensor::from_vec(vec![1.0f32, 0.6], &[2]).unwrap(),
            ),
        ],
        vec![
            string("mode", "linear"),
            string("coordinate_transformation_mode", "align_corners"),
        ],
        &["y"],
        13,
    );
    let xv = vec![1.0f32, 2.0, 4.0, 8.0];
    let width = 4.0 * 0.6f32 as f64;
    let want: Vec<f64> = (0..2)
        .map(|y| {
            let xf = y as f64 * 3.0 / (width - 1.0);
            let (i, t) = (xf.floor() as usize, xf - xf.floor());
            xv[i] as f64 * (1.0 - t) + xv[(i + 1).min(3)] as f64 * t
        })
        .collect();
    let y = run(&m, HostTensor::from_vec(xv, &[1, 4]).unwrap());
    assert_close(&y[0], &want, &[1, 2]);
}

#[test]
fn refused_attribute_output_and_rank_are_errors() {
    let w = HostTensor::from_vec(vec![1.0f32; 4], &[1, 1, 2, 2]).unwrap();
    let bad_attr = model(
        "Conv",
        &[Some(1), Some(1), Some(3), Some(3)],
        &[("w", w)],
        vec![int("foo", 1)],
        &["y"],
        13,
    );
    let e = import(&bad_attr, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("'foo'"), "{e}");

    let indices = model(
        "MaxPool",
        &[Some(1), Some(1), Some(4), Some(4)],
        &[],
        vec![ints("kernel_shape", &[2, 2])],
        &["y", "i"],
        13,
    );
    let e = import(&indices, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("output 1"), "{e}");

    let three_d = model(
        "MaxPool",
        &[Some(1), Some(1), Some(2), Some(2), Some(2)],
        &[],
        vec![ints("kernel_shape", &[2, 2, 2])],
        &["y"],
        13,
    );
    let e = import(&three_d, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("3-D"), "{e}");
}

#[test]
fn max_pool_with_pads_over_half_the_kernel_ignores_padding() {
    // All inputs negative: a zero from the padding would win if padding were not -inf.
    let (h, w, k, p, s) = (5usize, 4usize, 3usize, 2usize, 2usize);
    let m = model(
        "MaxPool",
        &[Some(1), Some(1), Some(h as i64), Some(w as i64)],
        &[],
        vec![
            ints("kernel_shape", &[k as i64, k as i64]),
            ints("pads", &[p as i64; 4]),
            ints("strides", &[s as i64; 2]),
        ],
        &["y"],
        12,
    );
    let x = seq(h * w, |i| -1.0 - ((i * 7) % 11) as f32);
    let (oh, ow) = ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1);
    let mut want = Vec::new();
    for i in 0..oh {
        for j in 0..ow {
            let mut m = f64::NEG_INFINITY;
            for a in 0..k {
                for b in 0..k {
                    let (r, c) = ((i * s + a) as i64 - p as i64, (j * s + b) as i64 - p as i64);
                    if r >= 0 && c >= 0 && (r as usize) < h && (c as usize) < w {
                        m = m.max(x[r as usize * w + c as usize] as f64);
                    }
                }
            }
            want.push(m);
        }
    }
    let y = run(&m, HostTensor::from_vec(x, &[1, 1, h, w]).unwrap());
    assert_close(&y[0], &want, &[1, 1, oh, ow]);
}
