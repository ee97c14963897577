//! Chaining: a step that runs inside the step before it, interleaved with it — on the CPU, a
//! 1x1 conv that reads each block of pixels of the conv before it as soon as that conv has
//! finished every channel of them, while they are still in cache (CUTLASS calls this a
//! back-to-back GEMM). A chained pair is one launch ([`Program::launches`]); the memory
//! planner keeps every buffer of the pair live across both steps (see [`crate::memory`]), so
//! the interleaving never reads memory the other step reuses.
//!
//! Which pairs a runtime can interleave is the runtime's to say (`can`); this module only
//! marks them, before the memory plan is made.

use crate::program::{Program, StepKind};

/// Marks as [`crate::Step::with_previous`] each step `i` for which `can(program, step i - 1,
/// step i)` holds, in pairs (a step that runs inside another one gets none inside it), and
/// returns their indices. Call it before [`crate::plan_memory`].
pub fn chain_steps(p: &mut Program, can: &dyn Fn(&Program, &StepKind, &StepKind) -> bool) -> Vec<usize> {
    let mut chained = Vec::new();
    for i in 1..p.steps.len() {
        let free = !p.steps[i - 1].with_previous && !p.steps[i].with_previous;
        if free && can(p, &p.steps[i - 1].kind, &p.steps[i].kind) {
            p.steps[i].with_previous = true;
            chained.push(i);
        }
    }
    chained
}
