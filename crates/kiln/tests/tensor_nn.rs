//! NN methods against naive loop implementations written here. Needs the CPU kernels.

use kiln::{DType, Tensor};

/// Deterministic values in [-1, 1).
fn vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn rand(shape: &[usize], seed: u64) -> (Tensor, Vec<f32>) {
    let v = vals(shape.iter().product(), seed);
    (Tensor::from_vec(v.clone(), shape).unwrap(), v)
}

fn close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "element {i}: {g} vs {w}\n{got:?}\n{want:?}");
    }
}

fn out(t: kiln::Result<Tensor>) -> (Vec<usize>, Vec<f32>) {
    let t = t.unwrap();
    (t.dims(), t.to_vec::<f32>().unwrap())
}

#[test]
fn matmul_shapes_and_values() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]).unwrap();
    assert_eq!(out(a.matmul(&b)), (vec![2, 2], vec![4.0, 5.0, 10.0, 11.0]));
    let v = Tensor::from_vec(vec![1.0f32, 1.0, 1.0], &[3]).unwrap();
    assert_eq!(out(a.matmul(&v)), (vec![2], vec![6.0, 15.0]));
    assert_eq!(out(v.matmul(&b)), (vec![2], vec![2.0, 2.0]));
    // Batch dims broadcast: [2, 1, 2, 3] @ [3, 3, 2] -> [2, 3, 2, 2].
    let (x, xv) = rand(&[2, 1, 2, 3], 1);
    let (y, yv) = rand(&[3, 3, 2], 2);
    let (shape, got) = out(x.matmul(&y));
    assert_eq!(shape, vec![2, 3, 2, 2]);
    let mut want = vec![];
    for i in 0..2 {
        for j in 0..3 {
            for r in 0..2 {
                for c in 0..2 {
                    want.push((0..3).map(|k| xv[i * 6 + r * 3 + k] * yv[j * 6 + k * 2 + c]).sum::<f32>());
                }
            }
        }
    }
    close(&got, &want, 1e-5);
    let ai = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2]).unwrap();
    assert_eq!(ai.matmul(&ai).unwrap().to_vec::<i64>().unwrap(), [7, 10, 15, 22]);
    // A transposed (non-contiguous) operand.
    assert_eq!(out(a.matmul(&a.t().unwrap())), (vec![2, 2], vec![14.0, 32.0, 32.0, 77.0]));
}

#[test]
fn linear_is_x_wt_plus_b() {
    let (x, xv) = rand(&[2, 3, 4], 3);
    let (w, wv) = rand(&[5, 4], 4);
    let (b, bv) = rand(&[5], 5);
    let mut want = vec![];
    for r in 0..6 {
        for o in 0..5 {
            want.push((0..4).map(|k| xv[r * 4 + k] * wv[o * 4 + k]).sum::<f32>() + bv[o]);
        }
    }
    let (shape, got) = out(x.linear(&w, Some(&b)));
    assert_eq!(shape, vec![2, 3, 5]);
    close(&got, &want, 1e-5);
    let (_, nb) = out(x.linear(&w, None));
    let want_nb: Vec<f32> = want.iter().enumerate().map(|(i, v)| v - bv[i % 5]).collect();
    close(&nb, &want_nb, 1e-5);
    let err = x.linear(&Tensor::zeros(&[5, 3], DType::F32), None).unwrap_err();
    assert!(err.to_string().contains("matmul"), "{err}");
}

