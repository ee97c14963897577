/* kiln C prelude: scalar helpers shared by every generated kernel.
 * Semantics follow kiln_ir::Op exactly (the same results as kiln_cpu::eval):
 * - f16/bf16 are stored as uint16_t bit patterns and computed in float, each result rounded
 *   once to nearest-even (kc_rh / kc_rbf), as the interpreter does;
 * - integer arithmetic wraps: it is done in an unsigned type at least as wide as int, so
 *   there is no signed overflow (C UB) and no promotion of narrow types to signed int;
 * - float -> int casts truncate, saturate and map NaN to 0 (C's cast is UB out of range);
 * - max/min: NaN wins; integer division truncates; Rem has the dividend's sign, Mod the
 *   divisor's; shifts are logical, amounts outside 0..bits give 0.
 * Compiled without -ffast-math and with -ffp-contract=off, so float ops round as written. */
/* KC_FN: how every helper is declared. The same text is the prelude of the CUDA C that
 * kiln-cuda compiles with NVRTC (device functions; NVRTC has no system headers, so the integer
 * types, their limits and INFINITY/NAN are defined here; memcpy and the libm functions exist
 * in device code). */
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define KC_FN static __device__ __forceinline__
#else
#define KC_FN static inline
#endif
#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INT8_MIN (-128)
#define INT8_MAX 127
#define INT16_MIN (-32768)
#define INT16_MAX 32767
#define INT32_MIN (-2147483647 - 1)
#define INT32_MAX 2147483647
#define INT64_MIN (-9223372036854775807LL - 1)
#define INT64_MAX 9223372036854775807LL
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295u
#define UINT64_MAX 18446744073709551615ull
#define INT64_C(c) c##LL
#define UINT64_C(c) c##ull
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)
#else
#include <stdint.h>
#include <string.h>
#include <math.h>
#endif

KC_FN uint32_t kc_f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
KC_FN float kc_bits_f32(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

/* ---- f16 (IEEE binary16) ---- */
KC_FN float kc_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) return kc_bits_f32(sign | 0x7f800000u | (man ? 0x400000u | (man << 13) : 0u));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float m = (float)man * 5.9604644775390625e-08f;
        return sign ? -m : m;
    }
    return kc_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Round to nearest, ties to even (the conversion of the `half` crate). */
KC_FN uint16_t kc_f2h(float f) {
    uint32_t x = kc_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = x & 0x7f800000u;
    uint32_t man = x & 0x007fffffu;
    if (exp == 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    int32_t e = (int32_t)(exp >> 23) - 127 + 15;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (14 - e > 24) return (uint16_t)sign;
        man |= 0x00800000u;
        uint32_t hm = man >> (14 - e);
        uint32_t round = 1u << (13 - e);
        if ((man & round) && (man & (3u * round - 1u))) hm += 1;
        return (uint16_t)(sign | hm);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13);
    if ((man & 0x1000u) && (man & 0x2fffu)) h += 1;
    return (uint16_t)h;
}

/* ---- bf16 ---- */
KC_FN float kc_bf2f(uint16_t h) { return kc_bits_f32((uint32_t)h << 16); }

