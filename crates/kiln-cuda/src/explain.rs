//! Where each step of a scheduled [`Program`] runs on a GPU — a generated kernel (its name and
//! [`Launch`]), a cuBLAS or cuDNN call, or the host — worked out without a GPU, for
//! `kiln explain --device cuda`. Rendering needs no device, and the library decisions are pure
//! functions of the steps' views.
//!
//! The library decisions are the runtime's own: [`MatmulPlan::new`] and its [`Batching`] for
//! matmuls, [`cudnn_refusal`] for convs, [`AttentionPlan::new`] for attention and [`fold_steps`]
//! for the attention writing its heads merged and the epilogues cuDNN and cuBLASLt apply
//! themselves (all pure, so no GPU is needed). Only a GPU can tell what the
//! libraries refuse when the executable is built: a conv cuDNN has no algorithm for is an
//! error, and a GEMM epilogue cuBLASLt has no algorithm for stays a kernel (here it is shown
//! fused).

use crate::codegen::{CudaSource, Launch, render_cuda};
use crate::exec::{AttentionPlan, Batching, ConvFusion, GemmFusion, MatmulPlan, cudnn_refusal, fold_steps, gather_fits};
use kiln_ir::{Conv2dAttrs, DType, Error, Graph, Op, Result};
use kiln_sched::{BufView, ExternOp, Program, StepKind};
use std::fmt;

/// What runs one step (or an extern's epilogue) on the GPU.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    /// A generated CUDA kernel.
    Kernel { name: String, launch: Launch },
    /// One strided-batched GEMM over `batches` matrices.
    CublasStridedBatched { batches: usize },
    /// One batched GEMM over device pointer arrays (the entries are not one stride apart).
    CublasBatched { batches: usize },
    /// One GEMM per batch entry (more entries than cuBLAS's 32-bit batch count).
    CublasLoop { calls: usize },
    /// One cuBLASLt GEMM (strided batch) adding the bias (and applying the ReLU) itself.
    CublasLt { fused: GemmFusion },
    /// One cuDNN conv call; with a fusion, `cudnnConvolutionBiasActivationForward` adding the
    /// bias (and the residual) and applying the ReLU.
    Cudnn { fused: Option<ConvFusion> },
    /// kiln's handwritten attention kernel (scores kept on chip), over `batches` entries;
    /// `strided`: it writes the merge of its heads itself (the copy that did is gone).
    Attention { batches: usize, strided: bool },
    /// kiln's handwritten gather kernel (embedding lookups).
    Gather,
    /// Copied back, run by the reference kernels, copied up.
    Host { reason: String },
}

impl Route {
    /// Whether this is a library call (cuBLAS or cuDNN).
    pub fn is_library(&self) -> bool {
        matches!(self, Route::CublasStridedBatched { .. } | Route::CublasBatched { .. } | Route::CublasLoop { .. } | Route::CublasLt { .. } | Route::Cudnn { .. })
    }
}

/// `PerThread block 256` / `PerBlock block 128`.
fn launch_text(l: Launch) -> String {
    let kind = match l {
        Launch::PerThread { .. } => "PerThread",
        Launch::PerBlock { .. } => "PerBlock",
        Launch::PerWarp { .. } => "PerWarp",
    };
    format!("{kind} block {}", l.block())
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Kernel { name, launch } => write!(f, "kernel {name} ({})", launch_text(*launch)),
            Route::CublasStridedBatched { batches: 1 } => f.write_str("cuBLAS sgemm"),
            Route::CublasStridedBatched { batches } => write!(f, "cuBLAS sgemm strided-batched (batch {batches})"),
            Route::CublasBatched { batches } => write!(f, "cuBLAS sgemm batched over pointer arrays (batch {batches})"),
            Route::CublasLoop { calls } => write!(f, "cuBLAS sgemm x {calls}"),
            Route::CublasLt { fused } => write!(f, "cuBLASLt matmul{} (fused)", fused.label()),
            Route::Cudnn { fused: None } => f.write_str("cuDNN conv"),
            Route::Cudnn { fused: Some(fusion) } => write!(f, "cuDNN conv{} (fused)", fusion.label()),
            Route::Attention { batches, strided: false } => write!(f, "attention kernel (batch {batches})"),
            Route::Attention { batches, strided: true } => write!(f, "attention kernel (batch {batches}), writing the heads merged"),
            Route::Gather => f.write_str("gather kernel"),
            Route::Host { reason } => write!(f, "host ({reason})"),
        }
    }
}

/// One step: what runs it, the kernel of its epilogue, and the graph ops it computes.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRoute {
    pub route: Route,
    pub epilogue: Option<Route>,
    /// Op names of the step's graph nodes (empty without a graph).
    pub ops: Vec<String>,
}

