//! kiln's reference CPU runtime: [`eval`] runs one op (CPU eager mode), [`run`] a whole graph.
//! Every other backend is checked against it.

pub mod eval;
pub mod interpreter;
pub mod kernels;

pub use eval::eval;
pub use interpreter::run;
