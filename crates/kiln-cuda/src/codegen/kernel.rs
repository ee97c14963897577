//! One [`Kernel`] as a CUDA `__global__` function: the strategy ([`Launch`]), the index width,
//! the signature, the grid-stride loop over outer points and each stage, per thread (four
//! points a thread when vectorised, see `vector.rs`) or split over a block or a warp.

use super::row_cache::{self, RowCache, canon, stage_vars};
use super::vector::{LANES, VECTOR, Vectorised, vector_type, vectorise};
use super::{CudaKernelInfo, Launch};
use kiln_cpu::codegen::common::{
    Accumulator, ExprEnv, Writer, arg_name, check_identifier, defined_before, emit_exprs,
    load_access, local_dtypes, loop_list, stage_loops, store_target,
};
use kiln_cpu::codegen::expr::{self, storage_ctype};
use kiln_ir::{DType, Result};
use kiln_sched::kernel::{Expr, ExprId, Idx, Kernel, Loop, Stage};
use std::collections::HashMap;

/// Threads per block of a [`Launch::PerThread`] kernel.
const THREAD_BLOCK: u32 = 256;

/// Largest value 32-bit index math may reach.
const I32_LIMIT: u128 = i32::MAX as u128;

/// The CUDA function for `k` (without the prelude) and how to launch it.
pub fn render_kernel(k: &Kernel) -> Result<(String, CudaKernelInfo)> {
    check_identifier(&k.name)?;
    let launch = choose_launch(k);
    let narrow = fits_i32(k);
    let r = Renderer::new(k, launch, narrow)?;
    let text = r.render()?;
    let vector = if r.vector.is_some() { VECTOR } else { 1 };
    let row_points = k.outer.split_first().map(|(_, rest)| {
        rest.iter()
            .fold(1u64, |acc, l| acc.saturating_mul(l.extent as u64))
    });
    Ok((
        text,
        CudaKernelInfo {
            name: k.name.clone(),
            launch,
            row_points,
            vector,
        },
    ))
}

/// Points of a stage's (or the outer) loop nest.
fn points(loops: &[Loop]) -> u128 {
    loops.iter().map(|l| l.extent as u128).product()
}

/// A cooperative launch when a stage's loop nest is long, or fairly long with few outer points
/// to spread over the GPU or with rows contiguous in memory (attention's softmax over 128
/// keys: one thread per row read 128 floats apart across a warp, 0.08 ms a layer in
/// bert-base): threads then split the nest, with coalesced accesses along the innermost loop.
/// [`Launch::PerWarp`] when every nest is at most [`WARP_ROWS`] points and there are enough
/// outer points to give every SM several warps (a block per row would spend its time in
/// barriers and shared memory), else [`Launch::PerBlock`]. Otherwise [`Launch::PerThread`]
/// (pointwise kernels, short reductions, column reductions).
fn choose_launch(k: &Kernel) -> Launch {
    let longest = k
        .stages
        .iter()
        .map(|s| points(stage_loops(s)))
        .max()
        .unwrap_or(1);
    let outer = points(&k.outer);
    if longest >= 512 || (longest >= 32 && (outer < 4096 || rows_are_contiguous(k))) {
        if longest <= WARP_ROWS && outer >= WARP_MIN_POINTS {
            return Launch::PerWarp { block: THREAD_BLOCK };
        }
        // About 4 points a thread: bert-base's layer-norm rows of 768 ran in 6.4 us with 256
        // threads against 7.8 us with 512 (H200, max-autotune's timings).
        let block = (longest.next_power_of_two() / 4).clamp(32, 512) as u32;
        Launch::PerBlock { block }
    } else {
        Launch::PerThread {
            block: THREAD_BLOCK,
        }
    }
}

/// Longest stage loop nest a warp takes alone ([`Launch::PerWarp`]). With the row kept in
/// registers (`row_cache.rs`), bert-base's layer-norm rows of 768 run faster as a warp than as
/// a block of 256 (bert-base bs8 f32 5.02 -> 5.00 ms, bf16 1.09 -> 1.03, H200); without it a
/// warp lost to a block (10.3 against 9.5 us).
const WARP_ROWS: u128 = 1024;

