//! The Conv2d extern (f32, NCHW) writing straight into its output buffer: a 1x1 stride-1
//! unpadded conv is one GEMM `[Og, Cg] @ [Cg, H*W]` per (image, group) on the input as it
//! lies; other convs build the im2col matrix of each (image, group) in the executable's
//! scratch first; convs with one input channel per group (depthwise) run a direct loop.
//! 3x3 stride-1 convs with constant weights run by Winograd's F(4x4, 3x3) when they fit
//! (`conv_winograd`), or F(2x2, 3x3) on small maps (`conv_winograd::f2`), other KxK convs with constant weights on the conv tiles (`conv_tiles`); other
//! one-group convs with constant weights run on kiln's GEMM with the weights packed once
//! (`gemm::gemm_a`, where kiln's GEMM runs), a whole image per call, the bias and epilogue on
//! each block of the output as the GEMM finishes it where the epilogue allows (`Epi::blocks`),
//! else on the whole image after it; their im2col matrix is built in the executable's scratch
//! already in the GEMM's panels of 16 pixels (`im2col_panels`). On the `gemm` crate, output channels are done in
//! blocks of rows; each block gets its bias and then the epilogue while it is still in cache.

#[cfg(target_arch = "x86_64")]
use super::{conv_tiles, conv_winograd};
use super::conv_direct::{DwOperands, depthwise, im2col, im2col_panels};
use super::matmul::sgemm;
use super::prepack::Prepacked;
use crate::gemm;
use super::raw;
use super::steps::Epi;
use kiln_ir::{Conv2dAttrs, Error, Result};
use kiln_sched::{BufId, BufView};
use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

/// Sizes of one convolution, checked against each other.
pub(super) struct Geom {
    pub(super) n: usize,
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) o: usize,
    pub(super) cg: usize,
    pub(super) og: usize,
    pub(super) kh: usize,
    pub(super) kw: usize,
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) groups: usize,
    pub(super) a: Conv2dAttrs,
}

impl Geom {
    fn new(a: &Conv2dAttrs, inputs: &[BufView], out: &[usize]) -> Result<Geom> {
        let shapes: Vec<&[usize]> = inputs.iter().map(|v| &v.shape[..]).collect();
        let bad = |why: &str| {
            Error::Shape(format!(
                "conv2d extern {shapes:?} -> {out:?} ({a:?}): {why}"
            ))
        };
        if a.channels_last {
            return Err(bad("the CPU runner takes NCHW convs only (kiln makes channels-last convs for GPUs)"));
        }
        let (x, w) = match inputs {
            [x, w] | [x, w, _] => (&x.shape[..], &w.shape[..]),
            _ => return Err(bad("needs inputs [x, w] or [x, w, bias]")),
        };
        let (&[n, c, h, wd], &[o, cg, kh, kw], &[on, oo, oh, ow]) = (x, w, out) else {
            return Err(bad("x, w and the result must be rank 4"));
        };
        let groups = a.groups;
        if groups == 0 || cg * groups != c || o % groups != 0 || on != n || oo != o {
            return Err(bad("channels do not fit the groups"));
        }
        if inputs.get(2).is_some_and(|b| b.shape != [o]) {
            return Err(bad("bias must be [O]"));
        }
        let fits = |len, k, s, p0, p1, d, out| {
            kiln_ir::infer::window_out(len, k, s, (p0, p1), d, false) == Some(out)
        };
        let p = a.padding;
        if a.stride.contains(&0)
            || a.dilation.contains(&0)
            || !fits(h, kh, a.stride[0], p[0], p[2], a.dilation[0], oh)
            || !fits(wd, kw, a.stride[1], p[1], p[3], a.dilation[1], ow)
        {
            return Err(bad("the output size does not match the window"));
        }
        Ok(Geom {
            n,
            h,
            w: wd,
            o,
            cg,
            og: o / groups,
            kh,
            kw,
            oh,
            ow,
            groups,
            a: *a,
        })
    }

    /// Rows of the im2col matrix (the GEMM's K).
    pub(super) fn k(&self) -> usize {
        self.cg * self.kh * self.kw
    }

