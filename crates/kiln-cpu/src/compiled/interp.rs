//! [`InterpKernels`]: a reference interpreter of the kernel IR.
//!
//! It evaluates a kernel a batch of outer points at a time: for each stage, every expression
//! becomes a vector over (batch points × the stage's inner loop points), computed by
//! [`crate::eval`] of the op it mirrors, so each value follows the reference kernels exactly
//! per dtype (rounding, wrapping, NaN rules) by construction. Both branches of a `Where` are
//! computed; a load out of its argument's range yields a placeholder and a "bad" mark, which
//! `Where` drops on the branch it does not take and which is an error if it reaches a store
//! or a reduction — so guarded loads work and unguarded out-of-range loads are caught.
//! It is the reference for the C renderer, not fast.

use super::launch::LaunchKernel;
use super::raw;
use kiln_ir::{DType, Element, Error, HostTensor, Layout, Op, Result};
use kiln_sched::{Expr, ExprId, Idx, Kernel, Literal, Loop, Stage};
use std::collections::HashMap;
use std::rc::Rc;

/// Elements per stage vector: bounds the interpreter's memory and keeps batches cache-sized.
const BATCH_ELEMS: usize = 1 << 14;

/// Runs kernels by interpreting their kernel IR (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct InterpKernels;

impl LaunchKernel for InterpKernels {
    fn launch(&self, kernel: &Kernel, args: &[*mut u8], begin: i64, end: i64) -> Result<()> {
        interpret(kernel, args, begin, end)
            .map_err(|e| e.context(&format!("kernel {}", kernel.name)))
    }
}

/// Interprets `k` over `begin..end` of its first outer loop.
fn interpret(k: &Kernel, args: &[*mut u8], begin: i64, end: i64) -> Result<()> {
    check_kernel(k, args)?;
    let (p0, p1) = match k.outer.first() {
        None => (0, 1),
        Some(l0) => {
            if begin < 0 || begin > end || end > l0.extent as i64 {
                return Err(Error::Value(format!(
                    "launch range {begin}..{end} is outside the first outer loop 0..{}",
                    l0.extent
                )));
            }
            let rest: usize = k.outer[1..].iter().map(|l| l.extent).product();
            (begin as usize * rest, end as usize * rest)
        }
    };
    let nvars = k
        .outer
        .iter()
        .chain(k.stages.iter().flat_map(|s| stage_loops(s).iter()))
        .map(|l| l.var as usize + 1)
        .max()
        .unwrap_or(0);
    let max_inner = k
        .stages
        .iter()
        .map(|s| numel(stage_loops(s)))
        .max()
        .unwrap_or(1)
        .max(1);
    let batch = (BATCH_ELEMS / max_inner).max(1);
    let mut p = p0;
    while p < p1 {
        let q = (p + batch).min(p1);
        run_batch(k, args, p, q, nvars)?;
        p = q;
    }
    Ok(())
}

/// Checks what the interpreter relies on: argument count, operand order, dtypes of loads.
fn check_kernel(k: &Kernel, args: &[*mut u8]) -> Result<()> {
    if args.len() != k.args.len() {
        return Err(Error::Graph(format!(
            "launched with {} arguments, declares {}",
            args.len(),
            k.args.len()
        )));
    }
    for (id, node) in k.exprs.iter().enumerate() {
        if let Expr::Load { arg, .. } = &node.expr {
            let a = k.args.get(*arg as usize).ok_or_else(|| {
                Error::Graph(format!(
                    "expr {id} loads argument {arg} of {}",
                    k.args.len()
                ))
            })?;
            if a.dtype != node.dtype {
                return Err(Error::DType(format!(
                    "expr {id} loads {} argument {arg} as {}",
                    a.dtype, node.dtype
                )));
            }
        }
        if let Some(bad) = node.expr.operands().iter().find(|&&o| o as usize >= id) {
            return Err(Error::Graph(format!(
                "expr {id} uses expr {bad}, which does not come before it"
            )));
        }
    }
    Ok(())
}

fn stage_loops(s: &Stage) -> &[Loop] {
    match s {
        Stage::Reduce { loops, .. } | Stage::Store { loops, .. } => loops,
    }
}