/// Fewest outer points for [`Launch::PerWarp`]: about 8 warps per SM of a large GPU.
const WARP_MIN_POINTS: u128 = 1024;

/// True when some load walks memory with unit stride along the innermost loop of a stage.
fn rows_are_contiguous(k: &Kernel) -> bool {
    let inner: Vec<u32> = k.stages.iter().filter_map(|s| stage_loops(s).last().map(|l| l.var)).collect();
    let unit = |i: &Idx, v: u32| match i {
        Idx::Var(x) => *x == v,
        Idx::Add(ts) => ts.iter().any(|t| matches!(t, Idx::Var(x) if *x == v)),
        _ => false,
    };
    k.exprs.iter().any(|e| match &e.expr {
        Expr::Load { index, .. } => inner.iter().any(|&v| unit(index, v)),
        _ => false,
    })
}

/// True when every index value the kernel computes fits 32-bit `int`: argument lengths,
/// flattened loop nests and every subexpression of every index, bounded from the loops'
/// extents.
pub(crate) fn fits_i32(k: &Kernel) -> bool {
    let mut extent: HashMap<u32, u128> = HashMap::new();
    for l in k.outer.iter().chain(k.stages.iter().flat_map(stage_loops)) {
        extent.insert(l.var, l.extent as u128);
    }
    let nests_fit = std::iter::once(k.outer.as_slice())
        .chain(k.stages.iter().map(stage_loops))
        .all(|loops| points(loops) <= I32_LIMIT);
    let args_fit = k.args.iter().all(|a| a.len as u128 <= I32_LIMIT);
    let indices = k
        .exprs
        .iter()
        .filter_map(|e| match &e.expr {
            Expr::Load { index, .. } | Expr::InRange { index, .. } | Expr::Index(index) => {
                Some(index)
            }
            _ => None,
        })
        .chain(k.stages.iter().filter_map(|s| match s {
            Stage::Store { index, .. } => Some(index),
            Stage::Reduce { .. } => None,
        }));
    nests_fit && args_fit && indices.into_iter().all(|i| magnitude(i, &extent).is_some())
}

/// A bound on `|value|` of `idx` and of each of its subexpressions (and partial sums), None
/// when one exceeds [`I32_LIMIT`]. Variables not bound by a loop count as out of range.
fn magnitude(idx: &Idx, extent: &HashMap<u32, u128>) -> Option<u128> {
    let m = match idx {
        Idx::Var(v) => extent.get(v)?.saturating_sub(1),
        Idx::Const(c) => c.unsigned_abs() as u128,
        Idx::Add(terms) => terms.iter().try_fold(0u128, |acc, t| {
            let s = acc + magnitude(t, extent)?;
            (s <= I32_LIMIT).then_some(s)
        })?,
        Idx::Mul(x, c) => magnitude(x, extent)? * c.unsigned_abs() as u128,
        Idx::Div(x, c) => magnitude(x, extent)? / c.unsigned_abs().max(1) as u128,
        Idx::Mod(x, c) => magnitude(x, extent)?.min(c.unsigned_abs() as u128),
    };
    (m <= I32_LIMIT).then_some(m)
}

/// Arguments that may share memory with the output of an in-place pointwise kernel (the
/// memory planner's rule in `kiln_sched::memory`): a one-Store kernel writing only that
/// argument, and read arguments loaded at exactly the store's index. They and the output
/// must not be `__restrict__`.
fn may_alias(k: &Kernel) -> Vec<bool> {
    let mut alias = vec![false; k.args.len()];
    let [Stage::Store { arg, index, .. }] = k.stages.as_slice() else {
        return alias;
    };
    for e in &k.exprs {
        if let Expr::Load { arg: a, index: i } = &e.expr
            && i == index
            && let Some(x) = alias.get_mut(*a as usize)
        {
            *x = true;
        }
    }
    if let Some(x) = alias.get_mut(*arg as usize) {
        *x = true;
    }
    alias
}

