//! Dynamic batching. Each model has one worker thread fed by a bounded queue: it takes the
//! first waiting request, then more until `max_batch` rows or `batch_timeout` after the first,
//! concatenates their inputs along dim 0, pads up to the next compiled batch size with zeros,
//! runs once and splits the outputs back per request. A batch that fails is retried one
//! request at a time, so a request that breaks a kernel fails alone (503) and the rest succeed.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use kiln::compile::Compiled;
use kiln_ir::{HostTensor, Storage};
use tokio::sync::oneshot;

use crate::error::{ServeError, ServeResult};
use crate::model::ModelDef;

/// A request waiting to run: its inputs (model order), rows (dim 0) and where to answer.
pub struct Job {
    /// Inputs in the model's order.
    pub inputs: Vec<HostTensor>,
    /// Dim 0 of the inputs.
    pub rows: usize,
    /// Where the outputs (or the failure) go.
    pub reply: oneshot::Sender<ServeResult<Vec<HostTensor>>>,
}

/// The batch sizes compiled for a model: powers of two below `max_batch`, and `max_batch`.
/// A batch of `n` rows runs in the plan of the smallest size `>= n`.
pub fn batch_sizes(max_batch: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::iter::successors(Some(1usize), |&b| b.checked_mul(2)).take_while(|&b| b < max_batch).collect();
    sizes.push(max_batch.max(1));
    sizes
}

/// Runs a plan, turning a panic inside kiln into an error (the server keeps serving).
pub fn run_guarded(plan: &Compiled, inputs: &[HostTensor]) -> ServeResult<Vec<HostTensor>> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| plan.run(inputs))) {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(ServeError::Unavailable(format!("running the model failed: {e}"))),
        Err(p) => {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            Err(ServeError::Unavailable(format!("running the model failed (internal error in kiln): {msg}")))
        }
    }
}

/// Concatenates tensors along dim 0 and appends `pad` rows of zeros.
fn concat_rows(parts: &[&HostTensor], pad: usize) -> ServeResult<HostTensor> {
    let first = parts.first().ok_or_else(|| ServeError::Internal("empty batch".into()))?;
    let dtype = first.dtype();
    let row_shape = &first.shape()[1..];
    let row_bytes = row_shape.iter().product::<usize>() * dtype.size_of();
    let mut rows = pad;
    let mut bytes = Vec::new();
    for p in parts {
        rows += p.shape()[0];
        bytes.extend_from_slice(&p.contiguous().storage.as_bytes());
    }
    bytes.resize(bytes.len() + pad * row_bytes, 0);
    let mut shape = vec![rows];
    shape.extend_from_slice(row_shape);
    let storage = Storage::from_le_bytes(dtype, &bytes).map_err(|e| ServeError::Internal(e.to_string()))?;
    HostTensor::new(storage, &shape).map_err(|e| ServeError::Internal(e.to_string()))
}

/// Rows `start..start + n` of `t` (dim 0) as a new tensor.
fn slice_rows(t: &HostTensor, start: usize, n: usize) -> ServeResult<HostTensor> {
    let shape = t.shape();
    let row_bytes = shape[1..].iter().product::<usize>() * t.dtype().size_of();
    let all = t.contiguous();
    let bytes = all.storage.as_bytes();
    let piece = bytes
        .get(start * row_bytes..(start + n) * row_bytes)
        .ok_or_else(|| ServeError::Internal(format!("output of shape {shape:?} has no rows {start}..{}", start + n)))?;
    let mut out_shape = vec![n];
    out_shape.extend_from_slice(&shape[1..]);
    let storage = Storage::from_le_bytes(t.dtype(), piece).map_err(|e| ServeError::Internal(e.to_string()))?;
    HostTensor::new(storage, &out_shape).map_err(|e| ServeError::Internal(e.to_string()))
}

/// Compiled plans by batch size, and how to run a batch of jobs on them.
pub struct Plans {
    /// Plans by batch size (one entry keyed 0 for a model that is not batchable).
    pub by_size: BTreeMap<usize, Compiled>,
}

