//! Space-to-depth for a GPU's stride-2 convs over few channels (a ResNet's 7x7 stem over the
//! RGB image). cuDNN has no tensor-core kernel for 3 input channels: resnet50's stem took
//! 0.48 ms of a 3.5 ms bs64 forward on the H200 (resnet18's: a third of its run), in a kernel
//! that reaches ~25 TFLOP/s. The same conv is a stride-1 conv over the image's 2x2 pixel
//! blocks, with 4x the channels and half the kernel (as MLPerf's ResNets on TPUs and GPUs do):
//!
//! `y[n,i,j,o] = sum x[n, 2i+ky-pt, 2j+kx-pl, c] w[o,ky,kx,c]`; with `ky = 2a+p`, `kx = 2b+q`
//! and `s[n,u,v,(c,p,q)] = xpad[n, 2u+p, 2v+q, c]`, it is
//! `y[n,i,j,o] = sum s[n, i+a, j+b, (c,p,q)] w'[o,a,b,(c,p,q)]`, `w'[o,a,b,(c,p,q)] = w[o,2a+p,2b+q,c]`
//! (0 where `2a+p` or `2b+q` passes the kernel).
//!
//! Runs after `channels_last` on its channels-last convs: `s` is built from x by a pad, a
//! reshape and a permute (one generated kernel, reading x as it lies), and `w'` once, here.
//! The `4C` block channels are padded with zero channels to a multiple of
//! [`CHANNEL_MULTIPLE`] (12 -> 16 for RGB).
//! The sum has the same terms plus products of the zero weights; so an Inf or NaN in an image
//! pixel that only a padded weight reaches gives NaN where the 7x7 conv would not read it.

use super::Pass;
use crate::rewrite::{Rewrite, Step};
use kiln_ir::{Conv2dAttrs, Graph, HostTensor, Op, PadMode, Result, Shape};

/// Rewrites stride-2 channels-last convs over at most [`MAX_CHANNELS`] channels (see the
/// module doc).
pub struct SpaceToDepth;

/// Convs over more input channels already have tensor-core kernels.
pub const MAX_CHANNELS: usize = 4;

/// The blocks' channels are padded with zeros (zero weights) to a multiple of this: cuDNN's
/// tensor-core kernels want 32-byte channel rows.
pub const CHANNEL_MULTIPLE: usize = 8;

impl Pass for SpaceToDepth {
    fn name(&self) -> &'static str {
        "space_to_depth"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        let mut rewritten = 0usize;
        let out = Rewrite::new(graph)?.run(|rw, _, node| {
            let Op::Conv2d(a) = &node.op else { return Ok(Step::Copy) };
            let src = rw.src();
            let (Some(x), Some(w), Some(y)) = (src.ty(node.inputs[0]).shape.as_fixed(), src.ty(node.inputs[1]).shape.as_fixed(), node.ty.shape.as_fixed()) else {
                return Ok(Step::Copy);
            };
            let Op::Constant(c) = src.node(node.inputs[1]).op else { return Ok(Step::Copy) };
            let Some(weight) = src.consts.get(c.0 as usize).cloned() else { return Ok(Step::Copy) };
            let Some(plan) = Plan::new(a, &x, &w, &y) else { return Ok(Step::Copy) };
            let v = rw.mapped(node.inputs[0])?;
            let s = plan.input(rw, v)?;
            let w2 = rw.constant(plan.weight(&weight)?);
            let mut args = vec![s, w2];
            if let Some(&b) = node.inputs.get(2) {
                args.push(rw.mapped(b)?);
            }
            rewritten += 1;
            let attrs = Conv2dAttrs { stride: [1, 1], padding: [0; 4], dilation: [1, 1], groups: 1, channels_last: true };
            Ok(Step::Replace(rw.add(Op::Conv2d(attrs), &args)?))
        })?;
        if rewritten > 0 {
            tracing::info!(target: "kiln::graph", "space_to_depth: {rewritten} stride-2 conv(s) over few channels run as stride-1 convs over 2x2 blocks");
        }
        Ok(out)
    }
}

/// The sizes of one rewrite.
struct Plan {
    /// x `[N, H, W, C]`, the weight `[O, KH, KW, C]`.
    n: usize,
    c: usize,
    o: usize,
    kh: usize,
    kw: usize,
    /// The block kernel `ceil(K / 2)` and the block grid `U x V` the padded image is cut into.
    kh2: usize,
    kw2: usize,
    u: usize,
    v: usize,
    /// Padding before and after, rows then columns, so the image is `2U x 2V`.
    rows: (usize, usize),
    cols: (usize, usize),
    /// Channels of the blocks: `4C` padded to [`CHANNEL_MULTIPLE`].
    depth: usize,
}