fn numel(loops: &[Loop]) -> usize {
    loops.iter().map(|l| l.extent).product()
}

/// Runs every stage for the flat outer points `p0..p1`.
fn run_batch(k: &Kernel, args: &[*mut u8], p0: usize, p1: usize, nvars: usize) -> Result<()> {
    let mut locals: HashMap<u32, HostTensor> = HashMap::new();
    for (si, stage) in k.stages.iter().enumerate() {
        let dom = Domain {
            outer: &k.outer,
            p0,
            p1,
            inner: stage_loops(stage),
            nvars,
        };
        let mut ev = StageEval {
            k,
            args,
            dom: &dom,
            memo: HashMap::new(),
            locals: &locals,
        };
        let at = || format!("stage {si}");
        match stage {
            Stage::Reduce {
                op,
                value,
                local,
                dtype,
                ..
            } => {
                let v = ev.eval(*value)?;
                ev.check_good(&v).map_err(|e| e.context(&at()))?;
                let mut t = ev.full(&v.t);
                if t.dtype() != *dtype {
                    t = crate::eval(&Op::Cast(*dtype), &[&t])?;
                }
                let rows = p1 - p0;
                let t = t
                    .contiguous()
                    .with_layout(Layout::contiguous(&[rows, numel(stage_loops(stage))]));
                let r = crate::eval(
                    &Op::Reduce {
                        op: *op,
                        axes: vec![1],
                        keep_dims: false,
                    },
                    &[&t],
                )
                .map_err(|e| e.context(&at()))?;
                locals.insert(*local, r);
            }
            Stage::Store {
                arg, index, value, ..
            } => {
                let a = k.args.get(*arg as usize).ok_or_else(|| {
                    Error::Graph(format!(
                        "{}: stores to argument {arg} of {}",
                        at(),
                        k.args.len()
                    ))
                })?;
                if !a.written {
                    return Err(Error::Graph(format!(
                        "{}: stores to argument {arg}, not marked written",
                        at()
                    )));
                }
                let v = ev.eval(*value)?;
                ev.check_good(&v).map_err(|e| e.context(&at()))?;
                if v.t.dtype() != a.dtype {
                    return Err(Error::DType(format!(
                        "{}: stores a {} value to {} argument {arg}",
                        at(),
                        v.t.dtype(),
                        a.dtype
                    )));
                }
                let t = ev.full(&v.t);
                let idx = dom.indices(index);
                if let Some(&bad) = idx.iter().find(|&&i| i < 0 || i as usize >= a.len) {
                    return Err(Error::Value(format!(
                        "{}: store index {bad} is outside argument {arg} (0..{})",
                        at(),
                        a.len
                    )));
                }
                let base = args[*arg as usize];
                kiln_ir::with_dtype!(a.dtype, T, {
                    let vals = t.to_vec::<T>()?;
                    for (&i, v) in idx.iter().zip(vals) {
                        // SAFETY: `i` was checked against the argument's length, and the
                        // launch contract says the argument holds that many elements.
                        unsafe { raw::write::<T>(base, i as usize, v) };
                    }
                });
            }
        }
    }
    Ok(())
}

/// The points one stage runs over: the flat outer points `p0..p1`, each with every point of
/// the stage's inner loops, in row-major order (outer-major).
struct Domain<'a> {
    outer: &'a [Loop],
    p0: usize,
    p1: usize,
    inner: &'a [Loop],
    nvars: usize,
}

