//! 2-D convolution (NCHW) by im2col + gemm, with a direct loop for depthwise convolutions.
//!
//! Each (image, group) pair is one `[Og, K] @ [K, OH*OW]` product, `K = Cg*KH*KW`, whose
//! right side is the im2col matrix of that group's input (or the input itself for a 1x1,
//! stride-1, unpadded conv). The output starts as the broadcast bias and gemm accumulates
//! into it, so the bias costs no extra sweep.

use super::matmul::{from_f32, gemm_column_tiles, gemm_dense, to_f32};
use kiln_ir::{Conv2dAttrs, DType, Element, Error, HostTensor, Result};
use rayon::prelude::*;
use std::ops::{Add, Mul, Range};

/// Multiply-adds per (image, group) product below which products run in parallel with each
/// other (one thread each) rather than one after another with threads inside each.
const UNIT_PAR_WORK: usize = 1 << 22;

/// Convolution of `x` with `w` (+ `bias`); `shape` is the inferred output shape. A
/// channels-last conv is computed as its NCHW twin on transposed copies (this is the
/// reference, not a fast path).
pub fn conv2d(a: &Conv2dAttrs, x: &HostTensor, w: &HostTensor, bias: Option<&HostTensor>, shape: &[usize]) -> Result<HostTensor> {
    if a.channels_last {
        let axes = a.nchw_axes();
        let to_nchw = |t: &HostTensor| -> Result<HostTensor> { Ok(t.with_layout(t.layout.permute(&axes)?).contiguous()) };
        if shape.len() != 4 {
            return Err(Error::Shape(format!("conv2d: output shape {shape:?} is not 4-D")));
        }
        let nchw_shape: Vec<usize> = axes.iter().map(|&i| shape[i]).collect();
        let nchw = Conv2dAttrs { channels_last: false, ..*a };
        let y = conv2d(&nchw, &to_nchw(x)?, &to_nchw(w)?, bias, &nchw_shape)?;
        // [N, O, OH, OW] -> [N, OH, OW, O].
        return Ok(y.with_layout(y.layout.permute(&[0, 2, 3, 1])?).contiguous());
    }
    match x.dtype() {
        DType::F32 => conv_typed::<f32>(a, x, w, bias, shape),
        DType::F64 => conv_typed::<f64>(a, x, w, bias, shape),
        DType::F16 | DType::BF16 => {
            let bias = bias.map(to_f32).transpose()?;
            let out = conv_typed::<f32>(a, &to_f32(x)?, &to_f32(w)?, bias.as_ref(), shape)?;
            from_f32(&out, x.dtype())
        }
        d => Err(Error::DType(format!("conv2d: needs a float input, got {d}"))),
    }
}

/// Float element types the conv and pooling loops compute in.
pub(crate) trait Real: Element + Add<Output = Self> + Mul<Output = Self> {}
impl Real for f32 {}
impl Real for f64 {}

/// Sizes of one convolution, checked against each other.
#[derive(Clone, Copy, Debug)]
struct Geom {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    groups: usize,
    cg: usize,
    og: usize,
    a: Conv2dAttrs,
}

