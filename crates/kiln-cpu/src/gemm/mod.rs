//! kiln's own f32 GEMM for x86-64 CPUs with AVX2 and FMA: `c = a @ b` where `b` was packed once
//! ([`PackedB`]) into panels of 16 columns, as ONNX Runtime's MLAS does with a model's
//! weights. The compiled MatMul extern runs products by constant weights on it (packed on the
//! step's first run, see `compiled/prepack.rs`): the `gemm` crate packs `b` again on every
//! call, which costs most when `a` has few rows (bert's 128 tokens). `a` is copied into 6-row
//! tiles one 120 x 256 block at a time (so the micro-kernel reads it as one stream); the loop
//! order keeps a tile in L1 while it sweeps a 256 x 128 block of `b` held in L2.
//!
//! Measured side by side with the `gemm` crate by `cargo bench -p kiln-cpu --bench kernels --
//! packed` (this 2-core AVX2 VM, noisy: figures vary by a third from minute to minute): on
//! bert-base's shapes 100-140 GFLOP/s against 90-100 on 2 threads, 70-78 against 58-68 on
//! one (the FMA units' peak is about 90 a core). Convolutions with constant weights outside
//! the conv tiles take [`gemm_a`]: the weights packed once as the left side ([`PackedA`]), the
//! image or its im2col matrix packed per call (`-- packed-a`: resnet50's 1x1 convs 1.07-1.30x
//! the `gemm` crate), or read where it lies when its rows are whole cache lines.
//!
//! On a CPU with AVX-512F ([`wide`]) whole panels go four at a time to a 6 x 64 tile in zmm
//! registers (`avx512.rs`), on the same packed layouts; narrow last panels stay on the AVX2
//! tile. On this 2-core AMD Zen 4 VM (whose FMA units are 256 bits wide, so both tiles share
//! one peak, ~113 GFLOP/s a core) it ran bert-base's products 0.72-0.81x the AVX2 tile's time
//! and 0.81-0.89x the `gemm` crate's AVX-512 kernel's, 2 threads.
//!
//! [`available`] says whether kiln uses it on this CPU (not on Intel's AVX-512 CPUs, where the
//! `gemm` crate was faster); elsewhere matmuls keep the `gemm` crate.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod strassen;

use rayon::prelude::*;
use std::ops::Range;

/// Columns per panel of a packed `b` (two AVX2 vectors).
pub const PANEL: usize = 16;

/// Multiply-adds below which a product stays on one thread.
const PAR_WORK: usize = 1 << 18;

/// True when this CPU can run the packed GEMM: x86-64 with AVX2 and FMA.
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// True when kiln runs constant-weight matmuls on the packed GEMM: a [`supported`] CPU that
/// is not an Intel one with AVX-512, and `KILN_DISABLE_PACKED_GEMM` unset (it sends every
/// matmul to the `gemm` crate, for comparisons). Checked once per process.
///
/// Intel's AVX-512 cores have two 512-bit FMA units, which the `gemm` crate's kernel fed
/// better: on the GPU machine's Xeon, 2 threads, bert-base took 135-145 ms on the `gemm` crate
/// against 155-165 on kiln's AVX-512 tile (resnet50 within the noise). AMD's Zen 4 splits a
/// 512-bit FMA in two, and there kiln's tile was the faster (bert-base 128 against 136 ms,
/// sums of per-step minimums).
pub fn available() -> bool {
    static YES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *YES.get_or_init(|| supported() && !intel_avx512() && std::env::var_os("KILN_DISABLE_PACKED_GEMM").is_none())
}

/// True on an Intel CPU with AVX-512F.
fn intel_avx512() -> bool {
    avx512f() && vendor_is(b"GenuineIntel")
}

/// True when CPUID's vendor string is `name` ("GenuineIntel", "AuthenticAMD"); false off x86-64.
pub(crate) fn vendor_is(name: &[u8; 12]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let id = std::arch::x86_64::__cpuid(0);
        [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes).concat() == name
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = name;
        false
    }
}

/// True when this CPU has AVX-512F.
pub(crate) fn avx512f() -> bool {
    #[cfg(target_arch = "x86_64")]
    let yes = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    let yes = false;
    yes
}

