//! `kiln::compile` on Rust functions: compiled equals eager (zoo models, functions with graph
//! breaks), guards and recompiles (none on repeated calls, exactly one on a dtype change, none on
//! a batch change with dynamic dims), the recompile limit's eager fallback, graph breaks counted
//! with their reason and location, and `fullgraph` errors that name the break.

mod support;

use support::capture::{assert_close, rand};
use kiln::capture::{CaptureOptions, DimGuard};
use kiln::compile::{CompileOptions, Mode};
use kiln::nn::{Linear, VarBuilder};
use kiln::zoo::{Model, bert, gpt2, resnet};
use kiln::{DType, Result, Tensor};
use std::cell::Cell;

/// Compiled mode with a cache directory of this test process.
fn opts() -> CaptureOptions {
    let dir = std::env::temp_dir().join(format!("kiln-test-capture-{}", std::process::id()));
    let compile = CompileOptions { mode: Mode::Default, cache_dir: Some(dir), ..CompileOptions::default() };
    CaptureOptions { compile, ..CaptureOptions::default() }
}


#[test]
fn warm_calls_run_the_cached_plan_without_the_function() {
    let runs = Cell::new(0);
    let f = |x: &Tensor| -> Result<Tensor> {
        runs.set(runs.get() + 1);
        x.mul_scalar(2.0)?.relu()?.add_scalar(1.0)
    };
    let fast = kiln::compile(f).options(opts());
    for seed in 0..4 {
        let x = rand(&[3, 5], seed);
        let want = f(&x).unwrap();
        assert_close(&fast.call(&x).unwrap(), &want, 1e-6);
    }
    // 4 eager reference calls + 1 capture: the 3 warm calls did not run the closure.
    assert_eq!(runs.get(), 5);
    let e = fast.explain();
    assert_eq!((e.calls, e.recompiles.len(), e.graphs.len(), e.entries.len(), e.break_count()), (4, 0, 1, 1, 0));
    assert_eq!(e.graphs[0].ops, 3);
    assert!(!e.entries[0].reruns);
    assert_eq!(e.entries[0].guard.inputs[0].dims, vec![DimGuard::Exact(3), DimGuard::Exact(5)]);
    assert_eq!(e.entries[0].guard.inputs[0].dtype, DType::F32);
}

#[test]
fn a_dtype_change_recompiles_exactly_once() {
    let f = |x: &Tensor| x.exp()?.add(x);
    let fast = kiln::compile(f).options(opts());
    for (i, dtype) in [DType::F32, DType::F32, DType::F64, DType::F64, DType::F32].into_iter().enumerate() {
        let x = rand(&[6], i as u64).to_dtype(dtype).unwrap();
        assert_close(&fast.call(&x).unwrap(), &f(&x).unwrap(), 1e-6);
    }
    let e = fast.explain();
    assert_eq!(fast.recompiles(), 1, "{e}");
    assert_eq!(e.recompiles[0], "input 0: dtype f64 (expected f32)");
    assert_eq!((e.entries.len(), e.graphs.len()), (2, 2));
}

#[test]
fn a_batch_change_with_dynamic_dims_does_not_recompile() {
    let lin = Linear::new(VarBuilder::random(3, DType::F32), 4, 3, true).unwrap();
    let fast = kiln::compile_module(&lin).options(opts()).dynamic(true);
    for (i, b) in [2, 3, 5, 3, 2].into_iter().enumerate() {
        let x = rand(&[b, 4], 10 + i as u64);
        assert_close(&fast.call(&x).unwrap(), &lin.forward(&x).unwrap(), 1e-5);
    }
    let e = fast.explain();
    assert_eq!(e.recompiles.len(), 0, "{e}");
    // One entry accepts every size; every batch ran on its size-generic kernels (none was
    // compiled on its own); the feature dim, fixed by the weight, is not one of their sizes.
    assert_eq!((e.entries.len(), e.entries[0].sizes, e.specialisations), (1, 3, 0));
    match &e.entries[0].generic {
        Some(kiln::capture::GenericInfo::Built { symbols, sizes, .. }) => assert_eq!((symbols.as_str(), *sizes), ("s0 = input 0 dim 0", 3)),
        other => panic!("{other:?}"),
    }
    assert_eq!(e.entries[0].guard.inputs[0].dims, vec![DimGuard::Dynamic, DimGuard::Dynamic]);

    // Marking only the batch dim: a batch change is free, a feature change is a recompile.
    let fast = kiln::compile(|x: &Tensor| x.sum(&[1], false)).options(opts()).mark_dynamic(0, 0);
    for shape in [[2, 4], [7, 4], [7, 5]] {
        let x = rand(&shape, 1);
        assert_close(&fast.call(&x).unwrap(), &x.sum(&[1], false).unwrap(), 1e-5);
    }
    assert_eq!(fast.explain().recompiles, vec!["input 0 dim 1: size 5 (expected 4) (those dims are dynamic from now on)"]);
}

