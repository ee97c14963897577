//! Col2Im (2-D and 3-D images) as a grouped transposed convolution with one-hot kernels, and Det of
//! 1x1, 2x2 and 3x3 matrices in closed form.

use super::volume::{Transposed3d, conv_transpose3d};
use super::window::axis_ints;
use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{
    BinaryOp, ConvTranspose2dAttrs, Dim, Error, HostTensor, NodeId, Op, Result, Shape, SliceAxis,
};

/// ONNX Col2Im: sums the blocks (columns) of `[N, C*prod(block), L]` back into `[N, C, *image]`
/// (2-D or 3-D images). Block channel `(c, j)` (`j` a flat kernel position) adds to image
/// channel `c` at offset `j * dilation`, which is a transposed convolution with `groups = C`
/// and a kernel that is 1 at position `j` only.
pub(super) fn col2im(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["dilations", "pads", "strides"])?;
    let x = ctx.input(node, 0)?;
    let image = ctx.const_ints(node, 1, "image_shape")?.unwrap_or_default();
    let block = ctx.const_ints(node, 2, "block_shape")?.unwrap_or_default();
    let n = image.len();
    if !(n == 2 || n == 3) || block.len() != n {
        return Err(Error::Unsupported(format!(
            "Col2Im with image_shape {image:?} and block_shape {block:?} is not supported by kiln \
             (2-D and 3-D images only)"
        )));
    }
    if !ctx.dtype(x).is_float() {
        return Err(Error::Unsupported(format!(
            "Col2Im on {} is not supported (float only)",
            ctx.dtype(x)
        )));
    }
    if image.iter().chain(&block).any(|&v| v < 1) {
        return Err(Error::Value(format!(
            "Col2Im: image_shape {image:?} and block_shape {block:?} must be >= 1"
        )));
    }
    let img: Vec<usize> = image.iter().map(|&v| v as usize).collect();
    let k: Vec<usize> = block.iter().map(|&v| v as usize).collect();
    let stride = axis_ints(node, "strides", n, 1)?;
    let dil = axis_ints(node, "dilations", n, 1)?;
    let pads = axis_ints(node, "pads", 2 * n, 0)?;
    if stride.contains(&0) || dil.contains(&0) {
        return Err(Error::Value(format!(
            "Col2Im: strides {stride:?} and dilations {dil:?} must be >= 1"
        )));
    }
    let xs = ctx.fixed_shape(x, "Col2Im")?;
    let kk: usize = k.iter().product();
    if xs.len() != 3 || xs[1] % kk != 0 {
        return Err(Error::Shape(format!(
            "Col2Im: input {xs:?} must be [N, C*{kk}, L]"
        )));
    }
    let c = xs[1] / kk;
    let mut blocks = vec![0usize; n];
    for a in 0..n {
        let span = img[a] + pads[a] + pads[a + n];
        let eff = dil[a] * (k[a] - 1) + 1;
        if span < eff {
            return Err(Error::Shape(format!(
                "Col2Im: block {k:?} does not fit image {img:?} with pads {pads:?}"
            )));
        }
        blocks[a] = (span - eff) / stride[a] + 1;
    }
    if blocks.iter().product::<usize>() != xs[2] {
        return Err(Error::Shape(format!(
            "Col2Im: input {xs:?} has {} blocks, but image {img:?} holds {blocks:?}",
            xs[2]
        )));
    }
    let mut out_pad = vec![0usize; n];
    for a in 0..n {
        let full = ((blocks[a] - 1) * stride[a] + dil[a] * (k[a] - 1) + 1) as i64
            - (pads[a] + pads[a + n]) as i64;
        if full < 1 || full as usize > img[a] {
            return Err(Error::Unsupported(format!(
                "Col2Im: pads {pads:?} do not fit the blocks of image {img:?} on axis {a}"
            )));
        }
        out_pad[a] = img[a] - full as usize;
    }
    let mut w = vec![0.0f64; c * kk * kk];
    for ch in 0..c * kk {
        w[ch * kk + ch % kk] = 1.0;
    }
    let mut w_shape = vec![c * kk, 1];
    w_shape.extend(&k);
    let w = ctx.constant(HostTensor::from_vec(w, &w_shape)?);
    let w = ctx.add(Op::Cast(ctx.dtype(x)), &[w])?;
    let mut dims = ctx.dims(x);
    dims.truncate(2);
    dims.extend(blocks.iter().map(|&b| Dim::Fixed(b)));
    let xb = ctx.add(Op::Reshape(Shape(dims)), &[x])?;
    if n == 3 {
        let g = Transposed3d {
            stride: [stride[0], stride[1], stride[2]],
            dilation: [dil[0], dil[1], dil[2]],
            pads: [(pads[0], pads[3]), (pads[1], pads[4]), (pads[2], pads[5])],
            output_padding: [out_pad[0], out_pad[1], out_pad[2]],
            groups: c,
        };
        return one(conv_transpose3d(ctx, xb, w, None, &g)?);
    }
    let a = ConvTranspose2dAttrs {
        stride: [stride[0], stride[1]],
        padding: [pads[0], pads[1], pads[2], pads[3]],
        output_padding: [out_pad[0], out_pad[1]],
        dilation: [dil[0], dil[1]],
        groups: c,
    };
    one(ctx.add(Op::ConvTranspose2d(a), &[xb, w])?)
}

