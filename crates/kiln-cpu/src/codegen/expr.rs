//! Scalar expressions of the kernel IR as C expressions, with the exact semantics of
//! `kiln_cpu::eval` (helpers in `prelude.h`).
//!
//! Every value lives in a C variable of its *compute* type ([`ctype`]): f16 and bf16 values
//! are held as `float` already rounded to their dtype (f16/bf16 → f32 is exact, so this is the
//! stored value), bool as `uint8_t` 0/1, every other dtype as itself.

use kiln_ir::half::{bf16, f16};
use kiln_ir::{BinaryOp, DType, Error, Result, UnaryOp};
use kiln_sched::kernel::{Expr, ExprId, Idx, Kernel, Literal};

/// The C type a value of `dt` is computed in.
pub fn ctype(dt: DType) -> &'static str {
    match dt {
        DType::F32 | DType::F16 | DType::BF16 => "float",
        DType::F64 => "double",
        _ => storage_ctype(dt),
    }
}

/// The C type of one element of a buffer of `dt`.
pub fn storage_ctype(dt: DType) -> &'static str {
    match dt {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::F16 | DType::BF16 => "uint16_t",
        DType::I64 => "int64_t",
        DType::I32 => "int32_t",
        DType::I16 => "int16_t",
        DType::I8 => "int8_t",
        DType::U64 => "uint64_t",
        DType::U32 => "uint32_t",
        DType::U16 => "uint16_t",
        DType::U8 | DType::Bool => "uint8_t",
    }
}

/// The suffix of the prelude's per-integer-type helpers (`kc_add_i32`).
fn int_sfx(dt: DType) -> Option<&'static str> {
    Some(match dt {
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::I16 => "i16",
        DType::I8 => "i8",
        DType::U64 => "u64",
        DType::U32 => "u32",
        DType::U16 => "u16",
        DType::U8 => "u8",
        _ => return None,
    })
}

fn is_float(dt: DType) -> bool {
    matches!(dt, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
}

/// A stored element (`ptr[index]`) as a compute value.
pub fn load(dt: DType, access: &str) -> String {
    match dt {
        DType::F16 => format!("kc_h2f({access})"),
        DType::BF16 => format!("kc_bf2f({access})"),
        _ => access.to_string(),
    }
}

/// A compute value as the element stored into a buffer of `dt`.
pub fn store(dt: DType, value: &str) -> String {
    match dt {
        DType::F16 => format!("kc_f2h({value})"),
        DType::BF16 => format!("kc_f2bf({value})"),
        _ => value.to_string(),
    }
}

/// Rounds a float result to `dt` (the one rounding of a half-precision op).
fn round_to(dt: DType, value: String) -> String {
    match dt {
        DType::F16 => format!("kc_rh({value})"),
        DType::BF16 => format!("kc_rbf({value})"),
        _ => value,
    }
}

/// `x` (a compute value of `from`) converted to `to` as [`kiln_ir::Op::Cast`] does.
pub fn convert(x: &str, from: DType, to: DType) -> String {
    if from == to {
        return x.to_string();
    }
    if to == DType::Bool {
        return format!("(uint8_t)({x} != 0)");
    }
    let to_ty = ctype(to);
    match (is_float(from), to) {
        // Float → integer: truncate, saturate, NaN → 0 (f32 → f64 is exact).
        (true, _) if !is_float(to) => {
            format!("kc_ftoi_{}((double){x})", int_sfx(to).unwrap_or("i64"))
        }
        // Between floats: widening is exact; narrowing rounds once, from double directly.
        (true, DType::F16) if from == DType::F64 => format!("kc_d2h({x})"),
        (true, DType::BF16) if from == DType::F64 => format!("kc_d2bf({x})"),
        (true, DType::F16) => format!("kc_rh({x})"),
        (true, DType::BF16) => format!("kc_rbf({x})"),
        // Integer or bool → half: through double, as the interpreter (exact below 2^53).
        (false, DType::F16) => format!("kc_d2h((double){x})"),
        (false, DType::BF16) => format!("kc_d2bf((double){x})"),
        // Integer → integer wraps (gcc defines narrowing to a signed type as modulo 2^bits);
        // integer → f32/f64 and f64 → f32 round to nearest.
        _ => format!("({to_ty}){x}"),
    }
}

/// A C literal of `dt` for `lit` (f16/bf16 values as the `float` they compute in).
pub fn literal(lit: Literal, dt: DType) -> String {
    match dt {
        DType::F64 => f64_literal(match lit {
            Literal::Float(v) => v,
            Literal::Int(i) => i as f64,
        }),
        DType::F32 | DType::F16 | DType::BF16 => {
            let v = match lit {
                Literal::Float(v) => v,
                Literal::Int(i) => i as f64,
            };
            let v = match dt {
                DType::F16 => f16::from_f64(v).to_f32(),
                DType::BF16 => bf16::from_f64(v).to_f32(),
                _ => v as f32,
            };
            f32_literal(v)
        }
        DType::Bool => match lit {
            Literal::Float(v) => format!("(uint8_t){}", u8::from(v != 0.0)),
            Literal::Int(i) => format!("(uint8_t){}", u8::from(i != 0)),
        },
        _ => {
            // Out-of-range integers wrap and floats truncate and saturate, as a cast would.
            let i: i128 = match lit {
                Literal::Int(i) => i,
                Literal::Float(v) => match dt {
                    DType::U64 | DType::U32 | DType::U16 | DType::U8 => v as u64 as i128,
                    _ => v as i64 as i128,
                },
            };
            match dt {
                DType::I64 => signed_literal(i as i64, "int64_t"),
                DType::I32 => signed_literal((i as i32).into(), "int32_t"),
                DType::I16 => signed_literal((i as i16).into(), "int16_t"),
                DType::I8 => signed_literal((i as i8).into(), "int8_t"),
                DType::U64 => format!("UINT64_C({})", i as u64),
                DType::U32 => format!("(uint32_t){}u", i as u32),
                DType::U16 => format!("(uint16_t){}u", i as u16),
                _ => format!("(uint8_t){}u", i as u8),
            }
        }
    }
}

fn signed_literal(v: i64, ty: &str) -> String {
    if v == i64::MIN {
        // `-9223372036854775808` is the negation of a literal too large for any C type.
        format!("({ty})(-INT64_C(9223372036854775807) - 1)")
    } else {
        format!("({ty})INT64_C({v})")
    }
}

fn f32_literal(v: f32) -> String {
    if v.is_nan() {
        "NAN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "INFINITY".into()
        } else {
            "(-INFINITY)".into()
        }
    } else {
        // Rust prints the shortest decimal that reads back as exactly this value.
        let s = format!("{v:?}");
        let s = if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        };
        format!("{s}f")
    }
}

