//! Conv2d through cuDNN: descriptors and the algorithm are chosen once per step when the
//! executable is built; a run makes one call. A conv with a bias uses
//! `cudnnConvolutionBiasActivationForward`, which adds the bias (and a residual, and applies a
//! ReLU, when [`super::conv_fusion`] folded the step's epilogue in) inside the conv: with ReLU
//! for any algorithm, without it (identity) only for IMPLICIT_PRECOMP_GEMM, as cuDNN allows;
//! otherwise `cudnnConvolutionForward` then `cudnnAddTensor` for the bias.
//!
//! Math: `CUDNN_DEFAULT_MATH`, which lets cuDNN use TF32 tensor cores for f32, as PyTorch's
//! default `allow_tf32` for convolutions does; `KILN_CUDA_TF32=0` asks for strict
//! fp32 (`CUDNN_FMA_MATH`), as `torch.backends.cudnn.allow_tf32 = False` does. f16 / bf16
//! tensors compute in f32 (`CUDNN_DATA_FLOAT` convolution descriptor) with tensor cores
//! (`CUDNN_TENSOR_OP_MATH`), as PyTorch; a configuration cuDNN rejects for them runs on the host.

use super::conv_fusion::ConvFusion;
use crate::device::Gpu;
use cudarc::cudnn::{result, sys};
use kiln_ir::{Conv2dAttrs, DType, Error, Result};
use kiln_sched::BufView;
use std::ffi::c_void;
use std::sync::Arc;

/// The most workspace one conv may ask for.
pub(crate) const MAX_WORKSPACE: usize = 1 << 30;

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
    /// Set when the bias (and the fusion) go through `cudnnConvolutionBiasActivationForward`.
    act: Option<sys::cudnnActivationDescriptor_t>,
    /// What the fused call adds after the bias (`None`: the bias alone, or no bias).
    fusion: Option<ConvFusion>,
    pub(crate) algo: sys::cudnnConvolutionFwdAlgo_t,
    /// Workspace bytes the algorithm needs.
    algo_workspace: usize,
    /// Every algorithm cuDNN can run this conv with (and its workspace), its heuristic's best
    /// guess first: the candidates max-autotune times.
    algos: Vec<(sys::cudnnConvolutionFwdAlgo_t, usize)>,
    ty: sys::cudnnDataType_t,
    /// Output channels (the bias's length).
    channels: usize,
    /// A channels-last conv whose x is not NHWC-packed (the image, NCHW, into the stem): x as
    /// it lies, copied by `cudnnTransformTensor` into the start of the workspace, this many
    /// bytes (rounded up to 256), where the conv reads it. cuDNN has no algorithm for an NCHW
    /// x with an NHWC result.
    staged: Option<(sys::cudnnTensorDescriptor_t, usize)>,
    /// Workspace bytes a run needs: the staged x, then the algorithm's.
    pub workspace: usize,
}

// SAFETY: descriptors are plain host objects, used one call at a time under the executable's lock.
unsafe impl Send for ConvPlan {}
unsafe impl Sync for ConvPlan {}

fn tensor_desc(ty: sys::cudnnDataType_t, dims: &[usize], strides: &[usize]) -> Result<sys::cudnnTensorDescriptor_t> {
    let d = result::create_tensor_descriptor().map_err(|e| dnn("create tensor descriptor", e))?;
    let dims: Vec<i32> = dims.iter().map(|&x| x as i32).collect();
    let strides: Vec<i32> = strides.iter().map(|&x| x as i32).collect();
    // SAFETY: a fresh descriptor; the arrays hold `dims.len()` entries.
    unsafe { result::set_tensornd_descriptor(d, ty, dims.len() as i32, dims.as_ptr(), strides.as_ptr()) }.map_err(|e| {
        // SAFETY: the descriptor created above, not handed out.
        let _ = unsafe { result::destroy_tensor_descriptor(d) };
        dnn(&format!("tensor descriptor {dims:?}/{strides:?}"), e)
    })?;
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
    kiln_ir::data::contiguous_strides(shape).into_iter().map(|s| s as usize).collect()
}

