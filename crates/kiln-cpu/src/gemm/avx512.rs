//! The AVX-512 tile of [`super::gemm`]: up to 6 rows of `a` against up to 4 whole panels of
//! `b` (64 columns) at once, in up to 24 of the 32 zmm registers, fed per step of `k` by one
//! 16-wide load per panel and one broadcast per row. It reads the same packed layouts as the
//! AVX2 tile (6-row tiles of `a`, 16-column panels of `b`), so only the sweep over panels
//! chooses between them.
//!
//! Why wider than the AVX2 tile on a CPU whose FMA units are no wider (AMD Zen 4 splits a
//! 512-bit FMA in two): per multiply-add of 16 lanes the 6 x 64 tile spends 0.42 loads and
//! broadcasts against the 6 x 16 AVX2 tile's 1.33 per 8 lanes, and fewer instructions in all;
//! the `gemm` crate's AVX-512 kernel ran bert's QKV product 16% faster than the AVX2 tile.

use super::avx2::Tile;
use std::arch::x86_64::*;

/// Runs `rows` (1 to 6) rows of `t` over `panels` (1 to 4) whole panels: panel `j`'s rows of
/// `b` start at `t.b + j * step`, `t.ldb` apart, its columns of `c` at `t.c + 16 j`. `t.cols`
/// is not read: every panel is 16 columns wide.
///
/// # Safety
/// As [`Tile::run_k`] for each panel; the CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn run(t: &Tile, rows: usize, panels: usize, step: usize) {
    // (rows, panels) => sets of accumulators: 8 or more independent chains where the
    // registers allow (two FMA pipes of 4 cycles' latency), as the AVX2 tile keeps.
    macro_rules! table {
        ($($r:literal $p:literal $s:literal),* $(,)?) => {
            match (rows, panels) {
                $(($r, $p) => run_k::<$r, $p, $s>(t, step),)*
                _ => unreachable!("kiln's GEMM tile of {rows} rows by {panels} panels"),
            }
        };
    }
    // SAFETY: forwarded from the caller.
    unsafe {
        table!(
            6 4 1, 5 4 1, 4 4 1, 3 4 1, 2 4 1, 1 4 2,
            6 3 1, 5 3 1, 4 3 1, 3 3 1, 2 3 2, 1 3 4,
            6 2 1, 5 2 1, 4 2 1, 3 2 2, 2 2 2, 1 2 4,
            6 1 2, 5 1 2, 4 1 2, 3 1 4, 2 1 4, 1 1 4,
        )
    }
}

/// `R` rows by `P` panels, the steps of `k` spread over `S` sets of accumulators added at
/// the end (see the AVX2 tile's `run_k`).
///
/// # Safety
/// As [`run`].
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn run_k<const R: usize, const P: usize, const S: usize>(t: &Tile, step: usize) {
    // SAFETY (whole body): the caller passes `depth` groups of 6 packed values of `a` (the
    // first R used), `depth` rows (`t.ldb` apart) of 16 values for each of P panels `step`
    // apart, and R rows of 16 P values of `c`.
    unsafe {
        let mut sets = [[[_mm512_setzero_ps(); P]; R]; S];
        let (mut ap, mut bp) = (t.a, t.b);
        let one = |s: &mut [[__m512; P]; R], ap: *const f32, bp: *const f32| {
            let b: [__m512; P] = std::array::from_fn(|p| _mm512_loadu_ps(bp.add(p * step)));
            for (r, acc) in s.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*ap.add(r));
                for (a, &b) in acc.iter_mut().zip(&b) {
                    *a = _mm512_fmadd_ps(x, b, *a);
                }
            }
        };
        for _ in 0..t.depth / 4 {
            super::avx2::prefetch_a(ap);
            for u in 0..4 {
                one(&mut sets[u % S], ap.add(u * super::ROWS), bp.add(u * t.ldb));
            }
            ap = ap.add(4 * super::ROWS);
            bp = bp.add(4 * t.ldb);
        }
        for _ in 0..t.depth % 4 {
            one(&mut sets[0], ap, bp);
            ap = ap.add(super::ROWS);
            bp = bp.add(t.ldb);
        }
        let mut s = sets[0];
        for set in &sets[1..] {
            for (acc, part) in s.iter_mut().zip(set) {
                for (a, &p) in acc.iter_mut().zip(part) {
                    *a = _mm512_add_ps(*a, p);
                }
            }
        }
        for (r, acc) in s.iter().enumerate() {
            for (p, &a) in acc.iter().enumerate() {
                let dst = t.c.add(r * t.ldc + p * super::PANEL);
                _mm512_storeu_ps(dst, if t.acc { _mm512_add_ps(a, _mm512_loadu_ps(dst)) } else { a });
                if let Some(o) = t.also.filter(|o| r < o.rows) {
                    let (dst, a) = (o.c.add(r * t.ldc + p * super::PANEL), _mm512_mul_ps(a, _mm512_set1_ps(o.sign)));
                    _mm512_storeu_ps(dst, if o.acc { _mm512_add_ps(a, _mm512_loadu_ps(dst)) } else { a });
                }
            }
        }
    }
}