KC_FN uint16_t kc_f2bf(float f) {
    uint32_t x = kc_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* A float rounded to the nearest f16 / bf16 value (the one rounding of a half-precision op). */
KC_FN float kc_rh(float x) { return kc_h2f(kc_f2h(x)); }
KC_FN float kc_rbf(float x) { return kc_bf2f(kc_f2bf(x)); }

/* double -> float rounded to odd: rounding that to a type with at most 22 significand bits
 * (f16, bf16) to nearest-even gives the correctly rounded result (no double rounding). */
KC_FN float kc_d2f_odd(double d) {
    float f = (float)d;
    if (d != d || (double)f == d) return f;
    uint32_t u = kc_f32_bits(f);
    if (fabs((double)f) > fabs(d)) u -= 1; /* rounded away from zero: step back */
    return kc_bits_f32(u | 1u);
}
KC_FN float kc_d2h(double d) { return kc_h2f(kc_f2h(kc_d2f_odd(d))); }
KC_FN float kc_d2bf(double d) { return kc_bf2f(kc_f2bf(kc_d2f_odd(d))); }

/* ---- float helpers ---- */
/* NaN wins: a NaN y falls through the comparison, a NaN x is picked by the second select.
 * Not `(x > y || x != x) ? x : y`: GCC 12 does not vectorise that `||` next to strided loads
 * (resnet's stem max pool ran scalar: 4.4 ms on AVX2). In f32 the second select is a bit
 * mask: as a select, GCC merged a chain of them (the max pool's nine taps) into a tangle of
 * compares and blends; masked, that kernel ran 0.70 -> 0.60 ms a thread (Zen 1). Same value
 * for every input. */
/* x where x is NaN, else m (branch-free). */
KC_FN float kc_nan_or(float x, float m) {
    uint32_t k = 0u - (uint32_t)(x != x);
    return kc_bits_f32((kc_f32_bits(x) & k) | (kc_f32_bits(m) & ~k));
}
KC_FN float kc_maxf(float x, float y) { return kc_nan_or(x, x > y ? x : y); }
KC_FN float kc_minf(float x, float y) { return kc_nan_or(x, x < y ? x : y); }
KC_FN double kc_max(double x, double y) { double m = x > y ? x : y; return x != x ? x : m; }
KC_FN double kc_min(double x, double y) { double m = x < y ? x : y; return x != x ? x : m; }
#if defined(_OPENMP)
/* The NaN-wins max / min as OpenMP reductions, so a `simd` loop may reassociate them: their
 * value does not depend on the order (NaN if any is NaN, else the largest / smallest); only
 * which zero of -0 and +0, or which NaN, comes out may. Vectorised, the max of softmax's rows
 * took a sixth of the time. */
#pragma omp declare reduction(kc_maxf_r : float : omp_out = kc_maxf(omp_out, omp_in)) initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(kc_minf_r : float : omp_out = kc_minf(omp_out, omp_in)) initializer(omp_priv = INFINITY)
#pragma omp declare reduction(kc_max_r : double : omp_out = kc_max(omp_out, omp_in)) initializer(omp_priv = -(double)INFINITY)
#pragma omp declare reduction(kc_min_r : double : omp_out = kc_min(omp_out, omp_in)) initializer(omp_priv = (double)INFINITY)
#endif
KC_FN float kc_signf(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }
KC_FN double kc_sign(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x); }
KC_FN float kc_reluf(float x) { return x < 0.0f ? 0.0f : x; }
KC_FN double kc_relu(double x) { return x < 0.0 ? 0.0 : x; }
/* Floor modulo from fmod; a zero result takes the divisor's sign (Python, NumPy). */
KC_FN float kc_modf(float x, float y) {
    float r = fmodf(x, y);
    if (r == 0.0f) return y < 0.0f ? -0.0f : 0.0f;
    return ((r < 0.0f) != (y < 0.0f)) ? r + y : r;
}
KC_FN double kc_mod(double x, double y) {
    double r = fmod(x, y);
    if (r == 0.0) return y < 0.0 ? -0.0 : 0.0;
    return ((r < 0.0) != (y < 0.0)) ? r + y : r;
}
/* The inverse hyperbolic functions as Rust's std computes them (not libm's): the
 * interpreter's results, bit for bit. */
