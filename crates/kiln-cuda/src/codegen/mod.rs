//! CUDA C code generation from the kernel IR: a scheduled [`Program`]'s kernels as one CUDA C
//! translation unit for NVRTC ([`NVRTC_OPTIONS`]).
//!
//! The unit starts with kiln-cpu's C prelude (`kiln_cpu::codegen::PRELUDE`, whose `KC_FN`
//! helpers become device functions under NVRTC) and renders expressions with the C renderer's
//! [`kiln_cpu::codegen::expr`], so the scalar semantics are written once: f16/bf16 are bit
//! patterns computed in float with one rounding per op, integers wrap, float → int casts
//! saturate, max/min let NaN win. With `--fmad=false` float ops round as written; libm-like
//! calls (`expf`, `sinf`, ...) are CUDA's device math, within a few ulp of the CPU's.
//!
//! Each kernel becomes
//! `extern "C" __global__ void NAME(T0* a0, .., long long begin, long long end)`: one typed
//! pointer per kernel argument in order (`const T* __restrict__` for an argument the kernel
//! only reads, unless it may share memory with the output in place — see
//! `kiln_sched::memory`), then the range `begin..end` of the first outer loop (the launch
//! contract of `kiln_sched::program`; clamped to the loop; a kernel without outer loops has one
//! point and ignores it). How threads cover the outer points is the kernel's [`Launch`]; every
//! kernel loops grid-stride, so any grid of at least one block computes the same values (the
//! one [`CudaKernelInfo::grid`] gives is the fast one).

mod kernel;
mod row_cache;
mod vector;

pub use kernel::render_kernel;

use kiln_cpu::codegen::common::render_each;
use kiln_ir::Result;
use kiln_sched::Program;
use kiln_sched::kernel::Kernel;

/// The options every generated source is compiled with by NVRTC: H200 (sm_90); `--fmad=false`
/// so `a * b + c` rounds twice, as the CPU reference does; IEEE division and square root (the
/// default without `--use_fast_math`, which must not be given). Unused prelude helpers and the
/// prelude's `unsigned >= 0` tests are not worth a warning.
pub const NVRTC_OPTIONS: &[&str] = &[
    "--gpu-architecture=sm_90",
    "--fmad=false",
    "--std=c++17",
    "--diag-suppress=177,186",
];

/// Most blocks a launch asks for; kernels loop grid-stride over the rest.
pub const MAX_GRID: u32 = 65535 * 8;

/// How a kernel's threads cover its outer points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Launch {
    /// One thread per outer point (`begin..end` flattened with the other outer loops), blocks
    /// of `block` threads; every stage runs sequentially in its thread. Pointwise kernels, and
    /// reductions over many outer points with short reduce loops.
    PerThread { block: u32 },
    /// One block of `block` threads (a multiple of 32) per outer point: its threads split each
    /// Reduce stage's loops and combine their partials (warp shuffles, then shared memory;
    /// Sum/Prod are reassociated), every thread then holds the local; Store stages' points are
    /// split over the threads too. Kernels with a long stage loop nest: reductions over long
    /// loops (softmax and layer-norm rows, global pools, sums) and the stores after them.
    PerBlock { block: u32 },
    /// One warp per outer point, `block / 32` points per block of `block` threads: the warp's
    /// lanes split each stage's loops as [`Launch::PerBlock`]'s threads do, and combine their
    /// partials by shuffles alone (no shared memory, no block barrier). Rows of moderate length
    /// over many outer points (attention's softmax over 128 keys, layer norms over 768).
    PerWarp { block: u32 },
}

impl Launch {
    /// Threads per block.
    pub fn block(self) -> u32 {
        match self {
            Launch::PerThread { block } | Launch::PerBlock { block } | Launch::PerWarp { block } => block,
        }
    }

    /// `(grid_x, block_x)` for a launch over `points` outer points (see
    /// [`CudaKernelInfo::points`]); grid 0 means there is nothing to launch.
    pub fn grid(self, points: u64) -> (u32, u32) {
        let blocks = match self {
            Launch::PerThread { block } => points.div_ceil(u64::from(block)),
            Launch::PerBlock { .. } => points,
            Launch::PerWarp { block } => points.div_ceil(u64::from(block / 32).max(1)),
        };
        (blocks.min(u64::from(MAX_GRID)) as u32, self.block())
    }
}

/// One rendered kernel: its function name and how to launch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaKernelInfo {
    pub name: String,
    pub launch: Launch,
    /// Outer points per index of the first outer loop (the product of the other outer
    /// extents); `None` for a kernel without outer loops (one point, the range ignored).
    pub row_points: Option<u64>,
    /// Consecutive outer points each thread takes (4 for a vectorised pointwise kernel, else 1).
    pub vector: u32,
}

impl CudaKernelInfo {
    /// What a launch over `begin..end` of the first outer loop spreads over its threads (or
    /// blocks, or warps): its outer points, in groups of [`CudaKernelInfo::vector`].
    pub fn points(&self, begin: usize, end: usize) -> u64 {
        match self.row_points {
            None => 1,
            Some(r) => (end.saturating_sub(begin) as u64).saturating_mul(r).div_ceil(u64::from(self.vector.max(1))),
        }
    }

    /// `(grid_x, block_x)` of a launch over `begin..end` (grid 0: nothing to launch).
    pub fn grid(&self, begin: usize, end: usize) -> (u32, u32) {
        self.launch.grid(self.points(begin, end))
    }
}

/// One CUDA C translation unit and its kernels, in program order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaSource {
    pub source: String,
    pub kernels: Vec<CudaKernelInfo>,
}

/// Helpers of the CUDA unit beyond the shared prelude (block reductions).
const CUDA_HELPERS: &str = r#"
/* ---- CUDA: one warp's values combined by butterfly shuffles ---- */
template <typename T> static __device__ __forceinline__ T kc_shfl_xor(T x, int lane_mask) {
    return (T)__shfl_xor_sync(0xffffffffu, x, lane_mask);
}
"#;

/// The whole program's kernels (step kernels and extern epilogues) as one CUDA C unit.
pub fn render_cuda(program: &Program) -> Result<CudaSource> {
    render_cuda_kernels(program.kernels())
}

/// The prelude and the given kernels as one CUDA C unit (their names must differ).
pub fn render_cuda_kernels<'a>(
    kernels: impl IntoIterator<Item = &'a Kernel>,
) -> Result<CudaSource> {
    let mut source = String::from(kiln_cpu::codegen::PRELUDE);
    source.push_str(CUDA_HELPERS);
    let mut infos = Vec::new();
    for (text, info) in render_each(kernels, render_kernel)? {
        source.push('\n');
        source.push_str(&text);
        infos.push(info);
    }
    Ok(CudaSource {
        source,
        kernels: infos,
    })
}
