//! One [`Kernel`] as a C function: argument pointers, the outer loop nest (OpenMP parallel),
//! and each stage's inner loops with its expressions as named variables.
//!
//! Expressions are evaluated eagerly, one `const` variable per node, in id order; a
//! [`Expr::Where`] then selects. Both branches are computed, so a load that only a Where
//! branch uses may see an index outside its buffer (the kernel IR allows that on the branch
//! not taken): such loads clamp their index into the buffer, and their value is discarded.
//! Integer division by zero cannot trap either (the prelude's helpers return 0 for it).

use super::expr::{self, ctype, storage_ctype};
use kiln_ir::{DType, Error, ReduceOp, Result};
use kiln_sched::kernel::{Expr, ExprId, Idx, Kernel, Loop, Stage};
use std::fmt::Write;

/// Work (expression evaluations) below which a launch stays on the calling thread: handing
/// work to other threads costs a few microseconds.
pub const PAR_MIN_WORK: u64 = 32768;

/// Work (expression evaluations) of one index of the first outer loop: what a runtime weighs
/// when it splits a launch's range over threads.
pub fn work_per_row(k: &Kernel) -> u64 {
    k.outer
        .iter()
        .skip(1)
        .fold(work_per_point(k), |acc, l| {
            acc.saturating_mul(l.extent as u64)
        })
        .max(1)
}

/// The C function for `k` (without the prelude).
pub fn render_kernel(k: &Kernel) -> Result<String> {
    check_identifier(&k.name)?;
    let mut w = Writer::default();
    let outer: Vec<String> = k
        .outer
        .iter()
        .map(|l| format!("i{} < {}", l.var, l.extent))
        .collect();
    w.line(&format!(
        "/* kernel {}: outer loops [{}], {} stage(s) */",
        k.name,
        outer.join(", "),
        k.stages.len()
    ));
    w.open(&format!(
        "void {}(void* const* args, int64_t begin, int64_t end)",
        k.name
    ));
    for (i, a) in k.args.iter().enumerate() {
        let ty = storage_ctype(a.dtype);
        let (name, konst) = arg_name(k, i as u32);
        w.line(&format!(
            "{konst}{ty}* {name} = ({konst}{ty}*)args[{i}]; /* {} [{}] */",
            a.dtype, a.len
        ));
    }
    let locals = local_dtypes(k)?;
    let body = |w: &mut Writer| -> Result<()> {
        for (s, stage) in k.stages.iter().enumerate() {
            render_stage(w, k, s, stage, &locals, false)?;
        }
        Ok(())
    };
    match k.outer.split_first() {
        None => {
            w.line("/* one point: the launch range does not apply */");
            w.line("(void)begin;");
            w.line("(void)end;");
            body(&mut w)?;
        }
        Some((first, rest)) => {
            w.line("if (begin < 0) begin = 0;");
            w.line(&format!(
                "if (end > {}) end = {};",
                first.extent, first.extent
            ));
            // No `omp parallel` here: the runtime splits begin..end over its thread pool (the
            // one the GEMMs use), because two pools on the same cores fight (an OpenMP team
            // spinning after each kernel made resnet50 8x slower next to the GEMM's threads).
            w.open(&format!(
                "for (int64_t i{v} = begin; i{v} < end; i{v}++)",
                v = first.var
            ));
            // A peeled kernel renders its innermost loop itself.
            let peeled = Peel::plan(k)?.zip(rest.split_last());
            let open = peeled.as_ref().map_or(rest, |(_, (_, middle))| *middle);
            for l in open {
                w.open(&loop_header(l));
            }
            match &peeled {
                Some((peel, (inner, _))) => peel.render(&mut w, k, inner, &locals)?,
                None => body(&mut w)?,
            }
            for _ in open {
                w.close();
            }
            w.close();
        }
    }
    w.close();
    Ok(w.out)
}

/// The innermost outer loop of a one-stage store kernel split in three (as TVM and Halide
/// peel loops): the interior, where every `InRange` test holds and every load under a Where
/// branch is inside its buffer, runs without the tests and clamps — a body the C compiler
/// vectorises — and the edges before and after it run the guarded body. Resnet's stem
/// max pool over its -inf padding is such a kernel.
struct Peel {
    /// Per guard: `lb <= a * v + rest < hb` must hold in the interior (`v` the loop's var).
    guards: Vec<(i64, Idx, i64, i64)>,
}

