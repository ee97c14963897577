//! Measures dynamic dims on zoo models: what a new input size costs when it runs on the
//! size-generic library (trace, schedule and the check against the library's template; no C
//! compile) next to compiling it on its own (`dynamic(false)`: each size a recompile and a C
//! compile), each in a fresh disk cache. Also the one-time cost of fitting and compiling the
//! size-generic library, and the run time at the last size on either kind of kernels.
//!
//!     cargo run --release -p kiln --example dynamic_sizes [MODEL...]

use kiln::capture::{Explanation, GenericInfo};
use kiln::compile::{CompileOptions, Mode};
use kiln::zoo::{self, ModelConfig};
use kiln::{DType, Result, Tensor};

/// Timed runs of each kind of kernels.
const RUNS: usize = 10;

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Compile time of each graph after the first, in ms.
fn later_compiles(e: &Explanation) -> Vec<f64> {
    e.graphs.iter().skip(1).map(|g| ms(g.compile_time)).collect()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names = if args.is_empty() { vec!["resnet50".to_string(), "gpt2".to_string(), "bert-base".to_string()] } else { args };
    for name in names {
        let m = zoo::build(&name, &ModelConfig::default())?;
        let image = name.starts_with("resnet");
        // (batch, sequence) of each call: the batch changes, then (for text) the sequence too.
        let calls: &[(usize, usize)] = if image { &[(2, 0), (3, 0), (4, 0), (5, 0)] } else { &[(2, 32), (3, 32), (2, 48), (4, 64)] };
        let inputs = |b: usize, s: usize, seed: u64| -> Result<Vec<Tensor>> {
            Ok(vec![if image { zoo::random_normal(&[b, 3, 224, 224], DType::F32, seed)? } else { zoo::random_ids(&[b, s], 100, seed)? }])
        };
        let mut lines = Vec::new();
        let mut compiled = Vec::new();
        for dynamic in [true, false] {
            let dir = std::env::temp_dir().join(format!("kiln-dynamic-sizes-{}-{dynamic}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let opts = CompileOptions { mode: Mode::Default, cache_dir: Some(dir.clone()), ..CompileOptions::default() };
            let fast = kiln::compile_many(|xs: &[Tensor]| m.forward(xs)).compile_options(opts).dynamic(dynamic);
            let mut worst = 0f64;
            for (i, &(b, s)) in calls.iter().enumerate() {
                let xs = inputs(b, s, i as u64)?;
                let (got, want) = (fast.call_many(&xs)?, m.forward(&xs)?);
                for (g, w) in got.iter().zip(&want) {
                    let (g, w) = (g.to_f64_vec()?, w.to_f64_vec()?);
                    worst = g.iter().zip(&w).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(worst, f64::max);
                }
            }
            let e = fast.explain();
            let later = later_compiles(&e);
            let generic = match e.entries.first().and_then(|en| en.generic.clone()) {
                Some(GenericInfo::Built { symbols, build_time, .. }) => format!("library fit+compiled once in {:.0} ms ({symbols})", ms(build_time)),
                Some(GenericInfo::Refused(why)) => format!("no generic library: {why}"),
                None => "no generic library".to_string(),
            };
            lines.push(format!(
                "{name} dynamic={dynamic}: first call's graph {:.0} ms; later sizes {:?} ms (median {:.1}); recompiles {}, sizes compiled alone {}; {generic}; max rel. diff vs eager {worst:.1e}",
                e.graphs.first().map(|g| ms(g.compile_time)).unwrap_or(0.0),
                later.iter().map(|t| (t * 10.0).round() / 10.0).collect::<Vec<_>>(),
                median(&later),
                e.recompiles.len(),
                e.specialisations
            ));
            let _ = std::fs::remove_dir_all(&dir);
            compiled.push(fast);
        }
        // Run time at the last size on either kind of kernels, runs alternated (warm calls: the
        // plans only).
        let (b, s) = calls[calls.len() - 1];
        let xs = inputs(b, s, 99)?;
        let mut times = [Vec::new(), Vec::new()];
        for _ in 0..RUNS {
            for (t, fast) in times.iter_mut().zip(&compiled) {
                let start = std::time::Instant::now();
                fast.call_many(&xs)?;
                t.push(ms(start.elapsed()));
            }
        }
        let (generic, fixed) = (median(&times[0]), median(&times[1]));
        lines.push(format!(
            "{name} run at {:?}: size-generic kernels {generic:.1} ms, compiled for the size {fixed:.1} ms (ratio {:.3}; medians of {RUNS}, alternated)",
            (b, s),
            generic / fixed
        ));
        for l in lines {
            println!("{l}");
        }
    }
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
