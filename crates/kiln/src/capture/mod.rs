//! `kiln::compile` for Rust functions, as `torch.compile`: wrap a function (or a [`Module`])
//! written with the tensor API, and calls run compiled code.
//!
//! ```no_run
//! # use kiln::{Tensor, Result};
//! # fn main() -> Result<()> {
//! let fast = kiln::compile(|x: &Tensor| x.relu()?.add_scalar(1.0)).mode(kiln::compile::Mode::Default);
//! let y = fast.call(&Tensor::from_vec(vec![1.0f32, -2.0], &[2])?)?;
//! println!("{}", fast.explain());
//! # Ok(()) }
//! ```
//!
//! The first call traces the function on placeholders that carry the call's data (see
//! [`crate::trace`]), compiles the graph with [`crate::compile::compile`] and runs it. Later
//! calls whose inputs pass the entry's [guards](guards) run the cached plan without calling the
//! function: **a function without graph breaks is assumed to be a pure function of its inputs**
//! (as `torch.jit.trace` and CUDA graphs assume): tensors it closes over (weights) are captured as
//! constants, and Rust control flow that does not read tensor data is fixed at capture.
//!
//! A read of a traced tensor's data (`to_vec`, `item`, `to_host`) is a [graph break](breaks): the
//! graph so far runs, the value is produced, capture continues. A function with breaks is re-run
//! on every call (its control flow may depend on the data), and each segment's compiled graph is
//! found by structural hash in the function's cache, so only new segments compile.
//!
//! Inputs that fail every entry's guards recompile (counted, and logged on `kiln::recompiles`:
//! `KILN_LOGS=recompiles`); past the recompile limit (default 8 entries) kiln warns once and
//! runs new inputs eagerly. Dynamic dims (`.dynamic(true)`, `.mark_dynamic(i, d)`, or automatic:
//! a dim seen with two sizes) make an entry accept any size there without a recompile; on the
//! CPU its new sizes run on one C library whose kernels take the sizes as arguments ([`generic`]),
//! each size traced and scheduled but not compiled again.

mod breaks;
mod explain;
mod generic;
mod guards;
mod segments;

pub use breaks::Break;
pub(crate) use breaks::read_traced;
pub use explain::{BreakInfo, EntryInfo, Explanation, GenericInfo, GraphInfo};
pub use guards::{DimGuard, Guard, InputGuard};

