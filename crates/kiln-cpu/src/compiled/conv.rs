//! The Conv2d extern (f32, NCHW) writing straight into its output buffer: a 1x1 stride-1
//! unpadded conv is one GEMM `[Og, Cg] @ [Cg, H*W]` per (image, group) on the input as it
//! lies; other convs build the im2col matrix of each (image, group) in the executable's
//! scratch first; convs with one input channel per group (depthwise) run a direct loop.
//! Output channels are done in blocks of rows; each block gets its bias and then the
//! epilogue while it is still in cache.

use super::matmul::sgemm;
use super::raw;
use super::steps::Epi;
use kiln_ir::{Conv2dAttrs, Error, Result};
use kiln_sched::{BufId, BufView};
use rayon::prelude::*;

/// Sizes of one convolution, checked against each other.
struct Geom {
    n: usize,
    h: usize,
    w: usize,
    o: usize,
    cg: usize,
    og: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    groups: usize,
    a: Conv2dAttrs,
}

impl Geom {
    fn new(a: &Conv2dAttrs, inputs: &[BufView], out: &[usize]) -> Result<Geom> {
        let shapes: Vec<&[usize]> = inputs.iter().map(|v| &v.shape[..]).collect();
        let bad = |why: &str| {
            Error::Shape(format!(
                "conv2d extern {shapes:?} -> {out:?} ({a:?}): {why}"
            ))
        };
        let (x, w) = match inputs {
            [x, w] | [x, w, _] => (&x.shape[..], &w.shape[..]),
            _ => return Err(bad("needs inputs [x, w] or [x, w, bias]")),
        };
        let (&[n, c, h, wd], &[o, cg, kh, kw], &[on, oo, oh, ow]) = (x, w, out) else {
            return Err(bad("x, w and the result must be rank 4"));
        };
        let groups = a.groups;
        if groups == 0 || cg * groups != c || o % groups != 0 || on != n || oo != o {
            return Err(bad("channels do not fit the groups"));
        }
        if inputs.get(2).is_some_and(|b| b.shape != [o]) {
            return Err(bad("bias must be [O]"));
        }
        let fits = |len, k, s, p0, p1, d, out| {
            kiln_ir::infer::window_out(len, k, s, (p0, p1), d, false) == Some(out)
        };
        let p = a.padding;
        if a.stride.contains(&0)
            || a.dilation.contains(&0)
            || !fits(h, kh, a.stride[0], p[0], p[2], a.dilation[0], oh)
            || !fits(wd, kw, a.stride[1], p[1], p[3], a.dilation[1], ow)
        {
            return Err(bad("the output size does not match the window"));
        }
        Ok(Geom {
            n,
            h,
            w: wd,
            o,
            cg,
            og: o / groups,
            kh,
            kw,
            oh,
            ow,
            groups,
            a: *a,
        })
    }

    /// Rows of the im2col matrix (the GEMM's K).
    fn k(&self) -> usize {
        self.cg * self.kh * self.kw
    }

    /// Output pixels per channel (the GEMM's N).
    fn p(&self) -> usize {
        self.oh * self.ow
    }

    fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.a.stride == [1, 1] && self.a.padding == [0; 4]
    }
}

/// The stride that walks `shape` (as strided by `strides`) as one flat dim, when it exists.
fn merged_stride(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let (mut inner, mut next) = (None, 0);
    for d in (0..shape.len()).rev() {
        if shape[d] == 1 {
            continue;
        }
        match inner {
            None => inner = Some(strides[d]),
            Some(_) if strides[d] != next => return None,
            Some(_) => {}
        }
        next = strides[d] * shape[d];
    }
    Some(inner.unwrap_or(1))
}

/// How the input of (image, group) reaches the GEMM: as it lies, or through im2col.
fn direct_input(g: &Geom, x: &BufView) -> Option<usize> {
    if g.is_pointwise() {
        merged_stride(&x.shape[2..], &x.strides[2..])
    } else {
        None
    }
}

/// f32 elements of im2col scratch this conv needs (`None` when it needs none).
pub(crate) fn scratch_elems(a: &Conv2dAttrs, inputs: &[BufView], out: &[usize]) -> Option<usize> {
    let g = Geom::new(a, inputs, out).ok()?;
    (g.cg > 1 && direct_input(&g, &inputs[0]).is_none()).then(|| g.k() * g.p())
}