    /// Output pixels per channel (the GEMM's N).
    pub(super) fn p(&self) -> usize {
        self.oh * self.ow
    }

    fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.a.stride == [1, 1] && self.a.padding == [0; 4]
    }
}

/// The stride that walks `shape` (as strided by `strides`) as one flat dim, when it exists.
fn merged_stride(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let (mut inner, mut next) = (None, 0);
    for d in (0..shape.len()).rev() {
        if shape[d] == 1 {
            continue;
        }
        match inner {
            None => inner = Some(strides[d]),
            Some(_) if strides[d] != next => return None,
            Some(_) => {}
        }
        next = strides[d] * shape[d];
    }
    Some(inner.unwrap_or(1))
}

/// How the input of (image, group) reaches the GEMM: as it lies, or through im2col.
fn direct_input(g: &Geom, x: &BufView) -> Option<usize> {
    if g.is_pointwise() {
        merged_stride(&x.shape[2..], &x.strides[2..])
    } else {
        None
    }
}

/// A conv's weights packed for the conv tiles.
#[cfg(target_arch = "x86_64")]
pub(crate) use conv_tiles::PackedWeights;
/// A conv's weights packed for the conv tiles (none here: they need x86-64).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) enum PackedWeights {}

/// A 3x3 conv's weights transformed for Winograd's F(4x4, 3x3).
#[cfg(target_arch = "x86_64")]
pub(crate) use conv_winograd::WinogradWeights;
/// A 3x3 conv's weights transformed for Winograd (none here: it needs x86-64).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) enum WinogradWeights {}

/// A 3x3 conv's weights transformed for Winograd's F(2x2, 3x3) on a small map.
#[cfg(target_arch = "x86_64")]
pub(crate) use conv_winograd::f2::Winograd2Weights;
/// A 3x3 conv's weights transformed for Winograd (none here: it needs x86-64).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) enum Winograd2Weights {}

/// True for a 1x1 stride-1 unpadded conv of these inputs and output shape (one GEMM of the
/// input as it lies, per image and group); false also when they do not fit together.
pub(crate) fn is_pointwise(a: &Conv2dAttrs, inputs: &[BufView], out: &[usize]) -> bool {
    Geom::new(a, inputs, out).is_ok_and(|g| g.is_pointwise())
}

/// The cell of constants this conv packs once, which also says how it runs, if any: with
/// constant weights (`weights_const`), by Winograd's F(4x4, 3x3) where it fits (see
/// [`conv_winograd`]), else by F(2x2, 3x3) where that fits (small maps), else on the conv tiles where they fit (see [`conv_tiles`]), else on
/// kiln's GEMM with the weights as its packed left-hand side ([`gemm::gemm_a`]) for one group
/// of more than one input channel where kiln's GEMM is [`gemm::available`]: the `gemm` crate
/// packs both operands on every call, the weights included. Other convs pack nothing.
pub(crate) fn prepacked(a: &Conv2dAttrs, inputs: &[BufView], out: &[usize], weights_const: bool) -> Option<Prepacked> {
    let g = Geom::new(a, inputs, out).ok().filter(|_| weights_const)?;
    #[cfg(target_arch = "x86_64")]
    if conv_winograd::eligible(&g) {
        return Some(Prepacked::ConvWinograd(OnceLock::new()));
    } else if conv_winograd::f2::eligible(&g) {
        return Some(Prepacked::ConvWinograd2(OnceLock::new()));
    } else if conv_tiles::eligible(&g) {
        return Some(Prepacked::ConvTiles(OnceLock::new()));
    }
    (gemm::available() && g.groups == 1 && g.cg > 1).then(|| Prepacked::ConvGemm(OnceLock::new()))
}