KC_FN float kc_asinhf(float x) {
    float ax = fabsf(x), ix = 1.0f / ax;
    return copysignf(log1pf(ax + ax / (hypotf(1.0f, ix) + ix)), x);
}
KC_FN double kc_asinh(double x) {
    double ax = fabs(x), ix = 1.0 / ax;
    return copysign(log1p(ax + ax / (hypot(1.0, ix) + ix)), x);
}
KC_FN float kc_acoshf(float x) { return x < 1.0f ? NAN : logf(x + sqrtf(x - 1.0f) * sqrtf(x + 1.0f)); }
KC_FN double kc_acosh(double x) { return x < 1.0 ? (double)NAN : log(x + sqrt(x - 1.0) * sqrt(x + 1.0)); }
KC_FN float kc_atanhf(float x) { return 0.5f * log1pf((2.0f * x) / (1.0f - x)); }
KC_FN double kc_atanh(double x) { return 0.5 * log1p((2.0 * x) / (1.0 - x)); }
/* ---- f32 exp, erfc, erf, sigmoid without libm calls ----
 * libm's expf and erfc are calls, so a loop around them does not vectorise (GELU's erfc and
 * softmax's exp were ~9% of bert-base). These are branch-free (selects and bit masks only)
 * and GCC vectorises them inside the generated loops (on AVX2, only because kiln compiles with
 * -fno-trapping-math: see toolchain.rs; without it bert-base's GELU epilogue ran 5x slower). They are not bit-exact with the
 * interpreter (Rust's f32::exp, the f64 erfc/erf rounded to f32). Max errors over all 2^32
 * f32 inputs, in ulps of the f64 function's value where that is a normal float (below, in
 * ulps of the smallest normal: all under 1.8), and against the interpreter's f32 results:
 *   kc_expf_v   0.999 ulp of exp                 1 ulp from f32::exp
 *   kc_erfcf    3.15 ulp of erfc                 3 ulp from (float)erfc((double)x)
 *   kc_erff     1.372 ulp of erf                 1 ulp from (float)erf((double)x)
 *   kc_sigmoidf 2.48 ulp of 1 / (1 + e^-x)       4 ulp from 1.0f / (1.0f + f32::exp(-x))
 * Results that round to 0 or overflow are exactly 0 / inf (sigmoid is 0 where e^-x overflows,
 * as the interpreter's), NaN gives NaN and erf(±0) = ±0 (erfc(0) is 1 - 2^-24, half an ulp of 1).
 * tests/codegen_math.rs checks these bounds on a dense sweep. f64 stays on libm. On a GPU,
 * erfc and erf are CUDA's own (below). */

/* m e^(a + b), for a large part a, a small correction b and a factor m in [0, 1]: the
 * reduction subtracts n ln2 from a exactly before adding b, so b's bits are not lost to the
 * rounding of a + b, and m multiplies e^r = 1 + w in one fma, m + m w, so the product costs no
 * rounding of its own (erfc's e^(-z^2) erfcx(z)). Cody-Waite:
 * a + b = n ln2 + r with |r| <= ln2/2, Cephes' degree-7 polynomial for e^r, 2^n built in the
 * exponent bits. The polynomial is evaluated by Estrin's scheme with explicit fmaf (fused even
 * under -ffp-contract=off): these loops are bound by the latency of one element's chain of
 * dependent operations, not by how many there are, and Horner's mul-then-add chain was twice
 * as long (a loop of exp ran 24% faster, one of GELU's erfc 22%; the bounds above re-measured).
 * The caller keeps a + b within [-111, 89] (or NaN): there the range needs no selects of its
 * own, as e^-111 rounds to 0 and e^89 overflows to inf through the scaling below. Clamping the
 * argument once, in the caller, instead of clamping here and masking the result by the
 * unclamped one, took GELU's erfc from 5.9 to 4.2 ns an element (one thread, this Zen 1). */
KC_FN float kc_expf_mul(float a, float b, float m) {
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = fmaf(a + b, 1.44269502f, magic);
    float n = t - magic; /* n in [-160, 129] */
    /* n as an integer from the low mantissa bits of t (no float -> int conversion needed). */
    int32_t ni = (int32_t)(kc_f32_bits(t) - kc_f32_bits(magic));
    /* ln2 = C1 + C2 with C1 of 9 significant bits: n * C1 and a - n * C1 are exact. */
    float r = fmaf(-n, 0.693359375f, a) + b;
    r = fmaf(n, 2.12194440e-4f, r);
    /* p(r) = p01 + r^2 p23 + r^4 p45, each pair c_i + c_j r. */
    float r2 = r * r;
    float p01 = fmaf(1.6666665459e-1f, r, 5.0000001201e-1f);
    float p23 = fmaf(8.3334519073e-3f, r, 4.1665795894e-2f);
    float p45 = fmaf(1.9875691500e-4f, r, 1.3981999507e-3f);
    float p = fmaf(fmaf(p45, r2, p23), r2, p01);
    /* Unfused: fmaf(r2, p, r) here raised the worst error from 0.999 to 1.03 ulp. With m = 1
     * the fma is 1 + w rounded once, as an add. */
    float y = fmaf(m, r + r2 * p, m);
    /* 2^n as two normal factors: y * 2^n1 is exact, so a subnormal result is rounded once
     * (gradual underflow), and one above FLT_MAX overflows to inf. */
    int32_t n1 = ni >> 1, n2 = ni - n1;
    float s1 = kc_bits_f32((uint32_t)(n1 + 127) << 23);
    float s2 = kc_bits_f32((uint32_t)(n2 + 127) << 23);
    return (y * s1) * s2;
}
/* e^x. The clamps keep NaN (a comparison with NaN is false, so the select keeps x), and
 * GCC turns each into one vmaxps / vminps. */
