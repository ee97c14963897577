//! The memory planner against an independent reference: liveness recomputed here, byte
//! overlaps checked pair by pair, and programs run on the planned arena versus one allocation
//! per buffer (a plain interpreter of the simple kernels these tests build).

use kiln_ir::{BinaryOp, DType, UnaryOp};
use kiln_sched::memory::ALIGN;
use kiln_sched::{
    Arg, BufId, BufKind, BufView, Buffer, Epilogue, Expr, ExternOp, Idx, Kernel, Loop, MemoryPlan,
    Program, Stage, Step, StepKind, naive_bytes, plan_memory,
};
use proptest::prelude::*;

fn program() -> Program {
    Program {
        buffers: vec![],
        steps: vec![],
        inputs: vec![],
        outputs: vec![],
        consts: vec![],
        memory: None,
    }
}

fn buf(p: &mut Program, dtype: DType, numel: usize, kind: BufKind) -> BufId {
    p.buffers.push(Buffer { dtype, numel, kind });
    BufId(p.buffers.len() as u32 - 1)
}

fn input(p: &mut Program, dtype: DType, numel: usize) -> BufId {
    let i = p.inputs.len();
    let b = buf(p, dtype, numel, BufKind::Input(i));
    p.inputs.push(b);
    b
}

/// How a kernel input is read at output point `v0`.
#[derive(Clone, Copy, Debug)]
enum Read {
    /// `in[v0]`: the pointwise case.
    Same,
    /// `in[n - 1 - v0]`: same size, another index.
    Reversed,
    /// `in[(v0 % c) * r + v0 / c]` for an `r x c` input: a transpose.
    Transpose(i64, i64),
    /// `in[v0 % m]`: broadcast of a smaller input.
    Wrap,
}

/// Appends `out[v0] = unary(sum of reads)` over `0..numel(out)`, `unary` applied when given.
fn pointwise(p: &mut Program, reads: &[(BufId, Read)], out: BufId, unary: Option<UnaryOp>) {
    let n = p.buffer(out).numel;
    let mut k = Kernel::new(format!("k{}", p.steps.len()));
    k.outer = vec![Loop { var: 0, extent: n }];
    let mut args = vec![];
    let mut acc = None;
    for (i, &(b, read)) in reads.iter().enumerate() {
        let m = p.buffer(b).numel as i64;
        let v = Idx::var(0);
        let index = match read {
            Read::Same => v,
            Read::Reversed => Idx::Const(m - 1).add(v.mul(-1)),
            Read::Transpose(r, c) => v.clone().rem(c).mul(r).add(v.div(c)),
            Read::Wrap => v.rem(m.max(1)),
        };
        k.args.push(Arg {
            dtype: p.buffer(b).dtype,
            len: m as usize,
            written: false,
        });
        args.push(b);
        let load = k.push(
            Expr::Load {
                arg: i as u32,
                index,
            },
            p.buffer(b).dtype,
        );
        acc = Some(match acc {
            None => load,
            Some(a) => k.push(
                Expr::Binary {
                    op: BinaryOp::Add,
                    a,
                    b: load,
                },
                p.buffer(b).dtype,
            ),
        });
    }
    let mut value = match acc {
        Some(v) => v,
        None => k.push(
            Expr::Const(kiln_sched::Literal::Float(1.0)),
            p.buffer(out).dtype,
        ),
    };
    if let Some(op) = unary {
        value = k.push(Expr::Unary { op, x: value }, p.buffer(out).dtype);
    }
    k.args.push(Arg {
        dtype: p.buffer(out).dtype,
        len: n,
        written: true,
    });
    k.stages.push(Stage::Store {
        loops: vec![],
        arg: reads.len() as u32,
        index: Idx::var(0),
        value,
    });
    args.push(out);
    p.steps.push(Step {
        kind: StepKind::Kernel { kernel: k, args },
        nodes: vec![],
        with_previous: false,
    });
}

fn output(p: &mut Program, b: BufId) {
    let n = p.buffer(b).numel;
    p.outputs.push((b, vec![n]));
}

