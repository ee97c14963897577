//! The attention step (`Op::Attention`, kept whole by the optimiser where [`runs_composite`]
//! says so) run in place on its buffers: q, k, v and the mask are read through their views —
//! bert's q, k, v are permuted slices of the fused QKV matmul's output, so nothing is copied —
//! and each task takes one batch entry's block of query rows: scores `q kᵀ` on one thread,
//! scale, mask and causal limit, softmax row by row while the scores are in cache, then the
//! product with `v` written into the output. One step instead of the decomposed graph's three
//! (scores matmul + softmax, product, and the reads of the scores between them).

use super::matmul::{batch_index, batch_offset};
use crate::kernels::matmul::raw_gemm;
use crate::kernels::norm::softmax_row;
use kiln_ir::{DType, Error, Op, Result, TensorType};
use kiln_sched::BufView;

/// Scores per task, at most (query rows x keys): a task's scores stay in L2.
const SCORES_PER_TASK: usize = 1 << 15;

/// Whether the CPU runner takes `op` on inputs of types `tys` whole (the optimiser then keeps
/// it rather than decomposing it): f32 attention of fixed shapes, q, k and v of one rank >= 3.
/// `KILN_CPU_ATTENTION=0` turns this off (attention is then decomposed into matmuls and a
/// softmax, which fuse as the matmul's row epilogue).
pub fn runs_composite(op: &Op, tys: &[&TensorType]) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("KILN_CPU_ATTENTION").map_or(true, |v| v != "0"));
    let Op::Attention { .. } = op else { return false };
    let Some(shapes) = tys.iter().map(|t| t.shape.as_fixed()).collect::<Option<Vec<_>>>() else {
        return false;
    };
    on && (3..=4).contains(&tys.len())
        && tys.iter().all(|t| t.dtype == DType::F32)
        && shapes[0].len() >= 3
        && shapes[1].len() == shapes[0].len()
        && shapes[2].len() == shapes[0].len()
}