/// Why cuDNN's legacy API cannot take a conv as given (the step then runs on the host), or
/// `None` when it can: it pads symmetrically, reads a dense filter and indexes with 32-bit ints.
pub(crate) fn cudnn_refusal(attrs: &Conv2dAttrs, inputs: &[BufView], out_shape: &[usize]) -> Option<&'static str> {
    let [top, left, bottom, right] = attrs.padding;
    let (x, w) = (&inputs[0], &inputs[1]);
    let small = |n: usize| n < i32::MAX as usize;
    let reach = x.shape.iter().zip(&x.strides).map(|(&d, &s)| d.saturating_sub(1) * s).sum::<usize>();
    if top != bottom || left != right {
        Some("asymmetric padding")
    } else if w.strides != dense_strides(&w.shape) {
        Some("the filter is not dense")
    } else if !small(x.shape.iter().product()) || !small(reach) || !small(out_shape.iter().product()) {
        Some("element counts past cuDNN's 32-bit indices")
    } else {
        None
    }
}

/// Asks cuDNN's heuristic about one small f32 conv, which loads the parts of cuDNN a conv
/// needs (its first query in a process costs tens of ms): a compile does this on another
/// thread while it works on other things. Never remembered: the point is asking.
pub(crate) fn warm_up(gpu: &Gpu) -> Result<()> {
    let view = |shape: [usize; 4]| BufView { buf: kiln_sched::BufId(0), offset: 0, shape: shape.to_vec(), strides: dense_strides(&shape) };
    let attrs = Conv2dAttrs { stride: [1, 1], padding: [1; 4], dilation: [1, 1], groups: 1, channels_last: false };
    let inputs = [view([1, 8, 8, 8]), view([8, 8, 3, 3])];
    match ConvPlan::descriptors(gpu, &attrs, &inputs, &[1, 8, 8, 8], sys::cudnnDataType_t::CUDNN_DATA_FLOAT, None)? {
        Some((plan, _)) => plan.heuristic(gpu).map(|_| ()),
        None => Ok(()),
    }
}

