//! [`Executable`]: a [`Program`] bound to a way of running its kernels, ready to run many
//! times. Everything a run's raw memory accesses rely on (views inside their buffers, kernel
//! arguments no longer than their buffers, the memory plan inside the arena, only
//! temporaries written) is checked once, when it is built.

use super::prepack::{self, Prepacked};
use super::launch::LaunchKernel;
use super::tuning::{StepTuning, Tuning};
use super::views::{check_view, read_dense};
use super::{raw, steps};
use kiln_ir::{Error, HostTensor, Result};
use kiln_sched::{BufId, BufKind, Kernel, Program, StepKind};
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// Alignment of every temporary (and of the arena): a cache line, as the memory planner and
/// vector code assume.
const ALIGN: usize = 64;

/// A program ready to run: constants bound, temporaries placed in one arena that is kept
/// between runs (a steady-state run allocates only its outputs).
pub struct Executable {
    program: Program,
    kernels: Arc<dyn LaunchKernel>,
    /// Dense copies of the program's constants (shared, no copy when already dense).
    consts: Vec<HostTensor>,
    /// Byte offset of each temporary in the arena.
    offsets: Vec<Option<usize>>,
    arena_bytes: usize,
    /// f32 elements of scratch the largest convolution needs.
    scratch_elems: usize,
    /// Per step: the constant operand it packs once (see [`prepack`]).
    prepacked: Vec<Option<Prepacked>>,
    /// Per-step knobs (default: none set).
    tuning: Tuning,
    state: Mutex<State>,
}

/// Memory reused from run to run; the lock also serialises concurrent runs.
#[derive(Default)]
pub(crate) struct State {
    arena: Vec<u64>,
    pub(crate) scratch: Vec<f32>,
}

impl Executable {
    /// Binds `program` to `kernels`, checking the program (see the module docs).
    pub fn new(program: Program, kernels: Arc<dyn LaunchKernel>) -> Result<Executable> {
        let consts = bind_consts(&program)?;
        let (offsets, arena_bytes) = place_temps(&program)?;
        check_steps(&program)?;
        let prepacked: Vec<Option<Prepacked>> = program
            .steps
            .iter()
            .map(|s| prepack::for_step(&program, &s.kind))
            .collect();
        let scratch_elems = program
            .steps
            .iter()
            .zip(&prepacked)
            .filter_map(|(s, d)| match &s.kind {
                StepKind::Extern {
                    op,
                    inputs,
                    out_shape,
                    ..
                } => steps::scratch_elems(
                    op,
                    inputs,
                    out_shape,
                    d.as_ref(),
                ),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        Ok(Executable {
            program,
            kernels,
            consts,
            offsets,
            arena_bytes,
            scratch_elems,
            prepacked,
            tuning: Tuning::default(),
            state: Mutex::new(State::default()),
        })
    }

    /// The program this runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Bytes a run holds besides inputs, constants and outputs: the arena of temporaries and
    /// the convolution scratch.
    pub fn peak_bytes(&self) -> usize {
        self.arena_bytes + self.scratch_elems * std::mem::size_of::<f32>()
    }

    /// For each step, the algorithm that packs a constant for it, by name (`None` for the
    /// steps that pack nothing): which convs run by Winograd, on the conv tiles or on kiln's
    /// GEMM, and which matmuls on kiln's GEMM.
    pub fn packed_algorithms(&self) -> Vec<Option<&'static str>> {
        self.prepacked.iter().map(|p| p.as_ref().map(Prepacked::name)).collect()
    }

    /// The per-step knobs runs use (empty: every heuristic's default).
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// Sets the per-step knobs (from [`super::autotune`] or the cache); an entry for a step the
    /// program does not have is an error.
    pub fn set_tuning(&mut self, tuning: Tuning) -> Result<()> {
        if tuning.steps.len() > self.program.steps.len() {
            return Err(Error::Value(format!(
                "a tuning for {} steps does not fit a program of {}",
                tuning.steps.len(),
                self.program.steps.len()
            )));
        }
        self.tuning = tuning;
        Ok(())
    }

    /// Runs the program on `inputs` (any layouts; made dense first) and returns its outputs.
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.run_with(inputs, |run, i| run.step(i, self.tuning.step(i)))
    }

