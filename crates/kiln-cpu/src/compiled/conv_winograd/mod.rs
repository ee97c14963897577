//! 3x3 stride-1 convolutions by Winograd's minimal filtering F(4x4, 3x3) (Lavin & Gray 2015),
//! as cuDNN, NNPACK and TVM run them: each 4x4 block of output pixels (a tile) comes from a
//! 6x6 block of input through 36 products instead of 144 multiply-adds per channel pair. Per
//! image:
//!
//! 1. the padded input is split by column phase ([`Layout`]) and every channel's input tiles
//!    are transformed (`B^T d B`, [`avx2::input_tiles`]) into 36 matrices `V[ξ]` of `[C, T]`
//!    (T tiles), written straight in the GEMM's panels;
//! 2. 36 GEMMs `M[ξ] = U[ξ] @ V[ξ]`, where `U[ξ]` (`[O, C]`) are the weights transformed
//!    (`G g G^T`, in f64) and packed once, on kiln's GEMM ([`gemm::gemm_a_panels_here`], one
//!    product per task);
//! 3. every output channel's tiles are transformed back (`A^T m A`, [`avx2::output_tiles`]),
//!    get their bias and are cut to the output's edges; the epilogue then runs on the image.
//!
//! The GEMMs do a quarter of the direct conv's multiply-adds; the transforms are a few
//! vector passes over input and output. Rounding differs from the direct sum (the transforms
//! add and scale values before the products): errors reach ~3e-5 of the outputs' RMS
//! (`tests/conv_extern.rs`, 8 to 300 channels), where the direct conv's stay near 1e-6, so
//! an output much smaller than its neighbours carries a larger relative error. A NaN or infinity in the input spreads to the whole 4x4 output tile(s) whose input
//! tile holds it (the transforms mix a tile's values), where a direct conv confines it to
//! the pixels whose window holds it. `KILN_DISABLE_WINOGRAD` turns the path off.

mod avx2;
pub(crate) mod f2;

use super::conv::Geom;
use super::steps::Epi;
use crate::gemm::{self, PackedA};
use kiln_ir::Result;
use kiln_sched::BufView;
use crate::par::{for_each_chunk_mut, for_each_task};
use rayon::prelude::*;

/// Output pixels per tile side.
const M: usize = 4;
/// Input pixels per tile side (M + 3 - 1).
const N: usize = 6;
/// Elements of a transformed tile: the number of GEMMs.
const XI: usize = N * N;
/// Tiles per vector.
const LANES: usize = 8;

/// True on a CPU where kiln's GEMM runs unless `KILN_DISABLE_WINOGRAD` (read once) is set:
/// whether either Winograd conv may run at all.
fn enabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let off = *OFF.get_or_init(|| std::env::var_os("KILN_DISABLE_WINOGRAD").is_some());
    !off && gemm::available()
}

/// True for a conv either Winograd variant computes, where they may run ([`enabled`]): a 3x3
/// kernel, stride and dilation 1, one group.
fn fits(g: &Geom) -> bool {
    enabled() && (g.kh, g.kw) == (3, 3) && g.a.stride == [1, 1] && g.a.dilation == [1, 1] && g.groups == 1
}

/// Whether a conv of this geometry runs here (its weights must also be constant): one that
/// [`fits`], with enough output pixels and channels that the transforms pay. Smaller maps may
/// run by F(2x2, 3x3) ([`f2`]).
pub(crate) fn eligible(g: &Geom) -> bool {
    fits(g)
        && g.cg >= MIN_CHANNELS
        && g.o >= MIN_CHANNELS
        && g.p() >= MIN_PIXELS
}

/// Input and output channels below which the direct conv tiles stay: with few channels the
/// transforms cost more than the products they save.
const MIN_CHANNELS: usize = 8;

/// Output pixels below which the direct conv tiles stay: a 7x7 output takes four tiles
/// (8x8 pixels computed for 49), and each transformed weight (4x the weights' bytes) serves
/// too few tiles to pay for being read.
const MIN_PIXELS: usize = 100;

