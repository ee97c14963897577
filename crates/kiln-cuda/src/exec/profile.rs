//! [`Executable::profile`]: device time of each step, its library call or kernel and its
//! epilogue timed apart with CUDA events (`kiln bench --device cuda --profile N`).

use super::{Event, Executable, GpuStep};
use kiln_cpu::compiled::{StepTime, describe};
use kiln_ir::{HostTensor, Result};
use std::time::Duration;

impl Executable {
    /// Device time of every step over `runs` runs (at least 1), each step's kernel or library
    /// call and its epilogue timed apart with CUDA events: each part's median, and the median
    /// whole run (parts timed back to back, so their sum is close to it).
    pub fn profile(&self, inputs: &[HostTensor], runs: usize) -> Result<(Vec<StepTime>, Duration)> {
        let _one = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.stage_inputs(inputs)?;
        self.gpu.bind()?;
        // One warm-up run: lazy module loading and library heuristics are not the steps' time.
        self.issue_steps()?;
        let marks: Vec<[Event; 3]> = self.steps.iter().map(|_| Ok([Event::new()?, Event::new()?, Event::new()?])).collect::<Result<_>>()?;
        let runs = runs.max(1);
        let mut parts: Vec<[Vec<f64>; 2]> = self.steps.iter().map(|_| [Vec::new(), Vec::new()]).collect();
        let mut whole = Vec::with_capacity(runs);
        // Host time to issue each kind of step (what default mode pays per run and a CUDA graph
        // replay does not), summed over the runs.
        let mut host: std::collections::BTreeMap<&str, (Duration, usize)> = Default::default();
        for _ in 0..runs {
            for (step, m) in self.steps.iter().zip(&marks) {
                m[0].record(&self.gpu)?;
                let t = std::time::Instant::now();
                self.issue_step(step, &mut || m[1].record(&self.gpu))?;
                let kind = match step {
                    GpuStep::Kernel(_) => "kernels",
                    GpuStep::Matmul { .. } => "matmuls",
                    GpuStep::Conv { .. } => "convs",
                    GpuStep::Gather(_) | GpuStep::Attention(_) => "handwritten kernels",
                    GpuStep::Host { .. } => "host steps",
                };
                let e = host.entry(kind).or_default();
                (e.0, e.1) = (e.0 + t.elapsed(), e.1 + 1);
                m[2].record(&self.gpu)?;
            }
            self.gpu.synchronize()?;
            let mut total = 0.0;
            for (p, m) in parts.iter_mut().zip(&marks) {
                let (main, epi) = (m[0].ms_until(&m[1])?, m[1].ms_until(&m[2])?);
                p[0].push(main);
                p[1].push(epi);
                total += main + epi;
            }
            whole.push(total);
        }
        let per_run: Vec<String> = host.iter().map(|(k, (t, n))| format!("{k} {:.1} us ({} calls)", t.as_secs_f64() * 1e6 / runs as f64, n / runs)).collect();
        tracing::info!(target: "kiln::cuda", "host time to issue one run (with 3 event records a step): {}", per_run.join(", "));
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            Duration::from_secs_f64(v.get(v.len() / 2).copied().unwrap_or(0.0) / 1e3)
        };
        let mut out = Vec::new();
        for (i, (step, p)) in self.steps.iter().zip(parts.iter_mut()).enumerate() {
            let what = describe(&self.program.steps[i].kind);
            let main = match step {
                GpuStep::Kernel(_) => what,
                GpuStep::Matmul { plan, .. } => format!("{} {what}", plan.describe()),
                GpuStep::Conv { plan, .. } => format!("cuDNN {} {what}", plan.describe()),
                GpuStep::Gather(_) => format!("gather kernel {what}"),
                GpuStep::Attention(_) => format!("attention kernel {what}"),
                GpuStep::Host { .. } => format!("host {what}"),
            };
            out.push(StepTime { step: i, what: main, median: median(&mut p[0]), inside_previous: false });
            if let Some(k) = step.epilogue() {
                out.push(StepTime { step: i, what: format!("epilogue {}", k.name), median: median(&mut p[1]), inside_previous: false });
            }
        }
        Ok((out, median(&mut whole)))
    }
}