KC_FN float kc_expf_v(float x) {
    float xc = x < -110.0f ? -110.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    return kc_expf_mul(xc, 0.0f, 1.0f);
}
KC_FN float kc_sigmoidf(float x) { return 1.0f / (1.0f + kc_expf_v(-x)); }

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
/* On the GPU, CUDA's own erfcf / erff (at most 4 / 2 ulp by the CUDA Math API; the GPU tests
 * check them on a sweep): the host form below does its fit in f64, which a GPU runs at half
 * rate or less, and made BERT's GELU epilogue 3x slower than its memory traffic (H200). */
KC_FN float kc_erfcf(float x) { return erfcf(x); }
KC_FN float kc_erff(float x) { return erff(x); }
#else
/* erfc(z) for z >= 0 (or NaN), all in f32: e^(-z^2) erfcx(z), with erfcx(z) = Q(t) u for
 * u = 1 / (z + 3) and t = (z - 3) / (z + 3) = 1 - 6u in [-1, 1), Q of degree 9 (a least-squares
 * fit of erfcx(z) (z + 3) over z in [0, 10.1], relative error 8e-9 with its coefficients
 * rounded to f32; beyond 10.1 erfc underflows). Its two leading terms are Horner steps, the
 * rest Estrin's scheme: the last roundings then fall on one term each, not on three sums.
 * No rounding reaches the result amplified: -z^2 is carried as hi + lo (fmaf gives the
 * product's error exactly) into kc_expf_mul, whose last fma multiplies by erfcx(z) at no rounding of its own, and
 * u as u0 + u1 (the division's residual, from z + 3 split exactly by TwoSum), so the t and u
 * that Q and the product see are those of z, not of a neighbour. The transform is Shepherd and
 * Laframboise's (Math. Comp. 36, 1981), as in N. Juffa's erfcf; the fit is kiln's own. The
 * former form, Numerical Recipes' erfcc t e^(-z^2 + P(t)),
 * needed its -z^2 + P(t) in f64 (in f32 that sum's rounding, amplified by e^, gave 7.7 ulp),
 * and in a vectorised loop half-width f64 vectors and their long chain of dependent
 * operations made it twice as slow (a loop of GELU's erfc: 4.0 ns an element, now 2.05). */
KC_FN float kc_erfcf_pos(float z) {
    /* erfc(10.5) underflows, and -10.5^2 is within kc_expf_mul's range; the select keeps NaN. */
    float zc = z > 10.5f ? 10.5f : z;
    /* z + 3 = s + e exactly: Knuth's TwoSum (Fast2Sum's ordering of the two by size cost
     * selects that GCC if-converted into a dozen blends). */
    float s = zc + 3.0f;
    float sb = s - zc;
    float e = (zc - (s - sb)) + (3.0f - sb);
    float u0 = 1.0f / s;
    float u1 = u0 * fmaf(-u0, e, fmaf(-u0, s, 1.0f)); /* u0 (1 - u0 (s + e)) */
    float t = fmaf(-6.0f, u1, fmaf(-6.0f, u0, 1.0f));
    float t2 = t * t;
    float p23 = fmaf(-3.104661405e-01f, t, 5.902281404e-01f);
    float p45 = fmaf(-2.683889866e-02f, t, 1.195299178e-01f);
    float p67 = fmaf(3.078427166e-03f, t, -1.227546367e-03f);
    float p89 = fmaf(-3.255128104e-04f, t, -4.840310430e-04f);
    float p2_9 = fmaf(fmaf(p89, t2, p67), t2 * t2, fmaf(p45, t2, p23));
    float q = fmaf(t, fmaf(t, p2_9, -8.833944798e-01f), 1.074006915e+00f);
    float erfcx = fmaf(q, u0, q * u1);
    float hi = zc * zc;
    return kc_expf_mul(-hi, -fmaf(zc, zc, -hi), erfcx);
}
/* erfc in f32; for x < 0, 2 - erfc(|x|) (in [1, 2]: no cancellation). */
KC_FN float kc_erfcf(float x) {
    float e = kc_erfcf_pos(fabsf(x));
    return x < 0.0f ? 2.0f - e : e;
}
/* erf in f32: |x| < 0.75 by its Taylor series, x + x P(x^2) (truncation below 2^-30);
 * beyond, 1 - erfc(|x|) (erfc <= 0.29 there, so its error shrinks in the difference). */
