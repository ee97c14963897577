//! Shape and movement ops: Shape, Reshape, Transpose, Slice, Concat, Gather, Pad, constants of
//! shapes, and the index ops. Shape values with symbolic dims ([`Val::Dims`]) stay symbolic
//! through the shape arithmetic PyTorch exports (Shape → Gather → Unsqueeze → Concat) and are
//! consumed by Reshape, Expand, ConstantOfShape and Tile.

mod constant;
mod gather;
mod movement;
mod pad;
mod reshape;
mod sym;

use crate::import::Convert;

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "Constant" => constant::constant,
        "ConstantOfShape" => constant::constant_of_shape,
        "Range" => constant::range,
        "EyeLike" => constant::eye_like,
        "Trilu" => constant::trilu,
        "OneHot" => constant::one_hot,
        "NonZero" => constant::non_zero,
        "Shape" => reshape::shape,
        "Size" => reshape::size,
        "Reshape" => reshape::reshape,
        "Flatten" => reshape::flatten,
        "Squeeze" => reshape::squeeze,
        "Unsqueeze" => reshape::unsqueeze,
        "Expand" => reshape::expand,
        "Tile" => reshape::tile,
        "Transpose" => movement::transpose,
        "Concat" => movement::concat,
        "Slice" => movement::slice,
        "Split" => movement::split,
        "DepthToSpace" => movement::depth_to_space,
        "SpaceToDepth" => movement::space_to_depth,
        "ReverseSequence" => movement::reverse_sequence,
        "Compress" => movement::compress,
        "Pad" => pad::pad,
        "CenterCropPad" => pad::center_crop_pad,
        "Gather" => gather::gather,
        "GatherElements" => gather::gather_elements,
        "GatherND" => gather::gather_nd,
        "Scatter" | "ScatterElements" => gather::scatter_elements,
        "ScatterND" => gather::scatter_nd,
        _ => return None,
    })
}
