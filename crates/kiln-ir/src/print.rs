//! The text form of a graph, for people: logs (`KILN_LOGS=graph`), `kiln explain`, test
//! failures. One line per node:
//!
//! ```text
//! %0: f32[1, 3, 224, 224] = input "x"
//! %3: f32[64, 3, 7, 7] = const #0
//! %5: f32[1, 64, 112, 112] = conv2d(%0, %3, %4) stride=[2, 2] pad=[3, 3, 3, 3]  # conv1
//! outputs: %5
//! ```

use crate::{Graph, Op, PadMode, PoolKind, SliceAxis};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// Constants with at most this many elements print their values inline.
const INLINE_CONST_MAX: usize = 4;

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (idx, node) in self.nodes.iter().enumerate() {
            write!(f, "%{idx}: {} = ", node.ty)?;
            match &node.op {
                Op::Input { name } => {
                    let pos = self.inputs.iter().position(|i| i.index() == idx);
                    match pos {
                        Some(p) => write!(f, "input {name:?} #{p}")?,
                        None => write!(f, "input {name:?} (unlisted)")?,
                    }
                }
                Op::Constant(c) => {
                    write!(f, "const #{}", c.0)?;
                    if let Some(t) = self.consts.get(c.0 as usize)
                        && t.numel() <= INLINE_CONST_MAX
                    {
                        let vals: Vec<String> = t.to_f64_vec().iter().map(|v| v.to_string()).collect();
                        write!(f, " = [{}]", vals.join(", "))?;
                    }
                }
                op => {
                    let args: Vec<String> = node.inputs.iter().map(|i| i.to_string()).collect();
                    write!(f, "{}({})", op.name(), args.join(", "))?;
                    let attrs = op_attrs(op);
                    if !attrs.is_empty() {
                        write!(f, " {attrs}")?;
                    }
                }
            }
            if let Some(name) = &node.name {
                write!(f, "  # {name}")?;
            }
            writeln!(f)?;
        }
        let outs: Vec<String> = self.outputs.iter().map(|o| o.to_string()).collect();
        writeln!(f, "outputs: {}", outs.join(", "))
    }
}

/// The attributes of `op` in the compact form the printer uses (`axes=[1] keep_dims`,
/// `stride=[2, 2] pad=[3, 3, 3, 3]`); empty for ops without attributes. Default-valued
/// attributes of conv and pooling (dilation 1, groups 1) are left out.
pub fn op_attrs(op: &Op) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail, so the results are ignored.
    match op {
        Op::Input { .. }
        | Op::Constant(_)
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Where
        | Op::MatMul => {}
        Op::Cast(d) => {
            let _ = write!(s, "to={d}");
        }
        Op::BitCast(d) => {
            let _ = write!(s, "to={d}");
        }
        Op::Reduce { axes, keep_dims, .. } => {
            let _ = write!(s, "axes={axes:?}");
            flag(&mut s, *keep_dims, "keep_dims");
        }
        Op::ArgReduce { axis, keep_dims, select_last, .. } => {
            let _ = write!(s, "axis={axis}");
            flag(&mut s, *keep_dims, "keep_dims");
            flag(&mut s, *select_last, "select_last");
        }
        Op::Reshape(shape) | Op::Expand(shape) => {
            let _ = write!(s, "shape={shape}");
        }
        Op::Permute(perm) => {
            let _ = write!(s, "perm={perm:?}");
        }
        Op::Slice(axes) => {
            let parts: Vec<String> = axes.iter().map(slice_text).collect();
            let _ = write!(s, "[{}]", parts.join(", "));
        }
        Op::Pad { pads, mode } => {
            let _ = write!(s, "pads={pads:?} mode=");
            let _ = match mode {
                PadMode::Constant(v) => write!(s, "constant({v})"),
                PadMode::Reflect => write!(s, "reflect"),
                PadMode::Edge => write!(s, "edge"),
            };
        }
        Op::Concat { axis } | Op::Gather { axis } | Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            let _ = write!(s, "axis={axis}");
        }
        Op::Cumulative { axis, exclusive, reverse, .. } => {
            let _ = write!(s, "axis={axis}");
            flag(&mut s, *exclusive, "exclusive");
            flag(&mut s, *reverse, "reverse");
        }
        Op::TopK { axis, k, largest, sorted, output } => {
            let _ = write!(s, "axis={axis} k={k}");
            flag(&mut s, !*largest, "smallest");
            flag(&mut s, !*sorted, "unsorted");
            flag(&mut s, *output == crate::TopKOutput::Indices, "indices");
        }
        Op::GatherElements { axis } => {
            let _ = write!(s, "axis={axis}");
        }
        Op::ScatterElements { axis, reduction } => {
            let _ = write!(s, "axis={axis}");
            scatter_reduction(&mut s, *reduction);
        }
        Op::GatherNd { batch_dims } => {
            let _ = write!(s, "batch_dims={batch_dims}");
        }
        Op::ScatterNd { reduction } => scatter_reduction(&mut s, *reduction),
        Op::Conv2d(a) => {
            let _ = write!(s, "stride={:?} pad={:?}", a.stride, a.padding);
            if a.dilation != [1, 1] {
                let _ = write!(s, " dilation={:?}", a.dilation);
            }
            if a.groups != 1 {
                let _ = write!(s, " groups={}", a.groups);
            }
            flag(&mut s, a.channels_last, "channels_last");
        }
        Op::Pool2d(p) => {
            let _ = write!(s, "kernel={:?} stride={:?} pad={:?}", p.kernel, p.stride, p.padding);
            if p.dilation != [1, 1] {
                let _ = write!(s, " dilation={:?}", p.dilation);
            }
            flag(&mut s, p.ceil_mode, "ceil_mode");
            if let PoolKind::Avg { count_include_pad } = p.kind {
                flag(&mut s, count_include_pad, "count_include_pad");
            }
        }
        Op::LayerNorm { axis, eps } => {
            let _ = write!(s, "axis={axis} eps={eps}");
        }
        Op::BatchNorm { eps } => {
            let _ = write!(s, "eps={eps}");
        }
        Op::Gelu { tanh_approx } => flag(&mut s, *tanh_approx, "tanh"),
        Op::Attention { causal, scale } => {
            flag(&mut s, *causal, "causal");
            if let Some(sc) = scale {
                if !s.is_empty() {
                    s.push(' ');
                }
                let _ = write!(s, "scale={sc}");
            }
        }
        Op::Resize(a) => resize_attrs(&mut s, a),
        Op::ConvTranspose2d(a) => {
            let _ = write!(s, "stride={:?} pad={:?}", a.stride, a.padding);
            if a.output_padding != [0, 0] {
                let _ = write!(s, " output_padding={:?}", a.output_padding);
            }
            if a.dilation != [1, 1] {
                let _ = write!(s, " dilation={:?}", a.dilation);
            }
            if a.groups != 1 {
                let _ = write!(s, " groups={}", a.groups);
            }
        }
        Op::GridSample(a) => {
            let _ = write!(s, "mode={:?} padding={:?}", a.mode, a.padding);
            flag(&mut s, a.align_corners, "align_corners");
        }
        Op::EncodeLowp { to, saturate } => {
            let _ = write!(s, "to={}", to.name());
            flag(&mut s, *saturate, "saturate");
        }
        Op::DecodeLowp { from } => {
            let _ = write!(s, "from={}", from.name());
        }
    }
    s
}

