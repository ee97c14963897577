//! `max-autotune` on CUDA: every step of a program is timed on the device under its candidate
//! [`GpuStepTuning`]s and the fastest kept — threads per block of each generated kernel (its
//! own, or a library call's epilogue) and outer points per thread, the cuDNN algorithm of each conv, cuBLAS's call or one of
//! the cuBLASLt heuristic's algorithms for each matmul.
//!
//! Steps are tuned in program order during one run, so each is timed on its true inputs. Each
//! candidate is timed as a CUDA graph of [`REPS`] issues of the step, each after an L2 flush,
//! so the figure is device time without the host's launch gaps (what reduce-overhead replays)
//! and without operands left in L2 by the previous repetition. A
//! candidate replaces the built-in choice only when it beats it by
//! [`kiln_cpu::compiled::MIN_GAIN`]; and the winners are kept only when whole runs with them
//! (replayed as graphs) beat whole runs without.
//!
//! Unlike the CPU's knobs, a different cuDNN or cuBLASLt algorithm may round differently (it
//! sums in another order): results stay within the tolerance of the dtype, not bit-equal.

use super::graph::GraphReplay;
use super::tuning::{GpuStepTuning, GpuTuning, LtAlgo};
use super::{Event, Executable, GpuStep};
use crate::codegen::Launch;
use crate::device::DeviceBuffer;
use kiln_cpu::compiled::{MIN_GAIN, WHOLE_RUNS, describe};
use kiln_ir::{Error, HostTensor, Result};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Issues of a step captured in one timing graph.
const REPS: usize = 8;

/// Timed launches of each graph (the fastest counts).
const ROUNDS: usize = 3;

/// Bytes zeroed before each timed issue so it starts with a cold L2 (the H200's is 60 MB), as
/// Triton's `do_bench` does. Without it a step repeated back to back finds its operands in L2,
/// which no step of a real run does: on bert-base the per-step gains then claimed 0.39 ms and
/// whole runs showed 0.02 ms; with it, 0.27 ms claimed and 0.27 ms shown.
const FLUSH_BYTES: usize = 128 << 20;

/// L2 flushing between timed issues: the buffer zeroed, and the device time of zeroing it.
struct Flush {
    buf: DeviceBuffer,
    us: f64,
}

/// What the search found for one step.
#[derive(Clone, Debug)]
pub struct GpuStepResult {
    /// The step's index in the program.
    pub step: usize,
    /// What the step runs.
    pub what: String,
    /// Microseconds of device time under the built-in choice.
    pub default_us: f64,
    /// Microseconds under the kept choice.
    pub best_us: f64,
    /// The kept choice (default when nothing beat the built-in one).
    pub best: GpuStepTuning,
    /// Candidates timed, the built-in choice included.
    pub candidates: usize,
}

/// The search as a whole.
#[derive(Clone, Debug, Default)]
pub struct GpuAutotuneReport {
    /// One entry per step that had candidates, in program order.
    pub steps: Vec<GpuStepResult>,
    /// True when the budget ran out before every step was tried.
    pub out_of_budget: bool,
    /// Whole runs (fastest of [`WHOLE_RUNS`] graph replays) under the built-in choices and
    /// under the winners, in microseconds.
    pub whole_us: (f64, f64),
    /// True when the winners did not make the whole run faster, so every step keeps its
    /// built-in choice.
    pub rejected: bool,
}

/// Outer points per thread (or block) a kernel may take besides one.
const SPREADS: [u32; 3] = [2, 4, 8];

/// Blocks of one wave on a large GPU (132 SMs on an H100/H200): a kernel's grid is spread only
/// when it stays several waves.
const WAVE_BLOCKS: u32 = 132;

/// Block sizes a kernel of `launch` may take other than its own: smaller ones (a kernel is
/// compiled with `__launch_bounds__` of its own block, so the device refuses larger ones).
fn block_candidates(launch: Launch) -> Vec<u32> {
    let sizes: &[u32] = match launch {
        Launch::PerThread { .. } => &[64, 128, 256, 512],
        Launch::PerBlock { .. } => &[32, 64, 128, 256],
        Launch::PerWarp { .. } => &[32, 64, 128],
    };
    sizes.iter().copied().filter(|&b| b < launch.block()).collect()
}