/// True when the packed GEMM runs whole panels on its AVX-512 tile (see `avx512.rs`): the CPU
/// has AVX-512F and `KILN_GEMM_AVX2` is unset (it keeps every tile on AVX2, for comparisons
/// and for testing those tiles on such a CPU). Checked once per process.
pub fn wide() -> bool {
    static YES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *YES.get_or_init(|| supported() && avx512f() && std::env::var_os("KILN_GEMM_AVX2").is_none())
}

/// A `[k, n]` right-hand side packed for [`gemm`]: panel `p` holds columns `16p..16p+16` as
/// `k` rows of 16 contiguous values (zeros past `n`).
pub struct PackedB {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl PackedB {
    /// Packs the `[k, n]` matrix whose element `(i, j)` is at `ptr + i * rs + j * cs`.
    ///
    /// # Safety
    /// Every element the strides reach must be inside a live allocation.
    pub unsafe fn pack(k: usize, n: usize, ptr: *const f32, rs: isize, cs: isize) -> PackedB {
        // SAFETY: the caller's contract.
        unsafe { Self::pack_sum(k, n, &[(ptr, 1.0)], rs, cs) }
    }

    /// Packs the sum of `[k, n]` matrices, each `sign` (1 or -1) times the one whose element
    /// `(i, j)` is at `ptr + i * rs + j * cs`: Strassen's sums of a matrix's quadrants.
    ///
    /// # Safety
    /// As [`PackedB::pack`], for each matrix.
    pub(crate) unsafe fn pack_sum(k: usize, n: usize, terms: &[(*const f32, f32)], rs: isize, cs: isize) -> PackedB {
        // Fresh zeroed pages, each first touched by a write: a page first read maps the shared
        // zero page, and the write after it faults again and flushes every core's TLB (an
        // interrupt to each, costly in a VM: it doubled the packing time of bert's weights).
        let mut data = vec![0.0f32; n.div_ceil(PANEL) * k * PANEL];
        if k == 0 {
            return PackedB { k, n, data };
        }
        let terms: Vec<(usize, f32)> = terms.iter().map(|&(p, sign)| (p as usize, sign)).collect();
        // Panels are independent; a big weight (bert's 768 x 3072) packs in parallel.
        data.par_chunks_exact_mut(k * PANEL)
            .enumerate()
            .with_min_len((1 << 16) / (k * PANEL) + 1)
            .for_each(|(p, panel)| {
                let j0 = p * PANEL;
                let cols = PANEL.min(n - j0);
                let at = |src: usize, i: usize| (src as *const f32).wrapping_offset(i as isize * rs + j0 as isize * cs);
                if rs.unsigned_abs() < cs.unsigned_abs() {
                    // Columns lie along memory (a weight stored [n, k], as PyTorch's Linear
                    // stores it): read each down its rows. Row by row, the 16 columns' reads
                    // took ~5 ns an element (bert-base's weights: 0.4 s of its first run).
                    for j in 0..cols {
                        for (t, &(src, sign)) in terms.iter().enumerate() {
                            let col = at(src, 0).wrapping_offset(j as isize * cs);
                            for (i, row) in panel.chunks_exact_mut(PANEL).enumerate() {
                                // SAFETY: (i, j0 + j) is inside the caller's matrices.
                                let x = sign * unsafe { *col.offset(i as isize * rs) };
                                row[j] = if t == 0 { x } else { row[j] + x };
                            }
                        }
                    }
                    return;
                }
                for (i, row) in panel.chunks_exact_mut(PANEL).enumerate() {
                    let mut sum = [0.0f32; PANEL];
                    for (t, &(src, sign)) in terms.iter().enumerate() {
                        // SAFETY: (i, j0 + j) for j < cols is inside the caller's matrices.
                        unsafe { gather_row(&mut sum[..cols], at(src, i), cs) };
                        let row = &mut row[..cols];
                        match t {
                            0 => row.iter_mut().zip(&sum).for_each(|(v, &x)| *v = sign * x),
                            _ => row.iter_mut().zip(&sum).for_each(|(v, &x)| *v += sign * x),
                        }
                    }
                }
            });
        PackedB { k, n, data }
    }

    /// Packs a dense row-major `[k, n]` slice.
    pub fn from_rows(k: usize, n: usize, rows: &[f32]) -> Option<PackedB> {
        // SAFETY: the length check keeps every (i, j) inside `rows`.
        (rows.len() >= k * n).then(|| unsafe { Self::pack(k, n, rows.as_ptr(), n as isize, 1) })
    }

