//! Converters of the nn family (Conv, pools, Gemm, quantization, Resize) on tiny models built
//! here, for what the ONNX conformance cases do not cover: symbolic batch dims, padding larger
//! than half the kernel, refused attributes and outputs. Results are checked against plain
//! f64 loops.

mod support;

use kiln_ir::{DType, Dim, HostTensor};
use kiln_onnx::builder::{
    self, attr_float, attr_int, attr_ints, attr_string, graph, node, tensor_info, untyped_info,
};
use kiln_onnx::proto::AttributeProto;
use kiln_onnx::{ImportOptions, OnnxModel, import};
use support::assert_shaped_close as assert_close;

/// A one-node model: graph input "x" (f32, `x_dims`, `None` = the symbolic dim "N"), constant
/// inputs, outputs `outs`.
fn model(
    op: &str,
    x_dims: &[Option<i64>],
    consts: &[(&str, HostTensor)],
    attrs: Vec<AttributeProto>,
    outs: &[&str],
    opset: i64,
) -> OnnxModel {
    let mut inputs = vec!["x"];
    inputs.extend(consts.iter().map(|(n, _)| *n));
    let dims: Vec<Dim> = x_dims
        .iter()
        .map(|d| d.map_or(Dim::sym("N"), |v| Dim::Fixed(v as usize)))
        .collect();
    let outputs = outs.iter().map(|o| untyped_info(o)).collect();
    let n = node(op, &inputs, outs, attrs);
    builder::model(
        graph(
            vec![n],
            vec![tensor_info("x", DType::F32, &dims)],
            outputs,
            consts,
        ),
        opset,
    )
}

fn run(m: &OnnxModel, x: HostTensor) -> Vec<HostTensor> {
    let imp = import(m, &ImportOptions::default()).expect("import");
    kiln_cpu::run(&imp.graph, &[x]).expect("run")
}

fn seq(n: usize, f: impl Fn(usize) -> f32) -> Vec<f32> {
    (0..n).map(f).collect()
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
            attr_ints("dilations", &[d as i64]),
            attr_ints("pads", &[p0 as i64, p1 as i64]),
            attr_ints("strides", &[s as i64]),
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
            attr_ints("kernel_shape", &[k as i64, k as i64]),
            attr_ints("pads", &[p as i64; 4]),
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
            attr_int("transA", 1),
            attr_int("transB", 1),
            attr_float("alpha", 0.5),
            attr_float("beta", 2.0),
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
        vec![attr_int("axis", 0)],
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
            attr_string("mode", "linear"),
            attr_string("coordinate_transformation_mode", "align_corners"),
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
        vec![attr_int("foo", 1)],
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
        vec![attr_ints("kernel_shape", &[2, 2])],
        &["y", "i"],
        13,
    );
    let e = import(&indices, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("output 1"), "{e}");

    let four_d = model(
        "MaxPool",
        &[Some(1), Some(1), Some(2), Some(2), Some(2), Some(2)],
        &[],
        vec![attr_ints("kernel_shape", &[2, 2, 2, 2])],
        &["y"],
        13,
    );
    let e = import(&four_d, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("4-D"), "{e}");
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
            attr_ints("kernel_shape", &[k as i64, k as i64]),
            attr_ints("pads", &[p as i64; 4]),
            attr_ints("strides", &[s as i64; 2]),
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

/// A deterministic pseudo-random value in [-1, 1) (xorshift), so the tests need no crate.
fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

