//! Elementwise methods: binary ops with NumPy broadcasting, their scalar forms, unary
//! functions, activations, `where` and casts. Each is one op (silu is two).

use super::Tensor;
use crate::dispatch::dispatch;
use kiln_ir::{BinaryOp, DType, Op, Result, UnaryOp};

/// Defines `fn $name(&self, other: &Tensor)` dispatching `Op::Binary($op)`.
macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                    dispatch(Op::Binary(BinaryOp::$op), &[self, other])
                }
            )*
        }
    };
}

/// Defines `fn $name(&self, x: f64)`: the binary op with `x` as a rank-0 tensor of self's dtype.
macro_rules! scalar_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self, x: f64) -> Result<Tensor> {
                    dispatch(Op::Binary(BinaryOp::$op), &[self, &self.scalar_like(x)])
                }
            )*
        }
    };
}

/// Defines `fn $name(&self)` dispatching `Op::Unary($op)`.
macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Result<Tensor> {
                    dispatch(Op::Unary(UnaryOp::$op), &[self])
                }
            )*
        }
    };
}

binary_methods! {
    /// `self + other`, broadcasting.
    add => Add;
    /// `self - other`, broadcasting.
    sub => Sub;
    /// `self * other`, broadcasting.
    mul => Mul;
    /// `self / other`, broadcasting (integers truncate toward zero).
    div => Div;
    /// Remainder with the sign of `self` (C `fmod`), broadcasting.
    rem => Rem;
    /// `self ^ other`, broadcasting.
    pow => Pow;
    /// Elementwise max (NaN wins), broadcasting.
    maximum => Max;
    /// Elementwise min (NaN wins), broadcasting.
    minimum => Min;
    /// `self == other` as bool, broadcasting.
    eq => Eq;
    /// `self != other` as bool, broadcasting.
    ne => Ne;
    /// `self < other` as bool, broadcasting.
    lt => Lt;
    /// `self <= other` as bool, broadcasting.
    le => Le;
    /// `self > other` as bool, broadcasting.
    gt => Gt;
    /// `self >= other` as bool, broadcasting.
    ge => Ge;
    /// Logical (bool) or bitwise (integer) and, broadcasting.
    logical_and => And;
    /// Logical (bool) or bitwise (integer) or, broadcasting.
    logical_or => Or;
    /// Logical (bool) or bitwise (integer) xor, broadcasting.
    logical_xor => Xor;
}

scalar_methods! {
    /// `self + x`, `x` converted to self's dtype.
    add_scalar => Add;
    /// `self - x`, `x` converted to self's dtype.
    sub_scalar => Sub;
    /// `self * x`, `x` converted to self's dtype.
    mul_scalar => Mul;
    /// `self / x`, `x` converted to self's dtype.
    div_scalar => Div;
    /// `self ^ x`, `x` converted to self's dtype.
    pow_scalar => Pow;
}

unary_methods! {
    /// `-x`.
    neg => Neg;
    /// `|x|`.
    abs => Abs;
    /// -1, 0 or 1 (NaN stays NaN).
    sign => Sign;
    /// `e^x`.
    exp => Exp;
    /// Natural logarithm.
    log => Log;
    /// Square root.
    sqrt => Sqrt;
    /// `1 / sqrt(x)`.
    rsqrt => Rsqrt;
    /// `1 / x`.
    reciprocal => Reciprocal;
    /// Sine.
    sin => Sin;
    /// Cosine.
    cos => Cos;
    /// Hyperbolic tangent.
    tanh => Tanh;
    /// `1 / (1 + e^-x)`.
    sigmoid => Sigmoid;
    /// `max(x, 0)`.
    relu => Relu;
    /// The error function.
    erf => Erf;
    /// Rounds down.
    floor => Floor;
    /// Rounds up.
    ceil => Ceil;
    /// Rounds half to even (as `torch.round`).
    round => Round;
    /// Logical not (bool) or bitwise not (integers).
    logical_not => Not;
    /// True where NaN.
    isnan => IsNan;
    /// True where ±inf.
    isinf => IsInf;
}

impl Tensor {
    /// GELU with the exact erf form, `x * Φ(x)` (PyTorch's default).
    pub fn gelu(&self) -> Result<Tensor> {
        dispatch(Op::Gelu { tanh_approx: false }, &[self])
    }

    /// GELU with the tanh approximation (PyTorch `approximate="tanh"`, GPT-2's `gelu_new`).
    pub fn gelu_tanh(&self) -> Result<Tensor> {
        dispatch(Op::Gelu { tanh_approx: true }, &[self])
    }

    /// SiLU (swish), `x * sigmoid(x)`.
    pub fn silu(&self) -> Result<Tensor> {
        self.mul(&self.sigmoid()?)
    }

    /// `cond ? a : b` elementwise (cond is bool), broadcasting all three.
    pub fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        dispatch(Op::Where, &[cond, a, b])
    }

    /// Converts to `dtype` (float→int truncates and saturates, anything→bool is `x != 0`).
    /// Converting to the current dtype returns `self` without an op.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        dispatch(Op::Cast(dtype), &[self])
    }
}
