//! Tracing: recorded node order, constants held once, errors for stale or foreign
//! placeholders, and the differential check that running the traced graph with the reference
//! interpreter gives the same numbers as eager execution (that part needs the CPU kernels).

use kiln::{DType, Graph, HostTensor, Tensor, trace};
use kiln_ir::Op;
use std::cell::RefCell;
use std::sync::Arc;

fn vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn rand(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(vals(shape.iter().product(), seed), shape).unwrap()
}

fn op_names(g: &Graph) -> Vec<String> {
    g.nodes.iter().map(|n| n.op.name()).collect()
}

struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl Mlp {
    fn new() -> Mlp {
        Mlp { w1: rand(&[8, 4], 1), b1: rand(&[8], 2), w2: rand(&[3, 8], 3), b2: rand(&[3], 4) }
    }

    fn forward(&self, x: &Tensor) -> kiln::Result<Tensor> {
        x.linear(&self.w1, Some(&self.b1))?.gelu()?.linear(&self.w2, Some(&self.b2))?.softmax(-1)
    }
}

#[test]
fn mlp_trace_records_ops_in_order() {
    let m = Mlp::new();
    let g = trace(&[("x", DType::F32, &[2, 4])], |xs| Ok(vec![m.forward(&xs[0])?])).unwrap();
    assert_eq!(
        op_names(&g),
        [
            "input", "const", "permute", "matmul", "const", "add", "gelu", "const", "permute", "matmul", "const",
            "add", "softmax"
        ]
    );
    assert_eq!(g.inputs.len(), 1);
    assert_eq!(g.outputs.len(), 1);
    let out = g.node(g.outputs[0]);
    assert_eq!(out.op, Op::Softmax { axis: 1 });
    assert_eq!(out.ty.to_string(), "f32[2, 3]");
    assert_eq!(g.consts.len(), 4);
    assert_eq!(g.const_numel(), 32 + 8 + 24 + 3);
    // Constants share the weights' storage: nothing was copied.
    let w1 = m.w1.to_host().unwrap();
    assert!(g.consts.iter().any(|c| Arc::ptr_eq(&c.storage, &w1.storage)));
    assert!(matches!(g.node(kiln_ir::NodeId(1)).op, Op::Constant(_)));
}

#[test]
fn a_weight_used_twice_is_one_constant() {
    let w = rand(&[4, 4], 5);
    let g = trace(&[("x", DType::F32, &[3, 4])], |xs| {
        let h = xs[0].linear(&w, None)?.relu()?;
        Ok(vec![h.linear(&w, None)?.add(&w.sum(&[0], false)?)?])
    })
    .unwrap();
    assert_eq!(g.consts.len(), 1);
    let consts = g.nodes.iter().filter(|n| matches!(n.op, Op::Constant(_))).count();
    assert_eq!(consts, 1);
}

#[test]
fn eager_views_of_a_weight_share_its_constant() {
    let h = HostTensor::from_vec(vals(12, 6), &[3, 4]).unwrap();
    let w = Tensor::from_host(h.clone());
    // Views made in eager mode before the trace: a transpose and a broadcast.
    let wt = Tensor::from_host(h.with_layout(h.layout.permute(&[1, 0]).unwrap()));
    let b = HostTensor::from_vec(vals(4, 7), &[4]).unwrap();
    let bb = Tensor::from_host(b.with_layout(b.layout.broadcast_to(&[3, 4]).unwrap()));
    let b1 = Tensor::from_host(b.with_layout(b.layout.reshape(&[1, 4]).unwrap()));
    // A slice with an offset can only be held as its own dense copy.
    let narrow = Tensor::from_host(h.with_layout(h.layout.slice(0, 1, 3, 1).unwrap()));
    let g = trace(&[("x", DType::F32, &[3, 3])], |xs| {
        let a = xs[0].matmul(&w)?; // [3, 4]
        let c = a.matmul(&wt)?; // [3, 3]
        let d = a.add(&bb)?.add(&b1)?.add(&Tensor::from_host(b.clone()))?;
        let e = narrow.sum_all()?;
        Ok(vec![c, d, e])
    })
    .unwrap();
    // w (12) + b (4) + the narrow copy (8): each storage held once.
    assert_eq!(g.consts.len(), 3, "{:?}", op_names(&g));
    assert_eq!(g.const_numel(), 12 + 4 + 8);
    let names = op_names(&g);
    assert!(names.contains(&"permute".to_string()) && names.contains(&"expand".to_string()), "{names:?}");
    for out in &g.outputs {
        assert!(g.ty(*out).shape.is_fixed());
    }
    assert_eq!(g.ty(g.outputs[0]).to_string(), "f32[3, 3]");
    assert_eq!(g.ty(g.outputs[1]).to_string(), "f32[3, 4]");
}