fn f64_literal(v: f64) -> String {
    if v.is_nan() {
        "(double)NAN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "(double)INFINITY".into()
        } else {
            "(-(double)INFINITY)".into()
        }
    } else {
        let s = format!("{v:?}");
        if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        }
    }
}

/// An index expression over loop variables `i{var}`, in `int64_t`.
pub fn index(idx: &Idx) -> String {
    index_in(idx, true)
}

/// An index expression over loop variables `i{var}` of type `int`, computed in 32-bit `int`:
/// only for kernels where every intermediate value fits (GPU 64-bit integer math is slow).
pub fn index32(idx: &Idx) -> String {
    index_in(idx, false)
}

/// An index expression, its constants `int64_t` when `wide`, else `int`.
fn index_in(idx: &Idx, wide: bool) -> String {
    let index = |i: &Idx| index_in(i, wide);
    match idx {
        Idx::Var(v) => format!("i{v}"),
        Idx::Const(c) => match (wide, *c < 0) {
            (true, true) => format!("(INT64_C({c}))"),
            (true, false) => format!("INT64_C({c})"),
            (false, true) => format!("({c})"),
            (false, false) => format!("{c}"),
        },
        Idx::Add(terms) => {
            let mut s = String::new();
            for (k, t) in terms.iter().enumerate() {
                match t {
                    Idx::Const(c) if k > 0 && *c < 0 => s += &format!(" - {}", c.unsigned_abs()),
                    t => {
                        if k > 0 {
                            s += " + ";
                        }
                        s += &index(t);
                    }
                }
            }
            format!("({s})")
        }
        Idx::Mul(x, c) => {
            if *c < 0 {
                format!("{} * ({c})", index(x))
            } else {
                format!("{} * {c}", index(x))
            }
        }
        Idx::Div(x, c) => format!("({} / {c})", index(x)),
        Idx::Mod(x, c) => format!("({} % {c})", index(x)),
    }
}

fn unsupported(k: &Kernel, id: ExprId, what: String) -> Error {
    Error::Unsupported(format!(
        "C codegen, kernel {}: expression v{id}: {what}",
        k.name
    ))
}