    /// Rows (the product's inner dim).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns.
    pub fn n(&self) -> usize {
        self.n
    }

    fn panels(&self) -> usize {
        self.n.div_ceil(PANEL)
    }

    /// The packed values, padding included.
    pub(crate) fn values(&self) -> &[f32] {
        &self.data
    }
}

/// A constant right-hand side packed once for kiln's GEMM: as [`PackedB`], or as the sums of
/// its quadrants that Strassen's algorithm multiplies where [`strassen::worth`] says it pays.
pub enum PackedRhs {
    /// Panels of 16 columns, for [`gemm`].
    Plain(PackedB),
    /// Strassen's seven sums, for [`strassen::gemm`].
    Strassen(strassen::StrassenB),
}

impl PackedRhs {
    /// Packs the `[k, n]` matrix whose element `(i, j)` is at `ptr + i * rs + j * cs` for
    /// products by `m` rows at a time.
    ///
    /// # Safety
    /// Every element the strides reach must be inside a live allocation.
    pub unsafe fn pack(m: usize, k: usize, n: usize, ptr: *const f32, rs: isize, cs: isize) -> PackedRhs {
        // SAFETY: the caller's contract.
        unsafe {
            match strassen::worth(m, k, n).then(|| strassen::StrassenB::pack(k, n, ptr, rs, cs)).flatten() {
                Some(b) => PackedRhs::Strassen(b),
                None => PackedRhs::Plain(PackedB::pack(k, n, ptr, rs, cs)),
            }
        }
    }

    /// `c[m, n] = a[m, k] @ self`, as [`gemm`]; false, with nothing written, where Strassen's
    /// product declines an `a` (see [`strassen::gemm`]) and the caller must run the plain one.
    ///
    /// # Safety
    /// As [`gemm`].
    #[must_use]
    pub unsafe fn gemm(&self, m: usize, a: *const f32, lda: usize, c: *mut f32, ldc: usize) -> bool {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                PackedRhs::Plain(b) => {
                    gemm(m, a, lda, b, c, ldc);
                    true
                }
                PackedRhs::Strassen(b) => strassen::gemm(m, a, lda, b, c, ldc),
            }
        }
    }
}

/// `c[m, n] = a[m, k] @ b` (row strides `lda`, `ldc`; unit column strides), split over the
/// rayon pool when large: by rows when there are enough of them, else by column panels.
/// Zeros when `k == 0`. Panics when the CPU is not [`supported`] (callers check first).
///
/// # Safety
/// `a` must hold `m` rows of `b.k()` values and `c` `m` rows of `b.n()` values at the given
/// strides; `c` must not overlap `a`.
pub unsafe fn gemm(m: usize, a: *const f32, lda: usize, b: &PackedB, c: *mut f32, ldc: usize) {
    assert!(supported(), "kiln_cpu::gemm needs AVX2 and FMA");
    let (n, panels) = (b.n, b.panels());
    if m == 0 || n == 0 {
        return;
    }
    if b.k == 0 {
        // SAFETY: c holds m rows of n values ldc apart (the caller's contract).
        unsafe { zero_rows(m, n, c, ldc) };
        return;
    }
    let job = Job { a: Lhs::rows(a, lda, m), b, c, ldc };
    let threads = rayon::current_num_threads();
    if threads < 2 || m * n * b.k < PAR_WORK {
        job.run(0..m, 0..panels);
        return;
    }
    // Rows or whole panels per thread, whichever splits more evenly (rows on a tie: each thread
    // then reads all of b, which stays in the shared L3).
    let even = |units: usize| units as f64 / (threads * units.div_ceil(threads)) as f64;
    if even(m.div_ceil(ROWS)) >= even(panels) {
        crate::par::for_each_task(threads, |i| job.run(even_rows(m, threads, i), 0..panels));
    } else {
        in_parts(panels, panels.div_ceil(threads), |part| job.run(0..m, part));
    }
}

