//! 2-D transposed convolution (NCHW) by gemm + col2im.
//!
//! Each (image, group) pair is one `[Og*KH*KW, Cg] @ [Cg, H*W]` product: row `(o, i, j)` of
//! the result holds, for every input pixel, its contribution through kernel tap `(i, j)` to
//! output channel `o`. col2im then adds each row into the output plane of `o`, shifted by the
//! tap and spread by the stride; planes are independent, so that runs in parallel. The output
//! starts as the broadcast bias.

use super::conv::{Real, bias_filled, dense_data, valid_range};
use super::matmul::{from_f32, gemm_dense, to_f32};
use super::norm::real::{for_each_row, worth_parallel};
use kiln_ir::{ConvTranspose2dAttrs, DType, Error, HostTensor, Result, infer::conv_transpose_out};

/// Transposed convolution of `x` with `w` (+ `bias`); `shape` is the inferred output shape.
pub fn conv_transpose2d(
    a: &ConvTranspose2dAttrs,
    x: &HostTensor,
    w: &HostTensor,
    bias: Option<&HostTensor>,
    shape: &[usize],
) -> Result<HostTensor> {
    match x.dtype() {
        DType::F32 => typed::<f32>(a, x, w, bias, shape),
        DType::F64 => typed::<f64>(a, x, w, bias, shape),
        DType::F16 | DType::BF16 => {
            let bias = bias.map(to_f32).transpose()?;
            let out = typed::<f32>(a, &to_f32(x)?, &to_f32(w)?, bias.as_ref(), shape)?;
            from_f32(&out, x.dtype())
        }
        d => Err(Error::DType(format!(
            "conv_transpose2d: needs a float input, got {d}"
        ))),
    }
}

/// Sizes of one transposed convolution, checked against each other.
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
    a: ConvTranspose2dAttrs,
}

impl Geom {
    fn new(
        a: &ConvTranspose2dAttrs,
        x: &[usize],
        w: &[usize],
        bias: Option<&[usize]>,
        shape: &[usize],
    ) -> Result<Geom> {
        let bad = |why: &str| {
            Error::Shape(format!(
                "conv_transpose2d(x {x:?}, w {w:?}, bias {bias:?}) -> {shape:?}: {why}"
            ))
        };
        let (&[n, c, h, wd], &[wc, og, kh, kw], &[on, oo, oh, ow]) = (x, w, shape) else {
            return Err(bad("x, w and the result must be rank 4"));
        };
        let groups = a.groups;
        if groups == 0 || wc != c || c % groups != 0 || on != n || oo != og * groups {
            return Err(bad(&format!(
                "channels do not fit groups={groups} (w must be [C, O/groups, KH, KW])"
            )));
        }
        if a.stride.contains(&0) || a.dilation.contains(&0) {
            return Err(bad("stride and dilation must be >= 1"));
        }
        if bias.is_some_and(|b| b != [oo]) {
            return Err(bad("bias must be [O]"));
        }
        let p = a.padding;
        let fits = |len, k, ax: usize, out| {
            conv_transpose_out(
                len,
                k,
                a.stride[ax],
                (p[ax], p[ax + 2]),
                a.dilation[ax],
                a.output_padding[ax],
            ) == Some(out)
        };
        if !fits(h, kh, 0, oh) || !fits(wd, kw, 1, ow) {
            return Err(bad("the output size does not match the attributes"));
        }
        Ok(Geom {
            n,
            c,
            h,
            w: wd,
            o: oo,
            kh,
            kw,
            oh,
            ow,
            groups,
            cg: c / groups,
            og,
            a: *a,
        })
    }
}

fn typed<T: Real>(
    a: &ConvTranspose2dAttrs,
    x: &HostTensor,
    w: &HostTensor,
    bias: Option<&HostTensor>,
    shape: &[usize],
) -> Result<HostTensor> {
    let g = Geom::new(a, x.shape(), w.shape(), bias.map(|b| b.shape()), shape)?;
    let (x, w) = (x.contiguous(), w.contiguous());
    let (xd, wd) = (
        dense_data::<T>(&x, "conv_transpose2d")?,
        dense_data::<T>(&w, "conv_transpose2d")?,
    );
    let plane = g.oh * g.ow;
    let mut out = bias_filled::<T>(bias, g.n, g.o, plane)?;
    if out.is_empty() {
        return HostTensor::from_vec(out, shape);
    }
    let (kk, hw) = (g.kh * g.kw, g.h * g.w);
    let rows = g.og * kk;
    // w[grp] is [Cg, Og*KK]; gemm wants it transposed, [Og*KK, Cg], once per group.
    let mut wt = vec![T::zero(); g.groups * rows * g.cg];
    for grp in 0..g.groups {
        let src = &wd[grp * g.cg * rows..][..g.cg * rows];
        let dst = &mut wt[grp * rows * g.cg..][..rows * g.cg];
        for ci in 0..g.cg {
            for r in 0..rows {
                dst[r * g.cg + ci] = src[ci * rows + r];
            }
        }
    }
    let mut col = vec![T::zero(); rows * hw];
    for (u, dst) in out.chunks_mut(g.og * plane).enumerate() {
        let (img, grp) = (u / g.groups, u % g.groups);
        let xs = &xd[(img * g.c + grp * g.cg) * hw..][..g.cg * hw];
        gemm_dense(
            rows,
            hw,
            g.cg,
            &mut col,
            &wt[grp * rows * g.cg..][..rows * g.cg],
            xs,
            false,
        )?;
        col2im(&g, &col, dst)?;
    }
    HostTensor::from_vec(out, shape)
}

/// Adds the `[Og*KH*KW, H*W]` columns of one unit into its `Og` output planes.
fn col2im<T: Real>(g: &Geom, col: &[T], dst: &mut [T]) -> Result<()> {
    let [sh, sw] = g.a.stride;
    let [dh, dw] = g.a.dilation;
    let (pt, pl) = (g.a.padding[0] as isize, g.a.padding[1] as isize);
    let (kk, hw, plane) = (g.kh * g.kw, g.h * g.w, g.oh * g.ow);
    for_each_row(dst, plane, worth_parallel(g.og * kk * hw), |o, out| {
        for i in 0..g.kh {
            // Input rows ih whose output row ih*sh + i*dh - pt lies in the output.
            let off_h = (i * dh) as isize - pt;
            let (h_lo, h_hi) = valid_range(g.h, g.oh, sh, off_h);
            for j in 0..g.kw {
                let off_w = (j * dw) as isize - pl;
                let (w_lo, w_hi) = valid_range(g.w, g.ow, sw, off_w);
                if w_lo >= w_hi {
                    continue;
                }
                let src = &col[(o * kk + i * g.kw + j) * hw..][..hw];
                for ih in h_lo..h_hi {
                    let oy = ((ih * sh) as isize + off_h) as usize;
                    let ox0 = ((w_lo * sw) as isize + off_w) as usize;
                    let row = &mut out[oy * g.ow + ox0..(oy + 1) * g.ow];
                    let s = &src[ih * g.w + w_lo..ih * g.w + w_hi];
                    if sw == 1 {
                        for (d, &v) in row.iter_mut().zip(s) {
                            *d = *d + v;
                        }
                    } else {
                        for (d, &v) in row.iter_mut().step_by(sw).zip(s) {
                            *d = *d + v;
                        }
                    }
                }
            }
        }
        Ok(())
    })
}
