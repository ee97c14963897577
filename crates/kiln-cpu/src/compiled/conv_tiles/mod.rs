//! The f32 convolution on x86-64 CPUs with AVX-512 or AVX2 + FMA, without im2col: each tile
//! keeps a panel of output channels (32 on AVX-512, 16 on AVX2) of several output pixels (up
//! to 14 / 6) in vector registers and walks the taps `(c, i, j)`, multiplying one panel of
//! packed weights by each pixel's input value, read straight from the (zero-padded) input
//! (`avx512.rs`, `avx2.rs`: the tiles; this file: packing, padding, splitting, storing). No
//! patch matrix is built, so a 3x3 conv reads its input once instead of writing and reading
//! it nine times; the weights are packed once per executable. The taps go 16 input channels
//! at a time over two output rows' tiles (see [`panel_rows`]), so the weights and input rows
//! in use stay in L1. Tiles are transposed into the NCHW output with their bias added.
//!
//! Used for KxK convs (not 1x1) of at least 64 output pixels with one group, more than one
//! input channel, a column stride of 1 or 2 (2 on AVX2 only over at most 4 input channels)
//! and constant weights (see [`eligible`]); the
//! others take the im2col + GEMM path. The weights are packed on the conv's first run
//! (resnet50's first call took 0.08 s with and without the tiles).

use super::conv::Geom;
use crate::gemm::gather_row;
use super::steps::Epi;
use kiln_ir::Result;
use kiln_sched::BufView;
use crate::par::{for_each_chunk_mut, for_each_task};
use rayon::prelude::*;

mod avx2;
mod avx512;

/// Taps ahead the weights are prefetched: a conv's first tile streams its panel from memory
/// (each weight is used by few pixels in late layers), so the stream must run ahead of the
/// multiply-adds rather than stall them.
const PREFETCH: usize = 24;

/// The tiles a CPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    Avx512,
    Avx2,
}

impl Isa {
    /// This CPU's, unless `KILN_DISABLE_CONV_TILES` is set (it sends every conv to im2col +
    /// GEMM, for comparisons). Checked once per process.
    fn detect() -> Option<Isa> {
        static ISA: std::sync::OnceLock<Option<Isa>> = std::sync::OnceLock::new();
        *ISA.get_or_init(|| {
            if std::env::var_os("KILN_DISABLE_CONV_TILES").is_some() {
                None
            } else if std::arch::is_x86_feature_detected!("avx512f") {
                Some(Isa::Avx512)
            } else if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                Some(Isa::Avx2)
            } else {
                None
            }
        })
    }

    /// Output channels per tile (a weight panel).
    fn lanes(self) -> usize {
        match self {
            Isa::Avx512 => avx512::LANES,
            Isa::Avx2 => avx2::LANES,
        }
    }

    /// Whether two output rows make one tile (AVX-512, for 7-wide outputs).
    fn pairs(self, ow: usize) -> bool {
        self == Isa::Avx512 && ow == 7
    }

    /// The tiles of one group of output pixels from flat pixel `q0` (row-major over the
    /// panel's rows, before `q_end`), pushed to `tiles`; returns where the group ends. AVX-512
    /// tiles stay within a row ([`GROUP_ROWS`] rows a group, 7-wide rows paired); AVX2 tiles
    /// take 6 pixels in a row of the flat order, wrapping across output rows, so a row width
    /// that is no multiple of 6 leaves no narrow tile at each row's end (a 1-pixel tile costs
    /// most of a 6-pixel one).
    fn group(self, ow: usize, q0: usize, q_end: usize, tiles: &mut Vec<Tile>) -> usize {
        match self {
            Isa::Avx512 => {
                let end = q_end.min(q0 + GROUP_ROWS * ow);
                let mut q = q0;
                while q < end {
                    let pair = self.pairs(ow) && q + ow < end;
                    let row_end = q + ow;
                    while q < row_end {
                        let n = avx512::width(row_end - q, pair);
                        tiles.push(Tile { q, n, pair });
                        q += n;
                    }
                    q += if pair { ow } else { 0 };
                }
                end
            }
            Isa::Avx2 => {
                let end = q_end.min(q0 + (GROUP_ROWS * ow).next_multiple_of(avx2::TILE));
                tiles.extend((q0..end).step_by(avx2::TILE).map(|q| Tile { q, n: avx2::TILE.min(end - q), pair: false }));
                end
            }
        }
    }

    /// f32 values of the tile buffer one tile needs (its pixels times the lanes, at most).
    fn tile_values(self) -> usize {
        match self {
            Isa::Avx512 => avx512::TILE * avx512::LANES,
            Isa::Avx2 => avx2::TILE * avx2::LANES,
        }
    }

    /// Tile `tile` over `k` taps into `out` (`[pixel][lanes]`): added to what `out` holds
    /// with `accumulate`, else written. `at(q)` is where flat output pixel `q`'s first tap
    /// lies in the padded input. The taps come in kernel rows of `kw`, `dw` apart within a
    /// row ([`Src::taps`]), and `k` is a whole number of rows.
    ///
    /// # Safety
    /// The CPU has this ISA; every tap of every pixel is inside the padded input; `w` holds
    /// `k * lanes` values, `taps` `k + PREFETCH` offsets and `out` [`Isa::tile_values`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        self,
        tile: Tile,
        ow: usize,
        at: impl Fn(usize) -> *const f32,
        sw: usize,
        (k, kw, dw): (usize, usize, usize),
        taps: *const usize,
        w: *const f32,
        out: *mut f32,
        accumulate: bool,
    ) {
        let Tile { q, n, pair } = tile;
        // SAFETY: forwarded from the caller.
        unsafe {
            match self {
                Isa::Avx512 => {
                    let row2 = pair.then(|| at(q + ow));
                    avx512::tile(sw, k, taps, at(q), row2, n, w, out, accumulate)
                }
                Isa::Avx2 => {
                    let mut pixels = [std::ptr::null(); avx2::TILE];
                    for (j, p) in pixels[..n].iter_mut().enumerate() {
                        *p = at(q + j);
                    }
                    avx2::tile(k, taps, kw, dw, &pixels[..n], w, out, accumulate)
                }
            }
        }
    }
}

