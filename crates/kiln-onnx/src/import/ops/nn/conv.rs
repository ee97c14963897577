//! Conv, ConvTranspose and their integer forms (ConvInteger, QLinearConv). 1-D convolutions
//! run as 2-D ones over `[N, C, 1, L]`; 3-D ones are sums of 2-D ones (see `volume`).

use super::quant;
use super::volume::{self, Transposed3d};
use super::window::{self, Window, lift, spatial_rank, unlift};
use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{BinaryOp, Conv2dAttrs, ConvTranspose2dAttrs, DType, Error, NodeId, Op, Result};

const CONV_ATTRS: [&str; 6] = [
    "auto_pad",
    "dilations",
    "group",
    "kernel_shape",
    "pads",
    "strides",
];

/// The weight's kernel dims (checked against `kernel_shape` when given).
fn kernel_of(ctx: &Ctx, node: &NodeProto, w: NodeId, n: usize) -> Result<Vec<usize>> {
    let op = node.op_type();
    let ws = ctx.fixed_shape(w, op)?;
    if ws.len() != n + 2 {
        return Err(Error::Shape(format!(
            "{op}: the weight {ws:?} must have rank {} for a {n}-D input",
            n + 2
        )));
    }
    let kernel = ws[2..].to_vec();
    if let Some(k) = attrs::ints(node, "kernel_shape")?
        && k.iter()
            .map(|&v| v as i128)
            .ne(kernel.iter().map(|&v| v as i128))
    {
        return Err(Error::Shape(format!(
            "{op}: kernel_shape {k:?} does not match the weight's kernel {kernel:?}"
        )));
    }
    Ok(kernel)
}

fn group(node: &NodeProto) -> Result<usize> {
    let g = attrs::int(node, "group", 1)?;
    if g < 1 {
        return Err(Error::Value(format!(
            "{}: group must be >= 1, got {g}",
            node.op_type()
        )));
    }
    Ok(g as usize)
}

/// ONNX Conv: cross-correlation with bias, as IR Conv2d (3 inputs when there is a bias).
pub(super) fn conv(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &CONV_ATTRS)?;
    let x = ctx.input(node, 0)?;
    let w = ctx.input(node, 1)?;
    let b = ctx.opt_input(node, 2)?;
    if !ctx.dtype(x).is_float() {
        return Err(Error::Unsupported(format!(
            "Conv on {} is not supported (float inputs only)",
            ctx.dtype(x)
        )));
    }
    one(conv_node(ctx, node, x, w, b)?)
}

/// The convolution of `node`'s window attributes on `x` and `w` (+ bias `b`).
fn conv_node(
    ctx: &mut Ctx,
    node: &NodeProto,
    x: NodeId,
    w: NodeId,
    b: Option<NodeId>,
) -> Result<NodeId> {
    let n = spatial_rank(ctx, x, node.op_type())?;
    let kernel = kernel_of(ctx, node, w, n)?;
    let spatial = ctx.dims(x)[2..].to_vec();
    let win = window::read(node, kernel, &spatial)?;
    if n == 3 {
        return volume::conv3d(ctx, x, w, b, &win, group(node)?);
    }
    let win = win.to_2d()?;
    let a = Conv2dAttrs {
        stride: Window::pair(&win.stride),
        padding: win.padding(),
        dilation: Window::pair(&win.dilation),
        groups: group(node)?, channels_last: false,
    };
    let x4 = lift(ctx, x)?;
    let w4 = lift(ctx, w)?;
    let mut inputs = vec![x4, w4];
    inputs.extend(b);
    let y = ctx.add(Op::Conv2d(a), &inputs)?;
    unlift(ctx, y, n == 1)
}

