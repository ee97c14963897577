//! Elementwise unary, binary (broadcasting) and where kernels.
//!
//! Every kernel here is one closure per (op, dtype) handed to the strided loop in [`iter`],
//! which also serves cast and reduce. f16/bf16 compute in f32 and round once per result;
//! integers wrap on overflow; integer division by zero and negative integer powers are
//! errors found by scanning the divisor/exponent before the loop, so the loop never panics.

use kiln_ir::half::{bf16, f16};
use kiln_ir::{BinaryOp, DType, Element, Error, HostTensor, Op, Result, UnaryOp};

use iter::{elements, map1, map2, map3};
use num::{FloatElem, IntElem, Real};

/// `f(x)` elementwise; `out_dtype` is the inferred result dtype (bool for IsNan/IsInf).
pub fn unary(op: UnaryOp, x: &HostTensor, out_dtype: DType) -> Result<HostTensor> {
    let name = Op::Unary(op).name();
    let out = match x.dtype() {
        DType::F32 => float_unary::<f32>(op, x, &name),
        DType::F64 => float_unary::<f64>(op, x, &name),
        DType::F16 => float_unary::<f16>(op, x, &name),
        DType::BF16 => float_unary::<bf16>(op, x, &name),
        DType::I64 => int_unary::<i64>(op, x, &name),
        DType::I32 => int_unary::<i32>(op, x, &name),
        DType::I8 => int_unary::<i8>(op, x, &name),
        DType::U8 => int_unary::<u8>(op, x, &name),
        DType::I16 => int_unary::<i16>(op, x, &name),
        DType::U16 => int_unary::<u16>(op, x, &name),
        DType::U32 => int_unary::<u32>(op, x, &name),
        DType::U64 => int_unary::<u64>(op, x, &name),
        DType::Bool => bool_unary(op, x, &name),
    }?;
    expect_dtype(out, out_dtype, &name)
}

/// `f(a, b)` elementwise with NumPy broadcasting to `shape`; `out_dtype` is bool for comparisons.
pub fn binary(
    op: BinaryOp,
    a: &HostTensor,
    b: &HostTensor,
    out_dtype: DType,
    shape: &[usize],
) -> Result<HostTensor> {
    let name = Op::Binary(op).name();
    if a.dtype() != b.dtype() {
        return Err(Error::DType(format!(
            "{name}: inputs must share one dtype, got {} {:?} and {} {:?}",
            a.dtype(),
            a.shape(),
            b.dtype(),
            b.shape()
        )));
    }
    let out = match a.dtype() {
        DType::F32 => float_binary::<f32>(op, a, b, shape, &name),
        DType::F64 => float_binary::<f64>(op, a, b, shape, &name),
        DType::F16 => float_binary::<f16>(op, a, b, shape, &name),
        DType::BF16 => float_binary::<bf16>(op, a, b, shape, &name),
        DType::I64 => int_binary::<i64>(op, a, b, shape, &name),
        DType::I32 => int_binary::<i32>(op, a, b, shape, &name),
        DType::I8 => int_binary::<i8>(op, a, b, shape, &name),
        DType::U8 => int_binary::<u8>(op, a, b, shape, &name),
        DType::I16 => int_binary::<i16>(op, a, b, shape, &name),
        DType::U16 => int_binary::<u16>(op, a, b, shape, &name),
        DType::U32 => int_binary::<u32>(op, a, b, shape, &name),
        DType::U64 => int_binary::<u64>(op, a, b, shape, &name),
        DType::Bool => bool_binary(op, a, b, shape, &name),
    }?;
    expect_dtype(out, out_dtype, &name)
}

/// `cond ? x : y` broadcast to `shape`.
pub fn where_(cond: &HostTensor, x: &HostTensor, y: &HostTensor, shape: &[usize]) -> Result<HostTensor> {
    if x.dtype() != y.dtype() {
        return Err(Error::DType(format!(
            "where: both branches must share one dtype, got {} {:?} and {} {:?}",
            x.dtype(),
            x.shape(),
            y.dtype(),
            y.shape()
        )));
    }
    kiln_ir::with_dtype!(x.dtype(), T, {
        map3::<bool, T, T, T>(cond, x, y, shape, "where", |c, a, b| if c { a } else { b })
    })
}

/// Guards the contract with `infer`: the kernel's result dtype must be the inferred one.
fn expect_dtype(t: HostTensor, want: DType, name: &str) -> Result<HostTensor> {
    if t.dtype() != want {
        return Err(Error::DType(format!(
            "{name}: kernel produced {} but {want} was inferred (shape {:?})",
            t.dtype(),
            t.shape()
        )));
    }
    Ok(t)
}