/// Naive NCHW convolution with symmetric padding.
#[allow(clippy::too_many_arguments)]
fn conv_ref(
    x: &[f32], xs: [usize; 4], w: &[f32], ws: [usize; 4], b: Option<&[f32]>,
    stride: usize, pad: usize, dil: usize, groups: usize,
) -> (Vec<usize>, Vec<f32>) {
    let [n, c, h, wd] = xs;
    let [o, cg, kh, kw] = ws;
    let oh = (h + 2 * pad - dil * (kh - 1) - 1) / stride + 1;
    let ow = (wd + 2 * pad - dil * (kw - 1) - 1) / stride + 1;
    let og = o / groups;
    let mut out = vec![];
    for ni in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for y in 0..oh {
                for xo in 0..ow {
                    let mut acc = b.map_or(0.0, |b| b[oc]);
                    for ci in 0..cg {
                        let cin = g * cg + ci;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (y * stride + ky * dil) as isize - pad as isize;
                                let ix = (xo * stride + kx * dil) as isize - pad as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                let xi = ((ni * c + cin) * h + iy as usize) * wd + ix as usize;
                                acc += x[xi] * w[((oc * cg + ci) * kh + ky) * kw + kx];
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
    }
    (vec![n, o, oh, ow], out)
}

#[test]
fn conv2d_against_naive_loops() {
    let (x, xv) = rand(&[2, 4, 5, 5], 6);
    let (w, wv) = rand(&[6, 2, 3, 3], 7);
    let (b, bv) = rand(&[6], 8);
    for (stride, pad, dil, groups) in [(1, 1, 1, 2), (2, 0, 1, 2), (1, 2, 2, 2)] {
        let (ws, got) = out(x.conv2d(&w, Some(&b), [stride; 2], [pad; 2], [dil; 2], groups));
        let (wshape, want) = conv_ref(&xv, [2, 4, 5, 5], &wv, [6, 2, 3, 3], Some(&bv), stride, pad, dil, groups);
        assert_eq!(ws, wshape);
        close(&got, &want, 1e-4);
    }
    let (w1, w1v) = rand(&[3, 4, 1, 1], 9);
    let (_, got) = out(x.conv2d(&w1, None, [1, 1], [0, 0], [1, 1], 1));
    close(&got, &conv_ref(&xv, [2, 4, 5, 5], &w1v, [3, 4, 1, 1], None, 1, 0, 1, 1).1, 1e-5);
    let err = x.conv2d(&w, None, [1, 1], [0, 0], [1, 1], 1).unwrap_err();
    assert!(err.to_string().contains("conv2d") && err.to_string().contains("groups"), "{err}");
}

#[test]
fn pooling() {
    let x = Tensor::from_vec((0..16).map(|i| i as f32).collect(), &[1, 1, 4, 4]).unwrap();
    assert_eq!(out(x.max_pool2d([2, 2], [2, 2], [0, 0], false)), (vec![1, 1, 2, 2], vec![5.0, 7.0, 13.0, 15.0]));
    assert_eq!(out(x.avg_pool2d([2, 2], [2, 2], [0, 0], false, true)), (vec![1, 1, 2, 2], vec![2.5, 4.5, 10.5, 12.5]));
    // 3x3 stride 2 padding 1: windows see 4, 6, 6 and 9 real elements.
    let (s, inc) = out(x.avg_pool2d([3, 3], [2, 2], [1, 1], false, true));
    assert_eq!(s, vec![1, 1, 2, 2]);
    close(&inc, &[10.0 / 9.0, 24.0 / 9.0, 51.0 / 9.0, 90.0 / 9.0], 1e-6);
    let (_, exc) = out(x.avg_pool2d([3, 3], [2, 2], [1, 1], false, false));
    close(&exc, &[10.0 / 4.0, 24.0 / 6.0, 51.0 / 6.0, 90.0 / 9.0], 1e-6);
    let (_, mx) = out(x.max_pool2d([3, 3], [2, 2], [1, 1], false));
    assert_eq!(mx, vec![5.0, 7.0, 13.0, 15.0]);
    // ceil_mode adds a last partial window.
    let y = Tensor::from_vec((0..25).map(|i| i as f32).collect(), &[1, 1, 5, 5]).unwrap();
    assert_eq!(out(y.max_pool2d([2, 2], [2, 2], [0, 0], true)), (vec![1, 1, 3, 3], vec![6.0, 8.0, 9.0, 16.0, 18.0, 19.0, 21.0, 23.0, 24.0]));
    assert_eq!(out(y.adaptive_avg_pool2d_1()), (vec![1, 1, 1, 1], vec![12.0]));
}

fn softmax_ref(row: &[f32]) -> Vec<f32> {
    let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = row.iter().map(|v| (v - m).exp()).collect();
    let s: f32 = e.iter().sum();
    e.iter().map(|v| v / s).collect()
}

#[test]
fn softmax_and_log_softmax() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 1000.0, f32::NEG_INFINITY, 1000.0], &[2, 3]).unwrap();
    let (_, got) = out(x.softmax(-1));
    let mut want = softmax_ref(&[1.0, 2.0, 3.0]);
    want.extend([0.5, 0.0, 0.5]);
    close(&got, &want, 1e-6);
    let (_, lg) = out(x.log_softmax(1));
    close(&lg, &want.iter().map(|v| v.ln()).collect::<Vec<_>>(), 1e-5);
    let (_, col) = out(x.softmax(0));
    let c0 = softmax_ref(&[1.0, 1000.0]);
    close(&col, &[c0[0], 1.0, 0.0, c0[1], 0.0, 1.0], 1e-6);
    assert!(Tensor::zeros(&[2], DType::I64).softmax(0).is_err());
}

