//! Deterministic random numbers for weights.
