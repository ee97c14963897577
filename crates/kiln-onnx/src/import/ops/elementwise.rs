//! Elementwise ops: arithmetic, comparisons, logic and bitwise ops, math functions,
//! activations, casts, Clip, Where, Dropout (inference) and Identity.
//!
//! Activations without an IR op are decomposed into IR ops in the input's dtype, following
//! the formulas of ONNX's reference implementation. Ops older than opset 7 with the
//! `broadcast`/`axis` attributes align the second operand at `axis` before NumPy broadcasting.

use crate::import::{Convert, Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use super::lowp;
use crate::tensor::onnx_type_name;
use kiln_ir::{BinaryOp, DType, Error, HostTensor, NodeId, Op, Result, Shape, UnaryOp};

pub(super) fn lookup(op: &str) -> Option<Convert> {
    use BinaryOp as B;
    use UnaryOp as U;
    Some(match op {
        "Add" => |c, n| arith(c, n, B::Add),
        "Sub" => |c, n| arith(c, n, B::Sub),
        "Mul" => |c, n| arith(c, n, B::Mul),
        "Div" => |c, n| arith(c, n, B::Div),
        "Pow" => pow,
        "Mod" => modulo,
        "Equal" => |c, n| compare(c, n, B::Eq),
        "Greater" => |c, n| compare(c, n, B::Gt),
        "GreaterOrEqual" => |c, n| compare(c, n, B::Ge),
        "Less" => |c, n| compare(c, n, B::Lt),
        "LessOrEqual" => |c, n| compare(c, n, B::Le),
        "And" => |c, n| logic(c, n, B::And),
        "Or" => |c, n| logic(c, n, B::Or),
        "Xor" => |c, n| logic(c, n, B::Xor),
        "Not" => not,
        "BitwiseAnd" => |c, n| bitwise(c, n, B::And),
        "BitwiseOr" => |c, n| bitwise(c, n, B::Or),
        "BitwiseXor" => |c, n| bitwise(c, n, B::Xor),
        "BitwiseNot" => bitwise_not,
        "BitShift" => bit_shift,
        "Max" => |c, n| variadic(c, n, B::Max),
        "Min" => |c, n| variadic(c, n, B::Min),
        "Sum" => |c, n| variadic(c, n, B::Add),
        "Mean" => mean,
        "Abs" => |c, n| unary(c, n, U::Abs),
        "Neg" => |c, n| unary(c, n, U::Neg),
        "Sign" => |c, n| unary(c, n, U::Sign),
        "Relu" => |c, n| unary(c, n, U::Relu),
        "Exp" => |c, n| unary(c, n, U::Exp),
        "Log" => |c, n| unary(c, n, U::Log),
        "Sqrt" => |c, n| unary(c, n, U::Sqrt),
        "Reciprocal" => |c, n| unary(c, n, U::Reciprocal),
        "Sin" => |c, n| unary(c, n, U::Sin),
        "Cos" => |c, n| unary(c, n, U::Cos),
        "Tan" => |c, n| unary(c, n, U::Tan),
        "Asin" => |c, n| unary(c, n, U::Asin),
        "Acos" => |c, n| unary(c, n, U::Acos),
        "Atan" => |c, n| unary(c, n, U::Atan),
        "Sinh" => |c, n| unary(c, n, U::Sinh),
        "Cosh" => |c, n| unary(c, n, U::Cosh),
        "Tanh" => |c, n| unary(c, n, U::Tanh),
        "Asinh" => |c, n| unary(c, n, U::Asinh),
        "Acosh" => |c, n| unary(c, n, U::Acosh),
        "Atanh" => |c, n| unary(c, n, U::Atanh),
        "Sigmoid" => |c, n| unary(c, n, U::Sigmoid),
        "Erf" => |c, n| unary(c, n, U::Erf),
        "Floor" => |c, n| unary(c, n, U::Floor),
        "Ceil" => |c, n| unary(c, n, U::Ceil),
        "Round" => |c, n| unary(c, n, U::Round),
        "IsNaN" => |c, n| unary(c, n, U::IsNan),
        "IsInf" => is_inf,
        "Elu" => elu,
        "Celu" => celu,
        "Selu" => selu,
        "LeakyRelu" => leaky_relu,
        "PRelu" => prelu,
        "HardSigmoid" => hard_sigmoid,
        "HardSwish" => hard_swish,
        "ThresholdedRelu" => thresholded_relu,
        "Softplus" => softplus,
        "Softsign" => softsign,
        "Mish" => mish,
        "Swish" => swish,
        "Shrink" => shrink,
        "Gelu" => gelu,
        "Clip" => clip,
        "Where" => where_,
        "Cast" => cast,
        "CastLike" => cast_like,
        "Dropout" => dropout,
        "Identity" => identity,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------------
// Small builders.

fn un(ctx: &mut Ctx, op: UnaryOp, x: NodeId) -> Result<NodeId> {
    ctx.add(Op::Unary(op), &[x])
}

fn bin(ctx: &mut Ctx, op: BinaryOp, a: NodeId, b: NodeId) -> Result<NodeId> {
    ctx.add(Op::Binary(op), &[a, b])
}

fn select(ctx: &mut Ctx, cond: NodeId, a: NodeId, b: NodeId) -> Result<NodeId> {
    ctx.add(Op::Where, &[cond, a, b])
}

/// A scalar constant of `like`'s dtype.
fn lit(ctx: &mut Ctx, like: NodeId, v: f64) -> Result<NodeId> {
    let d = ctx.dtype(like);
    ctx.scalar(d, v)
}

/// `known` plus `consumed_inputs`, a memory-reuse hint of opset-1 ops with no effect on the result.
fn check_attrs(ctx: &Ctx, node: &NodeProto, known: &[&str]) -> Result<()> {
    if ctx.opset < 6 {
        let mut k = known.to_vec();
        k.push("consumed_inputs");
        attrs::check_known(node, &k)
    } else {
        attrs::check_known(node, known)
    }
}

/// Errors unless `x` has a float dtype (ONNX activations are defined for floats only).
fn need_float(ctx: &Ctx, node: &NodeProto, x: NodeId) -> Result<()> {
    let d = ctx.dtype(x);
    if d.is_float() {
        return Ok(());
    }
    Err(Error::DType(format!(
        "{} needs a float input (f32, f16, bf16, f64), got {d} {}",
        node.op_type(),
        ctx.ty(x).shape
    )))
}

fn need(ctx: &Ctx, node: &NodeProto, x: NodeId, ok: bool, what: &str) -> Result<()> {
    if ok {
        return Ok(());
    }
    Err(Error::DType(format!(
        "{} needs {what} inputs, got {} {}",
        node.op_type(),
        ctx.dtype(x),
        ctx.ty(x).shape
    )))
}

// ---------------------------------------------------------------------------------------------
// Binary ops.

/// The two operands of a binary node. Before opset 7, `broadcast=1` aligns b's dims with a's
/// starting at `axis` (default: the trailing dims), and without it the shapes must be equal.
fn operands(ctx: &mut Ctx, node: &NodeProto) -> Result<(NodeId, NodeId)> {
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    if ctx.opset >= 7 {
        attrs::check_known(node, &[])?;
        return Ok((a, b));
    }
    check_attrs(ctx, node, &["broadcast", "axis"])?;
    let op = node.op_type();
    if attrs::int(node, "broadcast", 0)? == 0 {
        if attrs::has(node, "axis") {
            return Err(Error::Value(format!(
                "{op} (opset {}): 'axis' is set without broadcast=1",
                ctx.opset
            )));
        }
        if ctx.ty(a).shape != ctx.ty(b).shape {
            return Err(Error::Shape(format!(
                "{op} (opset {}) without broadcast=1 needs equal shapes, got {} and {}",
                ctx.opset,
                ctx.ty(a).shape,
                ctx.ty(b).shape
            )));
        }
        return Ok((a, b));
    }
    let ad = ctx.dims(a);
    let bd = ctx.fixed_shape(b, op)?;
    let (ra, rb) = (ad.len(), bd.len());
    let axis = match attrs::opt_int(node, "axis")? {
        Some(ax) => {
            let ax = if ax < 0 { ax + ra as i64 } else { ax };
            usize::try_from(ax).ok().filter(|&ax| ax + rb <= ra)
        }
        None => ra.checked_sub(rb),
    };
    let Some(axis) = axis else {
        return Err(Error::Shape(format!(
            "{op} (opset {}): cannot align b {bd:?} inside a {} (axis {:?})",
            ctx.opset,
            ctx.ty(a).shape,
            attrs::opt_int(node, "axis")?
        )));
    };
    for (i, &n) in bd.iter().enumerate() {
        if n != 1 && ad[axis + i].fixed().is_some_and(|m| m != n) {
            return Err(Error::Shape(format!(
                "{op} (opset {}): b {bd:?} does not match a {} at axis {axis}",
                ctx.opset,
                ctx.ty(a).shape
            )));
        }
    }
    let mut dims = vec![1usize; axis];
    dims.extend(&bd);
    dims.resize(ra, 1);
    let b = ctx.add(Op::Reshape(Shape::fixed(&dims)), &[b])?;
    Ok((a, b))
}

fn arith(ctx: &mut Ctx, node: &NodeProto, op: BinaryOp) -> Result<Vec<Val>> {
    let (a, b) = operands(ctx, node)?;
    need(ctx, node, a, ctx.dtype(a) != DType::Bool, "numeric")?;
    one(bin(ctx, op, a, b)?)
}

fn compare(ctx: &mut Ctx, node: &NodeProto, op: BinaryOp) -> Result<Vec<Val>> {
    let (a, b) = operands(ctx, node)?;
    one(bin(ctx, op, a, b)?)
}

/// And/Or/Xor: bool only (the bitwise ops on integers are BitwiseAnd/Or/Xor).
fn logic(ctx: &mut Ctx, node: &NodeProto, op: BinaryOp) -> Result<Vec<Val>> {
    let (a, b) = operands(ctx, node)?;
    need(ctx, node, a, ctx.dtype(a) == DType::Bool, "bool")?;
    need(ctx, node, b, ctx.dtype(b) == DType::Bool, "bool")?;
    one(bin(ctx, op, a, b)?)
}

fn bitwise(ctx: &mut Ctx, node: &NodeProto, op: BinaryOp) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    need(ctx, node, a, ctx.dtype(a).is_int(), "integer")?;
    one(bin(ctx, op, a, b)?)
}

fn not(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let x = ctx.input(node, 0)?;
    need(ctx, node, x, ctx.dtype(x) == DType::Bool, "bool")?;
    one(un(ctx, UnaryOp::Not, x)?)
}

fn bitwise_not(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let x = ctx.input(node, 0)?;
    need(ctx, node, x, ctx.dtype(x).is_int(), "integer")?;
    one(un(ctx, UnaryOp::Not, x)?)
}

/// ONNX BitShift: a shift amount that is negative or at least the bit width gives 0 (or -1
/// for a right shift of a negative value); right shifts of signed types are arithmetic.
fn bit_shift(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["direction"])?;
    let x = ctx.input(node, 0)?;
    let s = ctx.input(node, 1)?;
    let d = ctx.dtype(x);
    need(ctx, node, x, d.is_int(), "integer")?;
    let right = match attrs::string(node, "direction")?.as_deref() {
        Some("LEFT") => false,
        Some("RIGHT") => true,
        other => {
            return Err(Error::Value(format!(
                "BitShift: 'direction' must be LEFT or RIGHT, got {other:?}"
            )));
        }
    };
    // IR shifts refuse negative amounts; any amount >= the width means the same as a negative one.
    let s = if ctx.dtype(s).is_signed() {
        let zero = lit(ctx, s, 0.0)?;
        let neg = bin(ctx, BinaryOp::Lt, s, zero)?;
        let width = lit(ctx, s, (d.size_of() * 8) as f64)?;
        select(ctx, neg, width, s)?
    } else {
        s
    };
    if !right {
        return one(bin(ctx, BinaryOp::Shl, x, s)?);
    }
    let logical = bin(ctx, BinaryOp::Shr, x, s)?;
    if !d.is_signed() {
        return one(logical);
    }
    // For negative x, x >> s (arithmetic) == !(!x >> s) (logical), as !x is non-negative.
    let nx = un(ctx, UnaryOp::Not, x)?;
    let shifted = bin(ctx, BinaryOp::Shr, nx, s)?;
    let neg_result = un(ctx, UnaryOp::Not, shifted)?;
    let zero = lit(ctx, x, 0.0)?;
    let is_neg = bin(ctx, BinaryOp::Lt, x, zero)?;
    one(select(ctx, is_neg, neg_result, logical)?)
}

/// `fmod=0`: floor modulo (sign of the divisor); `fmod=1`: C fmod (sign of the dividend).
fn modulo(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["fmod"])?;
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    let op = match attrs::int(node, "fmod", 0)? {
        0 => BinaryOp::Mod,
        1 => BinaryOp::Rem,
        f => return Err(Error::Value(format!("Mod: 'fmod' must be 0 or 1, got {f}"))),
    };
    need(ctx, node, a, ctx.dtype(a) != DType::Bool, "numeric")?;
    one(bin(ctx, op, a, b)?)
}

/// `a ** b` in a's dtype. The exponent may have another dtype (opset 12+), as NumPy's
/// `power(a, b).astype(a.dtype)`: integer bases with float exponents compute in f64 and
/// truncate; mixed integers compute modulo 2^64 in i64, which has the same low bits.
fn pow(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (a, b) = operands(ctx, node)?;
    let (da, db) = (ctx.dtype(a), ctx.dtype(b));
    need(ctx, node, a, da != DType::Bool, "numeric")?;
    need(ctx, node, b, db != DType::Bool, "numeric")?;
    if da == db {
        return one(bin(ctx, BinaryOp::Pow, a, b)?);
    }
    let via = match da {
        DType::F32 | DType::F64 => da,
        // Half types compute in f32 anyway; an f32 exponent keeps integer exponents exact.
        DType::F16 | DType::BF16 => DType::F32,
        _ if db.is_float() => DType::F64,
        _ => DType::I64,
    };
    let a2 = if via == da {
        a
    } else {
        ctx.add(Op::Cast(via), &[a])?
    };
    let b2 = ctx.add(Op::Cast(via), &[b])?;
    let r = bin(ctx, BinaryOp::Pow, a2, b2)?;
    one(if via == da {
        r
    } else {
        ctx.add(Op::Cast(da), &[r])?
    })
}

/// Max/Min/Sum over 1..n inputs with broadcasting.
fn variadic(ctx: &mut Ctx, node: &NodeProto, op: BinaryOp) -> Result<Vec<Val>> {
    check_attrs(ctx, node, &[])?;
    let acc = fold(ctx, node, op)?;
    one(acc)
}

fn fold(ctx: &mut Ctx, node: &NodeProto, op: BinaryOp) -> Result<NodeId> {
    if node.input.is_empty() {
        return Err(Error::Graph(format!(
            "{} needs at least one input",
            node.op_type()
        )));
    }
    let mut acc = ctx.input(node, 0)?;
    need(ctx, node, acc, ctx.dtype(acc) != DType::Bool, "numeric")?;
    for i in 1..node.input.len() {
        let x = ctx.input(node, i)?;
        acc = bin(ctx, op, acc, x)?;
    }
    Ok(acc)
}

/// Sum / n (ONNX Mean is defined for floats).
fn mean(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    check_attrs(ctx, node, &[])?;
    let sum = fold(ctx, node, BinaryOp::Add)?;
    need_float(ctx, node, sum)?;
    if node.input.len() == 1 {
        return one(sum);
    }
    let n = lit(ctx, sum, node.input.len() as f64)?;
    one(bin(ctx, BinaryOp::Div, sum, n)?)
}

// ---------------------------------------------------------------------------------------------
// Unary ops and activations.

fn unary(ctx: &mut Ctx, node: &NodeProto, op: UnaryOp) -> Result<Vec<Val>> {
    check_attrs(ctx, node, &[])?;
    let x = ctx.input(node, 0)?;
    one(un(ctx, op, x)?)
}

/// The input and the float attributes `names` (with defaults) of a float-only activation.
fn activation<const N: usize>(
    ctx: &mut Ctx,
    node: &NodeProto,
    names: [(&str, f32); N],
) -> Result<(NodeId, [f64; N])> {
    let known: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
    check_attrs(ctx, node, &known)?;
    let x = ctx.input(node, 0)?;
    need_float(ctx, node, x)?;
    let mut vals = [0.0; N];
    for (v, (name, default)) in vals.iter_mut().zip(names) {
        *v = attrs::float(node, name, default)? as f64;
    }
    Ok((x, vals))
}

/// `x < 0 ? alpha * (exp(x) - 1) : x`.
fn elu(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, [alpha]) = activation(ctx, node, [("alpha", 1.0)])?;
    one(elu_of(ctx, x, alpha)?)
}

