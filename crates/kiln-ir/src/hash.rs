//! A structural hash of a graph: the key of everything cached per computation (compiled
//! plans, autotuning results). Two graphs that compute the same thing from the same inputs hash
//! equal whatever their node names, their nodes' order, or nodes that feed no output; a change
//! to any op, attribute, dtype, shape, constant value, input position or output order changes
//! the hash.
//!
//! Every field is encoded explicitly (tags, little-endian integers, f64 bit patterns), never
//! through `std::hash::Hash` or `Debug`, so the hash is stable across builds and Rust versions.
//! Changing the encoding invalidates every on-disk cache keyed by it: bump [`HASH_VERSION`].

use crate::{
    ArgReduceOp, BinaryOp, Dim, Graph, NodeId, Op, PadMode, PoolKind, ReduceOp, Shape, SliceAxis,
    TensorType, UnaryOp,
};
use crate::{CumulativeOp, ScatterReduction, TopKOutput};
use sha2::{Digest, Sha256};

/// Version of the encoding below; part of every hash.
pub const HASH_VERSION: u32 = 1;

/// The structural hash of `graph` (SHA-256).
///
/// Each reachable node hashes its op tag and attributes, its type and its inputs' hashes in
/// order. An input node hashes its position in `graph.inputs` and its type (not its name);
/// a constant its dtype, shape and bytes. The graph hashes the input signature (every
/// input's type, in order, as callers must bind them) and the output hashes in order.
/// A malformed graph (an input id not before its node) still hashes, deterministically.
pub fn structural_hash(graph: &Graph) -> [u8; 32] {
    let n = graph.nodes.len();
    let reachable = reachable_from_outputs(graph);
    let mut const_hashes: Vec<Option<[u8; 32]>> = vec![None; graph.consts.len()];
    let mut hashes: Vec<Option<[u8; 32]>> = vec![None; n];
    for idx in 0..n {
        if !reachable[idx] {
            continue;
        }
        let node = &graph.nodes[idx];
        let mut e = Enc::new(b'N');
        e.ty(&node.ty);
        match &node.op {
            Op::Input { .. } => {
                e.u8(0);
                match graph.inputs.iter().position(|i| i.index() == idx) {
                    Some(p) => e.u64(p as u64),
                    None => e.u64(u64::MAX),
                }
            }
            Op::Constant(c) => {
                e.u8(1);
                match graph.consts.get(c.0 as usize) {
                    Some(t) => {
                        let slot = &mut const_hashes[c.0 as usize];
                        let h = *slot.get_or_insert_with(|| {
                            let mut ce = Enc::new(b'C');
                            ce.ty(&TensorType::new(t.dtype(), t.ir_shape()));
                            // `to_f64_vec` would lose bits (i64, NaN payloads): hash the raw bytes
                            // of the dense data (constants are stored dense).
                            let dense = t.contiguous();
                            ce.bytes(&dense.storage.as_bytes());
                            ce.finish()
                        });
                        e.raw(&h);
                    }
                    None => e.u64(u64::MAX),
                }
            }
            op => {
                e.u8(2);
                encode_op(&mut e, op);
            }
        }
        e.u64(node.inputs.len() as u64);
        for i in &node.inputs {
            // Forward or dangling references cannot have a hash yet: encode the id instead.
            match hashes.get(i.index()).copied().flatten().filter(|_| i.index() < idx) {
                Some(h) => e.raw(&h),
                None => {
                    e.u8(0xff);
                    e.u64(i.0 as u64);
                }
            }
        }
        hashes[idx] = Some(e.finish());
    }

    let mut e = Enc::new(b'G');
    e.u32(HASH_VERSION);
    e.u64(graph.inputs.len() as u64);
    for i in &graph.inputs {
        match graph.nodes.get(i.index()) {
            Some(node) => e.ty(&node.ty),
            None => e.u8(0xff),
        }
    }
    e.u64(graph.outputs.len() as u64);
    for o in &graph.outputs {
        match hashes.get(o.index()).copied().flatten() {
            Some(h) => e.raw(&h),
            None => {
                e.u8(0xff);
                e.u64(o.0 as u64);
            }
        }
    }
    e.finish()
}

/// Which nodes some output depends on (dangling ids are skipped).
fn reachable_from_outputs(graph: &Graph) -> Vec<bool> {
    let mut seen = vec![false; graph.nodes.len()];
    let mut stack: Vec<NodeId> = graph.outputs.clone();
    while let Some(id) = stack.pop() {
        let Some(node) = graph.nodes.get(id.index()) else { continue };
        if std::mem::replace(&mut seen[id.index()], true) {
            continue;
        }
        stack.extend(node.inputs.iter().copied());
    }
    seen
}

/// A SHA-256 with explicit, length-prefixed encoders for the IR's pieces.
struct Enc(Sha256);

