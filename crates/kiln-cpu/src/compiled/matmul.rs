//! The MatMul extern: batched (broadcast batch dims) f32 GEMM on strided views, written
//! straight into the output buffer, with the epilogue run on each block of finished rows.

use super::steps::Epi;
use crate::gemm::PackedRhs;
use kiln_ir::{Error, Result};
use kiln_sched::{BufId, BufView};
use std::sync::OnceLock;

/// Multiply-adds below which one gemm call stays on one thread (as `kernels::matmul`).
const PAR_WORK: usize = 1 << 18;

/// Multiply-adds per matrix up to which a batched product runs its matrices side by side,
/// each on one thread.
const SMALL_WORK: usize = 1 << 22;

/// Runs `out = a @ b` (see [`kiln_sched::ExternOp::MatMul`]), `block_rows` output rows per
/// GEMM call when given (the autotuner's choice), else the heuristic below. With `packed`
/// (see `prepack`: a constant `b` without batch dims of its own, an `a` with unit column
/// stride) the product runs on kiln's GEMM with `b` packed on the first run.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    inputs: &[BufView],
    ptrs: &[*mut u8],
    out: BufId,
    out_shape: &[usize],
    epi: &Epi,
    block_rows: Option<usize>,
    packed: Option<&OnceLock<PackedRhs>>,
) -> Result<()> {
    let ctx = || {
        let shapes: Vec<&[usize]> = inputs.iter().map(|v| &v.shape[..]).collect();
        format!("matmul extern {shapes:?} -> {out_shape:?}")
    };
    let [a, b] = inputs else {
        return Err(Error::Graph(format!("{}: needs 2 inputs", ctx())));
    };
    let (ra, rb, ro) = (a.shape.len(), b.shape.len(), out_shape.len());
    if ra < 2 || rb < 2 || ro < 2 {
        return Err(Error::Shape(format!(
            "{}: operands and result need rank >= 2",
            ctx()
        )));
    }
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    if b.shape[rb - 2] != k || out_shape[ro - 2..] != [m, n] {
        return Err(Error::Shape(format!(
            "{}: inner or result dims do not fit",
            ctx()
        )));
    }
    let batch = &out_shape[..ro - 2];
    for v in [a, b] {
        let lead = &v.shape[..v.shape.len() - 2];
        let fits = lead.len() <= batch.len()
            && lead
                .iter()
                .zip(&batch[batch.len() - lead.len()..])
                .all(|(&d, &o)| d == o || d == 1);
        if !fits {
            return Err(Error::Shape(format!(
                "{}: batch dims {lead:?} do not broadcast to {batch:?}",
                ctx()
            )));
        }
    }
    let batches: usize = batch.iter().product();
    epi.check_rows(batches * m)?;
    // Without an epilogue one call per matrix packs `b` once; with one, row blocks keep the
    // finished rows in cache for it (up to 2 MB of them: bert's [128, 3072] is one block, as
    // every extra block packs all of `b` again).
    let block = match block_rows {
        Some(b) => b.min(m).max(1),
        None if epi.present() => ((1usize << 19) / n.max(1)).max(64).min(m).max(1),
        None => m.max(1),
    };
    let (pa, pb, po) = (
        ptrs[a.buf.index()] as *const f32,
        ptrs[b.buf.index()] as *const f32,
        ptrs[out.index()] as *mut f32,
    );
    // `prepack` gives a cell only where `packs` holds; checked again as the GEMM relies on it.
    let packed = packed.filter(|_| packs(a, b));
    // Many small products (attention's heads, 128 x 64 x 128 in bert-base): one matrix per
    // task, each on one thread with its rows' epilogue (a softmax), rather than each split
    // over the pool in turn.
    if packed.is_none() && batches >= 2 && m * n * k > 0 && m * n * k <= SMALL_WORK && rayon::current_num_threads() > 1 {
        let (pa, pb, po) = (pa as usize, pb as usize, po as usize);
        let failed = std::sync::Mutex::new(None);
        crate::par::for_each_task(batches, |bi| {
            let (oa, ob) = matrix_offsets(a, b, batch, bi);
            // SAFETY: as the loop below; each task writes only its own matrix of the output.
            unsafe {
                crate::kernels::matmul::raw_gemm(
                    m,
                    n,
                    k,
                    (po as *mut f32).add(bi * m * n),
                    n as isize,
                    1,
                    false,
                    (pa as *const f32).add(oa),
                    a.strides[ra - 2] as isize,
                    a.strides[ra - 1] as isize,
                    (pb as *const f32).add(ob),
                    b.strides[rb - 2] as isize,
                    b.strides[rb - 1] as isize,
                    false,
                )
            }
            if let Err(e) = epi.rows_here(bi * m, (bi + 1) * m) {
                failed.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
            }
        });
        return match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        };
    }
    for bi in 0..batches {
        let (oa, ob) = matrix_offsets(a, b, batch, bi);
        for r0 in (0..m).step_by(block) {
            let r1 = (r0 + block).min(m);
            // SAFETY: `Executable::new` checked both views inside their buffers and the
            // output buffer holds `batches * m * n` elements; rows r0..r1 of matrix `bi`
            // are a sub-view of each.
            unsafe {
                let dst = po.add((bi * m + r0) * n);
                let lhs = pa.offset(oa as isize + r0 as isize * a.strides[ra - 2] as isize);
                let packed = packed.map(|cell| {
                    cell.get_or_init(|| {
                        PackedRhs::pack(r1 - r0, k, n, pb.add(ob), b.strides[rb - 2] as isize, b.strides[rb - 1] as isize)
                    })
                });
                // Strassen's product declines rows holding an infinity or NaN: those run here.
                if !packed.is_some_and(|rhs| rhs.gemm(r1 - r0, lhs, a.strides[ra - 2], dst, n)) {
                    sgemm(
                        r1 - r0,
                        n,
                        k,
                        dst,
                        n as isize,
                        lhs,
                        a.strides[ra - 2] as isize,
                        a.strides[ra - 1] as isize,
                        pb.add(ob),
                        b.strides[rb - 2] as isize,
                        b.strides[rb - 1] as isize,
                    )
                }
            }
            epi.rows(bi * m + r0, bi * m + r1)?;
        }
    }
    Ok(())
}