fn elu_of(ctx: &mut Ctx, x: NodeId, alpha: f64) -> Result<NodeId> {
    let zero = lit(ctx, x, 0.0)?;
    let one_ = lit(ctx, x, 1.0)?;
    let a = lit(ctx, x, alpha)?;
    let e = un(ctx, UnaryOp::Exp, x)?;
    let em1 = bin(ctx, BinaryOp::Sub, e, one_)?;
    let neg = bin(ctx, BinaryOp::Mul, em1, a)?;
    let is_neg = bin(ctx, BinaryOp::Lt, x, zero)?;
    select(ctx, is_neg, neg, x)
}

/// `max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`.
fn celu(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, [alpha]) = activation(ctx, node, [("alpha", 1.0)])?;
    let zero = lit(ctx, x, 0.0)?;
    let one_ = lit(ctx, x, 1.0)?;
    let a = lit(ctx, x, alpha)?;
    let pos = bin(ctx, BinaryOp::Max, x, zero)?;
    let xa = bin(ctx, BinaryOp::Div, x, a)?;
    let e = un(ctx, UnaryOp::Exp, xa)?;
    let em1 = bin(ctx, BinaryOp::Sub, e, one_)?;
    let neg = bin(ctx, BinaryOp::Mul, a, em1)?;
    let neg = bin(ctx, BinaryOp::Min, neg, zero)?;
    one(bin(ctx, BinaryOp::Add, pos, neg)?)
}