/// How one image is laid out for the transforms and the GEMMs. Tiles are numbered row-major
/// (`t = ty * tw + tx`) and go eight to a vector; the GEMMs' columns are the tiles.
///
/// The padded input is split by column phase: each padded row holds its columns `x` with
/// `x % 4 == 0`, then those with `x % 4 == 1`, and so on, `wq` slots each. The eight tiles
/// `tx..tx+8` of a tile row then read each element of their 6x6 inputs as one contiguous
/// vector (column `4tx + s` is slot `tx + s / 4` of phase `s % 4`), where a plain layout
/// would need a gather.
struct Layout {
    /// Tiles down and across.
    th: usize,
    tw: usize,
    /// Tiles rounded up to whole vectors: the GEMMs' columns.
    tp: usize,
    /// Tiles per chunk (a multiple of 16 or all of `tp`): the chunk's `V` and `M` stay in L2
    /// while its three steps run.
    chunk: usize,
    /// Padded input rows; slots per phase; values per split row.
    hp: usize,
    wq: usize,
    row: usize,
}

/// Bytes of a chunk's `V` and `M` (see [`Layout::chunk`]), within a core's L2 beside the
/// weights in use.
const CHUNK_BYTES: usize = 320 << 10;

/// Values between one of the 36 matrices of `V` (or of `M`) and the next beyond their own: a
/// transform writes (reads) one vector to (from) each of the 36, and at a distance that is a
/// multiple of 4 KB (a `[64, 16]` matrix) all 36 fall in the same set of the 8-way L1.
pub(super) const SKEW: usize = 16;

/// Values of slack before and after the split input: a vector that serves only some of its
/// lanes (a tile row's end) reads up to 8 values past either end; those lanes are discarded.
const SLACK: usize = 16;

impl Layout {
    fn new(g: &Geom) -> Layout {
        let (th, tw) = (g.oh.div_ceil(M), g.ow.div_ceil(M));
        let (wq, tp) = (tw + 1, (th * tw).next_multiple_of(LANES));
        let fit = (CHUNK_BYTES / 4 / (XI * (g.cg + g.o))) / gemm::PANEL * gemm::PANEL;
        Layout {
            th,
            tw,
            tp,
            chunk: fit.max(gemm::PANEL).min(tp),
            hp: M * th + N - M,
            wq,
            row: M * wq,
        }
    }

    /// Values of one channel's split input.
    fn plane(&self) -> usize {
        self.hp * self.row
    }

    /// Values of one chunk's `V` (36 x `[C, chunk]` in GEMM panels of 16 columns) and `M`
    /// (36 x `[O, chunk]`).
    fn chunk_work(&self, g: &Geom) -> usize {
        XI * (self.v_len(g) + g.o * self.chunk + SKEW)
    }

    /// Values from one of a chunk's `V[ξ]` (`[C, chunk]` in panels of 16 columns) to the next.
    fn v_len(&self, g: &Geom) -> usize {
        self.chunk.div_ceil(gemm::PANEL) * gemm::PANEL * g.cg + SKEW
    }

    /// f32 elements of scratch: the split input with its slack, and every chunk's work.
    fn scratch(&self, g: &Geom) -> usize {
        2 * SLACK + g.cg * self.plane() + self.tp.div_ceil(self.chunk) * self.chunk_work(g)
    }

    /// Where element `(r, s)` of a tile's input lies from the tile's first.
    fn offsets(&self) -> [[isize; N]; N] {
        std::array::from_fn(|r| std::array::from_fn(|s| (r * self.row + (s % M) * self.wq + s / M) as isize))
    }

    /// The segments of each vector of eight tiles (a range of `segs` per vector): its runs of
    /// lanes in one tile row.
    fn segments(&self) -> (Vec<Segment>, Vec<std::ops::Range<usize>>) {
        let tiles = self.th * self.tw;
        let (mut segs, mut groups) = (Vec::new(), Vec::new());
        for t0 in (0..self.tp).step_by(LANES) {
            let first = segs.len();
            let mut l = 0;
            while l < LANES && t0 + l < tiles {
                let (ty, tx) = ((t0 + l) / self.tw, (t0 + l) % self.tw);
                let end = LANES.min(l + self.tw - tx).min(tiles - t0);
                segs.push(Segment {
                    ty,
                    tx,
                    lanes: l..end,
                    base: (M * ty * self.row + tx) as isize - l as isize,
                    mask: std::array::from_fn(|i| if (l..end).contains(&i) { -1 } else { 0 }),
                });
                l = end;
            }
            groups.push(first..segs.len());
        }
        (segs, groups)
    }
}

