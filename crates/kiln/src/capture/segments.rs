//! Captured graphs (whole functions, or the segments between graph breaks), cached per
//! function by structural hash, so a function re-run because of its breaks only compiles the
//! segments it has not seen (a branch not taken before, new input sizes).
//!
//! The key is [`kiln_ir::structural_hash`] of the graph with each large constant replaced by the
//! hash of its contents; that hash is remembered per storage (a model's weights are hashed once
//! per function, not per call), and the memo holds the storage so its address cannot be reused.

use super::Shared;
use super::explain::GraphInfo;
use crate::compile::{Compiled, Mode, compile};
use crate::trace::Segment;
use kiln_ir::{Graph, HostTensor, Result, Storage, structural_hash};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Constants smaller than this are hashed as they are (no memo).
const MEMO_BYTES: usize = 4096;

/// A function's compiled graphs.
#[derive(Default)]
pub(crate) struct SegmentCache {
    compiled: HashMap<[u8; 32], Arc<Compiled>>,
    /// Content hash of large constants, by storage address and dims.
    memo: HashMap<(usize, Vec<usize>), (Arc<Storage>, [u8; 32])>,
    /// One entry per graph compiled, in order.
    pub infos: Vec<GraphInfo>,
}

impl SegmentCache {
    /// The cache key of `graph`.
    fn key(&mut self, graph: &Graph) -> [u8; 32] {
        // Storage only the memo holds belongs to no live tensor or plan: forget it.
        self.memo.retain(|_, (s, _)| Arc::strong_count(s) > 1);
        let mut proxy = graph.clone();
        for c in &mut proxy.consts {
            let bytes = c.numel() * c.dtype().size_of();
            if bytes < MEMO_BYTES {
                continue;
            }
            let k = (Arc::as_ptr(&c.storage) as usize, c.shape().to_vec());
            let (_, h) = self.memo.entry(k).or_insert_with(|| (c.storage.clone(), content_hash(c)));
            let words: Vec<i64> = h.chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default())).collect();
            *c = Arc::new(HostTensor::from_vec(words, &[4]).expect("4 words"));
        }
        structural_hash(&proxy)
    }
}

/// The hash of one constant's dtype, dims and contents.
fn content_hash(c: &Arc<HostTensor>) -> [u8; 32] {
    let mut g = Graph::new();
    let n = g.constant_shared(c.clone());
    g.output(n);
    structural_hash(&g)
}

/// Runs `seg` through its compiled graph (compiling it on first sight); returns the outputs and
/// the compiled graph. `cached: false` compiles without a cache lookup (a whole function
/// without breaks: its plan is kept by its guards, and hashing its weights would only cost).
pub(crate) fn run(shared: &Shared, seg: &Segment, cached: bool) -> Result<(Vec<HostTensor>, Arc<Compiled>)> {
    let (key, found) = if cached {
        let mut st = shared.lock();
        let key = st.segments.key(&seg.graph);
        let found = st.segments.compiled.get(&key).cloned();
        (Some(key), found)
    } else {
        (None, None)
    };
    let compiled = match found {
        Some(c) => c,
        None => {
            let mut opts = shared.opts.compile.clone();
            if seg.graph.compute_nodes() == 0 {
                opts.mode = Mode::Eager;
            }
            let shapes: Vec<Vec<usize>> = seg.inputs.iter().map(|t| t.shape().to_vec()).collect();
            let start = Instant::now();
            let c = Arc::new(compile(&seg.graph, &shapes, &opts)?);
            let info = GraphInfo::new(&seg.graph, c.report(), start.elapsed());
            tracing::info!(target: "kiln::graph", "{}: compiled graph {}", shared.name, info);
            let mut st = shared.lock();
            st.segments.infos.push(info);
            match key {
                Some(k) => st.segments.compiled.entry(k).or_insert(c).clone(),
                None => c,
            }
        }
    };
    Ok((compiled.run(&seg.inputs)?, compiled))
}
