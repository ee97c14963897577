//! Chaining: steps that run inside the step before them, interleaved with it — on the CPU, 1x1
//! convs that each read a block of pixels as soon as the steps before them in the chain have
//! finished every channel of it, while it is still in cache (CUTLASS calls a pair of such
//! products a back-to-back GEMM). A chain is one launch ([`Program::launches`]); the memory
//! planner keeps every buffer of a chain live across all its steps (see [`crate::memory`]),
//! so the interleaving never reads memory another step of the chain reuses.
//!
//! Which steps a runtime can interleave is the runtime's to say (`can`); this module only
//! marks them, before the memory plan is made.

use crate::program::{Program, StepKind};

/// Marks as [`crate::Step::with_previous`] each step that `can(program, chain, step)` lets
/// join the chain of steps just before it (`chain`: the steps from the chain's first on, at
/// least one), and returns their indices; a step that may not join starts the next chain.
/// Call it before [`crate::plan_memory`].
pub fn chain_steps(p: &mut Program, can: &dyn Fn(&Program, &[&StepKind], &StepKind) -> bool) -> Vec<usize> {
    let mut chained = Vec::new();
    let mut first = 0;
    for i in 1..p.steps.len() {
        let joins = {
            let chain: Vec<&StepKind> = p.steps[first..i].iter().map(|s| &s.kind).collect();
            can(p, &chain, &p.steps[i].kind)
        };
        if joins {
            p.steps[i].with_previous = true;
            chained.push(i);
        } else {
            first = i;
        }
    }
    chained
}