/// ONNX ConvTranspose (1-D, 2-D and 3-D): pads from `pads`, `auto_pad` or `output_shape`, as
/// ONNX's reference and onnxruntime compute them.
pub(super) fn conv_transpose(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(
        node,
        &[&CONV_ATTRS[..], &["output_padding", "output_shape"]].concat(),
    )?;
    let x = ctx.input(node, 0)?;
    let w = ctx.input(node, 1)?;
    let b = ctx.opt_input(node, 2)?;
    let n = spatial_rank(ctx, x, "ConvTranspose")?;
    let kernel = kernel_of(ctx, node, w, n)?;
    let stride = window::axis_ints(node, "strides", n, 1)?;
    let dilation = window::axis_ints(node, "dilations", n, 1)?;
    let mut out_pad = window::axis_ints(node, "output_padding", n, 0)?;
    if stride.contains(&0) || dilation.contains(&0) {
        return Err(Error::Value(format!(
            "ConvTranspose: strides {stride:?} and dilations {dilation:?} must be >= 1"
        )));
    }
    let mode = window::auto_pad(node)?;
    let out_shape = match attrs::ints(node, "output_shape")? {
        Some(v) if v.len() == n || v.len() == n + 2 => Some(v[v.len() - n..].to_vec()),
        Some(v) => {
            return Err(Error::Value(format!(
                "ConvTranspose: output_shape {v:?} must have {n} entries"
            )));
        }
        None => None,
    };
    let given_pads = attrs::has(node, "pads") && mode == "NOTSET";
    let pads: Vec<(usize, usize)> = if mode == "VALID"
        || (mode == "NOTSET" && (given_pads || out_shape.is_none()))
    {
        let p = if mode == "VALID" {
            vec![0; 2 * n]
        } else {
            window::axis_ints(node, "pads", 2 * n, 0)?
        };
        let pads: Vec<(usize, usize)> = (0..n).map(|i| (p[i], p[i + n])).collect();
        if let Some(want) = &out_shape {
            // Explicit pads and an output shape: the shape may only add rows at the end.
            let ins = ctx.fixed_shape(x, "ConvTranspose")?;
            for i in 0..n {
                let full = (stride[i] * (ins[i + 2].max(1) - 1)
                    + out_pad[i]
                    + dilation[i] * (kernel[i] - 1)
                    + 1) as i64
                    - (pads[i].0 + pads[i].1) as i64;
                let extra = want[i] - full;
                if extra < 0 {
                    return Err(Error::Unsupported(format!(
                        "ConvTranspose: output_shape {want:?} is smaller than the padded output on axis {i} ({full})"
                    )));
                }
                out_pad[i] += extra as usize;
            }
        }
        pads
    } else {
        let ins = ctx.fixed_shape(x, "ConvTranspose")?;
        let mut pads = Vec::with_capacity(n);
        for i in 0..n {
            let len = ins[i + 2] as i64;
            let want = match &out_shape {
                Some(o) => o[i],
                None => len * stride[i] as i64,
            };
            let total = stride[i] as i64 * (len - 1)
                + out_pad[i] as i64
                + (dilation[i] * (kernel[i] - 1) + 1) as i64
                - want;
            let half = total.div_euclid(2);
            let (p0, p1) = if mode == "SAME_UPPER" {
                (half, total - half)
            } else {
                (total - half, half)
            };
            if p0 < 0 {
                return Err(Error::Unsupported(format!(
                    "ConvTranspose: the requested output {want} on axis {i} needs negative leading padding {p0}"
                )));
            }
            // A negative trailing pad grows the output at the end: that is output padding.
            if p1 < 0 {
                out_pad[i] += (-p1) as usize;
            }
            pads.push((p0 as usize, p1.max(0) as usize));
        }
        pads
    };
    if n == 3 {
        let g = Transposed3d {
            stride: [stride[0], stride[1], stride[2]],
            dilation: [dilation[0], dilation[1], dilation[2]],
            pads: [pads[0], pads[1], pads[2]],
            output_padding: [out_pad[0], out_pad[1], out_pad[2]],
            groups: group(node)?,
        };
        return one(volume::conv_transpose3d(ctx, x, w, b, &g)?);
    }
    let win = Window {
        kernel,
        stride,
        dilation,
        pads,
    }
    .to_2d()?;
    let op2 = if n == 1 {
        [0, out_pad[0]]
    } else {
        [out_pad[0], out_pad[1]]
    };
    let a = ConvTranspose2dAttrs {
        stride: Window::pair(&win.stride),
        padding: win.padding(),
        output_padding: op2,
        dilation: Window::pair(&win.dilation),
        groups: group(node)?,
    };
    let x4 = lift(ctx, x)?;
    let w4 = lift(ctx, w)?;
    let mut inputs = vec![x4, w4];
    inputs.extend(b);
    let y = ctx.add(Op::ConvTranspose2d(a), &inputs)?;
    one(unlift(ctx, y, n == 1)?)
}