/// Runs the convolution (see [`kiln_sched::ExternOp::Conv2d`]).
pub(crate) fn run(
    a: &Conv2dAttrs,
    inputs: &[BufView],
    ptrs: &[*mut u8],
    out: BufId,
    out_shape: &[usize],
    epi: &Epi,
    scratch: &mut Vec<f32>,
) -> Result<()> {
    let g = Geom::new(a, inputs, out_shape)?;
    epi.check_rows(g.n * g.o)?;
    let (x, w, bias) = (&inputs[0], &inputs[1], inputs.get(2));
    let px = ptrs[x.buf.index()] as *const f32;
    let pout = ptrs[out.index()] as *mut f32;
    let p = g.p();
    // Weights as an [O, K] matrix: as they lie when [Cg, KH, KW] merge, else a dense copy.
    let wdense: Vec<f32>;
    let (pw, w_rs, w_cs) = match merged_stride(&w.shape[1..], &w.strides[1..]) {
        Some(cs) => (
            (ptrs[w.buf.index()] as *const f32).wrapping_add(w.offset),
            w.strides[0],
            cs,
        ),
        None => {
            wdense = read_f32(ptrs, w);
            (wdense.as_ptr(), g.k(), 1)
        }
    };
    let bias: Vec<f32> = bias.map_or_else(Vec::new, |b| read_f32(ptrs, b));
    // The GEMM packs the right-hand side (the im2col matrix) on every call, so row blocks
    // must be tall for that to stay cheap: at least 128 rows, else the whole output at once.
    let block = if epi.present() {
        ((1usize << 18) / p.max(1)).max(128)
    } else {
        g.o.max(1)
    };
    let add_bias = |rows: std::ops::Range<usize>, img: usize| {
        if bias.is_empty() {
            return;
        }
        for o in rows {
            for i in 0..p {
                // SAFETY: the output buffer holds n*O*P elements (checked when built).
                unsafe {
                    let d = pout.add((img * g.o + o) * p + i);
                    d.write(d.read() + bias[o]);
                }
            }
        }
    };
    for img in 0..g.n {
        if g.cg == 1 {
            for o0 in (0..g.o).step_by(block) {
                let o1 = (o0 + block).min(g.o);
                for o in o0..o1 {
                    direct_plane(&g, x, px, pw, w_rs, w_cs, img, o, pout);
                }
                add_bias(o0..o1, img);
                epi.rows(img * g.o + o0, img * g.o + o1)?;
            }
            continue;
        }
        for grp in 0..g.groups {
            let x_off = x.offset + img * x.strides[0] + grp * g.cg * x.strides[1];
            let (rhs, rhs_rs, rhs_cs) = match direct_input(&g, x) {
                Some(cs) => (px.wrapping_add(x_off), x.strides[1] as isize, cs as isize),
                None => {
                    im2col(&g, x, px, x_off, &mut scratch[..g.k() * p]);
                    (scratch.as_ptr(), p as isize, 1)
                }
            };
            for o0 in (0..g.og).step_by(block) {
                let o1 = (o0 + block).min(g.og);
                let first = grp * g.og + o0;
                // SAFETY: the views were checked inside their buffers when the executable
                // was built; rows o0..o1 of group `grp` are inside the weights and the output;
                // the scratch holds K*P elements.
                unsafe {
                    sgemm(
                        o1 - o0,
                        p,
                        g.k(),
                        pout.add((img * g.o + first) * p),
                        p as isize,
                        pw.add(first * w_rs),
                        w_rs as isize,
                        w_cs as isize,
                        rhs,
                        rhs_rs,
                        rhs_cs,
                    )
                };
                add_bias(first..first + (o1 - o0), img);
                epi.rows(img * g.o + first, img * g.o + first + (o1 - o0))?;
            }
        }
    }
    Ok(())
}