/// A run of a vector's lanes that holds consecutive tiles of one tile row.
struct Segment {
    /// The first lane's tile.
    ty: usize,
    tx: usize,
    lanes: std::ops::Range<usize>,
    /// Where lane 0 of the run's vectors starts in a split plane (the run's first tile's input
    /// less its lane).
    base: isize,
    /// All ones in the run's lanes.
    mask: [i32; LANES],
}

/// f32 elements of scratch the conv needs.
pub(crate) fn scratch_elems(g: &Geom) -> usize {
    Layout::new(g).scratch(g)
}

/// A conv's weights transformed and packed: `U[ξ]` (`[O, C]`) for each of the 36 elements.
pub(crate) struct WinogradWeights {
    u: Vec<PackedA>,
}

impl WinogradWeights {
    /// Transforms and packs the `[O, C*9]` weight matrix at `pw` (row stride `w_rs`, column
    /// stride `w_cs`).
    ///
    /// # Safety
    /// `pw[o * w_rs + k * w_cs]` must be readable for every `o < O`, `k < C*9`.
    pub(super) unsafe fn pack(g: &Geom, pw: *const f32, w_rs: usize, w_cs: usize) -> WinogradWeights {
        // G (6x3) of F(4x4, 3x3).
        const G: [[f64; 3]; N] = [
            [1.0 / 4.0, 0.0, 0.0],
            [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
            [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
            [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
            [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
            [0.0, 0.0, 1.0],
        ];
        // SAFETY: the caller's contract.
        let u = unsafe { transformed_weights(g, pw, w_rs, w_cs, &G) };
        WinogradWeights { u }
    }
}

/// The weights of a conv transformed for Winograd's F(m x m, 3x3) with the `n x 3` matrix `gm`
/// (n = m + 2): `U = G g G^T` of each (output, input) channel pair, in f64, scattered to the
/// `n * n` matrices `U[ξ]` (`[O, C]`, ξ = n i + j), each packed as the left side of kiln's GEMM.
///
/// # Safety
/// `pw[o * w_rs + k * w_cs]` must be readable for every `o < O`, `k < C*9`.
unsafe fn transformed_weights(g: &Geom, pw: *const f32, w_rs: usize, w_cs: usize, gm: &[[f64; 3]]) -> Vec<PackedA> {
    let (o, c, n) = (g.o, g.cg, gm.len());
    let pw = pw as usize;
    let mut tiles = vec![0.0f32; o * c * n * n];
    tiles.par_chunks_mut(n * n).enumerate().for_each(|(oc, tile)| {
        let (oo, cc) = (oc / c, oc % c);
        let w = |i: usize, j: usize| {
            // SAFETY: oo < O and cc*9 + 3i + j < C*9 (the caller's contract).
            unsafe { f64::from(*(pw as *const f32).add(oo * w_rs + (cc * 9 + 3 * i + j) * w_cs)) }
        };
        let gg: Vec<[f64; 3]> = gm.iter().map(|row| std::array::from_fn(|j| (0..3).map(|i| row[i] * w(i, j)).sum())).collect();
        for (xi, u) in tile.iter_mut().enumerate() {
            *u = (0..3).map(|j| gg[xi / n][j] * gm[xi % n][j]).sum::<f64>() as f32;
        }
    });
    let mut mats = vec![0.0f32; n * n * o * c];
    for (oc, t) in tiles.chunks_exact(n * n).enumerate() {
        for (xi, &u) in t.iter().enumerate() {
            mats[xi * o * c + oc] = u;
        }
    }
    mats.par_chunks(o * c)
        // SAFETY: each chunk is a dense [O, C] matrix.
        .map(|u| unsafe { PackedA::pack(o, c, u.as_ptr(), c as isize, 1) })
        .collect()
}

/// Runs the convolution of every image into `pout` (`[N, O, OH, OW]`, dense), adding `bias`,
/// then the epilogue on each image's rows.
///
/// # Safety
/// `px` is the input buffer and `x` a view checked inside it; `pout` holds `N*O*OH*OW`
/// elements and overlaps nothing read; `scratch` holds [`scratch_elems`] elements; the CPU
/// runs kiln's GEMM ([`eligible`]).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run(
    g: &Geom,
    x: &BufView,
    px: *const f32,
    w: &WinogradWeights,
    bias: Option<&[f32]>,
    pout: *mut f32,
    epi: &Epi,
    scratch: &mut [f32],
) -> Result<()> {
    let l = Layout::new(g);
    let (c, o) = (g.cg, g.o);
    let (split, work) = scratch.split_at_mut(2 * SLACK + c * l.plane());
    let (segs, groups) = l.segments();
    let off = l.offsets();
    let chunks = l.tp.div_ceil(l.chunk);
    let (sp, wp, out) = (split.as_ptr() as usize, work.as_mut_ptr() as usize, pout as usize);
    // Chunk `i` of image `img`: its vectors of tiles and its share of the scratch.
    let chunk = |img: usize, i: usize| {
        let t0 = i * l.chunk;
        Chunk {
            l: &l,
            g,
            w,
            bias,
            segs: &segs,
            groups: &groups[t0 / LANES..(t0 + l.chunk).min(l.tp) / LANES],
            off: &off,
            split: sp as *const f32,
            work: (wp as *mut f32).wrapping_add(i * l.chunk_work(g)),
            out: (out as *mut f32).wrapping_add(img * o * g.p()),
        }
    };
    for img in 0..g.n {
        split_image(g, &l, x, px, img, &mut split[SLACK..SLACK + c * l.plane()]);
        if chunks >= 2 * rayon::current_num_threads() {
            // SAFETY (both): chunks write disjoint parts of the scratch and of the output.
            for_each_task(chunks, |i| {
                let ch = chunk(img, i);
                unsafe { ch.input(0..c) };
                unsafe { ch.multiply(0..XI) };
                unsafe { ch.output(0..o) };
            });
        } else {
            for i in 0..chunks {
                let ch = chunk(img, i);
                // SAFETY (all three): tasks write disjoint parts of the chunk's scratch and
                // of the output.
                for_each_task(c.div_ceil(4), |k| unsafe { ch.input(4 * k..(4 * k + 4).min(c)) });
                for_each_task(XI, |xi| unsafe { ch.multiply(xi..xi + 1) });
                for_each_task(o.div_ceil(4), |k| unsafe { ch.output(4 * k..(4 * k + 4).min(o)) });
            }
        }
        epi.rows(img * o, (img + 1) * o)?;
    }
    Ok(())
}

/// One chunk of an image's tiles, whose three steps run one after the other.
struct Chunk<'a> {
    l: &'a Layout,
    g: &'a Geom,
    w: &'a WinogradWeights,
    bias: Option<&'a [f32]>,
    segs: &'a [Segment],
    /// The chunk's vectors of tiles (ranges of `segs`).
    groups: &'a [std::ops::Range<usize>],
    off: &'a [[isize; N]; N],
    /// The split input, its slack first.
    split: *const f32,
    /// The chunk's `V` then `M` ([`Layout::chunk_work`]).
    work: *mut f32,
    /// The image's output.
    out: *mut f32,
}

// SAFETY: the pointers are only dereferenced by the steps, whose callers give each task its
// own channels, products or output channels.
unsafe impl Sync for Chunk<'_> {}

impl Chunk<'_> {
    /// Tiles (columns of `V` and `M`).
    fn cols(&self) -> usize {
        self.groups.len() * LANES
    }

    /// Values from one `V[ξ]` to the next ([`Layout::v_len`]).
    fn v_len(&self) -> usize {
        self.l.v_len(self.g)
    }

    /// Values from one `M[ξ]` (`[O, cols]`) to the next.
    fn m_len(&self) -> usize {
        self.g.o * self.cols() + SKEW
    }

    fn m(&self) -> *mut f32 {
        self.work.wrapping_add(XI * self.v_len())
    }

    /// Transforms the input tiles of channels `chans` into `V`.
    ///
    /// # Safety
    /// No other task writes these channels of `V`; the CPU has AVX2.
    unsafe fn input(&self, chans: std::ops::Range<usize>) {
        let (l, c) = (self.l, self.g.cg);
        for ch in chans {
            let plane = self.split.wrapping_add(SLACK + ch * l.plane());
            for (gi, group) in self.groups.iter().enumerate() {
                let t = gi * LANES;
                // V[ξ] in panels: tile t at panel t / 16, row ch, column t % 16.
                let at = (t / gemm::PANEL * c + ch) * gemm::PANEL + t % gemm::PANEL;
                // SAFETY: the segments' vectors lie inside the split input and its slack;
                // V[ξ] holds tile t's eight columns of row ch for every ξ.
                unsafe { avx2::input_tiles(plane, &self.segs[group.clone()], self.off, self.work.add(at), self.v_len()) };
            }
        }
    }

    /// The products `M[ξ] = U[ξ] @ V[ξ]` for `xis`.
    ///
    /// # Safety
    /// `V` is complete; no other task writes these `M[ξ]`.
    unsafe fn multiply(&self, xis: std::ops::Range<usize>) {
        let cols = self.cols();
        for xi in xis {
            // SAFETY: V[ξ] holds `cols` columns of C rows in panels, M[ξ] is [O, cols], both
            // inside the chunk's scratch; U[ξ] is [O, C].
            unsafe {
                gemm::gemm_a_panels_here(&self.w.u[xi], cols, self.work.add(xi * self.v_len()), self.m().add(xi * self.m_len()), cols)
            };
        }
    }

    /// Transforms output channels `ks` of `M` back into the output, with their bias.
    ///
    /// # Safety
    /// `M` is complete; no other task writes these output channels of the chunk's tiles.
    unsafe fn output(&self, ks: std::ops::Range<usize>) {
        let (g, cols) = (self.g, self.cols());
        let mut rows = [[0.0f32; 32]; M];
        for k in ks {
            let b = self.bias.map_or(0.0, |b| b[k]);
            let dst = self.out.wrapping_add(k * g.p());
            for (gi, group) in self.groups.iter().enumerate() {
                // SAFETY: M[ξ][k][gi*8..gi*8+8] is inside the chunk's M for every ξ.
                unsafe { avx2::output_tiles(self.m().add(k * cols + gi * LANES), self.m_len(), b, &mut rows) };
                for seg in &self.segs[group.clone()] {
                    let (y0, x0) = (M * seg.ty, M * seg.tx);
                    let len = (M * seg.lanes.len()).min(g.ow - x0);
                    for (i, row) in rows.iter().enumerate().take(g.oh - y0) {
                        let from = &row[M * seg.lanes.start..M * seg.lanes.start + len];
                        // SAFETY: pixels (y0 + i, x0..x0 + len) of channel k are inside the output.
                        unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), dst.add((y0 + i) * g.ow + x0), len) };
                    }
                }
            }
        }
    }
}

