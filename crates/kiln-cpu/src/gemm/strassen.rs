//! One level of Strassen's algorithm over kiln's packed GEMM: `c = a @ b` as seven products of
//! half the size in each dim instead of eight, for products by constant weights (bert's). The
//! GEMM runs at 90-95% of a Zen 1 core's FMA peak, the limit ONNX Runtime's MLAS meets as well, so
//! doing fewer multiply-adds is what is left to gain.
//!
//! The sums of `b`'s quadrants are packed once with the weights (1.75 times their size); the
//! sums of `a`'s quadrants are formed as the GEMM packs `a` (see [`Lhs`]), so they cost no pass
//! of their own. Four products are written into `c`'s quadrants, three into scratch, and one
//! pass over `c` adds them up.
//!
//! Rounding: each element of `c` is a sum of products of sums of two elements, so its error
//! bound is a small multiple of the plain product's (the same sort of trade as the Winograd
//! convs'). It runs where [`enabled`] says: by default only on cores whose FMA units are half
//! width (Zen 1), where the multiply-adds it saves outweigh the larger weights it reads.

use super::{Lhs, PackedB, Term, gemm_lhs};
use std::sync::atomic::{AtomicU8, Ordering};

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

/// The quadrant of `c` that each of `M7`, `M3`, `M2`, `M6` is written into before the sums
/// (the one whose sum it starts); the others go to scratch.
const IN_PLACE: [(usize, usize); 4] = [(6, 0), (2, 1), (1, 2), (5, 3)];

/// True when kiln runs products by a constant `[k, n]` on `m` rows by Strassen's algorithm:
/// where it is [`enabled`], for even `k` and `n` and every dim large enough that the half-size
/// products keep the GEMM's rate.
pub fn worth(m: usize, k: usize, n: usize) -> bool {
    enabled() && k % 2 == 0 && n % 2 == 0 && m >= 64 && k >= 512 && n >= 512
}