/// `x > 0 ? gamma * x : gamma * (alpha * exp(x) - alpha)`.
fn selu(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, [alpha, gamma]) =
        activation(ctx, node, [("alpha", 1.673_263_2), ("gamma", 1.050_701)])?;
    let zero = lit(ctx, x, 0.0)?;
    let a = lit(ctx, x, alpha)?;
    let g = lit(ctx, x, gamma)?;
    let pos = bin(ctx, BinaryOp::Mul, x, g)?;
    let e = un(ctx, UnaryOp::Exp, x)?;
    let ae = bin(ctx, BinaryOp::Mul, e, a)?;
    let neg = bin(ctx, BinaryOp::Sub, ae, a)?;
    let neg = bin(ctx, BinaryOp::Mul, neg, g)?;
    let is_pos = bin(ctx, BinaryOp::Gt, x, zero)?;
    one(select(ctx, is_pos, pos, neg)?)
}

/// `x < 0 ? alpha * x : x`.
fn leaky_relu(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, [alpha]) = activation(ctx, node, [("alpha", 0.01)])?;
    let a = lit(ctx, x, alpha)?;
    one(negative_scaled(ctx, x, a)?)
}

/// `x < 0 ? slope * x : x`.
fn negative_scaled(ctx: &mut Ctx, x: NodeId, slope: NodeId) -> Result<NodeId> {
    let zero = lit(ctx, x, 0.0)?;
    let scaled = bin(ctx, BinaryOp::Mul, x, slope)?;
    let is_neg = bin(ctx, BinaryOp::Lt, x, zero)?;
    select(ctx, is_neg, scaled, x)
}

