//! Compiles the vendored `proto/onnx.proto` into Rust types with prost. protox parses the
//! .proto in pure Rust, so the build needs no `protoc` on the machine.

fn main() {
    let proto = "proto/onnx.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"]).expect("vendored onnx.proto must parse");
    prost_build::Config::new()
        .compile_fds(descriptors)
        .expect("prost code generation from onnx.proto");
}