/// One block of rows of a left-hand side, times `sign` (see [`Lhs`]).
#[derive(Clone, Copy)]
pub(crate) struct Term {
    /// The block's first row.
    pub(crate) a: *const f32,
    /// 1 or -1: exact, so a product of a sum is as exact as the sum.
    pub(crate) sign: f32,
    /// Rows the block has; those past them read as zeros (an odd row count split in halves).
    pub(crate) rows: usize,
}

/// The left-hand side of a product as `avx2::pack_a` packs it: rows `lda` apart, of one block
/// or, for Strassen's products (see `strassen.rs`), the signed sum of two blocks of one matrix,
/// summed as it is packed.
#[derive(Clone, Copy)]
pub(crate) struct Lhs {
    pub(crate) lda: usize,
    pub(crate) first: Term,
    pub(crate) second: Option<Term>,
}

impl Lhs {
    /// `rows` rows at `a`, `lda` apart.
    pub(crate) fn rows(a: *const f32, lda: usize, rows: usize) -> Lhs {
        Lhs { lda, first: Term { a, sign: 1.0, rows }, second: None }
    }
}

/// Rows of part `i` of `parts` over `m`: an even share, ending part way through a 6-row tile
/// where it must. A tile's time is about proportional to its rows (a 4-row tile keeps 8
/// accumulators and takes 4 cycles a step against the 6-row tile's 6), so bert's 128 rows go
/// 64 and 64 (10 tiles and a 4-row one each), where whole tiles went 66 and 62 (11 tiles
/// against 10 and a 2-row one): every product waited on the thread with 11. Measured on
/// bert-base's 48 weight products of a forward, 40 alternated pairs in one process:
/// 1.6% and 0.6% faster in two runs (`bert layers` in benches/kernels.rs).
fn even_rows(m: usize, parts: usize, i: usize) -> Range<usize> {
    i * m / parts..(i + 1) * m / parts
}

/// Rows of `c` one micro-tile computes.
const ROWS: usize = 6;

/// Runs `part` on the rayon pool for each range of `step` units of `0..len`, and waits.
fn in_parts(len: usize, step: usize, part: impl Fn(Range<usize>) + Sync) {
    crate::par::for_each_task(len.div_ceil(step), |i| part(i * step..((i + 1) * step).min(len)));
}

/// Zeros `m` rows of `n` values `ldc` apart (a product over an empty inner dim).
///
/// # Safety
/// `c` holds those rows.
unsafe fn zero_rows(m: usize, n: usize, c: *mut f32, ldc: usize) {
    for i in 0..m {
        // SAFETY: row i of c, inside the caller's bounds.
        unsafe { std::ptr::write_bytes(c.add(i * ldc), 0, n) };
    }
}

/// Copies `dst.len()` values from `src`, `cs` apart, into `dst` (a row of a packed panel, of
/// a padded image or of an im2col matrix): one memcpy at unit stride, 8 values at a time with
/// AVX2 shuffles at stride 2 (stride-2 convs), else one by one.
///
/// # Safety
/// `src + j * cs` is readable for every `j < dst.len()`.
pub(crate) unsafe fn gather_row(dst: &mut [f32], src: *const f32, cs: isize) {
    if cs == 1 {
        // SAFETY: the caller's contract, with unit stride.
        dst.copy_from_slice(unsafe { std::slice::from_raw_parts(src, dst.len()) });
        return;
    }
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if cs == 2 && supported() {
        // SAFETY: the caller's contract; the CPU has AVX2.
        done = unsafe { avx2::gather_even(dst, src) };
    }
    for (j, v) in dst.iter_mut().enumerate().skip(done) {
        // SAFETY: the caller's contract.
        *v = unsafe { *src.offset(j as isize * cs) };
    }
}

/// A `[m, k]` left-hand side packed once for [`gemm_a`]: tile `t` holds rows `6t..6t+6` as
/// `k` groups of 6 contiguous values (zeros past `m`), the order the micro-kernel reads. A
/// convolution's weights take this side: its right-hand side, the image (or its im2col
/// matrix), changes with every call and is packed per call in blocks.
pub struct PackedA {
    m: usize,
    k: usize,
    data: Vec<f32>,
}

