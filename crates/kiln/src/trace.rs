//! Tracing a forward pass into a graph.
