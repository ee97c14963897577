//! Random small graphs (unary, binary, reduce, reshape, permute, expand, slice, cast, softmax,
//! where and constants over a few shapes and two dtypes): `optimize` keeps every output, within
//! 1e-5 relative with decomposition (which reassociates softmax) and bit for bit without it.

mod common;

use common::assert_same_outputs;
use kiln_ir::{
    BinaryOp, DType, Dim, Graph, HostTensor, NodeId, Op, ReduceOp, Shape, SliceAxis, TensorType,
    UnaryOp, verify,
};
use kiln_opt::{OptOptions, optimize};
use proptest::prelude::*;

/// One building step: (kind, operand pick, variant, second operand pick).
type Step = (u8, u8, u8, u8);

fn build(steps: &[Step], outs: &[u8]) -> Graph {
    let mut g = Graph::new();
    let mut pool = vec![
        g.input("x", TensorType::new(DType::F32, Shape::fixed(&[2, 3]))),
        g.input("y", TensorType::new(DType::F32, Shape::fixed(&[3]))),
        g.input("z", TensorType::new(DType::I32, Shape::fixed(&[2, 3]))),
    ];
    for &(kind, a, b, c) in steps {
        let x = pool[a as usize % pool.len()];
        let w = pool[c as usize % pool.len()];
        let ty = g.ty(x).clone();
        let dims: Vec<usize> = ty.shape.as_fixed().unwrap_or_default();
        let rank = dims.len();
        let float = ty.dtype.is_float();
        let op_args: Option<(Op, Vec<NodeId>)> = match kind % 12 {
            0 => {
                let u = [
                    UnaryOp::Neg,
                    UnaryOp::Exp,
                    UnaryOp::Relu,
                    UnaryOp::Abs,
                    UnaryOp::Sqrt,
                    UnaryOp::Floor,
                ][b as usize % 6];
                Some((Op::Unary(u), vec![x]))
            }
            1 => {
                let op = [
                    BinaryOp::Add,
                    BinaryOp::Sub,
                    BinaryOp::Mul,
                    BinaryOp::Div,
                    BinaryOp::Max,
                    BinaryOp::Min,
                ][b as usize % 6];
                // Integer division by zero is an error, not a value to compare.
                (float || op != BinaryOp::Div).then(|| (Op::Binary(op), vec![x, w]))
            }
            2 => {
                let t = match b % 10 {
                    0 => HostTensor::scalar(0.0f32),
                    1 => HostTensor::scalar(-0.0f32),
                    2 => HostTensor::scalar(1.0f32),
                    3 => HostTensor::scalar(2.5f32),
                    4 => HostTensor::from_vec(vec![1.0f32; 3], &[3]).unwrap(),
                    5 => {
                        HostTensor::from_vec(vec![-0.5f32, 0.0, 4.0, -0.0, 1.0, f32::NAN], &[2, 3])
                            .unwrap()
                    }
                    6 => HostTensor::scalar(0i32),
                    7 => HostTensor::scalar(1i32),
                    8 => HostTensor::from_vec(vec![3i32, -1, 0], &[3]).unwrap(),
                    _ => HostTensor::from_vec(vec![0.0f32; 3], &[1, 3]).unwrap(),
                };
                pool.push(g.constant(t));
                None
            }
            3 if rank > 0 => {
                let op = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean][b as usize % 3];
                Some((
                    Op::Reduce {
                        op,
                        axes: vec![c as usize % rank],
                        keep_dims: b & 1 == 1,
                    },
                    vec![x],
                ))
            }
            4 => {
                let n: usize = dims.iter().product();
                let target = match b % 4 {
                    0 => vec![n],
                    1 => vec![1, n],
                    2 => dims.clone(),
                    _ => dims.iter().rev().copied().collect(),
                };
                Some((Op::Reshape(Shape::fixed(&target)), vec![x]))
            }
            5 if rank >= 2 => {
                let perm: Vec<usize> = if b & 1 == 0 {
                    (0..rank).rev().collect()
                } else {
                    (0..rank).map(|i| (i + 1) % rank).collect()
                };
                Some((Op::Permute(perm), vec![x]))
            }
            6 if rank < 4 => {
                let mut target = dims.clone();
                if b & 1 == 0 {
                    target.insert(0, 2);
                }
                Some((Op::Expand(Shape::fixed(&target)), vec![x]))
            }
            7 => {
                let to = if b & 1 == 0 {
                    ty.dtype
                } else if float {
                    DType::I32
                } else {
                    DType::F32
                };
                Some((Op::Cast(to), vec![x]))
            }
            8 if rank > 0 => {
                let mut axes = vec![SliceAxis::FULL; rank];
                match b % 3 {
                    0 => {}
                    1 => {
                        axes[0] = SliceAxis {
                            start: 1,
                            end: i64::MAX,
                            step: 1,
                        }
                    }
                    _ => {
                        axes[rank - 1] = SliceAxis {
                            start: -1,
                            end: i64::MIN,
                            step: -1,
                        }
                    }
                }
                Some((Op::Slice(axes), vec![x]))
            }
            9 if float && rank > 0 => Some((Op::Softmax { axis: rank - 1 }, vec![x])),
            10 => {
                // Neg(Neg(x)): built directly so simplify sees the pair.
                g.add(Op::Unary(UnaryOp::Neg), &[x])
                    .ok()
                    .map(|n| (Op::Unary(UnaryOp::Neg), vec![n]))
            }
            11 => {
                let cond = g.add(Op::Binary(BinaryOp::Gt), &[x, w]).ok();
                cond.map(|cd| (Op::Where, vec![cd, x, w]))
            }
            _ => None,
        };
        if let Some((op, args)) = op_args
            && let Ok(id) = g.add(op, &args)
            && g.ty(id).shape.numel().is_some_and(|n| n <= 512)
            && !g.ty(id).shape.0.contains(&Dim::Fixed(0))
        {
            pool.push(id);
        }
    }
    g.output(*pool.last().unwrap_or(&NodeId(0)));
    for &o in outs {
        g.output(pool[o as usize % pool.len()]);
    }
    g
}

fn inputs() -> Vec<HostTensor> {
    let x = vec![-0.0f32, 1.5, f32::NAN, -2.0, 0.0, f32::INFINITY];
    vec![
        HostTensor::from_vec(x, &[2, 3]).unwrap(),
        HostTensor::from_vec(vec![0.25f32, -0.0, -3.0], &[3]).unwrap(),
        HostTensor::from_vec(vec![i32::MIN, -1, 0, 1, 7, i32::MAX], &[2, 3]).unwrap(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn optimize_keeps_outputs(
        steps in prop::collection::vec((0u8..12, any::<u8>(), any::<u8>(), any::<u8>()), 1..24),
        outs in prop::collection::vec(any::<u8>(), 0..3),
    ) {
        let g = build(&steps, &outs);
        verify(&g).unwrap();
        let ins = inputs();
        prop_assume!(kiln_cpu::run(&g, &ins).is_ok());
        let (full, _) = optimize(&g, &OptOptions::default()).unwrap();
        verify(&full).unwrap();
        prop_assert!(full.nodes.len() <= kiln_ir::decompose(&g).unwrap().nodes.len());
        assert_same_outputs(&g, &full, &ins, 1e-5);
        let (exact, _) = optimize(&g, &OptOptions { disabled: vec![], decompose: false, ..OptOptions::default() }).unwrap();
        verify(&exact).unwrap();
        prop_assert!(exact.nodes.len() <= g.nodes.len());
        assert_same_outputs(&g, &exact, &ins, 0.0);
    }
}