/// `x < 0 ? slope * x : x`, the slope broadcasting to x (one way). Before opset 7 a 1-D slope
/// of x's channel count applies per channel (axis 1).
fn prelu(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    check_attrs(ctx, node, &[])?;
    let x = ctx.input(node, 0)?;
    let mut slope = ctx.input(node, 1)?;
    let d = ctx.dtype(x);
    need(
        ctx,
        node,
        x,
        d != DType::Bool && (d.is_signed() || ctx.opset >= 9),
        "numeric",
    )?;
    let xdims = ctx.dims(x);
    if ctx.opset < 7 && ctx.rank(slope) == 1 && xdims.len() >= 2 {
        let c = ctx.fixed_shape(slope, "PRelu")?[0];
        if c != 1 && xdims[1].fixed() == Some(c) {
            let mut dims = vec![c];
            dims.resize(xdims.len() - 1, 1);
            slope = ctx.add(Op::Reshape(Shape::fixed(&dims)), &[slope])?;
        }
    }
    let y = negative_scaled(ctx, x, slope)?;
    if ctx.ty(y).shape.0 != xdims {
        return Err(Error::Shape(format!(
            "PRelu: slope {} must broadcast to x {} (one-way), but the result would be {}",
            ctx.ty(slope).shape,
            ctx.ty(x).shape,
            ctx.ty(y).shape
        )));
    }
    one(y)
}

