//! The f32 convolution on AVX-512 CPUs, without im2col: each tile keeps 32 output channels of
//! up to 14 output pixels in 28 vector registers and walks the taps `(c, i, j)` once,
//! multiplying one vector of 32 packed weights by each pixel's input value, read straight
//! from the (zero-padded) input. No patch matrix is built, so a 3x3 conv reads its input
//! once instead of writing and reading it nine times; the weights are packed once per
//! executable. Tiles are transposed into the NCHW output with their bias added.
//!
//! Used for KxK convs (not 1x1) of at least 64 output pixels with one group, more than one
//! input channel, a column stride of 1 or 2 and constant weights (see [`eligible`]); the
//! others take the im2col + GEMM path. The weights are packed on the conv's first run
//! (resnet50's first call took 0.08 s with and without the tiles).

use super::conv::Geom;
use super::steps::Epi;
use kiln_ir::Result;
use kiln_sched::BufView;
use rayon::prelude::*;
use std::arch::x86_64::*;

/// Output channels per tile: two 16-lane vectors.
const LANES: usize = 32;
/// Output pixels per tile at most (28 accumulators of 32 registers).
const TILE: usize = 14;
/// Taps ahead the weights are prefetched: a conv's first tile streams its panel from memory
/// (each weight is used by few pixels in late layers), so the stream must run ahead of the
/// multiply-adds rather than stall them.
const PREFETCH: usize = 24;

/// Whether this CPU runs these kernels and `KILN_DISABLE_CONV_TILES` is unset (it sends
/// every conv to im2col + GEMM, for comparisons). Checked once per process.
pub(crate) fn supported() -> bool {
    static YES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *YES.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::env::var_os("KILN_DISABLE_CONV_TILES").is_none()
    })
}

/// Whether a conv of this geometry runs here (its weights must also be constant).
pub(crate) fn eligible(g: &Geom) -> bool {
    // A 1x1 conv is a plain GEMM, whose packing keeps its operands in cache better than
    // tiles reading one element per channel plane per tap; with few output pixels, each
    // weight serves few multiply-adds and the conv is bound by streaming its weights, which
    // the GEMM does as well.
    supported()
        && g.groups == 1
        && g.cg > 1
        && g.kh * g.kw > 1
        && g.p() >= 64
        && matches!(g.a.stride[1], 1 | 2)
        && g.o > 0
}

/// The input of one image as the tiles read it: `[C][Hp][Wp]` planes, padding included;
/// read in place when the input is dense and unpadded, else copied to scratch.
struct Src {
    hp: usize,
    wp: usize,
    in_place: bool,
}

impl Src {
    fn new(g: &Geom, x: &BufView) -> Src {
        let p = g.a.padding;
        let (hp, wp) = (g.h + p[0] + p[2], g.w + p[1] + p[3]);
        let dense = x.strides[1] == g.h * g.w && x.strides[2] == g.w && x.strides[3] == 1;
        Src {
            hp,
            wp,
            in_place: p == [0; 4] && dense,
        }
    }

    /// f32 elements of scratch one image needs.
    fn elems(&self, g: &Geom) -> usize {
        if self.in_place {
            0
        } else {
            g.cg * self.hp * self.wp
        }
    }

    /// Where tap `(c, i, j)` lies from a pixel's first input element; the last tap repeats
    /// PREFETCH times for the tiles' look-ahead.
    fn taps(&self, g: &Geom) -> Vec<usize> {
        let k = g.k();
        (0..k + PREFETCH)
            .map(|t| {
                let t = t.min(k - 1);
                let (c, i, j) = (t / (g.kh * g.kw), (t / g.kw) % g.kh, t % g.kw);
                c * self.hp * self.wp + i * g.a.dilation[0] * self.wp + j * g.a.dilation[1]
            })
            .collect()
    }
}

/// f32 elements of scratch the conv needs: its padded input, unless read in place.
pub(crate) fn scratch_elems(g: &Geom, x: &BufView) -> Option<usize> {
    Some(Src::new(g, x).elems(g)).filter(|&n| n > 0)
}

/// Weights as the tiles read them: for each panel of 32 output channels, for each tap
/// `(c, i, j)`, the panel's 32 weights (zero past the last channel).
pub(crate) struct PackedWeights {
    data: Vec<f32>,
}

impl PackedWeights {
    /// Packs the `[O, K]` weight matrix at `pw` (row stride `w_rs`, column stride `w_cs`).
    ///
    /// # Safety
    /// `pw[o * w_rs + k * w_cs]` must be readable for every `o < O`, `k < K`.
    pub(crate) unsafe fn pack(g: &Geom, pw: *const f32, w_rs: usize, w_cs: usize) -> PackedWeights {
        let k = g.k();
        let mut data = vec![0.0f32; g.o.div_ceil(LANES) * k * LANES];
        let pw = pw as usize;
        data.par_chunks_mut(k * LANES)
            .enumerate()
            .for_each(|(panel, dst)| {
                for o in panel * LANES..g.o.min((panel + 1) * LANES) {
                    let row = (pw as *const f32).wrapping_add(o * w_rs);
                    for t in 0..k {
                        // SAFETY: o < O and t < K, as the caller guarantees readable.
                        dst[t * LANES + o % LANES] = unsafe { row.add(t * w_cs).read() };
                    }
                }
            });
        PackedWeights { data }
    }
}

