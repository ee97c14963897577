//! The sliding-window attributes shared by Conv, ConvTranspose and the pools (`strides`,
//! `dilations`, `pads`, `auto_pad`), and the lifting of 1-D windows to the IR's 2-D ops.

use crate::import::{Ctx, attrs};
use crate::proto::NodeProto;
use kiln_ir::{Dim, Error, NodeId, Op, Result, Shape};

/// A window over `n` spatial axes, every entry resolved (auto_pad applied).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Window {
    pub kernel: Vec<usize>,
    pub stride: Vec<usize>,
    pub dilation: Vec<usize>,
    /// `(begin, end)` padding per axis.
    pub pads: Vec<(usize, usize)>,
}

/// A non-negative ints attribute of length `n`, or `default` repeated.
pub(super) fn axis_ints(
    node: &NodeProto,
    name: &str,
    n: usize,
    default: usize,
) -> Result<Vec<usize>> {
    match attrs::ints(node, name)? {
        None => Ok(vec![default; n]),
        Some(v) if v.len() == n && v.iter().all(|&s| s >= 0) => {
            Ok(v.iter().map(|&s| s as usize).collect())
        }
        Some(v) => Err(Error::Value(format!(
            "{} attribute '{name}' must hold {n} non-negative values (one per spatial axis), got {v:?}",
            node.op_type()
        ))),
    }
}

/// The `auto_pad` attribute (default NOTSET).
pub(super) fn auto_pad(node: &NodeProto) -> Result<String> {
    let s = attrs::string(node, "auto_pad")?.unwrap_or_else(|| "NOTSET".into());
    match s.as_str() {
        "NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER" => Ok(s),
        _ => Err(Error::Value(format!(
            "{} auto_pad '{s}' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER",
            node.op_type()
        ))),
    }
}

/// Reads the window of `node` with kernel `kernel` over the spatial dims `spatial`
/// (needed fixed only for SAME_* padding).
pub(super) fn read(node: &NodeProto, kernel: Vec<usize>, spatial: &[Dim]) -> Result<Window> {
    let n = kernel.len();
    let stride = axis_ints(node, "strides", n, 1)?;
    let dilation = axis_ints(node, "dilations", n, 1)?;
    if stride.contains(&0) || dilation.contains(&0) || kernel.contains(&0) {
        return Err(Error::Value(format!(
            "{}: kernel {kernel:?}, strides {stride:?} and dilations {dilation:?} must be >= 1",
            node.op_type()
        )));
    }
    let pads = match auto_pad(node)?.as_str() {
        "VALID" => vec![(0, 0); n],
        "NOTSET" => {
            let p = axis_ints(node, "pads", 2 * n, 0)?;
            (0..n).map(|i| (p[i], p[i + n])).collect()
        }
        mode => {
            let upper = mode == "SAME_UPPER";
            let mut pads = Vec::with_capacity(n);
            for i in 0..n {
                let len = spatial.get(i).and_then(Dim::fixed).ok_or_else(|| {
                    Error::Unsupported(format!(
                        "{} with auto_pad {mode} needs fixed spatial dims, got {spatial:?}",
                        node.op_type()
                    ))
                })?;
                let out = len.div_ceil(stride[i]);
                let eff = dilation[i] * (kernel[i] - 1) + 1;
                let total = ((out.max(1) - 1) * stride[i] + eff).saturating_sub(len);
                let small = total / 2;
                pads.push(if upper {
                    (small, total - small)
                } else {
                    (total - small, small)
                });
            }
            pads
        }
    };
    Ok(Window {
        kernel,
        stride,
        dilation,
        pads,
    })
}

impl Window {
    /// The same window over `[1, L]` for a 1-D one (the IR ops are 2-D).
    pub fn to_2d(&self) -> Result<Window> {
        match self.kernel.len() {
            2 => Ok(self.clone()),
            1 => Ok(Window {
                kernel: vec![1, self.kernel[0]],
                stride: vec![1, self.stride[0]],
                dilation: vec![1, self.dilation[0]],
                pads: vec![(0, 0), self.pads[0]],
            }),
            n => Err(Error::Unsupported(format!(
                "{n}-D windows have no 2-D form (3-D ones go through the volumetric converters)"
            ))),
        }
    }

    /// `[a, b]` of a 2-D window's per-axis values.
    pub fn pair(v: &[usize]) -> [usize; 2] {
        [v[0], v[1]]
    }

    /// IR padding `[top, left, bottom, right]` of a 2-D window.
    pub fn padding(&self) -> [usize; 4] {
        [
            self.pads[0].0,
            self.pads[1].0,
            self.pads[0].1,
            self.pads[1].1,
        ]
    }
}

/// The number of spatial axes of an `[N, C, ...]` input of `op`, refusing anything but 1-D,
/// 2-D and 3-D.
pub(super) fn spatial_rank(ctx: &Ctx, x: NodeId, op: &str) -> Result<usize> {
    match ctx.rank(x) {
        3 => Ok(1),
        4 => Ok(2),
        5 => Ok(3),
        r if r > 5 => Err(Error::Unsupported(format!(
            "{op} over {}-D spatial input {} is not supported by kiln (only 1-D, 2-D and 3-D)",
            r - 2,
            ctx.ty(x).shape
        ))),
        _ => Err(Error::Shape(format!(
            "{op} needs an input [N, C, spatial...], got {}",
            ctx.ty(x).shape
        ))),
    }
}

/// `[N, C, L]` → `[N, C, 1, L]` (rank-4 inputs pass through).
pub(super) fn lift(ctx: &mut Ctx, x: NodeId) -> Result<NodeId> {
    if ctx.rank(x) != 3 {
        return Ok(x);
    }
    let mut dims = ctx.dims(x);
    dims.insert(2, Dim::Fixed(1));
    ctx.add(Op::Reshape(Shape(dims)), &[x])
}

/// Undoes [`lift`] on a result when the input was 1-D.
pub(super) fn unlift(ctx: &mut Ctx, y: NodeId, one_d: bool) -> Result<NodeId> {
    if !one_d {
        return Ok(y);
    }
    let mut dims = ctx.dims(y);
    dims.remove(2);
    ctx.add(Op::Reshape(Shape(dims)), &[y])
}