#[test]
fn a_dim_seen_with_two_sizes_becomes_dynamic() {
    let f = |x: &Tensor| x.softmax(-1);
    let fast = kiln::compile(f).options(opts());
    for b in [2, 3, 4, 9] {
        let x = rand(&[b, 8], b as u64);
        assert_close(&fast.call(&x).unwrap(), &f(&x).unwrap(), 1e-5);
    }
    let e = fast.explain();
    assert_eq!(e.recompiles, vec!["input 0 dim 0: size 3 (expected 2) (those dims are dynamic from now on)"], "{e}");
    assert_eq!(e.entries.len(), 1);
    assert_eq!(e.entries[0].guard.inputs[0].dims, vec![DimGuard::Dynamic, DimGuard::Exact(8)]);

    // With an f32 and an f64 entry, a new f32 batch generalises the f32 entry, not the newest.
    let fast = kiln::compile(f).options(opts());
    for (b, dtype) in [(2, DType::F32), (2, DType::F64), (3, DType::F32), (5, DType::F32), (2, DType::F64)] {
        let x = rand(&[b, 8], b as u64).to_dtype(dtype).unwrap();
        assert_close(&fast.call(&x).unwrap(), &f(&x).unwrap(), 1e-5);
    }
    let e = fast.explain();
    assert_eq!(e.recompiles.len(), 2, "{e}");
    assert!(e.recompiles[1].starts_with("input 0 dim 0: size 3 (expected 2) (those dims"), "{e}");
    assert_eq!((e.entries.len(), e.specialisations, e.graphs.len()), (2, 0, 4), "{e}");

    // dynamic(false): every new size is a recompile.
    let fast = kiln::compile(f).options(opts()).dynamic(false);
    for b in [2, 3, 4] {
        fast.call(&rand(&[b, 8], 0)).unwrap();
    }
    assert_eq!(fast.recompiles(), 2);
}

#[test]
fn past_the_recompile_limit_new_inputs_run_eagerly_and_correctly() {
    let runs = Cell::new(0);
    let f = |x: &Tensor| -> Result<Tensor> {
        runs.set(runs.get() + 1);
        x.tanh()?.mul(x)
    };
    let fast = kiln::compile(f).options(opts()).dynamic(false).recompile_limit(2);
    let xs: Vec<Tensor> = (1..=4).map(|n| rand(&[n], n as u64)).collect();
    let mut compiled_runs = 0;
    for x in xs.iter().chain(&xs) {
        let before = runs.get();
        let got = fast.call(x).unwrap();
        compiled_runs += runs.get() - before;
        assert_close(&got, &f(x).unwrap(), 1e-6);
    }
    let e = fast.explain();
    // Sizes 1 and 2 were compiled (one recompile); 3 and 4 ran eagerly, twice each.
    assert_eq!((e.entries.len(), e.recompiles.len(), e.eager_calls, e.graphs.len()), (2, 1, 4, 2), "{e}");
    // 2 captures + 4 eager calls ran `f`; the cached sizes did not run it again.
    assert_eq!(compiled_runs, 6);
}

