//! CUDA C code generation from the kernel IR.
