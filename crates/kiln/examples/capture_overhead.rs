//! Measures `kiln::compile` on Rust functions:
//! 1. warm-call overhead: `x + 1` on `[4]` called through the compiled function vs the same
//!    graph's `Compiled::run` directly (medians of many calls);
//! 2. capture (trace) time alone for resnet50 and gpt2 at batch 1 (gpt2: sequence 128).
//!
//!     cargo run --release -p kiln --example capture_overhead

use kiln::compile::{CompileOptions, Mode, compile};
use kiln::zoo::{self, ModelConfig};
use kiln::{DType, Result, Tensor};
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median time of `f` over `n` calls (after 100 warm-up calls).
fn time_calls(n: usize, mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    for _ in 0..100 {
        f()?;
    }
    let mut ts = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f()?;
        ts.push(t.elapsed());
    }
    Ok(median(ts))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() -> Result<()> {
    let n = 20_000;
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4])?;
    let f = |x: &Tensor| x.add_scalar(1.0);
    for mode in [Mode::Default, Mode::Eager] {
        let fast = kiln::compile(f).mode(mode);
        fast.call(&x)?;
        let g = kiln::trace(&[("x", DType::F32, &[4])], |xs| Ok(vec![f(&xs[0])?]))?;
        let plan = compile(&g, &[vec![4]], &CompileOptions { mode, ..CompileOptions::default() })?;
        let hx = [x.to_host()?];
        let direct = time_calls(n, || plan.run(&hx).map(drop))?;
        let wrapped = time_calls(n, || fast.call(&x).map(drop))?;
        let eager = time_calls(n, || f(&x).map(drop))?;
        println!(
            "x+1 on [4], mode {mode}: compiled fn {:.2} us, Compiled::run {:.2} us, overhead {:.2} us (eager op {:.2} us); recompiles {}",
            us(wrapped),
            us(direct),
            us(wrapped) - us(direct),
            us(eager),
            fast.recompiles()
        );
    }

    for name in ["resnet50", "gpt2"] {
        let m = zoo::build(name, &ModelConfig::default())?;
        let xs = m.example_inputs(0)?;
        let trace = (0..3)
            .map(|_| {
                let t = Instant::now();
                zoo::trace_model(m.as_ref()).map(|_| t.elapsed())
            })
            .collect::<Result<Vec<_>>>()?;
        // The capture's own trace time (on the first call; eager mode, so no C compile).
        let fast = kiln::compile_many(|xs: &[Tensor]| m.forward(xs)).mode(Mode::Eager);
        fast.call_many(&xs)?;
        let e = fast.explain();
        println!(
            "{name}: kiln::trace {:.1} ms (min of 3), capture trace on first call {:.1} ms, {} ops",
            trace.iter().min().copied().unwrap_or_default().as_secs_f64() * 1e3,
            e.trace_time.as_secs_f64() * 1e3,
            e.graphs.first().map(|g| g.ops).unwrap_or(0)
        );
    }
    Ok(())
}