#[test]
fn a_break_on_a_value_takes_both_branches_correctly() {
    let line = Cell::new(0);
    let f = |x: &Tensor| -> Result<Tensor> {
        let s = x.sum_all()?;
        let y = x.mul_scalar(3.0)?;
        let (v, l) = (s.item()?, line!());
        line.set(l);
        if v > 0.0 { y.add_scalar(v)?.relu() } else { y.neg()?.exp()?.mul(x) }
    };
    let fast = kiln::compile(f).options(opts());
    let pos = Tensor::from_vec(vec![1.0f32, 2.0, -0.5, 0.25], &[4]).unwrap();
    let neg = Tensor::from_vec(vec![-1.0f32, 0.5, -0.5, -0.25], &[4]).unwrap();
    for x in [&pos, &neg, &pos, &neg] {
        assert_close(&fast.call(x).unwrap(), &f(x).unwrap(), 1e-6);
    }
    let e = fast.explain();
    assert_eq!(e.recompiles.len(), 0, "{e}");
    // The segment before the break, and one per branch: the second visit of each compiled nothing.
    assert_eq!(e.graphs.len(), 3, "{e}");
    assert_eq!(e.breaks.len(), 1);
    let b = &e.breaks[0];
    assert_eq!((b.brk.op.as_str(), b.count, b.brk.cut), ("item", 4, true));
    assert!(b.brk.location.file().ends_with("capture.rs"), "{}", b.brk.location);
    assert_eq!(b.brk.location.line(), line.get());
    assert!(e.entries[0].reruns);
    let text = e.to_string();
    assert!(text.contains("graph breaks: 4") && text.contains(&format!("capture.rs:{}", line.get())), "{text}");
}

#[test]
fn values_alive_at_a_break_carry_into_the_next_segment() {
    let f = |x: &Tensor| -> Result<Tensor> {
        let h = x.exp()?;
        let g = h.add(x)?; // alive across the break, used after it
        let biggest = h.to_vec::<f32>()?.into_iter().fold(f32::MIN, f32::max);
        let t = if biggest > 1.5 { g.mul_scalar(2.0)?.sub(&h)? } else { g.sub(&h)?.neg()? };
        let positive = t.gt(&Tensor::scalar(0.0f32))?.to_dtype(DType::F32)?.sum_all()?.item()?;
        if positive >= 3.0 { t.add(x) } else { t.sub(x) }
    };
    let fast = kiln::compile(f).options(opts());
    let a = Tensor::from_vec(vec![0.1f32, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3]).unwrap();
    let b = Tensor::from_vec(vec![-1.0f32, -2.0, -3.0, -0.1, -0.2, -0.3], &[2, 3]).unwrap();
    for x in [&a, &b, &a, &b] {
        assert_close(&fast.call(x).unwrap(), &f(x).unwrap(), 1e-5);
    }
    let e = fast.explain();
    let ops: Vec<&str> = e.breaks.iter().map(|b| b.brk.op.as_str()).collect();
    assert_eq!(ops, ["to_vec", "item"]);
    assert_eq!(e.break_count(), 8);
    // exp+add; each branch up to the count; the last add (shared by both paths). Later calls
    // found every segment in the cache.
    assert_eq!((e.graphs.len(), e.recompiles.len()), (4, 0), "{e}");
    // The second segment reads g and h (computed by the first); the last reads t and x.
    assert_eq!((e.graphs[1].inputs, e.graphs[2].inputs, e.graphs[2].ops), (2, 2, 1), "{e}");
}

#[test]
fn fullgraph_turns_a_break_into_an_error_that_names_it() {
    let line = Cell::new(0);
    let f = |x: &Tensor| -> Result<Tensor> {
        let m = x.max(&[], false)?;
        line.set(line!() + 1);
        let v = m.item()?;
        x.add_scalar(v)
    };
    let fast = kiln::compile(f).options(opts()).fullgraph(true);
    let err = fast.call(&rand(&[3], 1)).unwrap_err().to_string();
    let at = format!("capture.rs:{}", line.get());
    assert!(err.contains("fullgraph") && err.contains("item()") && err.contains(&at), "{err}");
    // Without fullgraph the same function runs, with one break.
    let fast = kiln::compile(f).options(opts());
    let x = rand(&[3], 2);
    assert_close(&fast.call(&x).unwrap(), &f(&x).unwrap(), 1e-6);
    assert_eq!(fast.explain().break_count(), 1);
    // A function without breaks compiles under fullgraph.
    let fast = kiln::compile(|x: &Tensor| x.sigmoid()).options(opts()).fullgraph(true);
    assert_close(&fast.call(&x).unwrap(), &x.sigmoid().unwrap(), 1e-6);
}