impl Geom {
    fn new(a: &Conv2dAttrs, x: &[usize], w: &[usize], bias: Option<&[usize]>, shape: &[usize]) -> Result<Geom> {
        let bad = |why: &str| {
            Error::Shape(format!("conv2d(x {x:?}, w {w:?}, bias {bias:?}) -> {shape:?}: {why}"))
        };
        let (&[n, c, h, wd], &[o, cg, kh, kw], &[on, oo, oh, ow]) = (x, w, shape) else {
            return Err(bad("x, w and the result must be rank 4"));
        };
        let groups = a.groups;
        if groups == 0 || cg * groups != c || o % groups != 0 || on != n || oo != o {
            return Err(bad(&format!("channels do not fit groups={groups}")));
        }
        if a.stride.contains(&0) || a.dilation.contains(&0) {
            return Err(bad("stride and dilation must be >= 1"));
        }
        if bias.is_some_and(|b| b != [o]) {
            return Err(bad("bias must be [O]"));
        }
        let fits = |len: usize, k: usize, s: usize, p0: usize, p1: usize, d: usize, out: usize| {
            kiln_ir::infer::window_out(len, k, s, (p0, p1), d, false) == Some(out)
        };
        let p = a.padding;
        if !fits(h, kh, a.stride[0], p[0], p[2], a.dilation[0], oh)
            || !fits(wd, kw, a.stride[1], p[1], p[3], a.dilation[1], ow)
        {
            return Err(bad("the output size does not match the window"));
        }
        Ok(Geom { n, c, h, w: wd, o, kh, kw, oh, ow, groups, cg, og: o / groups, a: *a })
    }

    /// Rows of the im2col matrix (the gemm's K).
    fn k(&self) -> usize {
        self.cg * self.kh * self.kw
    }

    /// Output pixels per channel (the gemm's N).
    fn p(&self) -> usize {
        self.oh * self.ow
    }

    /// True when the input planes already are the `[Cg, H*W]` gemm operand.
    fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.a.stride == [1, 1] && self.a.padding == [0; 4]
    }
}

/// The indices `i` in `0..count` whose input position `i * step + off` lies in `0..len`, as
/// a range (positions grow with `i`, so the valid ones are contiguous).
pub(crate) fn valid_range(count: usize, len: usize, step: usize, off: isize) -> (usize, usize) {
    let step = step as isize;
    let last = len as isize - 1 - off;
    if last < 0 {
        return (0, 0);
    }
    let hi = ((last / step + 1) as usize).min(count);
    let lo = if off >= 0 { 0 } else { ((-off + step - 1) / step) as usize };
    (lo.min(hi), hi)
}

/// The starting value of a conv output that kernels accumulate into: `n` images of `o`
/// channels of `plane` elements, each channel holding its bias (zeros without a bias).
pub(crate) fn bias_filled<T: Real>(bias: Option<&HostTensor>, n: usize, o: usize, plane: usize) -> Result<Vec<T>> {
    let Some(b) = bias else { return Ok(vec![T::zero(); n * o * plane]) };
    let b = b.to_vec::<T>()?;
    let mut v = Vec::with_capacity(n * o * plane);
    for _ in 0..n {
        for &bo in &b {
            v.extend(std::iter::repeat_n(bo, plane));
        }
    }
    Ok(v)
}

/// The elements of a tensor made by [`HostTensor::contiguous`], as a slice of `T`.
pub(crate) fn dense_data<'a, T: Element>(t: &'a HostTensor, op: &str) -> Result<&'a [T]> {
    let err = || Error::DType(format!("{op}: expected {} data, got {}", T::DTYPE, t.dtype()));
    // An empty tensor may not count as dense (a 0 dim after a larger one), but has no data.
    if t.numel() == 0 {
        return T::slice(&t.storage).map(|_| &[][..]).ok_or_else(err);
    }
    t.dense_slice::<T>().ok_or_else(err)
}

fn conv_typed<T: Real>(a: &Conv2dAttrs, x: &HostTensor, w: &HostTensor, bias: Option<&HostTensor>, shape: &[usize]) -> Result<HostTensor> {
    let g = Geom::new(a, x.shape(), w.shape(), bias.map(|b| b.shape()), shape)?;
    let (x, w) = (x.contiguous(), w.contiguous());
    let (xd, wd) = (dense_data::<T>(&x, "conv2d")?, dense_data::<T>(&w, "conv2d")?);
    let p = g.p();
    let mut out = bias_filled::<T>(bias, g.n, g.o, p)?;
    if out.is_empty() {
        return HostTensor::from_vec(out, shape);
    }
    if g.cg == 1 && g.og == 1 {
        depthwise(&g, xd, wd, &mut out);
    } else {
        grouped_gemm(&g, xd, wd, &mut out, bias.is_some())?;
    }
    HostTensor::from_vec(out, shape)
}

