//! The conv extern's loops that are not GEMM: im2col (gathering patches into the scratch
//! matrix) and the depthwise direct convolution. Both find, once per (row, tap), the span of
//! output positions whose input lies inside the image, so the inner loops are plain copies or
//! multiply-adds over slices with no per-element bounds test.

use super::conv::Geom;
use crate::gemm::{PANEL, gather_row};
use kiln_sched::BufView;
use crate::par::{for_each_chunk_mut, for_each_task};

/// f32 elements below which a rayon task is not worth its scheduling.
const MIN_TASK: usize = 1 << 14;

/// The output positions `lo..hi` (of `0..out`) whose input position
/// `o * stride + off - pad` lies inside `0..len` (`off` is the tap times the dilation).
#[inline]
pub(super) fn span(
    out: usize,
    stride: usize,
    off: usize,
    pad: usize,
    len: usize,
) -> (usize, usize) {
    let lo = pad.saturating_sub(off).div_ceil(stride);
    let hi = (len + pad).saturating_sub(off).div_ceil(stride).min(out);
    (lo.min(hi), hi)
}

/// Fills `col` (`[Cg*KH*KW, OH*OW]`) with the patches of one (image, group) whose first
/// channel starts at element `x_off`: row `(c, i, j)` holds the input element kernel tap
/// `(i, j)` of channel `c` sees at every output pixel (zero in the padding).
pub(super) fn im2col(g: &Geom, x: &BufView, px: *const f32, x_off: usize, col: &mut [f32]) {
    let (p, k) = (g.p(), g.k());
    if p == 0 || k == 0 {
        return;
    }
    // Rows are independent and im2col is memory-bound: filled in parallel, several rows per
    // task when rows are short. The address travels as usize (raw pointers are not Send).
    let rows_per_task = (MIN_TASK / p).max(1);
    let base = px as usize;
    for_each_chunk_mut(&mut col[..k * p], rows_per_task * p, |t, chunk| {
        for (d, row) in chunk.chunks_exact_mut(p).enumerate() {
            im2col_row(g, x, base as *const f32, x_off, t * rows_per_task + d, row);
        }
    });
}

/// Fills `out` with the im2col matrix of one (image, group) (see [`im2col`]) laid out as
/// kiln's GEMM reads a right-hand side in panels ([`crate::gemm::gemm_a_panels`]): panel `q`,
/// pixels `16q..16q+16`, holds the matrix's K rows of 16 values; the last panel's lanes past
/// the last pixel are left as they are. Filled a block of rows at a time (each tap of a
/// channel reads that channel's plane in order), the block then copied panel by panel (a
/// contiguous run of each), so the GEMM reads the matrix where it lies instead of copying it
/// into panels once more. (Gathered
/// into each block of panels as the GEMM went, the image's rows came from memory in an order
/// the prefetcher did not foresee: a stride-2 3x3 conv ran slower on two threads.)
pub(super) fn im2col_panels(g: &Geom, x: &BufView, px: *const f32, x_off: usize, out: &mut [f32]) {
    let (p, k) = (g.p(), g.k());
    if p == 0 || k == 0 {
        return;
    }
    assert!(out.len() >= p.div_ceil(PANEL) * k * PANEL, "im2col_panels: the scratch is too small");
    let rows_per_task = (MIN_TASK / p).max(1);
    let (base, dst) = (px as usize, out.as_mut_ptr() as usize);
    for_each_task(k.div_ceil(rows_per_task), |t| {
        let rows = t * rows_per_task..k.min((t + 1) * rows_per_task);
        // Kept per thread: a fresh block was allocated and zeroed by every task of every run,
        // though `im2col_row` writes each of its values.
        let mut block = BLOCK.take();
        if block.len() < rows.len() * p {
            block.resize(rows.len() * p, 0.0);
        }
        let block_rows = &mut block[..rows.len() * p];
        for (row, r) in block_rows.chunks_exact_mut(p).zip(rows.clone()) {
            im2col_row(g, x, base as *const f32, x_off, r, row);
        }
        // Panel by panel, these rows' lines are one contiguous run of `out`.
        for q in 0..p.div_ceil(PANEL) {
            let (j0, w) = (q * PANEL, PANEL.min(p - q * PANEL));
            // SAFETY: panel q's rows `rows` lie inside `out` (asserted above), and only this
            // task writes them.
            let run = unsafe {
                std::slice::from_raw_parts_mut((dst as *mut f32).add((q * k + rows.start) * PANEL), rows.len() * PANEL)
            };
            for (line, row) in run.chunks_exact_mut(PANEL).zip(block_rows.chunks_exact(p)) {
                match w {
                    PANEL => line.copy_from_slice(&row[j0..j0 + PANEL]),
                    _ => line[..w].copy_from_slice(&row[j0..]),
                }
            }
        }
        BLOCK.set(block);
    });
}

