//! Neural-network ops: Conv, ConvTranspose, pooling, Gemm/MatMul, quantization, Resize,
//! GridSample, Col2Im, Det. One file per kind; `window` holds the sliding-window attributes they share,
//! `volume` the 3-D (volumetric) forms built from the IR's 2-D ops.

use crate::import::Convert;

mod col2im;
mod conv;
mod gemm;
mod grid;
mod pool;
mod quant;
mod resize;
mod volume;
mod window;

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "Conv" => conv::conv,
        "ConvTranspose" => conv::conv_transpose,
        "ConvInteger" => conv::conv_integer,
        "QLinearConv" => conv::qlinear_conv,
        "MaxPool" => pool::max_pool,
        "AveragePool" => pool::average_pool,
        "LpPool" => pool::lp_pool,
        "GlobalAveragePool" => pool::global_average_pool,
        "GlobalMaxPool" => pool::global_max_pool,
        "GlobalLpPool" => pool::global_lp_pool,
        "Gemm" => gemm::gemm,
        "MatMul" => gemm::matmul,
        "MatMulInteger" => gemm::matmul_integer,
        "QLinearMatMul" => gemm::qlinear_matmul,
        "QuantizeLinear" => quant::quantize_linear,
        "DequantizeLinear" => quant::dequantize_linear,
        "DynamicQuantizeLinear" => quant::dynamic_quantize_linear,
        "Resize" => resize::resize,
        "Upsample" => resize::upsample,
        "GridSample" => grid::grid_sample,
        "Col2Im" => col2im::col2im,
        "Det" => col2im::det,
        _ => return None,
    })
}
