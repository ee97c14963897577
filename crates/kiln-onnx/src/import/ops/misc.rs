//! Ops without a family of their own: BitCast, AffineGrid, TensorScatter, MaxUnpool, and the ai.onnx.ml ops kiln runs.

use crate::import::Convert;

pub(super) fn lookup(op: &str) -> Option<Convert> {
    let _ = op;
    None
}

/// Converters of the `ai.onnx.ml` domain.
pub(super) fn lookup_ml(op: &str) -> Option<Convert> {
    let _ = op;
    None
}