/// f32 elements of scratch this conv needs (`None` when it needs none), by how it runs (its
/// `packed` cell): the im2col matrix, the conv tiles' padded input, or Winograd's padded
/// input and transformed tiles.
pub(crate) fn scratch_elems(
    a: &Conv2dAttrs,
    inputs: &[BufView],
    out: &[usize],
    packed: Option<&Prepacked>,
) -> Option<usize> {
    let g = Geom::new(a, inputs, out).ok()?;
    #[cfg(target_arch = "x86_64")]
    match packed {
        Some(Prepacked::ConvTiles(_)) => return conv_tiles::scratch_elems(&g, &inputs[0]),
        Some(Prepacked::ConvWinograd(_)) => return Some(conv_winograd::scratch_elems(&g)),
        Some(Prepacked::ConvWinograd2(_)) => return Some(conv_winograd::f2::scratch_elems(&g)),
        _ => {}
    }
    // kiln's GEMM reads the im2col matrix in panels of 16 pixels, the last one whole.
    let on_gemm = matches!(packed, Some(Prepacked::ConvGemm(_)));
    let cols = if on_gemm { g.p().next_multiple_of(gemm::PANEL) } else { g.p() };
    (g.cg > 1 && direct_input(&g, &inputs[0]).is_none()).then(|| g.k() * cols)
}