impl PackedA {
    /// Packs the `[m, k]` matrix whose element `(i, j)` is at `ptr + i * rs + j * cs`.
    ///
    /// # Safety
    /// Every element the strides reach must be inside a live allocation.
    pub unsafe fn pack(m: usize, k: usize, ptr: *const f32, rs: isize, cs: isize) -> PackedA {
        let mut data = vec![0.0f32; m.div_ceil(ROWS) * k * ROWS];
        if k == 0 {
            return PackedA { m, k, data };
        }
        let src = ptr as usize;
        data.par_chunks_exact_mut(k * ROWS)
            .enumerate()
            .with_min_len((1 << 16) / (k * ROWS) + 1)
            .for_each(|(t, tile)| {
                for r in 0..ROWS.min(m - t * ROWS) {
                    // SAFETY: row t*6 + r < m and every column j < k are inside the caller's matrix.
                    let row = unsafe { (src as *const f32).offset((t * ROWS + r) as isize * rs) };
                    for j in 0..k {
                        tile[j * ROWS + r] = unsafe { *row.offset(j as isize * cs) };
                    }
                }
            });
        PackedA { m, k, data }
    }

    /// Rows.
    pub fn m(&self) -> usize {
        self.m
    }

    /// Columns (the product's inner dim).
    pub fn k(&self) -> usize {
        self.k
    }
}

/// `c[m, n] = a @ b` for a packed `a` and a `[k, n]` right-hand side whose element `(i, j)` is
/// at `b + i * rs + j * cs` (packed here, 16 columns by 256 rows at a time, by the thread
/// that uses it); `c` row-major with row stride `ldc`. Split over the rayon pool by column
/// panels (each thread packs only its own columns) when `b` has at least as many columns as
/// `a` has rows, else by row tiles (each thread reads only its rows of `a`), unless there are
/// fewer of those than threads. Panics when the CPU is not [`supported`].
///
/// # Safety
/// Every element of `b` the strides reach for `i < k`, `j < n` is inside a live allocation;
/// `c` holds `m` rows of `n` values `ldc` apart and overlaps neither operand.
pub unsafe fn gemm_a(a: &PackedA, n: usize, b: *const f32, rs: isize, cs: isize, c: *mut f32, ldc: usize) {
    // SAFETY: the caller's contract.
    unsafe { gemm_a_on(rayon::current_num_threads(), a, n, Rhs::Strided { b, rs, cs }, c, ldc, Then::default()) }
}

/// Called with (rows, columns) of `c` as soon as that block is final, by the thread that
/// wrote it, while the block is still in its cache: a conv's epilogue runs there (ONNX
/// Runtime's MLAS likewise post-processes each block of its output as it finishes it). Every
/// element of `c` is in exactly one block.
pub type Done<'a> = &'a (dyn Fn(Range<usize>, Range<usize>) + Sync);

/// Called with a range of columns of `c` once every row of them is final (after [`Done`] on
/// each of their blocks), by the thread that computed them, while they are still in its
/// cache: a second product that reads those columns runs there (a 1x1 conv chained onto the
/// conv before it). Every column is in exactly one range.
pub type Swept<'a> = &'a (dyn Fn(Range<usize>) + Sync);

/// What a [`gemm_a_then`]-style product calls as it finishes its output.
#[derive(Clone, Copy, Default)]
pub struct Then<'a> {
    /// On each block of rows by columns (see [`Done`]).
    pub block: Option<Done<'a>>,
    /// On each range of whole columns (see [`Swept`]); the product is then split over threads
    /// by columns only, so that one thread computes every row of a column.
    pub swept: Option<Swept<'a>>,
}

/// [`gemm_a`], calling `then`'s callbacks on its output as it finishes it (see [`Then`]).
///
/// # Safety
/// As [`gemm_a`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_a_then(a: &PackedA, n: usize, b: *const f32, rs: isize, cs: isize, c: *mut f32, ldc: usize, then: Then) {
    // SAFETY: the caller's contract.
    unsafe { gemm_a_on(rayon::current_num_threads(), a, n, Rhs::Strided { b, rs, cs }, c, ldc, then) }
}

/// [`gemm_a_then`] on the calling thread alone: for a product run inside another one's
/// callback (see [`Swept`]).
///
/// # Safety
/// As [`gemm_a`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_a_here_then(a: &PackedA, n: usize, b: *const f32, rs: isize, cs: isize, c: *mut f32, ldc: usize, then: Then) {
    // SAFETY: the caller's contract.
    unsafe { gemm_a_on(1, a, n, Rhs::Strided { b, rs, cs }, c, ldc, then) }
}