/// One `[Og, K] @ [K, P]` product per (image, group) unit, in output order. Many small
/// units run in parallel with each other; otherwise units run in turn and each is split
/// into cache-sized column tiles (or, when too small to tile, threaded inside).
fn grouped_gemm<T: Real>(g: &Geom, xd: &[T], wd: &[T], out: &mut [T], acc: bool) -> Result<()> {
    let (k, p, hw) = (g.k(), g.p(), g.h * g.w);
    let operands = |u: usize| {
        let (img, grp) = (u / g.groups, u % g.groups);
        (&xd[(img * g.c + grp * g.cg) * hw..][..g.cg * hw], &wd[grp * g.og * k..][..g.og * k])
    };
    let chunk = g.og * p;
    let units = g.n * g.groups;
    if units > 1 && g.og * p * k < UNIT_PAR_WORK {
        return out.par_chunks_mut(chunk).enumerate().try_for_each_init(Vec::new, |col, (u, dst)| {
            let (xs, ws) = operands(u);
            if g.is_pointwise() {
                return gemm_dense(g.og, p, k, dst, ws, xs, acc);
            }
            col.resize(k * p, T::zero());
            im2col(g, xs, 0..g.oh, col, false);
            gemm_dense(g.og, p, k, dst, ws, col, acc)
        });
    }
    let tiles = row_tiles::<T>(g);
    let mut col = Vec::new();
    for (u, dst) in out.chunks_mut(chunk).enumerate() {
        let (xs, ws) = operands(u);
        if g.is_pointwise() {
            gemm_dense(g.og, p, k, dst, ws, xs, acc)?;
        } else if let Some(tiles) = &tiles {
            gemm_column_tiles(g.og, p, k, dst, ws, tiles, acc, |cols, buf| {
                im2col(g, xs, cols.start / g.ow..cols.end / g.ow, buf, false)
            })?;
        } else {
            col.resize(k * p, T::zero());
            im2col(g, xs, 0..g.oh, &mut col, true);
            gemm_dense(g.og, p, k, dst, ws, &col, acc)?;
        }
    }
    Ok(())
}

/// Bytes of im2col data one tile may hold, so that it is still in L2 when gemm reads it.
const TILE_BYTES: usize = 1 << 20;

/// Fewest output columns a tile may have and still make an efficient gemm.
const MIN_TILE_COLS: usize = 32;

/// Splits one unit's output columns into whole-output-row tiles that fit [`TILE_BYTES`],
/// at least one per thread; `None` when the output is too small to split usefully.
fn row_tiles<T: Real>(g: &Geom) -> Option<Vec<Range<usize>>> {
    let threads = rayon::current_num_threads();
    let bytes = g.k() * g.p() * std::mem::size_of::<T>();
    let count = bytes.div_ceil(TILE_BYTES).max(threads).next_multiple_of(threads).min(g.oh.max(1));
    let rows = g.oh.div_ceil(count.max(1)).max(1);
    let tiles: Vec<Range<usize>> =
        (0..g.oh).step_by(rows).map(|r| r * g.ow..(r + rows).min(g.oh) * g.ow).collect();
    (tiles.len() >= 2 && rows * g.ow >= MIN_TILE_COLS).then_some(tiles)
}

