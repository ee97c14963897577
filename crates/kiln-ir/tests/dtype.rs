//! Every dtype's metadata (name, size, kind) agrees with its storage, and every storage
//! variant round-trips through its bytes and its Rust element type.

use kiln_ir::{DType, Element, HostTensor, Storage};

#[test]
fn names_parse_back_and_aliases_work() {
    for d in DType::ALL {
        assert_eq!(DType::parse(d.name()), Some(d), "{d}");
        assert_eq!(d.to_string(), d.name());
    }
    let aliases = [
        ("int16", DType::I16),
        ("short", DType::I16),
        ("uint16", DType::U16),
        ("uint32", DType::U32),
        ("uint64", DType::U64),
    ];
    for (s, d) in aliases {
        assert_eq!(DType::parse(s), Some(d), "{s}");
    }
    assert_eq!(DType::parse("u128"), None);
    // Names are unique.
    for (i, a) in DType::ALL.iter().enumerate() {
        for b in &DType::ALL[i + 1..] {
            assert_ne!(a.name(), b.name());
        }
    }
}

#[test]
fn kinds_and_sizes() {
    let ints = [DType::I64, DType::I32, DType::I16, DType::I8, DType::U64, DType::U32, DType::U16, DType::U8];
    let signed_ints = [DType::I64, DType::I32, DType::I16, DType::I8];
    for d in DType::ALL {
        assert_eq!(d.is_int(), ints.contains(&d), "{d}");
        assert_eq!(d.is_signed(), d.is_float() || signed_ints.contains(&d), "{d}");
        assert!(!(d.is_int() && d.is_float()), "{d}");
    }
    assert_eq!(DType::I16.size_of(), 2);
    assert_eq!(DType::U16.size_of(), 2);
    assert_eq!(DType::U32.size_of(), 4);
    assert_eq!(DType::U64.size_of(), 8);
}

/// `n` distinct non-zero-ish values of `T` (through f64, small enough to be exact).
fn sample<T: Element>(n: usize) -> Vec<T> {
    (0..n).map(|i| T::from_f64((i % 3) as f64 + i as f64 * 7.0)).collect()
}

#[test]
fn storage_matches_the_dtype_for_every_variant() {
    for d in DType::ALL {
        let z = Storage::zeros(d, 5);
        assert_eq!((z.dtype(), z.len()), (d, 5), "{d}");
        assert_eq!(z.as_bytes().len(), 5 * d.size_of(), "{d}");
        assert!((0..5).all(|i| z.get_f64(i) == 0.0), "{d}");
        let s = kiln_ir::with_dtype!(d, T, {
            let v = sample::<T>(6);
            assert_eq!(T::DTYPE, d);
            let s = T::into_storage(v.clone());
            assert_eq!(T::slice(&s).map(|x| x.to_vec()), Some(v), "{d}");
            s
        });
        assert_eq!(s.dtype(), d);
        // Bytes round-trip, little-endian.
        let bytes = s.as_bytes().into_owned();
        assert_eq!(bytes.len(), 6 * d.size_of());
        assert_eq!(Storage::from_le_bytes(d, &bytes).unwrap(), s, "{d}");
        assert!(Storage::from_le_bytes(d, &bytes[..bytes.len() - 1]).is_err() || d.size_of() == 1);
    }
}

#[test]
fn wide_values_are_stored_exactly() {
    let big = (1u64 << 53) + 1;
    let s = Storage::U64(vec![u64::MAX, big]);
    assert_eq!(&s.as_bytes()[..8], &[0xff; 8]);
    assert_eq!(&s.as_bytes()[8..], &big.to_le_bytes());
    let t = HostTensor::from_vec(vec![u64::MAX, big], &[2]).unwrap();
    assert_eq!(t.to_vec::<u64>().unwrap(), vec![u64::MAX, big]);
    // The f64 view is the nearest f64 (documented as a slow, inexact path).
    assert_eq!(t.to_f64_vec(), vec![u64::MAX as f64, big as f64]);
    let h = HostTensor::from_vec(vec![-2i16, i16::MAX], &[2]).unwrap();
    assert_eq!(h.storage.as_bytes().into_owned(), [(-2i16).to_le_bytes(), i16::MAX.to_le_bytes()].concat());
    assert_eq!(<u16 as Element>::from_f64(-1.0), 0);
    assert_eq!(<u32 as Element>::from_f64(f64::NAN), 0);
    assert_eq!(<u64 as Element>::from_f64(1e30), u64::MAX);
    assert_eq!(<i16 as Element>::from_f64(-1e9), i16::MIN);
}
