//! The compiler driver: a graph in, something runnable out, by [`Mode`].
//!
//! ```text
//! Graph ─ specialize (bind symbolic dims) ─ kiln_opt::optimize ─ kiln_sched::schedule ─ plan_memory
//!       ─ kiln_cpu::codegen::render_c ─ cc (through the disk cache) ─ load ─ Executable
//! ```
//! Without a C compiler the result runs eagerly through the reference interpreter, with one
//! warning saying what to install.

mod driver;
pub mod logs;
mod mode;
mod report;
pub mod specialize;

pub use driver::{CompileOptions, Compiled, c_toolchain, c_toolchain_works, compile, plan};
pub use mode::Mode;
pub use report::{CompileReport, StageTimes};