    /// Runs the program, with `each(run, i)` in charge of running step `i` (the autotuner
    /// times candidates there); returns the outputs.
    pub(crate) fn run_with(
        &self,
        inputs: &[HostTensor],
        mut each: impl FnMut(&mut BoundRun, usize) -> Result<()>,
    ) -> Result<Vec<HostTensor>> {
        let p = &self.program;
        let dense = self.dense_inputs(inputs)?;
        let mut guard = self.state.lock().map_err(|_| {
            Error::Value("a previous run of this executable panicked; build a new one".into())
        })?;
        let state = &mut *guard;
        let words = self.arena_bytes.div_ceil(8) + ALIGN / 8;
        if state.arena.len() < words {
            state.arena = vec![0u64; words];
        }
        if state.scratch.len() < self.scratch_elems {
            state.scratch = vec![0.0; self.scratch_elems];
        }
        let base = {
            let p = state.arena.as_mut_ptr() as *mut u8;
            // SAFETY: the arena has ALIGN spare bytes, so the aligned base stays inside it.
            unsafe { p.add(p.align_offset(ALIGN)) }
        };
        let ptrs: Vec<*mut u8> = p
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| match b.kind {
                BufKind::Input(k) => raw::storage_ptr(&dense[k].storage),
                BufKind::Const(c) => raw::storage_ptr(&self.consts[c.0 as usize].storage),
                // SAFETY: `place_temps` put every temporary inside `arena_bytes`.
                BufKind::Temp => unsafe { base.add(self.offsets[i].unwrap_or(0)) },
            })
            .collect();
        let mut run = BoundRun {
            exe: self,
            ptrs: &ptrs,
            scratch: &mut state.scratch,
            ran_inside: None,
        };
        // The steps run on a worker of rayon's pool, so that each step's parallel parts start
        // there: from this thread, every step's work was sent to the pool and this thread woken
        // when it was done (resnet50, 2 threads: 45.8 -> 41.1 ms summed over the steps). The
        // other workers spin through the run, ready for each step's tasks (`par::run_awake`).
        let steps = p.steps.len();
        let job = OnWorker(move || -> Result<()> {
            crate::par::run_awake(|| {
                for i in 0..steps {
                    each(&mut run, i)?;
                }
                Ok(())
            })
        });
        rayon::scope(move |_| job.call())?;
        p.outputs
            .iter()
            .map(|(id, shape)| read_dense(ptrs[id.index()], p.buffer(*id).dtype, shape))
            .collect()
    }

    /// The inputs checked against the program's and made dense.
    fn dense_inputs(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let p = &self.program;
        if inputs.len() != p.inputs.len() {
            return Err(Error::Value(format!(
                "the compiled program takes {} inputs, got {}",
                p.inputs.len(),
                inputs.len()
            )));
        }
        let mut dense = Vec::with_capacity(inputs.len());
        for (i, (t, &id)) in inputs.iter().zip(&p.inputs).enumerate() {
            let b = p.buffer(id);
            if t.dtype() != b.dtype {
                return Err(Error::DType(format!(
                    "input {i}: the compiled program expects {} but got {} {:?}",
                    b.dtype,
                    t.dtype(),
                    t.shape()
                )));
            }
            if t.numel() != b.numel {
                return Err(Error::Shape(format!(
                    "input {i}: the compiled program expects {} elements but got shape {:?} ({} elements); \
                     recompile for this shape",
                    b.numel,
                    t.shape(),
                    t.numel()
                )));
            }
            dense.push(t.contiguous());
        }
        Ok(dense)
    }
}

/// A run in progress: the buffers bound, steps run one at a time.
pub(crate) struct BoundRun<'a> {
    exe: &'a Executable,
    ptrs: &'a [*mut u8],
    scratch: &'a mut Vec<f32>,
    /// The steps that last ran inside the step before them (see [`BoundRun::step`]).
    ran_inside: Option<Range<usize>>,
}

