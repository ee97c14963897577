//! The Tensor type.
