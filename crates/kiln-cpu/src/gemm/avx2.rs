//! The AVX2 + FMA micro-kernel of [`super::gemm`]: a 6 x 16 tile of `c` in twelve
//! registers, fed per step of `k` by two loads of a packed panel and six broadcasts from `a`.

use super::{Lhs, PANEL, PackedA, PackedB, ROWS, Rhs, gather_row};
use std::arch::x86_64::*;
use std::ops::Range;

/// Values of `k` per pass: a tile's 6 rows of `a` (6 KB) stay in L1 while the sweep's panel
/// slices (16 KB each) stream from L2.
const DEPTH: usize = 256;
/// Panels swept per 6 rows of `a`: a 256 x 128 block of `b` (128 KB) stays in L2.
const SWEEP: usize = 8;
/// Rows of `a` per block: its 120 x 256 slice (120 KB, packed) stays in L2 next to the block
/// of `b` while the block of `b` is swept by every tile of rows.
const BLOCK_ROWS: usize = 120;
/// Bytes of `b` that [`block_a`] packs at once: it stays in L2 (512 KB a core here) beside the
/// stream of `a`.
const B_BLOCK_BYTES: usize = 192 << 10;

/// Rows `rows`, panels `panels` of `c = a @ b`; with `wide`, on the AVX-512 tile where panels
/// are whole (see [`Tile::sweep`]).
///
/// Each 120 x 256 block of `a` is first copied tile by tile into `[k][6]` order, as BLIS and
/// the `gemm` crate do: the micro-kernel then reads one contiguous stream of `a`. Read in
/// place, a tile's six rows sit `lda` apart, and at bert's `lda` of 3072 floats (12 KB, a
/// multiple of L1's 4 KB set stride) all six map to the same L1 sets as each other and the
/// panel slice: they evicted each other (ffn2 ran slower than the `gemm` crate).
///
/// # Safety
/// As [`super::gemm`]; the CPU has AVX2 and FMA, and AVX-512F with `wide`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn block(
    rows: Range<usize>,
    panels: Range<usize>,
    a: Lhs,
    b: &PackedB,
    c: *mut f32,
    ldc: usize,
    wide: bool,
) {
    let (k, n) = (b.k, b.n);
    let mut packed = vec![0.0f32; rows.len().min(BLOCK_ROWS).next_multiple_of(ROWS) * k.min(DEPTH)];
    for r0 in rows.clone().step_by(BLOCK_ROWS) {
        let r1 = (r0 + BLOCK_ROWS).min(rows.end);
        for k0 in (0..k).step_by(DEPTH) {
            let (depth, acc) = (DEPTH.min(k - k0), k0 > 0);
            // SAFETY: rows r0..r1 and columns k0..k0+depth are inside `a` (the caller's contract).
            unsafe { pack_a(&mut packed, a, r0..r1, k0, depth) };
            for q0 in panels.clone().step_by(SWEEP) {
                let q1 = (q0 + SWEEP).min(panels.end);
                for (t, i) in (r0..r1).step_by(ROWS).enumerate() {
                    // SAFETY: tile t of the packed block, rows i..i+r and the columns of
                    // panels q0..q1 are inside the operands (the caller's contract).
                    unsafe {
                        let t = Tile {
                            depth,
                            a: packed.as_ptr().add(t * ROWS * depth),
                            b: b.data.as_ptr().add((q0 * k + k0) * PANEL),
                            ldb: PANEL,
                            c: c.add(i * ldc + q0 * PANEL),
                            ldc,
                            cols: 0,
                            acc,
                            also: None,
                            stream_a: false,
                        };
                        t.sweep(ROWS.min(r1 - i), q1 - q0, k * PANEL, n - q0 * PANEL, 0, wide);
                    }
                }
            }
        }
    }
}

/// Where [`block_a`] puts its sums: over `c`, or added to it with `acc`, and into `also` too
/// (an [`Also`] there starts at `c`'s row 0 and column 0, its `rows` counted from row 0).
#[derive(Clone, Copy, Default)]
pub(super) struct Out {
    pub(super) acc: bool,
    pub(super) also: Option<Also>,
    /// Steps of `k` per pass of a tile; [`DEPTH`] when 0 (see [`even_depth`]).
    pub(super) depth: usize,
}

