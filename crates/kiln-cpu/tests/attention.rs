//! Scaled dot-product attention against a naive f64 reference (scores, mask, causal mask,
//! softmax, product with v), with broadcasting batch dims, masks, layouts and dtypes.

mod common_kernels;

use common_kernels::*;
use kiln_cpu::eval;
use kiln_ir::{DType, Error, HostTensor, Op};

/// Index of the element of a tensor of `shape` that broadcasts to `idx` (right-aligned).
fn bcast_index(idx: &[usize], shape: &[usize]) -> usize {
    let lead = idx.len() - shape.len();
    let own: Vec<usize> = shape.iter().enumerate().map(|(a, &n)| if n == 1 { 0 } else { idx[lead + a] }).collect();
    ravel(&own, shape)
}

/// Naive attention in f64 over the broadcast batch `batch`.
fn naive(q: &HostTensor, k: &HostTensor, v: &HostTensor, mask: Option<&HostTensor>, causal: bool, scale: Option<f64>) -> (Vec<usize>, Vec<f64>) {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let r = qs.len();
    let (lq, d, lk, dv) = (qs[r - 2], qs[r - 1], ks[r - 2], vs[r - 1]);
    let batch: Vec<usize> = (0..r - 2).map(|a| qs[a].max(ks[a]).max(vs[a])).collect();
    let (qv, kv, vv) = (q.to_f64_vec(), k.to_f64_vec(), v.to_f64_vec());
    let mv = mask.map(|m| m.to_f64_vec());
    let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
    let nb: usize = batch.iter().product();
    let mut shape = batch.clone();
    shape.extend([lq, dv]);
    let mut out = vec![0.0; nb * lq * dv];
    for b in 0..nb {
        let bi = unravel(b, &batch);
        let at = |sh: &[usize], i: usize, j: usize| {
            let mut idx = bi.clone();
            idx.extend([i, j]);
            bcast_index(&idx, sh)
        };
        for i in 0..lq {
            let mut s: Vec<f64> = (0..lk)
                .map(|j| {
                    let dot: f64 = (0..d).map(|c| qv[at(qs, i, c)] * kv[at(ks, j, c)]).sum();
                    let mut x = dot * scale;
                    if let (Some(m), Some(mv)) = (mask, &mv) {
                        x += mv[at(m.shape(), i, j)];
                    }
                    if causal && j as i64 > i as i64 + lk as i64 - lq as i64 {
                        x = f64::NEG_INFINITY;
                    }
                    x
                })
                .collect();
            if lk > 0 {
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = s.iter().map(|x| (x - m).exp()).sum();
                s.iter_mut().for_each(|x| *x = (*x - m).exp() / sum);
            }
            for c in 0..dv {
                out[(b * lq + i) * dv + c] = (0..lk).map(|j| s[j] * vv[at(vs, j, c)]).sum();
            }
        }
    }
    (shape, out)
}

fn rand(dtype: DType, shape: &[usize], seed: u64) -> HostTensor {
    tensor(dtype, &noise(shape.iter().product(), seed, 2.0), shape)
}

fn attn(q: &HostTensor, k: &HostTensor, v: &HostTensor, mask: Option<&HostTensor>, causal: bool, scale: Option<f64>) -> kiln_ir::Result<HostTensor> {
    let mut ins = vec![q, k, v];
    ins.extend(mask);
    eval(&Op::Attention { causal, scale }, &ins)
}

/// Compares the kernel with [`naive`]; `mode` is `(causal, scale)`.
fn check(q: &HostTensor, k: &HostTensor, v: &HostTensor, mask: Option<&HostTensor>, mode: (bool, Option<f64>), rtol: f64, what: &str) {
    let (causal, scale) = mode;
    let (shape, want) = naive(q, k, v, mask, causal, scale);
    let out = attn(q, k, v, mask, causal, scale).unwrap();
    assert_eq!(out.shape(), shape.as_slice(), "{what}");
    assert_eq!(out.dtype(), q.dtype());
    assert_close(&out.to_f64_vec(), &want, rtol, rtol, what);
}

