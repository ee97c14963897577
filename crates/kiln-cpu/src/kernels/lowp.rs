//! ONNX low-precision types (float8, float4, 4/2-bit integers) as byte patterns:
//! [`kiln_ir::Op::EncodeLowp`] and [`kiln_ir::Op::DecodeLowp`].
//!
//! The float formats are handled by one parametrised minifloat codec rather than per-type
//! tables, so every format shares the same rounding (ties to even) and overflow logic.

use kiln_ir::{DType, Error, HostTensor, LowpType, Result};

/// A sign/exponent/mantissa format without (or with IEEE-style) special values.
struct Minifloat {
    /// Exponent bits.
    exp: u32,
    /// Mantissa bits.
    mant: u32,
    bias: i32,
    /// The code of NaN, if the format has one.
    nan: Option<u8>,
    /// The code of +Inf, if the format has one (only E5M2).
    inf: Option<u8>,
    /// No negative zero: the sign bit pattern with zero payload is NaN (the FNUZ formats).
    unsigned_zero: bool,
}

impl Minifloat {
    fn of(t: LowpType) -> Option<Minifloat> {
        let m = |exp, mant, bias, nan, inf, unsigned_zero| Minifloat {
            exp,
            mant,
            bias,
            nan,
            inf,
            unsigned_zero,
        };
        Some(match t {
            LowpType::F8E4M3FN => m(4, 3, 7, Some(0x7F), None, false),
            LowpType::F8E4M3FNUZ => m(4, 3, 8, Some(0x80), None, true),
            LowpType::F8E5M2 => m(5, 2, 15, Some(0x7E), Some(0x7C), false),
            LowpType::F8E5M2FNUZ => m(5, 2, 16, Some(0x80), None, true),
            LowpType::F4E2M1 => m(2, 1, 1, None, None, false),
            _ => return None,
        })
    }

    fn sign_bit(&self) -> u8 {
        1 << (self.exp + self.mant)
    }

    /// The largest finite code (positive).
    fn max_code(&self) -> u8 {
        let all = self.sign_bit() - 1;
        match (self.nan, self.inf) {
            // E5M2: the top exponent is Inf/NaN, so the max is one exponent below, all mantissa.
            (_, Some(inf)) => inf - 1,
            // E4M3FN: all ones is NaN.
            (Some(nan), None) if nan == all => all - 1,
            _ => all,
        }
    }

    /// The value of a code (any of the `1 + exp + mant` low bits).
    fn decode(&self, code: u8) -> f64 {
        let code = (u16::from(code) & ((1u16 << (1 + self.exp + self.mant)) - 1)) as u8;
        if Some(code) == self.nan || (self.nan == Some(0x7F) && code & 0x7F == 0x7F) {
            return f64::NAN;
        }
        let neg = code & self.sign_bit() != 0;
        let mag = code & (self.sign_bit() - 1);
        let e = (mag >> self.mant) as i32;
        let m = (mag & ((1 << self.mant) - 1)) as f64;
        let v = if self.inf.is_some() && e == (1 << self.exp) - 1 {
            if m == 0.0 { f64::INFINITY } else { f64::NAN }
        } else if e == 0 {
            m * pow2(1 - self.bias - self.mant as i32)
        } else {
            (1.0 + m * pow2(-(self.mant as i32))) * pow2(e - self.bias)
        };
        if neg { -v } else { v }
    }

    /// The code of `v` (semantics in [`kiln_ir::Op::EncodeLowp`]).
    fn encode(&self, v: f64, saturate: bool) -> u8 {
        // Float4 has no special values: it always saturates, NaN becomes 0.
        let saturate = saturate || self.nan.is_none();
        let sign = if v.is_sign_negative() {
            self.sign_bit()
        } else {
            0
        };
        let overflow = || match (saturate, self.inf) {
            (true, _) => sign | self.max_code(),
            (false, Some(inf)) => sign | inf,
            (false, None) => self.nan_code(sign),
        };
        if v.is_nan() {
            return self.nan_code(sign);
        }
        let a = v.abs();
        if a.is_infinite() {
            return overflow();
        }
        if a == 0.0 {
            return if self.unsigned_zero { 0 } else { sign };
        }
        let emin = 1 - self.bias;
        let mant = self.mant as i32;
        // The spacing of representable values around `a` (an unbounded exponent range), so
        // that rounding happens once, then the range check.
        let e = exponent(a).max(emin);
        let q = pow2(e - mant);
        let r = (a / q).round_ties_even() * q;
        let max = self.decode(self.max_code());
        if r > max {
            return overflow();
        }
        if r == 0.0 {
            return if self.unsigned_zero { 0 } else { sign };
        }
        let e = exponent(r);
        let mag = if e < emin {
            (r / pow2(emin - mant)) as u8
        } else {
            let field = (e + self.bias) as u8;
            let m = (r / pow2(e - mant) - pow2(mant)) as u8;
            (field << self.mant) | m
        };
        sign | mag
    }

