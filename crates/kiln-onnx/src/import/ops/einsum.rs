//! Einsum, lowered to permutes, reshapes, reductions and batched matmuls.

use crate::import::Convert;

pub(super) fn lookup(op: &str) -> Option<Convert> {
    let _ = op;
    None
}
