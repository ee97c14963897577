//! kiln's graph IR: what every frontend produces and every backend consumes.
//!
//! - [`DType`], [`Dim`]/[`Shape`] (fixed or symbolic dims) and [`data`] (host tensors);
//! - [`Op`]: the operation set, with precise semantics in its docs;
//! - [`Graph`]: a typed SSA DAG built through [`Graph::add`], which runs [`infer`];
//! - [`verify`](mod@verify), [`print`](mod@print) and [`hash`]: checking, showing and identifying graphs;
//! - [`decompose`](mod@decompose): composite ops rewritten into primitives.

pub mod data;
pub mod decompose;
mod dtype;
mod error;
mod graph;
pub mod hash;
pub mod infer;
mod op;
pub mod print;
mod shape;
pub mod verify;

pub use half;

pub use data::{Element, HostTensor, Layout, Storage};
pub use decompose::{decompose, decompose_keeping};
pub use dtype::DType;
pub use error::{Error, Result};
pub use graph::{Graph, Node, NodeId, TensorType};
pub use hash::structural_hash;
pub use op::*;
pub use print::{op_attrs, op_histogram};
pub use shape::{Dim, Shape, broadcast, broadcast_fixed, normalize_axis};
pub use verify::{node_label, verify};