/// Whether kiln's GEMM can take `a @ b` with `b` packed once: `a` (rank >= 2) has unit column
/// stride (or at most one column) and `b` (rank >= 2) has no batch dims of its own.
pub(crate) fn packs(a: &BufView, b: &BufView) -> bool {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    ra >= 2
        && rb >= 2
        && (a.strides[ra - 1] == 1 || a.shape[ra - 1] <= 1)
        && b.shape[..rb - 2].iter().all(|&d| d == 1)
}

/// Element offsets in `a` and `b` of the matrices that make output matrix `bi` (row-major
/// over the output's batch dims `batch`).
fn matrix_offsets(a: &BufView, b: &BufView, batch: &[usize], bi: usize) -> (usize, usize) {
    let idx = batch_index(batch, bi);
    (batch_offset(a, &idx), batch_offset(b, &idx))
}

/// The index over the batch dims `batch` of matrix `bi` (row-major).
pub(crate) fn batch_index(batch: &[usize], bi: usize) -> Vec<usize> {
    let mut idx = vec![0usize; batch.len()];
    let mut rem = bi;
    for d in (0..batch.len()).rev() {
        idx[d] = rem % batch[d];
        rem /= batch[d];
    }
    idx
}

/// Element offset of matrix `idx` (output batch index) in a view whose batch dims broadcast.
pub(crate) fn batch_offset(v: &BufView, idx: &[usize]) -> usize {
    let lead = v.shape.len() - 2;
    let pad = idx.len() - lead;
    (0..lead)
        .map(|d| {
            if v.shape[d] == 1 {
                0
            } else {
                idx[pad + d] * v.strides[d]
            }
        })
        .sum::<usize>()
        + v.offset
}

/// Dense-row `dst[m, n]` (row stride `dst_rs`) `= lhs[m, k] @ rhs[k, n]` with any operand
/// strides; zeros when `k == 0`. Threaded inside gemm when the product is large.
///
/// # Safety
/// Every element the strides reach must be inside live allocations; `dst` must not overlap
/// `lhs` or `rhs`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: isize,
    lhs: *const f32,
    lhs_rs: isize,
    lhs_cs: isize,
    rhs: *const f32,
    rhs_rs: isize,
    rhs_cs: isize,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                // SAFETY: inside the caller's dst bounds.
                unsafe { dst.offset(i as isize * dst_rs + j as isize).write(0.0) };
            }
        }
        return;
    }
    // The reference kernels' GEMM driver: one single-threaded gemm per thread on a block of
    // the larger output dim (gemm's own threading stalls on conv-shaped products).
    // SAFETY: forwarded from the caller.
    unsafe {
        crate::kernels::matmul::raw_gemm(
            m, n, k, dst, dst_rs, 1, false, lhs, lhs_rs, lhs_cs, rhs, rhs_rs, rhs_cs, m * n * k >= PAR_WORK,
        )
    }
}
