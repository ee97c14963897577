//! `max-autotune` on the CPU: every kernel step and extern of a program is timed on this
//! machine under a few candidate [`StepTuning`]s (thread splits of a launch; GEMM row blocks and
//! epilogue splits of an extern) and the fastest kept. Steps are tuned in program order during
//! one real run, so each step is timed on its true inputs. A candidate replaces the heuristic
//! only when it beats it by [`MIN_GAIN`], so noise does not pick knobs; and the winners are kept
//! only when whole runs with them beat whole runs without by as much.

use super::executable::{BoundRun, Executable};
use super::steps;
use super::tuning::{StepTuning, Tuning};
use kiln_ir::{HostTensor, Result};
use kiln_sched::{ExternOp, StepKind};
use std::time::{Duration, Instant};

/// A candidate must be this much faster than the heuristic to replace it.
pub const MIN_GAIN: f64 = 0.03;

/// Whole runs timed under each of the heuristics and the winners before the winners are kept.
pub const WHOLE_RUNS: usize = 5;

/// How hard the search tries.
#[derive(Clone, Copy, Debug)]
pub struct AutotuneOptions {
    /// Wall time after which the remaining steps keep their heuristics.
    pub budget: Duration,
    /// Timed repetitions per candidate (the fastest counts: other load on the machine only
    /// ever adds time, so the minimum is the steadiest estimate of the step's own cost).
    pub reps: usize,
}

impl Default for AutotuneOptions {
    fn default() -> Self {
        AutotuneOptions { budget: Duration::from_secs(60), reps: 5 }
    }
}

/// What the search found for one step.
#[derive(Clone, Debug)]
pub struct StepResult {
    /// The step's index in the program.
    pub step: usize,
    /// What the step runs (kernel name, or the extern and its output shape).
    pub what: String,
    /// Microseconds under the heuristic (fastest repetition).
    pub default_us: f64,
    /// Microseconds under the kept choice (fastest repetition).
    pub best_us: f64,
    /// The kept choice (default when nothing beat the heuristic).
    pub best: StepTuning,
    /// Candidates timed, the heuristic included.
    pub candidates: usize,
}

/// The search as a whole.
#[derive(Clone, Debug, Default)]
pub struct AutotuneReport {
    /// One entry per step that had candidates, in program order.
    pub steps: Vec<StepResult>,
    /// True when the budget ran out before every step was tried.
    pub out_of_budget: bool,
    /// Whole runs (fastest of [`WHOLE_RUNS`]) under the heuristics and under the per-step
    /// winners, in microseconds, timed alternately after the search.
    pub whole_us: (f64, f64),
    /// True when the per-step winners did not make the whole run faster, so every step keeps
    /// its heuristic (steps timed alone see warm caches that a whole run does not).
    pub rejected: bool,
    /// Wall time of the search.
    pub seconds: f64,
}

impl AutotuneReport {
    /// Sum of the tuned steps' heuristic and chosen times, in microseconds.
    pub fn totals_us(&self) -> (f64, f64) {
        self.steps.iter().fold((0.0, 0.0), |(d, b), s| (d + s.default_us, b + s.best_us))
    }
}

