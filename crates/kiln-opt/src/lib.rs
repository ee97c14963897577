//! kiln's graph passes and their pass manager: the first stage of the compiler, turning a traced
//! or imported graph into a smaller graph of primitives for the scheduler.
//!
//! - [`rewrite`]: the one way passes change a graph (rebuild with an old→new id map);
//! - [`passes`]: fold, simplify, bn_fold, pool_first, decompose, channels_last, space_to_depth, cse, merge_matmuls, layout, dce (one file each);
//! - [`optimize`]: runs them in order, as [`OptOptions`] (or `KILN_DISABLE_PASSES`) says.

mod manager;
mod memo;
pub mod passes;
pub mod rewrite;

pub use manager::{DISABLE_ENV, KeepComposite, OptOptions, PassReport, Target, optimize, parse_disabled, pass_names};
pub use passes::Pass;
