//! kiln's CUDA backend. Libraries (driver, NVRTC, cuBLAS, cuDNN) are loaded at run time, so a
//! build needs no CUDA and a machine without it gets an error naming the missing library.
//!
//! ```text
//! Program (kiln-sched) ─ codegen/: kernel IR ─► CUDA C ─ nvrtc.rs: NVRTC ─► cubin (disk cache) ─ module.rs: load
//!                      └ exec/: Executable runs the steps on kiln's stream: kernels, cuBLAS matmuls,
//!                               cuDNN convs (conv_fusion.rs: bias, residual add and ReLU inside the
//!                               call), epilogues; host.rs runs what has no GPU path yet
//! device/: Gpu (context, stream, library handles), the caching allocator, copies, library checks
//! explain.rs: where each step runs (kernel and launch, cuBLAS, cuDNN, host), without a GPU
//! ```

pub mod codegen;
pub mod device;
pub mod exec;
pub mod explain;
pub mod module;
pub mod nvrtc;

pub use device::{DeviceBuffer, Gpu, Lib, MemoryStats};
pub use exec::{Executable, runs_composite};