impl Plan {
    /// The rewrite of a channels-last conv `x (*) w -> y`, when it is one this pass takes:
    /// stride 2, no dilation, one group, at most [`MAX_CHANNELS`] float channels, a kernel of at
    /// least 2x2, and padding that the block grid covers.
    fn new(a: &Conv2dAttrs, x: &[usize], w: &[usize], y: &[usize]) -> Option<Plan> {
        let [n, h, wd, c] = *x else { return None };
        let [o, kh, kw, wc] = *w else { return None };
        let [_, oh, ow, _] = *y else { return None };
        let fits = a.channels_last && a.stride == [2, 2] && a.dilation == [1, 1] && a.groups == 1 && wc == c && c <= MAX_CHANNELS && kh >= 2 && kw >= 2;
        if !fits || oh == 0 || ow == 0 || n == 0 {
            return None;
        }
        let [top, left, _, _] = a.padding;
        let (kh2, kw2) = (kh.div_ceil(2), kw.div_ceil(2));
        let (u, v) = (oh + kh2 - 1, ow + kw2 - 1);
        // The grid may end before the conv's own bottom/right padding (rows no window reads),
        // but not inside the image (that would need a slice; stems do not do it).
        let bottom = (2 * u).checked_sub(h + top)?;
        let right = (2 * v).checked_sub(wd + left)?;
        Some(Plan { n, c, o, kh, kw, kh2, kw2, u, v, rows: (top, bottom), cols: (left, right), depth: (4 * c).next_multiple_of(CHANNEL_MULTIPLE) })
    }

    /// The pad that takes `4C` block channels (the last axis) to [`Plan::depth`].
    fn depth_pad(&self) -> Op {
        Op::Pad { pads: vec![(0, 0), (0, 0), (0, 0), (0, self.depth - 4 * self.c)], mode: PadMode::Constant(0.0) }
    }

    /// `s [N, U, V, depth]` from `x [N, H, W, C]`: padded, cut into 2x2 blocks, each block's
    /// pixels as channels `(c, p, q)`, then zero channels.
    fn input(&self, rw: &mut Rewrite, x: kiln_ir::NodeId) -> Result<kiln_ir::NodeId> {
        let (n, c, u, v) = (self.n, self.c, self.u, self.v);
        let padded = rw.add(Op::Pad { pads: vec![(0, 0), self.rows, self.cols, (0, 0)], mode: PadMode::Constant(0.0) }, &[x])?;
        let blocks = rw.add(Op::Reshape(Shape::fixed(&[n, u, 2, v, 2, c])), &[padded])?;
        let moved = rw.add(Op::Permute(vec![0, 1, 3, 5, 2, 4]), &[blocks])?;
        let s = rw.add(Op::Reshape(Shape::fixed(&[n, u, v, 4 * c])), &[moved])?;
        if self.depth == 4 * c {
            return Ok(s);
        }
        rw.add(self.depth_pad(), &[s])
    }

    /// `w' [O, KH2, KW2, depth]` from `w [O, KH, KW, C]`, in the channel order of
    /// [`Plan::input`] (zero for the zero channels).
    fn weight(&self, w: &HostTensor) -> Result<HostTensor> {
        let (o, c, kh2, kw2) = (self.o, self.c, self.kh2, self.kw2);
        let pad = Op::Pad { pads: vec![(0, 0), (0, 2 * kh2 - self.kh), (0, 2 * kw2 - self.kw), (0, 0)], mode: PadMode::Constant(0.0) };
        let padded = kiln_cpu::eval(&pad, &[w])?;
        let blocks = kiln_cpu::eval(&Op::Reshape(Shape::fixed(&[o, kh2, 2, kw2, 2, c])), &[&padded])?;
        let moved = kiln_cpu::eval(&Op::Permute(vec![0, 1, 3, 5, 2, 4]), &[&blocks])?;
        let flat = kiln_cpu::eval(&Op::Reshape(Shape::fixed(&[o, kh2, kw2, 4 * c])), &[&moved])?;
        let deep = if self.depth == 4 * c { flat } else { kiln_cpu::eval(&self.depth_pad(), &[&flat])? };
        Ok(deep.contiguous())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(stride: usize, padding: [usize; 4]) -> Conv2dAttrs {
        Conv2dAttrs { stride: [stride; 2], padding, dilation: [1, 1], groups: 1, channels_last: true }
    }

    #[test]
    fn the_stem_is_cut_into_blocks_that_cover_every_window() {
        // ResNet's stem: 224x224x3, 7x7 stride 2 pad 3 -> 112x112.
        let p = Plan::new(&attrs(2, [3; 4]), &[2, 224, 224, 3], &[64, 7, 7, 3], &[2, 112, 112, 64]).unwrap();
        assert_eq!((p.kh2, p.u, p.rows, p.depth), (4, 115, (3, 3), 16));
        // An odd image: 7x7 pad 3 -> 4x4; the grid of 7 blocks needs 14 rows: 3 + 7 + 4.
        let p = Plan::new(&attrs(2, [3; 4]), &[1, 7, 7, 3], &[8, 7, 7, 3], &[1, 4, 4, 8]).unwrap();
        assert_eq!((p.u, p.rows), (7, (3, 4)));
    }

    #[test]
    fn other_convs_are_left_alone() {
        let x = [2, 32, 32, 3];
        assert!(Plan::new(&attrs(1, [1; 4]), &x, &[8, 3, 3, 3], &[2, 32, 32, 8]).is_none(), "stride 1");
        assert!(Plan::new(&attrs(2, [1; 4]), &[2, 32, 32, 16], &[8, 3, 3, 16], &[2, 16, 16, 8]).is_none(), "16 channels");
        assert!(Plan::new(&attrs(2, [0; 4]), &x, &[8, 1, 1, 3], &[2, 16, 16, 8]).is_none(), "1x1");
        let nchw = Conv2dAttrs { channels_last: false, ..attrs(2, [1; 4]) };
        assert!(Plan::new(&nchw, &[2, 3, 32, 32], &[8, 3, 3, 3], &[2, 8, 16, 16]).is_none(), "NCHW");
    }
}
