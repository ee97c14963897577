//! 3x3 stride-1 convolutions on small maps by Winograd's F(2x2, 3x3): each 2x2 block of
//! output pixels (a tile) comes from a 4x4 block of input through 16 products instead of 36
//! multiply-adds per channel pair. F(4x4, 3x3) (the parent module) needs at least
//! `MIN_PIXELS` output pixels; below that (resnet50's 7x7 layer: 16 tiles of 2x2 for 49
//! pixels, one panel of kiln's GEMM) this variant does 16/36 of the direct conv's
//! multiply-adds where the im2col GEMM did them all, for transformed weights 16/9 the size of
//! the weights, read once per image. Per image:
//!
//! 1. every channel's input tiles are transformed (`B^T d B`) into 16 matrices `V[ξ]` of
//!    `[C, T]` (T tiles), written in the GEMM's panels of 16 columns;
//! 2. 16 GEMMs `M[ξ] = U[ξ] @ V[ξ]` on the weights transformed once (`G g G^T`, in f64), one
//!    product per task, so that each thread reads its share of the weights;
//! 3. every output channel's tiles are transformed back (`A^T m A`), get their bias and are
//!    cut to the output's edges; the epilogue then runs on the image.
//!
//! The maps are small, so the transforms are plain loops: the products are the work.
//! Rounding: its sums mix fewer values, with smaller coefficients, than F(4x4, 3x3)'s; a NaN
//! or infinity in the input reaches every output of the 2x2 tiles whose 4x4 input holds it.

use super::super::conv::Geom;
use super::super::steps::Epi;
use super::SKEW;
use crate::gemm::{self, PackedA, PANEL};
use crate::par::for_each_task;
use kiln_ir::Result;
use kiln_sched::BufView;

/// Output pixels per tile side.
const M: usize = 2;
/// Input pixels per tile side (M + 3 - 1).
const N: usize = 4;
/// Elements of a transformed tile: the number of GEMMs.
const XI: usize = N * N;

/// Input and output channels from which the transforms pay on small maps: the products are
/// then most of the work. (Measured on resnet50's 512-channel 7x7 convs; smaller convs keep
/// the im2col GEMM.)
const MIN_CHANNELS: usize = 64;

/// Whether a conv of this geometry runs here (its weights must also be constant): one that
/// [`super::fits`] either variant, with at least [`MIN_CHANNELS`] input and output channels, on
/// a map too small for F(4x4, 3x3) (see [`super::eligible`]).
pub(crate) fn eligible(g: &Geom) -> bool {
    super::fits(g)
        && g.cg >= MIN_CHANNELS
        && g.o >= MIN_CHANNELS
        && g.p() < super::MIN_PIXELS
}

/// Tiles down and across, and in all.
fn tiles(g: &Geom) -> (usize, usize, usize) {
    let (th, tw) = (g.oh.div_ceil(M), g.ow.div_ceil(M));
    (th, tw, th * tw)
}

/// Values from one `V[ξ]` to the next: `[C, T]` in panels of 16 columns, the last one
/// whole, and a [`SKEW`].
fn v_len(g: &Geom) -> usize {
    tiles(g).2.div_ceil(PANEL) * PANEL * g.cg + SKEW
}

/// Values from one `M[ξ]` (`[O, T]`) to the next.
fn m_len(g: &Geom) -> usize {
    g.o * tiles(g).2 + SKEW
}

/// f32 elements of scratch the conv needs: `V` and `M`.
pub(crate) fn scratch_elems(g: &Geom) -> usize {
    XI * (v_len(g) + m_len(g))
}

/// A conv's weights transformed and packed: `U[ξ]` (`[O, C]`) for each of the 16 elements.
pub(crate) struct Winograd2Weights {
    u: Vec<PackedA>,
}

impl Winograd2Weights {
    /// Transforms and packs the `[O, C*9]` weight matrix at `pw` (row stride `w_rs`, column
    /// stride `w_cs`).
    ///
    /// # Safety
    /// `pw[o * w_rs + k * w_cs]` must be readable for every `o < O`, `k < C*9`.
    pub(in crate::compiled) unsafe fn pack(g: &Geom, pw: *const f32, w_rs: usize, w_cs: usize) -> Winograd2Weights {
        // G (4x3) of F(2x2, 3x3).
        const G: [[f64; 3]; N] = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]];
        // SAFETY: the caller's contract.
        let u = unsafe { super::transformed_weights(g, pw, w_rs, w_cs, &G) };
        Winograd2Weights { u }
    }
}

/// `B^T d` along one line of four values (`B^T` = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]).
fn bt(d: [f32; N]) -> [f32; N] {
    [d[0] - d[2], d[1] + d[2], d[2] - d[1], d[1] - d[3]]
}

