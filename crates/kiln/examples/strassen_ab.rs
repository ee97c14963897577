//! Compares a model's compiled forward with its constant-weight products by Strassen's
//! algorithm against the plain GEMM, in one process, forwards alternated (the order swapped
//! every pair), so that a noisy machine's slow and fast phases fall on both forms alike.
//!
//!     cargo run --release -p kiln --example strassen_ab -- [MODEL] [PAIRS]
//!
//! MODEL is a zoo name (default `bert-base`), PAIRS the pairs of forwards timed (default 40).
//! Prints each form's median, the median of the per-pair ratios and how many pairs each won.

use kiln::compile::{CompileOptions, compile};
use kiln::zoo::{self, ModelConfig};
use kiln::{Error, Result};
use kiln_cpu::gemm::strassen;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "bert-base".into());
    let pairs: usize = match args.next() {
        Some(p) => p.parse().map_err(|_| Error::Value(format!("PAIRS must be a number, got {p}")))?,
        None => 40,
    };
    let m = zoo::build(&name, &ModelConfig::default())?;
    let graph = zoo::trace_model(m.as_ref())?;
    let inputs: Vec<_> = m.example_inputs(0)?.iter().map(|t| t.to_host()).collect::<Result<_>>()?;
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
    // The form is fixed when a step packs its weights, on its first run.
    let mut forms = Vec::new();
    for on in [false, true] {
        strassen::force(on);
        let c = compile(&graph, &shapes, &CompileOptions::default())?;
        let out = c.run(&inputs)?;
        forms.push((c, out));
    }
    let (plain, fast) = (&forms[0].0, &forms[1].0);
    let (a, b) = (forms[0].1[0].to_vec::<f32>()?, forms[1].1[0].to_vec::<f32>()?);
    let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    let time = |c: &kiln::compile::Compiled| -> Result<f64> {
        let t = Instant::now();
        c.run(&inputs)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    for _ in 0..3 {
        time(plain)?;
        time(fast)?;
    }
    let (mut tp, mut ts, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..pairs {
        let (p, s) = if i % 2 == 0 {
            let p = time(plain)?;
            (p, time(fast)?)
        } else {
            let s = time(fast)?;
            (time(plain)?, s)
        };
        tp.push(p);
        ts.push(s);
        ratios.push(s / p);
    }
    let wins = ratios.iter().filter(|&&r| r < 1.0).count();
    println!(
        "{name}, {pairs} pairs on {} threads: plain {:.2} ms, strassen {:.2} ms; per-pair ratio median {:.3}, strassen faster in {wins}; largest difference of the first output {diff:e}",
        rayon::current_num_threads(),
        median(tp),
        median(ts),
        median(ratios),
    );
    Ok(())
}