/// `max(0, min(1, alpha * x + beta))`.
fn hard_sigmoid(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, [alpha, beta]) = activation(ctx, node, [("alpha", 0.2), ("beta", 0.5)])?;
    one(hard_sigmoid_of(ctx, x, alpha, beta)?)
}

fn hard_sigmoid_of(ctx: &mut Ctx, x: NodeId, alpha: f64, beta: f64) -> Result<NodeId> {
    let a = lit(ctx, x, alpha)?;
    let b = lit(ctx, x, beta)?;
    let zero = lit(ctx, x, 0.0)?;
    let one_ = lit(ctx, x, 1.0)?;
    let ax = bin(ctx, BinaryOp::Mul, x, a)?;
    let y = bin(ctx, BinaryOp::Add, ax, b)?;
    let y = bin(ctx, BinaryOp::Min, y, one_)?;
    bin(ctx, BinaryOp::Max, y, zero)
}

/// `x * hard_sigmoid(x)` with alpha 1/6, beta 0.5.
fn hard_swish(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, []) = activation(ctx, node, [])?;
    let h = hard_sigmoid_of(ctx, x, 1.0 / 6.0, 0.5)?;
    one(bin(ctx, BinaryOp::Mul, x, h)?)
}

/// `x > alpha ? x : 0`.
fn thresholded_relu(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, [alpha]) = activation(ctx, node, [("alpha", 1.0)])?;
    let a = lit(ctx, x, alpha)?;
    let zero = lit(ctx, x, 0.0)?;
    let keep = bin(ctx, BinaryOp::Gt, x, a)?;
    one(select(ctx, keep, x, zero)?)
}