fn off(plan: &MemoryPlan, b: BufId) -> usize {
    plan.offsets[b.index()].unwrap_or(usize::MAX)
}

/// Liveness recomputed naively: every buffer a step names is live at it; outputs to the end.
fn reference_live(p: &Program) -> Vec<Option<(usize, usize)>> {
    let mut live = vec![None; p.buffers.len()];
    for (i, s) in p.steps.iter().enumerate() {
        let mut named: Vec<BufId> = vec![];
        match &s.kind {
            StepKind::Kernel { args, .. } => named.extend(args),
            StepKind::Extern {
                inputs,
                out,
                epilogue,
                ..
            } => {
                named.extend(inputs.iter().map(|v| v.buf));
                named.push(*out);
                named.extend(epilogue.iter().flat_map(|e| e.args.iter().copied()));
            }
            StepKind::Eval { inputs, out, .. } => {
                named.extend(inputs.iter().map(|v| v.buf));
                named.push(*out);
            }
        }
        for b in named {
            let slot: &mut Option<(usize, usize)> = &mut live[b.index()];
            *slot = Some(slot.map_or((i, i), |(s, _)| (s, i)));
        }
    }
    for (b, _) in &p.outputs {
        let end = p.steps.len().saturating_sub(1);
        let slot: &mut Option<(usize, usize)> = &mut live[b.index()];
        *slot = Some(slot.map_or((end, end), |(s, _)| (s, end)));
    }
    live
}

/// True when step `at` is a one-store kernel (or an extern whose result is `earlier`, with
/// such an epilogue) writing `later` at index I that loads `earlier` only at I: the in-place
/// pair the planner may sanction.
fn sanctioned(p: &Program, at: usize, earlier: BufId, later: BufId) -> bool {
    let (kernel, args) = match &p.steps[at].kind {
        StepKind::Kernel { kernel, args } => (kernel, args),
        StepKind::Extern {
            out,
            epilogue: Some(e),
            ..
        } if *out == earlier => (&e.kernel, &e.args),
        _ => return false,
    };
    let [Stage::Store { arg, index, .. }] = kernel.stages.as_slice() else {
        return false;
    };
    if args[*arg as usize] != later {
        return false;
    }
    let loads: Vec<&Idx> = kernel
        .exprs
        .iter()
        .filter_map(|e| match &e.expr {
            Expr::Load { arg, index } if args[*arg as usize] == earlier => Some(index),
            _ => None,
        })
        .collect();
    !loads.is_empty() && loads.iter().all(|i| *i == index)
}

/// The plan's invariants, checked against the reference liveness.
fn check_plan(p: &Program, plan: &MemoryPlan) -> std::result::Result<(), String> {
    let live = reference_live(p);
    let naive: usize = p
        .buffers
        .iter()
        .filter(|b| b.kind == BufKind::Temp)
        .map(|b| b.bytes().div_ceil(ALIGN) * ALIGN)
        .sum();
    if naive_bytes(p) != naive {
        return Err(format!("naive_bytes {} != {naive}", naive_bytes(p)));
    }
    if plan.arena_bytes > naive {
        return Err(format!("arena {} > naive {naive}", plan.arena_bytes));
    }
    if plan.offsets.len() != p.buffers.len() {
        return Err("one offset per buffer".into());
    }
    for (i, b) in p.buffers.iter().enumerate() {
        match (b.kind, plan.offsets[i]) {
            (BufKind::Temp, Some(o)) => {
                if o % ALIGN != 0 || o + b.bytes() > plan.arena_bytes {
                    return Err(format!(
                        "buffer {i}: offset {o} size {} arena {}",
                        b.bytes(),
                        plan.arena_bytes
                    ));
                }
            }
            (BufKind::Temp, None) => return Err(format!("temp {i} has no offset")),
            (_, Some(_)) => return Err(format!("non-temp {i} has an offset")),
            (_, None) => {}
        }
    }
    let temps: Vec<usize> = (0..p.buffers.len())
        .filter(|&i| p.buffers[i].kind == BufKind::Temp)
        .collect();
    for (x, &a) in temps.iter().enumerate() {
        for &b in &temps[x + 1..] {
            let (Some((sa, ea)), Some((sb, eb))) = (live[a], live[b]) else {
                continue;
            };
            if sa > eb || sb > ea {
                continue;
            }
            let (oa, na) = (plan.offsets[a].unwrap_or(0), p.buffers[a].bytes());
            let (ob, nb) = (plan.offsets[b].unwrap_or(0), p.buffers[b].bytes());
            if na == 0 || nb == 0 || oa + na <= ob || ob + nb <= oa {
                continue;
            }
            let (ba, bb) = (BufId(a as u32), BufId(b as u32));
            let ok = oa == ob
                && na == nb
                && ((ea == sb && sanctioned(p, ea, ba, bb))
                    || (eb == sa && sanctioned(p, eb, bb, ba)));
            if !ok {
                return Err(format!(
                    "buffers {a} {live_a:?} and {b} {live_b:?} overlap in bytes",
                    live_a = live[a],
                    live_b = live[b]
                ));
            }
        }
    }
    Ok(())
}