impl Peel {
    /// The guards of `k`'s innermost outer loop, when `k` is one store stage with no inner
    /// loops, has two or more outer loops and every guard's index is affine in that loop.
    fn plan(k: &Kernel) -> Result<Option<Peel>> {
        let ([Stage::Store { loops, value, .. }], Some(inner)) = (&k.stages[..], k.outer.last())
        else {
            return Ok(None);
        };
        if !loops.is_empty() || k.outer.len() < 2 {
            return Ok(None);
        }
        let marks = needed(k, *value)?;
        let mut guards = Vec::new();
        for (id, mark) in marks.iter().enumerate() {
            let (index, lb, hb) = match (&k.exprs[id].expr, mark) {
                (Expr::InRange { index, lo, hi }, Some(_)) => (index, *lo, *hi),
                (Expr::Load { arg, index }, Some(false)) => {
                    let len = k.args.get(*arg as usize).map_or(0, |a| a.len);
                    (index, 0, i64::try_from(len).unwrap_or(i64::MAX))
                }
                _ => continue,
            };
            let Some((a, rest)) = split_var(index, inner.var) else {
                return Ok(None);
            };
            guards.push((a, rest, lb, hb));
        }
        Ok((!guards.is_empty()).then_some(Peel { guards }))
    }

    /// The loop `l` (the innermost) as edge, interior and edge loops around the one stage.
    fn render(&self, w: &mut Writer, k: &Kernel, l: &Loop, locals: &[Option<DType>]) -> Result<()> {
        let v = l.var;
        w.open("");
        w.line(&format!("int64_t lo{v} = 0, hi{v} = {};", l.extent));
        for (a, rest, lb, hb) in &self.guards {
            w.line(&format!(
                "kc_peel(&lo{v}, &hi{v}, {a}, {}, {lb}, {hb});",
                expr::index(rest)
            ));
        }
        w.line(&format!("if (hi{v} < lo{v}) hi{v} = lo{v};"));
        for (from, to, interior) in [
            ("0".to_string(), format!("lo{v}"), false),
            (format!("lo{v}"), format!("hi{v}"), true),
            (format!("hi{v}"), l.extent.to_string(), false),
        ] {
            w.open(&format!("for (int64_t i{v} = {from}; i{v} < {to}; i{v}++)"));
            render_stage(w, k, 0, &k.stages[0], locals, interior)?;
            w.close();
        }
        w.close();
        Ok(())
    }
}

/// `index` as `a * v + rest` with `rest` free of `v`, when `index` is affine in `v`.
fn split_var(index: &Idx, v: u32) -> Option<(i64, Idx)> {
    match index {
        Idx::Var(u) if *u == v => Some((1, Idx::Const(0))),
        Idx::Var(_) | Idx::Const(_) => Some((0, index.clone())),
        Idx::Add(terms) => terms.iter().try_fold((0i64, Idx::Const(0)), |(a, r), t| {
            let (ta, tr) = split_var(t, v)?;
            Some((a.checked_add(ta)?, r.add(tr)))
        }),
        Idx::Mul(x, c) => {
            let (a, r) = split_var(x, v)?;
            Some((a.checked_mul(*c)?, r.mul(*c)))
        }
        Idx::Div(..) | Idx::Mod(..) => (!index.uses(v)).then(|| (0, index.clone())),
    }
}

/// The argument's pointer name: `out{i}` when the kernel writes it, `in{i}` (const) otherwise.
fn arg_name(k: &Kernel, i: u32) -> (String, &'static str) {
    match k.args.get(i as usize) {
        Some(a) if a.written => (format!("out{i}"), ""),
        _ => (format!("in{i}"), "const "),
    }
}

fn check_identifier(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::Unsupported(format!(
            "C codegen: kernel name {name:?} is not a C identifier"
        )))
    }
}

/// The accumulator dtype of each reduction local, checking that each local is defined once.
fn local_dtypes(k: &Kernel) -> Result<Vec<Option<DType>>> {
    let mut out: Vec<Option<DType>> = Vec::new();
    for s in &k.stages {
        if let Stage::Reduce { local, dtype, .. } = s {
            let l = *local as usize;
            if out.len() <= l {
                out.resize(l + 1, None);
            }
            if out[l].is_some() {
                return Err(Error::Unsupported(format!(
                    "C codegen, kernel {}: local {l} is reduced twice",
                    k.name
                )));
            }
            out[l] = Some(*dtype);
        }
    }
    Ok(out)
}