use crate::compile::{CompileOptions, Compiled, Mode};
use crate::nn::Module;
use crate::{HostTensor, Result, Tensor};
use kiln_ir::Error;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Cache entries per function before new inputs run eagerly (torch's `recompile_limit`).
pub const DEFAULT_RECOMPILE_LIMIT: usize = 8;

/// How a function is captured and compiled.
#[derive(Clone, Debug)]
pub struct CaptureOptions {
    /// What each captured graph is compiled with (mode, passes, cache dir).
    pub compile: CompileOptions,
    /// `Some(true)`: every dim of every input is dynamic; `Some(false)`: only the dims marked
    /// (no automatic dynamic); `None`: the dims marked, and automatically a dim seen with two sizes.
    pub dynamic: Option<bool>,
    /// (input, dim) pairs marked dynamic.
    pub marked: Vec<(usize, usize)>,
    /// A graph break is an error naming it.
    pub fullgraph: bool,
    /// At most this many cache entries.
    pub recompile_limit: usize,
}

impl Default for CaptureOptions {
    fn default() -> Self {
        CaptureOptions {
            compile: CompileOptions::default(),
            dynamic: None,
            marked: Vec::new(),
            fullgraph: false,
            recompile_limit: DEFAULT_RECOMPILE_LIMIT,
        }
    }
}

/// A compiled function: call it as the original (`call` for `Fn(&Tensor) -> Result<Tensor>`,
/// `call_many` for `Fn(&[Tensor]) -> Result<Vec<Tensor>>`). Builder methods set options; setting
/// one drops what was compiled so far.
pub struct CompiledFn<F> {
    f: F,
    shared: Arc<Shared>,
}

/// Compiles a one-input function (see the [module docs](self)). The first call captures.
#[track_caller]
pub fn compile<F: Fn(&Tensor) -> Result<Tensor>>(f: F) -> CompiledFn<F> {
    CompiledFn::new(f, std::panic::Location::caller().to_string())
}

/// Compiles a function of several inputs and outputs.
#[track_caller]
pub fn compile_many<F: Fn(&[Tensor]) -> Result<Vec<Tensor>>>(f: F) -> CompiledFn<F> {
    CompiledFn::new(f, std::panic::Location::caller().to_string())
}

/// Compiles a [`Module`]'s `forward` (the module is moved in; pass `&m` to borrow it).
#[track_caller]
pub fn compile_module<M: Module>(m: M) -> CompiledFn<impl Fn(&Tensor) -> Result<Tensor>> {
    CompiledFn::new(move |x: &Tensor| m.forward(x), std::panic::Location::caller().to_string())
}

impl<F> CompiledFn<F> {
    fn new(f: F, name: String) -> CompiledFn<F> {
        CompiledFn { f, shared: Arc::new(Shared::new(name, CaptureOptions::default())) }
    }

    /// Replaces the options (and forgets every compiled plan).
    pub fn options(mut self, opts: CaptureOptions) -> Self {
        self.shared = Arc::new(Shared::new(self.shared.name.clone(), opts));
        self
    }

    fn with(self, set: impl FnOnce(&mut CaptureOptions)) -> Self {
        let mut opts = self.shared.opts.clone();
        set(&mut opts);
        self.options(opts)
    }

    /// The compile mode ([`Mode::Eager`] runs captured graphs on the reference interpreter).
    pub fn mode(self, mode: Mode) -> Self {
        self.with(|o| o.compile.mode = mode)
    }

    /// Compile options (mode, passes, cache dir).
    pub fn compile_options(self, c: CompileOptions) -> Self {
        self.with(|o| o.compile = c)
    }

    /// `true`: every input dim is dynamic; `false`: only marked dims, none automatically.
    pub fn dynamic(self, on: bool) -> Self {
        self.with(|o| o.dynamic = Some(on))
    }

    /// Marks dim `dim` of input `input` dynamic.
    pub fn mark_dynamic(self, input: usize, dim: usize) -> Self {
        self.with(|o| o.marked.push((input, dim)))
    }

    /// `true`: a graph break is an error that names it and its location.
    pub fn fullgraph(self, on: bool) -> Self {
        self.with(|o| o.fullgraph = on)
    }

    /// At most `n` cache entries (compiles for distinct guards); further inputs run eagerly.
    pub fn recompile_limit(self, n: usize) -> Self {
        self.with(|o| o.recompile_limit = n)
    }

    /// What capture did so far.
    pub fn explain(&self) -> Explanation {
        self.shared.explain()
    }

    /// Recompiles so far.
    pub fn recompiles(&self) -> usize {
        self.shared.lock().recompiles.len()
    }
}

impl<F: Fn(&Tensor) -> Result<Tensor>> CompiledFn<F> {
    /// Calls the function on `x`: the compiled plan when the guards hold, else capture.
    pub fn call(&self, x: &Tensor) -> Result<Tensor> {
        let f = |xs: &[Tensor]| Ok(vec![(self.f)(&xs[0])?]);
        let mut out = self.shared.call(std::slice::from_ref(x), &f)?;
        out.pop().ok_or_else(|| Error::Graph("compiled function returned nothing".into()))
    }
}

impl<F: Fn(&[Tensor]) -> Result<Vec<Tensor>>> CompiledFn<F> {
    /// Calls the function on `xs`: the compiled plan when the guards hold, else capture.
    pub fn call_many(&self, xs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.shared.call(xs, &self.f)
    }
}

/// A function's options and compiled state, shared with its captures in progress.
pub(crate) struct Shared {
    /// Where `kiln::compile` was called.
    name: String,
    opts: CaptureOptions,
    state: Mutex<State>,
}

/// A cache entry: guards and the plan of each input size seen under them.
struct Entry {
    id: u64,
    guard: Guard,
    plans: Vec<(Vec<Vec<usize>>, Plan)>,
    /// With dynamic dims: the size-generic library new sizes run on.
    generic: Generic,
}

impl Entry {
    fn new(id: u64, guard: Guard, plans: Vec<(Vec<Vec<usize>>, Plan)>) -> Entry {
        Entry { id, guard, plans, generic: Generic::Untried }
    }
}

/// An entry's size-generic library ([`generic`]).
#[derive(Clone)]
enum Generic {
    Untried,
    /// Why there is none (new sizes are compiled one by one).
    Refused(String),
    Built { plan: generic::GenericPlan, sizes: usize },
}

#[derive(Clone)]
enum Plan {
    /// No breaks: the compiled graph takes the call's inputs and gives its results.
    Whole(Arc<Compiled>),
    /// Breaks: re-run the function; its segments come from the cache.
    Rerun,
}

#[derive(Default)]
struct State {
    entries: Vec<Entry>,
    next_entry: u64,
    segments: segments::SegmentCache,
    calls: usize,
    recompiles: Vec<String>,
    breaks: Vec<explain::BreakInfo>,
    specialisations: usize,
    eager_calls: usize,
    warned: bool,
    trace_time: Duration,
}

/// What a call does, decided under the lock.
enum Action {
    Run(Arc<Compiled>),
    /// A new size under dynamic dims: on the entry's size-generic library if it can.
    NewSize { entry: u64 },
    Capture { entry: u64, store: bool },
    Eager,
}

impl Shared {
    fn new(name: String, opts: CaptureOptions) -> Shared {
        Shared { name, opts, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn call(self: &Arc<Self>, xs: &[Tensor], f: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>) -> Result<Vec<Tensor>> {
        // Inside another trace or capture (a compiled function calling this one), or on
        // placeholders: the function is traced inline into the outer graph.
        if crate::trace::is_active() || xs.iter().any(|x| x.data().is_none()) {
            return f(xs);
        }
        match self.decide(xs) {
            Action::Run(c) => {
                let hosts: Vec<HostTensor> = xs.iter().filter_map(|x| x.data().cloned()).collect();
                Ok(c.run(&hosts)?.into_iter().map(Tensor::from_host).collect())
            }
            Action::Eager => f(xs),
            Action::NewSize { entry } => {
                if let Some(c) = self.generic_plan(entry, xs, f) {
                    let hosts: Vec<HostTensor> = xs.iter().filter_map(|x| x.data().cloned()).collect();
                    let outs = c.run(&hosts)?;
                    self.store(entry, xs, Plan::Whole(c));
                    return Ok(outs.into_iter().map(Tensor::from_host).collect());
                }
                // Compiled for this size alone.
                let mut st = self.lock();
                if st.entries.iter().any(|e| e.id == entry && !e.plans.is_empty()) {
                    st.specialisations += 1;
                }
                drop(st);
                let (outs, plan) = self.capture(xs, f)?;
                self.store(entry, xs, plan);
                Ok(outs)
            }
            Action::Capture { entry, store } => {
                let (outs, plan) = self.capture(xs, f)?;
                if store {
                    self.store(entry, xs, plan);
                }
                Ok(outs)
            }
        }
    }

    /// Keeps `plan` as the entry's plan for calls of `xs`' sizes.
    fn store(&self, entry: u64, xs: &[Tensor], plan: Plan) {
        let mut st = self.lock();
        if let Some(e) = st.entries.iter_mut().find(|e| e.id == entry) {
            e.plans.push((xs.iter().map(Tensor::dims).collect(), plan));
        }
    }

    /// The plan of a new size under the entry's dynamic dims on its size-generic library
    /// (fitted and compiled on first use); `None` when there is none, or this size's code is
    /// not the library's: the caller then compiles the size on its own.
    fn generic_plan(&self, entry: u64, xs: &[Tensor], f: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>) -> Option<Arc<Compiled>> {
        let (guard, state) = {
            let st = self.lock();
            let e = st.entries.iter().find(|e| e.id == entry)?;
            (e.guard.clone(), e.generic.clone())
        };
        let opts = &self.opts.compile;
        let plan = match state {
            Generic::Refused(_) => return None,
            Generic::Built { plan, .. } => plan,
            Generic::Untried => {
                let built = generic::GenericPlan::build(&guard, xs, f, opts);
                let mut st = self.lock();
                let e = st.entries.iter_mut().find(|e| e.id == entry)?;
                match built {
                    Ok(plan) => {
                        tracing::info!(
                            target: "kiln::recompiles",
                            "function compiled at {}: size-generic kernels for {} in {:.1} ms (library {})",
                            self.name,
                            plan.describe(),
                            plan.kernels.build_time().as_secs_f64() * 1e3,
                            plan.kernels.cache_outcome()
                        );
                        e.generic = Generic::Built { plan: plan.clone(), sizes: 0 };
                        plan
                    }
                    Err(why) => {
                        tracing::info!(target: "kiln::recompiles", "function compiled at {}: no size-generic kernels ({why}); each new size compiles on its own", self.name);
                        e.generic = Generic::Refused(why.to_string());
                        return None;
                    }
                }
            }
        };
        let start = Instant::now();
        let (graph, compiled) = match plan.compile(xs, f, opts) {
            Ok(Some(c)) => c,
            Ok(None) => return None,
            Err(why) => {
                tracing::debug!(target: "kiln::recompiles", "function compiled at {}: size {:?} not on the size-generic kernels ({why})", self.name, plan.sizes_of(xs));
                return None;
            }
        };
        let info = explain::GraphInfo::new(&graph, compiled.report(), start.elapsed());
        tracing::info!(target: "kiln::graph", "{}: graph for sizes {:?} on the size-generic kernels: {info}", self.name, plan.sizes_of(xs));
        let mut st = self.lock();
        st.segments.infos.push(info);
        if let Some(Entry { generic: Generic::Built { sizes, .. }, .. }) = st.entries.iter_mut().find(|e| e.id == entry) {
            *sizes += 1;
        }
        Some(Arc::new(compiled))
    }

    /// Finds the entry whose guards hold (newest first) and its plan, or makes a new entry.
    fn decide(&self, xs: &[Tensor]) -> Action {
        let mut st = self.lock();
        st.calls += 1;
        if let Some(e) = st.entries.iter().rev().find(|e| e.guard.holds(xs)) {
            let plan = e.plans.iter().find(|(s, _)| s.iter().zip(xs).all(|(s, x)| s == x.shape())).map(|p| p.1.clone());
            let entry = e.id;
            return match plan {
                Some(Plan::Whole(c)) => Action::Run(c),
                Some(Plan::Rerun) => Action::Capture { entry, store: false },
                // A function with breaks is re-run: its segments are cached by hash instead.
                None if e.plans.iter().any(|p| matches!(p.1, Plan::Rerun)) => {
                    st.specialisations += 1;
                    Action::Capture { entry, store: true }
                }
                // A new size under dynamic dims (a failed first capture left no plan).
                None => Action::NewSize { entry },
            };
        }
        if st.entries.len() >= self.opts.recompile_limit {
            if !std::mem::replace(&mut st.warned, true) {
                tracing::warn!(
                    target: "kiln::recompiles",
                    "function compiled at {}: recompile limit ({}) reached; inputs that match no compiled entry run eagerly from now on",
                    self.name,
                    self.opts.recompile_limit
                );
            }
            st.eager_calls += 1;
            return Action::Eager;
        }
        let id = st.next_entry;
        st.next_entry += 1;
        let dynamic = |i, d| self.opts.dynamic == Some(true) || self.opts.marked.contains(&(i, d));
        if st.entries.is_empty() {
            let guard = Guard::new(xs, dynamic);
            let dynamic = guard.is_dynamic();
            st.entries.push(Entry::new(id, guard, Vec::new()));
            return if dynamic { Action::NewSize { entry: id } } else { Action::Capture { entry: id, store: true } };
        }
        // Automatic dynamic shapes: the newest entry that differs only in sizes is generalised
        // (those dims become dynamic) and replaced, keeping its plans.
        let general = match self.opts.dynamic {
            None => st.entries.iter().rposition(|e| e.guard.generalise(xs).is_some()),
            Some(_) => None,
        };
        let closest = general.unwrap_or(st.entries.len() - 1);
        let why = st.entries[closest].guard.failures(xs).unwrap_or_default();
        let reason = if general.is_some() { format!("{why} (those dims are dynamic from now on)") } else { why };
        tracing::info!(target: "kiln::recompiles", "recompiling function compiled at {}: {reason}", self.name);
        st.recompiles.push(reason);
        let entry = match general {
            Some(i) => {
                let old = st.entries.remove(i);
                let guard = old.guard.generalise(xs).unwrap_or_else(|| Guard::new(xs, dynamic));
                Entry::new(id, guard, old.plans)
            }
            None => Entry::new(id, Guard::new(xs, dynamic), Vec::new()),
        };
        let dynamic = entry.guard.is_dynamic() && !entry.plans.iter().any(|p| matches!(p.1, Plan::Rerun));
        st.entries.push(entry);
        if dynamic { Action::NewSize { entry: id } } else { Action::Capture { entry: id, store: true } }
    }

    /// Runs `f` under capture on `xs`: returns its results and how later calls with these
    /// input sizes run.
    fn capture(self: &Arc<Self>, xs: &[Tensor], f: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>) -> Result<(Vec<Tensor>, Plan)> {
        let start = Instant::now();
        let (trace, placeholders) = crate::trace::start_capture(xs)?;
        let root = trace.root();
        let session = breaks::SessionGuard::push(root, self.clone());
        let results = f(&placeholders);
        let done = session.finish();
        let (brks, segment_time) = done.map(|s| (s.breaks, s.segment_time)).unwrap_or_default();
        let last = results.and_then(|r| {
            if self.opts.fullgraph
                && let Some(b) = brks.first()
            {
                return Err(b.fullgraph_error(&self.name));
            }
            crate::trace::cut(root, Some(r.as_slice()))
        });
        drop(trace);
        self.record(&brks, start.elapsed().saturating_sub(segment_time));
        let last = last?;
        let (outs, compiled) = segments::run(self, &last, !brks.is_empty())?;
        let plan = if brks.is_empty() { Plan::Whole(compiled) } else { Plan::Rerun };
        Ok((outs.into_iter().map(Tensor::from_host).collect(), plan))
    }

    /// Adds a capture's breaks and trace time to the function's counts.
    fn record(&self, brks: &[Break], trace_time: Duration) {
        let mut st = self.lock();
        st.trace_time += trace_time;
        for b in brks {
            match st.breaks.iter_mut().find(|x| x.brk == *b) {
                Some(x) => x.count += 1,
                None => st.breaks.push(explain::BreakInfo { brk: b.clone(), count: 1 }),
            }
        }
    }

    fn explain(&self) -> Explanation {
        let st = self.lock();
        Explanation {
            name: self.name.clone(),
            calls: st.calls,
            graphs: st.segments.infos.clone(),
            breaks: st.breaks.clone(),
            entries: st
                .entries
                .iter()
                .map(|e| EntryInfo {
                    guard: e.guard.clone(),
                    sizes: e.plans.len(),
                    reruns: e.plans.iter().any(|p| matches!(p.1, Plan::Rerun)),
                    generic: match &e.generic {
                        Generic::Untried => None,
                        Generic::Refused(why) => Some(GenericInfo::Refused(why.clone())),
                        Generic::Built { plan, sizes } => Some(GenericInfo::Built {
                            symbols: plan.describe(),
                            sizes: *sizes,
                            build_time: plan.kernels.build_time(),
                            library: plan.kernels.cache_outcome().to_string(),
                            source: plan.kernels.source().to_string(),
                        }),
                    },
                })
                .collect(),
            recompiles: st.recompiles.clone(),
            specialisations: st.specialisations,
            eager_calls: st.eager_calls,
            trace_time: st.trace_time,
        }
    }
}
