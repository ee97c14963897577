//! max-autotune's knobs and search: the tuning's text form, and that every candidate the
//! search can pick (thread splits, GEMM row blocks, epilogue splits) computes what the
//! reference interpreter does.

mod hot_common;

use kiln_cpu::compiled::{
    AutotuneOptions, Executable, InterpKernels, StepTuning, Tuning, autotune,
};
use kiln_ir::{BinaryOp, Conv2dAttrs, DType, Graph, HostTensor, Op, ReduceOp, Shape, TensorType, UnaryOp, decompose};
use kiln_sched::{ScheduleOptions, StepKind, schedule};
use std::sync::Arc;
use std::time::Duration;

/// Deterministic f32 values in [-1, 1).
fn tensor(shape: &[usize], seed: u64) -> HostTensor {
    hot_common::rand::<f32>(shape, seed)
}

/// `relu(x @ w + b) * 0.5` summed over rows, and a conv + bias + relu: a matmul extern with an
/// epilogue, a conv extern, and plain kernels.
fn graph() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[300, 40])));
    let w = g.constant(tensor(&[40, 24], 1));
    let b = g.constant(tensor(&[24], 2));
    let mm = g.add(Op::MatMul, &[x, w]).unwrap();
    let y = g.add(Op::Binary(BinaryOp::Add), &[mm, b]).unwrap();
    let y = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
    let half = g.constant(HostTensor::scalar(0.5f32));
    let y = g.add(Op::Binary(BinaryOp::Mul), &[y, half]).unwrap();
    let s = g
        .add(Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keep_dims: false }, &[y])
        .unwrap();
    g.output(y);
    g.output(s);
    let img = g.input("img", TensorType::new(DType::F32, Shape::fixed(&[1, 3, 20, 20])));
    let k = g.constant(tensor(&[130, 3, 3, 3], 3));
    let kb = g.constant(tensor(&[130], 4));
    let a = Conv2dAttrs { stride: [1, 1], padding: [1, 1, 1, 1], dilation: [1, 1], groups: 1, channels_last: false };
    let c = g.add(Op::Conv2d(a), &[img, k, kb]).unwrap();
    let c = g.add(Op::Unary(UnaryOp::Relu), &[c]).unwrap();
    g.output(c);
    decompose(&g).unwrap()
}

fn inputs() -> Vec<HostTensor> {
    vec![tensor(&[300, 40], 5), tensor(&[1, 3, 20, 20], 6)]
}

fn assert_close(got: &[HostTensor], want: &[HostTensor], what: &str) {
    for (o, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{what}: output {o}");
        for (i, (a, b)) in g.to_f64_vec().iter().zip(w.to_f64_vec()).enumerate() {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{what}: output {o} element {i}: {a} vs {b}");
        }
    }
}

#[test]
fn tuning_text_round_trips_and_rejects_garbage() {
    let t = Tuning {
        steps: vec![
            StepTuning::default(),
            StepTuning { chunks: Some(4), block_rows: None },
            StepTuning { chunks: Some(1), block_rows: Some(128) },
        ],
    };
    let text = t.to_text();
    assert_eq!(text, "kiln-tuning v1\n1 chunks=4\n2 chunks=1 block_rows=128\n");
    assert_eq!(Tuning::from_text(&text, 3).unwrap(), t);
    assert_eq!(t.tuned_steps(), 2);
    for (bad, why) in [
        ("kiln-tuning v2\n", "header"),
        ("kiln-tuning v1\n7 chunks=2\n", "step 7 of 3"),
        ("kiln-tuning v1\n1 chunks=0\n", "positive"),
        ("kiln-tuning v1\n1 tiles=3\n", "unknown knob"),
        ("kiln-tuning v1\nx chunks=3\n", "step number"),
        ("kiln-tuning v1\n1 chunks\n", "knob=value"),
    ] {
        let e = Tuning::from_text(bad, 3).unwrap_err().to_string();
        assert!(e.contains(why), "{bad:?}: {e}");
    }
}

