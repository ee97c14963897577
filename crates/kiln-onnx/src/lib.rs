//! ONNX import for kiln: reads a `.onnx` file (protobuf, decoded with prost from the vendored
//! `onnx.proto`) and turns its graph into kiln's graph IR, which every backend runs.
//!
//! - [`OnnxModel`]: the decoded file and what it declares (inputs, outputs, opsets, ops);
//! - [`import()`]: the graph IR, with constants folded and shapes made static where they are;
//! - [`tensor`]: `TensorProto` ⇄ [`kiln_ir::HostTensor`] (also the test-data `.pb` files);
//! - [`builder`]: ONNX models built in Rust (tests, fuzz seeds), as `onnx.helper` does;
//! - [`conformance`]: runs ONNX backend test cases and compares with their expected outputs.

pub mod builder;
pub mod conformance;
pub mod import;
pub mod lowp;
mod model;
pub mod proto;
pub mod tensor;

pub use import::{
    ImportError, ImportOptions, Imported, InputValue, OutputKind, import, import_for_inputs, import_for_values,
};
pub use model::{Container, DeclaredDim, OnnxModel, ValueInfo};
