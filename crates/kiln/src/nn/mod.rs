//! Neural-network layers with PyTorch's parameter names and init, the [`VarBuilder`] they get
//! their parameters from (seeded random or a safetensors checkpoint), and safetensors I/O.

mod attention;
mod conv;
mod embedding;
mod init;
mod linear;
mod module;
mod norm;
mod safetensors_io;
mod var_builder;

pub use attention::{MultiHeadAttention, merge_heads, split_heads};
pub use conv::{Conv2d, Conv2dConfig};
pub use embedding::Embedding;
pub use init::{Init, fans};
pub use linear::Linear;
pub use module::Module;
pub use norm::{BatchNorm2d, LayerNorm};
pub use safetensors_io::{SafetensorsFile, save_safetensors};
pub use var_builder::VarBuilder;
