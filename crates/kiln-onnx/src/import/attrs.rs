//! Reading node attributes with ONNX defaults, and refusing attributes a converter does not
//! understand (so an unknown attribute is an error, never a silently wrong answer).

use crate::proto::{AttributeProto, GraphProto, NodeProto};
use kiln_ir::{Error, HostTensor, Result};

fn find<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name() == name)
}

fn bad(node: &NodeProto, name: &str, want: &str) -> Error {
    Error::Value(format!("attribute '{name}' of {} must be {want}", node.op_type()))
}

/// True when the node sets attribute `name`.
pub fn has(node: &NodeProto, name: &str) -> bool {
    find(node, name).is_some()
}

/// An int attribute, or `default` when absent.
pub fn int(node: &NodeProto, name: &str, default: i64) -> Result<i64> {
    Ok(opt_int(node, name)?.unwrap_or(default))
}

/// An int attribute if present.
pub fn opt_int(node: &NodeProto, name: &str) -> Result<Option<i64>> {
    match find(node, name) {
        None => Ok(None),
        Some(a) => a.i.map(Some).ok_or_else(|| bad(node, name, "an int")),
    }
}

/// A float attribute, or `default` when absent.
pub fn float(node: &NodeProto, name: &str, default: f32) -> Result<f32> {
    match find(node, name) {
        None => Ok(default),
        Some(a) => a.f.ok_or_else(|| bad(node, name, "a float")),
    }
}

/// An ints attribute if present.
pub fn ints(node: &NodeProto, name: &str) -> Result<Option<Vec<i64>>> {
    Ok(find(node, name).map(|a| a.ints.clone()))
}

/// A floats attribute if present.
pub fn floats(node: &NodeProto, name: &str) -> Result<Option<Vec<f32>>> {
    Ok(find(node, name).map(|a| a.floats.clone()))
}

/// A string attribute if present.
pub fn string(node: &NodeProto, name: &str) -> Result<Option<String>> {
    match find(node, name) {
        None => Ok(None),
        Some(a) => {
            let s = a.s.as_ref().ok_or_else(|| bad(node, name, "a string"))?;
            String::from_utf8(s.clone()).map(Some).map_err(|_| bad(node, name, "UTF-8 text"))
        }
    }
}

/// A strings attribute if present.
pub fn strings(node: &NodeProto, name: &str) -> Result<Option<Vec<String>>> {
    match find(node, name) {
        None => Ok(None),
        Some(a) => a
            .strings
            .iter()
            .map(|s| String::from_utf8(s.clone()).map_err(|_| bad(node, name, "UTF-8 text")))
            .collect::<Result<Vec<_>>>()
            .map(Some),
    }
}

/// A tensor attribute if present (no external data: attributes are inline).
pub fn tensor(node: &NodeProto, name: &str) -> Result<Option<HostTensor>> {
    match find(node, name) {
        None => Ok(None),
        Some(a) => {
            let t = a.t.as_ref().ok_or_else(|| bad(node, name, "a tensor"))?;
            crate::tensor::tensor_from_proto(t, None).map(Some)
        }
    }
}

/// A graph attribute (If/Loop/Scan bodies) if present.
pub fn graph<'a>(node: &'a NodeProto, name: &str) -> Option<&'a GraphProto> {
    find(node, name).and_then(|a| a.g.as_ref())
}

/// Errors naming the first attribute of `node` that is not in `known`: converters list every
/// attribute they implement, so an attribute they would ignore can never change the answer.
pub fn check_known(node: &NodeProto, known: &[&str]) -> Result<()> {
    for a in &node.attribute {
        if !known.contains(&a.name()) {
            return Err(Error::Unsupported(format!(
                "attribute '{}' of {} is not supported by kiln (it supports {})",
                a.name(),
                node.op_type(),
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            )));
        }
    }
    Ok(())
}
