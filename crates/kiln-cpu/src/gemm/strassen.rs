//! One level of Strassen's algorithm over kiln's packed GEMM: `c = a @ b` as seven products of
//! half the size in each dim instead of eight, for products by constant weights (bert's). The
//! GEMM runs at 90-95% of a Zen 1 core's FMA peak, the limit ONNX Runtime's MLAS meets as well, so
//! doing fewer multiply-adds is what is left to gain.
//!
//! The sums of `b`'s quadrants are packed once with the weights (1.75 times their size); the
//! sums of `a`'s quadrants are packed per call, as the GEMM packs `a` (see [`Lhs`]). Each
//! tile of a product adds its sums straight into the one or two quadrants of `c` the product
//! belongs to (see `avx2::Also`), so no scratch and no pass over `c` adds the products up.
//!
//! Rounding: each element of `c` is a sum of products of sums of two elements, so its error
//! bound is a small multiple of the plain product's (the same sort of trade as the Winograd
//! convs'). It runs where [`enabled`] says: by default on AMD's cores without AVX-512, where
//! the multiply-adds it saves were measured to outweigh its overhead.

use super::avx2::{self, Also, Out};
use super::{Lhs, PAR_WORK, PackedA, PackedB, ROWS, Rhs, Term, Then, even_columns};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Quadrants of a matrix split in halves both ways: 0 = top left, 1 = top right, 2 = bottom
/// left, 3 = bottom right.
type Sum = &'static [(usize, f32)];

/// Strassen's seven products `M1..M7` as (sum of quadrants of `a`, sum of quadrants of `b`).
/// With them `c`'s quadrants are: `C0 = M1 + M4 - M5 + M7`, `C1 = M3 + M5`, `C2 = M2 + M4`,
/// `C3 = M1 - M2 + M3 + M6`.
const PRODUCTS: [(Sum, Sum); 7] = [
    (&[(0, 1.0), (3, 1.0)], &[(0, 1.0), (3, 1.0)]),
    (&[(2, 1.0), (3, 1.0)], &[(0, 1.0)]),
    (&[(0, 1.0)], &[(1, 1.0), (3, -1.0)]),
    (&[(3, 1.0)], &[(2, 1.0), (0, -1.0)]),
    (&[(0, 1.0), (1, 1.0)], &[(3, 1.0)]),
    (&[(2, 1.0), (0, -1.0)], &[(0, 1.0), (1, 1.0)]),
    (&[(1, 1.0), (3, -1.0)], &[(2, 1.0), (3, 1.0)]),
];

/// True when kiln runs products by a constant `[k, n]` on `m` rows by Strassen's algorithm:
/// where it is [`enabled`], for even `k` and `n` and every dim large enough that the half-size
/// products keep the GEMM's rate.
pub fn worth(m: usize, k: usize, n: usize) -> bool {
    enabled() && k % 2 == 0 && n % 2 == 0 && m >= 64 && k >= 512 && n >= 512
}