/// Runs the convolution (see [`kiln_sched::ExternOp::Conv2d`]) as its `packed` cell says (see
/// [`prepacked`]): by Winograd, on the conv tiles, else by im2col (unless pointwise) and GEMM:
/// kiln's with the weights packed once, else the `gemm` crate's, `block_rows` output channels per GEMM call
/// when given (the autotuner's choice), else the heuristic below.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    a: &Conv2dAttrs,
    inputs: &[BufView],
    ptrs: &[*mut u8],
    out: BufId,
    out_shape: &[usize],
    epi: &Epi,
    scratch: &mut Vec<f32>,
    block_rows: Option<usize>,
    packed: Option<&Prepacked>,
    then: &[Chained],
) -> Result<()> {
    let g = Geom::new(a, inputs, out_shape)?;
    epi.check_rows(g.n * g.o)?;
    let (x, w) = (&inputs[0], &inputs[1]);
    let px = ptrs[x.buf.index()] as *const f32;
    let pout = ptrs[out.index()] as *mut f32;
    let p = g.p();
    let bias_of = bias_of(ptrs, inputs, g.o);
    let bias = bias_of.as_deref();
    if then.iter().any(|c| (c.images, c.pixels) != (g.n, p)) {
        return Err(Error::Shape("a chained conv must have this conv's images and pixels".into()));
    }
    if !then.is_empty() && !heads_chains(packed, out_shape) {
        return Err(Error::Unsupported("a conv chained onto a conv that can lead no chain".into()));
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(cell) = packed.and_then(Prepacked::conv_winograd) {
        // SAFETY: as for the conv tiles below; the scratch was sized by `scratch_elems` for
        // Winograd, which only runs where kiln's GEMM does.
        return unsafe {
            let packed = cell.get_or_init(|| {
                let (_dense, pw, w_rs, w_cs) = weight_matrix(ptrs, w, &g);
                WinogradWeights::pack(&g, pw, w_rs, w_cs)
            });
            conv_winograd::run(&g, x, px, packed, bias, pout, epi, scratch)
        };
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(cell) = packed.and_then(Prepacked::conv_winograd2) {
        // SAFETY: as for F(4x4, 3x3) above.
        unsafe {
            let packed = cell.get_or_init(|| {
                let (_dense, pw, w_rs, w_cs) = weight_matrix(ptrs, w, &g);
                Winograd2Weights::pack(&g, pw, w_rs, w_cs)
            });
            conv_winograd::f2::run(&g, x, px, packed, bias, pout, epi, scratch)?;
        }
        // Chained convs (on a map this small, split by channels: see `heads_chains`).
        let failed = std::sync::Mutex::new(None);
        for img in 0..g.n {
            then.iter().for_each(|c| c.run_split(img, &failed));
        }
        return failed.into_inner().ok().flatten().map_or(Ok(()), Err);
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(cell) = packed.and_then(Prepacked::conv_tiles) {
        // SAFETY: the weight matrix is read inside its view (checked when the executable was
        // built); the output holds N*O*P elements and overlaps no input; the scratch was
        // sized by `scratch_elems(.., true)`.
        return unsafe {
            let packed = cell.get_or_init(|| {
                let (_dense, pw, w_rs, w_cs) = weight_matrix(ptrs, w, &g);
                PackedWeights::pack(&g, pw, w_rs, w_cs)
            });
            conv_tiles::run(&g, x, px, packed, bias, pout, epi, scratch)
        };
    }
    let (_wdense, pw, w_rs, w_cs) = weight_matrix(ptrs, w, &g);
    if let Some(cell) = packed.and_then(Prepacked::conv_gemm) {
        // SAFETY: the weight matrix is read inside its view (checked when the executable was built).
        let wa = cell.get_or_init(|| unsafe { gemm::PackedA::pack(g.o, g.k(), pw, w_rs as isize, w_cs as isize) });
        for img in 0..g.n {
            let x_off = x.offset + img * x.strides[0];
            let out = pout.wrapping_add(img * g.o * p);
            if epi.blocks() || (!then.is_empty() && !epi.present()) {
                // The bias and the epilogue on each block of the output as the GEMM finishes
                // it, while it is in cache (a separate pass read the whole output back); a
                // chained conv on each range of pixels once all their channels are final.
                let failed = std::sync::Mutex::new(None);
                let finish = Finish { out: out as usize, p, bias, epi, row0: img * g.o };
                let done = |rows: Range<usize>, cols: Range<usize>| finish.block(rows, cols, &failed);
                let swept = |cols: Range<usize>| then.iter().for_each(|c| c.run(img, cols.clone(), &failed));
                let by_channels = chain_by_channels(p, g.o);
                let chained = (!then.is_empty() && !by_channels).then_some(&swept as gemm::Swept);
                let gemm_then = gemm::Then { block: Some(&done), swept: chained };
                // SAFETY: as for the GEMM below; `done` and the chained conv write only the
                // block and the pixels they are given.
                unsafe {
                    match direct_input(&g, x) {
                        Some(cs) => gemm::gemm_a_then(wa, p, px.add(x_off), x.strides[1] as isize, cs as isize, out, p, gemm_then),
                        None => {
                            im2col_panels(&g, x, px, x_off, scratch);
                            gemm::gemm_a_panels_then(wa, p, scratch.as_ptr(), out, p, gemm_then)
                        }
                    }
                };
                if by_channels {
                    then.iter().for_each(|c| c.run_split(img, &failed));
                }
                if let Some(e) = failed.into_inner().ok().flatten() {
                    return Err(e);
                }
                continue;
            }
            // SAFETY: the input view was checked inside its buffer and holds the [K, P]
            // right-hand side (as it lies, or as the im2col of image img); image img's O rows
            // of P are inside the output, which overlaps no input.
            unsafe {
                match direct_input(&g, x) {
                    Some(cs) => gemm::gemm_a(wa, p, px.add(x_off), x.strides[1] as isize, cs as isize, out, p),
                    None => {
                        im2col_panels(&g, x, px, x_off, scratch);
                        gemm::gemm_a_panels(wa, p, scratch.as_ptr(), out, p)
                    }
                }
            };
            if let Some(b) = bias {
                // SAFETY: as above.
                add_bias(unsafe { std::slice::from_raw_parts_mut(out, g.o * p) }, b, p);
            }
            epi.rows(img * g.o, (img + 1) * g.o)?;
            let failed = std::sync::Mutex::new(None);
            then.iter().for_each(|c| c.run(img, 0..p, &failed));
            if let Some(e) = failed.into_inner().ok().flatten() {
                return Err(e);
            }
        }
        return Ok(());
    }
    // The GEMM packs the right-hand side (the im2col matrix) on every call, so row blocks
    // must be tall for that to stay cheap: at least 128 rows, else the whole output at once.
    let block = match block_rows {
        Some(b) => b.max(1),
        None if epi.present() => ((1usize << 18) / p.max(1)).max(128),
        None => g.o.max(1),
    };
    // SAFETY (for every use below): the output buffer holds n*O*P elements (checked when the
    // executable was built) and does not overlap any input (externs are never in place).
    let out_rows = |row0: usize, rows: usize| unsafe {
        std::slice::from_raw_parts_mut(pout.add(row0 * p), rows * p)
    };
    for img in 0..g.n {
        if g.cg == 1 {
            let ops = DwOperands {
                x,
                px: px as usize,
                pw: pw as usize,
                w_rs,
                w_cs,
                bias,
            };
            for o0 in (0..g.o).step_by(block) {
                let o1 = (o0 + block).min(g.o);
                depthwise(&g, &ops, img, o0..o1, out_rows(img * g.o + o0, o1 - o0));
                epi.rows(img * g.o + o0, img * g.o + o1)?;
            }
            continue;
        }
        for grp in 0..g.groups {
            let x_off = x.offset + img * x.strides[0] + grp * g.cg * x.strides[1];
            let (rhs, rhs_rs, rhs_cs) = match direct_input(&g, x) {
                Some(cs) => (px.wrapping_add(x_off), x.strides[1] as isize, cs as isize),
                None => {
                    im2col(&g, x, px, x_off, &mut scratch[..g.k() * p]);
                    (scratch.as_ptr(), p as isize, 1)
                }
            };
            for o0 in (0..g.og).step_by(block) {
                let o1 = (o0 + block).min(g.og);
                let first = grp * g.og + o0;
                // SAFETY: the views were checked inside their buffers when the executable
                // was built; rows o0..o1 of group `grp` are inside the weights and the output;
                // the scratch holds K*P elements.
                unsafe {
                    sgemm(
                        o1 - o0,
                        p,
                        g.k(),
                        pout.add((img * g.o + first) * p),
                        p as isize,
                        pw.add(first * w_rs),
                        w_rs as isize,
                        w_cs as isize,
                        rhs,
                        rhs_rs,
                        rhs_cs,
                    )
                };
                if let Some(b) = bias {
                    add_bias(
                        out_rows(img * g.o + first, o1 - o0),
                        &b[first..first + (o1 - o0)],
                        p,
                    );
                }
                epi.rows(img * g.o + first, img * g.o + first + (o1 - o0))?;
            }
        }
    }
    Ok(())
}

/// True when a chain on a map of `pixels` pixels led by a conv of `channels` output channels
/// runs as whole products one after the other, each split over threads by output channels,
/// rather than split by pixels with each thread running the chained convs on its own pixels
/// (`KILN_CHAIN_SPLIT=pixels` keeps the latter, for comparisons). With fewer pixels than
/// channels, the split by pixels had every thread stream all of each conv's weights and run
/// half-empty panels (a 7x7 map's 49 pixels went 24 and 25): resnet50's two 7x7 chains took
/// +0.9 to +1.7 ms over their convs run apart. Their maps, the whole of which the next conv
/// needs on every thread, fit in L2 either way.
fn chain_by_channels(pixels: usize, channels: usize) -> bool {
    static PIXELS: OnceLock<bool> = OnceLock::new();
    let forced = *PIXELS.get_or_init(|| std::env::var("KILN_CHAIN_SPLIT").is_ok_and(|v| v == "pixels"));
    !forced && pixels < channels
}

/// True when a conv that runs as its `packed` cell says, with output shape `out` (`[N, O, OH,
/// OW]`), can lead a chain of 1x1 convs: on kiln's GEMM, which calls back as it finishes
/// pixels, or by Winograd's F(2x2, 3x3) on a map split by channels (see
/// [`chain_by_channels`]), after which the chained convs run.
pub(crate) fn heads_chains(packed: Option<&Prepacked>, out: &[usize]) -> bool {
    match (packed, out) {
        (Some(Prepacked::ConvGemm(_)), _) => true,
        (Some(Prepacked::ConvWinograd2(_)), [_, o, oh, ow]) => chain_by_channels(oh * ow, *o),
        _ => false,
    }
}

/// The bias of a conv with `o` output channels: as it lies when dense (the usual constant),
/// else a copy.
fn bias_of<'a>(ptrs: &[*mut u8], inputs: &[BufView], o: usize) -> Option<Cow<'a, [f32]>> {
    let b = inputs.get(2)?;
    Some(if b.strides == [1] || o <= 1 {
        // SAFETY: the view was checked inside its buffer when the executable was built, and
        // the buffer outlives the run that reads it.
        Cow::Borrowed(unsafe { std::slice::from_raw_parts((ptrs[b.buf.index()] as *const f32).add(b.offset), o) })
    } else {
        Cow::Owned(read_f32(ptrs, b))
    })
}

/// What a conv on kiln's GEMM does to each block of its output once the GEMM has finished it:
/// adds the bias and runs the epilogue, on the calling thread.
struct Finish<'a> {
    /// The output of the image being computed (an address, so that threads share it).
    out: usize,
    /// Pixels per channel (the output's row length).
    p: usize,
    bias: Option<&'a [f32]>,
    epi: &'a Epi<'a>,
    /// The epilogue's row of this image's channel 0.
    row0: usize,
}

impl Finish<'_> {
    /// Finishes channels `rows` by pixels `cols` of the image; the epilogue's first error
    /// goes to `failed`.
    fn block(&self, rows: Range<usize>, cols: Range<usize>, failed: &Mutex<Option<Error>>) {
        if let Some(b) = self.bias {
            for r in rows.clone() {
                // SAFETY: row r's columns `cols` are inside the image's output (the GEMM's
                // block, which this thread alone writes).
                let row = unsafe { std::slice::from_raw_parts_mut((self.out as *mut f32).add(r * self.p + cols.start), cols.len()) };
                row.iter_mut().for_each(|v| *v += b[r]);
            }
        }
        if self.epi.present()
            && let (Err(e), Ok(mut first)) = (self.epi.block(self.row0 + rows.start..self.row0 + rows.end, cols), failed.lock())
        {
            first.get_or_insert(e);
        }
    }
}

/// A 1x1 conv chained onto a conv on kiln's GEMM (see `kiln_sched::chain`): it runs on each
/// range of that conv's pixels as soon as every channel of them is final, on the thread that
/// computed them, while they are in its cache — after the convs chained before it, so that it
/// may read what they store.
pub(crate) struct Chained<'a> {
    /// The chained conv's weights, packed for kiln's GEMM.
    wa: &'a gemm::PackedA,
    bias: Option<Cow<'a, [f32]>>,
    /// Its input, image 0 (dense), as an address.
    x: usize,
    /// Its output, image 0 (dense), as an address.
    out: usize,
    /// Images, input channels and pixels per channel.
    images: usize,
    channels: usize,
    pixels: usize,
    epi: &'a Epi<'a>,
}

