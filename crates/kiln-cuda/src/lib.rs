//! kiln's CUDA backend. Libraries (driver, NVRTC, cuBLAS, cuDNN) are loaded at run time, so a
//! build needs no CUDA and a machine without it gets an error naming the missing library.

pub mod codegen;
