//! kiln's packed GEMM (`kiln_cpu::gemm`) against a plain f64 triple loop: edge tiles (rows not
//! a multiple of 6, columns past a 16-wide panel), depths around its 256 block, row blocks
//! past 120 rows, padded row strides (padding left untouched), a strided `b`, threads split by
//! rows and by panels, and NaN / Inf. Skipped, with a note, on a CPU without AVX2 and FMA.
//! On a CPU with AVX-512 the whole file runs twice: on the AVX-512 tiles, and once more in a
//! child process kept to the AVX2 tiles (`KILN_GEMM_AVX2`).

use kiln_cpu::gemm::{self, PackedB};

fn available() -> bool {
    if !gemm::supported() {
        eprintln!("note: skipping the packed GEMM tests: this CPU lacks AVX2/FMA");
    }
    gemm::supported()
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `a` is `[m, k]` at row stride `lda`, `b` `[k, n]` dense; checks `c` at row stride `ldc`
/// from kiln's GEMM (see [`assert_product`]).
fn check(m: usize, n: usize, k: usize, lda: usize, ldc: usize) {
    let a = values(m.max(1) * lda, (m * 31 + k) as u64);
    let b = values(k * n, (n * 17 + k) as u64);
    let packed = PackedB::from_rows(k, n, &b).expect("b holds k * n values");
    assert_eq!((packed.k(), packed.n()), (k, n));
    let mut c = vec![SENTINEL; m.max(1) * ldc];
    // SAFETY: a holds m rows of lda >= k values, c m rows of ldc >= n.
    unsafe { gemm::gemm(m, a.as_ptr(), lda, &packed, c.as_mut_ptr(), ldc) };
    assert_product(&c, ldc, (m, n, k), |i, t| a[i * lda + t], |t, j| b[t * n + j]);
}

/// What the output's padding columns hold before a product, and must still hold after.
const SENTINEL: f32 = 1234.5;

/// Asserts that `c` (`m` rows `ldc` apart) holds `a @ b` within rounding, against an f64
/// loop over `a(i, t)` and `b(t, j)`, and that its padding columns still hold [`SENTINEL`].
fn assert_product(
    c: &[f32],
    ldc: usize,
    (m, n, k): (usize, usize, usize),
    a: impl Fn(usize, usize) -> f32,
    b: impl Fn(usize, usize) -> f32,
) {
    for i in 0..m {
        for j in 0..ldc {
            let got = c[i * ldc + j];
            if j >= n {
                assert_eq!(got, SENTINEL, "padding ({i}, {j}) of m{m} n{n} k{k} was written");
                continue;
            }
            let want: f64 = (0..k).map(|t| a(i, t) as f64 * b(t, j) as f64).sum();
            let tol = 1e-5 * (k as f64).sqrt().max(1.0);
            assert!(
                (got as f64 - want).abs() <= tol,
                "({i}, {j}) of m{m} n{n} k{k}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn edge_tiles_and_depths() {
    if !available() {
        return;
    }
    // Every tile height 1..6 (tiles under 4 rows spread k over 2 or 4 sets of accumulators);
    // 0 to 6 whole panels with and without a narrow last one (the AVX-512 tile takes whole
    // panels 4, 3, 2 or 1 at a time).
    for m in [1, 2, 3, 4, 5, 6, 7, 8, 9, 13] {
        for n in [1, 9, 15, 16, 17, 25, 40, 48, 64, 100] {
            for k in [1, 3, 255, 256, 257, 600] {
                check(m, n, k, k + 3, n + 5);
            }
        }
    }
}

#[test]
fn one_thread_crosses_row_blocks_depth_blocks_and_sweeps() {
    if !available() {
        return;
    }
    // One thread sees every block of a: 250 rows (two full 120-row blocks packed, then 10
    // rows ending in a 4-row tile), 513 deep (two 256 passes and one of 1), 19 panels (sweeps
    // of 8, 8 and 3), padded strides.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    pool.install(|| check(250, 300, 513, 520, 310));
}

#[test]
fn zero_depth_writes_zeros() {
    if !available() {
        return;
    }
    let packed = PackedB::from_rows(0, 20, &[]).expect("an empty b");
    let mut c = vec![7.0f32; 3 * 20];
    // SAFETY: c holds 3 rows of 20; a is never read when k = 0.
    unsafe { gemm::gemm(3, [0.0f32].as_ptr(), 0, &packed, c.as_mut_ptr(), 20) };
    assert!(c.iter().all(|&v| v == 0.0));
}

#[test]
fn threads_split_rows_and_panels() {
    if !available() {
        return;
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    pool.install(|| {
        // Many rows (split by rows, past one 120-row block), then few (split by panels).
        check(250, 200, 300, 300, 200);
        // bert's 128 rows: 64 a thread, each part ending in a 4-row tile.
        check(128, 200, 300, 300, 200);
        check(2, 1000, 300, 300, 1000);
        check(7, 333, 513, 520, 340);
    });
}

#[test]
fn strided_b_packs_as_its_values() {
    if !available() {
        return;
    }
    // b given transposed ([n, k] storage read with row stride 1, column stride k), as a
    // linear layer keeps its weight.
    let (m, n, k) = (9, 21, 70);
    let bt = values(n * k, 5);
    let b: Vec<f32> = (0..k * n).map(|i| bt[(i % n) * k + i / n]).collect();
    // SAFETY: every (t, j) with t < k, j < n is at t + j * k < n * k.
    let from_t = unsafe { PackedB::pack(k, n, bt.as_ptr(), 1, k as isize) };
    let dense = PackedB::from_rows(k, n, &b).unwrap();
    let a = values(m * k, 6);
    let (mut c1, mut c2) = (vec![0.0f32; m * n], vec![0.0f32; m * n]);
    // SAFETY: dense operands of the stated sizes.
    unsafe {
        gemm::gemm(m, a.as_ptr(), k, &from_t, c1.as_mut_ptr(), n);
        gemm::gemm(m, a.as_ptr(), k, &dense, c2.as_mut_ptr(), n);
    }
    assert_eq!(c1, c2);
}

#[test]
fn short_b_is_refused() {
    assert!(PackedB::from_rows(4, 4, &[0.0; 15]).is_none());
}

#[test]
fn nan_and_inf_propagate() {
    if !available() {
        return;
    }
    let (m, n, k) = (7, 18, 5);
    let mut a = values(m * k, 1);
    a[2 * k + 1] = f32::NAN; // row 2: all NaN
    a[4 * k] = f32::INFINITY; // row 4: +-inf or NaN where b is 0
    let mut b = values(k * n, 2);
    b[0] = 0.0; // inf * 0 = NaN in column 0 of row 4
    let packed = PackedB::from_rows(k, n, &b).unwrap();
    let mut c = vec![0.0f32; m * n];
    // SAFETY: dense operands of the stated sizes.
    unsafe { gemm::gemm(m, a.as_ptr(), k, &packed, c.as_mut_ptr(), n) };
    assert!(c[2 * n..3 * n].iter().all(|v| v.is_nan()));
    assert!(c[4 * n].is_nan());
    assert!(c[4 * n + 1..5 * n].iter().all(|v| v.is_infinite()));
    assert!(c[..2 * n].iter().all(|v| v.is_finite()));
}

/// `gemm_a`: `a` `[m, k]` at row stride `lda` packed once, `b` `[k, n]` at strides
/// (`rs`, `cs`) inside a buffer of `b_len`, `c` at row stride `ldc` (padding keeps a
/// sentinel), against the f64 reference (see [`assert_product`]).
fn check_a(m: usize, n: usize, k: usize, lda: usize, (rs, cs): (usize, usize), ldc: usize) {
    let a = values(m.max(1) * lda, (m * 29 + k) as u64);
    let b_len = if k * n == 0 { 1 } else { (k - 1) * rs + (n - 1) * cs + 1 };
    let b = values(b_len, (n * 13 + k) as u64);
    // SAFETY: a holds m rows of lda >= k values.
    let packed = unsafe { gemm::PackedA::pack(m, k, a.as_ptr(), lda as isize, 1) };
    assert_eq!((packed.m(), packed.k()), (m, k));
    let mut c = vec![SENTINEL; m.max(1) * ldc];
    // SAFETY: every (t, j) of b is inside its b_len values; c holds m rows of ldc >= n.
    unsafe { gemm::gemm_a(&packed, n, b.as_ptr(), rs as isize, cs as isize, c.as_mut_ptr(), ldc) };
    assert_product(&c, ldc, (m, n, k), |i, t| a[i * lda + t], |t, j| b[t * rs + j * cs]);
}

/// A right-hand side whose rows are whole cache lines (`rs` a multiple of 16 floats, the
/// first row 64-byte aligned) is read in place, sweeps of whole panels at least; the values
/// between a row's last column and the next row are NaN, so reading one shows.
fn check_a_aligned(m: usize, n: usize, k: usize) {
    let rs = n.next_multiple_of(16) + 16;
    let a = values(m * k, (m * 7 + k) as u64);
    let mut buf = vec![f32::NAN; k * rs + 16];
    let at = buf.as_ptr().align_offset(64);
    let b = values(k * n, (n * 5 + k) as u64);
    for t in 0..k {
        buf[at + t * rs..at + t * rs + n].copy_from_slice(&b[t * n..(t + 1) * n]);
    }
    // SAFETY: a holds m rows of k values.
    let packed = unsafe { gemm::PackedA::pack(m, k, a.as_ptr(), k as isize, 1) };
    let mut c = vec![SENTINEL; m * (n + 3)];
    // SAFETY: k rows of n values rs apart from buf[at]; c holds m rows of n + 3.
    unsafe { gemm::gemm_a(&packed, n, buf.as_ptr().add(at), rs as isize, 1, c.as_mut_ptr(), n + 3) };
    assert_product(&c, n + 3, (m, n, k), |i, t| a[i * k + t], |t, j| b[t * n + j]);
}

#[test]
fn packed_a_reads_rows_of_whole_lines_in_place() {
    if !available() {
        return;
    }
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            // Whole panels only (one sweep, several, by panels and by tiles); a last sweep with a
            // narrow panel (packed) after whole ones in place; depths past one 256 pass and past
            // one block of packed rows; every tile height.
            // (40, 200, 300) on two threads: split at column 104, half way through panel 6.
            for (m, n, k) in [(7, 64, 300), (13, 160, 513), (64, 3136, 256), (5, 40, 20), (9, 200, 70), (300, 48, 1100), (40, 200, 300)] {
                check_a_aligned(m, n, k);
            }
            for m in 1..=6 {
                check_a_aligned(m, 128, 33);
            }
        });
    }
}

#[test]
fn packed_a_edge_tiles_depths_and_sweeps() {
    if !available() {
        return;
    }
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    one.install(|| {
        // Every tile height 1..6 (tiles under 4 rows spread k over 2 or 4 sets of accumulators).
    for m in [1, 2, 3, 4, 5, 6, 7, 8, 9, 13] {
            for n in [1, 9, 15, 16, 17, 25, 49, 64, 130] {
                for k in [1, 3, 255, 256, 257, 600] {
                    check_a(m, n, k, k + 3, (n + 2, 1), n + 5);
                }
            }
        }
        // 19 panels: sweeps of 8, 8 and 3 over three depth blocks.
        check_a(20, 300, 513, 513, (300, 1), 300);
    });
}

#[test]
fn packed_a_threads_split_panels_and_tiles_and_b_may_be_strided() {
    if !available() {
        return;
    }
    let two = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    two.install(|| {
        check_a(64, 3136, 256, 256, (3136, 1), 3136); // many panels: split by panels
        check_a(512, 12, 300, 300, (12, 1), 12); // one panel: split by row tiles
        check_a(70, 49, 2048, 2048, (49, 1), 49); // resnet50's last stage: fewer columns than rows, by tiles
        check_a(9, 40, 70, 70, (1, 70), 40); // b transposed
        // Split by columns in vectors of 8: a 7x7 image's 49 columns go 0..24 and 24..49, the
        // second thread starting half way through panel 1.
        check_a(40, 49, 300, 300, (49, 1), 53);
    });
    // Three parts of 58 columns: 0..16, 16..40 (ends half way through a panel), 40..58 (starts
    // half way through one).
    let three = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    three.install(|| check_a(30, 58, 300, 300, (58, 1), 61));
}

#[test]
fn packed_a_zero_depth_writes_zeros_and_nan_propagates() {
    if !available() {
        return;
    }
    let packed = unsafe { gemm::PackedA::pack(3, 0, [0.0f32].as_ptr(), 0, 1) };
    let mut c = vec![7.0f32; 3 * 20];
    // SAFETY: c holds 3 rows of 20; b is never read when k = 0.
    unsafe { gemm::gemm_a(&packed, 20, [0.0f32].as_ptr(), 20, 1, c.as_mut_ptr(), 20) };
    assert!(c.iter().all(|&v| v == 0.0));

    let (m, n, k) = (7, 18, 5);
    let a = values(m * k, 3);
    let mut b = values(k * n, 4);
    b[2 * n + 3] = f32::NAN; // column 3: NaN in every row
    b[n + 5] = f32::INFINITY; // column 5: +-inf
    // SAFETY: dense operands of the stated sizes.
    let packed = unsafe { gemm::PackedA::pack(m, k, a.as_ptr(), k as isize, 1) };
    let mut c = vec![0.0f32; m * n];
    unsafe { gemm::gemm_a(&packed, n, b.as_ptr(), n as isize, 1, c.as_mut_ptr(), n) };
    for i in 0..m {
        assert!(c[i * n + 3].is_nan());
        assert!(c[i * n + 5].is_infinite());
        assert!(c[i * n + 4].is_finite());
    }
}

/// `gemm_a_panels` (on the pool) and `gemm_a_panels_here` (on this thread): `b` written
/// straight into panels of 16 columns (`k` rows of 16 each, the last panel's columns past `n`
/// holding NaN, which must never reach `c`), against the f64 reference; some deep enough to
/// take more than one block of `b`'s rows, some big enough to split over threads by row
/// tiles or by panels.
#[test]
fn packed_a_with_b_already_in_panels() {
    if !available() {
        return;
    }
    let cases = [(1, 1, 1), (7, 8, 3), (13, 24, 257), (64, 208, 64), (8, 16, 600), (20, 49, 9), (300, 49, 1000), (40, 300, 200), (40, 49, 300)];
    for ((m, n, k), here) in cases.into_iter().flat_map(|c| [(c, false), (c, true)]) {
        let a = values(m * k, (m + k) as u64);
        let b = values(k * n, (n * 7 + k) as u64);
        let panels = n.div_ceil(gemm::PANEL);
        let mut bp = vec![f32::NAN; panels * k * gemm::PANEL];
        for t in 0..k {
            for j in 0..n {
                bp[((j / gemm::PANEL) * k + t) * gemm::PANEL + j % gemm::PANEL] = b[t * n + j];
            }
        }
        // SAFETY: dense operands of the stated sizes; c holds m rows of n + 3.
        let packed = unsafe { gemm::PackedA::pack(m, k, a.as_ptr(), k as isize, 1) };
        let mut c = vec![SENTINEL; m * (n + 3)];
        let run = if here { gemm::gemm_a_panels_here } else { gemm::gemm_a_panels };
        unsafe { run(&packed, n, bp.as_ptr(), c.as_mut_ptr(), n + 3) };
        assert_product(&c, n + 3, (m, n, k), |i, t| a[i * k + t], |t, j| b[t * n + j]);
    }
}

/// On an AVX-512 CPU the tests above ran the AVX-512 tiles; this runs them all again, in a
/// child process of this test binary with `KILN_GEMM_AVX2` set, on the AVX2 tiles that other
/// CPUs run.
#[test]
fn avx2_tiles_pass_too_on_an_avx512_cpu() {
    if !gemm::wide() {
        // Either this CPU has no AVX-512 (every test above ran the AVX2 tiles) or this is
        // the child process.
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .env("KILN_GEMM_AVX2", "1")
        .args(["--test-threads", "2"])
        .output()
        .expect("the test binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the AVX2 tiles failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("test result: ok"), "the child ran no tests:\n{text}");
}

/// Strassen's product (`gemm::strassen`) of `a` `[m, k]` at row stride `lda` by `b` `[k, n]`
/// read through strides (`rs`, `cs`) inside a buffer of `k * n`, `c` at row stride `ldc`,
/// against the f64 reference (see [`assert_product`]; its bound holds for one level of
/// Strassen on values in [-1, 1), whose error is a few times the plain product's).
fn check_strassen(m: usize, n: usize, k: usize, lda: usize, (rs, cs): (usize, usize), ldc: usize) {
    let a = values(m.max(1) * lda, (m * 7 + k) as u64);
    let b = values(k * n, (n * 5 + k) as u64);
    // SAFETY: (i, j) for i < k, j < n is at i * rs + j * cs < k * n.
    let split = unsafe { gemm::strassen::StrassenB::pack(k, n, b.as_ptr(), rs as isize, cs as isize) }.expect("even k and n");
    assert_eq!((split.k(), split.n()), (k, n));
    let mut c = vec![SENTINEL; m.max(1) * ldc];
    // SAFETY: a holds m rows of lda >= k values, c m rows of ldc >= n.
    assert!(unsafe { gemm::strassen::gemm(m, a.as_ptr(), lda, &split, c.as_mut_ptr(), ldc) });
    assert_product(&c, ldc, (m, n, k), |i, t| a[i * lda + t], |t, j| b[t * rs + j * cs]);
}

#[test]
fn strassen_matches_the_product_for_odd_rows_edges_strides_and_threads() {
    if !available() {
        return;
    }
    // Odd m (the bottom half one row short), halves crossing the 6-row tiles, 16-column
    // panels and depth passes (a half depth of 500 in two passes of 250), padded strides, b
    // dense and transposed; big enough shapes that the products split over threads.
    for (m, n, k) in [(1, 2, 2), (2, 4, 6), (3, 34, 10), (13, 18, 4), (64, 96, 40), (127, 66, 520), (130, 512, 514), (71, 64, 1000)] {
        check_strassen(m, n, k, k, (n, 1), n);
        check_strassen(m, n, k, k + 3, (1, k), n + 5);
    }
}

#[test]
fn strassen_declines_an_a_with_nan_or_inf() {
    if !available() {
        return;
    }
    // Strassen's first product adds row r of `a` to row r + m/2: an infinity in one would
    // turn the other's results to NaN. Such an `a` is left to the plain product.
    // The check runs on the packed sums of `a`'s quadrants: a bad value in any quadrant, of
    // an even or odd `m`, and in the same place of two quadrants (inf - inf) must show there.
    let (n, k) = (32, 16);
    let b = values(k * n, 4);
    let split = gemm::strassen::StrassenB::pack_rows(k, n, &b).expect("even k and n");
    for m in [8usize, 7] {
        let h = m.div_ceil(2);
        // (row, column) in each quadrant, and a top and a bottom value at the same spot.
        let spots: [&[(usize, usize)]; 5] = [&[(1, 2)], &[(2, 9)], &[(h, 3)], &[(m - 1, 15)], &[(0, 9), (h, 9)]];
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for spot in spots {
                let mut a = values(m * k, 3);
                for &(r, j) in spot {
                    a[r * k + j] = bad;
                }
                let mut c = vec![SENTINEL; m * n];
                // SAFETY: dense operands of the stated sizes.
                assert!(!unsafe { gemm::strassen::gemm(m, a.as_ptr(), k, &split, c.as_mut_ptr(), n) }, "m {m}, {bad} at {spot:?}");
                assert!(c.iter().all(|&v| v == SENTINEL), "a declined product wrote c");
            }
        }
    }
    // A declined call of 12 rows leaves a NaN in lane 5 of the packed sums' first tile; a
    // call of 8 rows (4 a tile) must not read that lane as its own.
    let mut a = values(12 * k, 3);
    a[5 * k] = f32::NAN;
    let mut c = vec![SENTINEL; 12 * n];
    // SAFETY: dense operands of the stated sizes.
    assert!(!unsafe { gemm::strassen::gemm(12, a.as_ptr(), k, &split, c.as_mut_ptr(), n) });
    check_strassen(8, n, k, k, (n, 1), n);
}

#[test]
fn strassen_refuses_odd_dims_and_weights_that_are_not_finite() {
    assert!(gemm::strassen::StrassenB::pack_rows(3, 4, &[0.5; 12]).is_none());
    assert!(gemm::strassen::StrassenB::pack_rows(4, 3, &[0.5; 12]).is_none());
    if !available() {
        return;
    }
    let mut b = vec![0.5f32; 16];
    assert!(gemm::strassen::StrassenB::pack_rows(4, 4, &b).is_some());
    b[5] = f32::INFINITY;
    assert!(gemm::strassen::StrassenB::pack_rows(4, 4, &b).is_none());
    // Finite weights whose sums overflow.
    let b = [f32::MAX; 16];
    assert!(gemm::strassen::StrassenB::pack_rows(4, 4, &b).is_none());
}

#[test]
fn strassen_is_chosen_only_where_it_pays() {
    // Whatever this CPU's default, forced on it still declines odd and small shapes, and
    // forced off it declines bert's.
    gemm::strassen::force(true);
    assert!(gemm::strassen::worth(128, 768, 3072));
    assert!(!gemm::strassen::worth(128, 767, 3072));
    assert!(!gemm::strassen::worth(8, 768, 3072));
    assert!(!gemm::strassen::worth(128, 64, 64));
    gemm::strassen::force(false);
    assert!(!gemm::strassen::worth(128, 768, 3072));
    gemm::strassen::force(true);
}
