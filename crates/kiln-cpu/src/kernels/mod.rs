//! Kernels, one file per op family. Each takes host tensors with any strides and returns a
//! new tensor (or a view, for movement ops).

pub(crate) mod accum;
pub mod activation;
pub mod attention;
pub mod bitcast;
pub mod cast;
pub mod conv;
pub mod elementwise;
pub mod gather;
pub mod lowp;
pub mod matmul;
pub mod movement;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod scan;
pub mod scatter;
pub mod topk;
pub mod conv_transpose;
pub mod grid_sample;
pub mod resize;