thread_local! {
    /// [`im2col_panels`]' block of im2col rows, reused across tasks and calls on this thread.
    static BLOCK: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Row `r = (c, i, j)` of the im2col matrix.
fn im2col_row(g: &Geom, x: &BufView, px: *const f32, x_off: usize, r: usize, row: &mut [f32]) {
    let ([sh, sw], [dh, dw]) = (g.a.stride, g.a.dilation);
    let (pt, pl) = (g.a.padding[0], g.a.padding[1]);
    let (c, i, j) = (r / (g.kh * g.kw), (r / g.kw) % g.kh, r % g.kw);
    let (ylo, yhi) = span(g.oh, sh, i * dh, pt, g.h);
    let (xlo, xhi) = span(g.ow, sw, j * dw, pl, g.w);
    let ow = g.ow;
    row[..ylo * ow].fill(0.0);
    row[yhi * ow..].fill(0.0);
    if xlo == xhi {
        row[ylo * ow..yhi * ow].fill(0.0);
        return;
    }
    let (sy, sx) = (x.strides[2], x.strides[3]);
    // The first valid input column, and the channel's first element.
    let ix0 = xlo * sw + j * dw - pl;
    let ch = x_off + c * x.strides[1] + ix0 * sx;
    if sh * sy == ow && sw * sx == 1 && (xlo, xhi) == (0, ow) {
        // Whole input rows, back to back in memory as in the output: one copy for the tap.
        let dst = &mut row[ylo * ow..yhi * ow];
        let iy = ylo * sh + i * dh - pt;
        // SAFETY: rows iy.. of channel c, all inside the checked input view.
        unsafe { gather_row(dst, px.add(ch + iy * sy), 1) };
        return;
    }
    for oy in ylo..yhi {
        let dst = &mut row[oy * ow..(oy + 1) * ow];
        dst[..xlo].fill(0.0);
        dst[xhi..].fill(0.0);
        let iy = oy * sh + i * dh - pt;
        // SAFETY: c < Cg, iy < H and the span keeps every input column < W: inside the
        // checked input view.
        unsafe { gather_row(&mut dst[xlo..xhi], px.add(ch + iy * sy), (sw * sx) as isize) };
    }
}

/// Where the depthwise loop reads: the input, the weights as an `[O, KH*KW]` matrix and the
/// bias. Addresses are kept as usize so that rayon tasks may share them.
pub(super) struct DwOperands<'a> {
    pub(super) x: &'a BufView,
    pub(super) px: usize,
    pub(super) pw: usize,
    pub(super) w_rs: usize,
    pub(super) w_cs: usize,
    pub(super) bias: Option<&'a [f32]>,
}

/// Output channels `chans` of image `img` of a conv with one input channel per group,
/// computed directly into `out` (those channels' planes, dense), one channel per task.
pub(super) fn depthwise(
    g: &Geom,
    ops: &DwOperands,
    img: usize,
    chans: std::ops::Range<usize>,
    out: &mut [f32],
) {
    let p = g.p();
    if p == 0 {
        return;
    }
    let per_plane = (p * g.kh * g.kw).max(1);
    let (px, pw) = (ops.px, ops.pw);
    let planes = (MIN_TASK / per_plane).max(1);
    for_each_chunk_mut(out, planes * p, |t, block| {
        for (d, plane) in block.chunks_mut(p).enumerate() {
            let o = chans.start + t * planes + d;
            let x = ops.x;
            let src = x.offset + img * x.strides[0] + (o / g.og) * x.strides[1];
            let wt = (pw as *const f32).wrapping_add(o * ops.w_rs);
            // SAFETY: channel o / og of image img is inside the checked input view, and
            // row o of the weights inside the checked weight view.
            unsafe { depthwise_plane(g, (px as *const f32).add(src), x, wt, ops.w_cs, plane) };
            if let Some(b) = ops.bias {
                let b = b[o];
                plane.iter_mut().for_each(|v| *v += b);
            }
        }
    });
}

/// One output plane: for each output row, every valid tap adds `w * input` over its span
/// of output columns (a vectorisable slice loop when the input row is read with step 1).
///
/// # Safety
/// `src` is the plane's first input element and `wt` its first weight; both views checked.
unsafe fn depthwise_plane(
    g: &Geom,
    src: *const f32,
    x: &BufView,
    wt: *const f32,
    w_cs: usize,
    plane: &mut [f32],
) {
    let ([sh, sw], [dh, dw]) = (g.a.stride, g.a.dilation);
    let (pt, pl) = (g.a.padding[0], g.a.padding[1]);
    let (sy, sx) = (x.strides[2], x.strides[3]);
    plane.fill(0.0);
    for (oy, row) in plane.chunks_exact_mut(g.ow).enumerate() {
        for i in 0..g.kh {
            let Some(iy) = (oy * sh + i * dh).checked_sub(pt).filter(|&iy| iy < g.h) else {
                continue;
            };
            for j in 0..g.kw {
                let (lo, hi) = span(g.ow, sw, j * dw, pl, g.w);
                if lo == hi {
                    continue;
                }
                // SAFETY: tap (i, j) is inside the weights; iy < H and the span keeps every
                // input column < W.
                unsafe {
                    let w = wt.add((i * g.kw + j) * w_cs).read();
                    let s = src.add(iy * sy + (lo * sw + j * dw - pl) * sx);
                    mul_add(&mut row[lo..hi], w, s, sw * sx);
                }
            }
        }
    }
}

/// `dst[k] += w * src[k * step]`.
///
/// # Safety
/// `src[k * step]` must be readable for every `k < dst.len()`.
#[inline]
unsafe fn mul_add(dst: &mut [f32], w: f32, src: *const f32, step: usize) {
    if step == 1 {
        // SAFETY: forwarded from the caller; the output does not overlap the input.
        let s = unsafe { std::slice::from_raw_parts(src, dst.len()) };
        for (d, v) in dst.iter_mut().zip(s) {
            *d += w * v;
        }
    } else {
        for (k, d) in dst.iter_mut().enumerate() {
            // SAFETY: forwarded from the caller.
            *d += w * unsafe { src.add(k * step).read() };
        }
    }
}