fn stage_loops(s: &Stage) -> &[Loop] {
    match s {
        Stage::Reduce { loops, .. } | Stage::Store { loops, .. } => loops,
    }
}

fn stage_value(s: &Stage) -> ExprId {
    match s {
        Stage::Reduce { value, .. } | Stage::Store { value, .. } => *value,
    }
}

/// Expression evaluations per outer point (for the parallel threshold).
fn work_per_point(k: &Kernel) -> u64 {
    k.stages
        .iter()
        .map(|s| {
            let points = stage_loops(s)
                .iter()
                .fold(1u64, |acc, l| acc.saturating_mul(l.extent as u64));
            let exprs = needed(k, stage_value(s))
                .map(|n| n.iter().flatten().count())
                .unwrap_or(1) as u64;
            points.saturating_mul(exprs + 1)
        })
        .fold(0u64, u64::saturating_add)
}

fn loop_header(l: &Loop) -> String {
    format!(
        "for (int64_t i{v} = 0; i{v} < {e}; i{v}++)",
        v = l.var,
        e = l.extent
    )
}

/// For each expression, whether `root` needs it: `Some(true)` when on some path that passes
/// through no Where branch (its evaluation is safe), `Some(false)` when only under branches.
fn needed(k: &Kernel, root: ExprId) -> Result<Vec<Option<bool>>> {
    let n = k.exprs.len();
    if root as usize >= n {
        return Err(Error::Unsupported(format!(
            "C codegen, kernel {}: stage value v{root} does not exist",
            k.name
        )));
    }
    let mut marks: Vec<Option<bool>> = vec![None; n];
    marks[root as usize] = Some(true);
    for id in (0..=root as usize).rev() {
        let Some(safe) = marks[id] else { continue };
        let mut mark = |x: ExprId, edge_safe: bool| {
            if let Some(m) = marks.get_mut(x as usize)
                && (x as usize) < id
            {
                *m = Some(m.unwrap_or(false) || (safe && edge_safe));
            }
        };
        match &k.exprs[id].expr {
            Expr::Unary { x, .. } | Expr::Cast { x } => mark(*x, true),
            Expr::Binary { a, b, .. } => {
                mark(*a, true);
                mark(*b, true);
            }
            Expr::Where { cond, a, b } => {
                mark(*cond, true);
                mark(*a, false);
                mark(*b, false);
            }
            Expr::Load { .. }
            | Expr::Const(_)
            | Expr::InRange { .. }
            | Expr::Index(_)
            | Expr::Local(_) => {}
        }
    }
    Ok(marks)
}

/// Emits `const T v{id} = ...;` for every expression `root` needs, in id order.
fn render_exprs(
    w: &mut Writer,
    k: &Kernel,
    root: ExprId,
    locals: &[Option<DType>],
    defined: &[bool],
    interior: bool,
) -> Result<()> {
    let marks = needed(k, root)?;
    let local_dtype = |l: u32| -> Option<DType> {
        let l = l as usize;
        if defined.get(l).copied().unwrap_or(false) {
            locals.get(l).copied().flatten()
        } else {
            None
        }
    };
    for (id, mark) in marks.iter().enumerate() {
        let Some(safe) = *mark else { continue };
        let access = |arg: u32, index: &Idx| -> Result<String> {
            let (name, _) = arg_name(k, arg);
            let len = k.args.get(arg as usize).map_or(0, |a| a.len);
            Ok(if safe || interior {
                format!("{name}[{}]", expr::index(index))
            } else if len == 0 {
                // Never taken: there is no element to read.
                "0".to_string()
            } else {
                format!("{name}[kc_clamp({}, {len})]", expr::index(index))
            })
        };
        let id = id as ExprId;
        let value = match &k.expr(id).expr {
            // Inside a peeled loop's interior every padding test holds (see `Peel`).
            Expr::InRange { .. } if interior => "1".to_string(),
            _ => expr::render(k, id, &local_dtype, &access)?,
        };
        w.line(&format!(
            "const {} v{id} = {value};",
            ctype(k.expr(id).dtype)
        ));
    }
    Ok(())
}