#[test]
fn attention_matches_naive_with_and_without_causal_mask() {
    let (q, k, v) = (rand(DType::F64, &[2, 3, 4, 8], 1), rand(DType::F64, &[2, 3, 6, 8], 2), rand(DType::F64, &[2, 3, 6, 5], 3));
    for causal in [false, true] {
        for scale in [None, Some(0.3)] {
            check(&q, &k, &v, None, (causal, scale), 1e-12, &format!("causal {causal} scale {scale:?}"));
        }
    }
    // Lq == Lk causal: the usual lower-triangular mask; rank 2 (no batch dims).
    let (q, k, v) = (rand(DType::F32, &[5, 16], 4), rand(DType::F32, &[5, 16], 5), rand(DType::F32, &[5, 3], 6));
    check(&q, &k, &v, None, (true, None), 1e-5, "square causal");
    // Query 0 sees only key 0, so its output is v[0].
    let out = attn(&q, &k, &v, None, true, None).unwrap().to_f64_vec();
    assert_close(&out[..3], &v.to_f64_vec()[..3], 1e-6, 0.0, "first causal row");
}

#[test]
fn attention_broadcasts_batch_dims_and_masks() {
    let q = rand(DType::F32, &[2, 4, 3, 8], 7);
    let k = rand(DType::F32, &[1, 4, 5, 8], 8);
    let v = rand(DType::F32, &[2, 1, 5, 6], 9);
    // Masks: per (query, key), per key for each batch (padding mask), and with -inf entries.
    let inf = f64::NEG_INFINITY;
    let m_qk = tensor(DType::F32, &noise(15, 10, 3.0), &[3, 5]);
    let m_pad = tensor(DType::F32, &[0.0, 0.0, 0.0, inf, inf, 0.0, inf, 0.0, 0.0, 0.0], &[2, 1, 1, 5]);
    let m_full = rand(DType::F32, &[2, 4, 3, 5], 11);
    for (i, m) in [m_qk, m_pad, m_full].iter().enumerate() {
        for causal in [false, true] {
            check(&q, &k, &v, Some(m), (causal, None), 1e-5, &format!("mask {i} causal {causal}"));
        }
    }
}

#[test]
fn attention_on_non_contiguous_inputs_and_every_float_dtype() {
    for (dtype, rtol) in [(DType::F32, 1e-5), (DType::F64, 1e-12), (DType::F16, 3e-3), (DType::BF16, 2e-2)] {
        let q = rand(dtype, &[2, 3, 4], 12);
        let k = rand(dtype, &[2, 5, 4], 13);
        let v = rand(dtype, &[2, 5, 3], 14);
        let m = rand(dtype, &[3, 5], 15);
        check(&q, &k, &v, Some(&m), (false, None), rtol, &format!("{dtype} dense"));
        check(&transposed(&q), &strided(&k), &reversed(&v), Some(&transposed(&m)), (true, Some(1.5)), rtol, &format!("{dtype} views"));
        // k as a permuted view of a [2, 4, 5] tensor (what `k.transpose(-1, -2)` of kᵀ gives).
        let kt = eval(&Op::Permute(vec![0, 2, 1]), &[&rand(dtype, &[2, 4, 5], 16)]).unwrap();
        check(&q, &kt, &v, None, (false, None), rtol, &format!("{dtype} permuted k"));
    }
}