#[test]
fn conv_3d_random_matches_naive_seven_loops() {
    // x [2, 4, 5, 6, 7], w [6, 2, 3, 2, 3]: groups 2, per-axis strides, dilations and
    // asymmetric pads, bias.
    let (n, c, o, g) = (2usize, 4usize, 6usize, 2usize);
    let inp = [5usize, 6, 7];
    let k = [3usize, 2, 3];
    let s = [2usize, 1, 2];
    let d = [2usize, 1, 1];
    let p0 = [1usize, 0, 2];
    let p1 = [2usize, 1, 1];
    let cg = c / g;
    let w = rand_vec(o * cg * k[0] * k[1] * k[2], 1);
    let b = rand_vec(o, 2);
    let x = rand_vec(n * c * inp[0] * inp[1] * inp[2], 3);
    let pads: Vec<i64> = p0.iter().chain(&p1).map(|&v| v as i64).collect();
    let m = model(
        "Conv",
        &[
            Some(n as i64),
            Some(c as i64),
            Some(inp[0] as i64),
            Some(inp[1] as i64),
            Some(inp[2] as i64),
        ],
        &[
            (
                "w",
                HostTensor::from_vec(w.clone(), &[o, cg, k[0], k[1], k[2]]).unwrap(),
            ),
            ("b", HostTensor::from_vec(b.clone(), &[o]).unwrap()),
        ],
        vec![
            attr_ints("dilations", &d.map(|v| v as i64)),
            attr_ints("pads", &pads),
            attr_ints("strides", &s.map(|v| v as i64)),
            attr_int("group", g as i64),
        ],
        &["y"],
        11,
    );
    let out: Vec<usize> = (0..3)
        .map(|i| (inp[i] + p0[i] + p1[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1)
        .collect();
    let at = |v: usize, i: usize| (v * s[i]) as i64 - p0[i] as i64;
    let mut want = Vec::new();
    for bi in 0..n {
        for oc in 0..o {
            for od in 0..out[0] {
                for oh in 0..out[1] {
                    for ow in 0..out[2] {
                        let mut acc = b[oc] as f64;
                        for ic in 0..cg {
                            let xc = (oc / (o / g)) * cg + ic;
                            for kd in 0..k[0] {
                                for kh in 0..k[1] {
                                    for kw in 0..k[2] {
                                        let z = at(od, 0) + (kd * d[0]) as i64;
                                        let y = at(oh, 1) + (kh * d[1]) as i64;
                                        let xx = at(ow, 2) + (kw * d[2]) as i64;
                                        if z < 0 || y < 0 || xx < 0 {
                                            continue;
                                        }
                                        let (z, y, xx) = (z as usize, y as usize, xx as usize);
                                        if z >= inp[0] || y >= inp[1] || xx >= inp[2] {
                                            continue;
                                        }
                                        let xi = (((bi * c + xc) * inp[0] + z) * inp[1] + y)
                                            * inp[2]
                                            + xx;
                                        let wi =
                                            (((oc * cg + ic) * k[0] + kd) * k[1] + kh) * k[2] + kw;
                                        acc += x[xi] as f64 * w[wi] as f64;
                                    }
                                }
                            }
                        }
                        want.push(acc);
                    }
                }
            }
        }
    }
    let y = run(
        &m,
        HostTensor::from_vec(x, &[n, c, inp[0], inp[1], inp[2]]).unwrap(),
    );
    assert_close(&y[0], &want, &[n, o, out[0], out[1], out[2]]);
}

#[test]
fn average_pool_3d_ceil_mode_divides_by_taps_inside_the_input() {
    // [1, 1, 4, 5, 3], kernel [2, 3, 2], strides [2, 2, 2], pads [1, 1, 0, 0, 1, 1],
    // ceil_mode: the last windows hang over the end, count_include_pad = 0.
    let inp = [4usize, 5, 3];
    let k = [2usize, 3, 2];
    let s = [2usize, 2, 2];
    let p0 = [1usize, 1, 0];
    let p1 = [0usize, 1, 1];
    let pads: Vec<i64> = p0.iter().chain(&p1).map(|&v| v as i64).collect();
    let m = model(
        "AveragePool",
        &[
            Some(1),
            Some(1),
            Some(inp[0] as i64),
            Some(inp[1] as i64),
            Some(inp[2] as i64),
        ],
        &[],
        vec![
            attr_ints("kernel_shape", &k.map(|v| v as i64)),
            attr_ints("strides", &s.map(|v| v as i64)),
            attr_ints("pads", &pads),
            attr_int("ceil_mode", 1),
        ],
        &["y"],
        19,
    );
    let x = rand_vec(inp.iter().product(), 7);
    let out: Vec<usize> = (0..3)
        .map(|i| {
            let mut o = (inp[i] + p0[i] + p1[i] - k[i]).div_ceil(s[i]) + 1;
            if (o - 1) * s[i] >= inp[i] + p0[i] {
                o -= 1;
            }
            o
        })
        .collect();
    let mut want = Vec::new();
    for od in 0..out[0] {
        for oh in 0..out[1] {
            for ow in 0..out[2] {
                let (mut sum, mut cnt) = (0.0f64, 0.0f64);
                for a in 0..k[0] {
                    for b in 0..k[1] {
                        for e in 0..k[2] {
                            let pos = [od * s[0] + a, oh * s[1] + b, ow * s[2] + e];
                            let rel: Vec<i64> =
                                (0..3).map(|i| pos[i] as i64 - p0[i] as i64).collect();
                            if (0..3).all(|i| rel[i] >= 0 && (rel[i] as usize) < inp[i]) {
                                let (z, y, xx) =
                                    (rel[0] as usize, rel[1] as usize, rel[2] as usize);
                                sum += x[(z * inp[1] + y) * inp[2] + xx] as f64;
                                cnt += 1.0;
                            }
                        }
                    }
                }
                want.push(sum / cnt);
            }
        }
    }
    let y = run(
        &m,
        HostTensor::from_vec(x, &[1, 1, inp[0], inp[1], inp[2]]).unwrap(),
    );
    assert_close(&y[0], &want, &[1, 1, out[0], out[1], out[2]]);
}

#[test]
fn conv_transpose_3d_strided_dilated_padded_matches_naive() {
    // x [1, 4, 3, 2, 3], w [4, 1, 2, 3, 2] with groups 2 (2 output channels), strides [2, 1, 3], dilations [2, 1, 1], pads [1, 0, 1, 0, 1, 2], output_padding
    // [1, 0, 2], bias.
    let (c, og, g) = (4usize, 1usize, 2usize);
    let inp = [3usize, 2, 3];
    let k = [2usize, 3, 2];
    let s = [2usize, 1, 3];
    let d = [2usize, 1, 1];
    let p0 = [1usize, 0, 1];
    let p1 = [0usize, 1, 2];
    let op = [1usize, 0, 2];
    let o = og * g;
    let w = rand_vec(c * og * k[0] * k[1] * k[2], 11);
    let b = rand_vec(o, 12);
    let x = rand_vec(c * inp[0] * inp[1] * inp[2], 13);
    let pads: Vec<i64> = p0.iter().chain(&p1).map(|&v| v as i64).collect();
    let m = model(
        "ConvTranspose",
        &[
            Some(1),
            Some(c as i64),
            Some(inp[0] as i64),
            Some(inp[1] as i64),
            Some(inp[2] as i64),
        ],
        &[
            (
                "w",
                HostTensor::from_vec(w.clone(), &[c, og, k[0], k[1], k[2]]).unwrap(),
            ),
            ("b", HostTensor::from_vec(b.clone(), &[o]).unwrap()),
        ],
        vec![
            attr_ints("dilations", &d.map(|v| v as i64)),
            attr_ints("pads", &pads),
            attr_ints("strides", &s.map(|v| v as i64)),
            attr_ints("output_padding", &op.map(|v| v as i64)),
            attr_int("group", g as i64),
        ],
        &["y"],
        11,
    );
    let out: Vec<usize> = (0..3)
        .map(|i| (inp[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 + op[i] - p0[i] - p1[i])
        .collect();
    let mut want = vec![0.0f64; o * out.iter().product::<usize>()];
    for (oc, &bv) in b.iter().enumerate() {
        for v in &mut want[oc * out.iter().product::<usize>()..][..out.iter().product::<usize>()] {
            *v = bv as f64;
        }
    }
    let cg = c / g;
    for ic in 0..c {
        for oo in 0..og {
            let oc = (ic / cg) * og + oo;
            for z in 0..inp[0] {
                for y in 0..inp[1] {
                    for xx in 0..inp[2] {
                        let xv = x[((ic * inp[0] + z) * inp[1] + y) * inp[2] + xx] as f64;
                        for kd in 0..k[0] {
                            for kh in 0..k[1] {
                                for kw in 0..k[2] {
                                    let pos = [
                                        (z * s[0] + kd * d[0]) as i64 - p0[0] as i64,
                                        (y * s[1] + kh * d[1]) as i64 - p0[1] as i64,
                                        (xx * s[2] + kw * d[2]) as i64 - p0[2] as i64,
                                    ];
                                    if (0..3).any(|i| pos[i] < 0 || pos[i] as usize >= out[i]) {
                                        continue;
                                    }
                                    let wv = w
                                        [(((ic * og + oo) * k[0] + kd) * k[1] + kh) * k[2] + kw]
                                        as f64;
                                    let oi = ((oc * out[0] + pos[0] as usize) * out[1]
                                        + pos[1] as usize)
                                        * out[2]
                                        + pos[2] as usize;
                                    want[oi] += xv * wv;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    let y = run(
        &m,
        HostTensor::from_vec(x, &[1, c, inp[0], inp[1], inp[2]]).unwrap(),
    );
    assert_close(&y[0], &want, &[1, o, out[0], out[1], out[2]]);
}