#[test]
fn traced_shapes_follow_inference() {
    let g = trace(&[("x", DType::F32, &[2, 3, 4]), ("ids", DType::I64, &[5])], |xs| {
        let x = &xs[0];
        let r = x.reshape(&[-1, 4])?;
        assert_eq!(r.shape(), &[6, 4]);
        assert!(r.is_traced());
        let p = x.permute(&[2, 0, 1])?;
        assert_eq!(p.shape(), &[4, 2, 3]);
        let s = x.sum(&[-1], true)?;
        assert_eq!(s.shape(), &[2, 3, 1]);
        let e = Tensor::embedding(&rand(&[10, 4], 8), &xs[1])?;
        assert_eq!(e.shape(), &[5, 4]);
        let parts = x.chunk(2, 1)?;
        assert_eq!(parts.iter().map(|t| t.dims()).collect::<Vec<_>>(), vec![vec![2, 2, 4], vec![2, 1, 4]]);
        assert!(x.contiguous()?.is_traced());
        let err = x.add(&Tensor::zeros(&[5], DType::F32)).unwrap_err();
        assert!(err.to_string().contains("add") && err.to_string().contains("[2, 3, 4]"), "{err}");
        Ok(vec![r, e])
    })
    .unwrap();
    assert_eq!(g.inputs.len(), 2);
    assert_eq!(g.ty(g.outputs[1]).dtype, DType::F32);
}

#[test]
fn ops_in_a_trace_are_counted() {
    let before = kiln::dispatch::op_count();
    trace(&[("x", DType::F32, &[2])], |xs| Ok(vec![xs[0].exp()?.neg()?])).unwrap();
    assert_eq!(kiln::dispatch::op_count() - before, 2);
}

#[test]
fn concrete_outputs_become_constants() {
    let c = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let g = trace(&[], |_| Ok(vec![c.clone()])).unwrap();
    assert_eq!(op_names(&g), ["const"]);
    assert_eq!(g.outputs.len(), 1);
    let out = kiln_cpu::run(&g, &[]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), [1.0, 2.0]);
}

#[test]
fn duplicate_input_names_are_refused() {
    let err = trace(&[("x", DType::F32, &[1]), ("x", DType::F32, &[1])], |xs| Ok(xs.to_vec())).unwrap_err();
    assert!(err.to_string().contains("'x'"), "{err}");
}

#[test]
fn placeholders_of_a_finished_trace_are_refused() {
    let stash = RefCell::new(None);
    trace(&[("x", DType::F32, &[2])], |xs| {
        *stash.borrow_mut() = Some(xs[0].clone());
        Ok(vec![xs[0].clone()])
    })
    .unwrap();
    let old = stash.borrow().clone().unwrap();
    let err = old.exp().unwrap_err();
    assert!(err.to_string().contains("exp") && err.to_string().contains("finished"), "{err}");
    // ... and inside a later trace too.
    let err = trace(&[("y", DType::F32, &[2])], |ys| Ok(vec![ys[0].add(&old)?])).unwrap_err();
    assert!(err.to_string().contains("add") && err.to_string().contains("another or a finished trace"), "{err}");
    // Returned as an output of a later trace.
    assert!(trace(&[], |_| Ok(vec![old.clone()])).is_err());
}

#[test]
fn nested_traces_are_separate() {
    let outer = trace(&[("x", DType::F32, &[2])], |xs| {
        let a = xs[0].exp()?;
        let inner = trace(&[("y", DType::F32, &[2])], |ys| {
            // The outer trace's placeholder does not belong here.
            assert!(ys[0].add(&a).is_err());
            Ok(vec![ys[0].neg()?])
        })?;
        assert_eq!(op_names(&inner), ["input", "neg"]);
        // The outer trace records again once the inner one is over.
        Ok(vec![a.sqrt()?])
    })
    .unwrap();
    assert_eq!(op_names(&outer), ["input", "exp", "sqrt"]);
}