/// Copies image `img` into `dst` as `[C][hp][4][wq]` (see [`Layout`]): padded, each row split
/// by column phase, zeros around the input.
fn split_image(g: &Geom, l: &Layout, x: &BufView, px: *const f32, img: usize, dst: &mut [f32]) {
    let [pt, pl, ..] = g.a.padding;
    let px = px as usize;
    for_each_chunk_mut(dst, l.plane(), |c, plane| {
        for (y, row) in plane.chunks_exact_mut(l.row).enumerate() {
            row.fill(0.0);
            if !(pt..pt + g.h).contains(&y) {
                continue;
            }
            let at = x.offset + img * x.strides[0] + c * x.strides[1] + (y - pt) * x.strides[2];
            let src = (px as *const f32).wrapping_add(at);
            let mut i = 0;
            if x.strides[3] == 1 {
                // Blocks of 32, then of 8, from the first column of phase 0.
                let head = ((M - pl % M) % M).min(g.w);
                for j in 0..head {
                    let col = j + pl;
                    // SAFETY: as below, for the columns before the first block.
                    row[(col % M) * l.wq + col / M] = unsafe { *src.add(j) };
                }
                i = head;
                while i + 32 <= g.w {
                    let slot = (i + pl) / M;
                    let phases: [*mut f32; M] = std::array::from_fn(|p| row[p * l.wq + slot..][..8].as_mut_ptr());
                    // SAFETY: columns i..i+32 of the row are inside the checked view; each
                    // phase has 8 slots from `slot` (checked by the slices); the CPU has AVX2.
                    unsafe { avx2::split_32(src.add(i), phases) };
                    i += 32;
                }
                while i + 8 <= g.w {
                    let slot = (i + pl) / M;
                    let phases: [*mut f32; M] = std::array::from_fn(|p| row[p * l.wq + slot..][..2].as_mut_ptr());
                    // SAFETY: as for the blocks of 32, with 8 columns and 2 slots a phase.
                    unsafe { avx2::split_8(src.add(i), phases) };
                    i += 8;
                }
            }
            for j in i..g.w {
                let col = j + pl;
                // SAFETY: c < C, y - pt < H and j < W: inside the checked view.
                row[(col % M) * l.wq + col / M] = unsafe { *src.add(j * x.strides[3]) };
            }
        }
    });
}
