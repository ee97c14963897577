//! nn layers, deterministic init and VarBuilder, checked against naive loop implementations.

use kiln::nn::{
    BatchNorm2d, Conv2d, Conv2dConfig, Embedding, Init, LayerNorm, Linear, MultiHeadAttention, VarBuilder, fans,
    merge_heads, split_heads,
};
use kiln::rng::Rng;
use kiln::{DType, Tensor};

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().expect("eager tensor")
}

fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "element {i}: got {g}, want {w}");
    }
}

fn tensor(data: Vec<f32>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(data, shape).unwrap()
}

/// Deterministic "random" test data in [-1, 1).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.uniform(-1.0, 1.0) as f32).collect()
}

// ---------- rng and init ----------

#[test]
fn rng_is_deterministic_and_seed_sensitive() {
    let a: Vec<u64> = (0..8).scan(Rng::new(7), |r, _| Some(r.next_u64())).collect();
    let b: Vec<u64> = (0..8).scan(Rng::new(7), |r, _| Some(r.next_u64())).collect();
    let c: Vec<u64> = (0..8).scan(Rng::new(8), |r, _| Some(r.next_u64())).collect();
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_ne!(Rng::for_name(0, "a.weight").next_u64(), Rng::for_name(0, "b.weight").next_u64());
    assert_ne!(Rng::for_name(0, "a.weight").next_u64(), Rng::for_name(1, "a.weight").next_u64());
}

#[test]
fn rng_distributions() {
    let mut r = Rng::new(1);
    let n = 200_000;
    let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
    assert!(mean.abs() < 0.01, "normal mean {mean}");
    assert!((var - 1.0).abs() < 0.02, "normal var {var}");
    assert!(xs.iter().all(|x| x.is_finite()));
    for _ in 0..10_000 {
        let u = r.uniform(-2.0, 3.0);
        assert!((-2.0..3.0).contains(&u));
    }
    let mut seen = [0usize; 5];
    for _ in 0..10_000 {
        seen[r.below(5) as usize] += 1;
    }
    assert!(seen.iter().all(|&c| c > 1800), "below(5) counts {seen:?}");
    assert_eq!(r.below(0), 0);
    assert_eq!(r.below(1), 0);
}

#[test]
fn fans_follow_pytorch() {
    assert_eq!(fans(&[64, 3, 7, 7]), (3 * 49, 64 * 49));
    assert_eq!(fans(&[10, 20]), (20, 10));
    assert_eq!(fans(&[5]), (5, 5));
    assert_eq!(fans(&[]), (1, 1));
}

#[test]
fn init_statistics_and_dtypes() {
    let mut r = Rng::new(3);
    // kaiming normal fan_out: std = sqrt(2 / (out * k * k)).
    let t = Init::KaimingNormalFanOut.make(&[64, 32, 3, 3], DType::F32, &mut r).unwrap();
    let v = vals(&t);
    let std = (v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64).sqrt();
    let want = (2.0 / (64.0 * 9.0f64)).sqrt();
    assert!((std / want - 1.0).abs() < 0.05, "std {std}, want {want}");
    // kaiming uniform: |x| < 1/sqrt(fan_in), and the bound is nearly reached.
    let t = Init::KaimingUniformFanIn.make(&[50, 400], DType::F64, &mut r).unwrap();
    let m = vals(&t).iter().fold(0.0f64, |a, x| a.max(x.abs()));
    assert!(m < 0.05 && m > 0.049, "max |x| {m}");
    let t = Init::XavierUniform.make(&[30, 10], DType::F32, &mut r).unwrap();
    let b = (6.0f64 / 40.0).sqrt();
    assert!(vals(&t).iter().all(|x| x.abs() < b));
    // half types and constants of every dtype.
    for dt in [DType::F16, DType::BF16] {
        let t = Init::Normal { mean: 0.0, std: 0.02 }.make(&[4, 4], dt, &mut r).unwrap();
        assert_eq!(t.dtype(), dt);
        assert!(vals(&t).iter().all(|x| x.abs() < 0.2));
    }
    for dt in DType::ALL {
        let t = Init::Const(1.0).make(&[2, 0, 3], dt, &mut r).unwrap();
        assert_eq!((t.dtype(), t.shape()), (dt, &[2, 0, 3][..]));
        let t = Init::Const(1.0).make(&[3], dt, &mut r).unwrap();
        assert_eq!(vals(&t), vec![1.0; 3]);
    }
    let err = Init::Normal { mean: 0.0, std: 1.0 }.make(&[2], DType::I64, &mut r).unwrap_err();
    assert!(err.to_string().contains("i64"), "{err}");
}