/// `A^T m` along one line of four values (`A^T` = [1 1 1 0; 0 1 -1 -1]).
fn at(m: [f32; N]) -> [f32; M] {
    [m[0] + m[1] + m[2], m[1] - m[2] - m[3]]
}

/// Channels (input or output) per task of the transforms.
const CHANNELS_PER_TASK: usize = 16;

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
    w: &Winograd2Weights,
    bias: Option<&[f32]>,
    pout: *mut f32,
    epi: &Epi,
    scratch: &mut [f32],
) -> Result<()> {
    let (c, o) = (g.cg, g.o);
    let (_, tw, t) = tiles(g);
    let (vl, ml) = (v_len(g), m_len(g));
    let (v, m) = scratch[..scratch_elems(g)].split_at_mut(XI * vl);
    // Columns past the last tile (in the last panel) are read by the GEMM, never stored:
    // zeros, not stale values. The transforms write every other value.
    if t % PANEL != 0 {
        let last = t / PANEL * c * PANEL;
        for row in v.chunks_exact_mut(vl).flat_map(|vx| vx[last..].chunks_exact_mut(PANEL)) {
            row[t % PANEL..].fill(0.0);
        }
    }
    let (vp, mp, px, out) = (v.as_mut_ptr() as usize, m.as_mut_ptr() as usize, px as usize, pout as usize);
    let [pt, pl, ..] = g.a.padding;
    let [s0, s1, s2, s3] = [x.strides[0], x.strides[1], x.strides[2], x.strides[3]];
    for img in 0..g.n {
        for_each_task(c.div_ceil(CHANNELS_PER_TASK), |task| {
            for ch in task * CHANNELS_PER_TASK..((task + 1) * CHANNELS_PER_TASK).min(c) {
                let base = x.offset + img * s0 + ch * s1;
                for tile in 0..t {
                    let (y0, x0) = ((tile / tw * M) as isize - pt as isize, (tile % tw * M) as isize - pl as isize);
                    let d: [[f32; N]; N] = std::array::from_fn(|r| {
                        std::array::from_fn(|s| {
                            let (y, xx) = (y0 + r as isize, x0 + s as isize);
                            if (0..g.h as isize).contains(&y) && (0..g.w as isize).contains(&xx) {
                                // SAFETY: (img, ch, y, xx) is inside the checked view.
                                unsafe { *(px as *const f32).add(base + y as usize * s2 + xx as usize * s3) }
                            } else {
                                0.0
                            }
                        })
                    });
                    // Along the columns (each of the four), then along the rows.
                    let cols: [[f32; N]; N] = std::array::from_fn(|s| bt(std::array::from_fn(|r| d[r][s])));
                    let at_col = (tile / PANEL * c + ch) * PANEL + tile % PANEL;
                    for i in 0..N {
                        for (j, val) in bt(std::array::from_fn(|s| cols[s][i])).into_iter().enumerate() {
                            // SAFETY: V[ξ] holds panel tile/16's row ch; each task writes its
                            // own channels' rows.
                            unsafe { *(vp as *mut f32).add((N * i + j) * vl + at_col) = val };
                        }
                    }
                }
            }
        });
        for_each_task(XI, |xi| {
            // SAFETY: V[ξ] holds T columns of C rows in panels and M[ξ] is [O, T], both inside
            // the scratch, each product writing its own M[ξ]; U[ξ] is [O, C].
            unsafe { gemm::gemm_a_panels_here(&w.u[xi], t, (vp as *const f32).add(xi * vl), (mp as *mut f32).add(xi * ml), t) };
        });
        for_each_task(o.div_ceil(CHANNELS_PER_TASK), |task| {
            for k in task * CHANNELS_PER_TASK..((task + 1) * CHANNELS_PER_TASK).min(o) {
                let b = bias.map_or(0.0, |b| b[k]);
                let dst = (out as *mut f32).wrapping_add((img * o + k) * g.p());
                for tile in 0..t {
                    // SAFETY: M[ξ] row k, column `tile`, inside the scratch.
                    let mv: [[f32; N]; N] = std::array::from_fn(|i| std::array::from_fn(|j| unsafe { *(mp as *const f32).add((N * i + j) * ml + k * t + tile) }));
                    let cols: [[f32; M]; N] = std::array::from_fn(|j| at(std::array::from_fn(|i| mv[i][j])));
                    let (y0, x0) = (tile / tw * M, tile % tw * M);
                    for i in 0..M.min(g.oh - y0) {
                        let row = at(std::array::from_fn(|j| cols[j][i]));
                        for (j, val) in row.into_iter().enumerate().take(g.ow - x0) {
                            // SAFETY: pixel (y0 + i, x0 + j) of channel k is inside the output;
                            // each task writes its own channels.
                            unsafe { *dst.add((y0 + i) * g.ow + x0 + j) = val + b };
                        }
                    }
                }
            }
        });
        epi.rows(img * o, (img + 1) * o)?;
    }
    Ok(())
}