/// Runs a program of f32 pointwise kernels (the ones [`pointwise`] builds), temporaries at
/// `plan` offsets in one arena (`None`: each its own vector), and returns the outputs' bits.
fn simulate(p: &Program, plan: Option<&MemoryPlan>) -> Vec<Vec<u32>> {
    let mut own: Vec<Vec<f32>> = p.buffers.iter().map(|b| vec![f32::NAN; b.numel]).collect();
    for (i, &b) in p.inputs.iter().enumerate() {
        own[b.index()] = (0..p.buffer(b).numel)
            .map(|j| (i * 1000 + j) as f32 * 0.25 + 1.0)
            .collect();
    }
    let mut arena = vec![f32::NAN; plan.map_or(0, |m| m.arena_bytes / 4)];
    // Where element `e` of buffer `b` lives: (in arena?, index).
    let place = |b: BufId, e: usize| match plan.and_then(|m| m.offsets[b.index()]) {
        Some(o) => (true, o / 4 + e),
        None => (false, e),
    };
    for s in &p.steps {
        let StepKind::Kernel { kernel, args } = &s.kind else {
            continue;
        };
        let [
            Stage::Store {
                arg: out_arg,
                index: out_index,
                value,
                ..
            },
        ] = kernel.stages.as_slice()
        else {
            continue;
        };
        for v in 0..kernel.outer[0].extent {
            let mut vals: Vec<f32> = vec![];
            for e in &kernel.exprs {
                let x = match &e.expr {
                    Expr::Load { arg, index } => {
                        let b = args[*arg as usize];
                        match place(b, index.eval(&[v as i64]) as usize) {
                            (true, i) => arena[i],
                            (false, i) => own[b.index()][i],
                        }
                    }
                    Expr::Const(_) => 1.0,
                    Expr::Binary { a, b, .. } => vals[*a as usize] + vals[*b as usize],
                    Expr::Unary { x, .. } => vals[*x as usize].max(0.0) * 0.5 + 0.125,
                    other => panic!("the simulator does not run {other:?}"),
                };
                vals.push(x);
            }
            let b = args[*out_arg as usize];
            let x = vals[*value as usize];
            match place(b, out_index.eval(&[v as i64]) as usize) {
                (true, i) => arena[i] = x,
                (false, i) => own[b.index()][i] = x,
            }
        }
    }
    p.outputs
        .iter()
        .map(|(b, _)| {
            (0..p.buffer(*b).numel)
                .map(|e| match place(*b, e) {
                    (true, i) => arena[i].to_bits(),
                    (false, i) => own[b.index()][i].to_bits(),
                })
                .collect()
        })
        .collect()
}