/// The GPU plan of a whole program: the CUDA C and each step's route.
#[derive(Clone, Debug)]
pub struct CudaExplain {
    pub source: CudaSource,
    pub steps: Vec<StepRoute>,
    /// Bytes of the arena of temporaries, planned after the libraries' fusions (as the runtime does).
    pub arena_bytes: usize,
}

/// Routes every step of `program`; `graph` (the one the program was scheduled from) names
/// the ops of each step.
pub fn explain_program(program: &Program, graph: Option<&Graph>) -> Result<CudaExplain> {
    let mut program = program.clone();
    let folds = fold_steps(&mut program, &mut |_, _| true);
    let arena_bytes = kiln_sched::plan_memory(&program).arena_bytes;
    let source = render_cuda(&program)?;
    tracing::info!(target: "kiln::output_code", "generated CUDA C ({} kernels):\n{}", source.kernels.len(), source.source);
    let kernel = |name: &str| -> Result<Route> {
        let info = source.kernels.iter().find(|k| k.name == name).ok_or_else(|| Error::Device(format!("kernel {name} was not rendered")))?;
        Ok(Route::Kernel { name: name.to_string(), launch: info.launch })
    };
    let mut steps = Vec::with_capacity(program.steps.len());
    for (step, fused) in program.steps.iter().zip(folds) {
        let (route, epilogue) = match &step.kind {
            StepKind::Kernel { kernel: k, .. } => (kernel(&k.name)?, None),
            StepKind::Extern { op, inputs, out, out_shape, epilogue } => {
                let route = match op {
                    ExternOp::MatMul => match fused.and_then(|f| f.gemm()) {
                        Some(fused) => Route::CublasLt { fused },
                        None => matmul_route(inputs, out_shape, program.buffer(*out).dtype)?,
                    },
                    ExternOp::Conv2d(attrs) => match conv_route(attrs, inputs, out_shape) {
                        Route::Cudnn { .. } => Route::Cudnn { fused: fused.and_then(|f| f.conv()) },
                        host => host,
                    },
                };
                (route, epilogue.as_ref().map(|e| kernel(&e.kernel.name)).transpose()?)
            }
            StepKind::Eval { op, inputs, out, out_shape, out_strides } => (eval_route(&program, op, inputs, out_shape, program.buffer(*out).dtype, out_strides.as_deref()), None),
        };
        let ops = graph.map_or_else(Vec::new, |g| step.nodes.iter().map(|&n| g.node(n).op.name()).collect());
        steps.push(StepRoute { route, epilogue, ops });
    }
    Ok(CudaExplain { source, steps, arena_bytes })
}

/// How an eval step runs: attention and (dense) gathers on kiln's handwritten kernels, the
/// rest on the host.
fn eval_route(program: &Program, op: &Op, inputs: &[BufView], out_shape: &[usize], dtype: DType, out_strides: Option<&[usize]>) -> Route {
    match op {
        Op::Attention { causal, scale } => match AttentionPlan::new(*causal, *scale, inputs, out_shape, dtype, out_strides) {
            Some(plan) => Route::Attention { batches: plan.batches, strided: out_strides.is_some() },
            None => Route::Host { reason: "the attention kernel does not take these shapes".into() },
        },
        Op::Gather { axis } if matches!(inputs, [data, idx] if gather_fits(data, idx, *axis, program.buffer(idx.buf).dtype)) => Route::Gather,
        op => Route::Host { reason: format!("no GPU kernel for {}", op.name()) },
    }
}

/// How a matmul extern `a [.., M, K] @ b [.., K, N] -> out_shape` in `dtype` runs.
pub fn matmul_route(inputs: &[BufView], out_shape: &[usize], dtype: DType) -> Result<Route> {
    let Some(plan) = MatmulPlan::new(inputs, out_shape, dtype)? else {
        return Ok(Route::Host { reason: format!("cuBLAS cannot read these {dtype} operands (strides, or sizes past 32-bit ints)") });
    };
    let batches = plan.batches();
    Ok(match plan.batching() {
        Batching::Strided { .. } => Route::CublasStridedBatched { batches },
        Batching::Pointers => Route::CublasBatched { batches },
        Batching::Loop => Route::CublasLoop { calls: batches },
    })
}

/// How a conv extern `x (*) w (+ bias) -> out_shape` runs.
pub fn conv_route(attrs: &Conv2dAttrs, inputs: &[BufView], out_shape: &[usize]) -> Route {
    match cudnn_refusal(attrs, inputs, out_shape) {
        None => Route::Cudnn { fused: None },
        Some(reason) => Route::Host { reason: reason.into() },
    }
}