/// The C expression computing `id` from its operands' variables (`v{operand}`), the
/// reduction locals (`acc{local}`, of `local_dtype(local)`) and the loop variables.
/// `access(arg, index)` renders a load (it knows the argument pointers and guards), `index`
/// an index expression ([`index`] or [`index32`]).
pub fn render(
    k: &Kernel,
    id: ExprId,
    local_dtype: &dyn Fn(u32) -> Option<DType>,
    access: &dyn Fn(u32, &Idx) -> Result<String>,
    index: &dyn Fn(&Idx) -> String,
) -> Result<String> {
    let node = k.expr(id);
    let dt = node.dtype;
    let operand = |x: ExprId| -> Result<DType> {
        if x >= id {
            return Err(unsupported(
                k,
                id,
                format!("operand v{x} is not an earlier expression"),
            ));
        }
        Ok(k.expr(x).dtype)
    };
    let v = |x: ExprId| format!("v{x}");
    Ok(match &node.expr {
        Expr::Load { arg, index: i } => {
            let a = k
                .args
                .get(*arg as usize)
                .ok_or_else(|| unsupported(k, id, format!("load of missing argument {arg}")))?;
            if a.dtype != dt {
                return Err(unsupported(
                    k,
                    id,
                    format!("load of a {} argument as {dt}", a.dtype),
                ));
            }
            load(dt, &access(*arg, i)?)
        }
        Expr::Const(lit) => literal(*lit, dt),
        Expr::Unary { op, x } => {
            let xt = operand(*x)?;
            let want = if matches!(op, UnaryOp::IsNan | UnaryOp::IsInf) {
                DType::Bool
            } else {
                xt
            };
            if dt != want {
                return Err(unsupported(
                    k,
                    id,
                    format!("{op:?} of {xt} typed {dt} (expected {want})"),
                ));
            }
            unary(*op, &v(*x), xt).ok_or_else(|| unsupported(k, id, format!("{op:?} of {xt}")))?
        }
        Expr::Binary { op, a, b } => {
            let (at, bt) = (operand(*a)?, operand(*b)?);
            let want = if op.is_comparison() { DType::Bool } else { at };
            if at != bt || dt != want {
                return Err(unsupported(
                    k,
                    id,
                    format!("{op:?} of {at} and {bt} typed {dt}"),
                ));
            }
            binary(*op, &v(*a), &v(*b), at)
                .ok_or_else(|| unsupported(k, id, format!("{op:?} of {at}")))?
        }
        Expr::Where { cond, a, b } => {
            let (ct, at, bt) = (operand(*cond)?, operand(*a)?, operand(*b)?);
            if ct != DType::Bool || at != dt || bt != dt {
                return Err(unsupported(
                    k,
                    id,
                    format!("where({ct}, {at}, {bt}) typed {dt}"),
                ));
            }
            format!("{} ? {} : {}", v(*cond), v(*a), v(*b))
        }
        Expr::Cast { x } => convert(&v(*x), operand(*x)?, dt),
        Expr::InRange { index: i, lo, hi } => {
            if dt != DType::Bool {
                return Err(unsupported(k, id, format!("in-range typed {dt}")));
            }
            format!(
                "(uint8_t)kc_in_range({}, INT64_C({lo}), INT64_C({hi}))",
                index(i)
            )
        }
        Expr::Index(i) => convert(&index(i), DType::I64, dt),
        Expr::Local(l) => {
            let lt = local_dtype(*l).ok_or_else(|| {
                unsupported(
                    k,
                    id,
                    format!("local {l} is not computed by an earlier stage"),
                )
            })?;
            convert(&format!("acc{l}"), lt, dt)
        }
    })
}