impl BoundRun<'_> {
    /// The program being run.
    pub(crate) fn program(&self) -> &Program {
        &self.exe.program
    }

    /// The steps that ran inside the step run last, if any did (see [`BoundRun::step`]).
    pub(crate) fn ran_inside(&self) -> Option<Range<usize>> {
        self.ran_inside.clone()
    }

    /// The constants step `i` packs once, which say how it runs (see `prepack`).
    pub(crate) fn prepacked(&self, i: usize) -> Option<&Prepacked> {
        self.exe.prepacked[i].as_ref()
    }

    /// Runs step `i` with the knobs `tune`, and the steps after it inside it when they run
    /// [`with_previous`](kiln_sched::Step::with_previous) and this runner can (see
    /// `steps::run_chained`; else each runs on its own when its turn comes).
    pub(crate) fn step(&mut self, i: usize, tune: StepTuning) -> Result<()> {
        let p = &self.exe.program;
        let step = &p.steps[i];
        if let Some(inside) = self.ran_inside.take_if(|r| r.contains(&i)) {
            if i + 1 < inside.end {
                self.ran_inside = Some(inside);
            }
            return Ok(());
        }
        let end = (i + 1..p.steps.len()).find(|&j| !p.steps[j].with_previous).unwrap_or(p.steps.len());
        if end > i + 1 {
            let chain: Vec<&StepKind> = p.steps[i..end].iter().map(|s| &s.kind).collect();
            let packed: Vec<Option<&Prepacked>> = self.exe.prepacked[i..end].iter().map(Option::as_ref).collect();
            let ran = steps::run_chained(p, &chain, self.ptrs, &*self.exe.kernels, self.scratch, tune, &packed)
                .map_err(|e| e.context(&format!("steps {i}..{end} (nodes {:?}..)", step.nodes)))?;
            if ran {
                self.ran_inside = Some(i + 1..end);
                return Ok(());
            }
        }
        steps::run_step(
            p,
            &step.kind,
            self.ptrs,
            &*self.exe.kernels,
            self.scratch,
            tune,
            self.exe.prepacked[i].as_ref(),
        )
        .map_err(|e| e.context(&format!("step {i} (nodes {:?})", step.nodes)))
    }
}

/// Dense copies of the constants, checked against their buffers.
fn bind_consts(p: &Program) -> Result<Vec<HostTensor>> {
    for (i, b) in p.buffers.iter().enumerate() {
        match b.kind {
            BufKind::Const(c) => {
                let t = p.consts.get(c.0 as usize).ok_or_else(|| {
                    Error::Graph(format!(
                        "buffer {i} is constant {} of {}",
                        c.0,
                        p.consts.len()
                    ))
                })?;
                if t.dtype() != b.dtype || t.numel() != b.numel {
                    return Err(Error::Graph(format!(
                        "buffer {i} ({} x{}) does not match constant {} ({} {:?})",
                        b.dtype,
                        b.numel,
                        c.0,
                        t.dtype(),
                        t.shape()
                    )));
                }
            }
            BufKind::Input(k) => {
                if p.inputs.get(k) != Some(&BufId(i as u32)) {
                    return Err(Error::Graph(format!(
                        "buffer {i} is input {k} but program.inputs disagrees"
                    )));
                }
            }
            BufKind::Temp => {}
        }
    }
    for (k, id) in p.inputs.iter().enumerate() {
        if p.buffers.get(id.index()).map(|b| b.kind) != Some(BufKind::Input(k)) {
            return Err(Error::Graph(format!(
                "program input {k} is buffer {}, not an input buffer",
                id.0
            )));
        }
    }
    Ok(p.consts.iter().map(|t| t.contiguous()).collect())
}

/// Offsets of the temporaries: the memory plan's, checked, or (without a plan) one disjoint
/// aligned slot each.
pub fn place_temps(p: &Program) -> Result<(Vec<Option<usize>>, usize)> {
    let Some(plan) = &p.memory else {
        let mut offsets = vec![None; p.buffers.len()];
        let mut end = 0usize;
        for (i, b) in p.buffers.iter().enumerate() {
            if b.kind == BufKind::Temp {
                offsets[i] = Some(end);
                end += b.bytes().next_multiple_of(ALIGN);
            }
        }
        return Ok((offsets, end));
    };
    if plan.offsets.len() != p.buffers.len() {
        return Err(Error::Graph(format!(
            "memory plan has {} offsets for {} buffers",
            plan.offsets.len(),
            p.buffers.len()
        )));
    }
    for (i, b) in p.buffers.iter().enumerate() {
        if b.kind != BufKind::Temp {
            continue;
        }
        match plan.offsets[i] {
            Some(o)
                if o % ALIGN == 0
                    && o.checked_add(b.bytes())
                        .is_some_and(|e| e <= plan.arena_bytes) => {}
            o => {
                return Err(Error::Graph(format!(
                    "memory plan places temporary {i} ({} bytes) at {o:?}, not a {ALIGN}-aligned slot inside \
                     the {}-byte arena",
                    b.bytes(),
                    plan.arena_bytes
                )));
            }
        }
    }
    Ok((plan.offsets.clone(), plan.arena_bytes))
}