struct Renderer<'k> {
    k: &'k Kernel,
    launch: Launch,
    /// 32-bit index math (`int` loop variables, [`expr::index32`]).
    narrow: bool,
    locals: Vec<Option<DType>>,
    /// Threads take [`VECTOR`] points each, with vector loads and stores.
    vector: Option<Vectorised>,
    /// Operands a warp's lanes keep in registers across the stages of a row.
    row_cache: Option<RowCache>,
}

impl<'k> Renderer<'k> {
    fn new(k: &'k Kernel, launch: Launch, narrow: bool) -> Result<Renderer<'k>> {
        Ok(Renderer {
            k,
            launch,
            narrow,
            locals: local_dtypes(k)?,
            vector: vectorise(k, launch),
            row_cache: row_cache::plan(k, launch)?,
        })
    }

    /// The signed type of loop variables and the unsigned type of flat counters.
    fn types(&self) -> (&'static str, &'static str) {
        if self.narrow {
            ("int", "unsigned int")
        } else {
            ("long long", "unsigned long long")
        }
    }

    fn index(&self, idx: &Idx) -> String {
        if self.narrow {
            expr::index32(idx)
        } else {
            expr::index(idx)
        }
    }

    fn signature(&self) -> String {
        let k = self.k;
        let alias = may_alias(k);
        let mut params: Vec<String> = k
            .args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let (name, konst) = arg_name(k, i as u32);
                let restrict = if a.written || alias[i] {
                    ""
                } else {
                    " __restrict__"
                };
                format!("{konst}{}*{restrict} {name}", storage_ctype(a.dtype))
            })
            .collect();
        params.push("long long begin".into());
        params.push("long long end".into());
        format!(
            "extern \"C\" __global__ void __launch_bounds__({}) {}({})",
            self.launch.block(),
            k.name,
            params.join(", ")
        )
    }

    fn render(&self) -> Result<String> {
        let k = self.k;
        let (_, uty) = self.types();
        let mut w = Writer::default();
        w.line(&format!(
            "/* kernel {}: outer loops [{}], {} stage(s), {:?}, {}-bit indices{} */",
            k.name,
            loop_list(&k.outer),
            k.stages.len(),
            self.launch,
            if self.narrow { 32 } else { 64 },
            if self.vector.is_some() { format!(", {VECTOR} points per thread") } else { String::new() }
        ));
        for (i, a) in k.args.iter().enumerate() {
            w.line(&format!(
                "/* a{i}: {} [{}]{} */",
                a.dtype,
                a.len,
                if a.written { ", written" } else { "" }
            ));
        }
        w.open(&self.signature());
        // A point's loops shared by the threads of a block or the lanes of a warp.
        let shared = !matches!(self.launch, Launch::PerThread { .. });
        if matches!(self.launch, Launch::PerBlock { .. }) {
            w.line("__shared__ double kc_smem[32]; /* one partial per warp */");
        }
        match k.outer.split_first() {
            None => {
                w.line("/* one point: the launch range does not apply */");
                w.line("(void)begin;");
                w.line("(void)end;");
                w.line(&format!("const {uty} kc_n = 1;"));
            }
            Some((first, rest)) => {
                let e = first.extent;
                w.line("if (begin < 0) begin = 0;");
                w.line(&format!("if (end > {e}LL) end = {e}LL;"));
                w.line("if (end <= begin) return;");
                let r = points(rest);
                w.line(&format!("const {uty} kc_n = ({uty})(end - begin) * {r}u;"));
            }
        }
        if let Some(v) = &self.vector {
            self.vector_loop(&mut w, v)?;
            w.close();
            return Ok(w.out);
        }
        let (start, stride) = match self.launch {
            Launch::PerBlock { .. } => ("blockIdx.x", "gridDim.x"),
            Launch::PerWarp { .. } => (
                "blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)",
                "gridDim.x * (blockDim.x >> 5)",
            ),
            Launch::PerThread { .. } => (
                "blockIdx.x * blockDim.x + threadIdx.x",
                "gridDim.x * blockDim.x",
            ),
        };
        w.open(&format!(
            "for ({uty} kc_p = {start}; kc_p < kc_n; kc_p += {stride})"
        ));
        if let Some((first, rest)) = k.outer.split_first() {
            self.unflatten(&mut w, "kc_p", rest, Some(first.var));
        }
        if let Some(c) = &self.row_cache {
            for (j, l) in c.loads.iter().enumerate() {
                let ty = k.args.get(l.arg as usize).map_or("float", |a| storage_ctype(a.dtype));
                w.line(&format!("{ty} kc_c{j}[{}]; /* this lane's points of a row operand */", c.iters));
            }
        }
        for s in 0..k.stages.len() {
            self.stage(&mut w, s, shared)?;
            if shared && s + 1 < k.stages.len() && matches!(k.stages[s], Stage::Store { .. }) {
                // A later stage may read what this one stored, from other threads.
                w.line(self.barrier());
            }
        }
        w.close();
        w.close();
        Ok(w.out)
    }

    /// The grid-stride loop of a vectorised kernel: each thread takes [`VECTOR`] consecutive
    /// points, loads the vector operands once, computes each lane's point as the scalar kernel
    /// does (the loop variable `i{var}` shadowed per lane) and stores one vector; a group cut
    /// by the end of the range, or misaligned by its beginning, runs point by point.
    fn vector_loop(&self, w: &mut Writer, v: &Vectorised) -> Result<()> {
        let k = self.k;
        let (ity, uty) = self.types();
        let (Some((first, rest)), [Stage::Store { arg, index, value, .. }]) = (k.outer.split_first(), k.stages.as_slice()) else {
            return Err(kiln_ir::Error::Unsupported(format!("CUDA codegen, kernel {}: vectorised without outer loops or one store", k.name)));
        };
        let n = VECTOR;
        let vector_of = |dtype: DType| vector_type(dtype).ok_or_else(|| kiln_ir::Error::Unsupported(format!("CUDA codegen, kernel {}: no vector type for {dtype}", k.name)));
        w.open(&format!("for ({uty} kc_g = blockIdx.x * blockDim.x + threadIdx.x; kc_g < (kc_n + {}u) / {n}u; kc_g += gridDim.x * blockDim.x)", n - 1));
        w.line(&format!("const {uty} kc_p0 = kc_g * {n}u;"));
        let aligned = if v.check_begin { format!("begin % {n} == 0 && ") } else { String::new() };
        w.open(&format!("if ({aligned}kc_p0 + {n}u <= kc_n)"));
        self.unflatten(w, "kc_p0", rest, Some(first.var));
        if v.lanes_read_var {
            w.line(&format!("const {ity} kc_b = i{};", v.var));
        }
        for (j, (a, idx)) in v.loads.iter().enumerate() {
            let ty = vector_of(k.args.get(*a as usize).map_or(DType::F64, |x| x.dtype))?;
            let (name, _) = arg_name(k, *a);
            w.line(&format!("const {ty} kc_v{j} = *(const {ty}*)&{name}[{}];", self.index(idx)));
        }
        let out = store_target(k, 0, *arg, *value)?;
        let out_ty = vector_of(out.dtype)?;
        w.line(&format!("{out_ty} kc_o;"));
        let defined = defined_before(k, 0, &self.locals);
        for (lane, field) in LANES.iter().enumerate() {
            w.open("");
            if v.lanes_read_var {
                w.line(&format!("const {ity} i{} = kc_b + {lane};", v.var));
            }
            let access = |a: u32, idx: &Idx, safe: bool| -> Result<String> {
                Ok(match v.loads.iter().position(|(x, i)| *x == a && i == idx) {
                    Some(j) => format!("kc_v{j}.{field}"),
                    None => load_access(k, a, &self.index(idx), safe),
                })
            };
            let index_of = |i: &Idx| self.index(i);
            let env = ExprEnv { access: &access, index: &index_of, in_range_holds: false, given: &[] };
            emit_exprs(w, k, *value, &self.locals, &defined, &env)?;
            w.line(&format!("kc_o.{field} = {};", expr::store(out.dtype, &format!("v{value}"))));
            w.close();
        }
        let (name, _) = arg_name(k, *arg);
        w.line(&format!("*({out_ty}*)&{name}[{}] = kc_o;", self.index(index)));
        w.close();
        w.open("else");
        w.open(&format!("for ({uty} kc_p = kc_p0; kc_p < kc_n && kc_p < kc_p0 + {n}u; kc_p++)"));
        self.unflatten(w, "kc_p", rest, Some(first.var));
        self.stage(w, 0, false)?;
        w.close();
        w.close();
        w.close();
        Ok(())
    }

    /// Declares the variables of `loops` from the flat counter `flat` (innermost fastest);
    /// `first`: the variable of the first outer loop, `begin` + what is left.
    fn unflatten(&self, w: &mut Writer, flat: &str, loops: &[Loop], first: Option<u32>) {
        let (ity, uty) = self.types();
        if loops.is_empty() {
            if let Some(v) = first {
                w.line(&format!("const {ity} i{v} = ({ity})begin + ({ity}){flat};"));
            }
            return;
        }
        w.line(&format!("{uty} kc_q = {flat};"));
        for (d, l) in loops.iter().enumerate().rev() {
            let v = l.var;
            if l.extent <= 1 {
                w.line(&format!("const {ity} i{v} = 0;"));
            } else if d == 0 && first.is_none() {
                w.line(&format!("const {ity} i{v} = ({ity})kc_q;"));
            } else {
                w.line(&format!(
                    "const {ity} i{v} = ({ity})(kc_q % {}u);",
                    l.extent
                ));
                w.line(&format!("kc_q /= {}u;", l.extent));
            }
        }
        if let Some(v) = first {
            w.line(&format!("const {ity} i{v} = ({ity})begin + ({ity})kc_q;"));
        }
    }

    /// What makes one stage's stores visible to the other threads of a point.
    fn barrier(&self) -> &'static str {
        match self.launch {
            Launch::PerWarp { .. } => "__syncwarp();",
            _ => "__syncthreads();",
        }
    }

    /// Opens the loops of a stage: sequential loops in a thread, or the flattened nest split
    /// over the block's threads (the warp's lanes).
    fn open_loops(&self, w: &mut Writer, loops: &[Loop], shared: bool) {
        let (ity, uty) = self.types();
        if let (true, Some(c)) = (shared, &self.row_cache) {
            // Unrolled, so the register arrays are indexed by constants.
            w.line("#pragma unroll");
            w.open(&format!("for (int kc_i = 0; kc_i < {}; kc_i++)", c.iters));
            w.line(&format!("const {uty} kc_r = (threadIdx.x & 31u) + 32u * ({uty})kc_i;"));
            w.open(&format!("if (kc_r < {}u)", c.points));
            self.unflatten(w, "kc_r", loops, None);
        } else if shared {
            let (first, step) = match self.launch {
                Launch::PerWarp { .. } => ("(threadIdx.x & 31u)", "32u"),
                _ => ("threadIdx.x", "blockDim.x"),
            };
            w.open(&format!(
                "for ({uty} kc_r = {first}; kc_r < {}u; kc_r += {step})",
                points(loops)
            ));
            self.unflatten(w, "kc_r", loops, None);
        } else {
            for l in loops {
                w.open(&format!(
                    "for ({ity} i{v} = 0; i{v} < {e}; i{v}++)",
                    v = l.var,
                    e = l.extent
                ));
            }
        }
    }

    fn close_loops(&self, w: &mut Writer, loops: &[Loop], shared: bool) {
        let n = match (shared, &self.row_cache) {
            (true, Some(_)) => 2,
            (true, None) => 1,
            (false, _) => loops.len(),
        };
        for _ in 0..n {
            w.close();
        }
    }

    fn exprs(&self, w: &mut Writer, s: usize, root: ExprId) -> Result<()> {
        let k = self.k;
        let defined = defined_before(k, s, &self.locals);
        let vars = stage_vars(k, s);
        // Registers filled by this stage or an earlier one (an earlier stage that reads the
        // operand only under a `Where` branch reads memory).
        let cached = |arg: u32, index: &Idx| -> Option<usize> {
            let c = self.row_cache.as_ref()?;
            let key = canon(index, &vars);
            c.loads.iter().position(|l| l.arg == arg && l.key == key && l.first_stage <= s)
        };
        // The first stage to read a cached operand loads this lane's point of it.
        if let Some(c) = &self.row_cache {
            for (j, l) in c.loads.iter().enumerate().filter(|(_, l)| l.first_stage == s) {
                let at = self.index(&row_cache::at(&l.key, &vars));
                w.line(&format!("kc_c{j}[kc_i] = {};", load_access(k, l.arg, &at, true)));
            }
        }
        let access = |arg: u32, index: &Idx, safe: bool| {
            Ok(match cached(arg, index) {
                Some(j) => format!("kc_c{j}[kc_i]"),
                None => load_access(k, arg, &self.index(index), safe),
            })
        };
        let index = |i: &Idx| self.index(i);
        let env = ExprEnv {
            access: &access,
            index: &index,
            in_range_holds: false,
            given: &[],
        };
        emit_exprs(w, k, root, &self.locals, &defined, &env)
    }

    fn stage(&self, w: &mut Writer, s: usize, shared: bool) -> Result<()> {
        let k = self.k;
        let stage = &k.stages[s];
        let loops = stage_loops(stage);
        let names = loop_list(loops);
        let split = match self.launch {
            Launch::PerBlock { .. } => ", split over the block",
            Launch::PerWarp { .. } => ", split over the warp",
            Launch::PerThread { .. } => "",
        };
        match stage {
            Stage::Store {
                arg, index, value, ..
            } => {
                let a = store_target(k, s, *arg, *value)?;
                w.line(&format!(
                    "/* stage {s}: store to out{arg} over [{}]{split} */",
                    names
                ));
                w.open("");
                self.open_loops(w, loops, shared);
                self.exprs(w, s, *value)?;
                let stored = expr::store(a.dtype, &format!("v{value}"));
                w.line(&format!("out{arg}[{}] = {stored};", self.index(index)));
                self.close_loops(w, loops, shared);
                w.close();
            }
            Stage::Reduce {
                op,
                value,
                local,
                dtype,
                ..
            } => {
                let vt = k.exprs.get(*value as usize).map_or(*dtype, |e| e.dtype);
                let acc = Accumulator::new(k, *op, *dtype)?;
                let var = acc.var(*local);
                w.line(&format!(
                    "/* stage {s}: reduce {op:?} over [{}] -> acc{local} ({dtype}){split} */",
                    names
                ));
                w.line(&format!("{} {var} = {};", acc.ty, acc.init));
                w.open("");
                self.open_loops(w, loops, shared);
                self.exprs(w, s, *value)?;
                let v = expr::convert(&format!("v{value}"), vt, *dtype);
                w.line(&format!("{var} = {};", acc.combine(&var, &v)));
                self.close_loops(w, loops, shared);
                w.close();
                match self.launch {
                    Launch::PerBlock { .. } => block_combine(w, &acc, &var),
                    Launch::PerWarp { .. } => {
                        w.open("");
                        warp_combine(w, &acc, &var);
                        w.close();
                    }
                    Launch::PerThread { .. } => {}
                }
                if let Some(fin) = acc.finish(*local, *dtype) {
                    w.line(&fin);
                }
            }
        }
        Ok(())
    }
}