#[test]
fn attention_edge_cases() {
    let nan = f64::NAN;
    // Lq > Lk with causal: query i sees keys j <= i - 2, so the first two rows see nothing (NaN).
    let (q, k, v) = (rand(DType::F32, &[4, 2], 17), rand(DType::F32, &[2, 2], 18), rand(DType::F32, &[2, 3], 19));
    let out = attn(&q, &k, &v, None, true, None).unwrap().to_f64_vec();
    assert!(out[..6].iter().all(|x| x.is_nan()), "{out:?}");
    check(&q.with_layout(q.layout.slice(0, 2, 4, 1).unwrap()), &k, &v, None, (false, None), 1e-5, "tail rows");
    assert_close(&out[6..9], &v.to_f64_vec()[..3], 1e-6, 0.0, "row 2 sees key 0");
    // A fully masked row is NaN, as softmax of all -inf is.
    let m = tensor(DType::F32, &[f64::NEG_INFINITY, f64::NEG_INFINITY, 0.0, 0.0], &[2, 2]);
    let out = attn(&k, &k, &v, Some(&m), false, None).unwrap().to_f64_vec();
    assert!(out[..3].iter().all(|x| x.is_nan()) && out[3..].iter().all(|x| x.is_finite()), "{out:?}");
    // NaN in q poisons that row only.
    let qn = tensor(DType::F32, &[nan, 1.0, 0.5, 0.5], &[2, 2]);
    let out = attn(&qn, &k, &v, None, false, None).unwrap().to_f64_vec();
    assert!(out[..3].iter().all(|x| x.is_nan()) && out[3..].iter().all(|x| x.is_finite()));
    // Empty dims: no queries, no keys (zeros, as the product with an empty v), empty batch, D = 0.
    let e = attn(&rand(DType::F32, &[0, 2], 1), &k, &v, None, false, None).unwrap();
    assert_eq!(e.shape(), &[0, 3]);
    let z = attn(&q, &rand(DType::F32, &[0, 2], 1), &rand(DType::F32, &[0, 3], 1), None, true, None).unwrap();
    assert_eq!((z.shape(), z.to_f64_vec()), (&[4usize, 3][..], vec![0.0; 12]));
    let b0 = attn(&rand(DType::F32, &[0, 4, 2], 1), &rand(DType::F32, &[1, 2, 2], 1), &rand(DType::F32, &[1, 2, 3], 1), None, false, None).unwrap();
    assert_eq!(b0.shape(), &[0, 4, 3]);
    let d0 = attn(&rand(DType::F32, &[3, 0], 1), &rand(DType::F32, &[2, 0], 1), &v, None, false, None).unwrap();
    let vv = v.to_f64_vec();
    let mean: Vec<f64> = (0..3).map(|c| (vv[c] + vv[3 + c]) / 2.0).collect();
    assert_close(&d0.to_f64_vec(), &mean.repeat(3), 1e-6, 1e-7, "D = 0 averages v");
    // Size-1 everything.
    let one = tensor(DType::F64, &[2.0], &[1, 1, 1]);
    assert_eq!(attn(&one, &one, &one, None, true, None).unwrap().to_f64_vec(), vec![2.0]);
    // Bad inputs are rejected by inference.
    let i = ramp_tensor(DType::I32, &[2, 2]);
    assert!(matches!(attn(&i, &i, &i, None, false, None), Err(Error::DType(_))));
    assert!(matches!(attn(&q, &rand(DType::F32, &[2, 3], 1), &v, None, false, None), Err(Error::Shape(_))));
    assert!(matches!(attn(&q, &k, &v, Some(&rand(DType::F32, &[3, 2], 1)), false, None), Err(Error::Shape(_))));
}

#[test]
fn large_attention_is_correct_on_the_parallel_path() {
    let (b, h, l, d) = (2, 4, 64, 32);
    let q = rand(DType::F32, &[b, h, l, d], 20);
    let k = rand(DType::F32, &[b, h, l, d], 21);
    let v = rand(DType::F32, &[b, h, l, d], 22);
    let m = tensor(DType::F32, &(0..b * l).map(|i| if i % 7 == 3 { f64::NEG_INFINITY } else { 0.0 }).collect::<Vec<_>>(), &[b, 1, 1, l]);
    check(&q, &k, &v, Some(&m), (true, None), 1e-5, "large causal masked");
}