fn bad_dtype(name: &str, what: &str, t: &HostTensor) -> Error {
    Error::DType(format!("{name}: needs {what}, got {} {:?}", t.dtype(), t.shape()))
}

/// Wraps a function of the compute type as a function of the stored type (the one rounding).
fn lift1<T: FloatElem>(f: impl Fn(T::C) -> T::C + Sync) -> impl Fn(T) -> T + Sync {
    move |v| T::down(f(v.up()))
}

fn lift2<T: FloatElem>(f: impl Fn(T::C, T::C) -> T::C + Sync) -> impl Fn(T, T) -> T + Sync {
    move |a, b| T::down(f(a.up(), b.up()))
}

fn cmp2<T: FloatElem>(f: impl Fn(T::C, T::C) -> bool + Sync) -> impl Fn(T, T) -> bool + Sync {
    move |a, b| f(a.up(), b.up())
}

fn float_unary<T: FloatElem>(op: UnaryOp, x: &HostTensor, name: &str) -> Result<HostTensor> {
    use UnaryOp as U;
    let (zero, one) = (T::C::ZERO, T::C::ONE);
    match op {
        U::Neg => map1(x, name, lift1::<T>(|v| -v)),
        U::Abs => map1(x, name, lift1::<T>(|v| v.abs())),
        // Zeros (and NaN) map to themselves.
        U::Sign => map1(
            x,
            name,
            lift1::<T>(move |v| if v > zero { one } else if v < zero { -one } else { v }),
        ),
        U::Exp => map1(x, name, lift1::<T>(|v| v.exp())),
        U::Log => map1(x, name, lift1::<T>(|v| v.ln())),
        U::Sqrt => map1(x, name, lift1::<T>(|v| v.sqrt())),
        U::Rsqrt => map1(x, name, lift1::<T>(move |v| one / v.sqrt())),
        U::Reciprocal => map1(x, name, lift1::<T>(move |v| one / v)),
        U::Sin => map1(x, name, lift1::<T>(|v| v.sin())),
        U::Cos => map1(x, name, lift1::<T>(|v| v.cos())),
        U::Tan => map1(x, name, lift1::<T>(|v| v.tan())),
        U::Asin => map1(x, name, lift1::<T>(|v| v.asin())),
        U::Acos => map1(x, name, lift1::<T>(|v| v.acos())),
        U::Atan => map1(x, name, lift1::<T>(|v| v.atan())),
        U::Sinh => map1(x, name, lift1::<T>(|v| v.sinh())),
        U::Cosh => map1(x, name, lift1::<T>(|v| v.cosh())),
        U::Tanh => map1(x, name, lift1::<T>(|v| v.tanh())),
        U::Asinh => map1(x, name, lift1::<T>(|v| v.asinh())),
        U::Acosh => map1(x, name, lift1::<T>(|v| v.acosh())),
        U::Atanh => map1(x, name, lift1::<T>(|v| v.atanh())),
        // exp(-x) overflows to inf for very negative x, giving the correct limit 0.
        U::Sigmoid => map1(x, name, lift1::<T>(move |v| one / (one + (-v).exp()))),
        // Written so that NaN fails the test and passes through.
        U::Relu => map1(x, name, lift1::<T>(move |v| if v < zero { zero } else { v })),
        U::Erf => map1(x, name, lift1::<T>(|v| v.erf())),
        U::Erfc => map1(x, name, lift1::<T>(|v| v.erfc())),
        U::Floor => map1(x, name, lift1::<T>(|v| v.floor())),
        U::Ceil => map1(x, name, lift1::<T>(|v| v.ceil())),
        U::Round => map1(x, name, lift1::<T>(|v| v.round_ties_even())),
        U::IsNan => map1(x, name, |v: T| v.up().is_nan()),
        U::IsInf => map1(x, name, |v: T| v.up().is_infinite()),
        U::Not => Err(bad_dtype(name, "a bool or integer input", x)),
    }
}

fn int_unary<T: IntElem>(op: UnaryOp, x: &HostTensor, name: &str) -> Result<HostTensor> {
    use UnaryOp as U;
    match op {
        U::Neg => map1(x, name, |v: T| v.wneg()),
        U::Abs => map1(x, name, |v: T| v.wabs()),
        U::Sign => map1(x, name, |v: T| v.sign()),
        U::Relu => map1(x, name, |v: T| v.max(T::zero())),
        U::Not => map1(x, name, |v: T| !v),
        U::IsNan | U::IsInf => map1(x, name, |_: T| false),
        _ => Err(bad_dtype(name, "a float input", x)),
    }
}