impl Executable {
    /// Runs every step with `t`'s choices from now on (a reduce-overhead graph is captured
    /// anew). Errors when a choice does not fit its step (a knob of another kind of step, an
    /// algorithm the library does not offer): a tuning stored for another program or library.
    pub fn set_tuning(&mut self, t: &GpuTuning) -> Result<()> {
        if t.steps.len() > self.steps.len() {
            return Err(Error::Value(format!("a tuning of {} steps for a program of {}", t.steps.len(), self.steps.len())));
        }
        for i in 0..self.steps.len() {
            self.set_step(i, t.step(i))?;
        }
        self.fit_workspace()?;
        if self.replay.is_some() {
            self.replay = Some(GraphReplay::default());
        }
        Ok(())
    }

    /// Sets step `i`'s knobs (the workspace may then be too small: see [`Self::fit_workspace`]).
    fn set_step(&mut self, i: usize, t: GpuStepTuning) -> Result<()> {
        let gpu = self.gpu.clone();
        let misfit = |knob: &str| Error::Value(format!("tuning knob {knob} does not apply to step {i}"));
        let step = &mut self.steps[i];
        match step {
            GpuStep::Kernel(k) => k.set_launch(t.block, t.spread),
            _ if t.block.is_some() => return Err(misfit("block")),
            _ if t.spread.is_some() => return Err(misfit("spread")),
            _ => {}
        }
        match step {
            GpuStep::Conv { plan, .. } => plan.set_algo(&gpu, t.conv_algo)?,
            _ if t.conv_algo.is_some() => return Err(misfit("conv_algo")),
            _ => {}
        }
        match step {
            GpuStep::Matmul { plan, .. } => plan.set_lt(&gpu, t.lt_algo)?,
            _ if t.lt_algo.is_some() => return Err(misfit("lt_algo")),
            _ => {}
        }
        match step {
            GpuStep::Matmul { epilogue: Some(e), .. } | GpuStep::Conv { epilogue: Some(e), .. } | GpuStep::Host { epilogue: Some(e), .. } => e.set_launch(t.epilogue_block, None),
            _ if t.epilogue_block.is_some() => return Err(misfit("epilogue_block")),
            _ => {}
        }
        Ok(())
    }

    /// Every candidate of step `i` the search may time, each changing one knob (the built-in
    /// choices left out): its kernel's block sizes, its conv's other cuDNN algorithms, its
    /// matmul's cuBLASLt algorithms, its epilogue kernel's block sizes.
    pub fn candidates(&mut self, i: usize) -> Result<Vec<GpuStepTuning>> {
        let mut all = self.main_candidates(i)?;
        all.extend(self.epilogue_candidates(i).into_iter().map(|b| GpuStepTuning { epilogue_block: Some(b), ..GpuStepTuning::default() }));
        Ok(all)
    }

    /// Block sizes step `i`'s epilogue kernel may take other than its own.
    fn epilogue_candidates(&self, i: usize) -> Vec<u32> {
        self.steps[i].epilogue().filter(|k| k.grid.0 > 0).map(|k| block_candidates(k.launch)).unwrap_or_default()
    }

    /// The candidates for step `i`'s library call or kernel (not its epilogue), the built-in
    /// choice left out.
    fn main_candidates(&mut self, i: usize) -> Result<Vec<GpuStepTuning>> {
        let gpu = self.gpu.clone();
        let none = GpuStepTuning::default();
        Ok(match &mut self.steps[i] {
            GpuStep::Kernel(k) if k.grid.0 > 0 => {
                let blocks = block_candidates(k.launch).into_iter().map(|b| GpuStepTuning { block: Some(b), ..none });
                // More points per thread only where the grid is more than a few waves.
                let spreads = SPREADS.iter().filter(|&&f| k.grid.0 >= 4 * f * WAVE_BLOCKS).map(|&f| GpuStepTuning { spread: Some(f), ..none });
                blocks.chain(spreads).collect()
            }
            GpuStep::Conv { plan, .. } => plan.algos().skip(1).map(|a| GpuStepTuning { conv_algo: Some(a), ..none }).collect(),
            GpuStep::Matmul { plan, .. } => plan.lt_candidates(&gpu)?.into_iter().map(|a| GpuStepTuning { lt_algo: Some(a), ..none }).collect(),
            _ => Vec::new(),
        })
    }

