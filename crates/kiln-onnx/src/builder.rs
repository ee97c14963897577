//! Building ONNX models in Rust, as `onnx.helper` does in Python: for tests, fuzz seeds and
//! programs that emit models. Every function fills exactly the protobuf fields ONNX needs.

use crate::OnnxModel;
use crate::proto::attribute_proto::AttributeType;
use crate::proto::tensor_shape_proto::{Dimension, dimension};
use crate::proto::type_proto::{self, Tensor};
use crate::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use crate::tensor::{dtype_to_onnx, tensor_to_proto};
use kiln_ir::{DType, Dim, HostTensor};

/// A graph input/output declaration: `dims` fixed (`Dim::Fixed`) or named (`Dim::Sym`).
pub fn tensor_info(name: &str, dtype: DType, dims: &[Dim]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Dim::Fixed(n) => dimension::Value::DimValue(*n as i64),
                Dim::Sym(s) => dimension::Value::DimParam(s.to_string()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(Tensor {
                elem_type: Some(dtype_to_onnx(dtype)),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A node of the default (ai.onnx) domain; `""` in `inputs` skips an optional input.
pub fn node(op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute,
        ..Default::default()
    }
}

fn attr(name: &str, ty: AttributeType) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(ty as i32), ..Default::default() }
}

/// An int attribute.
pub fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto { i: Some(v), ..attr(name, AttributeType::Int) }
}

/// An ints attribute.
pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto { ints: v.to_vec(), ..attr(name, AttributeType::Ints) }
}

/// A float attribute.
pub fn attr_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto { f: Some(v), ..attr(name, AttributeType::Float) }
}

/// A floats attribute.
pub fn attr_floats(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto { floats: v.to_vec(), ..attr(name, AttributeType::Floats) }
}

/// A string attribute.
pub fn attr_string(name: &str, v: &str) -> AttributeProto {
    AttributeProto { s: Some(v.as_bytes().to_vec()), ..attr(name, AttributeType::String) }
}

/// A tensor attribute (e.g. Constant's `value`).
pub fn attr_tensor(name: &str, t: &HostTensor) -> AttributeProto {
    AttributeProto { t: Some(tensor_to_proto(t, name)), ..attr(name, AttributeType::Tensor) }
}

/// A graph attribute (If/Loop/Scan bodies).
pub fn attr_graph(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto { g: Some(g), ..attr(name, AttributeType::Graph) }
}

/// A graph from its nodes, declared inputs and outputs, and named initializers.
pub fn graph(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    initializers: &[(&str, HostTensor)],
) -> GraphProto {
    GraphProto {
        name: Some("graph".into()),
        node: nodes,
        input: inputs,
        output: outputs,
        initializer: initializers.iter().map(|(n, t)| tensor_to_proto(t, n)).collect(),
        ..Default::default()
    }
}

/// A model of `graph` importing the default domain at `opset`.
pub fn model(graph: GraphProto, opset: i64) -> OnnxModel {
    OnnxModel {
        proto: ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
            producer_name: Some("kiln".into()),
            graph: Some(graph),
            ..Default::default()
        },
        dir: None,
    }
}