/// Combines every thread's partial `var` into all threads' `var`: butterfly shuffles within
/// each warp, one partial per warp through shared memory, the first warp combines those and
/// the result goes back through shared memory. The block is a multiple of 32 threads.
fn block_combine(w: &mut Writer, acc: &Accumulator, var: &str) {
    let ty = acc.ty;
    let shuffle = |w: &mut Writer| warp_combine(w, acc, var);
    w.open("");
    shuffle(w);
    w.line(&format!("{ty}* kc_red = ({ty}*)kc_smem;"));
    w.line(&format!(
        "if ((threadIdx.x & 31u) == 0u) kc_red[threadIdx.x >> 5] = {var};"
    ));
    w.line("__syncthreads();");
    w.open("if (threadIdx.x < 32u)");
    w.line(&format!(
        "{var} = threadIdx.x < (blockDim.x >> 5) ? kc_red[threadIdx.x] : ({ty})({});",
        acc.init
    ));
    shuffle(w);
    w.line(&format!("if (threadIdx.x == 0u) kc_red[0] = {var};"));
    w.close();
    w.line("__syncthreads();");
    w.line(&format!("{var} = kc_red[0];"));
    w.line("__syncthreads(); /* kc_smem is free for the next reduction */");
    w.close();
}

/// Combines the partials `var` of one warp's lanes into every lane's `var` (butterfly
/// shuffles).
fn warp_combine(w: &mut Writer, acc: &Accumulator, var: &str) {
    w.open("for (int kc_o = 16; kc_o > 0; kc_o >>= 1)");
    w.line(&format!("const {} kc_y = kc_shfl_xor({var}, kc_o);", acc.ty));
    w.line(&format!("{var} = {};", acc.combine(var, "kc_y")));
    w.close();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(outer: &[usize], reduce: &[usize]) -> Kernel {
        let mut k = Kernel::new("k");
        k.outer = outer
            .iter()
            .enumerate()
            .map(|(v, &extent)| Loop {
                var: v as u32,
                extent,
            })
            .collect();
        let loops: Vec<Loop> = reduce
            .iter()
            .enumerate()
            .map(|(v, &extent)| Loop {
                var: (outer.len() + v) as u32,
                extent,
            })
            .collect();
        let c = k.push(
            Expr::Const(kiln_sched::kernel::Literal::Float(1.0)),
            DType::F32,
        );
        if !loops.is_empty() {
            k.stages.push(Stage::Reduce {
                loops,
                op: kiln_ir::ReduceOp::Sum,
                value: c,
                local: 0,
                dtype: DType::F32,
            });
        }
        k
    }

    /// A row operand the first stage reads only under a `Where` branch: that stage reads
    /// memory, the second stage fills the registers, the third reads them.
    #[test]
    fn row_registers_are_read_only_after_a_stage_filled_them() {
        use kiln_sched::kernel::Arg;
        let mut k = Kernel::new("k");
        k.args = vec![
            Arg { dtype: DType::F32, len: 4096 * 128, written: false },
            Arg { dtype: DType::F32, len: 4096 * 128, written: true },
        ];
        k.outer = vec![Loop { var: 0, extent: 4096 }];
        let row = |v: u32| Idx::var(0).mul(128).add(Idx::var(v));
        let cond = k.push(Expr::InRange { index: Idx::var(1), lo: 0, hi: 50 }, DType::Bool);
        let x1 = k.push(Expr::Load { arg: 0, index: row(1) }, DType::F32);
        let zero = k.push(Expr::Const(kiln_sched::kernel::Literal::Float(0.0)), DType::F32);
        let guarded = k.push(Expr::Where { cond, a: x1, b: zero }, DType::F32);
        let x2 = k.push(Expr::Load { arg: 0, index: row(2) }, DType::F32);
        let x3 = k.push(Expr::Load { arg: 0, index: row(3) }, DType::F32);
        let m = k.push(Expr::Local(0), DType::F32);
        let d = k.push(Expr::Binary { op: kiln_ir::BinaryOp::Sub, a: x3, b: m }, DType::F32);
        let rows = |v: u32| vec![Loop { var: v, extent: 128 }];
        k.stages = vec![
            Stage::Reduce { loops: rows(1), op: kiln_ir::ReduceOp::Max, value: guarded, local: 0, dtype: DType::F32 },
            Stage::Reduce { loops: rows(2), op: kiln_ir::ReduceOp::Sum, value: x2, local: 1, dtype: DType::F32 },
            Stage::Store { loops: rows(3), arg: 1, index: row(3), value: d },
        ];
        let (text, info) = render_kernel(&k).unwrap();
        assert_eq!(info.launch, Launch::PerWarp { block: 256 });
        let stage = |n: usize| text.split(&format!("/* stage {n}:")).nth(1).unwrap_or("").to_string();
        let (s0, s1, s2) = (stage(0), stage(1), stage(2));
        assert!(!s0.split("/* stage 1").next().unwrap_or("").contains("kc_c0["), "{text}");
        assert!(s1.contains("kc_c0[kc_i] = in0[") && s2.contains("= kc_c0[kc_i];"), "{text}");
    }

    #[test]
    fn rows_contiguous_in_memory_get_a_block_each() {
        // Many rows of 128: one thread per row while the reduction reads a column...
        let mut k = kernel(&[1 << 14], &[128]);
        assert!(matches!(choose_launch(&k), Launch::PerThread { .. }));
        // ...but a warp per row when it reads along the row (x[row * 128 + i]), a block per
        // row when the rows are few.
        let row = Idx::var(0).mul(128).add(Idx::var(1));
        k.push(Expr::Load { arg: 0, index: row.clone() }, DType::F32);
        assert_eq!(choose_launch(&k), Launch::PerWarp { block: 256 });
        let mut few = kernel(&[512], &[128]);
        few.push(Expr::Load { arg: 0, index: row }, DType::F32);
        assert_eq!(choose_launch(&few), Launch::PerBlock { block: 32 });
        // Along the outer loop instead (x[i * 16384 + row]): threads stay per row.
        let mut k = kernel(&[1 << 14], &[128]);
        k.push(Expr::Load { arg: 0, index: Idx::var(1).mul(1 << 14).add(Idx::var(0)) }, DType::F32);
        assert!(matches!(choose_launch(&k), Launch::PerThread { .. }));
    }

    #[test]
    fn launch_follows_the_longest_stage_nest() {
        assert!(matches!(
            choose_launch(&kernel(&[1 << 20], &[])),
            Launch::PerThread { block: 256 }
        ));
        assert!(matches!(
            choose_launch(&kernel(&[1 << 20], &[8])),
            Launch::PerThread { .. }
        ));
        assert_eq!(
            choose_launch(&kernel(&[1 << 20], &[512])),
            Launch::PerWarp { block: 256 }
        );
        // Rows of 768 over many points: a warp each; over few, or past 1024, a block of about 4
        // points a thread.
        assert_eq!(
            choose_launch(&kernel(&[1 << 20], &[768])),
            Launch::PerWarp { block: 256 }
        );
        assert_eq!(
            choose_launch(&kernel(&[512], &[768])),
            Launch::PerBlock { block: 256 }
        );
        assert_eq!(
            choose_launch(&kernel(&[1 << 20], &[2000])),
            Launch::PerBlock { block: 512 }
        );
        assert_eq!(
            choose_launch(&kernel(&[16], &[64])),
            Launch::PerBlock { block: 32 }
        );
        assert_eq!(
            choose_launch(&kernel(&[], &[56, 56])),
            Launch::PerBlock { block: 512 }
        );
        assert!(matches!(
            choose_launch(&kernel(&[8], &[0])),
            Launch::PerThread { .. }
        ));
    }

    #[test]
    fn index_bounds_include_partial_sums_and_products() {
        let ext: HashMap<u32, u128> = [(0, 1000), (1, 1 << 20)].into_iter().collect();
        let fits = |i: &Idx| magnitude(i, &ext).is_some();
        assert!(fits(&Idx::var(0).mul(1 << 20).add(Idx::var(1))));
        assert!(!fits(&Idx::var(0).mul(1 << 22)));
        // The quotient fits, the product before it does not.
        assert!(!fits(&Idx::Div(
            Box::new(Idx::var(1).mul(1 << 12)),
            1 << 10
        )));
        assert!(fits(&Idx::Mod(Box::new(Idx::var(1).mul(1 << 10)), 7)));
        assert!(!fits(&Idx::var(5)), "a variable no loop binds");
        assert!(!fits(&Idx::Const(-(1i64 << 40))));
    }
}