/// Whether Strassen's product is on in this process: `KILN_STRASSEN=1` or `0` says so, else it
/// is on where multiply-adds are the scarce resource, cores that split each 256-bit FMA in
/// two halves ([`half_width_fma`]). It trades an eighth of the multiply-adds for weights 1.75x
/// the size, read from memory on every forward (bert-base: 340 -> 595 MB): on a Zen 1 VM
/// (2 cores, ~86 GFLOP/s) bert-base's products took ~10% less time, on a Zen 3 one (~177
/// GFLOP/s, the same ~18 GB/s of memory bandwidth) 6-9% more (`kiln bench bert-base --profile
/// 63`, each setting twice, alternated: products 191.6 and 168.7 ms by Strassen against 180.7
/// and 154.3 plain). Not for the memory: there the plain products ran within 2% of the same on
/// weights in cache (`bert layers` in benches/kernels.rs), so it is this form's own overhead
/// (seven half-depth products, each a parallel step, and the pass adding them up) that the
/// faster FMA units no longer hide. Read once per process, or set by [`force`].
pub fn enabled() -> bool {
    match MODE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = match std::env::var("KILN_STRASSEN").as_deref() {
                Ok("0") => false,
                Ok(_) => true,
                Err(_) => half_width_fma(),
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

/// True on AMD's Zen 1 and Zen+ (family 17h, models below 30h), whose FMA units are 128 bits
/// wide: a 256-bit multiply-add takes both, so the cores peak at half the multiply-adds a
/// cycle of Zen 2 and later or of Intel's AVX2 cores, while their memory is no slower.
fn half_width_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    return super::vendor_is(b"AuthenticAMD") && zen1(std::arch::x86_64::__cpuid(1).eax);
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// True when an AMD CPU's signature (CPUID leaf 1's `eax`) is family 17h, model below 30h.
fn zen1(signature: u32) -> bool {
    let (base, extended) = ((signature >> 8) & 0xf, (signature >> 20) & 0xff);
    let family = if base == 0xf { base + extended } else { base };
    let model = ((signature >> 4) & 0xf) | (((signature >> 16) & 0xf) << 4);
    family == 0x17 && model < 0x30
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

thread_local! {
    /// [`gemm`]'s scratch for the products not written into `c`, reused across calls.
    static SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `c[m, n] = a[m, k] @ b` (row strides `lda`, `ldc`; unit column strides) by one level of
/// Strassen's algorithm, each product on [`super::gemm`]'s threads; true when done. An odd
/// `m` is split `m.div_ceil(2)` over the rest, the missing row of the bottom half read as
/// zeros. False, with nothing written, when `a` holds an infinity or NaN: the sums would carry
/// it into other rows (`M1` adds row `r` of `a` to row `r + m / 2`) and other columns' results
/// (NaN from inf - inf where the plain product gives inf), so the caller runs the plain product.
///
/// # Safety
/// As [`super::gemm`].
#[must_use]
pub unsafe fn gemm(m: usize, a: *const f32, lda: usize, b: &StrassenB, c: *mut f32, ldc: usize) -> bool {
    let (h, kh, nh) = (m.div_ceil(2), b.k / 2, b.n / 2);
    if m == 0 || nh == 0 {
        return true;
    }
    // SAFETY: the caller's contract.
    if (0..m).any(|i| !all_finite(unsafe { std::slice::from_raw_parts(a.add(i * lda), b.k) })) {
        return false;
    }
    let bottom = m - h;
    // Quadrant q of `a` as a term of a sum.
    let quadrant = |q: usize, sign: f32| Term {
        a: a.wrapping_add(q / 2 * h * lda + q % 2 * kh),
        sign,
        rows: if q < 2 { h } else { bottom },
    };
    let lhs = |sum: Sum| Lhs {
        lda,
        first: quadrant(sum[0].0, sum[0].1),
        second: sum.get(1).map(|&(q, s)| quadrant(q, s)),
    };
    // Where each product goes: a quadrant of `c` (rows `ldc` apart) or scratch (`nh` apart).
    // The bottom quadrants have `h` rows only when `m` is even.
    let scratch_len = (7 - IN_PLACE.len() + if bottom < h { 2 } else { 0 }) * h * nh;
    let mut scratch = SCRATCH.take();
    if scratch.len() < scratch_len {
        scratch.resize(scratch_len, 0.0);
    }
    let corner = |q: usize| c.wrapping_add(q / 2 * h * ldc + q % 2 * nh);
    let mut slots = [(std::ptr::null_mut::<f32>(), 0usize); 7];
    let mut free = scratch.as_mut_ptr();
    for (i, slot) in slots.iter_mut().enumerate() {
        *slot = match IN_PLACE.iter().find(|&&(p, _)| p == i) {
            Some(&(_, q)) if q < 2 || bottom == h => (corner(q), ldc),
            _ => {
                let s = free;
                free = free.wrapping_add(h * nh);
                (s, nh)
            }
        };
    }
    for (i, &(sum, _)) in PRODUCTS.iter().enumerate() {
        // SAFETY: each term's rows and columns are inside `a` (the caller's contract); the slot
        // holds h rows of nh values (a quadrant of `c` or scratch).
        unsafe { gemm_lhs(h, lhs(sum), &b.parts[i], slots[i].0, slots[i].1) };
    }
    // SAFETY: the slots hold the products, `c` the caller's m rows.
    unsafe { combine(m, h, nh, &slots, c, ldc) };
    SCRATCH.set(scratch);
    true
}

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

/// Adds the products up into `c`'s quadrants, rows side by side over the pool; `c` already
/// holds `M7`, `M3` in its top quadrants and, when `m` is even, `M2`, `M6` in its bottom ones.
///
/// # Safety
/// Each slot holds `h` rows of `nh` values; `c` holds `m` rows of `2 * nh` values `ldc` apart.
unsafe fn combine(m: usize, h: usize, nh: usize, slots: &[(*mut f32, usize); 7], c: *mut f32, ldc: usize) {
    let (slots, c) = (slots.map(|(p, ld)| (p as usize, ld)), c as usize);
    let row = move |i: usize, r: usize| {
        let (p, ld) = slots[i];
        // SAFETY: row r < h of slot i (the caller's contract); only read.
        unsafe { std::slice::from_raw_parts((p as *const f32).add(r * ld), nh) }
    };
    const CHUNK: usize = 4;
    crate::par::for_each_task(h.div_ceil(CHUNK), |t| {
        for r in t * CHUNK..((t + 1) * CHUNK).min(h) {
            // SAFETY: rows r and h + r of `c` are distinct rows inside it (r < h); the other
            // slots read are scratch.
            let top = unsafe { std::slice::from_raw_parts_mut((c as *mut f32).add(r * ldc), 2 * nh) };
            let (c0, c1) = top.split_at_mut(nh);
            let (m1, m4, m5) = (row(0, r), row(3, r), row(4, r));
            if h + r < m {
                // SAFETY: as `top`.
                let bot = unsafe { std::slice::from_raw_parts_mut((c as *mut f32).add((h + r) * ldc), 2 * nh) };
                let (c2, c3) = bot.split_at_mut(nh);
                if m % 2 == 1 {
                    // M2 and M6 are in scratch: start the bottom quadrants with them.
                    c2.copy_from_slice(row(1, r));
                    c3.copy_from_slice(row(5, r));
                }
                // C3 = M6 + M1 - M2 + M3 while C1 still holds M3 alone; C2 = M2 + M4.
                for (((d3, d2), &x1), (&x3, &x4)) in c3.iter_mut().zip(c2.iter_mut()).zip(m1).zip(c1.iter().zip(m4)) {
                    *d3 += x1 - *d2 + x3;
                    *d2 += x4;
                }
            }
            // C0 = M7 + M1 + M4 - M5; C1 = M3 + M5.
            for ((d0, d1), ((&x1, &x4), &x5)) in c0.iter_mut().zip(c1.iter_mut()).zip(m1.iter().zip(m4).zip(m5)) {
                *d0 += x1 + x4 - x5;
                *d1 += x5;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn zen1_is_told_from_its_signature() {
        assert!(super::zen1(0x0080_0f12)); // EPYC 7551 (Zen 1): family 17h, model 01h
        assert!(super::zen1(0x0080_0f82)); // Ryzen 7 2700X (Zen+): model 08h
        assert!(!super::zen1(0x0083_0f10)); // EPYC 7742 (Zen 2): model 31h
        assert!(!super::zen1(0x00a0_0f11)); // EPYC 7763 (Zen 3): family 19h
        assert!(!super::zen1(0x0005_0654)); // Xeon (Skylake): family 6
    }
}
