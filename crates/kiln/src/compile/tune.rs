//! `max-autotune` in the driver: a compiled program's per-step knobs come from the disk cache
//! when this machine already searched them (on the CPU keyed like its library plus the thread
//! count; on a GPU by the program, the device and its libraries), else from a search on sample
//! inputs — [`kiln_cpu::compiled::autotune`], or [`kiln_cuda::Executable::autotune`] — under a
//! time budget and behind a progress bar, and are then stored for the next process.

use kiln_cpu::compiled::{AutotuneOptions, Executable, Tuning, autotune};
use kiln_ir::{DType, HostTensor, Result};
use kiln_sched::{CacheKey, DiskCache, Program};
use std::time::{Duration, Instant};

/// The environment variable overriding the search's time budget, in seconds.
pub const BUDGET_ENV: &str = "KILN_AUTOTUNE_BUDGET_S";

/// The search budget when neither the options nor [`BUDGET_ENV`] set one.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(60);

/// What one search found, in the terms the compile report uses for every backend.
pub(crate) struct Found {
    /// The tuning's text, as the cache stores it.
    text: String,
    /// Steps whose choice changed.
    tuned: usize,
    /// Each step that had candidates.
    steps: Vec<FoundStep>,
    /// Whole runs under the built-in choices and under the winners (0: not timed).
    whole_us: (f64, f64),
    rejected: bool,
    out_of_budget: bool,
}

/// One searched step: microseconds under the built-in choice and the kept one, and its debug
/// log line.
pub(crate) struct FoundStep {
    default_us: f64,
    best_us: f64,
    line: String,
}

impl FoundStep {
    fn new(step: usize, what: &str, default_us: f64, best_us: f64, best: &dyn std::fmt::Debug, candidates: usize) -> FoundStep {
        let line = format!("step {step} {what}: {default_us:.1} us -> {best_us:.1} us ({best:?}, {candidates} candidates)");
        FoundStep { default_us, best_us, line }
    }
}

/// An executable max-autotune can tune: the CPU's ([`Executable`]) or a GPU's.
pub(crate) trait Tunable {
    /// The program it runs.
    fn program(&self) -> &Program;
    /// Sets a stored tuning (its text); returns how many steps it changes.
    fn apply_text(&mut self, text: &str) -> Result<usize>;
    /// Searches under `budget` on `inputs` and leaves the executable set to the result.
    fn search(&mut self, inputs: &[HostTensor], budget: Duration, progress: &mut dyn FnMut(usize, usize)) -> Result<Found>;
}

impl Tunable for Executable {
    fn program(&self) -> &Program {
        Executable::program(self)
    }

    fn apply_text(&mut self, text: &str) -> Result<usize> {
        let t = Tuning::from_text(text, self.program().steps.len())?;
        let n = t.tuned_steps();
        self.set_tuning(t)?;
        Ok(n)
    }

    fn search(&mut self, inputs: &[HostTensor], budget: Duration, progress: &mut dyn FnMut(usize, usize)) -> Result<Found> {
        let opts = AutotuneOptions { budget, ..AutotuneOptions::default() };
        let (tuning, report) = autotune(self, inputs, &opts, &mut |done, total| progress(done, total))?;
        let steps = report.steps.iter().map(|s| FoundStep::new(s.step, &s.what, s.default_us, s.best_us, &s.best, s.candidates)).collect();
        let found = Found { text: tuning.to_text(), tuned: tuning.tuned_steps(), steps, whole_us: report.whole_us, rejected: report.rejected, out_of_budget: report.out_of_budget };
        self.set_tuning(tuning)?;
        Ok(found)
    }
}

#[cfg(feature = "cuda")]
impl Tunable for kiln_cuda::Executable {
    fn program(&self) -> &Program {
        kiln_cuda::Executable::program(self)
    }

    fn apply_text(&mut self, text: &str) -> Result<usize> {
        let t = kiln_cuda::exec::GpuTuning::from_text(text, self.program().steps.len())?;
        self.set_tuning(&t)?;
        Ok(t.tuned_steps())
    }

    fn search(&mut self, inputs: &[HostTensor], budget: Duration, progress: &mut dyn FnMut(usize, usize)) -> Result<Found> {
        let (tuning, report) = self.autotune(inputs, budget, progress)?;
        let steps = report.steps.iter().map(|s| FoundStep::new(s.step, &s.what, s.default_us, s.best_us, &s.best, s.candidates)).collect();
        Ok(Found { text: tuning.to_text(), tuned: tuning.tuned_steps(), steps, whole_us: report.whole_us, rejected: report.rejected, out_of_budget: report.out_of_budget })
    }
}

