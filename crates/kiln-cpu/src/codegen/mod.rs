//! C code generation: a scheduled [`Program`]'s kernels as one C translation unit, compiled by
//! [`crate::toolchain`] into a shared library (`-O3 -march=native -fopenmp`).
//!
//! Each kernel becomes `void NAME(void* const* args, int64_t begin, int64_t end)`: `args[i]` is
//! the buffer of the kernel's argument `i`, and a launch covers `begin..end` of its first outer
//! loop (the launch contract of `kiln_sched::program`). The outer loops run under
//! `#pragma omp parallel for` when the launch has enough work; values follow the semantics of
//! `kiln_cpu::eval` exactly (see `prelude.h`), except that Sum/Prod reductions may be
//! reassociated by vectorisation. An expression or dtype the generator cannot render exactly
//! is an [`kiln_ir::Error::Unsupported`] naming it, so the scheduler can leave it unfused.

mod c;
pub mod common;
pub mod expr;
pub mod generic;
pub mod row_values;

pub use c::{PAR_MIN_WORK, cols_name, has_cols, render_kernel, render_kernel_sized, work_per_row};
pub use generic::Template;

use kiln_ir::Result;
use kiln_sched::Program;
use kiln_sched::kernel::Kernel;

/// The C helpers every translation unit starts with (`KC_FN` functions: `static inline` in C,
/// `static __device__ __forceinline__` when compiled as CUDA, which kiln-cuda's prelude is).
pub const PRELUDE: &str = include_str!("prelude.h");

/// The whole program's kernels (step kernels and extern epilogues) as one C translation unit.
pub fn render_c(program: &Program) -> Result<String> {
    render_c_sized(program, 0)
}

/// [`render_c`] for a size-generic translation unit: every kernel also reads `symbols` sizes
/// from one more argument (see [`render_kernel_sized`] and [`generic`]).
pub fn render_c_sized(program: &Program, symbols: usize) -> Result<String> {
    unit(common::render_each(program.kernels(), |k| render_kernel_sized(k, symbols))?)
}

/// The prelude and the given kernels as one C translation unit (their names must differ).
pub fn render_kernels<'a>(kernels: impl IntoIterator<Item = &'a Kernel>) -> Result<String> {
    unit(common::render_each(kernels, render_kernel)?)
}

/// The prelude followed by each kernel's text.
fn unit(texts: Vec<String>) -> Result<String> {
    let mut out = String::from(PRELUDE);
    for text in texts {
        out.push('\n');
        out.push_str(&text);
    }
    Ok(out)
}