/// Appends ` reduction=add` etc. (nothing for plain replacement).
fn scatter_reduction(s: &mut String, r: crate::ScatterReduction) {
    if r != crate::ScatterReduction::None {
        flag(s, true, &format!("reduction={}", format!("{r:?}").to_lowercase()));
    }
}

/// `out_shape=[..] scales=[..] mode=.. coord=..` and the mode's own settings (nearest
/// rounding, cubic `a`) and flags.
fn resize_attrs(s: &mut String, a: &crate::ResizeAttrs) {
    use crate::{ResizeCoord, ResizeMode};
    let _ = write!(s, "out_shape={:?} scales={:?} mode={:?} coord=", a.out_shape, a.scales, a.mode);
    let _ = match &a.coord {
        ResizeCoord::TfCropAndResize { roi, extrapolation } => {
            write!(s, "TfCropAndResize(roi={roi:?} extrapolation={extrapolation})")
        }
        c => write!(s, "{c:?}"),
    };
    match a.mode {
        ResizeMode::Nearest => {
            let _ = write!(s, " nearest={:?}", a.nearest);
        }
        ResizeMode::Cubic => {
            let _ = write!(s, " cubic_a={}", a.cubic_a);
        }
        ResizeMode::Linear => {}
    }
    flag(s, a.exclude_outside, "exclude_outside");
    flag(s, a.antialias, "antialias");
}

/// Appends ` name` (space-separated) when `on`.
fn flag(s: &mut String, on: bool, name: &str) {
    if on {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(name);
    }
}

/// Python-style `start:end:step`, leaving out an open end and a step of 1 (`:` is the full axis).
fn slice_text(a: &SliceAxis) -> String {
    if *a == SliceAxis::FULL {
        return ":".into();
    }
    let start = if a.start == 0 && a.step > 0 { String::new() } else { a.start.to_string() };
    let end = if a.end == i64::MAX || a.end == i64::MIN { String::new() } else { a.end.to_string() };
    if a.step == 1 { format!("{start}:{end}") } else { format!("{start}:{end}:{}", a.step) }
}

/// How many nodes of each op the graph has (by [`Op::name`]), most frequent first, ties by name.
/// Input and constant nodes count too (as `input` and `const`).
pub fn op_histogram(graph: &Graph) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for node in &graph.nodes {
        *counts.entry(node.op.name()).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = counts.into_iter().collect();
    // The BTreeMap order is by name; a stable sort by count keeps it for ties.
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v
}