// ---------- VarBuilder ----------

#[test]
fn var_builder_names_counts_and_buffers() {
    let vb = VarBuilder::random(0, DType::F32);
    let l1 = vb.pp("layer1");
    l1.pp("0").get("weight", &[3, 4], Init::Const(0.5)).unwrap();
    vb.pp("bn").get_buffer("running_mean", &[4], Init::Const(0.0)).unwrap();
    vb.get("bias", &[2], Init::Const(0.0)).unwrap();
    assert_eq!(vb.num_parameters(), 14);
    assert_eq!(l1.num_parameters(), 14, "the counter is shared across prefixes");
    assert_eq!(vb.names(), vec!["bias", "bn.running_mean", "layer1.0.weight"]);
    assert_eq!(vb.parameter_names(), vec!["bias", "layer1.0.weight"]);
    assert_eq!(l1.pp("0").prefix(), "layer1.0");
    // A second get of the same name is the same variable (weight tying), not a new parameter.
    let again = vb.get("layer1.0.weight", &[3, 4], Init::Const(9.0)).unwrap();
    assert_eq!(vals(&again), vec![0.5; 12]);
    assert_eq!(vb.num_parameters(), 14);
    let err = vb.get("layer1.0.weight", &[4, 3], Init::Const(0.0)).unwrap_err().to_string();
    assert!(err.contains("layer1.0.weight") && err.contains("[3, 4]") && err.contains("[4, 3]"), "{err}");
}

#[test]
fn random_weights_depend_on_seed_and_name_only() {
    let a = VarBuilder::random(5, DType::F32);
    let wa = a.pp("x").get("w", &[16], Init::Normal { mean: 0.0, std: 1.0 }).unwrap();
    // Other variables created first do not shift the stream of `x.w`.
    let b = VarBuilder::random(5, DType::F32);
    b.get("other", &[100], Init::Normal { mean: 0.0, std: 1.0 }).unwrap();
    let wb = b.pp("x").get("w", &[16], Init::Normal { mean: 0.0, std: 1.0 }).unwrap();
    assert_eq!(wa.to_vec::<f32>().unwrap(), wb.to_vec::<f32>().unwrap());
    let c = VarBuilder::random(6, DType::F32);
    let wc = c.pp("x").get("w", &[16], Init::Normal { mean: 0.0, std: 1.0 }).unwrap();
    assert_ne!(wa.to_vec::<f32>().unwrap(), wc.to_vec::<f32>().unwrap());
}

// ---------- layers vs naive loops ----------

/// `y[r, o] = sum_i x[r, i] w[o, i] + b[o]` over rows `r` of a row-major `[rows, in]` x.
fn naive_linear(x: &[f64], w: &[f64], b: Option<&[f64]>, inp: usize, out: usize) -> Vec<f64> {
    let rows = x.len() / inp.max(1);
    let mut y = vec![0.0; rows * out];
    for r in 0..rows {
        for o in 0..out {
            let mut s = b.map_or(0.0, |b| b[o]);
            for i in 0..inp {
                s += x[r * inp + i] * w[o * inp + i];
            }
            y[r * out + o] = s;
        }
    }
    y
}

#[test]
fn linear_matches_naive_including_views() {
    let vb = VarBuilder::random(1, DType::F32);
    let lin = Linear::new(vb.pp("fc"), 4, 3, true).unwrap();
    assert_eq!(lin.weight.shape(), &[3, 4]);
    assert_eq!(vb.names(), vec!["fc.bias", "fc.weight"]);
    let bound = 0.5;
    assert!(vals(&lin.weight).iter().chain(vals(lin.bias.as_ref().unwrap()).iter()).all(|x| x.abs() < bound));
    let (w, b) = (vals(&lin.weight), vals(lin.bias.as_ref().unwrap()));

    // Batch dims [2, 3, 4].
    let x = tensor(data(24, 2), &[2, 3, 4]);
    let y = lin.forward(&x).unwrap();
    assert_eq!(y.shape(), &[2, 3, 3]);
    assert_close(&vals(&y), &naive_linear(&vals(&x), &w, Some(&b), 4, 3), 1e-5);

    // A permuted (non-contiguous) input: [4, 5] viewed as [5, 4].
    let xt = tensor(data(20, 3), &[4, 5]).t().unwrap();
    assert!(!xt.is_contiguous());
    let y = lin.forward(&xt).unwrap();
    assert_close(&vals(&y), &naive_linear(&vals(&xt), &w, Some(&b), 4, 3), 1e-5);

    // An empty batch and no bias.
    let nb = Linear::new(vb.pp("nb"), 4, 3, false).unwrap();
    assert!(nb.bias.is_none());
    let y = nb.forward(&Tensor::zeros(&[0, 4], DType::F32)).unwrap();
    assert_eq!(y.shape(), &[0, 3]);

    // NaN and Inf propagate.
    let x = tensor(vec![f32::NAN, 0.0, 0.0, 0.0, f32::INFINITY, 0.0, 0.0, 0.0], &[2, 4]);
    let y = vals(&nb.forward(&x).unwrap());
    assert!(y[..3].iter().all(|v| v.is_nan()));
    assert!(y[3..].iter().all(|v| v.is_infinite() || v.is_nan()));

    // Wrong input width is an error, not a panic.
    assert!(lin.forward(&Tensor::zeros(&[2, 5], DType::F32)).is_err());
}

