//! MaxPool, AveragePool, LpPool (1-D and 2-D over the IR's Pool2d, 3-D as combinations of
//! 2-D poolings, see `volume`) and the global pools (any rank, as reductions over the spatial
//! axes).

use super::volume::{self, Pool3d};
use super::window::{self, Window, lift, spatial_rank, unlift};
use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::infer::window_out;
use kiln_ir::{
    BinaryOp, DType, Error, HostTensor, NodeId, Op, PadMode, Pool2dAttrs, PoolKind, ReduceOp,
    Result, UnaryOp,
};

/// ONNX MaxPool. Only the values output is produced: a used Indices output is refused.
pub(super) fn max_pool(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(
        node,
        &[
            "auto_pad",
            "ceil_mode",
            "dilations",
            "kernel_shape",
            "pads",
            "storage_order",
            "strides",
        ],
    )?;
    let x = ctx.input(node, 0)?;
    if ctx.dtype(x) == DType::Bool {
        return Err(Error::DType(
            "MaxPool needs a numeric input, got bool".into(),
        ));
    }
    one(pool(ctx, node, x, PoolKind::Max)?)
}

/// ONNX AveragePool (`count_include_pad` default 0).
pub(super) fn average_pool(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(
        node,
        &[
            "auto_pad",
            "ceil_mode",
            "count_include_pad",
            "dilations",
            "kernel_shape",
            "pads",
            "strides",
        ],
    )?;
    let x = ctx.input(node, 0)?;
    float_input(ctx, x, "AveragePool")?;
    let include = attrs::int(node, "count_include_pad", 0)? != 0;
    one(pool(
        ctx,
        node,
        x,
        PoolKind::Avg {
            count_include_pad: include,
        },
    )?)
}

fn float_input(ctx: &Ctx, x: NodeId, op: &str) -> Result<()> {
    if !ctx.dtype(x).is_float() {
        return Err(Error::DType(format!(
            "{op} needs a float input, got {}",
            ctx.dtype(x)
        )));
    }
    Ok(())
}

/// The `p` attribute of LpPool/GlobalLpPool: an int since opset 11 (2 before 2 for
/// GlobalLpPool), a float in older opsets.
fn lp_p(node: &NodeProto) -> Result<f64> {
    let p = match attrs::opt_int(node, "p") {
        Ok(Some(p)) => p as f64,
        Ok(None) => 2.0,
        Err(_) => attrs::float(node, "p", 2.0)? as f64,
    };
    if !(p.is_finite() && p > 0.0) {
        return Err(Error::Value(format!(
            "{}: p must be > 0, got {p}",
            node.op_type()
        )));
    }
    Ok(p)
}

/// `|x|^p`, and `s^(1/p)` (exact square and square root for the usual p = 2).
fn lp_pow(ctx: &mut Ctx, x: NodeId, p: f64) -> Result<NodeId> {
    let a = ctx.add(Op::Unary(UnaryOp::Abs), &[x])?;
    if p == 2.0 {
        return ctx.add(Op::Binary(BinaryOp::Mul), &[a, a]);
    }
    let e = ctx.scalar(ctx.dtype(x), p)?;
    ctx.add(Op::Binary(BinaryOp::Pow), &[a, e])
}

fn lp_root(ctx: &mut Ctx, s: NodeId, p: f64) -> Result<NodeId> {
    if p == 2.0 {
        return ctx.add(Op::Unary(UnaryOp::Sqrt), &[s]);
    }
    let e = ctx.scalar(ctx.dtype(s), 1.0 / p)?;
    ctx.add(Op::Binary(BinaryOp::Pow), &[s, e])
}

