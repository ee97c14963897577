//! Dead code elimination: only what the outputs depend on is kept (graph inputs always stay,
//! in order, since callers bind them by position), and constants nothing reads are released.

use super::Pass;
use crate::rewrite::{Rewrite, Step};
use kiln_ir::{Graph, Result};

/// Drops nodes no output depends on.
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        let mut live = vec![false; graph.nodes.len()];
        for o in &graph.outputs {
            if let Some(l) = live.get_mut(o.index()) {
                *l = true;
            }
        }
        // Inputs have smaller ids than their users, so one backward sweep marks everything live.
        for idx in (0..graph.nodes.len()).rev() {
            if live[idx] {
                for i in &graph.nodes[idx].inputs {
                    if let Some(l) = live.get_mut(i.index()) {
                        *l = true;
                    }
                }
            }
        }
        Rewrite::new(graph)?.run(|_, old, _| {
            Ok(if live[old.index()] {
                Step::Copy
            } else {
                Step::Drop
            })
        })
    }
}
