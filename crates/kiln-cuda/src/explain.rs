//! Where each step of a scheduled [`Program`] runs on a GPU — a generated kernel (its name and
//! [`Launch`]), a cuBLAS or cuDNN call, or the host — worked out without a GPU, for
//! `kiln explain --device cuda`. Rendering needs no device, and the library decisions are pure
//! functions of the steps' views.
//!
//! The library rules here restate [`crate::Executable::new`]'s (in `exec/`): keep them in step.
//! [`matmul_route`] mirrors `MatmulPlan::new` (an operand must be a row- or column-major matrix
//! with a leading dimension, sizes below `i32::MAX`; strided-batched when both operands' batch
//! entries are one stride apart) and [`conv_route`] mirrors `ConvPlan::new`'s preconditions
//! (symmetric padding, a dense filter, element counts within cuDNN's 32-bit indices). A conv
//! cuDNN has no algorithm for is an error when the executable is built, which only a GPU can
//! tell.

use crate::codegen::{CudaSource, Launch, render_cuda};
use kiln_ir::{Error, Graph, Result};
use kiln_sched::{BufView, ExternOp, Program, StepKind};
use std::fmt;

/// What runs one step (or an extern's epilogue) on the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// A generated CUDA kernel.
    Kernel { name: String, launch: Launch },
    /// One `cublasSgemmStridedBatched` over `batches` matrices.
    CublasStridedBatched { batches: usize },
    /// One `cublasSgemm` per batch entry (the entries are not one stride apart).
    CublasLoop { calls: usize },
    /// `cudnnConvolutionForward` (plus `cudnnAddTensor` for a bias).
    Cudnn,
    /// Copied back, run by the reference kernels, copied up.
    Host { reason: String },
}

impl Route {
    /// Whether this is a library call (cuBLAS or cuDNN).
    pub fn is_library(&self) -> bool {
        matches!(self, Route::CublasStridedBatched { .. } | Route::CublasLoop { .. } | Route::Cudnn)
    }
}

/// `PerThread block 256` / `PerBlock block 128`.
fn launch_text(l: Launch) -> String {
    let kind = match l {
        Launch::PerThread { .. } => "PerThread",
        Launch::PerBlock { .. } => "PerBlock",
    };
    format!("{kind} block {}", l.block())
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Kernel { name, launch } => write!(f, "kernel {name} ({})", launch_text(*launch)),
            Route::CublasStridedBatched { batches } => write!(f, "cuBLAS sgemm strided-batched (batch {batches})"),
            Route::CublasLoop { calls } => write!(f, "cuBLAS sgemm x {calls}"),
            Route::Cudnn => f.write_str("cuDNN conv"),
            Route::Host { reason } => write!(f, "host ({reason})"),
        }
    }
}

/// One step: what runs it, the kernel of its epilogue, and the graph ops it computes.
#[derive(Clone, Debug, PartialEq, Eq)]
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
}

/// Routes every step of `program`; `graph` (the one the program was scheduled from) names
/// the ops of each step.
pub fn explain_program(program: &Program, graph: Option<&Graph>) -> Result<CudaExplain> {
    let source = render_cuda(program)?;
    let kernel = |name: &str| -> Result<Route> {
        let info = source.kernels.iter().find(|k| k.name == name).ok_or_else(|| Error::Device(format!("kernel {name} was not rendered")))?;
        Ok(Route::Kernel { name: name.to_string(), launch: info.launch })
    };
    let mut steps = Vec::with_capacity(program.steps.len());
    for step in &program.steps {
        let (route, epilogue) = match &step.kind {
            StepKind::Kernel { kernel: k, .. } => (kernel(&k.name)?, None),
            StepKind::Extern { op, inputs, out_shape, epilogue, .. } => {
                let route = match op {
                    ExternOp::MatMul => matmul_route(inputs, out_shape)?,
                    ExternOp::Conv2d(attrs) => conv_route(attrs.padding, inputs, out_shape),
                };
                (route, epilogue.as_ref().map(|e| kernel(&e.kernel.name)).transpose()?)
            }
            StepKind::Eval { op, .. } => (Route::Host { reason: format!("no GPU kernel for {}", op.name()) }, None),
        };
        let ops = graph.map_or_else(Vec::new, |g| step.nodes.iter().map(|&n| g.node(n).op.name()).collect());
        steps.push(StepRoute { route, epilogue, ops });
    }
    Ok(CudaExplain { source, steps })
}