// SAFETY: the addresses are of the step's buffers, which threads touch on disjoint pixels.
unsafe impl Sync for Chained<'_> {}

impl<'a> Chained<'a> {
    /// The chained conv of `a`, `inputs`, writing `out` (shape `out_shape`) with epilogue
    /// `epi`, when it can run chained: a 1x1 stride-1 unpadded conv of dense input on kiln's
    /// GEMM (its `packed` cell) whose epilogue, if any, runs in blocks.
    pub(crate) fn new(
        a: &Conv2dAttrs,
        inputs: &[BufView],
        ptrs: &[*mut u8],
        out: BufId,
        out_shape: &[usize],
        epi: &'a Epi<'a>,
        packed: Option<&'a Prepacked>,
    ) -> Option<Chained<'a>> {
        let g = Geom::new(a, inputs, out_shape).ok()?;
        let x = &inputs[0];
        let dense = *x == BufView::dense(x.buf, &x.shape);
        let cell = packed.and_then(Prepacked::conv_gemm)?;
        if !g.is_pointwise() || !dense || (epi.present() && !epi.blocks()) {
            return None;
        }
        let (_dense, pw, w_rs, w_cs) = weight_matrix(ptrs, &inputs[1], &g);
        // SAFETY: the weight matrix is read inside its view (checked when the executable was built).
        let wa = cell.get_or_init(|| unsafe { gemm::PackedA::pack(g.o, g.k(), pw, w_rs as isize, w_cs as isize) });
        Some(Chained {
            wa,
            bias: bias_of(ptrs, inputs, g.o),
            x: (ptrs[x.buf.index()] as *const f32).wrapping_add(x.offset) as usize,
            out: ptrs[out.index()] as usize,
            images: g.n,
            channels: g.cg,
            pixels: g.p(),
            epi,
        })
    }

    /// Runs on every pixel of image `img`, split over the pool's threads by output channels
    /// (see [`chain_by_channels`]); the epilogue's first error goes to `failed`.
    fn run_split(&self, img: usize, failed: &Mutex<Option<Error>>) {
        let (o, p) = (self.wa.m(), self.pixels);
        let out = (self.out as *mut f32).wrapping_add(img * o * p);
        let finish = Finish { out: out as usize, p, bias: self.bias.as_deref(), epi: self.epi, row0: img * o };
        let done = |rows: Range<usize>, cols: Range<usize>| finish.block(rows, cols, failed);
        let x = (self.x as *const f32).wrapping_add(img * self.channels * p);
        // SAFETY: as in `run`, for all of this image's pixels, which every step before this
        // one has finished.
        unsafe { gemm::gemm_a_then(self.wa, p, x, p as isize, 1, out, p, gemm::Then { block: Some(&done), swept: None }) };
    }

    /// Runs on pixels `cols` of image `img`, on this thread; the epilogue's first error goes
    /// to `failed`.
    fn run(&self, img: usize, cols: Range<usize>, failed: &Mutex<Option<Error>>) {
        let (o, p) = (self.wa.m(), self.pixels);
        let out = (self.out as *mut f32).wrapping_add(img * o * p);
        let finish = Finish { out: out as usize, p, bias: self.bias.as_deref(), epi: self.epi, row0: img * o };
        let start = cols.start;
        let done = |rows: Range<usize>, c: Range<usize>| finish.block(rows, start + c.start..start + c.end, failed);
        let x = (self.x as *const f32).wrapping_add(img * self.channels * p + start);
        // SAFETY: the input holds `channels` rows of `p` pixels per image and the output `o`
        // rows (checked when the executable was built); pixels `cols` of this image are final
        // in the input and written by this thread alone in the output.
        unsafe {
            gemm::gemm_a_here_then(self.wa, cols.len(), x, p as isize, 1, out.add(start), p, gemm::Then { block: Some(&done), swept: None })
        };
    }
}