/// `c[m, n] = a @ b` for a right-hand side already laid out as [`PackedB`] lays out its data
/// (panel `p`, of 16 columns, holds `a.k()` rows of 16 values at `b + p * a.k() * 16`): for
/// callers that write `b` that way (a conv's im2col matrix), split over the rayon pool as
/// [`gemm_a`] splits. Columns past `n` in the last panel are read but never stored.
///
/// # Safety
/// `b` holds `n.div_ceil(16)` such panels; `c` holds `m` rows of `n` values `ldc` apart and
/// overlaps neither operand.
pub unsafe fn gemm_a_panels(a: &PackedA, n: usize, b: *const f32, c: *mut f32, ldc: usize) {
    // SAFETY: the caller's contract.
    unsafe { gemm_a_on(rayon::current_num_threads(), a, n, Rhs::Panels(b), c, ldc, Then::default()) }
}

/// [`gemm_a_panels`], calling `then`'s callbacks on its output as it finishes it (see [`Then`]).
///
/// # Safety
/// As [`gemm_a_panels`].
pub unsafe fn gemm_a_panels_then(a: &PackedA, n: usize, b: *const f32, c: *mut f32, ldc: usize, then: Then) {
    // SAFETY: the caller's contract.
    unsafe { gemm_a_on(rayon::current_num_threads(), a, n, Rhs::Panels(b), c, ldc, then) }
}

/// [`gemm_a_panels`] on the calling thread alone: for callers that run many small products
/// side by side themselves (the Winograd conv's 36 per image).
///
/// # Safety
/// As [`gemm_a_panels`].
pub unsafe fn gemm_a_panels_here(a: &PackedA, n: usize, b: *const f32, c: *mut f32, ldc: usize) {
    // SAFETY: the caller's contract.
    unsafe { gemm_a_on(1, a, n, Rhs::Panels(b), c, ldc, Then::default()) }
}

/// The right-hand side of a [`gemm_a`]-style product.
#[derive(Clone, Copy)]
enum Rhs {
    /// Element `(i, j)` at `b + i * rs + j * cs`, packed per call.
    Strided { b: *const f32, rs: isize, cs: isize },
    /// Already in panels (see [`gemm_a_panels`]).
    Panels(*const f32),
}

/// [`gemm_a`] split over at most `threads` parts.
///
/// # Safety
/// As [`gemm_a`] for a strided `b`, [`gemm_a_panels`] for one in panels.
unsafe fn gemm_a_on(threads: usize, a: &PackedA, n: usize, b: Rhs, c: *mut f32, ldc: usize, then: Then) {
    assert!(supported(), "kiln_cpu::gemm needs AVX2 and FMA");
    let (m, k) = (a.m, a.k);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // SAFETY: c holds m rows of n values ldc apart (the caller's contract).
        unsafe { zero_rows(m, n, c, ldc) };
        if let Some(done) = then.block {
            done(0..m, 0..n);
        }
        if let Some(swept) = then.swept {
            swept(0..n);
        }
        return;
    }
    let job = JobA { a, n, b, c, ldc, then };
    let (panels, tiles) = (n.div_ceil(PANEL), m.div_ceil(ROWS));
    if threads < 2 || m * n * k < PAR_WORK {
        job.run(0..tiles, 0..n);
        return;
    }
    // Split by columns, each thread reading all of `a` and packing its own columns of `b`, or by
    // row tiles, each reading its share of `a` and packing all of `b`: whichever operand is
    // smaller is the one every thread reads. (A 7x7 image's 49 columns against 512 rows of
    // weights: by columns, both threads streamed all 9.4 MB of a 3x3 conv's weights.)
    let by_columns = then.swept.is_some() || (panels >= threads && (n >= m || tiles < threads));
    if by_columns {
        let parts = threads.min(n.div_ceil(8));
        crate::par::for_each_task(parts, |i| job.run(0..tiles, even_columns(n, parts, i)));
    } else {
        in_parts(tiles, tiles.div_ceil(threads), |part| job.run(part, 0..n));
    }
}

