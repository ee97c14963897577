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
    /// Reinterprets each element's bits as `DType` (ONNX BitCast), 1 input; both dtypes have
    /// the same size, and the result cannot be bool (not every byte is a valid bool). A bool
    /// input reads as the bytes 0 and 1. Same shape; bit patterns (NaN payloads too) are kept.
    BitCast(DType),
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
    /// Running sum or product along `axis` (ONNX CumSum/CumProd), 1 numeric input, same shape
    /// and dtype. `out[.., i, ..] = x[.., 0, ..] ⊕ .. ⊕ x[.., i, ..]`; `exclusive` leaves out
    /// `x[.., i, ..]` itself (so `out[.., 0, ..]` is the identity, 0 or 1); `reverse` runs from
    /// the end of the axis instead (`x[.., i, ..] ⊕ .. ⊕ x[.., n-1, ..]`). Floats accumulate in
    /// f64 and round each output once; integers wrap on overflow.
    Cumulative { op: CumulativeOp, axis: usize, exclusive: bool, reverse: bool },
    /// The `k` largest (or smallest) elements along `axis` (ONNX TopK), 1 numeric input; the
    /// result has `axis` resized to `k` (`k <= dim`, else an error). `output` picks what this
    /// node yields: the values (input dtype) or their indices along `axis` (i64); an importer
    /// builds two nodes with equal attributes for both. Order: with `sorted`, largest first
    /// (smallest first when `!largest`); without it, the selected elements keep their input
    /// order (increasing index). Ties: the lower index comes first (and is selected first).
    /// NaN counts as larger than every number, and NaNs tie with each other (as PyTorch and
    /// ONNX Runtime), so NaNs are picked first by `largest` and last otherwise.
    TopK { axis: usize, k: usize, largest: bool, sorted: bool, output: TopKOutput },
    /// `out[i][j][k] = data[indices[i][j][k]][j][k]` for `axis == 0`, likewise for other axes
    /// (ONNX GatherElements, `torch.gather`), 2 inputs: data and i64/i32 indices of the same
    /// rank, each dim other than `axis` at most data's. The result has the indices' shape and
    /// data's dtype. Negative indices count from the end; out-of-range is an error at run time.
    GatherElements { axis: usize },
    /// A copy of data with `out[indices[i][j][k]][j][k] = updates[i][j][k]` for `axis == 0`,
    /// likewise for other axes (ONNX ScatterElements), 3 inputs: data, i64/i32 indices and
    /// updates (data's dtype, the indices' shape; same rank as data, each dim other than
    /// `axis` at most data's). `reduction` combines the update with the current value instead
    /// of replacing it. Updates apply in row-major order of the indices, so with duplicate
    /// indices and no reduction the last one wins. Negative indices count from the end;
    /// out-of-range is an error at run time.
    ScatterElements { axis: usize, reduction: ScatterReduction },
    /// Gathers slices by index tuples (ONNX GatherND), 2 inputs: data (rank r >= 1) and i64/i32
    /// indices (rank q >= 1) whose last dim m (`1 <= m <= r - batch_dims`) is the length of
    /// each tuple. The first `batch_dims` dims (`< min(q, r)`) of data and indices are equal
    /// and walked together. The result is `indices.shape[..q-1] ++ data.shape[batch_dims+m..]`:
    /// `out[b.., i.., s..] = data[b.., indices[b.., i.., 0], .., indices[b.., i.., m-1], s..]`.
    /// Negative indices count from the end; out-of-range is an error at run time.
    GatherNd { batch_dims: usize },
    /// A copy of data with slices replaced by index tuples (ONNX ScatterND), 3 inputs: data
    /// (rank r >= 1), i64/i32 indices (rank q >= 1, last dim k with `1 <= k <= r`) and updates
    /// of data's dtype with shape `indices.shape[..q-1] ++ data.shape[k..]`:
    /// `out[indices[i.., 0], .., indices[i.., k-1], s..] = updates[i.., s..]`, combined by
    /// `reduction`. Updates apply in row-major order of the index tuples, so with duplicate
    /// tuples and no reduction the last one wins. Negative indices count from the end;
    /// out-of-range is an error at run time.
    ScatterNd { reduction: ScatterReduction },
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
    /// ONNX Resize (opsets 10-19) and Upsample, 1 input of any rank. Output dim `i` is
    /// `out_shape[i]`; each axis whose size or scale changes is resampled on its own, axes in
    /// order 0..rank (linear/cubic are separable: N-linear / N-cubic), computed in f64 and
    /// rounded once to the input dtype. See [`ResizeAttrs`] for the coordinate transform and
    /// the taps. Nearest takes any dtype (it copies elements); linear and cubic need a float.
    Resize(ResizeAttrs),
    /// 2-D transposed convolution (ONNX ConvTranspose, PyTorch `conv_transpose2d`) in NCHW,
    /// 2 or 3 inputs of one float dtype: x `[N, C, H, W]`, w `[C, O/groups, KH, KW]`, optional
    /// bias `[O]`. Input pixel `(ih, iw)` of channel `c` (group `g = c / (C/groups)`) adds
    /// `x * w[c, o, kh, kw]` to output `[g*O/groups + o, ih*sh + kh*dh - pad_t, iw*sw + kw*dw - pad_l]`
    /// when that lies inside the output. Output size per axis:
    /// `(H-1)*s - pad_begin - pad_end + d*(k-1) + output_padding + 1` (must be >= 0; H, W >= 1).
    ConvTranspose2d(ConvTranspose2dAttrs),
    /// ONNX GridSample (opsets 16/20/22, 2-D; PyTorch `grid_sample`), 2 float inputs: x
    /// `[N, C, H, W]` and grid `[N, Hout, Wout, 2]` (any float dtype) of normalized `(x, y)`
    /// positions in `[-1, 1]` (x along W). Output `[N, C, Hout, Wout]` in x's dtype. See
    /// [`GridSampleAttrs`].
    GridSample(GridSampleAttrs),
    /// Encodes numbers as an ONNX low-precision type `to`, 1 numeric (or bool) input; the result
    /// has its shape and dtype `to.pattern_dtype()`: one element per byte (packing is a file
    /// matter). Floats: the code of the value rounded to nearest, ties to even (from f64, or
    /// f32 for E8M0); NaN → the type's NaN (F4E2M1 has none: 0). Overflow (a rounded magnitude
    /// above the type's max, or ±Inf): with `saturate` the signed max; without it Inf for
    /// F8E5M2 and NaN for the other float8 types (ONNX Cast tables); F4E2M1 always saturates.
    /// -0 keeps its sign except in the FNUZ types (no -0). F8E8M0 (ONNX `round_mode=up`) is
    /// the smallest power of two >= |x| (of x as f32, codes 2^-127..2^127); 0 gives the
    /// smallest code, NaN gives NaN, Inf gives the max with `saturate` else NaN, and
    /// rounding past the max gives the max with `saturate` else NaN. Integers (I4/U4/I2/U2):
    /// truncation toward zero, then the low bits in two's complement (wrapping as ONNX's
    /// reference casts do; NaN/±Inf → 0); I4/I2 results are sign-extended into I8.
    EncodeLowp { to: LowpType, saturate: bool },
    /// Decodes bit patterns of the ONNX low-precision type `from` (as [`Op::EncodeLowp`] makes
    /// them: U8, or I8 for I4/I2) into their f32 values, 1 input, same shape.
    DecodeLowp { from: LowpType },
}