/// Steps of `k` per pass that split `k` in even passes of at most 384: for Strassen's
/// products, whose tiles read and add into one or two blocks of `c` after every pass. Their
/// half depth of 384 (bert's) then runs in one pass, not passes of 256 and 128: Strassen/plain
/// 0.91-0.94 against 0.99-1.04 on bert's QKV and FFN1, 2 threads (`cargo bench -p kiln-cpu
/// --bench kernels -- strassen`, alternated runs).
pub(super) fn even_depth(k: usize) -> usize {
    k.div_ceil(k.div_ceil(384).max(1)).max(1)
}

/// Row tiles `tiles`, columns `cols` of `c = a @ b` for a packed `a` (see
/// [`super::gemm_a`]); `cols` starts on a vector of 8 columns, maybe half way through a panel
/// of 16, whose first half is then read but not stored; `wide` as for [`block`]; `then.block`
/// called on each tile's rows of a block of panels after its last pass over the depth,
/// `then.swept` on the block's columns after its last tile when `tiles` are all of `a`'s. For
/// each block of 8 panels, `b` is packed (read where it lies when it is already in panels, or
/// when its rows are whole cache lines) as many rows at a time as fit [`B_BLOCK_BYTES`] of L2,
/// and each tile of `a` then runs all of that block's depth before the next tile starts: the
/// tile's 6 x 256 slice of `a` stays in L1 while it meets the block's panels, and its rows of
/// `c` stay in L1 between depth passes. (Sweeping every tile per 256 rows of `b` sent `c` through memory
/// once a pass when it outgrew L2: a 1x1 512->2048 conv on a 7x7 image, whose `c` is 400 KB,
/// ran at 60% of the speed of the 2048->512 one, whose `c` is 100 KB.) `out` says whether
/// the sums are added to `c` and where else they go (Strassen's products).
///
/// # Safety
/// As [`super::gemm_a`] or [`super::gemm_a_panels`], by `b`, for `c` and `out`'s block; the
/// CPU has AVX2 and FMA, and AVX-512F with `wide`.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn block_a(
    tiles: Range<usize>,
    cols: Range<usize>,
    a: &PackedA,
    n: usize,
    b: Rhs,
    c: *mut f32,
    ldc: usize,
    wide: bool,
    then: super::Then,
    out: Out,
) {
    let (m, k) = (a.m, a.k);
    if cols.is_empty() {
        return;
    }
    let panels = cols.start / PANEL..cols.end.div_ceil(PANEL);
    let swept = then.swept.filter(|_| tiles.start == 0 && tiles.end * ROWS >= m);
    // A right-hand side of whole 64-byte rows on 64-byte lines (a 1x1 conv's image of 56x56 or
    // 28x28 pixels) is read where it lies, sweeps of whole panels at least: packing it cost a
    // conv of few output channels (256 -> 64) more than its products saved. Rows that start
    // inside a line (14x14 pixels: 784 bytes) split every load in two and ran slower in place.
    let in_place = match b {
        Rhs::Strided { b, rs, cs: 1 } => rs > 0 && rs % PANEL as isize == 0 && b as usize % 64 == 0,
        _ => false,
    };
    let sweep = SWEEP.min(panels.len());
    // With one panel of columns (each of Winograd's products on a chunk of 16 tiles), each
    // slice of `a` meets `b` once: `a` streams from memory, where the hardware prefetcher,
    // restarting at each tile's slice, fell behind. Asked for ahead, resnet50's 14x14 F(4x4)
    // convs (9.4 MB of transformed weights each) ran 0.62-0.66 ms, not 0.69-0.73. With more
    // panels the slice is in L1 after the first, and the prefetches only took load slots.
    let stream_a = panels.len() == 1;
    // Rows of `b` packed at once: whole depth passes, as many as fit the budget.
    let depth = if out.depth > 0 { out.depth } else { DEPTH };
    let rows = (B_BLOCK_BYTES / (4 * PANEL * sweep)).max(depth) / depth * depth;
    // The packing buffer is kept per thread: freshly allocated, its pages were faulted in
    // (and zeroed by the kernel) on every call.
    let mut packed = PACKED.take();
    if matches!(b, Rhs::Strided { .. }) && packed.len() < sweep * PANEL * k.min(rows) {
        packed.resize(sweep * PANEL * k.min(rows), 0.0);
    }
    for q0 in panels.clone().step_by(SWEEP) {
        let q1 = (q0 + SWEEP).min(panels.end);
        // The sweep's columns of `b` (from its first panel's first) and those it stores.
        let (read, skip) = (q0 * PANEL..cols.end.min(q1 * PANEL), cols.start.saturating_sub(q0 * PANEL));
        let stored = read.start + skip..read.end;
        for r0 in (0..k).step_by(rows) {
            let r1 = (r0 + rows).min(k);
            // Where panel q0's row r0 lies, how far apart the panels are, and the rows.
            let (b0, step, ldb) = match b {
                Rhs::Strided { b, rs, .. } if in_place && q1 * PANEL <= n => {
                    (b.wrapping_offset(r0 as isize * rs + (q0 * PANEL) as isize), PANEL, rs as usize)
                }
                Rhs::Strided { b, rs, cs } => {
                    // SAFETY: rows r0..r1 and columns `read` are inside `b` (the caller's contract).
                    unsafe { pack_b(&mut packed, b.offset(r0 as isize * rs), rs, cs, r1 - r0, read.clone()) };
                    (packed.as_ptr(), (r1 - r0) * PANEL, PANEL)
                }
                Rhs::Panels(b) => (b.wrapping_add((q0 * k + r0) * PANEL), k * PANEL, PANEL),
            };
            for t in tiles.clone() {
                let i = t * ROWS;
                for k0 in (r0..r1).step_by(depth) {
                    // SAFETY: tile t of `a` (k groups of 6) from group k0, rows k0.. of
                    // panels q0..q1 of `b`, rows i.. and the columns of those panels in `c`.
                    unsafe {
                        let t = Tile {
                            depth: depth.min(r1 - k0),
                            a: a.data.as_ptr().add((t * k + k0) * ROWS),
                            b: b0.add((k0 - r0) * ldb),
                            ldb,
                            c: c.add(i * ldc + q0 * PANEL),
                            ldc,
                            cols: 0,
                            acc: k0 > 0 || out.acc,
                            also: out.also.map(|o| Also {
                                c: o.c.add(i * ldc + q0 * PANEL),
                                acc: k0 > 0 || o.acc,
                                rows: o.rows.saturating_sub(i),
                                ..o
                            }),
                            stream_a,
                        };
                        t.sweep(ROWS.min(m - i), q1 - q0, step, read.len(), skip, wide);
                    }
                }
                if let (Some(done), true) = (then.block, r1 == k) {
                    done(i..(i + ROWS).min(m), stored.clone());
                }
            }
        }
        if let Some(swept) = swept {
            // The product run in the callback takes this thread's packing buffer in turn.
            PACKED.set(packed);
            swept(stored);
            packed = PACKED.take();
        }
    }
    PACKED.set(packed);
}

