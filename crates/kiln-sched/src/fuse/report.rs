//! The fusion report: what each step computes and why values were not fused further
//! (printed by `kiln explain`).

use kiln_ir::NodeId;
use std::fmt;

/// What kind of work a step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepKindName {
    /// A generated kernel of elementwise work (and views).
    Pointwise,
    /// A generated kernel with at least one reduction.
    Reduction,
    /// A library call without fused work.
    Extern,
    /// A library call with a fused pointwise epilogue.
    ExternEpilogue,
    /// One op run by the reference kernels.
    Eval,
    /// A generated kernel that only moves data (a view or input that is an output, or an
    /// extern/eval input that no strided view describes).
    Copy,
}

impl fmt::Display for StepKindName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StepKindName::Pointwise => "pointwise",
            StepKindName::Reduction => "reduction",
            StepKindName::Extern => "extern",
            StepKindName::ExternEpilogue => "extern+epilogue",
            StepKindName::Eval => "eval",
            StepKindName::Copy => "copy",
        })
    }
}

/// One step of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct StepInfo {
    /// The kernel name (or `extern3_conv2d`, `eval5_resize`).
    pub name: String,
    pub kind: StepKindName,
    /// The graph nodes whose values the step computes (inlined ones included; an inlined
    /// value read by several steps is listed in each).
    pub nodes: Vec<NodeId>,
    /// Each value the step writes to a buffer instead of fusing it into its consumers, and why.
    pub notes: Vec<(NodeId, String)>,
}

/// What the scheduler fused, step by step (index `i` describes `Program::steps[i]`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FusionReport {
    pub steps: Vec<StepInfo>,
    /// Compute ops in the graph (what `fuse: false` gives one step each).
    pub compute_ops: usize,
    /// The steps that run inside the step before them (see [`crate::chain`]), by index.
    pub with_previous: Vec<usize>,
}

impl FusionReport {
    /// Folds into each step `folded` marks the step after it (as
    /// [`crate::write_attention_through_copies`] folds a copy into its attention): `folded`
    /// has one entry per step of the new program.
    pub fn fold_next_steps(&mut self, folded: &[bool]) {
        let mut old = std::mem::take(&mut self.steps).into_iter();
        for &f in folded {
            let Some(mut step) = old.next() else { break };
            if f && let Some(next) = old.next() {
                step.nodes.extend(next.nodes);
                step.notes.extend(next.notes);
            }
            self.steps.push(step);
        }
    }

    /// Steps of the given kind.
    pub fn count(&self, kind: StepKindName) -> usize {
        self.steps.iter().filter(|s| s.kind == kind).count()
    }
}

impl fmt::Display for FusionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} steps in {} launches for {} compute ops",
            self.steps.len(),
            self.steps.len() - self.with_previous.len(),
            self.compute_ops
        )?;
        for (i, s) in self.steps.iter().enumerate() {
            let nodes: Vec<String> = s.nodes.iter().map(|n| n.to_string()).collect();
            writeln!(f, "step {i} {} [{}]: {}", s.name, s.kind, nodes.join(" "))?;
            if self.with_previous.contains(&i) {
                let first = (0..i).rev().find(|j| !self.with_previous.contains(j)).unwrap_or(0);
                writeln!(f, "    runs inside step {first}, on each block of pixels as soon as the steps before it have finished it")?;
            }
            for (n, why) in &s.notes {
                writeln!(f, "    {n} stored: {why}")?;
            }
        }
        Ok(())
    }
}