/// An ONNX element type narrower than any kiln dtype, held in kiln as one byte per element
/// (see [`Op::EncodeLowp`]): float8 (E4M3FN max 448, E4M3FNUZ max 240, E5M2 max 57344 with
/// Inf, E5M2FNUZ max 57344, E8M0 powers of two 2^-127..2^127), float4 E2M1 (max 6), and
/// 4-bit/2-bit integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LowpType {
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F8E8M0,
    F4E2M1,
    I4,
    U4,
    I2,
    U2,
}

impl LowpType {
    /// Every low-precision type (for tests and lookups).
    pub const ALL: [LowpType; 10] = [
        LowpType::F8E4M3FN,
        LowpType::F8E4M3FNUZ,
        LowpType::F8E5M2,
        LowpType::F8E5M2FNUZ,
        LowpType::F8E8M0,
        LowpType::F4E2M1,
        LowpType::I4,
        LowpType::U4,
        LowpType::I2,
        LowpType::U2,
    ];

    /// The lowercase name (`f8e4m3fn`, `i4`, ...).
    pub fn name(self) -> &'static str {
        match self {
            LowpType::F8E4M3FN => "f8e4m3fn",
            LowpType::F8E4M3FNUZ => "f8e4m3fnuz",
            LowpType::F8E5M2 => "f8e5m2",
            LowpType::F8E5M2FNUZ => "f8e5m2fnuz",
            LowpType::F8E8M0 => "f8e8m0",
            LowpType::F4E2M1 => "f4e2m1",
            LowpType::I4 => "i4",
            LowpType::U4 => "u4",
            LowpType::I2 => "i2",
            LowpType::U2 => "u2",
        }
    }

    /// Bits per element in files (8, 4 or 2).
    pub fn bits(self) -> u32 {
        match self {
            LowpType::F4E2M1 | LowpType::I4 | LowpType::U4 => 4,
            LowpType::I2 | LowpType::U2 => 2,
            _ => 8,
        }
    }

    /// An integer type (its patterns are its values).
    pub fn is_int(self) -> bool {
        matches!(self, LowpType::I4 | LowpType::U4 | LowpType::I2 | LowpType::U2)
    }

    /// The kiln dtype holding one element: I8 (the value) for I4/I2, else U8.
    pub fn pattern_dtype(self) -> DType {
        match self {
            LowpType::I4 | LowpType::I2 => DType::I8,
            _ => DType::U8,
        }
    }
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
    /// `1 - erf(x)`, computed without the cancellation of `1 - erf` where erf is near 1.
    Erfc,
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
    /// Floor modulo: `a - floor(a / b) * b`, with the sign of the divisor (Python `%`, ONNX
    /// `Mod` with fmod=0, also for floats). Integer modulo by zero is an error; float modulo by
    /// zero is NaN. Numeric types only.
    Mod,
    /// Logical shift left `a << b` (integers only): bits shifted out are lost; shift amounts
    /// `>= bits` give 0; a negative shift amount is an error.
    Shl,
    /// Logical shift right `a >> b` (integers only; zeros shift in, also for signed types, as
    /// ONNX BitShift on the bit pattern): shift amounts `>= bits` give 0; a negative shift amount
    /// is an error.
    Shr,
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

