//! Per-step timing of an executable (`kiln bench --profile`): where a run's time goes.

use super::executable::Executable;
use super::steps::describe;
use kiln_ir::{HostTensor, Result};
use std::time::{Duration, Instant};

/// One step's share of a run.
#[derive(Clone, Debug)]
pub struct StepTime {
    /// Index in the program.
    pub step: usize,
    /// What the step is: `kernel NAME`, `matmul [..] x [..]`, `conv2d ..`, `eval OP`.
    pub what: String,
    /// Median time of the step over the profiled runs.
    pub median: Duration,
    /// True when the step ran inside the step before it (see `kiln_sched::chain`), whose time
    /// then includes it.
    pub inside_previous: bool,
}

/// Runs `exe` on `inputs` `runs` times (at least 1) timing every step; returns each step's
/// median and the median whole run (steps timed back to back, so their sum is close to it).
pub fn profile(exe: &Executable, inputs: &[HostTensor], runs: usize) -> Result<(Vec<StepTime>, Duration)> {
    let p = exe.program();
    let runs = runs.max(1);
    let mut per_step = vec![Vec::with_capacity(runs); p.steps.len()];
    let mut inside = vec![false; p.steps.len()];
    let mut whole = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        exe.run_with(inputs, |run, i| {
            let t = Instant::now();
            run.step(i, exe.tuning().step(i))?;
            per_step[i].push(t.elapsed());
            for j in run.ran_inside().unwrap_or_default() {
                inside[j] = true;
            }
            Ok(())
        })?;
        whole.push(start.elapsed());
    }
    let steps = per_step
        .into_iter()
        .enumerate()
        .map(|(i, times)| StepTime { step: i, what: describe(&p.steps[i].kind), median: median(times), inside_previous: inside[i] })
        .collect();
    Ok((steps, median(whole)))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}
