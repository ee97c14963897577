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
/// its taps from `pixels[c]`; the taps come in rows of `kw`, `dw` apart within a row.
///
/// # Safety
/// As [`super::Isa::tile`], on a CPU with AVX2 and FMA; `k` is a multiple of `kw`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    k: usize,
    taps: *const usize,
    kw: usize,
    dw: usize,
    pixels: &[*const f32],
    w: *const f32,
    out: *mut f32,
    accumulate: bool,
) {
    let (p, a) = (pixels, accumulate);
    macro_rules! by_width {
        ($cols:literal) => {
            match kw {
                3 => tile_k::<$cols, 3>(k, taps, dw, p, w, out, a),
                7 => tile_k::<$cols, 7>(k, taps, dw, p, w, out, a),
                _ => tile_k::<$cols, 1>(k, taps, dw, p, w, out, a),
            }
        };
    }
    // SAFETY: forwarded from the caller.
    unsafe {
        match p.len() {
            6 => by_width!(6),
            5 => by_width!(5),
            4 => by_width!(4),
            3 => by_width!(3),
            2 => by_width!(2),
            _ => by_width!(1),
        }
    }
}

/// `out[c * 16 + l] (+)= sum_t x(c, t) * w[t * 16 + l]` for the `COLS` pixels of a tile,
/// where pixel `c` reads `pixels[c] + taps[t]` (added to `out` with `accumulate`). Each pixel
/// has its own address, so a tile may span output rows. The taps go `KW` at a time (a row of
/// the kernel, at `taps[r * KW] + j * dw`; `KW` = 1 takes every tap's own offset): one offset
/// load and one weight prefetch per row, as a load and a prefetch per tap left the loads, not
/// the multiply-adds, the bottleneck (a 3x3 tile in L1: 50 -> 76 GFLOP/s on one Zen 3 core).
///
/// # Safety
/// AVX2 and FMA are available; every address read is inside the input; `taps` holds
/// `k + PREFETCH` offsets, `w` `k * 16` values and `out` `COLS * 16`; `k` is a multiple of
/// `KW` and the taps of each row are `dw` apart.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_k<const COLS: usize, const KW: usize>(
    k: usize,
    taps: *const usize,
    dw: usize,
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
    for r in 0..k / KW {
        // SAFETY: forwarded from the caller.
        unsafe {
            let row = taps.add(r * KW).read();
            _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(LANES * PREFETCH) as *const i8);
            for j in 0..KW {
                let off = if KW == 1 { row } else { row + j * dw };
                let (w0, w1) = (_mm256_loadu_ps(w), _mm256_loadu_ps(w.add(8)));
                for (a, p) in acc.iter_mut().zip(px) {
                    let v = _mm256_broadcast_ss(&*p.add(off));
                    a[0] = _mm256_fmadd_ps(v, w0, a[0]);
                    a[1] = _mm256_fmadd_ps(v, w1, a[1]);
                }
                w = w.add(LANES);
            }
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

/// Writes a group's sums, `n` pixels as `[pixel][16]`, to channel rows `ld` apart, adding
/// the bias: `out[ch * ld + px] = sums[px * 16 + ch] (+ bias[ch])` for `ch < chans`. Eight
/// pixels of eight channels at a time are transposed in registers (the scalar loop it replaces
/// took about 5% of a 3x3 conv's time).
///
/// # Safety
/// AVX2 is available; `sums` holds `n * 16` values; `out[ch * ld + px]` is writable for
/// `ch < chans <= 16`, `px < n`; `bias`, when given, holds `chans` values.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn store_group(sums: *const f32, n: usize, chans: usize, bias: Option<&[f32]>, out: *mut f32, ld: usize) {
    let full = n / 8 * 8;
    for c0 in (0..chans).step_by(8) {
        let cn = (chans - c0).min(8);
        let b: [f32; 8] = std::array::from_fn(|c| bias.filter(|_| c < cn).map_or(0.0, |b| b[c0 + c]));
        for p in (0..full).step_by(8) {
            // SAFETY: pixels p..p+8 < n and channels c0..c0+8 <= 16 of `sums`; channel rows
            // c0..c0+cn, pixels p..p+8 of `out`.
            unsafe {
                let rows: [__m256; 8] = std::array::from_fn(|r| _mm256_loadu_ps(sums.add((p + r) * LANES + c0)));
                let cols = transpose8(rows);
                for (c, &v) in cols[..cn].iter().enumerate() {
                    let v = if bias.is_some() { _mm256_add_ps(v, _mm256_set1_ps(b[c])) } else { v };
                    _mm256_storeu_ps(out.add((c0 + c) * ld + p), v);
                }
            }
        }
        for p in full..n {
            for c in 0..cn {
                // SAFETY: as above, one value.
                unsafe {
                    let v = *sums.add(p * LANES + c0 + c);
                    *out.add((c0 + c) * ld + p) = if bias.is_some() { v + b[c] } else { v };
                }
            }
        }
    }
}

/// The 8 x 8 transpose: `out[j][i] = rows[i][j]`.
#[target_feature(enable = "avx2,fma")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t = [
        _mm256_unpacklo_ps(r[0], r[1]),
        _mm256_unpackhi_ps(r[0], r[1]),
        _mm256_unpacklo_ps(r[2], r[3]),
        _mm256_unpackhi_ps(r[2], r[3]),
        _mm256_unpacklo_ps(r[4], r[5]),
        _mm256_unpackhi_ps(r[4], r[5]),
        _mm256_unpacklo_ps(r[6], r[7]),
        _mm256_unpackhi_ps(r[6], r[7]),
    ];
    // u[0..4]: columns 0-3 of rows 0-3 (low lanes) and 4-7 (high lanes); u[4..8] rows 4-7.
    let u = [
        _mm256_shuffle_ps::<0x44>(t[0], t[2]),
        _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
        _mm256_shuffle_ps::<0x44>(t[1], t[3]),
        _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
        _mm256_shuffle_ps::<0x44>(t[4], t[6]),
        _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
        _mm256_shuffle_ps::<0x44>(t[5], t[7]),
        _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
    ];
    std::array::from_fn(|j| match j {
        0..4 => _mm256_permute2f128_ps::<0x20>(u[j], u[j + 4]),
        _ => _mm256_permute2f128_ps::<0x31>(u[j - 4], u[j]),
    })
}