/// The combining op of [`Op::Cumulative`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CumulativeOp {
    /// Running sum (ONNX CumSum); the exclusive identity is 0.
    Sum,
    /// Running product (ONNX CumProd); the exclusive identity is 1.
    Prod,
}

/// Which result of a top-k selection an [`Op::TopK`] node yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TopKOutput {
    /// The selected values (input dtype).
    Values,
    /// Their positions along the axis (i64).
    Indices,
}

/// How [`Op::ScatterElements`] and [`Op::ScatterNd`] combine an update `u` with the value `v`
/// already at its position (data's value, or the result of earlier updates to that position).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScatterReduction {
    /// `u` replaces `v` (the last of duplicate updates wins).
    None,
    /// `v + u` (integers wrap; floats computed in f64 and rounded once per update).
    Add,
    /// `v * u` (as `Add`).
    Mul,
    /// `max(v, u)`; NaN wins (as [`BinaryOp::Max`]).
    Max,
    /// `min(v, u)`; NaN wins (as [`BinaryOp::Min`]).
    Min,
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
    /// Channels last (NHWC): x is `[N, H, W, C]`, w `[O, KH, KW, C/groups]` and the result
    /// `[N, OH, OW, O]`, the layout cuDNN's tensor-core kernels read and write without
    /// transposing. Otherwise (the ONNX / PyTorch default) x `[N, C, H, W]`, w
    /// `[O, C/groups, KH, KW]`, result `[N, O, OH, OW]`.
    pub channels_last: bool,
}

impl Conv2dAttrs {
    /// Where each NCHW axis sits in this conv's x, w and result: `[0, 1, 2, 3]`, or
    /// `[0, 3, 1, 2]` channels last.
    pub fn nchw_axes(&self) -> [usize; 4] {
        if self.channels_last { [0, 3, 1, 2] } else { [0, 1, 2, 3] }
    }
}