#[test]
fn chain_reuses_memory_two_buffers() {
    let mut p = program();
    let x = input(&mut p, DType::F32, 1024);
    let mut prev = x;
    let mut temps = vec![];
    for _ in 0..5 {
        let t = buf(&mut p, DType::F32, 1024, BufKind::Temp);
        pointwise(&mut p, &[(prev, Read::Reversed)], t, None);
        temps.push(t);
        prev = t;
    }
    output(&mut p, prev);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    assert_eq!(plan.arena_bytes, 2 * 4096);
    assert_eq!(naive_bytes(&p), 5 * 4096);
    assert_eq!(plan.offsets[x.index()], None);
    assert_eq!(simulate(&p, Some(&plan)), simulate(&p, None));
}

/// Steps that run as one launch (`with_previous`) keep every buffer either touches apart: in
/// the chain above, the buffer the third step writes may no longer take the place of the one
/// the first step wrote (still read by the second, which runs interleaved with the third).
#[test]
fn steps_run_with_the_previous_one_share_no_memory() {
    let mut p = program();
    let x = input(&mut p, DType::F32, 1024);
    let t: Vec<BufId> = (0..3).map(|_| buf(&mut p, DType::F32, 1024, BufKind::Temp)).collect();
    pointwise(&mut p, &[(x, Read::Reversed)], t[0], None);
    pointwise(&mut p, &[(t[0], Read::Reversed)], t[1], None);
    pointwise(&mut p, &[(t[1], Read::Reversed)], t[2], None);
    output(&mut p, t[2]);
    assert_eq!(off(&plan_memory(&p), t[0]), off(&plan_memory(&p), t[2]), "t0 dies before t2 is born");
    p.steps[2].with_previous = true;
    assert_eq!(p.launches(), 2);
    assert_eq!(p.launch_of_steps(), vec![0, 1, 1]);
    let plan = plan_memory(&p);
    let (a, c) = (off(&plan, t[0]), off(&plan, t[2]));
    assert!(a.abs_diff(c) >= 4096, "t0 at {a} and t2 at {c} overlap");
    assert_eq!(plan.arena_bytes, 3 * 4096);
    assert_eq!(simulate(&p, Some(&plan)), simulate(&p, None));
}

#[test]
fn relu_after_add_runs_in_place() {
    let mut p = program();
    let x = input(&mut p, DType::F32, 1000);
    let a = buf(&mut p, DType::F32, 1000, BufKind::Temp);
    let b = buf(&mut p, DType::F32, 1000, BufKind::Temp);
    pointwise(&mut p, &[(x, Read::Same), (x, Read::Reversed)], a, None);
    pointwise(&mut p, &[(a, Read::Same)], b, Some(UnaryOp::Relu));
    output(&mut p, b);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    assert_eq!(off(&plan, a), off(&plan, b));
    assert_eq!(plan.arena_bytes, 4032);
    assert_eq!(simulate(&p, Some(&plan)), simulate(&p, None));
}

#[test]
fn pointwise_chain_collapses_to_one_buffer() {
    let mut p = program();
    let x = input(&mut p, DType::F32, 256);
    let mut prev = buf(&mut p, DType::F32, 256, BufKind::Temp);
    pointwise(&mut p, &[(x, Read::Reversed)], prev, None);
    let first = prev;
    for _ in 0..4 {
        let t = buf(&mut p, DType::F32, 256, BufKind::Temp);
        pointwise(&mut p, &[(prev, Read::Same)], t, Some(UnaryOp::Relu));
        prev = t;
    }
    output(&mut p, prev);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    assert_eq!(plan.arena_bytes, 1024);
    assert_eq!(off(&plan, first), off(&plan, prev));
    assert_eq!(simulate(&p, Some(&plan)), simulate(&p, None));
}

#[test]
fn transpose_is_not_in_place() {
    let mut p = program();
    let x = input(&mut p, DType::F32, 12);
    let a = buf(&mut p, DType::F32, 12, BufKind::Temp);
    let b = buf(&mut p, DType::F32, 12, BufKind::Temp);
    pointwise(&mut p, &[(x, Read::Same)], a, None);
    pointwise(&mut p, &[(a, Read::Transpose(3, 4))], b, None);
    output(&mut p, b);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    assert_ne!(off(&plan, a), off(&plan, b));
    assert_eq!(plan.arena_bytes, 128);
    assert_eq!(simulate(&p, Some(&plan)), simulate(&p, None));
}