/// The leading dimension cuBLAS reads a `rows x cols` matrix with strides `(sr, sc)` by: laid
/// out row-major (columns adjacent) or column-major (rows adjacent), lines at least a line
/// long apart; `None` when it is neither.
fn leading_dim(rows: usize, cols: usize, sr: usize, sc: usize) -> Option<usize> {
    let (line, lines, gap) = if sc == 1 || cols <= 1 {
        (cols, rows, sr)
    } else if sr == 1 || rows <= 1 {
        (rows, cols, sc)
    } else {
        return None;
    };
    let ld = if lines <= 1 { line.max(1) } else { gap };
    (ld >= line.max(1)).then_some(ld)
}

/// Whether `v`'s batch entries, over the output's batch dims `batch` (broadcast from the
/// left), lie one stride apart in row-major order of the batch index.
fn one_batch_stride(v: &BufView, batch: &[usize]) -> bool {
    let own = v.shape.len() - 2;
    let pad = batch.len().saturating_sub(own);
    let mut next: Option<usize> = None;
    for (i, &n) in batch.iter().enumerate().rev() {
        if n <= 1 {
            continue;
        }
        let step = if i < pad || v.shape[i - pad] == 1 { 0 } else { v.strides[i - pad] };
        if next.is_some_and(|want| want != step) {
            return false;
        }
        next = Some(step * n);
    }
    true
}

/// How a matmul extern `a [.., M, K] @ b [.., K, N] -> out_shape` runs (see the module docs).
pub fn matmul_route(inputs: &[BufView], out_shape: &[usize]) -> Result<Route> {
    let (a, b) = (&inputs[0], &inputs[1]);
    let (ra, rb) = (a.shape.len(), b.shape.len());
    if ra < 2 || rb < 2 || out_shape.len() < 2 {
        return Err(Error::Graph(format!("matmul extern on ranks {ra} and {rb}")));
    }
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    let fits = |d: usize| d < i32::MAX as usize;
    let lds = (leading_dim(m, k, a.strides[ra - 2], a.strides[ra - 1]), leading_dim(k, n, b.strides[rb - 2], b.strides[rb - 1]));
    let (Some(lda), Some(ldb)) = lds else {
        return Ok(Route::Host { reason: "an operand's strides are not a matrix cuBLAS reads".into() });
    };
    if ![m, n, k, lda, ldb].into_iter().all(fits) {
        return Ok(Route::Host { reason: "sizes past cuBLAS's 32-bit ints".into() });
    }
    let batch = &out_shape[..out_shape.len() - 2];
    let batches: usize = batch.iter().product();
    Ok(if one_batch_stride(a, batch) && one_batch_stride(b, batch) && fits(batches) {
        Route::CublasStridedBatched { batches }
    } else {
        Route::CublasLoop { calls: batches }
    })
}