/// Attributes of [`Op::Resize`].
///
/// Per resized axis, with input length `in`, output length `out` and `scale`, output index
/// `y` maps to the input coordinate `x` given by [`ResizeCoord`]. Then, with
/// `x0 = ceil(x) - 1` and `r = x - x0` in `(0, 1]` (an integer `x` has `r = 1`):
/// - nearest: index `x` when `r == 1`, else `x0` or `x0 + 1` by [`ResizeNearest`];
/// - linear: taps `x0, x0+1` with weights `1-r, r`;
/// - cubic: taps `x0-1 ..= x0+2` with Keys weights of `cubic_a` at distances `1+r, r, 1-r, 2-r`;
/// - antialias (linear/cubic only, when `scale < 1`): the kernel is stretched by `1/scale`:
///   taps `x0+1-n/2 .. x0+n/2` (`n = 2*floor(1/scale)+2` linear, `2*floor(2/scale)+2` cubic,
///   from ONNX's reference) weighted by `kernel((tap - x) * scale)`, normalized to sum 1.
///
/// Taps outside `0..in` read the edge element, or with `exclude_outside` get weight 0 and
/// the rest is renormalized (nearest ignores `exclude_outside`, as onnxruntime). An axis whose
/// scale is 1 (within 1e-9), whose length does not change and (for crop-and-resize) whose roi
/// is (0, 1) is left as it is. Taps of weight 0 are skipped, so a NaN/inf beside an exactly
/// hit input does not leak into the output (ONNX's reference multiplies it by 0).
#[derive(Clone, Debug, PartialEq)]
pub struct ResizeAttrs {
    /// The output shape (one entry per input axis), fixed when the node is built.
    pub out_shape: Vec<usize>,
    /// The scale of each axis (output length over input length as ONNX defines it: the given
    /// scale, or `sizes / input` when sizes were given), used by the coordinate transform.
    pub scales: Vec<f64>,
    pub mode: ResizeMode,
    pub coord: ResizeCoord,
    /// How nearest mode rounds (ignored by linear and cubic).
    pub nearest: ResizeNearest,
    /// The cubic kernel's `a` (ONNX `cubic_coeff_a`, default -0.75).
    pub cubic_a: f64,
    /// Taps outside the input get weight 0 (the others are renormalized) instead of the edge value.
    pub exclude_outside: bool,
    /// Linear and cubic widen their kernel when downscaling (ONNX `antialias`); no effect on nearest.
    pub antialias: bool,
}

/// The interpolation of [`Op::Resize`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResizeMode {
    Nearest,
    Linear,
    Cubic,
}

/// How [`Op::Resize`] maps output index `y` to input coordinate `x` along one axis (ONNX
/// `coordinate_transformation_mode`); `in`/`out` are the integer lengths, `scale` the axis scale.
#[derive(Clone, Debug, PartialEq)]
pub enum ResizeCoord {
    /// `x = (y + 0.5) / scale - 0.5`.
    HalfPixel,
    /// `x = in/2 * (1 - out / (scale*in)) + (y + 0.5) / scale - 0.5`.
    HalfPixelSymmetric,
    /// `x = (y + 0.5) / scale - 0.5` when `out > 1`, else `0` (the ONNX spec and onnxruntime;
    /// ONNX's Python reference uses -0.5, which differs only for cubic).
    PytorchHalfPixel,
    /// `x = y * (in - 1) / (out - 1)` (`0` when `out == 1`), with the integer `out` as the spec
    /// and onnxruntime (ONNX's Python reference uses `scale * in`, which differs when that is
    /// not a whole number).
    AlignCorners,
    /// `x = y / scale`.
    Asymmetric,
    /// `x = start*(in-1) + y * (end-start) * (in-1) / (out-1)` (`out == 1`: `(start+end)/2 * (in-1)`),
    /// with `roi[axis] = (start, end)` as fractions of the input; an output whose `x` falls
    /// outside `[0, in-1]` on any resized axis is `extrapolation` (converted to the dtype).
    TfCropAndResize { roi: Vec<(f64, f64)>, extrapolation: f64 },
}