/// Searches knobs for every step of `exe` on `inputs` (any values of the right shapes and
/// dtypes; integer inputs used as indices must be in range). `progress(done, total)` is called
/// after each step. Returns the tuning (not yet set on `exe`) and what was measured.
pub fn autotune(
    exe: &Executable,
    inputs: &[HostTensor],
    opts: &AutotuneOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(Tuning, AutotuneReport)> {
    let start = Instant::now();
    let steps = exe.program().steps.len();
    let threads = rayon::current_num_threads().max(1);
    let mut tuning = Tuning { steps: vec![StepTuning::default(); steps] };
    let mut report = AutotuneReport::default();
    // One untimed run first: page in the weights and the arena.
    exe.run(inputs)?;
    exe.run_with(inputs, |run, i| {
        let cands = candidates(run, i, threads);
        if cands.len() < 2 || start.elapsed() > opts.budget {
            report.out_of_budget |= cands.len() >= 2;
            progress(i + 1, steps);
            return run.step(i, StepTuning::default());
        }
        let mut times = Vec::with_capacity(cands.len());
        for &c in &cands {
            times.push(time_step(run, i, c, opts.reps)?);
        }
        let default_us = times[0];
        let (mut best, mut best_us) = (StepTuning::default(), default_us);
        for (&c, &t) in cands.iter().zip(&times).skip(1) {
            if t < best_us && t < default_us * (1.0 - MIN_GAIN) {
                (best, best_us) = (c, t);
            }
        }
        tuning.steps[i] = best;
        report.steps.push(StepResult {
            step: i,
            what: steps::describe(&run.program().steps[i].kind),
            default_us,
            best_us,
            best,
            candidates: cands.len(),
        });
        progress(i + 1, steps);
        run.step(i, best)
    })?;
    if tuning.tuned_steps() > 0 {
        let (mut plain, mut tuned) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..WHOLE_RUNS {
            plain = plain.min(time_whole(exe, inputs, &Tuning::default())?);
            tuned = tuned.min(time_whole(exe, inputs, &tuning)?);
        }
        report.whole_us = (plain, tuned);
        if tuned > plain * (1.0 - MIN_GAIN) {
            report.rejected = true;
            tuning = Tuning { steps: vec![StepTuning::default(); steps] };
        }
    }
    report.seconds = start.elapsed().as_secs_f64();
    Ok((tuning, report))
}

/// Microseconds of one whole run of `exe` under `tuning`.
fn time_whole(exe: &Executable, inputs: &[HostTensor], tuning: &Tuning) -> Result<f64> {
    let s = Instant::now();
    exe.run_with(inputs, |run, i| run.step(i, tuning.step(i)))?;
    Ok(s.elapsed().as_secs_f64() * 1e6)
}

/// The fastest of `reps` runs of step `i` under `tune`, in microseconds (after one untimed run).
fn time_step(run: &mut BoundRun, i: usize, tune: StepTuning, reps: usize) -> Result<f64> {
    run.step(i, tune)?;
    let mut t = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let s = Instant::now();
        run.step(i, tune)?;
        t.push(s.elapsed().as_secs_f64() * 1e6);
    }
    Ok(t.into_iter().fold(f64::INFINITY, f64::min))
}

/// The heuristic first, then the alternatives worth timing for step `i`.
fn candidates(run: &BoundRun, i: usize, threads: usize) -> Vec<StepTuning> {
    let mut out = vec![StepTuning::default()];
    let splits = |rows: usize| -> Vec<usize> {
        let mut v: Vec<usize> = [1, threads, 2 * threads, 4 * threads]
            .into_iter()
            .filter(|&c| c <= rows.max(1))
            .collect();
        v.dedup();
        v
    };
    match &run.program().steps[i].kind {
        StepKind::Kernel { kernel, .. } => {
            let rows = kernel.outer.first().map_or(1, |l| l.extent);
            if rows >= 2 {
                out.extend(splits(rows).into_iter().map(|c| StepTuning { chunks: Some(c), block_rows: None }));
            }
        }
        StepKind::Extern { op, out_shape, epilogue, .. } => {
            let rows = match op {
                ExternOp::MatMul => out_shape.len().checked_sub(2).map_or(1, |r| out_shape[r]),
                ExternOp::Conv2d(_) => out_shape.get(1).copied().unwrap_or(1),
            };
            // A conv with packed weights (Winograd, the conv tiles, kiln's GEMM) takes a whole
            // image per call: row blocks would change nothing but the search's length.
            let whole_images = matches!(op, ExternOp::Conv2d(_)) && run.prepacked(i).is_some();
            let mut blocks: Vec<Option<usize>> = match whole_images {
                true => vec![None],
                false => [rows, 512, 256, 128, 64].into_iter().filter(|&b| b <= rows).map(Some).collect(),
            };
            blocks.dedup();
            let mut chunks: Vec<Option<usize>> = if epilogue.is_some() {
                vec![None, Some(1), Some(threads)]
            } else {
                vec![None]
            };
            chunks.dedup();
            for &block_rows in &blocks {
                for &c in &chunks {
                    let tune = StepTuning { chunks: c, block_rows };
                    if tune != StepTuning::default() {
                        out.push(tune);
                    }
                }
            }
        }
        StepKind::Eval { .. } => {}
    }
    out
}
