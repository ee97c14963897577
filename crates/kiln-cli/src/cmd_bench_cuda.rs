//! Timing a compiled model on the GPU: the first call (copies included) by the host clock,
//! then `--warmup` and `--iters` runs by CUDA events around the device work (inputs copied up
//! once, outputs left on the device), as GPU benchmarks are reported.

use crate::args::BenchArgs;
use crate::cmd_bench::{Pass, Timings};
use crate::exit::{CliError, CliResult};
use crate::stats;
use kiln::compile::Compiled;
use kiln_ir::HostTensor;

/// The first call's seconds and the device-time summary of the timed runs.
pub(crate) fn time_on_gpu(compiled: &Compiled, inputs: &[HostTensor], args: &BenchArgs, kernels: u64) -> CliResult<Timings> {
    let start = std::time::Instant::now();
    compiled.run(inputs)?;
    // Device memory beyond the weights and inputs: arena, library workspaces.
    let working = compiled.device_working_bytes().unwrap_or(compiled.report().arena_bytes);
    let first = Pass { secs: start.elapsed().as_secs_f64(), kernels, peak_bytes: working };
    let times = compiled
        .time_device(inputs, args.warmup as usize, args.iters as usize)?
        .ok_or_else(|| CliError::Failed("the model did not compile for the GPU".into()))?;
    let summary = stats::summarize(&times).ok_or_else(|| CliError::Failed("bench needs --iters of at least 1".into()))?;
    Ok(Timings { first, summary, peak_bytes: working })
}
