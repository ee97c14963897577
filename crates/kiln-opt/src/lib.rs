//! kiln graph passes (being written).
