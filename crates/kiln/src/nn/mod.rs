//! Neural-network layers.
