//! What every C-family renderer of the kernel IR shares (this crate's C, kiln-cuda's CUDA C):
//! checks of a kernel's shape, which expressions a stage needs, the emission of those
//! expressions as `const` variables, how each reduction accumulates, and indented text.
//! The scalar semantics themselves live in `prelude.h` and [`super::expr`].

use super::expr::{self, ctype};
use kiln_ir::{DType, Error, ReduceOp, Result};
use kiln_sched::kernel::{Arg, Expr, ExprId, Idx, Kernel, Loop, Stage, VarId};
use std::fmt::Write;

/// Errors for `name` unless it is a C identifier (kernel names become function names).
pub fn check_identifier(name: &str) -> Result<()> {
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

/// Each of `kernels`, in order, with `render` applied; an error when two share a name (they
/// become functions of one translation unit).
pub fn render_each<'a, T>(
    kernels: impl IntoIterator<Item = &'a Kernel>,
    mut render: impl FnMut(&'a Kernel) -> Result<T>,
) -> Result<Vec<T>> {
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::new();
    for k in kernels {
        if !names.insert(k.name.as_str()) {
            return Err(Error::Unsupported(format!(
                "codegen: two kernels are named {}",
                k.name
            )));
        }
        out.push(render(k)?);
    }
    Ok(out)
}

/// The argument's pointer name: `out{i}` when the kernel writes it, `in{i}` (const) otherwise.
pub fn arg_name(k: &Kernel, i: u32) -> (String, &'static str) {
    match k.args.get(i as usize) {
        Some(a) if a.written => (format!("out{i}"), ""),
        _ => (format!("in{i}"), "const "),
    }
}

/// A load of `arg` at the rendered index `index`: `in{arg}[index]` when `in_bounds`, else
/// with the index clamped into the buffer (a load under a Where branch is evaluated even
/// when the branch is not taken, and its value then discarded).
pub fn load_access(k: &Kernel, arg: u32, index: &str, in_bounds: bool) -> String {
    let (name, _) = arg_name(k, arg);
    let len = k.args.get(arg as usize).map_or(0, |a| a.len);
    if in_bounds {
        format!("{name}[{index}]")
    } else if len == 0 {
        // Never taken: there is no element to read.
        "0".to_string()
    } else {
        format!("{name}[kc_clamp({index}, {len})]")
    }
}

/// The accumulator dtype of each reduction local (indexed by local), checking that each local
/// is defined once.
pub fn local_dtypes(k: &Kernel) -> Result<Vec<Option<DType>>> {
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

/// Which locals stages before `s` define (a stage may only read those), indexed by local.
pub fn defined_before(k: &Kernel, s: usize, locals: &[Option<DType>]) -> Vec<bool> {
    let mut defined = vec![false; locals.len()];
    for earlier in &k.stages[..s] {
        if let Stage::Reduce { local, .. } = earlier {
            defined[*local as usize] = true;
        }
    }
    defined
}

/// Loops as a comment lists them: `i0 < 4, i1 < 5`.
pub fn loop_list(loops: &[Loop]) -> String {
    let names: Vec<String> = loops
        .iter()
        .map(|l| format!("i{} < {}", l.var, l.extent))
        .collect();
    names.join(", ")
}

/// The stage's own inner loops.
pub fn stage_loops(s: &Stage) -> &[Loop] {
    match s {
        Stage::Reduce { loops, .. } | Stage::Store { loops, .. } => loops,
    }
}

/// The loop variables of stage `s` of `k`, outermost first.
pub fn stage_vars(k: &Kernel, s: usize) -> Vec<VarId> {
    k.stages.get(s).map_or_else(Vec::new, |st| stage_loops(st).iter().map(|l| l.var).collect())
}

/// Stage loop variables in a canonical index: `CANON + position in the stage's nest`.
pub const CANON: VarId = u32::MAX - 64;

/// `index` with `vars` (a stage's loop variables) replaced by their canonical names: two
/// stages over rows of one shape read the same point where their canonical indices are equal.
pub fn canon(index: &Idx, vars: &[VarId]) -> Idx {
    index.rename(&|v| vars.iter().position(|x| *x == v).map_or(v, |p| CANON + p as VarId))
}

/// The expression a stage reduces or stores.
pub fn stage_value(s: &Stage) -> ExprId {
    match s {
        Stage::Reduce { value, .. } | Stage::Store { value, .. } => *value,
    }
}

/// The argument store stage `s` writes, checked: it exists, is marked written, and has the
/// stored value's dtype.
pub fn store_target(k: &Kernel, s: usize, arg: u32, value: ExprId) -> Result<&Arg> {
    let a = k.args.get(arg as usize).ok_or_else(|| {
        Error::Unsupported(format!(
            "C codegen, kernel {}: stage {s} stores to missing argument {arg}",
            k.name
        ))
    })?;
    let vt = k.exprs.get(value as usize).map(|e| e.dtype);
    if !a.written || vt != Some(a.dtype) {
        return Err(Error::Unsupported(format!(
            "C codegen, kernel {}: stage {s} stores a {vt:?} value to argument {arg} ({}, written: {})",
            k.name, a.dtype, a.written
        )));
    }
    Ok(a)
}

/// For each expression, whether `root` needs it: `Some(true)` when on some path that passes
/// through no Where branch (its evaluation is safe), `Some(false)` when only under branches.
pub fn needed(k: &Kernel, root: ExprId) -> Result<Vec<Option<bool>>> {
    needed_above(k, root, &[])
}

/// [`needed`], where the expressions `given` are read from elsewhere: their operands are not
/// needed on their account.
pub fn needed_above(k: &Kernel, root: ExprId, given: &[ExprId]) -> Result<Vec<Option<bool>>> {
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
        if given.contains(&(id as ExprId)) {
            continue;
        }
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

/// How a renderer spells the parts of an expression that depend on its target.
pub struct ExprEnv<'a> {
    /// A load `args[arg][index]` as a C lvalue; `safe` is false when only a Where branch
    /// needs it (its index may then be outside the buffer: the access must not fault).
    pub access: &'a dyn Fn(u32, &Idx, bool) -> Result<String>,
    /// An index expression over the loop variables `i{var}` (see [`expr::index`]).
    pub index: &'a dyn Fn(&Idx) -> String,
    /// Every `InRange` test is known to hold (a peeled loop's interior): render them as 1.
    pub in_range_holds: bool,
    /// Expressions whose value the renderer already holds, with the C text that reads it (a
    /// value an earlier stage kept: see [`super::row_values`]); they are not computed.
    pub given: &'a [(ExprId, String)],
}

/// Emits `const T v{id} = ...;` for every expression `root` needs, in id order; `defined`
/// (from [`defined_before`]) says which reduction locals `acc{local}` exist here.
pub fn emit_exprs(
    w: &mut Writer,
    k: &Kernel,
    root: ExprId,
    locals: &[Option<DType>],
    defined: &[bool],
    env: &ExprEnv,
) -> Result<()> {
    let given: Vec<ExprId> = env.given.iter().map(|(id, _)| *id).collect();
    let marks = needed_above(k, root, &given)?;
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
        let access = |arg: u32, index: &Idx| (env.access)(arg, index, safe);
        let id = id as ExprId;
        let value = match (&k.expr(id).expr, env.given.iter().find(|(g, _)| *g == id)) {
            (_, Some((_, held))) => held.clone(),
            (Expr::InRange { .. }, None) if env.in_range_holds => "1".to_string(),
            _ => expr::render(k, id, &local_dtype, &access, env.index)?,
        };
        w.line(&format!(
            "const {} v{id} = {value};",
            ctype(k.expr(id).dtype)
        ));
    }
    Ok(())
}

/// How one reduction accumulates in C: the running variable's type and identity, and how two
/// partial results combine (the same for each element and for partials of a split reduction,
/// so a renderer may reassociate Sum/Prod). Max/Min keep NaN-wins in either order.
pub struct Accumulator {
    /// The running variable's C type (the unsigned wide type for wrapping integer sums).
    pub ty: &'static str,
    /// Its initial value: the identity of the op (the empty reduction's result).
    pub init: String,
    /// `combine` with `{a}` and `{b}` standing for the two operands.
    combine: String,
    /// The running variable is not the local's type: `acc{l}` is a cast of `acc{l}_w`.
    pub wrapping: bool,
    /// The OpenMP reduction operator a simd loop may use (float max / min: the prelude's
    /// NaN-wins reductions).
    pub omp: Option<&'static str>,
}

impl Accumulator {
    /// The accumulator of `op` in `dt` (`k` names the kernel in errors).
    pub fn new(k: &Kernel, op: ReduceOp, dt: DType) -> Result<Accumulator> {
        let bad = || {
            Error::Unsupported(format!(
                "C codegen, kernel {}: reduce {op:?} accumulated in {dt}",
                k.name
            ))
        };
        let ty = ctype(dt);
        let acc = |init: &str, combine: &str, omp: Option<&'static str>| Accumulator {
            ty,
            init: init.to_string(),
            combine: combine.to_string(),
            wrapping: false,
            omp,
        };
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
                    ReduceOp::Sum => acc(zero, "{a} + {b}", Some("+")),
                    ReduceOp::Prod => acc(one, "{a} * {b}", Some("*")),
                    // The prelude declares the NaN-wins max / min as OpenMP reductions.
                    ReduceOp::Max => acc(
                        &format!("-{inf}"),
                        &format!("kc_max{sfx}({{a}}, {{b}})"),
                        Some(if f { "kc_maxf_r" } else { "kc_max_r" }),
                    ),
                    ReduceOp::Min => acc(inf, &format!("kc_min{sfx}({{a}}, {{b}})"), Some(if f { "kc_minf_r" } else { "kc_min_r" })),
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
                let (lo, hi) = int_range(dt);
                Ok(match op {
                    // Sum and product wrap: accumulate in the unsigned wide type (no signed
                    // overflow), whose value modulo 2^bits is the narrow type's.
                    ReduceOp::Sum | ReduceOp::Prod => {
                        let wide = if dt.size_of() == 8 {
                            "uint64_t"
                        } else {
                            "uint32_t"
                        };
                        let (init, sym) = if op == ReduceOp::Sum {
                            ("0", "+")
                        } else {
                            ("1", "*")
                        };
                        Accumulator {
                            ty: wide,
                            init: init.to_string(),
                            combine: format!("{{a}} {sym} ({wide}){{b}}"),
                            wrapping: true,
                            omp: Some(sym),
                        }
                    }
                    ReduceOp::Max => acc(lo, "{b} > {a} ? {b} : {a}", Some("max")),
                    ReduceOp::Min => acc(hi, "{b} < {a} ? {b} : {a}", Some("min")),
                    ReduceOp::Mean => return Err(bad()),
                })
            }
            _ => Err(bad()),
        }
    }

    /// The running variable of reduction `local`.
    pub fn var(&self, local: u32) -> String {
        if self.wrapping {
            format!("acc{local}_w")
        } else {
            format!("acc{local}")
        }
    }

    /// `a` combined with `b` (`b` may be a value of the local's type).
    pub fn combine(&self, a: &str, b: &str) -> String {
        self.combine.replace("{a}", a).replace("{b}", b)
    }

    /// The statement defining `acc{local}` from the running variable, when they differ.
    pub fn finish(&self, local: u32, dt: DType) -> Option<String> {
        self.wrapping.then(|| {
            let ty = ctype(dt);
            format!("const {ty} acc{local} = ({ty})acc{local}_w;")
        })
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
pub struct Writer {
    /// The text so far.
    pub out: String,
    depth: usize,
}

impl Writer {
    /// One line at the current depth.
    pub fn line(&mut self, s: &str) {
        let _ = writeln!(self.out, "{:indent$}{s}", "", indent = self.depth * 4);
    }

    /// `head {` (a bare block when `head` is empty), one level deeper.
    pub fn open(&mut self, head: &str) {
        if head.is_empty() {
            self.line("{");
        } else {
            self.line(&format!("{head} {{"));
        }
        self.depth += 1;
    }

    /// `}`, one level up.
    pub fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.line("}");
    }
}
