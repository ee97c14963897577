//! Host tensor data: typed storage, strided layouts, and the tensor that pairs them.

mod host_tensor;
mod layout;
mod storage;

pub use host_tensor::HostTensor;
pub use layout::{Layout, check_perm, contiguous_strides};
pub use storage::{Element, Storage};