/// Columns of part `i` of `parts` over `n`: the even share rounded to the nearest vector of 8
/// columns, the micro-kernel's unit (a tile may start or end half way through a 16-column
/// panel). Whole panels are not even: a 7x7 image's 49 columns went 32 and 17 (a chained
/// conv's two threads on layer 4 of resnet50 waited on the one with 32), where 24 and 25 is
/// even; a 14x14 image's 196 went 112 and 84 before panels were balanced by vectors.
fn even_columns(n: usize, parts: usize, i: usize) -> Range<usize> {
    let at = |i: usize| if i >= parts { n } else { ((i * n + 4 * parts) / (8 * parts) * 8).min(n) };
    at(i)..at(i + 1)
}

/// The operands of one [`gemm_a`] call, shared by its threads.
struct JobA<'a> {
    a: &'a PackedA,
    n: usize,
    b: Rhs,
    c: *mut f32,
    ldc: usize,
    then: Then<'a>,
}

// SAFETY: threads only read `a` and `b` and write disjoint blocks of `c` (see `gemm_a`);
// `then`'s callbacks are Sync.
unsafe impl Sync for JobA<'_> {}

impl JobA<'_> {
    /// Row tiles `tiles`, columns `cols` of `c` (see [`avx2::block_a`]).
    fn run(&self, tiles: Range<usize>, cols: Range<usize>) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `gemm_a`'s caller vouched for the operands; `gemm_a` checked the CPU.
        unsafe {
            avx2::block_a(tiles, cols, self.a, self.n, self.b, self.c, self.ldc, wide(), self.then, avx2::Out::default())
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (tiles, cols);
    }
}

/// The operands of one [`gemm`] call, shared by its threads.
struct Job<'a> {
    a: Lhs,
    b: &'a PackedB,
    c: *mut f32,
    ldc: usize,
}

// SAFETY: threads only read `a` and `b` and write disjoint blocks of `c` (see `gemm`).
unsafe impl Sync for Job<'_> {}

impl Job<'_> {
    /// Rows `rows` of `c`, panels `panels` of its columns.
    fn run(&self, rows: Range<usize>, panels: Range<usize>) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `gemm`'s caller vouched for the operands; `gemm` checked the CPU.
        unsafe {
            avx2::block(rows, panels, self.a, self.b, self.c, self.ldc, wide())
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (rows, panels);
    }
}

#[cfg(test)]
mod tests {
    use super::{even_columns, even_rows};

    #[test]
    fn rows_split_evenly_and_cover_every_row_once() {
        // bert-base's 128 tokens on 2 threads: 64 each, not 66 and 62 in whole tiles.
        assert_eq!((0..2).map(|i| even_rows(128, 2, i)).collect::<Vec<_>>(), [0..64, 64..128]);
        for m in 0usize..200 {
            for parts in 1..=5 {
                let ranges: Vec<_> = (0..parts).map(|i| even_rows(m, parts, i)).collect();
                assert_eq!((ranges[0].start, ranges[parts - 1].end), (0, m), "m {m} parts {parts}");
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start), "m {m} parts {parts}: {ranges:?}");
                assert!(ranges.iter().all(|r| parts * r.len() <= m + parts), "m {m} parts {parts}: {ranges:?}");
            }
        }
    }

    #[test]
    fn columns_split_evenly_in_vectors_and_cover_every_column_once() {
        // resnet50's 7x7 and 14x14 images.
        assert_eq!((0..2).map(|i| even_columns(49, 2, i)).collect::<Vec<_>>(), [0..24, 24..49]);
        assert_eq!((0..2).map(|i| even_columns(196, 2, i)).collect::<Vec<_>>(), [0..96, 96..196]);
        for n in 1usize..300 {
            for parts in 1..=n.div_ceil(8).min(5) {
                let ranges: Vec<_> = (0..parts).map(|i| even_columns(n, parts, i)).collect();
                assert_eq!(ranges[0].start, 0, "n {n} parts {parts}");
                assert_eq!(ranges[parts - 1].end, n, "n {n} parts {parts}");
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start), "n {n} parts {parts}: {ranges:?}");
                assert!(ranges.iter().all(|r| r.start % 8 == 0), "n {n} parts {parts}: {ranges:?}");
                // No part more than a vector past an even share.
                assert!(ranges.iter().all(|r| parts * r.len() <= n + 8 * parts), "n {n} parts {parts}: {ranges:?}");
            }
        }
    }
}