fn bool_unary(op: UnaryOp, x: &HostTensor, name: &str) -> Result<HostTensor> {
    match op {
        UnaryOp::Not => map1(x, name, |v: bool| !v),
        _ => Err(bad_dtype(name, "a numeric input", x)),
    }
}

fn float_binary<T: FloatElem>(
    op: BinaryOp,
    a: &HostTensor,
    b: &HostTensor,
    shape: &[usize],
    name: &str,
) -> Result<HostTensor> {
    use BinaryOp as B;
    match op {
        B::Add => map2(a, b, shape, name, lift2::<T>(|x, y| x + y)),
        B::Sub => map2(a, b, shape, name, lift2::<T>(|x, y| x - y)),
        B::Mul => map2(a, b, shape, name, lift2::<T>(|x, y| x * y)),
        B::Div => map2(a, b, shape, name, lift2::<T>(|x, y| x / y)),
        // Rust's float `%` is C fmod: the sign of the dividend.
        B::Rem => map2(a, b, shape, name, lift2::<T>(|x, y| x % y)),
        // Floor modulo from fmod: move a remainder whose sign differs from the divisor's by one
        // divisor; a zero result takes the divisor's sign (as Python and NumPy).
        B::Mod => {
            let zero = T::C::ZERO;
            map2(
                a,
                b,
                shape,
                name,
                lift2::<T>(move |x, y| {
                    let r = x % y;
                    if r == zero {
                        if y < zero { -zero } else { zero }
                    } else if (r < zero) != (y < zero) {
                        r + y
                    } else {
                        r
                    }
                }),
            )
        }
        B::Pow => map2(a, b, shape, name, lift2::<T>(|x, y| x.powf(y))),
        // The comparisons are false for NaN, so the `x != x` test makes NaN win from either side.
        B::Max => map2(a, b, shape, name, lift2::<T>(|x, y| if x > y || x.is_nan() { x } else { y })),
        B::Min => map2(a, b, shape, name, lift2::<T>(|x, y| if x < y || x.is_nan() { x } else { y })),
        B::Eq => map2(a, b, shape, name, cmp2::<T>(|x, y| x == y)),
        B::Ne => map2(a, b, shape, name, cmp2::<T>(|x, y| x != y)),
        B::Lt => map2(a, b, shape, name, cmp2::<T>(|x, y| x < y)),
        B::Le => map2(a, b, shape, name, cmp2::<T>(|x, y| x <= y)),
        B::Gt => map2(a, b, shape, name, cmp2::<T>(|x, y| x > y)),
        B::Ge => map2(a, b, shape, name, cmp2::<T>(|x, y| x >= y)),
        B::And | B::Or | B::Xor => Err(bad_dtype(name, "bool or integer inputs", a)),
        B::Shl | B::Shr => Err(bad_dtype(name, "integer inputs", a)),
    }
}