/// Runs the convolution of every image into `pout` (`[N, O, OH, OW]`, dense), adding `bias`,
/// then the epilogue on each image's rows.
///
/// # Safety
/// `px` is the input buffer and `x` a view checked inside it; `pout` holds `N*O*OH*OW`
/// elements and overlaps nothing read; `scratch` holds [`scratch_elems`] elements.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run(
    g: &Geom,
    x: &BufView,
    px: *const f32,
    w: &PackedWeights,
    bias: Option<&[f32]>,
    pout: *mut f32,
    epi: &Epi,
    scratch: &mut [f32],
) -> Result<()> {
    let src = Src::new(g, x);
    let k = g.k();
    let taps = src.taps(g);
    let panels = g.o.div_ceil(LANES);
    // Output rows are split into chunks (of an even count, for paired rows) so that there
    // are a few tasks per thread.
    let want = (4 * rayon::current_num_threads()).div_ceil(panels);
    let chunk = g.oh.div_ceil(want.max(1)).next_multiple_of(2).max(2);
    let chunks = g.oh.div_ceil(chunk);
    let (pout_addr, p) = (pout as usize, g.p());
    for img in 0..g.n {
        let scratch = &mut scratch[..src.elems(g)];
        // SAFETY (both): image img of the checked input view; the scratch is sized for it.
        let base: *const f32 = if src.in_place {
            unsafe { px.add(x.offset + img * x.strides[0]) }
        } else {
            unsafe { pad_image(g, x, px, img, src.hp, src.wp, scratch) };
            scratch.as_ptr()
        };
        let base = base as usize;
        (0..panels * chunks).into_par_iter().for_each(|task| {
            let (panel, c) = (task / chunks, task % chunks);
            let rows = c * chunk..g.oh.min((c + 1) * chunk);
            let out = (pout_addr as *mut f32).wrapping_add((img * g.o + panel * LANES) * p);
            let wp = w.data[panel * k * LANES..].as_ptr();
            let chans = LANES.min(g.o - panel * LANES);
            let b = bias.map(|b| &b[panel * LANES..panel * LANES + chans]);
            let base = base as *const f32;
            // SAFETY: the panel's channels and rows are inside the output; every tap of every
            // pixel is inside the padded input (the conv's geometry was checked).
            unsafe { panel_rows(g, src.wp, base, &taps, wp, b, chans, out, rows) };
        });
        epi.rows(img * g.o, (img + 1) * g.o)?;
    }
    Ok(())
}

/// Copies image `img` into `dst` as `[C][Hp][Wp]` with zero padding.
///
/// # Safety
/// `x` is checked inside the buffer at `px`.
unsafe fn pad_image(
    g: &Geom,
    x: &BufView,
    px: *const f32,
    img: usize,
    hp: usize,
    wp: usize,
    dst: &mut [f32],
) {
    let [pt, pl, ..] = g.a.padding;
    let px = px as usize;
    dst.par_chunks_mut(hp * wp)
        .enumerate()
        .for_each(|(c, plane)| {
            plane[..pt * wp].fill(0.0);
            plane[(pt + g.h) * wp..].fill(0.0);
            for y in 0..g.h {
                let row = &mut plane[(pt + y) * wp..(pt + y + 1) * wp];
                row[..pl].fill(0.0);
                row[pl + g.w..].fill(0.0);
                let at = x.offset + img * x.strides[0] + c * x.strides[1] + y * x.strides[2];
                for (t, d) in row[pl..pl + g.w].iter_mut().enumerate() {
                    // SAFETY: c < C, y < H, t < W: inside the checked view.
                    *d = unsafe { (px as *const f32).add(at + t * x.strides[3]).read() };
                }
            }
        });
}

/// Output rows `rows` of one panel of `chans` (<= 32) channels starting at `out`, reading
/// padded input rows `row_len` long from `base`.
///
/// # Safety
/// See [`run`].
#[allow(clippy::too_many_arguments)]
unsafe fn panel_rows(
    g: &Geom,
    row_len: usize,
    base: *const f32,
    taps: &[usize],
    w: *const f32,
    bias: Option<&[f32]>,
    chans: usize,
    out: *mut f32,
    rows: std::ops::Range<usize>,
) {
    let mut tile = [0.0f32; TILE * LANES];
    let (sh, sw) = (g.a.stride[0], g.a.stride[1]);
    let k = taps.len() - PREFETCH;
    let t = taps.as_ptr();
    let mut oy = rows.start;
    while oy < rows.end {
        // Two rows make one tile when the output is 7 wide (resnet's last stage).
        let pair = g.ow == 7 && oy + 1 < rows.end;
        let row_at = |y: usize, ox: usize| base.wrapping_add(y * sh * row_len + ox * sw);
        let mut ox = 0;
        while ox < g.ow {
            let left = g.ow - ox;
            let tp = tile.as_mut_ptr();
            // SAFETY (each call): the tile's pixels are output pixels, whose taps are all
            // inside the padded input; `tile` holds 14 x 32 values.
            let n = unsafe {
                if pair {
                    tile_s::<2, 7>(sw, k, t, &[row_at(oy, ox), row_at(oy + 1, ox)], w, tp)
                } else if left >= TILE {
                    tile_s::<1, TILE>(sw, k, t, &[row_at(oy, ox)], w, tp)
                } else if left >= 7 {
                    tile_s::<1, 7>(sw, k, t, &[row_at(oy, ox)], w, tp)
                } else {
                    tile_s::<1, 1>(sw, k, t, &[row_at(oy, ox)], w, tp)
                }
            };
            let at = oy * g.ow + ox;
            // SAFETY: pixels at..at+n of rows oy (and oy+1) of the panel's channels.
            unsafe {
                store(tp, n, chans, bias, out.add(at), g.p());
                if pair {
                    store(tp.add(7 * LANES), 7, chans, bias, out.add(at + g.ow), g.p());
                }
            }
            ox += n;
        }
        oy += if pair { 2 } else { 1 };
    }
}