impl Plans {
    /// Runs `jobs` together (padded to a compiled size) and answers each.
    fn run_batch(&self, def: &ModelDef, jobs: Vec<Job>, on_batch: &dyn Fn(usize)) {
        let jobs: Vec<Job> = jobs.into_iter().filter(|j| !j.reply.is_closed()).collect();
        if jobs.is_empty() {
            return;
        }
        if !def.batchable {
            for job in jobs {
                on_batch(1);
                let out = match self.by_size.values().next() {
                    Some(plan) => run_guarded(plan, &job.inputs),
                    None => Err(ServeError::Internal("no compiled plan".into())),
                };
                let _ = job.reply.send(out);
            }
            return;
        }
        let rows: usize = jobs.iter().map(|j| j.rows).sum();
        let result = self.run_rows(&jobs, rows);
        on_batch(rows);
        match result {
            Ok(outs) => {
                for (job, out) in jobs.into_iter().zip(outs) {
                    let _ = job.reply.send(Ok(out));
                }
            }
            Err(e) if jobs.len() == 1 => {
                for job in jobs {
                    let _ = job.reply.send(Err(e.clone()));
                }
            }
            Err(_) => {
                // One request may have broken the batch: run each alone so only it fails.
                for job in jobs {
                    let one = std::slice::from_ref(&job);
                    let out = self.run_rows(one, job.rows).map(|mut v| v.remove(0));
                    on_batch(job.rows);
                    let _ = job.reply.send(out);
                }
            }
        }
    }

    /// Concatenates the jobs' inputs, runs the smallest plan that fits, splits the outputs.
    fn run_rows(&self, jobs: &[Job], rows: usize) -> ServeResult<Vec<Vec<HostTensor>>> {
        let (&size, plan) = self
            .by_size
            .range(rows..)
            .next()
            .ok_or_else(|| ServeError::Internal(format!("no compiled plan for a batch of {rows}")))?;
        let inputs: Vec<HostTensor> = if jobs.len() == 1 && rows == size {
            jobs[0].inputs.clone()
        } else {
            (0..jobs[0].inputs.len())
                .map(|i| concat_rows(&jobs.iter().map(|j| &j.inputs[i]).collect::<Vec<_>>(), size - rows))
                .collect::<ServeResult<_>>()?
        };
        let outs = run_guarded(plan, &inputs)?;
        let mut per_job = Vec::with_capacity(jobs.len());
        let mut start = 0;
        for job in jobs {
            let mine = outs
                .iter()
                .map(|o| {
                    if o.shape().first() != Some(&size) {
                        return Err(ServeError::Internal(format!("output of shape {:?} does not lead with the batch {size}", o.shape())));
                    }
                    slice_rows(o, start, job.rows)
                })
                .collect::<ServeResult<Vec<_>>>()?;
            start += job.rows;
            per_job.push(mine);
        }
        Ok(per_job)
    }
}

/// The worker loop: collects batches from `rx` until every sender is gone.
/// `on_dequeue` is told of each job taken off the queue, `on_batch` of each run's rows.
pub fn serve_queue(
    def: &ModelDef,
    plans: &Plans,
    rx: &Receiver<Job>,
    max_batch: usize,
    timeout: Duration,
    on_dequeue: &dyn Fn(),
    on_batch: &dyn Fn(usize),
) {
    let max_rows = if def.batchable { max_batch.max(1) } else { 1 };
    let mut carry: Option<Job> = None;
    loop {
        let first = match carry.take() {
            Some(j) => j,
            None => match rx.recv() {
                Ok(j) => {
                    on_dequeue();
                    j
                }
                Err(_) => return,
            },
        };
        let mut rows = first.rows;
        let mut jobs = vec![first];
        let deadline = Instant::now() + timeout;
        while rows < max_rows {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = if left.is_zero() { rx.try_recv().map_err(|_| RecvTimeoutError::Timeout) } else { rx.recv_timeout(left) };
            match next {
                Ok(j) => {
                    on_dequeue();
                    if rows + j.rows > max_rows {
                        carry = Some(j);
                        break;
                    }
                    rows += j.rows;
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        plans.run_batch(def, jobs, on_batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_are_powers_of_two_up_to_the_max() {
        assert_eq!(batch_sizes(1), [1]);
        assert_eq!(batch_sizes(8), [1, 2, 4, 8]);
        assert_eq!(batch_sizes(6), [1, 2, 4, 6]);
    }

    #[test]
    fn rows_concatenate_pad_and_split_back() {
        let a = HostTensor::from_vec(vec![1.0f32, 2.0], &[1, 2]).unwrap();
        let b = HostTensor::from_vec(vec![3.0f32, 4.0, 5.0, 6.0], &[2, 2]).unwrap();
        let c = concat_rows(&[&a, &b], 1).unwrap();
        assert_eq!(c.shape(), [4, 2]);
        assert_eq!(c.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, 0.0]);
        assert_eq!(slice_rows(&c, 1, 2).unwrap().to_vec::<f32>().unwrap(), [3.0, 4.0, 5.0, 6.0]);
        assert!(slice_rows(&c, 3, 2).is_err());
    }
}