impl CudaExplain {
    /// Generated kernels (step kernels and epilogues).
    pub fn kernels(&self) -> usize {
        self.source.kernels.len()
    }
}

impl fmt::Display for CudaExplain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let library = self.steps.iter().filter(|s| s.route.is_library()).count();
        let host = self.steps.iter().filter(|s| matches!(s.route, Route::Host { .. })).count();
        let count = |pred: fn(&Launch) -> bool| self.source.kernels.iter().filter(|k| pred(&k.launch)).count();
        let (per_block, per_warp) = (count(|l| matches!(l, Launch::PerBlock { .. })), count(|l| matches!(l, Launch::PerWarp { .. })));
        writeln!(f, "== CUDA steps ==")?;
        for (i, s) in self.steps.iter().enumerate() {
            let epi = s.epilogue.as_ref().map(|e| format!(" + epilogue {e}")).unwrap_or_default();
            let ops = if s.ops.is_empty() { String::new() } else { format!("  <- {}", s.ops.join(", ")) };
            writeln!(f, "  step {i:>3}: {}{epi}{ops}", s.route)?;
        }
        writeln!(
            f,
            "CUDA: {} steps: {} kernels ({per_block} PerBlock, {per_warp} PerWarp), {library} library calls, {host} on the host; arena {:.1} MB after the libraries' fusions",
            self.steps.len(),
            self.kernels(),
            self.arena_bytes as f64 / 1e6
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_sched::BufId;

    fn view(shape: &[usize], strides: &[usize]) -> BufView {
        BufView { buf: BufId(0), offset: 0, shape: shape.to_vec(), strides: strides.to_vec() }
    }

    #[test]
    fn matmuls_go_to_cublas_batched_looped_or_the_host() {
        let a = view(&[2, 3, 4], &[12, 4, 1]);
        let b = view(&[4, 5], &[5, 1]);
        let f32 = DType::F32;
        // A shared B over stacked A entries is one GEMM of 6 rows; a batched B is 2 GEMMs.
        assert_eq!(matmul_route(&[a.clone(), b.clone()], &[2, 3, 5], f32).unwrap(), Route::CublasStridedBatched { batches: 1 });
        let b2 = view(&[2, 4, 5], &[20, 5, 1]);
        assert_eq!(matmul_route(&[a.clone(), b2], &[2, 3, 5], f32).unwrap(), Route::CublasStridedBatched { batches: 2 });
        // Batch [3, 2] over a [2, ..] operand: offsets 0, 12, 0, 12, ... are not one stride,
        // so the runtime binds pointer arrays and makes one batched call.
        assert_eq!(matmul_route(&[a, b.clone()], &[3, 2, 3, 5], f32).unwrap(), Route::CublasBatched { batches: 6 });
        let strided = view(&[3, 4], &[8, 2]);
        assert!(matches!(matmul_route(&[strided, b.clone()], &[3, 5], f32).unwrap(), Route::Host { .. }));
        assert!(matches!(matmul_route(&[view(&[3, 4], &[4, 1]), b], &[3, 5], DType::I32).unwrap(), Route::Host { .. }));
        assert!(matmul_route(&[view(&[4], &[1]), view(&[4], &[1])], &[1], f32).is_err());
    }

    #[test]
    fn convs_go_to_cudnn_unless_padding_is_asymmetric_or_the_filter_strided() {
        let x = view(&[1, 3, 8, 8], &[192, 64, 8, 1]);
        let w = view(&[4, 3, 3, 3], &[27, 9, 3, 1]);
        let pads = |padding| Conv2dAttrs { stride: [1, 1], padding, dilation: [1, 1], groups: 1, channels_last: false };
        assert_eq!(conv_route(&pads([1, 1, 1, 1]), &[x.clone(), w.clone()], &[1, 4, 8, 8]), Route::Cudnn { fused: None });
        assert_eq!(conv_route(&pads([0, 0, 1, 1]), &[x.clone(), w], &[1, 4, 7, 7]), Route::Host { reason: "asymmetric padding".into() });
        let w = view(&[4, 3, 3, 3], &[1, 4, 12, 36]);
        assert_eq!(conv_route(&pads([1, 1, 1, 1]), &[x, w], &[1, 4, 8, 8]), Route::Host { reason: "the filter is not dense".into() });
    }

    #[test]
    fn routes_print_as_explain_shows_them() {
        let k = Route::Kernel { name: "k0".into(), launch: Launch::PerBlock { block: 128 } };
        assert_eq!(k.to_string(), "kernel k0 (PerBlock block 128)");
        assert_eq!(Route::CublasLoop { calls: 3 }.to_string(), "cuBLAS sgemm x 3");
        assert_eq!(Route::Host { reason: "why".into() }.to_string(), "host (why)");
    }
}
