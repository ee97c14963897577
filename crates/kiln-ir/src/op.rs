//! The operation set of the graph IR. Each node applies one [`Op`] to its inputs and yields
//! one tensor. Semantics follow NumPy/ONNX/PyTorch where they agree; where they differ, the
//! doc comment says which one kiln follows. Axes stored in ops are always non-negative:
//! frontends normalize `-1` before building the op.

use crate::{DType, Shape};

/// Index of a constant in [`crate::Graph::consts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConstId(pub u32);

/// One operation. Input arity and meaning are given per variant.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input (no inputs). Its type is the node's type; `name` is what callers bind.
    Input { name: String },
    /// A constant (weights, literals): `graph.consts[id]` (no inputs).
    Constant(ConstId),
    /// Elementwise `f(x)`, 1 input. Output dtype = input dtype, except `IsNan`/`IsInf` → bool.
    Unary(UnaryOp),
    /// Elementwise `f(a, b)`, 2 inputs of the same dtype, NumPy broadcasting. Comparisons
    /// and logic ops yield bool; the others keep the input dtype.
    Binary(BinaryOp),
    /// `cond ? x : y`, 3 inputs (bool cond, x and y of one dtype), broadcasting all three.
    Where,
    /// Converts to `DType`, 1 input. Float→int truncates toward zero and saturates (NaN → 0);
    /// anything→bool is `x != 0`; bool→number is 0/1.
    Cast(DType),
    /// Reduces `axes` (sorted, unique, non-negative), 1 input. `keep_dims` keeps them as size 1.
    /// An empty axis list reduces nothing (identity). Empty reductions give the op's identity:
    /// sum 0, prod 1, max the lowest value (-inf for floats), min the highest, mean NaN.
    Reduce { op: ReduceOp, axes: Vec<usize>, keep_dims: bool },
    /// Index (i64) of the max/min along `axis`, 1 input. Ties: the first index, or the last
    /// when `select_last`. NaN counts as larger than any number (as PyTorch).
    ArgReduce { op: ArgReduceOp, axis: usize, keep_dims: bool, select_last: bool },
    /// Same elements in row-major order with a new shape of equal element count, 1 input.
    Reshape(Shape),
    /// Reorders axes: output axis `i` is input axis `perm[i]`, 1 input.
    Permute(Vec<usize>),
    /// NumPy broadcast of the input to `Shape` (size-1 dims stretch, new leading dims), 1 input.
    Expand(Shape),
    /// Strided slice, 1 input. One [`SliceAxis`] per input axis (full range where untouched).
    Slice(Vec<SliceAxis>),
    /// Pads every axis by `(before, after)` elements, 1 input.
    Pad { pads: Vec<(usize, usize)>, mode: PadMode },
    /// Joins inputs (1 or more, same dtype, same dims but `axis`) along `axis`.
    Concat { axis: usize },
    /// `out[i.., j.., k..] = data[i.., indices[j..], k..]` along `axis` (ONNX Gather), 2 inputs:
    /// data and i64/i32 indices. Negative indices count from the end; out-of-range is an error
    /// at run time.
    Gather { axis: usize },
    /// NumPy matmul, 2 inputs of one float or integer dtype: 1-D operands are promoted
    /// (and the added dim removed), leading batch dims broadcast.
    MatMul,
    /// 2-D convolution (cross-correlation) in NCHW, 2 or 3 inputs: x `[N, C, H, W]`,
    /// w `[O, C/groups, KH, KW]`, optional bias `[O]`.
    Conv2d(Conv2dAttrs),
    /// 2-D pooling over NCHW, 1 input.
    Pool2d(Pool2dAttrs),
    /// `exp(x - max) / sum(exp(x - max))` along `axis`, 1 float input.
    Softmax { axis: usize },
    /// `x - max - log(sum(exp(x - max)))` along `axis`, 1 float input.
    LogSoftmax { axis: usize },
    /// Normalizes over axes `axis..rank` (ONNX LayerNormalization): 1 to 3 inputs x,
    /// scale and bias (broadcast against the normalized dims).
    /// `(x - mean) / sqrt(var + eps) * scale + bias`, var is the biased variance.
    LayerNorm { axis: usize, eps: f64 },
    /// Inference batch norm over channel axis 1: 5 inputs x, scale, bias, mean, var (each `[C]`).
    /// `(x - mean) / sqrt(var + eps) * scale + bias`.
    BatchNorm { eps: f64 },
    /// GELU, 1 float input: exact `x * Φ(x)` (erf) or the tanh approximation.
    Gelu { tanh_approx: bool },
    /// Scaled dot-product attention, 3 or 4 inputs: q `[.., Lq, D]`, k `[.., Lk, D]`,
    /// v `[.., Lk, Dv]`, optional additive mask broadcastable to `[.., Lq, Lk]`.
    /// `softmax(q kᵀ * scale + mask [+ causal mask]) v`; `scale` defaults to `1/sqrt(D)`.
    /// With `causal`, query `i` sees keys `j <= i + (Lk - Lq)`.
    Attention { causal: bool, scale: Option<f64> },
}

/// Elementwise functions of one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    /// -1, 0 or 1 (NaN stays NaN).
    Sign,
    Exp,
    Log,
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// `1 / x`.
    Reciprocal,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Tanh,
    Asinh,
    Acosh,
    Atanh,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `max(x, 0)` (NaN stays NaN).
    Relu,
    Erf,
    Floor,
    Ceil,
    /// Round half to even (as ONNX Round and `torch.round`).
    Round,
    /// Logical not (bool) or bitwise not (integers).
    Not,
    /// True where NaN (floats; false for integers).
    IsNan,
    /// True where ±inf (floats; false for integers).
    IsInf,
}