/// How nearest-mode [`Op::Resize`] rounds a non-integer coordinate (ONNX `nearest_mode`);
/// the index is then clamped into the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResizeNearest {
    /// Halves round down (ONNX default).
    RoundPreferFloor,
    /// Halves round up.
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// Attributes of [`Op::ConvTranspose2d`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvTranspose2dAttrs {
    /// `[sh, sw]`.
    pub stride: [usize; 2],
    /// `[top, left, bottom, right]`: cropped off the full transposed-conv output.
    pub padding: [usize; 4],
    /// `[h, w]`: extra rows/columns added at the bottom/right of the output.
    pub output_padding: [usize; 2],
    /// `[dh, dw]`.
    pub dilation: [usize; 2],
    pub groups: usize,
}

/// Interpolation of [`Op::GridSample`] (ONNX `mode`: linear/bilinear, nearest, cubic/bicubic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GridSampleMode {
    /// Taps `floor(x), floor(x)+1` per axis, weights `1-t, t`.
    Bilinear,
    /// The pixel at `x` rounded half to even.
    Nearest,
    /// Taps `floor(x)-1 ..= floor(x)+2` per axis, Keys weights with `a = -0.75`.
    Bicubic,
}

/// What [`Op::GridSample`] reads outside the input (ONNX `padding_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GridSamplePadding {
    /// Taps outside read 0.
    Zeros,
    /// Coordinates outside the bounds are clamped to `[0, len-1]`, taps clamped likewise.
    Border,
    /// Coordinates outside the bounds are mirrored at them (repeatedly), taps likewise.
    Reflection,
}

/// Attributes of [`Op::GridSample`]. A normalized coordinate `g` maps to the pixel coordinate
/// `(g+1)/2 * (len-1)` with `align_corners` (bounds `[0, len-1]`), else `((g+1)*len - 1)/2`
/// (bounds `[-0.5, len-0.5]`). Nearest rounds first; then Border/Reflection move a coordinate
/// outside the bounds inside; then the taps are read with the padding rule (as ONNX's reference
/// and onnxruntime do, also for bicubic). With align_corners on a size-1 axis reflection
/// gives 0. A NaN coordinate gives NaN; an infinite one reads zeros (Zeros), the edge (Border)
/// or NaN (Reflection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GridSampleAttrs {
    pub mode: GridSampleMode,
    pub padding: GridSamplePadding,
    pub align_corners: bool,
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
            Op::BitCast(_) => "bitcast".into(),
            Op::Reduce { op, .. } => format!("reduce_{op:?}").to_lowercase(),
            Op::ArgReduce { op, .. } => format!("{op:?}").to_lowercase(),
            Op::Reshape(_) => "reshape".into(),
            Op::Permute(_) => "permute".into(),
            Op::Expand(_) => "expand".into(),
            Op::Slice(_) => "slice".into(),
            Op::Pad { .. } => "pad".into(),
            Op::Concat { .. } => "concat".into(),
            Op::Gather { .. } => "gather".into(),
            Op::Cumulative { op: CumulativeOp::Sum, .. } => "cumsum".into(),
            Op::Cumulative { op: CumulativeOp::Prod, .. } => "cumprod".into(),
            Op::TopK { .. } => "topk".into(),
            Op::GatherElements { .. } => "gather_elements".into(),
            Op::ScatterElements { .. } => "scatter_elements".into(),
            Op::GatherNd { .. } => "gather_nd".into(),
            Op::ScatterNd { .. } => "scatter_nd".into(),
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
            Op::Resize(_) => "resize".into(),
            Op::ConvTranspose2d(_) => "conv_transpose2d".into(),
            Op::GridSample(_) => "grid_sample".into(),
            Op::EncodeLowp { .. } => "encode_lowp".into(),
            Op::DecodeLowp { .. } => "decode_lowp".into(),
        }
    }

    /// True for ops that only change the layout of their single input (views).
    pub fn is_view(&self) -> bool {
        matches!(self, Op::Reshape(_) | Op::Permute(_) | Op::Expand(_) | Op::Slice(_))
    }
}