    /// Device microseconds of one issue of step `i` with its current knobs: [`REPS`] issues,
    /// each after an L2 flush, captured as a CUDA graph and replayed [`ROUNDS`] times, the
    /// fastest per issue less the flush's own time.
    fn time_step(&self, i: usize, flush: &Flush) -> Result<f64> {
        let step = &self.steps[i];
        let t = self.time_graph(REPS, || {
            (0..REPS).try_for_each(|_| {
                self.wipe(flush)?;
                self.issue_step(step, &mut || Ok(()))
            })
        })?;
        Ok(t - flush.us)
    }

    /// Zeroes the flush buffer on kiln's stream.
    fn wipe(&self, f: &Flush) -> Result<()> {
        // SAFETY: a live buffer of `bytes()` bytes, zeroed on kiln's stream.
        unsafe { cudarc::driver::result::memset_d8_async(f.buf.ptr(), 0, f.buf.bytes(), self.gpu.cu_stream()) }
            .map_err(|e| crate::device::driver_error("zeroing the L2 flush buffer", e))
    }

    /// The flush buffer and the device time of zeroing it.
    fn flush(&self) -> Result<Flush> {
        let mut f = Flush { buf: self.gpu.alloc(FLUSH_BYTES)?, us: 0.0 };
        f.us = self.time_graph(REPS, || (0..REPS).try_for_each(|_| self.wipe(&f)))?;
        Ok(f)
    }

    /// Device microseconds per rep of the work `issue` captures (`reps` repetitions of it).
    fn time_graph(&self, reps: usize, issue: impl FnOnce() -> Result<()>) -> Result<f64> {
        let graph = GraphReplay::default();
        // The first launch captures, and warms the step up (lazy loading, library plans).
        graph.launch(&self.gpu, issue)?;
        let (start, end) = (Event::new()?, Event::new()?);
        let mut best = f64::INFINITY;
        for _ in 0..ROUNDS {
            start.record(&self.gpu)?;
            graph.launch(&self.gpu, || Ok(()))?;
            end.record(&self.gpu)?;
            end.synchronize()?;
            best = best.min(start.ms_until(&end)? * 1e3 / reps as f64);
        }
        Ok(best)
    }