/// `log(exp(x) + 1)`, literally as ONNX defines it (overflows to inf for large x, as the reference).
fn softplus(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, []) = activation(ctx, node, [])?;
    let one_ = lit(ctx, x, 1.0)?;
    let e = un(ctx, UnaryOp::Exp, x)?;
    let s = bin(ctx, BinaryOp::Add, e, one_)?;
    one(un(ctx, UnaryOp::Log, s)?)
}

/// `x / (1 + |x|)`.
fn softsign(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, []) = activation(ctx, node, [])?;
    let one_ = lit(ctx, x, 1.0)?;
    let ax = un(ctx, UnaryOp::Abs, x)?;
    let den = bin(ctx, BinaryOp::Add, ax, one_)?;
    one(bin(ctx, BinaryOp::Div, x, den)?)
}

/// `x * tanh(log1p(exp(x)))`. log1p(e) is computed as `log(u) * e / (u - 1)` with `u = 1 + e`
/// (exact to a few ulps where `log(1 + e)` would lose e entirely), `e` when `u == 1`.
fn mish(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, []) = activation(ctx, node, [])?;
    let one_ = lit(ctx, x, 1.0)?;
    let inf = lit(ctx, x, f64::INFINITY)?;
    let e = un(ctx, UnaryOp::Exp, x)?;
    let u = bin(ctx, BinaryOp::Add, e, one_)?;
    let um1 = bin(ctx, BinaryOp::Sub, u, one_)?;
    let lu = un(ctx, UnaryOp::Log, u)?;
    let ratio = bin(ctx, BinaryOp::Div, e, um1)?;
    let l1p = bin(ctx, BinaryOp::Mul, lu, ratio)?;
    let tiny = bin(ctx, BinaryOp::Eq, u, one_)?;
    let l1p = select(ctx, tiny, e, l1p)?;
    // exp overflowed: inf/inf would be NaN, the limit is inf (and tanh(inf) = 1).
    let huge = bin(ctx, BinaryOp::Eq, u, inf)?;
    let sp = select(ctx, huge, u, l1p)?;
    let t = un(ctx, UnaryOp::Tanh, sp)?;
    one(bin(ctx, BinaryOp::Mul, x, t)?)
}

/// `x * sigmoid(alpha * x)`.
fn swish(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let (x, [alpha]) = activation(ctx, node, [("alpha", 1.0)])?;
    let a = lit(ctx, x, alpha)?;
    let ax = bin(ctx, BinaryOp::Mul, x, a)?;
    let s = un(ctx, UnaryOp::Sigmoid, ax)?;
    one(bin(ctx, BinaryOp::Mul, x, s)?)
}