/// Emits stage `s`; `interior`: inside a peeled loop's interior (see [`Peel`]).
fn render_stage(
    w: &mut Writer,
    k: &Kernel,
    s: usize,
    stage: &Stage,
    locals: &[Option<DType>],
    interior: bool,
) -> Result<()> {
    // Locals of earlier stages only.
    let mut defined = vec![false; locals.len()];
    for earlier in &k.stages[..s] {
        if let Stage::Reduce { local, .. } = earlier {
            defined[*local as usize] = true;
        }
    }
    let loop_names: Vec<String> = stage_loops(stage)
        .iter()
        .map(|l| format!("i{} < {}", l.var, l.extent))
        .collect();
    match stage {
        Stage::Store {
            loops,
            arg,
            index,
            value,
        } => {
            let a = k.args.get(*arg as usize).ok_or_else(|| {
                Error::Unsupported(format!(
                    "C codegen, kernel {}: stage {s} stores to missing argument {arg}",
                    k.name
                ))
            })?;
            let vt = k.exprs.get(*value as usize).map(|e| e.dtype);
            if !a.written || vt != Some(a.dtype) {
                return Err(Error::Unsupported(format!(
                    "C codegen, kernel {}: stage {s} stores a {vt:?} value to argument {arg} ({}, written: {})",
                    k.name, a.dtype, a.written
                )));
            }
            w.line(&format!(
                "/* stage {s}: store to out{arg} over [{}] */",
                loop_names.join(", ")
            ));
            w.open("");
            for l in loops {
                w.open(&loop_header(l));
            }
            render_exprs(w, k, *value, locals, &defined, interior)?;
            let stored = expr::store(a.dtype, &format!("v{value}"));
            w.line(&format!("out{arg}[{}] = {stored};", expr::index(index)));
            for _ in loops {
                w.close();
            }
            w.close();
        }
        Stage::Reduce {
            loops,
            op,
            value,
            local,
            dtype,
        } => {
            let vt = k
                .exprs
                .get(*value as usize)
                .map(|e| e.dtype)
                .unwrap_or(*dtype);
            let red = Reduction::new(k, *op, *dtype, *local)?;
            w.line(&format!(
                "/* stage {s}: reduce {op:?} over [{}] -> acc{local} ({dtype}){} */",
                loop_names.join(", "),
                red.note
            ));
            w.line(&red.decl);
            w.open("");
            for (d, l) in loops.iter().enumerate() {
                if d + 1 == loops.len()
                    && let Some(p) = &red.pragma
                {
                    w.line(p);
                }
                w.open(&loop_header(l));
            }
            render_exprs(w, k, *value, locals, &defined, interior)?;
            w.line(&red.step(&expr::convert(&format!("v{value}"), vt, *dtype)));
            for _ in loops {
                w.close();
            }
            w.close();
            if let Some(fin) = &red.finish {
                w.line(fin);
            }
        }
    }
    Ok(())
}

/// How one reduction accumulates: declaration, loop pragma, per-element step and the final
/// conversion into `acc{local}`.
struct Reduction {
    decl: String,
    pragma: Option<String>,
    /// The accumulator update with `{}` standing for the value.
    step: String,
    finish: Option<String>,
    note: &'static str,
}