/// Fills `col` (`[Cg*KH*KW, rows.len()*OW]`) with the input patches of one group for output
/// rows `rows`: row `(c, i, j)` holds, for every output pixel, the input element kernel tap
/// `(i, j)` of channel `c` sees (zero in the padding).
fn im2col<T: Real>(g: &Geom, xs: &[T], rows: Range<usize>, col: &mut [T], parallel: bool) {
    let p = rows.len() * g.ow;
    let [sh, sw] = g.a.stride;
    let [dh, dw] = g.a.dilation;
    let (pt, pl) = (g.a.padding[0] as isize, g.a.padding[1] as isize);
    let fill = |(r, row): (usize, &mut [T])| {
        let (c, i, j) = (r / (g.kh * g.kw), (r / g.kw) % g.kh, r % g.kw);
        let plane = &xs[c * g.h * g.w..][..g.h * g.w];
        let (h_lo, h_hi) = valid_range(g.oh, g.h, sh, (i * dh) as isize - pt);
        let off_w = (j * dw) as isize - pl;
        let (w_lo, w_hi) = valid_range(g.ow, g.w, sw, off_w);
        for (oh, dst) in rows.clone().zip(row.chunks_mut(g.ow)) {
            if oh < h_lo || oh >= h_hi {
                dst.fill(T::zero());
                continue;
            }
            let ih = (oh * sh + i * dh) as isize - pt;
            let src = &plane[ih as usize * g.w..][..g.w];
            dst[..w_lo].fill(T::zero());
            dst[w_hi..].fill(T::zero());
            if w_lo < w_hi {
                let first = ((w_lo * sw) as isize + off_w) as usize;
                strided_copy(&mut dst[w_lo..w_hi], &src[first..], sw);
            }
        }
    };
    if parallel {
        col[..g.k() * p].par_chunks_mut(p.max(1)).enumerate().for_each(fill);
    } else {
        col[..g.k() * p].chunks_mut(p.max(1)).enumerate().for_each(fill);
    }
}

/// `dst[i] = src[i * step]`, with a plain copy for step 1.
fn strided_copy<T: Copy>(dst: &mut [T], src: &[T], step: usize) {
    if step == 1 {
        dst.copy_from_slice(&src[..dst.len()]);
    } else {
        // chunks(step) yields each element at a multiple of step without bounds checks
        for (d, c) in dst.iter_mut().zip(src.chunks(step)) {
            *d = c[0];
        }
    }
}

/// Depthwise conv (`groups == C == O`): one direct loop per output plane, parallel over planes.
/// The inner loop runs along an output row, so with stride 1 it is a contiguous axpy.
fn depthwise<T: Real>(g: &Geom, xd: &[T], wd: &[T], out: &mut [T]) {
    let [sh, sw] = g.a.stride;
    let [dh, dw] = g.a.dilation;
    let (pt, pl) = (g.a.padding[0] as isize, g.a.padding[1] as isize);
    let (hw, kk) = (g.h * g.w, g.kh * g.kw);
    out.par_chunks_mut(g.p()).enumerate().for_each(|(q, plane_out)| {
        // plane q is (image, channel) and channel o reads input channel o.
        let plane = &xd[q * hw..][..hw];
        let ker = &wd[(q % g.o) * kk..][..kk];
        for i in 0..g.kh {
            let (h_lo, h_hi) = valid_range(g.oh, g.h, sh, (i * dh) as isize - pt);
            for j in 0..g.kw {
                let wv = ker[i * g.kw + j];
                let off_w = (j * dw) as isize - pl;
                let (w_lo, w_hi) = valid_range(g.ow, g.w, sw, off_w);
                if w_lo == w_hi {
                    continue;
                }
                let first = ((w_lo * sw) as isize + off_w) as usize;
                for oh in h_lo..h_hi {
                    let ih = ((oh * sh + i * dh) as isize - pt) as usize;
                    let src = &plane[ih * g.w + first..];
                    let dst = &mut plane_out[oh * g.ow + w_lo..oh * g.ow + w_hi];
                    if sw == 1 {
                        for (d, &s) in dst.iter_mut().zip(src) {
                            *d = *d + wv * s;
                        }
                    } else {
                        for (d, c) in dst.iter_mut().zip(src.chunks(sw)) {
                            *d = *d + wv * c[0];
                        }
                    }
                }
            }
        }
    });
}
