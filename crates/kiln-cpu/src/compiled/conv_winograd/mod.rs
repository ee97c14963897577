//! 3x3 stride-1 convolutions by Winograd's minimal filtering F(4x4, 3x3) (Lavin & Gray 2015),
//! as cuDNN, NNPACK and TVM run them: each 4x4 block of output pixels (a tile) comes from a
//! 6x6 block of input through 36 products instead of 144 multiply-adds per channel pair. Per
//! image:
//!
//! 1. the padded input is split by column phase ([`Layout`]) and every channel's input tiles
//!    are transformed (`B^T d B`, [`avx2::input_tiles`]) into 36 matrices `V[ξ]` of `[C, T]`
//!    (T tiles), written straight in the GEMM's panels;
//! 2. 36 GEMMs `M[ξ] = U[ξ] @ V[ξ]`, where `U[ξ]` (`[O, C]`) are the weights transformed
//!    (`G g G^T`, in f64) and packed once, on kiln's GEMM ([`gemm::gemm_a_panels`], one
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

use super::conv::Geom;
use super::steps::Epi;
use crate::gemm::{self, PackedA};
use kiln_ir::Result;
use kiln_sched::BufView;
use rayon::prelude::*;

/// Output pixels per tile side.
const M: usize = 4;
/// Input pixels per tile side (M + 3 - 1).
const N: usize = 6;
/// Elements of a transformed tile: the number of GEMMs.
const XI: usize = N * N;
/// Tiles per vector.
const LANES: usize = 8;

/// Whether a conv of this geometry runs here (its weights must also be constant): a 3x3
/// kernel, stride and dilation 1, one group, on a CPU where kiln's GEMM runs, with enough
/// output pixels and channels that the transforms pay. `KILN_DISABLE_WINOGRAD` (read once)
/// says no.
pub(crate) fn eligible(g: &Geom) -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let off = *OFF.get_or_init(|| std::env::var_os("KILN_DISABLE_WINOGRAD").is_some());
    !off && gemm::available()
        && (g.kh, g.kw) == (3, 3)
        && g.a.stride == [1, 1]
        && g.a.dilation == [1, 1]
        && g.groups == 1
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
    /// Padded input rows; slots per phase; values per split row.
    hp: usize,
    wq: usize,
    row: usize,
}

/// Values of slack before and after the split input: a vector that serves only some of its
/// lanes (a tile row's end) reads up to 8 values past either end; those lanes are discarded.
const SLACK: usize = 16;

impl Layout {
    fn new(g: &Geom) -> Layout {
        let (th, tw) = (g.oh.div_ceil(M), g.ow.div_ceil(M));
        let wq = tw + 1;
        Layout {
            th,
            tw,
            tp: (th * tw).next_multiple_of(LANES),
            hp: M * th + N - M,
            wq,
            row: M * wq,
        }
    }

    /// Values of one channel's split input.
    fn plane(&self) -> usize {
        self.hp * self.row
    }

    /// Values of one transformed input `V[ξ]`: `[C, tp]` in GEMM panels of 16 columns.
    fn v(&self, g: &Geom) -> usize {
        self.tp.div_ceil(gemm::PANEL) * gemm::PANEL * g.cg
    }

