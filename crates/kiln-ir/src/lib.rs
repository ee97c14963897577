//! kiln's graph IR: what every frontend produces and every backend consumes.
//!
//! - [`DType`], [`Dim`]/[`Shape`] (fixed or symbolic dims) and [`data`] (host tensors);
//! - [`Op`]: the operation set, with precise semantics in its docs;
//! - [`Graph`]: a typed SSA DAG built through [`Graph::add`], which runs [`infer`];
//! - [`verify`], [`print`] and [`hash`]: checking, showing and identifying graphs.

pub mod data;
mod dtype;
mod error;
mod graph;
pub mod infer;
mod op;
mod shape;

pub use half;

pub use data::{Element, HostTensor, Layout, Storage};
pub use dtype::DType;
pub use error::{Error, Result};
pub use graph::{Graph, Node, NodeId, TensorType};
pub use op::*;
pub use shape::{Dim, Shape, broadcast, broadcast_fixed, normalize_axis};