#[allow(clippy::too_many_arguments)]
fn naive_conv(
    x: &[f64],
    xs: [usize; 4],
    w: &[f64],
    ws: [usize; 4],
    b: Option<&[f64]>,
    stride: usize,
    pad: usize,
    dil: usize,
    groups: usize,
) -> (Vec<f64>, [usize; 4]) {
    let [n, c, h, wd] = xs;
    let [o, cg, kh, kw] = ws;
    let oh = (h + 2 * pad - dil * (kh - 1) - 1) / stride + 1;
    let ow = (wd + 2 * pad - dil * (kw - 1) - 1) / stride + 1;
    let og = o / groups;
    let mut y = vec![0.0; n * o * oh * ow];
    for ni in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for yi in 0..oh {
                for xi in 0..ow {
                    let mut s = b.map_or(0.0, |b| b[oc]);
                    for ci in 0..cg {
                        let ic = g * cg + ci;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (yi * stride + ky * dil) as isize - pad as isize;
                                let ix = (xi * stride + kx * dil) as isize - pad as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                s += x[((ni * c + ic) * h + iy as usize) * wd + ix as usize]
                                    * w[((oc * cg + ci) * kh + ky) * kw + kx];
                            }
                        }
                    }
                    y[((ni * o + oc) * oh + yi) * ow + xi] = s;
                }
            }
        }
    }
    (y, [n, o, oh, ow])
}

#[test]
fn conv2d_matches_naive() {
    let vb = VarBuilder::random(2, DType::F32);
    let cfg = Conv2dConfig { stride: [2, 2], padding: [1, 1], dilation: [1, 1], groups: 2, bias: true };
    let conv = Conv2d::new(vb.pp("conv"), 4, 6, 3, cfg).unwrap();
    assert_eq!(conv.weight.shape(), &[6, 2, 3, 3]);
    assert_eq!(vb.num_parameters(), 6 * 2 * 9 + 6);
    // A permuted NHWC buffer viewed as NCHW: non-contiguous.
    let x = tensor(data(2 * 5 * 7 * 4, 9), &[2, 5, 7, 4]).permute(&[0, -1, 1, 2]).unwrap();
    assert_eq!(x.shape(), &[2, 4, 5, 7]);
    let y = conv.forward(&x).unwrap();
    let (want, ws) = naive_conv(
        &vals(&x),
        [2, 4, 5, 7],
        &vals(&conv.weight),
        [6, 2, 3, 3],
        Some(&vals(conv.bias.as_ref().unwrap())),
        2,
        1,
        1,
        2,
    );
    assert_eq!(y.shape(), &ws);
    assert_close(&vals(&y), &want, 1e-5);

    // Dilation 2, no bias, no padding, kaiming-normal init.
    let cfg = Conv2dConfig { dilation: [2, 2], bias: false, ..Default::default() };
    let conv = Conv2d::with_init(vb.pp("d"), 3, 2, 2, cfg, Init::KaimingNormalFanOut).unwrap();
    let x = tensor(data(3 * 6 * 6, 4), &[1, 3, 6, 6]);
    let (want, ws) = naive_conv(&vals(&x), [1, 3, 6, 6], &vals(&conv.weight), [2, 3, 2, 2], None, 1, 0, 2, 1);
    let y = conv.forward(&x).unwrap();
    assert_eq!(y.shape(), &ws);
    assert_close(&vals(&y), &want, 1e-5);

    let bad = Conv2dConfig { groups: 3, ..Default::default() };
    let err = Conv2d::new(vb.pp("bad"), 4, 6, 3, bad).unwrap_err().to_string();
    assert!(err.contains("groups=3"), "{err}");
}