    /// f32 elements of scratch: the split input with its slack, `V` and `M`.
    fn scratch(&self, g: &Geom) -> usize {
        2 * SLACK + g.cg * self.plane() + XI * (self.v(g) + g.o * self.tp)
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
    pub(crate) unsafe fn pack(g: &Geom, pw: *const f32, w_rs: usize, w_cs: usize) -> WinogradWeights {
        let (o, c) = (g.o, g.cg);
        // G (6x3) of F(4x4, 3x3).
        const G: [[f64; 3]; N] = [
            [1.0 / 4.0, 0.0, 0.0],
            [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
            [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
            [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
            [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
            [0.0, 0.0, 1.0],
        ];
        // U = G g G^T of each (output, input) channel pair, then scattered to the 36 matrices.
        let pw = pw as usize;
        let tiles: Vec<[f32; XI]> = (0..o * c)
            .into_par_iter()
            .map(|oc| {
                let (oo, cc) = (oc / c, oc % c);
                let w = |i: usize, j: usize| {
                    // SAFETY: oo < O and cc*9 + 3i + j < C*9 (the caller's contract).
                    unsafe { f64::from(*(pw as *const f32).add(oo * w_rs + (cc * 9 + 3 * i + j) * w_cs)) }
                };
                let gg: [[f64; 3]; N] = std::array::from_fn(|r| std::array::from_fn(|j| (0..3).map(|i| G[r][i] * w(i, j)).sum()));
                std::array::from_fn(|xi| (0..3).map(|j| gg[xi / N][j] * G[xi % N][j]).sum::<f64>() as f32)
            })
            .collect();
        let mut mats = vec![0.0f32; XI * o * c];
        for (oc, t) in tiles.iter().enumerate() {
            for (xi, &u) in t.iter().enumerate() {
                mats[xi * o * c + oc] = u;
            }
        }
        let u = mats
            .par_chunks(o * c)
            // SAFETY: each chunk is a dense [O, C] matrix.
            .map(|u| unsafe { PackedA::pack(o, c, u.as_ptr(), c as isize, 1) })
            .collect();
        WinogradWeights { u }
    }
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
    let (c, o, tp) = (g.cg, g.o, l.tp);
    let (split, rest) = scratch.split_at_mut(2 * SLACK + c * l.plane());
    let (v, rest) = rest.split_at_mut(XI * l.v(g));
    let m = &mut rest[..XI * o * tp];
    let (segs, groups) = l.segments();
    let off = l.offsets();
    for img in 0..g.n {
        split_image(g, &l, x, px, img, &mut split[SLACK..SLACK + c * l.plane()]);
        let (sp, vp) = (split.as_ptr() as usize, v.as_mut_ptr() as usize);
        (0..c).into_par_iter().with_min_len(4).for_each(|ch| {
            let plane = (sp as *const f32).wrapping_add(SLACK + ch * l.plane());
            for (gi, group) in groups.iter().enumerate() {
                let t0 = gi * LANES;
                // V[ξ] in panels: tile t of channel ch at panel t / 16, row ch, column t % 16.
                let at = (t0 / gemm::PANEL * c + ch) * gemm::PANEL + t0 % gemm::PANEL;
                // SAFETY: the segments' vectors lie inside the split input and its slack;
                // V[ξ] holds tile t0's eight columns of row ch for every ξ; the CPU has AVX2.
                unsafe { avx2::input_tiles(plane, &segs[group.clone()], &off, (vp as *mut f32).add(at), l.v(g)) };
            }
        });
        let mp = m.as_mut_ptr() as usize;
        (0..XI).into_par_iter().with_max_len(1).for_each(|xi| {
            // SAFETY: V[ξ] holds tp columns of C rows in panels, M[ξ] is [O, tp], both inside
            // the scratch; U[ξ] is [O, C].
            unsafe {
                gemm::gemm_a_panels(&w.u[xi], tp, (vp as *const f32).add(xi * l.v(g)), (mp as *mut f32).add(xi * o * tp), tp)
            };
        });
        let out = pout as usize;
        (0..o).into_par_iter().with_min_len(4).for_each(|k| {
            let b = bias.map_or(0.0, |b| b[k]);
            let mut rows = [[0.0f32; 32]; M];
            let dst = (out as *mut f32).wrapping_add((img * o + k) * g.p());
            for (gi, group) in groups.iter().enumerate() {
                // SAFETY: M[ξ][k][t0..t0+8] is inside `m` for every ξ.
                unsafe { avx2::output_tiles((mp as *const f32).add(k * tp + gi * LANES), o * tp, b, &mut rows) };
                for seg in &segs[group.clone()] {
                    let (y0, x0) = (M * seg.ty, M * seg.tx);
                    let len = (M * seg.lanes.len()).min(g.ow - x0);
                    for (i, row) in rows.iter().enumerate().take(g.oh - y0) {
                        let from = &row[M * seg.lanes.start..M * seg.lanes.start + len];
                        // SAFETY: pixels (y0 + i, x0..x0 + len) of channel k are inside the output.
                        unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), dst.add((y0 + i) * g.ow + x0), len) };
                    }
                }
            }
        });
        epi.rows(img * o, (img + 1) * o)?;
    }
    Ok(())
}

/// Copies image `img` into `dst` as `[C][hp][4][wq]` (see [`Layout`]): padded, each row split
/// by column phase, zeros around the input.
fn split_image(g: &Geom, l: &Layout, x: &BufView, px: *const f32, img: usize, dst: &mut [f32]) {
    let [pt, pl, ..] = g.a.padding;
    let px = px as usize;
    dst.par_chunks_mut(l.plane()).enumerate().for_each(|(c, plane)| {
        for (y, row) in plane.chunks_exact_mut(l.row).enumerate() {
            row.fill(0.0);
            if !(pt..pt + g.h).contains(&y) {
                continue;
            }
            let at = x.offset + img * x.strides[0] + c * x.strides[1] + (y - pt) * x.strides[2];
            let src = (px as *const f32).wrapping_add(at);
            for i in 0..g.w {
                let col = i + pl;
                // SAFETY: c < C, y - pt < H and i < W: inside the checked view.
                row[(col % M) * l.wq + col / M] = unsafe { *src.add(i * x.strides[3]) };
            }
        }
    });
}
