//! Volumetric (3-D spatial, `[N, C, D, H, W]`) Conv, ConvTranspose and pooling, built from the
//! IR's 2-D ops: depth is moved next to the batch (`[N*D', C, H, W]`), each kernel depth tap
//! runs as one 2-D op on a strided slice of depth planes, and the taps are combined (sum or
//! max). Static shapes only: the depth slices and reshapes need fixed dims.

use super::window::Window;
use crate::import::Ctx;
use kiln_ir::infer::window_out;
use kiln_ir::{
    BinaryOp, Conv2dAttrs, ConvTranspose2dAttrs, Dim, Error, HostTensor, NodeId, Op, PadMode,
    Pool2dAttrs, PoolKind, Result, Shape, SliceAxis,
};

/// `[a, b, c, d, e]` → `[a, c, b, d, e]` (its own inverse).
const SWAP_12: [usize; 5] = [0, 2, 1, 3, 4];

fn fixed5(ctx: &Ctx, x: NodeId, op: &str) -> Result<[usize; 5]> {
    let s = ctx.fixed_shape(x, op)?;
    <[usize; 5]>::try_from(s.as_slice()).map_err(|_| {
        Error::Shape(format!(
            "{op} needs a rank-5 [N, C, D, H, W] tensor, got {s:?}"
        ))
    })
}

fn reshape(ctx: &mut Ctx, x: NodeId, dims: &[usize]) -> Result<NodeId> {
    let dims = dims.iter().map(|&d| Dim::Fixed(d)).collect();
    ctx.add(Op::Reshape(Shape(dims)), &[x])
}

/// `count` elements of `axis` from `start` every `step`.
fn take(
    ctx: &mut Ctx,
    x: NodeId,
    axis: usize,
    start: usize,
    step: usize,
    count: usize,
) -> Result<NodeId> {
    let mut axes = vec![SliceAxis::FULL; ctx.rank(x)];
    axes[axis] = SliceAxis {
        start: start as i64,
        end: (start + (count.max(1) - 1) * step + 1) as i64,
        step: step as i64,
    };
    ctx.add(Op::Slice(axes), &[x])
}

fn pad(ctx: &mut Ctx, x: NodeId, pads: Vec<(usize, usize)>, fill: f64) -> Result<NodeId> {
    if pads.iter().all(|&(a, b)| a == 0 && b == 0) {
        return Ok(x);
    }
    ctx.add(
        Op::Pad {
            pads,
            mode: PadMode::Constant(fill),
        },
        &[x],
    )
}

/// `acc ⊕ y`, or `y` for the first term.
fn combine(ctx: &mut Ctx, acc: Option<NodeId>, y: NodeId, op: BinaryOp) -> Result<NodeId> {
    match acc {
        None => Ok(y),
        Some(a) => ctx.add(Op::Binary(op), &[a, y]),
    }
}

/// `w[:, :, kd]` of a rank-5 weight, as a rank-4 one.
fn weight_tap(ctx: &mut Ctx, w: NodeId, ws: [usize; 5], kd: usize) -> Result<NodeId> {
    let t = take(ctx, w, 2, kd, 1, 1)?;
    reshape(ctx, t, &[ws[0], ws[1], ws[3], ws[4]])
}

/// `[N*D, O, H, W]` → `[N, O, D, H, W]`.
fn unmerge(ctx: &mut Ctx, y: NodeId, n: usize, d: usize) -> Result<NodeId> {
    let [_, o, h, w] = <[usize; 4]>::try_from(ctx.fixed_shape(y, "3-D window op")?.as_slice())
        .map_err(|_| Error::Shape("3-D window op: a 2-D step did not yield rank 4".into()))?;
    let y = reshape(ctx, y, &[n, d, o, h, w])?;
    ctx.add(Op::Permute(SWAP_12.to_vec()), &[y])
}

