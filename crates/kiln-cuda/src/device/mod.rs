//! The GPU kiln runs on: its context and stream, library handles and memory.

mod alloc;
mod copy;
mod gpu;
pub mod libs;

pub use alloc::{DeviceBuffer, MemoryStats};
pub use gpu::{CUBLAS_WORKSPACE, Gpu, driver_error};
pub use libs::Lib;