/// Element `(i, j)` of the trailing matrices of `x` (`[.., n, n]` → `[..]`).
fn entry(ctx: &mut Ctx, x: NodeId, i: usize, j: usize) -> Result<NodeId> {
    let r = ctx.rank(x);
    let mut axes = vec![SliceAxis::FULL; r];
    axes[r - 2] = SliceAxis {
        start: i as i64,
        end: i as i64 + 1,
        step: 1,
    };
    axes[r - 1] = SliceAxis {
        start: j as i64,
        end: j as i64 + 1,
        step: 1,
    };
    let s = ctx.add(Op::Slice(axes), &[x])?;
    let mut dims = ctx.dims(x);
    dims.truncate(r - 2);
    ctx.add(Op::Reshape(Shape(dims)), &[s])
}

/// ONNX Det for matrices up to 3x3 (the cofactor expansion; larger ones are refused).
pub(super) fn det(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let x = ctx.input(node, 0)?;
    let r = ctx.rank(x);
    if !ctx.dtype(x).is_float() || r < 2 {
        return Err(Error::DType(format!(
            "Det needs float matrices [.., n, n], got {}",
            ctx.ty(x)
        )));
    }
    let dims = ctx.dims(x);
    let n = match (&dims[r - 2], &dims[r - 1]) {
        (Dim::Fixed(a), Dim::Fixed(b)) if a == b => *a,
        _ => {
            return Err(Error::Shape(format!(
                "Det needs square matrices, got {}",
                ctx.ty(x).shape
            )));
        }
    };
    let mul = |ctx: &mut Ctx, a, b| ctx.add(Op::Binary(BinaryOp::Mul), &[a, b]);
    let sub = |ctx: &mut Ctx, a, b| ctx.add(Op::Binary(BinaryOp::Sub), &[a, b]);
    let e: Vec<Vec<NodeId>> = (0..n.min(3))
        .map(|i| {
            (0..n.min(3))
                .map(|j| entry(ctx, x, i, j))
                .collect::<Result<_>>()
        })
        .collect::<Result<_>>()?;
    let y = match n {
        1 => e[0][0],
        2 => {
            let ad = mul(ctx, e[0][0], e[1][1])?;
            let bc = mul(ctx, e[0][1], e[1][0])?;
            sub(ctx, ad, bc)?
        }
        3 => {
            let minor = |ctx: &mut Ctx, a: usize, b: usize| -> Result<NodeId> {
                let p = mul(ctx, e[1][a], e[2][b])?;
                let q = mul(ctx, e[1][b], e[2][a])?;
                sub(ctx, p, q)
            };
            let m0 = minor(ctx, 1, 2)?;
            let m1 = minor(ctx, 0, 2)?;
            let m2 = minor(ctx, 0, 1)?;
            let t0 = mul(ctx, e[0][0], m0)?;
            let t1 = mul(ctx, e[0][1], m1)?;
            let t2 = mul(ctx, e[0][2], m2)?;
            let s = sub(ctx, t0, t1)?;
            ctx.add(Op::Binary(BinaryOp::Add), &[s, t2])?
        }
        _ => {
            return Err(Error::Unsupported(format!(
                "Det of {n}x{n} matrices is not supported by kiln (up to 3x3)"
            )));
        }
    };
    one(y)
}
