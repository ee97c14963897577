//! The AVX-512 tiles: 32 output channels (two 16-lane vectors) of up to 14 pixels in 28
//! registers; rows 7 wide (resnet's last stage) go two at a time.

use super::PREFETCH;
use std::arch::x86_64::*;

/// Output channels per tile.
pub(super) const LANES: usize = 32;
/// Output pixels per tile at most (28 accumulators of 32 registers).
pub(super) const TILE: usize = 14;

/// Pixels per row of the widest tile that fits `left` pixels: 7 of two rows when `paired`,
/// else 14, 7 or 1 of one.
pub(super) fn width(left: usize, paired: bool) -> usize {
    match left {
        _ if paired => 7,
        l if l >= TILE => TILE,
        l if l >= 7 => 7,
        _ => 1,
    }
}

/// See [`super::Isa::tile`]: `n` (a [`width`]) pixels of a row, or 7 of two rows with `row2`.
///
/// # Safety
/// As [`super::Isa::tile`], on a CPU with AVX-512F.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    sw: usize,
    k: usize,
    taps: *const usize,
    row: *const f32,
    row2: Option<*const f32>,
    n: usize,
    w: *const f32,
    out: *mut f32,
    accumulate: bool,
) {
    let a = accumulate;
    // SAFETY: forwarded from the caller.
    unsafe {
        match (row2, n) {
            (Some(r2), _) => tile_s::<2, 7>(sw, k, taps, &[row, r2], w, out, a),
            (None, TILE) => tile_s::<1, TILE>(sw, k, taps, &[row], w, out, a),
            (None, 7) => tile_s::<1, 7>(sw, k, taps, &[row], w, out, a),
            (None, _) => tile_s::<1, 1>(sw, k, taps, &[row], w, out, a),
        }
    }
}

/// [`tile_k`] at column stride `sw` (1 or 2: the stride is a constant of each kernel, so
/// a pixel's address is an immediate offset).
///
/// # Safety
/// As [`tile_k`].
unsafe fn tile_s<const ROWS: usize, const COLS: usize>(
    sw: usize,
    k: usize,
    taps: *const usize,
    rows: &[*const f32; ROWS],
    w: *const f32,
    out: *mut f32,
    accumulate: bool,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        if sw == 1 {
            tile_k::<ROWS, COLS, 1>(k, taps, rows, w, out, accumulate)
        } else {
            tile_k::<ROWS, COLS, 2>(k, taps, rows, w, out, accumulate)
        }
    }
}

/// `out[r * 32 + l] (+)= sum_t x(r, t) * w[t * 32 + l]` for the `ROWS x COLS` pixels of a
/// tile, where pixel `(a, b)` reads `rows[a] + taps[t] + b * S` (added to `out` with
/// `accumulate`).
///
/// # Safety
/// AVX-512F must be available; every address read must be inside the input; `taps` holds
/// `k + PREFETCH` offsets, `w` `k * 32` values and `out` `ROWS * COLS * 32`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // indices the compiler unrolls into registers
unsafe fn tile_k<const ROWS: usize, const COLS: usize, const S: usize>(
    k: usize,
    taps: *const usize,
    rows: &[*const f32; ROWS],
    w: *const f32,
    out: *mut f32,
    accumulate: bool,
) {
    let mut acc = [[[_mm512_setzero_ps(); 2]; COLS]; ROWS];
    if accumulate {
        for (r, row) in acc.iter_mut().enumerate() {
            for (c, a) in row.iter_mut().enumerate() {
                let at = (r * COLS + c) * LANES;
                // SAFETY: inside `out` (ROWS * COLS * 32 values).
                unsafe { *a = [_mm512_loadu_ps(out.add(at)), _mm512_loadu_ps(out.add(at + 16))] };
            }
        }
    }
    let mut w = w;
    for t in 0..k {
        // SAFETY: forwarded from the caller.
        unsafe {
            let off = taps.add(t).read();
            _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(LANES * PREFETCH) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(LANES * PREFETCH + 16) as *const i8);
            let (w0, w1) = (_mm512_loadu_ps(w), _mm512_loadu_ps(w.add(16)));
            let ahead = taps.add(t + PREFETCH).read();
            for r in 0..ROWS {
                _mm_prefetch::<_MM_HINT_T0>(rows[r].wrapping_add(ahead) as *const i8);
                let xr = rows[r].add(off);
                for c in 0..COLS {
                    let v = _mm512_set1_ps(xr.add(c * S).read());
                    acc[r][c][0] = _mm512_fmadd_ps(v, w0, acc[r][c][0]);
                    acc[r][c][1] = _mm512_fmadd_ps(v, w1, acc[r][c][1]);
                }
            }
            w = w.add(LANES);
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (c, a) in row.iter().enumerate() {
            // SAFETY: inside `out` (ROWS * COLS * 32 values).
            unsafe {
                _mm512_storeu_ps(out.add((r * COLS + c) * LANES), a[0]);
                _mm512_storeu_ps(out.add((r * COLS + c) * LANES + 16), a[1]);
            }
        }
    }
}