/// Whether Strassen's product is on in this process: `KILN_STRASSEN=1` or `0` says so, else it
/// is on for AMD's cores without AVX-512 (Zen 1 to Zen 3, [`default_on`]). It trades an eighth
/// of the multiply-adds for weights 1.75x the size (bert-base: 340 -> 595 MB read a forward).
/// On a Zen 1 VM (2 cores, ~86 GFLOP/s) bert-base's products took ~10% less time. On a Zen 3
/// VM (~150-180 GFLOP/s on 2 cores) the first form, seven products each its own parallel step
/// and a pass adding them up, cost 6-9% more; fused into one step whose tiles add into the
/// quadrants of `c` in one pass over the half depth ([`gemm`]), bert-base's whole forward took
/// 0.92-0.99x the plain one's on 2 threads (six runs of `cargo run --release -p kiln --example
/// strassen_ab`, 40 alternated pairs each: 0.927, 0.970, 0.993, 0.921, 0.920, 0.918) and 0.90x
/// on one. Memory is not what limits it: the plain products ran within 2% of the same on
/// weights in cache (`bert layers` in benches/kernels.rs). Read once per process, or set by
/// [`force`].
pub fn enabled() -> bool {
    match MODE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = match std::env::var("KILN_STRASSEN").as_deref() {
                Ok("0") => false,
                Ok(_) => true,
                Err(_) => default_on(),
            };
            MODE.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// Turns Strassen's product on or off for the rest of the process, whatever the CPU and
/// `KILN_STRASSEN` say: for tests and benchmarks that must run one form on any CPU. Products
/// already packed keep their form.
pub fn force(on: bool) {
    MODE.store(if on { ON } else { OFF }, Ordering::Relaxed);
}

/// [`enabled`]'s state: not yet read, on or off.
static MODE: AtomicU8 = AtomicU8::new(UNREAD);
const UNREAD: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

/// True on AMD's CPUs without AVX-512F (Zen 1 to Zen 3), where Strassen's product was
/// measured faster (see [`enabled`]; Zen 2, between the two, was not measured). Off elsewhere:
/// Intel's AVX-512 CPUs run the `gemm` crate's kernel (see [`super::available`]), and Zen 4's
/// AVX-512 tile and Intel's AVX2 cores were not measured with it.
fn default_on() -> bool {
    super::vendor_is(b"AuthenticAMD") && !super::avx512f()
}

/// A `[k, n]` right-hand side (`k`, `n` even) packed for [`gemm`]: for each of Strassen's
/// products, its sum of `b`'s quadrants as a `[k / 2, n / 2]` [`PackedB`].
pub struct StrassenB {
    k: usize,
    n: usize,
    parts: Vec<PackedB>,
}

impl StrassenB {
    /// Packs the `[k, n]` matrix whose element `(i, j)` is at `ptr + i * rs + j * cs`; `None`
    /// when `k` or `n` is odd.
    ///
    /// # Safety
    /// Every element the strides reach must be inside a live allocation.
    pub unsafe fn pack(k: usize, n: usize, ptr: *const f32, rs: isize, cs: isize) -> Option<StrassenB> {
        if k % 2 != 0 || n % 2 != 0 {
            return None;
        }
        let (kh, nh) = (k / 2, n / 2);
        // Quadrant q's first element.
        let corner = |q: usize| ptr.wrapping_offset((q / 2 * kh) as isize * rs + (q % 2 * nh) as isize * cs);
        let parts: Vec<PackedB> = PRODUCTS
            .iter()
            .map(|&(_, sum)| {
                let terms: Vec<_> = sum.iter().map(|&(q, sign)| (corner(q), sign)).collect();
                // SAFETY: each quadrant's kh x nh elements are inside the caller's matrix.
                unsafe { PackedB::pack_sum(kh, nh, &terms, rs, cs) }
            })
            .collect();
        // Weights with an infinity or NaN (or sums that overflow) would spread it over rows
        // and columns whose plain products never meet it.
        if parts.iter().any(|p| !all_finite(p.values())) {
            return None;
        }
        Some(StrassenB { k, n, parts })
    }

    /// Packs a dense row-major `[k, n]` slice; `None` as [`StrassenB::pack`], or when `rows` is
    /// short.
    pub fn pack_rows(k: usize, n: usize, rows: &[f32]) -> Option<StrassenB> {
        // SAFETY: the length check keeps every (i, j) inside `rows`.
        (rows.len() >= k * n).then(|| unsafe { Self::pack(k, n, rows.as_ptr(), n as isize, 1) }).flatten()
    }

    /// Rows (the product's inner dim).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns.
    pub fn n(&self) -> usize {
        self.n
    }
}

/// `c[m, n] = a[m, k] @ b` (row strides `lda`, `ldc`; unit column strides) by one level of
/// Strassen's algorithm; true when done. An odd `m` is split `m.div_ceil(2)` over the rest,
/// the missing row of the bottom half read as zeros. False, with nothing written, when `a`
/// holds an infinity or NaN: the sums would carry it into other rows (`M1` adds row `r` of `a`
/// to row `r + m / 2`) and other columns' results (NaN from inf - inf where the plain product
/// gives inf), so the caller runs the plain product.
///
/// Two parallel steps. The first packs the seven sums of `a`'s quadrants once, tile by tile
/// (as [`PackedA`]s), and checks them finite. In the second each thread takes an even share
/// of the half-width columns and runs all seven products on them in turn, each tile adding its
/// sums straight into the one or two quadrants of `c` its product belongs to
/// ([`DESTINATIONS`]), so no scratch and no pass over `c` adds the products up. Each thread
/// computes all `m / 2` rows of a product (bert's 64: ten 6-row tiles and a 4-row one).
/// Measured slower on 2 threads of a Zen 3 VM (`cargo bench -p kiln-cpu --bench kernels --
/// strassen`): each thread packing the sums it needs itself as the plain product packs (work
/// done twice), and a split by rows (32 a thread, five 6-row tiles and a 2-row one, each
/// thread packing its own rows' sums before each product: 1.07-1.11x plain on bert's QKV and
/// FFN1 where this form ran 0.98-1.01x). The shared packing's stores miss the cache for big
/// products (~0.16 ms a call on bert-base, 2 threads).
///
/// # Safety
/// As [`super::gemm`].
#[must_use]
pub unsafe fn gemm(m: usize, a: *const f32, lda: usize, b: &StrassenB, c: *mut f32, ldc: usize) -> bool {
    assert!(super::supported(), "kiln_cpu::gemm needs AVX2 and FMA");
    let (h, kh, nh) = (m.div_ceil(2), b.k / 2, b.n / 2);
    if m == 0 || nh == 0 {
        return true;
    }
    let (bottom, a) = (m - h, a as usize);
    // Rows of quadrant q (of `a` and of `c`).
    let height = move |q: usize| if q < 2 { h } else { bottom };
    // Quadrant q of `a` as a term of a sum.
    let quadrant = move |q: usize, sign: f32| Term {
        a: (a as *const f32).wrapping_add(q / 2 * h * lda + q % 2 * kh),
        sign,
        rows: height(q),
    };
    let lhs = |sum: Sum| Lhs {
        lda,
        first: quadrant(sum[0].0, sum[0].1),
        second: sum.get(1).map(|&(q, s)| quadrant(q, s)),
    };
    // A product that goes only to the bottom quadrants needs only their rows.
    let rows = |p: usize| height(DESTINATIONS[p].0);
    let big = m * b.k * b.n >= 8 * PAR_WORK;
    let mut sums = SUMS.take();
    sums.resize_with(PRODUCTS.len(), || PackedA { m: 0, k: 0, data: Vec::new() });
    let tiles = h.div_ceil(ROWS);
    for (p, sum) in sums.iter_mut().enumerate() {
        (sum.m, sum.k) = (rows(p), kh);
        // Never shrunk: bert's products alternate between two depths, and growing back
        // zeroed megabytes on every forward.
        if sum.data.len() < tiles * ROWS * kh {
            sum.data.resize(tiles * ROWS * kh, 0.0);
        }
    }
    let to: Vec<usize> = sums.iter_mut().map(|s| s.data.as_mut_ptr() as usize).collect();
    // Every value of `a` is in some sum, alone or beside a finite one where it is finite
    // itself, so finite sums mean a finite `a` (sums that overflow are declined too).
    let finite = AtomicBool::new(true);
    let pack = |i: usize| {
        let (p, t) = (i / tiles, i % tiles);
        let r = t * ROWS..((t + 1) * ROWS).min(rows(p));
        if r.is_empty() {
            return;
        }
        // SAFETY: tile t of sum p's buffer, written by this task alone; the terms' rows and
        // columns are inside `a` (the caller's contract).
        let tile = unsafe { std::slice::from_raw_parts_mut((to[p] as *mut f32).add(t * ROWS * kh), ROWS * kh) };
        // SAFETY: as above.
        unsafe { avx2::pack_a(tile, lhs(PRODUCTS[p].0), r.clone(), 0, kh) };
        // A short tile's lanes past its rows hold whatever an earlier call left there.
        let ok = match r.len() {
            ROWS => all_finite(tile),
            n => tile.chunks_exact(ROWS).all(|g| g[..n].iter().all(|x| x.is_finite())),
        };
        if !ok {
            finite.store(false, Ordering::Relaxed);
        }
    };
    let all = PRODUCTS.len() * tiles;
    if big { crate::par::for_each_task(all, pack) } else { (0..all).for_each(pack) }
    if !finite.into_inner() {
        SUMS.set(sums);
        return false;
    }
    let corner = |q: usize| q / 2 * h * ldc + q % 2 * nh;
    let (c, sums_ref) = (c as usize, &sums);
    let run = |cols: Range<usize>| {
        let c = c as *mut f32;
        // Quadrants these columns were written in: the next product adds to them.
        let mut written = [false; 4];
        for (p, &(first, second)) in DESTINATIONS.iter().enumerate() {
            let also = second.map(|(q, sign)| Also { c: c.wrapping_add(corner(q)), sign, acc: written[q], rows: height(q) });
            let out = Out { acc: written[first], also, depth: avx2::even_depth(kh) };
            let panels = Rhs::Panels(b.parts[p].values().as_ptr());
            // SAFETY: sum p's tiles hold rows(p) rows of kh values; part p's panels kh rows
            // of nh columns; the quadrants rows(p) (and `also`'s rows) rows of nh values of
            // `c`, of which these calls write only `cols`.
            unsafe {
                let sum = &sums_ref[p];
                let place = c.wrapping_add(corner(first));
                avx2::block_a(0..sum.m.div_ceil(ROWS), cols.clone(), sum, nh, panels, place, ldc, super::wide(), Then::default(), out);
            }
            written[first] = true;
            if let Some((q, _)) = second {
                written[q] = true;
            }
        }
    };
    let threads = if big { rayon::current_num_threads().min(nh.div_ceil(8)) } else { 1 };
    crate::par::for_each_task(threads, |i| run(even_columns(nh, threads, i)));
    SUMS.set(sums);
    true
}

thread_local! {
    /// [`gemm`]'s seven packed sums of `a`'s quadrants, kept per calling thread across calls.
    static SUMS: std::cell::Cell<Vec<PackedA>> = const { std::cell::Cell::new(Vec::new()) };
}

/// For each of [`PRODUCTS`], the quadrant of `c` it is added into (with sign 1) and the one it
/// is also added into, with its sign: `C0 = M1 + M4 - M5 + M7`, `C1 = M3 + M5`, `C2 = M2 +
/// M4`, `C3 = M1 - M2 + M3 + M6`. Every quadrant is first written by a product's first
/// destination or `M1`'s second, which store over it; the rest add.
const DESTINATIONS: [(usize, Option<(usize, f32)>); 7] =
    [(0, Some((3, 1.0))), (2, Some((3, -1.0))), (1, Some((3, 1.0))), (0, Some((2, 1.0))), (1, Some((0, -1.0))), (3, None), (0, None)];

/// True when no value of `v` is infinite or NaN (checked 8 lanes at a time, which vectorises).
fn all_finite(v: &[f32]) -> bool {
    let mut lanes = [0.0f32; 8];
    let chunks = v.chunks_exact(8);
    let rest = chunks.remainder().iter().fold(0.0f32, |s, &x| s + x * 0.0);
    for chunk in chunks {
        lanes.iter_mut().zip(chunk).for_each(|(l, &x)| *l += x * 0.0);
    }
    // x * 0 is 0 for a finite x, NaN otherwise; a NaN survives every sum.
    !(lanes.iter().sum::<f32>() + rest).is_nan()
}
