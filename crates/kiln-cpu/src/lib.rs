//! kiln's reference CPU runtime: [`eval`] runs one op (CPU eager mode), [`run`] a whole graph.
//! Every other backend is checked against it.

pub mod compiled;
pub mod codegen;
pub mod eval;
pub mod gemm;
pub mod interpreter;
pub mod kernels;
pub mod native;
pub mod par;
pub mod toolchain;

pub use eval::eval;
pub use interpreter::run;
