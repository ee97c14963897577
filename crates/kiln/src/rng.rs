//! Deterministic random numbers for weights and example inputs: a xoshiro256** generator
//! seeded through splitmix64, with Box-Muller normals. No `rand` dependency, so the stream
//! of numbers for a seed can never change under us with a crate upgrade: the same seed gives
//! bitwise the same weights on every machine and in every kiln version.

/// One step of splitmix64: advances `state` and returns a well-mixed 64-bit value. Used to
/// expand a seed into xoshiro's state and to mix names into seeds.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A xoshiro256** pseudo-random generator (not cryptographic).
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
    /// The second value of the last Box-Muller pair, so no draw is wasted.
    spare_normal: Option<f64>,
}

impl Rng {
    /// A generator whose whole stream is determined by `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut sm = seed;
        let s = [splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm)];
        Rng { s, spare_normal: None }
    }

    /// A generator for the stream named `name` under `seed`: each parameter gets its own
    /// stream, so a weight's values depend only on the seed and its full name, not on the
    /// order in which layers were built.
    pub fn for_name(seed: u64, name: &str) -> Rng {
        // FNV-1a of the name, then mixed with the seed so nearby seeds give unrelated streams.
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for b in name.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
        }
        let mut sm = seed ^ h.rotate_left(17);
        Rng::new(splitmix64(&mut sm))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// A standard normal draw (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare_normal.take() {
            return z;
        }
        // 1 - u lies in (0, 1], so the log is finite.
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u2;
        self.spare_normal = Some(r * theta.sin());
        r * theta.cos()
    }

    /// Uniform integer in `[0, n)`; 0 when `n` is 0. Uses the high half of a 128-bit product,
    /// whose bias (at most n / 2^64) is far below anything a test could see.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}
