//! Conv2d through cuDNN: descriptors and the algorithm are chosen once per step when the
//! executable is built; a run only calls `cudnnConvolutionForward` (and `cudnnAddTensor` for
//! the bias). Math: `CUDNN_DEFAULT_MATH`, which lets cuDNN use TF32 tensor cores for f32, as
//! PyTorch's default `allow_tf32` for convolutions does; `KILN_CUDA_TF32=0` asks for strict
//! fp32 (`CUDNN_FMA_MATH`), as `torch.backends.cudnn.allow_tf32 = False` does.

use crate::device::Gpu;
use cudarc::cudnn::{result, sys};
use kiln_ir::{Conv2dAttrs, Error, Result};
use kiln_sched::BufView;
use std::ffi::c_void;

/// The most workspace one conv may ask for.
const MAX_WORKSPACE: usize = 1 << 30;

fn dnn(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::Device(format!("cuDNN {what}: {e:?}"))
}

/// A conv step's cuDNN descriptors and algorithm.
pub(crate) struct ConvPlan {
    x: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    bias: Option<sys::cudnnTensorDescriptor_t>,
    algo: sys::cudnnConvolutionFwdAlgo_t,
    /// Workspace bytes the algorithm needs.
    pub workspace: usize,
}

// SAFETY: descriptors are plain host objects, used one call at a time under the executable's lock.
unsafe impl Send for ConvPlan {}
unsafe impl Sync for ConvPlan {}

fn tensor_desc(dims: &[usize], strides: &[usize]) -> Result<sys::cudnnTensorDescriptor_t> {
    let d = result::create_tensor_descriptor().map_err(|e| dnn("create tensor descriptor", e))?;
    let dims: Vec<i32> = dims.iter().map(|&x| x as i32).collect();
    let strides: Vec<i32> = strides.iter().map(|&x| x as i32).collect();
    // SAFETY: a fresh descriptor; the arrays hold `dims.len()` entries.
    unsafe { result::set_tensornd_descriptor(d, sys::cudnnDataType_t::CUDNN_DATA_FLOAT, dims.len() as i32, dims.as_ptr(), strides.as_ptr()) }
        .map_err(|e| dnn(&format!("tensor descriptor {dims:?}/{strides:?}"), e))?;
    Ok(d)
}

/// TF32 unless `KILN_CUDA_TF32=0`.
fn math_type() -> sys::cudnnMathType_t {
    match std::env::var("KILN_CUDA_TF32").as_deref() {
        Ok("0") => sys::cudnnMathType_t::CUDNN_FMA_MATH,
        _ => sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
    }
}

fn dense_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1].max(1);
    }
    s
}

