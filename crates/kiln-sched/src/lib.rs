//! kiln's scheduler: turns an optimised graph into a [`Program`] — a list of steps, each a
//! fused loop-level [`Kernel`], an extern library call (matmul, conv) with a fused pointwise
//! epilogue, or one op evaluated by the reference kernels — plus the memory plan and the
//! on-disk cache of compiled work.
//!
//! - [`kernel`]: the kernel IR (iteration domain, index expressions, scalar expression DAG
//!   with loads, stores and reductions). Renderers (C, CUDA C) only ever see this.
//! - [`program`]: the plan as plain data (buffers, steps), what a runtime executes.

pub mod cache;
pub mod chain;
pub mod fuse;
pub mod kernel;
mod lower;
pub mod schedule;
pub mod memory;
pub mod program;
pub mod write_through;

pub use kernel::{Arg, Expr, ExprId, ExprNode, Idx, Kernel, Literal, Loop, Stage, VarId};
pub use fuse::{FusionReport, StepInfo, StepKindName};
pub use schedule::{CPU_EXTERN_DTYPES, GPU_EXTERN_DTYPES, ScheduleOptions, schedule};
pub use program::{BufId, BufKind, BufView, Buffer, Epilogue, ExternOp, MemoryPlan, Program, Step, StepKind};
pub use cache::{CacheKey, CacheOutcome, DiskCache};
pub use memory::{naive_bytes, plan_memory};
pub use write_through::write_attention_through_copies;
pub use chain::chain_steps;