#[test]
fn layer_norm_over_last_dims() {
    let (x, xv) = rand(&[3, 2, 4], 10);
    let (w, wv) = rand(&[2, 4], 11);
    let (b, bv) = rand(&[2, 4], 12);
    let eps = 1e-5;
    let norm = |n: usize, scale: &dyn Fn(usize) -> f32, shift: &dyn Fn(usize) -> f32| -> Vec<f32> {
        xv.chunks(n)
            .flat_map(|row| {
                let m = row.iter().sum::<f32>() / n as f32;
                let var = row.iter().map(|v| (v - m) * (v - m)).sum::<f32>() / n as f32;
                row.iter().enumerate().map(move |(i, v)| (v - m) / (var + eps as f32).sqrt() * scale(i) + shift(i)).collect::<Vec<_>>()
            })
            .collect()
    };
    close(&out(x.layer_norm(2, Some(&w), Some(&b), eps)).1, &norm(8, &|i| wv[i], &|i| bv[i]), 1e-4);
    close(&out(x.layer_norm(1, None, None, eps)).1, &norm(4, &|_| 1.0, &|_| 0.0), 1e-4);
    let (w4, w4v) = rand(&[4], 13);
    close(&out(x.layer_norm(1, Some(&w4), None, eps)).1, &norm(4, &|i| w4v[i], &|_| 0.0), 1e-4);
    let (b4, b4v) = rand(&[4], 14);
    close(&out(x.layer_norm(1, None, Some(&b4), eps)).1, &norm(4, &|_| 1.0, &|i| b4v[i]), 1e-4);
}

#[test]
fn batch_norm_inference() {
    let (x, xv) = rand(&[2, 3, 2, 2], 15);
    let mean = Tensor::from_vec(vec![0.1f32, -0.2, 0.3], &[3]).unwrap();
    let var = Tensor::from_vec(vec![1.0f32, 0.5, 2.0], &[3]).unwrap();
    let w = Tensor::from_vec(vec![2.0f32, 1.0, -1.0], &[3]).unwrap();
    let b = Tensor::from_vec(vec![0.0f32, 1.0, 0.5], &[3]).unwrap();
    let (m, va, wv, bv) = ([0.1f32, -0.2, 0.3], [1.0f32, 0.5, 2.0], [2.0f32, 1.0, -1.0], [0.0f32, 1.0, 0.5]);
    let eps = 1e-5f32;
    let r = |scale: bool| -> Vec<f32> {
        xv.iter()
            .enumerate()
            .map(|(i, v)| {
                let c = (i / 4) % 3;
                let n = (v - m[c]) / (va[c] + eps).sqrt();
                if scale { n * wv[c] + bv[c] } else { n }
            })
            .collect()
    };
    close(&out(x.batch_norm(&mean, &var, Some(&w), Some(&b), eps as f64)).1, &r(true), 1e-5);
    close(&out(x.batch_norm(&mean, &var, None, None, eps as f64)).1, &r(false), 1e-5);
    let err = x.batch_norm(&Tensor::zeros(&[4], DType::F32), &var, None, None, 1e-5).unwrap_err();
    assert!(err.to_string().contains("batch_norm"), "{err}");
}