/// One tile of output pixels: `n` from flat pixel `q` (and the `n` below them when `pair`).
#[derive(Clone, Copy)]
struct Tile {
    q: usize,
    n: usize,
    pair: bool,
}

/// Input channels of one pass over a group of output rows: the panel's weights of that many
/// channels (9 KB of a 3x3 conv on AVX2) and the input rows they read stay in L1 while every
/// tile of the rows uses them. One pass over all channels made each tile stream the whole
/// panel (36 KB at 64 channels, 147 KB at 256) from L2, evicting the input lines the next
/// tile read again.
const CHANNEL_BLOCK: usize = 16;

/// Output rows of one group (the tiles' partial sums between channel blocks stay in cache);
/// on AVX2 rounded up to whole tiles of 6 pixels. (Groups of 96 pixels on AVX2, a whole 7x7
/// image in one, ran no faster.)
const GROUP_ROWS: usize = 2;

/// Whether a conv of this geometry runs here (its weights must also be constant).
pub(crate) fn eligible(g: &Geom) -> bool {
    // A 1x1 conv is a plain GEMM, whose packing keeps its operands in cache better than
    // tiles reading one element per channel plane per tap; with few output pixels, each
    // weight serves few multiply-adds and the conv is bound by streaming its weights, which
    // the GEMM does as well.
    //
    // Stride 2 on AVX2 only over an image's few colour channels (the stem): there im2col
    // copies each pixel up to 49 times (resnet50's stem: a 7.4 MB matrix from a 0.6 MB
    // image) and the tiles ran it in 0.55-0.65x the time (one 7x7/2 conv, 1 and 2 threads,
    // alternated). The AVX2 tiles' strided loads of 6 pixels made resnet50's stride-2 3x3 convs
    // (128-512 channels) 15-30% slower than im2col + GEMM, and still up to 10% slower with the
    // channel blocks (paired runs, on a Zen 3 VM).
    let Some(isa) = Isa::detect() else {
        return false;
    };
    let stride_ok = g.a.stride[1] == 1 || (g.a.stride[1] == 2 && (isa == Isa::Avx512 || g.cg <= 4));
    g.groups == 1 && g.cg > 1 && g.kh * g.kw > 1 && g.p() >= 64 && stride_ok && g.o > 0
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
    isa: Isa,
}