#[test]
fn batch_norm_matches_formula() {
    let vb = VarBuilder::random(0, DType::F32);
    let mut bn = BatchNorm2d::new(vb.pp("bn"), 2, 1e-5).unwrap();
    assert_eq!(vb.num_parameters(), 4, "running stats are buffers");
    assert_eq!(vb.names(), vec!["bn.bias", "bn.running_mean", "bn.running_var", "bn.weight"]);
    // Default stats are identity.
    let x = tensor(data(2 * 2 * 3, 1), &[2, 2, 3, 1]);
    assert_close(&vals(&bn.forward(&x).unwrap()), &vals(&x), 1e-4);
    bn.weight = tensor(vec![2.0, -1.0], &[2]);
    bn.bias = tensor(vec![0.5, 1.0], &[2]);
    bn.running_mean = tensor(vec![1.0, -2.0], &[2]);
    bn.running_var = tensor(vec![4.0, 0.25], &[2]);
    let xv = vals(&x);
    let want: Vec<f64> = (0..12)
        .map(|i| {
            let c = (i / 3) % 2;
            let (w, b, m, v) = [(2.0, 0.5, 1.0, 4.0), (-1.0, 1.0, -2.0, 0.25)][c];
            (xv[i] - m) / (v + 1e-5f64).sqrt() * w + b
        })
        .collect();
    assert_close(&vals(&bn.forward(&x).unwrap()), &want, 1e-5);
    let nan = tensor(vec![f32::NAN, 1.0], &[1, 2, 1, 1]);
    let y = vals(&bn.forward(&nan).unwrap());
    assert!(y[0].is_nan() && y[1].is_finite());
}

#[test]
fn layer_norm_matches_naive() {
    let vb = VarBuilder::random(0, DType::F32);
    let mut ln = LayerNorm::new(vb.pp("ln"), 5, 1e-5).unwrap();
    ln.weight = tensor(vec![1.0, 2.0, 0.5, -1.0, 0.0], &[5]);
    ln.bias = tensor(vec![0.0, 0.1, 0.2, 0.3, 0.4], &[5]);
    // [5, 3] transposed to [3, 5]: non-contiguous rows.
    let x = tensor(data(15, 5), &[5, 3]).t().unwrap();
    let xv = vals(&x);
    let (w, b) = (vals(&ln.weight), vals(&ln.bias));
    let mut want = vec![];
    for r in xv.chunks(5) {
        let m = r.iter().sum::<f64>() / 5.0;
        let v = r.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 5.0;
        want.extend(r.iter().enumerate().map(|(i, x)| (x - m) / (v + 1e-5).sqrt() * w[i] + b[i]));
    }
    assert_close(&vals(&ln.forward(&x).unwrap()), &want, 1e-5);
    // Size-1 normalized axis: x - mean = 0, so the output is the bias.
    let ln1 = LayerNorm::new(vb.pp("one"), 1, 1e-5).unwrap();
    assert_close(&vals(&ln1.forward(&tensor(vec![3.0, -7.0], &[2, 1])).unwrap()), &[0.0, 0.0], 1e-6);
}

#[test]
fn embedding_looks_up_rows() {
    let vb = VarBuilder::random(0, DType::F32);
    let emb = Embedding::new(vb.pp("emb"), 10, 3).unwrap();
    let w = vals(&emb.weight);
    for ids in [
        Tensor::from_vec(vec![0i64, 9, 3, 3, 1, 2], &[2, 3]).unwrap(),
        Tensor::from_vec(vec![0i32, 9, 3, 3, 1, 2], &[2, 3]).unwrap(),
    ] {
        let y = emb.forward(&ids).unwrap();
        assert_eq!(y.shape(), &[2, 3, 3]);
        let want: Vec<f64> = [0usize, 9, 3, 3, 1, 2].iter().flat_map(|&i| w[i * 3..i * 3 + 3].to_vec()).collect();
        assert_eq!(vals(&y), want);
    }
    let y = emb.forward(&Tensor::from_vec(Vec::<i64>::new(), &[0]).unwrap()).unwrap();
    assert_eq!(y.shape(), &[0, 3]);
    assert!(emb.forward(&Tensor::from_vec(vec![10i64], &[1]).unwrap()).is_err());
}

#[test]
fn split_and_merge_heads() {
    let x = tensor((0..24).map(|i| i as f32).collect(), &[1, 3, 8]);
    let s = split_heads(&x, 2).unwrap();
    assert_eq!(s.shape(), &[1, 2, 3, 4]);
    // Head 1, position 2 holds features 4..8 of position 2.
    let sv = vals(&s);
    assert_eq!(&sv[(3 + 2) * 4..(3 + 2) * 4 + 4], &[20.0, 21.0, 22.0, 23.0]);
    assert_eq!(vals(&merge_heads(&s).unwrap()), vals(&x));
    assert!(split_heads(&x, 3).is_err());
    assert!(merge_heads(&tensor(vec![0.0; 4], &[2, 2])).is_err());
}