/// `x < -lambd ? x + bias : x > lambd ? x - bias : 0`.
fn shrink(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["lambd", "bias"])?;
    let x = ctx.input(node, 0)?;
    let d = ctx.dtype(x);
    need(ctx, node, x, d != DType::Bool, "numeric")?;
    let lambd = attrs::float(node, "lambd", 0.5)? as f64;
    let bias = attrs::float(node, "bias", 0.0)? as f64;
    if d.is_int() && (lambd.fract() != 0.0 || bias.fract() != 0.0) {
        // Integer x would compare against a non-integer bound and round x ± bias.
        return Err(Error::Unsupported(format!(
            "Shrink on {d} with non-integer lambd {lambd} or bias {bias} is not supported"
        )));
    }
    let zero = lit(ctx, x, 0.0)?;
    let l = lit(ctx, x, lambd)?;
    let nl = lit(ctx, x, -lambd)?;
    let b = lit(ctx, x, bias)?;
    let below = bin(ctx, BinaryOp::Lt, x, nl)?;
    let above = bin(ctx, BinaryOp::Gt, x, l)?;
    let up = bin(ctx, BinaryOp::Add, x, b)?;
    let down = bin(ctx, BinaryOp::Sub, x, b)?;
    let inner = select(ctx, above, down, zero)?;
    one(select(ctx, below, up, inner)?)
}

fn gelu(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["approximate"])?;
    let x = ctx.input(node, 0)?;
    need_float(ctx, node, x)?;
    let tanh_approx = match attrs::string(node, "approximate")?.as_deref() {
        None | Some("none") => false,
        Some("tanh") => true,
        Some(o) => {
            return Err(Error::Value(format!(
                "Gelu: 'approximate' must be none or tanh, got '{o}'"
            )));
        }
    };
    one(ctx.add(Op::Gelu { tanh_approx }, &[x])?)
}

/// True where x is +inf (with detect_positive) or -inf (with detect_negative).
fn is_inf(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["detect_negative", "detect_positive"])?;
    let x = ctx.input(node, 0)?;
    let neg = attrs::int(node, "detect_negative", 1)? != 0;
    let pos = attrs::int(node, "detect_positive", 1)? != 0;
    let inf = un(ctx, UnaryOp::IsInf, x)?;
    if neg && pos {
        return one(inf);
    }
    let zero = lit(ctx, x, 0.0)?;
    let sign = match (neg, pos) {
        (true, _) => bin(ctx, BinaryOp::Lt, x, zero)?,
        (false, true) => bin(ctx, BinaryOp::Gt, x, zero)?,
        // Neither: nothing is detected.
        (false, false) => {
            let f = ctx.constant(HostTensor::scalar(false));
            return one(bin(ctx, BinaryOp::And, inf, f)?);
        }
    };
    one(bin(ctx, BinaryOp::And, inf, sign)?)
}

/// `min(max(x, min), max)`: with min > max every element becomes max (as ONNX says); NaN stays.
fn clip(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let x = ctx.input(node, 0)?;
    need(ctx, node, x, ctx.dtype(x) != DType::Bool, "numeric")?;
    let (lo, hi) = if ctx.opset < 11 {
        check_attrs(ctx, node, &["min", "max"])?;
        let lo = match attrs::has(node, "min") {
            true => Some(lit(ctx, x, attrs::float(node, "min", 0.0)? as f64)?),
            false => None,
        };
        let hi = match attrs::has(node, "max") {
            true => Some(lit(ctx, x, attrs::float(node, "max", 0.0)? as f64)?),
            false => None,
        };
        (lo, hi)
    } else {
        attrs::check_known(node, &[])?;
        (ctx.opt_input(node, 1)?, ctx.opt_input(node, 2)?)
    };
    let mut y = x;
    if let Some(lo) = lo {
        y = bin(ctx, BinaryOp::Max, y, lo)?;
    }
    if let Some(hi) = hi {
        y = bin(ctx, BinaryOp::Min, y, hi)?;
    }
    one(y)
}

fn where_(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let c = ctx.input(node, 0)?;
    let a = ctx.input(node, 1)?;
    let b = ctx.input(node, 2)?;
    one(select(ctx, c, a, b)?)
}

// ---------------------------------------------------------------------------------------------
// Casts, Dropout, Identity.

