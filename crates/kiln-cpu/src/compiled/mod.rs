//! The compiled-program runner: executes a scheduled [`kiln_sched::Program`] — fused kernel
//! steps, extern GEMM/conv with fused epilogues, reference-kernel fallbacks — over one arena
//! of temporaries.
//!
//! - [`LaunchKernel`]: how a kernel step runs; [`InterpKernels`] interprets the kernel IR
//!   (the reference for the C renderer); a native backend loads compiled C instead.
//! - [`Executable`]: a program bound to its kernels, checked once, run many times.
//! - [`autotune`]: times candidate [`Tuning`]s (thread splits, GEMM row blocks) per step.

mod attention;
mod autotune;
mod chain;
mod conv;
#[cfg(target_arch = "x86_64")]
mod conv_tiles;
mod conv_direct;
#[cfg(target_arch = "x86_64")]
mod conv_winograd;
mod executable;
mod interp;
mod launch;
mod matmul;
mod prepack;
mod profile;
mod raw;
mod steps;
mod tuning;
mod views;

pub use attention::runs_composite as attention_runs_composite;
pub use chain::runs_chained;
pub use autotune::{AutotuneOptions, AutotuneReport, MIN_GAIN, StepResult, WHOLE_RUNS, autotune};
pub use executable::{Executable, check_steps, place_temps};
pub use interp::InterpKernels;
pub use launch::LaunchKernel;
pub use profile::{StepTime, profile};
pub use steps::describe;
pub use tuning::{StepTuning, Tuning};

use kiln_ir::{HostTensor, Result};
use kiln_sched::Program;
use std::sync::Arc;

/// Runs `program` on `inputs` with every kernel interpreted from its kernel IR: the scheduler's
/// reference path, needing no C compiler.
pub fn run_interpreted(program: &Program, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
    Executable::new(program.clone(), Arc::new(InterpKernels))?.run(inputs)
}