/// How a conv extern `x (*) w (+ bias) -> out_shape` with `padding` `[top, left, bottom,
/// right]` runs (see the module docs).
pub fn conv_route(padding: [usize; 4], inputs: &[BufView], out_shape: &[usize]) -> Route {
    let [top, left, bottom, right] = padding;
    let (x, w) = (&inputs[0], &inputs[1]);
    let below_i32 = |n: usize| n < i32::MAX as usize;
    let reach: usize = x.shape.iter().zip(&x.strides).map(|(&d, &s)| d.saturating_sub(1) * s).sum();
    let mut expect = 1;
    let mut dense = true;
    for (&d, &s) in w.shape.iter().zip(&w.strides).rev() {
        dense &= s == expect;
        expect *= d.max(1);
    }
    let reason = if top != bottom || left != right {
        "asymmetric padding"
    } else if !dense {
        "the filter is not dense"
    } else if !below_i32(x.shape.iter().product()) || !below_i32(reach) || !below_i32(out_shape.iter().product()) {
        "element counts past cuDNN's 32-bit indices"
    } else {
        return Route::Cudnn;
    };
    Route::Host { reason: reason.into() }
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
        let per_block = self.source.kernels.iter().filter(|k| matches!(k.launch, Launch::PerBlock { .. })).count();
        writeln!(f, "== CUDA steps ==")?;
        for (i, s) in self.steps.iter().enumerate() {
            let epi = s.epilogue.as_ref().map(|e| format!(" + epilogue {e}")).unwrap_or_default();
            let ops = if s.ops.is_empty() { String::new() } else { format!("  <- {}", s.ops.join(", ")) };
            writeln!(f, "  step {i:>3}: {}{epi}{ops}", s.route)?;
        }
        writeln!(
            f,
            "CUDA: {} steps: {} kernels ({per_block} PerBlock), {library} library calls, {host} on the host",
            self.steps.len(),
            self.kernels()
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
    fn leading_dims_follow_the_operand_rule() {
        assert_eq!(leading_dim(3, 4, 4, 1), Some(4));
        assert_eq!(leading_dim(3, 4, 1, 3), Some(3));
        assert_eq!(leading_dim(1, 4, 0, 1), Some(4));
        assert_eq!(leading_dim(3, 1, 5, 0), Some(5));
        assert_eq!(leading_dim(3, 4, 8, 2), None);
        assert_eq!(leading_dim(3, 4, 2, 1), None);
    }

    #[test]
    fn matmuls_go_to_cublas_batched_looped_or_the_host() {
        let a = view(&[2, 3, 4], &[12, 4, 1]);
        let b = view(&[4, 5], &[5, 1]);
        assert_eq!(matmul_route(&[a.clone(), b.clone()], &[2, 3, 5]).unwrap(), Route::CublasStridedBatched { batches: 2 });
        // Batch [3, 2] over a [2, ..] operand: offsets 0, 12, 0, 12, ... are not one stride.
        assert_eq!(matmul_route(&[a, b.clone()], &[3, 2, 3, 5]).unwrap(), Route::CublasLoop { calls: 6 });
        let strided = view(&[3, 4], &[8, 2]);
        assert!(matches!(matmul_route(&[strided, b], &[3, 5]).unwrap(), Route::Host { .. }));
        assert!(matmul_route(&[view(&[4], &[1]), view(&[4], &[1])], &[1]).is_err());
    }

    #[test]
    fn convs_go_to_cudnn_unless_padding_is_asymmetric_or_the_filter_strided() {
        let x = view(&[1, 3, 8, 8], &[192, 64, 8, 1]);
        let w = view(&[4, 3, 3, 3], &[27, 9, 3, 1]);
        assert_eq!(conv_route([1, 1, 1, 1], &[x.clone(), w.clone()], &[1, 4, 8, 8]), Route::Cudnn);
        assert_eq!(conv_route([0, 0, 1, 1], &[x.clone(), w], &[1, 4, 7, 7]), Route::Host { reason: "asymmetric padding".into() });
        let w = view(&[4, 3, 3, 3], &[1, 4, 12, 36]);
        assert_eq!(conv_route([1, 1, 1, 1], &[x, w], &[1, 4, 8, 8]), Route::Host { reason: "the filter is not dense".into() });
    }

    #[test]
    fn routes_print_as_explain_shows_them() {
        let k = Route::Kernel { name: "k0".into(), launch: Launch::PerBlock { block: 128 } };
        assert_eq!(k.to_string(), "kernel k0 (PerBlock block 128)");
        assert_eq!(Route::CublasLoop { calls: 3 }.to_string(), "cuBLAS sgemm x 3");
        assert_eq!(Route::Host { reason: "why".into() }.to_string(), "host (why)");
    }
}