/// Cast to `to` (an ONNX type code; a type name before opset 6). Low-precision types
/// (float8, float4, 4/2-bit integers) are held as patterns (`ops::lowp`); `saturate` (default
/// on) applies to float8 targets, `round_mode` only to float8e8m0, where kiln implements `up`.
fn cast(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["to", "saturate", "round_mode"])?;
    let code = match attrs::string(node, "to") {
        Ok(Some(name)) if ctx.opset < 6 => (1..=26)
            .find(|&c| onnx_type_name(c) == name)
            .ok_or_else(|| Error::Value(format!("Cast: unknown type name '{name}' in 'to'")))?,
        _ => {
            let code = attrs::opt_int(node, "to")?
                .ok_or_else(|| Error::Value("Cast needs the 'to' attribute".into()))?;
            i32::try_from(code).map_err(|_| Error::Value(format!("Cast: bad type code {code}")))?
        }
    };
    let to = lowp::Target::from_onnx(code)?;
    // A shape value stays symbolic through a cast to int64 (its own type).
    if to == lowp::Target::Kiln(DType::I64)
        && let Some(name) = node.input.first()
        && let Ok(v @ Val::Dims { .. }) = ctx.value(name)
    {
        return Ok(vec![v.clone()]);
    }
    let saturate = cast_saturate(node, to)?;
    let x = ctx.input(node, 0)?;
    one(lowp::cast(ctx, x, to, saturate)?)
}

fn cast_like(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["saturate", "round_mode"])?;
    let x = ctx.input(node, 0)?;
    let like = ctx.input(node, 1)?;
    let to = lowp::Target::of(ctx, like);
    let saturate = cast_saturate(node, to)?;
    one(lowp::cast(ctx, x, to, saturate)?)
}

/// Cast's `saturate` attribute; refuses a `round_mode` other than `up` for float8e8m0 (the
/// only mode kiln's encoder implements; the attribute affects no other target).
fn cast_saturate(node: &NodeProto, to: lowp::Target) -> Result<bool> {
    let mode = attrs::string(node, "round_mode")?.unwrap_or_else(|| "up".to_string());
    if to == lowp::Target::Lowp(kiln_ir::LowpType::F8E8M0) && mode != "up" {
        return Err(Error::Unsupported(format!(
            "{}: round_mode '{mode}' to float8e8m0 is not supported (only 'up')",
            node.op_type()
        )));
    }
    Ok(attrs::int(node, "saturate", 1)? != 0)
}

/// Inference dropout: the output is the input and the mask is all true (all ones before
/// opset 10). Training mode with a non-zero ratio is random and refused.
fn dropout(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    let x = ctx.input(node, 0)?;
    let training = if ctx.opset < 7 {
        check_attrs(ctx, node, &["ratio", "is_test"])?;
        // Before opset 7 the default (is_test=0) is training mode.
        attrs::int(node, "is_test", 0)? == 0 && attrs::float(node, "ratio", 0.5)? != 0.0
    } else if ctx.opset < 12 {
        attrs::check_known(node, &["ratio"])?;
        false
    } else {
        // The seed only matters for training mode, which is refused unless it keeps everything.
        attrs::check_known(node, &["seed"])?;
        let train = match ctx.const_input(node, 2, "training_mode")? {
            None => false,
            Some(t) => t.to_f64_vec().first().is_some_and(|&v| v != 0.0),
        };
        train
            && ctx
                .const_floats(node, 1, "ratio")?
                .is_none_or(|r| r.first().is_none_or(|&r| r != 0.0))
    };
    if training {
        return Err(Error::Unsupported(
            "Dropout in training mode with a non-zero ratio is random; kiln runs inference only (export the model \
             in eval mode)"
                .into(),
        ));
    }
    let mut outs = vec![Val::Node(x)];
    if Ctx::has_input(node, 0) && node.output.get(1).is_some_and(|s| !s.is_empty()) {
        let mask_dtype = if ctx.opset < 10 {
            ctx.dtype(x)
        } else {
            DType::Bool
        };
        let one_ = ctx.scalar(mask_dtype, 1.0)?;
        let shape = Shape(ctx.dims(x));
        outs.push(Val::Node(ctx.add(Op::Expand(shape), &[one_])?));
    }
    Ok(outs)
}

/// The input itself (shape values stay symbolic).
fn identity(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let name = node
        .input
        .first()
        .ok_or_else(|| Error::Graph("Identity needs an input".into()))?;
    Ok(vec![ctx.value(name)?.clone()])
}