/// Runs `softmax(q kᵀ · scale + mask [+ causal]) v` (semantics in [`kiln_ir::Op::Attention`])
/// from the views `inputs` (q, k, v, optional mask) into `out` of shape `out_shape`, element
/// `[i0, i1, ..]` at `Σ ik * out_strides[k]` (dense strides, or the heads' merge that
/// `kiln_sched::write_attention_through_copies` folded in).
///
/// # Safety
/// Every view lies inside a live f32 buffer (`Executable::new` checks this); `out` holds
/// `out_shape`'s elements, `out_strides` lay them out as a permutation of a dense layout, and
/// `out` overlaps no input.
pub(crate) unsafe fn run(
    causal: bool,
    scale: Option<f64>,
    inputs: &[BufView],
    ptrs: &[*mut u8],
    out: *mut f32,
    out_shape: &[usize],
    out_strides: &[usize],
) -> Result<()> {
    let (q, k, v, mask) = match inputs {
        [q, k, v] => (q, k, v, None),
        [q, k, v, m] => (q, k, v, Some(m)),
        _ => return Err(Error::Graph(format!("attention step: needs 3 or 4 inputs, has {}", inputs.len()))),
    };
    let r = out_shape.len();
    let bad = || {
        Error::Shape(format!(
            "attention step: q {:?}, k {:?}, v {:?} do not make the output {out_shape:?}",
            q.shape, k.shape, v.shape
        ))
    };
    if r < 3 || out_strides.len() != r || [q, k, v].iter().any(|x| x.shape.len() != r) {
        return Err(bad());
    }
    let (lq, d, lk, dv) = (q.shape[r - 2], q.shape[r - 1], k.shape[r - 2], v.shape[r - 1]);
    if k.shape[r - 1] != d || v.shape[r - 2] != lk || out_shape[r - 2..] != [lq, dv] {
        return Err(bad());
    }
    let batch = &out_shape[..r - 2];
    for x in [q, k, v] {
        if x.shape[..r - 2].iter().zip(batch).any(|(&a, &b)| a != b && a != 1) {
            return Err(bad());
        }
    }
    let numel: usize = out_shape.iter().product();
    if numel == 0 {
        return Ok(());
    }
    if lk == 0 {
        // SAFETY: `out` holds `numel` elements (the caller's contract), all of them written.
        unsafe { std::slice::from_raw_parts_mut(out, numel).fill(0.0) };
        return Ok(());
    }
    let mask = mask.map(|m| MaskView::new(m, batch, lq, lk)).transpose()?;
    let scale = scale.unwrap_or(if d == 0 { 1.0 } else { 1.0 / (d as f64).sqrt() }) as f32;
    let batches = numel / (lq * dv);
    let block = (SCORES_PER_TASK / lk).clamp(1, lq);
    let blocks = lq.div_ceil(block);
    let at = |x: &BufView| ptrs[x.buf.index()] as usize;
    let (pq, pk, pv, pm, po) = (at(q), at(k), at(v), mask.as_ref().map_or(0, |m| at(m.view)), out as usize);
    let s = |x: &BufView, i: usize| x.strides[r - 2 + i] as isize;
    crate::par::for_each_task(batches * blocks, |t| {
        let (b, i0) = (t / blocks, (t % blocks) * block);
        let rows = block.min(lq - i0);
        let idx = batch_index(batch, b);
        let mut scores = vec![0f32; rows * lk];
        // SAFETY: every offset below stays inside the views the caller vouched for: rows
        // i0..i0 + rows of query block b, all keys and values of entry b, and this task's own
        // rows of the output (tasks write disjoint rows: the output strides are a permutation
        // of a dense layout).
        unsafe {
            let qb = (pq as *const f32).add(batch_offset(q, &idx) + i0 * q.strides[r - 2]);
            let kb = (pk as *const f32).add(batch_offset(k, &idx));
            let vb = (pv as *const f32).add(batch_offset(v, &idx));
            if d > 0 {
                // scores[i, j] = Σ_c q[i, c] k[j, c]: k read transposed through its strides.
                raw_gemm(rows, lk, d, scores.as_mut_ptr(), lk as isize, 1, false, qb, s(q, 0), s(q, 1), kb, s(k, 1), s(k, 0), false);
            }
            for (ri, row) in scores.chunks_exact_mut(lk).enumerate() {
                let i = i0 + ri;
                for x in row.iter_mut() {
                    *x *= scale;
                }
                if let Some(m) = &mask {
                    let base = (pm as *const f32).add(m.offset(&idx, i));
                    for (j, x) in row.iter_mut().enumerate() {
                        *x += *base.add(j * m.sj);
                    }
                }
                if causal {
                    // Query i sees keys j <= i + (Lk - Lq).
                    let visible = (i + lk + 1).saturating_sub(lq).min(lk);
                    row[visible..].fill(f32::NEG_INFINITY);
                }
                softmax_row(row, false);
            }
            let out_at: usize = idx.iter().zip(out_strides).map(|(a, s)| a * s).sum();
            let ob = (po as *mut f32).add(out_at + i0 * out_strides[r - 2]);
            let (os_r, os_c) = (out_strides[r - 2] as isize, out_strides[r - 1] as isize);
            raw_gemm(rows, dv, lk, ob, os_r, os_c, false, scores.as_ptr(), lk as isize, 1, vb, s(v, 0), s(v, 1), false);
        }
    });
    Ok(())
}

/// The mask's view broadcast to the scores `[batch.., Lq, Lk]` (its dims right-aligned).
struct MaskView<'a> {
    view: &'a BufView,
    /// Element strides along the scores' batch dims, Lq and Lk (0 where the mask broadcasts).
    sb: Vec<usize>,
    si: usize,
    sj: usize,
}

impl<'a> MaskView<'a> {
    fn new(view: &'a BufView, batch: &[usize], lq: usize, lk: usize) -> Result<MaskView<'a>> {
        let mut full = batch.to_vec();
        full.extend([lq, lk]);
        let (n, m) = (full.len(), view.shape.len());
        let fits = m <= n && view.shape.iter().zip(&full[n - m..]).all(|(&a, &b)| a == b || a == 1);
        if !fits {
            return Err(Error::Shape(format!("attention step: mask {:?} does not broadcast to the scores {full:?}", view.shape)));
        }
        let stride = |dim: usize| match (dim + m).checked_sub(n) {
            Some(md) if view.shape[md] != 1 => view.strides[md],
            _ => 0,
        };
        Ok(MaskView { view, sb: (0..n - 2).map(stride).collect(), si: stride(n - 2), sj: stride(n - 1) })
    }

    /// Element offset of row `i` of batch entry `idx`.
    fn offset(&self, idx: &[usize], i: usize) -> usize {
        self.view.offset + idx.iter().zip(&self.sb).map(|(a, s)| a * s).sum::<usize>() + i * self.si
    }
}