#[test]
fn every_candidate_and_the_winner_match_the_interpreter() {
    let g = graph();
    let want = kiln_cpu::run(&g, &inputs()).unwrap();
    let (program, _) = schedule(&g, &ScheduleOptions::default()).unwrap();
    let externs = program.steps.iter().filter(|s| matches!(s.kind, StepKind::Extern { .. })).count();
    assert_eq!(externs, 2, "a matmul and a conv extern");
    let mut exe = Executable::new(program.clone(), Arc::new(InterpKernels)).unwrap();
    let opts = AutotuneOptions { budget: Duration::from_secs(60), reps: 2 };
    let mut calls = Vec::new();
    let (tuning, report) = autotune(&exe, &inputs(), &opts, &mut |d, t| calls.push((d, t))).unwrap();
    let n = program.steps.len();
    assert_eq!(calls.last(), Some(&(n, n)), "progress reaches every step");
    assert!(!report.out_of_budget);
    // Both externs had row-block candidates (300 matmul rows, 130 conv channels).
    let extern_results = report.steps.iter().filter(|s| s.what.starts_with("matmul") || s.what.starts_with("conv2d")).count();
    assert_eq!(extern_results, 2, "{report:?}");
    for s in &report.steps {
        assert!(s.candidates >= 2 && s.best_us <= s.default_us, "{s:?}");
    }
    // A conv with packed weights (the conv tiles here, where kiln's GEMM or the tiles run)
    // runs whole images, so only its epilogue's splits are timed: the heuristic, one chunk
    // and one per thread.
    let algorithms = exe.packed_algorithms();
    let conv = report.steps.iter().find(|s| s.what.starts_with("conv2d")).expect("the conv was tuned");
    if algorithms[conv.step].is_some() {
        let threads = rayon::current_num_threads();
        assert_eq!(conv.candidates, if threads > 1 { 3 } else { 2 }, "{conv:?}");
    }
    // Per-step winners are kept only when whole runs confirm them.
    if tuning.tuned_steps() > 0 {
        let (plain, tuned) = report.whole_us;
        assert!(!report.rejected && tuned <= plain * (1.0 - kiln_cpu::compiled::MIN_GAIN), "{report:?}");
    }
    if report.rejected {
        assert_eq!(tuning.tuned_steps(), 0);
    }
    exe.set_tuning(tuning).unwrap();
    assert_close(&exe.run(&inputs()).unwrap(), &want, "the autotuned winner");
    // Every knob value the search may choose, forced on every step at once.
    for tune in [
        StepTuning { chunks: Some(1), block_rows: Some(64) },
        StepTuning { chunks: Some(3), block_rows: Some(1) },
        StepTuning { chunks: Some(8), block_rows: Some(128) },
        StepTuning { chunks: None, block_rows: Some(100_000) },
    ] {
        exe.set_tuning(Tuning { steps: vec![tune; n] }).unwrap();
        assert_close(&exe.run(&inputs()).unwrap(), &want, &format!("{tune:?}"));
    }
    assert!(exe.set_tuning(Tuning { steps: vec![StepTuning::default(); n + 1] }).is_err());
}

#[test]
fn a_zero_budget_keeps_every_heuristic() {
    let g = graph();
    let (program, _) = schedule(&g, &ScheduleOptions::default()).unwrap();
    let exe = Executable::new(program, Arc::new(InterpKernels)).unwrap();
    let opts = AutotuneOptions { budget: Duration::ZERO, reps: 1 };
    let (tuning, report) = autotune(&exe, &inputs(), &opts, &mut |_, _| {}).unwrap();
    assert!(report.out_of_budget);
    assert_eq!(tuning.tuned_steps(), 0);
    assert!(report.steps.is_empty());
}

#[test]
fn profile_times_every_step_and_describes_the_externs() {
    let g = graph();
    let (program, _) = schedule(&g, &ScheduleOptions::default()).unwrap();
    let exe = Executable::new(program.clone(), Arc::new(InterpKernels)).unwrap();
    let (steps, whole) = kiln_cpu::compiled::profile(&exe, &inputs(), 3).unwrap();
    assert_eq!(steps.len(), program.steps.len());
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s.step, i);
        let want = match &program.steps[i].kind {
            StepKind::Kernel { .. } => "kernel ",
            StepKind::Extern { op: kiln_sched::ExternOp::MatMul, .. } => "matmul [[300, 40], [40, 24]]",
            StepKind::Extern { .. } => "conv2d s[1, 1] [[1, 3, 20, 20], [130, 3, 3, 3], [130]] -> [1, 130, 20, 20]",
            StepKind::Eval { .. } => "eval ",
        };
        assert!(s.what.starts_with(want), "step {i}: {} (want {want})", s.what);
    }
    // Steps are timed inside the runs, so together they cannot take longer than a run.
    let sum: Duration = steps.iter().map(|s| s.median).sum();
    assert!(whole > Duration::ZERO && sum <= whole * 3, "sum {sum:?} vs run {whole:?}");
}