/// [`tile_k`] at column stride `sw` (1 or 2: the stride is a constant of each kernel, so
/// a pixel's address is an immediate offset); returns the tile's pixels per row (`COLS`).
///
/// # Safety
/// As [`tile_k`].
unsafe fn tile_s<const ROWS: usize, const COLS: usize>(
    sw: usize,
    k: usize,
    taps: *const usize,
    rows: &[*const f32; ROWS],
    w: *const f32,
    out: *mut f32,
) -> usize {
    // SAFETY: forwarded from the caller.
    unsafe {
        if sw == 1 {
            tile_k::<ROWS, COLS, 1>(k, taps, rows, w, out)
        } else {
            tile_k::<ROWS, COLS, 2>(k, taps, rows, w, out)
        }
    }
    COLS
}

/// `out[r * 32 + l] = sum_t x(r, t) * w[t * 32 + l]` for the `ROWS x COLS` pixels of a tile,
/// where pixel `(a, b)` reads `rows[a] + taps[t] + b * S`.
///
/// # Safety
/// AVX-512F must be available; every address read must be inside the input; `taps` holds
/// `k + PREFETCH` offsets, `w` `k * 32` values and `out` `ROWS * COLS * 32`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // indices the compiler unrolls into registers
unsafe fn tile_k<const ROWS: usize, const COLS: usize, const S: usize>(
    k: usize,
    taps: *const usize,
    rows: &[*const f32; ROWS],
    w: *const f32,
    out: *mut f32,
) {
    let mut acc = [[[_mm512_setzero_ps(); 2]; COLS]; ROWS];
    let mut w = w;
    for t in 0..k {
        // SAFETY: forwarded from the caller.
        unsafe {
            let off = taps.add(t).read();
            _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(LANES * PREFETCH) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(LANES * PREFETCH + 16) as *const i8);
            let (w0, w1) = (_mm512_loadu_ps(w), _mm512_loadu_ps(w.add(16)));
            let ahead = taps.add(t + PREFETCH).read();
            for r in 0..ROWS {
                _mm_prefetch::<_MM_HINT_T0>(rows[r].wrapping_add(ahead) as *const i8);
                let xr = rows[r].add(off);
                for c in 0..COLS {
                    let v = _mm512_set1_ps(xr.add(c * S).read());
                    acc[r][c][0] = _mm512_fmadd_ps(v, w0, acc[r][c][0]);
                    acc[r][c][1] = _mm512_fmadd_ps(v, w1, acc[r][c][1]);
                }
            }
            w = w.add(LANES);
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (c, a) in row.iter().enumerate() {
            // SAFETY: inside `out` (ROWS * COLS * 32 values).
            unsafe {
                _mm512_storeu_ps(out.add((r * COLS + c) * LANES), a[0]);
                _mm512_storeu_ps(out.add((r * COLS + c) * LANES + 16), a[1]);
            }
        }
    }
}

/// Writes a tile of `n` pixels (`tile[px * 32 + ch]`) to channel rows `ld` apart:
/// `out[ch * ld + px] = tile[px * 32 + ch] + bias[ch]` for `ch < chans`.
///
/// # Safety
/// AVX-512F must be available; `out[ch * ld + px]` writable for `ch < chans`, `px < n`.
#[target_feature(enable = "avx512f")]
unsafe fn store(
    tile: *const f32,
    n: usize,
    chans: usize,
    bias: Option<&[f32]>,
    out: *mut f32,
    ld: usize,
) {
    let idx = _mm512_setr_epi32(
        0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480,
    );
    let mask: __mmask16 = ((1u32 << n.min(16)) - 1) as u16;
    for ch in 0..chans {
        // SAFETY: lanes past n are masked off; the rest is inside the tile and the output.
        unsafe {
            let mut v = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), mask, idx, tile.add(ch));
            if let Some(b) = bias {
                v = _mm512_add_ps(v, _mm512_set1_ps(b[ch]));
            }
            _mm512_mask_storeu_ps(out.add(ch * ld), mask, v);
        }
    }
}