impl ConvPlan {
    /// Plans `x [N,C,H,W] (*) w [O,C/g,KH,KW] (+ bias [O]) -> [N,O,OH,OW]` (all of `dtype`), or
    /// `None` when cuDNN cannot take it as given (asymmetric padding, a non-dense filter, sizes
    /// past i32, a dtype other than f32 / f16 / bf16, an f16 / bf16 configuration cuDNN
    /// rejects): the caller then runs the step on the host.
    /// With `fusion` (a bias required: [`super::conv_fusion`] checked it) the call
    /// also applies the fused residual add and ReLU.
    pub fn new(gpu: &Arc<Gpu>, attrs: &Conv2dAttrs, inputs: &[BufView], out_shape: &[usize], dtype: DType, fusion: Option<ConvFusion>) -> Result<Option<ConvPlan>> {
        let ty = match dtype {
            DType::F32 => sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            DType::F16 => sys::cudnnDataType_t::CUDNN_DATA_HALF,
            DType::BF16 => sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
            _ => return Ok(None),
        };
        match Self::build(gpu, attrs, inputs, out_shape, ty, fusion) {
            Ok(plan) => Ok(plan),
            // f32 convs have always planned; only the 16-bit configurations may be unsupported.
            // A fused conv cannot fall back: its epilogue is gone from the program.
            Err(e) if dtype != DType::F32 && fusion.is_none() => {
                tracing::info!(target: "kiln::cuda", "conv2d in {dtype}: {e}; runs on the host");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn build(gpu: &Arc<Gpu>, attrs: &Conv2dAttrs, inputs: &[BufView], out_shape: &[usize], ty: sys::cudnnDataType_t, fusion: Option<ConvFusion>) -> Result<Option<ConvPlan>> {
        let Some((mut plan, signature)) = Self::descriptors(gpu, attrs, inputs, out_shape, ty, fusion)? else {
            return Ok(None);
        };
        let algos = super::conv_algos::ranked(&signature, || plan.heuristic(gpu))?;
        plan.algos = algos;
        if plan.algos.is_empty() {
            return Err(Error::Device(format!("cuDNN has no algorithm for conv {:?} * {:?} -> {out_shape:?}", inputs[0].shape, inputs[1].shape)));
        }
        if fusion.is_some() && plan.bias.is_none() {
            return Err(Error::Device("conv fusion planned without a bias".into()));
        }
        plan.set_algo(gpu, None)?;
        Ok(Some(plan))
    }

    /// The plan's descriptors, its algorithms not yet chosen, with the signature that names
    /// everything they say (all the heuristic is asked about); `None` when cuDNN's legacy API
    /// cannot take the conv ([`cudnn_refusal`]).
    fn descriptors(gpu: &Gpu, attrs: &Conv2dAttrs, inputs: &[BufView], out_shape: &[usize], ty: sys::cudnnDataType_t, fusion: Option<ConvFusion>) -> Result<Option<(ConvPlan, String)>> {
        let (x, w) = (&inputs[0], &inputs[1]);
        if cudnn_refusal(attrs, inputs, out_shape).is_some() {
            return Ok(None);
        }
        // Loads cuDNN (a missing library is an error here, not a panic in cudarc).
        gpu.cudnn()?;
        // The plan owns each descriptor as soon as it exists, so an error below destroys them.
        // cuDNN takes dims in NCHW order and reads the layout from the strides (and, for the
        // filter, from its format): a channels-last conv's views are permuted into that order.
        let axes = attrs.nchw_axes();
        let nchw = |v: &[usize]| -> Vec<usize> { axes.iter().map(|&i| v[i]).collect() };
        // A channels-last x that is not NHWC-packed is staged packed; an NCHW conv reads any
        // strides itself.
        let packed = dense_strides(&x.shape);
        let stage = attrs.channels_last && x.strides != packed;
        let x_strides = if stage { &packed } else { &x.strides };
        let mut plan = ConvPlan {
            x: tensor_desc(ty, &nchw(&x.shape), &nchw(x_strides))?,
            y: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
            bias: None,
            act: None,
            fusion,
            algo: sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
            algo_workspace: 0,
            algos: Vec::new(),
            ty,
            channels: w.shape[0],
            staged: None,
            workspace: 0,
        };
        if stage {
            let elem = if ty == sys::cudnnDataType_t::CUDNN_DATA_FLOAT { 4 } else { 2 };
            let bytes = (x.shape.iter().product::<usize>() * elem).next_multiple_of(256);
            plan.staged = Some((tensor_desc(ty, &nchw(&x.shape), &nchw(&x.strides))?, bytes));
        }
        plan.y = tensor_desc(ty, &nchw(out_shape), &nchw(&dense_strides(out_shape)))?;
        plan.w = result::create_filter_descriptor().map_err(|e| dnn("create filter descriptor", e))?;
        plan.conv = result::create_convolution_descriptor().map_err(|e| dnn("create convolution descriptor", e))?;
        if inputs.len() > 2 {
            let o = w.shape[0];
            plan.bias = Some(tensor_desc(ty, &[1, o, 1, 1], &[o, 1, 1, 1])?);
        }
        let (wd, cd) = (plan.w, plan.conv);
        let wdims: Vec<i32> = nchw(&w.shape).iter().map(|&d| d as i32).collect();
        let format = if attrs.channels_last { sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC } else { sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW };
        // SAFETY: fresh descriptors, arrays of the stated lengths.
        unsafe {
            result::set_filternd_descriptor(wd, ty, format, 4, wdims.as_ptr()).map_err(|e| dnn("filter descriptor", e))?;
        }
        let pads = [attrs.padding[0] as i32, attrs.padding[1] as i32];
        let strides = [attrs.stride[0] as i32, attrs.stride[1] as i32];
        let dil = [attrs.dilation[0] as i32, attrs.dilation[1] as i32];
        let math = if ty == sys::cudnnDataType_t::CUDNN_DATA_FLOAT { math_type() } else { sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH };
        // SAFETY: as above.
        unsafe {
            result::set_convolutionnd_descriptor(cd, 2, pads.as_ptr(), strides.as_ptr(), dil.as_ptr(), sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION, sys::cudnnDataType_t::CUDNN_DATA_FLOAT)
                .map_err(|e| dnn("convolution descriptor", e))?;
            result::set_convolution_group_count(cd, attrs.groups as i32).map_err(|e| dnn("group count", e))?;
            result::set_convolution_math_type(cd, math).map_err(|e| dnn("math type", e))?;
        }
        let signature = format!(
            "{ty:?} x{:?}/{:?} w{wdims:?} {format:?} y{:?} pad{pads:?} stride{strides:?} dil{dil:?} groups{} {math:?}",
            nchw(&x.shape),
            nchw(x_strides),
            nchw(out_shape),
            attrs.groups,
        );
        Ok(Some((plan, signature)))
    }

    /// What cuDNN's heuristic offers for this plan's conv, best first: the algorithms that
    /// succeed within [`MAX_WORKSPACE`], with the workspace each needs.
    fn heuristic(&self, gpu: &Gpu) -> Result<super::conv_algos::Ranked> {
        let handle = gpu.cudnn()?.0;
        let mut perf: Vec<sys::cudnnConvolutionFwdAlgoPerf_t> = Vec::with_capacity(16);
        let mut count = 0i32;
        // SAFETY: this plan's live descriptors; `perf` has room for the 16 results asked for.
        unsafe {
            result::get_convolution_forward_algorithm(handle, self.x, self.w, self.conv, self.y, 16, &mut count, perf.as_mut_ptr()).map_err(|e| dnn("choosing an algorithm", e))?;
            perf.set_len(count.clamp(0, 16) as usize);
        }
        Ok(perf
            .iter()
            .filter(|p| p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS && p.memory <= MAX_WORKSPACE)
            .map(|p| (p.algo, p.memory))
            .collect())
    }

    /// The algorithms this conv can run with, by number, the heuristic's choice first.
    pub fn algos(&self) -> impl Iterator<Item = i32> + '_ {
        self.algos.iter().map(|&(a, _)| a as i32)
    }

    /// Runs algorithm `algo` (by number; `None`: the heuristic's choice) from now on, and
    /// decides what depends on it: a bias without a fused epilogue goes into the conv call with
    /// the identity activation only under IMPLICIT_PRECOMP_GEMM (all cuDNN allows), else
    /// through `cudnnAddTensor` (whose 16-bit support is checked here). Errors when the conv
    /// has no such algorithm or the type cannot add its bias; the plan must then be set again
    /// (to `None`, which planning proved works) before it runs.
    pub fn set_algo(&mut self, gpu: &Arc<Gpu>, algo: Option<i32>) -> Result<()> {
        let &(algo, memory) = match algo {
            None => self.algos.first(),
            Some(n) => self.algos.iter().find(|(a, _)| *a as i32 == n),
        }
        .ok_or_else(|| Error::Value(format!("cuDNN offers no algorithm {algo:?} for this conv (it offers {:?})", self.algos().collect::<Vec<_>>())))?;
        let precomp = algo == sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
        let in_call = self.bias.is_some() && (self.fusion.is_some() || precomp);
        match (in_call, self.act) {
            (true, None) => {
                let mode = if self.fusion.is_some() { sys::cudnnActivationMode_t::CUDNN_ACTIVATION_RELU } else { sys::cudnnActivationMode_t::CUDNN_ACTIVATION_IDENTITY };
                self.act = Some(activation(mode)?);
            }
            (false, Some(a)) => {
                // SAFETY: this plan's descriptor, used by no call in flight (runs hold the lock).
                let _ = unsafe { sys::cudnnDestroyActivationDescriptor(a) };
                self.act = None;
            }
            _ => {}
        }
        // Only a bias added by cudnnAddTensor needs its 16-bit support checked.
        if let Some(bd) = self.bias
            && self.ty != sys::cudnnDataType_t::CUDNN_DATA_FLOAT
            && self.act.is_none()
        {
            try_bias_add(gpu, gpu.cudnn()?.0, bd, self.ty, self.channels)?;
        }
        (self.algo, self.algo_workspace) = (algo, memory);
        self.workspace = self.staged.map_or(0, |(_, bytes)| bytes) + memory;
        Ok(())
    }

    /// `algo 1 +bias+add+relu` — what `kiln bench --profile` prints for this call.
    pub fn describe(&self) -> String {
        let fused = match (self.act.is_some(), self.fusion) {
            (false, _) => String::new(),
            (true, None) => " +bias".into(),
            (true, Some(f)) => format!(" {}", f.label()),
        };
        let staged = if self.staged.is_some() { "pack x NHWC, " } else { "" };
        format!("{staged}algo {}{fused}", self.algo as i32)
    }

    /// Runs the conv: `y = conv(x, w) (+ bias)`, then the fusion's `+ z` and ReLU, on kiln's
    /// stream.
    ///
    /// # Safety
    /// The pointers must address the views this plan was made for (`z` the fusion's residual,
    /// shaped as `y`), and `workspace` at least [`ConvPlan::workspace`] bytes.
    pub unsafe fn run(&self, gpu: &Gpu, x: u64, w: u64, bias: Option<u64>, z: Option<u64>, y: u64, workspace: u64) -> Result<()> {
        let handle = gpu.cudnn()?.0;
        let (one, zero) = (1f32, 0f32);
        let (x, workspace) = match self.staged {
            Some((src, bytes)) => {
                // SAFETY: `x` lies as `src` describes; the workspace's first `bytes` hold it packed.
                unsafe { sys::cudnnTransformTensor(handle, (&one as *const f32).cast(), src, x as *const c_void, (&zero as *const f32).cast(), self.x, workspace as *mut c_void) }
                    .result()
                    .map_err(|e| dnn("packing x channels last", e))?;
                (workspace, workspace + bytes as u64)
            }
            None => (x, workspace),
        };
        if let (Some(act), Some(bd), Some(b)) = (self.act, self.bias, bias) {
            // cuDNN reads `z` only when alpha2 is nonzero; `y` stands in for it otherwise.
            let alpha2 = if z.is_some() { one } else { zero };
            // SAFETY: per this function's contract; `z` has `y`'s shape and descriptor.
            return unsafe {
                result::convolution_bias_activation_forward(
                    handle,
                    (&one as *const f32).cast(),
                    self.x,
                    x as *const c_void,
                    self.w,
                    w as *const c_void,
                    self.conv,
                    self.algo,
                    workspace as *mut c_void,
                    self.algo_workspace,
                    (&alpha2 as *const f32).cast(),
                    self.y,
                    z.unwrap_or(y) as *const c_void,
                    bd,
                    b as *const c_void,
                    act,
                    self.y,
                    y as *mut c_void,
                )
            }
            .map_err(|e| dnn("fused convolution, bias and activation", e));
        }
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
                self.algo_workspace,
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

/// An activation descriptor of `mode`; NaN propagates, as kiln's ReLU.
fn activation(mode: sys::cudnnActivationMode_t) -> Result<sys::cudnnActivationDescriptor_t> {
    let d = result::create_activation_descriptor().map_err(|e| dnn("create activation descriptor", e))?;
    // SAFETY: a fresh descriptor.
    unsafe { result::set_activation_descriptor(d, mode, sys::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN, 0.0) }.map_err(|e| {
        // SAFETY: created above, not handed out.
        let _ = unsafe { sys::cudnnDestroyActivationDescriptor(d) };
        dnn("activation descriptor", e)
    })?;
    Ok(d)
}

/// Adds a zero bias of `o` channels (descriptor `bd`) to a scratch `[1, o, 1, 1]` of `ty`, so a
/// type `cudnnAddTensor` does not take is found when the plan is made (the step then runs on
/// the host), not at run time.
fn try_bias_add(gpu: &Arc<Gpu>, handle: sys::cudnnHandle_t, bd: sys::cudnnTensorDescriptor_t, ty: sys::cudnnDataType_t, o: usize) -> Result<()> {
    let scratch = gpu.alloc(2 * o * 4)?;
    gpu.write(scratch.ptr(), &vec![0u8; 2 * o * 4])?;
    let yd = tensor_desc(ty, &[1, o, 1, 1], &[o, 1, 1, 1])?;
    let one = 1f32;
    // SAFETY: both descriptors describe `o` elements of `ty` (at most 4 bytes each), within the
    // scratch buffer's halves; the stream is synchronised before the scratch is freed.
    let added = unsafe {
        let one = (&one as *const f32).cast();
        let (b, y) = (scratch.ptr(), scratch.ptr() + (o * 4) as u64);
        sys::cudnnAddTensor(handle, one, bd, b as *const c_void, one, yd, y as *mut c_void).result()
    };
    // SAFETY: created above, used only by the call above.
    let _ = unsafe { result::destroy_tensor_descriptor(yd) };
    gpu.synchronize()?;
    added.map_err(|e| dnn("bias add", e))
}

impl Drop for ConvPlan {
    fn drop(&mut self) {
        // SAFETY: descriptors this plan created and nobody else holds.
        // (A plan dropped while being built may hold null descriptors: skipped.)
        unsafe {
            for t in [Some(self.x), Some(self.y), self.bias, self.staged.map(|(d, _)| d)].into_iter().flatten().filter(|d| !d.is_null()) {
                let _ = result::destroy_tensor_descriptor(t);
            }
            if !self.w.is_null() {
                let _ = result::destroy_filter_descriptor(self.w);
            }
            if !self.conv.is_null() {
                let _ = result::destroy_convolution_descriptor(self.conv);
            }
            if let Some(a) = self.act {
                let _ = sys::cudnnDestroyActivationDescriptor(a);
            }
        }
    }
}
