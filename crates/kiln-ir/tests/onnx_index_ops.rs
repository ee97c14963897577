//! The ops added for ONNX import (cumulative, top-k, gather/scatter elements and ND, mod and
//! shifts): inferred types and errors, printed attributes, and a structural hash that sees
//! every attribute.

use kiln_ir::infer::infer;
use kiln_ir::*;

fn t(d: DType, dims: &[usize]) -> TensorType {
    TensorType::new(d, dims)
}

fn run(op: &Op, ins: &[TensorType]) -> Result<TensorType> {
    let refs: Vec<&TensorType> = ins.iter().collect();
    infer(op, &refs)
}

fn ok(op: Op, ins: &[TensorType]) -> TensorType {
    run(&op, ins).unwrap_or_else(|e| panic!("{op:?} on {ins:?} failed: {e}"))
}

/// Asserts an error whose Display starts with `kind` and mentions every `subs`.
fn err(op: Op, ins: &[TensorType], kind: &str, subs: &[&str]) {
    match run(&op, ins) {
        Ok(ty) => panic!("{op:?} on {ins:?} should fail, gave {ty}"),
        Err(e) => {
            let m = e.to_string();
            assert!(m.starts_with(kind), "{m:?} is not a {kind:?}");
            for s in subs {
                assert!(m.contains(s), "{m:?} does not mention {s:?}");
            }
        }
    }
}

const SHAPE: &str = "shape error";
const DTYPE: &str = "dtype error";
const GRAPH: &str = "invalid graph";

fn cum(axis: usize) -> Op {
    Op::Cumulative { op: CumulativeOp::Sum, axis, exclusive: false, reverse: false }
}

fn topk(axis: usize, k: usize, output: TopKOutput) -> Op {
    Op::TopK { axis, k, largest: true, sorted: true, output }
}

#[test]
fn cumulative_and_topk_types() {
    assert_eq!(ok(cum(1), &[t(DType::I8, &[2, 3])]), t(DType::I8, &[2, 3]));
    err(cum(2), &[t(DType::F32, &[2, 3])], SHAPE, &["cumsum", "axis 2"]);
    err(cum(0), &[t(DType::Bool, &[2])], DTYPE, &["numeric"]);
    err(cum(0), &[t(DType::F32, &[2]), t(DType::F32, &[2])], GRAPH, &["1 inputs"]);
    assert_eq!(ok(topk(1, 2, TopKOutput::Values), &[t(DType::F16, &[4, 5])]), t(DType::F16, &[4, 2]));
    assert_eq!(ok(topk(0, 4, TopKOutput::Indices), &[t(DType::U8, &[4, 5])]), t(DType::I64, &[4, 5]));
    assert_eq!(ok(topk(0, 0, TopKOutput::Values), &[t(DType::F32, &[0])]), t(DType::F32, &[0]));
    err(topk(1, 6, TopKOutput::Values), &[t(DType::F32, &[4, 5])], SHAPE, &["k = 6", "size 5"]);
    err(topk(2, 1, TopKOutput::Values), &[t(DType::F32, &[4, 5])], SHAPE, &["axis 2"]);
    err(topk(0, 1, TopKOutput::Values), &[t(DType::Bool, &[4])], DTYPE, &["numeric"]);
    // A symbolic axis cannot be checked against k until run time.
    let sym = TensorType { dtype: DType::F32, shape: Shape(vec![Dim::sym("n")]) };
    assert_eq!(ok(topk(0, 3, TopKOutput::Values), &[sym]).shape, Shape::fixed(&[3]));
}