fn int_binary<T: IntElem>(
    op: BinaryOp,
    a: &HostTensor,
    b: &HostTensor,
    shape: &[usize],
    name: &str,
) -> Result<HostTensor> {
    use BinaryOp as B;
    let out_empty = shape.contains(&0);
    match op {
        B::Add => map2(a, b, shape, name, |x: T, y: T| x.wadd(y)),
        B::Sub => map2(a, b, shape, name, |x: T, y: T| x.wsub(y)),
        B::Mul => map2(a, b, shape, name, |x: T, y: T| x.wmul(y)),
        B::Div | B::Rem | B::Mod => {
            // Every element of `b` reaches the output unless the output is empty.
            if !out_empty && any_element(b, name, |y: T| y == T::zero())? {
                return Err(Error::Value(format!(
                    "{name}: integer division by zero ({} {:?} by {:?})",
                    a.dtype(),
                    a.shape(),
                    b.shape()
                )));
            }
            match op {
                B::Div => map2(a, b, shape, name, |x: T, y: T| x.wdiv(y)),
                B::Rem => map2(a, b, shape, name, |x: T, y: T| x.wrem(y)),
                _ => map2(a, b, shape, name, |x: T, y: T| x.wmod(y)),
            }
        }
        B::Pow => {
            if !out_empty && any_element(b, name, |y: T| y < T::zero())? {
                return Err(Error::Value(format!(
                    "{name}: integer {} {:?} raised to a negative power (exponent shape {:?}); cast to float first",
                    a.dtype(),
                    a.shape(),
                    b.shape()
                )));
            }
            map2(a, b, shape, name, |x: T, y: T| x.wpow(y))
        }
        B::Max => map2(a, b, shape, name, |x: T, y: T| x.max(y)),
        B::Min => map2(a, b, shape, name, |x: T, y: T| x.min(y)),
        B::Eq => map2(a, b, shape, name, |x: T, y: T| x == y),
        B::Ne => map2(a, b, shape, name, |x: T, y: T| x != y),
        B::Lt => map2(a, b, shape, name, |x: T, y: T| x < y),
        B::Le => map2(a, b, shape, name, |x: T, y: T| x <= y),
        B::Gt => map2(a, b, shape, name, |x: T, y: T| x > y),
        B::Ge => map2(a, b, shape, name, |x: T, y: T| x >= y),
        B::And => map2(a, b, shape, name, |x: T, y: T| x & y),
        B::Or => map2(a, b, shape, name, |x: T, y: T| x | y),
        B::Xor => map2(a, b, shape, name, |x: T, y: T| x ^ y),
        B::Shl | B::Shr => {
            if !out_empty && any_element(b, name, |y: T| y < T::zero())? {
                return Err(Error::Value(format!(
                    "{name}: negative shift amount ({} {:?} shifted by {:?}); shift amounts must be >= 0",
                    a.dtype(),
                    a.shape(),
                    b.shape()
                )));
            }
            if op == B::Shl {
                map2(a, b, shape, name, |x: T, y: T| x.lshl(y))
            } else {
                map2(a, b, shape, name, |x: T, y: T| x.lshr(y))
            }
        }
    }
}

fn bool_binary(op: BinaryOp, a: &HostTensor, b: &HostTensor, shape: &[usize], name: &str) -> Result<HostTensor> {
    use BinaryOp as B;
    match op {
        B::Eq => map2(a, b, shape, name, |x: bool, y: bool| x == y),
        B::Ne | B::Xor => map2(a, b, shape, name, |x: bool, y: bool| x != y),
        // false < true, as for 0/1.
        B::Lt => map2(a, b, shape, name, |x: bool, y: bool| !x & y),
        B::Le => map2(a, b, shape, name, |x: bool, y: bool| !x | y),
        B::Gt => map2(a, b, shape, name, |x: bool, y: bool| x & !y),
        B::Ge => map2(a, b, shape, name, |x: bool, y: bool| x | !y),
        B::Max | B::Or => map2(a, b, shape, name, |x: bool, y: bool| x | y),
        B::Min | B::And => map2(a, b, shape, name, |x: bool, y: bool| x & y),
        B::Add | B::Sub | B::Mul | B::Div | B::Rem | B::Mod | B::Pow => Err(bad_dtype(name, "numeric inputs", a)),
        B::Shl | B::Shr => Err(bad_dtype(name, "integer inputs", a)),
    }
}

/// True when some element of `t` satisfies `pred`.
fn any_element<T: Element>(t: &HostTensor, name: &str, pred: impl Fn(T) -> bool) -> Result<bool> {
    let s = elements::<T>(t, name)?;
    if let Some(d) = t.dense_slice::<T>() {
        return Ok(d.iter().any(|&v| pred(v)));
    }
    let mut found = false;
    t.layout.for_each_offset(|o| found |= pred(s[o]));
    Ok(found)
}

/// The strided loop shared by elementwise, cast and reduce kernels.
///
/// The output is always dense. Inputs are broadcast to its shape; adjacent dims that are
/// contiguous for every operand are merged, so the innermost run is as long as possible, and
/// each run goes to a closure that picks a slice loop (all strides 1, which the compiler
/// vectorizes), a scalar loop (a stride 0: bias and scalar broadcasts) or an indexed loop.
/// Large outputs are cut into chunks that rayon threads fill independently.
pub(crate) mod iter {
    use kiln_ir::{Element, Error, HostTensor, Layout, Result};
    use rayon::prelude::*;

    /// Work (elements touched) below which a kernel stays on the calling thread.
    pub(crate) const PAR_MIN: usize = 1 << 15;