#[test]
fn input_read_at_two_indices_is_not_in_place() {
    let mut p = program();
    let x = input(&mut p, DType::F32, 64);
    let a = buf(&mut p, DType::F32, 64, BufKind::Temp);
    let b = buf(&mut p, DType::F32, 64, BufKind::Temp);
    pointwise(&mut p, &[(x, Read::Same)], a, None);
    pointwise(&mut p, &[(a, Read::Same), (a, Read::Reversed)], b, None);
    output(&mut p, b);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    assert_ne!(off(&plan, a), off(&plan, b));
    assert_eq!(simulate(&p, Some(&plan)), simulate(&p, None));
}

#[test]
fn input_still_live_later_is_not_in_place() {
    let mut p = program();
    let x = input(&mut p, DType::F32, 64);
    let a = buf(&mut p, DType::F32, 64, BufKind::Temp);
    let b = buf(&mut p, DType::F32, 64, BufKind::Temp);
    let c = buf(&mut p, DType::F32, 64, BufKind::Temp);
    pointwise(&mut p, &[(x, Read::Same)], a, None);
    pointwise(&mut p, &[(a, Read::Same)], b, Some(UnaryOp::Relu));
    pointwise(&mut p, &[(a, Read::Same), (b, Read::Same)], c, None);
    output(&mut p, c);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    assert_ne!(off(&plan, a), off(&plan, b));
    // c may take a's place (a dies at c's step, read at the store's index).
    assert_eq!(plan.arena_bytes, 512);
    assert_eq!(simulate(&p, Some(&plan)), simulate(&p, None));
}

#[test]
fn no_in_place_across_element_sizes_or_outputs() {
    let mut p = program();
    let x = input(&mut p, DType::F32, 64);
    let a = buf(&mut p, DType::F16, 128, BufKind::Temp); // 256 bytes, like b
    let b = buf(&mut p, DType::F32, 64, BufKind::Temp);
    pointwise(&mut p, &[(x, Read::Wrap)], a, None);
    // b reads a at its own index but a's elements are half as wide: not in place.
    pointwise(&mut p, &[(a, Read::Same)], b, None);
    let c = buf(&mut p, DType::F32, 64, BufKind::Temp);
    let d = buf(&mut p, DType::F32, 64, BufKind::Temp);
    pointwise(&mut p, &[(b, Read::Same)], c, None);
    pointwise(&mut p, &[(c, Read::Same)], d, None);
    output(&mut p, c);
    output(&mut p, d);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    assert_ne!(off(&plan, a), off(&plan, b));
    assert_eq!(off(&plan, b), off(&plan, c), "b dies at c's step: in place");
    assert_ne!(
        off(&plan, c),
        off(&plan, d),
        "c is an output: not overwritten"
    );
}

#[test]
fn epilogue_args_and_outputs_stay_live() {
    let mut p = program();
    let x = input(&mut p, DType::F32, 1024);
    let a = buf(&mut p, DType::F32, 1024, BufKind::Temp);
    let o = buf(&mut p, DType::F32, 1024, BufKind::Temp);
    let m = buf(&mut p, DType::F32, 1024, BufKind::Temp);
    let e = buf(&mut p, DType::F32, 1024, BufKind::Temp);
    let t = buf(&mut p, DType::F32, 1024, BufKind::Temp);
    pointwise(&mut p, &[(x, Read::Same)], a, None); // step 0
    pointwise(&mut p, &[(x, Read::Reversed)], o, None); // step 1, a graph output
    let mut ek = Kernel::new("epi");
    ek.args = vec![
        Arg {
            dtype: DType::F32,
            len: 1024,
            written: false,
        },
        Arg {
            dtype: DType::F32,
            len: 1024,
            written: false,
        },
        Arg {
            dtype: DType::F32,
            len: 1024,
            written: true,
        },
    ];
    let epilogue = Epilogue {
        kernel: ek,
        args: vec![m, a, e],
    };
    push_matmul(&mut p, x, m, epilogue); // step 2: `a` is read by the epilogue here
    pointwise(&mut p, &[(e, Read::Reversed)], t, None); // step 3
    output(&mut p, o);
    output(&mut p, t);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    let ranges: Vec<usize> = [a, o, m, e].iter().map(|&b| off(&plan, b)).collect();
    for i in 0..4 {
        for j in i + 1..4 {
            assert_ne!(
                ranges[i], ranges[j],
                "buffers live at the extern step share memory"
            );
        }
    }
    assert!(
        [a, m].iter().any(|&b| off(&plan, b) == off(&plan, t)),
        "t reuses a dead buffer"
    );
    assert_ne!(off(&plan, o), off(&plan, t));
    assert_eq!(plan.arena_bytes, 4 * 4096);
}