#[test]
fn traces_are_per_thread() {
    trace(&[("x", DType::F32, &[2])], |_| {
        // Another thread is not tracing: its ops run eagerly (here: a result or a kernel error,
        // never a placeholder).
        let traced = std::thread::spawn(|| Tensor::zeros(&[2], DType::F32).exp().map(|t| t.is_traced()))
            .join()
            .unwrap();
        assert_ne!(traced, Ok(true));
        Ok(vec![])
    })
    .unwrap();
}

#[test]
fn a_panicking_closure_ends_its_trace() {
    let stash = std::sync::Mutex::new(None);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = trace(&[("x", DType::F32, &[2])], |xs| -> kiln::Result<Vec<Tensor>> {
            *stash.lock().unwrap() = Some(xs[0].clone());
            panic!("model bug");
        });
    }));
    assert!(r.is_err());
    let old = stash.lock().unwrap().clone().unwrap();
    // Had the trace stayed active, this would have been recorded into it.
    assert!(old.exp().unwrap_err().to_string().contains("finished"));
}

#[test]
fn errors_inside_the_closure_are_returned() {
    let err = trace(&[("x", DType::F32, &[2, 3])], |xs| Ok(vec![xs[0].matmul(&xs[0])?])).unwrap_err();
    assert!(err.to_string().contains("matmul"), "{err}");
    // The failed trace is gone: a fresh one starts clean.
    let g = trace(&[("x", DType::F32, &[2])], |xs| Ok(vec![xs[0].clone()])).unwrap();
    assert_eq!(op_names(&g), ["input"]);
}

fn assert_close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

#[test]
fn traced_mlp_runs_like_eager() {
    let m = Mlp::new();
    let x = rand(&[2, 4], 9);
    let eager = m.forward(&x).unwrap().to_vec::<f32>().unwrap();
    let g = trace(&[("x", DType::F32, &[2, 4])], |xs| Ok(vec![m.forward(&xs[0])?])).unwrap();
    let out = kiln_cpu::run(&g, &[x.to_host().unwrap()]).unwrap();
    assert_close(&out[0].to_vec::<f32>().unwrap(), &eager);
    // Rows of a softmax sum to one.
    assert!((eager[..3].iter().sum::<f32>() - 1.0).abs() < 1e-5);
}

#[test]
fn traced_views_and_shared_weights_run_like_eager() {
    let h = HostTensor::from_vec(vals(12, 10), &[3, 4]).unwrap();
    let w = Tensor::from_host(h.clone());
    let wt = Tensor::from_host(h.with_layout(h.layout.permute(&[1, 0]).unwrap()));
    let b = HostTensor::from_vec(vals(4, 11), &[4]).unwrap();
    let bb = Tensor::from_host(b.with_layout(b.layout.broadcast_to(&[2, 4]).unwrap()));
    let narrow = Tensor::from_host(h.with_layout(h.layout.slice(1, 1, 4, 2).unwrap()));
    let f = |x: &Tensor| -> kiln::Result<Vec<Tensor>> {
        let a = x.matmul(&w)?.add(&bb)?; // [2, 4]
        let c = a.matmul(&wt)?.tanh()?; // [2, 3]
        let d = c.matmul(&narrow)?.sum(&[-1], true)?; // [2, 1]
        let ids = Tensor::from_vec(vec![2i64, 0], &[2]).unwrap();
        let e = Tensor::embedding(&w, &ids)?.mul(&a)?.layer_norm(1, None, Some(&Tensor::from_host(b.clone())), 1e-5)?;
        Ok(vec![c, d, e])
    };
    let x = rand(&[2, 3], 12);
    let eager: Vec<Vec<f32>> = f(&x).unwrap().iter().map(|t| t.to_vec::<f32>().unwrap()).collect();
    let g = trace(&[("x", DType::F32, &[2, 3])], |xs| f(&xs[0])).unwrap();
    let outs = kiln_cpu::run(&g, &[x.to_host().unwrap()]).unwrap();
    for (o, e) in outs.iter().zip(&eager) {
        assert_close(&o.to_vec::<f32>().unwrap(), e);
    }
}
