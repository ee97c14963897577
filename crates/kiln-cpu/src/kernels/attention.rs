//! Scaled dot-product attention: per batch entry (head), scores `q kᵀ` by gemm, scale, mask and
//! softmax row by row, then the product with `v` by gemm. Heads run in parallel, and queries go
//! in blocks so that the scores of one task stay small even for long sequences.

use super::matmul::gemm_dense;
use super::norm::real::{for_each_row, from_real, to_real, with_real, worth_parallel};
use super::norm::softmax_row;
use kiln_ir::{Element, Error, HostTensor, Layout, Result};

/// `softmax(q kᵀ · scale + mask) v` (semantics in [`kiln_ir::Op::Attention`]). A query row that
/// sees no key (every score -inf) is NaN, as softmax is; with no keys at all (`Lk = 0`) the
/// output is zeros, as the product with an empty `v` is.
pub fn attention(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    mask: Option<&HostTensor>,
    causal: bool,
    scale: Option<f64>,
    shape: &[usize],
) -> Result<HostTensor> {
    let r = q.shape().len();
    let bad = || {
        Error::Shape(format!(
            "attention: needs q [.., Lq, D], k [.., Lk, D], v [.., Lk, Dv] of one rank, got {:?}, {:?}, {:?} (output {shape:?})",
            q.shape(),
            k.shape(),
            v.shape()
        ))
    };
    if r < 2 || k.shape().len() != r || v.shape().len() != r || shape.len() != r {
        return Err(bad());
    }
    let (lq, d) = (q.shape()[r - 2], q.shape()[r - 1]);
    let (lk, dv) = (k.shape()[r - 2], v.shape()[r - 1]);
    if k.shape()[r - 1] != d || v.shape()[r - 2] != lk || shape[r - 2..] != [lq, dv] {
        return Err(bad());
    }
    if q.dtype() != k.dtype() || q.dtype() != v.dtype() || mask.is_some_and(|m| m.dtype() != q.dtype()) {
        return Err(Error::DType(format!("attention: q, k, v and mask must share one dtype, q is {}", q.dtype())));
    }
    super::norm::real::ensure_float(q, "attention")?;
    let batch = &shape[..r - 2];
    let numel: usize = shape.iter().product();
    if numel == 0 || lk == 0 {
        return Ok(HostTensor::zeros(q.dtype(), shape));
    }
    // Per output batch index: where each operand's [L, D] block starts in its dense copy.
    let q_at = batch_offsets(q.shape(), batch)?;
    let k_at = batch_offsets(k.shape(), batch)?;
    let v_at = batch_offsets(v.shape(), batch)?;
    let mask_at = match mask {
        Some(m) => {
            let mut scores = batch.to_vec();
            scores.extend([lq, lk]);
            let l = Layout::contiguous(m.shape()).broadcast_to(&scores).map_err(|e| {
                Error::Shape(format!("attention: mask {:?} must broadcast to the scores {scores:?} ({e})", m.shape()))
            })?;
            let nb = batch.len();
            let starts = Layout { shape: batch.to_vec(), strides: l.strides[..nb].to_vec(), offset: 0 }.offsets();
            Some((starts, l.strides[nb] as usize, l.strides[nb + 1] as usize))
        }
        None => None,
    };
    let scale = scale.unwrap_or(if d == 0 { 1.0 } else { 1.0 / (d as f64).sqrt() });
    // Query rows per block: bounds the scores buffer of one task to about 2^20 elements.
    let block = ((1usize << 20) / lk).clamp(1, lq);
    let batches = numel / (lq * dv);
    with_real!(q.dtype(), F, {
        let (qd, kd, vd) = (to_real::<F>(q)?, to_real::<F>(k)?, to_real::<F>(v)?);
        let md = mask.map(to_real::<F>).transpose()?;
        let scale = F::from_f64(scale);
        let mut out = vec![F::zero(); numel];
        // Batch entries (heads) run in parallel; gemm splits a lone large one itself.
        let par = batches > 1 && worth_parallel(batches * lq * lk * (d + dv));
        for_each_row(&mut out, lq * dv, par, |b, out_b| {
            // With D = 0 the q/k blocks are empty and their offsets may point past the data.
            let (qb, kb): (&[F], &[F]) =
                if d == 0 { (&[], &[]) } else { (&qd[q_at[b]..][..lq * d], &kd[k_at[b]..][..lk * d]) };
            let vb = &vd[v_at[b]..][..lk * dv];
            let mut kt = vec![F::zero(); d * lk];
            for (j, krow) in kb.chunks_exact(d.max(1)).enumerate() {
                for (c, &x) in krow.iter().enumerate() {
                    kt[c * lk + j] = x;
                }
            }
            let mut scores = vec![F::zero(); block * lk];
            for i0 in (0..lq).step_by(block) {
                let rows = block.min(lq - i0);
                let scores = &mut scores[..rows * lk];
                gemm_dense(rows, lk, d, scores, &qb[(i0 * d).min(qb.len())..], &kt, false)?;
                for (r, row) in scores.chunks_exact_mut(lk).enumerate() {
                    let i = i0 + r;
                    for s in row.iter_mut() {
                        *s *= scale;
                    }
                    if let (Some(md), Some((starts, si, sj))) = (&md, &mask_at) {
                        let base = starts[b] + i * si;
                        for (j, s) in row.iter_mut().enumerate() {
                            *s += md[base + j * sj];
                        }
                    }
                    if causal {
                        // Query i sees keys j <= i + (Lk - Lq).
                        let visible = (i + lk + 1).saturating_sub(lq).min(lk);
                        row[visible..].fill(F::NEG_INFINITY);
                    }
                    softmax_row(row, false);
                }
                gemm_dense(rows, dv, lk, &mut out_b[i0 * dv..(i0 + rows) * dv], scores, vb, false)?;
            }
            Ok(())
        })?;
        from_real(out, q.dtype(), shape)
    })
}

/// For each index of the output batch dims `batch`, where the `[.., L, D]` block of a dense
/// tensor of shape `t` starts (its batch dims broadcast to `batch`).
fn batch_offsets(t: &[usize], batch: &[usize]) -> Result<Vec<usize>> {
    let nb = batch.len();
    let mut full = batch.to_vec();
    full.extend_from_slice(&t[nb..]);
    let l = Layout::contiguous(t).broadcast_to(&full).map_err(|e| {
        Error::Shape(format!("attention: operand {t:?} does not broadcast to the batch dims {batch:?} ({e})"))
    })?;
    Ok(Layout { shape: batch.to_vec(), strides: l.strides[..nb].to_vec(), offset: 0 }.offsets())
}
