//! The AVX2 + FMA transforms of F(4x4, 3x3), eight tiles at a time (one tile a lane): the
//! input tile's `B^T d B` and the output tile's `A^T m A`, each as one 1-D transform along
//! the rows and one along the columns. The matrices are those of Lavin & Gray (2015) with
//! interpolation points 0, ±1, ±2 and infinity, written out so that no multiply by 0 or ±1
//! is spent.

use super::Segment;
use std::arch::x86_64::*;

/// `B^T d` for one column `d` of six values.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn bt(d: [__m256; 6]) -> [__m256; 6] {
    let (two, four, five) = (_mm256_set1_ps(2.0), _mm256_set1_ps(4.0), _mm256_set1_ps(5.0));
    let a = _mm256_fnmadd_ps(four, d[2], d[4]);
    let b = _mm256_fnmadd_ps(four, d[1], d[3]);
    let c = _mm256_sub_ps(d[4], d[2]);
    let e = _mm256_mul_ps(two, _mm256_sub_ps(d[3], d[1]));
    [
        _mm256_fmadd_ps(four, d[0], _mm256_fnmadd_ps(five, d[2], d[4])),
        _mm256_add_ps(a, b),
        _mm256_sub_ps(a, b),
        _mm256_add_ps(c, e),
        _mm256_sub_ps(c, e),
        _mm256_fmadd_ps(four, d[1], _mm256_fnmadd_ps(five, d[3], d[5])),
    ]
}

/// `A^T m` for one column `m` of six values.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn at(m: [__m256; 6]) -> [__m256; 4] {
    let (p, q) = (_mm256_add_ps(m[1], m[2]), _mm256_sub_ps(m[1], m[2]));
    let (s, u) = (_mm256_add_ps(m[3], m[4]), _mm256_sub_ps(m[3], m[4]));
    [
        _mm256_add_ps(_mm256_add_ps(m[0], p), s),
        _mm256_fmadd_ps(_mm256_set1_ps(2.0), u, q),
        _mm256_fmadd_ps(_mm256_set1_ps(4.0), s, p),
        _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0), u, q), m[5]),
    ]
}

/// Transforms the 6x6 input tiles of eight output tiles (a vector's lanes) of one channel,
/// whose input `plane` is split by column phase (see [`super::Layout`]): element `(r, s)` of
/// the tiles of segment `seg` is the vector at `plane + seg.base + off(r, s)`, blended into
/// the segment's lanes (lanes in no segment are zero). Writes element `(i, j)` of the
/// transformed tiles to `v + (6i + j) * ld`.
///
/// # Safety
/// Every vector those offsets reach is readable; `v + (6i + j) * ld` holds eight writable
/// values for each `i, j < 6`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn input_tiles(plane: *const f32, segs: &[Segment], off: &[[isize; 6]; 6], v: *mut f32, ld: usize) {
    let whole = match segs {
        [one] if one.lanes == (0..8) => Some(one.base),
        _ => None,
    };
    // SAFETY (both): the caller's contract.
    let load = |o: isize| match whole {
        Some(base) => unsafe { _mm256_loadu_ps(plane.offset(base + o)) },
        None => segs.iter().fold(_mm256_setzero_ps(), |d, seg| unsafe {
            _mm256_blendv_ps(d, _mm256_loadu_ps(plane.offset(seg.base + o)), _mm256_loadu_ps(seg.mask.as_ptr().cast()))
        }),
    };
    // rows[j][r]: row r of the tiles after the transform along the row, element j.
    let mut rows = [[_mm256_setzero_ps(); 6]; 6];
    for (r, off) in off.iter().enumerate() {
        let d: [__m256; 6] = std::array::from_fn(|s| load(off[s]));
        for (j, h) in bt(d).into_iter().enumerate() {
            rows[j][r] = h;
        }
    }
    for (j, col) in rows.into_iter().enumerate() {
        for (i, t) in bt(col).into_iter().enumerate() {
            // SAFETY: the caller's contract.
            unsafe { _mm256_storeu_ps(v.add((6 * i + j) * ld), t) };
        }
    }
}