thread_local! {
    /// [`block_a`]'s buffer for packed blocks of `b`, reused across calls on this thread.
    static PACKED: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Copies `depth` rows of columns `cols` of `b` (rows `rs` apart, columns `cs`) into
/// `packed` as panels of 16 columns, each `[depth][16]`, zeros past the last column.
///
/// # Safety
/// Every element `(i, j)` for `i < depth`, `j` in `cols` is inside `b`'s allocation;
/// `packed` holds the panels.
unsafe fn pack_b(packed: &mut [f32], b: *const f32, rs: isize, cs: isize, depth: usize, cols: Range<usize>) {
    // Row by row of `b`, so its lines are read in order.
    for i in 0..depth {
        for (q, j0) in cols.clone().step_by(PANEL).enumerate() {
            let w = PANEL.min(cols.end - j0);
            let row = &mut packed[(q * depth + i) * PANEL..(q * depth + i + 1) * PANEL];
            let src = b.wrapping_offset(i as isize * rs + j0 as isize * cs);
            if let (1, Ok(line)) = (cs, <&mut [f32; PANEL]>::try_from(&mut row[..w])) {
                // A whole line at unit stride (a 1x1 conv's image): a copy of fixed size, which
                // the compiler inlines; `gather_row`'s memmove call per 64 bytes cost more than
                // the copy (a fifth of a 1x1 256->64 conv on a 56x56 image).
                // SAFETY: row i, columns j0..j0+16 of the caller's block.
                *line = unsafe { (src as *const [f32; PANEL]).read_unaligned() };
                continue;
            }
            // SAFETY: row i, columns j0..j0+w of the caller's block.
            unsafe { gather_row(&mut row[..w], src, cs) };
            row[w..].fill(0.0);
        }
    }
}

/// Copies rows `rows` of `a`, `depth` values from column `k0`, into `packed` as tiles of 6
/// rows, each `[depth][6]` (a last short tile keeps the stride of 6); for a sum of two blocks
/// (Strassen's products, see [`Lhs`]) their signed sum, a term's rows past its own count zero.
///
/// # Safety
/// `a`'s terms hold those rows and columns; `packed` has room for them.
pub(super) unsafe fn pack_a(packed: &mut [f32], a: Lhs, rows: Range<usize>, k0: usize, depth: usize) {
    // Row `g` of a term from column k0, if the term has that row.
    let row = |t: super::Term, g: usize| {
        // SAFETY: row g < t.rows of the term, columns k0..k0+depth (the caller's contract).
        (g < t.rows).then(|| unsafe { std::slice::from_raw_parts(t.a.add(g * a.lda + k0), depth) })
    };
    for (t, i) in rows.clone().step_by(ROWS).enumerate() {
        let tile = &mut packed[t * ROWS * depth..(t + 1) * ROWS * depth];
        // A whole tile (of one block, or a sum of two for Strassen's products): 8 columns at a
        // time by a transpose in registers. Strided scalar stores took ~0.9 ns a value, 1.8%
        // of bert-base's forward samples (0.9% now).
        let whole = i + ROWS <= rows.end && i + ROWS <= a.first.rows && a.second.is_none_or(|t| i + ROWS <= t.rows);
        let done = if whole {
            let at = |t: super::Term| (t.a.wrapping_add(i * a.lda + k0), t.sign);
            // SAFETY: rows i..i+6 of each term, columns k0..k0+depth (the caller's contract).
            unsafe { transpose_rows(tile, at(a.first), a.second.map(at), a.lda, depth) }
        } else {
            0
        };
        for r in 0..ROWS.min(rows.end - i) {
            let g = i + r;
            let sx = a.first.sign;
            let (x, y) = (row(a.first, g), a.second.and_then(|t| Some((t.sign, row(t, g)?))));
            let (x, y) = (x.map(|x| &x[done..]), y.map(|(s, y)| (s, &y[done..])));
            let dst = tile.iter_mut().skip(done * ROWS + r).step_by(ROWS);
            match (x, y) {
                (Some(x), None) if sx == 1.0 => dst.zip(x).for_each(|(d, &v)| *d = v),
                (Some(x), None) => dst.zip(x).for_each(|(d, &v)| *d = sx * v),
                (None, Some((sy, y))) => dst.zip(y).for_each(|(d, &v)| *d = sy * v),
                (Some(x), Some((sy, y))) => dst.zip(x.iter().zip(y)).for_each(|(d, (&u, &v))| *d = sx * u + sy * v),
                (None, None) => dst.take(depth - done).for_each(|d| *d = 0.0),
            }
        }
    }
}

/// Writes columns `0..done` of 6 rows (`lda` apart from `a.0`, times `a.1`, plus those of
/// `b` times its sign when given) into `tile` as `[column][6]`, 8 columns at a time, and
/// returns `done`: a multiple of 8 that leaves at least one column to the caller, as each
/// group's last store runs 2 values past the group into the next column, which the caller
/// (or the next group) then writes. The signs are 1 or -1, so each value is rounded as the
/// scalar `sa * x + sb * y` rounds it.
///
/// # Safety
/// Rows 0..6 of `a` (and `b`) hold `depth` values each; `tile` holds `6 * depth`; the CPU has
/// AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose_rows(tile: &mut [f32], a: (*const f32, f32), b: Option<(*const f32, f32)>, lda: usize, depth: usize) -> usize {
    debug_assert!(tile.len() >= ROWS * depth);
    let mut j = 0;
    while j + 8 < depth {
        // SAFETY (whole block): columns j..j+8 of rows 0..6 lie inside the rows (j + 8 <
        // depth); the stores end at 6 (j + 7) + 8 = 6 (j + 8) + 2 <= 6 depth (j + 8 < depth).
        unsafe {
            let load = |(p, sign): (*const f32, f32), r: usize| _mm256_mul_ps(_mm256_loadu_ps(p.add(r * lda + j)), _mm256_set1_ps(sign));
            let row = |r: usize| match b {
                None if a.1 == 1.0 => _mm256_loadu_ps(a.0.add(r * lda + j)),
                None => load(a, r),
                Some(b) => _mm256_fmadd_ps(_mm256_loadu_ps(b.0.add(r * lda + j)), _mm256_set1_ps(b.1), load(a, r)),
            };
            let (r0, r1, r2, r3, r4, r5) = (row(0), row(1), row(2), row(3), row(4), row(5));
            // The 8 x 8 transpose of rows 0..5 and two rows of zeros.
            let z = _mm256_setzero_ps();
            let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
            let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
            let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
            let (u0, u1) = (_mm256_shuffle_ps::<0x44>(t0, t2), _mm256_shuffle_ps::<0xee>(t0, t2));
            let (u2, u3) = (_mm256_shuffle_ps::<0x44>(t1, t3), _mm256_shuffle_ps::<0xee>(t1, t3));
            let (u4, u5) = (_mm256_shuffle_ps::<0x44>(t4, z), _mm256_shuffle_ps::<0xee>(t4, z));
            let (u6, u7) = (_mm256_shuffle_ps::<0x44>(t5, z), _mm256_shuffle_ps::<0xee>(t5, z));
            // Column c: rows 0..3 from u0..u3 and rows 4..5 from u4..u7, the low halves for
            // c < 4, the high ones for c >= 4.
            let cols = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            let out = tile.as_mut_ptr().add(j * ROWS);
            for (c, &v) in cols.iter().enumerate() {
                _mm256_storeu_ps(out.add(c * ROWS), v);
            }
        }
        j += 8;
    }
    j
}

