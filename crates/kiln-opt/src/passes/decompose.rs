//! Composite ops (softmax, layer/batch norm, gelu, attention) become primitives, which the
//! scheduler fuses again; see [`kiln_ir::decompose`]. A composite the backend runs as one op of
//! its own ([`crate::OptOptions::keep`]) stays.

use super::Pass;
use crate::manager::KeepComposite;
use kiln_ir::{Graph, Result};

/// Runs [`kiln_ir::decompose_keeping`] with the backend's `keep`.
pub struct Decompose {
    pub keep: Option<KeepComposite>,
}

impl Pass for Decompose {
    fn name(&self) -> &'static str {
        "decompose"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        kiln_ir::decompose_keeping(graph, &|op, tys| self.keep.is_some_and(|keep| keep(op, tys)))
    }
}