impl Domain<'_> {
    /// Number of points.
    fn len(&self) -> usize {
        (self.p1 - self.p0) * numel(self.inner)
    }

    /// Inner points per outer point.
    fn inner_len(&self) -> usize {
        numel(self.inner)
    }

    /// Calls `f` with the loop variables at every point.
    fn for_each(&self, mut f: impl FnMut(&[i64])) {
        let mut vars = vec![0i64; self.nvars];
        if self.inner.iter().any(|l| l.extent == 0) {
            return;
        }
        'points: for p in self.p0..self.p1 {
            let mut rem = p;
            for l in self.outer.iter().rev() {
                vars[l.var as usize] = (rem % l.extent.max(1)) as i64;
                rem /= l.extent.max(1);
            }
            for l in self.inner {
                vars[l.var as usize] = 0;
            }
            loop {
                f(&vars);
                // Advance the inner loops like an odometer; past the last point, next outer point.
                let mut d = self.inner.len();
                loop {
                    if d == 0 {
                        continue 'points;
                    }
                    d -= 1;
                    let v = &mut vars[self.inner[d].var as usize];
                    *v += 1;
                    if (*v as usize) < self.inner[d].extent {
                        break;
                    }
                    *v = 0;
                }
            }
        }
    }

    /// The value of `idx` at every point.
    fn indices(&self, idx: &Idx) -> Vec<i64> {
        let mut out = Vec::with_capacity(self.len());
        self.for_each(|vars| out.push(idx.eval(vars)));
        out
    }
}

/// A stage vector (shape `[n]`) or a scalar (shape `[]`, from constants only), with the
/// points whose value came from an out-of-range load.
#[derive(Clone)]
struct Val {
    t: HostTensor,
    bad: Option<Rc<Vec<bool>>>,
    /// Which load went out of range first, for the error message.
    note: Option<Rc<String>>,
}

impl Val {
    fn good(t: HostTensor) -> Val {
        Val {
            t,
            bad: None,
            note: None,
        }
    }

    fn bad_at(&self, i: usize) -> bool {
        self.bad.as_ref().is_some_and(|b| b[i])
    }
}

/// Evaluates expressions over one stage's domain, each once.
struct StageEval<'a> {
    k: &'a Kernel,
    args: &'a [*mut u8],
    dom: &'a Domain<'a>,
    memo: HashMap<ExprId, Val>,
    locals: &'a HashMap<u32, HostTensor>,
}