/// ONNX LpPool: `(sum |x|^p)^(1/p)` over each window, padding counting as 0.
pub(super) fn lp_pool(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(
        node,
        &[
            "auto_pad",
            "ceil_mode",
            "dilations",
            "kernel_shape",
            "p",
            "pads",
            "strides",
        ],
    )?;
    let x = ctx.input(node, 0)?;
    float_input(ctx, x, "LpPool")?;
    if attrs::int(node, "ceil_mode", 0)? != 0 {
        return Err(Error::Unsupported(
            "LpPool with ceil_mode=1 is not supported by kiln".into(),
        ));
    }
    let p = lp_p(node)?;
    let n = spatial_rank(ctx, x, "LpPool")?;
    let win = read_window(ctx, node, x, n)?;
    let xp = lp_pow(ctx, x, p)?;
    if n == 3 {
        let sum = volume::pool3d(ctx, xp, Pool3d::Sum, &win, false)?;
        return one(lp_root(ctx, sum, p)?);
    }
    let win = win.to_2d()?;
    let x4 = lift(ctx, xp)?;
    // Sum over each window = mean over the zero-padded window (every tap counts) * its size.
    let padded = pad(ctx, x4, &win, 0.0)?;
    let a = attrs_of(
        &win,
        PoolKind::Avg {
            count_include_pad: true,
        },
        false,
        [0; 4],
    );
    let mean = ctx.add(Op::Pool2d(a), &[padded])?;
    let area = ctx.scalar(ctx.dtype(x), (win.kernel[0] * win.kernel[1]) as f64)?;
    let sum = ctx.add(Op::Binary(BinaryOp::Mul), &[mean, area])?;
    let y = lp_root(ctx, sum, p)?;
    one(unlift(ctx, y, n == 1)?)
}

fn read_window(ctx: &Ctx, node: &NodeProto, x: NodeId, n: usize) -> Result<Window> {
    let kernel = window::axis_ints(node, "kernel_shape", n, 0).and_then(|k| {
        if attrs::has(node, "kernel_shape") {
            Ok(k)
        } else {
            Err(Error::Value(format!(
                "{} needs the kernel_shape attribute",
                node.op_type()
            )))
        }
    })?;
    let spatial = ctx.dims(x)[2..].to_vec();
    window::read(node, kernel, &spatial)
}

fn attrs_of(w: &Window, kind: PoolKind, ceil: bool, padding: [usize; 4]) -> Pool2dAttrs {
    Pool2dAttrs {
        kind,
        kernel: Window::pair(&w.kernel),
        stride: Window::pair(&w.stride),
        padding,
        dilation: Window::pair(&w.dilation),
        ceil_mode: ceil,
    }
}

/// `x` (rank 4) padded explicitly by the window's pads with `fill`.
fn pad(ctx: &mut Ctx, x: NodeId, w: &Window, fill: f64) -> Result<NodeId> {
    if w.pads.iter().all(|&(a, b)| a == 0 && b == 0) {
        return Ok(x);
    }
    let pads = vec![(0, 0), (0, 0), w.pads[0], w.pads[1]];
    ctx.add(
        Op::Pad {
            pads,
            mode: PadMode::Constant(fill),
        },
        &[x],
    )
}

/// Max or average pooling of `node` on `x` (rank 3, 4 or 5).
fn pool(ctx: &mut Ctx, node: &NodeProto, x: NodeId, kind: PoolKind) -> Result<NodeId> {
    let n = spatial_rank(ctx, x, node.op_type())?;
    let win = read_window(ctx, node, x, n)?;
    let ceil = attrs::int(node, "ceil_mode", 0)? != 0;
    if n == 3 {
        let kind = match kind {
            PoolKind::Max => Pool3d::Max,
            PoolKind::Avg { count_include_pad } => Pool3d::Avg { count_include_pad },
        };
        return volume::pool3d(ctx, x, kind, &win, ceil);
    }
    let win = win.to_2d()?;
    let x4 = lift(ctx, x)?;
    let y = pool2d(ctx, x4, kind, &win, ceil)?;
    unlift(ctx, y, n == 1)
}

