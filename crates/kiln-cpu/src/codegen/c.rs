//! One [`Kernel`] as a C function: argument pointers, the outer loop nest (OpenMP parallel),
//! and each stage's inner loops with its expressions as named variables.
//!
//! Expressions are evaluated eagerly, one `const` variable per node, in id order; a
//! [`Expr::Where`] then selects. Both branches are computed, so a load that only a Where
//! branch uses may see an index outside its buffer (the kernel IR allows that on the branch
//! not taken): such loads clamp their index into the buffer, and their value is discarded.
//! Integer division by zero cannot trap either (the prelude's helpers return 0 for it).

use super::common::{
    self, Accumulator, ExprEnv, Writer, arg_name, check_identifier, defined_before, emit_exprs,
    local_dtypes, loop_list, needed, stage_loops, stage_value, store_target,
};
use super::expr::{self, ctype, storage_ctype};
use super::row_values::RowValues;
use kiln_ir::{DType, ReduceOp, Result};
use kiln_sched::kernel::{Expr, ExprId, Idx, Kernel, Loop, Stage};

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

/// The C function for `k` (without the prelude), and its [`cols_name`] twin when
/// [`has_cols`] says `k` has one.
pub fn render_kernel(k: &Kernel) -> Result<String> {
    render_kernel_sized(k, 0)
}

/// True when `k` also gets a twin that runs a block of its columns (see [`cols_name`]): an
/// extern's epilogue (named `*_epilogue`: outer loops row, column) of one pointwise store,
/// without peeled loops or kept row values, which a GEMM launches on each block of its
/// output as soon as the block is final, while it is still in cache.
pub fn has_cols(k: &Kernel) -> bool {
    k.name.ends_with("_epilogue")
        && k.outer.len() == 2
        && matches!(&k.stages[..], [Stage::Store { loops, .. }] if loops.is_empty())
        && matches!(Peel::plan(k), Ok(None))
        && matches!(RowValues::plan(k), Ok(None))
}

/// The name of `k`'s twin `void NAME_cols(void* const* args, int64_t begin, int64_t end,
/// int64_t cbegin, int64_t cend)`, which runs rows `begin..end` of the first outer loop and
/// points `cbegin..cend` of the second.
pub fn cols_name(k: &Kernel) -> String {
    format!("{}_cols", k.name)
}

/// [`render_kernel`] for a size-generic translation unit ([`super::generic`]): after its
/// buffers, the kernel reads `symbols` sizes `s0, s1, ..` from one more argument, an array of
/// `int64_t` (with `symbols > 0`, no column-block twin).
pub fn render_kernel_sized(k: &Kernel, symbols: usize) -> Result<String> {
    let mut out = render_fn(k, symbols, false)?;
    // Size-generic kernels get no twin: the GEMMs' blocks are for libraries of fixed sizes.
    if symbols == 0 && has_cols(k) {
        out.push('\n');
        out.push_str(&render_fn(k, 0, true)?);
    }
    Ok(out)
}