KC_FN float kc_erff(float x) {
    float ax = fabsf(x);
    float s = ax * ax;
    float p = -1.6365844691234924e-07f;
    p = p * s + 1.6462114365889246e-06f;
    p = p * s - 1.492565035840625e-05f;
    p = p * s + 0.00012055332981789664f;
    p = p * s - 0.0008548327023450852f;
    p = p * s + 0.005223977625442188f;
    p = p * s - 0.026866170645131252f;
    p = p * s + 0.11283791670955126f;
    p = p * s - 0.37612638903183754f;
    p = p * s + 0.1283791670955126f; /* 2/sqrt(pi) - 1: its leading 1 is the x term */
    float small = ax + ax * p;
    float big = 1.0f - kc_erfcf_pos(ax);
    /* A bit-mask select (a conditional between two computed values can be split into
     * branches when the caller converts the result, which stops vectorisation); then x's sign. */
    uint32_t m = 0u - (uint32_t)(ax < 0.75f);
    uint32_t r = (kc_f32_bits(small) & m) | (kc_f32_bits(big) & ~m);
    return kc_bits_f32(r | (kc_f32_bits(x) & 0x80000000u));
}
#endif
KC_FN double kc_erf(double x) { return erf(x); }
KC_FN double kc_erfc(double x) { return erfc(x); }

/* ---- float -> integer: truncate, saturate, NaN -> 0 ---- */
#define KC_FTOI(sfx, T, LO, HI) \
    KC_FN T kc_ftoi_##sfx(double x) { \
        if (x != x) return 0; \
        if (x <= (double)(LO)) return (LO); \
        if (x >= (double)(HI)) return (HI); \
        return (T)x; \
    }
KC_FTOI(i8, int8_t, INT8_MIN, INT8_MAX)
KC_FTOI(i16, int16_t, INT16_MIN, INT16_MAX)
KC_FTOI(i32, int32_t, INT32_MIN, INT32_MAX)
KC_FTOI(i64, int64_t, INT64_MIN, INT64_MAX)
KC_FTOI(u8, uint8_t, 0, UINT8_MAX)
KC_FTOI(u16, uint16_t, 0, UINT16_MAX)
KC_FTOI(u32, uint32_t, 0, UINT32_MAX)
KC_FTOI(u64, uint64_t, 0, UINT64_MAX)

/* ---- integers: T the type, UT its unsigned twin, UW the unsigned type arithmetic runs in ---- */
#define KC_INT(sfx, T, UT, UW, BITS) \
    KC_FN T kc_add_##sfx(T a, T b) { return (T)((UW)a + (UW)b); } \
    KC_FN T kc_sub_##sfx(T a, T b) { return (T)((UW)a - (UW)b); } \
    KC_FN T kc_mul_##sfx(T a, T b) { return (T)((UW)a * (UW)b); } \
    KC_FN T kc_neg_##sfx(T a) { return (T)((UW)0 - (UW)a); } \
    KC_FN T kc_shl_##sfx(T a, T s) { \
        return (s >= 0 && (uint64_t)s < (BITS)) ? (T)((UW)(UT)a << s) : (T)0; \
    } \
    KC_FN T kc_shr_##sfx(T a, T s) { \
        return (s >= 0 && (uint64_t)s < (BITS)) ? (T)((UT)a >> s) : (T)0; \
    } \
    KC_FN T kc_pow_##sfx(T a, T e) { \
        if (e < 0) return 0; \
        uint64_t n = (uint64_t)e; \
        UW base = (UW)a, acc = 1; \
        while (n) { \
            if (n & 1u) acc *= base; \
            base *= base; \
            n >>= 1; \
        } \
        return (T)acc; \
    }
