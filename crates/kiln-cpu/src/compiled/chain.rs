//! Which steps this runner interleaves (see `kiln_sched::chain`): after a conv on kiln's GEMM,
//! 1x1 convs on kiln's GEMM that read what the chain stores, or what it does not write. The
//! first conv's GEMM is then split over threads by pixels; as soon as a thread has finished
//! every channel of a range of pixels (and the epilogue on them), it runs the 1x1 convs on
//! that range one after the other while it is still in its cache, instead of later steps
//! reading the whole maps back from memory. On maps of fewer pixels than the first conv's
//! channels (resnet50's 7x7 and 14x14 ones), whose whole map fits in L2, the convs instead
//! run one after the other, each split by output channels. In resnet50: a block's downsample, its last 1x1
//! conv (whose residual the downsample is) and the next block's first 1x1 conv.

use super::conv::{heads_chains, is_pointwise};
use super::prepack::{self, Prepacked};
use super::steps::{chained_input, check_f32, col_blocks_safe, step_writes};
use kiln_sched::{BufId, Epilogue, ExternOp, Program, StepKind};
use std::ops::Range;

/// True when the CPU runner runs `next` inside `chain` (the steps just before it, the first
/// one leading), as the module docs say: the first a conv on kiln's GEMM, on a map of any
/// size; `next` a 1x1 stride-1 unpadded conv on kiln's GEMM whose input is dense, of the
/// first conv's images and pixels, and either what a step of the chain stores or written by
/// none of them (`steps::chained_input`); all f32; each epilogue, if any, runs in blocks (its
/// column-block twin exists and it reads what the chain writes only at its own points).
/// `KILN_CPU_CHAIN=0` turns chaining off. For `kiln_sched::chain_steps`.
pub fn runs_chained(p: &Program, chain: &[&StepKind], next: &StepKind) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("KILN_CPU_CHAIN").map_or(true, |v| v != "0"));
    let Some(&first) = chain.first() else {
        return false;
    };
    let (StepKind::Extern { op: ExternOp::Conv2d(_), epilogue: e1, out: out1, out_shape: s1, .. }, StepKind::Extern { op: ExternOp::Conv2d(a2), inputs: in2, out_shape: s2, epilogue: e2, .. }) = (first, next) else {
        return false;
    };
    let on_gemm = |s: &StepKind| matches!(prepack::for_step(p, s), Some(Prepacked::ConvGemm(_)));
    let leads = heads_chains(prepack::for_step(p, first).as_ref(), s1);
    let f32s = chain.iter().chain([&next]).all(|s| match s {
        StepKind::Extern { op, inputs, out, .. } => check_f32(p, op, inputs, *out).is_ok(),
        _ => false,
    });
    // Maps of any size. On maps of fewer pixels than the first conv's channels the convs run
    // one after the other inside the step, each split by channels (`conv::chain_by_channels`):
    // split by pixels, each thread streamed all of the weights, and resnet50's two 7x7 groups
    // took +0.9 and +1.2 ms over their convs run apart (Zen 1, 2 threads, 3 alternated
    // rounds). `KILN_CPU_CHAIN=0` runs every conv as its own step.
    // Buffers stand for their memory here: the memory plan keeps a chain's buffers apart.
    let written = |steps: &[&StepKind]| -> Vec<Range<usize>> { steps.iter().flat_map(|s| step_writes(s)).map(span).collect() };
    on && f32s
        && is_pointwise(a2, in2, s2)
        && leads
        && on_gemm(next)
        && chained_input(chain, next)
        && blocks(e1.as_ref(), vec![span(*out1)])
        && blocks(e2.as_ref(), written(&[chain, &[next]].concat()))
}

/// A buffer as a span of its own.
fn span(b: BufId) -> Range<usize> {
    b.index()..b.index() + 1
}

/// True when epilogue `e` (if any) runs in blocks given what the step writes.
fn blocks(e: Option<&Epilogue>, written: Vec<Range<usize>>) -> bool {
    e.is_none_or(|e| crate::codegen::has_cols(&e.kernel) && col_blocks_safe(e, &span, written))
}