#[test]
fn embedding_gathers_rows() {
    let w = Tensor::from_vec((0..8).map(|i| i as f32).collect(), &[4, 2]).unwrap();
    let ids = Tensor::from_vec(vec![3i64, 0, 1, 3], &[2, 2]).unwrap();
    assert_eq!(out(Tensor::embedding(&w, &ids)), (vec![2, 2, 2], vec![6.0, 7.0, 0.0, 1.0, 2.0, 3.0, 6.0, 7.0]));
    let ids32 = Tensor::from_vec(vec![2i32], &[1]).unwrap();
    assert_eq!(out(Tensor::embedding(&w, &ids32)), (vec![1, 2], vec![4.0, 5.0]));
    let bad = Tensor::from_vec(vec![4i64], &[1]).unwrap();
    assert!(Tensor::embedding(&w, &bad).is_err());
}

/// Naive attention for q [B, Lq, D], k [B, Lk, D], v [B, Lk, Dv].
fn attention_ref(q: &[f32], k: &[f32], v: &[f32], dims: [usize; 5], mask: Option<&[f32]>, causal: bool) -> Vec<f32> {
    let [b, lq, lk, d, dv] = dims;
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![];
    for bi in 0..b {
        for i in 0..lq {
            let mut s: Vec<f32> = (0..lk)
                .map(|j| {
                    let dot: f32 = (0..d).map(|t| q[(bi * lq + i) * d + t] * k[(bi * lk + j) * d + t]).sum();
                    let mut x = dot * scale + mask.map_or(0.0, |m| m[i * lk + j]);
                    if causal && j > i + (lk - lq) {
                        x = f32::NEG_INFINITY;
                    }
                    x
                })
                .collect();
            s = softmax_ref(&s);
            for c in 0..dv {
                out.push((0..lk).map(|j| s[j] * v[(bi * lk + j) * dv + c]).sum());
            }
        }
    }
    out
}

#[test]
fn attention_against_naive() {
    let (q, qv) = rand(&[2, 3, 4], 20);
    let (k, kv) = rand(&[2, 5, 4], 21);
    let (v, vv) = rand(&[2, 5, 2], 22);
    let (m, mv) = rand(&[3, 5], 23);
    let dims = [2, 3, 5, 4, 2];
    let (s, got) = out(Tensor::attention(&q, &k, &v, None, false, None));
    assert_eq!(s, vec![2, 3, 2]);
    close(&got, &attention_ref(&qv, &kv, &vv, dims, None, false), 1e-5);
    close(&out(Tensor::attention(&q, &k, &v, Some(&m), false, None)).1, &attention_ref(&qv, &kv, &vv, dims, Some(&mv), false), 1e-5);
    close(&out(Tensor::attention(&q, &k, &v, None, true, None)).1, &attention_ref(&qv, &kv, &vv, dims, None, true), 1e-5);
    // An explicit scale of 1/sqrt(D) is the default.
    close(&out(Tensor::attention(&q, &k, &v, None, true, Some(0.5))).1, &attention_ref(&qv, &kv, &vv, dims, None, true), 1e-5);
    assert!(Tensor::attention(&q, &v, &v, None, false, None).is_err());
}
