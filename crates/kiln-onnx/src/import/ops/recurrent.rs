//! Recurrent layers (RNN, GRU, LSTM), unrolled over the static sequence length into IR ops.

use crate::import::Convert;

pub(super) fn lookup(op: &str) -> Option<Convert> {
    let _ = op;
    None
}