/// The elements of a (checked) f32 view, row-major.
fn read_f32(ptrs: &[*mut u8], v: &BufView) -> Vec<f32> {
    let base = ptrs[v.buf.index()] as *const u8;
    let layout = kiln_ir::Layout {
        shape: v.shape.clone(),
        strides: v.strides.iter().map(|&s| s as isize).collect(),
        offset: v.offset,
    };
    let mut out = Vec::with_capacity(layout.numel());
    // SAFETY: the view was checked inside its buffer when the executable was built.
    layout.for_each_offset(|o| out.push(unsafe { raw::read::<f32>(base, o) }));
    out
}

/// The input position `o * stride + tap * dilation - pad` along one axis, when inside `0..len`.
#[inline]
fn pos(o: usize, stride: usize, tap: usize, dil: usize, pad: usize, len: usize) -> Option<usize> {
    (o * stride + tap * dil)
        .checked_sub(pad)
        .filter(|&i| i < len)
}

/// Fills `col` (`[Cg*KH*KW, OH*OW]`) with the patches of one (image, group) whose first
/// channel starts at element `x_off`: row `(c, i, j)` holds the input element kernel tap
/// `(i, j)` of channel `c` sees at every output pixel (zero in the padding).
fn im2col(g: &Geom, x: &BufView, px: *const f32, x_off: usize, col: &mut [f32]) {
    let ([sh, sw], [dh, dw]) = (g.a.stride, g.a.dilation);
    let (pt, pl) = (g.a.padding[0], g.a.padding[1]);
    let (sc, sy, sx) = (x.strides[1], x.strides[2], x.strides[3]);
    let p = g.p();
    // Rows are independent: filled in parallel (im2col is memory-bound and was a third of a
    // 3x3 conv's time on one thread). The address travels as usize (raw pointers are not Send).
    let base = px as usize;
    col.par_chunks_mut(p.max(1))
        .enumerate()
        .take(g.k())
        .for_each(|(r, row)| {
            let px = base as *const f32;
            let (c, i, j) = (r / (g.kh * g.kw), (r / g.kw) % g.kh, r % g.kw);
            for oy in 0..g.oh {
                let dst = &mut row[oy * g.ow..(oy + 1) * g.ow];
                let Some(iy) = pos(oy, sh, i, dh, pt, g.h) else {
                    dst.fill(0.0);
                    continue;
                };
                for (ox, d) in dst.iter_mut().enumerate() {
                    *d = match pos(ox, sw, j, dw, pl, g.w) {
                        // SAFETY: c < Cg, iy < H, ix < W: inside the checked input view.
                        Some(ix) => unsafe { px.add(x_off + c * sc + iy * sy + ix * sx).read() },
                        None => 0.0,
                    };
                }
            }
        });
}

/// Output plane `o` of image `img` for a conv with one input channel per group, directly.
#[allow(clippy::too_many_arguments)]
fn direct_plane(
    g: &Geom,
    x: &BufView,
    px: *const f32,
    pw: *const f32,
    w_rs: usize,
    w_cs: usize,
    img: usize,
    o: usize,
    pout: *mut f32,
) {
    let ([sh, sw], [dh, dw]) = (g.a.stride, g.a.dilation);
    let (pt, pl) = (g.a.padding[0], g.a.padding[1]);
    let ch = o / g.og;
    let x_off = x.offset + img * x.strides[0] + ch * x.strides[1];
    let (sy, sx) = (x.strides[2], x.strides[3]);
    for oy in 0..g.oh {
        for ox in 0..g.ow {
            let mut acc = 0.0f32;
            for i in 0..g.kh {
                let Some(iy) = pos(oy, sh, i, dh, pt, g.h) else {
                    continue;
                };
                for j in 0..g.kw {
                    let Some(ix) = pos(ox, sw, j, dw, pl, g.w) else {
                        continue;
                    };
                    // SAFETY: inside the checked input and weight views.
                    unsafe {
                        acc += pw.add(o * w_rs + (i * g.kw + j) * w_cs).read()
                            * px.add(x_off + iy * sy + ix * sx).read();
                    }
                }
            }
            // SAFETY: the output buffer holds n*O*P elements.
            unsafe {
                pout.add((img * g.o + o) * g.p() + oy * g.ow + ox)
                    .write(acc)
            };
        }
    }
}