/// The inverse of [`input_tiles`] for eight tiles of one output channel after the products:
/// element `(i, j)` of the tiles' 6x6 products is read (eight lanes) from `m + (6i + j) * ld`;
/// output pixel `(i, j)` of the tile in lane `l`, plus `bias`, goes to `rows[i][4l + j]`
/// (each output row of the eight tiles side by side, as in the output).
///
/// # Safety
/// `m + (6i + j) * ld` holds eight readable values for each `i, j < 6`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn output_tiles(m: *const f32, ld: usize, bias: f32, rows: &mut [[f32; 32]; 4]) {
    // cols[j][i]: element (i, j) after the transform along the columns.
    let mut cols = [[_mm256_setzero_ps(); 4]; 6];
    for (j, c) in cols.iter_mut().enumerate() {
        // SAFETY: the caller's contract.
        let col: [__m256; 6] = std::array::from_fn(|r| unsafe { _mm256_loadu_ps(m.add((6 * r + j) * ld)) });
        *c = at(col);
    }
    let bias = _mm256_set1_ps(bias);
    for (i, out) in rows.iter_mut().enumerate() {
        let row: [__m256; 6] = std::array::from_fn(|j| cols[j][i]);
        let y = at(row).map(|y| _mm256_add_ps(y, bias));
        // A 4 x 8 transpose: lanes (tiles) become groups of four pixels.
        let (a, b) = (_mm256_unpacklo_ps(y[0], y[1]), _mm256_unpackhi_ps(y[0], y[1]));
        let (c, d) = (_mm256_unpacklo_ps(y[2], y[3]), _mm256_unpackhi_ps(y[2], y[3]));
        let (e, f) = (_mm256_shuffle_ps::<0x44>(a, c), _mm256_shuffle_ps::<0xEE>(a, c));
        let (g, h) = (_mm256_shuffle_ps::<0x44>(b, d), _mm256_shuffle_ps::<0xEE>(b, d));
        let tiles = [
            _mm256_permute2f128_ps::<0x20>(e, f),
            _mm256_permute2f128_ps::<0x20>(g, h),
            _mm256_permute2f128_ps::<0x31>(e, f),
            _mm256_permute2f128_ps::<0x31>(g, h),
        ];
        for (q, t) in tiles.into_iter().enumerate() {
            // SAFETY: out holds 32 values.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * q), t) };
        }
    }
}

/// Splits 32 consecutive values of a row by column phase (the inverse of the transpose in
/// [`output_tiles`]): `src[4l + p]` goes to `phases[p][l]` for `l < 8`, `p < 4`.
///
/// # Safety
/// `src` holds 32 readable values and each `phases[p]` eight writable ones.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn split_32(src: *const f32, phases: [*mut f32; 4]) {
    // SAFETY: the caller's contract.
    let t: [__m256; 4] = std::array::from_fn(|q| unsafe { _mm256_loadu_ps(src.add(8 * q)) });
    // Groups of four (one per lane of the result) 0 | 4, 1 | 5, 2 | 6 and 3 | 7 ...
    let e = _mm256_permute2f128_ps::<0x20>(t[0], t[2]);
    let f = _mm256_permute2f128_ps::<0x31>(t[0], t[2]);
    let g = _mm256_permute2f128_ps::<0x20>(t[1], t[3]);
    let h = _mm256_permute2f128_ps::<0x31>(t[1], t[3]);
    // ... then a 4 x 4 transpose in each half.
    let (a, b) = (_mm256_unpacklo_ps(e, f), _mm256_unpackhi_ps(e, f));
    let (c, d) = (_mm256_unpacklo_ps(g, h), _mm256_unpackhi_ps(g, h));
    let out = [
        _mm256_shuffle_ps::<0x44>(a, c),
        _mm256_shuffle_ps::<0xEE>(a, c),
        _mm256_shuffle_ps::<0x44>(b, d),
        _mm256_shuffle_ps::<0xEE>(b, d),
    ];
    for (p, v) in out.into_iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe { _mm256_storeu_ps(phases[p], v) };
    }
}

/// [`split_32`] for 8 values: `src[4l + p]` goes to `phases[p][l]` for `l < 2`, `p < 4` (a
/// row's columns past its last block of 32: a 14x14 or 28x28 map has no such block at all).
///
/// # Safety
/// `src` holds 8 readable values and each `phases[p]` two writable ones.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn split_8(src: *const f32, phases: [*mut f32; 4]) {
    // SAFETY: the caller's contract.
    let v = unsafe { _mm256_loadu_ps(src) };
    // 0 4 1 5 | 2 6 3 7: each phase's two values side by side.
    let t = _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    let (lo, hi) = (_mm_castps_pd(_mm256_castps256_ps128(t)), _mm_castps_pd(_mm256_extractf128_ps::<1>(t)));
    // SAFETY: the caller's contract (each store writes two f32).
    unsafe {
        _mm_storel_pd(phases[0].cast(), lo);
        _mm_storeh_pd(phases[1].cast(), lo);
        _mm_storel_pd(phases[2].cast(), hi);
        _mm_storeh_pd(phases[3].cast(), hi);
    }
}
