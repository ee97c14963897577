//! Transformer blocks as ONNX 23+ defines them (Attention, RotaryEmbedding), built from IR ops.

use crate::import::Convert;

mod attention;
pub(super) mod build;
mod rotary;

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "Attention" => attention::attention,
        "RotaryEmbedding" => rotary::rotary_embedding,
        _ => return None,
    })
}
