//! Composite ops (softmax, layer/batch norm, gelu, attention) become primitives, which the
//! scheduler fuses again; see [`kiln_ir::decompose`].

use super::Pass;
use kiln_ir::{Graph, Result};

/// Runs [`kiln_ir::decompose`].
pub struct Decompose;

impl Pass for Decompose {
    fn name(&self) -> &'static str {
        "decompose"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        kiln_ir::decompose(graph)
    }
}