/// Checks each step's arguments and views against the buffers.
pub fn check_steps(p: &Program) -> Result<()> {
    let temp = |id: &BufId, what: &str| -> Result<()> {
        match p.buffers.get(id.index()) {
            Some(b) if b.kind == BufKind::Temp => Ok(()),
            Some(_) => Err(Error::Graph(format!(
                "{what} writes buffer {}, an input or constant",
                id.0
            ))),
            None => Err(Error::Graph(format!(
                "{what} names buffer {} of {}",
                id.0,
                p.buffers.len()
            ))),
        }
    };
    for (i, step) in p.steps.iter().enumerate() {
        let what = format!("step {i}");
        match &step.kind {
            StepKind::Kernel { kernel, args } => check_args(p, kernel, args, &what)?,
            StepKind::Extern {
                inputs,
                out,
                out_shape,
                epilogue,
                ..
            } => {
                for v in inputs {
                    check_view(p, v, &what)?;
                }
                temp(out, &what)?;
                check_out(p, *out, out_shape, &what)?;
                if let Some(e) = epilogue {
                    check_args(p, &e.kernel, &e.args, &format!("{what} epilogue"))?;
                }
            }
            StepKind::Eval {
                inputs,
                out,
                out_shape,
                out_strides,
                ..
            } => {
                for v in inputs {
                    check_view(p, v, &what)?;
                }
                temp(out, &what)?;
                check_out(p, *out, out_shape, &what)?;
                if let Some(s) = out_strides
                    && !kiln_sched::write_through::is_permuted_dense(out_shape, s)
                {
                    return Err(Error::Graph(format!(
                        "{what}: output strides {s:?} are not a permutation of a dense {out_shape:?}"
                    )));
                }
            }
        }
    }
    for (i, (id, shape)) in p.outputs.iter().enumerate() {
        check_out(p, *id, shape, &format!("output {i}"))?;
    }
    Ok(())
}

fn check_out(p: &Program, id: BufId, shape: &[usize], what: &str) -> Result<()> {
    let b = p.buffers.get(id.index()).ok_or_else(|| {
        Error::Graph(format!(
            "{what} names buffer {} of {}",
            id.0,
            p.buffers.len()
        ))
    })?;
    if shape.iter().product::<usize>() != b.numel {
        return Err(Error::Graph(format!(
            "{what}: shape {shape:?} does not fit buffer {} of {} elements",
            id.0, b.numel
        )));
    }
    Ok(())
}

/// A kernel's declared arguments must fit the buffers bound to them.
fn check_args(p: &Program, k: &Kernel, args: &[BufId], what: &str) -> Result<()> {
    let what = format!("{what} (kernel {})", k.name);
    if args.len() != k.args.len() {
        return Err(Error::Graph(format!(
            "{what}: {} buffers for {} arguments",
            args.len(),
            k.args.len()
        )));
    }
    for (j, (id, a)) in args.iter().zip(&k.args).enumerate() {
        let b = p.buffers.get(id.index()).ok_or_else(|| {
            Error::Graph(format!(
                "{what}: argument {j} is buffer {} of {}",
                id.0,
                p.buffers.len()
            ))
        })?;
        if b.dtype != a.dtype || a.len > b.numel {
            return Err(Error::Graph(format!(
                "{what}: argument {j} ({} x{}) does not fit buffer {} ({} x{})",
                a.dtype, a.len, id.0, b.dtype, b.numel
            )));
        }
        if a.written && b.kind != BufKind::Temp {
            return Err(Error::Graph(format!(
                "{what}: argument {j} writes buffer {}, an input or constant",
                id.0
            )));
        }
    }
    Ok(())
}

/// A run's steps sent to a worker of rayon's pool (see [`Executable::run_with`]).
struct OnWorker<F>(F);

// SAFETY: `rayon::scope` returns only once the closure has run, while the thread that called it
// waits, so what the closure borrows (the bound buffers, raw pointers into the arena) outlives
// it and is used by one thread at a time, as it was on the calling thread.
unsafe impl<F> Send for OnWorker<F> {}

impl<F: FnOnce() -> Result<()>> OnWorker<F> {
    /// Runs the closure (a method, so that a `move` closure takes the whole wrapper along).
    fn call(self) -> Result<()> {
        (self.0)()
    }
}