/// The weights as an `[O, K]` matrix (pointer, row stride, column stride): as they lie when
/// `[Cg, KH, KW]` merge, else a dense copy, which the returned Vec holds.
fn weight_matrix(ptrs: &[*mut u8], w: &BufView, g: &Geom) -> (Vec<f32>, *const f32, usize, usize) {
    match merged_stride(&w.shape[1..], &w.strides[1..]) {
        Some(cs) => (
            Vec::new(),
            (ptrs[w.buf.index()] as *const f32).wrapping_add(w.offset),
            w.strides[0],
            cs,
        ),
        None => {
            let dense = read_f32(ptrs, w);
            let p = dense.as_ptr();
            (dense, p, g.k(), 1)
        }
    }
}

/// Adds `bias[r]` to every element of row `r` of `out` (rows of `p` elements).
fn add_bias(out: &mut [f32], bias: &[f32], p: usize) {
    if p == 0 {
        return;
    }
    let add = |(row, &b): (&mut [f32], &f32)| row.iter_mut().for_each(|v| *v += b);
    // Only big outputs are worth splitting over the pool (this pass is memory-bound).
    if out.len() >= 1 << 16 {
        let rows = (1 << 14) / p + 1;
        crate::par::for_each_chunk_mut(out, rows * p, |t, block| {
            block.chunks_exact_mut(p).zip(&bias[t * rows..]).for_each(add)
        });
    } else {
        out.chunks_exact_mut(p).zip(bias).for_each(add);
    }
}

/// The elements of a (checked) f32 view, row-major.
fn read_f32(ptrs: &[*mut u8], v: &BufView) -> Vec<f32> {
    let base = ptrs[v.buf.index()] as *const u8;
    let layout = v.layout();
    let mut out = Vec::with_capacity(layout.numel());
    // SAFETY: the view was checked inside its buffer when the executable was built.
    layout.for_each_offset(|o| out.push(unsafe { raw::read::<f32>(base, o) }));
    out
}
