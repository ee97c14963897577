//! A [`Program`]: a compiled graph as plain data — buffers, the steps that fill them, and where
//! each temporary lives in one arena. A runtime (C/OpenMP on CPU, CUDA later) executes it;
//! nothing in it points into a process, so it can be cached or saved as a package.
//!
//! Launch contract for every [`Kernel`] (renderers implement it): a launch covers a range
//! `begin..end` of the first outer loop (`0..outer[0].extent` for a whole launch; a kernel
//! with no outer loops has one point and ignores the range). An [`Epilogue`] kernel's first
//! outer loop runs over the rows of its extern's output (see [`ExternOp`]), so the extern can
//! apply it to each block of rows while they are still in cache.

use crate::kernel::Kernel;
use kiln_ir::{ConstId, Conv2dAttrs, DType, HostTensor, NodeId, Op};
use std::sync::Arc;

/// Index of a buffer in [`Program::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u32);

impl BufId {
    /// The index into [`Program::buffers`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Where a buffer's memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufKind {
    /// The caller's input `i` (dense), read only.
    Input(usize),
    /// The graph constant `id` (dense), read only.
    Const(ConstId),
    /// A temporary or output value, placed in the arena by the memory plan.
    Temp,
}

/// A dense buffer of `numel` elements of `dtype`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    pub dtype: DType,
    pub numel: usize,
    pub kind: BufKind,
}

impl Buffer {
    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.numel * self.dtype.size_of()
    }
}

/// A strided view of a buffer, as externs and reference kernels take their inputs: element
/// `[i0, i1, ..]` is `buf[offset + Σ ik * strides[k]]` (strides may be 0; never negative).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BufView {
    pub buf: BufId,
    pub offset: usize,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
}

impl BufView {
    /// The whole of `buf` read densely (row-major) as `shape`.
    pub fn dense(buf: BufId, shape: &[usize]) -> BufView {
        let strides = kiln_ir::data::contiguous_strides(shape).into_iter().map(|s| s as usize).collect();
        BufView { buf, offset: 0, shape: shape.to_vec(), strides }
    }

    /// The view as a [`kiln_ir::Layout`] over the buffer's elements (for host tensors sharing
    /// or reading the buffer).
    pub fn layout(&self) -> kiln_ir::Layout {
        kiln_ir::Layout {
            shape: self.shape.clone(),
            strides: self.strides.iter().map(|&s| s as isize).collect(),
            offset: self.offset,
        }
    }
}

/// A library operation an [`StepKind::Extern`] calls. Its inputs and output share one dtype,
/// one of [`crate::ScheduleOptions::extern_dtypes`]: f32 for the CPU runner (the default),
/// f32 / f16 / bf16 for the CUDA runtime (f16 / bf16 accumulated in f32); other dtypes use
/// [`StepKind::Eval`].
#[derive(Clone, Debug, PartialEq)]
pub enum ExternOp {
    /// `kiln_ir::Op::MatMul` on inputs `[a, b]` (batch dims broadcast, each operand a strided
    /// view of rank >= 2); output `[.., M, N]` dense. Epilogue rows: the `numel / N` rows of N.
    /// A backend that folds the epilogue `out + bias` (or `relu(out + bias)`, bias one value per
    /// column) into its GEMM (kiln-cuda's cuBLASLt epilogues) lists a bias vector `[N]` as a
    /// third input (none when the bias is a literal); only that backend runs such steps.
    MatMul,
    /// `kiln_ir::Op::Conv2d` on inputs `[x, w]` or `[x, w, bias]`; output `[N, O, H, W]` dense.
    /// A backend that folds the epilogue `relu(out + z)` into its library call (kiln-cuda's
    /// `fuse_library_epilogues`) lists `z` as a fourth input, dense in the output's shape: the
    /// step then computes `relu(conv + bias + z)` and has no epilogue; only that backend runs
    /// such steps.
    /// Epilogue rows: the `N * O` rows of `H * W` (channels last: output `[N, H, W, O]`, the
    /// `N * H * W` rows of `O`).
    Conv2d(Conv2dAttrs),
}