#[test]
fn elements_indexing_types() {
    let ge = Op::GatherElements { axis: 1 };
    assert_eq!(ok(ge.clone(), &[t(DType::Bool, &[3, 4]), t(DType::I32, &[2, 7])]), t(DType::Bool, &[2, 7]));
    err(ge.clone(), &[t(DType::F32, &[3, 4]), t(DType::I64, &[4, 2])], SHAPE, &["dim 0", "axis 1"]);
    err(ge.clone(), &[t(DType::F32, &[3, 4]), t(DType::I64, &[3])], SHAPE, &["rank"]);
    err(ge.clone(), &[t(DType::F32, &[3, 4]), t(DType::U8, &[3, 4])], DTYPE, &["i64 or i32"]);
    err(Op::GatherElements { axis: 2 }, &[t(DType::F32, &[3, 4]), t(DType::I64, &[3, 4])], SHAPE, &["axis 2"]);
    let se = Op::ScatterElements { axis: 0, reduction: ScatterReduction::Add };
    let ins = [t(DType::F32, &[3, 4]), t(DType::I64, &[5, 2]), t(DType::F32, &[5, 2])];
    assert_eq!(ok(se.clone(), &ins), t(DType::F32, &[3, 4]));
    err(se.clone(), &[ins[0].clone(), ins[1].clone(), t(DType::F32, &[5, 3])], SHAPE, &["updates"]);
    err(se.clone(), &[ins[0].clone(), ins[1].clone(), t(DType::F64, &[5, 2])], DTYPE, &["updates"]);
    let bools = [t(DType::Bool, &[3]), t(DType::I64, &[2]), t(DType::Bool, &[2])];
    err(se, &bools, DTYPE, &["Add", "bool"]);
    let max = Op::ScatterElements { axis: 0, reduction: ScatterReduction::Max };
    assert_eq!(ok(max, &bools), t(DType::Bool, &[3]));
}

#[test]
fn nd_indexing_types() {
    let gnd = |b| Op::GatherNd { batch_dims: b };
    let data = t(DType::F32, &[2, 3, 4]);
    assert_eq!(ok(gnd(0), &[data.clone(), t(DType::I64, &[5, 2])]), t(DType::F32, &[5, 4]));
    assert_eq!(ok(gnd(0), &[data.clone(), t(DType::I64, &[3])]), t(DType::F32, &[]));
    assert_eq!(ok(gnd(1), &[data.clone(), t(DType::I32, &[2, 6, 1])]), t(DType::F32, &[2, 6, 4]));
    assert_eq!(ok(gnd(2), &[data.clone(), t(DType::I64, &[2, 3, 1])]), t(DType::F32, &[2, 3]));
    err(gnd(0), &[data.clone(), t(DType::I64, &[5, 4])], SHAPE, &["length 4", "1..=3"]);
    err(gnd(0), &[data.clone(), t(DType::I64, &[5, 0])], SHAPE, &["length 0"]);
    err(gnd(1), &[data.clone(), t(DType::I64, &[3, 1])], SHAPE, &["batch"]);
    err(gnd(2), &[data.clone(), t(DType::I64, &[2, 3])], SHAPE, &["batch_dims 2"]);
    err(gnd(0), &[data.clone(), t(DType::F32, &[1, 1])], DTYPE, &["i64 or i32"]);
    let snd = Op::ScatterNd { reduction: ScatterReduction::None };
    assert_eq!(ok(snd.clone(), &[data.clone(), t(DType::I64, &[5, 2]), t(DType::F32, &[5, 4])]), data);
    assert_eq!(ok(snd.clone(), &[data.clone(), t(DType::I64, &[7, 3]), t(DType::F32, &[7])]), data);
    err(snd.clone(), &[data.clone(), t(DType::I64, &[5, 2]), t(DType::F32, &[5, 3])], SHAPE, &["updates", "[5, 4]"]);
    err(snd, &[data.clone(), t(DType::I64, &[5, 4]), t(DType::F32, &[5])], SHAPE, &["length 4"]);
}

#[test]
fn mod_and_shift_types() {
    let b = |op| Op::Binary(op);
    assert_eq!(ok(b(BinaryOp::Mod), &[t(DType::F16, &[2, 1]), t(DType::F16, &[3])]), t(DType::F16, &[2, 3]));
    assert_eq!(ok(b(BinaryOp::Shl), &[t(DType::U8, &[2]), t(DType::U8, &[2])]), t(DType::U8, &[2]));
    err(b(BinaryOp::Mod), &[t(DType::Bool, &[2]), t(DType::Bool, &[2])], DTYPE, &["bool"]);
    err(b(BinaryOp::Shr), &[t(DType::F32, &[2]), t(DType::F32, &[2])], DTYPE, &["integer"]);
    err(b(BinaryOp::Shl), &[t(DType::Bool, &[2]), t(DType::Bool, &[2])], DTYPE, &["integer"]);
    assert_eq!(b(BinaryOp::Mod).name(), "mod");
    assert_eq!(b(BinaryOp::Shr).name(), "shr");
}