/// Elementwise functions of two arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// True division for floats; integer division truncates toward zero (C, ONNX); integer
    /// division by zero is an error.
    Div,
    /// Remainder with the sign of the dividend (C `fmod`, ONNX `Mod` with fmod=1).
    Rem,
    Pow,
    /// Elementwise max; NaN wins (as `torch.maximum`).
    Max,
    /// Elementwise min; NaN wins (as `torch.minimum`).
    Min,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Logical and (bool) or bitwise and (integers).
    And,
    /// Logical or (bool) or bitwise or (integers).
    Or,
    /// Logical xor (bool) or bitwise xor (integers).
    Xor,
}

impl BinaryOp {
    /// True for the ops that yield bool (comparisons).
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

/// Reductions over axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    /// Floats: the sum over the count (accumulated in at least f32). Integers: truncated toward
    /// zero; an empty integer mean is 0.
    Mean,
    Max,
    Min,
    Prod,
}

/// Index-of-extreme reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgReduceOp {
    ArgMax,
    ArgMin,
}

/// The slice of one axis: Python `start:end:step` semantics (negative start/end count from the
/// end and are clamped; `step` is non-zero and may be negative).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SliceAxis {
    pub start: i64,
    pub end: i64,
    pub step: i64,
}

impl SliceAxis {
    /// The whole axis.
    pub const FULL: SliceAxis = SliceAxis { start: 0, end: i64::MAX, step: 1 };

    /// Clamps to a dim of size `len` as Python does: returns `(start, end, count)` in
    /// absolute indices, where elements are `start, start+step, ...` (`count` of them).
    pub fn resolve(&self, len: usize) -> (i64, i64, usize) {
        let n = len as i64;
        let norm = |v: i64| if v < 0 { v.saturating_add(n) } else { v };
        let (start, end) = if self.step > 0 {
            (norm(self.start).clamp(0, n), norm(self.end).clamp(0, n))
        } else {
            (norm(self.start).clamp(-1, n - 1), norm(self.end).clamp(-1, n - 1))
        };
        // Unsigned arithmetic, so steps near the i64 extremes (seen in ONNX files) cannot overflow.
        let span = if self.step > 0 { end - start } else { start - end };
        let count = if span <= 0 { 0 } else { (span as u64 - 1) / self.step.unsigned_abs() + 1 };
        (start, end, count as usize)
    }
}

/// How `Pad` fills the new elements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode {
    /// A constant value (converted to the tensor dtype).
    Constant(f64),
    /// Mirror without repeating the edge (`[1,2,3]` → `3,2,[1,2,3],2,1`); pads must be < dim.
    Reflect,
    /// Repeat the edge element.
    Edge,
}

/// Attributes of [`Op::Conv2d`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv2dAttrs {
    /// `[sh, sw]`.
    pub stride: [usize; 2],
    /// `[top, left, bottom, right]` zero padding.
    pub padding: [usize; 4],
    /// `[dh, dw]`.
    pub dilation: [usize; 2],
    pub groups: usize,
}

/// Which pooling [`Op::Pool2d`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Max over the window; padding counts as -inf.
    Max,
    /// Average over the window; `count_include_pad` says whether padded zeros count in
    /// the divisor (PyTorch default true, ONNX default false).
    Avg { count_include_pad: bool },
}

/// Attributes of [`Op::Pool2d`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pool2dAttrs {
    pub kind: PoolKind,
    /// `[kh, kw]`.
    pub kernel: [usize; 2],
    /// `[sh, sw]`.
    pub stride: [usize; 2],
    /// `[top, left, bottom, right]`.
    pub padding: [usize; 4],
    /// `[dh, dw]`.
    pub dilation: [usize; 2],
    /// Output size rounds up (a last window may start inside the input or left padding
    /// but not in the right padding), as PyTorch's `ceil_mode`.
    pub ceil_mode: bool,
}

impl Op {
    /// A short name for printing and errors (`add`, `matmul`, `conv2d`, ...).
    pub fn name(&self) -> String {
        match self {
            Op::Input { .. } => "input".into(),
            Op::Constant(_) => "const".into(),
            Op::Unary(u) => format!("{u:?}").to_lowercase(),
            Op::Binary(b) => format!("{b:?}").to_lowercase(),
            Op::Where => "where".into(),
            Op::Cast(_) => "cast".into(),
            Op::Reduce { op, .. } => format!("reduce_{op:?}").to_lowercase(),
            Op::ArgReduce { op, .. } => format!("{op:?}").to_lowercase(),
            Op::Reshape(_) => "reshape".into(),
            Op::Permute(_) => "permute".into(),
            Op::Expand(_) => "expand".into(),
            Op::Slice(_) => "slice".into(),
            Op::Pad { .. } => "pad".into(),
            Op::Concat { .. } => "concat".into(),
            Op::Gather { .. } => "gather".into(),
            Op::MatMul => "matmul".into(),
            Op::Conv2d(_) => "conv2d".into(),
            Op::Pool2d(p) => match p.kind {
                PoolKind::Max => "max_pool2d".into(),
                PoolKind::Avg { .. } => "avg_pool2d".into(),
            },
            Op::Softmax { .. } => "softmax".into(),
            Op::LogSoftmax { .. } => "log_softmax".into(),
            Op::LayerNorm { .. } => "layer_norm".into(),
            Op::BatchNorm { .. } => "batch_norm".into(),
            Op::Gelu { .. } => "gelu".into(),
            Op::Attention { .. } => "attention".into(),
        }
    }

    /// True for ops that only change the layout of their single input (views).
    pub fn is_view(&self) -> bool {
        matches!(self, Op::Reshape(_) | Op::Permute(_) | Op::Expand(_) | Op::Slice(_))
    }
}
