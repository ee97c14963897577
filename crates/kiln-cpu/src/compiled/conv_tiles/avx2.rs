//! The AVX2 + FMA tiles: 16 output channels (two 8-lane vectors) of up to 6 pixels, each at
//! its own input address (a tile may wrap across output rows), in 12 of the 16 registers, the
//! other four holding the two weight vectors, the broadcast input value and spare.

use super::PREFETCH;
use std::arch::x86_64::*;

/// Output channels per tile.
pub(super) const LANES: usize = 16;
/// Output pixels per tile at most.
pub(super) const TILE: usize = 6;

/// See [`super::Isa::tile`]: the tile of `pixels.len()` (1 to 6) pixels, pixel `c` reading
/// its taps from `pixels[c]`.
///
/// # Safety
/// As [`super::Isa::tile`], on a CPU with AVX2 and FMA.
pub(super) unsafe fn tile(k: usize, taps: *const usize, pixels: &[*const f32], w: *const f32, out: *mut f32, accumulate: bool) {
    let (p, a) = (pixels, accumulate);
    // SAFETY: forwarded from the caller.
    unsafe {
        match p.len() {
            6 => tile_k::<6>(k, taps, p, w, out, a),
            5 => tile_k::<5>(k, taps, p, w, out, a),
            4 => tile_k::<4>(k, taps, p, w, out, a),
            3 => tile_k::<3>(k, taps, p, w, out, a),
            2 => tile_k::<2>(k, taps, p, w, out, a),
            _ => tile_k::<1>(k, taps, p, w, out, a),
        }
    }
}

/// `out[c * 16 + l] (+)= sum_t x(c, t) * w[t * 16 + l]` for the `COLS` pixels of a tile,
/// where pixel `c` reads `pixels[c] + taps[t]` (added to `out` with `accumulate`). Each pixel
/// has its own address, so a tile may span output rows.
///
/// # Safety
/// AVX2 and FMA are available; every address read is inside the input; `taps` holds
/// `k + PREFETCH` offsets, `w` `k * 16` values and `out` `COLS * 16`.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_k<const COLS: usize>(
    k: usize,
    taps: *const usize,
    pixels: &[*const f32],
    w: *const f32,
    out: *mut f32,
    accumulate: bool,
) {
    let px: [*const f32; COLS] = std::array::from_fn(|c| pixels[c]);
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
            for (a, p) in acc.iter_mut().zip(px) {
                let v = _mm256_broadcast_ss(&*p.add(off));
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