#[test]
fn empty_program_and_zero_sized_buffers() {
    let p = program();
    let plan = plan_memory(&p);
    assert_eq!(
        plan,
        MemoryPlan {
            offsets: vec![],
            arena_bytes: 0
        }
    );
    let mut p = program();
    let x = input(&mut p, DType::F32, 0);
    let a = buf(&mut p, DType::F32, 0, BufKind::Temp);
    let unused = buf(&mut p, DType::F32, 7, BufKind::Temp);
    pointwise(&mut p, &[(x, Read::Same)], a, None);
    output(&mut p, a);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    // The unused temporary still gets bytes of its own; the empty one none.
    assert_eq!(plan.arena_bytes, 64);
    assert_eq!(plan.offsets[unused.index()], Some(0));
}

/// One random step: output size and dtype choices, then up to three (source, read) choices.
type StepSpec = (usize, usize, Vec<(usize, u8)>);

fn build_random(n_inputs: usize, steps: &[StepSpec], outs: &[usize], dtypes: &[DType]) -> Program {
    const SIZES: [usize; 6] = [0, 1, 3, 16, 17, 64];
    let mut p = program();
    let mut avail: Vec<BufId> = (0..n_inputs)
        .map(|i| input(&mut p, dtypes[0], SIZES[(i + 3) % 6]))
        .collect();
    let mut temps = vec![];
    for (size, dt, reads) in steps {
        let n = SIZES[size % SIZES.len()];
        let t = buf(&mut p, dtypes[dt % dtypes.len()], n, BufKind::Temp);
        let reads: Vec<(BufId, Read)> = reads
            .iter()
            .filter_map(|&(src, mode)| {
                let b = avail[src % avail.len()];
                let m = p.buffer(b).numel;
                if m == 0 && n > 0 {
                    return None;
                }
                let read = if m != n {
                    Read::Wrap
                } else if mode % 3 == 0 {
                    Read::Reversed
                } else {
                    Read::Same
                };
                Some((b, read))
            })
            .collect();
        pointwise(&mut p, &reads, t, (size % 2 == 0).then_some(UnaryOp::Relu));
        avail.push(t);
        temps.push(t);
    }
    for &o in outs {
        if let Some(&t) = temps.get(o % temps.len().max(1)) {
            output(&mut p, t);
        }
    }
    if let Some(&last) = temps.last() {
        output(&mut p, last);
    }
    p
}