/// Finds (under `key` in `cache`) or searches (and stores) the tuning of `exe` and sets it;
/// returns a one-line summary for the compile report. `key` names everything the tuning
/// depends on: the program, the machine, the libraries.
pub(crate) fn tune(exe: &mut dyn Tunable, cache: &DiskCache, key: CacheKey, input_shapes: &[Vec<usize>], budget: Option<Duration>) -> Result<String> {
    let steps = exe.program().steps.len();
    if let Some(bytes) = cache.get_bytes(&key) {
        match std::str::from_utf8(&bytes).map_err(|e| e.to_string()).and_then(|t| exe.apply_text(t).map_err(|e| e.to_string())) {
            Ok(n) => {
                let msg = format!("tuning from the cache: {n} of {steps} steps tuned");
                tracing::info!(target: "kiln::autotune", "{msg}");
                return Ok(msg);
            }
            Err(e) => tracing::warn!(target: "kiln::autotune", "cached tuning unusable ({e}); searching again"),
        }
    }
    let budget = budget.or_else(env_budget).unwrap_or(DEFAULT_BUDGET);
    let inputs = sample_inputs(exe.program(), input_shapes)?;
    let bar = indicatif::ProgressBar::new(steps as u64).with_style(
        indicatif::ProgressStyle::with_template("autotune {bar:30} {pos}/{len} steps {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let found = exe.search(&inputs, budget, &mut |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    for s in &found.steps {
        tracing::debug!(target: "kiln::autotune", "{}", s.line);
    }
    let (before_us, after_us) = found.steps.iter().fold((0.0, 0.0), |(d, b), s| (d + s.default_us, b + s.best_us));
    let whole = match found.whole_us {
        (p, t) if found.rejected => format!("; whole run {:.2} ms tuned vs {:.2} ms default, so the defaults are kept", t / 1e3, p / 1e3),
        (p, t) if p > 0.0 && p.is_finite() => format!("; whole run {:.2} ms -> {:.2} ms", p / 1e3, t / 1e3),
        _ => String::new(),
    };
    let msg = format!(
        "searched {} steps in {:.1} s{}: {} tuned, {:.2} ms -> {:.2} ms in the tuned steps{whole}",
        found.steps.len(),
        start.elapsed().as_secs_f64(),
        if found.out_of_budget { format!(" (budget of {:.0} s ran out; the rest keep their defaults)", budget.as_secs_f64()) } else { String::new() },
        found.tuned,
        before_us / 1e3,
        after_us / 1e3
    );
    tracing::info!(target: "kiln::autotune", "{msg}");
    // A partial search is not stored, so a later process with more budget finishes it.
    if !found.out_of_budget
        && let Err(e) = cache.put_bytes(&key, found.text.as_bytes())
    {
        tracing::warn!(target: "kiln::autotune", "could not store the tuning ({e}); the next process searches again");
    }
    Ok(msg)
}

/// [`BUDGET_ENV`] as a duration, when set to a number (a bad value is warned about and ignored).
fn env_budget() -> Option<Duration> {
    let v = std::env::var(BUDGET_ENV).ok()?;
    match v.trim().parse::<f64>() {
        Ok(s) if s >= 0.0 && s.is_finite() => Some(Duration::from_secs_f64(s)),
        _ => {
            tracing::warn!(target: "kiln::autotune", "{BUDGET_ENV}={v:?} is not a number of seconds; using {} s", DEFAULT_BUDGET.as_secs());
            None
        }
    }
}

/// Inputs to time on: floats in [-1, 1), zeros for integers (valid as indices), false for bools.
fn sample_inputs(p: &Program, shapes: &[Vec<usize>]) -> Result<Vec<HostTensor>> {
    p.inputs
        .iter()
        .zip(shapes)
        .map(|(&id, shape)| {
            let n: usize = shape.iter().product();
            let dt = p.buffer(id).dtype;
            if dt == DType::Bool {
                return HostTensor::from_vec(vec![false; n], shape);
            }
            let values = if dt.is_float() {
                HostTensor::from_vec((0..n).map(|i| ((i * 7919 % 2001) as f32) / 1000.0 - 1.0).collect::<Vec<f32>>(), shape)?
            } else {
                HostTensor::from_vec(vec![0i64; n], shape)?
            };
            kiln_cpu::eval(&kiln_ir::Op::Cast(dt), &[&values])
        })
        .collect()
}