    /// The elements of `t` as `&[T]`, after checking that `t` holds `T` and that its layout
    /// stays inside its storage (so that the loops' indexing cannot panic).
    pub(crate) fn elements<'a, T: Element>(t: &'a HostTensor, op: &str) -> Result<&'a [T]> {
        let s = T::slice(&t.storage).ok_or_else(|| {
            Error::DType(format!("{op}: expected a {} tensor, got {} {:?}", T::DTYPE, t.dtype(), t.shape()))
        })?;
        let l = &t.layout;
        let bad = || {
            Error::Shape(format!(
                "{op}: layout (shape {:?}, strides {:?}, offset {}) reaches outside its storage of {} elements",
                l.shape,
                l.strides,
                l.offset,
                s.len()
            ))
        };
        if l.shape.len() != l.strides.len() {
            return Err(bad());
        }
        if l.numel() == 0 {
            return Ok(s);
        }
        let (mut lo, mut hi) = (l.offset as i128, l.offset as i128);
        for (&n, &st) in l.shape.iter().zip(&l.strides) {
            let span = (n as i128 - 1) * st as i128;
            if span < 0 { lo += span } else { hi += span }
        }
        if lo < 0 || hi >= s.len() as i128 {
            return Err(bad());
        }
        Ok(s)
    }

    /// Drops size-1 dims and merges neighbours that are contiguous with each other for every
    /// operand. Never empty: a scalar becomes one dim of size 1.
    pub(crate) fn coalesce<const N: usize>(
        dims: impl IntoIterator<Item = (usize, [isize; N])>,
    ) -> Vec<(usize, [isize; N])> {
        let mut out: Vec<(usize, [isize; N])> = Vec::new();
        for (n, st) in dims {
            if n == 1 {
                continue;
            }
            if let Some(last) = out.last_mut()
                && (0..N).all(|k| last.1[k] == st[k] * n as isize)
            {
                last.0 *= n;
                last.1 = st;
            } else {
                out.push((n, st));
            }
        }
        if out.is_empty() {
            out.push((1, [0; N]));
        }
        out
    }

    /// Calls `f(start, chunk)` over consecutive chunks of `out` (`start` is the chunk's index in
    /// `out`), on rayon threads when `out.len() * work_per_item` is large enough to pay for it.
    pub(crate) fn par_chunks<U: Send>(out: &mut [U], work_per_item: usize, f: impl Fn(usize, &mut [U]) + Sync) {
        let n = out.len();
        let work = work_per_item.max(1);
        let threads = rayon::current_num_threads();
        if threads <= 1 || n < 2 || n.saturating_mul(work) < PAR_MIN {
            f(0, out);
            return;
        }
        let min_items = (PAR_MIN / 2).div_ceil(work);
        let chunk = n.div_ceil(threads * 4).max(min_items);
        out.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i * chunk, c));
    }

    /// Storage index `base + i * stride`.
    #[inline(always)]
    pub(crate) fn at(base: usize, i: usize, stride: isize) -> usize {
        (base as isize + i as isize * stride) as usize
    }

    /// An iteration space over a dense output: coalesced dims, with one stride per operand.
    struct Space<const N: usize> {
        dims: Vec<(usize, [isize; N])>,
        base: [isize; N],
    }

    impl<const N: usize> Space<N> {
        /// `layouts` must already have `shape` (broadcast).
        fn new(shape: &[usize], layouts: [&Layout; N]) -> Space<N> {
            let dims = coalesce(
                (0..shape.len()).map(|i| (shape[i], std::array::from_fn(|k| layouts[k].strides[i]))),
            );
            Space { dims, base: std::array::from_fn(|k| layouts[k].offset as isize) }
        }

        /// Calls `f(pos, offsets, len)` for each run of the innermost dim that overlaps the
        /// output range `start..end`: `offsets` are the operands' storage indices at `pos`.
        fn for_each_run(&self, start: usize, end: usize, mut f: impl FnMut(usize, [usize; N], usize)) {
            if start >= end {
                return;
            }
            let rank = self.dims.len();
            let inner = self.dims[rank - 1].0;
            let mut idx = vec![0usize; rank];
            let mut rem = start;
            for d in (0..rank).rev() {
                idx[d] = rem % self.dims[d].0;
                rem /= self.dims[d].0;
            }
            let mut off = self.base;
            for (d, &i) in idx.iter().enumerate() {
                for (o, s) in off.iter_mut().zip(self.dims[d].1) {
                    *o += i as isize * s;
                }
            }
            let mut pos = start;
            while pos < end {
                let len = (inner - idx[rank - 1]).min(end - pos);
                f(pos, off.map(|o| o as usize), len);
                pos += len;
                if pos >= end {
                    return;
                }
                // Back to the start of the row, then advance the outer dims like an odometer.
                for (o, s) in off.iter_mut().zip(self.dims[rank - 1].1) {
                    *o -= idx[rank - 1] as isize * s;
                }
                idx[rank - 1] = 0;
                let mut d = rank - 1;
                loop {
                    if d == 0 {
                        return;
                    }
                    d -= 1;
                    idx[d] += 1;
                    for (o, s) in off.iter_mut().zip(self.dims[d].1) {
                        *o += s;
                    }
                    if idx[d] < self.dims[d].0 {
                        break;
                    }
                    for (o, s) in off.iter_mut().zip(self.dims[d].1) {
                        *o -= s * self.dims[d].0 as isize;
                    }
                    idx[d] = 0;
                }
            }
        }
    }

    /// Fills the dense `out` run by run: `run(out_run, offsets, inner_strides)`.
    fn fill<U: Send, const N: usize>(
        out: &mut [U],
        sp: &Space<N>,
        run: impl Fn(&mut [U], [usize; N], [isize; N]) + Sync,
    ) {
        let st = sp.dims[sp.dims.len() - 1].1;
        par_chunks(out, 1, |start, chunk| {
            sp.for_each_run(start, start + chunk.len(), |pos, off, len| {
                run(&mut chunk[pos - start..pos - start + len], off, st)
            })
        });
    }

    /// The layout of `t` broadcast to `shape`, with errors naming the op.
    fn broadcast(t: &HostTensor, shape: &[usize], op: &str) -> Result<Layout> {
        t.layout.broadcast_to(shape).map_err(|e| {
            Error::Shape(format!("{op}: cannot broadcast {:?} to the result shape {shape:?}: {e}", t.shape()))
        })
    }

    /// `f(x)` for every element, into a new dense tensor of `x`'s shape.
    pub(crate) fn map1<T: Element, U: Element>(
        x: &HostTensor,
        op: &str,
        f: impl Fn(T) -> U + Sync,
    ) -> Result<HostTensor> {
        let xs = elements::<T>(x, op)?;
        let sp = Space::new(x.shape(), [&x.layout]);
        let mut out = vec![U::zero(); x.numel()];
        fill(&mut out, &sp, |o, [xo], [xst]| match xst {
            1 => {
                let n = o.len();
                o.iter_mut().zip(&xs[xo..xo + n]).for_each(|(o, &v)| *o = f(v))
            }
            0 => o.fill(f(xs[xo])),
            s => o.iter_mut().enumerate().for_each(|(i, o)| *o = f(xs[at(xo, i, s)])),
        });
        HostTensor::from_vec(out, x.shape())
    }

    /// `f(a, b)` with both broadcast to `shape`, into a new dense tensor.
    pub(crate) fn map2<A: Element, B: Element, U: Element>(
        a: &HostTensor,
        b: &HostTensor,
        shape: &[usize],
        op: &str,
        f: impl Fn(A, B) -> U + Sync,
    ) -> Result<HostTensor> {
        let (xa, xb) = (elements::<A>(a, op)?, elements::<B>(b, op)?);
        let (la, lb) = (broadcast(a, shape, op)?, broadcast(b, shape, op)?);
        let sp = Space::new(shape, [&la, &lb]);
        let mut out = vec![U::zero(); shape.iter().product()];
        fill(&mut out, &sp, |o, [oa, ob], st| {
            let n = o.len();
            match st {
                [1, 1] => {
                    o.iter_mut().zip(&xa[oa..oa + n]).zip(&xb[ob..ob + n]).for_each(|((o, &x), &y)| *o = f(x, y))
                }
                [1, 0] => {
                    let y = xb[ob];
                    o.iter_mut().zip(&xa[oa..oa + n]).for_each(|(o, &x)| *o = f(x, y))
                }
                [0, 1] => {
                    let x = xa[oa];
                    o.iter_mut().zip(&xb[ob..ob + n]).for_each(|(o, &y)| *o = f(x, y))
                }
                [sa, sb] => o
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, o)| *o = f(xa[at(oa, i, sa)], xb[at(ob, i, sb)])),
            }
        });
        HostTensor::from_vec(out, shape)
    }

    /// `f(a, b, c)` with all three broadcast to `shape`, into a new dense tensor.
    pub(crate) fn map3<A: Element, B: Element, C: Element, U: Element>(
        a: &HostTensor,
        b: &HostTensor,
        c: &HostTensor,
        shape: &[usize],
        op: &str,
        f: impl Fn(A, B, C) -> U + Sync,
    ) -> Result<HostTensor> {
        let (xa, xb, xc) = (elements::<A>(a, op)?, elements::<B>(b, op)?, elements::<C>(c, op)?);
        let (la, lb, lc) = (broadcast(a, shape, op)?, broadcast(b, shape, op)?, broadcast(c, shape, op)?);
        let sp = Space::new(shape, [&la, &lb, &lc]);
        let mut out = vec![U::zero(); shape.iter().product()];
        fill(&mut out, &sp, |o, [oa, ob, oc], st| {
            let n = o.len();
            match st {
                [1, 1, 1] => o
                    .iter_mut()
                    .zip(&xa[oa..oa + n])
                    .zip(&xb[ob..ob + n])
                    .zip(&xc[oc..oc + n])
                    .for_each(|(((o, &x), &y), &z)| *o = f(x, y, z)),
                [sa, sb, sc] => o.iter_mut().enumerate().for_each(|(i, o)| {
                    *o = f(xa[at(oa, i, sa)], xb[at(ob, i, sb)], xc[at(oc, i, sc)])
                }),
            }
        });
        HostTensor::from_vec(out, shape)
    }
}

