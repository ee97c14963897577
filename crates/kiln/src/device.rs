//! Where a tensor lives.