/// ONNX Conv over `[N, C, D, H, W]` with a resolved 3-D window: the sum over kernel depth
/// taps `kd` of 2-D convolutions of the depth planes `kd*dil_d + od*stride_d` (depth padded
/// with zeros first) with `w[:, :, kd]`; the bias is added once.
pub(super) fn conv3d(
    ctx: &mut Ctx,
    x: NodeId,
    w: NodeId,
    b: Option<NodeId>,
    win: &Window,
    groups: usize,
) -> Result<NodeId> {
    let xs = fixed5(ctx, x, "Conv (3-D)")?;
    let ws = fixed5(ctx, w, "Conv (3-D) weight")?;
    let (k, s, d, p) = (win.kernel[0], win.stride[0], win.dilation[0], win.pads[0]);
    let dout = window_out(xs[2], k, s, p, d, false).ok_or_else(|| {
        Error::Shape(format!(
            "Conv: kernel depth {k} (dilation {d}) does not fit input depth {} with pads {p:?}",
            xs[2]
        ))
    })?;
    let x = pad(ctx, x, vec![(0, 0), (0, 0), p, (0, 0), (0, 0)], 0.0)?;
    let xt = ctx.add(Op::Permute(SWAP_12.to_vec()), &[x])?;
    let a = Conv2dAttrs {
        stride: [win.stride[1], win.stride[2]],
        padding: [win.pads[1].0, win.pads[2].0, win.pads[1].1, win.pads[2].1],
        dilation: [win.dilation[1], win.dilation[2]],
        groups, channels_last: false,
    };
    let mut acc = None;
    for kd in 0..k {
        let planes = take(ctx, xt, 1, kd * d, s, dout)?;
        let planes = reshape(ctx, planes, &[xs[0] * dout, xs[1], xs[3], xs[4]])?;
        let wk = weight_tap(ctx, w, ws, kd)?;
        let mut inputs = vec![planes, wk];
        // The bias rides on the first tap only, so it is added exactly once.
        if kd == 0 {
            inputs.extend(b);
        }
        let y = ctx.add(Op::Conv2d(a), &inputs)?;
        acc = Some(combine(ctx, acc, y, BinaryOp::Add)?);
    }
    let y = acc.ok_or_else(|| Error::Shape("Conv: empty kernel depth".into()))?;
    unmerge(ctx, y, xs[0], dout)
}

/// The 3-D transposed convolution geometry (pads and output padding already resolved).
pub(super) struct Transposed3d {
    pub stride: [usize; 3],
    pub dilation: [usize; 3],
    /// `(begin, end)` cropped off the full output per axis.
    pub pads: [(usize, usize); 3],
    pub output_padding: [usize; 3],
    pub groups: usize,
}