/// Per-dtype arithmetic the kernels are generic over.
mod num {
    use super::{bf16, f16};
    use kiln_ir::Element;
    use std::ops::{Add, BitAnd, BitOr, BitXor, Div, Mul, Neg, Not, Rem, Sub};

    /// The float type arithmetic is done in (f32 or f64).
    pub(crate) trait Real:
        Copy
        + PartialOrd
        + Send
        + Sync
        + Add<Output = Self>
        + Sub<Output = Self>
        + Mul<Output = Self>
        + Div<Output = Self>
        + Rem<Output = Self>
        + Neg<Output = Self>
    {
        const ZERO: Self;
        const ONE: Self;
        fn abs(self) -> Self;
        fn exp(self) -> Self;
        fn ln(self) -> Self;
        fn sqrt(self) -> Self;
        fn sin(self) -> Self;
        fn cos(self) -> Self;
        fn tan(self) -> Self;
        fn asin(self) -> Self;
        fn acos(self) -> Self;
        fn atan(self) -> Self;
        fn sinh(self) -> Self;
        fn cosh(self) -> Self;
        fn tanh(self) -> Self;
        fn asinh(self) -> Self;
        fn acosh(self) -> Self;
        fn atanh(self) -> Self;
        fn floor(self) -> Self;
        fn ceil(self) -> Self;
        fn round_ties_even(self) -> Self;
        fn erf(self) -> Self;
        fn erfc(self) -> Self;
        fn powf(self, e: Self) -> Self;
        fn is_nan(self) -> bool;
        fn is_infinite(self) -> bool;
    }

