//! The scheduler's entry point: graph → fusion plan → [`Program`] and [`FusionReport`].

use crate::fuse::{self, FusionReport, classify::Class};
use crate::lower;
use crate::program::Program;
use kiln_ir::{DType, Error, Graph, NodeId};
use std::collections::HashSet;

/// How [`schedule`] fuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleOptions {
    /// Fuse ops into kernels; `false` gives one step per compute op (the baseline that
    /// counts kernels).
    pub fuse: bool,
    /// The dtypes MatMul / Conv2d run as library calls ([`crate::StepKind::Extern`]) in (all
    /// inputs one of these); on other dtypes, or with none listed, they are evaluated by the
    /// reference kernels. [`CPU_EXTERN_DTYPES`] (f32) by default, as the CPU runner's externs
    /// are f32 only; [`GPU_EXTERN_DTYPES`] for cuBLAS / cuDNN; `&[]` turns externs off.
    pub extern_dtypes: &'static [DType],
    /// Let a reduction over exactly the columns of an extern's output rows (layer norm or
    /// softmax after a matmul, a global average pool after a conv) run as the extern's
    /// epilogue on each finished block of rows, one step instead of two. The CPU runner takes
    /// such epilogues (the default); the CUDA runtime's library calls do not.
    pub row_epilogues: bool,
}

/// The dtypes the CPU runner's externs take: f32.
pub const CPU_EXTERN_DTYPES: &[DType] = &[DType::F32];

/// The dtypes the CUDA runtime's externs take: f32, and f16 / bf16 (accumulated in f32).
pub const GPU_EXTERN_DTYPES: &[DType] = &[DType::F32, DType::F16, DType::BF16];

impl Default for ScheduleOptions {
    fn default() -> Self {
        ScheduleOptions {
            fuse: true,
            extern_dtypes: CPU_EXTERN_DTYPES,
            row_epilogues: true,
        }
    }
}

/// Schedules `graph` (primitive ops, as after kiln-opt; fixed shapes) into a [`Program`]
/// with `memory = None`, and reports what was fused.
pub fn schedule(graph: &Graph, opts: &ScheduleOptions) -> kiln_ir::Result<(Program, FusionReport)> {
    let mut isolate: HashSet<NodeId> = HashSet::new();
    // Each retry keeps one more root alone, so this ends within the node count.
    for _ in 0..=graph.nodes.len() {
        let plan = fuse::plan(graph, opts.fuse, opts.extern_dtypes, opts.row_epilogues, &isolate)?;
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
                return Ok((program, FusionReport { steps, compute_ops, with_previous: Vec::new() }));
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
