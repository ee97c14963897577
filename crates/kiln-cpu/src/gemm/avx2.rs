//! The AVX2 + FMA micro-kernel of [`super::gemm`]: a 6 x 16 tile of `c` in twelve
//! registers, fed per step of `k` by two loads of a packed panel and six broadcasts from `a`.

use super::{PANEL, PackedB, ROWS};
use std::arch::x86_64::*;
use std::ops::Range;

/// Values of `k` per pass: a tile's 6 rows of `a` (6 KB) stay in L1 while the sweep's panel
/// slices (16 KB each) stream from L2.
const DEPTH: usize = 256;
/// Panels swept per 6 rows of `a`: a 256 x 128 block of `b` (128 KB) stays in L2.
const SWEEP: usize = 8;
/// Rows of `a` per block: its 120 x 256 slice (120 KB) stays in L2 next to the block of `b`
/// while the block of `b` is swept by every tile of rows.
const BLOCK_ROWS: usize = 120;

/// Rows `rows`, panels `panels` of `c = a @ b`.
///
/// # Safety
/// As [`super::gemm`]; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn block(
    rows: Range<usize>,
    panels: Range<usize>,
    a: *const f32,
    lda: usize,
    b: &PackedB,
    c: *mut f32,
    ldc: usize,
) {
    let (k, n) = (b.k, b.n);
    let blocks = rows.clone().step_by(BLOCK_ROWS);
    for (r0, q0) in blocks.flat_map(|r0| panels.clone().step_by(SWEEP).map(move |q0| (r0, q0))) {
        let (r1, q1) = ((r0 + BLOCK_ROWS).min(rows.end), (q0 + SWEEP).min(panels.end));
        for k0 in (0..k).step_by(DEPTH) {
            let (depth, acc) = (DEPTH.min(k - k0), k0 > 0);
            let mut i = r0;
            while i < r1 {
                let r = ROWS.min(r1 - i);
                for p in q0..q1 {
                    // SAFETY: rows i..i+r, columns of panel p and k0..k0+depth are inside
                    // the operands (the caller's contract).
                    unsafe {
                        let t = Tile {
                            depth,
                            a: a.add(i * lda + k0),
                            lda,
                            b: b.data.as_ptr().add((p * k + k0) * PANEL),
                            c: c.add(i * ldc + p * PANEL),
                            ldc,
                            cols: PANEL.min(n - p * PANEL),
                            acc,
                        };
                        match r {
                            6 => t.run::<6>(),
                            5 => t.run::<5>(),
                            4 => t.run::<4>(),
                            3 => t.run::<3>(),
                            2 => t.run::<2>(),
                            _ => t.run::<1>(),
                        }
                    }
                }
                i += r;
            }
        }
    }
}

/// One micro-tile: `R` rows by the panel's 16 columns (the first `cols` of them stored),
/// over `depth` steps of `k`; added to `c` when `acc`.
struct Tile {
    depth: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    acc: bool,
}

impl Tile {
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn run<const R: usize>(&self) {
        // SAFETY (whole body): `block` passes pointers to R rows of `depth` values of `a`,
        // `depth` rows of 16 packed values of `b` and R rows of `cols` values of `c`.
        unsafe {
            let mut s = [[_mm256_setzero_ps(); 2]; R];
            let rows: [*const f32; R] = std::array::from_fn(|r| self.a.add(r * self.lda));
            let mut bp = self.b;
            for kk in 0..self.depth {
                let b0 = _mm256_loadu_ps(bp);
                let b1 = _mm256_loadu_ps(bp.add(8));
                bp = bp.add(PANEL);
                for (acc, row) in s.iter_mut().zip(&rows) {
                    let x = _mm256_broadcast_ss(&*row.add(kk));
                    acc[0] = _mm256_fmadd_ps(x, b0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(x, b1, acc[1]);
                }
            }
            for (r, acc) in s.iter().enumerate() {
                let row = self.c.add(r * self.ldc);
                if self.cols == PANEL {
                    let (mut v0, mut v1) = (acc[0], acc[1]);
                    if self.acc {
                        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(row));
                        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(row.add(8)));
                    }
                    _mm256_storeu_ps(row, v0);
                    _mm256_storeu_ps(row.add(8), v1);
                } else {
                    let mut tmp = [0.0f32; PANEL];
                    _mm256_storeu_ps(tmp.as_mut_ptr(), acc[0]);
                    _mm256_storeu_ps(tmp.as_mut_ptr().add(8), acc[1]);
                    for (j, v) in tmp[..self.cols].iter().enumerate() {
                        let dst = row.add(j);
                        *dst = if self.acc { *dst + v } else { *v };
                    }
                }
            }
        }
    }
}