#[test]
fn several_inputs_and_outputs() {
    let f = |xs: &[Tensor]| -> Result<Vec<Tensor>> { Ok(vec![xs[0].matmul(&xs[1])?, xs[0].add(&xs[2])?.gelu()?]) };
    let fast = kiln::compile_many(f).options(opts());
    for seed in 0..2 {
        let xs = [rand(&[3, 4], seed), rand(&[4, 2], seed + 10), rand(&[4], seed + 20)];
        let (got, want) = (fast.call_many(&xs).unwrap(), f(&xs).unwrap());
        assert_eq!(got.len(), 2);
        for (g, w) in got.iter().zip(&want) {
            assert_close(g, w, 1e-5);
        }
    }
    assert_eq!((fast.recompiles(), fast.explain().graphs.len()), (0, 1));
}

fn tiny_resnet() -> resnet::ResNetConfig {
    resnet::ResNetConfig { block: resnet::BlockKind::Bottleneck, layers: [1, 1, 1, 1], base_width: 8, num_classes: 7, image_size: 32 }
}

/// Compiled `m.forward` equals eager on two different inputs of each of two batch sizes,
/// with the batch change handled by automatic dynamic dims (one recompile).
fn check_zoo(m: &dyn Model, inputs: impl Fn(usize, u64) -> Vec<Tensor>) {
    let fast = kiln::compile_many(|xs: &[Tensor]| m.forward(xs)).options(opts());
    for (batch, seed) in [(2, 1), (2, 2), (3, 3), (1, 4)] {
        let xs = inputs(batch, seed);
        let (got, want) = (fast.call_many(&xs).unwrap(), m.forward(&xs).unwrap());
        for (g, w) in got.iter().zip(&want) {
            assert_close(g, w, 1e-4);
        }
    }
    let e = fast.explain();
    assert_eq!((e.recompiles.len(), e.graphs.len(), e.specialisations, e.break_count()), (1, 3, 1, 0), "{}: {e}", m.name());
}

#[test]
fn zoo_models_compiled_equal_eager() {
    let rn = resnet::ResNet::new(VarBuilder::random(1, DType::F32), &tiny_resnet(), 2).unwrap();
    check_zoo(&rn, |b, s| vec![kiln::zoo::random_normal(&[b, 3, 32, 32], DType::F32, s).unwrap()]);
    let gpt = gpt2::Gpt2::new(VarBuilder::random(1, DType::F32), &gpt2::Gpt2Config::tiny(), 2, 5).unwrap();
    check_zoo(&gpt, |b, s| vec![kiln::zoo::random_ids(&[b, 5], 100, s).unwrap()]);
    let bert = bert::Bert::new(VarBuilder::random(1, DType::F32), &bert::BertConfig::tiny(), 2, 7).unwrap();
    check_zoo(&bert, |b, s| vec![kiln::zoo::random_ids(&[b, 7], 100, s).unwrap()]);
    // A zoo model as a Module.
    let fast = kiln::compile_module(&gpt).options(opts());
    let ids = kiln::zoo::random_ids(&[2, 5], 100, 9).unwrap();
    assert_close(&fast.call(&ids).unwrap(), &gpt.hidden_states(&ids).unwrap(), 1e-4);
}

