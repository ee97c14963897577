//! The ONNX protobuf messages (`ModelProto`, `GraphProto`, `NodeProto`, `TensorProto`, ...),
//! generated at build time from the vendored `proto/onnx.proto` (ONNX 1.23).
#![allow(missing_docs, clippy::all)]

include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