/// ONNX ConvTranspose over `[N, C, D, H, W]`: each kernel depth tap `kd` is a 2-D transposed
/// convolution of every input plane with `w[:, :, kd]`; input plane `id` lands on output plane
/// `id*stride_d + kd*dil_d`, which is a stride interleave (zeros between planes) shifted by
/// `kd*dil_d`. The taps are summed, the depth pads cropped and the bias added.
pub(super) fn conv_transpose3d(
    ctx: &mut Ctx,
    x: NodeId,
    w: NodeId,
    b: Option<NodeId>,
    g: &Transposed3d,
) -> Result<NodeId> {
    let xs = fixed5(ctx, x, "ConvTranspose (3-D)")?;
    let ws = fixed5(ctx, w, "ConvTranspose (3-D) weight")?;
    let [n, _, depth, _, _] = xs;
    let (k, s, d) = (ws[2], g.stride[0], g.dilation[0]);
    let full = (depth.max(1) - 1) * s + d * (k.max(1) - 1) + 1 + g.output_padding[0];
    let (p0, p1) = g.pads[0];
    if full < p0 + p1 + 1 {
        return Err(Error::Shape(format!(
            "ConvTranspose: depth pads {:?} crop the whole output depth {full}",
            g.pads[0]
        )));
    }
    let xt = ctx.add(Op::Permute(SWAP_12.to_vec()), &[x])?;
    let planes = reshape(ctx, xt, &[n * depth, xs[1], xs[3], xs[4]])?;
    let a = ConvTranspose2dAttrs {
        stride: [g.stride[1], g.stride[2]],
        padding: [g.pads[1].0, g.pads[2].0, g.pads[1].1, g.pads[2].1],
        output_padding: [g.output_padding[1], g.output_padding[2]],
        dilation: [g.dilation[1], g.dilation[2]],
        groups: g.groups,
    };
    let mut acc = None;
    let mut plane_dims = [0usize; 3];
    for kd in 0..k {
        let wk = weight_tap(ctx, w, ws, kd)?;
        let y = ctx.add(Op::ConvTranspose2d(a), &[planes, wk])?;
        let ys = ctx.fixed_shape(y, "ConvTranspose (3-D)")?;
        plane_dims = [ys[1], ys[2], ys[3]];
        let r = ys[1] * ys[2] * ys[3];
        // [N, D, 1, R] padded to [N, D, s, R] and merged: plane id at id*s, zeros between.
        let y = reshape(ctx, y, &[n, depth, 1, r])?;
        let y = pad(ctx, y, vec![(0, 0), (0, 0), (0, s - 1), (0, 0)], 0.0)?;
        let y = reshape(ctx, y, &[n, depth * s, r])?;
        let shift = kd * d;
        let y = if shift + depth * s > full {
            let y = pad(ctx, y, vec![(0, 0), (shift, 0), (0, 0)], 0.0)?;
            take(ctx, y, 1, 0, 1, full)?
        } else {
            pad(
                ctx,
                y,
                vec![(0, 0), (shift, full - shift - depth * s), (0, 0)],
                0.0,
            )?
        };
        acc = Some(combine(ctx, acc, y, BinaryOp::Add)?);
    }
    let y = acc.ok_or_else(|| Error::Shape("ConvTranspose: empty kernel depth".into()))?;
    let dout = full - p0 - p1;
    let y = take(ctx, y, 1, p0, 1, dout)?;
    let [o, h, wd] = plane_dims;
    let y = reshape(ctx, y, &[n, dout, o, h, wd])?;
    let y = ctx.add(Op::Permute(SWAP_12.to_vec()), &[y])?;
    match b {
        None => Ok(y),
        Some(b) => {
            let b = reshape(ctx, b, &[o, 1, 1, 1])?;
            ctx.add(Op::Binary(BinaryOp::Add), &[y, b])
        }
    }
}

/// What a 3-D pooling combines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Pool3d {
    Max,
    /// The mean over the taps (all taps inside input and pads, or only those inside the input).
    Avg {
        count_include_pad: bool,
    },
    /// The plain sum over the taps (LpPool's `sum |x|^p`; padding adds 0).
    Sum,
}

/// Per-axis output length and the explicit end padding that makes every window lie inside.
fn pool_axis(len: usize, win: &Window, i: usize, ceil: bool) -> Result<(usize, usize)> {
    let (k, s, d, p) = (win.kernel[i], win.stride[i], win.dilation[i], win.pads[i]);
    let out = window_out(len, k, s, p, d, ceil).ok_or_else(|| {
        Error::Shape(format!(
            "pooling: kernel {k} (dilation {d}) does not fit input size {len} with pads {p:?}"
        ))
    })?;
    let need = (out - 1) * s + d * (k - 1) + 1;
    Ok((out, need.saturating_sub(len + p.0)))
}

/// How many taps of each output window along one axis count in the divisor.
fn axis_counts(len: usize, win: &Window, i: usize, out: usize, include_pad: bool) -> Vec<usize> {
    let (k, s, d, p) = (win.kernel[i], win.stride[i], win.dilation[i], win.pads[i]);
    (0..out)
        .map(|o| {
            (0..k)
                .filter(|&j| {
                    // Tap position relative to the input's first element.
                    let t = (o * s + j * d) as i64 - p.0 as i64;
                    let hi = if include_pad { len + p.1 } else { len } as i64;
                    let lo = if include_pad { -(p.0 as i64) } else { 0 };
                    t >= lo && t < hi
                })
                .count()
        })
        .collect()
}