/// `op(x)` for a value of `dt`, or None when the interpreter rejects that dtype.
fn unary(op: UnaryOp, x: &str, dt: DType) -> Option<String> {
    use UnaryOp as U;
    if dt == DType::Bool {
        return (op == U::Not).then(|| format!("(uint8_t)!{x}"));
    }
    if let Some(s) = int_sfx(dt) {
        return Some(match op {
            U::Neg => format!("kc_neg_{s}({x})"),
            U::Abs => format!("kc_abs_{s}({x})"),
            U::Sign => format!("kc_sign_{s}({x})"),
            U::Relu => format!("kc_relu_{s}({x})"),
            U::Not => format!("({})~{x}", ctype(dt)),
            U::IsNan | U::IsInf => "(uint8_t)0".into(),
            _ => return None,
        });
    }
    let f = dt != DType::F64;
    // libm's float functions for f32/f16/bf16 (computed in f32, as the interpreter), double
    // ones for f64: the same glibc routines Rust's f32/f64 methods call. Exp, Sigmoid, Erf and
    // Erfc in f32 use the prelude's branch-free versions instead (a libm call per element
    // keeps the loop scalar); they are within a few ulp of the interpreter (bounds in
    // prelude.h), f64 stays exact.
    let m = |name: &str| {
        if f {
            format!("{name}f({x})")
        } else {
            format!("{name}({x})")
        }
    };
    let one = if f { "1.0f" } else { "1.0" };
    let r = match op {
        U::Neg => format!("-{x}"),
        U::Abs => m("fabs"),
        U::Sign => m("kc_sign"),
        U::Exp => {
            if f {
                format!("kc_expf_v({x})")
            } else {
                format!("exp({x})")
            }
        }
        U::Log => m("log"),
        U::Sqrt => m("sqrt"),
        U::Rsqrt => format!("{one} / {}", m("sqrt")),
        U::Reciprocal => format!("{one} / {x}"),
        U::Sin => m("sin"),
        U::Cos => m("cos"),
        U::Tan => m("tan"),
        U::Asin => m("asin"),
        U::Acos => m("acos"),
        U::Atan => m("atan"),
        U::Sinh => m("sinh"),
        U::Cosh => m("cosh"),
        U::Tanh => m("tanh"),
        U::Asinh => m("kc_asinh"),
        U::Acosh => m("kc_acosh"),
        U::Atanh => m("kc_atanh"),
        U::Sigmoid => {
            if f {
                format!("kc_sigmoidf({x})")
            } else {
                format!("1.0 / (1.0 + exp(-{x}))")
            }
        }
        U::Relu => m("kc_relu"),
        U::Erf => m("kc_erf"),
        U::Erfc => m("kc_erfc"),
        U::Floor => m("floor"),
        U::Ceil => m("ceil"),
        // rint under the default rounding mode: round half to even.
        U::Round => m("rint"),
        U::IsNan => return Some(format!("(uint8_t)isnan({x})")),
        U::IsInf => return Some(format!("(uint8_t)isinf({x})")),
        U::Not => return None,
    };
    Some(round_to(dt, r))
}

/// `op(a, b)` for operands of `dt`, or None when the interpreter rejects that dtype.
fn binary(op: BinaryOp, a: &str, b: &str, dt: DType) -> Option<String> {
    use BinaryOp as B;
    let cmp = |c: &str| format!("(uint8_t)({a} {c} {b})");
    if dt == DType::Bool {
        return Some(match op {
            B::Eq => cmp("=="),
            B::Ne | B::Xor => cmp("!="),
            B::Lt => cmp("<"),
            B::Le => cmp("<="),
            B::Gt => cmp(">"),
            B::Ge => cmp(">="),
            B::Max | B::Or => format!("(uint8_t)({a} | {b})"),
            B::Min | B::And => format!("(uint8_t)({a} & {b})"),
            _ => return None,
        });
    }
    match op {
        B::Eq => return Some(cmp("==")),
        B::Ne => return Some(cmp("!=")),
        B::Lt => return Some(cmp("<")),
        B::Le => return Some(cmp("<=")),
        B::Gt => return Some(cmp(">")),
        B::Ge => return Some(cmp(">=")),
        _ => {}
    }
    if let Some(s) = int_sfx(dt) {
        let ty = ctype(dt);
        return Some(match op {
            B::Add => format!("kc_add_{s}({a}, {b})"),
            B::Sub => format!("kc_sub_{s}({a}, {b})"),
            B::Mul => format!("kc_mul_{s}({a}, {b})"),
            B::Div => format!("kc_div_{s}({a}, {b})"),
            B::Rem => format!("kc_rem_{s}({a}, {b})"),
            B::Mod => format!("kc_mod_{s}({a}, {b})"),
            B::Pow => format!("kc_pow_{s}({a}, {b})"),
            B::Shl => format!("kc_shl_{s}({a}, {b})"),
            B::Shr => format!("kc_shr_{s}({a}, {b})"),
            B::Max => format!("({a} > {b} ? {a} : {b})"),
            B::Min => format!("({a} < {b} ? {a} : {b})"),
            B::And => format!("({ty})({a} & {b})"),
            B::Or => format!("({ty})({a} | {b})"),
            B::Xor => format!("({ty})({a} ^ {b})"),
            _ => return None,
        });
    }
    let f = dt != DType::F64;
    let call = |name: &str| {
        if f {
            format!("{name}f({a}, {b})")
        } else {
            format!("{name}({a}, {b})")
        }
    };
    let r = match op {
        B::Add => format!("{a} + {b}"),
        B::Sub => format!("{a} - {b}"),
        B::Mul => format!("{a} * {b}"),
        B::Div => format!("{a} / {b}"),
        B::Rem => call("fmod"),
        B::Mod => call("kc_mod"),
        B::Pow => call("pow"),
        B::Max => call("kc_max"),
        B::Min => call("kc_min"),
        _ => return None,
    };
    Some(round_to(dt, r))
}
