//! The scheduler's entry point: graph → fusion plan → [`Program`] and [`FusionReport`].

use crate::fuse::{self, FusionReport, classify::Class};
use crate::lower;
use crate::program::Program;
use kiln_ir::{Error, Graph, NodeId};
use std::collections::HashSet;

/// How [`schedule`] fuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleOptions {
    /// Fuse ops into kernels; `false` gives one step per compute op (the baseline that
    /// counts kernels).
    pub fuse: bool,
    /// Run f32 MatMul / Conv2d as library calls ([`crate::StepKind::Extern`]); `false`
    /// evaluates them with the reference kernels.
    pub externs: bool,
}

impl Default for ScheduleOptions {
    fn default() -> Self {
        ScheduleOptions {
            fuse: true,
            externs: true,
        }
    }
}

/// Schedules `graph` (primitive ops, as after kiln-opt; fixed shapes) into a [`Program`]
/// with `memory = None`, and reports what was fused.
pub fn schedule(graph: &Graph, opts: &ScheduleOptions) -> kiln_ir::Result<(Program, FusionReport)> {
    let mut isolate: HashSet<NodeId> = HashSet::new();
    // Each retry keeps one more root alone, so this ends within the node count.
    for _ in 0..=graph.nodes.len() {
        let plan = fuse::plan(graph, opts.fuse, opts.externs, &isolate)?;
        match lower::lower(graph, &plan) {
            Ok((program, steps)) => {
                let compute_ops = plan
                    .class
                    .iter()
                    .enumerate()
                    .filter(|(i, c)| {
                        !matches!(c, Class::Source | Class::View) && is_live(graph, &plan, *i)
                    })
                    .count();
                return Ok((program, FusionReport { steps, compute_ops }));
            }
            Err(Ok(node)) => {
                if !isolate.insert(node) {
                    return Err(Error::Graph(format!(
                        "schedule: internal: {node} cannot be lowered even alone"
                    )));
                }
            }
            Err(Err(e)) => return Err(e),
        }
    }
    Err(Error::Graph(
        "schedule: internal: fusion did not converge".into(),
    ))
}

/// A node that some step computes (classes of dead nodes are `Source`).
fn is_live(graph: &Graph, plan: &fuse::Plan, i: usize) -> bool {
    i < graph.nodes.len() && plan.class[i] != Class::Source
}