impl ConvPlan {
    /// Plans `x [N,C,H,W] (*) w [O,C/g,KH,KW] (+ bias [O]) -> [N,O,OH,OW]`, or `None` when
    /// cuDNN cannot take it as given (asymmetric padding, a non-dense filter, sizes past i32):
    /// the caller then runs the step on the host.
    pub fn new(gpu: &Gpu, attrs: &Conv2dAttrs, inputs: &[BufView], out_shape: &[usize]) -> Result<Option<ConvPlan>> {
        let [top, left, bottom, right] = attrs.padding;
        let (x, w) = (&inputs[0], &inputs[1]);
        // cuDNN's legacy API indexes with 32-bit ints.
        let small = |shape: &[usize]| shape.iter().product::<usize>() < i32::MAX as usize;
        let reach = x.shape.iter().zip(&x.strides).map(|(&d, &s)| d.saturating_sub(1) * s).sum::<usize>();
        if top != bottom || left != right || w.strides != dense_strides(&w.shape) || !small(&x.shape) || reach >= i32::MAX as usize || !small(out_shape) {
            return Ok(None);
        }
        let handle = gpu.cudnn()?.0;
        let xd = tensor_desc(&x.shape, &x.strides)?;
        let yd = tensor_desc(out_shape, &dense_strides(out_shape))?;
        let wd = result::create_filter_descriptor().map_err(|e| dnn("create filter descriptor", e))?;
        let wdims: Vec<i32> = w.shape.iter().map(|&d| d as i32).collect();
        // SAFETY: fresh descriptors, arrays of the stated lengths.
        unsafe {
            result::set_filternd_descriptor(wd, sys::cudnnDataType_t::CUDNN_DATA_FLOAT, sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW, 4, wdims.as_ptr())
                .map_err(|e| dnn("filter descriptor", e))?;
        }
        let cd = result::create_convolution_descriptor().map_err(|e| dnn("create convolution descriptor", e))?;
        let pads = [top as i32, left as i32];
        let strides = [attrs.stride[0] as i32, attrs.stride[1] as i32];
        let dil = [attrs.dilation[0] as i32, attrs.dilation[1] as i32];
        // SAFETY: as above.
        unsafe {
            result::set_convolutionnd_descriptor(cd, 2, pads.as_ptr(), strides.as_ptr(), dil.as_ptr(), sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION, sys::cudnnDataType_t::CUDNN_DATA_FLOAT)
                .map_err(|e| dnn("convolution descriptor", e))?;
            result::set_convolution_group_count(cd, attrs.groups as i32).map_err(|e| dnn("group count", e))?;
            result::set_convolution_math_type(cd, math_type()).map_err(|e| dnn("math type", e))?;
        }
        let mut perf: Vec<sys::cudnnConvolutionFwdAlgoPerf_t> = Vec::with_capacity(16);
        let mut count = 0i32;
        // SAFETY: `perf` has room for the 16 results asked for.
        unsafe {
            result::get_convolution_forward_algorithm(handle, xd, wd, cd, yd, 16, &mut count, perf.as_mut_ptr()).map_err(|e| dnn("choosing an algorithm", e))?;
            perf.set_len(count.clamp(0, 16) as usize);
        }
        let best = perf
            .iter()
            .find(|p| p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS && p.memory <= MAX_WORKSPACE)
            .ok_or_else(|| Error::Device(format!("cuDNN has no algorithm for conv {:?} * {:?} -> {out_shape:?}", x.shape, w.shape)))?;
        let bias = match inputs.get(2) {
            Some(_) => Some(tensor_desc(&[1, out_shape[1], 1, 1], &[out_shape[1], 1, 1, 1])?),
            None => None,
        };
        Ok(Some(ConvPlan { x: xd, w: wd, conv: cd, y: yd, bias, algo: best.algo, workspace: best.memory }))
    }

    /// Runs the conv: `y = conv(x, w) (+ bias)`, on kiln's stream.
    ///
    /// # Safety
    /// The pointers must address the views this plan was made for, and `workspace` at least
    /// [`ConvPlan::workspace`] bytes.
    pub unsafe fn run(&self, gpu: &Gpu, x: u64, w: u64, bias: Option<u64>, y: u64, workspace: u64) -> Result<()> {
        let handle = gpu.cudnn()?.0;
        let (one, zero) = (1f32, 0f32);
        // SAFETY: per this function's contract.
        unsafe {
            result::convolution_forward(
                handle,
                (&one as *const f32).cast(),
                self.x,
                x as *const c_void,
                self.w,
                w as *const c_void,
                self.conv,
                self.algo,
                workspace as *mut c_void,
                self.workspace,
                (&zero as *const f32).cast(),
                self.y,
                y as *mut c_void,
            )
            .map_err(|e| dnn("convolution forward", e))?;
            if let (Some(bd), Some(b)) = (self.bias, bias) {
                sys::cudnnAddTensor(handle, (&one as *const f32).cast(), bd, b as *const c_void, (&one as *const f32).cast(), self.y, y as *mut c_void)
                    .result()
                    .map_err(|e| dnn("bias add", e))?;
            }
        }
        Ok(())
    }
}

impl Drop for ConvPlan {
    fn drop(&mut self) {
        // SAFETY: descriptors this plan created and nobody else holds.
        unsafe {
            let _ = result::destroy_tensor_descriptor(self.x);
            let _ = result::destroy_tensor_descriptor(self.y);
            if let Some(b) = self.bias {
                let _ = result::destroy_tensor_descriptor(b);
            }
            let _ = result::destroy_filter_descriptor(self.w);
            let _ = result::destroy_convolution_descriptor(self.conv);
        }
    }
}