#[test]
fn a_compiled_function_called_inside_another_is_traced_inline() {
    let inner = kiln::compile(|x: &Tensor| x.add_scalar(1.0)).options(opts());
    let outer = kiln::compile(|x: &Tensor| inner.call(&x.mul_scalar(2.0)?)?.relu()).options(opts());
    let x = rand(&[5], 3);
    assert_close(&outer.call(&x).unwrap(), &x.mul_scalar(2.0).unwrap().add_scalar(1.0).unwrap().relu().unwrap(), 1e-6);
    assert_eq!(outer.explain().graphs[0].ops, 3);
    assert_eq!(inner.explain().graphs.len(), 0);
}

#[test]
fn eager_mode_captures_and_runs_the_interpreter() {
    let fast = kiln::compile(|x: &Tensor| x.sqrt()?.log()).options(opts()).mode(Mode::Eager);
    let x = rand(&[4], 5).abs().unwrap().add_scalar(0.5).unwrap();
    let want = x.sqrt().unwrap().log().unwrap();
    assert_eq!(fast.call(&x).unwrap().to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    assert_eq!(fast.explain().graphs.len(), 1);
}

/// Collects `(thread, target, message)` of the events on the capture topics (what
/// `KILN_LOGS=recompiles,graph_breaks` prints). Installed as the global subscriber, once: a
/// scoped one races with other test threads over tracing's per-callsite interest cache.
#[derive(Default)]
struct Events(std::sync::Mutex<Vec<(std::thread::ThreadId, String, String)>>);

const TOPICS: [&str; 2] = ["kiln::recompiles", "kiln::graph_breaks"];

impl tracing::Subscriber for &'static Events {
    fn register_callsite(&self, meta: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        if TOPICS.contains(&meta.target()) { tracing::subscriber::Interest::always() } else { tracing::subscriber::Interest::never() }
    }
    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        TOPICS.contains(&meta.target())
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut m = Message(String::new());
        event.record(&mut m);
        let t = std::thread::current().id();
        self.0.lock().unwrap().push((t, event.metadata().target().to_string(), m.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn recompiles_breaks_and_the_limit_are_logged_on_their_topics() {
    static EVENTS: std::sync::OnceLock<Events> = std::sync::OnceLock::new();
    let events: &'static Events = EVENTS.get_or_init(Events::default);
    tracing::subscriber::set_global_default(events).unwrap();
    let fast = kiln::compile(|x: &Tensor| x.neg()).options(opts()).recompile_limit(2);
    for dtype in [DType::F32, DType::F64, DType::I32, DType::I64] {
        fast.call(&Tensor::ones(&[2], dtype)).unwrap();
    }
    let brk = kiln::compile(|x: &Tensor| x.add_scalar(x.sum_all()?.item()?)).options(opts());
    brk.call(&Tensor::ones(&[2], DType::F32)).unwrap();
    let me = std::thread::current().id();
    let got: Vec<(String, String)> =
        events.0.lock().unwrap().iter().filter(|e| e.0 == me).map(|e| (e.1.clone(), e.2.clone())).collect();
    let on = |target: &str| got.iter().filter(|(t, _)| t == target).map(|(_, m)| m.clone()).collect::<Vec<_>>();
    let recompiles = on("kiln::recompiles");
    assert_eq!(recompiles.len(), 2, "{recompiles:?}");
    assert!(recompiles[0].contains("recompiling") && recompiles[0].contains("input 0: dtype f64 (expected f32)"));
    // The limit warns once although two calls ran eagerly.
    assert!(recompiles[1].contains("recompile limit (2) reached"), "{recompiles:?}");
    let breaks = on("kiln::graph_breaks");
    assert_eq!(breaks.len(), 1);
    assert!(breaks[0].contains("item()") && breaks[0].contains("capture.rs:"), "{breaks:?}");
}

#[test]
fn a_compiled_function_can_be_shared_between_threads() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    let fast = kiln::compile(|x: &Tensor| x.add_scalar(2.0)).options(opts());
    send_sync(&fast);
    let x = rand(&[3], 1);
    let want = x.add_scalar(2.0).unwrap();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| assert_close(&fast.call(&x).unwrap(), &want, 1e-6));
        }
    });
    assert_eq!(fast.explain().calls, 2);
}
