//! Which pairs of steps this runner interleaves (see `kiln_sched::chain`): a 1x1 conv that
//! reads what the conv before it stores, both on kiln's GEMM. The first conv's GEMM is then
//! split over threads by pixels; as soon as a thread has finished every channel of a range
//! of pixels (and the first conv's epilogue on them), it runs the 1x1 conv on that range
//! while the range is still in its cache, instead of a later step reading the whole map back
//! from memory. In resnet50 that is each block's last 1x1 conv (with its residual add and
//! ReLU) and the next block's first one.

use super::prepack::{self, Prepacked};
use super::steps::{chain_source, col_blocks_safe, written_bufs};
use kiln_ir::DType;
use kiln_sched::{BufId, BufView, Epilogue, ExternOp, Program, StepKind};

/// True when the CPU runner runs `second` inside `first` (the step before it), as the module
/// docs say: `first` a conv on kiln's GEMM, `second` a 1x1 stride-1 unpadded conv on kiln's GEMM
/// whose input is the whole of what `first` stores, densely, with at least as many pixels as
/// channels; all f32; each epilogue, if any,
/// runs in blocks (its column-block twin exists and it reads what either step writes only at
/// its own points). `KILN_CPU_CHAIN=0` turns chaining off. For `kiln_sched::chain_steps`.
pub fn runs_chained(p: &Program, first: &StepKind, second: &StepKind) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("KILN_CPU_CHAIN").map_or(true, |v| v != "0"));
    let (
        StepKind::Extern { op: ExternOp::Conv2d(_), inputs: in1, out: out1, out_shape: s1, epilogue: e1 },
        StepKind::Extern { op: ExternOp::Conv2d(a2), inputs: in2, out: out2, epilogue: e2, .. },
    ) = (first, second)
    else {
        return false;
    };
    let on_gemm = |s: &StepKind| matches!(prepack::for_step(p, s), Some(Prepacked::ConvGemm(_)));
    let f32s = in1.iter().chain(in2).map(|v| v.buf).chain([*out1, *out2]).all(|b| p.buffer(b).dtype == DType::F32);
    let pointwise = in2[1].shape[2..] == [1, 1] && a2.stride == [1, 1] && a2.padding == [0; 4] && a2.groups == 1;
    let reads_all = chain_source(first).is_some_and(|x| in2[0] == BufView::dense(x, s1));
    // Only where the first GEMM splits by pixels anyway (see `gemm::gemm_a`): with fewer
    // pixels than output channels it splits by channels, each thread reading its share of the
    // weights; split by pixels for the chain, each thread streamed all of them (resnet50's
    // 14x14 and 7x7 pairs ran 3-12% slower chained, their maps being in cache either way).
    let by_pixels = matches!(&s1[..], &[_, o, h, w] if h * w >= o);
    // Buffers stand for their memory here: the memory plan keeps a pair's buffers apart.
    let written1 = writes(e1.as_ref(), *out1);
    let mut written2 = writes(None, *out2);
    written2.extend(written1.iter().cloned());
    on && f32s && pointwise && reads_all && by_pixels && on_gemm(first) && on_gemm(second) && blocks(e1.as_ref(), written1) && blocks(e2.as_ref(), written2)
}

/// The buffers an extern writing `out` with epilogue `e` writes, as [`col_blocks_safe`] spans.
fn writes(e: Option<&Epilogue>, out: BufId) -> Vec<std::ops::Range<usize>> {
    written_bufs(e, out).into_iter().map(span).collect()
}

/// A buffer as a span of its own.
fn span(b: BufId) -> std::ops::Range<usize> {
    b.index()..b.index() + 1
}

/// True when epilogue `e` (if any) runs in blocks given what the step writes.
fn blocks(e: Option<&Epilogue>, written: Vec<std::ops::Range<usize>>) -> bool {
    e.is_none_or(|e| crate::codegen::has_cols(&e.kernel) && col_blocks_safe(e, &span, written))
}