fn step_specs() -> impl Strategy<Value = Vec<StepSpec>> {
    prop::collection::vec(
        (
            0usize..6,
            0usize..4,
            prop::collection::vec((0usize..64, 0u8..6), 0..4),
        ),
        1..14,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_programs_plan_is_sound(
        n_inputs in 1usize..3,
        steps in step_specs(),
        outs in prop::collection::vec(0usize..64, 0..3),
    ) {
        let p = build_random(n_inputs, &steps, &outs, &[DType::F32, DType::F16, DType::U8, DType::F64]);
        let plan = plan_memory(&p);
        if let Err(e) = check_plan(&p, &plan) {
            return Err(TestCaseError::fail(e));
        }
    }

    #[test]
    fn random_programs_compute_the_same_on_the_arena(
        n_inputs in 1usize..3,
        steps in step_specs(),
        outs in prop::collection::vec(0usize..64, 0..3),
    ) {
        let p = build_random(n_inputs, &steps, &outs, &[DType::F32]);
        let plan = plan_memory(&p);
        prop_assert!(check_plan(&p, &plan).is_ok());
        prop_assert_eq!(simulate(&p, Some(&plan)), simulate(&p, None));
    }
}

#[test]
fn simulator_catches_a_wrong_in_place_plan() {
    // Guards the tests above: sharing memory for a reversed read must change the result.
    let mut p = program();
    let x = input(&mut p, DType::F32, 64);
    let a = buf(&mut p, DType::F32, 64, BufKind::Temp);
    let b = buf(&mut p, DType::F32, 64, BufKind::Temp);
    pointwise(&mut p, &[(x, Read::Same)], a, None);
    pointwise(&mut p, &[(a, Read::Reversed)], b, None);
    output(&mut p, b);
    let wrong = MemoryPlan {
        offsets: vec![None, Some(0), Some(0)],
        arena_bytes: 256,
    };
    assert!(check_plan(&p, &wrong).is_err());
    assert_ne!(simulate(&p, Some(&wrong)), simulate(&p, None));
}

/// A program whose one step is a matmul extern writing `m` (32 x 32 of an input) with the
/// epilogue `e[v0] = relu(m[read(v0)])`: `(program, m, e)`, for callers to add steps after.
fn matmul_with_epilogue(read: Read) -> (Program, BufId, BufId) {
    let mut p = program();
    let x = input(&mut p, DType::F32, 1024);
    let m = buf(&mut p, DType::F32, 1024, BufKind::Temp);
    let e = buf(&mut p, DType::F32, 1024, BufKind::Temp);
    pointwise(&mut p, &[(m, read)], e, Some(UnaryOp::Relu));
    let Some(Step { kind: StepKind::Kernel { kernel, args }, .. }) = p.steps.pop() else {
        unreachable!("pointwise pushes a kernel step")
    };
    push_matmul(&mut p, x, m, Epilogue { kernel, args });
    (p, m, e)
}

/// Appends a matmul extern `out = x @ x` (`x` an input of 32 x 32) followed by `epilogue`.
fn push_matmul(p: &mut Program, x: BufId, out: BufId, epilogue: Epilogue) {
    let view = BufView { buf: x, offset: 0, shape: vec![32, 32], strides: vec![32, 1] };
    p.steps.push(Step {
        kind: StepKind::Extern {
            op: ExternOp::MatMul,
            inputs: vec![view.clone(), view],
            out,
            out_shape: vec![32, 32],
            epilogue: Some(epilogue),
        },
        nodes: vec![],
        with_previous: false,
    });
}

#[test]
fn an_epilogue_overwrites_its_externs_result_in_place() {
    let (mut p, m, e) = matmul_with_epilogue(Read::Same);
    let t = buf(&mut p, DType::F32, 1024, BufKind::Temp);
    pointwise(&mut p, &[(e, Read::Reversed)], t, None);
    output(&mut p, t);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    assert_eq!(off(&plan, m), off(&plan, e), "the epilogue writes over the extern's result");
    assert_eq!(plan.arena_bytes, 2 * 4096);
}

#[test]
fn an_epilogue_keeps_apart_from_a_result_read_elsewhere_or_transposed() {
    // The extern's result is also read by a later step: it must outlive the epilogue.
    let (mut p, m, e) = matmul_with_epilogue(Read::Same);
    let t = buf(&mut p, DType::F32, 1024, BufKind::Temp);
    pointwise(&mut p, &[(e, Read::Same), (m, Read::Same)], t, None);
    output(&mut p, t);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    assert_ne!(off(&plan, m), off(&plan, e));
    // The epilogue reads its result transposed: element i is read after another point wrote it.
    let (mut p, m, e) = matmul_with_epilogue(Read::Transpose(32, 32));
    output(&mut p, e);
    let plan = plan_memory(&p);
    check_plan(&p, &plan).unwrap();
    assert_ne!(off(&plan, m), off(&plan, e));
}
