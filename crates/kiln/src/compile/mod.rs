//! The compiler driver: a graph in, something runnable out, by [`Mode`].
//!
//! ```text
//! Graph ─ specialize (bind symbolic dims) ─ kiln_opt::optimize ─ kiln_sched::schedule ─ plan_memory
//!       ─ kiln_cpu::codegen::render_c ─ cc (through the disk cache) ─ load ─ Executable
//!       ─ [max-autotune] per-step knobs from the cache, or searched and stored
//! ```
//! Without a C compiler the result runs eagerly through the reference interpreter, with one
//! warning saying what to install.

mod driver;
pub mod generic;
pub mod logs;
mod mode;
mod report;
pub mod specialize;
mod tune;

pub use driver::{CompileOptions, Compiled, c_toolchain, c_toolchain_works, check_device, compile, plan};
pub use generic::GenericKernels;
pub use mode::Mode;
pub use report::{CompileReport, StageTimes};
pub use tune::{BUDGET_ENV as AUTOTUNE_BUDGET_ENV, DEFAULT_BUDGET as AUTOTUNE_DEFAULT_BUDGET};