/// 3-D max/average/sum pooling of `x` `[N, C, D, H, W]` over the resolved window `win`.
/// Every axis is padded explicitly (with -inf for max, 0 otherwise) so all windows lie
/// inside; each depth tap is a 2-D pooling of a strided slice of depth planes. Averages divide
/// the window sums by a constant tensor of exact tap counts.
pub(super) fn pool3d(
    ctx: &mut Ctx,
    x: NodeId,
    kind: Pool3d,
    win: &Window,
    ceil: bool,
) -> Result<NodeId> {
    let xs = fixed5(ctx, x, "pooling (3-D)")?;
    let mut outs = [0usize; 3];
    let mut pads = vec![(0, 0); 2];
    for i in 0..3 {
        let (o, end) = pool_axis(xs[2 + i], win, i, ceil)?;
        outs[i] = o;
        pads.push((win.pads[i].0, end));
    }
    let fill = if kind == Pool3d::Max {
        f64::NEG_INFINITY
    } else {
        0.0
    };
    let xp = pad(ctx, x, pads, fill)?;
    let ps = fixed5(ctx, xp, "pooling (3-D)")?;
    let xt = ctx.add(Op::Permute(SWAP_12.to_vec()), &[xp])?;
    let a = Pool2dAttrs {
        kind: match kind {
            Pool3d::Max => PoolKind::Max,
            _ => PoolKind::Avg {
                count_include_pad: true,
            },
        },
        kernel: [win.kernel[1], win.kernel[2]],
        stride: [win.stride[1], win.stride[2]],
        padding: [0; 4],
        dilation: [win.dilation[1], win.dilation[2]],
        ceil_mode: false,
    };
    let (k, s, d) = (win.kernel[0], win.stride[0], win.dilation[0]);
    let mut acc = None;
    for kd in 0..k {
        let planes = take(ctx, xt, 1, kd * d, s, outs[0])?;
        let planes = reshape(ctx, planes, &[xs[0] * outs[0], xs[1], ps[3], ps[4]])?;
        let y = ctx.add(Op::Pool2d(a), &[planes])?;
        // Padding to the last window may leave room for more windows than the output holds.
        let mut axes = vec![SliceAxis::FULL; 4];
        for i in 0..2 {
            axes[2 + i].end = outs[1 + i] as i64;
        }
        let y = ctx.add(Op::Slice(axes), &[y])?;
        let op = if kind == Pool3d::Max {
            BinaryOp::Max
        } else {
            BinaryOp::Add
        };
        acc = Some(combine(ctx, acc, y, op)?);
    }
    let y = acc.ok_or_else(|| Error::Shape("pooling: empty kernel depth".into()))?;
    let y = unmerge(ctx, y, xs[0], outs[0])?;
    // The 2-D steps yield means over kh*kw taps: back to sums (exact: an integer factor).
    let area = ctx.scalar(ctx.dtype(x), (win.kernel[1] * win.kernel[2]) as f64)?;
    let count_include_pad = match kind {
        Pool3d::Max => return Ok(y),
        Pool3d::Sum => return ctx.add(Op::Binary(BinaryOp::Mul), &[y, area]),
        Pool3d::Avg { count_include_pad } => count_include_pad,
    };
    let sum = ctx.add(Op::Binary(BinaryOp::Mul), &[y, area])?;
    let c: Vec<Vec<usize>> = (0..3)
        .map(|i| axis_counts(xs[2 + i], win, i, outs[i], count_include_pad))
        .collect();
    let mut counts = Vec::with_capacity(outs.iter().product());
    for &a in &c[0] {
        for &b in &c[1] {
            for &e in &c[2] {
                counts.push((a * b * e) as f64);
            }
        }
    }
    let t = ctx.constant(HostTensor::from_vec(counts, &outs)?);
    let t = ctx.add(Op::Cast(ctx.dtype(x)), &[t])?;
    ctx.add(Op::Binary(BinaryOp::Div), &[sum, t])
}