/// Values of packed `a` ahead of a tile's reads that [`prefetch_a`] asks for: 4 KB, some 170
/// steps of `k`, a few hundred nanoseconds of a 6-row tile's work, about one trip to memory.
const PREFETCH_AHEAD: usize = 1024;

/// Asks for the two cache lines of packed `a` [`PREFETCH_AHEAD`] values past `ap`; the AVX-512
/// tile calls it once per four steps of `k` (which read 96 bytes of it). Constant weights
/// packed as `a` come from memory on every run of a model bigger than the cache (resnet50's
/// 100 MB), and the stream of `a` jumps from tile to tile at each depth block, which the
/// hardware prefetcher followed late: a 1x1 2048 -> 512 conv on a 7x7 image, its weights out
/// of cache, took 1.11 ms on 2 threads, 0.61 with this (0.57 with the weights in cache).
/// (The AVX2 tile reads each slice of `a` once per panel: it asks only when there is one panel,
/// see `Tile::stream_a`.)
#[inline(always)]
pub(super) fn prefetch_a(ap: *const f32) {
    let at = ap.wrapping_add(PREFETCH_AHEAD);
    // SAFETY: a prefetch reads nothing and cannot fault, wherever it points.
    unsafe {
        _mm_prefetch::<_MM_HINT_T0>(at as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(16) as *const i8);
    }
}