/// One 2-D pooling. The IR takes padding up to half the kernel; larger padding (ONNX allows
/// it) is applied explicitly first, with the same windows and divisors.
fn pool2d(ctx: &mut Ctx, x: NodeId, kind: PoolKind, w: &Window, ceil: bool) -> Result<NodeId> {
    let fits = (0..2).all(|i| w.pads[i].0 * 2 <= w.kernel[i] && w.pads[i].1 * 2 <= w.kernel[i]);
    if fits {
        return ctx.add(Op::Pool2d(attrs_of(w, kind, ceil, w.padding())), &[x]);
    }
    let shape = ctx.fixed_shape(x, "pooling with padding larger than half the kernel")?;
    for i in 0..2 {
        let len = shape[2 + i];
        let (k, s, d, p) = (w.kernel[i], w.stride[i], w.dilation[i], w.pads[i]);
        if window_out(len, k, s, p, d, ceil) != window_out(len + p.0 + p.1, k, s, (0, 0), d, ceil) {
            return Err(Error::Unsupported(format!(
                "pooling with pads {p:?} larger than half the kernel {k} and ceil_mode is not supported by kiln"
            )));
        }
    }
    let plain = attrs_of(
        w,
        PoolKind::Avg {
            count_include_pad: true,
        },
        ceil,
        [0; 4],
    );
    match kind {
        PoolKind::Max => {
            let px = pad(ctx, x, w, f64::NEG_INFINITY)?;
            ctx.add(Op::Pool2d(attrs_of(w, kind, ceil, [0; 4])), &[px])
        }
        PoolKind::Avg {
            count_include_pad: true,
        } => {
            let px = pad(ctx, x, w, 0.0)?;
            ctx.add(Op::Pool2d(plain), &[px])
        }
        PoolKind::Avg {
            count_include_pad: false,
        } => {
            // sum / count: both means share the divisor, so their ratio is the exact average
            // over the taps inside the input.
            let px = pad(ctx, x, w, 0.0)?;
            let num = ctx.add(Op::Pool2d(plain), &[px])?;
            let ones = HostTensor::from_vec(
                vec![1.0f64; shape[2] * shape[3]],
                &[1, 1, shape[2], shape[3]],
            )?;
            let ones = ctx.constant(ones);
            let ones = ctx.add(Op::Cast(ctx.dtype(x)), &[ones])?;
            let po = pad(ctx, ones, w, 0.0)?;
            let den = ctx.add(Op::Pool2d(plain), &[po])?;
            ctx.add(Op::Binary(BinaryOp::Div), &[num, den])
        }
    }
}

/// Reduces the spatial axes `2..rank` of an `[N, C, ...]` input, keeping them as size 1.
fn global(ctx: &mut Ctx, node: &NodeProto, x: NodeId, op: ReduceOp) -> Result<NodeId> {
    let r = ctx.rank(x);
    if r < 3 {
        return Err(Error::Shape(format!(
            "{} needs an input [N, C, spatial...], got {}",
            node.op_type(),
            ctx.ty(x).shape
        )));
    }
    ctx.add(
        Op::Reduce {
            op,
            axes: (2..r).collect(),
            keep_dims: true,
        },
        &[x],
    )
}

/// ONNX GlobalAveragePool: the mean over all spatial axes.
pub(super) fn global_average_pool(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let x = ctx.input(node, 0)?;
    float_input(ctx, x, "GlobalAveragePool")?;
    one(global(ctx, node, x, ReduceOp::Mean)?)
}

/// ONNX GlobalMaxPool: the max over all spatial axes.
pub(super) fn global_max_pool(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let x = ctx.input(node, 0)?;
    float_input(ctx, x, "GlobalMaxPool")?;
    one(global(ctx, node, x, ReduceOp::Max)?)
}

/// ONNX GlobalLpPool: `(sum |x|^p)^(1/p)` over all spatial axes.
pub(super) fn global_lp_pool(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["p"])?;
    let x = ctx.input(node, 0)?;
    float_input(ctx, x, "GlobalLpPool")?;
    let p = lp_p(node)?;
    let xp = lp_pow(ctx, x, p)?;
    let s = global(ctx, node, xp, ReduceOp::Sum)?;
    one(lp_root(ctx, s, p)?)
}
