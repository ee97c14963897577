//! Epilogues a library call applies itself — cuDNN's fused conv ([`super::conv_fusion`]) and
//! cuBLASLt's GEMM epilogues ([`super::gemm_fusion`]) — and what they share: which epilogues a
//! call could take over (one dense store of a new buffer, computed from the call's result,
//! which nothing else reads) and how a step takes one over. The decisions are pure (no GPU),
//! so `kiln explain --device cuda` shows the routes the runtime takes; the runtime also asks
//! cuBLASLt whether it has an algorithm for each GEMM epilogue before folding it.

use super::conv_fusion::{self, ConvFusion};
use super::gemm_fusion::{self, GemmFusion};
use super::matmul::MatmulPlan;
use kiln_ir::DType;
use kiln_sched::kernel::{Expr, ExprId, Idx, Kernel, Loop, Stage};
use kiln_sched::memory::live_intervals;
use kiln_sched::{BufId, BufKind, BufView, ExternOp, Program, StepKind};

/// The epilogue a library call applies in place of the step's epilogue kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LibraryFusion {
    Conv(ConvFusion),
    Gemm(GemmFusion),
}

impl LibraryFusion {
    /// The conv fusion, if this is one.
    pub fn conv(&self) -> Option<ConvFusion> {
        match self {
            LibraryFusion::Conv(c) => Some(*c),
            LibraryFusion::Gemm(_) => None,
        }
    }

    /// The GEMM fusion, if this is one.
    pub fn gemm(&self) -> Option<GemmFusion> {
        match self {
            LibraryFusion::Gemm(g) => Some(*g),
            LibraryFusion::Conv(_) => None,
        }
    }
}

/// An extern step's epilogue that a library call could apply instead: one store of `value` to
/// every element of `y` (a dense float temporary of the result's size, the only buffer the
/// kernel writes) at `index`, where the result `out` is read by this epilogue only.
pub(crate) struct DenseEpilogue<'a> {
    pub op: &'a ExternOp,
    pub inputs: &'a [BufView],
    pub out_shape: &'a [usize],
    pub out: BufId,
    pub y: BufId,
    pub kernel: &'a Kernel,
    args: &'a [BufId],
    pub index: &'a Idx,
    pub value: ExprId,
    /// The kernel's outer loops, then the store's own.
    pub loops: Vec<Loop>,
}

/// Whether `b` holds f32, f16 or bf16 (the types the libraries' fused calls take).
pub(crate) fn is_float(p: &Program, b: BufId) -> bool {
    p.buffers.get(b.index()).is_some_and(|buf| matches!(buf.dtype, DType::F32 | DType::F16 | DType::BF16))
}

/// Step `i`'s epilogue, when it has the form a library call can take over.
pub(crate) fn dense_epilogue<'a>(p: &'a Program, live: &[Option<(usize, usize)>], i: usize) -> Option<DenseEpilogue<'a>> {
    let StepKind::Extern { op, inputs, out, out_shape, epilogue: Some(e) } = &p.steps[i].kind else {
        return None;
    };
    let only_here = live.get(out.index()).copied().flatten() == Some((i, i)) && !p.outputs.iter().any(|(o, _)| o == out);
    if !is_float(p, *out) || !only_here {
        return None;
    }
    let k = &e.kernel;
    let [Stage::Store { loops, arg, index, value }] = k.stages.as_slice() else {
        return None;
    };
    let numel = p.buffer(*out).numel;
    let y = *e.args.get(*arg as usize)?;
    let points = k.outer_points() * loops.iter().map(|l| l.extent).product::<usize>();
    let written_only_y = k.args.iter().enumerate().all(|(a, arg_info)| arg_info.written == (a == *arg as usize));
    let dense_y = is_float(p, y) && p.buffer(y).numel == numel && p.buffer(y).kind == BufKind::Temp;
    if points != numel || !written_only_y || !dense_y {
        return None;
    }
    let all_loops = k.outer.iter().chain(loops).copied().collect();
    Some(DenseEpilogue { op, inputs, out_shape, out: *out, y, kernel: k, args: &e.args, index, value: *value, loops: all_loops })
}

impl DenseEpilogue<'_> {
    /// Expression `id`.
    pub fn expr(&self, id: ExprId) -> Option<&Expr> {
        self.kernel.exprs.get(id as usize).map(|n| &n.expr)
    }

    /// The buffer expression `id` loads at the store's own index (the result's element), if
    /// it is such a load.
    pub fn load_here(&self, id: ExprId) -> Option<BufId> {
        match self.expr(id)? {
            Expr::Load { arg, index } if index == self.index => self.args.get(*arg as usize).copied(),
            _ => None,
        }
    }

    /// The buffer and index expression `id` loads, if it is a load.
    pub fn load(&self, id: ExprId) -> Option<(BufId, &Idx)> {
        match self.expr(id)? {
            Expr::Load { arg, index } => Some((*self.args.get(*arg as usize)?, index)),
            _ => None,
        }
    }
}

/// Folds every epilogue a library call can apply into its step: cuDNN's conv epilogues, and
/// the GEMM epilogues `lt_accepts` (asked with the step's matmul plan) says cuBLASLt runs.
/// The epilogue is removed, the step's `out` becomes the epilogue's output (the call's own
/// result, now written by no step, takes no memory), and what the fused call also reads
/// becomes a further input of the step (a conv's residual, a GEMM's bias), so liveness and the
/// memory plan, made after this, see it read there. Returns each step's fusion.
pub(crate) fn fuse_library_epilogues(program: &mut Program, lt_accepts: &mut dyn FnMut(MatmulPlan, &GemmFusion) -> bool) -> Vec<Option<LibraryFusion>> {
    let live = live_intervals(program);
    let found: Vec<Option<(LibraryFusion, BufId, Option<BufView>)>> = (0..program.steps.len())
        .map(|i| {
            let e = dense_epilogue(program, &live, i)?;
            if let Some((f, extra)) = conv_fusion::fusable(program, &e) {
                return Some((LibraryFusion::Conv(f), e.y, extra));
            }
            let (f, extra, plan) = gemm_fusion::fusable(program, &e)?;
            lt_accepts(plan, &f).then_some((LibraryFusion::Gemm(f), e.y, extra))
        })
        .collect();
    let mut orphans = Vec::new();
    for (step, f) in program.steps.iter_mut().zip(&found) {
        if let (Some((_, y, extra)), StepKind::Extern { out, epilogue, inputs, .. }) = (f, &mut step.kind) {
            orphans.push(std::mem::replace(out, *y));
            *epilogue = None;
            inputs.extend(extra.clone());
        }
    }
    // The call's own result is now touched by no step: it needs no memory (the planner gives
    // every temporary its bytes, touched or not).
    for r in orphans {
        program.buffers[r.index()].numel = 0;
    }
    found.into_iter().map(|f| f.map(|(fusion, ..)| fusion)).collect()
}
