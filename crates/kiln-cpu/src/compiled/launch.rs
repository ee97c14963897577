//! How a [`StepKind::Kernel`](kiln_sched::StepKind) step (or an extern's epilogue) runs.

use kiln_ir::Result;
use kiln_sched::Kernel;
use crate::toolchain::ColsFn;

/// Runs kernels of the kernel IR. The interpreter ([`super::InterpKernels`]) implements it;
/// a native backend (compiled C) implements it by calling the kernel's symbol.
pub trait LaunchKernel: Send + Sync {
    /// Runs `kernel` over the points `begin..end` of its first outer loop (a kernel without
    /// outer loops has one point and ignores the range), argument `i` bound to `args[i]`.
    ///
    /// The caller guarantees each `args[i]` points to at least `kernel.args[i].len` elements
    /// of `kernel.args[i].dtype`, live and not aliased by anything else during the call.
    fn launch(&self, kernel: &Kernel, args: &[*mut u8], begin: i64, end: i64) -> Result<()>;

    /// The column-block twin of `kernel` (an epilogue, see [`crate::codegen::has_cols`]) as a
    /// function to call with `(args, begin, end, cbegin, cend)` on the calling thread, where
    /// this runner has one: resolved once per step, so that a GEMM can call it on each of
    /// its blocks for the cost of a call. Arguments as for [`LaunchKernel::launch`].
    fn cols_fn(&self, kernel: &Kernel) -> Option<ColsFn> {
        let _ = kernel;
        None
    }

    /// [`LaunchKernel::launch`] with the range split into `chunks` pieces over the thread pool
    /// (`None`: the runner's own choice). Splitting never changes results (outer points are
    /// independent), so a runner without threads may ignore it, as the default does.
    fn launch_split(
        &self,
        kernel: &Kernel,
        args: &[*mut u8],
        begin: i64,
        end: i64,
        chunks: Option<usize>,
    ) -> Result<()> {
        let _ = chunks;
        self.launch(kernel, args, begin, end)
    }
}
