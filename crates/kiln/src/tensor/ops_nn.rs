//! Neural-network methods with PyTorch-style arguments, each mapped to one IR op (linear is
//! a transpose, a matmul and an add; the backend's passes fuse them again).

use super::Tensor;
use crate::dispatch::dispatch;
use kiln_ir::{Conv2dAttrs, Error, Op, Pool2dAttrs, PoolKind, ReduceOp, Result};

impl Tensor {
    /// NumPy matmul (1-D operands promoted, batch dims broadcast).
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        dispatch(Op::MatMul, &[self, other])
    }

    /// `self @ wᵀ + b` with `w` `[out, in]` and `b` `[out]`, as `torch.nn.functional.linear`.
    pub fn linear(&self, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
        if w.rank() != 2 {
            return Err(Error::Shape(format!(
                "linear: weight must be [out, in], got {:?} (input {:?})",
                w.shape(),
                self.shape()
            )));
        }
        let y = self.matmul(&w.t()?)?;
        match b {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// 2-D convolution over NCHW: `w` is `[O, C/groups, KH, KW]`, `padding` `[ph, pw]` is
    /// applied on both sides.
    pub fn conv2d(
        &self,
        w: &Tensor,
        b: Option<&Tensor>,
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    ) -> Result<Tensor> {
        let [ph, pw] = padding;
        let op = Op::Conv2d(Conv2dAttrs { stride, padding: [ph, pw, ph, pw], dilation, groups, channels_last: false });
        match b {
            Some(b) => dispatch(op, &[self, w, b]),
            None => dispatch(op, &[self, w]),
        }
    }

    /// Max pooling over NCHW (padding counts as -inf, on both sides).
    pub fn max_pool2d(&self, kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2], ceil_mode: bool) -> Result<Tensor> {
        self.pool2d(PoolKind::Max, kernel, stride, padding, ceil_mode)
    }

    /// Average pooling over NCHW; `count_include_pad` says whether padded zeros count in the
    /// divisor (PyTorch's default is true).
    pub fn avg_pool2d(
        &self,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        ceil_mode: bool,
        count_include_pad: bool,
    ) -> Result<Tensor> {
        self.pool2d(PoolKind::Avg { count_include_pad }, kernel, stride, padding, ceil_mode)
    }

    fn pool2d(&self, kind: PoolKind, kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2], ceil_mode: bool) -> Result<Tensor> {
        let [ph, pw] = padding;
        let attrs = Pool2dAttrs { kind, kernel, stride, padding: [ph, pw, ph, pw], dilation: [1, 1], ceil_mode };
        dispatch(Op::Pool2d(attrs), &[self])
    }

    /// Global average pooling of NCHW to `[N, C, 1, 1]` (`adaptive_avg_pool2d(x, 1)`).
    pub fn adaptive_avg_pool2d_1(&self) -> Result<Tensor> {
        if self.rank() != 4 {
            return Err(Error::Shape(format!(
                "adaptive_avg_pool2d: needs x [N, C, H, W], got {:?}",
                self.shape()
            )));
        }
        dispatch(Op::Reduce { op: ReduceOp::Mean, axes: vec![2, 3], keep_dims: true }, &[self])
    }

    /// Softmax along `axis`.
    pub fn softmax(&self, axis: i64) -> Result<Tensor> {
        let axis = self.axis(axis, "softmax")?;
        dispatch(Op::Softmax { axis }, &[self])
    }

    /// Log-softmax along `axis`.
    pub fn log_softmax(&self, axis: i64) -> Result<Tensor> {
        let axis = self.axis(axis, "log_softmax")?;
        dispatch(Op::LogSoftmax { axis }, &[self])
    }

    /// Layer normalization over the last `normalized_dims` axes, with optional scale `w` and
    /// bias `b` of those axes' shape (a bias without a scale gets a scale of ones).
    pub fn layer_norm(&self, normalized_dims: usize, w: Option<&Tensor>, b: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        let r = self.rank();
        if normalized_dims == 0 || normalized_dims > r {
            return Err(Error::Shape(format!(
                "layer_norm: cannot normalize the last {normalized_dims} axes of shape {:?}",
                self.shape()
            )));
        }
        let axis = r - normalized_dims;
        let op = Op::LayerNorm { axis, eps };
        match (w, b) {
            (None, None) => dispatch(op, &[self]),
            (Some(w), None) => dispatch(op, &[self, w]),
            (Some(w), Some(b)) => dispatch(op, &[self, w, b]),
            (None, Some(b)) => {
                let ones = Tensor::ones(&self.shape()[axis..], self.dtype());
                dispatch(op, &[self, &ones, b])
            }
        }
    }

    /// Inference batch normalization over channel axis 1 with running `mean` and `var` (each
    /// `[C]`); a missing scale is ones and a missing bias zeros.
    pub fn batch_norm(&self, mean: &Tensor, var: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(Error::Shape(format!(
                "batch_norm: input needs a channel axis (rank >= 2), got {:?}",
                self.shape()
            )));
        }
        let c = [self.shape()[1]];
        let ones;
        let zeros;
        let w = match w {
            Some(w) => w,
            None => {
                ones = Tensor::ones(&c, self.dtype());
                &ones
            }
        };
        let b = match b {
            Some(b) => b,
            None => {
                zeros = Tensor::zeros(&c, self.dtype());
                &zeros
            }
        };
        dispatch(Op::BatchNorm { eps }, &[self, w, b, mean, var])
    }

    /// Rows of `weight` `[vocab, dim]` picked by i64/i32 `ids` of any shape → `[..ids, dim]`.
    pub fn embedding(weight: &Tensor, ids: &Tensor) -> Result<Tensor> {
        dispatch(Op::Gather { axis: 0 }, &[weight, ids])
    }

    /// Scaled dot-product attention `softmax(q kᵀ * scale + mask) v` (q `[.., Lq, D]`, k
    /// `[.., Lk, D]`, v `[.., Lk, Dv]`); `mask` is additive, `causal` hides later keys and
    /// `scale` defaults to `1/sqrt(D)`.
    pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, causal: bool, scale: Option<f64>) -> Result<Tensor> {
        let op = Op::Attention { causal, scale };
        match mask {
            Some(m) => dispatch(op, &[q, k, v, m]),
            None => dispatch(op, &[q, k, v]),
        }
    }
}