/// PyTorch MultiheadAttention math, by loops: `[B, L, D]` inputs, row-major.
#[allow(clippy::too_many_arguments)]
fn naive_mha(
    q: &[f64],
    kv: &[f64],
    b: usize,
    lq: usize,
    lk: usize,
    d: usize,
    heads: usize,
    wi: &[f64],
    bi: &[f64],
    wo: &[f64],
    bo: &[f64],
    causal: bool,
) -> Vec<f64> {
    let proj = |x: &[f64], part: usize| {
        naive_linear(x, &wi[part * d * d..(part + 1) * d * d], Some(&bi[part * d..(part + 1) * d]), d, d)
    };
    let (qp, kp, vp) = (proj(q, 0), proj(kv, 1), proj(kv, 2));
    let dh = d / heads;
    let mut ctx = vec![0.0; b * lq * d];
    for bi_ in 0..b {
        for h in 0..heads {
            for i in 0..lq {
                let mut scores: Vec<f64> = (0..lk)
                    .map(|j| {
                        if causal && j > i + (lk - lq) {
                            return f64::NEG_INFINITY;
                        }
                        (0..dh)
                            .map(|e| qp[(bi_ * lq + i) * d + h * dh + e] * kp[(bi_ * lk + j) * d + h * dh + e])
                            .sum::<f64>()
                            / (dh as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                scores.iter_mut().for_each(|s| *s = (*s - m).exp());
                let z: f64 = scores.iter().sum();
                for e in 0..dh {
                    ctx[(bi_ * lq + i) * d + h * dh + e] =
                        (0..lk).map(|j| scores[j] / z * vp[(bi_ * lk + j) * d + h * dh + e]).sum::<f64>();
                }
            }
        }
    }
    naive_linear(&ctx, wo, Some(bo), d, d)
}

#[test]
fn multi_head_attention_matches_naive() {
    let vb = VarBuilder::random(11, DType::F32);
    let mut mha = MultiHeadAttention::new(vb.pp("attn"), 8, 2, false).unwrap();
    assert_eq!(
        vb.names(),
        vec!["attn.in_proj_bias", "attn.in_proj_weight", "attn.out_proj.bias", "attn.out_proj.weight"]
    );
    assert_eq!(vb.num_parameters(), 3 * 64 + 3 * 8 + 64 + 8);
    // Non-zero biases so their slicing is exercised.
    mha.in_proj_bias = tensor(data(24, 12), &[24]);
    let (wi, bi) = (vals(&mha.in_proj_weight), vals(&mha.in_proj_bias));
    let (wo, bo) = (vals(&mha.out_proj.weight), vals(mha.out_proj.bias.as_ref().unwrap()));

    let q = tensor(data(2 * 3 * 8, 13), &[2, 3, 8]);
    let kv = tensor(data(2 * 4 * 8, 14), &[2, 4, 8]);
    let y = mha.forward_qkv(&q, &kv, &kv, None).unwrap();
    assert_eq!(y.shape(), &[2, 3, 8]);
    let want = naive_mha(&vals(&q), &vals(&kv), 2, 3, 4, 8, 2, &wi, &bi, &wo, &bo, false);
    assert_close(&vals(&y), &want, 1e-4);

    // Causal self-attention.
    mha.causal = true;
    let y = mha.forward(&kv).unwrap();
    let want = naive_mha(&vals(&kv), &vals(&kv), 2, 4, 4, 8, 2, &wi, &bi, &wo, &bo, true);
    assert_close(&vals(&y), &want, 1e-4);

    // An additive mask that hides key 0 equals dropping key 0.
    mha.causal = false;
    let mask = tensor(vec![f32::NEG_INFINITY, 0.0, 0.0, 0.0], &[1, 4]);
    let y = mha.forward_qkv(&q, &kv, &kv, Some(&mask)).unwrap();
    let kv_tail = kv.narrow(1, 1, 3).unwrap();
    let want = naive_mha(&vals(&q), &vals(&kv_tail), 2, 3, 3, 8, 2, &wi, &bi, &wo, &bo, false);
    assert_close(&vals(&y), &want, 1e-4);

    assert!(MultiHeadAttention::new(vb.pp("bad"), 8, 3, false).is_err());
}