    fn nan_code(&self, sign: u8) -> u8 {
        match self.nan {
            // The FNUZ NaN is the sign bit itself; the others keep the sign.
            Some(n) if self.unsigned_zero => n,
            Some(n) => sign | n,
            None => 0,
        }
    }
}

/// `2^e` exactly (for the small exponents used here).
fn pow2(e: i32) -> f64 {
    f64::powi(2.0, e)
}

/// `floor(log2(a))` of a positive normal f64.
fn exponent(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023
}

/// The E8M0 code of `v` (round up, as ONNX's default `round_mode`), from its f32 bits.
fn encode_e8m0(v: f32, saturate: bool) -> u8 {
    let bits = v.to_bits();
    let exp = (bits >> 23) & 0xFF;
    if exp == 0xFF {
        return if v.is_infinite() && saturate {
            0xFE
        } else {
            0xFF
        };
    }
    if exp == 0 {
        // f32 subnormals lie below 2^-126: up to 2^-127 (code 0) and above it (code 1).
        return (bits & 0x7F_FFFF > 0x40_0000) as u8;
    }
    let round_up = bits & 0x7F_FFFF != 0 && !(saturate && exp == 0xFE);
    (exp + round_up as u32) as u8
}

/// The low `bits` of `v` in two's complement, sign-extended when `signed`.
fn wrap_int(v: i64, bits: u32, signed: bool) -> i64 {
    let low = v & ((1 << bits) - 1);
    if signed && low >= 1 << (bits - 1) {
        low - (1 << bits)
    } else {
        low
    }
}

/// The pattern of one value (E8M0 rounds `v` to f32 first, as ONNX's reference).
pub fn encode_value(v: f64, to: LowpType, saturate: bool) -> i64 {
    match to {
        LowpType::F8E8M0 => encode_e8m0(v as f32, saturate) as i64,
        LowpType::I4 | LowpType::U4 | LowpType::I2 | LowpType::U2 => {
            let i = if v.is_finite() { v.trunc() as i64 } else { 0 };
            wrap_int(i, to.bits(), matches!(to, LowpType::I4 | LowpType::I2))
        }
        _ => Minifloat::of(to).map_or(0, |f| f.encode(v, saturate) as i64),
    }
}

/// The value of one pattern (a U8 code, or the I8 value for I4/I2).
pub fn decode_value(pattern: i64, from: LowpType) -> f32 {
    match from {
        LowpType::F8E8M0 => {
            let c = pattern as u8;
            if c == 0xFF {
                f32::NAN
            } else {
                pow2(c as i32 - 127) as f32
            }
        }
        LowpType::I4 | LowpType::U4 | LowpType::I2 | LowpType::U2 => wrap_int(
            pattern,
            from.bits(),
            matches!(from, LowpType::I4 | LowpType::I2),
        ) as f32,
        _ => Minifloat::of(from).map_or(f32::NAN, |f| f.decode(pattern as u8) as f32),
    }
}

/// [`kiln_ir::Op::EncodeLowp`]: numbers (any dtype) → patterns of `to`.
pub fn encode(x: &HostTensor, to: LowpType, saturate: bool) -> Result<HostTensor> {
    let codes: Vec<i64> = if to.is_int() && !x.dtype().is_float() && x.dtype() != DType::Bool {
        // Integers wrap exactly (an f64 detour would round i64/u64 values above 2^53).
        let ints = super::cast::cast(x, DType::I64)?.to_vec::<i64>()?;
        ints.into_iter()
            .map(|i| wrap_int(i, to.bits(), to.pattern_dtype() == DType::I8))
            .collect()
    } else {
        x.to_f64_vec()
            .into_iter()
            .map(|v| encode_value(v, to, saturate))
            .collect()
    };
    match to.pattern_dtype() {
        DType::I8 => HostTensor::from_vec(codes.into_iter().map(|c| c as i8).collect(), x.shape()),
        _ => HostTensor::from_vec(codes.into_iter().map(|c| c as u8).collect(), x.shape()),
    }
}

/// [`kiln_ir::Op::DecodeLowp`]: patterns of `from` → f32 values.
pub fn decode(x: &HostTensor, from: LowpType) -> Result<HostTensor> {
    let patterns: Vec<i64> = match x.dtype() {
        DType::U8 => x.to_vec::<u8>()?.into_iter().map(i64::from).collect(),
        DType::I8 => x.to_vec::<i8>()?.into_iter().map(i64::from).collect(),
        d => {
            return Err(Error::DType(format!(
                "decode_lowp: {} patterns are held as {}, got {d}",
                from.name(),
                from.pattern_dtype()
            )));
        }
    };
    HostTensor::from_vec(
        patterns
            .into_iter()
            .map(|p| decode_value(p, from))
            .collect::<Vec<f32>>(),
        x.shape(),
    )
}