impl Reduction {
    fn new(k: &Kernel, op: ReduceOp, dt: DType, local: u32) -> Result<Reduction> {
        let acc = format!("acc{local}");
        let bad = || {
            Error::Unsupported(format!(
                "C codegen, kernel {}: reduce {op:?} accumulated in {dt}",
                k.name
            ))
        };
        let ty = ctype(dt);
        match dt {
            DType::F32 | DType::F64 => {
                let f = dt == DType::F32;
                let (zero, one, inf) = if f {
                    ("0.0f", "1.0f", "INFINITY")
                } else {
                    ("0.0", "1.0", "(double)INFINITY")
                };
                let sfx = if f { "f" } else { "" };
                Ok(match op {
                    // The simd reduction lets the compiler reassociate the sum (vector lanes
                    // of partial sums): a rounding difference from the sequential order, as
                    // in any blocked or parallel sum.
                    ReduceOp::Sum => Reduction {
                        decl: format!("{ty} {acc} = {zero};"),
                        pragma: Some(format!("#pragma omp simd reduction(+:{acc})")),
                        step: format!("{acc} += {{}};"),
                        finish: None,
                        note: ", reassociated by simd",
                    },
                    ReduceOp::Prod => Reduction {
                        decl: format!("{ty} {acc} = {one};"),
                        pragma: Some(format!("#pragma omp simd reduction(*:{acc})")),
                        step: format!("{acc} *= {{}};"),
                        finish: None,
                        note: ", reassociated by simd",
                    },
                    // NaN wins, so no simd max (its NaN handling is unspecified).
                    ReduceOp::Max => Reduction {
                        decl: format!("{ty} {acc} = -{inf};"),
                        pragma: None,
                        step: format!("{acc} = kc_max{sfx}({acc}, {{}});"),
                        finish: None,
                        note: ", NaN wins",
                    },
                    ReduceOp::Min => Reduction {
                        decl: format!("{ty} {acc} = {inf};"),
                        pragma: None,
                        step: format!("{acc} = kc_min{sfx}({acc}, {{}});"),
                        finish: None,
                        note: ", NaN wins",
                    },
                    ReduceOp::Mean => return Err(bad()),
                })
            }
            DType::I64
            | DType::I32
            | DType::I16
            | DType::I8
            | DType::U64
            | DType::U32
            | DType::U16
            | DType::U8 => {
                // Sum and product wrap: accumulate in the unsigned wide type (no signed
                // overflow), whose value modulo 2^bits is the narrow type's.
                let wide = if dt.size_of() == 8 {
                    "uint64_t"
                } else {
                    "uint32_t"
                };
                let (lo, hi) = int_range(dt);
                Ok(match op {
                    ReduceOp::Sum | ReduceOp::Prod => {
                        let (init, sym) = if op == ReduceOp::Sum {
                            ("0", "+")
                        } else {
                            ("1", "*")
                        };
                        Reduction {
                            decl: format!("{wide} {acc}_w = {init};"),
                            pragma: Some(format!("#pragma omp simd reduction({sym}:{acc}_w)")),
                            step: format!("{acc}_w {sym}= ({wide}){{}};"),
                            finish: Some(format!("const {ty} {acc} = ({ty}){acc}_w;")),
                            note: ", wrapping",
                        }
                    }
                    ReduceOp::Max => Reduction {
                        decl: format!("{ty} {acc} = {lo};"),
                        pragma: Some(format!("#pragma omp simd reduction(max:{acc})")),
                        step: format!("{acc} = {{}} > {acc} ? {{}} : {acc};"),
                        finish: None,
                        note: "",
                    },
                    ReduceOp::Min => Reduction {
                        decl: format!("{ty} {acc} = {hi};"),
                        pragma: Some(format!("#pragma omp simd reduction(min:{acc})")),
                        step: format!("{acc} = {{}} < {acc} ? {{}} : {acc};"),
                        finish: None,
                        note: "",
                    },
                    ReduceOp::Mean => return Err(bad()),
                })
            }
            _ => Err(bad()),
        }
    }

    fn step(&self, value: &str) -> String {
        self.step.replace("{}", value)
    }
}

/// The C limits of an integer dtype.
fn int_range(dt: DType) -> (&'static str, &'static str) {
    match dt {
        DType::I64 => ("INT64_MIN", "INT64_MAX"),
        DType::I32 => ("INT32_MIN", "INT32_MAX"),
        DType::I16 => ("INT16_MIN", "INT16_MAX"),
        DType::I8 => ("INT8_MIN", "INT8_MAX"),
        DType::U64 => ("0", "UINT64_MAX"),
        DType::U32 => ("0", "UINT32_MAX"),
        DType::U16 => ("0", "UINT16_MAX"),
        _ => ("0", "UINT8_MAX"),
    }
}

/// Indented C text.
#[derive(Default)]
struct Writer {
    out: String,
    depth: usize,
}

impl Writer {
    fn line(&mut self, s: &str) {
        let _ = writeln!(self.out, "{:indent$}{s}", "", indent = self.depth * 4);
    }

    /// `head {` (a bare block when `head` is empty), one level deeper.
    fn open(&mut self, head: &str) {
        if head.is_empty() {
            self.line("{");
        } else {
            self.line(&format!("{head} {{"));
        }
        self.depth += 1;
    }

    fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.line("}");
    }
}