#[test]
fn names_and_printed_attributes() {
    let c = Op::Cumulative { op: CumulativeOp::Prod, axis: 2, exclusive: true, reverse: true };
    assert_eq!((c.name(), op_attrs(&c)), ("cumprod".to_string(), "axis=2 exclusive reverse".to_string()));
    assert_eq!(cum(0).name(), "cumsum");
    assert_eq!(op_attrs(&cum(0)), "axis=0");
    let k = Op::TopK { axis: 1, k: 5, largest: false, sorted: false, output: TopKOutput::Indices };
    assert_eq!((k.name(), op_attrs(&k)), ("topk".to_string(), "axis=1 k=5 smallest unsorted indices".to_string()));
    assert_eq!(op_attrs(&topk(0, 3, TopKOutput::Values)), "axis=0 k=3");
    let se = Op::ScatterElements { axis: 1, reduction: ScatterReduction::Max };
    assert_eq!((se.name(), op_attrs(&se)), ("scatter_elements".to_string(), "axis=1 reduction=max".to_string()));
    assert_eq!(op_attrs(&Op::ScatterNd { reduction: ScatterReduction::None }), "");
    assert_eq!(op_attrs(&Op::ScatterNd { reduction: ScatterReduction::Mul }), "reduction=mul");
    assert_eq!(Op::GatherNd { batch_dims: 1 }.name(), "gather_nd");
    assert_eq!(op_attrs(&Op::GatherNd { batch_dims: 1 }), "batch_dims=1");
    assert_eq!(op_attrs(&Op::GatherElements { axis: 0 }), "axis=0");
}

/// The hash of a one-op graph over `ins` (types) applying `op`.
fn hash_of(op: Op, ins: &[TensorType]) -> [u8; 32] {
    let mut g = Graph::new();
    let ids: Vec<NodeId> = ins.iter().enumerate().map(|(i, ty)| g.input(&format!("x{i}"), ty.clone())).collect();
    let o = g.add(op, &ids).unwrap();
    g.output(o);
    structural_hash(&g)
}

#[test]
fn hash_sees_every_attribute() {
    let x = [t(DType::F32, &[4, 4])];
    let cums: Vec<Op> = [CumulativeOp::Sum, CumulativeOp::Prod]
        .into_iter()
        .flat_map(|op| {
            (0..2).flat_map(move |axis| {
                [(false, false), (true, false), (false, true), (true, true)]
                    .map(|(exclusive, reverse)| Op::Cumulative { op, axis, exclusive, reverse })
            })
        })
        .collect();
    let mut tks = vec![];
    for axis in 0..2 {
        for k in [1, 2] {
            for largest in [true, false] {
                for sorted in [true, false] {
                    for output in [TopKOutput::Values, TopKOutput::Indices] {
                        tks.push(Op::TopK { axis, k, largest, sorted, output });
                    }
                }
            }
        }
    }
    let reds = [
        ScatterReduction::None,
        ScatterReduction::Add,
        ScatterReduction::Mul,
        ScatterReduction::Max,
        ScatterReduction::Min,
    ];
    let scat = [t(DType::F32, &[4, 4]), t(DType::I64, &[4, 4]), t(DType::F32, &[4, 4])];
    let nd = [t(DType::F32, &[4, 4]), t(DType::I64, &[4, 1])];
    let nd3 = [t(DType::F32, &[4, 4]), t(DType::I64, &[4, 1]), t(DType::F32, &[4, 4])];
    let mut hashes: Vec<[u8; 32]> = vec![];
    hashes.extend(cums.into_iter().map(|op| hash_of(op, &x)));
    hashes.extend(tks.into_iter().map(|op| hash_of(op, &x)));
    hashes.extend((0..2).map(|axis| hash_of(Op::GatherElements { axis }, &scat[..2])));
    for axis in 0..2 {
        hashes.extend(reds.iter().map(|&reduction| hash_of(Op::ScatterElements { axis, reduction }, &scat)));
    }
    hashes.extend([0, 1].map(|b| hash_of(Op::GatherNd { batch_dims: b }, &nd)));
    hashes.extend(reds.iter().map(|&reduction| hash_of(Op::ScatterNd { reduction }, &nd3)));
    let ints = [t(DType::I32, &[4]), t(DType::I32, &[4])];
    hashes.extend(
        [BinaryOp::Rem, BinaryOp::Mod, BinaryOp::Shl, BinaryOp::Shr, BinaryOp::And]
            .map(|b| hash_of(Op::Binary(b), &ints)),
    );
    let n = hashes.len();
    hashes.sort();
    hashes.dedup();
    assert_eq!(hashes.len(), n, "two different ops or attribute sets hashed equal");
}
