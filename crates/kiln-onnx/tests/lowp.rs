//! ONNX low-precision types (float8, float4, 4/2-bit integers) at the import boundary: packed
//! initializers, graph outputs of those types, and ops that must refuse bit patterns.

use kiln_ir::{DType, HostTensor, LowpType};
use kiln_onnx::builder::{
    attr_int, attr_string, fixed, graph, model, node, raw_tensor, tensor_info_code,
    tensor_info_fixed,
};
use kiln_onnx::proto::TensorProto;
use kiln_onnx::{ImportOptions, import};

fn run(
    m: &kiln_onnx::OnnxModel,
    inputs: &[HostTensor],
) -> (Vec<HostTensor>, Vec<Option<LowpType>>) {
    let imp = import(m, &ImportOptions::default()).unwrap();
    let out = kiln_cpu::run(&imp.graph, inputs).unwrap();
    (out, imp.output_types)
}

#[test]
fn packed_initializers_unpack_low_bits_first_and_sign_extend() {
    // INT4 [7, -8, -1, 2, 5]: nibbles low first, the odd last element in a low nibble.
    let i4 = raw_tensor("w", 22, &[5], vec![0x87, 0x2F, 0x05]);
    // UINT2 [1, 2, 3, 0, 3] in int32_data: four per entry.
    let u2 = TensorProto {
        name: Some("u".into()),
        dims: vec![5],
        data_type: Some(25),
        int32_data: vec![0b00_11_10_01, 0b11],
        ..Default::default()
    };
    let mut g = graph(
        vec![
            node("Cast", &["w"], &["a"], vec![attr_int("to", 1)]),
            node("Cast", &["u"], &["b"], vec![attr_int("to", 1)]),
        ],
        vec![],
        vec![
            tensor_info_fixed("a", DType::F32, &[5]),
            tensor_info_fixed("b", DType::F32, &[5]),
        ],
        &[],
    );
    g.initializer = vec![i4, u2];
    let (out, types) = run(&model(g, 21), &[]);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), [7.0, -8.0, -1.0, 2.0, 5.0]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 0.0, 3.0]);
    assert_eq!(types, [None, None]);
}

#[test]
fn a_packed_tensor_of_the_wrong_size_is_an_error() {
    let bad = raw_tensor("w", 21, &[5], vec![0; 2]);
    let e = kiln_onnx::lowp::tensor_from_proto_lowp(&bad, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("3") && e.contains("raw_data"), "{e}");
    // The plain decoder refuses such types rather than returning patterns as numbers.
    assert!(kiln_onnx::tensor::tensor_from_proto(&bad, None).is_err());
}

#[test]
fn outputs_report_their_low_precision_type() {
    // f32 → INT4 (truncates, wraps) → UINT4 (through f32) and f32 → FLOAT8E5M2.
    let g = graph(
        vec![
            node("Cast", &["x"], &["i4"], vec![attr_int("to", 22)]),
            node("Cast", &["i4"], &["u4"], vec![attr_int("to", 21)]),
            node(
                "Cast",
                &["x"],
                &["f8"],
                vec![attr_int("to", 19), attr_int("saturate", 0)],
            ),
        ],
        vec![tensor_info_fixed("x", DType::F32, &[4])],
        vec![
            tensor_info_code("i4", 22, &fixed(&[4])),
            tensor_info_code("u4", 21, &fixed(&[4])),
            tensor_info_code("f8", 19, &fixed(&[4])),
        ],
        &[],
    );
    let x = HostTensor::from_vec(vec![-9.0f32, 2.7, -1.5, 1e6], &[4]).unwrap();
    let (out, types) = run(&model(g, 21), &[x]);
    assert_eq!(
        types,
        [
            Some(LowpType::I4),
            Some(LowpType::U4),
            Some(LowpType::F8E5M2)
        ]
    );
    // 1e6 truncates to 1000000 = 0xF4240: low nibble 0.
    assert_eq!(out[0].to_vec::<i8>().unwrap(), [7, 2, -1, 0]);
    assert_eq!(out[1].to_vec::<u8>().unwrap(), [7, 2, 15, 0]);
    // -9 → -8 (a tie, to even: code 0xC8), 2.7 → 2.5 (0x41), -1.5 (0xBE), 1e6 → +Inf (no saturate).
    assert_eq!(out[2].to_vec::<u8>().unwrap(), [0xC8, 0x41, 0xBE, 0x7C]);
}

#[test]
fn ops_that_do_not_know_low_precision_types_refuse_them() {
    let g = graph(
        vec![
            node("Cast", &["x"], &["f8"], vec![attr_int("to", 17)]),
            node("Add", &["f8", "f8"], &["y"], vec![]),
        ],
        vec![tensor_info_fixed("x", DType::F32, &[2])],
        vec![tensor_info_code("y", 17, &fixed(&[2]))],
        &[],
    );
    let e = import(&model(g, 21), &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("f8e4m3fn") && e.contains("Add"), "{e}");
}

#[test]
fn e8m0_round_modes_other_than_up_are_refused() {
    let g = graph(
        vec![node(
            "Cast",
            &["x"],
            &["y"],
            vec![attr_int("to", 24), attr_string("round_mode", "nearest")],
        )],
        vec![tensor_info_fixed("x", DType::F32, &[2])],
        vec![tensor_info_code("y", 24, &fixed(&[2]))],
        &[],
    );
    let e = import(&model(g, 25), &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("round_mode"), "{e}");
}