    macro_rules! real {
        ($t:ty: $($m:ident),*) => {
            impl Real for $t {
                const ZERO: $t = 0.0;
                const ONE: $t = 1.0;
                $(#[inline(always)] fn $m(self) -> Self { <$t>::$m(self) })*
                // Through f64: the f32 result is then correctly rounded in practice.
                #[inline(always)] fn erf(self) -> Self { crate::kernels::activation::erf(self as f64) as $t }
                #[inline(always)] fn erfc(self) -> Self { crate::kernels::activation::erfc(self as f64) as $t }
                #[inline(always)] fn powf(self, e: Self) -> Self { <$t>::powf(self, e) }
                #[inline(always)] fn is_nan(self) -> bool { <$t>::is_nan(self) }
                #[inline(always)] fn is_infinite(self) -> bool { <$t>::is_infinite(self) }
            }
        };
    }
    real!(f32: abs, exp, ln, sqrt, sin, cos, tan, asin, acos, atan, sinh, cosh, tanh, asinh, acosh, atanh, floor, ceil, round_ties_even);
    real!(f64: abs, exp, ln, sqrt, sin, cos, tan, asin, acos, atan, sinh, cosh, tanh, asinh, acosh, atanh, floor, ceil, round_ties_even);

    /// A stored float type and the type it computes in (half types widen to f32).
    pub(crate) trait FloatElem: Element {
        type C: Real;
        fn up(self) -> Self::C;
        fn down(c: Self::C) -> Self;
    }

    macro_rules! float_elem {
        ($t:ty, $c:ty, $up:expr, $down:expr) => {
            impl FloatElem for $t {
                type C = $c;
                #[inline(always)]
                fn up(self) -> $c {
                    let f: fn($t) -> $c = $up;
                    f(self)
                }
                #[inline(always)]
                fn down(c: $c) -> $t {
                    let f: fn($c) -> $t = $down;
                    f(c)
                }
            }
        };
    }
    float_elem!(f32, f32, |x| x, |x| x);
    float_elem!(f64, f64, |x| x, |x| x);
    float_elem!(f16, f32, f16::to_f32, f16::from_f32);
    float_elem!(bf16, f32, bf16::to_f32, bf16::from_f32);

    /// Integer arithmetic that never panics: wrapping on overflow, 0 for a zero divisor
    /// (callers reject zero divisors before the loop; this only keeps the loop panic-free).
    pub(crate) trait IntElem:
        Element + Ord + Not<Output = Self> + BitAnd<Output = Self> + BitOr<Output = Self> + BitXor<Output = Self>
    {
        fn wadd(self, o: Self) -> Self;
        fn wsub(self, o: Self) -> Self;
        fn wmul(self, o: Self) -> Self;
        fn wdiv(self, o: Self) -> Self;
        fn wrem(self, o: Self) -> Self;
        fn wneg(self) -> Self;
        fn wabs(self) -> Self;
        fn sign(self) -> Self;
        /// `self ** e` modulo 2^bits; 0 for a negative `e`.
        fn wpow(self, e: Self) -> Self;
        /// Floor modulo (the sign of the divisor); 0 for a zero divisor.
        fn wmod(self, o: Self) -> Self;
        /// Logical `self << s`; 0 for `s` outside `0..bits`.
        fn lshl(self, s: Self) -> Self;
        /// Logical `self >> s` (zeros shift in, also for signed types); 0 for `s` outside `0..bits`.
        fn lshr(self, s: Self) -> Self;
    }

    macro_rules! int_elem {
        ($t:ty, $abs:expr, $sign:expr) => {
            impl IntElem for $t {
                #[inline(always)] fn wadd(self, o: Self) -> Self { self.wrapping_add(o) }
                #[inline(always)] fn wsub(self, o: Self) -> Self { self.wrapping_sub(o) }
                #[inline(always)] fn wmul(self, o: Self) -> Self { self.wrapping_mul(o) }
                #[inline(always)] fn wdiv(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_div(o) } }
                #[inline(always)] fn wrem(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_rem(o) } }
                #[inline(always)] fn wneg(self) -> Self { self.wrapping_neg() }
                #[inline(always)] fn wabs(self) -> Self { let f: fn($t) -> $t = $abs; f(self) }
                #[inline(always)] fn sign(self) -> Self { let f: fn($t) -> $t = $sign; f(self) }
                #[inline(always)]
                fn wmod(self, o: Self) -> Self {
                    let z = <$t as Element>::zero();
                    let r = self.wrem(o);
                    if r != z && ((r < z) != (o < z)) { r.wrapping_add(o) } else { r }
                }
                #[inline(always)]
                fn lshl(self, s: Self) -> Self {
                    match u32::try_from(s) {
                        Ok(s) if s < <$t>::BITS => self.wrapping_shl(s),
                        _ => 0,
                    }
                }
                #[inline(always)]
                fn lshr(self, s: Self) -> Self {
                    match u32::try_from(s) {
                        // The mask clears the copies of the sign bit that `>>` shifts into signed types.
                        Ok(0) => self,
                        Ok(s) if s < <$t>::BITS => (self >> s) & !((!(0 as $t)) << (<$t>::BITS - s)),
                        _ => 0,
                    }
                }
                fn wpow(self, e: Self) -> Self {
                    #[allow(irrefutable_let_patterns)]
                    let Ok(mut e) = u64::try_from(e) else { return 0 };
                    let (mut base, mut acc): ($t, $t) = (self, 1);
                    while e > 0 {
                        if e & 1 == 1 {
                            acc = acc.wrapping_mul(base);
                        }
                        base = base.wrapping_mul(base);
                        e >>= 1;
                    }
                    acc
                }
            }
        };
    }
    int_elem!(i64, i64::wrapping_abs, i64::signum);
    int_elem!(i32, i32::wrapping_abs, i32::signum);
    int_elem!(i8, i8::wrapping_abs, i8::signum);
    int_elem!(i16, i16::wrapping_abs, i16::signum);
    // Unsigned: Abs is the identity, Sign is 0 or 1 (Neg wraps, through `wrapping_neg`).
    int_elem!(u8, |x| x, |x| x.min(1));
    int_elem!(u16, |x| x, |x| x.min(1));
    int_elem!(u32, |x| x, |x| x.min(1));
    int_elem!(u64, |x| x, |x| x.min(1));
}
