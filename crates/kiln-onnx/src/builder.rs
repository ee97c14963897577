//! Building ONNX models in Rust, as `onnx.helper` does in Python: for tests, fuzz seeds and
//! programs that emit models. Every function fills exactly the protobuf fields ONNX needs.

use crate::OnnxModel;
use crate::proto::attribute_proto::AttributeType;
use crate::proto::tensor_shape_proto::{Dimension, dimension};
use crate::proto::type_proto::{self, Tensor};
use crate::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto,
};
use crate::tensor::{dtype_to_onnx, tensor_to_proto};
use kiln_ir::{DType, Dim, HostTensor};

/// A graph input/output declaration: `dims` fixed (`Dim::Fixed`) or named (`Dim::Sym`).
pub fn tensor_info(name: &str, dtype: DType, dims: &[Dim]) -> ValueInfoProto {
    tensor_info_code(name, dtype_to_onnx(dtype), dims)
}

/// `tensor_info` with every dim fixed, the common case of tests.
pub fn tensor_info_fixed(name: &str, dtype: DType, dims: &[usize]) -> ValueInfoProto {
    tensor_info(name, dtype, &fixed(dims))
}

/// Fixed sizes as `Dim`s.
pub fn fixed(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&n| Dim::Fixed(n)).collect()
}

/// A declaration by raw ONNX element type code (`TensorProto.DataType`), for types kiln has no
/// `DType` for (float8, int4, STRING) or for files that must carry an exact code.
pub fn tensor_info_code(name: &str, elem_type: i32, dims: &[Dim]) -> ValueInfoProto {
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
                elem_type: Some(elem_type),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A declaration by name alone, leaving type and shape to the importer's inference (the usual
/// form of graph outputs in exported models).
pub fn untyped_info(name: &str) -> ValueInfoProto {
    ValueInfoProto { name: Some(name.into()), ..Default::default() }
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

/// A node of `domain` (e.g. `ai.onnx.ml`, or a model-local function's domain).
pub fn node_in(
    domain: &str,
    op: &str,
    inputs: &[&str],
    outputs: &[&str],
    attribute: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto { domain: Some(domain.into()), ..node(op, inputs, outputs, attribute) }
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

/// A strings attribute (e.g. the activations of RNN/GRU/LSTM).
pub fn attr_strings(name: &str, v: &[&str]) -> AttributeProto {
    AttributeProto {
        strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..attr(name, AttributeType::Strings)
    }
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

/// A tensor of raw little-endian bytes with ONNX element type code `elem_type`: packed
/// low-precision data, or data that deliberately disagrees with `dims`.
pub fn raw_tensor(name: &str, elem_type: i32, dims: &[i64], raw: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(elem_type),
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// A model of `graph` importing the default domain at `opset`.
pub fn model(graph: GraphProto, opset: i64) -> OnnxModel {
    model_with_opsets(graph, &[("", opset)])
}

/// A model of `graph` importing each `(domain, version)` of `opsets` (`""` is ai.onnx).
pub fn model_with_opsets(graph: GraphProto, opsets: &[(&str, i64)]) -> OnnxModel {
    OnnxModel {
        proto: ModelProto {
            ir_version: Some(8),
            opset_import: opsets
                .iter()
                .map(|(d, v)| OperatorSetIdProto { domain: Some(d.to_string()), version: Some(*v) })
                .collect(),
            producer_name: Some("kiln".into()),
            graph: Some(graph),
            ..Default::default()
        },
        dir: None,
    }
}