impl Enc {
    /// A hasher whose input starts with a domain tag, so a node's encoding can never read as
    /// a constant's or a graph's.
    fn new(domain: u8) -> Enc {
        let mut h = Sha256::new();
        h.update([domain]);
        Enc(h)
    }
    fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
    fn raw(&mut self, b: &[u8]) {
        self.0.update(b);
    }
    fn u8(&mut self, v: u8) {
        self.0.update([v]);
    }
    fn u32(&mut self, v: u32) {
        self.0.update(v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.update(v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.update(v.to_le_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.u64(v.to_bits());
    }
    fn bool(&mut self, v: bool) {
        self.u8(v as u8);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.raw(b);
    }
    fn usizes(&mut self, v: &[usize]) {
        self.u64(v.len() as u64);
        for &x in v {
            self.u64(x as u64);
        }
    }
    fn shape(&mut self, s: &Shape) {
        self.u64(s.rank() as u64);
        for d in &s.0 {
            match d {
                Dim::Fixed(n) => {
                    self.u8(0);
                    self.u64(*n as u64);
                }
                Dim::Sym(name) => {
                    self.u8(1);
                    self.bytes(name.as_bytes());
                }
            }
        }
    }
    fn ty(&mut self, t: &TensorType) {
        self.bytes(t.dtype.name().as_bytes());
        self.shape(&t.shape);
    }
    fn slice(&mut self, a: &SliceAxis) {
        self.i64(a.start);
        self.i64(a.end);
        self.i64(a.step);
    }
}

/// Encodes the op's tag and attributes. Tags are fixed numbers: never reuse or renumber one.
fn encode_op(e: &mut Enc, op: &Op) {
    match op {
        // Handled by the caller (they depend on the graph), listed for exhaustiveness.
        Op::Input { .. } => e.u8(0),
        Op::Constant(_) => e.u8(1),
        Op::Unary(u) => {
            e.u8(2);
            e.u8(unary_tag(*u));
        }
        Op::Binary(b) => {
            e.u8(3);
            e.u8(binary_tag(*b));
        }
        Op::Where => e.u8(4),
        Op::Cast(d) => {
            e.u8(5);
            e.bytes(d.name().as_bytes());
        }
        Op::BitCast(d) => {
            e.u8(210);
            e.bytes(d.name().as_bytes());
        }
        Op::Reduce { op, axes, keep_dims } => {
            e.u8(6);
            e.u8(match op {
                ReduceOp::Sum => 0,
                ReduceOp::Mean => 1,
                ReduceOp::Max => 2,
                ReduceOp::Min => 3,
                ReduceOp::Prod => 4,
            });
            e.usizes(axes);
            e.bool(*keep_dims);
        }
        Op::ArgReduce { op, axis, keep_dims, select_last } => {
            e.u8(7);
            e.u8(match op {
                ArgReduceOp::ArgMax => 0,
                ArgReduceOp::ArgMin => 1,
            });
            e.u64(*axis as u64);
            e.bool(*keep_dims);
            e.bool(*select_last);
        }
        Op::Reshape(s) => {
            e.u8(8);
            e.shape(s);
        }
        Op::Permute(p) => {
            e.u8(9);
            e.usizes(p);
        }
        Op::Expand(s) => {
            e.u8(10);
            e.shape(s);
        }
        Op::Slice(axes) => {
            e.u8(11);
            e.u64(axes.len() as u64);
            for a in axes {
                e.slice(a);
            }
        }
        Op::Pad { pads, mode } => {
            e.u8(12);
            e.u64(pads.len() as u64);
            for &(a, b) in pads {
                e.u64(a as u64);
                e.u64(b as u64);
            }
            match mode {
                PadMode::Constant(v) => {
                    e.u8(0);
                    e.f64(*v);
                }
                PadMode::Reflect => e.u8(1),
                PadMode::Edge => e.u8(2),
            }
        }
        Op::Concat { axis } => {
            e.u8(13);
            e.u64(*axis as u64);
        }
        Op::Gather { axis } => {
            e.u8(14);
            e.u64(*axis as u64);
        }
        Op::MatMul => e.u8(15),
        Op::Conv2d(a) => {
            e.u8(16);
            e.usizes(&a.stride);
            e.usizes(&a.padding);
            e.usizes(&a.dilation);
            e.u64(a.groups as u64);
            e.bool(a.channels_last);
        }
        Op::Pool2d(p) => {
            e.u8(17);
            match p.kind {
                PoolKind::Max => e.u8(0),
                PoolKind::Avg { count_include_pad } => {
                    e.u8(1);
                    e.bool(count_include_pad);
                }
            }
            e.usizes(&p.kernel);
            e.usizes(&p.stride);
            e.usizes(&p.padding);
            e.usizes(&p.dilation);
            e.bool(p.ceil_mode);
        }
        Op::Softmax { axis } => {
            e.u8(18);
            e.u64(*axis as u64);
        }
        Op::LogSoftmax { axis } => {
            e.u8(19);
            e.u64(*axis as u64);
        }
        Op::LayerNorm { axis, eps } => {
            e.u8(20);
            e.u64(*axis as u64);
            e.f64(*eps);
        }
        Op::BatchNorm { eps } => {
            e.u8(21);
            e.f64(*eps);
        }
        Op::Gelu { tanh_approx } => {
            e.u8(22);
            e.bool(*tanh_approx);
        }
        // Tags 40..: ops added for ONNX import (other additions take other ranges).
        Op::Cumulative { op, axis, exclusive, reverse } => {
            e.u8(40);
            e.u8(match op {
                CumulativeOp::Sum => 0,
                CumulativeOp::Prod => 1,
            });
            e.u64(*axis as u64);
            e.bool(*exclusive);
            e.bool(*reverse);
        }
        Op::TopK { axis, k, largest, sorted, output } => {
            e.u8(41);
            e.u64(*axis as u64);
            e.u64(*k as u64);
            e.bool(*largest);
            e.bool(*sorted);
            e.u8(match output {
                TopKOutput::Values => 0,
                TopKOutput::Indices => 1,
            });
        }
        Op::GatherElements { axis } => {
            e.u8(42);
            e.u64(*axis as u64);
        }
        Op::ScatterElements { axis, reduction } => {
            e.u8(43);
            e.u64(*axis as u64);
            e.u8(scatter_tag(*reduction));
        }
        Op::GatherNd { batch_dims } => {
            e.u8(44);
            e.u64(*batch_dims as u64);
        }
        Op::ScatterNd { reduction } => {
            e.u8(45);
            e.u8(scatter_tag(*reduction));
        }
        Op::Attention { causal, scale } => {
            e.u8(23);
            e.bool(*causal);
            match scale {
                None => e.u8(0),
                Some(s) => {
                    e.u8(1);
                    e.f64(*s);
                }
            }
        }
        // Tags 60+ are kept apart from the ops other helpers add in parallel.
        Op::Resize(a) => {
            e.u8(60);
            e.usizes(&a.out_shape);
            e.u64(a.scales.len() as u64);
            for &sc in &a.scales {
                e.f64(sc);
            }
            e.u8(a.mode as u8);
            match &a.coord {
                crate::ResizeCoord::HalfPixel => e.u8(0),
                crate::ResizeCoord::HalfPixelSymmetric => e.u8(1),
                crate::ResizeCoord::PytorchHalfPixel => e.u8(2),
                crate::ResizeCoord::AlignCorners => e.u8(3),
                crate::ResizeCoord::Asymmetric => e.u8(4),
                crate::ResizeCoord::TfCropAndResize { roi, extrapolation } => {
                    e.u8(5);
                    e.u64(roi.len() as u64);
                    for &(start, end) in roi {
                        e.f64(start);
                        e.f64(end);
                    }
                    e.f64(*extrapolation);
                }
            }
            e.u8(a.nearest as u8);
            e.f64(a.cubic_a);
            e.bool(a.exclude_outside);
            e.bool(a.antialias);
        }
        Op::ConvTranspose2d(a) => {
            e.u8(61);
            e.usizes(&a.stride);
            e.usizes(&a.padding);
            e.usizes(&a.output_padding);
            e.usizes(&a.dilation);
            e.u64(a.groups as u64);
        }
        Op::GridSample(a) => {
            e.u8(62);
            e.u8(a.mode as u8);
            e.u8(a.padding as u8);
            e.bool(a.align_corners);
        }
        Op::EncodeLowp { to, saturate } => {
            e.u8(200);
            e.bytes(to.name().as_bytes());
            e.bool(*saturate);
        }
        Op::DecodeLowp { from } => {
            e.u8(201);
            e.bytes(from.name().as_bytes());
        }
    }
}

fn scatter_tag(r: ScatterReduction) -> u8 {
    match r {
        ScatterReduction::None => 0,
        ScatterReduction::Add => 1,
        ScatterReduction::Mul => 2,
        ScatterReduction::Max => 3,
        ScatterReduction::Min => 4,
    }
}

fn unary_tag(u: UnaryOp) -> u8 {
    use UnaryOp::*;
    match u {
        Neg => 0,
        Abs => 1,
        Sign => 2,
        Exp => 3,
        Log => 4,
        Sqrt => 5,
        Rsqrt => 6,
        Reciprocal => 7,
        Sin => 8,
        Cos => 9,
        Tan => 10,
        Asin => 11,
        Acos => 12,
        Atan => 13,
        Sinh => 14,
        Cosh => 15,
        Tanh => 16,
        Asinh => 17,
        Acosh => 18,
        Atanh => 19,
        Sigmoid => 20,
        Relu => 21,
        Erf => 22,
        Floor => 23,
        Ceil => 24,
        Round => 25,
        Not => 26,
        IsNan => 27,
        IsInf => 28,
        Erfc => 29,
    }
}

fn binary_tag(b: BinaryOp) -> u8 {
    use BinaryOp::*;
    match b {
        Add => 0,
        Sub => 1,
        Mul => 2,
        Div => 3,
        Rem => 4,
        Pow => 5,
        Max => 6,
        Min => 7,
        Eq => 8,
        Ne => 9,
        Lt => 10,
        Le => 11,
        Gt => 12,
        Ge => 13,
        And => 14,
        Or => 15,
        Xor => 16,
        Mod => 17,
        Shl => 18,
        Shr => 19,
    }
}