/// One micro-tile: `R` rows by the panel's 16 columns (the first `cols` of them stored),
/// over `depth` steps of `k`; added to `c` when `acc`.
pub(super) struct Tile {
    pub(super) depth: usize,
    /// The tile's packed rows of `a`: `depth` groups of 6 values.
    pub(super) a: *const f32,
    pub(super) b: *const f32,
    /// Values from one row of `b` to the next: 16 in a packed panel, a row's length where
    /// `b` is read in place.
    pub(super) ldb: usize,
    pub(super) c: *mut f32,
    pub(super) ldc: usize,
    pub(super) cols: usize,
    pub(super) acc: bool,
    /// A second block of `c` the tile's sums also go to (Strassen's products, see [`Also`]).
    pub(super) also: Option<Also>,
    /// The tile's slice of `a` is read once, not once per panel: [`prefetch_a`] asks for it
    /// ahead (see [`block_a`]).
    pub(super) stream_a: bool,
}

/// A second block of `c` (rows `ldc` apart, as the first) that a tile's sums go to as well,
/// times `sign`: each of Strassen's seven products is added into one or two quadrants of `c`
/// (see `strassen.rs`), written by the tile that computed it while it is in registers, so no
/// pass of its own adds them up.
#[derive(Clone, Copy)]
pub(super) struct Also {
    /// The block's element in the tile's first row and first column.
    pub(super) c: *mut f32,
    /// 1 or -1.
    pub(super) sign: f32,
    /// Added to the block, else stored over it.
    pub(super) acc: bool,
    /// The tile's rows that the block has (an odd `m` leaves the bottom quadrants a row short).
    pub(super) rows: usize,
}

