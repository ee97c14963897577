//! The converters, one file per op family. Each family's `lookup` maps an ai.onnx op type to
//! its converter; a converter reads the node's inputs and attributes through [`Ctx`] and
//! returns one [`Val`] per ONNX output it produces.

use super::{Ctx, Val};
use crate::proto::NodeProto;
use kiln_ir::Result;

mod einsum;
mod elementwise;
pub(crate) mod lowp;
mod misc;
mod nn;
mod recurrent;
mod reduce;
pub(crate) mod sequence;
mod shape;
mod signal;
mod transformer;

/// Converts one node: `(ctx, node) -> outputs`.
pub type Convert = fn(&mut Ctx, &NodeProto) -> Result<Vec<Val>>;

/// The converter for `op_type` in `domain` (`""` is ai.onnx), if kiln has one.
pub fn lookup(domain: &str, op_type: &str) -> Option<Convert> {
    if domain == "ai.onnx.ml" {
        return misc::lookup_ml(op_type);
    }
    if domain == "ai.onnx.preview" {
        return transformer::lookup_preview(op_type);
    }
    if !domain.is_empty() && domain != "ai.onnx" {
        return None;
    }
    elementwise::lookup(op_type)
        .or_else(|| shape::lookup(op_type))
        .or_else(|| reduce::lookup(op_type))
        .or_else(|| nn::lookup(op_type))
        .or_else(|| transformer::lookup(op_type))
        .or_else(|| recurrent::lookup(op_type))
        .or_else(|| einsum::lookup(op_type))
        .or_else(|| misc::lookup(op_type))
        .or_else(|| signal::lookup(op_type))
        .or_else(|| sequence::lookup(op_type))
}