impl PackedWeights {
    /// Packs the `[O, K]` weight matrix at `pw` (row stride `w_rs`, column stride `w_cs`).
    ///
    /// # Safety
    /// `pw[o * w_rs + k * w_cs]` must be readable for every `o < O`, `k < K`.
    /// Panics when the CPU runs no tiles ([`eligible`] is checked first).
    pub(super) unsafe fn pack(g: &Geom, pw: *const f32, w_rs: usize, w_cs: usize) -> PackedWeights {
        let isa = Isa::detect().expect("conv tiles packed on a CPU that runs them");
        let (k, lanes) = (g.k(), isa.lanes());
        let mut data = vec![0.0f32; g.o.div_ceil(lanes) * k * lanes];
        let pw = pw as usize;
        data.par_chunks_mut(k * lanes)
            .enumerate()
            .for_each(|(panel, dst)| {
                for o in panel * lanes..g.o.min((panel + 1) * lanes) {
                    let row = (pw as *const f32).wrapping_add(o * w_rs);
                    for t in 0..k {
                        // SAFETY: o < O and t < K, as the caller guarantees readable.
                        dst[t * lanes + o % lanes] = unsafe { row.add(t * w_cs).read() };
                    }
                }
            });
        PackedWeights { data, isa }
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
    let (isa, lanes) = (w.isa, w.isa.lanes());
    let panels = g.o.div_ceil(lanes);
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
        for_each_task(panels * chunks, |task| {
            let (panel, c) = (task / chunks, task % chunks);
            let rows = c * chunk..g.oh.min((c + 1) * chunk);
            let out = (pout_addr as *mut f32).wrapping_add((img * g.o + panel * lanes) * p);
            let wp = w.data[panel * k * lanes..].as_ptr();
            let chans = lanes.min(g.o - panel * lanes);
            let b = bias.map(|b| &b[panel * lanes..panel * lanes + chans]);
            let base = base as *const f32;
            // SAFETY: the panel's channels and rows are inside the output; every tap of every
            // pixel is inside the padded input (the conv's geometry was checked).
            unsafe { panel_rows(isa, g, src.wp, base, &taps, wp, b, chans, out, rows) };
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
    for_each_chunk_mut(dst, hp * wp, |c, plane| {
        plane[..pt * wp].fill(0.0);
        plane[(pt + g.h) * wp..].fill(0.0);
        for y in 0..g.h {
            let row = &mut plane[(pt + y) * wp..(pt + y + 1) * wp];
            row[..pl].fill(0.0);
            row[pl + g.w..].fill(0.0);
            let at = x.offset + img * x.strides[0] + c * x.strides[1] + y * x.strides[2];
            // SAFETY: c < C, y < H and the row's W elements: inside the checked view.
            unsafe { gather_row(&mut row[pl..pl + g.w], (px as *const f32).add(at), x.strides[3] as isize) };
        }
    });
}

/// Output rows `rows` of one panel of `chans` (at most the ISA's lanes) channels starting at
/// `out`, reading padded input rows `row_len` long from `base`. The pixels go in groups of
/// about [`GROUP_ROWS`] rows ([`Isa::group`]); each group's tiles sum the taps of
/// [`CHANNEL_BLOCK`] input channels at a time, keeping partial sums in a buffer between
/// blocks (the same sums in the same order as all taps at once: the result does not depend
/// on the block).
///
/// # Safety
/// See [`run`]; the CPU has `isa`.
#[allow(clippy::too_many_arguments)]
unsafe fn panel_rows(
    isa: Isa,
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
    let (sh, sw, lanes, slot, ow) = (g.a.stride[0], g.a.stride[1], isa.lanes(), isa.tile_values(), g.ow);
    let k = taps.len() - PREFETCH;
    let block = CHANNEL_BLOCK * g.kh * g.kw;
    let t = taps.as_ptr();
    let at = |q: usize| base.wrapping_add((q / ow) * sh * row_len + (q % ow) * sw);
    let mut tiles: Vec<Tile> = Vec::with_capacity(GROUP_ROWS * ow);
    let mut sums: Vec<f32> = Vec::new();
    let (mut q0, q_end) = (rows.start * ow, rows.end * ow);
    while q0 < q_end {
        tiles.clear();
        let end = isa.group(ow, q0, q_end, &mut tiles);
        sums.resize(tiles.len() * slot, 0.0);
        for k0 in (0..k).step_by(block) {
            for (i, &tile) in tiles.iter().enumerate() {
                // SAFETY: the tile's pixels are output pixels, whose taps are all inside the
                // padded input; taps k0.. and their weights exist (k0 < k); slot i of `sums`
                // holds a tile.
                unsafe {
                    let sum = sums.as_mut_ptr().add(i * slot);
                    let taps = (block.min(k - k0), g.kw, g.a.dilation[1]);
                    isa.tile(tile, ow, at, sw, taps, t.add(k0), w.add(k0 * lanes), sum, k0 > 0);
                }
            }
        }
        if isa == Isa::Avx2 {
            // SAFETY: the group's tiles are its pixels q0..end in order, 6 to a full slot,
            // so `sums` holds them as `[pixel][16]`; those pixels of the panel's channels are
            // inside the output.
            unsafe { avx2::store_group(sums.as_ptr(), end - q0, chans, bias, out.add(q0), g.p()) };
        } else {
            for (i, &Tile { q, n, pair }) in tiles.iter().enumerate() {
                let tp = sums[i * slot..].as_ptr();
                // SAFETY: pixels q..q+n (and the n below them when paired) of the panel's
                // channels; the tile holds n (2n when paired) pixels of `lanes` values.
                unsafe {
                    store(tp, lanes, n, chans, bias, out.add(q), g.p());
                    if pair {
                        store(tp.add(n * lanes), lanes, n, chans, bias, out.add(q + ow), g.p());
                    }
                }
            }
        }
        q0 = end;
    }
}

/// Writes a tile of `n` pixels (`tile[px * lanes + ch]`) to channel rows `ld` apart:
/// `out[ch * ld + px] = tile[px * lanes + ch] + bias[ch]` for `ch < chans`.
///
/// # Safety
/// `tile` holds `n * lanes` values; `out[ch * ld + px]` is writable for `ch < chans`, `px < n`.
unsafe fn store(
    tile: *const f32,
    lanes: usize,
    n: usize,
    chans: usize,
    bias: Option<&[f32]>,
    out: *mut f32,
    ld: usize,
) {
    for ch in 0..chans {
        let b = bias.map(|b| b[ch]);
        for px in 0..n {
            // SAFETY: inside the tile and the output (the caller's contract).
            unsafe {
                let v = *tile.add(px * lanes + ch);
                *out.add(ch * ld + px) = b.map_or(v, |b| v + b);
            }
        }
    }
}