impl Tile {
    /// The tile moved `db` values along `b` and `dc` columns along `c` (and its [`Also`]).
    fn at(&self, db: usize, dc: usize) -> Tile {
        let also = self.also.map(|o| Also { c: o.c.wrapping_add(dc), ..o });
        Tile { b: self.b.wrapping_add(db), c: self.c.wrapping_add(dc), also, ..*self }
    }

    /// Runs the tile's first `rows` rows of `a` against `panels` panels of `b` from the one at
    /// `self.b` (each `step` values after the last), whose columns start at `self.c` and span
    /// `width` columns in all (the last panel may be narrower than 16), the first `skip` of
    /// them (0 or 8) left alone. With `wide`, whole panels go four at a time (what is left,
    /// fewer) to the AVX-512 tile; a narrow or half panel, or every panel without `wide`, to
    /// the AVX2 tile.
    ///
    /// # Safety
    /// As [`Tile::run_k`] for every panel; `wide` only on a CPU with AVX-512F.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sweep(self, rows: usize, panels: usize, step: usize, width: usize, skip: usize, wide: bool) {
        if skip > 0 && panels > 0 {
            // SAFETY: the first panel's columns past `skip` and the panels after it are inside
            // the operands (the caller's contract).
            unsafe {
                let half = Tile { cols: PANEL.min(width) - skip, ..self.at(skip, skip) };
                half.run(rows);
                return self.at(step, PANEL).sweep(rows, panels - 1, step, width.saturating_sub(PANEL), 0, wide);
            }
        }
        let whole = panels.min(width / PANEL);
        let mut p = 0;
        if wide {
            while p < whole {
                let group = (whole - p).min(4);
                // SAFETY: panels p..p+group are whole and inside the operands (the caller's
                // contract); the caller vouched for AVX-512F.
                unsafe {
                    super::avx512::run(&self.at(p * step, p * PANEL), rows, group, step);
                }
                p += group;
            }
        }
        for p in p..panels {
            // SAFETY: panel p is inside the operands (the caller's contract).
            unsafe { Tile { cols: PANEL.min(width - p * PANEL), ..self.at(p * step, p * PANEL) }.run(rows) };
        }
    }

    /// Runs the tile for its first `rows` (1 to 6) rows of `a`. A tile of at most 8 columns
    /// (a narrow last panel, as a 7x7 image's 49 pixels leave) multiplies one vector of the
    /// panel instead of two: the other's lanes would all be padding.
    ///
    /// # Safety
    /// As [`Tile::run_k`].
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run(&self, rows: usize) {
        // For 6, 5, .. 1 rows of `V` vectors: the sets of accumulators (see `run_k`), so that
        // a tile keeps 8 or more of them where it can.
        macro_rules! by_rows {
            ($v:literal: $s6:literal $s5:literal $s4:literal $s3:literal $s2:literal $s1:literal) => {
                match rows {
                    6 => self.run_k::<6, $v, $s6>(),
                    5 => self.run_k::<5, $v, $s5>(),
                    4 => self.run_k::<4, $v, $s4>(),
                    3 => self.run_k::<3, $v, $s3>(),
                    2 => self.run_k::<2, $v, $s2>(),
                    _ => self.run_k::<1, $v, $s1>(),
                }
            };
        }
        // SAFETY: forwarded from the caller.
        unsafe {
            if self.cols == 1 {
                self.run_column(rows)
            } else if self.cols == PANEL / 2 + 1 {
                // One vector and one column (25 pixels, half of a 7x7 image, in a 16-column
                // panel and a 9-column one): 7 multiply-adds a step of `k`, not 12.
                Tile { cols: PANEL / 2, ..*self }.run(rows);
                Tile { cols: 1, ..self.at(PANEL / 2, PANEL / 2) }.run_column(rows)
            } else if self.cols <= PANEL / 2 {
                by_rows!(1: 2 2 2 2 4 4)
            } else {
                by_rows!(2: 1 1 1 2 2 4)
            }
        }
    }

    /// A tile of one column (the last panel of a 7x7 image's 49 pixels): per step of `k`,
    /// one load of the tile's 6 values of `a` times the panel's first value, in four
    /// accumulators (a chain of one would wait on each multiply-add). The `R x 8` tile spent
    /// six broadcasts and six multiply-adds a step on that one column: a seventh of a 49-column
    /// product's time, for a 49th of its work.
    ///
    /// The 6 values are read as 8 with a plain load, whose last two lanes (the next step's
    /// first values) are never stored; only the last step, whose next values may lie past the
    /// packed `a`, reads exactly 6. A masked load (`vmaskmovps`) takes ~10 cycles on Zen 1
    /// against ~1.7 for the plain one (measured in C, data in L1): the column cost a quarter of
    /// the tile's time on a 7x7 image's 1x1 convs, for a 49th of the work.
    ///
    /// # Safety
    /// As [`Tile::run_k`], with `cols == 1` and `rows <= 6`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_column(&self, rows: usize) {
        if self.depth == 0 {
            // SAFETY: forwarded from the caller.
            return unsafe { self.store_column(rows, _mm256_setzero_ps()) };
        }
        // SAFETY (whole body): as `run_k`; every step but the last reads 8 values of the
        // tile's packed `a`, the 6 of its step and 2 of the next step's group, inside the tile.
        unsafe {
            let mut s = [_mm256_setzero_ps(); 4];
            let (mut ap, mut bp) = (self.a, self.b);
            let steps = self.depth - 1;
            for _ in 0..steps / 4 {
                for (u, acc) in s.iter_mut().enumerate() {
                    let x = _mm256_loadu_ps(ap.add(u * ROWS));
                    *acc = _mm256_fmadd_ps(x, _mm256_broadcast_ss(&*bp.add(u * self.ldb)), *acc);
                }
                ap = ap.add(4 * ROWS);
                bp = bp.add(4 * self.ldb);
            }
            for _ in 0..steps % 4 {
                s[0] = _mm256_fmadd_ps(_mm256_loadu_ps(ap), _mm256_broadcast_ss(&*bp), s[0]);
                ap = ap.add(ROWS);
                bp = bp.add(self.ldb);
            }
            // The last step: 4 + 2 values, nothing past them.
            let lo = _mm_loadu_ps(ap);
            let hi = _mm_castpd_ps(_mm_load_sd(ap.add(4) as *const f64));
            let x = _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(lo), hi);
            s[1] = _mm256_fmadd_ps(x, _mm256_broadcast_ss(&*bp), s[1]);
            self.store_column(rows, _mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
        }
    }

    /// Stores (or adds, with `acc`) the first `rows` lanes of `sum` down the tile's column.
    ///
    /// # Safety
    /// As [`Tile::run_column`].
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store_column(&self, rows: usize, sum: __m256) {
        let mut tmp = [0.0f32; 8];
        // SAFETY: `tmp` holds 8 values; rows r < rows of the tile's column are inside `c`.
        unsafe {
            _mm256_storeu_ps(tmp.as_mut_ptr(), sum);
            for (r, &v) in tmp[..rows].iter().enumerate() {
                self.put(r, 0, v);
            }
        }
    }

    /// Stores (or adds) `v`, the tile's sum at row `r`, column `j`, into `c` and its [`Also`].
    ///
    /// # Safety
    /// Row `r`, column `j` is inside the tile's blocks of `c`.
    #[inline(always)]
    unsafe fn put(&self, r: usize, j: usize, v: f32) {
        // SAFETY: the caller's contract.
        unsafe {
            let dst = self.c.add(r * self.ldc + j);
            *dst = if self.acc { *dst + v } else { v };
            if let Some(o) = self.also.filter(|o| r < o.rows) {
                let dst = o.c.add(r * self.ldc + j);
                *dst = if o.acc { *dst + o.sign * v } else { o.sign * v };
            }
        }
    }

    /// Stores (or adds) `v`, the tile's sums at row `r` from column `j`, into `c` and its
    /// [`Also`].
    ///
    /// # Safety
    /// Row `r`, columns `j..j + 8` are inside the tile's blocks of `c`; the CPU has AVX2.
    #[inline(always)]
    unsafe fn put8(&self, r: usize, j: usize, v: __m256) {
        // SAFETY: the caller's contract.
        unsafe {
            let dst = self.c.add(r * self.ldc + j);
            _mm256_storeu_ps(dst, if self.acc { _mm256_add_ps(v, _mm256_loadu_ps(dst)) } else { v });
            if let Some(o) = self.also.filter(|o| r < o.rows) {
                let (dst, v) = (o.c.add(r * self.ldc + j), _mm256_mul_ps(v, _mm256_set1_ps(o.sign)));
                _mm256_storeu_ps(dst, if o.acc { _mm256_add_ps(v, _mm256_loadu_ps(dst)) } else { v });
            }
        }
    }

    /// `R` rows by `V` vectors (8 columns each) of the tile, the steps of `k` spread over `S`
    /// (1, 2 or 4) sets of `R x V` accumulators, added together at the end. Two FMA pipes
    /// with a 4-cycle latency need 8 independent chains: with fewer a tile waits on its own
    /// multiply-adds (a 1-row tile, a matrix-vector product such as resnet's fc, could issue
    /// one every other cycle, a quarter of the rate; resnet50's fc on 2 threads: 0.52-0.60 ->
    /// 0.45-0.51 ms).
    ///
    /// # Safety
    /// The pointers hold what [`Tile`]'s fields say; `cols <= 8 * V`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn run_k<const R: usize, const V: usize, const S: usize>(&self) {
        // SAFETY (whole body): `block` passes pointers to `depth` groups of 6 packed values
        // of `a` (the first R used), `depth` rows of 16 values of `b` (`ldb` apart) and R rows of
        // `cols` values of `c`.
        unsafe {
            let mut sets = [[[_mm256_setzero_ps(); V]; R]; S];
            let (mut ap, mut bp) = (self.a, self.b);
            let step = |s: &mut [[__m256; V]; R], ap: *const f32, bp: *const f32| {
                let b: [__m256; V] = std::array::from_fn(|v| _mm256_loadu_ps(bp.add(8 * v)));
                for (r, acc) in s.iter_mut().enumerate() {
                    let x = _mm256_broadcast_ss(&*ap.add(r));
                    for (a, &b) in acc.iter_mut().zip(&b) {
                        *a = _mm256_fmadd_ps(x, b, *a);
                    }
                }
            };
            // Four steps a trip: fewer loop instructions beside the loads the steps need (a
            // 6 x 16 tile in C measured 84-87 GFLOP/s unrolled, on a core that peaks at ~90;
            // a software prefetch of the panel only took load slots from it).
            for _ in 0..self.depth / 4 {
                if self.stream_a {
                    prefetch_a(ap);
                }
                for u in 0..4 {
                    step(&mut sets[u % S], ap.add(u * ROWS), bp.add(u * self.ldb));
                }
                ap = ap.add(4 * ROWS);
                bp = bp.add(4 * self.ldb);
            }
            for _ in 0..self.depth % 4 {
                step(&mut sets[0], ap, bp);
                ap = ap.add(ROWS);
                bp = bp.add(self.ldb);
            }
            let mut s = sets[0];
            for set in &sets[1..] {
                for (acc, part) in s.iter_mut().zip(set) {
                    for (a, &p) in acc.iter_mut().zip(part) {
                        *a = _mm256_add_ps(*a, p);
                    }
                }
            }
            for (r, acc) in s.iter().enumerate() {
                if self.cols == 8 * V {
                    for (v, &a) in acc.iter().enumerate() {
                        self.put8(r, 8 * v, a);
                    }
                } else {
                    let mut tmp = [0.0f32; PANEL];
                    for (v, &a) in acc.iter().enumerate() {
                        _mm256_storeu_ps(tmp.as_mut_ptr().add(8 * v), a);
                    }
                    for (j, &v) in tmp[..self.cols].iter().enumerate() {
                        self.put(r, j, v);
                    }
                }
            }
        }
    }
}

/// `dst[k] = src[2k]` for the first groups of 8 (stride-2 convs' input rows), two loads and
/// two shuffles a group instead of eight scalar loads; returns how many it wrote. A group is
/// only taken while an element beyond it remains, so its 16 loaded values stay inside what
/// the caller vouched for.
///
/// # Safety
/// `src[2k]` must be readable for every `k < dst.len()`; the CPU has AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn gather_even(dst: &mut [f32], src: *const f32) -> usize {
    let mut k = 0;
    while k + 9 <= dst.len() {
        // SAFETY: src[2k..2k+16] lies within src[..2 * (dst.len() - 1)] (k + 9 <= len).
        unsafe {
            let (lo, hi) = (_mm256_loadu_ps(src.add(2 * k)), _mm256_loadu_ps(src.add(2 * k + 8)));
            // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then the 64-bit lanes in order 0 2 1 3.
            let even = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
            let even = _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(even)));
            _mm256_storeu_ps(dst.as_mut_ptr().add(k), even);
        }
        k += 8;
    }
    k
}
