//! The AVX2 + FMA tiles: 16 output channels (two 8-lane vectors) of up to 6 pixels of one
//! output row in 12 of the 16 registers, the other four holding the two weight vectors, the
//! broadcast input value and spare.

use super::PREFETCH;
use std::arch::x86_64::*;

/// Output channels per tile.
pub(super) const LANES: usize = 16;
/// Output pixels per tile at most.
pub(super) const TILE: usize = 6;

/// Pixels of the widest tile that fits `left` pixels.
pub(super) fn width(left: usize) -> usize {
    left.min(TILE)
}

/// See [`super::Isa::tile`]: the first [`width`]`(left)` pixels of the row at `row`.
///
/// # Safety
/// As [`super::Isa::tile`], on a CPU with AVX2 and FMA.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    sw: usize,
    k: usize,
    taps: *const usize,
    row: *const f32,
    left: usize,
    w: *const f32,
    out: *mut f32,
    accumulate: bool,
) {
    let a = accumulate;
    // SAFETY: forwarded from the caller.
    unsafe {
        match (width(left), sw) {
            (6, 1) => tile_k::<6, 1>(k, taps, row, w, out, a),
            (6, _) => tile_k::<6, 2>(k, taps, row, w, out, a),
            (5, 1) => tile_k::<5, 1>(k, taps, row, w, out, a),
            (5, _) => tile_k::<5, 2>(k, taps, row, w, out, a),
            (4, 1) => tile_k::<4, 1>(k, taps, row, w, out, a),
            (4, _) => tile_k::<4, 2>(k, taps, row, w, out, a),
            (3, 1) => tile_k::<3, 1>(k, taps, row, w, out, a),
            (3, _) => tile_k::<3, 2>(k, taps, row, w, out, a),
            (2, 1) => tile_k::<2, 1>(k, taps, row, w, out, a),
            (2, _) => tile_k::<2, 2>(k, taps, row, w, out, a),
            (_, 1) => tile_k::<1, 1>(k, taps, row, w, out, a),
            (_, _) => tile_k::<1, 2>(k, taps, row, w, out, a),
        }
    }
}

/// `out[c * 16 + l] (+)= sum_t x(c, t) * w[t * 16 + l]` for the `COLS` pixels of a tile,
/// where pixel `c` reads `row + taps[t] + c * S` (added to `out` with `accumulate`).
///
/// # Safety
/// AVX2 and FMA are available; every address read is inside the input; `taps` holds
/// `k + PREFETCH` offsets, `w` `k * 16` values and `out` `COLS * 16`.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_k<const COLS: usize, const S: usize>(
    k: usize,
    taps: *const usize,
    row: *const f32,
    w: *const f32,
    out: *mut f32,
    accumulate: bool,
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; COLS];
    if accumulate {
        for (c, a) in acc.iter_mut().enumerate() {
            // SAFETY: inside `out` (COLS * 16 values).
            unsafe { *a = [_mm256_loadu_ps(out.add(c * LANES)), _mm256_loadu_ps(out.add(c * LANES + 8))] };
        }
    }
    let mut w = w;
    for t in 0..k {
        // SAFETY: forwarded from the caller.
        unsafe {
            let off = taps.add(t).read();
            _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(LANES * PREFETCH) as *const i8);
            let (w0, w1) = (_mm256_loadu_ps(w), _mm256_loadu_ps(w.add(8)));
            let xr = row.add(off);
            for (c, a) in acc.iter_mut().enumerate() {
                let v = _mm256_broadcast_ss(&*xr.add(c * S));
                a[0] = _mm256_fmadd_ps(v, w0, a[0]);
                a[1] = _mm256_fmadd_ps(v, w1, a[1]);
            }
            w = w.add(LANES);
        }
    }
    for (c, a) in acc.iter().enumerate() {
        // SAFETY: inside `out` (COLS * 16 values).
        unsafe {
            _mm256_storeu_ps(out.add(c * LANES), a[0]);
            _mm256_storeu_ps(out.add(c * LANES + 8), a[1]);
        }
    }
}
