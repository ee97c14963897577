//! `max-autotune` in the driver: a compiled program's per-step knobs come from the disk cache
//! when this machine already searched them (keyed like its library, plus the thread count),
//! else from [`kiln_cpu::compiled::autotune`] on sample inputs, under a time budget and behind
//! a progress bar, and are then stored for the next process.

use kiln_cpu::compiled::{AutotuneOptions, Executable, Tuning, autotune};
use kiln_ir::{DType, HostTensor, Result};
use kiln_sched::{CacheKey, DiskCache};
use std::time::{Duration, Instant};

/// The environment variable overriding the search's time budget, in seconds.
pub const BUDGET_ENV: &str = "KILN_AUTOTUNE_BUDGET_S";

/// The search budget when neither the options nor [`BUDGET_ENV`] set one.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(60);

/// Finds (cache) or searches (and stores) the tuning of `exe` and sets it; returns a one-line
/// summary for the compile report. `lib_key` is the key of the program's compiled library.
pub(crate) fn tune(
    exe: &mut Executable,
    cache: &DiskCache,
    lib_key: CacheKey,
    input_shapes: &[Vec<usize>],
    budget: Option<Duration>,
) -> Result<String> {
    let threads = rayon::current_num_threads();
    let key = lib_key.part("tuning-for-threads", threads.to_string());
    let steps = exe.program().steps.len();
    if let Some(bytes) = cache.get_bytes(&key) {
        match std::str::from_utf8(&bytes).map_err(|e| e.to_string()).and_then(|t| Tuning::from_text(t, steps).map_err(|e| e.to_string())) {
            Ok(t) => {
                let n = t.tuned_steps();
                exe.set_tuning(t)?;
                let msg = format!("tuning from the cache: {n} of {steps} steps tuned");
                tracing::info!(target: "kiln::autotune", "{msg}");
                return Ok(msg);
            }
            Err(e) => tracing::warn!(target: "kiln::autotune", "cached tuning unreadable ({e}); searching again"),
        }
    }
    let budget = budget.or_else(env_budget).unwrap_or(DEFAULT_BUDGET);
    let inputs = sample_inputs(exe, input_shapes)?;
    let bar = indicatif::ProgressBar::new(steps as u64).with_style(
        indicatif::ProgressStyle::with_template("autotune {bar:30} {pos}/{len} steps {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let opts = AutotuneOptions { budget, ..AutotuneOptions::default() };
    let (tuning, report) = autotune(exe, &inputs, &opts, &mut |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    for s in &report.steps {
        tracing::debug!(
            target: "kiln::autotune",
            "step {} {}: {:.1} us -> {:.1} us ({:?}, {} candidates)",
            s.step, s.what, s.default_us, s.best_us, s.best, s.candidates
        );
    }
    let (before, after) = report.totals_us();
    let whole = match report.whole_us {
        (p, t) if report.rejected => format!("; whole run {:.2} ms tuned vs {:.2} ms default, so the defaults are kept", t / 1e3, p / 1e3),
        (p, t) if p > 0.0 => format!("; whole run {:.2} ms -> {:.2} ms", p / 1e3, t / 1e3),
        _ => String::new(),
    };
    let msg = format!(
        "searched {} steps in {:.1} s{}: {} tuned, {:.2} ms -> {:.2} ms in the tuned steps{whole}",
        report.steps.len(),
        start.elapsed().as_secs_f64(),
        if report.out_of_budget { format!(" (budget of {:.0} s ran out; the rest keep their defaults)", budget.as_secs_f64()) } else { String::new() },
        tuning.tuned_steps(),
        before / 1e3,
        after / 1e3
    );
    tracing::info!(target: "kiln::autotune", "{msg}");
    // A partial search is not stored, so a later process with more budget finishes it.
    if !report.out_of_budget
        && let Err(e) = cache.put_bytes(&key, tuning.to_text().as_bytes())
    {
        tracing::warn!(target: "kiln::autotune", "could not store the tuning ({e}); the next process searches again");
    }
    exe.set_tuning(tuning)?;
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
fn sample_inputs(exe: &Executable, shapes: &[Vec<usize>]) -> Result<Vec<HostTensor>> {
    let p = exe.program();
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
