//! The graph passes, one file each. Every pass rebuilds the graph through
//! [`crate::rewrite::Rewrite`] and keeps the values of the graph's outputs.

mod bn_fold;
mod channels_last;
mod cse;
mod dce;
mod decompose;
mod fold;
mod layout;
mod merge_matmuls;
mod pool_first;
mod simplify;
mod space_to_depth;

pub use bn_fold::BnFold;
pub use channels_last::ChannelsLast;
pub use cse::Cse;
pub use dce::Dce;
pub use decompose::Decompose;
pub use fold::Fold;
pub use layout::Layout;
pub use merge_matmuls::MergeMatmuls;
pub use pool_first::PoolFirst;
pub use simplify::Simplify;
pub use space_to_depth::SpaceToDepth;

use kiln_ir::{Graph, Result};

/// A graph-to-graph transformation that keeps the outputs' values.
pub trait Pass {
    /// The name used in logs, reports and `KILN_DISABLE_PASSES`.
    fn name(&self) -> &'static str;
    /// The transformed copy of `graph`.
    fn run(&self, graph: &Graph) -> Result<Graph>;
}