#define KC_SINT(sfx, T, UT, UW, BITS) \
    KC_INT(sfx, T, UT, UW, BITS) \
    KC_FN T kc_abs_##sfx(T a) { return a < 0 ? kc_neg_##sfx(a) : a; } \
    KC_FN T kc_sign_##sfx(T a) { return (T)((a > 0) - (a < 0)); } \
    KC_FN T kc_relu_##sfx(T a) { return a < 0 ? (T)0 : a; } \
    /* b == -1 is negation (MIN / -1 wraps to MIN); b == 0 never reaches here but gives 0. */ \
    KC_FN T kc_div_##sfx(T a, T b) { return b == 0 ? (T)0 : (b == -1 ? kc_neg_##sfx(a) : (T)(a / b)); } \
    KC_FN T kc_rem_##sfx(T a, T b) { return (b == 0 || b == -1) ? (T)0 : (T)(a % b); } \
    KC_FN T kc_mod_##sfx(T a, T b) { \
        T r = kc_rem_##sfx(a, b); \
        return (r != 0 && ((r < 0) != (b < 0))) ? kc_add_##sfx(r, b) : r; \
    }
#define KC_UINT(sfx, T, UW, BITS) \
    KC_INT(sfx, T, T, UW, BITS) \
    KC_FN T kc_abs_##sfx(T a) { return a; } \
    KC_FN T kc_sign_##sfx(T a) { return (T)(a != 0); } \
    KC_FN T kc_relu_##sfx(T a) { return a; } \
    KC_FN T kc_div_##sfx(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); } \
    KC_FN T kc_rem_##sfx(T a, T b) { return b == 0 ? (T)0 : (T)(a % b); } \
    KC_FN T kc_mod_##sfx(T a, T b) { return kc_rem_##sfx(a, b); }
KC_SINT(i8, int8_t, uint8_t, uint32_t, 8)
KC_SINT(i16, int16_t, uint16_t, uint32_t, 16)
KC_SINT(i32, int32_t, uint32_t, uint32_t, 32)
KC_SINT(i64, int64_t, uint64_t, uint64_t, 64)
KC_UINT(u8, uint8_t, uint32_t, 8)
KC_UINT(u16, uint16_t, uint32_t, 16)
KC_UINT(u32, uint32_t, uint32_t, 32)
KC_UINT(u64, uint64_t, uint64_t, 64)

/* An index clamped into 0..len-1: a load on a Where branch is evaluated even when the branch
 * is not taken (its value is then discarded), so its index must stay inside the buffer. */
KC_FN int64_t kc_clamp(int64_t i, int64_t len) { return i < 0 ? 0 : (i >= len ? len - 1 : i); }

/* Bool: lo <= i < hi. */
KC_FN uint8_t kc_in_range(int64_t i, int64_t lo, int64_t hi) { return (uint8_t)(lo <= i && i < hi); }
/* Floor division by d > 0 of any n. */
KC_FN int64_t kc_floor_div(int64_t n, int64_t d) { return n >= 0 ? n / d : -((-n + d - 1) / d); }
/* Narrows the loop range [*lo, *hi) to the v where lb <= a * v + r < hb (loop peeling: the
 * interior where every padding test holds and every guarded load is inside its buffer). */
KC_FN void kc_peel(int64_t* lo, int64_t* hi, int64_t a, int64_t r, int64_t lb, int64_t hb) {
    int64_t from, to;
    if (a > 0) {
        from = -kc_floor_div(r - lb, a);
        to = -kc_floor_div(r - hb, a);
    } else if (a < 0) {
        from = kc_floor_div(r - hb, -a) + 1;
        to = kc_floor_div(r - lb, -a) + 1;
    } else {
        if (lb <= r && r < hb) return;
        from = *lo;
        to = *lo;
    }
    if (from > *lo) *lo = from;
    if (to < *hi) *hi = to;
}
