//! Common subexpression elimination: two nodes with the same op (attributes compared with
//! `PartialEq`) on the same inputs compute the same value, so the second reuses the first.
//! Small constants with equal dtype, shape and bits are merged too (big ones are compared only
//! by identity, which tracing already shares).

use super::Pass;
use crate::rewrite::{Rewrite, Step};
use kiln_ir::{Graph, NodeId, Op, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// Constants up to this many elements are compared by contents.
const SMALL_CONST: usize = 1024;

/// Merges identical nodes.
pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        // (op name, new inputs) -> new nodes with that key; the op itself is compared on a hit.
        let mut seen: HashMap<(String, Vec<NodeId>), Vec<NodeId>> = HashMap::new();
        // Constant contents (dtype, shape, bytes) -> the new node holding them.
        let mut consts: HashMap<(kiln_ir::DType, Vec<usize>, Vec<u8>), NodeId> = HashMap::new();
        // Shared tensors (by address) -> the new node holding them.
        let mut shared: HashMap<usize, NodeId> = HashMap::new();
        Rewrite::new(graph)?.run(|rw, old, node| {
            if let Op::Constant(c) = node.op {
                let Some(t) = rw.src().consts.get(c.0 as usize) else {
                    return Ok(Step::Copy);
                };
                let addr = Arc::as_ptr(t) as usize;
                if let Some(&id) = shared.get(&addr) {
                    return Ok(Step::Replace(id));
                }
                let key = (t.numel() <= SMALL_CONST).then(|| {
                    (
                        t.dtype(),
                        t.shape().to_vec(),
                        t.storage.as_bytes().into_owned(),
                    )
                });
                if let Some(id) = key.as_ref().and_then(|k| consts.get(k)) {
                    return Ok(Step::Replace(*id));
                }
                let id = rw.copy(old)?;
                shared.insert(addr, id);
                if let Some(k) = key {
                    consts.insert(k, id);
                }
                return Ok(Step::Replace(id));
            }
            let args = rw.args(node)?;
            let key = (node.op.name(), args.clone());
            if let Some(prev) = seen.get(&key)
                && let Some(&hit) = prev.iter().find(|&&p| rw.graph().node(p).op == node.op)
            {
                return Ok(Step::Replace(hit));
            }
            let id = rw.add(node.op.clone(), &args)?;
            seen.entry(key).or_default().push(id);
            Ok(Step::Replace(id))
        })
    }
}