/// The C function for `k`, or with `cols` its [`cols_name`] twin (for a [`has_cols`] kernel).
fn render_fn(k: &Kernel, symbols: usize, cols: bool) -> Result<String> {
    check_identifier(&k.name)?;
    let mut w = Writer::default();
    w.line(&format!(
        "/* kernel {}: outer loops [{}], {} stage(s) */",
        k.name,
        loop_list(&k.outer),
        k.stages.len()
    ));
    if cols {
        w.open(&format!(
            "void {}(void* const* args, int64_t begin, int64_t end, int64_t cbegin, int64_t cend)",
            cols_name(k)
        ));
    } else {
        w.open(&format!(
            "void {}(void* const* args, int64_t begin, int64_t end)",
            k.name
        ));
    }
    for (i, a) in k.args.iter().enumerate() {
        let ty = storage_ctype(a.dtype);
        let (name, konst) = arg_name(k, i as u32);
        w.line(&format!(
            "{konst}{ty}* {name} = ({konst}{ty}*)args[{i}]; /* {} [{}] */",
            a.dtype, a.len
        ));
    }
    if symbols > 0 {
        w.line(&format!("const int64_t* sizes = (const int64_t*)args[{}];", k.args.len()));
        for i in 0..symbols {
            w.line(&format!("const int64_t s{i} = sizes[{i}]; (void)s{i};"));
        }
    }
    let locals = local_dtypes(k)?;
    let rows = RowValues::plan(k)?;
    if let Some(r) = &rows {
        for (slot, v) in r.kept.iter().enumerate() {
            w.line(&format!(
                "{} row{slot}[{}]; /* v{} of stage {}, per point of the row */",
                ctype(v.dtype),
                r.points,
                v.expr,
                v.stage
            ));
        }
    }
    let body = |w: &mut Writer| -> Result<()> {
        for (s, stage) in k.stages.iter().enumerate() {
            render_stage(w, k, s, stage, &locals, rows.as_ref(), false)?;
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
            if let (true, Some(second)) = (cols, rest.first()) {
                w.line("if (cbegin < 0) cbegin = 0;");
                w.line(&format!("if (cend > {e}) cend = {e};", e = second.extent));
            }
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
                match cols && l.var == rest[0].var {
                    true => w.open(&format!("for (int64_t i{v} = cbegin; i{v} < cend; i{v}++)", v = l.var)),
                    false => w.open(&loop_header(l)),
                }
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
            render_stage(w, k, 0, &k.stages[0], locals, None, interior)?;
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

/// Emits `const T v{id} = ...;` for every expression `root` needs, in id order, except those
/// `given` (read from the C text beside them).
fn render_exprs(
    w: &mut Writer,
    k: &Kernel,
    root: ExprId,
    locals: &[Option<DType>],
    defined: &[bool],
    given: &[(ExprId, String)],
    interior: bool,
) -> Result<()> {
    let access = |arg: u32, index: &Idx, safe: bool| {
        Ok(common::load_access(
            k,
            arg,
            &expr::index(index),
            safe || interior,
        ))
    };
    let env = ExprEnv {
        access: &access,
        index: &expr::index,
        // Inside a peeled loop's interior every padding test holds (see `Peel`).
        in_range_holds: interior,
        given,
    };
    emit_exprs(w, k, root, locals, defined, &env)
}

/// Emits stage `s`, reading and writing the values `rows` keeps; `interior`: inside a peeled
/// loop's interior (see [`Peel`]).
fn render_stage(
    w: &mut Writer,
    k: &Kernel,
    s: usize,
    stage: &Stage,
    locals: &[Option<DType>],
    rows: Option<&RowValues>,
    interior: bool,
) -> Result<()> {
    // Locals of earlier stages only.
    let defined = defined_before(k, s, locals);
    let loop_names = loop_list(stage_loops(stage));
    // The point of the row, flattened: the same in every stage over rows of this shape.
    let point = expr::index(&stage_loops(stage).iter().fold(Idx::Const(0), |acc, l| {
        acc.mul(l.extent as i64).add(Idx::var(l.var))
    }));
    let given: Vec<(ExprId, String)> = rows.map_or_else(Vec::new, |r| {
        r.read_by(s).into_iter().map(|(e, slot)| (e, format!("row{slot}[{point}]"))).collect()
    });
    let keep = |w: &mut Writer| {
        for (slot, e) in rows.into_iter().flat_map(|r| r.written_by(s)) {
            w.line(&format!("row{slot}[{point}] = v{e};"));
        }
    };
    match stage {
        Stage::Store {
            loops,
            arg,
            index,
            value,
        } => {
            let a = store_target(k, s, *arg, *value)?;
            w.line(&format!(
                "/* stage {s}: store to out{arg} over [{}] */",
                loop_names
            ));
            w.open("");
            for l in loops {
                w.open(&loop_header(l));
            }
            render_exprs(w, k, *value, locals, &defined, &given, interior)?;
            keep(w);
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
            let acc = Accumulator::new(k, *op, *dtype)?;
            let var = acc.var(*local);
            let note = match (op, acc.omp) {
                (_, _) if acc.wrapping => ", wrapping",
                (ReduceOp::Sum | ReduceOp::Prod, Some(_)) => ", reassociated by simd",
                (ReduceOp::Max | ReduceOp::Min, _) if dtype.is_float() => ", NaN wins, in any order",
                _ => "",
            };
            w.line(&format!(
                "/* stage {s}: reduce {op:?} over [{}] -> acc{local} ({dtype}){note} */",
                loop_names,
            ));
            w.line(&format!("{} {var} = {};", acc.ty, acc.init));
            w.open("");
            for (d, l) in loops.iter().enumerate() {
                // The simd reduction lets the compiler reassociate a sum (vector lanes of
                // partial sums): a rounding difference from the sequential order, as in any
                // blocked or parallel sum. Float max/min round nothing; NaN wins in any order.
                if d + 1 == loops.len()
                    && let Some(sym) = acc.omp
                {
                    w.line(&format!("#pragma omp simd reduction({sym}:{var})"));
                }
                w.open(&loop_header(l));
            }
            render_exprs(w, k, *value, locals, &defined, &given, interior)?;
            keep(w);
            let v = expr::convert(&format!("v{value}"), vt, *dtype);
            w.line(&format!("{var} = {};", acc.combine(&var, &v)));
            for _ in loops {
                w.close();
            }
            w.close();
            if let Some(fin) = acc.finish(*local, *dtype) {
                w.line(&fin);
            }
        }
    }
    Ok(())
}