/// Pointwise work fused onto an extern's output: a kernel whose first outer loop runs over the
/// output's rows, launched with `args` once each block of rows is final.
#[derive(Clone, Debug, PartialEq)]
pub struct Epilogue {
    pub kernel: Kernel,
    pub args: Vec<BufId>,
}

/// What one step does.
#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// A fused kernel, its arguments bound to `args` in order.
    Kernel { kernel: Kernel, args: Vec<BufId> },
    /// A library call writing `out` (shape `out_shape`), then `epilogue` over its rows.
    Extern { op: ExternOp, inputs: Vec<BufView>, out: BufId, out_shape: Vec<usize>, epilogue: Option<Epilogue> },
    /// One graph op the code generator does not handle, run by the reference kernels
    /// (`kiln_cpu::eval`) on views of its inputs, the result copied into `out` — densely, or
    /// with `out_strides` (one element stride per dim of `out_shape`, a permutation of a
    /// dense layout of `out`) where [`crate::write_attention_through_copies`] folded a copy in.
    Eval { op: Op, inputs: Vec<BufView>, out: BufId, out_shape: Vec<usize>, out_strides: Option<Vec<usize>> },
}

/// One step and the graph nodes whose values it computes (for logs and `kiln explain`).
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub kind: StepKind,
    pub nodes: Vec<NodeId>,
    /// Runs inside the step before it, interleaved with it (see [`crate::chain`]): one launch
    /// for both, and every buffer either touches is live across both. A runtime that cannot
    /// interleave them may run them one after the other.
    pub with_previous: bool,
}

/// Where the [`BufKind::Temp`] buffers live: byte offsets into one arena.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MemoryPlan {
    /// Byte offset of each buffer (`None` for inputs and constants), 64-byte aligned.
    pub offsets: Vec<Option<usize>>,
    /// Arena size in bytes: the planned peak of temporaries.
    pub arena_bytes: usize,
}

/// A scheduled graph: run `steps` in order, then read `outputs`.
#[derive(Clone, Debug)]
pub struct Program {
    pub buffers: Vec<Buffer>,
    pub steps: Vec<Step>,
    /// The buffer of each graph input, in binding order.
    pub inputs: Vec<BufId>,
    /// The buffer of each graph output, in order, and its shape.
    pub outputs: Vec<(BufId, Vec<usize>)>,
    /// The graph's constants (shared), indexed by [`BufKind::Const`].
    pub consts: Vec<Arc<HostTensor>>,
    /// Set by the memory planner; `None` means every temporary gets its own allocation.
    pub memory: Option<MemoryPlan>,
}

impl Program {
    /// The buffer `id`.
    pub fn buffer(&self, id: BufId) -> &Buffer {
        &self.buffers[id.index()]
    }

    /// Every kernel of the program (steps' kernels and extern epilogues), in step order.
    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.steps.iter().filter_map(|s| match &s.kind {
            StepKind::Kernel { kernel, .. } => Some(kernel),
            StepKind::Extern { epilogue: Some(e), .. } => Some(&e.kernel),
            _ => None,
        })
    }

    /// Launches per run: one per step (an extern and its epilogue count as one), a step that
    /// runs [`Step::with_previous`] none.
    pub fn launches(&self) -> usize {
        self.steps.iter().filter(|s| !s.with_previous).count()
    }

    /// Per step, the index of the first step of the launch it runs in (itself, or the step
    /// it runs inside of, see [`Step::with_previous`]).
    pub fn launch_of_steps(&self) -> Vec<usize> {
        let mut first = 0;
        (0..self.steps.len())
            .map(|i| {
                if !self.steps[i].with_previous {
                    first = i;
                }
                first
            })
            .collect()
    }
}
