//! kiln's public API: [`Tensor`] with eager execution on the CPU, one dispatch point for
//! every op, tracing a forward pass into a [`kiln_ir::Graph`], `nn` layers and the model zoo,
//! and [`compile()`]: capture of Rust functions into compiled graphs (guards, graph breaks,
//! dynamic dims; see [`capture`]). The module [`compile`](mod@compile) is the graph compiler
//! underneath (`kiln::compile::compile(graph, shapes, opts)`).

pub mod capture;
pub mod compile;
pub mod device;
pub mod dispatch;
pub mod nn;
pub mod rng;
pub mod tensor;
pub mod trace;
pub mod zoo;

pub use capture::{CompiledFn, compile, compile_many, compile_module};
pub use device::Device;
pub use kiln_ir::{DType, Error, Graph, HostTensor, Result};
pub use tensor::Tensor;
pub use trace::trace;