/// `x - zero_point` in f64 (exact for 8/16-bit data), the zero point per tensor or, for the
/// weight, per output channel (`axis` 0).
fn shifted(
    ctx: &mut Ctx,
    x: NodeId,
    zp: Option<NodeId>,
    per_channel_axis: Option<usize>,
) -> Result<NodeId> {
    let xf = ctx.add(Op::Cast(DType::F64), &[x])?;
    let Some(zp) = zp else { return Ok(xf) };
    let zf = ctx.add(Op::Cast(DType::F64), &[zp])?;
    let zf = match per_channel_axis {
        Some(axis) => quant::per_axis(ctx, zf, x, axis, "zero point")?,
        None => zf,
    };
    ctx.add(Op::Binary(BinaryOp::Sub), &[xf, zf])
}

/// ONNX ConvInteger: `conv(x - x_zp, w - w_zp)` accumulated exactly (in f64: 8-bit products
/// summed stay far below 2^53) and returned as i32.
pub(super) fn conv_integer(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &CONV_ATTRS)?;
    let x = ctx.input(node, 0)?;
    let w = ctx.input(node, 1)?;
    let xz = ctx.opt_input(node, 2)?;
    let wz = ctx.opt_input(node, 3)?;
    let xs = shifted(ctx, x, xz, None)?;
    let ws = shifted(ctx, w, wz, Some(0))?;
    let y = conv_node(ctx, node, xs, ws, None)?;
    one(ctx.add(Op::Cast(DType::I32), &[y])?)
}

/// ONNX QLinearConv: the integer convolution (+ i32 bias) rescaled by
/// `x_scale * w_scale / y_scale` and requantized (round half to even, saturate).
pub(super) fn qlinear_conv(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &CONV_ATTRS)?;
    let x = ctx.input(node, 0)?;
    let xs = ctx.input(node, 1)?;
    let xz = ctx.input(node, 2)?;
    let w = ctx.input(node, 3)?;
    let ws = ctx.input(node, 4)?;
    let wz = ctx.input(node, 5)?;
    let ys = ctx.input(node, 6)?;
    let yz = ctx.input(node, 7)?;
    let b = ctx.opt_input(node, 8)?;
    let xq = shifted(ctx, x, Some(xz), None)?;
    let wq = shifted(ctx, w, Some(wz), Some(0))?;
    let bias = match b {
        Some(b) => Some(ctx.add(Op::Cast(DType::F64), &[b])?),
        None => None,
    };
    let acc = conv_node(ctx, node, xq, wq, bias)?;
    // Per-channel weight scales apply along the output channels (axis 1 of the result).
    let xsf = ctx.add(Op::Cast(DType::F32), &[xs])?;
    let wsf = ctx.add(Op::Cast(DType::F32), &[ws])?;
    let wsf = quant::per_axis(ctx, wsf, acc, 1, "w_scale")?;
    let ysf = ctx.add(Op::Cast(DType::F32), &[ys])?;
    let m = ctx.add(Op::Binary(BinaryOp::Mul), &[xsf, wsf])?;
    let m = ctx.add(Op::Binary(BinaryOp::Div), &[m, ysf])?;
    let m = ctx.add(Op::Cast(DType::F64), &[m])?;
    let scaled = ctx.add(Op::Binary(BinaryOp::Mul), &[acc, m])?;
    one(quant::requantize(ctx, scaled, yz, ctx.dtype(yz))?)
}