impl StageEval<'_> {
    /// `t` as a vector over the whole domain (scalars broadcast).
    fn full(&self, t: &HostTensor) -> HostTensor {
        let n = self.dom.len();
        if t.shape() == [n] {
            return t.clone();
        }
        t.with_layout(Layout {
            shape: vec![n],
            strides: vec![0],
            offset: t.layout.offset,
        })
        .contiguous()
    }

    fn check_good(&self, v: &Val) -> Result<()> {
        if v.bad.as_ref().is_some_and(|b| b.iter().any(|&x| x)) {
            let what = v.note.as_deref().map_or("a load", |s| s.as_str());
            return Err(Error::Value(format!(
                "{what} is out of range and not guarded by a Where"
            )));
        }
        Ok(())
    }

    fn eval(&mut self, id: ExprId) -> Result<Val> {
        if let Some(v) = self.memo.get(&id) {
            return Ok(v.clone());
        }
        let v = self
            .compute(id)
            .map_err(|e| e.context(&format!("expr {id}")))?;
        let want = self.k.expr(id).dtype;
        if v.t.dtype() != want {
            return Err(Error::DType(format!(
                "expr {id} computes {} but is declared {want}",
                v.t.dtype()
            )));
        }
        self.memo.insert(id, v.clone());
        Ok(v)
    }

    fn compute(&mut self, id: ExprId) -> Result<Val> {
        let node = self.k.expr(id);
        let dtype = node.dtype;
        let n = self.dom.len();
        Ok(match &node.expr {
            Expr::Load { arg, index } => self.load(*arg, index, dtype)?,
            Expr::Const(l) => Val::good(literal(*l, dtype)?),
            Expr::Unary { op, x } => {
                let x = self.eval(*x)?;
                Val {
                    t: crate::eval(&Op::Unary(*op), &[&x.t])?,
                    ..x
                }
            }
            Expr::Cast { x } => {
                let x = self.eval(*x)?;
                Val {
                    t: crate::eval(&Op::Cast(dtype), &[&x.t])?,
                    ..x
                }
            }
            Expr::Binary { op, a, b } => {
                let (a, b) = (self.eval(*a)?, self.eval(*b)?);
                let t = crate::eval(&Op::Binary(*op), &[&a.t, &b.t])?;
                let bad = merge(
                    n,
                    |i| a.bad_at(i) || b.bad_at(i),
                    a.bad.is_some() || b.bad.is_some(),
                );
                Val {
                    t,
                    bad,
                    note: a.note.or(b.note),
                }
            }
            Expr::Where { cond, a, b } => {
                let (c, a, b) = (self.eval(*cond)?, self.eval(*a)?, self.eval(*b)?);
                let t = crate::eval(&Op::Where, &[&c.t, &a.t, &b.t])?;
                let any = c.bad.is_some() || a.bad.is_some() || b.bad.is_some();
                let bad = if any {
                    let cv = self.full(&c.t).to_vec::<bool>()?;
                    merge(
                        n,
                        |i| c.bad_at(i) || if cv[i] { a.bad_at(i) } else { b.bad_at(i) },
                        true,
                    )
                } else {
                    None
                };
                Val {
                    t,
                    bad,
                    note: c.note.or(a.note).or(b.note),
                }
            }
            Expr::InRange { index, lo, hi } => {
                let v: Vec<bool> = self
                    .dom
                    .indices(index)
                    .iter()
                    .map(|i| lo <= i && i < hi)
                    .collect();
                Val::good(HostTensor::from_vec(v, &[n])?)
            }
            Expr::Index(index) => {
                let t = HostTensor::from_vec(self.dom.indices(index), &[n])?;
                Val::good(if dtype == DType::I64 {
                    t
                } else {
                    crate::eval(&Op::Cast(dtype), &[&t])?
                })
            }
            Expr::Local(l) => {
                let t = self.locals.get(l).ok_or_else(|| {
                    Error::Graph(format!("reads local {l} before a Reduce stage computes it"))
                })?;
                // Each outer point's local, repeated over the stage's inner points.
                let layout = Layout {
                    shape: vec![t.numel(), self.dom.inner_len()],
                    strides: vec![1, 0],
                    offset: t.layout.offset,
                };
                let t = t.with_layout(layout).contiguous();
                Val::good(t.with_layout(Layout::contiguous(&[n])))
            }
        })
    }

    fn load(&self, arg: u32, index: &Idx, dtype: DType) -> Result<Val> {
        let len = self.k.args[arg as usize].len;
        let base = self.args[arg as usize] as *const u8;
        let idx = self.dom.indices(index);
        let mut bad = vec![false; idx.len()];
        let mut first = None;
        let t = kiln_ir::with_dtype!(dtype, T, {
            let mut v: Vec<T> = Vec::with_capacity(idx.len());
            for (j, &i) in idx.iter().enumerate() {
                if i >= 0 && (i as usize) < len {
                    // SAFETY: `i` is inside the argument's declared length, which the
                    // launch contract guarantees is backed by memory.
                    v.push(unsafe { raw::read::<T>(base, i as usize) });
                } else {
                    bad[j] = true;
                    first.get_or_insert(i);
                    v.push(T::zero());
                }
            }
            HostTensor::from_vec(v, &[idx.len()])?
        });
        Ok(match first {
            None => Val::good(t),
            Some(i) => Val {
                t,
                bad: Some(Rc::new(bad)),
                note: Some(Rc::new(format!(
                    "load of argument {arg} at index {i} (length {len})"
                ))),
            },
        })
    }
}

/// The bad-point mask `f(i)` over `n` points, or `None` when no operand had one.
fn merge(n: usize, f: impl Fn(usize) -> bool, any: bool) -> Option<Rc<Vec<bool>>> {
    any.then(|| Rc::new((0..n).map(f).collect()))
}

/// A literal as a scalar of `dtype`, converted as [`Op::Cast`] converts.
fn literal(l: Literal, dtype: DType) -> Result<HostTensor> {
    let src = match l {
        Literal::Float(f) => HostTensor::scalar(f),
        Literal::Int(i) => match (i64::try_from(i), u64::try_from(i)) {
            (Ok(v), _) => HostTensor::scalar(v),
            (_, Ok(v)) => HostTensor::scalar(v),
            // Out of every 64-bit range: integer targets keep the low bits (wrapping), as
            // a cast wraps; float targets take the nearest value.
            _ if dtype.is_float() => HostTensor::scalar(i as f64),
            _ => HostTensor::scalar(i as u64),
        },
    };
    crate::eval(&Op::Cast(dtype), &[&src])
}
