//! CUDA C code generation from the kernel IR. (Placeholder API; the renderer lands from the
//! `cudagen` branch.)

use kiln_ir::{Error, Result};
use kiln_sched::Program;

/// NVRTC options every generated source is compiled with (besides the architecture).
pub const NVRTC_OPTIONS: &[&str] = &["--fmad=false", "-default-device"];

/// How a kernel maps its outer points onto the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// One thread per outer point.
    PerThread { block: u32 },
    /// One block per outer point.
    PerBlock { block: u32 },
}

impl Launch {
    /// `(grid_x, block_x)` for `points` outer points.
    pub fn grid(&self, points: u64) -> (u32, u32) {
        match *self {
            Launch::PerThread { block } => (points.div_ceil(block as u64).clamp(1, 1 << 20) as u32, block),
            Launch::PerBlock { block } => (points.clamp(1, 1 << 20) as u32, block),
        }
    }
}

/// One rendered kernel.
#[derive(Clone, Debug)]
pub struct CudaKernelInfo {
    pub name: String,
    pub launch: Launch,
}

/// A program's kernels as one CUDA C source.
#[derive(Clone, Debug)]
pub struct CudaSource {
    pub source: String,
    pub kernels: Vec<CudaKernelInfo>,
}

/// Renders every kernel of `program`.
pub fn render_cuda(_program: &Program) -> Result<CudaSource> {
    Err(Error::Unsupported("CUDA C renderer not merged yet".into()))
}