    /// Searches the knobs of every step on `inputs` within `budget` (steps past it keep the
    /// built-in choices); `progress(done, total)` after each step. Leaves the executable set to
    /// the result, which it returns with what was measured.
    pub fn autotune(&mut self, inputs: &[HostTensor], budget: Duration, progress: &mut dyn FnMut(usize, usize)) -> Result<(GpuTuning, GpuAutotuneReport)> {
        if self.host_steps() > 0 {
            // Host steps cannot be captured in the timing graphs (nor replayed).
            return Err(Error::Unsupported(format!("max-autotune: {} step(s) run on the host, which a CUDA graph cannot capture", self.host_steps())));
        }
        let n = self.steps.len();
        let defaults = GpuTuning { steps: vec![GpuStepTuning::default(); n] };
        self.set_tuning(&defaults)?;
        self.stage_inputs(inputs)?;
        self.gpu.bind()?;
        self.issue_steps()?;
        self.gpu.synchronize()?;
        let began = Instant::now();
        let mut tuning = defaults.clone();
        let mut report = GpuAutotuneReport::default();
        let mut gemms = HashMap::new();
        let flush = self.flush()?;
        for i in 0..n {
            if began.elapsed() > budget {
                report.out_of_budget = true;
            } else if let Some(r) = self.tune_step(i, began, budget, &mut report.out_of_budget, &mut gemms, &flush)? {
                tuning.steps[i] = r.best;
                report.steps.push(r);
            }
            // Later steps read this one's result, made with its kept knobs.
            self.issue_step(&self.steps[i], &mut || Ok(()))?;
            progress(i + 1, n);
        }
        self.gpu.synchronize()?;
        let whole = |exe: &mut Executable, t: &GpuTuning| -> Result<f64> {
            exe.set_tuning(t)?;
            exe.time_graph(1, || exe.issue_steps())
        };
        let (mut plain, mut tuned) = (f64::INFINITY, f64::INFINITY);
        if tuning.tuned_steps() > 0 {
            for _ in 0..WHOLE_RUNS {
                plain = plain.min(whole(self, &defaults)?);
                tuned = tuned.min(whole(self, &tuning)?);
            }
            report.whole_us = (plain, tuned);
            if tuned >= plain {
                report.rejected = true;
                tuning = defaults;
            }
        }
        self.set_tuning(&tuning)?;
        Ok((tuning, report))
    }

    /// Times step `i`'s candidates (its call or kernel, then its epilogue's block with the best
    /// call kept) and leaves the step set to the winner; `None` for a step without candidates.
    /// `gemms` keeps the cuBLASLt winner of each matmul problem already searched: a step with
    /// the same problem (BERT's layers) only times that one against cuBLAS.
    fn tune_step(&mut self, i: usize, began: Instant, budget: Duration, out_of_budget: &mut bool, gemms: &mut HashMap<String, Option<LtAlgo>>, flush: &Flush) -> Result<Option<GpuStepResult>> {
        let gemm_key = match &self.steps[i] {
            GpuStep::Matmul { plan, .. } => plan.lt_key(),
            _ => None,
        };
        let main = match gemm_key.as_ref().and_then(|k| gemms.get(k)) {
            Some(known) => known.iter().map(|&a| GpuStepTuning { lt_algo: Some(a), ..GpuStepTuning::default() }).collect(),
            None => self.main_candidates(i)?,
        };
        let epilogue = self.epilogue_candidates(i);
        if main.is_empty() && epilogue.is_empty() {
            return Ok(None);
        }
        let default_us = self.time_step(i, flush)?;
        let (mut best, mut best_us, mut tried) = (GpuStepTuning::default(), default_us, 1);
        let mut try_one = |exe: &mut Executable, c: GpuStepTuning, best: &mut GpuStepTuning, best_us: &mut f64| -> bool {
            if began.elapsed() > budget {
                *out_of_budget = true;
                return false;
            }
            tried += 1;
            match exe.set_step(i, c).and_then(|_| exe.fit_workspace()).and_then(|_| exe.time_step(i, flush)) {
                Ok(us) if us < *best_us => (*best, *best_us) = (c, us),
                Ok(_) => {}
                Err(e) => tracing::debug!(target: "kiln::autotune", "step {i}: candidate {c:?} failed: {e}"),
            }
            true
        };
        for c in main {
            if !try_one(self, c, &mut best, &mut best_us) {
                break;
            }
        }
        let call = best;
        for b in epilogue {
            if !try_one(self, GpuStepTuning { epilogue_block: Some(b), ..call }, &mut best, &mut best_us) {
                break;
            }
        }
        // The built-in choice stays unless clearly beaten: noise must not pick knobs.
        if best_us > default_us * (1.0 - MIN_GAIN) {
            (best, best_us) = (GpuStepTuning::default(), default_us);
        }
        if let Some(k) = gemm_key
            && !*out_of_budget
        {
            gemms.entry(k).or_insert(best.lt_algo);
        }
        self.set_step(i, best)?;
        self.fit_workspace()?;
        Ok(Some(GpuStepResult { step: i, what: describe(&self.program.steps[i].kind), default_us, best_us, best, candidates: tried }))
    }
}
