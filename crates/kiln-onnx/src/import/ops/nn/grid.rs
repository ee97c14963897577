//! GridSample (2-D; volumetric grids are refused).

use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{Error, GridSampleAttrs, GridSampleMode, GridSamplePadding, Op, Result};

/// ONNX GridSample (opsets 16, 20, 22): mode names of both spellings are accepted.
pub(super) fn grid_sample(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["align_corners", "mode", "padding_mode"])?;
    let x = ctx.input(node, 0)?;
    let grid = ctx.input(node, 1)?;
    if ctx.rank(x) != 4 {
        return Err(Error::Unsupported(format!(
            "GridSample on a rank-{} input {} is not supported by kiln (2-D [N, C, H, W] only)",
            ctx.rank(x),
            ctx.ty(x).shape
        )));
    }
    let mode = match attrs::string(node, "mode")?
        .as_deref()
        .unwrap_or("bilinear")
    {
        "bilinear" | "linear" => GridSampleMode::Bilinear,
        "nearest" => GridSampleMode::Nearest,
        "bicubic" | "cubic" => GridSampleMode::Bicubic,
        m => return Err(Error::Value(format!("GridSample mode '{m}' is not known"))),
    };
    let padding = match attrs::string(node, "padding_mode")?
        .as_deref()
        .unwrap_or("zeros")
    {
        "zeros" => GridSamplePadding::Zeros,
        "border" => GridSamplePadding::Border,
        "reflection" => GridSamplePadding::Reflection,
        m => {
            return Err(Error::Value(format!(
                "GridSample padding_mode '{m}' is not known"
            )));
        }
    };
    let align_corners = attrs::int(node, "align_corners", 0)? != 0;
    one(ctx.add(
        Op::GridSample(GridSampleAttrs {
            mode,
            padding,
            align_corners,
        }),
        &[x, grid],
    )?)
}
